# The routine at b87bf8f (lazy softmax rescaling): decode build; grid (routing table); GPU suite (with the climbing-score
# tests); memcheck; racecheck on the first kernel (both formats) and the wide one; Nsight Compute of both kernels; example.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"; grep -E "error" $R/routine.log | head -3
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
mkdir -p $OUT/lib && cp $SPARSE_MLA_DECODE_LIBRARY $OUT/lib/
summ() { grep -v '^#' $1 | python3 -c "
import csv,sys
print(' '.join('T%s %.1f / %.1f' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"; }
mkdir -p $R/grid
PYTHONPATH=py timeout 150 python3 tools/bench.py --out_dir=$R/grid --git_revision=$rev --paths=fa3,decode,routed --heads=16,32,64,128 --tokens=1,2,4,8,16,32,128,512 --write_routing_table > $R/grid/bench.log 2>&1
echo "grid rc=$? $(( $(date +%s) - start ))s"; cp py/sparse_mla/routing_table.json $R/grid/
find $R -name bench.png -delete
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 180 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_kernels_gpu.py tests/test_sparse_mla_attention_gpu.py tests/test_vllm_adapter_gpu.py tests/test_fa3_gpu.py tests/test_token_metadata_gpu.py > $R/gpu_tests.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
OUT=$R timeout 120 tools/gpu_routine.sh memcheck > $R/memcheck_routine.log 2>&1
echo "memcheck rc=$? $(( $(date +%s) - start ))s: $(grep memcheck: $R/memcheck_routine.log) $(tail -1 $R/memcheck.log)"
PYTHONPATH=py:tests timeout 150 compute-sanitizer --tool racecheck --target-processes all python3 -m pytest -q tests/test_decode_gpu.py -k "scales_of_every_magnitude or (test_any_split_count and (8-16-16-3 or 8-32-16-3 or 1-16-16-3 or 1-32-16-3 or 1-16-48-3))" > $R/racecheck.log 2>&1
echo "racecheck rc=$? $(( $(date +%s) - start ))s: $(grep -E 'RACECHECK SUMMARY' $R/racecheck.log | sort | uniq -c | tr '\n' ' ') $(tail -1 $R/racecheck.log)"
timeout 60 ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters -k regex:sparse_decode_kernel --launch-skip 3 --launch-count 1 \
  env PYTHONPATH=py python3 tools/bench.py --paths=decode --cache_formats=fp8_ds_mla --nocheck --heads=16 --tokens=512 --replays=3 --warmup_replays=1 --out_dir=/tmp/ncu_bench \
  > $R/ncu_narrow_fp8_N16_T512.txt 2>&1
echo "ncu rc=$? $(grep -E 'Duration|DRAM Throughput|Mem Busy|Issued Warp' $R/ncu_narrow_fp8_N16_T512.txt | tr -s ' ' | tr '\n' ';')"
timeout 60 ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis -k regex:wide --launch-skip 3 --launch-count 1 \
  env PYTHONPATH=py python3 tools/bench.py --paths=decode --cache_formats=fp8_ds_mla --nocheck --heads=64 --tokens=128 --replays=3 --warmup_replays=1 --out_dir=/tmp/ncu_bench \
  > $R/ncu_wide_fp8_N64_T128.txt 2>&1
echo "ncu wide rc=$? $(grep -E 'Duration|DRAM Throughput|Mem Busy|Issued Warp' $R/ncu_wide_fp8_N64_T128.txt | tr -s ' ' | tr '\n' ';')"
PYTHONPATH=py timeout 40 python3 examples/decode_step.py > $R/example_decode_step.log 2>&1; echo "example rc=$? $(tail -2 $R/example_decode_step.log | tr '\n' ' ')"
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
