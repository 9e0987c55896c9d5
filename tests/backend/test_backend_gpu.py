"""A full sparse-MLA layer step through the backend on the GPU, against the float32 reference.

Each step writes the new tokens' K/V into the cache, builds the metadata (and the step's plan), and
attends through ``SparseMLAImpl.forward`` on each route (the builder's ``route=``); the reference reads
a cache written by PyTorch.
"""

import dataclasses

from typing import Sequence

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.constants import (
    DEEPSEEK_V32_SOFTMAX_SCALE,
    INDEX_TOPK,
    KV_BLOCK_SIZE,
    KV_CACHE_HEAD_SIZE,
    KV_LORA_RANK,
)
from sparse_mla.kernels.kv_cache_writer import write_kv
from sparse_mla.ops import fa3
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference
from sparse_mla.routes import ROUTES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MAX_REL_ERR = 1e-2
MAX_NUM_BATCHED_TOKENS = 1024

# (seq_lens, query_lens)
BATCHES = {
    "decode": ([100, 1500, 5000, 32768], [1, 1, 1, 1]),
    "prefill": ([300, 64], [300, 64]),
    "mixed": ([4000, 200, 70], [1, 200, 3]),
    "speculative": ([3000, 50, 2049, 20000], [4, 4, 2, 3]),
}


@pytest.fixture(scope="module", autouse=True)
def _require_fa3():
    availability = fa3.is_available()
    assert availability, f"the GPU suite needs FA3: {availability.reason}"


@pytest.fixture(params=sorted(ROUTES))
def route(request):
    """Runs the test once per route (the builder's override), whatever sparse_mla.routing would pick."""
    return request.param


def _reference(batch, q_nope, q_rope, kv_cache, num_blocks, topk_indices=None):
    """fp32 output and LSE over the slots the reference conversion selects (-1 past the valid count)."""
    topk_indices = batch.topk_indices if topk_indices is None else topk_indices
    slot_ids = global_slot_ids_reference(topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, num_blocks)
    return sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)


def _assert_close(out, lse, ref_out, ref_lse, what):
    rel = testing.relative_error(out, ref_out)
    assert rel < MAX_REL_ERR, f"{what}: output relative error {rel:.2e} expected < {MAX_REL_ERR}"
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"{what}: LSE expected -inf exactly for tokens without slots"
    if (~empty).any():
        rel_lse = testing.relative_error(lse[~empty], ref_lse[~empty])
        assert rel_lse < MAX_REL_ERR, f"{what}: LSE relative error {rel_lse:.2e} expected < {MAX_REL_ERR}"
    print(f"{what}: rel err out {rel:.2e}")


def _layer_step(seq_lens, query_lens, num_heads, pattern, seed, route, empty_rows: Sequence[int] = (), padding: int = 0,
                fused_q: bool = False, scheduler_metadata: bool = True):
    """Write K/V, build, convert, attend; returns (out, lse, ref_out, ref_lse) over real and padding tokens."""
    device = torch.device("cuda")
    gen = testing.make_generator(device, seed)
    num_blocks = sum(-(-s // KV_BLOCK_SIZE) for s in seq_lens) + 8
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, gen, pattern=pattern, drop_fraction=0.1)
    num_real = batch.num_tokens
    num_tokens = num_real + padding
    kv_cache = testing.make_kv_cache(num_blocks, device, gen)
    # New tokens' latent and rotary keys, then padding rows (slot -1) with garbage.
    new_kv = torch.randn(num_tokens, KV_CACHE_HEAD_SIZE, generator=gen, device=device).to(torch.bfloat16)
    ref_cache = kv_cache.clone()
    ref_cache.view(-1, KV_CACHE_HEAD_SIZE)[batch.slot_mapping] = new_kv[:num_real]

    common = testing.common_metadata(batch, num_actual_tokens=num_tokens, num_padded_reqs=1 if padding else 0)
    write_kv(new_kv[:, :KV_LORA_RANK], new_kv[:, KV_LORA_RANK:].unsqueeze(1), kv_cache, common.slot_mapping)
    assert torch.equal(kv_cache.view(torch.int16), ref_cache.view(torch.int16)), "write_kv differs from the reference"

    builder = SparseMLAMetadataBuilder(MAX_NUM_BATCHED_TOKENS, device, num_heads, route=route)
    metadata = builder.build(0, common)
    if route == "fa3":
        assert metadata.prepared.scheduler_metadata is not None, "FA3 scheduler metadata expected from the build"
        if not scheduler_metadata:  # FA3 plans on its own, from the actual valid counts
            metadata = dataclasses.replace(metadata, prepared=dataclasses.replace(metadata.prepared, scheduler_metadata=None))
    q = torch.randn(num_tokens, num_heads, KV_CACHE_HEAD_SIZE, generator=gen, device=device).to(torch.bfloat16)
    q_nope, q_rope = q[..., :KV_LORA_RANK], q[..., KV_LORA_RANK:]
    topk = torch.randint(0, 64, (num_tokens, INDEX_TOPK), generator=gen, device=device, dtype=torch.int32)
    topk[:num_real] = batch.topk_indices  # padding rows keep garbage positions
    topk[list(empty_rows)] = -1
    output = torch.full((num_tokens, num_heads, KV_LORA_RANK), float("nan"), dtype=torch.bfloat16, device=device)

    impl = SparseMLAImpl(num_heads, DEEPSEEK_V32_SOFTMAX_SCALE)
    # One [T, N, 576] tensor split by views, or two separate contiguous tensors.
    q_arg = q if fused_q else (q_nope.contiguous(), q_rope.contiguous())
    out, lse = impl.forward(q_arg, kv_cache, metadata, topk, output=output, return_lse=True)
    assert out.data_ptr() == output.data_ptr(), "expected the output buffer back"
    assert lse.shape == (num_tokens, num_heads) and lse.dtype == torch.float32

    ref_out = torch.zeros(num_tokens, num_heads, KV_LORA_RANK, device=device)
    ref_lse = torch.full((num_tokens, num_heads), float("-inf"), device=device)
    ref_out[:num_real], ref_lse[:num_real] = _reference(
        batch, q_nope[:num_real], q_rope[:num_real], ref_cache, num_blocks, topk[:num_real]
    )
    return out, lse, ref_out, ref_lse


@pytest.mark.parametrize("num_heads", [16, 128])
@pytest.mark.parametrize("pattern", testing.INVALID_PATTERNS)
@pytest.mark.parametrize("batch_kind", sorted(BATCHES))
def test_layer_step_matches_reference(batch_kind, pattern, num_heads, route):
    seq_lens, query_lens = BATCHES[batch_kind]
    out, lse, ref_out, ref_lse = _layer_step(seq_lens, query_lens, num_heads, pattern, seed=60, route=route)
    _assert_close(out, lse, ref_out, ref_lse, f"{route}: {batch_kind}/{pattern}/N={num_heads}")


@pytest.mark.parametrize("num_heads", [16, 128])
@pytest.mark.parametrize("batch_kind", sorted(BATCHES))
def test_fa3_with_and_without_the_step_scheduler_metadata(batch_kind, num_heads):
    """The per-step scheduler metadata (planned on kv_len_bound) and FA3's own (planned on the actual
    valid counts) both give the reference: rows with holes (-1) have fewer keys than their bound."""
    seq_lens, query_lens = BATCHES[batch_kind]
    for shared in (True, False):
        out, lse, ref_out, ref_lse = _layer_step(seq_lens, query_lens, num_heads, "scattered", seed=63, route="fa3",
                                                 empty_rows=[1], padding=2, scheduler_metadata=shared)
        _assert_close(out, lse, ref_out, ref_lse, f"fa3 scheduler metadata {'per step' if shared else 'per call'}")


def test_tokens_without_slots_and_padding_give_zero_and_neg_inf(route):
    seq_lens, query_lens = BATCHES["speculative"]
    out, lse, ref_out, ref_lse = _layer_step(seq_lens, query_lens, 16, "scattered", seed=61, route=route,
                                             empty_rows=[0, 5], padding=3)
    _assert_close(out, lse, ref_out, ref_lse, f"{route}: empty rows and padding")
    for token in (0, 5, out.shape[0] - 1):
        assert (out[token] == 0).all(), f"{route}: token {token} without valid slots expected out = 0"


def test_fused_query_tensor(route):
    seq_lens, query_lens = BATCHES["mixed"]
    out, lse, ref_out, ref_lse = _layer_step(seq_lens, query_lens, 32, "end", seed=62, route=route, fused_q=True)
    _assert_close(out, lse, ref_out, ref_lse, f"{route}: q as one [T, N, 576] tensor")


def test_cuda_graph_replay_with_fewer_real_tokens_equals_eager(route):
    """Capture two layers of one step at 8 padded tokens with 8 real ones; replay with 3 real tokens and
    new contents. The layers share the step's plan (FA3: one scheduler metadata, whose tile semaphore
    each layer must leave clean for the next and for the next replay)."""
    device = torch.device("cuda")
    num_heads, padded_tokens, num_reqs, max_blocks, num_blocks, num_layers = 16, 8, 3, 64, 400, 2
    impl = SparseMLAImpl(num_heads)
    builder = SparseMLAMetadataBuilder(MAX_NUM_BATCHED_TOKENS, device, num_heads, route=route)
    # Static buffers, as an engine keeps them for a captured batch size; one cache, query, top-k and output per layer.
    kv_caches = [torch.empty(num_blocks, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=device)
                 for _ in range(num_layers)]
    qs = [torch.empty(padded_tokens, num_heads, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=device)
          for _ in range(num_layers)]
    topks = [torch.empty(padded_tokens, INDEX_TOPK, dtype=torch.int32, device=device) for _ in range(num_layers)]
    outputs = [torch.empty(padded_tokens, num_heads, KV_LORA_RANK, dtype=torch.bfloat16, device=device)
               for _ in range(num_layers)]
    block_table = torch.zeros(num_reqs, max_blocks, dtype=torch.int32, device=device)

    def load_step(seed, seq_lens, query_lens, padded_reqs):
        gen = testing.make_generator(device, seed)
        batch = testing.make_batch(seq_lens, query_lens, num_blocks, gen, pattern="scattered", drop_fraction=0.2)
        for layer in range(num_layers):
            kv_caches[layer].copy_(testing.make_kv_cache(num_blocks, device, gen))
            qs[layer].copy_(torch.randn(qs[layer].shape, generator=gen, device=device))
            topks[layer].copy_(torch.randint(0, 100, topks[layer].shape, generator=gen, device=device, dtype=torch.int32))
            rows = batch.topk_indices if layer == 0 else batch.topk_indices.flip(1)  # another order, other holes
            topks[layer][: batch.num_tokens] = rows
            if layer:
                topks[layer][: batch.num_tokens, : INDEX_TOPK // 4] = -1
        block_table.zero_()
        block_table[: len(seq_lens), : batch.block_table.shape[1]] = batch.block_table
        batch.block_table = block_table[: len(seq_lens)]
        common = testing.common_metadata(batch, padded_tokens, padded_reqs, block_table=block_table)
        return batch, builder.build(0, common)

    def forward(metadata, outs):
        return [impl.forward(qs[i], kv_caches[i], metadata, topks[i], output=outs[i], return_lse=True)
                for i in range(num_layers)]

    _, metadata = load_step(70, [700, 3000, 50], [1, 3, 4], padded_reqs=0)
    graph, graph_results = testing.capture_cuda_graph(lambda: forward(metadata, outputs))

    batch, metadata = load_step(71, [2500, 9], [1, 2], padded_reqs=1)
    for output in outputs:
        output.fill_(float("nan"))
    graph.replay()
    graph.replay()  # twice: a replay must leave the workspaces (counters, FA3's semaphore) as it found them
    eager = forward(metadata, [torch.full_like(o, float("nan")) for o in outputs])
    real = batch.num_tokens
    for layer in range(num_layers):
        (_, graph_lse), (eager_out, eager_lse) = graph_results[layer], eager[layer]
        output, q, topk = outputs[layer], qs[layer], topks[layer]
        assert torch.equal(output, eager_out), f"{route} layer {layer}: graph replay output differs from eager"
        assert torch.equal(graph_lse, eager_lse), f"{route} layer {layer}: graph replay LSE differs from eager"
        ref_out, ref_lse = _reference(batch, q[:real, :, :KV_LORA_RANK], q[:real, :, KV_LORA_RANK:], kv_caches[layer],
                                      num_blocks, topk[:real])
        _assert_close(output[:real], graph_lse[:real], ref_out, ref_lse, f"{route} layer {layer}: graph replay")
        assert (output[real:] == 0).all() and torch.isneginf(graph_lse[real:]).all(), f"{route}: padding expected 0, -inf"
