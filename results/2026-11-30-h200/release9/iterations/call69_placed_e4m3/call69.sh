# Placed e4m3 values with folded scales in the first kernel (narrow_place) vs the committed kernel (narrow_base13).
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 420 tools/decode_variants.sh --tests .device/variants/narrow_base13.cu .device/variants/narrow_place.cu -- --heads=16,32 --tokens=1,2,4,8,16,128 > $R/narrow.log 2>&1
echo "narrow rc=$? $(( $(date +%s) - start ))s"; grep -E "^==|registers|tests:|bench rc|^ +(16|32) +\|" $R/variants/summary.txt | cut -c1-130
SPARSE_MLA_DECODE_LIBRARY=/tmp/decode_variants/lib_narrow_place.so PYTHONPATH=py:tests timeout 150 python3 -m pytest -q -x tests/test_fp8_ds_mla_gpu.py > $R/fp8_tests_place.log 2>&1
echo "fp8 tests rc=$? $(tail -1 $R/fp8_tests_place.log)"
grep -iE "error|max_rel|rel" $R/variants/narrow_place/bench.log | head -5
rm -f $R/*/*/bench.png
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
