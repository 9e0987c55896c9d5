"""Stand-in of ``vllm.v1.attention.backend`` (vLLM 0.33.0): the base classes an attention backend subclasses."""

import abc
import dataclasses
import enum
from typing import Any, ClassVar, Generic, List, Optional, TypeVar, Union

import torch


class AttentionType(str, enum.Enum):
    DECODER = "decoder"
    ENCODER = "encoder"


@dataclasses.dataclass(frozen=True)
class MultipleOf:
    base: int


class AttentionBackend(abc.ABC):
    supported_dtypes: ClassVar[List[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[List[str]] = ["auto", "float16", "bfloat16"]

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> List[Union[int, MultipleOf]]:
        return [MultipleOf(1)]

    @staticmethod
    @abc.abstractmethod
    def get_name() -> str: ...

    @staticmethod
    @abc.abstractmethod
    def get_impl_cls(): ...

    @staticmethod
    @abc.abstractmethod
    def get_builder_cls(): ...

    @classmethod
    def customize_spec(cls, spec):
        return spec

    @classmethod
    def is_mla(cls) -> bool:
        return False

    @classmethod
    def is_sparse(cls) -> bool:
        return False

    @classmethod
    def supports_compute_capability(cls, capability) -> bool:
        return True

    @classmethod
    def supports_dcp(cls) -> bool:
        try:
            return cls.get_impl_cls().supports_dcp
        except NotImplementedError:
            return False

    @classmethod
    def validate_configuration(
        cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse, use_mm_prefix,
        use_per_head_quant_scales, device_capability, attn_type, has_sliding_window=False, use_non_causal=False,
        use_batch_invariant=False, use_kv_connector=False, use_pcp=False, use_adaptive_verification=False,
        use_dcp=False, use_rswa=False,
    ) -> List[str]:
        return []


class AttentionMetadata:
    pass


@dataclasses.dataclass
class CommonAttentionMetadata:
    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    block_table_tensor: torch.Tensor
    slot_mapping: torch.Tensor
    causal: Union[bool, torch.Tensor] = True


class AttentionCGSupport(enum.Enum):
    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


M = TypeVar("M")


class AttentionMetadataBuilder(abc.ABC, Generic[M]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER
    reorder_batch_threshold: Optional[int] = None

    @abc.abstractmethod
    def __init__(self, kv_cache_spec, layer_names: List[str], vllm_config, device: torch.device):
        self.kv_cache_spec = kv_cache_spec
        self.layer_names = layer_names
        self.vllm_config = vllm_config
        self.device = device

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec) -> AttentionCGSupport:
        return cls._cudagraph_support

    @abc.abstractmethod
    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False):
        ...

    def _init_reorder_batch_threshold(self, reorder_batch_threshold: Optional[int] = 1,
                                      supports_spec_as_decode: bool = False,
                                      supports_dcp_with_varlen: bool = False) -> None:
        self.reorder_batch_threshold = reorder_batch_threshold
        if self.vllm_config.parallel_config.decode_context_parallel_size > 1 and not supports_dcp_with_varlen:
            self.reorder_batch_threshold = 1  # vLLM then splits multi-token requests off the decode batch

    def build_for_cudagraph_capture(self, common_attn_metadata: CommonAttentionMetadata):
        return self.build(common_prefix_len=0, common_attn_metadata=common_attn_metadata)


T = TypeVar("T", bound=AttentionMetadata)


class AttentionImplBase(abc.ABC, Generic[T]):
    is_sparse: ClassVar[bool] = False
    supports_dense_mha_prefill: bool = True
    can_return_lse_for_decode: bool = False
    lse_base_on_e: bool = True
    supports_pcp: bool = False
    supports_dcp: bool = False
    need_to_return_lse_for_decode: bool = False
    supports_quant_query_input: bool = False

    def __new__(cls, *args, **kwargs):
        from vllm.distributed.parallel_state import get_dcp_world_size_and_rank

        self = super().__new__(cls)
        # vLLM reads these from its process groups (the stand-in's DCP group: parallel_state._DCP).
        self.dcp_world_size, self.dcp_rank = get_dcp_world_size_and_rank()
        self.pcp_world_size, self.pcp_rank = 1, 0
        self.need_to_return_lse_for_decode = self.dcp_world_size > 1 and self.can_return_lse_for_decode
        return self

    def process_weights_after_loading(self, act_dtype: torch.dtype):
        pass

    def prepare_for_batch(self, attn_metadata) -> None:
        pass


class MLAAttentionImpl(AttentionImplBase[T], Generic[T]):
    supports_pcp: bool = True

    @abc.abstractmethod
    def __init__(
        self, num_heads: int, head_size: int, scale: float, num_kv_heads: int, alibi_slopes: Optional[List[float]],
        sliding_window: Optional[int], kv_cache_dtype: str, logits_soft_cap: Optional[float], attn_type: str,
        kv_sharing_target_layer_name: Optional[str], q_lora_rank: Optional[int], kv_lora_rank: int,
        qk_nope_head_dim: int, qk_rope_head_dim: int, qk_head_dim: int, v_head_dim: int, kv_b_proj: Any,
        indexer: Optional[object] = None, q_pad_num_heads: Optional[int] = None,
    ) -> None:
        raise NotImplementedError

    def forward_mha(self, q, kv_c_normed, k_pe, kv_c_and_k_pe_cache, attn_metadata, k_scale, output,
                    output_scale=None) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def forward_mqa(self, q, kv_c_and_k_pe_cache: torch.Tensor, attn_metadata, layer):
        raise NotImplementedError

    def reserve_workspace(self) -> None:
        return

    def do_kv_cache_update(self, kv_c_normed: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor,
                           slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                           skip_scale: bool = False) -> None:
        """Plain-PyTorch version of vLLM's ``concat_and_cache_mla``: slot ``s`` is row ``s % block_size``
        of block ``s // block_size`` (any block stride); ``-1`` slots are skipped. With ``kv_cache_dtype``
        ``"fp8_ds_mla"`` the rows are quantized as vLLM's ``concat_and_cache_ds_mla_kernel`` does, here by
        sparse_mla's host implementation of that rule."""
        keep = slot_mapping >= 0
        slots = slot_mapping[keep]
        block_size = kv_cache.shape[1]
        k_pe = k_pe.reshape(k_pe.shape[0], -1)
        if kv_cache_dtype == "fp8_ds_mla":
            from sparse_mla.fp8_ds_mla import quantize_slots

            rows = quantize_slots(kv_c_normed[keep], k_pe[keep])
        else:
            rows = torch.cat([kv_c_normed[keep], k_pe[keep]], dim=-1).to(kv_cache.dtype)
        kv_cache[slots // block_size, slots % block_size] = rows
