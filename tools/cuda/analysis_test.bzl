"""`cuda_compile_flags_test`: checks a cuda_objects target's nvcc command line at analysis time.

Runs without a GPU and without compiling anything: the test reads CudaCompileInfo (the exact flag
list every compile action of the target uses) and writes a script that passes, or prints what is
wrong and fails.
"""

load("//tools/cuda:flags.bzl", "NVCC_FLAGS")
load("//tools/cuda:providers.bzl", "CudaCompileInfo")
load("//tools/testing:analysis_verdict.bzl", "analysis_verdict")

def _contains_sequence(flags, sequence):
    n = len(sequence)
    for i in range(len(flags) - n + 1):
        if flags[i:i + n] == sequence:
            return True
    return False

def _unexplained(flags, expected_defines):
    """Flags that are neither the fixed set, -ccbin, a declared define, nor an include path."""
    unexplained = []
    skip_next = False
    for i, flag in enumerate(flags):
        if skip_next:
            skip_next = False
            continue
        if flag in ("-ccbin", "-I", "-isystem"):
            skip_next = True
            if flag != "-ccbin" and not (flags[i + 1].startswith("external/") or flags[i + 1].startswith("bazel-out/") or flags[i + 1] == "."):
                unexplained.append(flag + " " + flags[i + 1])
        elif flag in NVCC_FLAGS:
            continue
        elif not flag.startswith("-D") or flag[2:] not in expected_defines:
            unexplained.append(flag)
    return unexplained

def _cuda_compile_flags_test_impl(ctx):
    info = ctx.attr.target[CudaCompileInfo]
    errors = []
    for sequence in [NVCC_FLAGS[i:i + 2] for i in range(0, 2)] + [s.split(" ") for s in ctx.attr.expected_sequences]:
        if not _contains_sequence(info.flags, sequence):
            errors.append("missing: " + " ".join(sequence))
    for define in ctx.attr.expected_defines:
        if "-D" + define not in info.flags:
            errors.append("missing define: -D" + define)
    for flag in _unexplained(info.flags, ctx.attr.expected_defines):
        errors.append("undeclared flag: " + flag)
    num_objects = len(info.objects.to_list())
    if ctx.attr.expected_num_objects >= 0 and num_objects != ctx.attr.expected_num_objects:
        errors.append("expected %d compile actions (one per source), got %d" % (ctx.attr.expected_num_objects, num_objects))
    return [analysis_verdict(ctx, [str(ctx.attr.target.label) + ": " + e for e in errors])]

cuda_compile_flags_test = rule(
    implementation = _cuda_compile_flags_test_impl,
    test = True,
    doc = "Asserts the nvcc flags of a cuda_objects target: the fixed set, the declared defines, nothing else.",
    attrs = {
        "target": attr.label(mandatory = True, providers = [CudaCompileInfo], doc = "A cuda_objects target."),
        "expected_sequences": attr.string_list(doc = "Space-separated flag sequences that must appear in order."),
        "expected_defines": attr.string_list(doc = "Every define the command line may and must carry (without -D)."),
        "expected_num_objects": attr.int(default = -1, doc = "Compile actions expected (one per source); -1 skips."),
    },
)
