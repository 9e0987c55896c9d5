"""`python_configure`: one Python interpreter and the PyTorch it imports, as @sparse_mla_python.

Environment variables read (declared in `environ`):
  PYTHON_BIN_PATH  the interpreter to use (absolute path). Checked first.
  PATH             searched for `python3` when PYTHON_BIN_PATH is not set.
Everything else comes from asking that interpreter: PyTorch's headers and libraries and its C++ ABI
flag. Our tests and tools run under this interpreter by its path (tools/testing/python.bzl), so the
Python packages the library needs (torch, triton, numpy, pytest, absl-py) must be installed for it.
It is no Python toolchain: a monorepo's own py_binary / py_test targets keep their interpreter.
Generates:
  :torch        cc_library with PyTorch's headers and libraries, and the headers of the CUDA
                library wheels (nvidia-cublas, nvidia-cusparse, ...) its CUDA headers include; code
                compiled with it runs only in this PyTorch version, under TORCH_CXX_STD.
  :torch_stable  cc_library for code built against PyTorch's stable ABI (torch/csrc/stable,
                torch/headeronly): the headers, and libtorch.so / libtorch_cpu.so (the C shim; the
                former pulls in libtorch_cuda.so where PyTorch has CUDA), so one build loads in every
                PyTorch from the version it targets (TORCH_TARGET_VERSION) on.
  :torch_abi    cc_library carrying only PyTorch's _GLIBCXX_USE_CXX11_ABI define.
  interpreter.bzl  PYTHON_INTERPRETER (absolute path), TORCH_CXX11_ABI, TORCH_VERSION ("2.13") and
                TORCH_CXX_STD (the -std= its ATen/c10 headers need: c++20 from PyTorch 2.14 on).
"""

# Prints one `key=value` per line (Bazel 2.x Starlark has no JSON decoder).
_PROBE = """
import os, sys
import torch
print("torch_root=" + os.path.dirname(torch.__file__))
print("torch_version=" + torch.__version__)
print("cxx11_abi=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
print("python_version=%d.%d" % sys.version_info[:2])
try:
    import nvidia  # CUDA library wheels (cuBLAS, cuSPARSE, ...) whose headers torch's CUDA headers include
    for root in nvidia.__path__:
        for name in sorted(os.listdir(root)):
            if os.path.isdir(os.path.join(root, name, "include")):
                print("nvidia_include_%s=%s" % (name, os.path.join(root, name, "include")))
except ImportError:
    pass
"""

_TORCH_LIBS = ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so"]

_BUILD = """\
# @sparse_mla_python: Python {python_version} at {interpreter}, PyTorch {torch_version}.
package(default_visibility = ["//visibility:public"])

# The C++ ABI PyTorch was built with; every C++ and CUDA object linked with it must agree.
cc_library(
    name = "torch_abi",
    defines = ["_GLIBCXX_USE_CXX11_ABI={abi}"],
)

cc_library(
    name = "torch",
    srcs = {libs},
    hdrs = glob(["torch/include/**/*.h", "torch/include/**/*.hpp", "torch/include/**/*.cuh", "nvidia/*/include/**"]),
    includes = ["torch/include", "torch/include/torch/csrc/api/include"] + {nvidia_includes},
    deps = [":torch_abi"],
)

cc_library(
    name = "torch_stable",
    srcs = ["torch/lib/libtorch.so", "torch/lib/libtorch_cpu.so"],
    hdrs = glob(["torch/include/torch/csrc/stable/**/*.h", "torch/include/torch/csrc/inductor/aoti_torch/c/*.h",
                 "torch/include/torch/headeronly/**/*.h"]),
    includes = ["torch/include"],
)
"""

CXX20_MIN_TORCH = (2, 14)
"""From PyTorch 2.14 on, ATen's and c10's headers stop with `#error C++20 or later ... is required`."""

def _major_minor(version):
    """`(major, minor)` of a version string such as "2.14.1+cu130"."""
    parts = version.split(".")
    return (int(parts[0]), int(parts[1]))

def _fail(message):
    fail("sparse_mla: @sparse_mla_python: " + message)

def _python_configure_impl(ctx):
    interpreter = ctx.os.environ.get("PYTHON_BIN_PATH", "")
    if not interpreter:
        found = ctx.which("python3")
        if not found:
            _fail("no python3 on PATH; set PYTHON_BIN_PATH to the interpreter that has PyTorch")
        interpreter = str(found)
    if not ctx.path(interpreter).exists:
        _fail("PYTHON_BIN_PATH=%s does not exist" % interpreter)
    result = ctx.execute([interpreter, "-c", _PROBE])
    if result.return_code != 0:
        last_line = (result.stderr.strip().splitlines() or ["no output"])[-1]
        _fail("%s cannot import torch (%s); install PyTorch for it or set PYTHON_BIN_PATH" % (interpreter, last_line))
    info = dict([line.split("=", 1) for line in result.stdout.strip().splitlines()])
    ctx.symlink(info["torch_root"] + "/include", "torch/include")
    nvidia_includes = []
    for key in sorted(info.keys()):
        if key.startswith("nvidia_include_"):
            link = "nvidia/%s/include" % key[len("nvidia_include_"):]
            ctx.symlink(info[key], link)
            nvidia_includes.append(link)
    libs = []
    for lib in _TORCH_LIBS:
        path = info["torch_root"] + "/lib/" + lib
        if ctx.path(path).exists:
            ctx.symlink(path, "torch/lib/" + lib)
            libs.append("torch/lib/" + lib)
    ctx.file("BUILD.bazel", _BUILD.format(
        python_version = info["python_version"],
        interpreter = interpreter,
        torch_version = info["torch_version"],
        libs = repr(libs),
        nvidia_includes = repr(nvidia_includes),
        abi = info["cxx11_abi"],
    ))
    torch_version = _major_minor(info["torch_version"])
    ctx.file("interpreter.bzl", "\n".join([
        "PYTHON_INTERPRETER = %r" % interpreter,
        "TORCH_CXX11_ABI = %s" % info["cxx11_abi"],
        "TORCH_VERSION = %r" % ("%d.%d" % torch_version),
        "TORCH_CXX_STD = %r" % ("c++20" if torch_version >= CXX20_MIN_TORCH else "c++17"),
        "",
    ]))

python_configure = repository_rule(
    implementation = _python_configure_impl,
    doc = "The configured Python interpreter and its PyTorch (see module docstring).",
    environ = ["PYTHON_BIN_PATH", "PATH"],
    local = True,
)
