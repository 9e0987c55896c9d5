"""What vLLM 0.33.0 does with the SPARSE_MLA backend, step by step, on the stand-in of ``vllm_stand_in/``.

Shared by the adapter's CPU test and its GPU test. The sequence follows vLLM: the plugin registers the
backend, the selector validates it, ``MLAAttention`` constructs the impl with its keyword set, the model
runner builds the metadata, and DeepSeek-V3.2's layer (``vllm/models/deepseek_v32/attention.py``) writes
the cache, calls ``prepare_for_batch`` / ``record_logical_topk_ready`` and ``forward_mqa((ql_nope, q_pe),
kv_cache, attn_metadata, layer)``, with ``ql_nope`` a transposed bmm result and the top-k rows in the
indexer's buffer.
"""

import contextlib
import dataclasses
import os
import sys
import types
from typing import List, Optional

import torch

STAND_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_stand_in")


def use_stand_in() -> None:
    """Put the stand-in first on ``sys.path``; raise if a real vLLM was imported in this process already."""
    if STAND_IN not in sys.path:
        sys.path.insert(0, STAND_IN)
    import vllm

    if not os.path.abspath(vllm.__file__).startswith(STAND_IN):
        raise RuntimeError(f"expected vLLM's stand-in from {STAND_IN}, got {vllm.__file__}: run this test file alone")


use_stand_in()

from vllm.platforms.interface import DeviceCapability  # noqa: E402  (the stand-in)
from vllm.v1.attention.backend import AttentionCGSupport, AttentionType, CommonAttentionMetadata  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402
from vllm.v1.kv_cache_interface import MLAAttentionSpec  # noqa: E402

import sparse_mla_vllm  # noqa: E402
import sparse_mla_testing as testing  # noqa: E402
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference  # noqa: E402
from sparse_mla.constants import (  # noqa: E402
    DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, KV_LORA_RANK, QK_NOPE_HEAD_DIM,
    QK_ROPE_HEAD_DIM,
)

LAYER = "model.layers.0.self_attn.attn"
BLOCK_PADDING_SLOTS = 5
"""Extra slots between a layer's blocks, as when other layers' pages share vLLM's blocks."""

SELECTOR_CONFIG = dict(
    head_size=KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, kv_cache_dtype="bfloat16", block_size=KV_BLOCK_SIZE,
    use_mla=True, has_sink=False, use_sparse=True, use_mm_prefix=False, use_per_head_quant_scales=False,
    attn_type=AttentionType.DECODER, has_sliding_window=False, use_non_causal=False, use_batch_invariant=False,
    use_kv_connector=False, use_pcp=False, use_adaptive_verification=False, use_dcp=False, use_rswa=False,
)
"""Every field of vLLM 0.33.0's ``AttentionSelectorConfig`` for DeepSeek-V3.2 with a bf16 cache."""


def vllm_config(max_num_batched_tokens: int, num_heads: int, route: Optional[str] = None,
                dcp_world_size: int = 1, dcp_interleave: int = 1) -> types.SimpleNamespace:
    """The fields of ``VllmConfig`` the adapter reads (``num_heads``: per rank, what
    ``ModelConfig.get_num_attention_heads(parallel_config)`` answers; ``route``: the adapter's override
    in ``additional_config``; ``dcp_*``: ``ParallelConfig``'s DCP size and ``cp_kv_cache_interleave_size``)."""
    parallel_config = types.SimpleNamespace(tensor_parallel_size=1, decode_context_parallel_size=dcp_world_size,
                                            cp_kv_cache_interleave_size=dcp_interleave)
    return types.SimpleNamespace(
        scheduler_config=types.SimpleNamespace(max_num_batched_tokens=max_num_batched_tokens),
        parallel_config=parallel_config,
        additional_config={} if route is None else {"sparse_mla_route": route},
        model_config=types.SimpleNamespace(
            hf_text_config=types.SimpleNamespace(index_topk=INDEX_TOPK),
            get_num_attention_heads=lambda parallel: num_heads,
        ),
    )


@contextlib.contextmanager
def dcp_group(world_size: int, rank: int):
    """This process as rank ``rank`` of a DCP group of ``world_size`` (the stand-in's ``parallel_state._DCP``)."""
    from vllm.distributed import parallel_state

    parallel_state._DCP = types.SimpleNamespace(world_size=world_size, rank_in_group=rank) if world_size > 1 else None
    try:
        yield
    finally:
        parallel_state._DCP = None


@dataclasses.dataclass
class Engine:
    """One sparse-MLA layer as vLLM holds it."""

    backend: type
    builder: object
    impl: object
    indexer: types.SimpleNamespace  # .topk_indices_buffer [max_tokens, 2048] int32
    kv_cache: torch.Tensor  # [num_blocks, 64, 576] bf16 (or 656 uint8), blocks 5 slots further apart than 64


def make_engine(num_heads: int, num_blocks: int, max_num_batched_tokens: int, device: torch.device,
                capability=DeviceCapability(9, 0), route: Optional[str] = None,
                kv_cache_dtype: str = "bfloat16", dcp_world_size: int = 1, dcp_rank: int = 0,
                dcp_interleave: int = 1) -> Engine:
    """Register, select, and construct the backend the way vLLM does; the cache poisoned with NaN (bytes
    0xFF for ``kv_cache_dtype="fp8_ds_mla"``: NaN fp8 codes and scales). ``route``: the adapter's override
    through ``additional_config`` (None: the routing table's). ``dcp_*``: the engine as rank ``dcp_rank`` of a
    DCP group (``num_heads`` stays the rank's own heads, as vLLM passes them)."""
    with dcp_group(dcp_world_size, dcp_rank):
        return _make_engine(num_heads, num_blocks, max_num_batched_tokens, device, capability, route, kv_cache_dtype,
                            dcp_world_size, dcp_interleave)


def _make_engine(num_heads, num_blocks, max_num_batched_tokens, device, capability, route, kv_cache_dtype,
                 dcp_world_size, dcp_interleave) -> Engine:
    sparse_mla_vllm.register()
    sparse_mla_vllm.register()  # vLLM may load plugins twice
    backend = AttentionBackendEnum[sparse_mla_vllm.BACKEND_NAME].get_class()
    reasons = backend.validate_configuration(device_capability=capability,
                                             **dict(SELECTOR_CONFIG, kv_cache_dtype=kv_cache_dtype,
                                                    use_dcp=dcp_world_size > 1))
    assert reasons == [], f"the selector expected no reasons, got {reasons}"
    fp8 = kv_cache_dtype == "fp8_ds_mla"
    cache_dtype = torch.uint8 if fp8 else torch.bfloat16  # vLLM allocates fp8_ds_mla as uint8
    spec = backend.customize_spec(MLAAttentionSpec(KV_BLOCK_SIZE, 1, KV_CACHE_HEAD_SIZE, cache_dtype,
                                                   cache_dtype_str=kv_cache_dtype))
    config = vllm_config(max_num_batched_tokens, num_heads, route, dcp_world_size, dcp_interleave)
    builder = backend.get_builder_cls()(spec, [LAYER], config, device)
    assert builder.get_cudagraph_support(None, spec) == AttentionCGSupport.UNIFORM_BATCH
    buffer = torch.full((max_num_batched_tokens, INDEX_TOPK), -1, dtype=torch.int32, device=device)
    indexer = types.SimpleNamespace(topk_indices_buffer=buffer)
    impl = backend.get_impl_cls()(  # MLAAttention.__init__'s keyword set, plus its sparse extras
        num_heads=num_heads, head_size=KV_CACHE_HEAD_SIZE, scale=DEEPSEEK_V32_SOFTMAX_SCALE, num_kv_heads=1,
        alibi_slopes=None, sliding_window=None, kv_cache_dtype=kv_cache_dtype, logits_soft_cap=None,
        attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None, q_lora_rank=1536,
        kv_lora_rank=KV_LORA_RANK, qk_nope_head_dim=QK_NOPE_HEAD_DIM, qk_rope_head_dim=QK_ROPE_HEAD_DIM,
        qk_head_dim=QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM, v_head_dim=128, kv_b_proj=None, indexer=indexer,
        topk_indices_buffer=buffer, index_group_builder=object(),
    )
    slot_width = spec.block_stride_alignment // cache_dtype.itemsize  # one slot, in the cache's elements
    padding = BLOCK_PADDING_SLOTS * slot_width
    storage = torch.full((num_blocks, slot_width * KV_BLOCK_SIZE + padding), 0xFF if fp8 else float("nan"),
                         dtype=cache_dtype, device=device)
    kv_cache = storage[:, : KV_BLOCK_SIZE * slot_width].view(num_blocks, KV_BLOCK_SIZE, slot_width)
    return Engine(backend, builder, impl, indexer, kv_cache)


@dataclasses.dataclass
class Step:
    """One scheduler step's inputs, as vLLM's runner and the DeepSeek-V3.2 layer hold them."""

    batch: testing.SparseMLABatch  # the requests, their top-k rows (request-local) and block tables
    common: CommonAttentionMetadata  # padded to num_tokens
    ql_nope: torch.Tensor  # [T, N, 512] bf16, head-major storage (transposed bmm result)
    q_pe: torch.Tensor  # [T, N, 64] bf16


def make_step(engine: Engine, seq_lens: List[int], query_lens: List[int], num_tokens: Optional[int],
              generator: torch.Generator, num_heads: int) -> Step:
    """A step's batch; the whole cache is written (every context slot once) through the impl's
    ``do_kv_cache_update``, then the indexer's rows go into its buffer (stale rows beyond ``T``)."""
    device = engine.kv_cache.device
    num_blocks = engine.kv_cache.shape[0]
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, generator, topk=INDEX_TOPK, pattern="scattered",
                               drop_fraction=0.1)
    num_tokens = batch.num_tokens if num_tokens is None else num_tokens  # beyond batch.num_tokens: padding
    contiguous = testing.make_kv_cache(num_blocks, device, generator)
    slots = torch.arange(num_blocks * KV_BLOCK_SIZE, device=device)
    engine.impl.do_kv_cache_update(contiguous[..., :KV_LORA_RANK].reshape(-1, KV_LORA_RANK),
                                   contiguous[..., KV_LORA_RANK:].reshape(-1, 1, QK_ROPE_HEAD_DIM),
                                   engine.kv_cache, slots, engine.impl.kv_cache_dtype, torch.ones(()))
    engine.indexer.topk_indices_buffer.random_(0, 64, generator=generator)  # stale rows of an earlier step
    engine.indexer.topk_indices_buffer[: batch.num_tokens] = batch.topk_indices
    slot_mapping = torch.full((num_tokens,), -1, dtype=torch.int64, device=device)
    common = CommonAttentionMetadata(
        query_start_loc=batch.query_start_loc, query_start_loc_cpu=batch.query_start_loc.cpu(),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device), num_reqs=len(seq_lens),
        num_actual_tokens=num_tokens, max_query_len=max(query_lens), max_seq_len=max(seq_lens),
        block_table_tensor=batch.block_table, slot_mapping=slot_mapping,
    )
    q_nope, q_pe = testing.make_queries(num_tokens, num_heads, device, generator)
    return Step(batch, common, testing.transposed_copy(q_nope), q_pe)


def forward(engine: Engine, step: Step) -> torch.Tensor:
    """The layer's calls for one step: build, hooks, ``forward_mqa``; returns ``out`` `[T, N, 512]`."""
    metadata = engine.builder.build(0, step.common)
    assert metadata.num_decode_tokens == step.common.num_actual_tokens and metadata.prefill is None
    engine.impl.prepare_for_batch(metadata)
    engine.impl.record_logical_topk_ready()
    out, lse = engine.impl.forward_mqa((step.ql_nope, step.q_pe), engine.kv_cache, metadata, None)
    assert lse is None
    return out


def forward_dcp(engine: Engine, step: Step, kv_cache: torch.Tensor, block_table: torch.Tensor):
    """One DCP rank's calls for ``step`` (queries of the group's gathered heads) on its shard ``kv_cache`` and
    ``block_table``; returns ``forward_mqa``'s ``(out [T, N * W, 512], lse [T, N * W])``."""
    common = dataclasses.replace(step.common, block_table_tensor=block_table)
    metadata = engine.builder.build(0, common)
    engine.impl.prepare_for_batch(metadata)
    engine.impl.record_logical_topk_ready()
    return engine.impl.forward_mqa((step.ql_nope, step.q_pe), kv_cache, metadata, None)


def reference_out(engine: Engine, step: Step) -> torch.Tensor:
    """float32 reference (on the CPU) of ``step`` on a contiguous copy of the cache; padding tokens attend
    nothing (out 0)."""
    batch = step.batch
    cpu = torch.device("cpu")
    slot_ids = global_slot_ids_reference(batch.topk_indices.to(cpu), batch.req_id.to(cpu), batch.token_kv_len.to(cpu),
                                         batch.block_table.to(cpu), engine.kv_cache.shape[0])
    num_tokens = step.q_pe.shape[0]
    padding = torch.full((num_tokens - batch.num_tokens, INDEX_TOPK), -1, dtype=torch.int32)
    out, _ = sparse_mla_reference(step.ql_nope.to(cpu), step.q_pe.to(cpu), engine.kv_cache.to(cpu).contiguous(),
                                  torch.cat([slot_ids, padding]), DEEPSEEK_V32_SOFTMAX_SCALE)
    return out
