# Prepared in session 9 (not run): fp8_ds_mla, default plan vs the wave model without the split cap
# (--decode_ctas_per_sm=64) over the grids past the two release-9 rules, to fit a better wave cost model.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
[ -f bazel-bin/cc/libsparse_mla_decode.so ] || { timeout 60 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "decode_build rc=$?"; }
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
run() {  # name heads tokens [flags]
  local name=$1 heads=$2 tokens=$3; shift 3
  mkdir -p $R/sweep/$name
  PYTHONPATH=py timeout 90 python3 tools/bench.py --out_dir=$R/sweep/$name --git_revision=$(cat .device/rev) --paths=decode --cache_formats=fp8_ds_mla --heads=$heads --tokens=$tokens --replays=20 --nocheck "$@" > $R/sweep/$name/bench.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - start ))s"
}
for cfg in "16 200,300,400,600,800,1024" "32 130,160,192,256,384,512" "64 199,230,264,300,400,512" "128 100,120,132,160,200,256"; do
  set -- $cfg
  run n$1_default $1 $2
  run n$1_uncapped $1 $2 --decode_ctas_per_sm=64
done
rm -f $R/sweep/*/bench.png
python3 - $R/sweep <<'PY'
import csv, glob, os, sys
for d in sorted(glob.glob(sys.argv[1] + "/*")):
    try:
        rows = list(csv.DictReader(l for l in open(d + "/bench.csv") if not l.startswith("#")))
    except OSError:
        continue
    print(os.path.basename(d).ljust(14), " ".join("T%s %.1f" % (r["T"], float(r["decode_fp8_us"])) for r in rows))
PY
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
