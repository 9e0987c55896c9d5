"""What every route is: the step context it plans from, and the one contract the builder and the impl use."""

import dataclasses
from typing import Any, FrozenSet, Optional

import torch

from sparse_mla import kv_cache_format

BF16_ONLY = frozenset({kv_cache_format.BF16.name})
"""``cache_formats`` of a route that reads only the bf16 cache."""

ALL_FORMATS = frozenset(fmt.name for fmt in kv_cache_format.FORMATS)
"""``cache_formats`` of a route that reads every cache format (bf16 and fp8_ds_mla)."""


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What a route plans a step from: its shape, the builder's device and the cache format."""

    num_tokens: int  # T, CUDA-graph padding included (for a workspace: the builder's largest step)
    num_heads: int  # N, the builder's
    num_sms: int  # SMs of ``device`` (the Triton kernel's CPU stand-in count on the CPU)
    topk: int  # K, width of a top-k row
    device: torch.device  # the builder's, where the step's tensors live
    cache_format: str  # a name of sparse_mla.kv_cache_format: the cache the layers read

    @property
    def fp8_ds_mla(self) -> bool:
        return self.cache_format == kv_cache_format.FP8_DS_MLA.name


@dataclasses.dataclass(frozen=True)
class Route:
    """One way of serving a step with one family of kernels; a route module subclasses it.

    The metadata builder calls :meth:`plan` once per padded ``T`` and :meth:`make_workspace` once for its
    largest step, :meth:`prepare` in every ``build``; :meth:`SparseMLAImpl.forward` calls :meth:`run` per
    layer. Where :meth:`is_available` is false, ``runs_on_cpu`` is false for a step on CPU tensors, or the
    step's cache format is not in ``cache_formats``, :mod:`sparse_mla.routing` takes ``fallback`` instead.
    """

    name: str
    fallback: Optional[str] = None  # route taken instead where this one cannot serve a step
    runs_on_cpu: bool = False  # serves CPU tensors too (Triton's interpreter), not only CUDA ones
    cache_formats: FrozenSet[str] = BF16_ONLY  # names of the KV-cache formats its kernels read

    def is_available(self, device_index: Optional[int] = None) -> Any:
        """Truthy where the route's kernels run on CUDA device ``device_index`` (the current one when
        ``None``; an ``Availability`` with the reason where not)."""
        return True

    def plan(self, step: StepContext) -> Any:
        """The host decisions of a step (split counts, launch configuration): a frozen value, a pure
        function of ``step``."""
        raise NotImplementedError

    def make_workspace(self, largest: StepContext) -> Any:
        """The route's persistent device buffers on ``largest.device``, for every step up to
        ``largest.num_tokens`` (fixed addresses for CUDA graphs)."""
        raise NotImplementedError

    def prepare(self, plan: Any, workspace: Any, metadata: Any) -> Any:
        """Device work done once per step in ``build``, for all layers; what :meth:`run` reads of it
        (``metadata.prepared``). None: nothing to prepare."""
        return None

    def run(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        kv_cache: torch.Tensor,
        topk_indices: torch.Tensor,
        metadata: Any,
        softmax_scale: float,
        out: torch.Tensor,
        lse: Optional[torch.Tensor],
        topk_length: Optional[torch.Tensor],
    ) -> None:
        """One layer's launches on arguments ``SparseMLAImpl.forward`` validated: writes ``out``
        `[T, N, 512]` bf16 (and ``lse`` `[T, N]` fp32 when given). Every route applies ``topk_length``
        (`[T]` int32 or None) and the step's DCP shard (``metadata.dcp``) in its own index handling
        (:mod:`sparse_mla.topk_filter`)."""
        raise NotImplementedError
