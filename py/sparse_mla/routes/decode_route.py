"""The decode route: the latency-first CUDA kernels of :mod:`sparse_mla.ops.decode`, one launch per layer
(index translation, attention and split merge in one kernel; the wide kernel with several splits
merges them in a second launch), reading the request-local top-k positions directly (no page table).

Plan: :func:`sparse_mla.ops.decode.plan` of ``(T, N, SM count, top-k, cache format)``. Workspace: one
:class:`~sparse_mla.ops.decode.DecodeWorkspace` for every ``T`` up to the builder's maximum (grids of up
to a wave of CTAs split, so it stays below ~17 MB on an H200; on the fp8_ds_mla cache the wide kernel's
grids of up to 1.5 waves and the first kernel's of up to 4 CTAs per SM split too, up to 86.5 MB). Where
the op library is not built or the GPU is not Hopper, the routing falls back to FA3 (and from there to
Triton).
"""

from typing import Optional

import torch

from sparse_mla import kv_cache_format
from sparse_mla.ops import decode

is_available = decode.is_available


def _planner_arguments(cache_format: str) -> dict:
    """:func:`sparse_mla.ops.decode.plan`'s keyword arguments here: the cluster capacity of the current CUDA
    device (where the kernel runs here) and whether ``cache_format`` is fp8_ds_mla."""
    capacity = decode.cluster_capacity(torch.cuda.current_device()) if decode.is_available() else None
    return dict(cluster_capacity=capacity, fp8_ds_mla=cache_format == kv_cache_format.FP8_DS_MLA.name)


def plan(num_tokens: int, num_heads: int, num_sms: int, topk: int, cache_format: str) -> decode.DecodePlan:
    """The launch plan of a step (:func:`sparse_mla.ops.decode.plan` with its default CTAs per SM for
    ``cache_format``), sized to the waves of the current CUDA device where the kernel runs here."""
    return decode.plan(num_tokens, num_heads, num_sms, topk, **_planner_arguments(cache_format))


def make_workspace(
    max_num_tokens: int, num_heads: int, num_sms: int, topk: int, device: torch.device, cache_format: str
) -> decode.DecodeWorkspace:
    """Split-KV buffers for every step up to ``max_num_tokens`` on a ``cache_format`` cache (the plans
    :func:`plan` makes here)."""
    return decode.DecodeWorkspace.for_max_tokens(max_num_tokens, num_heads, num_sms, device, topk,
                                                 **_planner_arguments(cache_format))


def run(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_indices: torch.Tensor,
    metadata,
    softmax_scale: float,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
) -> None:
    """One op call (one launch; two on the wide kernel with several splits); the op checks every tensor
    before it launches."""
    decode.sparse_mla_decode(q_nope, q_rope, kv_cache, topk_indices, metadata.req_id, metadata.token_kv_len,
                             metadata.block_table, softmax_scale, metadata.plan, metadata.workspace, out, lse)
