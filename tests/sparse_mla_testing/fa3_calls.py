"""FA3 called directly, for the tests and the benchmark: the op library's ``sparse_mla_fa3::fwd`` (FA3's
``mha_fwd``) on a page table converted beforehand. The FA3 route itself calls
:func:`sparse_mla.ops.fa3.sparse_mla_layer`, which converts and attends in one op call.
"""

from typing import Optional, Tuple, Union

import torch

from sparse_mla.checks import check_same_device, check_tensor
from sparse_mla.constants import KV_LORA_RANK, QK_ROPE_HEAD_DIM
from sparse_mla.ops import fa3
from sparse_mla_testing.topk_to_slots import slot_rows_view


def sparse_mla_fwd(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    page_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    softmax_scale: float,
    num_splits: int,
    scheduler_metadata: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA on FA3: each token attends the first ``cache_seqlens[t]`` slots of its page-table row.

    A launcher for callers that validated their arguments (the benchmark's ``fa3_kernel`` path):
    no checks beyond FA3's own. The cache is viewed as pages of one slot (the rows of
    :func:`sparse_mla_testing.topk_to_slots.slot_rows_view`): keys the rotary part `[rows, 1, 1, 64]`,
    values the latent part `[rows, 1, 1, 512]`.

    Parameters
    ----------
    q_nope : torch.Tensor
        `[T, N, 512]` bf16, unit last stride.
    q_rope : torch.Tensor
        `[T, N, 64]` bf16, unit last stride.
    kv_cache : torch.Tensor
        `[num_blocks, 64, 576]` bf16, contiguous slots, block stride a whole number of slots.
    page_table : torch.Tensor
        `[T, topk]` int32 row ids of that view, valid ones first (``topk_to_slots`` with its ``block_stride_rows``).
    cache_seqlens : torch.Tensor
        `[T]` int32 valid slot count of each row.
    cu_seqlens_q : torch.Tensor
        `[T + 1]` int32 ``0..T``.
    softmax_scale : float
        Score scale.
    num_splits : int
        Split-KV count (:func:`sparse_mla.ops.fa3.choose_num_splits`); must equal the one ``scheduler_metadata`` was made for.
    scheduler_metadata : torch.Tensor, optional
        From :func:`sparse_mla.ops.fa3.sparse_mla_scheduler_metadata` for this step; ``None``: FA3 runs its scheduling
        kernel itself (one more launch).
    out : torch.Tensor, optional
        `[T, N, 512]` bf16, written in place.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``out`` `[T, N, 512]` bf16 and FA3's LSE `[N, T]` fp32.

    Raises
    ------
    RuntimeError
        FA3 is not available here (the reason is in the message) or FA3 rejects the arguments.
    """
    availability = fa3.is_available()
    if not availability:
        raise RuntimeError(f"sparse_mla: FA3 is not available: {availability.reason}")
    rows, _ = slot_rows_view(kv_cache)
    k_cache = rows[:, KV_LORA_RANK:].view(-1, 1, 1, QK_ROPE_HEAD_DIM)
    v_cache = rows[:, :KV_LORA_RANK].view(-1, 1, 1, KV_LORA_RANK)
    out, lse, _, _ = _fwd(q_rope, k_cache, v_cache, q_nope, out, cu_seqlens_q, cache_seqlens, 1, page_table,
                          softmax_scale, False, scheduler_metadata, num_splits)
    return out, lse


def _fwd(q, k_cache, v_cache, qv, out, cu_seqlens_q, cache_seqlens, max_seqlen_q, page_table, softmax_scale, causal,
         scheduler_metadata, num_splits):
    """``sparse_mla_fa3::fwd`` with the arguments sparse MLA uses, the others at FA3's defaults."""
    return torch.ops.sparse_mla_fa3.fwd(
        q, k_cache, v_cache,
        None, None, qv, out,  # k_new, v_new, q_v, out
        cu_seqlens_q, None, None,  # cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new
        None, cache_seqlens,  # seqused_q, seqused_k
        max_seqlen_q, None,  # max_seqlen_q, max_seqlen_k
        page_table, None, None,  # page_table, kv_batch_idx, leftpad_k
        None, None, None,  # rotary_cos, rotary_sin, seqlens_rotary
        None, None, None,  # q_descale, k_descale, v_descale
        softmax_scale, causal,
        -1, -1, 0,  # window_size_left, window_size_right, attention_chunk
        0.0, True,  # softcap, is_rotary_interleaved
        scheduler_metadata, num_splits, None, 0,  # scheduler_metadata, num_splits, pack_gqa, sm_margin
        None,  # sinks
    )


def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    qv: Optional[torch.Tensor] = None,
    page_table: Optional[torch.Tensor] = None,
    cache_seqlens: Optional[torch.Tensor] = None,
    cu_seqlens_q: Optional[torch.Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    num_splits: int = 0,
    scheduler_metadata: Optional[torch.Tensor] = None,
    return_softmax_lse: bool = False,
    out: Optional[torch.Tensor] = None,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """FA3 forward over a paged KV cache (the subset of FA3's ``flash_attn_with_kvcache`` sparse MLA uses).

    Parameters
    ----------
    q : torch.Tensor
        `[total_q, N, d]` with ``cu_seqlens_q``, else `[B, seqlen_q, N, d]`; bf16, CUDA. For sparse
        MLA: q_rope, d = 64.
    k_cache : torch.Tensor
        `[num_pages, page_size, N_kv, d]` bf16; the last dimension contiguous. Sparse MLA: the
        k_rope part of the cache as pages of one slot, `[num_blocks * 64, 1, 1, 64]`.
    v_cache : torch.Tensor
        `[num_pages, page_size, N_kv, dv]` bf16. Sparse MLA: c_kv, `[num_blocks * 64, 1, 1, 512]`.
    qv : torch.Tensor, optional
        `[total_q, N, dv]` (or `[B, seqlen_q, N, dv]`) bf16, multiplied with ``v_cache`` and added
        to the scores (MLA's absorbed q_nope).
    page_table : torch.Tensor, optional
        `[B, max_pages]` int32 page ids of each sequence; only the first pages covering
        ``cache_seqlens`` are read, and those must lie in ``[0, num_pages)``.
    cache_seqlens : torch.Tensor, optional
        `[B]` int32 KV length of each sequence.
    cu_seqlens_q : torch.Tensor, optional
        `[B + 1]` int32 query offsets (varlen ``q``).
    max_seqlen_q : int, optional
        Longest query sequence; required with ``cu_seqlens_q``.
    softmax_scale : float, optional
        Score scale; default ``(d + dv) ** -0.5`` as in FA3.
    causal : bool
        Causal mask (bottom-right aligned).
    num_splits : int
        Split-KV partitions; 0 lets FA3's heuristic choose, 1 disables split-KV. Each split adds
        an fp32 partial output of ``B·seqlen_q·N·dv·4`` bytes to the workspace.
    scheduler_metadata : torch.Tensor, optional
        int32 tile-scheduler metadata of this batch shape (``sparse_mla_fa3::get_scheduler_metadata``,
        made with the same ``num_splits``); ``None``: FA3 computes it (one more launch).
    return_softmax_lse : bool
        Also return the log-sum-exp of the scaled scores.
    out : torch.Tensor, optional
        Output buffer shaped like ``qv`` (or `[..., dv]`), written in place.

    Returns
    -------
    torch.Tensor or (torch.Tensor, torch.Tensor)
        ``out`` `[total_q, N, dv]` bf16, and with ``return_softmax_lse`` the LSE `[N, total_q]`
        float32 (varlen) or `[B, N, seqlen_q]`.

    Raises
    ------
    RuntimeError
        If FA3 is not available here (the reason is in the message) or FA3 rejects the arguments.
    TypeError, ValueError
        For arguments of the wrong type, dtype, rank or device.
    """
    availability = fa3.is_available()
    if not availability:
        raise RuntimeError(f"sparse_mla: FA3 is not available: {availability.reason}")
    device = q.device
    check_tensor("q", q, dtype=torch.bfloat16, device=device)
    if q.dim() != (3 if cu_seqlens_q is not None else 4):
        raise ValueError(f"sparse_mla: argument 'q' expected {3 if cu_seqlens_q is not None else 4} dimensions, got {q.dim()}")
    check_tensor("k_cache", k_cache, shape=(None, None, None, q.shape[-1]), dtype=torch.bfloat16, device=device)
    check_tensor("v_cache", v_cache, shape=(k_cache.shape[0], k_cache.shape[1], k_cache.shape[2], None), dtype=torch.bfloat16, device=device)
    tensors = {"q": q, "k_cache": k_cache, "v_cache": v_cache}
    for name, t, dtype in (
        ("qv", qv, torch.bfloat16),
        ("page_table", page_table, torch.int32),
        ("cache_seqlens", cache_seqlens, torch.int32),
        ("cu_seqlens_q", cu_seqlens_q, torch.int32),
        ("scheduler_metadata", scheduler_metadata, torch.int32),
        ("out", out, torch.bfloat16),
    ):
        if t is not None:
            check_tensor(name, t, dtype=dtype)
            tensors[name] = t
    check_same_device(**tensors)
    if cu_seqlens_q is not None and max_seqlen_q is None:
        raise ValueError("sparse_mla: argument 'max_seqlen_q' expected an int with cu_seqlens_q, got None")
    if softmax_scale is None:
        softmax_scale = (q.shape[-1] + (qv.shape[-1] if qv is not None else 0)) ** -0.5
    out, softmax_lse, _, _ = _fwd(q, k_cache, v_cache, qv, out, cu_seqlens_q, cache_seqlens, max_seqlen_q, page_table,
                                  softmax_scale, causal, scheduler_metadata, num_splits)
    return (out, softmax_lse) if return_softmax_lse else out
