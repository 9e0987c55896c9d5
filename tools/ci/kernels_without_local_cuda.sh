#!/usr/bin/env bash
# CI: our CUDA kernels (the targets given) with the local CUDA toolkit out of reach: in a private
# mount namespace (needs root; nothing outside it changes) an empty read-only tmpfs covers the folder
# /usr/local/cuda resolves to, PATH has no /usr/local/bin, CUDA_HOME and CUDA_PATH are unset, and a
# Bazel server of its own (own output base) starts inside. There:
#   1. the plain build must fail, its first error sparse_mla's advice (no toolkit found: set
#      CUDA_HOME, or the wheels flag), not Bazel's about undeclared targets;
#   2. with --repo_env=SPARSE_MLA_CUDA_TOOLKIT=wheels they compile for sm_90a with the toolkit of
#      PyPI's pinned wheels. The repository cache lies in $SPARSE_MLA_CACHE too, so with a fresh
#      cache (CI) the wheels are downloaded, through the machine's TLS proxy where it has one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ $# -gt 0 ] || { echo "usage: kernels_without_local_cuda.sh TARGET..." >&2; exit 2; }
cache=${SPARSE_MLA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparse_mla}
PYTHON_BIN_PATH=$(tools/python_env.sh)  # found outside, where the usual PATH holds python3
export PYTHON_BIN_PATH
local_cuda=$(readlink -f /usr/local/cuda 2>/dev/null || true)
env -u CUDA_HOME -u CUDA_PATH PATH=/usr/bin:/bin LOCAL_CUDA="$local_cuda" \
  OUTPUT_BASE="$cache/bazel-wheels-cuda" unshare --mount --propagation private bash -euo pipefail -c '
  fail() { echo "kernels_without_local_cuda.sh: $*" >&2; exit 1; }
  if [ -d "$LOCAL_CUDA" ]; then
    mount -t tmpfs -o ro,size=1m sparse_mla_hidden_cuda "$LOCAL_CUDA"
  fi
  if command -v nvcc >/dev/null || [ -e /usr/local/cuda/bin/nvcc ]; then
    fail "a local nvcc is still in reach"
  fi
  bazel=(tools/bazel --output_base="$OUTPUT_BASE")
  rc=0
  log=$(mktemp)
  if "${bazel[@]}" build --//tools/cuda:enable_cuda=true "$@" >"$log" 2>&1; then
    rc=1; echo "kernels_without_local_cuda.sh: built without any CUDA toolkit" >&2
  # Of the first two such lines, one is the advice (grep -c reads all its input: no SIGPIPE under pipefail).
  elif ! grep -m 2 "ERROR\|sparse_mla: @sparse_mla_cuda" "$log" | grep -c "sparse_mla: @sparse_mla_cuda: no CUDA toolkit found" >/dev/null; then
    rc=1; cat "$log" >&2; echo "kernels_without_local_cuda.sh: no toolkit, but the first error is not sparse_mla'"'"'s advice" >&2
  else
    echo "kernels_without_local_cuda.sh: without a toolkit the build stops with sparse_mla'"'"'s advice"
  fi
  rm -f "$log"
  "${bazel[@]}" build --repository_cache="$OUTPUT_BASE-repository-cache" \
    --repo_env=SPARSE_MLA_CUDA_TOOLKIT=wheels --//tools/cuda:enable_cuda=true "$@" || rc=$?
  "${bazel[@]}" shutdown
  exit $rc
' kernels_without_local_cuda.sh "$@"
