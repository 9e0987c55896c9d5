"""The FA3 route's op library: SGLang's sgl-attn FlashAttention-3 for Hopper with our index conversion, as
the torch ops ``sparse_mla_fa3::sparse_mla_fwd`` (one layer) and ``::get_scheduler_metadata`` (once per step).

The op library is built by Bazel (``bazel build //py:sparse_mla --config=sm90`` puts
``cc/libsparse_mla_fa3.so`` beside this package in the runfiles) against the interpreter's torch
version only (FA3's host API takes ``at::Tensor``); the wheel carries it per torch version
(:mod:`sparse_mla.ops.library`). Outside both, point ``SPARSE_MLA_FA3_LIBRARY`` at the built library.

Sparse MLA maps onto FA3's paged-KV decode: ``q`` = q_rope, ``qv`` = q_nope, ``k_cache`` = k_rope
and ``v_cache`` = c_kv viewed as pages of one slot, ``page_table`` = each token's global slot ids
(valid ones first) and ``cache_seqlens`` = their count; every query token is a sequence of length 1
(:func:`sparse_mla_layer`). Its split count (:func:`choose_num_splits`) and tile-scheduler metadata
(:func:`sparse_mla_scheduler_metadata`) depend only on the step, so they are computed once per step
and shared by every layer.
"""

import functools
from typing import Optional, Tuple

import torch

from sparse_mla.ops.library import Availability, op_availability, tensor_device_index
from sparse_mla.constants import INDEX_TOPK, KV_LORA_RANK, QK_ROPE_HEAD_DIM
from sparse_mla.topk_filter import NO_DCP, DcpShard

LIBRARY_NAME = "libsparse_mla_fa3.so"
LIBRARY_ENV = "SPARSE_MLA_FA3_LIBRARY"
TILE_M = 64
"""Query rows per FA3 tile for head dim 64 / value dim 512 in bf16 (sgl-attn ``hopper/tile_size.h``)."""

TILE_N = 64
"""KV rows per FA3 tile for the same kernel; a split covers at least one such tile."""

ACCUM_BYTES_PER_ROW = (KV_LORA_RANK + 1) * 4
"""FA3's fp32 split workspace per (split, head, token): the partial output (512) and its LSE (1)."""

SCHEDULER_VECTORS = 3
"""Per-sequence int32 vectors of FA3's varlen scheduler metadata on sm_90 for non-causal, non-local
attention: dynamic split count, query tiles, sorted sequence order (sgl-attn 10d78675
``hopper/flash_api.cpp``, ``mha_fwd``: ``num_prepare_batch_vectors``; the head-swizzle vector is only
there for causal or local attention)."""


def is_available(device_index: Optional[int] = None) -> Availability:
    """Whether FA3 runs on CUDA device ``device_index`` (the current one when ``None``); the op library is
    loaded once per process, the answer kept per device.

    Returns
    -------
    Availability
        Truthy when usable; otherwise ``reason`` says why: no CUDA device, not Hopper, the
        extension was not built (or not found), or it failed to load.
    """
    return op_availability(LIBRARY_NAME, LIBRARY_ENV, _register_fake, device_index, torch_bound=True)


@functools.lru_cache(maxsize=None)
def _ops() -> Tuple[torch._ops.OpOverload, torch._ops.OpOverload]:
    """``(get_scheduler_metadata, sparse_mla_fwd)`` overloads, resolved once (the attribute lookups cost
    host time)."""
    namespace = torch.ops.sparse_mla_fa3
    return namespace.get_scheduler_metadata.default, namespace.sparse_mla_fwd.default


def _register_fake() -> None:
    """Shape-only implementation so ``torch.compile`` can trace through the op."""

    @torch.library.register_fake("sparse_mla_fa3::fwd")
    def _fwd_fake(q, k, v, k_new, v_new, q_v, out, cu_seqlens_q, *args):
        value_dim = q_v.shape[-1] if q_v is not None else v.shape[-1]
        out_shape = (*q.shape[:-1], value_dim)
        result = q.new_empty(out_shape) if out is None else out
        if q.dim() == 3:  # varlen: [total_q, heads, dim]
            lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
        else:  # [batch, seqlen_q, heads, dim]
            lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        return result, lse, q.new_empty((0,), dtype=torch.float32), q.new_empty((0,), dtype=torch.float32)

    @torch.library.register_fake("sparse_mla_fa3::sparse_mla_fwd")
    def _sparse_mla_fwd_fake(*args):
        return None  # writes its outputs in place

    @torch.library.register_fake("sparse_mla_fa3::get_scheduler_metadata")
    def _get_scheduler_metadata_fake(batch_size, *args):
        seqused_k = args[7]
        return seqused_k.new_empty((scheduler_metadata_size(batch_size),), dtype=torch.int32)


# --------------------------------------------------------------------------------------------------
# The sparse-MLA step plan: split count and scheduler metadata


def choose_num_splits(num_tokens: int, num_heads: int, num_sms: int, index_topk: int = INDEX_TOPK) -> int:
    """FA3 split-KV count for sparse MLA: just enough CTAs for one per SM, with a bounded fp32 workspace.

    FA3 packs the ``N`` heads of a one-token query into ``ceil(N / 64)`` row tiles, so a batch has
    ``tiles = T * ceil(N / 64)`` tiles. Splitting each tile's keys ``s`` ways runs ``s * tiles`` CTAs:
    ``s = ceil(num_sms / tiles)``, at most ``index_topk / 64`` (every split keeps at least one 64-key
    tile), and 1 once the tiles alone fill the SMs. The result depends only on (T, N, SMs), so a
    CUDA graph keeps its kernel configuration.

    Workspace bound: for ``s > 1`` FA3 allocates ``out_accum [s, N, T, 512]`` and ``lse_accum [s, N, T]``
    in fp32, ``s * N * T * 513 * 4`` bytes. Since ``s > 1`` only when ``tiles < num_sms``,
    ``s * tiles < 2 * num_sms`` and ``N * T <= 64 * tiles``, the workspace stays below
    ``2 * num_sms * 64 * 513 * 4 = 262,656 * num_sms`` bytes (34.7 MB on the H200's 132 SMs) for any
    ``T``; FA3's own heuristic assumes a batch of one for varlen inputs and can ask for 32+ splits of
    every token (8.6 GB at T = 1024, N = 128).

    Parameters
    ----------
    num_tokens : int
        Padded query tokens ``T``.
    num_heads : int
        Query heads ``N``.
    num_sms : int
        Streaming multiprocessors of the device.
    index_topk : int
        Keys per token at most.

    Returns
    -------
    int
        The split count, ``>= 1``.
    """
    tiles = max(num_tokens, 1) * -(-num_heads // TILE_M)
    max_splits = max(index_topk // TILE_N, 1)
    return max(1, min(-(-num_sms // tiles), max_splits))


def scheduler_metadata_size(num_tokens: int) -> int:
    """int32 entries of FA3's scheduler metadata for ``num_tokens`` one-token sequences (sm_90, varlen,
    non-causal): :data:`SCHEDULER_VECTORS` vectors of ``T`` rounded up to 4 entries, then the tile
    semaphore (sgl-attn 10d78675 ``hopper/flash_api.cpp``, ``mha_fwd``: ``metadata_size``)."""
    return SCHEDULER_VECTORS * (-(-num_tokens // 4) * 4) + 1


def sparse_mla_scheduler_metadata(
    kv_len_bound: torch.Tensor, cu_seqlens_q: torch.Tensor, num_heads: int, index_topk: int, num_splits: int
) -> torch.Tensor:
    """FA3's tile-scheduler metadata for one sparse-MLA step, shared by all its layers.

    One launch of FA3's scheduling kernel (``mha_fwd_get_scheduler_metadata``). FA3 plans with these
    per-sequence key counts; every layer then runs with its own ``cache_seqlens <= kv_len_bound``:
    the kernel cuts each sequence's actual key tiles into the planned number of splits, and a split
    left without keys stores a zero output with LSE ``-inf``, which the combine weighs 0 (sgl-attn
    10d78675 ``hopper/block.h`` ``get_n_block_min_max``, ``flash_fwd_kernel_sm90.h`` ``store_zero``),
    so planning with an upper bound gives the exact result.

    Parameters
    ----------
    kv_len_bound : torch.Tensor
        `[T]` int32 upper bound of each token's valid slot count (``1 <= bound <= index_topk``), CUDA.
    cu_seqlens_q : torch.Tensor
        `[T + 1]` int32 ``0..T``: every token its own query sequence.
    num_heads : int
        Query heads ``N``.
    index_topk : int
        Width of the page table (FA3's ``max_seqlen_k`` with pages of one slot).
    num_splits : int
        The split count :func:`sparse_mla_fwd` will be called with (:func:`choose_num_splits`).

    Returns
    -------
    torch.Tensor
        `[scheduler_metadata_size(T)]` int32, newly allocated.

    Raises
    ------
    RuntimeError
        FA3 is not available here, or ``T`` is 0 (FA3 cannot launch an empty grid).
    """
    availability = is_available(tensor_device_index(kv_len_bound))
    if not availability:
        raise RuntimeError(f"sparse_mla: FA3 is not available: {availability.reason}")
    num_tokens = kv_len_bound.shape[0]
    if num_tokens == 0:
        raise RuntimeError("sparse_mla: FA3 scheduler metadata needs at least one token, got T = 0")
    return _ops()[0](
        num_tokens, 1, index_topk,  # batch_size, max_seqlen_q, max_seqlen_k (page table width x page size 1)
        num_heads, 1, QK_ROPE_HEAD_DIM, KV_LORA_RANK,  # num_heads, num_heads_k, headdim, headdim_v
        torch.bfloat16, kv_len_bound,  # qkv_dtype, seqused_k
        cu_seqlens_q, None, None, None, None,  # cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new, seqused_q, leftpad_k
        1, 0, False,  # page_size, max_seqlen_k_new, is_causal
        -1, -1, 0,  # window_size_left, window_size_right, attention_chunk
        False, num_splits, None, 0,  # has_softcap, num_splits, pack_gqa (FA3's rule, as in fwd), sm_margin
    )


def sparse_mla_layer(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    *,
    page_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    scheduler_metadata: Optional[torch.Tensor],
    num_splits: int,
    softmax_scale: float,
    out: torch.Tensor,
    lse: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    dcp: DcpShard = NO_DCP,
) -> None:
    """One layer of the FA3 route in one op call: index conversion into ``page_table``, then FA3.

    ``sparse_mla_fa3::sparse_mla_fwd`` (cc/fa3/fa3_sparse_mla_op.cc) launches our conversion kernel
    (cc/fa3/topk_to_slots_kernel.cu: valid slot ids first in their order, then 0, the counts into
    ``cache_seqlens``; the same result as :func:`sparse_mla.reference.topk_to_slots_reference`) and
    FA3 on the cache viewed as pages of one slot, from C++: one dispatcher call instead of a Triton
    launch and a 36-argument FA3 call (host time per layer).

    Parameters
    ----------
    q_nope, q_rope : torch.Tensor
        `[T, N, 512]` and `[T, N, 64]` bf16, unit last stride.
    kv_cache : torch.Tensor
        `[num_blocks, 64, 576]` bf16, contiguous slots, block stride a whole number of slots.
    topk_indices : torch.Tensor
        `[T, topk]` int32 request-local positions, ``-1`` = none; invalid entries are dropped.
    req_id, token_kv_len : torch.Tensor
        `[T]` int32 block-table row and causal length of each token.
    block_table : torch.Tensor
        `[num_reqs, max_blocks]` int32, unit last stride.
    page_table, cache_seqlens : torch.Tensor
        `[T, topk]` and `[T]` int32, written: slot ids (rows of the flat slot view) and their counts.
    cu_seqlens_q : torch.Tensor
        `[T + 1]` int32 ``0..T``.
    scheduler_metadata : torch.Tensor or None
        From :func:`sparse_mla_scheduler_metadata` for this step (``None``: FA3 plans itself).
    num_splits : int
        The split count ``scheduler_metadata`` was made for (:func:`choose_num_splits`).
    softmax_scale : float
        Score scale.
    out : torch.Tensor
        `[T, N, 512]` bf16, written.
    lse : torch.Tensor, optional
        `[T, N]` fp32, written with the natural-log LSE (``-inf`` for a token without valid positions).
    topk_length : torch.Tensor, optional
        `[T]` int32: entries at columns ``>= topk_length[t]`` count as ``-1``.
    dcp : DcpShard
        This rank's DCP shard (:mod:`sparse_mla.topk_filter`): other ranks' positions count as ``-1``,
        this rank's are looked up at their rank-local position.

    Raises
    ------
    RuntimeError
        FA3 is not available here (the reason is in the message) or FA3 rejects the arguments.
    ValueError
        A tensor's dtype, shape, device or strides is wrong (checked in the op before any launch, by
        the checks it shares with the stable-ABI ops, which raise no TypeError).
    """
    availability = is_available(tensor_device_index(q_nope))
    if not availability:
        raise RuntimeError(f"sparse_mla: FA3 is not available: {availability.reason}")
    _ops()[1](q_nope, q_rope, kv_cache, topk_indices, req_id, token_kv_len, block_table, page_table, cache_seqlens,
              cu_seqlens_q, scheduler_metadata, num_splits, softmax_scale, out, lse, topk_length, dcp.rank,
              dcp.world_size, dcp.interleave)
