# Where the wide kernel's fp8_ds_mla time goes at small T: the decode path with and without its gathers
# (--decode_ablate=2: no cache rows copied; fp8 still dequantizes its raw ring), bf16 and fp8_ds_mla.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
for ablate in 0 2; do
  for cfg in "32 8,16" "64 8,16,128" "128 4,8"; do
    set -- $cfg; d=$R/ablate$ablate/n$1; mkdir -p $d
    PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$d --git_revision=$rev --paths=decode --heads=$1 --tokens=$2 --replays=20 --nocheck --decode_ablate=$ablate > $d/bench.log 2>&1
    echo "ablate=$ablate N=$1 rc=$? $(( $(date +%s) - start ))s: $(grep -v '^#' $d/bench.csv | python3 -c "
import csv,sys
print(' '.join('T%s %.1f / %.1f' % (r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))")"
  done
done
rm -f $R/*/*/bench.png
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
