# Two producer warpgroups in the wide kernel (committed tree) + decode time vs split count (fp8), to fit the wave model.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
S=1,2,3,4,5,6,8,11,16
PYTHONPATH=py timeout 330 python3 .device/split_curve.py fp8 \
  16:16,24,32,48,64,96,128,160,200,256,300,400,512,600,800,1024:$S \
  32:64,96,128,130,160,192,256,320,384,512:$S \
  64:16,32,48,64,96,128,160,199,230,264,300,400,512:$S \
  128:8,16,32,48,64,80,100,132,160,200,256:$S > $R/split_curve.txt 2>&1
echo "split_curve rc=$? $(( $(date +%s) - start ))s"; cat $R/split_curve.txt | tail -60
PYTHONPATH=py:tests timeout 100 python3 -m pytest -q -x tests/test_decode_gpu.py > $R/decode_tests.log 2>&1; echo "decode tests rc=$? $(tail -1 $R/decode_tests.log)"
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
