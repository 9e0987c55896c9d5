#!/usr/bin/env bash
# Prints the path of Debian's Bazel 4.2.3 (package bazel-bootstrap), installing it where missing.
# Its /usr/bin/bazel launcher is diverted to /usr/bin/bazel.debian first, so `bazel` on PATH, and
# with it what tools/bazel runs by default, stays as it was; callers pass the path as BAZEL_REAL.
set -euo pipefail
binary=/usr/bin/bazel-4
if [ ! -x "$binary" ]; then
  if [[ "$(dpkg-divert --list /usr/bin/bazel)" != *bazel.debian* ]]; then
    dpkg-divert --local --rename --divert /usr/bin/bazel.debian --add /usr/bin/bazel >&2
  fi
  echo "debian_bazel.sh: installing bazel-bootstrap (Bazel 4.2.3)" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bazel-bootstrap >/dev/null
fi
echo "$binary"
