"""`cuda_configure`: the local CUDA toolkit (nvcc, headers, cudart) as @sparse_mla_cuda.

Environment variables read (declared in `environ`):
  CUDA_HOME  the toolkit root (holding bin/nvcc); checked first.
  CUDA_PATH  the same, as some installers name it.
  PATH       searched for nvcc when neither is set (a wrapper script is fine: nvcc's dry run
             names the real toolkit root).
When no toolkit is found, or it is older than MIN_CUDA_VERSION, the repository is a dummy: CPU
builds and tests still work, and building any CUDA target fails with a message saying what to
install or which variable to set.
"""

MIN_CUDA_VERSION = (12, 4)  # FA3's Hopper kernels need CUDA >= 12.3; SGLang builds them with >= 12.4.

_DUMMY_BUILD = """\
# Dummy @sparse_mla_cuda: {reason}
package(default_visibility = ["//visibility:public"])

genrule(
    name = "nvcc",
    outs = ["nvcc_missing.sh"],
    cmd = "echo 'sparse_mla: {reason}' >&2; exit 1",
)

cc_library(name = "cuda_headers")

cc_library(name = "cudart")
"""

_BUILD = """\
# @sparse_mla_cuda: CUDA {version} from {root}
package(default_visibility = ["//visibility:public"])

exports_files(["cuda/bin/nvcc"])

alias(name = "nvcc", actual = "cuda/bin/nvcc")

filegroup(
    name = "nvcc_files",
    srcs = glob(["cuda/bin/**", "cuda/nvvm/**"]),
)

cc_library(
    name = "cuda_headers",
    hdrs = glob(["cuda/include/**"]),
    includes = ["cuda/include"],
)

cc_library(
    name = "cudart",
    srcs = ["cuda/{cudart}"],
    deps = [":cuda_headers"],
)
"""

def _find_root(ctx):
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = ctx.os.environ.get(var, "")
        if root:
            if not ctx.path(root + "/bin/nvcc").exists:
                return None, "%s=%s has no bin/nvcc; point it at a CUDA toolkit root" % (var, root)
            return root, None
    nvcc = ctx.which("nvcc")
    if not nvcc:
        return None, "no CUDA toolkit found: install CUDA >= 12.4 and set CUDA_HOME or put nvcc on PATH"

    # nvcc on PATH may be a wrapper script; its dry run names the real toolkit: "#$ TOP=<root>/bin/..".
    dryrun = ctx.execute([nvcc, "--dryrun", "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"])
    for line in (dryrun.stdout + dryrun.stderr).splitlines():
        if line.startswith("#$ TOP=") and line.endswith("/bin/.."):
            return line[len("#$ TOP="):-len("/bin/..")], None
    return None, "%s did not report its toolkit root; set CUDA_HOME" % nvcc

def _version(ctx, root):
    result = ctx.execute([root + "/bin/nvcc", "--version"])
    for line in result.stdout.splitlines():
        if "release" in line:
            release = line.split("release ")[1].split(",")[0]
            return tuple([int(x) for x in release.split(".")])
    return None

def _cuda_configure_impl(ctx):
    root, reason = _find_root(ctx)
    version = _version(ctx, root) if root else None
    if root and (version == None or version < MIN_CUDA_VERSION):
        reason = "CUDA at %s is %s, need >= %d.%d; set CUDA_HOME to a newer toolkit" % (
            root,
            ".".join([str(v) for v in version]) if version else "unknown",
            MIN_CUDA_VERSION[0],
            MIN_CUDA_VERSION[1],
        )
    if reason:
        ctx.file("BUILD.bazel", _DUMMY_BUILD.format(reason = reason.replace("'", "")))
        return
    ctx.symlink(root, "cuda")
    cudart = "lib64/libcudart.so"
    if not ctx.path(root + "/" + cudart).exists:
        cudart = "targets/x86_64-linux/lib/libcudart.so"
    ctx.file("BUILD.bazel", _BUILD.format(
        version = ".".join([str(v) for v in version]),
        root = root,
        cudart = cudart,
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    doc = "The local CUDA toolkit, or a dummy that explains what is missing (see module docstring).",
    environ = ["CUDA_HOME", "CUDA_PATH", "PATH"],
    local = True,
)
