# Planner sweeps on b87bf8f's library (call 97), no build: the first kernel at N = 16, T = 9..24, stage
# size x cluster size on both formats; the wide kernel's split count at the T <= 16 points where
# fp8_ds_mla trails bf16 (N = 32, T = 8 / 16; N = 64, T = 16; N = 128, T = 4 / 8).
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs/libsparse_mla_decode.so
summ() { grep -v '^#' $1 | python3 -c "
import csv,sys
print(' '.join('T%s %.1f / %.1f' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"; }
for shape in default "32 8" "32 1" "16 8" "16 1"; do
  d=$R/shapes/${shape// /_}; mkdir -p $d; extra=""; [ "$shape" = default ] || { set -- $shape; extra="--decode_cta_chunk=$1 --decode_cluster_size=$2"; }
  PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=16 --tokens=9,12,16,24 --replays=30 $extra > $d/bench.log 2>&1
  echo "shape $shape rc=$? $(( $(date +%s) - start ))s: $(summ $d/bench.csv)"
done
find $R -name bench.png -delete
S=4,6,8,11,12,16,22,24,32
PYTHONPATH=py timeout 300 python3 .device/split_curve.py fp8,bf16 32:8,16:$S 64:16:$S 128:4,8:$S > $R/split_curve.txt 2>&1
echo "split_curve rc=$? $(( $(date +%s) - start ))s"; cat $R/split_curve.txt | tail -20
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
