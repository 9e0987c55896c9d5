#!/usr/bin/env bash
# This consumer workspace's checks, through sparse_mla's tools/bazel (CI runs the CPU ones):
#   run_tests.sh        every test on the CPU; sparse_mla's package queried without downloading the
#                       FA3 sources; //:fa3_op_test analysed, and its build must stop with
#                       sparse_mla's advice instead of compiling CUDA
#   run_tests.sh sm90   on a Hopper machine with CUDA: every test, //:fa3_op_test built and run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
bazel=../../tools/bazel
case "${1:-cpu}" in
  cpu)
    "$bazel" test //...
    # Every select branch, the CUDA one included: placeholders, not a download (CI has no GitHub).
    "$bazel" query 'deps(@sparse_mla//py:sparse_mla)' >/dev/null
    "$bazel" build --nobuild //:fa3_op_test
    log=$(mktemp)
    if "$bazel" build //:fa3_op_test 2>"$log"; then
      echo "run_tests.sh: //:fa3_op_test built without --config=sm90; expected sparse_mla to refuse" >&2
      exit 1
    fi
    grep -q "sparse_mla: @sparse_mla//cc:fa3 is CUDA code" "$log" || {
      cat "$log" >&2
      echo "run_tests.sh: the build of //:fa3_op_test failed without sparse_mla's advice" >&2
      exit 1
    }
    rm -f "$log"
    echo "run_tests.sh: //:fa3_op_test analyses on the CPU; its build stops with sparse_mla's advice"
    ;;
  sm90) "$bazel" test --config=sm90 //... //:fa3_op_test ;;
  *) echo "usage: run_tests.sh [cpu|sm90]" >&2; exit 2 ;;
esac
