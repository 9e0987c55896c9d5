"""The Triton route: the fused kernel of :mod:`sparse_mla.kernels.sparse_mla_attention`, one launch per
layer, reading the request-local top-k positions directly (no page table).

Plan: its :class:`~sparse_mla.kernels.sparse_mla_attention.LaunchPlan` under the default launch
configuration of ``(T, N, SM count, top-k)``. Workspace: one
:class:`~sparse_mla.kernels.sparse_mla_attention.SplitWorkspace` for every ``T`` up to the builder's
maximum.
"""

from typing import Optional

import torch

from sparse_mla.kernels import sparse_mla_attention as kernel


def plan(num_tokens: int, num_heads: int, num_sms: int, topk: int, cache_format: str) -> kernel.LaunchPlan:
    """The launch plan of a step (:func:`~sparse_mla.kernels.sparse_mla_attention.default_launch_config`;
    the same for both cache formats)."""
    return kernel.plan_launch(num_heads, topk, kernel.default_launch_config(num_tokens, num_heads, num_sms, topk))


def make_workspace(
    max_num_tokens: int, num_heads: int, num_sms: int, topk: int, device: torch.device, cache_format: str
) -> kernel.SplitWorkspace:
    """The split-KV workspace of every step up to ``max_num_tokens`` (at most 17.3 MB on an H200; the
    same for both cache formats)."""
    return kernel.SplitWorkspace.for_max_tokens(max_num_tokens, num_heads, device, topk, num_sms=num_sms)


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
    """One launch: the fused kernel translates the indices itself."""
    kernel.launch(metadata.plan, q_nope, q_rope, kv_cache, topk_indices, metadata.req_id, metadata.token_kv_len,
                  metadata.block_table, softmax_scale, out, lse, metadata.workspace)
