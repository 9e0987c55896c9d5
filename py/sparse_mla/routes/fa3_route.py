"""The FA3 route: index conversion into a page table of slot ids, then FA3 (sgl-attn) with pages of one
slot (:mod:`sparse_mla.ops.fa3`).

Per step (:meth:`Fa3Route.prepare`, once for all layers): FA3's tile-scheduler metadata, planned on each
token's key bound ``kv_len_bound`` (an upper bound of every layer's valid slot count), copied into this
route's persistent buffer. Per layer (:meth:`Fa3Route.run`): one op call
(:func:`sparse_mla.ops.fa3.sparse_mla_layer`) that launches our conversion kernel and FA3's attention
kernel, plus its combine kernel when it splits.
"""

import dataclasses
from typing import Optional

import torch

from sparse_mla.ops import fa3
from sparse_mla.ops.library import Availability
from sparse_mla.routes.route import Route, StepContext


@dataclasses.dataclass(frozen=True)
class Plan:
    """FA3's host decisions for a step of ``T`` tokens and ``N`` heads."""

    num_splits: int  # split-KV count (fa3.choose_num_splits), also the scheduler metadata's
    scheduler_metadata_size: int  # int32 entries of FA3's scheduler metadata; 0: none (T = 0)


class Workspace:
    """The FA3 route's persistent buffers, sized for ``max_num_tokens`` tokens.

    Sizing: ``page_table`` ``max_tokens * topk * 4`` bytes (8 KiB per token at top-k 2048, 64 MiB at
    8192 tokens); ``cache_seqlens`` ``4 * max_tokens``; ``scheduler_metadata``
    ``4 * fa3.scheduler_metadata_size(max_tokens)`` (about 12 bytes per token).
    """

    def __init__(self, max_num_tokens: int, topk: int, device: torch.device):
        int32 = dict(dtype=torch.int32, device=device)
        self.page_table = torch.zeros(max_num_tokens, topk, **int32)  # [max_tokens, topk] slot ids, valid first
        self.cache_seqlens = torch.zeros(max_num_tokens, **int32)  # [max_tokens] valid slot ids per row
        self.scheduler_metadata = torch.zeros(fa3.scheduler_metadata_size(max_num_tokens), **int32)  # [size]


@dataclasses.dataclass(frozen=True)
class Step:
    """What ``run`` reads of one step: views of the workspace for its ``T`` tokens."""

    page_table: torch.Tensor  # [T, topk] int32, written by each layer's conversion
    cache_seqlens: torch.Tensor  # [T] int32, written by each layer's conversion
    scheduler_metadata: Optional[torch.Tensor]  # [plan.scheduler_metadata_size] int32; None: FA3 plans per call


@dataclasses.dataclass(frozen=True)
class Fa3Route(Route):
    fallback: Optional[str] = "triton"  # FA3 cannot read the fp8_ds_mla cache: such steps take Triton

    def is_available(self, device_index: Optional[int] = None) -> Availability:
        return fa3.is_available(device_index)

    def plan(self, step: StepContext) -> Plan:
        """Split count and scheduler-metadata size of a step (the cache is bf16 here)."""
        return Plan(
            num_splits=fa3.choose_num_splits(step.num_tokens, step.num_heads, step.num_sms, step.topk),
            scheduler_metadata_size=fa3.scheduler_metadata_size(step.num_tokens) if step.num_tokens else 0,
        )

    def make_workspace(self, largest: StepContext) -> Workspace:
        """The sizes depend only on the largest ``T`` and the top-k width."""
        return Workspace(largest.num_tokens, largest.topk, largest.device)

    def prepare(self, plan: Plan, workspace: Workspace, metadata) -> Step:
        """Compute the step's FA3 scheduler metadata into the workspace (one FA3 launch and one copy).

        Skipped (``scheduler_metadata`` None, FA3 then plans on every call) for ``T = 0`` and where FA3
        cannot run these tensors (not available, or the step on the CPU: its calls fail there anyway,
        with the reason).
        """
        num_tokens = metadata.num_actual_tokens
        scheduler_metadata = None
        if plan.scheduler_metadata_size and metadata.req_id.is_cuda and fa3.is_available(metadata.req_id.device.index):
            scheduler_metadata = workspace.scheduler_metadata[: plan.scheduler_metadata_size]
            scheduler_metadata.copy_(fa3.sparse_mla_scheduler_metadata(
                metadata.kv_len_bound, metadata.cu_seqlens_q, metadata.num_heads, metadata.index_topk,
                plan.num_splits,
            ))
        return Step(workspace.page_table[:num_tokens], workspace.cache_seqlens[:num_tokens], scheduler_metadata)

    def run(self, q_nope, q_rope, kv_cache, topk_indices, metadata, softmax_scale, out, lse, topk_length) -> None:
        """One op call: the index conversion into the step's page table, then FA3 (:func:`fa3.sparse_mla_layer`)."""
        step = metadata.prepared
        fa3.sparse_mla_layer(
            q_nope, q_rope, kv_cache, topk_indices, metadata.req_id, metadata.token_kv_len, metadata.block_table,
            page_table=step.page_table, cache_seqlens=step.cache_seqlens, cu_seqlens_q=metadata.cu_seqlens_q,
            scheduler_metadata=step.scheduler_metadata, num_splits=metadata.step.plan.num_splits,
            softmax_scale=softmax_scale, out=out, lse=lse, topk_length=topk_length, dcp=metadata.dcp,
        )
