"""The vLLM adapter end to end on the CPU: vLLM 0.33.0's calls (``vllm_adapter_steps``) on the stand-in of
``vllm_stand_in/``, the Triton kernel in the interpreter (TRITON_INTERPRET=1), against the float32 reference.

Accuracy: ``‖out − ref‖ / ‖ref‖ < 1e-2`` (bf16 output; the cache between blocks is NaN, so a read of a
padding gap fails the test).
"""

import os
import re

import pytest
import torch

import vllm_adapter_steps as steps
import sparse_mla_testing as testing
from sparse_mla.constants import INDEX_TOPK, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE
from sparse_mla.kernels.triton_support import interpreting
from sparse_mla.merge import merge_attention_states
from sparse_mla.topk_filter import DcpShard
from sparse_mla_testing.dcp import shard_cache
import sparse_mla_vllm
from sparse_mla_vllm.backend import SparseMLAVllmBackend, SparseMLAVllmImpl
from vllm.v1.attention.backends.registry import AttentionBackendEnum

CPU = torch.device("cpu")
MAX_REL_ERR = 1e-2
NUM_BLOCKS = 12
NUM_HEADS = 16  # DeepSeek-V3.2's 128 heads at tensor parallelism 8


@pytest.mark.skipif(not interpreting(), reason="runs the Triton kernel in the interpreter (TRITON_INTERPRET=1)")
@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16", "fp8_ds_mla"])
@pytest.mark.parametrize(
    "seq_lens, query_lens, num_tokens",
    [([300, 2100], [1, 1], 3), ([700, 90], [3, 3], None)],
    ids=["decode-padded", "speculative"],
)
def test_forward_mqa_matches_reference(seq_lens, query_lens, num_tokens, kv_cache_dtype):
    gen = testing.make_generator(CPU, seed=sum(seq_lens))
    engine = steps.make_engine(NUM_HEADS, NUM_BLOCKS * 4, max_num_batched_tokens=16, device=CPU,
                               kv_cache_dtype=kv_cache_dtype)
    step = steps.make_step(engine, seq_lens, query_lens, num_tokens, gen, NUM_HEADS)
    slot_width = engine.kv_cache.shape[-1]
    assert slot_width == {"bfloat16": KV_CACHE_HEAD_SIZE, "fp8_ds_mla": 656}[kv_cache_dtype]
    assert engine.kv_cache.stride(0) == (KV_BLOCK_SIZE + steps.BLOCK_PADDING_SLOTS) * slot_width
    assert step.ql_nope.stride()[:2] == (512, step.ql_nope.shape[0] * 512), "ql_nope expected head-major storage"
    out = steps.forward(engine, step)
    ref = steps.reference_out(engine, step)
    rel = testing.relative_error(out, ref)
    assert rel < MAX_REL_ERR, f"relative error {rel:.2e} expected < {MAX_REL_ERR}"
    if num_tokens is not None:
        assert (out[step.batch.num_tokens:] == 0).all(), "padding tokens expected out 0"


def test_registration_and_plugin_entry_point():
    tomllib = pytest.importorskip("tomllib", reason="reads py/pyproject.toml with Python >= 3.11's tomllib")
    sparse_mla_vllm.register()
    sparse_mla_vllm.register()
    assert AttentionBackendEnum["SPARSE_MLA"].get_class() is SparseMLAVllmBackend
    with open(os.path.join(os.path.dirname(sparse_mla_vllm.__file__), os.pardir, "pyproject.toml"), "rb") as f:
        entry_points = tomllib.load(f)["project"]["entry-points"]["vllm.general_plugins"]
    assert entry_points == {"sparse_mla": "sparse_mla_vllm:register"}


def test_backend_answers_vllm():
    assert SparseMLAVllmBackend.get_name() == "SPARSE_MLA"
    assert SparseMLAVllmBackend.is_mla() and SparseMLAVllmBackend.is_sparse()
    assert SparseMLAVllmBackend.get_supported_kernel_block_sizes(None) == [KV_BLOCK_SIZE]
    config = dict(steps.SELECTOR_CONFIG)
    for block_size, served in ((None, True), (128, True), (48, False), (0, False), (-64, False)):
        config["block_size"] = block_size
        reasons = SparseMLAVllmBackend.validate_configuration(device_capability=(9, 0), **config)
        assert (reasons == []) == served, f"block size {block_size}: reasons {reasons}"
    config.update(block_size=64, use_dcp=True, kv_cache_dtype="fp8")
    reasons = SparseMLAVllmBackend.validate_configuration(device_capability=(9, 0), **config)
    assert reasons == ["KV cache dtype 'fp8' not supported (expected one of ['auto', 'bfloat16', 'fp8_ds_mla'])"], reasons
    assert SparseMLAVllmBackend.supports_dcp()


def test_validate_configuration_takes_vllm_selector_arguments():
    """vLLM 0.33.0's selector passes device_capability and every AttentionSelectorConfig field by keyword."""
    selector_config = dict(
        head_size=576, dtype=torch.bfloat16, kv_cache_dtype="bfloat16", block_size=64, use_mla=True,
        has_sink=False, use_sparse=True, use_mm_prefix=False, use_per_head_quant_scales=False, attn_type="decoder",
        has_sliding_window=False, use_non_causal=False, use_batch_invariant=False, use_kv_connector=True,
        use_pcp=False, use_adaptive_verification=True, use_dcp=False, use_rswa=False,
    )
    assert SparseMLAVllmBackend.validate_configuration(device_capability=(9, 0), **selector_config) == []
    selector_config.update(use_dcp=True, has_sliding_window=True, attn_type="encoder")
    reasons = SparseMLAVllmBackend.validate_configuration(device_capability=(9, 0), **selector_config)
    assert reasons == ["attention type 'encoder' not supported (decoder only)", "has_sliding_window not supported"], reasons


def _impl_kwargs(**changes):
    kwargs = dict(
        num_heads=16, head_size=576, scale=0.1, num_kv_heads=1, alibi_slopes=None, sliding_window=None,
        kv_cache_dtype="auto", logits_soft_cap=None, attn_type="decoder", kv_sharing_target_layer_name=None,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, qk_head_dim=192,
        v_head_dim=128, kv_b_proj=None, topk_indices_buffer=torch.zeros(4, INDEX_TOPK, dtype=torch.int32),
    )
    kwargs.update(changes)
    return kwargs


@pytest.mark.parametrize(
    "changes, error, message",
    [
        (dict(kv_lora_rank=256), ValueError, "'(kv_lora_rank, qk_rope_head_dim)' expected (512, 64), got (256, 64)"),
        (dict(q_pad_num_heads=64), NotImplementedError, "query head padding (q_pad_num_heads=64)"),
        (dict(topk_indices_buffer=None), ValueError, "needs an 'indexer' or a 'topk_indices_buffer'"),
        (dict(kv_cache_dtype="fp8"), NotImplementedError, "KV cache dtype 'fp8'"),
        (dict(alibi_slopes=[0.5] * 16), NotImplementedError, "ALiBi"),
        (dict(scale="x"), TypeError, "argument 'scale' expected a real number, got str 'x'"),
    ],
)
def test_impl_rejects_what_it_cannot_serve(changes, error, message):
    with pytest.raises(error, match=re.escape(message)):
        SparseMLAVllmImpl(**_impl_kwargs(**changes))


def test_impl_takes_vllm_attributes_and_rejects_a_split_batch():
    impl = SparseMLAVllmImpl(**_impl_kwargs(kv_cache_dtype="bfloat16"))
    assert impl.scale == 0.1 and impl.is_sparse and not impl.supports_dense_mha_prefill and impl.dcp_world_size == 1
    engine = steps.make_engine(NUM_HEADS, 4, max_num_batched_tokens=8, device=CPU)
    step = steps.make_step(engine, [100, 50], [2, 1], None, testing.make_generator(CPU, 3), NUM_HEADS)
    metadata = engine.builder.build(0, step.common)
    with pytest.raises(ValueError, match="argument 'q' expected 3 tokens \\(the step's\\), got 2"):
        engine.impl.forward_mqa((step.ql_nope[:2], step.q_pe[:2]), engine.kv_cache, metadata, None)


def test_impl_takes_no_kv_cache_dtype_as_auto():
    assert SparseMLAVllmImpl(**_impl_kwargs(kv_cache_dtype=None)).kv_cache_format.name == "bfloat16"


def test_forward_mqa_names_what_vllm_would_pass_wrong():
    engine = steps.make_engine(NUM_HEADS, 4, max_num_batched_tokens=8, device=CPU)
    step = steps.make_step(engine, [100, 50], [2, 1], None, testing.make_generator(CPU, 3), NUM_HEADS)
    metadata = engine.builder.build(0, step.common)
    q = (step.ql_nope, step.q_pe)
    with pytest.raises(TypeError, match="argument 'q' expected a tensor or a pair of tensors, got NoneType"):
        engine.impl.forward_mqa(None, engine.kv_cache, metadata, None)
    with pytest.raises(TypeError, match="argument 'attn_metadata' expected a SparseMLAVllmMetadata .* got SparseMLAMetadata"):
        engine.impl.forward_mqa(q, engine.kv_cache, metadata.core, None)
    engine.indexer.topk_indices_buffer = engine.indexer.topk_indices_buffer.long()  # repointed, as a draft model's
    with pytest.raises(TypeError, match="argument 'indexer.topk_indices_buffer' expected dtype torch.int32, got torch.int64"):
        engine.impl.forward_mqa(q, engine.kv_cache, metadata, None)


def test_an_unknown_route_override_names_the_config_key():
    with pytest.raises(ValueError, match=re.escape("additional_config['sparse_mla_route'] expected one of (")):
        steps.make_engine(NUM_HEADS, 4, max_num_batched_tokens=8, device=CPU, route="fast")


def test_dcp_wiring_follows_vllm_config():
    with steps.dcp_group(4, 3):
        impl = SparseMLAVllmImpl(**_impl_kwargs(num_heads=8))
    assert (impl.dcp_world_size, impl.dcp_rank, impl.num_heads) == (4, 3, 32)  # the group's gathered heads
    assert impl.need_to_return_lse_for_decode and impl.lse_base_on_e and impl.supports_mtp_with_cp_non_trivial_interleave_size
    engine = steps.make_engine(8, 4, max_num_batched_tokens=8, device=CPU, dcp_world_size=4, dcp_rank=3,
                               dcp_interleave=16)
    assert engine.builder.dcp == DcpShard(3, 4, 16) and engine.builder.num_heads == 32
    assert engine.builder.reorder_batch_threshold is None  # supports_dcp_with_varlen: no reordering
    single = steps.make_engine(8, 4, max_num_batched_tokens=8, device=CPU)
    assert single.builder.dcp == DcpShard() and single.builder.num_heads == 8 and not single.impl.need_to_return_lse_for_decode


@pytest.mark.skipif(not interpreting(), reason="runs the Triton kernel in the interpreter (TRITON_INTERPRET=1)")
@pytest.mark.parametrize("world_size, interleave, kv_cache_dtype", [(2, 1, "bfloat16"), (4, 64, "fp8_ds_mla")])
def test_forward_mqa_under_dcp_merges_to_the_reference(world_size, interleave, kv_cache_dtype):
    """vLLM's DCP decode on the stand-in: each rank's engine on its shard, the merge as cp_lse_ag_out_rs does it."""
    local_heads = NUM_HEADS // world_size
    gen = testing.make_generator(CPU, seed=world_size)
    full = steps.make_engine(NUM_HEADS, NUM_BLOCKS * 4, max_num_batched_tokens=16, device=CPU,
                             kv_cache_dtype=kv_cache_dtype)
    step = steps.make_step(full, [700, 90], [1, 3], 6, gen, NUM_HEADS)  # queries of the gathered heads
    shards = shard_cache(full.kv_cache, step.batch.block_table, step.batch.seq_lens, world_size, interleave, gen)
    results = []
    for shard in shards:
        engine = steps.make_engine(local_heads, 4, max_num_batched_tokens=16, device=CPU, kv_cache_dtype=kv_cache_dtype,
                                   dcp_world_size=world_size, dcp_rank=shard.dcp.rank, dcp_interleave=interleave)
        engine.indexer.topk_indices_buffer.copy_(full.indexer.topk_indices_buffer)  # the global rows
        results.append(steps.forward_dcp(engine, step, shard.kv_cache, shard.block_table))
    out, _ = merge_attention_states(*(torch.stack(parts) for parts in zip(*results)))
    ref = steps.reference_out(full, step)
    rel = testing.relative_error(out, ref)
    assert rel < MAX_REL_ERR, f"relative error {rel:.2e} expected < {MAX_REL_ERR}"
    assert (out[step.batch.num_tokens:] == 0).all(), "padding tokens expected out 0"
