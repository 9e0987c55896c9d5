"""Model and cache constants of DeepSeek-V3.2 sparse MLA, with their arithmetic.

Source: DeepSeek-V3.2-Exp `config.json` (kv_lora_rank 512, qk_rope_head_dim 64,
qk_nope_head_dim 128, index_topk 2048) and vLLM's sparse-MLA backends (cache block size 64).
"""

KV_LORA_RANK = 512
"""Width of the compressed latent `c_kv`, shared by every query head (`kv_lora_rank`)."""

QK_ROPE_HEAD_DIM = 64
"""Width of the decoupled rotary key `k_rope` (`qk_rope_head_dim`)."""

QK_NOPE_HEAD_DIM = 128
"""Per-head width of the non-rotary query/key before absorption (`qk_nope_head_dim`)."""

KV_CACHE_HEAD_SIZE = KV_LORA_RANK + QK_ROPE_HEAD_DIM
"""One cache slot: `[c_kv (512) | k_rope (64)]` = 576 bf16 values, 1152 bytes."""

KV_BLOCK_SIZE = 64
"""Slots per cache block: the cache is `[num_blocks, 64, 576]`."""

MAX_NUM_HEADS = 128
"""Most query heads per token served: DeepSeek-V3.2's 128 (at tensor parallelism 1); every route takes 1..128."""

INDEX_TOPK = 2048
"""Positions the lightning indexer selects per query token (`index_topk`)."""

DEEPSEEK_V32_SOFTMAX_SCALE = (QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM) ** -0.5
"""`192 ** -0.5`: the model scales scores by the pre-absorption query/key head size 128 + 64."""

# --------------------------------------------------------------------------------------------------
# The fp8_ds_mla cache slot (656 bytes)
#
# Sources: FlashMLA's README ("FP8 KV cache" of the sparse decode kernel: 512 fp8 e4m3 values, four fp32
# scales, 64 bf16 rotary values per token) and vLLM's writer of it, ``concat_and_cache_ds_mla_kernel`` in
# ``csrc/cache_kernels.cu`` (tiles of 128 values, scale = tile amax / 448), with vLLM's
# ``FlashMLASparseBackend.get_kv_cache_shape`` returning `(num_blocks, block_size, 656)` for it.

FP8_DS_MLA_SLOT_BYTES = 656
"""One slot of the fp8_ds_mla cache: `[c_kv as 512 fp8 | 4 fp32 scales | k_rope as 64 bf16]` = 512 + 16 + 128 bytes;
the cache is uint8 `[num_blocks, 64, 656]`."""

FP8_DS_MLA_GROUP_SIZE = 128
"""``c_kv`` values sharing one scale: scale ``i`` covers ``c_kv[128 * i : 128 * i + 128]``."""

FP8_DS_MLA_NUM_SCALES = KV_LORA_RANK // FP8_DS_MLA_GROUP_SIZE
"""4 fp32 scales per slot."""

FP8_DS_MLA_SCALE_OFFSET = KV_LORA_RANK
"""Byte offset of the scales in a slot (512): right after the 512 one-byte fp8 values."""

FP8_DS_MLA_ROPE_OFFSET = FP8_DS_MLA_SCALE_OFFSET + 4 * FP8_DS_MLA_NUM_SCALES
"""Byte offset of ``k_rope`` in a slot (528): after the 4 little-endian fp32 scales."""

FP8_E4M3_MAX = 448.0
"""Largest finite float8 e4m3fn value (``torch.finfo(torch.float8_e4m3fn).max``; 1.75 * 2**8): the
quantizer maps a group's absolute maximum to it."""
