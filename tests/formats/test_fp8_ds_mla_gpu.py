"""GPU: the fp8_ds_mla KV cache end to end, against the host implementation and the float32 reference.

* ``write_kv`` compiled for the GPU writes byte for byte what the host quantizer
  (:func:`sparse_mla.fp8_ds_mla.quantize_slots`) gives: 128-groups of magnitudes 1e-4 to 1e3 within one
  slot, an all-zero group (scale 0, zero bytes); ``-1`` and out-of-range slots leave the poisoned cache
  untouched; eagerly and replayed in a CUDA graph with new contents.
* Attention on the fp8 cache through ``SparseMLAMetadataBuilder(..., route=name, kv_cache_dtype="fp8_ds_mla")``
  and ``SparseMLAImpl.forward``, for every route that declares the format (:data:`FP8_ROUTES`, read from
  ``ROUTES[name].cache_formats`` at import, so a route joins these tests when it declares it): decode
  steps, speculative and mixed prefill + decode steps, ``-1`` anywhere, positions past the causal length
  and the block table, block ids outside the cache, N in {1, 8, 16, 32, 64, 128}; CUDA-graph capture at
  padded T in {1, 2, 4, 8, 16} (cache write and attention), replayed with fewer real tokens and new cache
  contents, equal to eager; and the step the routing table picks for fp8 when no route is forced.

Accuracy: against :func:`sparse_mla.reference.sparse_mla_reference` on the same fp8 cache (it dequantizes
the gathered slots), so the bound is the kernel's own error: ``||out - ref|| / ||ref|| < 1e-2``, LSE within
``1e-2 * max(1, |ref|)`` and ``-inf`` exactly where the reference has no position
(:func:`sparse_mla_testing.assert_attention_close`). The quantization error against the bf16 values the
cache was quantized from is printed, and asserted only loosely (< 0.1). Outputs are NaN-poisoned before
every call. Run with ``-s`` to see the printed errors.
"""

from typing import Sequence

import pytest
import torch

from sparse_mla import routing
import sparse_mla_testing as testing
from sparse_mla_testing.markers import requires_compiled_gpu
from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.constants import (
    DEEPSEEK_V32_SOFTMAX_SCALE,
    FP8_DS_MLA_SLOT_BYTES,
    INDEX_TOPK,
    KV_BLOCK_SIZE,
    KV_CACHE_HEAD_SIZE,
    KV_LORA_RANK,
    QK_ROPE_HEAD_DIM,
)
from sparse_mla.fp8_ds_mla import quantize_slots
from sparse_mla.kernels.kv_cache_writer import write_kv
from sparse_mla.kv_cache_format import FP8_DS_MLA
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference
from sparse_mla.routes import ROUTES

pytestmark = requires_compiled_gpu

FP8 = FP8_DS_MLA.name

FP8_ROUTES = [name for name, route in ROUTES.items() if FP8 in route.cache_formats]
"""Every route that reads the fp8_ds_mla cache (Triton; the decode kernel once it declares the format)."""

MAX_NUM_BATCHED_TOKENS = 256
MAX_QUANTIZATION_ERROR = 0.1
"""Loose bound of the fp8 output against the bf16 cache's (e4m3 has 3 mantissa bits; 4e-2 measured in the interpreter)."""


def _device():
    return torch.device("cuda", torch.cuda.current_device())


# --------------------------------------------------------------------------------------------------
# The writer


NUM_BLOCKS = 8
NUM_SLOTS = NUM_BLOCKS * KV_BLOCK_SIZE


def _random_bytes_cache(gen):
    """`[NUM_BLOCKS, 64, 656]` uint8 of random bytes: whatever the writer leaves alone keeps them."""
    return torch.randint(0, 256, (NUM_BLOCKS, KV_BLOCK_SIZE, FP8_DS_MLA_SLOT_BYTES), generator=gen,
                         dtype=torch.uint8, device=gen.device)


def _latents(gen, num_tokens):
    """`([T, 512], [T, 64])` bf16: each slot's four 128-groups at magnitudes 1e-4, 1e-1, 1e2 and 1e3 in a random
    order per token; token 1's third group all zero."""
    magnitudes = torch.tensor([1e-4, 1e-1, 1e2, 1e3], device=gen.device)
    order = torch.rand(num_tokens, 4, generator=gen, device=gen.device).argsort(dim=1)
    kv_c = torch.randn(num_tokens, 4, 128, generator=gen, device=gen.device) * magnitudes[order][..., None]
    kv_c[1, 2] = 0.0
    k_pe = torch.randn(num_tokens, QK_ROPE_HEAD_DIM, generator=gen, device=gen.device)
    return kv_c.reshape(num_tokens, KV_LORA_RANK).to(torch.bfloat16), k_pe.to(torch.bfloat16)


def _host_write(kv_cache, kv_c_normed, k_pe, slot_mapping):
    """The cache after a write: the slots of tokens with a slot in range replaced by the host quantizer's bytes."""
    expected = kv_cache.clone()
    keep = (slot_mapping >= 0) & (slot_mapping < kv_cache.shape[0] * KV_BLOCK_SIZE)
    expected.view(-1, FP8_DS_MLA_SLOT_BYTES)[slot_mapping[keep]] = quantize_slots(kv_c_normed, k_pe)[keep]
    return expected


def _assert_same_bytes(got, expected, what):
    differ = (got != expected).nonzero()
    assert len(differ) == 0, (
        f"{what}: {len(differ)} cache bytes (block, row, byte) differ from the host quantizer, first {differ[:5].tolist()}"
    )


def _slot_mapping(gen, num_tokens):
    """Distinct random slots, then ``-1`` (padding) and slots past the cache, ``-7`` and ``2**40`` for the last four."""
    slots = torch.randperm(NUM_SLOTS, generator=gen, device=gen.device)[:num_tokens]
    slots[-4:] = torch.tensor([-1, NUM_SLOTS, -7, 2**40], device=gen.device)
    return slots


def test_writer_is_byte_exact_against_the_host_quantizer():
    gen = testing.make_generator(_device(), 80)
    cache = _random_bytes_cache(gen)
    kv_c_normed, k_pe = _latents(gen, 24)
    slot_mapping = _slot_mapping(gen, 24)
    expected = _host_write(cache, kv_c_normed, k_pe, slot_mapping)
    write_kv(kv_c_normed, k_pe, cache, slot_mapping)
    torch.cuda.synchronize()
    _assert_same_bytes(cache, expected, "eager write")
    zero_slot = cache.view(-1, FP8_DS_MLA_SLOT_BYTES)[slot_mapping[1]]
    assert (zero_slot[256:384] == 0).all(), "an all-zero group expected zero fp8 bytes"
    assert zero_slot[520:524].view(torch.float32).item() == 0.0, "an all-zero group expected scale 0"


def test_writer_in_a_cuda_graph_replays_with_new_contents():
    device = _device()
    num_tokens = 16
    cache = torch.empty(NUM_BLOCKS, KV_BLOCK_SIZE, FP8_DS_MLA_SLOT_BYTES, dtype=torch.uint8, device=device)
    kv_c_normed = torch.empty(num_tokens, KV_LORA_RANK, dtype=torch.bfloat16, device=device)
    k_pe = torch.empty(num_tokens, QK_ROPE_HEAD_DIM, dtype=torch.bfloat16, device=device)
    slot_mapping = torch.empty(num_tokens, dtype=torch.int64, device=device)

    def load(seed):
        gen = testing.make_generator(device, seed)
        cache.copy_(_random_bytes_cache(gen))
        latents, rope = _latents(gen, num_tokens)
        kv_c_normed.copy_(latents)
        k_pe.copy_(rope)
        slot_mapping.copy_(_slot_mapping(gen, num_tokens))
        return _host_write(cache, kv_c_normed, k_pe, slot_mapping)

    load(81)
    graph, _ = testing.capture_cuda_graph(lambda: write_kv(kv_c_normed, k_pe, cache, slot_mapping))
    for seed in (82, 83):
        expected = load(seed)
        graph.replay()
        torch.cuda.synchronize()
        _assert_same_bytes(cache, expected, f"graph replay (seed {seed})")


# --------------------------------------------------------------------------------------------------
# Attention on the fp8 cache


def _reference(batch, q_nope, q_rope, kv_cache, topk_indices):
    slot_ids = global_slot_ids_reference(topk_indices, batch.req_id, batch.token_kv_len, batch.block_table,
                                         kv_cache.shape[0])
    return sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)


def _fp8_layer_step(seq_lens, query_lens, num_heads, seed, route=None, pattern="scattered", padding=0,
                    empty_rows: Sequence[int] = (), invalid_positions=False):
    """One step on the fp8 cache: write the new tokens' K/V with ``write_kv`` (checked against the host
    quantizer), build (``route``, or the routing table's when None) and attend.

    ``invalid_positions`` puts, in each real token's row, positions at and past its causal length and past
    the block table's width, and gives two block-table entries block ids outside the cache (one of them
    ``num_blocks``). ``empty_rows`` get only ``-1``; ``padding`` adds CUDA-graph padding tokens (slot -1,
    garbage top-k rows) and one padding request.

    Returns ``(out, lse, ref_out, ref_lse, bf16_ref_out, route name)``: the outputs over real and padding tokens,
    the reference on the fp8 cache (zero and ``-inf`` for padding) and, for the quantization error, the
    reference on the bf16 values the cache was quantized from.
    """
    device = _device()
    gen = testing.make_generator(device, seed)
    num_blocks = sum(-(-s // KV_BLOCK_SIZE) for s in seq_lens) + 8
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, gen, pattern=pattern, drop_fraction=0.1)
    num_real = batch.num_tokens
    num_tokens = num_real + padding
    source = testing.make_kv_cache(num_blocks, device, gen)  # the bf16 values the fp8 cache holds
    kv_cache = testing.fp8_ds_mla_kv_cache(source)
    new_kv = torch.randn(num_tokens, KV_CACHE_HEAD_SIZE, generator=gen, device=device).to(torch.bfloat16)
    new_c_kv, new_k_pe = new_kv[:, :KV_LORA_RANK], new_kv[:, KV_LORA_RANK:]
    expected_cache = _host_write(kv_cache, new_c_kv[:num_real], new_k_pe[:num_real], batch.slot_mapping)
    source.view(-1, KV_CACHE_HEAD_SIZE)[batch.slot_mapping] = new_kv[:num_real]

    topk = torch.randint(0, 64, (num_tokens, INDEX_TOPK), generator=gen, device=device, dtype=torch.int32)
    topk[:num_real] = batch.topk_indices  # padding rows keep garbage positions
    if invalid_positions:
        max_blocks = batch.block_table.shape[1]
        past = batch.token_kv_len[:, None] + torch.arange(8, device=device, dtype=torch.int32)  # at/past causal length
        topk[:num_real, 3:11] = past
        topk[:num_real, -1] = max_blocks * KV_BLOCK_SIZE + 5  # past the block table's width
        batch.block_table[0, 0] = num_blocks  # block ids outside the cache, under positions rows select
        batch.block_table[-1, -1] = num_blocks + 1000
    topk[list(empty_rows)] = -1

    common = testing.common_metadata(batch, num_actual_tokens=num_tokens, num_padded_reqs=1 if padding else 0)
    write_kv(new_c_kv, new_k_pe, kv_cache, common.slot_mapping)
    _assert_same_bytes(kv_cache, expected_cache, "write_kv of the step")

    builder = SparseMLAMetadataBuilder(MAX_NUM_BATCHED_TOKENS, device, num_heads, route=route, kv_cache_dtype=FP8)
    metadata = builder.build(0, common)
    assert route is None or metadata.route.name == route, f"forced route {route}, got {metadata.route.name}"
    q_nope, q_rope = testing.make_queries(num_tokens, num_heads, device, gen)
    output, _ = testing.poisoned_outputs(num_tokens, num_heads, device)
    impl = SparseMLAImpl(num_heads, DEEPSEEK_V32_SOFTMAX_SCALE, kv_cache_dtype=FP8)
    out, lse = impl.forward((q_nope, q_rope), kv_cache, metadata, topk, output=output, return_lse=True)  # lse: forward's
    assert out.data_ptr() == output.data_ptr(), "expected the output buffer back"
    torch.cuda.synchronize()

    ref_out = torch.zeros(num_tokens, num_heads, KV_LORA_RANK, device=device)
    ref_lse = torch.full((num_tokens, num_heads), float("-inf"), device=device)
    bf16_ref_out = ref_out.clone()
    real = slice(0, num_real)
    ref_out[real], ref_lse[real] = _reference(batch, q_nope[real], q_rope[real], kv_cache, topk[real])
    bf16_ref_out[real], _ = _reference(batch, q_nope[real], q_rope[real], source, topk[real])
    return out, lse, ref_out, ref_lse, bf16_ref_out, metadata.route.name


def _assert_matches(result, what):
    out, lse, ref_out, ref_lse, _, route = result
    print(f"{what} [{route}]: rel err vs the reference on the fp8 cache {testing.relative_error(out, ref_out):.2e}")
    testing.assert_attention_close(out, lse, ref_out, ref_lse, f"{what} [{route}]")


DECODE_POINTS = [(1, 1), (1, 16), (8, 2), (16, 4), (16, 8), (32, 4), (64, 2), (64, 8), (128, 1), (128, 4), (128, 16)]
"""(N, T) of the decode steps: every N of {1, 8, 16, 32, 64, 128}, T from 1 to 16; chosen so that they share the
Triton kernel's launch configurations with the other tests (each one compiles once)."""

DECODE_CONTEXTS = (32768, 1500, 20000, 700, 2049, 64)


@pytest.mark.parametrize("num_heads, num_tokens", DECODE_POINTS)
@pytest.mark.parametrize("route", FP8_ROUTES)
def test_decode_step_matches_reference(route, num_heads, num_tokens):
    seq_lens = [DECODE_CONTEXTS[r % len(DECODE_CONTEXTS)] for r in range(num_tokens)]
    pattern = testing.INVALID_PATTERNS[num_tokens % 3]
    result = _fp8_layer_step(seq_lens, [1] * num_tokens, num_heads, seed=num_heads * 100 + num_tokens, route=route,
                             pattern=pattern)
    _assert_matches(result, f"decode N={num_heads} T={num_tokens} ({pattern})")


BATCHES = {
    "speculative": ([3000, 50, 2049, 20000], [4, 4, 2, 3]),
    "mixed": ([4000, 200, 70, 9000], [1, 120, 3, 1]),
}
"""(seq_lens, query_lens) of steps with several tokens per request: speculative decode, prefill + decode."""


@pytest.mark.parametrize("num_heads", [16, 128])
@pytest.mark.parametrize("batch_kind", sorted(BATCHES))
@pytest.mark.parametrize("route", FP8_ROUTES)
def test_multi_token_step_matches_reference(route, batch_kind, num_heads):
    seq_lens, query_lens = BATCHES[batch_kind]
    result = _fp8_layer_step(seq_lens, query_lens, num_heads, seed=90 + num_heads, route=route)
    _assert_matches(result, f"{batch_kind} N={num_heads}")


@pytest.mark.parametrize("num_heads", [8, 128])
@pytest.mark.parametrize("route", FP8_ROUTES)
def test_invalid_positions_empty_rows_and_padding(route, num_heads):
    """Positions at and past the causal length and the block table, block ids outside the cache, rows of only
    -1 and padding tokens: skipped, never read; tokens without a position give 0 and -inf."""
    seq_lens, query_lens = BATCHES["speculative"]
    result = _fp8_layer_step(seq_lens, query_lens, num_heads, seed=95, route=route, empty_rows=[0, 6], padding=3,
                             invalid_positions=True)
    _assert_matches(result, f"invalid entries N={num_heads}")
    out, lse = result[:2]
    for token in (0, 6, out.shape[0] - 1):
        assert (out[token] == 0).all() and torch.isneginf(lse[token]).all(), f"token {token} expected out 0, lse -inf"


@pytest.mark.parametrize("num_heads", [16, 128])
def test_routed_default_serves_fp8(num_heads):
    """Without a forced route the builder takes the fp8 grid's route (or its fallback that reads fp8)."""
    for batch_kind, (seq_lens, query_lens) in sorted(BATCHES.items()):
        result = _fp8_layer_step(seq_lens, query_lens, num_heads, seed=97, padding=2)
        chosen = result[-1]
        expected = routing.choose_route(num_heads, sum(query_lens) + 2, cache_format=FP8)
        assert chosen == expected and chosen in FP8_ROUTES, f"routed {chosen}, expected {expected} of {FP8_ROUTES}"
        _assert_matches(result, f"routed {batch_kind} N={num_heads}")


def test_quantization_error_against_the_bf16_values():
    """Reported, not a bound on the kernels: the fp8 cache's output against the bf16 cache's (e4m3 rounding)."""
    for num_heads, (seq_lens, query_lens) in ((16, ([32768, 1500, 20000, 700], [1, 1, 1, 1])), (128, BATCHES["mixed"])):
        out, _, ref_out, _, bf16_ref_out, route = _fp8_layer_step(seq_lens, query_lens, num_heads, seed=99)
        kernel, quantization = testing.relative_error(out, ref_out), testing.relative_error(ref_out, bf16_ref_out)
        total = testing.relative_error(out, bf16_ref_out)
        print(f"N={num_heads} [{route}]: rel err of the fp8 reference vs the bf16 one (quantization) {quantization:.2e}; "
              f"kernel vs fp8 reference {kernel:.2e}; kernel vs bf16 reference {total:.2e}")
        assert total < MAX_QUANTIZATION_ERROR, f"rel err {total:.2e} vs the bf16 values expected < {MAX_QUANTIZATION_ERROR}"


# --------------------------------------------------------------------------------------------------
# CUDA graphs


@pytest.mark.parametrize("padded_tokens", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("route", FP8_ROUTES)
def test_cuda_graph_replay_with_fewer_real_tokens_equals_eager(route, padded_tokens):
    """Capture the cache write and the forward at ``padded_tokens`` tokens, all real; replay with about half
    as many real tokens (the rest padding, one padding request) and new cache contents: the cache equals the
    host quantizer's write, the output and LSE equal an eager forward and the reference, padding gives 0, -inf."""
    device = _device()
    num_heads, num_blocks, max_blocks = 16, 700, 320
    num_reqs = min(3, padded_tokens)
    contexts = (3000, 700, 20000)
    impl = SparseMLAImpl(num_heads, kv_cache_dtype=FP8)
    builder = SparseMLAMetadataBuilder(MAX_NUM_BATCHED_TOKENS, device, num_heads, route=route, kv_cache_dtype=FP8)
    # Static buffers, as an engine keeps them for a captured batch size.
    kv_cache = torch.empty(num_blocks, KV_BLOCK_SIZE, FP8_DS_MLA_SLOT_BYTES, dtype=torch.uint8, device=device)
    new_kv = torch.empty(padded_tokens, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=device)
    slot_mapping = torch.empty(padded_tokens, dtype=torch.int64, device=device)
    q = torch.empty(padded_tokens, num_heads, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=device)
    topk = torch.empty(padded_tokens, INDEX_TOPK, dtype=torch.int32, device=device)
    output = torch.empty(padded_tokens, num_heads, KV_LORA_RANK, dtype=torch.bfloat16, device=device)
    block_table = torch.zeros(num_reqs, max_blocks, dtype=torch.int32, device=device)

    def load_step(seed, num_real):
        gen = testing.make_generator(device, seed)
        reqs = min(num_reqs, num_real)
        query_lens = [num_real // reqs + (r < num_real % reqs) for r in range(reqs)]
        batch = testing.make_batch(list(contexts[:reqs]), query_lens, num_blocks, gen, pattern="scattered",
                                   drop_fraction=0.2)
        kv_cache.copy_(testing.fp8_ds_mla_kv_cache(testing.make_kv_cache(num_blocks, device, gen)))
        new_kv.copy_(torch.randn(new_kv.shape, generator=gen, device=device))
        q.copy_(torch.randn(q.shape, generator=gen, device=device))
        topk.copy_(torch.randint(0, 100, topk.shape, generator=gen, device=device, dtype=torch.int32))
        topk[:num_real] = batch.topk_indices
        block_table.zero_()
        block_table[:reqs, : batch.block_table.shape[1]] = batch.block_table
        batch.block_table = block_table[:reqs]
        common = testing.common_metadata(batch, padded_tokens, num_reqs - reqs, block_table=block_table)
        slot_mapping.copy_(common.slot_mapping)
        expected_cache = _host_write(kv_cache, new_kv[:, :KV_LORA_RANK], new_kv[:, KV_LORA_RANK:], slot_mapping)
        return batch, builder.build(0, common), expected_cache

    def step(metadata, out):
        write_kv(new_kv[:, :KV_LORA_RANK], new_kv[:, KV_LORA_RANK:], kv_cache, slot_mapping)
        return impl.forward(q, kv_cache, metadata, topk, output=out, return_lse=True)

    _, metadata, _ = load_step(70 + padded_tokens, padded_tokens)
    graph, (_, graph_lse) = testing.capture_cuda_graph(lambda: step(metadata, output))

    real = -(-padded_tokens // 2)
    batch, metadata, expected_cache = load_step(90 + padded_tokens, real)
    output.fill_(float("nan"))
    graph_lse.fill_(float("nan"))
    graph.replay()
    graph.replay()  # twice: a replay must leave the workspaces (split counters) as it found them
    torch.cuda.synchronize()
    _assert_same_bytes(kv_cache, expected_cache, "graph replay's cache write")
    eager_out, eager_lse = step(metadata, torch.full_like(output, float("nan")))
    torch.cuda.synchronize()
    what = f"{route} padded T={padded_tokens}, {real} real"
    assert torch.equal(output, eager_out), f"{what}: graph replay output differs from eager"
    assert torch.equal(graph_lse, eager_lse), f"{what}: graph replay LSE differs from eager"
    ref_out, ref_lse = _reference(batch, q[:real, :, :KV_LORA_RANK], q[:real, :, KV_LORA_RANK:], kv_cache, topk[:real])
    print(f"{what}: rel err vs the reference on the fp8 cache {testing.relative_error(output[:real], ref_out):.2e}")
    testing.assert_attention_close(output[:real], graph_lse[:real], ref_out, ref_lse, what)
    assert (output[real:] == 0).all() and torch.isneginf(graph_lse[real:]).all(), f"{what}: padding expected 0, -inf"
