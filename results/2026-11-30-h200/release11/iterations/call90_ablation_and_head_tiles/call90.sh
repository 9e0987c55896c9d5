# At 979d75e: the GPU suite and memcheck; where N = 16, T <= 4 spends its time (--decode_ablate);
# the first kernel (32 heads per CTA) against the wide one at N = 32 / 64, small T, both formats.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
summ() { grep -v '^#' $1 | python3 -c "
import csv,sys
print(' '.join('T%s %.1f / %.1f' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"; }
for ablate in 0 1 2 4 7; do
  d=$R/ablate$ablate; mkdir -p $d
  PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=16 --tokens=1,2,4 --replays=30 --nocheck --decode_ablate=$ablate > $d/bench.log 2>&1
  echo "ablate=$ablate N=16 rc=$? $(( $(date +%s) - start ))s: $(summ $d/bench.csv)"
done
for cfg in "32 2,4,8,16,32,64,128" "64 1,2,4,8,16"; do
  set -- $cfg
  for ht in default 2; do
    d=$R/heads$1_ht$ht; mkdir -p $d
    extra=""; [ $ht = default ] || extra="--decode_head_tiles=$ht"
    PYTHONPATH=py timeout 90 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=$1 --tokens=$2 --replays=20 $extra > $d/bench.log 2>&1
    echo "N=$1 head_tiles=$ht rc=$? $(( $(date +%s) - start ))s: $(summ $d/bench.csv)"
  done
done
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 180 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_kernels_gpu.py tests/test_sparse_mla_attention_gpu.py tests/test_vllm_adapter_gpu.py tests/test_fa3_gpu.py tests/test_token_metadata_gpu.py > $R/gpu_tests.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
OUT=$R timeout 120 tools/gpu_routine.sh memcheck > $R/memcheck_routine.log 2>&1
echo "memcheck rc=$? $(( $(date +%s) - start ))s: $(grep memcheck: $R/memcheck_routine.log | head -1) $(tail -1 $R/memcheck.log)"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
