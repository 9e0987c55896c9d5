"""The Triton route: the fused kernel of :mod:`sparse_mla.kernels.sparse_mla_attention`, one launch per
layer, reading the request-local top-k positions directly (no page table), on any GPU or the CPU.

Plan: its :class:`~sparse_mla.kernels.sparse_mla_attention.LaunchPlan` under the default launch
configuration of ``(T, N, SM count, top-k)``. Workspace: one
:class:`~sparse_mla.kernels.sparse_mla_attention.SplitWorkspace` for every ``T`` up to the builder's
maximum. Both are the same for both cache formats.
"""

import dataclasses

from sparse_mla.checks import check_tensor
from sparse_mla.kernels import sparse_mla_attention as kernel
from sparse_mla.kernels.triton_support import interpreting, kernel_device_type
from sparse_mla.routes.route import ALL_FORMATS, Route, StepContext


@dataclasses.dataclass(frozen=True)
class TritonRoute(Route):
    runs_on_cpu: bool = True
    cache_formats: frozenset = ALL_FORMATS

    def plan(self, step: StepContext) -> kernel.LaunchPlan:
        """The launch plan of :func:`~sparse_mla.kernels.sparse_mla_attention.default_launch_config`."""
        config = kernel.default_launch_config(step.num_tokens, step.num_heads, step.num_sms, step.topk)
        return kernel.plan_launch(step.num_heads, step.topk, config)

    def make_workspace(self, largest: StepContext) -> kernel.SplitWorkspace:
        """The split-KV workspace of every step up to ``largest.num_tokens`` (at most 17.3 MB on an H200)."""
        return kernel.SplitWorkspace.for_max_tokens(largest.num_tokens, largest.num_heads, largest.device,
                                                    largest.topk, num_sms=largest.num_sms)

    def run(self, q_nope, q_rope, kv_cache, topk_indices, metadata, softmax_scale, out, lse, topk_length) -> None:
        """One launch: the fused kernel translates (and filters) the indices itself.

        Raises ValueError naming ``q_nope`` for CPU tensors outside Triton's interpreter (``TRITON_INTERPRET=1``),
        where compiled Triton would fail with no driver to launch on."""
        if q_nope.is_cpu and not interpreting():
            check_tensor("q_nope", q_nope, device=kernel_device_type())
        step = metadata.step
        kernel.launch(step.plan, q_nope, q_rope, kv_cache, topk_indices, metadata.req_id, metadata.token_kv_len,
                      metadata.block_table, softmax_scale, out, lse, step.workspace, topk_length, metadata.dcp)
