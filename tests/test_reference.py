"""The float32 references against independent, loop-by-loop computations."""

import math

import pytest
import torch

from sparse_mla import reference, testing
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, KV_BLOCK_SIZE, KV_LORA_RANK

CPU = torch.device("cpu")


def _naive(q_nope, q_rope, kv_cache, slot_ids, scale):
    """Token by token, head by head, slot by slot in float64."""
    flat = kv_cache.reshape(-1, kv_cache.shape[-1]).double()
    out = torch.zeros(q_nope.shape[0], q_nope.shape[1], KV_LORA_RANK, dtype=torch.float64)
    lse = torch.full(q_nope.shape[:2], float("-inf"), dtype=torch.float64)
    for t in range(q_nope.shape[0]):
        slots = [int(s) for s in slot_ids[t] if s >= 0]
        for h in range(q_nope.shape[1]):
            q = torch.cat([q_nope[t, h], q_rope[t, h]]).double()
            scores = [float(q @ flat[s]) * scale for s in slots]
            if not scores:
                continue
            m = max(scores)
            weights = [math.exp(s - m) for s in scores]
            total = sum(weights)
            lse[t, h] = m + math.log(total)
            for w, s in zip(weights, slots):
                out[t, h] += (w / total) * flat[s, :KV_LORA_RANK]
    return out, lse


@pytest.mark.parametrize("pattern", testing.INVALID_PATTERNS)
def test_sparse_mla_reference_matches_naive_loops(pattern):
    g = testing.make_generator(CPU, 1)
    batch = testing.make_batch([40, 130], [2, 3], num_blocks=8, generator=g, topk=48, pattern=pattern, drop_fraction=0.2)
    kv_cache = testing.make_kv_cache(8, CPU, g)
    q_nope, q_rope = testing.make_queries(batch.num_tokens, 3, CPU, g)
    slot_ids = reference.global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, 8)
    slot_ids[0] = -1  # one token without any valid slot
    out, lse = reference.sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    want_out, want_lse = _naive(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    assert testing.relative_error(out, want_out) < 1e-6, "out rel err bound 1e-6"
    assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.isneginf(lse[0]).all()
    assert torch.allclose(lse[1:].double(), want_lse[1:], rtol=0, atol=1e-5)


def test_topk_to_slots_reference_rules():
    """Valid-first order, causal length, block-table width and block-id range each invalidate."""
    block_table = torch.tensor([[3, 1, 9], [2, 0, 0]], dtype=torch.int32)  # block 9 is outside a 4-block cache
    topk = torch.tensor([[-1, 70, 5, 150, 200, 64], [10, -1, 63, 64, -1, 3]], dtype=torch.int32)
    req_id = torch.tensor([0, 1], dtype=torch.int32)
    token_kv_len = torch.tensor([190, 64], dtype=torch.int32)
    slots, count = reference.topk_to_slots_reference(topk, req_id, token_kv_len, block_table, num_blocks=4)
    bs = KV_BLOCK_SIZE
    # row 0: 70 -> block 1 row 6; 5 -> block 3 row 5; 150 -> block 9 (out of cache); 200 >= len; 64 -> block 1 row 0
    assert slots[0].tolist() == [1 * bs + 6, 3 * bs + 5, 1 * bs + 0, 0, 0, 0]
    # row 1: 10, 63 -> block 2; 64 >= len 64; 3 -> block 2
    assert slots[1].tolist() == [2 * bs + 10, 2 * bs + 63, 2 * bs + 3, 0, 0, 0]
    assert count.tolist() == [3, 3]


def test_topk_to_slots_reference_without_a_request_row():
    """A request id outside the block table, or an empty table, leaves nothing valid (no IndexError)."""
    topk = torch.tensor([[0, 1, -1], [2, 3, 4]], dtype=torch.int32)
    token_kv_len = torch.tensor([10, 10], dtype=torch.int32)
    block_table = torch.tensor([[1]], dtype=torch.int32)
    slots, count = reference.topk_to_slots_reference(topk, torch.tensor([0, 7], dtype=torch.int32), token_kv_len, block_table, 2)
    assert count.tolist() == [2, 0] and slots[0, :2].tolist() == [KV_BLOCK_SIZE, KV_BLOCK_SIZE + 1]
    empty = torch.zeros(0, 0, dtype=torch.int32)
    slots, count = reference.topk_to_slots_reference(topk, torch.zeros(2, dtype=torch.int32), token_kv_len, empty, 2)
    assert count.tolist() == [0, 0] and not slots.any()
