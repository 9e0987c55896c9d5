# The fp8 planner rule: decode build, grid, fp8 sweep at N = 16, GPU suite.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 60 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"; grep -E "error" $R/routine.log | head -3
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
mkdir -p $R/grid
PYTHONPATH=py timeout 150 python3 tools/bench.py --out_dir=$R/grid --git_revision=$rev --paths=fa3,decode,routed --heads=16,32,64,128 --tokens=1,2,4,8,16,32,128,512 --write_routing_table > $R/grid/bench.log 2>&1
echo "grid rc=$? $(( $(date +%s) - start ))s"; cp py/sparse_mla/routing_table.json $R/grid/
mkdir -p $R/fp8_n16
PYTHONPATH=py timeout 80 python3 tools/bench.py --out_dir=$R/fp8_n16 --git_revision=$rev --paths=decode --cache_formats=fp8_ds_mla --heads=16 --tokens=48,64,96,128,192,256,384,512 > $R/fp8_n16/bench.log 2>&1
echo "fp8 sweep rc=$? $(( $(date +%s) - start ))s"; grep -v "^#" $R/fp8_n16/bench.csv | cut -d, -f1,2,13 | tr "\n" " "; echo
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 180 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_kernels_gpu.py tests/test_sparse_mla_attention_gpu.py tests/test_vllm_adapter_gpu.py tests/test_fa3_gpu.py tests/test_token_metadata_gpu.py > $R/gpu_tests.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
PYTHONPATH=py timeout 40 python3 examples/decode_step.py > $R/example_decode_step.log 2>&1; echo "example rc=$? $(tail -2 $R/example_decode_step.log | tr '\n' ' ')"
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
