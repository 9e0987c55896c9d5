"""Public CUDA rules and macros of sparse_mla: load from here, not from the files behind it."""

load("@rules_cc//cc:defs.bzl", "cc_library")
load("@sparse_mla_bazel_features//:features.bzl", "TARGET_COMPATIBLE_WITH")
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
    cc_library(
        name = name,
        srcs = [":" + name + "_objects"],
        deps = deps + ["@sparse_mla_cuda//:cudart"],
        alwayslink = True,
        visibility = visibility,
        tags = tags,
    )

def cuda_public_library(name, deps, visibility = ["//visibility:public"]):
    """The face a monorepo's C++ targets depend on, for CUDA code built only with CUDA enabled.

    With --@sparse_mla//tools/cuda:enable_cuda=true (--config=sm90) it is a cc_library of `deps`.
    Without it, on Bazel >= 4 it is incompatible (`target_compatible_with`): `bazel build //...` and
    `bazel test //...` skip it and every target depending on it, and a target requested by name
    fails naming //tools/cuda:built_only_with_config_sm90. On Bazel 2.1, which has no such
    attribute, it is a library whose one header is made by an action that fails with our advice:
    every compile depending on it waits for that header, so the advice is the first error.

    Args:
      name: the public target, `@sparse_mla//<package>:<name>`.
      deps: the cc_library targets it stands for.
      visibility: of `name`.
    """
    label = "@sparse_mla//%s:%s" % (native.package_name(), name)
    native.genrule(
        name = name + "_needs_cuda_error",
        outs = [name + "_needs_cuda.h"],
        cmd = ("echo 'sparse_mla: %s is CUDA code, built only with " +
               "--@sparse_mla//tools/cuda:enable_cuda=true and --repo_env=SPARSE_MLA_ENABLE_CUDA=1 " +
               "(the sm90 config); to keep a CPU //... green on Bazel 2.1, tag what depends on it and " +
               "filter the tag (sparse_mla docs/building.md, Consuming it from another monorepo)' >&2; exit 1") % label,
        tags = ["manual"],
    )
    cc_library(
        name = name + "_needs_cuda",
        hdrs = [":" + name + "_needs_cuda_error"],
        tags = ["manual"],
    )
    compatibility = {}
    if TARGET_COMPATIBLE_WITH:
        compatibility["target_compatible_with"] = select({
            "//tools/cuda:cuda_enabled": [],
            "//conditions:default": ["//tools/cuda:built_only_with_config_sm90"],
        })
    cc_library(
        name = name,
        deps = select({
            "//tools/cuda:cuda_enabled": deps,
            "//conditions:default": [":" + name + "_needs_cuda"],
        }),
        tags = ["manual"],
        visibility = visibility,
        **compatibility
    )
