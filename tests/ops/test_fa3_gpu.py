"""FA3 (the op library built by //cc) against the float32 reference, on DeepSeek-V3.2 decode shapes.

The page table comes from the pure-PyTorch index reference, so this checks FA3 and its binding alone.
Needs a Hopper GPU and the extension (--config=sm90).
"""

import pytest
import torch

from sparse_mla import reference
import sparse_mla_testing as testing
from sparse_mla_testing import fa3_calls
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK, KV_LORA_RANK
from sparse_mla.ops import fa3

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

REL_ERR_BOUND = 1e-2
"""bf16 inputs and output, fp32 accumulation: FA3 lands near 2e-3 (anchors: 1.7e-3..1.9e-3)."""

CONTEXT_LENS = [32768, 700, 9000, 2048, 20000, 1500, 31000, 4096]
"""Several requests with different context lengths; those under 2048 give rows with fewer valid ids."""

CUDA = torch.device("cuda")


def _decode_batch(num_tokens, generator):
    """``num_tokens`` decode tokens spread over requests of CONTEXT_LENS (several tokens per request
    when there are more tokens than requests: speculative-style steps)."""
    num_reqs = min(num_tokens, len(CONTEXT_LENS))
    query_lens = [num_tokens // num_reqs + (r < num_tokens % num_reqs) for r in range(num_reqs)]
    seq_lens = CONTEXT_LENS[:num_reqs]
    num_blocks = sum(-(-s // 64) for s in seq_lens) + 16
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, generator, drop_fraction=0.05)
    return batch, num_blocks


def _page_table(batch, num_blocks):
    slots, count = reference.topk_to_slots_reference(
        batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, num_blocks
    )
    return slots, count


def _fa3_sparse_mla(q_nope, q_rope, kv_cache, page_table, cache_seqlens, num_splits):
    num_tokens = q_nope.shape[0]
    flat = kv_cache.view(-1, 1, 1, kv_cache.shape[-1])
    out = torch.full_like(q_nope, float("nan"))  # poisoned: every element must be written
    out, lse = fa3_calls.flash_attn_with_kvcache(
        q_rope,
        flat[..., KV_LORA_RANK:],
        flat[..., :KV_LORA_RANK],
        qv=q_nope,
        page_table=page_table,
        cache_seqlens=cache_seqlens,
        cu_seqlens_q=torch.arange(num_tokens + 1, dtype=torch.int32, device=CUDA),
        max_seqlen_q=1,
        softmax_scale=DEEPSEEK_V32_SOFTMAX_SCALE,
        num_splits=num_splits,
        return_softmax_lse=True,
        out=out,
    )
    return out, lse.transpose(0, 1)


def test_fa3_is_available():
    availability = fa3.is_available()
    assert availability, availability.reason


@pytest.mark.parametrize("num_splits", [0, 1, 16])
@pytest.mark.parametrize("num_tokens", [1, 4, 16, 64])
@pytest.mark.parametrize("num_heads", [16, 128])
def test_fa3_matches_reference(num_heads, num_tokens, num_splits, capsys):
    g = testing.make_generator(CUDA, 1000 * num_heads + num_tokens)
    batch, num_blocks = _decode_batch(num_tokens, g)
    kv_cache = testing.make_kv_cache(num_blocks, CUDA, g)
    q_nope, q_rope = testing.make_queries(num_tokens, num_heads, CUDA, g)
    page_table, count = _page_table(batch, num_blocks)
    assert int(count.min()) < INDEX_TOPK or num_tokens == 1  # some rows have fewer valid ids

    out, lse = _fa3_sparse_mla(q_nope, q_rope, kv_cache, page_table, count, num_splits)
    slot_ids = reference.global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, num_blocks)
    ref_out, ref_lse = reference.sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    out_err = testing.relative_error(out, ref_out)
    lse_err = testing.relative_error(lse, ref_lse)
    with capsys.disabled():
        print(f"\nfa3 N={num_heads} T={num_tokens} splits={num_splits}: out rel err {out_err:.2e}, lse rel err {lse_err:.2e}")
    assert out_err < REL_ERR_BOUND, f"out rel err {out_err:.3e} >= {REL_ERR_BOUND}"
    assert lse_err < REL_ERR_BOUND, f"lse rel err {lse_err:.3e} >= {REL_ERR_BOUND}"


def test_fa3_empty_rows_give_zero_output():
    """cache_seqlens = 0 (a token without any valid position) gives out = 0 and lse = -inf."""
    g = testing.make_generator(CUDA, 7)
    kv_cache = testing.make_kv_cache(4, CUDA, g)
    q_nope, q_rope = testing.make_queries(3, 16, CUDA, g)
    page_table = torch.randint(0, 4 * 64, (3, INDEX_TOPK), generator=g, device=CUDA, dtype=torch.int32)
    cache_seqlens = torch.tensor([0, 5, 0], dtype=torch.int32, device=CUDA)
    for num_splits in (1, 4):
        out, lse = _fa3_sparse_mla(q_nope, q_rope, kv_cache, page_table, cache_seqlens, num_splits)
        assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.equal(out[2], torch.zeros_like(out[2]))
        assert torch.isneginf(lse[0]).all() and torch.isneginf(lse[2]).all()
        assert torch.isfinite(out[1]).all()


@pytest.mark.parametrize(
    "q_dtype, error, message",
    [
        # Head dim 64 with value dim 64 is not in the default build: a clear error, no crash.
        (torch.bfloat16, RuntimeError, "fa3_variants=hdim64"),
        (torch.float32, TypeError, "argument 'q' expected dtype torch.bfloat16, got torch.float32"),
    ],
)
def test_unsupported_calls_raise(q_dtype, error, message):
    if not fa3.is_available():
        pytest.skip(fa3.is_available().reason)
    q = torch.randn(2, 4, 64, device=CUDA, dtype=q_dtype)
    cache = torch.randn(8, 1, 1, 64, device=CUDA, dtype=torch.bfloat16)
    with pytest.raises(error, match=message):
        fa3_calls.flash_attn_with_kvcache(
            q, cache, cache,
            page_table=torch.zeros(2, 4, dtype=torch.int32, device=CUDA),
            cache_seqlens=torch.ones(2, dtype=torch.int32, device=CUDA),
            cu_seqlens_q=torch.arange(3, dtype=torch.int32, device=CUDA),
            max_seqlen_q=1,
            num_splits=1,
        )


@pytest.mark.parametrize("num_heads, num_tokens", [(16, 1), (16, 5), (128, 33)])
@pytest.mark.parametrize("padded_cache", [False, True], ids=["contiguous", "padded-blocks"])
def test_sparse_mla_layer_converts_indices_and_matches_reference(num_heads, num_tokens, padded_cache):
    """The FA3 route's one-call op: its index conversion writes exactly the reference page table (valid
    slot ids first, then 0; counts) -- with every kind of invalid entry -- and the output and LSE match
    the float32 reference, on a contiguous cache and on one whose blocks lie 67 slots apart."""
    case = testing.make_attention_case(num_tokens, num_heads, CUDA, seed=num_tokens * 7 + num_heads,
                                       pattern="scattered", drop_fraction=0.2)
    topk = case.topk_indices
    last = topk[-1]
    used = last[(last >= 0) & (last < case.token_kv_len[-1])][:16].long() // 64  # block-table columns in use
    topk[0, :64] = case.token_kv_len[0] + torch.arange(64, device=CUDA, dtype=torch.int32)  # past the length
    case.block_table[case.req_id[-1].long(), used[:8]] = case.num_blocks + 3  # block ids outside the cache
    case.block_table[case.req_id[-1].long(), used[8:]] = -5
    kv_cache = testing.padded_kv_cache(case.kv_cache, 3 * 576) if padded_cache else case.kv_cache
    page_table = torch.full((num_tokens, INDEX_TOPK), -7, dtype=torch.int32, device=CUDA)
    cache_seqlens = torch.full((num_tokens,), -7, dtype=torch.int32, device=CUDA)
    out, lse = testing.poisoned_outputs(num_tokens, num_heads, CUDA)
    num_sms = torch.cuda.get_device_properties(CUDA).multi_processor_count
    fa3.sparse_mla_layer(
        case.q_nope, case.q_rope, kv_cache, topk, case.req_id, case.token_kv_len, case.block_table,
        page_table=page_table, cache_seqlens=cache_seqlens,
        cu_seqlens_q=torch.arange(num_tokens + 1, dtype=torch.int32, device=CUDA), scheduler_metadata=None,
        num_splits=fa3.choose_num_splits(num_tokens, num_heads, num_sms), softmax_scale=DEEPSEEK_V32_SOFTMAX_SCALE,
        out=out, lse=lse,
    )
    torch.cuda.synchronize()
    if not padded_cache:  # slot ids of the padded view differ from the reference's by design
        testing.assert_slots_match_reference(topk, case.req_id, case.token_kv_len, case.block_table, case.num_blocks,
                                             page_table, cache_seqlens)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"N={num_heads} T={num_tokens}")
