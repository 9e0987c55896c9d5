# The plan with 32-position stages up to T * head_groups = 8 (python only) on 7ef89b1's library: N = 16, T = 5..8,
# decode and routed, both formats; the decode and fp8_ds_mla GPU tests.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/lib93/libsparse_mla_decode.so
PYTHONPATH=py timeout 90 python3 tools/bench.py --out_dir=$R/n16 --git_revision=$rev --paths=decode,routed --heads=16 --tokens=5,6,7,8 --replays=30 > $R/n16.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s: $(grep -v '^#' $R/n16/bench.csv | python3 -c "
import csv,sys
print(' '.join('T%s %.1f / %.1f routed %.1f / %.1f' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us']), float(r['routed_us']), float(r['routed_fp8_us'])) for r in csv.DictReader(sys.stdin)))")"
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 150 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py > $R/gpu_tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"
rm -f $R/n16/bench.png
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
