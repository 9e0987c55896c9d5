"""CUTLASS headers for FA3, kept apart from any `cutlass` repository of a host monorepo.

Content: NVIDIA/cutlass at commit 57e3cfb47a2d9e0d46eb6335c3dc411498efa198 (the commit SGLang pins
for sgl-attn). Its `include/` and `tools/util/include/` are byte-identical to the headers inside the
PyPI wheel nvidia-cutlass==4.2.0.0 under `cutlass_library/source/` (compared file by file, 871
files), so the pin is that wheel: its sha256 is PyPI's published digest. Recompute with
`pip download --no-deps nvidia-cutlass==4.2.0.0 && sha256sum nvidia_cutlass-4.2.0.0-py3-none-any.whl`.
Local override: CUTLASS_SRC_DIR=/abs/path/to/a/cutlass checkout (needs include/cutlass/cutlass.h,
include/cute/ and tools/util/include/, and version 4.2.0 by include/cutlass/version.h). Downloaded only with SPARSE_MLA_ENABLE_CUDA=1
(--config=sm90); placeholders otherwise.
"""

load("//third_party:pinned_source.bzl", "pinned_source_repository")

CUTLASS_COMMIT = "57e3cfb47a2d9e0d46eb6335c3dc411498efa198"
CUTLASS_WHEEL_VERSION = "4.2.0.0"
CUTLASS_WHEEL_SHA256 = "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6"
CUTLASS_WHEEL_URL = "https://files.pythonhosted.org/packages/21/6b/e86fc2fd536dd4b8bd2209aa31d7002610c501b0802337787eac9c9b328c/nvidia_cutlass-%s-py3-none-any.whl" % CUTLASS_WHEEL_VERSION

def cutlass_repository(name):
    pinned_source_repository(
        name = name,
        urls = [CUTLASS_WHEEL_URL],
        sha256 = CUTLASS_WHEEL_SHA256,
        archive_type = "zip",
        strip_prefix = "cutlass_library/source",
        local_env = "CUTLASS_SRC_DIR",
        required_paths = ["include/cutlass/cutlass.h", "include/cute/tensor.hpp", "tools/util/include"],
        # 57e3cfb4's include/cutlass/version.h: a local tree of another release is refused by name.
        version_file = "include/cutlass/version.h",
        version_defines = {"CUTLASS_MAJOR": "4", "CUTLASS_MINOR": "2", "CUTLASS_PATCH": "0"},
        version_name = "CUTLASS 4.2.0, commit %s" % CUTLASS_COMMIT[:8],
        placeholder_paths = ["include/cutlass/cutlass.h"],
        build_file = Label("//third_party/cutlass:cutlass.BUILD"),
    )
