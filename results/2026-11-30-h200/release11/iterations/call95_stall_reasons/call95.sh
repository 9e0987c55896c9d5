# Stall reasons (Nsight Compute, details printed) of the first kernel at N = 16, T = 512 and the wide kernel at
# N = 64, T = 16, both formats, on 7ef89b1's library (kernels as at f51f0a0).
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/lib93/libsparse_mla_decode.so
for cfg in "sparse_decode_kernel 16 512" "sparse_decode_wide 64 16"; do
  set -- $cfg
  for fmt in fp8_ds_mla bfloat16; do
    f=$R/ncu_$1_${fmt}_N$2_T$3.txt
    timeout 80 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section SourceCounters \
      --print-details all -k regex:$1 --launch-skip 3 --launch-count 1 \
      env PYTHONPATH=py python3 tools/bench.py --paths=decode --nocheck --heads=$2 --tokens=$3 --cache_formats=$fmt --replays=3 --warmup_replays=1 --out_dir=/tmp/ncu_bench \
      > $f 2>&1
    echo "ncu $1 $fmt N=$2 T=$3 rc=$? $(( $(date +%s) - start ))s $(grep -E 'Duration' $f | head -1 | tr -s ' ')"
  done
done
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
