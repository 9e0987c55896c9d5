"""Finding and loading the project's torch op libraries (FA3, the decode kernel): each is loaded once per
process, and whether it runs is answered per CUDA device (a process may see Hopper and other GPUs).

Each library is built by Bazel under ``--config=sm90`` and lands beside the ``sparse_mla`` package in
the runfiles (``cc/<name>``). The wheel (``tools/build_wheel.sh``) carries them in the package:
``sparse_mla/<name>`` for a library of PyTorch's stable ABI (the decode library: one build for every
supported torch) and ``sparse_mla/torch<major.minor>/<name>`` for one built for a single torch
version (FA3). An environment variable naming a path overrides both.
"""

import dataclasses
import functools
import os
from pathlib import Path
from typing import Callable, Optional

import torch

REQUIRED_MAJOR_CAPABILITY = 9
"""Our CUDA code is compiled for sm_90a only, which runs on Hopper (compute capability 9.x) alone."""


@dataclasses.dataclass(frozen=True)
class Availability:
    """Whether an op library can run here; false with the reason when it cannot. Truthy when available."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


TORCH_SERIES = ".".join(torch.__version__.split("+")[0].split(".")[:2])
"""This PyTorch's ``major.minor``: the folder of the wheel's libraries built for one torch version."""

_PACKAGE_DIR = Path(os.path.abspath(__file__)).parent.parent


def library_path(name: str, env: str, torch_bound: bool = False) -> Optional[Path]:
    """Where the library ``name`` is: ``$env``, else in the installed package (for a ``torch_bound``
    library, the build for this torch's version), else beside the package (Bazel runfiles), else None.

    Paths are not resolved: Bazel's runfiles are symlinks into the source tree, where no build
    output lives.
    """
    override = os.environ.get(env)
    if override:
        return Path(override)
    candidates = [_PACKAGE_DIR / name, _PACKAGE_DIR.parent.parent / "cc" / name]
    if torch_bound:
        candidates.insert(0, _PACKAGE_DIR / f"torch{TORCH_SERIES}" / name)
    for candidate in candidates:
        if candidate.exists():
            return candidate
    return None


def _not_found_reason(name: str, env: str, torch_bound: bool) -> str:
    """Why ``name`` was not found: not built, or (``torch_bound``) built for other torch versions only."""
    others = sorted(p.parent.name[len("torch"):] for p in _PACKAGE_DIR.glob(f"torch*/{name}"))
    if torch_bound and others:
        return (f"{name} is installed for torch {', '.join(others)} only, this is torch {torch.__version__} "
                "(it is built against one torch version's C++ API); rebuild the wheel with this torch or set " + env)
    # The stable-ABI library builds without FA3's upstream sources; the torch-bound one is FA3's.
    flags = "--config=sm90" if torch_bound else "--//tools/cuda:enable_cuda=true"
    return (f"{name} is not built: install the wheel (tools/build_wheel.py), build //py:sparse_mla with "
            f"--config=sm90 for Bazel's targets, or set {env} to a built copy "
            f"('tools/bazel build {flags} //cc:{name}' writes bazel-bin/cc/{name})")


def cuda_device_index(device: Optional[int]) -> int:
    """``device``, or the current CUDA device's index when it is ``None`` (CUDA must be available)."""
    return torch.cuda.current_device() if device is None else device


def tensor_device_index(tensor) -> Optional[int]:
    """The CUDA device index of ``tensor``; ``None`` for anything else (a CPU tensor, ``None``): the ops'
    own checks then name the argument."""
    return tensor.device.index if isinstance(tensor, torch.Tensor) and tensor.is_cuda else None


def op_availability(
    name: str, env: str, register_fake: Callable[[], None], device_index: Optional[int] = None,
    torch_bound: bool = False,
) -> Availability:
    """Whether library ``name`` runs on CUDA device ``device_index`` (the current one when ``None``),
    loading it into the process (once) if so; answered once per device.

    ``torch_bound``: the library is built against one torch version's C++ API (not the stable ABI),
    so the installed package holds it per torch version (:func:`library_path`).

    Returns
    -------
    Availability
        Truthy when loaded and the device is a Hopper; otherwise the reason: no CUDA device, not Hopper,
        not built (or not found), or the load failed. ``register_fake`` runs once after a successful load.
    """
    if not torch.cuda.is_available():
        return Availability(False, "no CUDA device")
    return _device_availability(name, env, register_fake, cuda_device_index(device_index), torch_bound)


@functools.lru_cache(maxsize=None)
def _device_availability(
    name: str, env: str, register_fake: Callable[[], None], device_index: int, torch_bound: bool
) -> Availability:
    major, minor = torch.cuda.get_device_capability(device_index)
    if major != REQUIRED_MAJOR_CAPABILITY:
        return Availability(False, f"{name} is built for sm_90a and needs compute capability 9.x, "
                                   f"got {major}.{minor} on cuda:{device_index}")
    return load_once(name, env, register_fake, torch_bound)


@functools.lru_cache(maxsize=None)
def load_once(name: str, env: str, register_fake: Callable[[], None], torch_bound: bool) -> Availability:
    """Loads library ``name`` into the process: at most once, whichever device (or, for its host-only ops,
    none) asks first. Pass the arguments positionally, as :func:`op_availability` and the decode op's
    ``library_loaded`` do (one cache entry)."""
    path = library_path(name, env, torch_bound)
    if path is None:
        return Availability(False, _not_found_reason(name, env, torch_bound))
    try:
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as error:
        return Availability(False, f"loading {path} failed: {error}")
    register_fake()
    return Availability(True)


ARGUMENT_ERROR_PREFIX = "sparse_mla: argument '"
"""How every argument error of our ops begins (``SPARSE_MLA_CHECK_ARG`` in cc/common/op_checks.h)."""


def call_op(op: Callable, *args):
    """``op(*args)`` for an op of the decode library (PyTorch's stable ABI), its argument errors raised as
    ValueError on every torch: they are std::invalid_argument, which PyTorch up to 2.14 raises as ValueError
    and 2.15 as RuntimeError with the same message (measured with torch 2.15.0, tools/ci/wheel_check.sh)."""
    try:
        return op(*args)
    except RuntimeError as error:
        if str(error).startswith(ARGUMENT_ERROR_PREFIX):
            raise ValueError(str(error)) from None
        raise
