#!/usr/bin/env bash
# CI: our CUDA kernels compiled for sm_90a with the toolkit from PyPI's pinned wheels
# (--repo_env=SPARSE_MLA_CUDA_TOOLKIT=wheels), the local toolkit out of reach: in a private mount
# namespace (needs root; nothing outside it changes) an empty read-only tmpfs covers the folder
# /usr/local/cuda resolves to, PATH has no /usr/local/bin, CUDA_HOME and CUDA_PATH are unset, and a
# Bazel server of its own (own output base) starts inside. Its repository cache lies in
# $SPARSE_MLA_CACHE too, so with a fresh cache (CI) the wheels are downloaded, through the
# machine's TLS proxy where it has one. Arguments: the targets to build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ $# -gt 0 ] || { echo "usage: build_kernels_with_wheels.sh TARGET..." >&2; exit 2; }
cache=${SPARSE_MLA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparse_mla}
PYTHON_BIN_PATH=$(tools/python_env.sh)  # found outside, where the usual PATH holds python3
export PYTHON_BIN_PATH
local_cuda=$(readlink -f /usr/local/cuda 2>/dev/null || true)
env -u CUDA_HOME -u CUDA_PATH PATH=/usr/bin:/bin LOCAL_CUDA="$local_cuda" \
  OUTPUT_BASE="$cache/bazel-wheels-cuda" unshare --mount --propagation private bash -euo pipefail -c '
  if [ -d "$LOCAL_CUDA" ]; then
    mount -t tmpfs -o ro,size=1m sparse_mla_hidden_cuda "$LOCAL_CUDA"
  fi
  if command -v nvcc >/dev/null || [ -e /usr/local/cuda/bin/nvcc ]; then
    echo "build_kernels_with_wheels.sh: a local nvcc is still in reach" >&2
    exit 1
  fi
  rc=0
  tools/bazel --output_base="$OUTPUT_BASE" build --repository_cache="$OUTPUT_BASE-repository-cache" \
    --repo_env=SPARSE_MLA_CUDA_TOOLKIT=wheels --//tools/cuda:enable_cuda=true "$@" || rc=$?
  tools/bazel --output_base="$OUTPUT_BASE" shutdown
  exit $rc
' build_kernels_with_wheels.sh "$@"
