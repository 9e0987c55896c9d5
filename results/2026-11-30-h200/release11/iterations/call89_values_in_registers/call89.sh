# Narrow kernel, fp8_ds_mla values kept in registers (movmatrix) and a skewed 768-byte ring pitch vs the
# committed kernel (narrow_s3): tests, bench at N = 16 / 32, Nsight Compute at N = 16, T = 512.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 400 tools/decode_variants.sh --tests .device/narrow_s3.cu .device/narrow_mov.cu -- \
  --heads=16,32 --tokens=1,2,4,8,16,32,128,256,512 --replays=20 --git_revision=$rev > $R/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=/tmp/decode_variants/lib_narrow_mov.so
PYTHONPATH=py timeout 120 python3 -m pytest -q tests/test_fp8_ds_mla_gpu.py > $R/fp8_tests.log 2>&1
echo "fp8 tests rc=$? $(tail -1 $R/fp8_tests.log) $(( $(date +%s) - start ))s"
timeout 100 ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
    -k regex:sparse_decode_kernel --launch-skip 3 --launch-count 1 \
    env PYTHONPATH=py python3 tools/bench.py --paths=decode --nocheck --heads=16 --tokens=512 --cache_formats=fp8_ds_mla --replays=3 --warmup_replays=1 --out_dir=/tmp/ncu_bench \
    > $R/ncu_mov_fp8_N16_T512.txt 2>&1
echo "ncu rc=$? $(( $(date +%s) - start ))s $(grep -E 'Duration' $R/ncu_mov_fp8_N16_T512.txt | head -1)"
cat $R/variants/summary.txt | grep -v "clusters of"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
