"""Public CUDA rules of sparse_mla: load from here, not from the files behind it."""

load("//tools/cuda:compile.bzl", "cuda_objects")

def cuda_library(name, srcs, deps = [], defines = [], visibility = None, tags = []):
    """A cc_library of CUDA sources compiled for sm_90a with the fixed flags of //tools/cuda:flags.bzl.

    Args:
      name: the cc_library's name; `<name>_objects` is the cuda_objects target behind it.
      srcs: `.cu` sources, one nvcc action each.
      deps: cc_library targets (headers, includes, defines); also linked into the library.
      defines: preprocessor defines of these sources only.
      visibility: of both targets.
      tags: of both targets.
    """
    cuda_objects(
        name = name + "_objects",
        srcs = srcs,
        deps = deps,
        defines = defines,
        tags = tags,
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_objects"],
        deps = deps + ["@sparse_mla_cuda//:cudart"],
        alwayslink = True,
        visibility = visibility,
        tags = tags,
    )
