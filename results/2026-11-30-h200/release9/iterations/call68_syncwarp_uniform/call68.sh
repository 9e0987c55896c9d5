# Prepared in session 8 for the next session: the racecheck fix and the warp-uniform wide variants.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 400 tools/decode_variants.sh --tests .device/variants/narrow_base12.cu .device/variants/narrow_syncwarp12.cu -- --heads=16,32 --tokens=1,2,4,8,16 > $R/narrow.log 2>&1
echo "narrow rc=$? $(( $(date +%s) - start ))s"; grep -E "^==|registers|tests:|bench rc|^ +(16|32) +\|" $R/variants/summary.txt | cut -c1-120
sel='test_decode_step_matches_reference and decode and (16-4 or 16-8)'
SPARSE_MLA_DECODE_LIBRARY=/tmp/decode_variants/lib_narrow_syncwarp12.so PYTHONPATH=py:tests timeout 150 compute-sanitizer --tool racecheck --target-processes all python3 -m pytest -q tests/test_fp8_ds_mla_gpu.py -k "$sel" > $R/racecheck_syncwarp.log 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck_syncwarp.log | sort | uniq -c | tr '\n' ' ')"
mv $R/variants $R/narrow_variants
OUT=$R timeout 300 tools/decode_variants.sh .device/variants/wide_base12.cu .device/variants/wide_uniform12.cu .device/variants/wide_uniform_desc12.cu -- --heads=64,128 --tokens=4,16,128 > $R/wide.log 2>&1
echo "wide rc=$? $(( $(date +%s) - start ))s"; grep -E "^==|registers|bench rc|^ +(64|128) +\|" $R/variants/summary.txt | cut -c1-120
rm -f $R/*/*/bench.png
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
