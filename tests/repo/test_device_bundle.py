"""tools/device_bundle.sh on the CPU: the argument it asks for first, the upstream sources it packs (hopper/ of
sgl-attn, include/ and tools/util/include/ of CUTLASS, nothing else) and the parts it leaves as they are.

The parts that would download (Bazel, vLLM's wheel) or build (the op libraries) are present beforehand, so nothing
here reaches the network or a compiler."""

import os
import pathlib
import subprocess
import tarfile

ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel
SCRIPT = ROOT / "tools" / "device_bundle.sh"


def _run(out_dir, **env):
    environment = {k: v for k, v in os.environ.items() if k not in ("SGL_ATTN_SRC_DIR", "CUTLASS_SRC_DIR")}
    environment.update(env)
    return subprocess.run(["bash", str(SCRIPT), str(out_dir)], env=environment, capture_output=True, text=True)


def _files(root, names):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)


def test_names_the_missing_source_directory(tmp_path):
    result = _run(tmp_path / "device", CUTLASS_SRC_DIR=str(tmp_path))
    assert result.returncode != 0 and "SGL_ATTN_SRC_DIR" in result.stderr


def test_packs_the_pinned_parts_and_keeps_what_is_there(tmp_path):
    _files(tmp_path / "sgl", ["hopper/flash_api.cpp", "hopper/instantiations/a.cu", "csrc/other.cu", "README.md"])
    _files(tmp_path / "cutlass", ["include/cutlass/cutlass.h", "tools/util/include/cutlass/util/u.h",
                                   "tools/profiler/p.cu", "examples/e.cu"])
    out = tmp_path / "device"
    present = {"bazel": "a Bazel", "flashmla/_flashmla_C.abi3.so": "FlashMLA",
               "libs_head/libsparse_mla_decode.so": "ours"}
    for name, text in present.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    (out / "bazel").chmod(0o755)

    result = _run(out, SGL_ATTN_SRC_DIR=str(tmp_path / "sgl"), CUTLASS_SRC_DIR=str(tmp_path / "cutlass"))

    assert result.returncode == 0, result.stderr
    with tarfile.open(out / "upstream.tar.xz") as archive:
        packed = {m.name for m in archive.getmembers() if m.isfile()}
    assert packed == {"sgl-attn/hopper/flash_api.cpp", "sgl-attn/hopper/instantiations/a.cu",
                      "cutlass/include/cutlass/cutlass.h", "cutlass/tools/util/include/cutlass/util/u.h"}
    assert {name: (out / name).read_text() for name in present} == present
