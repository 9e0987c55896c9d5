#!/usr/bin/env bash
# Kernel iteration on the GPU machine without compiling through Bazel: builds the decode op library
# (cc/decode/decode_op.cc, the metadata op and kernel) once per variant of a decode kernel's template with nvcc
# and g++ directly (the flags of tools/cuda/flags.bzl; Bazel only writes the kernels' instantiation sources,
# //cc/decode:instantiation_sources), then times each variant with tools/bench.py's decode path, and
# optionally profiles it with Nsight Compute. Outputs go to $OUT (default ./gpu_out/variants).
#
# Usage: tools/decode_variants.sh [--ncu=N:T,N:T] [--tests] VARIANT.cuh... [-- bench flags]
#   VARIANT.cuh: a copy of cc/decode/narrow/narrow_kernel.cuh, or of cc/decode/wide/wide_kernel.cuh when
#   its name contains "wide" (keep experiments in the git-ignored .device/); the family's instantiation
#   files are compiled against it, the other family is the committed one. Each is named after its
#   file's basename; names starting with "baseline_" are taken (the committed kernels' objects). Only
#   variants are timed: time the committed kernel as a copy.
#   --ncu: per variant and point, one kernel launch under Nsight Compute (launch, occupancy, stall
#   reasons, memory and source sections; text report in $OUT).
#   --tests: per variant, tests/ops/test_decode_gpu.py against its library.
# Bench flags default to --heads=16,32,64,128 --tokens=1,2,4,8,16 (each point checked against the reference).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-$PWD/gpu_out}/variants
mkdir -p "$out"
ncu_points="" run_tests=0 variants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --ncu=*) ncu_points=${1#--ncu=} ;;
    --tests) run_tests=1 ;;
    *) variants+=("$1") ;;
  esac
  shift
done
[ "${1:-}" = "--" ] && shift
bench_flags=("$@")
[ ${#bench_flags[@]} -eq 0 ] && bench_flags=(--heads=16,32,64,128 --tokens=1,2,4,8,16)

cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc_flags=(-gencode arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --use_fast_math
            --expt-relaxed-constexpr -Xcompiler -fPIC -I. -Xptxas -v)
read -r -a torch_flags < <(python3 -c "
import torch, torch.utils.cpp_extension as e
print(' '.join(['-I' + p for p in e.include_paths()] + ['-D_GLIBCXX_USE_CXX11_ABI=%d' % torch._C._GLIBCXX_USE_CXX11_ABI]))")
torch_lib=$(python3 -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
build=/tmp/decode_variants
mkdir -p "$build"

# compile_family NAME ROOT SOURCES...: the sources into $build/NAME/, with ROOT searched first for the
# headers (a variant's overlay, or . for the committed kernels); ptxas' report into $out/NAME.ptxas.txt.
compile_family() {
  local name=$1 root=$2 src
  shift 2
  mkdir -p "$build/$name"
  for src in "$@"; do
    nvcc -I"$root" "${nvcc_flags[@]}" -c "$src" -o "$build/$name/$(basename "$src" .cu).o" \
      > "$build/$name/$(basename "$src" .cu).log" 2>&1 &
  done
  wait
  cat "$build/$name"/*.log > "$out/$name.ptxas.txt"
}
tools/bazel build //cc/decode:instantiation_sources || exit 1
generated=$(tools/bazel info bazel-bin)/cc/decode
narrow_sources=("$generated"/narrow/instantiations/*.cu)
wide_sources=("$generated"/wide/instantiations/*.cu)

# The parts every variant shares, compiled once and in parallel.
g++ -std=c++17 -O3 -fPIC -I. -I"$cuda/include" "${torch_flags[@]}" -c cc/decode/decode_op.cc -o "$build/op.o" &
g++ -std=c++17 -O3 -fPIC -I. -I"$cuda/include" "${torch_flags[@]}" -c cc/metadata/token_metadata_op.cc -o "$build/tm_op.o" &
compile_family shared . cc/decode/launch.cu cc/decode/wide/wide_launch.cu "$generated"/split_merge/instantiations/*.cu \
  cc/metadata/token_metadata_kernel.cu &
compile_family baseline_narrow . "${narrow_sources[@]}" &
compile_family baseline_wide . "${wide_sources[@]}" &
for source in "${variants[@]}"; do
  name=$(basename "$source" .cuh)
  case "$name" in
    *wide*) header=cc/decode/wide/wide_kernel.cuh sources=("${wide_sources[@]}") ;;
    *) header=cc/decode/narrow/narrow_kernel.cuh sources=("${narrow_sources[@]}") ;;
  esac
  mkdir -p "$build/$name/overlay/$(dirname "$header")"
  cp "$source" "$build/$name/overlay/$header"
  compile_family "$name" "$build/$name/overlay" "${sources[@]}" &
done
wait
summary=$out/summary.txt
: > "$summary"
for source in "${variants[@]}"; do
  name=$(basename "$source" .cuh)
  lib=$build/lib_$name.so
  other=$build/baseline_wide
  case "$name" in *wide*) other=$build/baseline_narrow ;; esac
  if ! g++ -shared -o "$lib" "$build/op.o" "$build/tm_op.o" "$build"/shared/*.o "$build/$name"/*.o "$other"/*.o \
      -L"$torch_lib" -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda -L"$cuda/lib64" -lcudart; then
    echo "$name: build failed (see $out/$name.ptxas.txt)" | tee -a "$summary"
    continue
  fi
  echo "$name: $(grep -E 'registers' "$out/$name.ptxas.txt" | sed -E 's/.*Used ([0-9]+) registers.*/\1/' | tr '\n' '/') registers" \
    | tee -a "$summary"
  export SPARSE_MLA_DECODE_LIBRARY=$lib
  PYTHONPATH=py python3 -c "
from sparse_mla.ops import decode
for size in decode.CLUSTER_SIZES:
    for tiles in (1, 2, decode.WIDE_HEAD_TILES):
        for chunk in decode.CTA_CHUNKS:
            if tiles == decode.WIDE_HEAD_TILES and (size, chunk) != (1, decode.WIDE_CTA_CHUNK):
                continue
            kernel = decode.WIDE_KERNEL if tiles == decode.WIDE_HEAD_TILES else decode.NARROW_KERNEL
            shape = lambda pps: decode.DecodePlan(1, 16 * tiles, tiles, chunk, 1, 1, pps, kernel, size)
            print('  clusters of', size, 'per wave, head_tiles', tiles, 'cta_chunk', chunk,
                  [(pps, decode.max_active_clusters(shape(pps), 0)) for pps in (256, 512, 1024, 2048)])
" 2>&1 | tail -10 | tee -a "$summary"
  if [ "$run_tests" -eq 1 ]; then
    PYTHONPATH=py:tests python3 -m pytest -q tests/ops/test_decode_gpu.py > "$out/$name.tests.txt" 2>&1
    echo "  tests: $(tail -1 "$out/$name.tests.txt")" | tee -a "$summary"
  fi
  mkdir -p "$out/$name"
  PYTHONPATH=py:tests python3 tools/bench.py --paths=decode --out_dir="$out/$name" "${bench_flags[@]}" \
    > "$out/$name/bench.log" 2>&1
  echo "  bench rc=$?" | tee -a "$summary"
  grep -E "^ *[0-9]+ +\| +[0-9]+ +\|" "$out/$name/bench.log" | tee -a "$summary"
  for point in ${ncu_points//,/ }; do
    heads=${point%:*} tokens=${point#*:}
    ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
      -k regex:sparse_decode --launch-skip 10 --launch-count 1 \
      env PYTHONPATH=py:tests python3 tools/bench.py --paths=decode --nocheck --heads="$heads" --tokens="$tokens" --out_dir=/tmp/ncu_bench \
      > "$out/$name.ncu_N${heads}_T${tokens}.txt" 2>&1
    echo "  ncu N=$heads T=$tokens: rc=$? $(grep -E 'Duration' "$out/$name.ncu_N${heads}_T${tokens}.txt" | head -1)" \
      | tee -a "$summary"
  done
done
cat "$summary"
