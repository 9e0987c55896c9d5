# The full routine at the release-10 head: decode build, grid (routing table), fp8 at the uncapped bands, GPU suite,
# memcheck, racecheck on the wide kernel (two producer warpgroups), Nsight Compute of the wide kernel, example.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"; grep -E "error" $R/routine.log | head -3
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
mkdir -p $R/grid
PYTHONPATH=py timeout 150 python3 tools/bench.py --out_dir=$R/grid --git_revision=$rev --paths=fa3,decode,routed --heads=16,32,64,128 --tokens=1,2,4,8,16,32,128,512 --write_routing_table > $R/grid/bench.log 2>&1
echo "grid rc=$? $(( $(date +%s) - start ))s"; cp py/sparse_mla/routing_table.json $R/grid/
for cfg in "16 133,200,265,400,528,529" "32 140,160,220,320,462,529"; do
  set -- $cfg; mkdir -p $R/bands/n$1
  PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$R/bands/n$1 --git_revision=$rev --paths=decode --cache_formats=fp8_ds_mla --heads=$1 --tokens=$2 --replays=20 > $R/bands/n$1/bench.log 2>&1
  echo "bands N=$1 rc=$? $(( $(date +%s) - start ))s: $(grep -v '^#' $R/bands/n$1/bench.csv | python3 -c "
import csv,sys
print(' '.join('T%s %.1f (err %.1e)' % (r['T'], float(r['decode_fp8_us']), float(r['decode_fp8_relerr'])) for r in csv.DictReader(sys.stdin)))")"
done
rm -f $R/*/bench.png $R/bands/*/bench.png
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 180 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_kernels_gpu.py tests/test_sparse_mla_attention_gpu.py tests/test_vllm_adapter_gpu.py tests/test_fa3_gpu.py tests/test_token_metadata_gpu.py > $R/gpu_tests.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
OUT=$R timeout 120 tools/gpu_routine.sh memcheck > $R/memcheck_routine.log 2>&1
echo "memcheck rc=$? $(( $(date +%s) - start ))s: $(grep memcheck: $R/memcheck_routine.log)"
sel='test_decode_step_matches_reference and decode and (64-4 or 128-2)'
PYTHONPATH=py:tests timeout 90 compute-sanitizer --tool racecheck --target-processes all python3 -m pytest -q tests/test_fp8_ds_mla_gpu.py -k "$sel" > $R/racecheck_wide_fp8.log 2>&1
echo "racecheck wide fp8 rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck_wide_fp8.log | sort | uniq -c | tr '\n' ' ') $(tail -1 $R/racecheck_wide_fp8.log)"
timeout 60 ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis -k regex:sparse_decode_wide --launch-skip 10 --launch-count 1 \
  env PYTHONPATH=py python3 tools/bench.py --paths=decode --cache_formats=fp8_ds_mla --nocheck --heads=64 --tokens=128 --out_dir=/tmp/ncu_bench \
  > $R/ncu_wide_fp8_N64_T128.txt 2>&1
echo "ncu rc=$? $(grep -E 'Duration|Registers Per|Achieved Occupancy' $R/ncu_wide_fp8_N64_T128.txt | tr -s ' ' | tr '\n' ';')"
PYTHONPATH=py timeout 40 python3 examples/decode_step.py > $R/example_decode_step.log 2>&1; echo "example rc=$? $(tail -2 $R/example_decode_step.log | tr '\n' ' ')"
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
