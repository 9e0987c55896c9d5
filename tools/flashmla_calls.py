"""FlashMLA's sparse Hopper kernels as benchmark paths, called through its op library (``torch.ops._flashmla_C``),
built elsewhere: vLLM 0.26.0's wheel ships it as ``vllm/_flashmla_C.abi3.so`` (extract it outside this repository).

* on the fp8_ds_mla cache, ``sparse_decode_fwd``: FlashMLA's fp8 sparse decode (the cache layout is the same,
  656 bytes a slot), as ``flash_mla_with_kvcache(..., is_fp8_kvcache=True, indices=...)`` calls it;
* on the bf16 cache, ``sparse_prefill_fwd``: its bf16 sparse kernel, as ``flash_mla_sparse_fwd`` calls it.

Both read global slot ids (``block * 64 + offset``), computed here once, outside the timed call, and 64 or 128
query heads: fewer are padded with zero heads, as vLLM pads them.
"""

import functools

import torch

from sparse_mla import kv_cache_format, reference
from sparse_mla.constants import KV_CACHE_HEAD_SIZE, KV_LORA_RANK

PADDED_HEADS = (64, 128)
"""The query head counts FlashMLA's sparse kernels take (vLLM 0.26.0's FlashMLA sparse backend pads to them)."""


@functools.lru_cache(maxsize=None)
def load(library_path: str) -> None:
    """Loads the op library at ``library_path`` once (it registers ``torch.ops._flashmla_C``)."""
    torch.ops.load_library(library_path)


def padded_heads(num_heads: int) -> int:
    """The head count FlashMLA runs ``num_heads`` query heads with; ValueError above 128."""
    for heads in PADDED_HEADS:
        if num_heads <= heads:
            return heads
    raise ValueError(f"num_heads: FlashMLA's sparse kernels take at most {PADDED_HEADS[-1]}, got {num_heads}")


class SparseCall:
    """One zero-argument FlashMLA call on a batch: ``q_nope`` `[T, N, 512]` and ``q_rope`` `[T, N, 64]` bf16,
    ``kv_cache`` bf16 `[num_blocks, 64, 576]` (the prefill kernel) or fp8_ds_mla uint8 `[num_blocks, 64, 656]`
    (the decode kernel), the batch's request-local ``topk_indices`` `[T, K]` int32 translated through
    ``req_id``, ``token_kv_len`` and ``block_table``. :meth:`output` is the `[T, N, 512]` bf16 result."""

    def __init__(self, library_path: str, q_nope: torch.Tensor, q_rope: torch.Tensor, kv_cache: torch.Tensor,
                 topk_indices: torch.Tensor, req_id: torch.Tensor, token_kv_len: torch.Tensor,
                 block_table: torch.Tensor, softmax_scale: float):
        load(library_path)
        num_tokens, self.num_heads = q_nope.shape[:2]
        heads = padded_heads(self.num_heads)
        slot_ids = reference.global_slot_ids_reference(topk_indices, req_id, token_kv_len, block_table,
                                                       kv_cache.shape[0])
        self.fp8 = kv_cache.dtype == kv_cache_format.FP8_DS_MLA.dtype
        self.softmax_scale = softmax_scale
        q = torch.zeros(num_tokens, heads, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=q_nope.device)
        q[:, :self.num_heads] = torch.cat([q_nope, q_rope], dim=-1)
        self.out = torch.empty(num_tokens, heads, KV_LORA_RANK, dtype=torch.bfloat16, device=q_nope.device)
        self.indices = slot_ids[:, None].contiguous()  # [T, 1, K]: s_q = 1 (decode) or h_kv = 1 (prefill)
        if self.fp8:  # [batch, s_q = 1, heads, 576] and the cache as [blocks, 64, h_kv = 1, 656]
            self.q, self.kv = q[:, None], kv_cache[:, :, None]
        else:  # [T, heads, 576] and the cache as [slots, h_kv = 1, 576]
            self.q, self.kv = q, kv_cache.view(-1, 1, kv_cache.shape[-1])
        self.scheduler = (None, None)  # the decode kernel's tile scheduler metadata, made by its first call

    def __call__(self) -> None:
        ops = torch.ops._flashmla_C
        if self.fp8:
            out = self.out[:, None]
            _, _, metadata, num_splits = ops.sparse_decode_fwd(
                self.q, self.kv, self.indices, None, None, *self.scheduler, None, None, None, KV_LORA_RANK,
                self.softmax_scale, out)
            self.scheduler = (metadata, num_splits)
        else:
            ops.sparse_prefill_fwd(self.q, self.kv, self.indices, self.softmax_scale, KV_LORA_RANK, None, None,
                                   self.out)

    def output(self) -> torch.Tensor:
        return self.out[:, :self.num_heads]
