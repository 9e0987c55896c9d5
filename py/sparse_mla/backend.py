"""DeepSeek-V3.2 sparse-MLA attention backend, in the shape of a vLLM attention backend.

Read top-down: :class:`SparseMLABackend` (what is served) → :class:`SparseMLAMetadata` (what one step
carries) → :class:`SparseMLAMetadataBuilder` (builds it on the device, CUDA-graph safe) →
:class:`SparseMLAImpl` (index conversion and attention).

Every query token is its own attention "sequence" of length 1 whose keys are the cache slots its
top-k row selects: the builder finds each token's request and causal length; on the FA3 path the
forward turns the request-local top-k positions into a page table of slot ids (valid ids first) and
runs FA3 on it with page size 1, latent values ``c_kv`` (512) and rotary keys ``k_rope`` (64) read
from the one cache; on the Triton path (:mod:`sparse_mla.routing` decides from the head count and
padded token count) the fused kernel reads the positions directly.

Example
-------
>>> builder = SparseMLAMetadataBuilder(max_num_batched_tokens=8192, device=torch.device("cuda"))
>>> impl = SparseMLAImpl(num_heads=16)
>>> write_kv(kv_c_normed, k_pe, kv_cache, common.slot_mapping)     # this step's new tokens
>>> metadata = builder.build(0, common)
>>> out = impl.forward((q_nope, q_rope), kv_cache, metadata, topk_indices)   # [T, 16, 512] bf16
"""

import dataclasses
from typing import List, Optional, Tuple, Union

import torch

from sparse_mla import routing
from sparse_mla.checks import check_kv_cache_slot_strides, check_tensor, check_unit_last_stride
from sparse_mla.common_metadata import CommonAttentionMetadata
from sparse_mla.constants import (
    DEEPSEEK_V32_SOFTMAX_SCALE,
    INDEX_TOPK,
    KV_BLOCK_SIZE,
    KV_CACHE_HEAD_SIZE,
    KV_LORA_RANK,
    QK_ROPE_HEAD_DIM,
)
from sparse_mla import device_info
from sparse_mla.kernels.sparse_mla_attention import MAX_NUM_HEADS, max_default_shared_memory_bytes, sparse_mla_attention
from sparse_mla.kernels.topk_to_slots import check_topk_indices, slot_rows_view, topk_to_slots
from sparse_mla.ops import fa3

MIN_TRITON_COMPUTE_CAPABILITY = (8, 0)
"""The fused Triton kernel's bf16 ``tl.dot`` needs tensor cores with bf16 inputs: Ampere or newer."""

SERVED_ENGINE_FEATURES = frozenset({"use_kv_connector", "use_adaptive_verification"})
"""Engine flags (vLLM 0.33.0 ``AttentionSelectorConfig`` names) that ask nothing of this backend: a KV
connector moves cache blocks between engines; adaptive verification trims speculative drafts on the
device, and the builder reads only the device-side query offsets."""

FA3_TILE_M = 64
"""Query rows per FA3 tile for head dim 64 / value dim 512 in bf16 (sgl-attn ``hopper/tile_size.h``)."""

FA3_TILE_N = 64
"""KV rows per FA3 tile for the same kernel; a split covers at least one such tile."""

FA3_ACCUM_BYTES_PER_ROW = (KV_LORA_RANK + 1) * 4
"""FA3's fp32 split workspace per (split, head, token): the partial output (512) and its LSE (1)."""


# --------------------------------------------------------------------------------------------------
# Backend


class SparseMLABackend:
    """What this backend serves: DeepSeek-V3.2 sparse MLA, bf16, on GPUs whose shared memory holds the
    Triton kernel's launch configurations (Hopper, and the 227 KiB parts after it); FA3 joins on 9.x.

    KV cache `[num_blocks, 64, 576]` bf16, each slot ``[c_kv (512) | k_rope (64)]``, one latent head shared
    by all query heads.
    """

    accept_output_buffer = True
    supported_dtypes: List[torch.dtype] = [torch.bfloat16]
    supported_kv_cache_dtypes: List[str] = ["auto", "bfloat16"]  # "auto" = the activation dtype, bf16

    @staticmethod
    def get_name() -> str:
        return "SPARSE_MLA"

    @staticmethod
    def get_supported_head_sizes() -> List[int]:
        """`[576]`: kv_lora_rank 512 + qk_rope_head_dim 64."""
        return [KV_CACHE_HEAD_SIZE]

    @staticmethod
    def get_supported_kernel_block_sizes() -> List[int]:
        return [KV_BLOCK_SIZE]

    @classmethod
    def supports_compute_capability(cls, capability: Tuple[int, int]) -> bool:
        """Whether a device of ``capability`` runs every batch; see :meth:`device_reasons`."""
        return not cls.device_reasons(capability)

    @staticmethod
    def device_reasons(capability: Tuple[int, int]) -> List[str]:
        """Why a device of compute capability ``(major, minor)`` cannot run this backend; empty when it can.

        FA3 is built for sm_90a and runs on 9.x only; elsewhere :mod:`sparse_mla.routing` sends every batch
        to the fused Triton kernel, so the device must run that kernel: compute capability >= 8.0 (bf16
        ``tl.dot``) and enough shared memory per block for every launch configuration
        :func:`~sparse_mla.kernels.sparse_mla_attention.default_launch_config` may pick
        (:func:`~sparse_mla.kernels.sparse_mla_attention.max_default_shared_memory_bytes`, 198,144 B on a
        132-SM GPU) within the device's opt-in shared memory per block
        (:func:`sparse_mla.device_info.optin_shared_memory_per_block`: 227 KiB on 9.0 and 10.0, 163 KiB on
        8.0, 99 KiB on 8.6, 8.9 and 12.0). The current device's SM count and shared memory are used when it
        has ``capability``, else those of a 132-SM GPU and the CUDA programming guide's table. Measured on
        the H200 only: 10.x compiles other instructions (tcgen05), so its figure is this bound, untested.
        """
        major, minor = capability
        name = f"compute capability {major}.{minor}"
        if (major, minor) < MIN_TRITON_COMPUTE_CAPABILITY:
            want = ".".join(map(str, MIN_TRITON_COMPUTE_CAPABILITY))
            return [f"{name} not supported (the Triton kernel's bf16 tl.dot needs >= {want})"]
        optin = device_info.optin_shared_memory_per_block((major, minor))
        if optin is None:
            return [f"{name} not supported (its shared memory per block is not known here)"]
        num_sms = device_info.num_sms_for_capability((major, minor))
        need = max_default_shared_memory_bytes(num_sms, INDEX_TOPK)
        if need > optin:
            return [
                f"{name} not supported (the Triton kernel's launch configurations need up to {need} B of shared "
                f"memory per block on {num_sms} SMs, the device gives {optin} B)"
            ]
        return []

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int, block_size: int, num_kv_heads: int, head_size: int, cache_dtype_str: str = "auto"
    ) -> Tuple[int, int, int]:
        """`(num_blocks, 64, 576)`: the latent cache has no head dimension.

        Raises
        ------
        ValueError
            ``block_size`` is not 64, ``num_kv_heads`` not 1, ``head_size`` not 576 or the dtype neither
            ``"auto"`` nor ``"bfloat16"``.
        """
        expected = {
            "block_size": (block_size, KV_BLOCK_SIZE),
            "num_kv_heads": (num_kv_heads, 1),
            "head_size": (head_size, KV_CACHE_HEAD_SIZE),
        }
        for name, (got, want) in expected.items():
            if got != want:
                raise ValueError(f"sparse_mla: argument '{name}' expected {want!r}, got {got!r}")
        if cache_dtype_str not in SparseMLABackend.supported_kv_cache_dtypes:
            raise ValueError(
                f"sparse_mla: argument 'cache_dtype_str' expected one of "
                f"{SparseMLABackend.supported_kv_cache_dtypes}, got {cache_dtype_str!r}"
            )
        return (num_blocks, block_size, head_size)

    @staticmethod
    def get_metadata_cls() -> type:
        return SparseMLAMetadata

    @staticmethod
    def get_builder_cls() -> type:
        return SparseMLAMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type:
        return SparseMLAImpl

    @classmethod
    def validate_configuration(
        cls,
        head_size: int,
        dtype: torch.dtype,
        kv_cache_dtype: Optional[str],
        block_size: int,
        use_mla: bool = True,
        has_sink: bool = False,
        use_sparse: bool = True,
        device_capability: Optional[Tuple[int, int]] = None,
        attn_type: str = "decoder",
        **engine_features: object,
    ) -> List[str]:
        """Every reason this configuration is not served; empty when it is.

        Parameters
        ----------
        head_size : int
            Cache slot width (576 for DeepSeek-V3.2).
        dtype : torch.dtype
            Activation dtype.
        kv_cache_dtype : str or None
            ``"auto"`` (= the activation dtype) or ``"bfloat16"``; ``None`` means ``"auto"``.
        block_size : int
            Slots per cache block.
        use_mla, has_sink, use_sparse : bool
            Model features: MLA, attention sinks, DeepSeek sparse attention.
        device_capability : tuple of int, optional
            ``(major, minor)`` (vLLM's ``DeviceCapability`` is such a tuple); by default the current CUDA
            device's. Judged by :meth:`device_reasons`; a missing FA3 extension is not a reason: those
            batches run on the Triton kernel.
        attn_type : str
            ``"decoder"`` only (vLLM's ``AttentionType.DECODER`` equals it).
        **engine_features
            Further flags of the engine's selector, accepted by name (vLLM 0.33.0 passes
            ``use_mm_prefix``, ``use_per_head_quant_scales``, ``has_sliding_window``, ``use_non_causal``,
            ``use_batch_invariant``, ``use_kv_connector``, ``use_pcp``, ``use_adaptive_verification``,
            ``use_dcp``, ``use_rswa``): each truthy one is a reason, except those of
            :data:`SERVED_ENGINE_FEATURES`.

        Returns
        -------
        list of str
            One reason per unserved feature, device reasons last.
        """
        reasons = []
        if head_size not in cls.get_supported_head_sizes():
            reasons.append(f"head size {head_size} not supported (expected one of {cls.get_supported_head_sizes()})")
        if dtype not in cls.supported_dtypes:
            reasons.append(f"dtype {dtype} not supported (expected one of {cls.supported_dtypes})")
        if (kv_cache_dtype or "auto") not in cls.supported_kv_cache_dtypes:
            reasons.append(
                f"KV cache dtype {kv_cache_dtype!r} not supported (expected one of {cls.supported_kv_cache_dtypes})"
            )
        if block_size not in cls.get_supported_kernel_block_sizes():
            reasons.append(
                f"block size {block_size} not supported (expected one of {cls.get_supported_kernel_block_sizes()})"
            )
        if not use_mla:
            reasons.append("non-MLA attention not supported")
        if has_sink:
            reasons.append("attention sinks not supported")
        if not use_sparse:
            reasons.append("dense MLA not supported (sparse top-k attention only)")
        if attn_type != "decoder":
            reasons.append(f"attention type {attn_type!r} not supported (decoder only)")
        for name, value in sorted(engine_features.items()):
            if value and name not in SERVED_ENGINE_FEATURES:
                reasons.append(f"{name} not supported")
        if device_capability is None and not torch.cuda.is_available():
            reasons.append("no CUDA device")
            return reasons
        capability = device_capability or torch.cuda.get_device_capability()
        return reasons + cls.device_reasons(tuple(capability))


# --------------------------------------------------------------------------------------------------
# Metadata


@dataclasses.dataclass
class SparseMLAMetadata:
    """One step's attention metadata; every tensor is a view of the builder's persistent buffers.

    Token ``t`` attends the slots its top-k row selects among the positions ``< token_kv_len[t]`` of
    request ``req_id[t]``. Padding tokens have ``req_id`` 0, ``token_kv_len`` 0 (no valid position)
    and ``kv_len_bound`` 1.
    """

    num_actual_tokens: int  # T, padding included
    num_reqs: int
    slot_mapping: torch.Tensor  # [T] int64, the engine's, for write_kv
    block_table: torch.Tensor  # [num_reqs, max_blocks] int32, the engine's
    req_id: torch.Tensor  # [T] int32 request (block-table row) of each token
    token_kv_len: torch.Tensor  # [T] int32 causal length: positions the token may attend
    kv_len_bound: torch.Tensor  # [T] int32 max(1, min(token_kv_len, topk)): bound of the attended keys
    cu_seqlens_q: torch.Tensor  # [T + 1] int32 = 0..T, every token its own query "sequence"
    page_table: torch.Tensor  # [T, topk] int32 slot ids, valid first; filled by SparseMLAImpl.forward
    cache_seqlens: torch.Tensor  # [T] int32 valid slot ids per token; filled by SparseMLAImpl.forward


# --------------------------------------------------------------------------------------------------
# Metadata builder


class SparseMLAMetadataBuilder:
    """Builds :class:`SparseMLAMetadata` on the device, into buffers allocated once.

    ``build`` runs a few PyTorch ops on the device tensors of the step (no host synchronization) and
    writes into the prefix of persistent buffers, resetting their tail, so a CUDA graph captured around
    the forward at one padded batch size replays with the contents of a later build.

    Parameters
    ----------
    max_num_batched_tokens : int
        Most query tokens of one step, CUDA-graph padding included (the engine's scheduler budget).
    device : torch.device
        Where the buffers live (the engine's CUDA device).
    index_topk : int
        Width of a top-k row (2048 for DeepSeek-V3.2).
    """

    def __init__(self, max_num_batched_tokens: int, device: torch.device, index_topk: int = INDEX_TOPK):
        if max_num_batched_tokens < 1:
            raise ValueError(
                f"sparse_mla: argument 'max_num_batched_tokens' expected >= 1, got {max_num_batched_tokens}"
            )
        self.max_num_tokens = max_num_batched_tokens
        self.index_topk = index_topk
        self.device = torch.device(device)
        # Sizing: one row per token of the largest step, max_tokens = max_num_batched_tokens.
        #   five per-token int32 buffers: 5 * 4 * max_tokens + 4 bytes (cu_seqlens_q has T + 1 entries);
        #   page_table: max_tokens * index_topk * 4 bytes = 8 KiB per token (64 MiB at 8192 tokens).
        int32 = dict(dtype=torch.int32, device=self.device)
        max_tokens = self.max_num_tokens
        self._cu_seqlens_q = torch.arange(max_tokens + 1, **int32)  # [max_tokens + 1], never changes
        self._req_id = torch.zeros(max_tokens, **int32)  # [max_tokens]
        self._token_kv_len = torch.zeros(max_tokens, **int32)  # [max_tokens]
        self._kv_len_bound = torch.ones(max_tokens, **int32)  # [max_tokens]
        self._page_table = torch.zeros(max_tokens, index_topk, **int32)  # [max_tokens, topk]
        self._cache_seqlens = torch.zeros(max_tokens, **int32)  # [max_tokens]

    def build(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False
    ) -> SparseMLAMetadata:
        """Per-token request ids and causal lengths of one step.

        Token ``t`` of request ``r`` (``query_start_loc[r] <= t < query_start_loc[r + 1]``) may attend
        ``seq_lens[r] - query_start_loc[r + 1] + t + 1`` positions, i.e. ``seq_len - (query_len - 1 - i)``
        for its index ``i`` inside the request: one for decode, one per speculative token, causal for
        prefill. Tokens at or past ``query_start_loc[num_reqs]`` are padding.

        Parameters
        ----------
        common_prefix_len : int
            Cascade attention prefix; must be 0.
        common_attn_metadata : CommonAttentionMetadata
            The step; only its device tensors and host-side sizes are used.
        fast_build : bool
            Accepted for vLLM compatibility; the build is always the same.

        Raises
        ------
        NotImplementedError
            ``common_prefix_len`` is not 0 (cascade attention).
        ValueError, TypeError
            A size exceeds the buffers or a tensor has the wrong shape, dtype or device.
        """
        del fast_build
        if common_prefix_len != 0:
            raise NotImplementedError(
                f"sparse_mla: cascade attention not supported (common_prefix_len expected 0, got {common_prefix_len})"
            )
        common = common_attn_metadata
        num_tokens, num_reqs = common.num_actual_tokens, common.num_reqs
        if not 0 <= num_tokens <= self.max_num_tokens:
            raise ValueError(
                f"sparse_mla: argument 'num_actual_tokens' expected in [0, max_num_batched_tokens = "
                f"{self.max_num_tokens}], got {num_tokens}"
            )
        device = self.device
        check_tensor("query_start_loc", common.query_start_loc, shape=(num_reqs + 1,), dtype=torch.int32, device=device)
        check_tensor("seq_lens", common.seq_lens, shape=(num_reqs,), dtype=torch.int32, device=device)
        check_tensor(
            "block_table_tensor", common.block_table_tensor, shape=(num_reqs, None), dtype=torch.int32, device=device
        )
        check_tensor("slot_mapping", common.slot_mapping, shape=(num_tokens,), dtype=torch.int64, device=device)

        tokens = self._cu_seqlens_q[:num_tokens]  # [T] int32: 0..T-1
        req_id, token_kv_len = self._req_id[:num_tokens], self._token_kv_len[:num_tokens]
        if num_reqs == 0:  # every token is padding
            req_id.zero_()
            token_kv_len.zero_()
        else:
            ends = common.query_start_loc[1:]  # [R] int32, non-decreasing
            is_real = tokens < common.query_start_loc[num_reqs]  # [T] bool, device-side real token count
            req = torch.searchsorted(ends, tokens, right=True, out_int32=True)  # requests ended at or before t
            req = torch.where(is_real, req, 0)
            causal = common.seq_lens[req] - ends[req] + tokens + 1
            req_id.copy_(req)
            token_kv_len.copy_(torch.where(is_real, causal.clamp(min=0), 0))
        self._kv_len_bound[:num_tokens].copy_(token_kv_len.clamp(min=1, max=self.index_topk))
        self._req_id[num_tokens:].zero_()
        self._token_kv_len[num_tokens:].zero_()
        self._kv_len_bound[num_tokens:].fill_(1)
        self._cache_seqlens[num_tokens:].zero_()
        return SparseMLAMetadata(
            num_actual_tokens=num_tokens,
            num_reqs=num_reqs,
            slot_mapping=common.slot_mapping,
            block_table=common.block_table_tensor,
            req_id=req_id,
            token_kv_len=token_kv_len,
            kv_len_bound=self._kv_len_bound[:num_tokens],
            cu_seqlens_q=self._cu_seqlens_q[: num_tokens + 1],
            page_table=self._page_table[:num_tokens],
            cache_seqlens=self._cache_seqlens[:num_tokens],
        )


# --------------------------------------------------------------------------------------------------
# Impl


def fa3_num_splits(num_tokens: int, num_heads: int, num_sms: int, index_topk: int = INDEX_TOPK) -> int:
    """FA3 split-KV count: just enough CTAs for one per SM, with a bounded fp32 workspace.

    FA3 packs the ``N`` heads of a one-token query into ``ceil(N / 64)`` row tiles, so a batch has
    ``tiles = T * ceil(N / 64)`` tiles. Splitting each tile's keys ``s`` ways runs ``s * tiles`` CTAs:
    ``s = ceil(num_sms / tiles)``, at most ``index_topk / 64`` (every split keeps at least one 64-key
    tile), and 1 once the tiles alone fill the SMs. The result depends only on (T, N, SMs), so a
    CUDA graph keeps its kernel configuration.

    Workspace bound: for ``s > 1`` FA3 allocates ``out_accum [s, N, T, 512]`` and ``lse_accum [s, N, T]``
    in fp32, ``s * N * T * 513 * 4`` bytes. Since ``s > 1`` only when ``tiles < num_sms``,
    ``s * tiles < 2 * num_sms`` and ``N * T <= 64 * tiles``, the workspace stays below
    ``2 * num_sms * 64 * 513 * 4 = 262,656 * num_sms`` bytes (34.7 MB on the H200's 132 SMs) for any
    ``T``; FA3's own heuristic assumes a batch of one for varlen inputs and can ask for 32+ splits of
    every token (8.6 GB at T = 1024, N = 128).

    Parameters
    ----------
    num_tokens : int
        Padded query tokens ``T``.
    num_heads : int
        Query heads ``N``.
    num_sms : int
        Streaming multiprocessors of the device.
    index_topk : int
        Keys per token at most.

    Returns
    -------
    int
        The split count, ``>= 1``.
    """
    tiles = max(num_tokens, 1) * -(-num_heads // FA3_TILE_M)
    max_splits = max(index_topk // FA3_TILE_N, 1)
    return max(1, min(-(-num_sms // tiles), max_splits))


class SparseMLAImpl:
    """Sparse MLA attention of one layer, on the kernel :func:`sparse_mla.routing.choose_kernel` picks.

    FA3 path: index conversion into the builder's page table, then FA3 (two launches plus FA3's own).
    Triton path: the fused kernel of :mod:`sparse_mla.kernels.sparse_mla_attention`, which reads the
    request-local indices directly.

    Parameters
    ----------
    num_heads : int
        Query heads ``N`` on this rank (DeepSeek-V3.2: 128 / tensor-parallel size).
    softmax_scale : float
        Multiplies the scores (DeepSeek-V3.2: ``192 ** -0.5``, before YaRN's mscale correction).
    head_size : int
        Cache slot width, 576.
    num_kv_heads : int
        Latent KV heads, 1.
    kv_cache_dtype : str
        ``"auto"`` or ``"bfloat16"`` (bf16 cache).
    alibi_slopes, sliding_window, logits_soft_cap, sinks, kv_sharing_target_layer_name
        Unsupported features; must be ``None``.
    attn_type : str
        ``"decoder"`` only.
    check_indices : bool
        Debugging mode: raise on the first bad top-k index (host synchronization; no CUDA graphs).

    Raises
    ------
    NotImplementedError
        An unsupported feature is requested; the message names it.
    ValueError
        ``num_heads`` outside [1, 128], ``head_size`` not 576 or ``num_kv_heads`` not 1.
    """

    def __init__(
        self,
        num_heads: int,
        softmax_scale: float = DEEPSEEK_V32_SOFTMAX_SCALE,
        *,
        head_size: int = KV_CACHE_HEAD_SIZE,
        num_kv_heads: int = 1,
        kv_cache_dtype: str = "auto",
        alibi_slopes: Optional[torch.Tensor] = None,
        sliding_window: Optional[int] = None,
        logits_soft_cap: Optional[float] = None,
        sinks: Optional[torch.Tensor] = None,
        attn_type: str = "decoder",
        kv_sharing_target_layer_name: Optional[str] = None,
        check_indices: bool = False,
    ):
        unsupported = {
            "ALiBi (alibi_slopes)": alibi_slopes is not None,
            "sliding window (sliding_window)": sliding_window is not None,
            "logits soft cap (logits_soft_cap)": logits_soft_cap is not None,
            "attention sinks (sinks)": sinks is not None,
            "KV sharing (kv_sharing_target_layer_name)": kv_sharing_target_layer_name is not None,
            f"attention type {attn_type!r} (attn_type; only 'decoder')": attn_type != "decoder",
            f"KV cache dtype {kv_cache_dtype!r} (kv_cache_dtype; only 'auto' or 'bfloat16')":
                kv_cache_dtype not in SparseMLABackend.supported_kv_cache_dtypes,
        }
        for feature, requested in unsupported.items():
            if requested:
                raise NotImplementedError(f"sparse_mla: {feature} is not supported by SparseMLAImpl")
        if not 1 <= num_heads <= MAX_NUM_HEADS:
            raise ValueError(f"sparse_mla: argument 'num_heads' expected 1 <= num_heads <= {MAX_NUM_HEADS}, got {num_heads}")
        if head_size != KV_CACHE_HEAD_SIZE:
            raise ValueError(f"sparse_mla: argument 'head_size' expected {KV_CACHE_HEAD_SIZE}, got {head_size}")
        if num_kv_heads != 1:
            raise ValueError(f"sparse_mla: argument 'num_kv_heads' expected 1, got {num_kv_heads}")
        self.num_heads = num_heads
        self.softmax_scale = softmax_scale
        self.check_indices = check_indices

    def forward(
        self,
        q: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]],
        kv_cache: torch.Tensor,
        attn_metadata: SparseMLAMetadata,
        topk_indices: torch.Tensor,
        output: Optional[torch.Tensor] = None,
        return_lse: bool = False,
    ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        """Attend each query token to the cache slots its top-k row selects.

        No host synchronization (unless ``check_indices``) and, when ``output`` is given and
        ``return_lse`` is False, no allocation beyond the kernels' own workspaces: capturable in a CUDA
        graph, with the same kernels for the same padded size.

        Parameters
        ----------
        q : torch.Tensor or pair of torch.Tensor
            ``(q_nope [T, N, 512], q_rope [T, N, 64])`` or one `[T, N, 576]` tensor (split by views,
            no copy); bf16, last dimension contiguous, other strides free (vLLM's ``ql_nope`` is a
            transposed `[N, T, 512]` bmm result).
        kv_cache : torch.Tensor
            `[num_blocks, 64, 576]` bf16 with contiguous slots; the block stride may exceed `64 * 576`
            elements (a padded vLLM cache) but must be a whole number of 576-element slots.
        attn_metadata : SparseMLAMetadata
            From :meth:`SparseMLAMetadataBuilder.build` for this step.
        topk_indices : torch.Tensor
            `[T, topk]` int32 request-local positions, ``-1`` = none, anywhere in the row.
        output : torch.Tensor, optional
            `[T, N, 512]` bf16, written in place and returned.
        return_lse : bool
            Also return the log-sum-exp of the scaled scores.

        Returns
        -------
        out : torch.Tensor
            `[T, N, 512]` bf16; zero for a token without valid positions.
        lse : torch.Tensor
            Only with ``return_lse``: `[T, N]` fp32 natural log, ``-inf`` for a token without valid
            positions (on the FA3 path a transposed view of FA3's `[N, T]`).

        Raises
        ------
        TypeError, ValueError
            A tensor has the wrong shape, dtype or device; the message names it.
        """
        q_nope, q_rope = self._split_q(q)
        num_tokens = attn_metadata.num_actual_tokens
        topk = attn_metadata.page_table.shape[1]
        check_tensor("q_nope", q_nope, shape=(num_tokens, self.num_heads, KV_LORA_RANK), dtype=torch.bfloat16)
        check_tensor("q_rope", q_rope, shape=(num_tokens, self.num_heads, QK_ROPE_HEAD_DIM), dtype=torch.bfloat16)
        check_tensor("kv_cache", kv_cache, shape=(None, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE), dtype=torch.bfloat16)
        check_tensor("topk_indices", topk_indices, shape=(num_tokens, topk), dtype=torch.int32)
        if output is not None:
            check_tensor("output", output, shape=(num_tokens, self.num_heads, KV_LORA_RANK), dtype=torch.bfloat16)
        for name, tensor in (("q_nope", q_nope), ("q_rope", q_rope), ("output", output)):
            if tensor is not None:
                check_unit_last_stride(name, tensor)  # other strides are free: vLLM's transposed ql_nope view
        check_kv_cache_slot_strides("kv_cache", kv_cache)  # either route: FA3 needs a whole-slot block stride
        device = attn_metadata.page_table.device
        for name, tensor in (("q_nope", q_nope), ("q_rope", q_rope), ("kv_cache", kv_cache), ("topk_indices", topk_indices)):
            check_tensor(name, tensor, device=device)

        if routing.choose_kernel(self.num_heads, num_tokens) == "triton":
            # The fused kernel converts the indices itself: no page table, no second launch.
            if self.check_indices:
                check_topk_indices(topk_indices, attn_metadata.req_id, attn_metadata.token_kv_len,
                                   attn_metadata.block_table, kv_cache.shape[0])
            return sparse_mla_attention(
                q_nope, q_rope, kv_cache, topk_indices,
                attn_metadata.req_id, attn_metadata.token_kv_len, attn_metadata.block_table,
                self.softmax_scale, out=output, return_lse=return_lse,
            )
        slot_rows, block_stride_rows = slot_rows_view(kv_cache)  # [rows, 576], slot ids index its rows
        topk_to_slots(
            topk_indices,
            attn_metadata.req_id,
            attn_metadata.token_kv_len,
            attn_metadata.block_table,
            kv_cache.shape[0],
            slot_ids=attn_metadata.page_table,
            valid_count=attn_metadata.cache_seqlens,
            check=self.check_indices,
            block_stride_rows=block_stride_rows,
        )
        # Page size 1: every cache slot is one "page" of one key; keys are the rotary part, values the latent.
        k_cache = slot_rows[:, KV_LORA_RANK:].view(-1, 1, 1, QK_ROPE_HEAD_DIM)  # [rows, 1, 1, 64]
        v_cache = slot_rows[:, :KV_LORA_RANK].view(-1, 1, 1, KV_LORA_RANK)  # [rows, 1, 1, 512]
        result = fa3.flash_attn_with_kvcache(
            q_rope,
            k_cache=k_cache,
            v_cache=v_cache,
            qv=q_nope,
            page_table=attn_metadata.page_table,
            cache_seqlens=attn_metadata.cache_seqlens,
            cu_seqlens_q=attn_metadata.cu_seqlens_q,
            max_seqlen_q=1,
            softmax_scale=self.softmax_scale,
            causal=False,
            num_splits=fa3_num_splits(num_tokens, self.num_heads, device_info.num_sms(device), topk),
            return_softmax_lse=return_lse,
            out=output,
        )
        if not return_lse:
            return result
        out, lse = result
        return out, lse.transpose(0, 1)

    @staticmethod
    def _split_q(q: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(q_nope, q_rope)`` from a pair, or views of one `[T, N, 576]` tensor."""
        if isinstance(q, (tuple, list)):
            if len(q) != 2:
                raise ValueError(f"sparse_mla: argument 'q' expected (q_nope, q_rope), got {len(q)} tensors")
            return q[0], q[1]
        check_tensor("q", q, shape=(None, None, KV_CACHE_HEAD_SIZE))
        return q[..., :KV_LORA_RANK], q[..., KV_LORA_RANK:]
