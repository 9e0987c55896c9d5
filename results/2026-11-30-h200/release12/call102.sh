# The release-12 grid at c3bc49b (plan with clusters of 8 at T * head_groups = 11..15 and 23..30; kernels as at
# b87bf8f, call 97's library), with T = 12, 24 and 30 added so that the routing table sees those bands.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R/grid
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
export SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs/libsparse_mla_decode.so
PYTHONPATH=py timeout 300 python3 tools/bench.py --out_dir=$R/grid --git_revision=$rev --paths=fa3,decode,routed --heads=16,32,64,128 --tokens=1,2,4,8,12,16,24,30,32,128,512 --write_routing_table > $R/grid/bench.log 2>&1
echo "grid rc=$? $(( $(date +%s) - start ))s"; cp py/sparse_mla/routing_table.json $R/grid/
python3 -c "
import json; t=json.load(open('$R/grid/routing_table.json'))
for f in t: print(f, t[f]['tokens'], {n: ''.join('d' if r=='decode' else 'F' if r=='fa3' else 't' for r in row) for n, row in t[f]['kernel'].items()})"
find $R -name bench.png -delete
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
