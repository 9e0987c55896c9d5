# First kernel with 2 CTA barriers per stage instead of 3 (the next gather issued after the scores, the
# stage's landing awaited with the probabilities' barrier), with 3 or 4 fp8_ds_mla stages, vs 979d75e.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 420 tools/decode_variants.sh --tests .device/narrow_base.cu .device/narrow_2bar.cu .device/narrow_2bar_fp8s4.cu -- \
  --heads=16,32 --tokens=1,2,4,8,16,32,128,256,512 --replays=20 --git_revision=$rev > $R/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=/tmp/decode_variants/lib_narrow_2bar.so
PYTHONPATH=py timeout 120 python3 -m pytest -q tests/test_fp8_ds_mla_gpu.py > $R/fp8_tests.log 2>&1
echo "fp8 tests rc=$? $(tail -1 $R/fp8_tests.log) $(( $(date +%s) - start ))s"
cat $R/variants/summary.txt | grep -v "clusters of"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
