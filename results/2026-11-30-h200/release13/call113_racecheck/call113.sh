# Racecheck at ce5b768 (call 112's library): the first kernel (both formats, every stage/cluster shape, 16 and
# 32 heads) and the wide kernel, the selection of calls 93 and 97.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs_ce5b768/libsparse_mla_decode.so
PYTHONPATH=py:tests timeout 150 compute-sanitizer --tool racecheck --target-processes all python3 -m pytest -q tests/test_decode_gpu.py -k "scales_of_every_magnitude or (test_any_split_count and (8-16-16-3 or 8-32-16-3 or 1-16-16-3 or 1-32-16-3 or 1-16-48-3))" > $R/racecheck.log 2>&1
echo "racecheck rc=$? $(( $(date +%s) - start ))s: $(grep -E 'RACECHECK SUMMARY' $R/racecheck.log | sort | uniq -c | tr '\n' ' ') $(tail -1 $R/racecheck.log)"
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
