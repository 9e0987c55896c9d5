"""Stand-in of ``vllm.v1.kv_cache_interface.MLAAttentionSpec`` (vLLM 0.33.0): the fields the adapter touches."""

import dataclasses
from typing import Optional, Union

import torch


@dataclasses.dataclass(frozen=True)
class MLAAttentionSpec:
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    block_stride_alignment: Optional[Union[int, object]] = dataclasses.field(default=None, kw_only=True)
    cache_dtype_str: Optional[str] = None
