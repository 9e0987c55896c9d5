#!/usr/bin/env bash
# compute-sanitizer racecheck on a producer/consumer pipeline shaped like the swap-AB kernel's (named barriers,
# bar.arrive, 2 tile stages, the output staged in the freed stages), every value checked by the kernel itself:
# builds racecheck_probe.cu with nvcc (sm_90a), runs each variant plainly and under racecheck, one line each.
# On the H200 (compute-sanitizer 2025.3.1, 2026-12-02) racecheck reported hazards on every variant with named
# stage barriers (A, B, D, E, F) and none on the epilogue alone (C), with 0 mismatches everywhere: its reports
# on this pattern do not show a race (docs/decode-kernels.md).
# Usage: bash tools/racecheck_probe/run.sh [VARIANTS...]   (default: A B C D E F)
set -u
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
bin="$work/racecheck_probe"
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -lineinfo -o "$bin" "$dir/racecheck_probe.cu" || exit 2
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
echo "sanitizer: $("$cs" --version 2>/dev/null | grep -i version | head -1)"
[ $# -gt 0 ] && variants="$*" || variants="A B C D E F"
for v in $variants; do
  plain="$work/plain_$v.txt" race="$work/racecheck_$v.txt"
  timeout 60 "$bin" "$v" > "$plain" 2>&1; prc=$?
  mismatches=$(awk '/mismatches/{s += $NF} END{print s + 0}' "$plain")
  timeout 300 "$cs" --tool racecheck --racecheck-report analysis "$bin" "$v" > "$race" 2>&1; rrc=$?
  summary=$(grep -m1 'RACECHECK SUMMARY' "$race" | sed 's/^=* *//')
  echo "variant $v | plain: rc=$prc mismatches=$mismatches | racecheck: rc=$rrc | ${summary:-no summary line}"
  grep -m4 -E 'Race reported|and (Read|Write) access' "$race" | sed 's/^/    | /'
done
echo "logs: $work"
