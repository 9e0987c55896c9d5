"""What of FA3 (sgl-attn `hopper/`) sparse_mla compiles, and with which defines.

Sparse MLA runs FA3 with bf16, head dim 64 (q_rope / k_rope) and value dim 512 (q_nope as `qv`,
c_kv as V), paged KV with page size 1 (so FA3's non-TMA paged path, which forces PackGQA), with or
without split-KV. Everything else is switched off with FLASHATTENTION_DISABLE_* defines that
hopper/flash_api.cpp honours, which shrinks the build from hundreds of translation units to a few.
"""

FA3_SEED_DEFINES = [
    "CUTE_USE_PACKED_TUPLE=1",
    "CUTLASS_ENABLE_GDC_FOR_SM90",
    "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",
    "CUTLASS_ENABLE_TENSOR_CORE_MMA=1",
    "FLASHATTENTION_DISABLE_BACKWARD",
    "FLASHATTENTION_DISABLE_DROPOUT",
    "FLASHATTENTION_DISABLE_UNEVEN_K",
    "FLASHATTENTION_DISABLE_SM8x",
    "FLASHATTENTION_VARLEN_ONLY",
]
"""The defines SGLang's sgl-kernel builds its FA3 extension with."""

FA3_DISABLED_FEATURES = [
    "FP16",
    "FP8",
    "HDIM96",
    "HDIM128",
    "HDIM192",
    "HDIM256",
    "HDIMDIFF192",
    "LOCAL",
    "SOFTCAP",
    "PACKGQA",
    "APPENDKV",
    "CLUSTER",
]
"""Features sparse MLA never uses; with them off flash_api.cpp references only bf16 head-dim-64 kernels."""

FA3_DEFINES = FA3_SEED_DEFINES + ["FLASHATTENTION_DISABLE_" + f for f in FA3_DISABLED_FEATURES]

FA3_API_SOURCE = "@sparse_mla_sgl_attn//:hopper/flash_api.cpp"
"""FA3's host API (mha_fwd and its dispatch), compiled by the host compiler."""

FA3_SUPPORT_SOURCES = [
    "@sparse_mla_sgl_attn//:hopper/flash_fwd_combine.cu",
    "@sparse_mla_sgl_attn//:hopper/flash_prepare_scheduler.cu",
]
"""The split-KV combine kernel and the varlen scheduler-metadata kernel."""

def _instantiation(name):
    return "@sparse_mla_sgl_attn//:hopper/instantiations/flash_fwd_%s_sm90.cu" % name

FA3_MLA_INSTANTIATIONS = [_instantiation(v) for v in ["hdim64_512_bf16_paged", "hdim64_512_bf16_paged_split"]]
"""The two forward kernels sparse MLA runs (page size 1: non-TMA paged KV, PackGQA), without and with split-KV."""

FA3_OTHER_HDIM64_INSTANTIATIONS = [_instantiation(v) for v in [
    "hdim64_bf16",
    "hdim64_bf16_paged",
    "hdim64_bf16_split",
    "hdim64_bf16_paged_split",
    "hdim64_256_bf16",
    "hdim64_256_bf16_paged",
    "hdim64_256_bf16_split",
    "hdim64_256_bf16_paged_split",
    "hdim64_512_bf16",
    "hdim64_512_bf16_split",
]]
"""The other ten kernels flash_api.cpp's dispatch references in this configuration; built with
--//tools/cuda:fa3_variants=hdim64, otherwise cc/fa3/fa3_variants_not_built.cc stands in for them."""

FA3_UPSTREAM_FILES = [FA3_API_SOURCE] + FA3_SUPPORT_SOURCES + FA3_MLA_INSTANTIATIONS + FA3_OTHER_HDIM64_INSTANTIATIONS
"""Every sgl-attn file //cc/fa3 names; a placeholder @sparse_mla_sgl_attn (CPU machines) holds these."""
