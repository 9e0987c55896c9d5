# The plan of e06878a (clusters of 8 with 32-position stages from T * head_groups = 11) on b87bf8f's library
# (call 97; the kernels are unchanged): the decode and backend GPU tests, and the routed forward at N = 16,
# T = 8..16 and the grid's N = 16 / 32 rows, both formats.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs/libsparse_mla_decode.so
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 200 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py > $R/gpu_tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
mkdir -p $R/n16
PYTHONPATH=py timeout 120 python3 tools/bench.py --out_dir=$R/n16 --git_revision=$rev --paths=decode,routed --heads=16 --tokens=8,9,10,11,12,13,14,15,16 --replays=30 > $R/n16/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s"
grep -v '^#' $R/n16/bench.csv | python3 -c "
import csv,sys
for r in csv.DictReader(sys.stdin): print('T%s decode %.1f / %.1f routed %.1f / %.1f err %.1e / %.1e' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us']), float(r['routed_us']), float(r['routed_fp8_us']), float(r['routed_relerr']), float(r['routed_fp8_relerr'])))"
for shape in default "16 8"; do
  d=$R/t24/${shape// /_}; mkdir -p $d; extra=""; [ "$shape" = default ] || { set -- $shape; extra="--decode_cta_chunk=$1 --decode_cluster_size=$2"; }
  PYTHONPATH=py timeout 100 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=16,8 --tokens=20,22,23,24,25,26,27,28,29,30,31 --replays=30 $extra > $d/bench.log 2>&1
  echo "shape $shape rc=$? $(( $(date +%s) - start ))s:"; grep -v '^#' $d/bench.csv | python3 -c "
import csv,sys
print(' '.join('N%s T%s %.1f/%.1f' % (r['N'], r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"
done
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
