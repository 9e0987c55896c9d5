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

INDEX_TOPK = 2048
"""Positions the lightning indexer selects per query token (`index_topk`)."""

DEEPSEEK_V32_SOFTMAX_SCALE = (QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM) ** -0.5
"""`192 ** -0.5`: the model scales scores by the pre-absorption query/key head size 128 + 64."""
