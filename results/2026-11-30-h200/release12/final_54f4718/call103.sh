# Final check of release 12 at 54f4718 (kernels as built at b87bf8f in call 97, plan and routing table of this
# tree): the GPU suite (eight test files), memcheck (tools/gpu_routine.sh), the example.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs/libsparse_mla_decode.so
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 200 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_kernels_gpu.py tests/test_sparse_mla_attention_gpu.py tests/test_vllm_adapter_gpu.py tests/test_fa3_gpu.py tests/test_token_metadata_gpu.py > $R/gpu_tests.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
OUT=$R timeout 150 tools/gpu_routine.sh memcheck > $R/memcheck_routine.log 2>&1
echo "memcheck rc=$? $(( $(date +%s) - start ))s: $(grep memcheck: $R/memcheck_routine.log | tail -1) $(tail -1 $R/memcheck.log)"
PYTHONPATH=py timeout 40 python3 examples/decode_step.py > $R/example_decode_step.log 2>&1; echo "example rc=$? $(tail -2 $R/example_decode_step.log | tr '\n' ' ')"
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
