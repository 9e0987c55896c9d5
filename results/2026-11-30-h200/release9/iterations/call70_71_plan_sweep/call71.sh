# Plan sweep 2: the first kernel with one CTA per split at N = 16 (T = 16..512) and N = 32 (T = 32..512).
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
[ -f bazel-bin/cc/libsparse_mla_decode.so ] || { timeout 60 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "decode_build rc=$?"; }
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
run() {  # name, heads, tokens, extra flags
  local name=$1 heads=$2 tokens=$3; shift 3
  mkdir -p $R/sweep/$name
  PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$R/sweep/$name --git_revision=$(cat .device/rev) --paths=decode --cache_formats=bfloat16,fp8_ds_mla --heads=$heads --tokens=$tokens --replays=30 "$@" > $R/sweep/$name/bench.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - start ))s"
}
run n16_default 16 16,32,64,128,512
for ch in 16 32; do for cps in 1 2 3; do
  run n16_ht1_cl1_ch${ch}_cps${cps} 16 16,32,64,128,512 --decode_head_tiles=1 --decode_cluster_size=1 --decode_cta_chunk=$ch --decode_ctas_per_sm=$cps
done; done
run n32_default 32 32,128,512
for ch in 16 32; do for cps in 1 2; do
  run n32_ht2_cl1_ch${ch}_cps${cps} 32 32,128,512 --decode_head_tiles=2 --decode_cluster_size=1 --decode_cta_chunk=$ch --decode_ctas_per_sm=$cps
done; done
rm -f $R/sweep/*/bench.png
python3 - $R/sweep <<'PY'
import csv, glob, os, sys
for d in sorted(glob.glob(sys.argv[1] + "/*")):
    try:
        rows = list(csv.DictReader(l for l in open(d + "/bench.csv") if not l.startswith("#")))
    except OSError:
        continue
    print(os.path.basename(d).ljust(24), " ".join("T%s %.1f/%.1f" % (r["T"], float(r["decode_us"]), float(r["decode_fp8_us"])) for r in rows))
PY
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
