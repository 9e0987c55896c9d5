# Nsight Compute on the wide kernel at ce5b768 (call 112's library), N = 64, T = 128, bf16 and fp8_ds_mla,
# with release 12's sections (call 97's ncu_wide_fp8_N64_T128.txt is the comparison at b87bf8f).
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs_ce5b768/libsparse_mla_decode.so
for fmt in fp8_ds_mla bfloat16; do
  timeout 90 ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis -k regex:wide --launch-skip 3 --launch-count 1 \
    env PYTHONPATH=py python3 tools/bench.py --paths=decode --cache_formats=$fmt --nocheck --heads=64 --tokens=128 --replays=3 --warmup_replays=1 --out_dir=/tmp/ncu_bench \
    > $R/ncu_wide_${fmt}_N64_T128.txt 2>&1
  echo "ncu $fmt rc=$? $(( $(date +%s) - start ))s: $(grep -E 'Duration|DRAM Throughput|L1/TEX Cache Throughput|Issued Warp|Eligible Warps' $R/ncu_wide_${fmt}_N64_T128.txt | tr -s ' ' | tr '\n' ';')"
done
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
