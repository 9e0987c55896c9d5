"""Index conversion and KV-cache writer compiled on the GPU, at serving sizes, against PyTorch references."""

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.constants import INDEX_TOPK, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, KV_LORA_RANK
from sparse_mla.kernels.kv_cache_writer import write_kv
from sparse_mla_testing.topk_to_slots import topk_to_slots

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

POISON = 0x7F7F7F7F

# (seq_lens, query_lens): decode with contexts up to 32k, prefill, mixed, speculative.
BATCHES = {
    "decode": ([100, 1500, 5000, 32768] * 16, [1] * 64),
    "prefill": ([300, 2500], [300, 2500]),
    "mixed": ([4000, 200, 70, 32768], [1, 200, 3, 1]),
    "speculative": ([3000, 50, 2049, 20000], [4, 4, 2, 3]),
}


def _blocks_for(seq_lens):
    return sum(-(-s // KV_BLOCK_SIZE) for s in seq_lens) + 8


@pytest.mark.parametrize("batch_kind", sorted(BATCHES))
@pytest.mark.parametrize("pattern", testing.INVALID_PATTERNS)
def test_topk_to_slots_matches_reference(batch_kind, pattern):
    seq_lens, query_lens = BATCHES[batch_kind]
    device = torch.device("cuda")
    num_blocks = _blocks_for(seq_lens)
    batch = testing.make_batch(
        seq_lens, query_lens, num_blocks, testing.make_generator(device, 50), pattern=pattern, drop_fraction=0.1
    )
    slot_ids = torch.full((batch.num_tokens, INDEX_TOPK), POISON, dtype=torch.int32, device=device)
    valid_count = torch.full((batch.num_tokens,), POISON, dtype=torch.int32, device=device)
    topk_to_slots(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, num_blocks,
                  slot_ids=slot_ids, valid_count=valid_count)
    testing.assert_slots_match_reference(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, num_blocks,
                              slot_ids, valid_count)


def test_topk_to_slots_drops_out_of_range_entries():
    device = torch.device("cuda")
    gen = testing.make_generator(device, 51)
    num_tokens, num_reqs, max_blocks, num_blocks = 256, 8, 40, 200
    # Block ids from -2 to 210 (some outside the cache), lengths past the table, positions from -5.
    block_table = torch.randint(-2, 210, (num_reqs, max_blocks), generator=gen, device=device, dtype=torch.int32)
    req_id = torch.randint(0, num_reqs, (num_tokens,), generator=gen, device=device, dtype=torch.int32)
    token_kv_len = torch.randint(0, 3000, (num_tokens,), generator=gen, device=device, dtype=torch.int32)
    topk = torch.randint(-5, 3000, (num_tokens, INDEX_TOPK), generator=gen, device=device, dtype=torch.int32)
    slot_ids, valid_count = topk_to_slots(topk, req_id, token_kv_len, block_table, num_blocks)
    testing.assert_slots_match_reference(topk, req_id, token_kv_len, block_table, num_blocks, slot_ids, valid_count)
    assert ((slot_ids >= 0) & (slot_ids < num_blocks * KV_BLOCK_SIZE)).all(), "a slot id outside the cache"


def test_topk_to_slots_replays_in_a_cuda_graph():
    device = torch.device("cuda")
    seq_lens, query_lens = BATCHES["mixed"]
    num_blocks = _blocks_for(seq_lens)
    first = testing.make_batch(seq_lens, query_lens, num_blocks, testing.make_generator(device, 52), pattern="start")
    topk, req_id, token_kv_len, block_table = (
        t.clone() for t in (first.topk_indices, first.req_id, first.token_kv_len, first.block_table)
    )
    slot_ids = torch.empty_like(topk)
    valid_count = torch.empty_like(req_id)
    graph, _ = testing.capture_cuda_graph(
        lambda: topk_to_slots(topk, req_id, token_kv_len, block_table, num_blocks, slot_ids=slot_ids,
                              valid_count=valid_count))
    second = testing.make_batch(
        seq_lens, query_lens, num_blocks, testing.make_generator(device, 53), pattern="scattered", drop_fraction=0.3
    )
    for dst, src in zip((topk, req_id, token_kv_len, block_table),
                        (second.topk_indices, second.req_id, second.token_kv_len, second.block_table)):
        dst.copy_(src)
    slot_ids.fill_(POISON)
    valid_count.fill_(POISON)
    graph.replay()
    testing.assert_slots_match_reference(topk, req_id, token_kv_len, block_table, num_blocks, slot_ids, valid_count)


def test_write_kv_matches_reference():
    device = torch.device("cuda")
    gen = testing.make_generator(device, 54)
    num_blocks, num_tokens = 300, 1000
    cache = testing.make_kv_cache(num_blocks, device, gen)
    cache[:, ::2].view(torch.int16).fill_(0x7F7F)  # poisoned rows, compared bit for bit
    before = cache.clone()
    # Strided inputs: c_kv and k_rope split off one [T, 576] projection, k_pe as [T, 1, 64].
    projection = torch.randn(num_tokens, KV_CACHE_HEAD_SIZE, generator=gen, device=device).to(torch.bfloat16)
    kv_c_normed, k_pe = projection[:, :KV_LORA_RANK], projection[:, KV_LORA_RANK:].unsqueeze(1)
    slot_mapping = torch.randperm(num_blocks * KV_BLOCK_SIZE, generator=gen, device=device)[:num_tokens]
    slot_mapping[::7] = -1  # padding tokens
    slot_mapping[3] = num_blocks * KV_BLOCK_SIZE  # out of range: skipped
    write_kv(kv_c_normed, k_pe, cache, slot_mapping)
    expected = before.view(-1, KV_CACHE_HEAD_SIZE)
    written = (slot_mapping >= 0) & (slot_mapping < num_blocks * KV_BLOCK_SIZE)
    expected[slot_mapping[written]] = projection[written]
    differ = (cache.view(-1, KV_CACHE_HEAD_SIZE).view(torch.int16) != expected.view(torch.int16)).any(-1).nonzero()
    assert len(differ) == 0, f"cache slots differ from the reference: {differ[:5].flatten().tolist()}"
