# Narrow kernel at large T: deeper fp8_ds_mla ring (4 / 5 stages vs 3), the committed kernel without
# gathers (--decode_ablate=2), and Nsight Compute of N = 16, T = 512 on both formats.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 330 tools/decode_variants.sh .device/narrow_s3.cu .device/narrow_fp8s4.cu .device/narrow_fp8s5.cu -- \
  --heads=16,32 --tokens=8,16,128,256,512 --replays=20 --git_revision=$rev > $R/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=/tmp/decode_variants/lib_narrow_s3.so
for ablate in 2; do
  for cfg in "16 128,512" "32 256"; do
    set -- $cfg; d=$R/ablate$ablate/n$1; mkdir -p $d
    PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=$1 --tokens=$2 --replays=20 --nocheck --decode_ablate=$ablate > $d/bench.log 2>&1
    echo "ablate=$ablate N=$1 rc=$? $(( $(date +%s) - start ))s: $(grep -v '^#' $d/bench.csv | python3 -c "
import csv,sys
print(' '.join('T%s %.1f / %.1f' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))")"
  done
done
for fmt in fp8_ds_mla bfloat16; do
  timeout 100 ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
      -k regex:sparse_decode_kernel --launch-skip 3 --launch-count 1 \
      env PYTHONPATH=py python3 tools/bench.py --paths=decode --nocheck --heads=16 --tokens=512 --cache_formats=$fmt --replays=3 --warmup_replays=1 --out_dir=/tmp/ncu_bench \
      > $R/ncu_narrow_${fmt}_N16_T512.txt 2>&1
  echo "ncu $fmt rc=$? $(( $(date +%s) - start ))s $(grep -E 'Duration' $R/ncu_narrow_${fmt}_N16_T512.txt | head -1)"
done
cat $R/variants/summary.txt
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
