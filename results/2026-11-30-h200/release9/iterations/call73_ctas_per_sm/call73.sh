# fp8_ds_mla at N = 16, large T: the planner's 2 CTAs per SM vs 3, alternated twice.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 60 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "decode_build rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
run() {
  local name=$1; shift
  mkdir -p $R/sweep/$name
  PYTHONPATH=py timeout 80 python3 tools/bench.py --out_dir=$R/sweep/$name --git_revision=$(cat .device/rev) --paths=decode --cache_formats=fp8_ds_mla --heads=16 --tokens=48,64,96,128,192,256,384,512 --replays=30 "$@" > $R/sweep/$name/bench.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - start ))s"
}
run a1_default; run b1_cps3 --decode_ctas_per_sm=3; run a2_default; run b2_cps3 --decode_ctas_per_sm=3
rm -f $R/sweep/*/bench.png
python3 - $R/sweep <<'PY'
import csv, glob, os, sys
for d in sorted(glob.glob(sys.argv[1] + "/*")):
    rows = list(csv.DictReader(l for l in open(d + "/bench.csv") if not l.startswith("#")))
    print(os.path.basename(d).ljust(12), " ".join("T%s %.1f" % (r["T"], float(r["decode_fp8_us"])) for r in rows))
PY
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
