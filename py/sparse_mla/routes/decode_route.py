"""The decode route: the latency-first CUDA kernels of :mod:`sparse_mla.ops.decode`, one launch per layer
(index translation, attention and split merge in one kernel; the wide kernel with several splits
merges them in a second launch), reading the request-local top-k positions directly (no page table).

Plan: :func:`sparse_mla.ops.decode.plan` of the step, sized to the waves of the builder's CUDA device.
Workspace: one uint8 tensor (:func:`sparse_mla.ops.decode.workspace_for_max_tokens`), which the op carves,
for every ``T`` up to the builder's maximum (grids of up to a wave of CTAs split, so its partial outputs stay
below ~17 MB on an H200, beside 2 MiB of counters; on the fp8_ds_mla cache the wide kernel's grids of up to
1.5 waves and the first kernel's of up to 4 CTAs per SM split too, up to 86.5 MB).
Where the op library is not built or the GPU is not Hopper, the routing falls back to FA3 (and from there
to Triton).
"""

import dataclasses
from typing import Optional

import torch

from sparse_mla.ops import decode
from sparse_mla.ops.library import Availability
from sparse_mla.routes.route import ALL_FORMATS, Route, StepContext


def _planner_arguments(step: StepContext) -> dict:
    """:func:`sparse_mla.ops.decode.plan`'s keyword arguments for ``step``: the cluster capacity of the
    builder's CUDA device (where the kernel runs here) and whether the cache is fp8_ds_mla."""
    on_cuda = step.device.type == "cuda" and decode.is_available(step.device.index)
    capacity = decode.cluster_capacity(step.device.index) if on_cuda else None
    return dict(cluster_capacity=capacity, fp8_ds_mla=step.fp8_ds_mla)


@dataclasses.dataclass(frozen=True)
class DecodeRoute(Route):
    fallback: Optional[str] = "fa3"
    cache_formats: frozenset = ALL_FORMATS

    def is_available(self, device_index: Optional[int] = None) -> Availability:
        return decode.is_available(device_index)

    def plan(self, step: StepContext) -> decode.DecodePlan:
        """:func:`sparse_mla.ops.decode.plan` with its default CTAs per SM for the step's cache format."""
        return decode.plan(step.num_tokens, step.num_heads, step.num_sms, step.topk, **_planner_arguments(step))

    def make_workspace(self, largest: StepContext) -> torch.Tensor:
        """The split-KV workspace of every step up to ``largest.num_tokens`` (the plans :meth:`plan` makes);
        empty where the op library is missing (the route cannot run: its ``run`` raises, naming the reason)."""
        if not decode.library_loaded():
            return torch.empty(0, dtype=torch.uint8, device=largest.device)
        return decode.workspace_for_max_tokens(largest.num_tokens, largest.num_heads, largest.num_sms,
                                               largest.device, largest.topk, **_planner_arguments(largest))

    def run(self, q_nope, q_rope, kv_cache, topk_indices, metadata, softmax_scale, out, lse, topk_length) -> None:
        """One op call (one launch; two on the wide kernel with several splits); the op checks every tensor
        before it launches."""
        step = metadata.step
        decode.sparse_mla_decode(q_nope, q_rope, kv_cache, topk_indices, metadata.req_id, metadata.token_kv_len,
                                 metadata.block_table, softmax_scale, step.plan, step.workspace, out, lse,
                                 topk_length=topk_length, dcp=metadata.dcp)
