"""`cuda_configure`: the CUDA toolkit (nvcc, headers, cudart) as @sparse_mla_cuda.

Environment variables read (declared in `environ`; `--repo_env` sets them):
  SPARSE_MLA_CUDA_TOOLKIT  which toolkit: `local` (the default) or `wheels`, the one flag that
             switches to CUDA 13.0 from PyPI's pinned wheels (cuda_wheels.bzl), downloaded by
             Bazel like the other pinned sources; then nothing below is read.
  CUDA_HOME  the local toolkit root (holding bin/nvcc); checked first.
  CUDA_PATH  the same, as some installers name it.
  PATH       searched for nvcc when neither is set (a wrapper script is fine: nvcc's dry run
             names the real toolkit root).
When no toolkit is found, or it is older than MIN_CUDA_VERSION, the repository is a dummy: CPU
builds and tests still work, and building any CUDA target fails first with a message saying what
to install, which variable to set, or that the wheels are one flag away.
"""

load("//third_party/cuda:cuda_wheels.bzl", "CUDA_WHEELS", "CUDA_WHEELS_VERSION")

MIN_CUDA_VERSION = (12, 4)  # FA3's Hopper kernels need CUDA >= 12.3; SGLang builds them with >= 12.4.

TOOLKIT_ENV = "SPARSE_MLA_CUDA_TOOLKIT"

_WHEELS_ADVICE = "or build with --repo_env=%s=wheels (CUDA %s from PyPI)" % (TOOLKIT_ENV, CUDA_WHEELS_VERSION)

# Every target of the real repository, each made by an action that fails with the reason: whatever
# CUDA target is built, that message is its first error.
_DUMMY_BUILD = """\
# Dummy @sparse_mla_cuda: {reason}
package(default_visibility = ["//visibility:public"])

genrule(
    name = "nvcc",
    outs = ["nvcc_missing.sh"],
    cmd = "echo 'sparse_mla: @sparse_mla_cuda: {reason}' >&2; exit 1",
    executable = True,
)

genrule(
    name = "cuda_headers_missing",
    outs = ["cuda_missing.h"],
    cmd = "echo 'sparse_mla: @sparse_mla_cuda: {reason}' >&2; exit 1",
)

filegroup(name = "nvcc_files")

cc_library(
    name = "cuda_headers",
    hdrs = [":cuda_missing.h"],
)

cc_library(
    name = "cudart",
    deps = [":cuda_headers"],
)
"""

_BUILD = """\
# @sparse_mla_cuda: CUDA {version} from {source}
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
        return None, "no CUDA toolkit found: install CUDA >= 12.4 and set CUDA_HOME or put nvcc on PATH, " + _WHEELS_ADVICE

    # nvcc on PATH may be a wrapper script; its dry run names the real toolkit: "#$ TOP=<root>/bin/..".
    dryrun = ctx.execute([nvcc, "--dryrun", "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"])
    for line in (dryrun.stdout + dryrun.stderr).splitlines():
        if line.startswith("#$ TOP=") and line.endswith("/bin/.."):
            return line[len("#$ TOP="):-len("/bin/..")], None
    return None, "%s did not report its toolkit root; set CUDA_HOME" % nvcc

def _fetch_wheels(ctx):
    """Extracts the pinned wheels into one tree; returns its root."""
    print("sparse_mla: @sparse_mla_cuda: downloading CUDA %s (%s) from PyPI; behind a TLS-intercepting proxy see README, 'Pinned sources'" % (  # buildifier: disable=print
        CUDA_WHEELS_VERSION,
        ", ".join([wheel.name for wheel in CUDA_WHEELS]),
    ))
    for wheel in CUDA_WHEELS:
        ctx.download_and_extract(url = wheel.url, sha256 = wheel.sha256, type = "zip", output = "_wheels")
    root = "_wheels/nvidia/cu13"

    # nvcc.profile looks for headers and libraries under targets/x86_64-linux, as a local toolkit has them.
    for folder in ("include", "lib"):
        ctx.symlink(ctx.path(root + "/" + folder), root + "/targets/x86_64-linux/" + folder)
    return str(ctx.path(root))

def _find_cudart(ctx, root):
    """The path of the shared cudart under `root`: libcudart.so, else a versioned one (the wheel's)."""
    for folder in ("lib64", "targets/x86_64-linux/lib", "lib"):
        if ctx.path("%s/%s/libcudart.so" % (root, folder)).exists:
            return folder + "/libcudart.so"
    for folder in ("lib64", "lib"):
        directory = ctx.path("%s/%s" % (root, folder))
        if directory.exists:
            for child in directory.readdir():
                if child.basename.startswith("libcudart.so."):
                    return folder + "/" + child.basename
    return None

def _version(ctx, root):
    result = ctx.execute([root + "/bin/nvcc", "--version"])
    for line in result.stdout.splitlines():
        if "release" in line:
            release = line.split("release ")[1].split(",")[0]
            return tuple([int(x) for x in release.split(".")])
    return None

def _cuda_configure_impl(ctx):
    toolkit = ctx.os.environ.get(TOOLKIT_ENV, "local") or "local"
    if toolkit == "wheels":
        root, reason, source = _fetch_wheels(ctx), None, "PyPI's wheels (third_party/cuda/cuda_wheels.bzl)"
    elif toolkit == "local":
        root, reason = _find_root(ctx)
        source = root
    else:
        fail("sparse_mla: @sparse_mla_cuda: %s expected local or wheels, got %r" % (TOOLKIT_ENV, toolkit))
    version = _version(ctx, root) if root else None
    if root and (version == None or version < MIN_CUDA_VERSION):
        reason = "CUDA at %s is %s, need >= %d.%d; set CUDA_HOME to a newer toolkit" % (
            root,
            ".".join([str(v) for v in version]) if version else "unknown",
            MIN_CUDA_VERSION[0],
            MIN_CUDA_VERSION[1],
        )
    cudart = _find_cudart(ctx, root) if not reason else None
    if not reason and not cudart:
        reason = "CUDA at %s has no libcudart.so under lib64/, targets/x86_64-linux/lib/ or lib/" % root
    if reason:
        ctx.file("BUILD.bazel", _DUMMY_BUILD.format(reason = reason.replace("'", "")))
        return
    ctx.symlink(root, "cuda")
    ctx.file("BUILD.bazel", _BUILD.format(
        version = ".".join([str(v) for v in version]),
        source = source,
        cudart = cudart,
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    doc = "The local CUDA toolkit or PyPI's, or a dummy that explains what is missing (see module docstring).",
    environ = [TOOLKIT_ENV, "CUDA_HOME", "CUDA_PATH", "PATH"],
    local = True,
)
