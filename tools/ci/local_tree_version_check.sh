#!/usr/bin/env bash
# CI: a local CUTLASS tree (CUTLASS_SRC_DIR) of another release than the pin stops the fetch with
# sparse_mla's advice naming both versions; one of the pinned release (4.2.0) is taken. The trees are
# stand-ins holding only the paths the rule checks; `bazel query` fetches the repository, nothing compiles.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

stand_in_tree() {  # stand_in_tree DIR MINOR
  mkdir -p "$1/include/cutlass" "$1/include/cute" "$1/tools/util/include"
  touch "$1/include/cutlass/cutlass.h" "$1/include/cute/tensor.hpp"
  printf '#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR %s\n#define CUTLASS_PATCH 0\n' "$2" >"$1/include/cutlass/version.h"
}
stand_in_tree "$scratch/cutlass-4.3" 3
stand_in_tree "$scratch/cutlass-4.2" 2

if CUTLASS_SRC_DIR="$scratch/cutlass-4.3" tools/bazel query @sparse_mla_cutlass//:all >"$scratch/log" 2>&1; then
  echo "local_tree_version_check.sh: a CUTLASS 4.3.0 tree was taken for the 4.2.0 pin" >&2
  exit 1
fi
advice="CUTLASS_SRC_DIR=$scratch/cutlass-4.3 is version 4.3.0 by its include/cutlass/version.h"
grep -qF "$advice" "$scratch/log" || { cat "$scratch/log" >&2; echo "local_tree_version_check.sh: refused without naming the versions" >&2; exit 1; }
CUTLASS_SRC_DIR="$scratch/cutlass-4.2" tools/bazel query @sparse_mla_cutlass//:all >"$scratch/log" 2>&1 ||
  { cat "$scratch/log" >&2; echo "local_tree_version_check.sh: a CUTLASS 4.2.0 tree was refused" >&2; exit 1; }
echo "local_tree_version_check.sh: a 4.3.0 CUTLASS_SRC_DIR stops with the versions named, a 4.2.0 one is taken"
