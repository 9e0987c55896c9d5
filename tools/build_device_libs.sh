#!/usr/bin/env bash
# Builds, on a CPU machine, the op libraries a Hopper machine then runs without a build (tools/gpu_routine.sh's bench,
# side_by_side, model_step, ncu and memcheck steps with SPARSE_MLA_DECODE_LIBRARY and SPARSE_MLA_FA3_LIBRARY set):
# the decode library and FA3, both against torch TORCH_VERSION (default 2.11.0, the H200 image's), copied into OUT_DIR
# with a REVISION file.
# - torch: PyPI's build of TORCH_VERSION (2.11.0: CUDA 13.0, ~5 GB with its CUDA packages), installed once into a
#   virtual environment in $SPARSE_MLA_CACHE. The libraries link the CUDA runtime of the local toolkit (nvcc >= 12.4;
#   13.0 here), so the device's torch must be built for that CUDA major version.
# - The build goes through this checkout's Bazel (tools/bazel build --config=sm90, into bazel-bin/cc/).
# - Without network, point it at the upstream sources first: SGL_ATTN_SRC_DIR and CUTLASS_SRC_DIR (docs/building.md).
# Usage: [SGL_ATTN_SRC_DIR=... CUTLASS_SRC_DIR=...] tools/build_device_libs.sh OUT_DIR [TORCH_VERSION]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 1 ] || {
  echo "usage: [SGL_ATTN_SRC_DIR=... CUTLASS_SRC_DIR=...] tools/build_device_libs.sh OUT_DIR [TORCH_VERSION]" >&2
  exit 2
}
out=$(mkdir -p "$1" && cd "$1" && pwd)
torch_version=${2:-2.11.0}
venv=${SPARSE_MLA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparse_mla}/torch-$torch_version
[ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
# That torch with its own triton, and the rest of what tools/python_env.sh asks for (a no-op once all are there; it
# completes an interrupted install).
grep -vE "^(torch|triton)==" "$root/tools/ci/requirements.txt" |
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "torch==$torch_version" -r /dev/stdin
cd "$root"
PYTHON_BIN_PATH=$venv/bin/python3 tools/bazel build --config=sm90 //cc:libsparse_mla_decode.so //cc:libsparse_mla_fa3.so
install -m 0755 bazel-bin/cc/libsparse_mla_decode.so bazel-bin/cc/libsparse_mla_fa3.so "$out/"
echo "$(git rev-parse --short HEAD)$([ -z "$(git status --porcelain)" ] || echo ' (dirty)') torch $torch_version" \
  > "$out/REVISION"
ls -la "$out"
