# Decode time vs split count (fp8) for the first kernel past one SM count of CTAs, at T the model changes (N = 16: 16 heads per CTA; N = 32: 32).
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
PYTHONPATH=py timeout 400 python3 .device/split_curve.py fp8 \
  16:132,133,140,148,150,158,165,170,176,180,190,199,210,220,225,232,237,245,265,270,280,298,310,330,350,364,380,397,420,441,460,485,530,560,575,600,650,700,750,793,850,900,950,1000,1056:1,2,3,4,5,6,7,8 \
  32:129,132,140,150,170,180,200,220,240,264,280,300,340,360,400,450,528,600:1,2,3,4,5,6,7,8 > $R/split_curve.txt 2>&1
echo "split_curve rc=$? $(( $(date +%s) - start ))s"; tail -3 $R/split_curve.txt
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
