# fp8_ds_mla: the splits the wave model picks without the planner's cap (--decode_ctas_per_sm=64) vs the default plan.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 60 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "decode_build rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
run() {  # name heads tokens [flags]
  local name=$1 heads=$2 tokens=$3; shift 3
  mkdir -p $R/sweep/$name
  PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$R/sweep/$name --git_revision=$(cat .device/rev) --paths=decode --cache_formats=fp8_ds_mla --heads=$heads --tokens=$tokens --replays=20 --nocheck "$@" > $R/sweep/$name/bench.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - start ))s"
}
run n16_default 16 200,256,512
run n16_uncapped 16 200,256,512 --decode_ctas_per_sm=64
run n32_default 32 48,96,160,192
run n32_uncapped 32 48,96,160,192 --decode_ctas_per_sm=64
run n64_default 64 48,96,160,192
run n64_uncapped 64 48,96,160,192 --decode_ctas_per_sm=64
run n128_default 128 48,96,160,200
run n128_uncapped 128 48,96,160,200 --decode_ctas_per_sm=64
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
