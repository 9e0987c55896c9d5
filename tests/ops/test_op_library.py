"""Where sparse_mla looks for its op libraries: the override, the installed wheel's layout (stable-ABI
libraries in the package, torch-bound ones under ``torch<major.minor>/``) and Bazel's runfiles."""

import pytest

from sparse_mla.ops import library

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
