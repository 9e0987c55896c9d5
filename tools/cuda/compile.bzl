"""`cuda_objects`: compiles each `.cu` source with nvcc in its own action (mnemonic CudaCompile)."""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("//tools/cuda:flags.bzl", "ACTION_PATH", "NVCC_FLAGS")
load("//tools/cuda:providers.bzl", "CudaCompileInfo")

def _include_flags(compilation_context):
    flags = []
    for path in compilation_context.includes.to_list() + compilation_context.quote_includes.to_list():
        flags += ["-I", path]
    for path in compilation_context.system_includes.to_list():
        flags += ["-isystem", path]
    return flags

def _cuda_objects_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    compilation_context = cc_common.merge_cc_infos(cc_infos = [dep[CcInfo] for dep in ctx.attr.deps]).compilation_context
    defines = compilation_context.defines.to_list() + ctx.attr.defines
    flags = NVCC_FLAGS + ["-ccbin", cc_toolchain.compiler_executable] + ["-D" + d for d in defines] + _include_flags(compilation_context)
    inputs = depset(transitive = [compilation_context.headers, cc_toolchain.all_files])
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/%s/%s.pic.o" % (ctx.label.name, src.basename.rsplit(".", 1)[0]))
        args = ctx.actions.args()
        args.add_all(flags)
        args.add("-c", src)
        args.add("-o", obj)
        ctx.actions.run(
            executable = ctx.executable.nvcc,
            arguments = [args],
            inputs = depset([src], transitive = [inputs]),
            tools = ctx.files.nvcc_files,
            outputs = [obj],
            env = {"PATH": ACTION_PATH},
            mnemonic = "CudaCompile",
            progress_message = "Compiling CUDA %s" % src.short_path,
        )
        objects.append(obj)
    return [
        DefaultInfo(files = depset(objects)),
        CudaCompileInfo(flags = flags, objects = depset(objects)),
    ]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    doc = "Position-independent objects for sm_90a, one nvcc action per source. Use cuda_library.",
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"], doc = "CUDA sources; each is compiled on its own."),
        "deps": attr.label_list(providers = [CcInfo], doc = "cc_library targets whose headers, includes and defines the sources use."),
        "defines": attr.string_list(doc = "Preprocessor defines of these sources only (not propagated)."),
        "nvcc": attr.label(
            default = "@sparse_mla_cuda//:nvcc",
            executable = True,
            allow_files = True,
            cfg = "exec",
            doc = "The nvcc of the configured CUDA toolkit (third_party/cuda).",
        ),
        "nvcc_files": attr.label(default = "@sparse_mla_cuda//:nvcc_files", allow_files = True, doc = "nvcc's own tools, as action inputs."),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain", doc = "Host compiler for -ccbin."),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
