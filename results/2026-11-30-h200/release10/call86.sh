# Host µs per eager call (build and forward per route) at the release-10 head, the first refresh since release 3.
set -u
start=$(date +%s)
rev=$(cat .device/rev)
R=$OUT/r; mkdir -p $R
export SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs/libsparse_mla_fa3.so
timeout 90 tools/gpu_routine.sh decode_build > $R/routine.log 2>&1; echo "routine rc=$? $(( $(date +%s) - start ))s"
export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
PYTHONPATH=py timeout 200 python3 tools/bench.py --out_dir=$R --git_revision=$rev --host_time > $R/host_time.log 2>&1
echo "host_time rc=$? $(( $(date +%s) - start ))s"; grep -E "^ +[0-9]+ +[0-9]+ +[a-z0-9]+ \||bare" $R/host_time.log
tar czf $OUT/all.tgz -C $OUT r && rm -rf $R
echo "wall $(( $(date +%s) - start ))s"
