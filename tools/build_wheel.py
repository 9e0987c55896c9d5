"""Builds the sparse-mla wheel: py/'s packages, their package data and the compiled op libraries.

    python3 tools/build_wheel.py --out DIR [--fa3] [--bazel PATH] [-- BAZEL_FLAGS...]

Runs Bazel for the op libraries (sm_90a), then writes ``sparse_mla-<version>-py3-none-linux_x86_64.whl``
into DIR and prints its path. The wheel holds:
  sparse_mla/libsparse_mla_decode.so             PyTorch's stable ABI: loads in every torch >= 2.11.
  sparse_mla/torch<M.m>/libsparse_mla_fa3.so     with --fa3 (needs sgl-attn's sources and a long
                                                 nvcc compile: docs/building.md): FA3 and the FA3 route,
                                                 for the torch version Bazel's interpreter has
                                                 (sparse_mla.ops.library).
Metadata (name, version, dependencies, the vLLM plugin entry point) comes from py/pyproject.toml.
The wheel is written with the standard library only, so it builds offline with any Python >= 3.11
(no setuptools or wheel package needed). Bazel is tools/bazel unless --bazel names another.
"""

import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / "py"
WHEEL_TAG = "py3-none-linux_x86_64"
"""Pure Python plus x86-64 shared libraries that are not Python extensions: any CPython 3."""

STABLE_LIBRARIES = ["libsparse_mla_decode.so"]
TORCH_BOUND_LIBRARIES = ["libsparse_mla_fa3.so"]


def bazel_build(bazel: str, fa3: bool, flags: Sequence[str]) -> Tuple[Path, str]:
    """Builds the libraries; returns ``(bazel-bin, the torch major.minor Bazel's interpreter has)``."""
    libraries = STABLE_LIBRARIES + (TORCH_BOUND_LIBRARIES if fa3 else [])
    config = ["--config=sm90"] if fa3 else ["--//tools/cuda:enable_cuda=true"]
    subprocess.run([bazel, "build", *config, *flags, *[f"//cc:{name}" for name in libraries]], cwd=ROOT, check=True)

    def info(key: str) -> Path:  # no build flags: Bazel 2.1's info takes no Starlark flags
        out = subprocess.run([bazel, "info", key], cwd=ROOT, check=True, capture_output=True, text=True)
        return Path(out.stdout.strip())

    interpreter = (info("output_base") / "external" / "sparse_mla_python" / "interpreter.bzl").read_text()
    torch_series = re.search(r'^TORCH_VERSION = "([0-9.]+)"', interpreter, re.MULTILINE).group(1)
    return info("bazel-bin"), torch_series


def package_files(packages: Sequence[str], data_patterns: Dict[str, List[str]]) -> Dict[str, Path]:
    """``{path in the wheel: source}`` for every ``.py`` of ``packages`` (folders of py/) and their data."""
    files = {}
    for package in packages:
        for source in sorted((PY / package).rglob("*")):
            relative = source.relative_to(PY).as_posix()
            data = any(source.match(pattern) for pattern in data_patterns.get(package, []))
            if source.is_file() and "__pycache__" not in relative and (source.suffix == ".py" or data):
                files[relative] = source
    return files


def metadata(project: dict) -> str:
    """The core metadata (METADATA) of ``[project]``."""
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project['description']}", f"Requires-Python: {project['requires-python']}"]
    lines += [f"Requires-Dist: {requirement}" for requirement in project["dependencies"]]
    return "\n".join(lines) + "\n"


def entry_points(project: dict) -> str:
    """entry_points.txt of ``[project.entry-points]``."""
    sections = []
    for group, entries in project.get("entry-points", {}).items():
        sections.append(f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items()))
    return "\n".join(sections)


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(out_dir: Path, files: Dict[str, bytes], project: dict) -> Path:
    """Writes ``files`` and the dist-info of ``project`` as a wheel into ``out_dir``; returns its path."""
    name, version = project["name"].replace("-", "_"), project["version"]
    dist_info = f"{name}-{version}.dist-info"
    files = dict(files)
    files[f"{dist_info}/METADATA"] = metadata(project).encode()
    files[f"{dist_info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: tools/build_wheel.py\nRoot-Is-Purelib: false\nTag: {WHEEL_TAG}\n".encode()
    files[f"{dist_info}/entry_points.txt"] = entry_points(project).encode()
    record = [record_line(path, data) for path, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{name}-{version}-{WHEEL_TAG}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return wheel


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder the wheel is written to")
    parser.add_argument("--fa3", action="store_true", help="also build and carry the FA3 library (this torch only)")
    parser.add_argument("--bazel", default=str(ROOT / "tools" / "bazel"), help="the Bazel to run")
    parser.add_argument("bazel_flags", nargs="*", help="after --: extra Bazel build flags")
    args = parser.parse_args(argv)

    pyproject = tomllib.loads((PY / "pyproject.toml").read_text())
    project, setuptools = pyproject["project"], pyproject["tool"]["setuptools"]
    packages = sorted({pattern.split(".")[0] for pattern in setuptools["packages"]["find"]["include"]})
    files = {path: source.read_bytes() for path, source in package_files(packages, setuptools["package-data"]).items()
             if not path.endswith(".so")}  # a library copied into py/ by hand never ships

    try:
        bazel_bin, torch_series = bazel_build(args.bazel, args.fa3, args.bazel_flags)
    except subprocess.CalledProcessError as error:
        sources = " FA3 needs sgl-attn's sources: github.com reachable, or SGL_ATTN_SRC_DIR (docs/building.md)." if args.fa3 else ""
        print(f"build_wheel.py: the Bazel build failed (exit {error.returncode}), its errors above.{sources}", file=sys.stderr)
        return 1
    for name in STABLE_LIBRARIES:
        files[f"sparse_mla/{name}"] = (bazel_bin / "cc" / name).read_bytes()
    for name in TORCH_BOUND_LIBRARIES if args.fa3 else []:
        files[f"sparse_mla/torch{torch_series}/{name}"] = (bazel_bin / "cc" / name).read_bytes()
    print(write_wheel(args.out.resolve(), files, project))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
