# T <= 16 cells where fp8_ds_mla trails bf16 (N = 32, T = 8..16; N = 64, T = 16; N = 128, T = 8), on
# ec407cc's library (no build): N = 32 on the first kernel (32 heads per CTA) vs the wide kernel, both
# formats; then split counts of the wide kernel at those cells.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs_new/libsparse_mla_decode.so
summ() { grep -v '^#' $1 | python3 -c "
import csv,sys
print(' '.join('N%s T%s %.1f/%.1f' % (r['N'], r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"; }
for ht in default 2; do
  d=$R/ht_$ht; mkdir -p $d; extra=""; [ "$ht" = default ] || extra="--decode_head_tiles=$ht"
  PYTHONPATH=py timeout 100 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=32 --tokens=4,8,12,16,24 --replays=30 $extra > $d/bench.log 2>&1
  echo "head_tiles $ht rc=$? $(( $(date +%s) - start ))s: $(summ $d/bench.csv)"
done
find $R -name bench.png -delete
PYTHONPATH=py timeout 240 python3 .device/split_curve.py fp8,bf16 32:8,12,16:2,4,6,8,12,16 64:16:2,4,6,8,12,16 128:8:2,4,6,8,12,16 > $R/split_curve.txt 2>&1
echo "split_curve rc=$? $(( $(date +%s) - start ))s"; cat $R/split_curve.txt | tail -12
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
