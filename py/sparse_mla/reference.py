"""Float32 PyTorch references: the oracle of every test.

The three functions (attention, index conversion, global slot ids) are plain PyTorch, run on any device
and favour clarity over speed.
"""

from typing import Tuple

import torch

from sparse_mla import kv_cache_format
from sparse_mla.constants import KV_BLOCK_SIZE, KV_LORA_RANK
from sparse_mla.fp8_ds_mla import dequantize_cache

_TOKENS_PER_CHUNK = 16
"""Tokens gathered at once: bounds the `[chunk, K, 576]` fp32 gather to 75 MB at K = 2048."""


def sparse_mla_reference(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_ids: torch.Tensor,
    softmax_scale: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA attention over explicitly listed cache slots, in float32.

    For token ``t`` and head ``h``: ``s_k = (q_nope[t,h]·c_kv[k] + q_rope[t,h]·k_rope[k]) * softmax_scale``
    over the valid slots ``k`` of row ``t``; ``out[t,h] = Σ softmax(s)_k c_kv[k]`` and
    ``lse[t,h] = log Σ exp(s_k)``. A row without any valid slot gives ``out = 0`` and ``lse = -inf``.

    Parameters
    ----------
    q_nope : torch.Tensor
        `[T, N, 512]`, any float dtype.
    q_rope : torch.Tensor
        `[T, N, 64]`, any float dtype.
    kv_cache : torch.Tensor
        `[num_blocks, 64, 576]` (bf16 or any float dtype), each slot `[c_kv (512) | k_rope (64)]`; or the
        uint8 fp8_ds_mla cache `[num_blocks, 64, 656]`, whose gathered slots are dequantized first
        (:func:`sparse_mla.fp8_ds_mla.dequantize_cache`), then the same math.
    slot_ids : torch.Tensor
        `[T, K]` integer global slot ids (``block * 64 + row``); ``-1`` marks an unused entry and
        may appear anywhere in a row.
    softmax_scale : float
        Multiplies the scores before the softmax (DeepSeek-V3.2: ``192 ** -0.5``).

    Returns
    -------
    out : torch.Tensor
        `[T, N, 512]` float32.
    lse : torch.Tensor
        `[T, N]` float32, natural log of the softmax denominator of the scaled scores.
    """
    num_tokens, num_heads, _ = q_nope.shape
    fp8 = kv_cache.dtype == kv_cache_format.FP8_DS_MLA.dtype
    flat_cache = kv_cache.reshape(-1, kv_cache.shape[-1])
    q = torch.cat([q_nope, q_rope], dim=-1).float()  # [T, N, 576]
    out = torch.zeros(num_tokens, num_heads, KV_LORA_RANK, dtype=torch.float32, device=q_nope.device)
    lse = torch.full((num_tokens, num_heads), float("-inf"), dtype=torch.float32, device=q_nope.device)
    for start in range(0, num_tokens, _TOKENS_PER_CHUNK):
        stop = min(start + _TOKENS_PER_CHUNK, num_tokens)
        ids = slot_ids[start:stop].long()
        valid = ids >= 0  # [t, K]
        rows = flat_cache[ids.clamp(min=0)]
        rows = dequantize_cache(rows) if fp8 else rows.float()  # [t, K, 576]
        scores = torch.einsum("tnd,tkd->tnk", q[start:stop], rows) * softmax_scale
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        chunk_lse = torch.logsumexp(scores, dim=-1)  # [t, N]
        any_valid = valid.any(dim=-1)[:, None]  # [t, 1]
        probs = torch.where(any_valid[..., None], torch.exp(scores - chunk_lse[..., None]), torch.zeros_like(scores))
        out[start:stop] = torch.einsum("tnk,tkd->tnd", probs, rows[..., :KV_LORA_RANK])
        lse[start:stop] = torch.where(any_valid, chunk_lse, torch.full_like(chunk_lse, float("-inf")))
    return out, lse


def topk_to_slots_reference(
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    num_blocks: int,
    block_size: int = KV_BLOCK_SIZE,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Request-local top-k positions to global slot ids, valid ones first.

    Position ``p`` of token ``t`` is valid when ``0 <= p < token_kv_len[t]``, ``req_id[t]`` is a row
    of ``block_table``, ``p // block_size`` is a column of it and the block id found there lies in
    ``[0, num_blocks)``.
    Its slot is ``block_table[req_id[t], p // block_size] * block_size + p % block_size``.

    Parameters
    ----------
    topk_indices : torch.Tensor
        `[T, K]` integer positions inside each token's request; ``-1`` = none, anywhere in the row.
    req_id : torch.Tensor
        `[T]` integer request row of each token in ``block_table``.
    token_kv_len : torch.Tensor
        `[T]` integer number of positions token ``t`` may attend (its causal length).
    block_table : torch.Tensor
        `[R, max_blocks]` integer cache block ids of each request.
    num_blocks : int
        Blocks in the KV cache.
    block_size : int
        Slots per block (64).

    Returns
    -------
    slot_ids : torch.Tensor
        `[T, K]` int32; the valid slots of each row first, in their original order, then 0.
    valid_count : torch.Tensor
        `[T]` int32 number of valid entries per row.
    """
    pos = topk_indices.long()
    num_reqs, max_blocks = block_table.shape
    block_col = torch.div(pos, block_size, rounding_mode="floor")
    req_ok = (req_id >= 0) & (req_id < num_reqs)  # [T]
    valid = (pos >= 0) & (pos < token_kv_len.long()[:, None]) & (block_col < max_blocks) & req_ok[:, None]
    if num_reqs == 0 or max_blocks == 0:  # nothing to look up: every entry is invalid
        block = torch.zeros_like(pos)
    else:
        rows = block_table[req_id.long().clamp(0, num_reqs - 1)].long()  # [T, max_blocks]
        block = torch.gather(rows, 1, block_col.clamp(0, max_blocks - 1))
    valid &= (block >= 0) & (block < num_blocks)
    slots = torch.where(valid, block * block_size + pos % block_size, torch.zeros_like(pos))
    order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices
    return torch.gather(slots, 1, order).to(torch.int32), valid.sum(dim=1).to(torch.int32)


def global_slot_ids_reference(
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    num_blocks: int,
) -> torch.Tensor:
    """The slot ids :func:`sparse_mla_reference` takes: :func:`topk_to_slots_reference`'s valid
    slots first, ``-1`` after them.

    Returns
    -------
    torch.Tensor
        `[T, K]` int32.
    """
    slots, count = topk_to_slots_reference(topk_indices, req_id, token_kv_len, block_table, num_blocks)
    columns = torch.arange(slots.shape[1], device=slots.device)[None, :]
    return torch.where(columns < count[:, None], slots, torch.full_like(slots, -1))
