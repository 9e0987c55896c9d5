# Plan sweep of the first kernel (and the wide default) at N = 16, 32, T = 8, 16, both caches.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 60 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "decode_build rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
run() {  # name, heads, extra flags
  local name=$1 heads=$2; shift 2
  mkdir -p $R/sweep/$name
  PYTHONPATH=py timeout 45 python3 tools/bench.py --out_dir=$R/sweep/$name --git_revision=$(cat .device/rev) --paths=decode --cache_formats=bfloat16,fp8_ds_mla --heads=$heads --tokens=8,16 --replays=50 "$@" > $R/sweep/$name/bench.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - start ))s"
}
run n16_default 16
run n32_default 32
for cl in 8 1; do for ch in 16 32; do for cps in 1 2 3; do
  [ $cl = 1 ] && [ $cps = 1 ] && continue
  run n16_ht1_cl${cl}_ch${ch}_cps${cps} 16 --decode_head_tiles=1 --decode_cluster_size=$cl --decode_cta_chunk=$ch --decode_ctas_per_sm=$cps
  [ $(( $(date +%s) - start )) -gt 500 ] && break 3
  run n32_ht2_cl${cl}_ch${ch}_cps${cps} 32 --decode_head_tiles=2 --decode_cluster_size=$cl --decode_cta_chunk=$ch --decode_ctas_per_sm=$cps
done; done; done
rm -f $R/sweep/*/bench.png
python3 - $R/sweep <<'PY'
import csv, glob, os, sys
for d in sorted(glob.glob(sys.argv[1] + "/*")):
    try:
        rows = list(csv.DictReader(l for l in open(d + "/bench.csv") if not l.startswith("#")))
    except OSError:
        continue
    print(os.path.basename(d).ljust(28), "  ".join("N%s T%s bf16 %.1f fp8 %.1f" % (r["N"], r["T"], float(r["decode_us"]), float(r["decode_fp8_us"])) for r in rows))
PY
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
