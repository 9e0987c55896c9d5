#!/usr/bin/env bash
# The decode kernels' wgmma throughput on a Hopper GPU (tools/wgmma_probe/wgmma_probe.cu): builds it with nvcc
# for sm_90a and prints its CSV (SM cycles per tile and per wgmma by operand pattern and warpgroups issuing at
# once: the swap-AB kernel's m64n16k16, then the tile64 kernel's S, P . V and the two in its order).
# Usage: bash tools/wgmma_probe/run.sh [OUT.csv]   (run from anywhere; the CSV also goes to stdout)
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$dir/../.." && pwd)"
bin="$(mktemp -d)/wgmma_probe"
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I"$root" -o "$bin" "$dir/wgmma_probe.cu"
"$bin" | tee "${1:-/dev/null}"
