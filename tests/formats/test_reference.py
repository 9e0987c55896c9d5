"""The float32 references against independent, loop-by-loop computations."""

import math

import pytest
import torch

from sparse_mla import reference
import sparse_mla_testing as testing
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, FP8_DS_MLA_SLOT_BYTES, KV_BLOCK_SIZE, KV_LORA_RANK
from sparse_mla.fp8_ds_mla import quantize_slots

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


def test_sparse_mla_reference_reads_fp8_ds_mla_by_hand():
    """One token, one head, two fp8_ds_mla slots written byte by byte, worked out by hand.

    Slot 0: c_kv[0] = 0x38 (1.0) at scale 2 -> 2.0; c_kv[200] = 0xC0 (-2.0) at scale 0.5 -> -1.0; k_rope[0] = 3.
    Slot 1: c_kv[0] = 0x30 (0.5) at scale 2 -> 1.0; everything else 0.
    q = e_0 (c_kv) + e_0 (k_rope), scale 1: scores 2 + 3 = 5 and 1, so
    out = (e^5 (2 e_0 - e_200) + e^1 (e_0)) / (e^5 + e^1), lse = log(e^5 + e^1).
    """
    cache = torch.zeros(1, KV_BLOCK_SIZE, FP8_DS_MLA_SLOT_BYTES, dtype=torch.uint8)
    scales = torch.tensor([2.0, 0.5, 1.0, 1.0]).view(torch.uint8)
    cache[0, :2, 512:528] = scales
    cache[0, 0, 0], cache[0, 0, 200], cache[0, 1, 0] = 0x38, 0xC0, 0x30
    cache[0, 0, 528:530] = torch.tensor([3.0], dtype=torch.bfloat16).view(torch.uint8)
    q_nope = torch.zeros(1, 1, KV_LORA_RANK)
    q_nope[0, 0, 0] = 1.0
    q_rope = torch.zeros(1, 1, 64)
    q_rope[0, 0, 0] = 1.0
    out, lse = reference.sparse_mla_reference(q_nope, q_rope, cache, torch.tensor([[0, -1, 1]]), 1.0)
    w0, w1 = math.exp(5) / (math.exp(5) + math.e), math.e / (math.exp(5) + math.e)
    expected = torch.zeros(KV_LORA_RANK)
    expected[0], expected[200] = 2 * w0 + w1, -w0
    assert torch.allclose(out[0, 0], expected, rtol=1e-6, atol=0)
    assert lse[0, 0].item() == pytest.approx(math.log(math.exp(5) + math.e), rel=1e-6)


def test_sparse_mla_reference_fp8_quantization_error(capsys):
    """The fp8_ds_mla cache against the bf16 one it was quantized from: the same attention up to the e4m3
    rounding of c_kv (3 mantissa bits). Reported; asserted only loosely (< 0.1)."""
    g = testing.make_generator(CPU, 2)
    batch = testing.make_batch([300, 130], [2, 3], num_blocks=10, generator=g, topk=128)
    kv_cache = testing.make_kv_cache(10, CPU, g)
    flat = kv_cache.view(-1, 576)
    fp8_cache = quantize_slots(flat[:, :KV_LORA_RANK], flat[:, KV_LORA_RANK:]).view(10, KV_BLOCK_SIZE, -1)
    q_nope, q_rope = testing.make_queries(batch.num_tokens, 16, CPU, g)
    slot_ids = reference.global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, 10)
    out_fp8, lse_fp8 = reference.sparse_mla_reference(q_nope, q_rope, fp8_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    out_bf16, lse_bf16 = reference.sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    rel = testing.relative_error(out_fp8, out_bf16)
    lse_err = (lse_fp8 - lse_bf16).abs().max().item()
    with capsys.disabled():
        print(f"\nfp8_ds_mla quantization: out rel err {rel:.2e} vs the bf16 cache, max |lse diff| {lse_err:.2e}")
    assert rel < 0.1 and lse_err < 0.1
