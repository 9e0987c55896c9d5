# Wide-kernel consumer and gather trims on e6fffd5: the warpgroup index known warp-uniform (__shfl_sync, its
# wgmma descriptors in uniform registers; no spills) and the gather without the masked-row address select,
# against the committed kernel (copy wide_base14), decode path, both formats.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
OUT=$R timeout 500 tools/decode_variants.sh .device/variants/wide_base14.cu .device/variants/wide_uniform14.cu .device/variants/wide_uniform_gather14.cu -- \
  --heads=32,64,128 --tokens=1,8,16,128,512 --replays=20 --git_revision=$rev > $R/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start ))s"
cat $R/variants/summary.txt | grep -v "clusters of"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
