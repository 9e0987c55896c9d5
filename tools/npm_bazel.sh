#!/usr/bin/env bash
# Prints the path of the self-contained Bazel of .bazelversion (npm's @bazel/bazel-linux_x64), installing it once into
# $SPARSE_MLA_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/sparse_mla): tools/bazel runs it where no other Bazel is
# given, tools/device_bundle.sh carries it to the device (which has no Java for another Bazel).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${SPARSE_MLA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparse_mla}
version=$(<"$root/.bazelversion")
prefix=$cache/bazel-$version
binary=$prefix/node_modules/@bazel/bazel-linux_x64/bazel-$version-linux-x86_64
if [ ! -x "$binary" ]; then
  command -v npm >/dev/null || {
    echo "tools/bazel: no bazel on PATH and no npm to install Bazel $version with (Debian: apt-get install npm)" >&2
    exit 1
  }
  echo "tools/bazel: installing Bazel $version (npm @bazel/bazel-linux_x64) into $prefix" >&2
  npm install --silent --no-audit --no-fund --prefix "$prefix" "@bazel/bazel-linux_x64@$version" >&2
fi
echo "$binary"
