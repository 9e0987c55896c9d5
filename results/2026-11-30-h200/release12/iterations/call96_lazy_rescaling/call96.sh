# NEXT SESSION (prepared at f51f0a0, not run): lazy softmax rescaling (the running max moves only when a
# score exceeds it by > 8 log2 units; alpha = 1 -> the out_acc rescale is skipped warp-wide) in both
# kernels, vs the committed ones (copies narrow_head.cu / wide_head.cu). Tests on every variant, bench
# on both formats.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 540 tools/decode_variants.sh --tests .device/narrow_head.cu .device/narrow_lazy.cu .device/wide_head.cu .device/wide_lazy.cu -- \
  --heads=16,64,128 --tokens=1,4,8,16,128,512 --replays=20 --git_revision=$rev > $R/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start ))s"
cat $R/variants/summary.txt | grep -v "clusters of"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
