# The wide kernel's fp8 producers gathering each slot with one bulk copy (cp.async.bulk, counted on an
# mbarrier per raw stage) instead of 41 cp.async: decode build (Bazel); smoke (fp8 GPU tests, stop on the
# first failure); A/B of ce5b768's library and the new one, alternating twice; grid with the routing table;
# GPU suite; memcheck; example.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"; grep -E "error" $R/routine.log | head -3
new=$PWD/bazel-bin/cc/libsparse_mla_decode.so
mkdir -p $OUT/lib && cp $new $OUT/lib/
export SPARSE_MLA_DECODE_LIBRARY=$new
PYTHONPATH=py:tests timeout 60 python3 -m pytest -x -q tests/test_fp8_ds_mla_gpu.py > $R/smoke.log 2>&1
rc=$?; echo "smoke rc=$rc $(( $(date +%s) - start ))s: $(tail -1 $R/smoke.log)"
if [ $rc -ne 0 ]; then grep -E "^FAILED|^E " $R/smoke.log | head -10; tar czf $OUT/all.tgz -C $OUT r; exit 1; fi
summ() { grep -v '^#' $1 | python3 -c "
import csv,sys
print(' '.join('N%s T%s %.1f/%.1f' % (r['N'], r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"; }
for round in 1 2; do
  for lib in old new; do
    d=$R/ab/$lib.$round; mkdir -p $d; l=$new; [ $lib = old ] && l=$PWD/.device/libs_ce5b768/libsparse_mla_decode.so
    SPARSE_MLA_DECODE_LIBRARY=$l PYTHONPATH=py timeout 80 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --nocheck --heads=32,64,128 --tokens=8,16,128,512 --replays=20 > $d/bench.log 2>&1
    echo "$lib round $round rc=$? $(( $(date +%s) - start ))s: $(summ $d/bench.csv)"
  done
done
mkdir -p $R/grid
PYTHONPATH=py timeout 150 python3 tools/bench.py --out_dir=$R/grid --git_revision=$rev --paths=fa3,decode,routed --heads=16,32,64,128 --tokens=1,2,4,8,12,16,30,32,128,512 --write_routing_table > $R/grid/bench.log 2>&1
echo "grid rc=$? $(( $(date +%s) - start ))s"; cp py/sparse_mla/routing_table.json $R/grid/
python3 -c "
import json; t=json.load(open('$R/grid/routing_table.json'))['bfloat16']
print(t['tokens'], {n: ''.join('d' if r=='decode' else 'F' for r in row) for n, row in t['kernel'].items()})"
find $R -name bench.png -delete
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 180 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_kernels_gpu.py tests/test_sparse_mla_attention_gpu.py tests/test_vllm_adapter_gpu.py tests/test_fa3_gpu.py tests/test_token_metadata_gpu.py > $R/gpu_tests.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
OUT=$R timeout 120 tools/gpu_routine.sh memcheck > $R/memcheck_routine.log 2>&1
echo "memcheck rc=$? $(( $(date +%s) - start ))s: $(grep memcheck: $R/memcheck_routine.log | tail -1) $(tail -1 $R/memcheck.log)"
PYTHONPATH=py timeout 40 python3 examples/decode_step.py > $R/example_decode_step.log 2>&1; echo "example rc=$? $(tail -2 $R/example_decode_step.log | tr '\n' ' ')"
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
