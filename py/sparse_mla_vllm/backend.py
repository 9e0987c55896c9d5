"""vLLM's sparse-MLA attention-backend interface mapped onto :mod:`sparse_mla.backend`.

Checked against vLLM 0.33.0 (commit ``4ba787ec9``, wheel ``vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64``):
the base classes of ``vllm/v1/attention/backend.py``; how the selector calls ``validate_configuration``
(``vllm/platforms/cuda.py``: ``device_capability=...`` plus every ``AttentionSelectorConfig`` field of
``vllm/v1/attention/selector.py``); how ``MLAAttention`` (``vllm/model_executor/layers/attention/
mla_attention.py``) constructs the impl and how DeepSeek-V3.2's layer (``vllm/models/deepseek_v32/
attention.py``) calls ``prepare_for_batch``, ``record_logical_topk_ready`` and ``forward_mqa((ql_nope, q_pe),
kv_cache, attn_metadata, layer)`` with ``ql_nope`` a transposed `[N, T, 512]` bmm result. The model's
indexer writes request-local top-k positions into ``topk_indices_buffer`` `[max_num_batched_tokens, 2048]`
int32; vLLM's caches may lie further apart than `64 * 576` elements per block (``flat_kv_row_view`` in
``vllm/v1/attention/backends/mla/sparse_utils.py``). FlashAttnMLASparse (``flashattn_mla_sparse.py``) and
FlashMLASparse (``flashmla_sparse.py``) are the in-tree backends this one stands beside.

Every token runs on the top-k path (no dense-MHA prefill): the metadata reports all tokens as decode
tokens and no prefill, so the layer hands the whole batch to :meth:`SparseMLAVllmImpl.forward_mqa`.

Decode context parallelism (``--decode-context-parallel-size``): the DeepSeek-V3.2 layer all-gathers the
queries of the DCP group along the heads, the indexer's rows hold global positions, and each rank's block
table maps its own shard (``cp_kv_cache_interleave_size``); ``forward_mqa`` returns ``(out, lse)`` `[T, N * W]`
(natural log, ``lse_base_on_e``) for vLLM's ``cp_lse_ag_out_rs``. The rank, world size and interleave are
vLLM's (``get_dcp_world_size_and_rank``, ``ParallelConfig``), given to the builder as
:class:`sparse_mla.topk_filter.DcpShard`.
"""

import dataclasses
from typing import Any, ClassVar, List, Optional, Tuple, Union

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    MLAAttentionImpl,
)

from sparse_mla import kv_cache_format
from sparse_mla.backend import SparseMLABackend, SparseMLAImpl, SparseMLAMetadata, SparseMLAMetadataBuilder
from sparse_mla.checks import check_finite_real, check_tensor
from sparse_mla.constants import KV_BLOCK_SIZE, KV_LORA_RANK, QK_ROPE_HEAD_DIM
from sparse_mla.routes import ROUTES

# --------------------------------------------------------------------------------------------------
# Backend


SERVED_ENGINE_FEATURES = frozenset({"use_kv_connector", "use_adaptive_verification"})
"""vLLM 0.33.0 ``AttentionSelectorConfig`` flags that ask nothing of this backend: a KV connector moves cache
blocks between engines; adaptive verification trims speculative drafts on the device, and the builder reads
only the device-side query offsets. The selector's other flags (``use_mm_prefix``,
``use_per_head_quant_scales``, ``has_sliding_window``, ``use_non_causal``, ``use_batch_invariant``,
``use_pcp``, ``use_rswa``) are each a reason when set; ``use_dcp`` is served (judged by
:meth:`sparse_mla.backend.SparseMLABackend.validate_configuration`)."""


class SparseMLAVllmBackend(SparseMLABackend, AttentionBackend):
    """:class:`~sparse_mla.backend.SparseMLABackend` as vLLM's selector and model runner ask for it."""

    @staticmethod
    def get_builder_cls() -> type:
        return SparseMLAVllmMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type:
        return SparseMLAVllmImpl

    @staticmethod
    def get_metadata_cls() -> type:
        return SparseMLAVllmMetadata

    @classmethod
    def is_mla(cls) -> bool:
        return True

    @classmethod
    def is_sparse(cls) -> bool:
        return True

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> List[int]:
        """`[64]`; vLLM splits larger cache blocks into 64-slot kernel blocks."""
        return [KV_BLOCK_SIZE]

    @classmethod
    def customize_spec(cls, spec: Any) -> Any:
        """Blocks a whole number of slots apart (1152 bytes, or 656 for ``cache_dtype_str="fp8_ds_mla"``), as
        page-size-1 views of the cache need (:func:`sparse_mla.checks.check_kv_cache_slot_strides`); vLLM's
        ``block_stride_alignment`` is in bytes."""
        fmt = kv_cache_format.format_of_kv_cache_dtype(spec.cache_dtype_str, "spec.cache_dtype_str")
        return dataclasses.replace(spec, block_stride_alignment=fmt.slot_bytes)

    @classmethod
    def validate_configuration(cls, block_size: Optional[int] = None, **selector_config: Any) -> List[str]:
        """vLLM's selector call, ``validate_configuration(device_capability=..., **AttentionSelectorConfig)``.

        A ``block_size`` that is ``None`` (not chosen yet) or a positive multiple of 64 is served (vLLM splits its
        blocks into kernel blocks), and so are the flags of :data:`SERVED_ENGINE_FEATURES`; everything else
        is judged by :meth:`sparse_mla.backend.SparseMLABackend.validate_configuration`.
        """
        served = block_size is None or (block_size > 0 and block_size % KV_BLOCK_SIZE == 0)
        judged = {name: value for name, value in selector_config.items() if name not in SERVED_ENGINE_FEATURES}
        return super().validate_configuration(block_size=KV_BLOCK_SIZE if served else block_size, **judged)


# --------------------------------------------------------------------------------------------------
# Metadata


@dataclasses.dataclass
class SparseMLAVllmMetadata(AttentionMetadata):
    """One step's metadata: ours, plus the counts vLLM's MLA layer reads to split decode from prefill."""

    core: SparseMLAMetadata  # what SparseMLAImpl.forward reads
    num_actual_tokens: int  # T, CUDA-graph padding included
    num_reqs: int
    num_decodes: int  # = num_reqs: every request runs on the top-k (MQA) path
    num_decode_tokens: int  # = num_actual_tokens
    num_prefills: int = 0
    prefill: None = None  # no dense-MHA prefill


# --------------------------------------------------------------------------------------------------
# Metadata builder


ROUTE_OVERRIDE_KEY = "sparse_mla_route"
"""Key of vLLM's ``--additional-config`` (``VllmConfig.additional_config``, the config vLLM keeps for
plugins) that forces one route (``"decode"``, ``"fa3"``, ``"triton"``) for every step, e.g.
``--additional-config '{"sparse_mla_route": "fa3"}'``; absent: the routing table decides."""


def _additional_config(vllm_config: Any) -> dict:
    config = getattr(vllm_config, "additional_config", None)
    return config if isinstance(config, dict) else {}


def dcp_of(vllm_config: Any) -> Tuple[int, int, int]:
    """``(rank, world_size, interleave)`` of this process's DCP group, as vLLM 0.33.0's
    ``AttentionImplBase.__new__`` finds them (``get_dcp_world_size_and_rank``, enabled when
    ``parallel_config.decode_context_parallel_size > 1``) and ``parallel_config.cp_kv_cache_interleave_size``."""
    from vllm.distributed.parallel_state import get_dcp_world_size_and_rank

    parallel_config = vllm_config.parallel_config
    enabled = getattr(parallel_config, "decode_context_parallel_size", 1) > 1
    world_size, rank = get_dcp_world_size_and_rank(enabled)
    interleave = getattr(parallel_config, "cp_kv_cache_interleave_size", 1) if world_size > 1 else 1
    return rank, world_size, interleave


class SparseMLAVllmMetadataBuilder(SparseMLAMetadataBuilder, AttentionMetadataBuilder):
    """:class:`~sparse_mla.backend.SparseMLAMetadataBuilder` with vLLM's constructor and CUDA-graph claim.

    ``UNIFORM_BATCH``: full CUDA graphs of decode and speculative-decode batches (the build reads only
    device tensors and the padded token count); mixed batches run piecewise, as FlashAttnMLASparse's.
    The cache format comes from ``kv_cache_spec.cache_dtype_str`` (vLLM's ``--kv-cache-dtype``; ``None`` =
    ``"auto"``), so that only routes that read it are chosen. Under DCP the steps are planned for the
    gathered heads (``N * W``: the layer all-gathers the queries of the DCP group) and this rank's shard
    (:func:`dcp_of`); any query lengths are served (``supports_dcp_with_varlen``: no batch reordering).

    Raises
    ------
    ValueError
        The layer's kernel block size is not 64, or the spec's cache dtype is not served.
    """

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH
    supports_dcp_with_varlen: ClassVar[bool] = True  # every token is filtered alone: speculative and mixed steps too

    def __init__(self, kv_cache_spec: Any, layer_names: List[str], vllm_config: Any, device: torch.device):
        if kv_cache_spec.block_size != KV_BLOCK_SIZE:
            raise ValueError(
                f"sparse_mla: argument 'kv_cache_spec.block_size' expected {KV_BLOCK_SIZE}, got {kv_cache_spec.block_size}"
            )
        route = _additional_config(vllm_config).get(ROUTE_OVERRIDE_KEY)
        if route is not None and route not in ROUTES:
            raise ValueError(f"sparse_mla: additional_config[{ROUTE_OVERRIDE_KEY!r}] expected one of {tuple(ROUTES)}, "
                             f"got {route!r}")
        dcp_rank, dcp_world_size, dcp_interleave = dcp_of(vllm_config)
        SparseMLAMetadataBuilder.__init__(
            self,
            vllm_config.scheduler_config.max_num_batched_tokens,
            device,
            # Heads of this rank, as vLLM's FlashMLASparse builder asks (vllm 0.33.0, flashmla_sparse.py),
            # times the DCP ranks whose queries the layer gathers.
            vllm_config.model_config.get_num_attention_heads(vllm_config.parallel_config) * dcp_world_size,
            index_topk=vllm_config.model_config.hf_text_config.index_topk,
            route=route,
            kv_cache_dtype=kv_cache_spec.cache_dtype_str,
            dcp_rank=dcp_rank,
            dcp_world_size=dcp_world_size,
            dcp_interleave=dcp_interleave,
        )
        AttentionMetadataBuilder.__init__(self, kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(self.reorder_batch_threshold,
                                           supports_dcp_with_varlen=self.supports_dcp_with_varlen)

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> SparseMLAVllmMetadata:
        """Our metadata from vLLM's ``CommonAttentionMetadata`` (same field names), every token a decode token."""
        core = super().build(common_prefix_len, common_attn_metadata, fast_build)
        return SparseMLAVllmMetadata(
            core=core,
            num_actual_tokens=core.num_actual_tokens,
            num_reqs=core.num_reqs,
            num_decodes=core.num_reqs,
            num_decode_tokens=core.num_actual_tokens,
        )


# --------------------------------------------------------------------------------------------------
# Impl


class SparseMLAVllmImpl(SparseMLAImpl, MLAAttentionImpl):
    """:class:`~sparse_mla.backend.SparseMLAImpl` with vLLM's constructor and ``forward_mqa``.

    The top-k rows come from the indexer's ``topk_indices_buffer`` (read through the indexer on every call,
    as vLLM's ``SharedTopkIndicesBuffer`` does: a draft model's indexers are repointed after construction).
    vLLM writes the cache itself (the inherited ``do_kv_cache_update``). Under DCP (``dcp_world_size > 1``,
    set by vLLM's ``AttentionImplBase.__new__``, which then sets ``need_to_return_lse_for_decode`` from
    ``can_return_lse_for_decode``) the layer runs ``N * W`` gathered heads and ``forward_mqa`` returns the LSE.

    Raises
    ------
    NotImplementedError
        Query head padding, or a feature :class:`SparseMLAImpl` rejects.
    ValueError
        Latent or rotary width other than 512 / 64, or neither an indexer nor a top-k buffer.
    """

    is_sparse: ClassVar[bool] = True
    supports_dense_mha_prefill = False  # every token on the top-k path
    supports_pcp = False
    supports_dcp = True  # each rank attends its shard (sparse_mla.topk_filter) and returns the LSE
    can_return_lse_for_decode = True  # [T, N * W] fp32, natural log (lse_base_on_e)
    supports_mtp_with_cp_non_trivial_interleave_size = True  # the filter serves any interleave, any query length

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes: Optional[List[float]],
        sliding_window: Optional[int],
        kv_cache_dtype: str,
        logits_soft_cap: Optional[float],
        attn_type: str,
        kv_sharing_target_layer_name: Optional[str],
        q_lora_rank: Optional[int],
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        qk_head_dim: int,
        v_head_dim: int,
        kv_b_proj: Any,
        indexer: Optional[object] = None,
        q_pad_num_heads: Optional[int] = None,
        topk_indices_buffer: Optional[torch.Tensor] = None,
        index_group_builder: Optional[object] = None,
    ):
        if (kv_lora_rank, qk_rope_head_dim) != (KV_LORA_RANK, QK_ROPE_HEAD_DIM):
            raise ValueError(
                f"sparse_mla: arguments '(kv_lora_rank, qk_rope_head_dim)' expected ({KV_LORA_RANK}, "
                f"{QK_ROPE_HEAD_DIM}), got ({kv_lora_rank}, {qk_rope_head_dim})"
            )
        if q_pad_num_heads not in (None, num_heads):
            raise NotImplementedError(f"sparse_mla: query head padding (q_pad_num_heads={q_pad_num_heads}) is not supported")
        if indexer is None and topk_indices_buffer is None:
            raise ValueError("sparse_mla: sparse MLA needs an 'indexer' or a 'topk_indices_buffer', got neither")
        check_finite_real("scale", scale)  # vLLM's name for SparseMLAImpl's softmax_scale
        super().__init__(
            num_heads * self.dcp_world_size,  # the DCP group's gathered heads (dcp_world_size: vLLM's __new__)
            scale,
            head_size=head_size,
            num_kv_heads=num_kv_heads,
            kv_cache_dtype=kv_cache_dtype,
            sliding_window=sliding_window,
            logits_soft_cap=logits_soft_cap,
            attn_type=attn_type,
            kv_sharing_target_layer_name=kv_sharing_target_layer_name,
            alibi_slopes=None if alibi_slopes is None else torch.tensor(alibi_slopes),
        )
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self._indexer = indexer
        self._topk_indices_buffer = topk_indices_buffer
        self._checked_topk_buffer: Optional[torch.Tensor] = None  # the last buffer forward_mqa found int32 and 2-D
        # index_group_builder: vLLM's cross-layer conversion of top-k rows to slot ids; each forward converts
        # its own rows (or the fused kernel reads them directly), so there is nothing to register.

    @property
    def topk_indices_buffer(self) -> torch.Tensor:
        """`[max_num_batched_tokens, 2048]` int32 request-local top-k rows, the indexer's when there is one."""
        if self._indexer is not None:
            return self._indexer.topk_indices_buffer
        return self._topk_indices_buffer

    def record_logical_topk_ready(self) -> None:
        """vLLM's hook after the indexer wrote this step's rows; nothing to do (no index group)."""

    def forward_mqa(
        self,
        q: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: SparseMLAVllmMetadata,
        layer: Any,
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Sparse attention of every token of the step, on vLLM's tensors as they come.

        Parameters
        ----------
        q : torch.Tensor or pair of torch.Tensor
            ``(ql_nope [T, N, 512], q_pe [T, N, 64])`` bf16 (``ql_nope`` may be a transposed view) or one
            `[T, N, 576]` tensor; under DCP ``N`` counts the gathered heads of the group.
        kv_c_and_k_pe_cache : torch.Tensor
            `[num_blocks, 64, 576]` bf16, or `[num_blocks, 64, 656]` uint8 with ``kv_cache_dtype="fp8_ds_mla"``;
            block stride a whole number of slots (vLLM may pad it).
        attn_metadata : SparseMLAVllmMetadata
            From :meth:`SparseMLAVllmMetadataBuilder.build` for this step.
        layer : AttentionLayer
            Unused.

        Returns
        -------
        tuple
            ``(out [T, N, 512] bf16, None)``; under DCP ``(out, lse [T, N] fp32)``, the natural-log LSE of this
            rank's keys (``-inf`` where it holds none of a row), for vLLM's cross-rank merge.

        Raises
        ------
        TypeError
            ``q`` neither a tensor nor a pair of them, ``attn_metadata`` not a :class:`SparseMLAVllmMetadata`, or the
            indexer's ``topk_indices_buffer`` not a 2-D int32 tensor; and as :meth:`SparseMLAImpl.forward`.
        ValueError
            ``T`` differs from the metadata's token count (a dense-MHA prefill split, which this backend never asks
            for); and as :meth:`SparseMLAImpl.forward` (its ``topk_indices``: the buffer's first ``T`` rows).
        """
        first = q[0] if isinstance(q, (tuple, list)) and q else q
        if not isinstance(first, torch.Tensor):
            raise TypeError(f"sparse_mla: argument 'q' expected a tensor or a pair of tensors, got {type(q).__name__}")
        if not isinstance(attn_metadata, SparseMLAVllmMetadata):
            raise TypeError(f"sparse_mla: argument 'attn_metadata' expected a SparseMLAVllmMetadata (from "
                            f"SparseMLAVllmMetadataBuilder.build), got {type(attn_metadata).__name__}")
        num_tokens = first.shape[0]
        if num_tokens != attn_metadata.num_actual_tokens:
            raise ValueError(
                f"sparse_mla: argument 'q' expected {attn_metadata.num_actual_tokens} tokens (the step's), got {num_tokens}"
            )
        buffer = self.topk_indices_buffer
        if buffer is not self._checked_topk_buffer:  # once per buffer: the indexer may repoint it
            check_tensor("indexer.topk_indices_buffer", buffer, shape=(None, None), dtype=torch.int32)
            self._checked_topk_buffer = buffer
        topk_indices = buffer[:num_tokens]
        if self.need_to_return_lse_for_decode:
            return self.forward(q, kv_c_and_k_pe_cache, attn_metadata.core, topk_indices, return_lse=True)
        return self.forward(q, kv_c_and_k_pe_cache, attn_metadata.core, topk_indices), None
