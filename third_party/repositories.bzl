"""`sparse_mla_dependencies()`: every external repository sparse_mla needs, each under `maybe`.

A host monorepo calls this from its own WORKSPACE after declaring any repository it wants to keep
its own version of; names carry a `sparse_mla_` prefix so FA3's pinned CUTLASS never collides with
a host project's `cutlass`.
"""

load("@bazel_tools//tools/build_defs/repo:utils.bzl", "maybe")
load("//third_party/cuda:cuda_configure.bzl", "cuda_configure")
load("//third_party/cutlass:workspace.bzl", "cutlass_repository")
load("//third_party/python:python_configure.bzl", "python_configure")
load("//third_party/sgl_attn:workspace.bzl", "sgl_attn_repository")

def sparse_mla_dependencies():
    maybe(sgl_attn_repository, name = "sparse_mla_sgl_attn")
    maybe(cutlass_repository, name = "sparse_mla_cutlass")
    maybe(cuda_configure, name = "sparse_mla_cuda")
    maybe(python_configure, name = "sparse_mla_python")

def sparse_mla_register_toolchains():
    """Registers @sparse_mla_python's interpreter as Bazel's Python toolchain.

    Plain py_binary / py_test targets then run the interpreter that has PyTorch (PYTHON_BIN_PATH, or
    python3 on PATH when Bazel started), also under --incompatible_strict_action_env, whose PATH
    (/bin:/usr/bin:/usr/local/bin) would otherwise give them the system's python3. Call it after
    sparse_mla_dependencies(); a Python toolchain registered before it takes precedence.
    """
    native.register_toolchains("@sparse_mla_python//:py_toolchain")
