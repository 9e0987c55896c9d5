"""Finding and loading the project's torch op libraries (FA3, the decode kernel) once per process.

Each library is built by Bazel under ``--config=sm90`` and lands beside the ``sparse_mla`` package in
the runfiles (``cc/<name>``); outside Bazel an environment variable names its path.
"""

import dataclasses
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


def library_path(name: str, env: str) -> Optional[Path]:
    """Where the library ``name`` is: ``$env``, else beside the package (Bazel runfiles), else None.

    Paths are not resolved: Bazel's runfiles are symlinks into the source tree, where no build
    output lives.
    """
    override = os.environ.get(env)
    if override:
        return Path(override)
    package_dir = Path(os.path.abspath(__file__)).parent.parent
    for candidate in (package_dir / name, package_dir.parent.parent / "cc" / name):
        if candidate.exists():
            return candidate
    return None


def load_op_library(name: str, env: str, namespace: str, register_fake: Callable[[], None]) -> Availability:
    """Load library ``name`` (ops in ``torch.ops.<namespace>``) if the current device can run it.

    Returns
    -------
    Availability
        Truthy when loaded; otherwise the reason: no CUDA device, not Hopper, not built (or not
        found), or the load failed. ``register_fake`` runs once after a successful load.
    """
    if not torch.cuda.is_available():
        return Availability(False, "no CUDA device")
    major, minor = torch.cuda.get_device_capability()
    if major != REQUIRED_MAJOR_CAPABILITY:
        return Availability(False, f"{name} is built for sm_90a and needs compute capability 9.x, got {major}.{minor}")
    path = library_path(name, env)
    if path is None:
        return Availability(False, f"{name} is not built: run 'bazel build //py:sparse_mla --config=sm90' or set {env}")
    try:
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as error:
        return Availability(False, f"loading {path} failed: {error}")
    register_fake()
    return Availability(True)
