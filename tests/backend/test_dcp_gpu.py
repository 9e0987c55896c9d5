"""Decode context parallelism and top-k row lengths on the GPU, on every route and every cache format it reads.

DCP is simulated exactly on one device: the cache split over 2, 4 and 8 "ranks" by vLLM 0.33.0's ownership
rule (:func:`sparse_mla_testing.dcp.shard_cache`: each rank its own blocks and block table, every other
slot poisoned), each rank's forward run with that rank's builder (``dcp_rank``, ``dcp_world_size``,
``dcp_interleave``) on the global top-k rows, the ranks merged with
:func:`sparse_mla.merge.merge_attention_states` (the math of vLLM's ``cp_lse_ag_out_rs``), against the
float32 reference and the undivided forward of the same route. Decode, speculative and mixed steps; CUDA
graphs captured and replayed with padding; ``topk_length`` bitwise equal to writing ``-1`` past the length.

Bounds: bf16 outputs within ``rel < 1e-2`` of float32 (and of the undivided bf16 forward: each rank's
output is rounded to bf16 before the merge); LSE within ``1e-2`` relative, ``-inf`` exactly where no key.
"""

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla import kv_cache_format, reference
from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.constants import INDEX_TOPK, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, KV_LORA_RANK
from sparse_mla.merge import merge_attention_states
from sparse_mla.routes import ROUTES
from sparse_mla.topk_filter import DcpShard, attended_positions_reference
from sparse_mla_testing.dcp import shard_cache

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

DEVICE = torch.device("cuda")
MAX_REL_ERR = 1e-2
MAX_NUM_BATCHED_TOKENS = 512
STEPS = {  # (seq_lens, query_lens)
    "decode": ([100, 1500, 5000, 32768], [1, 1, 1, 1]),
    "speculative": ([3000, 50, 2049, 20000], [4, 4, 2, 3]),
    "mixed": ([4000, 200, 70], [1, 100, 3]),
}
ROUTE_FORMATS = [(route, fmt.name) for route in sorted(ROUTES) for fmt in kv_cache_format.FORMATS
                 if fmt.name in ROUTES[route].cache_formats]
"""Every (route, cache format) pair served: FA3 reads the bf16 cache only."""


def _case(step, seed, cache_format):
    seq_lens, query_lens = STEPS[step]
    gen = testing.make_generator(DEVICE, seed)
    num_blocks = sum(-(-s // KV_BLOCK_SIZE) for s in seq_lens) + 8
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, gen, pattern="scattered", drop_fraction=0.1)
    kv_cache = testing.make_kv_cache(num_blocks, DEVICE, gen)
    if cache_format == kv_cache_format.FP8_DS_MLA.name:
        kv_cache = testing.fp8_ds_mla_kv_cache(kv_cache)
    return gen, batch, kv_cache


def _builder(route, cache_format, num_heads, dcp=DcpShard()):
    return SparseMLAMetadataBuilder(MAX_NUM_BATCHED_TOKENS, DEVICE, num_heads, route=route, kv_cache_dtype=cache_format,
                                    dcp_rank=dcp.rank, dcp_world_size=dcp.world_size, dcp_interleave=dcp.interleave)


def _reference(batch, q_nope, q_rope, kv_cache, topk_indices, softmax_scale):
    slot_ids = reference.global_slot_ids_reference(topk_indices, batch.req_id, batch.token_kv_len, batch.block_table,
                                                   kv_cache.shape[0])
    return reference.sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, softmax_scale)


@pytest.mark.parametrize("num_heads", [16, 128])
@pytest.mark.parametrize("world_size, interleave", [(2, 1), (4, 64), (8, 1), (8, 16)])
@pytest.mark.parametrize("step", sorted(STEPS))
@pytest.mark.parametrize("route, cache_format", ROUTE_FORMATS)
def test_dcp_simulated_matches_the_undivided_forward(route, cache_format, step, world_size, interleave, num_heads):
    gen, batch, kv_cache = _case(step, 17 * world_size + interleave + num_heads, cache_format)
    q_nope, q_rope = testing.make_queries(batch.num_tokens, num_heads, DEVICE, gen)
    impl = SparseMLAImpl(num_heads, kv_cache_dtype=cache_format)
    common = testing.common_metadata(batch)
    full_out, full_lse = impl.forward((q_nope, q_rope), kv_cache, _builder(route, cache_format, num_heads).build(0, common),
                                      batch.topk_indices, return_lse=True)
    ref_out, ref_lse = _reference(batch, q_nope, q_rope, kv_cache, batch.topk_indices, impl.softmax_scale)
    outs, lses = [], []
    for shard in shard_cache(kv_cache, batch.block_table, batch.seq_lens, world_size, interleave, gen):
        metadata = _builder(route, cache_format, num_heads, shard.dcp).build(
            0, testing.common_metadata(batch, block_table=shard.block_table))
        poisoned, _ = testing.poisoned_outputs(batch.num_tokens, num_heads, DEVICE)
        out, lse = impl.forward((q_nope, q_rope), shard.kv_cache, metadata, batch.topk_indices, output=poisoned,
                                return_lse=True)
        owns = (attended_positions_reference(batch.topk_indices, batch.token_kv_len, dcp=shard.dcp) >= 0).any(dim=1)
        assert torch.equal(torch.isneginf(lse), ~owns[:, None].expand_as(lse)), f"rank {shard.dcp.rank}: -inf rows"
        assert (out[~owns] == 0).all(), f"rank {shard.dcp.rank}: a row owning no key expected out 0"
        outs.append(out)
        lses.append(lse)
    out, lse = merge_attention_states(torch.stack(outs), torch.stack(lses))
    what = f"{route}/{cache_format} {step}, {world_size} ranks, interleave {interleave}, {num_heads} heads"
    testing.assert_attention_close(out, lse, ref_out, ref_lse, what)
    testing.assert_attention_close(out, lse, full_out.float(), full_lse, what + " vs undivided")


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("step", sorted(STEPS))
@pytest.mark.parametrize("route, cache_format", ROUTE_FORMATS)
def test_topk_length_equals_minus_one_past_the_length(route, cache_format, step, world_size):
    num_heads = 32
    gen, batch, kv_cache = _case(step, 5 + world_size, cache_format)
    q_nope, q_rope = testing.make_queries(batch.num_tokens, num_heads, DEVICE, gen)
    lengths = torch.randint(0, INDEX_TOPK + 1, (batch.num_tokens,), generator=gen, device=DEVICE, dtype=torch.int32)
    lengths[0], lengths[-1] = 0, INDEX_TOPK  # an empty row and a whole one
    columns = torch.arange(INDEX_TOPK, device=DEVICE)
    written = torch.where(columns[None, :] < lengths[:, None], batch.topk_indices, -1)
    impl = SparseMLAImpl(num_heads, kv_cache_dtype=cache_format)
    for shard in shard_cache(kv_cache, batch.block_table, batch.seq_lens, world_size, 1, gen):
        metadata = _builder(route, cache_format, num_heads, shard.dcp).build(
            0, testing.common_metadata(batch, block_table=shard.block_table))
        out, lse = impl.forward((q_nope, q_rope), shard.kv_cache, metadata, batch.topk_indices, return_lse=True,
                                topk_length=lengths)
        expected_out, expected_lse = impl.forward((q_nope, q_rope), shard.kv_cache, metadata, written, return_lse=True)
        assert torch.equal(out, expected_out) and torch.equal(lse, expected_lse), f"{route}/{cache_format} rank {shard.dcp.rank}"
        assert torch.isneginf(lse[0]).all() and (out[0] == 0).all()
        local = attended_positions_reference(batch.topk_indices, batch.token_kv_len, lengths, shard.dcp)
        attended = torch.where(local >= 0, batch.topk_indices, -1)
        ref_out, ref_lse = _reference(batch, q_nope, q_rope, kv_cache, attended, impl.softmax_scale)
        testing.assert_attention_close(out, lse, ref_out, ref_lse, f"{route}/{cache_format} rank {shard.dcp.rank}")


@pytest.mark.parametrize("route, cache_format", ROUTE_FORMATS)
def test_cuda_graph_replay_with_padding_under_dcp(route, cache_format):
    """Every rank of 4 captures its forward (with topk_length) at 8 padded tokens; the replay of a later step
    with 3 real tokens, new rows, lengths and shards equals eager on every rank, and the merge the reference."""
    world_size, num_heads, padded_tokens, num_reqs, max_blocks, num_blocks = 4, 16, 8, 3, 64, 160
    fmt = kv_cache_format.format_of_kv_cache_dtype(cache_format)
    impl = SparseMLAImpl(num_heads, kv_cache_dtype=cache_format)
    ranks = [DcpShard(rank, world_size, 1) for rank in range(world_size)]
    builders = [_builder(route, cache_format, num_heads, dcp) for dcp in ranks]
    # Static buffers per rank, as an engine keeps them for a captured batch size.
    caches = [torch.empty(num_blocks, *fmt.block_shape, dtype=fmt.dtype, device=DEVICE) for _ in ranks]
    tables = [torch.zeros(num_reqs, max_blocks, dtype=torch.int32, device=DEVICE) for _ in ranks]
    q = torch.empty(padded_tokens, num_heads, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=DEVICE)
    topk = torch.empty(padded_tokens, INDEX_TOPK, dtype=torch.int32, device=DEVICE)
    lengths = torch.empty(padded_tokens, dtype=torch.int32, device=DEVICE)
    outputs = [torch.empty(padded_tokens, num_heads, KV_LORA_RANK, dtype=torch.bfloat16, device=DEVICE) for _ in ranks]

    def load_step(seed, seq_lens, query_lens, padded_reqs):
        gen = testing.make_generator(DEVICE, seed)
        undivided_blocks = sum(-(-s // KV_BLOCK_SIZE) for s in seq_lens) + 4
        batch = testing.make_batch(seq_lens, query_lens, undivided_blocks, gen, pattern="scattered", drop_fraction=0.2)
        kv_cache = testing.make_kv_cache(undivided_blocks, DEVICE, gen)
        if fmt is kv_cache_format.FP8_DS_MLA:
            kv_cache = testing.fp8_ds_mla_kv_cache(kv_cache)
        q.copy_(torch.randn(q.shape, generator=gen, device=DEVICE))
        topk.copy_(torch.randint(0, 100, topk.shape, generator=gen, device=DEVICE, dtype=torch.int32))  # stale rows
        topk[: batch.num_tokens] = batch.topk_indices
        lengths.copy_(torch.randint(0, INDEX_TOPK + 1, lengths.shape, generator=gen, device=DEVICE, dtype=torch.int32))
        metadatas = []
        for rank, shard in enumerate(shard_cache(kv_cache, batch.block_table, seq_lens, world_size, 1, gen)):
            caches[rank].fill_(0xFF if fmt is kv_cache_format.FP8_DS_MLA else float("nan"))
            caches[rank][: shard.kv_cache.shape[0]] = shard.kv_cache
            tables[rank].zero_()
            tables[rank][: len(seq_lens), : shard.block_table.shape[1]] = shard.block_table
            common = testing.common_metadata(batch, padded_tokens, padded_reqs, block_table=tables[rank])
            metadatas.append(builders[rank].build(0, common))
        return batch, kv_cache, metadatas

    def forward(metadatas, outs):
        return [impl.forward(q, caches[rank], metadatas[rank], topk, output=outs[rank], return_lse=True,
                             topk_length=lengths) for rank in range(world_size)]

    _, _, metadatas = load_step(80, [700, 3000, 50], [1, 3, 4], padded_reqs=0)
    graph, graph_results = testing.capture_cuda_graph(lambda: forward(metadatas, outputs))
    batch, kv_cache, metadatas = load_step(81, [2500, 9], [1, 2], padded_reqs=1)
    for output in outputs:
        output.fill_(float("nan"))
    graph.replay()
    graph.replay()  # twice: a replay must leave the workspaces as it found them
    eager = forward(metadatas, [torch.full_like(o, float("nan")) for o in outputs])
    for rank in range(world_size):
        assert torch.equal(outputs[rank], eager[rank][0]), f"{route}/{cache_format} rank {rank}: replay output differs"
        assert torch.equal(graph_results[rank][1], eager[rank][1]), f"{route}/{cache_format} rank {rank}: replay LSE differs"
    out, lse = merge_attention_states(torch.stack(outputs), torch.stack([result[1] for result in graph_results]))
    real = batch.num_tokens
    local = attended_positions_reference(topk[:real], batch.token_kv_len, lengths[:real])
    attended = torch.where(local >= 0, topk[:real], -1)
    ref_out, ref_lse = _reference(batch, q[:real, :, :KV_LORA_RANK], q[:real, :, KV_LORA_RANK:], kv_cache, attended,
                                  impl.softmax_scale)
    testing.assert_attention_close(out[:real], lse[:real], ref_out, ref_lse, f"{route}/{cache_format} graph replay")
    assert (out[real:] == 0).all() and torch.isneginf(lse[real:]).all(), "padding tokens expected 0 and -inf"
