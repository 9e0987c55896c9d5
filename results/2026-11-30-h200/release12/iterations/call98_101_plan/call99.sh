# N = 16 between the grid's T = 8 and 32 on b87bf8f's library (no build): the decode kernel alone with the
# planner's shape and with each forced (stage x cluster) shape, T = 9..31, both formats; then split counts
# 1..4 for 16- and 32-position stages in clusters of 8 and 32-position single CTAs at a few T.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs/libsparse_mla_decode.so
summ() { grep -v '^#' $1 | python3 -c "
import csv,sys
print(' '.join('T%s %.1f/%.1f' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"; }
for shape in default "32 8" "32 1" "16 8"; do
  d=$R/shapes/${shape// /_}; mkdir -p $d; extra=""; [ "$shape" = default ] || { set -- $shape; extra="--decode_cta_chunk=$1 --decode_cluster_size=$2"; }
  PYTHONPATH=py timeout 100 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=16 --tokens=9,10,11,12,13,14,15,16,18,20,22,24,26,28,31 --replays=30 $extra > $d/bench.log 2>&1
  echo "shape $shape rc=$? $(( $(date +%s) - start ))s: $(summ $d/bench.csv)"
done
find $R -name bench.png -delete
PYTHONPATH=py timeout 200 python3 .device/split_curve.py fp8,bf16 16:10,12,14:1,2,3,4:16:8 16:10,12,14:1,2:32:8 16:16,20,24,28:1,2,3,4:32:1 16:16,20,24,28:1,2:16:8 > $R/split_curve.txt 2>&1
echo "split_curve rc=$? $(( $(date +%s) - start ))s"; cat $R/split_curve.txt | tail -32
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
