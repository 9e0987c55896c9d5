"""Macros for cc/: a kernel family's libraries, its stable-ABI torch op, and the shared op library Python loads.

A kernel family lives in its own folder cc/<family>/ (decode/, metadata/, fa3/, and later others) with a
BUILD.bazel of a cuda_kernel_family and, where it has a torch op of its own, a stable_torch_op; cc/BUILD.bazel
links the ops into the shared libraries with torch_op_library.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library")
load("//tools/cuda:defs.bzl", "cuda_library", "cuda_public_library")

TORCH_STABLE_TARGET = "0x020b000000000000"
"""The oldest PyTorch the stable-ABI library loads in: 2.11 (TORCH_TARGET_VERSION's encoding,
major << 56 | minor << 48); the stable headers then leave out every API that is newer."""

STABLE_OP_COPTS = ["-std=c++17", "-O3", "-DTORCH_TARGET_VERSION=" + TORCH_STABLE_TARGET]
"""Host copts of an op built against PyTorch's stable ABI only (no ATen or c10 header)."""

NO_UNDEFINED_SYMBOLS = ["-Wl,-z,defs"]
"""Every symbol resolved at link time: an mha_fwd declared differently from hopper/flash_api.cpp's, or
a stable-ABI function missing from the shim, fails the build instead of torch.ops.load_library."""

def cuda_kernel_family(name, hdrs, srcs, deps = [], device_hdrs = [], device_deps = []):
    """A family of our CUDA kernels: `<name>_header`, `<name>_device` (with device_hdrs) and `<name>_kernels`.

    They need only the CUDA headers, so CI compiles them for sm_90a without any upstream source.

    Args:
      name: the family; prefix of the three targets.
      hdrs: launch parameters and host entry points, free of device code: what an op includes.
      srcs: `.cu` sources (launchers, one template instantiation per file), compiled for sm_90a (`manual`).
      deps: libraries hdrs include (the CUDA headers are added).
      device_hdrs: the kernel templates and their parts, seen by srcs only.
      device_deps: libraries device_hdrs include.
    """
    cc_library(
        name = name + "_header",
        hdrs = hdrs,
        deps = deps + ["@sparse_mla_cuda//:cuda_headers"],
    )
    kernel_deps = [":" + name + "_header"]
    if device_hdrs:
        cc_library(
            name = name + "_device",
            hdrs = device_hdrs,
            deps = kernel_deps + device_deps,
        )
        kernel_deps = [":" + name + "_device"]
    cuda_library(
        name = name + "_kernels",
        srcs = srcs,
        tags = ["manual"],
        deps = kernel_deps,
    )

def stable_torch_op(name, srcs, deps):
    """Torch ops built against PyTorch's stable ABI (one build for every torch from TORCH_STABLE_TARGET on).

    Args:
      name: the cc_library (`manual`, alwayslink: its op registrations must be linked).
      srcs: the op sources (argument checks, launches, STABLE_TORCH_LIBRARY registrations).
      deps: the family's `_header` and `_kernels`; the argument checks, the stream helper, the CUDA headers
        and the stable torch headers are added.
    """
    cc_library(
        name = name,
        srcs = srcs,
        copts = STABLE_OP_COPTS,
        tags = ["manual"],
        deps = deps + [
            "//cc/common:op_checks",
            "//cc/common:stable_cuda",
            "@sparse_mla_cuda//:cuda_headers",
            "@sparse_mla_python//:torch_stable",
        ],
        alwayslink = True,
    )

def torch_op_library(name, public_name, deps, public_deps = []):
    """The shared library Python loads with torch.ops.load_library, and the face C++ targets depend on.

    Args:
      name: the `lib*.so` (every symbol resolved at link time; visible to //py, which ships it).
      public_name: the cuda_public_library of the same ops for C++ targets of a monorepo (CUDA code: without
        --config=sm90 it is skipped by `//...` or stops with that advice).
      deps: the op libraries linked in.
      public_deps: what the public face adds (e.g. PyTorch's C++ API, to call the ops through its dispatcher).
    """
    cc_binary(
        name = name,
        linkopts = NO_UNDEFINED_SYMBOLS,
        linkshared = True,
        tags = ["manual"],
        visibility = ["//py:__pkg__"],
        deps = deps,
    )
    cuda_public_library(
        name = public_name,
        deps = deps + public_deps,
    )
