# The plan at c3bc49b (clusters of 8 from T * head_groups = 11 with 32-position stages, and at 23..30 with
# 16-position stages, one split) on b87bf8f's library (call 97; kernels unchanged): decode, fp8_ds_mla and
# backend GPU tests; the decode kernel and the routed forward at N = 8 / 16, T = 9..32, both formats.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs/libsparse_mla_decode.so
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 200 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py > $R/gpu_tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
mkdir -p $R/plan
PYTHONPATH=py timeout 200 python3 tools/bench.py --out_dir=$R/plan --git_revision=$rev --paths=fa3,decode,routed --heads=8,16 --tokens=9,10,11,12,13,14,15,16,18,20,22,23,24,26,28,30,31,32 --replays=30 > $R/plan/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s"
grep -v '^#' $R/plan/bench.csv | python3 -c "
import csv,sys
for r in csv.DictReader(sys.stdin): print('N%s T%s fa3 %.1f decode %.1f / %.1f routed %s %.1f / %.1f err %.1e / %.1e' % (r['N'], r['T'], float(r['fa3_us']), float(r['decode_us']), float(r['decode_fp8_us']), r['route'], float(r['routed_us']), float(r['routed_fp8_us']), float(r['routed_relerr']), float(r['routed_fp8_relerr'])))"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
