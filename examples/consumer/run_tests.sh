#!/usr/bin/env bash
# This consumer workspace's checks, through sparse_mla's tools/bazel (CI runs the CPU ones):
#   run_tests.sh        on the CPU: `bazel test //...` passes, its own py_test on its own python3
#                       and the C++ tests on sparse_mla's CUDA code skipped (Bazel >= 4) or left out
#                       by their tag (Bazel 2.1, --config=bazel2); sparse_mla's package queried
#                       without downloading the FA3 sources; each CUDA test requested by name stops
#                       with sparse_mla's advice as its first error, before any compile
#   run_tests.sh sm90   on a Hopper machine with CUDA: every test, the C++ ones built and run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
bazel=../../tools/bazel
cuda_tests=(//:fa3_op_test //:decode_op_test)

fail() {
  echo "run_tests.sh: $*" >&2
  exit 1
}

# "Build label: 2.1.0"; a build from source (Debian's 4.2.3) has no number ("Version information not
# available", exit 2) and is taken as newer. Read whole: `| grep -q` under pipefail fails when grep exits first.
version=$("$bazel" version 2>/dev/null || true)
if grep -q '^Build label: 2\.' <<<"$version"; then
  bazel2=1
else
  bazel2=0
fi

# `bazel build TARGET` must fail, its first error naming sparse_mla's advice, no compile started.
expect_refused() {
  local target=$1 advice log
  if [ "$bazel2" = 1 ]; then
    advice="sparse_mla: @sparse_mla//cc:.* is CUDA code, built only with"
  else
    advice="@sparse_mla//tools/cuda:built_only_with_config_sm90"
  fi
  log=$(mktemp)
  if "$bazel" build "$target" >"$log" 2>&1; then
    fail "$target built without --config=sm90; expected sparse_mla to refuse it"
  fi
  grep -q "$advice" "$log" || { cat "$log" >&2; fail "the build of $target failed without sparse_mla's advice"; }
  ! grep -q "No such file or directory" "$log" || { cat "$log" >&2; fail "$target: a compile ran before sparse_mla's advice"; }
  rm -f "$log"
  echo "run_tests.sh: $target stops with sparse_mla's advice"
}

case "${1:-cpu}" in
  cpu)
    log=$(mktemp)
    if [ "$bazel2" = 1 ]; then
      "$bazel" test --config=bazel2 //... 2>&1 | tee "$log"
    else
      "$bazel" test //... 2>&1 | tee "$log"
      for target in "${cuda_tests[@]}"; do
        grep -q "^$target .*SKIPPED" "$log" || fail "bazel test //... did not report $target as SKIPPED"
      done
    fi
    rm -f "$log"
    # Every select branch, the CUDA one included: placeholders, not a download (CI has no GitHub).
    "$bazel" query 'deps(@sparse_mla//py:sparse_mla)' >/dev/null
    for target in "${cuda_tests[@]}"; do
      expect_refused "$target"
    done
    ;;
  sm90) "$bazel" test --config=sm90 //... ;;
  *) echo "usage: run_tests.sh [cpu|sm90]" >&2; exit 2 ;;
esac
