#!/usr/bin/env bash
# Assembles, on a CPU machine with PyPI and npm, the folder tools/gpu_routine.sh expects on a Hopper machine without
# network (default .device/, git-ignored; carry it with the run), each part only where it is missing (delete a part to
# remake it):
#   upstream.tar.xz  sgl-attn/hopper/ of SGL_ATTN_SRC_DIR and cutlass/{include,tools/util/include} of CUTLASS_SRC_DIR
#                    (the sources the build pins, docs/building.md), for gpu_routine's build steps;
#   bazel            the self-contained Bazel of .bazelversion (tools/npm_bazel.sh: npm @bazel/bazel-linux_x64, in
#                    $SPARSE_MLA_CACHE; the device has no Java for another Bazel);
#   flashmla/        vllm/_flashmla_C.abi3.so and vllm/third_party/flashmla/flash_mla_interface.py of vLLM 0.26.0's
#                    wheel from PyPI: FlashMLA's Hopper kernels as the shared anchors ran them, for side_by_side;
#   libs_head/       the op libraries of this checkout, tools/build_device_libs.sh's, so that the benchmark,
#                    memcheck and libs_ab steps need no device build (its REVISION names the commit; a warning
#                    says when that is not the checkout's).
# Usage: SGL_ATTN_SRC_DIR=... CUTLASS_SRC_DIR=... tools/device_bundle.sh [DIR] (both directories required)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mkdir -p "${1:-$root/.device}" && cd "${1:-$root/.device}" && pwd)
: "${SGL_ATTN_SRC_DIR:?the sgl-attn sources (with hopper/): SGL_ATTN_SRC_DIR}"
: "${CUTLASS_SRC_DIR:?the CUTLASS sources (with include/): CUTLASS_SRC_DIR}"
flashmla_vllm=0.26.0  # the wheel the shared anchors took FlashMLA's Hopper kernels from

# The libraries first: their build checks the sources against the pins (third_party/pinned_source.bzl), so a tree of
# another version stops the bundle before it is packed.
[ -f "$out/libs_head/libsparse_mla_decode.so" ] || "$root/tools/build_device_libs.sh" "$out/libs_head"

if [ ! -f "$out/upstream.tar.xz" ]; then
  staging=$(mktemp -d)
  mkdir -p "$staging/sgl-attn" "$staging/cutlass/tools/util"
  cp -r "$SGL_ATTN_SRC_DIR/hopper" "$staging/sgl-attn/"
  cp -r "$CUTLASS_SRC_DIR/include" "$staging/cutlass/"
  cp -r "$CUTLASS_SRC_DIR/tools/util/include" "$staging/cutlass/tools/util/"
  tar cJf "$out/upstream.tar.xz" -C "$staging" sgl-attn cutlass
  rm -rf "$staging"
fi

if [ ! -x "$out/bazel" ]; then
  binary=$("$root/tools/npm_bazel.sh")
  install -m 0755 "$binary" "$out/bazel"
fi

if [ ! -f "$out/flashmla/_flashmla_C.abi3.so" ]; then
  wheels=$(mktemp -d)
  python3 -m pip download --quiet --disable-pip-version-check --no-deps "vllm==$flashmla_vllm" -d "$wheels"
  mkdir -p "$out/flashmla"
  python3 - "$wheels"/vllm-*.whl "$out/flashmla" <<'EOF'
import pathlib, sys, zipfile
wheel, target = sys.argv[1], pathlib.Path(sys.argv[2])
with zipfile.ZipFile(wheel) as archive:
    for member in ("vllm/_flashmla_C.abi3.so", "vllm/third_party/flashmla/flash_mla_interface.py"):
        (target / pathlib.Path(member).name).write_bytes(archive.read(member))
EOF
  rm -rf "$wheels"
fi

checkout=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || true)
built=$(cut -d' ' -f1 "$out/libs_head/REVISION" 2>/dev/null || true)
[ -z "$checkout" ] || [ "$built" = "$checkout" ] ||
  echo "tools/device_bundle.sh: $out/libs_head was built at '${built:-?}', the checkout is at $checkout:" \
    "delete it to rebuild" >&2
du -sh "$out"/*
