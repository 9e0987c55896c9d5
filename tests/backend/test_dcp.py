"""Decode context parallelism and top-k row lengths on the CPU (the Triton route in Triton's interpreter):
the ownership rule, the filter every route applies, the (out, LSE) merge, and DCP simulated exactly --
a cache split over 2, 4 and 8 "ranks" by vLLM's rule, each rank's forward on its shard, the merge --
against the float32 reference of the undivided cache.

Bounds: bf16 outputs within ``rel = ||out - ref|| / ||ref|| < 1e-2`` of float32 (8-bit mantissa); LSEs
within ``1e-2 * max(1, |ref|)``, ``-inf`` exactly where the reference has no key. ``topk_length`` is
held to bitwise equality with the same rows written ``-1`` past the length (the same kernel work).
"""

import pytest
import torch

import sparse_mla
import sparse_mla_testing as testing
from sparse_mla import reference
from sparse_mla.backend import SparseMLABackend, SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.kernels.triton_support import interpreting
from sparse_mla.merge import merge_attention_states
from sparse_mla.topk_filter import DcpShard, attended_positions_reference
from sparse_mla_testing.dcp import shard_cache

CPU = torch.device("cpu")
TOPK = 128
NUM_HEADS = 16
needs_interpreter = pytest.mark.skipif(not interpreting(), reason="runs the Triton kernel in its interpreter (TRITON_INTERPRET=1)")

# Decode (one token per request), speculative (3 per request) and mixed (a 5-token prefill chunk beside decodes).
STEPS = {
    "decode": ([300, 90, 129], [1, 1, 1]),
    "speculative": ([200, 70], [3, 3]),
    "mixed": ([260, 40, 65], [1, 5, 1]),
}


@pytest.mark.parametrize("world_size, interleave", [(1, 1), (2, 1), (3, 2), (4, 16), (8, 64)])
def test_ownership_rule_gives_each_rank_dense_local_positions(world_size, interleave):
    positions = torch.arange(5000)
    seen = torch.zeros_like(positions)
    for rank in range(world_size):
        shard = DcpShard(rank, world_size, interleave)
        mine = positions[shard.owner(positions) == rank]
        # Independent statement of the rule: groups of `interleave` positions dealt round-robin to the ranks.
        expected = positions[(positions // interleave) % world_size == rank]
        assert torch.equal(mine, expected)
        assert torch.equal(shard.local_positions(mine), torch.arange(len(mine)))  # the k-th owned is local k
        seen[mine] += 1
    assert torch.equal(seen, torch.ones_like(seen))  # every position on exactly one rank


@pytest.mark.parametrize("fields, match", [
    ((0, 0, 1), "dcp_world_size"), ((2, 2, 1), "dcp_rank"), ((-1, 2, 1), "dcp_rank"), ((0, 2, 0), "dcp_interleave"),
])
def test_dcp_shard_names_a_bad_field(fields, match):
    with pytest.raises(ValueError, match=match):
        DcpShard(*fields)
    with pytest.raises(ValueError, match=match):
        SparseMLAMetadataBuilder(8, CPU, NUM_HEADS, index_topk=TOPK, dcp_rank=fields[0], dcp_world_size=fields[1],
                                 dcp_interleave=fields[2])


def test_attended_positions_reference_applies_length_causality_and_ownership():
    topk_indices = torch.tensor([[5, -1, 9, 2, 7], [0, 1, 2, 3, 4], [8, 3, -1, 6, 1]], dtype=torch.int32)
    token_kv_len = torch.tensor([8, 5, 9], dtype=torch.int32)
    topk_length = torch.tensor([4, 5, 0], dtype=torch.int32)
    shard = DcpShard(rank=1, world_size=2, interleave=2)  # rank 1 owns 2, 3, 6, 7, ... -> local 0, 1, 2, 3
    got = attended_positions_reference(topk_indices, token_kv_len, topk_length, shard)
    expected = torch.tensor([[-1, -1, -1, 0, -1], [-1, -1, 0, 1, -1], [-1, -1, -1, -1, -1]], dtype=torch.int32)
    assert torch.equal(got, expected)
    # Without DCP: only -1, the causal bound (9 >= 8) and the length (column 4 of row 0, all of row 2).
    plain = attended_positions_reference(topk_indices, token_kv_len, topk_length)
    assert torch.equal(plain, torch.tensor([[5, -1, -1, 2, -1], [0, 1, 2, 3, 4], [-1] * 5], dtype=torch.int32))


def _softmax_attention(scores, values, mask):
    """float32 ``(out [T, N, D], lse [T, N])`` of ``scores`` `[T, N, K]` over the keys ``mask`` `[T, K]` keeps."""
    masked = scores.masked_fill(~mask[:, None, :], float("-inf"))
    lse = torch.logsumexp(masked, dim=-1)
    weights = torch.exp(masked - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    return torch.einsum("tnk,tkd->tnd", weights, values), lse


@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
def test_merge_equals_the_softmax_over_the_union(world_size):
    gen = torch.Generator().manual_seed(world_size)
    num_tokens, num_heads, num_keys, dim = 5, 3, 40, 16
    scores = torch.randn(num_tokens, num_heads, num_keys, generator=gen) * 4
    values = torch.randn(num_tokens, num_keys, dim, generator=gen)
    owner = torch.randint(0, world_size, (num_tokens, num_keys), generator=gen)
    present = torch.rand(num_tokens, num_keys, generator=gen) < 0.7
    present[3] = False  # a token without keys: 0 and -inf
    if world_size > 1:
        present[1] &= owner[1] == 0  # a token whose keys all sit on rank 0: the others are empty for it
    outs, lses = zip(*(_softmax_attention(scores, values, present & (owner == w)) for w in range(world_size)))
    outs, lses = torch.stack(outs), torch.stack(lses)
    outs = torch.where(torch.isneginf(lses)[..., None], float("nan"), outs)  # an empty rank's rows are not read
    out, lse = merge_attention_states(outs, lses)
    expected_out, expected_lse = _softmax_attention(scores, values, present)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(expected_lse)) and torch.isneginf(lse[3]).all()
    finite = torch.isfinite(expected_lse)
    torch.testing.assert_close(lse[finite], expected_lse[finite], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
    assert torch.equal(out[3], torch.zeros_like(out[3]))


def test_merge_keeps_the_outputs_dtype_and_names_bad_arguments():
    outs = torch.randn(2, 3, 4, 8).to(torch.bfloat16)
    out, lse = merge_attention_states(outs, torch.zeros(2, 3, 4))
    assert out.dtype is torch.bfloat16 and lse.dtype is torch.float32 and out.shape == (3, 4, 8)
    torch.testing.assert_close(lse, torch.full((3, 4), float(torch.log(torch.tensor(2.0)))))
    with pytest.raises(ValueError, match="lses"):
        merge_attention_states(outs, torch.zeros(2, 3, 5))
    with pytest.raises(TypeError, match="lses"):
        merge_attention_states(outs, torch.zeros(2, 3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"argument 'outs' expected at least one rank \(W >= 1\), got shape \(0, 3, 4, 8\)"):
        merge_attention_states(outs[:0], torch.zeros(0, 3, 4))
    assert "merge_attention_states" in sparse_mla.__all__ and sparse_mla.merge_attention_states is merge_attention_states


def test_backend_serves_dcp():
    reasons = SparseMLABackend.validate_configuration(576, torch.bfloat16, "auto", 64, use_dcp=True,
                                                      device_capability=(9, 0))
    assert not any("dcp" in r for r in reasons), reasons


def _case(step, seed, cache_format):
    seq_lens, query_lens = STEPS[step]
    gen = testing.make_generator(CPU, seed)
    num_blocks = sum(-(-s // 64) for s in seq_lens) + 4
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, gen, topk=TOPK, pattern="scattered", drop_fraction=0.1)
    kv_cache = testing.make_kv_cache(num_blocks, CPU, gen)
    if cache_format == "fp8_ds_mla":
        kv_cache = testing.fp8_ds_mla_kv_cache(kv_cache)
    q_nope, q_rope = testing.make_queries(batch.num_tokens, NUM_HEADS, CPU, gen)
    return gen, batch, kv_cache, q_nope, q_rope


def _rank_forward(batch, shard, q, topk_indices, cache_format, topk_length=None, num_padded_tokens=None):
    builder = SparseMLAMetadataBuilder(32, CPU, NUM_HEADS, index_topk=TOPK, kv_cache_dtype=cache_format,
                                       dcp_rank=shard.dcp.rank, dcp_world_size=shard.dcp.world_size,
                                       dcp_interleave=shard.dcp.interleave)
    metadata = builder.build(0, testing.common_metadata(batch, num_padded_tokens, block_table=shard.block_table))
    impl = SparseMLAImpl(NUM_HEADS, kv_cache_dtype=cache_format, check_indices=True)
    return impl.forward(q, shard.kv_cache, metadata, topk_indices, return_lse=True, topk_length=topk_length)


@needs_interpreter
@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("world_size, interleave, cache_format", [
    (2, 1, "auto"), (4, 8, "auto"), (8, 1, "auto"), (2, 64, "fp8_ds_mla"), (4, 1, "fp8_ds_mla"),
])
def test_dcp_simulated_matches_the_undivided_cache(step, world_size, interleave, cache_format):
    gen, batch, kv_cache, q_nope, q_rope = _case(step, 7 * world_size + interleave, cache_format)
    impl = SparseMLAImpl(NUM_HEADS, kv_cache_dtype=cache_format)
    slot_ids = reference.global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len,
                                                   batch.block_table, kv_cache.shape[0])
    ref_out, ref_lse = reference.sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, impl.softmax_scale)
    shards = shard_cache(kv_cache, batch.block_table, batch.seq_lens, world_size, interleave, gen)
    results = [_rank_forward(batch, shard, (q_nope, q_rope), batch.topk_indices, cache_format) for shard in shards]
    outs, lses = (torch.stack(parts) for parts in zip(*results))
    for shard, lse in zip(shards, lses):  # each rank attends exactly its keys: -inf where it owns none of a row
        owns = attended_positions_reference(batch.topk_indices, batch.token_kv_len, dcp=shard.dcp) >= 0
        assert torch.equal(torch.isneginf(lse), ~owns.any(dim=1)[:, None].expand_as(lse))
    out, lse = merge_attention_states(outs, lses)
    testing.assert_attention_close(out, lse, ref_out, ref_lse, f"{world_size} ranks, interleave {interleave}")


@needs_interpreter
@pytest.mark.parametrize("world_size, cache_format", [(1, "auto"), (2, "auto"), (1, "fp8_ds_mla"), (4, "fp8_ds_mla")])
def test_topk_length_equals_minus_one_past_the_length(world_size, cache_format):
    gen, batch, kv_cache, q_nope, q_rope = _case("mixed", 11 + world_size, cache_format)
    num_tokens = batch.num_tokens
    lengths = torch.randint(0, TOPK + 1, (num_tokens,), generator=gen, dtype=torch.int32)
    lengths[0], lengths[-1] = 0, TOPK  # an empty row and a whole one
    written = torch.where(torch.arange(TOPK)[None, :] < lengths[:, None], batch.topk_indices, -1)
    for shard in shard_cache(kv_cache, batch.block_table, batch.seq_lens, world_size, 1, gen):
        out, lse = _rank_forward(batch, shard, (q_nope, q_rope), batch.topk_indices, cache_format, topk_length=lengths)
        expected_out, expected_lse = _rank_forward(batch, shard, (q_nope, q_rope), written, cache_format)
        assert torch.equal(out, expected_out) and torch.equal(lse, expected_lse)
        assert torch.isneginf(lse[0]).all() and torch.equal(out[0], torch.zeros_like(out[0]))
        # And against float32: the undivided cache's reference over the global positions this rank attends.
        local = attended_positions_reference(batch.topk_indices, batch.token_kv_len, lengths, shard.dcp)
        attended = torch.where(local >= 0, batch.topk_indices, -1)
        slots = reference.global_slot_ids_reference(attended, batch.req_id, batch.token_kv_len, batch.block_table,
                                                    kv_cache.shape[0])
        ref_out, ref_lse = reference.sparse_mla_reference(q_nope, q_rope, kv_cache, slots,
                                                          SparseMLAImpl(NUM_HEADS).softmax_scale)
        testing.assert_attention_close(out, lse, ref_out, ref_lse, f"rank {shard.dcp.rank} of {world_size}")


@needs_interpreter
def test_padding_tokens_stay_empty_under_dcp():
    gen, batch, kv_cache, q_nope, q_rope = _case("decode", 3, "auto")
    padded = batch.num_tokens + 2
    shard = shard_cache(kv_cache, batch.block_table, batch.seq_lens, 2, 1, gen)[1]
    pad = lambda x: torch.cat([x, x[:1].expand(2, *x.shape[1:])])  # noqa: E731
    out, lse = _rank_forward(batch, shard, (pad(q_nope), pad(q_rope)), pad(batch.topk_indices), "auto",
                             topk_length=torch.full((padded,), TOPK, dtype=torch.int32), num_padded_tokens=padded)
    assert torch.isneginf(lse[-2:]).all() and torch.equal(out[-2:], torch.zeros_like(out[-2:]))


@pytest.mark.parametrize("bad, error, match", [
    (torch.zeros(3, dtype=torch.int64), TypeError, "topk_length"),
    (torch.zeros(4, dtype=torch.int32), ValueError, "topk_length"),
    (torch.zeros(3, 2, dtype=torch.int32)[:, 0], ValueError, "topk_length"),
])
def test_forward_names_a_bad_topk_length(bad, error, match):
    _, batch, kv_cache, q_nope, q_rope = _case("decode", 5, "auto")
    builder = SparseMLAMetadataBuilder(8, CPU, NUM_HEADS, index_topk=TOPK)
    metadata = builder.build(0, testing.common_metadata(batch))
    with pytest.raises(error, match=match):
        SparseMLAImpl(NUM_HEADS).forward((q_nope, q_rope), kv_cache, metadata, batch.topk_indices, topk_length=bad)


def _rank_case():
    _, batch, kv_cache, q_nope, q_rope = _case("decode", 9, "auto")
    shard = shard_cache(kv_cache, batch.block_table, batch.seq_lens, 2, 1, testing.make_generator(CPU, 1))[0]
    return batch, shard, q_nope, q_rope


def test_check_indices_judges_global_positions_and_the_rank_table():
    batch, shard, q_nope, q_rope = _rank_case()
    bad = batch.topk_indices.clone()
    bad[0, 0] = int(batch.token_kv_len[0])  # past the causal length, global
    with pytest.raises(ValueError, match="token 0"):
        _rank_forward(batch, shard, (q_nope, q_rope), bad, "auto")


@needs_interpreter
def test_check_indices_skips_positions_past_the_row_length():
    batch, shard, q_nope, q_rope = _rank_case()
    past = batch.topk_indices.clone()
    past[0, -1] = int(batch.token_kv_len[0])  # past the causal length, but also past the row's length: not read
    lengths = torch.tensor([TOPK - 1, TOPK, TOPK], dtype=torch.int32)
    out, _ = _rank_forward(batch, shard, (q_nope, q_rope), past, "auto", topk_length=lengths)
    expected, _ = _rank_forward(batch, shard, (q_nope, q_rope), batch.topk_indices, "auto", topk_length=lengths)
    assert torch.isfinite(out.float()).all() and torch.equal(out, expected)  # the entry past the length is not read
