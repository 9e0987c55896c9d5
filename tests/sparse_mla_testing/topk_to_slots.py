"""Top-k index conversion in Triton, for the tests and the benchmark (the FA3 route runs the CUDA one,
``cc/fa3/topk_to_slots_kernel.cu``): request-local positions to global KV-cache slot ids, valid ones first.

The lightning indexer gives each query token up to ``topk`` positions inside its own request
(``-1`` = none, anywhere in the row). FA3 reads a page table of slot ids (page size 1) and attends the
first ``cache_seqlens[t]`` entries of row ``t``, so this kernel turns every row into its valid slot ids,
packed to the front in their original order, followed by slot 0 (a slot that exists in every cache, so
a kernel that reads past the valid count never leaves the cache), plus the valid count per row.

Position ``p`` of token ``t`` is valid when ``0 <= p < token_kv_len[t]``, ``p // 64`` is a column of
``block_table``, and the block id found there lies in ``[0, num_blocks)``; its slot is
``block_table[req_id[t], p // 64] * block_stride_rows + p % 64``: a row of the cache's flat slot view
(:func:`slot_rows_view`; ``block_stride_rows`` is 64 for a contiguous cache, more for a padded one). Anything else is dropped, so a bad index can never
make attention read outside the cache. ``check=True`` turns dropped indices into errors instead.
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from sparse_mla.checks import check_kv_cache_slot_strides, check_tensor, check_topk_indices
from sparse_mla.constants import KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE
from sparse_mla.kernels.triton_support import kernel_device_type

FILL_SLOT = 0
"""Written after the valid slot ids of a row: slot 0 lies in every non-empty cache."""

MAX_NUM_SLOTS = torch.iinfo(torch.int32).max
"""Slot ids are int32 (FA3's page table), so the cache may hold at most this many slots."""

_NUM_WARPS = 4
"""One program per token; 4 warps hold a 2048-wide row as 16 entries per thread."""


# Batch sizes change every step: no recompilation when one of them happens to be 1 or a multiple of 16.
@triton.jit(do_not_specialize=["num_reqs", "max_blocks"])
def _topk_to_slots_kernel(
    topk_ptr,  # [T, K] int32
    topk_stride_t,
    topk_stride_k,
    req_id_ptr,  # [T] int32
    req_id_stride,
    token_kv_len_ptr,  # [T] int32
    token_kv_len_stride,
    block_table_ptr,  # [R, max_blocks] int32
    block_table_stride_r,
    block_table_stride_b,
    slot_ids_ptr,  # [T, K] int32, output
    slot_ids_stride_t,
    slot_ids_stride_k,
    valid_count_ptr,  # [T] int32, output
    valid_count_stride,
    topk,
    num_reqs,
    max_blocks,
    num_blocks,
    block_stride_rows,  # slots between the first slots of consecutive blocks
    BLOCK_SIZE: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FILL: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    in_row = cols < topk
    pos = tl.load(topk_ptr + token * topk_stride_t + cols * topk_stride_k, mask=in_row, other=-1)
    req = tl.load(req_id_ptr + token * req_id_stride).to(tl.int64)
    kv_len = tl.load(token_kv_len_ptr + token * token_kv_len_stride)

    req_ok = (req >= 0) & (req < num_reqs)
    block_col = pos // BLOCK_SIZE
    valid = in_row & req_ok & (pos >= 0) & (pos < kv_len) & (block_col < max_blocks)
    block = tl.load(
        block_table_ptr + req * block_table_stride_r + block_col * block_table_stride_b,
        mask=valid,
        other=-1,
    )
    valid = valid & (block >= 0) & (block < num_blocks)
    slot = block * block_stride_rows + pos % BLOCK_SIZE  # fits int32: checked on the host

    # Stable compaction: the i-th valid entry goes to column i.
    valid_i32 = valid.to(tl.int32)
    dest = tl.cumsum(valid_i32, axis=0) - 1
    count = tl.sum(valid_i32, axis=0)
    out_row = slot_ids_ptr + token * slot_ids_stride_t
    tl.store(out_row + dest * slot_ids_stride_k, slot, mask=valid)
    tl.store(out_row + cols * slot_ids_stride_k, tl.full([BLOCK_K], FILL, tl.int32), mask=in_row & (cols >= count))
    tl.store(valid_count_ptr + token * valid_count_stride, count)


def topk_to_slots(
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    num_blocks: int,
    *,
    slot_ids: Optional[torch.Tensor] = None,
    valid_count: Optional[torch.Tensor] = None,
    check: bool = False,
    block_stride_rows: int = KV_BLOCK_SIZE,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Convert request-local top-k positions to global slot ids, valid ids first, in one launch.

    Without ``check`` this is one kernel launch with no host synchronization and no allocation when the
    outputs are given, so it can be captured in a CUDA graph. Invalid entries (see the module docstring)
    are dropped silently.

    Parameters
    ----------
    topk_indices : torch.Tensor
        `[T, K]` int32 positions inside each token's request, ``-1`` = none, anywhere in the row
        (K = 2048 for DeepSeek-V3.2). Any strides.
    req_id : torch.Tensor
        `[T]` int32 row of ``block_table`` of each token. A row outside ``[0, R)`` makes every entry of
        that token invalid.
    token_kv_len : torch.Tensor
        `[T]` int32 causal length of each token: positions ``>= token_kv_len[t]`` are invalid.
    block_table : torch.Tensor
        `[R, max_blocks]` int32 cache block ids of each request (64 slots per block).
    num_blocks : int
        Blocks in the KV cache; block ids outside ``[0, num_blocks)`` are invalid and never read.
    slot_ids : torch.Tensor, optional
        `[T, K]` int32 output buffer (any strides, e.g. the first rows of a persistent page table).
        Allocated when ``None``.
    valid_count : torch.Tensor, optional
        `[T]` int32 output buffer. Allocated when ``None``.
    check : bool
        Debugging mode: before the launch, look for entries that are neither ``-1`` nor valid and raise
        on the first one (row-major order). Synchronizes with the host; not for CUDA graphs. Rows with
        ``token_kv_len == 0`` are padding tokens and are not checked.
    block_stride_rows : int
        Slots from one block's first slot to the next one's in the flat slot view the ids index:
        64 for a contiguous cache, ``kv_cache.stride(0) // 576`` for a padded one (:func:`slot_rows_view`).

    Returns
    -------
    slot_ids : torch.Tensor
        `[T, K]` int32: the valid slot ids of each row in their original order, then 0.
    valid_count : torch.Tensor
        `[T]` int32 number of valid entries of each row.

    Raises
    ------
    TypeError
        A tensor has another dtype, or ``num_blocks`` is not an int.
    ValueError
        A shape or device is wrong, ``block_stride_rows < 64``, the largest slot id
        ``(num_blocks - 1) * block_stride_rows + 63`` does not fit int32, or (with ``check``) an index
        is bad; the message names the token and the column.

    Example
    -------
    >>> slots, count = topk_to_slots(topk, req_id, token_kv_len, block_table, kv_cache.shape[0])
    """
    device = kernel_device_type()
    check_tensor("topk_indices", topk_indices, shape=(None, None), dtype=torch.int32, device=device)
    num_tokens, topk = topk_indices.shape
    check_tensor("req_id", req_id, shape=(num_tokens,), dtype=torch.int32, device=topk_indices.device)
    check_tensor("token_kv_len", token_kv_len, shape=(num_tokens,), dtype=torch.int32, device=topk_indices.device)
    check_tensor("block_table", block_table, shape=(None, None), dtype=torch.int32, device=topk_indices.device)
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int):
        raise TypeError(f"sparse_mla: argument 'num_blocks' expected an int, got {type(num_blocks).__name__}")
    if isinstance(block_stride_rows, bool) or not isinstance(block_stride_rows, int) or block_stride_rows < KV_BLOCK_SIZE:
        raise ValueError(
            f"sparse_mla: argument 'block_stride_rows' expected an int >= {KV_BLOCK_SIZE}, got {block_stride_rows!r}"
        )
    num_slots = (num_blocks - 1) * block_stride_rows + KV_BLOCK_SIZE if num_blocks > 0 else 0
    if num_blocks < 0 or num_slots > MAX_NUM_SLOTS:
        raise ValueError(
            f"sparse_mla: argument 'num_blocks' expected 0 <= (num_blocks - 1) * block_stride_rows + {KV_BLOCK_SIZE} "
            f"<= {MAX_NUM_SLOTS} (int32 slot ids), got num_blocks = {num_blocks}, block_stride_rows = {block_stride_rows}"
        )
    if slot_ids is None:
        slot_ids = torch.empty_like(topk_indices, memory_format=torch.contiguous_format)
    check_tensor("slot_ids", slot_ids, shape=(num_tokens, topk), dtype=torch.int32, device=topk_indices.device)
    if valid_count is None:
        valid_count = torch.empty(num_tokens, dtype=torch.int32, device=topk_indices.device)
    check_tensor("valid_count", valid_count, shape=(num_tokens,), dtype=torch.int32, device=topk_indices.device)
    if check:
        check_topk_indices(topk_indices, req_id, token_kv_len, block_table, num_blocks)
    if num_tokens == 0:
        return slot_ids, valid_count

    _topk_to_slots_kernel[(num_tokens,)](
        topk_indices,
        topk_indices.stride(0),
        topk_indices.stride(1),
        req_id,
        req_id.stride(0),
        token_kv_len,
        token_kv_len.stride(0),
        block_table,
        block_table.stride(0),
        block_table.stride(1),
        slot_ids,
        slot_ids.stride(0),
        slot_ids.stride(1),
        valid_count,
        valid_count.stride(0),
        topk,
        block_table.shape[0],
        block_table.shape[1],
        num_blocks,
        block_stride_rows,
        BLOCK_SIZE=KV_BLOCK_SIZE,
        BLOCK_K=triton.next_power_of_2(max(topk, 1)),
        FILL=FILL_SLOT,
        num_warps=_NUM_WARPS,
    )
    return slot_ids, valid_count


def slot_rows_view(kv_cache: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """The cache as the flat rows that slot ids index, and its block stride in rows; no copy.

    Parameters
    ----------
    kv_cache : torch.Tensor
        `[num_blocks, 64, 576]` with contiguous slots and a block stride that is a whole number of slots
        (:func:`sparse_mla.checks.check_kv_cache_slot_strides`), e.g. a padded vLLM cache.

    Returns
    -------
    rows : torch.Tensor
        `[(num_blocks - 1) * block_stride_rows + 64, 576]` view with strides `(576, 1)`: slot ``p`` of
        block ``b`` is row ``b * block_stride_rows + p``; rows in a padding gap are never addressed by
        :func:`topk_to_slots`. FA3's page-size-1 k/v caches are its column slices.
    block_stride_rows : int
        ``kv_cache.stride(0) // 576``; 64 for a contiguous cache.

    Raises
    ------
    ValueError
        The strides do not allow the view (see :func:`sparse_mla.checks.check_kv_cache_slot_strides`).
    """
    block_stride_rows = check_kv_cache_slot_strides("kv_cache", kv_cache)
    num_blocks = kv_cache.shape[0]
    num_rows = (num_blocks - 1) * block_stride_rows + KV_BLOCK_SIZE if num_blocks else 0
    return kv_cache.as_strided((num_rows, KV_CACHE_HEAD_SIZE), (KV_CACHE_HEAD_SIZE, 1)), block_stride_rows
