"""A stand-in for the lightning indexer's top-k kernel, for the benchmarked decode step
(:mod:`sparse_mla_testing.model_step`, ``tools/model_step_bench.py``): like the indexer before each layer's
attention, it writes the step's top-k rows into the buffer the forward reads, in one pass over the rows.

Layer ``l`` writes the step's rows shifted by its own ``shift[t]`` inside each token's causal length:
``(rows[t, k] + shift[t]) % token_kv_len[t]`` where ``rows[t, k] >= 0``, and ``-1`` where it is ``-1``. A shift is
a bijection of ``[0, token_kv_len[t])``, so the distinct valid positions of a row stay distinct and valid, and
each layer attends positions of its own (the data changes per layer; nothing is computed once for all).
"""

import torch
import triton
import triton.language as tl

from sparse_mla.checks import check_same_device, check_tensor
from sparse_mla.kernels.triton_support import kernel_device_type

_NUM_WARPS = 4
"""One program per token; 4 warps hold a 2048-wide row as 16 entries per thread."""


@triton.jit
def _shifted_rows_kernel(
    rows_ptr,  # [T, K] int32
    rows_stride_t,
    rows_stride_k,
    shift_ptr,  # [T] int32
    shift_stride,
    token_kv_len_ptr,  # [T] int32
    token_kv_len_stride,
    out_ptr,  # [T, K] int32, written
    out_stride_t,
    out_stride_k,
    topk,
    BLOCK_K: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    in_row = cols < topk
    pos = tl.load(rows_ptr + token * rows_stride_t + cols * rows_stride_k, mask=in_row, other=-1)
    shift = tl.load(shift_ptr + token * shift_stride).to(tl.int64)
    kv_len = tl.maximum(tl.load(token_kv_len_ptr + token * token_kv_len_stride), 1).to(tl.int64)
    shifted = tl.where(pos >= 0, (pos.to(tl.int64) + shift) % kv_len, -1)
    tl.store(out_ptr + token * out_stride_t + cols * out_stride_k, shifted.to(tl.int32), mask=in_row)


def write_shifted_rows(rows: torch.Tensor, shift: torch.Tensor, token_kv_len: torch.Tensor, out: torch.Tensor) -> None:
    """Write one layer's top-k rows into ``out``: ``rows`` shifted by ``shift`` (module docstring), one launch.

    No host synchronization, no allocation: capturable in a CUDA graph.

    Parameters
    ----------
    rows : torch.Tensor
        `[T, K]` int32 the step's top-k rows: request-local positions in ``[0, token_kv_len[t])``, or ``-1``.
    shift : torch.Tensor
        `[T]` int32 this layer's shift per token, ``>= 0``.
    token_kv_len : torch.Tensor
        `[T]` int32 causal length of each token (0 for a padding token: its valid entries become 0).
    out : torch.Tensor
        `[T, K]` int32, written (the forward's ``topk_indices``).

    Raises
    ------
    TypeError, ValueError
        A tensor has another dtype, shape or device; the message names it.
    """
    device = kernel_device_type()
    check_tensor("rows", rows, shape=(None, None), dtype=torch.int32, device=device)
    num_tokens, topk = rows.shape
    check_tensor("shift", shift, shape=(num_tokens,), dtype=torch.int32, device=device)
    check_tensor("token_kv_len", token_kv_len, shape=(num_tokens,), dtype=torch.int32, device=device)
    check_tensor("out", out, shape=(num_tokens, topk), dtype=torch.int32, device=device)
    check_same_device(rows=rows, shift=shift, token_kv_len=token_kv_len, out=out)
    if num_tokens == 0:
        return
    _shifted_rows_kernel[(num_tokens,)](
        rows, rows.stride(0), rows.stride(1), shift, shift.stride(0), token_kv_len, token_kv_len.stride(0),
        out, out.stride(0), out.stride(1), topk, BLOCK_K=triton.next_power_of_2(topk), num_warps=_NUM_WARPS,
    )


def shifted_rows_reference(rows: torch.Tensor, shift: torch.Tensor, token_kv_len: torch.Tensor) -> torch.Tensor:
    """:func:`write_shifted_rows`'s rows in PyTorch ops: `[T, K]` int32 from the same arguments."""
    kv_len = token_kv_len.clamp(min=1).long()[:, None]
    shifted = (rows.long() + shift.long()[:, None]) % kv_len
    return torch.where(rows >= 0, shifted, -1).to(torch.int32)
