#!/usr/bin/env bash
# Kernel iteration on the GPU machine: builds the decode op library (//cc:libsparse_mla_decode.so) once per
# variant of a decode kernel's template with Bazel, the variant standing in for the committed template while
# it builds (every source of //cc/decode:decode_kernels recompiles: each has every template among its inputs),
# then times each variant with tools/bench.py's decode path, and optionally tests and profiles it. Outputs go
# to $OUT/variants (default ./gpu_out/variants), the libraries to /tmp/decode_variants/lib_NAME.so; at the
# end bazel-bin holds the committed library again.
#
# Usage: tools/decode_variants.sh [--ncu=N:T,N:T] [--tests] [--rounds=K] [--model_step] VARIANT.cuh... [-- bench flags]
#   VARIANT.cuh: a copy of cc/decode/narrow/narrow_kernel.cuh, of cc/decode/wide/wide_kernel.cuh when its
#   name contains "wide", or of cc/decode/swap_ab/swap_ab_kernel.cuh when it contains "swap_ab" (keep
#   experiments in the git-ignored .device/); the other families are the committed ones. Each is named after
#   its file's basename. Only variants are timed: time the committed kernel as a copy. The committed templates are restored when the script exits or is stopped (TERM, INT,
#   HUP; not SIGKILL: then `git checkout` them). It refuses to start on templates git shows modified.
#   --ncu: per variant and point, one kernel launch under Nsight Compute (launch, occupancy, stall
#   reasons per issued instruction, memory and source sections; text report in $OUT), with the bench
#   flags but the point's N and T.
#   --tests: per variant, tests/ops/test_decode_gpu.py, test_decode_dependent_launch_gpu.py and
#   test_decode_swap_ab_gpu.py against its library.
#   --rounds: K rounds of the bench, each over all variants in turn (default 1), into $OUT/variants/NAME/roundK/.
#   --model_step: per variant, tools/model_step_bench.py (the forward between a stand-in indexer and write_kv,
#   61 layers in one CUDA graph) with the bench flags, into $OUT/variants/NAME/model_step/.
# Bazel runs as tools/bazel with --config=sm90 and the environment tools/gpu_routine.sh sets up (BAZEL_REAL,
# SPARSE_MLA_OFFLINE, CC, the upstream source folders).
# Bench flags default to --heads=16,32,64,128 --tokens=1,2,4,8,16 (each point checked against the reference).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-$PWD/gpu_out}/variants
mkdir -p "$out"
ncu_points="" run_tests=0 rounds=1 model_step=0 variants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --ncu=*) ncu_points=${1#--ncu=} ;;
    --tests) run_tests=1 ;;
    --rounds=*) rounds=${1#--rounds=} ;;
    --model_step) model_step=1 ;;
    *) variants+=("$1") ;;
  esac
  shift
done
[ "${1:-}" = "--" ] && shift
bench_flags=("$@")
[ ${#variants[@]} -gt 0 ] || { sed -n 's/^# Usage: //p' "$0" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "decode_variants: --rounds expects a positive integer, got $rounds" >&2; exit 2; }
for source in "${variants[@]}"; do
  [ -r "$source" ] || { echo "decode_variants: cannot read the variant $source" >&2; exit 2; }
done
[ ${#bench_flags[@]} -eq 0 ] && bench_flags=(--heads=16,32,64,128 --tokens=1,2,4,8,16)

build=/tmp/decode_variants
mkdir -p "$build"
templates=(cc/decode/narrow/narrow_kernel.cuh cc/decode/wide/wide_kernel.cuh cc/decode/swap_ab/swap_ab_kernel.cuh)
if git rev-parse --git-dir > /dev/null 2>&1 && ! git diff --quiet HEAD -- "${templates[@]}"; then
  echo "decode_variants: ${templates[*]} differ from HEAD (a killed run?): commit them, or git checkout -- them" >&2
  exit 2
fi
backup=$(mktemp -d)
for template in "${templates[@]}"; do cp "$template" "$backup/$(basename "$template")"; done
restore() {
  local committed
  for committed in "${templates[@]}"; do
    cmp -s "$backup/$(basename "$committed")" "$committed" || cp "$backup/$(basename "$committed")" "$committed"
  done
}
trap 'restore; rm -rf "$backup"' EXIT

summary=$out/summary.txt
: > "$summary"
built=()  # the variants whose library this run built (a failed build leaves an older lib_NAME.so behind)
for source in "${variants[@]}"; do
  name=$(basename "$source" .cuh)
  case "$name" in
    *wide*) template=cc/decode/wide/wide_kernel.cuh ;;
    *swap_ab*) template=cc/decode/swap_ab/swap_ab_kernel.cuh ;;
    *) template=cc/decode/narrow/narrow_kernel.cuh ;;
  esac
  restore
  cp "$source" "$template" || continue
  if ! tools/bazel build --config=sm90 //cc:libsparse_mla_decode.so > "$out/$name.build.log" 2>&1; then
    echo "$name: build failed (see $out/$name.build.log)" | tee -a "$summary"
    continue
  fi
  cp -f bazel-bin/cc/libsparse_mla_decode.so "$build/lib_$name.so"
  built+=("$name")
  # Registers, stack frame and local memory (spills) of each decode kernel instantiation.
  echo "$name:" | tee -a "$summary"
  cuobjdump -res-usage "$build/lib_$name.so" 2>/dev/null | c++filt |
    awk '/Function .*sparse_decode/ { sub(/.*Function /, ""); kernel = $0 }
         kernel != "" && /REG:/ { print "  " $1, $2, $4, kernel; kernel = "" }' | tee -a "$summary"
done
restore
tools/bazel build --config=sm90 //cc:libsparse_mla_decode.so > "$out/committed.build.log" 2>&1 ||
  echo "the committed library failed to build again (see $out/committed.build.log)" | tee -a "$summary"

# Nsight Compute: cycles a warp spends per issued instruction stalled for each reason.
stall_metrics=$(printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," barrier branch_resolving \
  dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle membar mio_throttle misc \
  no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait)
stall_metrics=${stall_metrics%,}
for name in "${built[@]}"; do
  export SPARSE_MLA_DECODE_LIBRARY=$build/lib_$name.so
  echo "$name, clusters per wave:" | tee -a "$summary"
  PYTHONPATH=py python3 -c "
from sparse_mla.ops import decode
for size in decode.CLUSTER_SIZES:
    for tiles in (1, 2, decode.WIDE_HEAD_TILES):
        for chunk in decode.CTA_CHUNKS:
            if tiles == decode.WIDE_HEAD_TILES and (size, chunk) != (1, decode.WIDE_CTA_CHUNK):
                continue
            kernel = decode.WIDE_KERNEL if tiles == decode.WIDE_HEAD_TILES else decode.NARROW_KERNEL
            shape = lambda pps: decode.DecodePlan(1, 16 * tiles, tiles, chunk, 1, 1, pps, kernel, size)
            print('  clusters of', size, ', head_tiles', tiles, 'cta_chunk', chunk,
                  [(pps, decode.max_active_clusters(shape(pps), 0)) for pps in (256, 512, 1024, 2048)])
" 2>&1 | tail -10 | tee -a "$summary"
  if [ "$run_tests" -eq 1 ]; then
    PYTHONPATH=py:tests python3 -m pytest -q tests/ops/test_decode_gpu.py tests/ops/test_decode_dependent_launch_gpu.py tests/ops/test_decode_swap_ab_gpu.py \
      > "$out/$name.tests.txt" 2>&1
    echo "  tests: $(tail -1 "$out/$name.tests.txt")" | tee -a "$summary"
  fi
  for point in ${ncu_points//,/ }; do
    heads=${point%:*} tokens=${point#*:}
    ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
      --metrics "$stall_metrics" \
      -k regex:sparse_decode --launch-skip 10 --launch-count 1 \
      env PYTHONPATH=py:tests python3 tools/bench.py --paths=decode "${bench_flags[@]}" --nocheck --heads="$heads" \
      --tokens="$tokens" --out_dir=/tmp/ncu_bench > "$out/$name.ncu_N${heads}_T${tokens}.txt" 2>&1
    echo "  ncu N=$heads T=$tokens: rc=$? $(grep -E 'Duration' "$out/$name.ncu_N${heads}_T${tokens}.txt" | head -1)" \
      | tee -a "$summary"
  done
done

# The bench, round by round over the variants in turn (so that a drift of the machine shows across rounds).
for round in $(seq "$rounds"); do
  for name in "${built[@]}"; do
    dir=$out/$name/round$round
    mkdir -p "$dir"
    SPARSE_MLA_DECODE_LIBRARY=$build/lib_$name.so PYTHONPATH=py:tests python3 tools/bench.py --paths=decode \
      --out_dir="$dir" "${bench_flags[@]}" > "$dir/bench.log" 2>&1
    echo "$name, round $round: bench rc=$?" | tee -a "$summary"
    grep -E "^ *[0-9]+ +\| +[0-9]+ +\|" "$dir/bench.log" | tee -a "$summary"
  done
done
if [ "$model_step" -eq 1 ]; then
  for name in "${built[@]}"; do
    dir=$out/$name/model_step
    mkdir -p "$dir"
    SPARSE_MLA_DECODE_LIBRARY=$build/lib_$name.so PYTHONPATH=py:tests python3 tools/model_step_bench.py \
      --out_dir="$dir" "${bench_flags[@]}" > "$dir/model_step.log" 2>&1
    echo "$name: model_step rc=$? $(grep '^summary:' "$dir/model_step.log" | tail -1)" | tee -a "$summary"
  done
fi
cat "$summary"
