# fp8_ds_mla raw ring of 5 half-stages (four gathers in flight, 64 rows as on bf16) vs 4, in the wide kernel.

set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 420 tools/decode_variants.sh --tests .device/variants/wide_base16.cu .device/variants/wide_raw5.cu -- --heads=32,64,128 --tokens=4,8,16,128,512 > $R/wide.log 2>&1
echo "wide rc=$? $(( $(date +%s) - start ))s"; grep -E "^==|registers|tests:|bench rc|^ +(32|64|128) +\|" $R/variants/summary.txt | cut -c1-130
SPARSE_MLA_DECODE_LIBRARY=/tmp/decode_variants/lib_wide_raw5.so PYTHONPATH=py:tests timeout 120 python3 -m pytest -q -x tests/test_fp8_ds_mla_gpu.py > $R/fp8_tests_raw5.log 2>&1
echo "fp8 tests rc=$? $(tail -1 $R/fp8_tests_raw5.log)"
rm -f $R/*/*/bench.png
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
