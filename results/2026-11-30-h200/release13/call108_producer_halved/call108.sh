# Ablation: the wide kernel's fp8 producer doing half the work (odd half-chunks neither gathered nor
# dequantized; wrong results, --nocheck) vs the committed kernel: the most that sharing the producer's
# work between the two head groups of N = 128 (a cluster of 2) could gain.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 400 tools/decode_variants.sh .device/variants/wide_base13.cu .device/variants/wide_abl_halfprod.cu -- \
  --heads=64,128 --tokens=4,8,16,128 --replays=30 --nocheck --git_revision=$rev > $R/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start ))s"
cat $R/variants/summary.txt | grep -v "clusters of"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
