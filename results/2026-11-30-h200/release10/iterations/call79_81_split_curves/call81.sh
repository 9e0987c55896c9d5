# call80 continued: N = 32 only (call80 stopped at N = 16, T = 1056, which needs more cache blocks than the sweep has).
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
PYTHONPATH=py timeout 400 python3 .device/split_curve.py fp8 \
  32:129,132,140,150,170,180,200,220,240,264,280,300,340,360,400,450,528,600:1,2,3,4,5,6,7,8 > $R/split_curve.txt 2>&1
echo "split_curve rc=$? $(( $(date +%s) - start ))s"; tail -3 $R/split_curve.txt
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
