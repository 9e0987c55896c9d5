"""The decode kernels' template instantiations, one translation unit each, written at build time.

Each source is a comment, an include of its kernel template and explicit instantiations; writing them
from the parameter lists below keeps the sixteen 16/32-head variants, the two split merges and the
64-head kernel's four in one place instead of nineteen hand-kept files.
"""

def _instantiation_source_impl(ctx):
    lines = ["// " + ctx.attr.comment, '#include "%s"' % ctx.attr.header, ""] + ctx.attr.instantiations
    ctx.actions.write(ctx.outputs.out, "\n".join(lines) + "\n")

instantiation_source = rule(
    implementation = _instantiation_source_impl,
    attrs = {
        "out": attr.output(mandatory = True, doc = "The `.cu` file written."),
        "header": attr.string(mandatory = True, doc = "The kernel template it includes (workspace-relative)."),
        "comment": attr.string(mandatory = True, doc = "Its first line: what it instantiates."),
        "instantiations": attr.string_list(mandatory = True, doc = "The explicit instantiation lines."),
    },
    doc = "A `.cu` source of explicit template instantiations.",
)

_NARROW = "sparse_mla::decode::narrow::NarrowKernel<%d, %d, %s, %s>;"
_SPLIT_MERGE = ("template cudaError_t sparse_mla::decode::split_merge::launch_split_merge<%s>(\n" +
                "    const sparse_mla::decode::SparseDecodeParams& params, cudaStream_t stream);")
_WIDE = "template struct sparse_mla::decode::wide::WideKernelEntry<%s, %s>;"

def decode_instantiation_sources():
    """Declares the instantiation sources of cc/decode/; returns their labels (the kernels' srcs)."""
    sources = []
    for head_tiles in [1, 2]:
        for cta_chunk in [16, 32]:
            for fp8 in [False, True]:
                for cluster in [1, 8]:
                    name = "narrow_heads%d_chunk%d_%s_cluster%d" % (16 * head_tiles, cta_chunk, "fp8" if fp8 else "bf16", cluster)
                    instantiation_source(
                        name = name,
                        out = "narrow/instantiations/%s.cu" % name,
                        header = "cc/decode/narrow/narrow_kernel.cuh",
                        comment = "The 16/32-head decode kernel, %d heads per CTA, %d-position stages, the %s cache, %s." % (
                            16 * head_tiles,
                            cta_chunk,
                            "fp8_ds_mla" if fp8 else "bf16",
                            "clusters of 8 CTAs" if cluster == 8 else "one CTA per split",
                        ),
                        instantiations = ["template struct " + _NARROW % (
                            head_tiles,
                            cta_chunk,
                            "true" if fp8 else "false",
                            "sparse_mla::decode::kClusterSize" if cluster == 8 else "1",
                        )],
                    )
                    sources.append(":" + name)
    for partial, dtype in [("bf16", "__nv_bfloat16"), ("fp32", "float")]:
        name = "split_merge_%s_partials" % partial
        instantiation_source(
            name = name,
            out = "split_merge/instantiations/%s.cu" % name,
            header = "cc/decode/split_merge/split_merge_kernel.cuh",
            comment = "The split merge kernel over partial outputs stored as %s." % partial,
            instantiations = [_SPLIT_MERGE % dtype],
        )
        sources.append(":" + name)

    # One translation unit for the 64-head kernel's four: compiled one per file, the bf16 cache's two come
    # out with other code (NVVM's optimization of the helpers they share with the fp8_ds_mla ones), so
    # they stay together until an H200 A/B shows such a build as fast.
    instantiation_source(
        name = "wide_kernels",
        out = "wide/instantiations/wide_kernels.cu",
        header = "cc/decode/wide/wide_kernel.cuh",
        comment = "The 64-head decode kernel's four instantiations (cache format x partial-output type).",
        instantiations = [
            _WIDE % ("true", "false"),
            _WIDE % ("false", "false"),
            _WIDE % ("true", "true"),
            _WIDE % ("false", "true"),
        ],
    )
    sources.append(":wide_kernels")
    return sources
