"""Link settings shared by our torch op libraries (cc/*/BUILD.bazel and the shared libraries of cc/)."""

TORCH_STABLE_TARGET = "0x020b000000000000"
"""The oldest PyTorch the stable-ABI library loads in: 2.11 (TORCH_TARGET_VERSION's encoding,
major << 56 | minor << 48); the stable headers then leave out every API that is newer."""

STABLE_OP_COPTS = ["-std=c++17", "-O3", "-DTORCH_TARGET_VERSION=" + TORCH_STABLE_TARGET]
"""Host copts of an op built against PyTorch's stable ABI only (no ATen or c10 header)."""

NO_UNDEFINED_SYMBOLS = ["-Wl,-z,defs"]
"""Every symbol resolved at link time: an mha_fwd declared differently from hopper/flash_api.cpp's, or
a stable-ABI function missing from the shim, fails the build instead of torch.ops.load_library."""
