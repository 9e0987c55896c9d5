# A/B at T = 512 (one split: no merge launch) of the libraries before (call 97, b87bf8f) and after (call 105,
# ec407cc) the early split merge, alternating, to tell a change from run-to-run noise.
set -u
start=$(date +%s)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
for round in 1 2; do
  for lib in libs libs_new; do
    d=$R/$lib.$round; mkdir -p $d
    SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/$lib/libsparse_mla_decode.so PYTHONPATH=py timeout 60 python3 tools/bench.py --out_dir=$d --paths=decode --nocheck --heads=64,128 --tokens=16,512 --replays=20 > $d/bench.log 2>&1
    echo "$lib round $round rc=$? $(( $(date +%s) - start ))s: $(grep -v '^#' $d/bench.csv | python3 -c "
import csv,sys
print(' '.join('N%s T%s %.1f/%.1f' % (r['N'], r['T'], float(r['decode_us']), float(r['decode_fp8_us'])) for r in csv.DictReader(sys.stdin)))")"
  done
done
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
