# The first kernel with 2 barriers per stage (fp8_ds_mla issuing its next gather at the stage's top)
# vs 979d75e; tests; and other plan shapes (stage size, cluster) at N = 16, T = 4..32 on it.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 330 tools/decode_variants.sh --tests .device/narrow_base.cu .device/narrow_final.cu -- \
  --heads=16,32 --tokens=1,2,4,8,16,32,128,256,512 --replays=20 --git_revision=$rev > $R/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=/tmp/decode_variants/lib_narrow_final.so
PYTHONPATH=py timeout 120 python3 -m pytest -q tests/test_fp8_ds_mla_gpu.py > $R/fp8_tests.log 2>&1
echo "fp8 tests rc=$? $(tail -1 $R/fp8_tests.log) $(( $(date +%s) - start ))s"
summ() { grep -v '^#' $1 | python3 -c "
import csv,sys
print(' '.join('T%s %.1f / %.1f' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))"; }
for shape in "32 8" "32 1" "16 8" "16 1"; do
  set -- $shape; d=$R/shape_c$1_cl$2; mkdir -p $d
  PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=16 --tokens=4,8,16,32 --replays=20 --nocheck --decode_cta_chunk=$1 --decode_cluster_size=$2 > $d/bench.log 2>&1
  echo "chunk=$1 cluster=$2 rc=$? $(( $(date +%s) - start ))s: $(summ $d/bench.csv)"
done
cat $R/variants/summary.txt | grep -v "clusters of"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
