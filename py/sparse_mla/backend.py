"""DeepSeek-V3.2 sparse-MLA attention backend, in the shape of a vLLM attention backend.

Read top-down: :class:`SparseMLABackend` (what is served) → :class:`SparseMLAMetadata` (what one step
carries, its plan included) → :class:`SparseMLAMetadataBuilder` (builds and plans it once per step,
CUDA-graph safe) → :class:`SparseMLAImpl` (validates one layer's arguments and runs the step's route).

Every query token is its own attention "sequence" of length 1 whose keys are the cache slots its
top-k row selects: the builder finds each token's request and causal length, and picks the step's
route (:mod:`sparse_mla.routing`, from the head count and padded token count, or the builder's
``route=``) with everything that route decides per step (:mod:`sparse_mla.routes`). The decode route's
CUDA kernels and the Triton route's fused kernel read the request-local top-k positions directly; on
the FA3 route each layer turns them into a page table of slot ids (valid ids first) and runs FA3 on it
with page size 1, latent values ``c_kv`` (512) and rotary keys ``k_rope`` (64) read from the one cache.

Example
-------
>>> builder = SparseMLAMetadataBuilder(max_num_batched_tokens=8192, device=torch.device("cuda"), num_heads=16)
>>> impl = SparseMLAImpl(num_heads=16)
>>> write_kv(kv_c_normed, k_pe, kv_cache, common.slot_mapping)     # this step's new tokens
>>> metadata = builder.build(0, common)
>>> out = impl.forward((q_nope, q_rope), kv_cache, metadata, topk_indices)   # [T, 16, 512] bf16
"""

import dataclasses
from typing import Dict, List, Optional, Tuple, Union

import torch

from sparse_mla import kv_cache_format, routing
from sparse_mla.checks import (
    check_finite_real,
    check_int,
    check_kv_cache_slot_strides,
    check_num_heads,
    check_tensor,
    check_topk_indices,
    check_unit_last_stride,
)
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
from sparse_mla.kernels.sparse_mla_attention import max_default_shared_memory_bytes
from sparse_mla.ops import decode, fa3, library, token_metadata
from sparse_mla.routes import ROUTES, PreparedStep, Route, RoutePlan, RouteWorkspace, StepContext
from sparse_mla.topk_filter import DcpShard, check_topk_length, rows_to_check

MIN_TRITON_COMPUTE_CAPABILITY = (8, 0)
"""The fused Triton kernel's bf16 ``tl.dot`` needs tensor cores with bf16 inputs: Ampere or newer."""


# --------------------------------------------------------------------------------------------------
# Backend


class SparseMLABackend:
    """What this backend serves: DeepSeek-V3.2 sparse MLA, bf16 activations, on GPUs whose shared memory
    holds the Triton kernel's launch configurations (Hopper, and the 227 KiB parts after it); on Hopper
    with our op libraries, the decode kernels and FA3 serve the steps the routing table gives them.

    KV cache `[num_blocks, 64, 576]` bf16, each slot ``[c_kv (512) | k_rope (64)]``, one latent head shared
    by all query heads; or, with ``kv_cache_dtype="fp8_ds_mla"``, the uint8 cache `[num_blocks, 64, 656]`
    (:mod:`sparse_mla.fp8_ds_mla`), read by the decode kernels on Hopper and by the Triton kernel elsewhere
    (FA3 reads bf16 only).
    """

    accept_output_buffer = True
    supported_dtypes: List[torch.dtype] = [torch.bfloat16]
    # "auto" = the activation dtype, bf16; "fp8_ds_mla" = the 656-byte fp8 cache (sparse_mla.kv_cache_format)
    supported_kv_cache_dtypes: List[str] = list(kv_cache_format.KV_CACHE_DTYPES)

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

        On the current device, when FA3 runs there (sm_90a, built): served, since FA3 and the decode kernel
        take every batch (the routing table's grids, of either cache format, name no Triton entry then). FA3 is built for sm_90a and runs
        on 9.x only; elsewhere, or without the FA3 library, :mod:`sparse_mla.routing` sends batches to the
        fused Triton kernel, so the device must run that kernel: compute capability >= 8.0 (bf16
        ``tl.dot``) and enough shared memory per block for every launch configuration
        :func:`~sparse_mla.kernels.sparse_mla_attention.default_launch_config` may pick
        (:func:`~sparse_mla.kernels.sparse_mla_attention.max_default_shared_memory_bytes`, 198,144 B on a
        132-SM GPU) within the device's opt-in shared memory per block
        (:func:`sparse_mla.device_info.optin_shared_memory_per_block`: 227 KiB on 9.0 and 10.0, 163 KiB on
        8.0, 99 KiB on 8.6, 8.9 and 12.0). The current device's SM count and shared memory are used when it
        has ``capability``, else those of a 132-SM GPU and the CUDA programming guide's table. Measured on
        the H200 only: 10.x compiles other instructions (tcgen05), so its figure is this bound, untested.

        Raises
        ------
        TypeError
            ``capability`` not a pair of ints, e.g. the string ``"9.0"``.
        """
        if not (isinstance(capability, (tuple, list)) and len(capability) == 2
                and all(isinstance(c, int) and not isinstance(c, bool) for c in capability)):
            raise TypeError(f"sparse_mla: argument 'capability' expected (major, minor) ints, e.g. (9, 0), got "
                            f"{capability!r}")
        major, minor = capability
        name = f"compute capability {major}.{minor}"
        current = torch.cuda.is_available() and torch.cuda.get_device_capability() == (major, minor)
        triton_routed = any("triton" in row for fmt in routing.CACHE_FORMATS
                            for row in routing.load_table(routing.device_table_path(), fmt)[2].values())
        if current and fa3.is_available() and not triton_routed:
            return []  # FA3 (and the decode kernel) serve every batch here; Triton is never routed to
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
        """`(num_blocks, 64, 576)`, or `(num_blocks, 64, 656)` for ``cache_dtype_str="fp8_ds_mla"`` (a uint8
        tensor: 656 bytes per slot): the latent cache has no head dimension.

        ``head_size`` is the model's 576 for every format, as vLLM 0.33.0 passes it (its
        ``FlashMLASparseBackend.get_kv_cache_shape`` returns `(num_blocks, block_size, 656)` for fp8_ds_mla from
        the same arguments; ``MLAAttentionSpec`` counts 656 bytes per slot for it).

        Raises
        ------
        TypeError
            ``num_blocks`` not an int.
        ValueError
            ``num_blocks`` negative, ``block_size`` not 64, ``num_kv_heads`` not 1, ``head_size`` not 576 or
            ``cache_dtype_str`` not one of :attr:`supported_kv_cache_dtypes`.
        """
        num_blocks = check_int("num_blocks", num_blocks)
        if num_blocks < 0:
            raise ValueError(f"sparse_mla: argument 'num_blocks' expected >= 0, got {num_blocks}")
        expected = {
            "block_size": (block_size, KV_BLOCK_SIZE),
            "num_kv_heads": (num_kv_heads, 1),
            "head_size": (head_size, KV_CACHE_HEAD_SIZE),
        }
        for name, (got, want) in expected.items():
            if got != want:
                raise ValueError(f"sparse_mla: argument '{name}' expected {want!r}, got {got!r}")
        fmt = kv_cache_format.format_of_kv_cache_dtype(cache_dtype_str, "cache_dtype_str")
        return (num_blocks, *fmt.block_shape)

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
        use_dcp: bool = False,
        **features: object,
    ) -> List[str]:
        """Every reason this configuration is not served; empty when it is.

        Parameters
        ----------
        head_size : int
            Cache slot width (576 for DeepSeek-V3.2).
        dtype : torch.dtype
            Activation dtype.
        kv_cache_dtype : str or None
            ``"auto"`` (= the activation dtype), ``"bfloat16"`` or ``"fp8_ds_mla"``; ``None`` means ``"auto"``.
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
        use_dcp : bool
            Decode context parallelism: served (the builder's ``dcp_*`` arguments, the LSE of ``forward``).
        **features
            Further feature flags by name (an engine adapter passes its selector's, less the ones it
            serves: :mod:`sparse_mla_vllm.backend`); each truthy one is a reason.

        Returns
        -------
        list of str
            One reason per unserved feature, device reasons last.
        """
        del use_dcp  # served on every route
        reasons = []
        if head_size not in cls.get_supported_head_sizes():
            reasons.append(f"head size {head_size} not supported (expected one of {cls.get_supported_head_sizes()})")
        if dtype not in cls.supported_dtypes:
            reasons.append(f"dtype {dtype} not supported (expected one of {cls.supported_dtypes})")
        if not kv_cache_format.serves_kv_cache_dtype(kv_cache_dtype):
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
        for name, value in sorted(features.items()):
            if value:
                reasons.append(f"{name} not supported")
        if device_capability is None and not torch.cuda.is_available():
            reasons.append("no CUDA device")
            return reasons
        capability = device_capability or torch.cuda.get_device_capability()
        return reasons + cls.device_reasons(tuple(capability))


# --------------------------------------------------------------------------------------------------
# Metadata


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """Everything about a step that depends only on its padded token count ``T``: decided by
    :meth:`SparseMLAMetadataBuilder.step_plan` on the first step of that ``T`` and shared by every later one."""

    route: Route  # the route serving these steps (sparse_mla.routes)
    plan: RoutePlan  # route.plan(context): the steps' host decisions
    workspace: RouteWorkspace  # the route's persistent buffers, owned by the builder
    tokens: torch.Tensor  # [T] int32 0..T-1
    tokens_plus_one: torch.Tensor  # [T] int32 1..T
    req_id: torch.Tensor  # [T] views of the builder's buffers
    token_kv_len: torch.Tensor
    kv_len_bound: torch.Tensor
    cu_seqlens_q: torch.Tensor  # [T + 1]


@dataclasses.dataclass(slots=True)
class SparseMLAMetadata:
    """One step's attention metadata and plan; every tensor is a view of the builder's persistent buffers.

    Token ``t`` attends the slots its top-k row selects among the positions ``< token_kv_len[t]`` of
    request ``req_id[t]`` (under DCP: those of them this rank stores, :mod:`sparse_mla.topk_filter`). Padding tokens have ``req_id`` 0, ``token_kv_len`` 0 (no valid position)
    and ``kv_len_bound`` 1. ``step`` (the route, its plan and workspace) and ``prepared`` are decided in
    :meth:`SparseMLAMetadataBuilder.build` and only read by :meth:`SparseMLAImpl.forward`.
    """

    num_actual_tokens: int  # T, padding included
    num_reqs: int
    num_heads: int  # N the step was planned for (the builder's)
    kv_cache_format: str  # the cache format the step was planned for (the builder's kv_cache_dtype)
    index_topk: int  # K, width of a top-k row
    slot_mapping: torch.Tensor  # [T] int64, the engine's, for write_kv
    block_table: torch.Tensor  # [num_reqs, max_blocks] int32, the engine's
    req_id: torch.Tensor  # [T] int32 request (block-table row) of each token
    token_kv_len: torch.Tensor  # [T] int32 causal length: positions the token may attend
    kv_len_bound: torch.Tensor  # [T] int32 max(1, min(token_kv_len, topk)): bound of the attended keys
    cu_seqlens_q: torch.Tensor  # [T + 1] int32 = 0..T, every token its own query "sequence"
    dcp: DcpShard  # this rank's shard of the cache (the builder's); positions and token_kv_len are global
    step: StepPlan  # the route, plan and workspace of every step of this T
    prepared: PreparedStep = None  # step.route.prepare of this step (FA3: page-table views, scheduler metadata)

    @property
    def route(self) -> Route:
        """The route serving this step."""
        return self.step.route


# --------------------------------------------------------------------------------------------------
# Metadata builder


PADDING_OFFSET = -(1 << 30)
"""Causal-length offset of the padding "request" in ``build``: any token's ``offset + t + 1`` stays
negative (``T < 2**30``), so the clamp to 0 gives padding tokens no valid position, in int32."""


class SparseMLAMetadataBuilder:
    """Builds :class:`SparseMLAMetadata` on the device, into buffers allocated once, and plans each step.

    ``build`` runs a few PyTorch ops on the device tensors of the step (no host synchronization) and
    writes into the prefix of persistent buffers, resetting what an earlier, larger step left past it,
    so a CUDA graph captured around the forward at one padded batch size replays with the contents of a
    later build. Everything that depends only on the padded token count ``T`` (with the head count,
    the SM count and the top-k width fixed here) -- the route, its plan (split counts, launch
    configuration) and the views of the buffers -- is decided on the first step of that ``T`` and
    reused; the routes' workspaces are allocated here for the largest step.

    Parameters
    ----------
    max_num_batched_tokens : int
        Most query tokens of one step, CUDA-graph padding included (the engine's scheduler budget).
    device : torch.device
        Where the buffers live (the engine's CUDA device).
    num_heads : int
        Query heads ``N`` of each layer on this rank (DeepSeek-V3.2: 128 / tensor-parallel size), as
        the :class:`SparseMLAImpl` of every layer has.
    index_topk : int
        Width of a top-k row (2048 for DeepSeek-V3.2), 1 to :data:`sparse_mla.ops.decode.MAX_TOPK`
        (524288: the widest row the decode kernel's splits hold; every route serves every width up to it).
    route : str, optional
        A name of :data:`sparse_mla.routes.ROUTES` that serves every step, overriding the routing
        table (tests, the benchmark); ``None``: :func:`sparse_mla.routing.choose_route` per ``T``.
    kv_cache_dtype : str, optional
        The cache format the layers read, as :class:`SparseMLAImpl` takes it (``"auto"``, ``"bfloat16"`` or
        ``"fp8_ds_mla"``; ``None`` = ``"auto"``): only routes that read it are chosen (``Route.cache_formats``).
    dcp_rank, dcp_world_size, dcp_interleave : int
        Decode context parallelism (:class:`sparse_mla.topk_filter.DcpShard`): this rank of
        ``dcp_world_size`` holds global position ``p`` when ``(p // dcp_interleave) % dcp_world_size ==
        dcp_rank``, at rank-local position ``(p // (dcp_world_size * dcp_interleave)) * dcp_interleave + p %
        dcp_interleave`` of its block table. The step's ``seq_lens`` and the top-k positions stay global;
        every route attends only this rank's positions, so ``forward(..., return_lse=True)`` gives the
        ``(out, lse)`` to merge across ranks (:func:`sparse_mla.merge.merge_attention_states`). Default: no DCP.

    Raises
    ------
    TypeError
        ``max_num_batched_tokens``, ``num_heads``, ``index_topk`` or a ``dcp_*`` argument not an int (Python or
        NumPy, not a bool).
    ValueError
        A ``device`` that names no device (e.g. ``"gpu"``, ``None``) or neither CUDA nor the CPU (e.g. ``"meta"``),
        a CUDA ``device`` this process does not see (a CPU build of torch, an index past the devices), a ``dcp_*``
        argument out of range, ``max_num_batched_tokens < 1``, ``num_heads`` outside [1, 128], ``index_topk``
        outside [1, :data:`sparse_mla.ops.decode.MAX_TOPK`], an unknown ``route`` or ``kv_cache_dtype``, or a
        ``route`` that cannot read the ``kv_cache_dtype`` cache.
    """

    def __init__(
        self,
        max_num_batched_tokens: int,
        device: torch.device,
        num_heads: int,
        index_topk: int = INDEX_TOPK,
        *,
        route: Optional[str] = None,
        kv_cache_dtype: Optional[str] = "auto",
        dcp_rank: int = 0,
        dcp_world_size: int = 1,
        dcp_interleave: int = 1,
    ):
        self.dcp = DcpShard(dcp_rank, dcp_world_size, dcp_interleave)
        max_num_batched_tokens = check_int("max_num_batched_tokens", max_num_batched_tokens)
        index_topk = check_int("index_topk", index_topk)
        if max_num_batched_tokens < 1:
            raise ValueError(
                f"sparse_mla: argument 'max_num_batched_tokens' expected >= 1, got {max_num_batched_tokens}"
            )
        num_heads = check_num_heads("num_heads", num_heads)
        if not 1 <= index_topk <= decode.MAX_TOPK:
            raise ValueError(
                f"sparse_mla: argument 'index_topk' expected 1 <= index_topk <= {decode.MAX_TOPK} (the decode "
                f"kernel's {decode.MAX_SPLITS} splits of {decode.MAX_POSITIONS_PER_SPLIT} positions), got {index_topk}"
            )
        if route is not None and route not in ROUTES:
            raise ValueError(f"sparse_mla: argument 'route' expected None or one of {tuple(ROUTES)}, got {route!r}")
        self.kv_cache_format = kv_cache_format.format_of_kv_cache_dtype(kv_cache_dtype)
        if route is not None and self.kv_cache_format.name not in ROUTES[route].cache_formats:
            readers = tuple(name for name, r in ROUTES.items() if self.kv_cache_format.name in r.cache_formats)
            raise ValueError(
                f"sparse_mla: argument 'route' expected a route that reads the {self.kv_cache_format.name} cache "
                f"(one of {readers}), got {route!r}"
            )
        self.max_num_tokens = max_num_batched_tokens
        self.num_heads = num_heads
        self.index_topk = index_topk
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"sparse_mla: argument 'device' expected a torch.device or a device string such as "
                             f"'cuda:0', got {device!r}") from e
        if self.device.type not in routing.DEVICE_TYPES:
            raise ValueError(f"sparse_mla: argument 'device' expected a CUDA device (or the CPU, where the Triton route "
                             f"runs under its interpreter), got {self.device}")
        if self.device.type == "cuda":
            if not (torch.cuda.is_available() and (self.device.index or 0) < torch.cuda.device_count()):
                raise ValueError(f"sparse_mla: argument 'device' expected a CUDA device this process sees "
                                 f"({torch.cuda.device_count()} of them; torch {torch.__version__}), got {self.device}")
            # "cuda" without an index: where it allocates, the current device
            self.device = torch.device("cuda", library.cuda_device_index(self.device.index))
        self.route_override = route
        self.num_sms = device_info.num_sms(self.device)
        # The per-token work of build: one CUDA launch where our op library runs, else PyTorch ops.
        self._token_metadata_kernel = self.device.type == "cuda" and bool(
            token_metadata.is_available(self.device.index))
        # Sizing: one row per token of the largest step, max_tokens = max_num_batched_tokens: four
        # per-token int32 buffers, 4 * 4 * max_tokens + 4 bytes (cu_seqlens_q has T + 1 entries), plus
        # the routes' workspaces (sparse_mla.routes.*: e.g. FA3's page table, 8 KiB per token).
        int32 = dict(dtype=torch.int32, device=self.device)
        max_tokens = self.max_num_tokens
        self._cu_seqlens_q = torch.arange(max_tokens + 1, **int32)  # [max_tokens + 1], never changes
        self._req_id = torch.zeros(max_tokens, **int32)  # [max_tokens]
        self._token_kv_len = torch.zeros(max_tokens, **int32)  # [max_tokens]
        self._kv_len_bound = torch.ones(max_tokens, **int32)  # [max_tokens]
        self._written_end = 0  # entries past it hold the padding values (0, 0, 1)
        self._padding_offset = torch.full((1,), PADDING_OFFSET, **int32)  # [1]
        names = [route] if route is not None else routing.routes_up_to(num_heads, max_tokens, self.device.type,
                                                                         self.kv_cache_format.name, self.device.index)
        largest = self.step_context(max_tokens)
        self.workspaces: Dict[str, RouteWorkspace] = {name: ROUTES[name].make_workspace(largest) for name in names}
        self._steps: Dict[int, StepPlan] = {}

    def step_context(self, num_tokens: int) -> StepContext:
        """The :class:`~sparse_mla.routes.StepContext` routes plan a step of ``num_tokens`` padded tokens from."""
        return StepContext(num_tokens, self.num_heads, self.num_sms, self.index_topk, self.device,
                           self.kv_cache_format.name)

    def step_plan(self, num_tokens: int) -> StepPlan:
        """The route, plan and buffer views of a step of ``num_tokens`` padded tokens (made once per ``T``).

        Raises
        ------
        ValueError
            ``num_tokens`` outside ``[0, max_num_batched_tokens]``.
        """
        step = self._steps.get(num_tokens)
        if step is not None:
            return step
        if not 0 <= num_tokens <= self.max_num_tokens:
            raise ValueError(
                f"sparse_mla: argument 'num_actual_tokens' expected in [0, max_num_batched_tokens = "
                f"{self.max_num_tokens}], got {num_tokens}"
            )
        name = self.route_override or routing.choose_route(self.num_heads, num_tokens, self.device.type,
                                                           self.kv_cache_format.name, self.device.index)
        route = ROUTES[name]
        step = StepPlan(
            route=route,
            plan=route.plan(self.step_context(num_tokens)),
            workspace=self.workspaces[name],
            tokens=self._cu_seqlens_q[:num_tokens],
            tokens_plus_one=self._cu_seqlens_q[1 : num_tokens + 1],
            req_id=self._req_id[:num_tokens],
            token_kv_len=self._token_kv_len[:num_tokens],
            kv_len_bound=self._kv_len_bound[:num_tokens],
            cu_seqlens_q=self._cu_seqlens_q[: num_tokens + 1],
        )
        self._steps[num_tokens] = step
        return step

    def build(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False
    ) -> SparseMLAMetadata:
        """Per-token request ids and causal lengths of one step, and its plan.

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
        TypeError
            ``common_attn_metadata`` without ``num_actual_tokens`` and ``num_reqs``, either not an int, or a tensor
            of the wrong dtype.
        ValueError
            ``num_reqs`` negative, ``num_actual_tokens`` outside ``[0, max_num_batched_tokens]``, or a tensor of the
            wrong shape or device. The contents of ``query_start_loc`` and ``seq_lens`` are the engine's and are
            not read on the host (no synchronization): out of order, they give wrong lengths, never reads out of
            the cache (every position is still bounded by the block table and the cache).
        """
        del fast_build
        if common_prefix_len != 0:
            raise NotImplementedError(
                f"sparse_mla: cascade attention not supported (common_prefix_len expected 0, got {common_prefix_len})"
            )
        common = common_attn_metadata
        try:
            num_tokens, num_reqs = common.num_actual_tokens, common.num_reqs
        except AttributeError as e:
            raise TypeError(f"sparse_mla: argument 'common_attn_metadata' expected a CommonAttentionMetadata, got "
                            f"{type(common).__name__}") from e
        if type(num_tokens) is not int or type(num_reqs) is not int:  # the engine's are ints: no cost on its path
            num_tokens, num_reqs = check_int("num_actual_tokens", num_tokens), check_int("num_reqs", num_reqs)
        if num_reqs < 0:
            raise ValueError(f"sparse_mla: argument 'num_reqs' expected >= 0, got {num_reqs}")
        step = self.step_plan(num_tokens)
        device = step.tokens.device
        query_start_loc, seq_lens = common.query_start_loc, common.seq_lens
        _check_fast("query_start_loc", query_start_loc, (num_reqs + 1,), torch.int32, device)
        _check_fast("seq_lens", seq_lens, (num_reqs,), torch.int32, device)
        block_table = common.block_table_tensor
        if not (isinstance(block_table, torch.Tensor) and block_table.dim() == 2 and block_table.shape[0] == num_reqs
                and block_table.dtype is torch.int32 and block_table.device == device):
            check_tensor("block_table_tensor", block_table, shape=(num_reqs, None), dtype=torch.int32, device=device)
        _check_fast("slot_mapping", common.slot_mapping, (num_tokens,), torch.int64, device)

        if self._token_metadata_kernel:  # one launch: this step's entries and the stale tail
            token_metadata.token_metadata(query_start_loc, seq_lens, num_tokens, max(num_tokens, self._written_end),
                                          self.index_topk, self._req_id, self._token_kv_len, self._kv_len_bound)
        else:
            self._token_metadata_torch(step, query_start_loc, seq_lens, num_tokens, num_reqs)
        self._written_end = num_tokens
        metadata = SparseMLAMetadata(
            num_actual_tokens=num_tokens,
            num_reqs=num_reqs,
            num_heads=self.num_heads,
            kv_cache_format=self.kv_cache_format.name,
            index_topk=self.index_topk,
            slot_mapping=common.slot_mapping,
            block_table=block_table,
            req_id=step.req_id,
            token_kv_len=step.token_kv_len,
            kv_len_bound=step.kv_len_bound,
            cu_seqlens_q=step.cu_seqlens_q,
            dcp=self.dcp,
            step=step,
        )
        metadata.prepared = step.route.prepare(step.plan, step.workspace, metadata)
        return metadata

    def _token_metadata_torch(self, step: "StepPlan", query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                              num_tokens: int, num_reqs: int) -> None:
        """:func:`sparse_mla.ops.token_metadata.token_metadata`'s function in PyTorch ops (CPU, or no op
        library): this step's entries, then the reset of what a larger earlier step left past them."""
        if num_reqs == 0:  # every token is padding
            step.req_id.zero_()
            step.token_kv_len.zero_()
        else:
            ends = query_start_loc[1:]  # [R] int32, non-decreasing
            # Request of each token: ends at or before t; R for padding tokens (t >= ends[R - 1]).
            torch.searchsorted(ends, step.tokens, right=True, out_int32=True, out=step.req_id)
            # Causal length seq_lens[r] - ends[r] + t + 1, through a per-request offset with one more
            # entry for the padding "request" R whose offset keeps every length negative, then clamped.
            offsets = torch.cat((torch.sub(seq_lens, ends), self._padding_offset))  # [R + 1]
            torch.add(torch.index_select(offsets, 0, step.req_id), step.tokens_plus_one, out=step.token_kv_len)
            step.token_kv_len.clamp_(min=0)
            step.req_id.remainder_(num_reqs)  # padding: R -> request 0
        torch.clamp(step.token_kv_len, 1, self.index_topk, out=step.kv_len_bound)
        if self._written_end > num_tokens:
            self._req_id[num_tokens : self._written_end].zero_()
            self._token_kv_len[num_tokens : self._written_end].zero_()
            self._kv_len_bound[num_tokens : self._written_end].fill_(1)


# --------------------------------------------------------------------------------------------------
# Impl


class SparseMLAImpl:
    """Sparse MLA attention of one layer, on the route its step's metadata carries.

    ``forward`` validates its arguments and calls the step's route's ``run`` (:mod:`sparse_mla.routes`):
    on the decode route our CUDA kernels (:mod:`sparse_mla.ops.decode`) and on the Triton route the fused
    kernel of :mod:`sparse_mla.kernels.sparse_mla_attention`, both reading the request-local indices
    directly; on the FA3 route the index conversion into the step's page table, then FA3.

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
        ``"auto"`` or ``"bfloat16"`` (bf16 cache), or ``"fp8_ds_mla"`` (the uint8 656-byte cache); the
        metadata builder must be given the same (it picks routes that read the format).
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
    TypeError
        ``num_heads`` not an int or ``softmax_scale`` not a real number.
    ValueError
        ``num_heads`` outside [1, 128], ``softmax_scale`` not finite, ``head_size`` not 576 or ``num_kv_heads`` not 1.
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
            f"KV cache dtype {kv_cache_dtype!r} (kv_cache_dtype; only {SparseMLABackend.supported_kv_cache_dtypes})":
                not kv_cache_format.serves_kv_cache_dtype(kv_cache_dtype),
        }
        for feature, requested in unsupported.items():
            if requested:
                raise NotImplementedError(f"sparse_mla: {feature} is not supported by SparseMLAImpl")
        num_heads = check_num_heads("num_heads", num_heads)
        check_finite_real("softmax_scale", softmax_scale)
        if head_size != KV_CACHE_HEAD_SIZE:
            raise ValueError(f"sparse_mla: argument 'head_size' expected {KV_CACHE_HEAD_SIZE}, got {head_size}")
        if num_kv_heads != 1:
            raise ValueError(f"sparse_mla: argument 'num_kv_heads' expected 1, got {num_kv_heads}")
        self.num_heads = num_heads
        self.softmax_scale = softmax_scale
        self.check_indices = check_indices
        self.kv_cache_format = kv_cache_format.format_of_kv_cache_dtype(kv_cache_dtype)


    def forward(
        self,
        q: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]],
        kv_cache: torch.Tensor,
        attn_metadata: SparseMLAMetadata,
        topk_indices: torch.Tensor,
        output: Optional[torch.Tensor] = None,
        return_lse: bool = False,
        topk_length: Optional[torch.Tensor] = None,
    ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        """Attend each query token to the cache slots its top-k row selects.

        No host synchronization (unless ``check_indices``) and, when ``output`` is given and
        ``return_lse`` is False, no allocation beyond FA3's own split workspace: capturable in a CUDA
        graph, with the same kernels and buffers for the same padded size (the step's plan).

        Parameters
        ----------
        q : torch.Tensor or pair of torch.Tensor
            ``(q_nope [T, N, 512], q_rope [T, N, 64])`` or one `[T, N, 576]` tensor (split by views,
            no copy); bf16, last dimension contiguous, other strides free (vLLM's ``ql_nope`` is a
            transposed `[N, T, 512]` bmm result).
        kv_cache : torch.Tensor
            `[num_blocks, 64, 576]` bf16 with contiguous slots; the block stride may exceed `64 * 576`
            elements (a padded vLLM cache) but must be a whole number of 576-element slots. With
            ``kv_cache_dtype="fp8_ds_mla"``: `[num_blocks, 64, 656]` uint8, likewise in whole 656-byte slots.
        attn_metadata : SparseMLAMetadata
            From :meth:`SparseMLAMetadataBuilder.build` for this step, planned for this layer's ``N``.
        topk_indices : torch.Tensor
            `[T, topk]` int32 request-local positions, ``-1`` = none, anywhere in the row (global positions
            under DCP: each rank attends those it stores). An entry below -1 or at or past the token's
            sequence length counts as ``-1`` on every route (nothing read out of bounds); ``check_indices``
            raises on it instead.
        output : torch.Tensor, optional
            `[T, N, 512]` bf16, written in place and returned.
        return_lse : bool
            Also return the log-sum-exp of the scaled scores.
        topk_length : torch.Tensor, optional
            `[T]` int32 on the metadata's device: entries at columns ``>= topk_length[t]`` count as ``-1``
            (the same result as writing ``-1`` there); read on the device (no host sync, graph safe).

        Returns
        -------
        out : torch.Tensor
            `[T, N, 512]` bf16; zero for a token without valid positions.
        lse : torch.Tensor
            Only with ``return_lse``: `[T, N]` fp32 natural log, ``-inf`` for a token without valid
            positions.

        Raises
        ------
        TypeError, ValueError
            A tensor has the wrong shape, dtype or device, ``attn_metadata`` is not a step's metadata or was
            planned for another head count, or its route cannot read this cache format; the message names the
            argument.
        RuntimeError
            The step's route, forced by the builder's ``route=``, cannot run here (e.g. ``"fa3"`` without a CUDA
            device or its library).
        """
        if not isinstance(attn_metadata, SparseMLAMetadata):
            raise TypeError(f"sparse_mla: argument 'attn_metadata' expected the SparseMLAMetadata of "
                            f"SparseMLAMetadataBuilder.build, got {type(attn_metadata).__name__}")
        q_nope, q_rope = self._split_q(q)
        metadata = attn_metadata
        num_tokens, num_heads = metadata.num_actual_tokens, self.num_heads
        if metadata.num_heads != num_heads:
            raise ValueError(
                f"sparse_mla: argument 'attn_metadata' expected a step planned for num_heads = {num_heads}, "
                f"got {metadata.num_heads} (the builder's num_heads)"
            )
        device = metadata.req_id.device
        _check_fast("q_nope", q_nope, (num_tokens, num_heads, KV_LORA_RANK), torch.bfloat16, device)
        _check_fast("q_rope", q_rope, (num_tokens, num_heads, QK_ROPE_HEAD_DIM), torch.bfloat16, device)
        fmt = self.kv_cache_format
        if not (isinstance(kv_cache, torch.Tensor) and kv_cache.dim() == 3 and kv_cache.shape[1:] == fmt.block_shape
                and kv_cache.dtype is fmt.dtype and kv_cache.device == device
                and kv_cache.data_ptr() % kv_cache_format.KV_CACHE_ALIGNMENT == 0):
            kv_cache_format.check_kv_cache("kv_cache", kv_cache, fmt, device)
        # The builder picks only routes that read its format: a step planned for another format might work
        # on some step sizes and fail on others, so it is refused on every one.
        if metadata.kv_cache_format != fmt.name:
            raise ValueError(
                f"sparse_mla: argument 'attn_metadata' expected a step planned for the {fmt.name} cache, got one "
                f"planned for {metadata.kv_cache_format!r}; give the metadata builder kv_cache_dtype={fmt.name!r}"
            )
        _check_fast("topk_indices", topk_indices, (num_tokens, metadata.index_topk), torch.int32, device)
        check_topk_length(topk_length, num_tokens, device)
        if output is None:
            output = torch.empty(num_tokens, num_heads, KV_LORA_RANK, dtype=torch.bfloat16, device=device)
        else:
            _check_fast("output", output, (num_tokens, num_heads, KV_LORA_RANK), torch.bfloat16, device)
        for name, tensor in (("q_nope", q_nope), ("q_rope", q_rope), ("output", output), ("topk_indices", topk_indices)):
            check_unit_last_stride(name, tensor)  # other strides are free: vLLM's transposed ql_nope view
        check_kv_cache_slot_strides("kv_cache", kv_cache)  # every route: FA3 needs a whole-slot block stride
        if self.check_indices:
            rows = rows_to_check(topk_indices, metadata.token_kv_len, topk_length, metadata.dcp)
            check_topk_indices(rows, metadata.req_id, metadata.token_kv_len, metadata.block_table,
                               kv_cache.shape[0])
        lse = torch.empty(num_tokens, num_heads, dtype=torch.float32, device=device) if return_lse else None
        metadata.step.route.run(q_nope, q_rope, kv_cache, topk_indices, metadata, self.softmax_scale, output, lse,
                                topk_length)
        return (output, lse) if return_lse else output

    @staticmethod
    def _split_q(q: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(q_nope, q_rope)`` from a pair, or views of one `[T, N, 576]` tensor."""
        if isinstance(q, (tuple, list)):
            if len(q) != 2:
                raise ValueError(f"sparse_mla: argument 'q' expected (q_nope, q_rope), got {len(q)} tensors")
            return q[0], q[1]
        check_tensor("q", q, shape=(None, None, KV_CACHE_HEAD_SIZE))
        return q[..., :KV_LORA_RANK], q[..., KV_LORA_RANK:]


def _check_fast(name: str, tensor: object, shape: Tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
    """:func:`sparse_mla.checks.check_tensor` for an exact shape, dtype and device, at the cost of three
    comparisons when the tensor is right (the per-layer path); its message when it is not."""
    if not (isinstance(tensor, torch.Tensor) and tensor.shape == shape and tensor.dtype is dtype
            and tensor.device == device):
        check_tensor(name, tensor, shape=shape, dtype=dtype, device=device)
