# The fp8 wide-tail rule: decode build, fp8 at the rule's points with the default plan (call 75 has the capped ones), GPU suite.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 60 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
for n in 64 128; do
  t=133,160,192,199; [ $n = 128 ] && t=67,80,96,100
  mkdir -p $R/fp8_n$n
  PYTHONPATH=py timeout 40 python3 tools/bench.py --out_dir=$R/fp8_n$n --git_revision=$rev --paths=decode --cache_formats=fp8_ds_mla --heads=$n --tokens=$t --replays=20 > $R/fp8_n$n/bench.log 2>&1
  echo "fp8 N=$n rc=$? $(( $(date +%s) - start ))s: $(grep -v '^#' $R/fp8_n$n/bench.csv | python3 -c "
import csv,sys
print(' '.join('T%s %.1f (err %.1e)' % (r['T'], float(r['decode_fp8_us']), float(r['decode_fp8_relerr'])) for r in csv.DictReader(sys.stdin)))")"
done
rm -f $R/*/bench.png
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 170 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_kernels_gpu.py tests/test_sparse_mla_attention_gpu.py tests/test_vllm_adapter_gpu.py tests/test_fa3_gpu.py tests/test_token_metadata_gpu.py > $R/gpu_tests.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
