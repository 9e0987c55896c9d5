"""`sparse_mla_dependencies()`: every external repository sparse_mla needs, each under `maybe`.

A host monorepo calls this from its own WORKSPACE after declaring any repository it wants to keep
its own version of; names carry a `sparse_mla_` prefix so FA3's pinned CUTLASS never collides with
a host project's `cutlass`. No toolchain is registered: a host's own Python and C++ targets build
and run as before.
"""

load("@bazel_tools//tools/build_defs/repo:utils.bzl", "maybe")
load("//third_party/bazel:bazel_features.bzl", "bazel_features")
load("//third_party/cuda:cuda_configure.bzl", "cuda_configure")
load("//third_party/cutlass:workspace.bzl", "cutlass_repository")
load("//third_party/python:python_configure.bzl", "python_configure")
load("//third_party/sgl_attn:workspace.bzl", "sgl_attn_repository")

def sparse_mla_dependencies():
    maybe(bazel_features, name = "sparse_mla_bazel_features")
    maybe(sgl_attn_repository, name = "sparse_mla_sgl_attn")
    maybe(cutlass_repository, name = "sparse_mla_cutlass")
    maybe(cuda_configure, name = "sparse_mla_cuda")
    maybe(python_configure, name = "sparse_mla_python")
