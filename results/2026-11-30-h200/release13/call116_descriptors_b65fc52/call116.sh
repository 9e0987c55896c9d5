# The wide kernel's wgmma descriptors built once (two 32-bit halves, one addition per operand): decode build
# (Bazel); smoke; A/B of ce5b768's library and the new one, alternating twice, both formats; GPU suite;
# memcheck; racecheck (release 12's selection). Logs land in $OUT as they are written.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"; grep -E "error" $R/routine.log | head -3
new=$PWD/bazel-bin/cc/libsparse_mla_decode.so
mkdir -p $OUT/lib && cp $new $OUT/lib/
export SPARSE_MLA_DECODE_LIBRARY=$new
PYTHONPATH=py:tests timeout 60 python3 -m pytest -x -q tests/test_fp8_ds_mla_gpu.py > $R/smoke.log 2>&1
rc=$?; echo "smoke rc=$rc $(( $(date +%s) - start ))s: $(tail -1 $R/smoke.log)"
if [ $rc -ne 0 ]; then grep -E "^FAILED|^E " $R/smoke.log | head -10; exit 1; fi
summ() { grep -v '^#' $1 | python3 -c "
import csv,sys
print(' '.join('N%s T%s %.1f/%.1f' % (r['N'], r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"; }
for round in 1 2; do
  for lib in old new; do
    d=$R/ab/$lib.$round; mkdir -p $d; l=$new; [ $lib = old ] && l=$PWD/.device/libs_ce5b768/libsparse_mla_decode.so
    SPARSE_MLA_DECODE_LIBRARY=$l PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --nocheck --heads=32,64,128 --tokens=8,16,128,512 --replays=20 > $d/bench.log 2>&1
    echo "$lib round $round rc=$? $(( $(date +%s) - start ))s: $(summ $d/bench.csv)"
  done
done
find $R -name bench.png -delete
PYTHONPATH=py:tests:tests/vllm_stand_in timeout 150 python3 -m pytest -q -rf tests/test_decode_gpu.py tests/test_fp8_ds_mla_gpu.py tests/test_backend_gpu.py tests/test_kernels_gpu.py tests/test_sparse_mla_attention_gpu.py tests/test_vllm_adapter_gpu.py tests/test_fa3_gpu.py tests/test_token_metadata_gpu.py > $R/gpu_tests.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s) - start ))s: $(tail -1 $R/gpu_tests.log)"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8
mkdir -p $R/mc; OUT=$R/mc timeout 110 tools/gpu_routine.sh memcheck > $R/memcheck_routine.log 2>&1
echo "memcheck rc=$? $(( $(date +%s) - start ))s: $(grep memcheck: $R/memcheck_routine.log | tail -1) $(tail -1 $R/mc/memcheck.log)"
PYTHONPATH=py:tests timeout 110 compute-sanitizer --tool racecheck --target-processes all python3 -m pytest -q tests/test_decode_gpu.py -k "scales_of_every_magnitude or (test_any_split_count and (8-16-16-3 or 8-32-16-3 or 1-16-16-3 or 1-32-16-3 or 1-16-48-3))" > $R/racecheck.log 2>&1
echo "racecheck rc=$? $(( $(date +%s) - start ))s: $(grep -E 'RACECHECK SUMMARY' $R/racecheck.log | sort | uniq -c | tr '\n' ' ') $(tail -1 $R/racecheck.log)"
echo "wall $(( $(date +%s) - start ))s"
