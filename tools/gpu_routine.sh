#!/usr/bin/env bash
# The GPU routine, run from the repository root on a Hopper machine without network (our H200):
# builds our op libraries (the decode kernels; FA3 with our index conversion) from local upstream
# sources with Bazel and runs the GPU suite, then optionally the benchmark. Logs and results go to $OUT (default: ./gpu_out).
#
# It expects, in the git-ignored folder .device/ (ship it with the run; tools/device_bundle.sh assembles it):
#   .device/bazel             the self-contained Bazel 2.1.0 (npm @bazel/bazel-linux_x64@2.1.0)
#   .device/upstream.tar.xz   sgl-attn/ (with hopper/) and cutlass/ (include/, tools/util/include/)
# Usage: tools/gpu_routine.sh [build] [decode_build] [test] [gpu_test] [pytest_suite] [libs] [wheel] [ab] [bench] [routing] [side_by_side] [model_step] [host_time] [libs_ab]
#        [decode] [memcheck] [racecheck] [ncu] [ncu_fa3] [wgmma_probe] [-- extra bench flags]
#   On the H200 `build test` from a cold start fits one call: build 150 s, test 109 s with the GPU tests side
#   by side and the longest in shards (2026-12-01; one at a time the test step took 556 s).
#   decode_build: only our decode op library (//cc:libsparse_mla_decode.so; seconds): for a GPU suite run
#   against an FA3 library of an earlier build when FA3's sources have not changed.
#   gpu_test: only the GPU-tagged test targets (no CPU interpreter tests): the GPU suite.
#   pytest_suite: the GPU suite without Bazel: each tests/*/*_gpu.py under pytest, a few side by side, against the op
#   libraries SPARSE_MLA_*_LIBRARY names (built on the CPU), for a call whose device time cannot pay for the build.
#   libs: copies the built op libraries to $OUT/libs (carry them to a later call: SPARSE_MLA_*_LIBRARY).
#   wheel: tools/build_wheel.py --fa3 into $OUT/wheel (the stable-ABI decode library, FA3 for this torch),
#   installed with pip into a folder beside this machine's torch; then the GPU suite against the
#   installed package (from outside the checkout), and a byte comparison of its libraries with bazel-bin's
#   (those the test step's //tests/... ran against). WHEEL=path: that wheel, built elsewhere, instead.
#   ab: the routed forward of an earlier tree and its libraries (.device/old/{py,tests,tools}, .device/libs_before)
#   against this tree's, alternating $AB_ROUNDS times (2), both cache formats, at $AB_HEADS x $AB_TOKENS;
#   new / old per cell (tools/ab_compare.py).
#   libs_ab: decode op libraries built elsewhere (.device/libs_NAME/libsparse_mla_decode.so, NAME in $AB_LIBS, the
#   first the baseline) on the decode path, in turn for $AB_ROUNDS rounds (2; the first checked against float32), at
#   $AB_HEADS (64,128) x $AB_TOKENS (64,128,512), both cache formats; then $AB_TESTS (test files, default the tile64
#   kernel's GPU tests; AB_SELECT: a pytest -k expression) against each library but the first; tools/ab_compare.py
#   prints each library / the first per cell (into libs_ab_compare.txt);
#   each run stops after $AB_TIMEOUT s (120: a library that hangs); the runs' files are packed into libs_ab.tgz. A library
#   whose folder holds tree/{py,tests,tools} (its branch's) runs with that tree's planner, bench and tests.
#   host_time: eager host µs per build and forward call, per route, vs a bare torch op (after build).
#   decode: (after decode_build or build) our decode kernel's GPU tests, and the decode and Triton paths
#   timed at small T (extra bench flags apply).
#   ncu: Nsight Compute on the decode kernel at N = 16 and 128, T = 512 on fp8_ds_mla (after decode_build or build).
#   ncu_fa3: Nsight Compute (--set full) on FA3's kernel and ours at the cell where FA3 leads most (bf16, N = 128,
#   T = 512: the same 64 x 64 tiles, docs/decode-kernels.md), one launch each, as the ncu step writes them
#   ($out/ncu_fa3/{fa3,decode}_bf16_128x512*); needs SPARSE_MLA_FA3_LIBRARY (or build).
#   memcheck: our kernels' GPU tests (decode kernels, FA3 route's conversion) under compute-sanitizer
#   memcheck, one process a test file as `bazel test` runs them (in one process the selection held 77 GiB of CUDA
#   memory and ran out of an H100's 79 GiB once 337 tests had passed, 2026-12-07), all logs in memcheck.log
#   (after decode or build; the FA3 ones only when FA3 was built); MEMCHECK_TESTS / MEMCHECK_SELECT narrow it,
#   and with SPARSE_MLA_DECODE_LIBRARY (as racecheck) it checks a candidate library of libs_ab without a build.
#   wgmma_probe: tools/wgmma_probe/run.sh (the swap-AB and tile64 kernels' wgmma cycles by operand pattern and
#   warpgroups) into $out/wgmma_probe.csv; needs nvcc only.
#   racecheck: the decode kernels' GPU tests (the tile64 and swap-AB kernels', a subset of the others') under racecheck;
#   RACECHECK_TESTS / RACECHECK_SELECT narrow it (the whole selection takes more than one 600 s call).
#   (tools/racecheck_probe/run.sh: racecheck on the swap-AB kernel's barrier protocol alone, every value checked.)
#   bench: the grid into $OUT/bench/ (fa3_kernel, fa3, triton, decode on the bf16 cache, triton and decode on the
#   fp8_ds_mla cache, then routed on each with the routing table those timings give, written to this GPU's
#   py/sparse_mla/routing_tables/<gpu>.json and copied to $OUT/bench/).
#   routing: the routing table from the whole grid, N 1..128 x T 1..8192 on both caches (bench's grid with routed timed
#   on it, then T 2048..8192 at 64 tokens a request; tools/make_routing_table.py over both), into $OUT/routing/.
#   side_by_side: the README's grid (results/2026-12-01-h200/): ours routed on both caches, the FA3 route, the decode
#   kernel and FlashMLA's kernels (FLASHMLA_LIBRARY=the path of vLLM 0.26.0's vllm/_flashmla_C.abi3.so, extracted
#   outside the checkout and shipped in .device/), into $out/side_by_side/ (bench.csv, side_by_side.png).
#   model_step: attention inside a decode step (tools/model_step_bench.py): 61 layers of a stand-in indexer,
#   write_kv and the routed forward in one CUDA graph, with and without the forward, next to the back-to-back
#   forward, both cache formats, N 16, 64, 128 x T 1..16, into $OUT/model_step/ (model_step.csv, .png, .log; its
#   summary line into summary.txt); after bench it runs with the routing table bench wrote. Extra flags apply.
#   bench, host_time, side_by_side and model_step with SPARSE_MLA_DECODE_LIBRARY set (a decode library built elsewhere,
#   e.g. on the CPU by tools/build_device_libs.sh): no build, this machine's python3 runs the tool; the FA3 paths need
#   SPARSE_MLA_FA3_LIBRARY too (FA3 built on the CPU against PyPI's torch 2.11.0+cu130 loads there), else bench leaves
#   them out and routes the FA3 cells to Triton (2026-12-07, an H100: the routing grid of N 1..128 x T 1..1024 took
#   68 s, the side-by-side grid and ncu 67 s).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-$PWD/gpu_out}
mkdir -p "$out"
steps=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do steps+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#steps[@]} -eq 0 ] && steps=(build test)

src=/tmp/sparse_mla_upstream
mkdir -p "$src" && tar xJf .device/upstream.tar.xz -C "$src"
export SGL_ATTN_SRC_DIR=$src/sgl-attn CUTLASS_SRC_DIR=$src/cutlass
export CC=/usr/bin/gcc  # the image's default /opt/gcc toolchain fails to link libstdc++
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PYTHON_BIN_PATH=${PYTHON_BIN_PATH:-$(python3 -c 'import sys; print(sys.executable)')}
# Every Bazel command goes through tools/bazel, as the README's do: it runs .device/bazel and, the
# machine having no network, adds --config=offline.
export BAZEL_REAL=$PWD/.device/bazel SPARSE_MLA_OFFLINE=1
chmod +x "$BAZEL_REAL"
bazel=tools/bazel
flags=(--config=sm90)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/summary.txt"
# pytest's closing line of each test target (or shard: test_dcp_gpu/shard_1_of_6) under the folders given.
test_counts() {
  find "$@" -name test.log 2>/dev/null | sort | while read -r log; do
    name=${log#*/*/}
    echo "  ${name%/test.log}: $(grep -E '[0-9]+ (passed|failed|skipped)' "$log" | tail -1)"
  done | tee -a "$out/summary.txt"
}
# The bench.csv of rounds 1..ROUNDS of NAME under DIR (DIR/NAME.ROUND/), comma-separated: round_csvs DIR NAME ROUNDS.
round_csvs() { seq "$3" | sed "s|.*|$1/$2.&/bench.csv|" | paste -sd,; }
# One launch at T = 512 under Nsight Compute: ncu_profile REPORT KERNEL [ncu flags] -- [bench flags]. Writes REPORT.log,
# REPORT.csv (details page), REPORT_sass.csv (per SASS instruction) and tools/ncu_sass_summary.py's tables of it
# (REPORT_summary.txt, _regions.csv, _opcodes.csv); the report (REPORT.ncu-rep) is kept where a step after the profile fails.
ncu_profile() {
  local report=$1 kernel=$2 ncu_flags=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do ncu_flags+=("$1"); shift; done
  shift
  mkdir -p "$(dirname "$report")"
  PYTHONPATH=py:tests ncu "${ncu_flags[@]}" --kernel-name "$kernel" --launch-count 1 --export "$report" --force-overwrite \
    python3 tools/bench.py "$@" --tokens=512 --replays=1 --warmup_replays=0 --nocheck --out_dir="${report}_bench" \
    > "$report.log" 2>&1 &&
    ncu --import "$report.ncu-rep" --csv --page details > "$report.csv" 2>> "$report.log" &&
    ncu --import "$report.ncu-rep" --csv --page source --print-source sass > "${report}_sass.csv" 2>> "$report.log" &&
    python3 tools/ncu_sass_summary.py "${report}_sass.csv" --regions_csv="${report}_regions.csv" \
      --opcodes_csv="${report}_opcodes.csv" > "${report}_summary.txt" 2>> "$report.log" &&
    rm -f "$report.ncu-rep"
}
# The tree a libs_ab library runs with: its own .device/libs_NAME/tree (its branch's py, tests, tools), else this one.
library_tree() { if [ -d ".device/libs_$1/tree" ]; then echo ".device/libs_$1/tree"; else echo .; fi; }
# Runs tools/NAME.py with the flags given: as Bazel's //tools:NAME (building what it needs), or, where the caller set
# SPARSE_MLA_DECODE_LIBRARY (steps that export it later do not count), directly with this machine's python3.
carried_decode_library=${SPARSE_MLA_DECODE_LIBRARY:-}
run_tool() {
  local name=$1
  shift
  if [ -n "$carried_decode_library" ]; then
    PYTHONPATH=py:tests:tools python3 "tools/$name.py" "$@"  # the caller's SPARSE_MLA_DECODE_LIBRARY is in the environment
  else
    "$bazel" run "${flags[@]}" "//tools:$name" -- "$@"
  fi
}
status=0
for step in "${steps[@]}"; do
  case "$step" in
    build)
      start=$(date +%s)
      "$bazel" build "${flags[@]}" //py:sparse_mla 2>&1 | tee "$out/build.log" | grep -E "Compiling CUDA|ERROR|error:|Elapsed|Build completed" | tail -40
      rc=${PIPESTATUS[0]}
      echo "build: rc=$rc wall=$(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
      find bazel-bin/cc/_objs -name "*.o" | sed "s/^/  object: /" | tee -a "$out/summary.txt"
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    decode_build)
      "$bazel" build "${flags[@]}" //cc:libsparse_mla_decode.so 2>&1 | tee "$out/build.log" | grep -E "ERROR|error:|Elapsed" | tail -20
      rc=${PIPESTATUS[0]}
      echo "decode_build: rc=$rc" | tee -a "$out/summary.txt"
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    test)
      # The design card's command, exactly: bazel test //tests/... --config=sm90
      start=$(date +%s)
      "$bazel" test //tests/... --config=sm90 2>&1 | tee "$out/test.log" | tail -40  # the log survives a time limit
      rc=${PIPESTATUS[0]}
      echo "test (bazel test //tests/... --config=sm90): rc=$rc wall=$(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
      test_counts bazel-testlogs/tests
      tar czf "$out/testlogs.tar.gz" -C bazel-testlogs tests
      python3 tools/ci/junit_summary.py bazel-testlogs | tee -a "$out/summary.txt"
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    gpu_test)
      "$bazel" test "${flags[@]}" --test_tag_filters=gpu //tests/... //examples/... 2>&1 | tail -30
      rc=${PIPESTATUS[0]}
      echo "gpu_test: rc=$rc" | tee -a "$out/summary.txt"
      test_counts bazel-testlogs/tests bazel-testlogs/examples
      tar czf "$out/testlogs.tar.gz" -C bazel-testlogs .
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    pytest_suite)
      # The GPU suite without a build: each tests/*/*_gpu.py under pytest (tools/testing/pytest_main.py, in the shards
      # tests/BUILD.bazel's GPU_TEST_SHARDS cuts it into, as bazel test does), SUITE_LANES (3) units side by side, each
      # within SUITE_TIMEOUT s (240), against SPARSE_MLA_DECODE_LIBRARY and SPARSE_MLA_FA3_LIBRARY (built on the CPU by
      # tools/build_device_libs.sh; else bazel-bin's); a line a unit, the logs in suite.log.
      export SPARSE_MLA_DECODE_LIBRARY=${SPARSE_MLA_DECODE_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_decode.so}
      export SPARSE_MLA_FA3_LIBRARY=${SPARSE_MLA_FA3_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_fa3.so}
      units=()  # FILE:SHARD:SHARDS
      for file in tests/*/*_gpu.py; do
        name=${file#tests/}
        shards=$(sed -n "s|^ *\"${name%.py}\": *\([0-9]*\),.*|\1|p" tests/BUILD.bazel)
        for shard in $(seq 0 $(( ${shards:-1} - 1 ))); do units+=("$file:$shard:${shards:-1}"); done
      done
      lanes=${SUITE_LANES:-3}
      for lane in $(seq 0 $(( lanes - 1 ))); do
        for i in "${!units[@]}"; do
          [ $(( i % lanes )) -eq "$lane" ] || continue
          IFS=: read -r file shard shards <<< "${units[$i]}"
          log=$out/suite.$(basename "$file" .py).$shard.log
          TEST_TOTAL_SHARDS=$shards TEST_SHARD_INDEX=$shard PYTHONPATH=py:tests timeout "${SUITE_TIMEOUT:-240}" \
            python3 tools/testing/pytest_main.py "$file" > "$log" 2>&1
          echo "$?" > "$log.rc"
          echo "pytest_suite $file (shard $((shard + 1)) of $shards): rc=$(cat "$log.rc") $(tail -1 "$log")" |
            tee -a "$out/summary.txt"
        done &
      done
      wait
      for unit in "${units[@]}"; do
        IFS=: read -r file shard _ <<< "$unit"
        log=$out/suite.$(basename "$file" .py).$shard.log
        [ "$(cat "$log.rc")" -eq 0 ] || status=1
        cat "$log" >> "$out/suite.log" && rm -f "$log" "$log.rc"
      done
      ;;
    libs)
      mkdir -p "$out/libs" && cp -f bazel-bin/cc/libsparse_mla_*.so "$out/libs/" && ls -la "$out/libs" | tee -a "$out/summary.txt"
      ;;
    wheel)
      rm -rf "$out/wheel" && mkdir -p "$out/wheel"
      if [ -n "${WHEEL:-}" ]; then  # a wheel built elsewhere, once
        rc=0 wheel=$WHEEL
      else
        python3 tools/build_wheel.py --fa3 --bazel "$bazel" --out "$out/wheel" -- "${flags[@]}" > "$out/wheel/build.log" 2>&1
        rc=$?
        wheel=$(tail -1 "$out/wheel/build.log")
      fi
      echo "wheel: rc=$rc $wheel ($(sha256sum < "$wheel" | cut -c1-16))" | tee -a "$out/summary.txt"
      # Installed with pip into a folder of its own on this interpreter's path, beside its torch (a venv
      # made from a venv's interpreter would see the base interpreter's packages, not torch's).
      site=$out/wheel/site
      python3 -m pip install --quiet --no-deps --no-index --target "$site" "$wheel"
      package=$(cd / && PYTHONPATH=$site python3 -c 'import os, sparse_mla; print(os.path.dirname(sparse_mla.__file__))')
      series=$(cd / && PYTHONPATH=$site python3 -c 'from sparse_mla.ops.library import TORCH_SERIES; print(TORCH_SERIES)')
      # One pytest process per GPU test file, $WHEEL_JOBS (4) at once on the one GPU; their logs end up in gpu_tests.log.
      (cd "$out/wheel" && ls "$OLDPWD"/tests/*/test_*_gpu.py | env -u SPARSE_MLA_DECODE_LIBRARY -u SPARSE_MLA_FA3_LIBRARY \
        PYTHONPATH="$site:$OLDPWD/tests" xargs -P "${WHEEL_JOBS:-4}" -I{} sh -c \
        'python3 -m pytest -q -p no:cacheprovider {} > "$(basename {} .py).log" 2>&1')
      for log in "$out"/wheel/test_*_gpu.log; do echo "$(basename "$log" .log): $(tail -1 "$log")"; done > "$out/wheel/gpu_tests.log"
      rm -f "$out"/wheel/test_*_gpu.log
      totals=$(grep -oE "[0-9]+ (passed|failed|skipped|error)" "$out/wheel/gpu_tests.log" |
               awk '{n[$2] += $1} END {for (k in n) printf "%d %s, ", n[k], k}')
      echo "wheel GPU suite (sparse_mla from $package): ${totals%, }" | tee -a "$out/summary.txt"
      # The wheel's libraries are the ones //tests/... ran against (the test step): byte for byte.
      same=yes
      [ -n "${WHEEL:-}" ] || for pair in "$package/libsparse_mla_decode.so bazel-bin/cc/libsparse_mla_decode.so" \
                  "$package/torch$series/libsparse_mla_fa3.so bazel-bin/cc/libsparse_mla_fa3.so"; do
        sha256sum $pair | tee -a "$out/summary.txt"
        cmp -s $pair || same=no
      done
      [ -n "${WHEEL:-}" ] || echo "wheel libraries identical to bazel-bin/cc's: $same" | tee -a "$out/summary.txt"
      [ "$rc" -eq 0 ] && [ "$same" = yes ] && grep -qE " passed" "$out/wheel/gpu_tests.log" &&
        ! grep -qE "[0-9]+ (failed|error)" "$out/wheel/gpu_tests.log" || status=1
      ;;
    bench)
      mkdir -p "$out/bench"
      run_tool bench --out_dir="$out/bench" --write_routing_table "$@" \
        > "$out/bench/bench.log" 2>&1
      rc=$?
      tail -60 "$out/bench/bench.log"
      echo "bench: rc=$rc" | tee -a "$out/summary.txt"
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    routing)
      # The routing table from the whole grid (results/2026-12-07-h100/routing/README.md): bench's pass over N 1..128 x
      # T 1..1024, one token a request, with routed timed on the table it writes (routing/grid/), then T 2048..8192 at 64
      # tokens a request (routing/large/); tools/make_routing_table.py writes this GPU's table
      # (py/sparse_mla/routing_tables/<gpu>.json) from both.
      mkdir -p "$out/routing/grid" "$out/routing/large"
      run_tool bench --out_dir="$out/routing/grid" --write_routing_table --heads=1,8,16,32,64,128 \
        --tokens=1,2,4,8,12,16,30,32,64,128,256,512,1024 --paths=fa3,triton,decode,routed --replays=15 "$@" \
        > "$out/routing/grid/bench.log" 2>&1 &&
        run_tool bench --out_dir="$out/routing/large" --heads=1,8,16,32,64,128 --tokens=2048,4096,8192 \
          --tokens_per_request=64 --paths=fa3,triton,decode --replays=10 "$@" > "$out/routing/large/bench.log" 2>&1 &&
        PYTHONPATH=py python3 tools/make_routing_table.py "$out/routing/grid/bench.csv" "$out/routing/large/bench.csv"
      rc=$?
      cp -f py/sparse_mla/routing_tables/*.json "$out/routing/"
      echo "routing: rc=$rc" | tee -a "$out/summary.txt"
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    side_by_side)
      mkdir -p "$out/side_by_side"
      run_tool bench --out_dir="$out/side_by_side" --paths=routed,fa3,decode,flashmla \
        --heads=16,32,64,128 --tokens=1,2,4,8,16,64,128,512 --replays=15 --flashmla_library="$FLASHMLA_LIBRARY" "$@" \
        > "$out/side_by_side/bench.log" 2>&1
      rc=$?
      python3 tools/plot_side_by_side.py "$out/side_by_side/bench.csv" "$out/side_by_side/side_by_side.png"
      tail -40 "$out/side_by_side/bench.log"
      echo "side_by_side: rc=$rc" | tee -a "$out/summary.txt"
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    model_step)
      mkdir -p "$out/model_step"
      run_tool model_step_bench --out_dir="$out/model_step" "$@" \
        > "$out/model_step/model_step.log" 2>&1
      rc=$?
      tail -40 "$out/model_step/model_step.log"
      echo "model_step: rc=$rc $(grep '^summary:' "$out/model_step/model_step.log" | tail -1)" | tee -a "$out/summary.txt"
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    ab)
      # Routed forward of an earlier tree (.device/old/{py,tests,tools}) with its libraries (.device/libs_before)
      # against this tree's (after build), alternating twice; tools/ab_compare.py prints new / old per cell.
      mkdir -p "$out/ab"
      cells=(--paths=routed --heads="${AB_HEADS:-16,64,128}" --tokens="${AB_TOKENS:-1,8,128,512}" --replays=20 --nocheck)
      rounds=${AB_ROUNDS:-2}
      for round in $(seq "$rounds"); do
        SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs_before/libsparse_mla_decode.so \
          SPARSE_MLA_FA3_LIBRARY=$PWD/.device/libs_before/libsparse_mla_fa3.so PYTHONPATH=.device/old/py:.device/old/tests \
          python3 .device/old/tools/bench.py "${cells[@]}" --git_revision=old --out_dir="$out/ab/old.$round" \
          > "$out/ab/old.$round.log" 2>&1 || status=1
        SPARSE_MLA_DECODE_LIBRARY=${SPARSE_MLA_DECODE_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_decode.so} \
          SPARSE_MLA_FA3_LIBRARY=${SPARSE_MLA_FA3_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_fa3.so} PYTHONPATH=py:tests \
          python3 tools/bench.py "${cells[@]}" --out_dir="$out/ab/new.$round" > "$out/ab/new.$round.log" 2>&1 || status=1
      done
      python3 tools/ab_compare.py "$(round_csvs "$out/ab" old "$rounds")" "$(round_csvs "$out/ab" new "$rounds")" |
        tee "$out/ab/compare.txt"
      echo "ab: rc=${PIPESTATUS[0]}" | tee -a "$out/summary.txt"
      ;;
    libs_ab)
      read -ra ab_libs <<< "${AB_LIBS:?libs_ab needs AB_LIBS, the names of .device/libs_NAME, the baseline first}"
      rounds=${AB_ROUNDS:-2}
      mkdir -p "$out/libs_ab"
      for round in $(seq "$rounds"); do
        check=--nocheck
        [ "$round" = 1 ] && check=--check
        for name in "${ab_libs[@]}"; do
          tree=$(library_tree "$name")
          SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs_$name/libsparse_mla_decode.so PYTHONPATH=$tree/py:$tree/tests \
            timeout "${AB_TIMEOUT:-120}" python3 "$tree/tools/bench.py" --paths=decode --heads="${AB_HEADS:-64,128}" \
            --tokens="${AB_TOKENS:-64,128,512}" --replays=15 $check --git_revision="$name" \
            --out_dir="$out/libs_ab/$name.$round" \
            > "$out/libs_ab/$name.$round.log" 2>&1 || status=1
        done
      done
      for name in "${ab_libs[@]:1}"; do
        echo "libs_ab: $name / ${ab_libs[0]}" | tee -a "$out/libs_ab_compare.txt"
        python3 tools/ab_compare.py "$(round_csvs "$out/libs_ab" "${ab_libs[0]}" "$rounds")" \
          "$(round_csvs "$out/libs_ab" "$name" "$rounds")" --columns=decode_us,decode_fp8_us |
          tee -a "$out/libs_ab_compare.txt"
        tree=$(library_tree "$name")
        SPARSE_MLA_DECODE_LIBRARY=$PWD/.device/libs_$name/libsparse_mla_decode.so PYTHONPATH=$tree/py:$tree/tests \
          timeout "${AB_TIMEOUT:-120}" python3 -m pytest -q -p no:cacheprovider -k "${AB_SELECT:-}" \
          $(printf " $tree/%s" ${AB_TESTS:-tests/ops/test_decode_tile64_gpu.py}) > "$out/libs_ab/$name.tests.log" 2>&1
        rc=$?
        echo "libs_ab: $name tests: rc=$rc $(tail -1 "$out/libs_ab/$name.tests.log")" | tee -a "$out/summary.txt"
        [ "$rc" -eq 0 ] || status=$rc
      done
      # One archive: a call brings back at most 8 files from $OUT (the device's README); each run here writes 3.
      tar czf "$out/libs_ab.tgz" -C "$out" libs_ab && rm -rf "$out/libs_ab"
      ;;
    host_time)
      mkdir -p "$out/host"
      run_tool bench --host_time --out_dir="$out/host" > "$out/host/host_time.log" 2>&1
      echo "host_time: rc=$?" | tee -a "$out/summary.txt"
      grep -A20 "host µs per eager call" "$out/host/host_time.log"
      ;;
    decode)
      export SPARSE_MLA_DECODE_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_decode.so
      PYTHONPATH=py:tests python3 -m pytest -q tests/ops/test_decode_gpu.py tests/ops/test_decode_dependent_launch_gpu.py \
        tests/ops/test_decode_swap_ab_gpu.py 2>&1 | tee "$out/decode_tests.log" | tail -25
      echo "decode tests: $(tail -1 "$out/decode_tests.log")" | tee -a "$out/summary.txt"
      mkdir -p "$out/decode_bench"
      PYTHONPATH=py:tests python3 tools/bench.py --paths=triton,decode --heads=16,32,64,128 --tokens=1,2,4,8,16,32 \
        --out_dir="$out/decode_bench" "$@" > "$out/decode_bench/bench.log" 2>&1
      echo "decode bench: rc=$?" | tee -a "$out/summary.txt"
      tail -25 "$out/decode_bench/bench.log"
      ;;
    ncu)
      # The decode kernel at the two hardest fp8_ds_mla cells of the throughput grid (N = 16 and 128, T = 512), one
      # launch each, under Nsight Compute (throughput, memory, occupancy, warp states, source counters), into $out/ncu/
      # as ncu_profile writes them; the regions table (by barrier-to-barrier region) also into the summary.
      export SPARSE_MLA_DECODE_LIBRARY=${SPARSE_MLA_DECODE_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_decode.so}
      for heads in 16 128; do
        ncu_profile "$out/ncu/decode_fp8_${heads}x512" "regex:sparse_decode" --section SpeedOfLight \
          --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
          --section WarpStateStats --section SchedulerStats --section SourceCounters -- --paths=decode \
          --cache_formats=fp8_ds_mla --heads=$heads
        rc=$?
        echo "ncu N=$heads T=512 fp8_ds_mla: rc=$rc (see $out/ncu/decode_fp8_${heads}x512.log)" | tee -a "$out/summary.txt"
        sed -n '/^ *lines /,$p' "$out/ncu/decode_fp8_${heads}x512_summary.txt" 2>/dev/null | tee -a "$out/summary.txt"
        [ "$rc" -eq 0 ] || status=$rc
      done
      ;;
    ncu_fa3)
      export SPARSE_MLA_DECODE_LIBRARY=${SPARSE_MLA_DECODE_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_decode.so}
      export SPARSE_MLA_FA3_LIBRARY=${SPARSE_MLA_FA3_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_fa3.so}
      for path_kernel in fa3:FlashAttnFwdSm90 decode:sparse_decode; do  # demangled names
        path=${path_kernel%%:*}
        ncu_profile "$out/ncu_fa3/${path}_bf16_128x512" "regex:${path_kernel#*:}" --kernel-name-base demangled \
          --set full --import-source yes -- --paths="$path" --cache_formats=bfloat16 --heads=128
        rc=$?
        echo "ncu_fa3 $path bf16 N=128 T=512: rc=$rc (see $out/ncu_fa3/${path}_bf16_128x512.log)" | tee -a "$out/summary.txt"
        [ "$rc" -eq 0 ] || status=$rc
      done
      ;;
    memcheck)
      export SPARSE_MLA_DECODE_LIBRARY=${SPARSE_MLA_DECODE_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_decode.so}
      [ -z "${SPARSE_MLA_FA3_LIBRARY:-}" ] && [ -f bazel-bin/cc/libsparse_mla_fa3.so ] &&
        export SPARSE_MLA_FA3_LIBRARY=$PWD/bazel-bin/cc/libsparse_mla_fa3.so
      # MEMCHECK_TESTS (test files) and MEMCHECK_SELECT (a pytest -k expression) narrow it, e.g. to one kernel's tests
      # against a candidate library (SPARSE_MLA_DECODE_LIBRARY=.device/libs_NAME/..., no FA3 library needed).
      read -ra memcheck_tests <<< "${MEMCHECK_TESTS:-tests/ops/test_decode_gpu.py tests/ops/test_decode_dependent_launch_gpu.py \
        tests/ops/test_decode_swap_ab_gpu.py tests/ops/test_decode_tile64_gpu.py tests/ops/test_fa3_gpu.py \
        tests/ops/test_token_metadata_gpu.py tests/backend/test_unusual_inputs_gpu.py tests/backend/test_dcp_gpu.py}"
      select=${MEMCHECK_SELECT-(not test_matches_reference or 16-1 or 128-4 or 7-33 or 128-16 or 64-33) and not test_fa3_matches_reference and not test_more_token_groups and not failed_cuda_call and (not test_dcp_simulated or (mixed and 128 and 8-16)) and (not test_topk_length or mixed) and not test_planned_at_throughput}
      : > "$out/memcheck.log"
      for file in "${memcheck_tests[@]}"; do
        log=$out/memcheck.$(basename "$file" .py).log
        PYTHONPATH=py:tests compute-sanitizer --tool memcheck --error-exitcode 1 --target-processes all python3 -m pytest -q "$file" \
          -k "$select" > "$log" 2>&1
        rc=$?
        [ "$rc" -eq 5 ] && rc=0  # pytest: the selection left no test of this file
        echo "memcheck $file: rc=$rc $(grep -E 'ERROR SUMMARY' "$log" | sort | uniq -c | tr '\n' ' ')" \
          "$(grep -vE '^=========' "$log" | grep -E '[0-9]+ (passed|failed|errors?|deselected)' | tail -1)" |
          tee -a "$out/summary.txt"
        cat "$log" >> "$out/memcheck.log" && rm -f "$log"
        [ "$rc" -eq 0 ] || status=$rc
      done
      ;;
    racecheck)
      # Shared-memory hazards of our decode kernels (compute-sanitizer racecheck): the swap-AB kernel's tests
      # and a subset of the 16/32-, 64-head and tile64 kernels' (the split counts and cache formats of each shape).
      export SPARSE_MLA_DECODE_LIBRARY=${SPARSE_MLA_DECODE_LIBRARY:-$PWD/bazel-bin/cc/libsparse_mla_decode.so}
      # RACECHECK_TESTS (test files) and RACECHECK_SELECT (a pytest -k expression) narrow it, e.g. to one kernel's.
      read -ra racecheck_tests <<< "${RACECHECK_TESTS:-tests/ops/test_decode_tile64_gpu.py tests/ops/test_decode_swap_ab_gpu.py tests/ops/test_decode_gpu.py}"
      PYTHONPATH=py:tests compute-sanitizer --tool racecheck --target-processes all python3 -m pytest -q "${racecheck_tests[@]}" \
        -k "${RACECHECK_SELECT:-swap_ab or test_any_split_count or (test_wide_kernel_matches_reference and (fp8_ds_mla-3- or bf16-8-)) or test_each_head_count or test_top_k_rows}" \
        > "$out/racecheck.log" 2>&1
      echo "racecheck: rc=$? $(grep -E 'RACECHECK SUMMARY' "$out/racecheck.log" | sort | uniq -c | tr '\n' ' ') $(tail -1 "$out/racecheck.log")" | tee -a "$out/summary.txt"
      ;;
    wgmma_probe)
      bash tools/wgmma_probe/run.sh "$out/wgmma_probe.csv" > "$out/wgmma_probe.log" 2>&1
      rc=$?
      echo "wgmma_probe: rc=$rc" | tee -a "$out/summary.txt"
      cat "$out/wgmma_probe.csv" 2>/dev/null
      [ "$rc" -eq 0 ] || status=$rc
      ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
cat "$out/summary.txt"
exit $status
