"""Backend description, metadata builder and its step plan, Impl argument checks and FA3 split choice (CPU).

The builder is plain PyTorch and runs on the CPU here; the conversion test runs the Triton kernel in
the interpreter (TRITON_INTERPRET=1).
"""

import dataclasses

import re

import numpy as np
import pytest
import torch

from sparse_mla import device_info, kv_cache_format, routing
import sparse_mla_testing as testing
from sparse_mla.backend import SparseMLABackend, SparseMLAImpl, SparseMLAMetadata, SparseMLAMetadataBuilder
from sparse_mla.constants import (
    DEEPSEEK_V32_SOFTMAX_SCALE,
    INDEX_TOPK,
    KV_BLOCK_SIZE,
    KV_CACHE_HEAD_SIZE,
    KV_LORA_RANK,
    QK_ROPE_HEAD_DIM,
)
from sparse_mla.kernels.sparse_mla_attention import (
    LaunchConfig,
    SplitWorkspace,
    max_default_shared_memory_bytes,
    shared_memory_bytes,
)
from sparse_mla_testing.topk_to_slots import topk_to_slots
from sparse_mla.kernels.triton_support import interpreting
from sparse_mla.ops import decode, fa3
from sparse_mla.routes import ROUTES, StepContext, fa3_route
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference, topk_to_slots_reference

CPU = torch.device("cpu")
POISON = 0x7F7F7F7F
MAX_TOKENS = 128
NUM_HEADS = 16
MAX_REL_ERR = 1e-2


def expected_per_token(seq_lens, query_lens, num_tokens, topk=INDEX_TOPK):
    """(req_id, token_kv_len, kv_len_bound) lists from the definition, padding tokens last."""
    req_id, kv_len = [], []
    for r, (s, q) in enumerate(zip(seq_lens, query_lens)):
        for i in range(q):
            req_id.append(r)
            kv_len.append(s - (q - 1 - i))
    padding = num_tokens - len(req_id)
    req_id += [0] * padding
    kv_len += [0] * padding
    return req_id, kv_len, [max(1, min(n, topk)) for n in kv_len]


def build_full_step(builder: SparseMLAMetadataBuilder) -> None:
    """A previous step of every buffer row, with values unlike padding: what the next build must overwrite or reset."""
    builder.build(0, testing.make_common_metadata([5000 + i for i in range(builder.max_num_tokens)], [1] * builder.max_num_tokens,
                                 max_blocks=1))


# (seq_lens, query_lens, num_actual_tokens or None, padded request slots)
BUILD_CASES = {
    "decode": ([5, 100, 3000], [1, 1, 1], None, 0),
    "prefill": ([3, 70], [3, 70], None, 0),
    "mixed": ([2500, 64, 9], [1, 64, 2], None, 0),
    "speculative": ([2100, 7], [3, 4], None, 0),
    "padded_tokens": ([10, 20], [1, 1], 6, 0),
    "padded_requests": ([10, 2049], [1, 2], 7, 2),
    "all_padding_padded_requests": ([], [], 3, 2),
    "all_padding_no_requests": ([], [], 5, 0),
    "empty": ([], [], 0, 0),
}


@pytest.mark.parametrize("case", sorted(BUILD_CASES))
def test_builder_per_token_metadata(case):
    seq_lens, query_lens, num_tokens, padded_reqs = BUILD_CASES[case]
    common = testing.make_common_metadata(seq_lens, query_lens, num_tokens, padded_reqs)
    builder = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS)
    build_full_step(builder)
    md = builder.build(0, common)
    t = common.num_actual_tokens
    req_id, kv_len, bound = expected_per_token(seq_lens, query_lens, t)
    assert isinstance(md, SparseMLAMetadata) and md.num_actual_tokens == t and md.num_reqs == common.num_reqs
    assert md.req_id.tolist() == req_id, f"req_id expected {req_id}, got {md.req_id.tolist()}"
    assert md.token_kv_len.tolist() == kv_len, f"token_kv_len expected {kv_len}, got {md.token_kv_len.tolist()}"
    assert md.kv_len_bound.tolist() == bound, f"kv_len_bound expected {bound}, got {md.kv_len_bound.tolist()}"
    assert md.cu_seqlens_q.tolist() == list(range(t + 1)), "cu_seqlens_q expected 0..T"
    assert md.slot_mapping is common.slot_mapping and md.block_table is common.block_table_tensor
    assert md.num_heads == NUM_HEADS and md.index_topk == INDEX_TOPK
    # The tail past T, written by the previous (full) step, is reset to the safe padding values.
    assert (builder._req_id[t:] == 0).all() and (builder._token_kv_len[t:] == 0).all()
    assert (builder._kv_len_bound[t:] == 1).all()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_builder_updates_the_same_buffers_in_place(route):
    """Two steps of one padded size (a CUDA graph captured on the first replays with the second's
    contents): the same plan, workspace and buffers; only the contents change."""
    builder = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS, route=route)
    first = builder.build(0, testing.make_common_metadata([50, 60], [4, 4]))
    second = builder.build(0, testing.make_common_metadata([7, 9], [1, 2], num_actual_tokens=8, num_padded_reqs=1))
    for name in ("req_id", "token_kv_len", "kv_len_bound", "cu_seqlens_q"):
        a, b = getattr(first, name), getattr(second, name)
        assert a.data_ptr() == b.data_ptr() and a.shape == b.shape, f"{name} expected the same buffer in both steps"
    assert first.route is second.route and first.route.name == route
    assert first.step is second.step and first.step.workspace is builder.workspaces[route]
    if route == "fa3":
        for name in ("page_table", "cache_seqlens"):
            a, b = getattr(first.prepared, name), getattr(second.prepared, name)
            assert a.data_ptr() == b.data_ptr() and a.shape == b.shape, f"{name} expected the same buffer in both steps"
    assert first.req_id.tolist() == [0, 1, 1, 0, 0, 0, 0, 0], "the first step's views expected the new contents"


def test_builder_resets_the_tail_a_larger_step_left():
    builder = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS)
    builder.build(0, testing.make_common_metadata([300] * 6, [1] * 6))
    md = builder.build(0, testing.make_common_metadata([40, 50], [1, 1]))
    assert md.token_kv_len.tolist() == [40, 50]
    assert builder._req_id[2:].eq(0).all() and builder._token_kv_len[2:].eq(0).all()
    assert builder._kv_len_bound[2:].eq(1).all(), "rows of the earlier step expected the padding bound 1"


@pytest.mark.skipif(not interpreting(), reason="runs the Triton kernel in the interpreter (TRITON_INTERPRET=1)")
@pytest.mark.parametrize("pattern", testing.INVALID_PATTERNS)
def test_builder_then_conversion_matches_reference(pattern):
    """Padding tokens carrying garbage top-k rows convert to zero valid slots; real ones as the reference."""
    gen = testing.make_generator(CPU, seed=20)
    num_blocks = 64
    seq_lens, query_lens = [130, 1000, 40], [1, 3, 40]
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, gen, pattern=pattern, drop_fraction=0.2)
    real, padded = batch.num_tokens, 3
    common = testing.make_common_metadata(seq_lens, query_lens, real + padded, num_padded_reqs=1, device=CPU)
    common.block_table_tensor = torch.cat([batch.block_table, batch.block_table[:1]])
    builder = SparseMLAMetadataBuilder(64, CPU, NUM_HEADS, route="fa3")
    md = builder.build(0, common)
    assert torch.equal(md.req_id[:real], batch.req_id) and torch.equal(md.token_kv_len[:real], batch.token_kv_len)
    garbage = torch.randint(0, 100, (padded, INDEX_TOPK), generator=gen, dtype=torch.int32)
    topk = torch.cat([batch.topk_indices, garbage])
    step = md.prepared
    step.page_table.fill_(POISON)
    step.cache_seqlens.fill_(POISON)
    topk_to_slots(topk, md.req_id, md.token_kv_len, md.block_table, num_blocks,
                  slot_ids=step.page_table, valid_count=step.cache_seqlens)
    ref_slots, ref_count = topk_to_slots_reference(
        batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, num_blocks
    )
    assert torch.equal(step.cache_seqlens[:real], ref_count), "valid counts of real tokens differ from the reference"
    assert torch.equal(step.page_table[:real], ref_slots), "slot ids of real tokens differ from the reference"
    assert (step.cache_seqlens[real:] == 0).all(), "padding tokens expected 0 valid slots"
    assert (step.page_table[real:] == 0).all(), "padding rows expected slot 0 everywhere"


def test_builder_rejects_bad_steps():
    builder = SparseMLAMetadataBuilder(4, CPU, NUM_HEADS)
    with pytest.raises(ValueError, match=r"'num_actual_tokens' expected in \[0, max_num_batched_tokens = 4\], got 5"):
        builder.build(0, testing.make_common_metadata([9], [5]))
    with pytest.raises(NotImplementedError, match="cascade attention"):
        builder.build(16, testing.make_common_metadata([9], [1]))
    common = testing.make_common_metadata([9], [1])
    common.query_start_loc = common.query_start_loc.long()
    with pytest.raises(TypeError, match="argument 'query_start_loc' expected dtype torch.int32, got torch.int64"):
        builder.build(0, common)
    common = testing.make_common_metadata([9, 3], [1, 1])
    common.seq_lens = common.seq_lens[:1]
    with pytest.raises(ValueError, match=r"argument 'seq_lens' expected shape \(2,?\), got \(1,\)"):
        builder.build(0, common)
    common = testing.make_common_metadata([9], [2])
    common.slot_mapping = common.slot_mapping.int()
    with pytest.raises(TypeError, match="argument 'slot_mapping' expected dtype torch.int64, got torch.int32"):
        builder.build(0, common)
    with pytest.raises(ValueError, match="'max_num_batched_tokens' expected >= 1, got 0"):
        SparseMLAMetadataBuilder(0, CPU, NUM_HEADS)
    with pytest.raises(ValueError, match="'num_heads' expected 1 <= num_heads <= 128, got 129"):
        SparseMLAMetadataBuilder(4, CPU, 129)
    with pytest.raises(ValueError, match=r"'route' expected None or one of \(" + ", ".join(repr(r) for r in ROUTES) + r"\), got 'flashmla'"):
        SparseMLAMetadataBuilder(4, CPU, NUM_HEADS, route="flashmla")


# ------------------------------------------------------------------------------------------------ backend


def test_backend_description():
    assert SparseMLABackend.get_name() == "SPARSE_MLA"
    assert SparseMLABackend.get_supported_head_sizes() == [KV_CACHE_HEAD_SIZE]
    assert SparseMLABackend.get_supported_kernel_block_sizes() == [KV_BLOCK_SIZE]
    assert SparseMLABackend.supported_dtypes == [torch.bfloat16]
    assert SparseMLABackend.supported_kv_cache_dtypes == ["auto", "bfloat16", "fp8_ds_mla"]
    assert SparseMLABackend.get_kv_cache_shape(100, 64, 1, 576) == (100, 64, 576)
    assert SparseMLABackend.get_kv_cache_shape(100, 64, 1, 576, cache_dtype_str="bfloat16") == (100, 64, 576)
    # vLLM allocates the fp8_ds_mla cache as uint8: 656 bytes per slot, from the model's head size 576
    assert SparseMLABackend.get_kv_cache_shape(100, 64, 1, 576, cache_dtype_str="fp8_ds_mla") == (100, 64, 656)
    assert SparseMLABackend.get_metadata_cls() is SparseMLAMetadata
    assert SparseMLABackend.get_builder_cls() is SparseMLAMetadataBuilder
    assert SparseMLABackend.get_impl_cls() is SparseMLAImpl


@pytest.mark.parametrize(
    "args, message",
    [
        ((100, 16, 1, 576), "argument 'block_size' expected 64, got 16"),
        ((100, 64, 2, 576), "argument 'num_kv_heads' expected 1, got 2"),
        ((100, 64, 1, 512), "argument 'head_size' expected 576, got 512"),
        ((100, 64, 1, 576, "fp8"),
         r"argument 'cache_dtype_str' expected one of \['auto', 'bfloat16', 'fp8_ds_mla'\], got 'fp8'"),
        ((100, 64, 1, 656, "fp8_ds_mla"), "argument 'head_size' expected 576, got 656"),
        ((-1, 64, 1, 576), "argument 'num_blocks' expected >= 0, got -1"),
    ],
)
def test_kv_cache_shape_rejects_other_layouts(args, message):
    with pytest.raises(ValueError, match=message):
        SparseMLABackend.get_kv_cache_shape(*args)


def test_kv_cache_shape_rejects_a_non_int_block_count():
    with pytest.raises(TypeError, match="argument 'num_blocks' expected an int, got float 100.0"):
        SparseMLABackend.get_kv_cache_shape(100.0, 64, 1, 576)


# Judged from the tables (no device of these capabilities here): a 132-SM GPU's launch configurations need
# at most 198,144 B of shared memory per block (h64/n32/dv64); FA3 (9.x only) is never required.
DEVICE_ANSWERS = {
    (8, 0): "need up to 198144 B of shared memory per block on 132 SMs, the device gives 166912 B",  # A100
    (8, 9): "need up to 198144 B of shared memory per block on 132 SMs, the device gives 101376 B",  # L40
    (9, 0): None,  # Hopper: FA3 and the Triton kernel
    (10, 0): None,  # Blackwell B200: the Triton kernel takes every batch
    (12, 0): "need up to 198144 B of shared memory per block on 132 SMs, the device gives 101376 B",  # RTX 50
    (7, 5): "the Triton kernel's bf16 tl.dot needs >= 8.0",
}


@pytest.mark.parametrize("capability", ["9.0", (9,), (9.0, 0), None])
def test_device_reasons_name_a_bad_capability(capability):
    with pytest.raises(TypeError, match=r"argument 'capability' expected \(major, minor\) ints"):
        SparseMLABackend.device_reasons(capability)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the tables' answers; a visible GPU's own figures take precedence")
@pytest.mark.parametrize("capability", sorted(DEVICE_ANSWERS), ids=lambda c: f"{c[0]}.{c[1]}")
def test_device_answers(capability):
    expected = DEVICE_ANSWERS[capability]
    reasons = SparseMLABackend.validate_configuration(576, torch.bfloat16, "auto", 64, device_capability=capability)
    assert SparseMLABackend.supports_compute_capability(capability) == (expected is None)
    if expected is None:
        assert reasons == [], f"expected no reasons, got {reasons}"
    else:
        assert len(reasons) == 1 and expected in reasons[0], f"expected a reason with {expected!r}, got {reasons}"
        assert reasons[0].startswith(f"compute capability {capability[0]}.{capability[1]} not supported")


def test_shared_memory_bound_covers_the_h200_compiler_report():
    """The bound against ``results/2026-11-29-h200/kernel_report.txt`` (triton 3.6.0, sm_90a): exact for the
    wgmma configurations, above the mma.sync ones."""
    measured = [  # (config, split_iters, shared bytes measured, exact)
        (LaunchConfig(64, 32, 512, 1, 8, 7), 64, 185856, True),
        (LaunchConfig(16, 32, 512, 16, 8, 7), 4, 94720, False),
        (LaunchConfig(16, 64, 64, 32, 4, 7), 1, 51200, False),
    ]
    for config, split_iters, used, exact in measured:
        bound = shared_memory_bytes(config, split_iters)
        assert bound == used if exact else bound >= used, f"{config}: bound {bound} B, compiler {used} B"
    h200 = max_default_shared_memory_bytes(132, INDEX_TOPK)
    assert h200 == shared_memory_bytes(LaunchConfig(64, 32, 64, 8, 4, 7), 8) == 198144  # "194 KiB"
    assert h200 <= 227 * 1024, "the H200's configurations must fit its 227 KiB per block"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the tables' answer for 8.0; a visible GPU's own figures take precedence")
def test_validate_configuration_lists_every_reason():
    reasons = SparseMLABackend.validate_configuration(
        512, torch.float16, "fp8", 16, use_mla=False, has_sink=True, use_sparse=False, device_capability=(8, 0)
    )
    expected = [
        "head size 512 not supported (expected one of [576])",
        "dtype torch.float16 not supported (expected one of [torch.bfloat16])",
        "KV cache dtype 'fp8' not supported (expected one of ['auto', 'bfloat16', 'fp8_ds_mla'])",
        "block size 16 not supported (expected one of [64])",
        "non-MLA attention not supported",
        "attention sinks not supported",
        "dense MLA not supported (sparse top-k attention only)",
        "compute capability 8.0 not supported (the Triton kernel's launch configurations need up to 198144 B "
        "of shared memory per block on 132 SMs, the device gives 166912 B)",
    ]
    assert reasons == expected, f"reasons expected {expected}, got {reasons}"


# ------------------------------------------------------------------------------------------------ impl


@pytest.mark.parametrize(
    "kwargs, feature",
    [
        (dict(alibi_slopes=torch.ones(16)), "ALiBi"),
        (dict(sliding_window=128), "sliding window"),
        (dict(logits_soft_cap=30.0), "logits soft cap"),
        (dict(sinks=torch.zeros(16)), "attention sinks"),
        (dict(kv_sharing_target_layer_name="layers.0"), "KV sharing"),
        (dict(attn_type="encoder"), "attention type 'encoder'"),
        (dict(kv_cache_dtype="fp8"), "KV cache dtype 'fp8'"),
    ],
)
def test_impl_rejects_unsupported_features(kwargs, feature):
    with pytest.raises(NotImplementedError, match=re.escape(feature) + ".* is not supported by SparseMLAImpl"):
        SparseMLAImpl(16, **kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0), "argument 'num_heads' expected 1 <= num_heads <= 128, got 0"),
        (dict(num_heads=129), "argument 'num_heads' expected 1 <= num_heads <= 128, got 129"),
        (dict(num_heads=16, head_size=512), "argument 'head_size' expected 576, got 512"),
        (dict(num_heads=16, num_kv_heads=2), "argument 'num_kv_heads' expected 1, got 2"),
    ],
)
def test_impl_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SparseMLAImpl(**kwargs)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(num_heads=16.0), TypeError, "argument 'num_heads' expected an int, got float 16.0"),
        (dict(num_heads=True), TypeError, "argument 'num_heads' expected an int, got bool True"),
        (dict(num_heads=16, softmax_scale="x"), TypeError, "argument 'softmax_scale' expected a real number, got str 'x'"),
        (dict(num_heads=16, softmax_scale=float("nan")), ValueError, "argument 'softmax_scale' expected a finite number"),
    ],
)
def test_impl_rejects_bad_types(kwargs, error, message):
    with pytest.raises(error, match=message):
        SparseMLAImpl(**kwargs)


def test_builder_rejects_a_cuda_device_this_process_lacks():
    """One past the devices this process sees (on a CPU build of torch: any CUDA device)."""
    missing = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(ValueError, match=f"argument 'device' expected a CUDA device this process sees .* got {missing}"):
        SparseMLAMetadataBuilder(8, missing, 16)


@pytest.mark.parametrize("device", ["meta", torch.device("meta")])
def test_builder_rejects_a_device_neither_cuda_nor_cpu(device):
    """Its buffers would hold no data: every step would read garbage (a new user's trial built one on "meta")."""
    with pytest.raises(ValueError, match="argument 'device' expected a CUDA device .* got meta"):
        SparseMLAMetadataBuilder(8, device, 16)


@pytest.mark.parametrize(
    "args, message",
    [
        ((8, CPU, 16.0), "argument 'num_heads' expected an int, got float 16.0"),
        (("16", CPU, 16), "argument 'max_num_batched_tokens' expected an int, got str '16'"),
        ((16.5, CPU, 16), "argument 'max_num_batched_tokens' expected an int, got float 16.5"),
        ((True, CPU, 16), "argument 'max_num_batched_tokens' expected an int, got bool True"),
        ((16, CPU, 16, 64.0), "argument 'index_topk' expected an int, got float 64.0"),
        ((16, CPU, 16, None), "argument 'index_topk' expected an int, got NoneType None"),
    ],
)
def test_builder_rejects_non_int_sizes(args, message):
    """Each size argument named, not a TypeError from inside a comparison or torch.zeros."""
    with pytest.raises(TypeError, match=message):
        SparseMLAMetadataBuilder(*args)


def test_builder_takes_numpy_ints_as_ints():
    """check_int accepts NumPy integers: every size is then a Python int, as the planners need."""
    builder = SparseMLAMetadataBuilder(np.int64(8), CPU, np.int32(16), np.int64(INDEX_TOPK), dcp_world_size=np.int64(2),
                                       dcp_rank=np.int8(1))
    assert all(type(v) is int for v in (builder.max_num_tokens, builder.num_heads, builder.index_topk,
                                        builder.dcp.world_size, builder.dcp.rank))
    md = builder.build(0, testing.make_common_metadata([40, 50], [1, 1]))
    assert md.token_kv_len.tolist() == [40, 50]


@pytest.mark.parametrize("name", ["dcp_world_size", "dcp_rank", "dcp_interleave"])
def test_builder_rejects_bool_dcp_sizes(name):
    with pytest.raises(TypeError, match=f"argument '{name}' expected an int, got bool True"):
        SparseMLAMetadataBuilder(8, CPU, 16, **{name: True})


@pytest.mark.parametrize("device", ["gpu", None, 3.5])
def test_builder_rejects_what_names_no_device(device):
    with pytest.raises(ValueError, match=f"argument 'device' expected a torch.device or a device string .* got {device!r}"):
        SparseMLAMetadataBuilder(8, device, 16)


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(num_actual_tokens=2.0), TypeError, "argument 'num_actual_tokens' expected an int, got float 2.0"),
        (dict(num_actual_tokens="2"), TypeError, "argument 'num_actual_tokens' expected an int, got str '2'"),
        (dict(num_reqs=2.0), TypeError, "argument 'num_reqs' expected an int, got float 2.0"),
        (dict(num_reqs=-1), ValueError, "argument 'num_reqs' expected >= 0, got -1"),
    ],
)
def test_build_names_bad_sizes(change, error, message):
    builder = SparseMLAMetadataBuilder(8, CPU, 16)
    builder.build(0, testing.make_common_metadata([9, 3], [1, 1]))  # a cached plan for T = 2 must not hide them
    with pytest.raises(error, match=message):
        builder.build(0, dataclasses.replace(testing.make_common_metadata([9, 3], [1, 1]), **change))


def test_build_names_a_missing_step():
    with pytest.raises(TypeError, match="argument 'common_attn_metadata' expected a CommonAttentionMetadata, got NoneType"):
        SparseMLAMetadataBuilder(8, CPU, 16).build(0, None)


def test_cpu_forward_outside_the_interpreter_names_the_fix(monkeypatch):
    """Compiled Triton cannot launch on CPU tensors: a ValueError naming q_nope, not Triton's driver error."""
    builder = SparseMLAMetadataBuilder(8, CPU, 16, route="triton")
    md = builder.build(0, testing.make_common_metadata([9], [1]))
    impl = SparseMLAImpl(16, 0.1)
    q = torch.randn(1, 16, KV_CACHE_HEAD_SIZE).bfloat16()
    cache = torch.randn(4, 64, KV_CACHE_HEAD_SIZE).bfloat16()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="argument 'q_nope' expected device cuda, got cpu"):
        impl.forward(q, cache, md, torch.zeros(1, INDEX_TOPK, dtype=torch.int32))


def test_impl_splits_one_query_tensor_by_views():
    q = torch.zeros(3, 4, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16)
    q_nope, q_rope = SparseMLAImpl._split_q(q)
    assert q_nope.shape == (3, 4, KV_LORA_RANK) and q_rope.shape == (3, 4, QK_ROPE_HEAD_DIM)
    assert q_nope.data_ptr() == q.data_ptr(), "q_nope expected a view of q"
    assert q_rope.data_ptr() == q.data_ptr() + KV_LORA_RANK * q.element_size(), "q_rope expected a view of q"


def _forward_args(num_heads=4, num_tokens=3, route=None, kv_cache_dtype="auto"):
    gen = testing.make_generator(CPU, seed=30)
    builder = SparseMLAMetadataBuilder(8, CPU, num_heads, index_topk=INDEX_TOPK, route=route, kv_cache_dtype=kv_cache_dtype)
    md = builder.build(0, testing.make_common_metadata([20, 30], [1, num_tokens - 1]))
    q_nope, q_rope = testing.make_queries(num_tokens, num_heads, CPU, gen)
    return dict(
        q=(q_nope, q_rope),
        kv_cache=testing.make_kv_cache(2, CPU, gen),
        attn_metadata=md,
        topk_indices=torch.full((num_tokens, INDEX_TOPK), -1, dtype=torch.int32),
    )


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda a: a.update(q=(a["q"][0][:, :2], a["q"][1])), ValueError,
         r"argument 'q_nope' expected shape \(3, 4, 512\), got \(3, 2, 512\)"),
        (lambda a: a.update(q=(a["q"][0], a["q"][1].half())), TypeError,
         "argument 'q_rope' expected dtype torch.bfloat16, got torch.float16"),
        (lambda a: a.update(q=torch.zeros(3, 4, 575, dtype=torch.bfloat16)), ValueError,
         r"argument 'q' expected shape \(\*, \*, 576\), got \(3, 4, 575\)"),
        (lambda a: a.update(q=(a["q"][0],)), ValueError, r"argument 'q' expected \(q_nope, q_rope\), got 1 tensors"),
        (lambda a: a.update(topk_indices=a["topk_indices"][:, :64]), ValueError,
         r"argument 'topk_indices' expected shape \(3, 2048\), got \(3, 64\)"),
        (lambda a: a.update(kv_cache=a["kv_cache"].float()), TypeError,
         "argument 'kv_cache' expected dtype torch.bfloat16, got torch.float32"),
        (lambda a: a.update(kv_cache=a["kv_cache"].transpose(0, 1).contiguous().transpose(0, 1)), ValueError,
         r"argument 'kv_cache' expected strides \(\*, 576, 1\) \(contiguous slots\), got \(576, 1152, 1\)"),
        # padded rows: a slot is not 576 elements from the next
        (lambda a: a.update(kv_cache=torch.zeros(a["kv_cache"].shape[0], 64, 640, dtype=torch.bfloat16)[..., :576]),
         ValueError, r"argument 'kv_cache' expected strides \(\*, 576, 1\) \(contiguous slots\), got \(40960, 640, 1\)"),
        # a padded block stride that is not a whole number of slots: FA3's page-size-1 view cannot address it
        (lambda a: a.update(kv_cache=testing.padded_kv_cache(a["kv_cache"], 100)), ValueError,
         r"argument 'kv_cache' expected a block stride that is a multiple of 576 elements .* got stride\(0\) = 36964"),
        # a cache view 8 bytes into a larger buffer: refused by every route alike (FA3's loads would fault)
        (lambda a: a.update(kv_cache=torch.zeros(a["kv_cache"].numel() + 4, dtype=torch.bfloat16,
                                                 device=a["kv_cache"].device)[4:].view(a["kv_cache"].shape)),
         ValueError, "argument 'kv_cache' expected a data pointer aligned to 16 bytes"),
        (lambda a: a.update(q=(a["q"][0].transpose(1, 2).contiguous().transpose(1, 2), a["q"][1])), ValueError,
         "argument 'q_nope' expected unit stride in the last dim"),
        # column-major top-k rows: refused by every route alike
        (lambda a: a.update(topk_indices=a["topk_indices"].t().contiguous().t()), ValueError,
         "argument 'topk_indices' expected unit stride in the last dim"),
        (lambda a: a.update(output=torch.zeros(3, 4, 512)), TypeError,
         "argument 'output' expected dtype torch.bfloat16, got torch.float32"),
        (lambda a: a.update(topk_indices=a["topk_indices"].to("meta")), ValueError,
         "argument 'topk_indices' expected device cpu, got meta"),
        (lambda a: a.update(attn_metadata=_forward_args(num_heads=8)["attn_metadata"]), ValueError,
         "argument 'attn_metadata' expected a step planned for num_heads = 4, got 8"),
        (lambda a: a.update(attn_metadata=None), TypeError,
         "argument 'attn_metadata' expected the SparseMLAMetadata of SparseMLAMetadataBuilder.build, got NoneType"),
    ],
)
def test_forward_rejects_bad_arguments(change, error, message):
    args = _forward_args()
    change(args)
    with pytest.raises(error, match=message):
        SparseMLAImpl(4).forward(**args)


def _fp8_cache(args):
    return testing.fp8_ds_mla_kv_cache(args["kv_cache"])


@pytest.mark.parametrize(
    "builder_dtype, route, change, error, message",
    [
        ("fp8_ds_mla", None, lambda a: None, TypeError, "argument 'kv_cache' expected dtype torch.uint8, got torch.bfloat16"),
        ("fp8_ds_mla", None, lambda a: a.update(kv_cache=_fp8_cache(a)[..., :640]), ValueError,
         r"argument 'kv_cache' expected shape \(\*, 64, 656\), got \(2, 64, 640\)"),
        ("fp8_ds_mla", None, lambda a: a.update(kv_cache=testing.padded_kv_cache(_fp8_cache(a), 100)), ValueError,
         "argument 'kv_cache' expected a block stride that is a multiple of 656 elements"),
        # a cache view 4 bytes into a larger buffer: refused by every route alike
        ("fp8_ds_mla", None,
         lambda a: a.update(kv_cache=torch.zeros(2 * 64 * 656 + 4, dtype=torch.uint8,
                                                 device=a["kv_cache"].device)[4:].view(2, 64, 656)),
         ValueError, "argument 'kv_cache' expected a data pointer aligned to 16 bytes"),
        # a step planned for the bf16 cache, on a route that reads only bf16 or on one that reads both
        ("auto", "fa3", lambda a: a.update(kv_cache=_fp8_cache(a)), ValueError,
         "argument 'attn_metadata' expected a step planned for the fp8_ds_mla cache, got one planned for "
         "'bfloat16'; give the metadata builder kv_cache_dtype='fp8_ds_mla'"),
        ("auto", None, lambda a: a.update(kv_cache=_fp8_cache(a)), ValueError,
         "argument 'attn_metadata' expected a step planned for the fp8_ds_mla cache, got one planned for "
         "'bfloat16'; give the metadata builder kv_cache_dtype='fp8_ds_mla'"),
    ],
)
def test_forward_rejects_a_cache_of_another_format(builder_dtype, route, change, error, message):
    args = _forward_args(route=route, kv_cache_dtype=builder_dtype)
    change(args)
    with pytest.raises(error, match=message):
        SparseMLAImpl(4, kv_cache_dtype="fp8_ds_mla").forward(**args)


@pytest.mark.parametrize("index_topk", [0, decode.MAX_TOPK + 1])
def test_builder_refuses_a_topk_no_route_serves(index_topk):
    with pytest.raises(ValueError, match=f"argument 'index_topk' expected 1 <= index_topk <= {decode.MAX_TOPK}"):
        SparseMLAMetadataBuilder(8, CPU, NUM_HEADS, index_topk=index_topk)


def test_builder_refuses_a_route_that_cannot_read_fp8():
    message = "argument 'route' expected a route that reads the fp8_ds_mla cache (one of ('decode', 'triton')), got 'fa3'"
    with pytest.raises(ValueError, match=re.escape(message)):
        SparseMLAMetadataBuilder(8, CPU, NUM_HEADS, route="fa3", kv_cache_dtype="fp8_ds_mla")
    with pytest.raises(ValueError, match=re.escape("argument 'kv_cache_dtype' expected one of ['auto', 'bfloat16', "
                                                   "'fp8_ds_mla'], got 'fp8'")):
        SparseMLAMetadataBuilder(8, CPU, NUM_HEADS, kv_cache_dtype="fp8")


# ------------------------------------------------------------------------------------------------ FA3 splits


H200_SMS = 132


@pytest.mark.parametrize("num_heads", [1, 16, 32, 64, 100, 128])
def test_fa3_num_splits_bounds_the_workspace(num_heads):
    bound = 2 * H200_SMS * 64 * fa3.ACCUM_BYTES_PER_ROW
    for num_tokens in list(range(1, 300)) + [1024, 8192, 65536]:
        splits = fa3.choose_num_splits(num_tokens, num_heads, H200_SMS)
        tiles = num_tokens * -(-num_heads // 64)
        assert 1 <= splits <= INDEX_TOPK // 64, f"T={num_tokens}: splits {splits} outside [1, 32]"
        workspace = splits * num_heads * num_tokens * fa3.ACCUM_BYTES_PER_ROW if splits > 1 else 0
        assert workspace < bound, f"T={num_tokens}: workspace {workspace} B expected < {bound} B"
        if tiles >= H200_SMS:
            assert splits == 1, f"T={num_tokens}: {tiles} tiles fill the SMs, expected 1 split, got {splits}"
        else:
            assert splits * tiles >= min(H200_SMS, tiles * 32), f"T={num_tokens}: {splits} splits leave SMs idle"
    assert fa3.choose_num_splits(1, 16, H200_SMS) == 32 and fa3.choose_num_splits(16, 16, H200_SMS) == 9


def test_fa3_scheduler_metadata_size():
    """sgl-attn 10d78675 mha_fwd: 3 vectors of T rounded up to 4, then the semaphore."""
    assert [fa3.scheduler_metadata_size(t) for t in (1, 4, 5, 8, 1024)] == [13, 13, 25, 25, 3073]


# ------------------------------------------------------------------------------------------------ triton route


@pytest.mark.skipif(not interpreting(), reason="runs the Triton kernel in the interpreter (TRITON_INTERPRET=1)")
@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16", "fp8_ds_mla"])
@pytest.mark.parametrize("vllm_layout", [False, True], ids=["contiguous", "padded-cache-transposed-q"])
def test_forward_on_the_triton_route_matches_reference(vllm_layout, kv_cache_dtype):
    """On the fused kernel's route, forward runs on the CPU in the interpreter; vLLM's layout (blocks
    67 slots apart, NaN or 0xFF bytes between them; head-major ``ql_nope``) is read in place. The fp8_ds_mla
    cache is the bf16 one quantized, against the reference on that fp8 cache."""
    gen = testing.make_generator(CPU, seed=31)
    num_blocks, num_heads = 16, 4
    seq_lens, query_lens = [90, 300], [1, 2]
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, gen, topk=INDEX_TOPK, pattern="scattered",
                               drop_fraction=0.2)
    kv_cache = testing.make_kv_cache(num_blocks, CPU, gen)
    if kv_cache_dtype == "fp8_ds_mla":
        kv_cache = testing.fp8_ds_mla_kv_cache(kv_cache)
    common = testing.make_common_metadata(seq_lens, query_lens, batch.num_tokens + 1, num_padded_reqs=1)
    common.block_table_tensor = torch.cat([batch.block_table, batch.block_table[:1]])
    md = SparseMLAMetadataBuilder(8, CPU, num_heads, kv_cache_dtype=kv_cache_dtype).build(0, common)
    assert md.route.name == "triton"
    q_nope, q_rope = testing.make_queries(batch.num_tokens + 1, num_heads, CPU, gen)
    topk = torch.cat([batch.topk_indices, torch.randint(0, 50, (1, INDEX_TOPK), generator=gen, dtype=torch.int32)])
    output = torch.full((batch.num_tokens + 1, num_heads, KV_LORA_RANK), float("nan"), dtype=torch.bfloat16)
    q_in, kv_in = (q_nope, q_rope), kv_cache
    if vllm_layout:
        q_in, kv_in = (testing.transposed_copy(q_nope), q_rope), testing.padded_kv_cache(kv_cache, 3 * kv_cache.shape[-1])
    impl = SparseMLAImpl(num_heads, kv_cache_dtype=kv_cache_dtype)
    out, lse = impl.forward(q_in, kv_in, md, topk, output=output, return_lse=True)

    slot_ids = global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table,
                                         num_blocks)
    slot_ids = torch.cat([slot_ids, torch.full((1, INDEX_TOPK), -1, dtype=torch.int32)])  # padding: nothing
    ref_out, ref_lse = sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    rel = testing.relative_error(out, ref_out)
    assert rel < MAX_REL_ERR, f"output relative error {rel:.2e} expected < {MAX_REL_ERR}"
    assert torch.isneginf(lse[-1]).all() and (out[-1] == 0).all(), "the padding token expected out 0, lse -inf"
    rel_lse = testing.relative_error(lse[:-1], ref_lse[:-1])
    assert rel_lse < MAX_REL_ERR, f"LSE relative error {rel_lse:.2e} expected < {MAX_REL_ERR}"


@pytest.mark.skipif(not interpreting(), reason="runs the Triton kernels in the interpreter (TRITON_INTERPRET=1)")
@pytest.mark.parametrize("route", ["fa3", "triton"])
def test_forward_check_indices_names_the_bad_entry(route):
    """``check_indices`` raises before any attention kernel runs, on either route."""
    args = _forward_args(route=route)
    args["topk_indices"][1, 7] = 29  # token 1: first of two new tokens of request 1 (seq_len 30), attends 29
    message = "token 1, column 7: top-k index 29 expected -1 or in [0, token_kv_len = 29), got 29"
    with pytest.raises(ValueError, match=re.escape(message)):
        SparseMLAImpl(4, check_indices=True).forward(**args)


# ------------------------------------------------------------------------------------------------ step plan


def test_builder_routes_fp8_steps_to_a_route_that_reads_them():
    """For the fp8_ds_mla cache every padded T takes a route that reads it (Triton, for now)."""
    builder = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS, kv_cache_dtype="fp8_ds_mla")
    for num_tokens in (1, 16, MAX_TOKENS):
        md = builder.build(0, testing.make_common_metadata([3000] * num_tokens, [1] * num_tokens))
        assert md.route.name == "triton" and "fp8_ds_mla" in md.route.cache_formats
    assert list(builder.workspaces) == ["triton"]


def test_builder_routes_each_padded_size_by_the_table_and_its_fallbacks():
    """Without an override, each padded T takes routing.choose_route's route for CPU tensors (Triton,
    the one route that reads them), and the plan that route makes for (T, N, SMs, K, cache format)."""
    builder = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS)
    for num_tokens in (1, 2, 5, 16, 100, MAX_TOKENS):
        md = builder.build(0, testing.make_common_metadata([3000] * num_tokens, [1] * num_tokens))
        expected = routing.choose_route(NUM_HEADS, num_tokens, "cpu")
        assert md.route.name == expected, f"T={num_tokens}: route expected {expected}, got {md.route.name}"
        assert md.step.plan == ROUTES[expected].plan(StepContext(num_tokens, NUM_HEADS, builder.num_sms, INDEX_TOPK,
                                                                 CPU, "bfloat16"))
    assert list(builder.workspaces) == routing.routes_up_to(NUM_HEADS, MAX_TOKENS, "cpu") == ["triton"]


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_builder_route_override(route):
    builder = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS, route=route)
    for num_tokens in (1, 7, MAX_TOKENS):
        md = builder.build(0, testing.make_common_metadata([3000] * num_tokens, [1] * num_tokens))
        assert md.route is ROUTES[route], f"T={num_tokens}: route expected {route}, got {md.route.name}"
        assert md.step.plan == ROUTES[route].plan(StepContext(num_tokens, NUM_HEADS, builder.num_sms, INDEX_TOPK, CPU,
                                                              "bfloat16"))
    assert list(builder.workspaces) == [route], "only the override's workspace expected"


@pytest.mark.parametrize("cache_format", sorted(fmt.name for fmt in kv_cache_format.FORMATS))
@pytest.mark.parametrize("name", sorted(ROUTES))
def test_route_plans_are_frozen_and_depend_on_the_shape_only(name, cache_format):
    route = ROUTES[name]
    for num_tokens in (0, 1, 8, 300):
        context = StepContext(num_tokens, NUM_HEADS, H200_SMS, INDEX_TOPK, CPU, cache_format)
        plan = route.plan(context)
        assert dataclasses.is_dataclass(plan) and plan.__dataclass_params__.frozen, f"{name}: plan expected frozen"
        assert plan == route.plan(context)


def test_workspaces_belong_to_the_builder_and_fit_every_step():
    """Each builder owns its workspaces, sized for its largest step; nothing is shared between builders."""
    first = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, 128, route="triton")
    second = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, 128, route="triton")
    assert first.workspaces["triton"].partial_out.data_ptr() != second.workspaces["triton"].partial_out.data_ptr()
    workspace = first.workspaces["triton"]
    assert isinstance(workspace, SplitWorkspace)
    for num_tokens in range(1, MAX_TOKENS + 1):
        plan = first.step_plan(num_tokens).plan
        sizes = SplitWorkspace.sizes(num_tokens, 128, INDEX_TOPK, plan.config)
        assert workspace.fits(sizes), f"T={num_tokens}: split workspace expected room for {sizes}"
    fa3_builder = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS, route="fa3")
    ws = fa3_builder.workspaces["fa3"]
    assert isinstance(ws, fa3_route.Workspace)
    assert ws.page_table.shape == (MAX_TOKENS, INDEX_TOPK) and ws.cache_seqlens.shape == (MAX_TOKENS,)
    assert ws.scheduler_metadata.numel() >= max(
        fa3_builder.step_plan(t).plan.scheduler_metadata_size for t in range(MAX_TOKENS + 1)
    )


def test_step_plan_is_decided_once_per_padded_size():
    builder = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS)
    first = builder.build(0, testing.make_common_metadata([100, 200], [1, 1], num_actual_tokens=4))
    second = builder.build(0, testing.make_common_metadata([9], [3], num_actual_tokens=4))
    assert builder.step_plan(4) is builder.step_plan(4)
    assert first.step is second.step and first.route is second.route
    with pytest.raises(ValueError, match=r"'num_actual_tokens' expected in \[0, max_num_batched_tokens = 128\], got 129"):
        builder.step_plan(MAX_TOKENS + 1)


def test_fa3_step_without_fa3_plans_but_leaves_scheduling_to_fa3():
    """Where FA3 cannot run (this CPU), its route still plans and prepares page-table views; no scheduler
    metadata is computed (FA3's calls raise there with the reason)."""
    if fa3.is_available():
        pytest.skip("checks the machine without FA3")
    md = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, NUM_HEADS, route="fa3").build(0, testing.make_common_metadata([70, 9], [1, 2]))
    assert md.prepared.scheduler_metadata is None
    assert md.prepared.page_table.shape == (3, INDEX_TOPK) and md.prepared.cache_seqlens.shape == (3,)
    num_sms = device_info.num_sms(CPU)
    assert md.step.plan == fa3_route.Plan(num_splits=fa3.choose_num_splits(3, NUM_HEADS, num_sms),
                                           scheduler_metadata_size=fa3.scheduler_metadata_size(3))


def test_the_package_names_its_api():
    """``sparse_mla.__all__`` is what ``from sparse_mla import *`` gives: each name the object its module defines."""
    import sparse_mla
    from sparse_mla import common_metadata, constants, merge, reference, topk_filter
    from sparse_mla.kernels import kv_cache_writer
    from sparse_mla import backend

    modules = (backend, common_metadata, constants, merge, reference, topk_filter, kv_cache_writer)
    assert sparse_mla.__all__ == sorted(sparse_mla.__all__) and len(sparse_mla.__all__) == 11
    for name in sparse_mla.__all__:
        defined = [getattr(m, name) for m in modules if hasattr(m, name)]
        assert defined and getattr(sparse_mla, name) is defined[0], f"sparse_mla.{name} expected its module's object"
    with pytest.raises(AttributeError, match="no attribute 'testing'"):
        sparse_mla.testing  # the fixtures are not part of the package
