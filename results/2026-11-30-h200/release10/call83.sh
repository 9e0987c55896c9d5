# Racecheck of the wide kernel with two producer warpgroups (bf16 and fp8_ds_mla, split and unsplit).
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
sel='test_wide_kernel_matches_reference and (8-64 or 1-128)'
PYTHONPATH=py:tests timeout 400 compute-sanitizer --tool racecheck --target-processes all python3 -m pytest -q tests/test_decode_gpu.py -k "$sel" > $R/racecheck_wide.log 2>&1
echo "racecheck wide rc=$? $(( $(date +%s) - start ))s $(grep -E 'RACECHECK SUMMARY' $R/racecheck_wide.log | sort | uniq -c | tr '\n' ' ') $(tail -1 $R/racecheck_wide.log)"
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
