# The wide kernel's split merge as a programmatic dependent launch (griddepcontrol; launched while the
# kernel's last CTAs run) vs the committed kernel (copy wide_base.cu): tests on each, the decode kernel alone
# at N = 32 / 64 / 128, T = 1..32, both formats; then the PDL library under memcheck (wide tests), and the
# backend and fp8_ds_mla GPU tests on it (CUDA graphs with the dependent launch captured).
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 300 tools/decode_variants.sh --tests .device/wide_base.cu .device/wide_pdl.cu -- \
  --heads=32,64,128 --tokens=1,2,4,8,16,32 --replays=30 --git_revision=$rev > $R/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start ))s"
cat $R/variants/summary.txt | grep -v "clusters of"
export SPARSE_MLA_DECODE_LIBRARY=/tmp/decode_variants/lib_wide_pdl.so
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 150 python3 -m pytest -q -rf tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_vllm_adapter_gpu.py > $R/tests_pdl.log 2>&1
echo "fp8+backend+vllm tests on pdl rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/tests_pdl.log)"; grep -E "^FAILED|^ERROR" $R/tests_pdl.log | head -5
PYTHONPATH=py:tests timeout 150 compute-sanitizer --tool memcheck --target-processes all python3 -m pytest -q tests/test_decode_gpu.py -k "wide or cuda_graph or (test_matches_reference and (128-4 or 64-33 or 100-16))" > $R/memcheck_pdl.log 2>&1
echo "memcheck pdl rc=$? $(( $(date +%s) - start ))s: $(grep -E 'ERROR SUMMARY' $R/memcheck_pdl.log | sort | uniq -c | tr '\n' ' ') $(tail -1 $R/memcheck_pdl.log)"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
