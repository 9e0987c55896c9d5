"""Where sparse_mla looks for its op libraries: the override, the installed wheel's layout (stable-ABI
libraries in the package, torch-bound ones under ``torch<major.minor>/``) and Bazel's runfiles; and
whether they run is answered per CUDA device."""

import pytest
import torch

from sparse_mla import routing
from sparse_mla.ops import decode, fa3, library
from sparse_mla.routes import ROUTES

NAME, ENV = "libexample.so", "SPARSE_MLA_EXAMPLE_LIBRARY"


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An installed package folder ``site/sparse_mla`` that library.py searches instead of its own."""
    folder = tmp_path / "site" / "sparse_mla"
    folder.mkdir(parents=True)
    monkeypatch.setattr(library, "_PACKAGE_DIR", folder)
    monkeypatch.delenv(ENV, raising=False)
    return folder


def _library(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF")
    return path


def test_stable_library_in_the_package(package):
    assert library.library_path(NAME, ENV) is None
    installed = _library(package / NAME)
    assert library.library_path(NAME, ENV) == installed


def test_torch_bound_library_of_this_torch_only(package):
    other = "1.0" if library.TORCH_SERIES != "1.0" else "1.1"
    _library(package / f"torch{other}" / NAME)
    assert library.library_path(NAME, ENV, torch_bound=True) is None
    reason = library._not_found_reason(NAME, ENV, torch_bound=True)
    assert f"installed for torch {other} only" in reason and ENV in reason, reason
    this = _library(package / f"torch{library.TORCH_SERIES}" / NAME)
    assert library.library_path(NAME, ENV, torch_bound=True) == this
    assert library.library_path(NAME, ENV) is None, "a stable-ABI lookup never takes a torch-bound build"


def test_environment_variable_overrides(package, monkeypatch, tmp_path):
    _library(package / NAME)
    monkeypatch.setenv(ENV, str(tmp_path / "elsewhere.so"))
    assert library.library_path(NAME, ENV) == tmp_path / "elsewhere.so"


def test_not_built_reason(package):
    assert "is not built" in library._not_found_reason(NAME, ENV, torch_bound=True)


@pytest.fixture
def hopper_and_ampere(monkeypatch):
    """torch.cuda as a process sees it with a Hopper as cuda:0 (current at first) and an A100 as cuda:1;
    ``current[0]`` is the current device. The availability caches start and end empty."""
    capabilities = {0: (9, 0), 1: (8, 0)}
    current = [0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda device=None: capabilities[current[0] if device is None else device])
    library._device_availability.cache_clear()
    yield current
    library._device_availability.cache_clear()


@pytest.mark.parametrize("op", [decode, fa3], ids=["decode", "fa3"])
def test_availability_is_per_device(hopper_and_ampere, op):
    on_hopper = op.is_available()  # asked first on cuda:0: loaded, or the library is missing, never the GPU
    assert "compute capability" not in on_hopper.reason, on_hopper
    on_ampere = op.is_available(1)
    assert not on_ampere and "needs compute capability 9.x, got 8.0 on cuda:1" in on_ampere.reason, on_ampere
    hopper_and_ampere[0] = 1
    assert op.is_available() == on_ampere, "the current device's answer, not the first device's"
    assert op.is_available(0) == on_hopper
    route = ROUTES[op.__name__.rsplit(".", 1)[1]]
    assert route.is_available(1) == on_ampere and route.is_available(0) == on_hopper
    assert not routing.serves(route.name, device_index=1)
    assert routing.runnable("decode", device_index=1) == "triton", "cuda:1 runs neither our kernels nor FA3"


def _raising(error):
    def op(*args):
        raise error
    return op


def test_call_op_raises_argument_errors_as_value_errors():
    """From torch 2.15 a stable-ABI op's std::invalid_argument reaches Python as RuntimeError: call_op raises it as
    ValueError with the op's message; any other error, and an op's result, pass through unchanged."""
    message = "sparse_mla: argument 'plan' expected 8 entries, got 0"
    with pytest.raises(ValueError) as raised:
        library.call_op(_raising(RuntimeError(message)), [])
    assert str(raised.value) == message
    with pytest.raises(ValueError, match="^sparse_mla: argument 'q_nope' expected dtype"):
        library.call_op(_raising(ValueError("sparse_mla: argument 'q_nope' expected dtype BFloat16, got Float")))
    with pytest.raises(RuntimeError, match="^sparse_mla: cudaLaunchKernel failed"):
        library.call_op(_raising(RuntimeError("sparse_mla: cudaLaunchKernel failed: invalid argument")))
    assert library.call_op(lambda *args: list(args), 1, 2) == [1, 2]
