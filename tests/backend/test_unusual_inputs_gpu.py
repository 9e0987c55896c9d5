"""GPU: every route under unusual but legal inputs, through the public API, against the float32 reference.

* Top-k rows wider than the default (8192, 16384) on every route and cache format, N = 64 and 128.
* A call that fails inside CUDA (an occupancy query of a launch configuration that does not fit) raises a
  clear error and leaves the process usable: the next CUDA call in the process works.
* Inputs every route refuses alike, before any kernel runs: a cache view at a byte offset, column-major
  top-k rows.
* NaN latents: written by ``write_kv`` into a selected slot, they reach the output and the LSE of exactly
  the tokens that select it, on both cache formats (the fp8 writer stores vLLM's NaN code 0x7F), on the
  routes of our kernels. FA3's own softmax (sgl-attn ``hopper/softmax.h``: a NaN row sum gives output 0 and
  LSE -inf, which its split combine then drops) does not propagate it: on that route the tokens that select
  the slot get a finite output (docs/using.md, "Non-finite values").

Accuracy bound: ``||out - ref|| / ||ref|| < 1e-2`` and the LSE within ``1e-2 * max(1, |ref|)``
(:func:`sparse_mla_testing.assert_attention_close`); outputs are NaN-poisoned before every call.
"""

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla_testing.markers import requires_compiled_gpu
from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, KV_BLOCK_SIZE, KV_LORA_RANK, QK_ROPE_HEAD_DIM
from sparse_mla.fp8_ds_mla import E4M3_NAN_CODE
from sparse_mla.kernels.kv_cache_writer import write_kv
from sparse_mla.ops import decode
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference
from sparse_mla.routes import ROUTES

pytestmark = requires_compiled_gpu

CACHE_DTYPES = {"auto": "bfloat16", "fp8_ds_mla": "fp8_ds_mla"}
ROUTE_CACHES = [(route, dtype) for route in sorted(ROUTES) for dtype, fmt in CACHE_DTYPES.items()
                if fmt in ROUTES[route].cache_formats]
NAN_PROPAGATING = [(route, dtype) for route, dtype in ROUTE_CACHES if route != "fa3"]


def _step(route, kv_cache_dtype, num_heads, seq_lens, query_lens, topk, seed):
    """A step's builder metadata, queries, top-k rows and caches (the one the route reads, and bf16 for writes)."""
    device = torch.device("cuda")
    gen = testing.make_generator(device, seed)
    num_blocks = sum(-(-s // KV_BLOCK_SIZE) for s in seq_lens) + 4
    batch = testing.make_batch(seq_lens, query_lens, num_blocks, gen, topk=topk, pattern="scattered",
                               drop_fraction=0.1)
    bf16_cache = testing.make_kv_cache(num_blocks, device, gen)
    kv_cache = testing.fp8_ds_mla_kv_cache(bf16_cache) if kv_cache_dtype == "fp8_ds_mla" else bf16_cache
    builder = SparseMLAMetadataBuilder(64, device, num_heads, index_topk=topk, route=route,
                                       kv_cache_dtype=kv_cache_dtype)
    metadata = builder.build(0, testing.common_metadata(batch))
    q_nope, q_rope = testing.make_queries(batch.num_tokens, num_heads, device, gen)
    return batch, metadata, q_nope, q_rope, kv_cache


def _forward(route_cache, num_heads, batch, metadata, q_nope, q_rope, kv_cache, topk_indices=None):
    impl = SparseMLAImpl(num_heads, DEEPSEEK_V32_SOFTMAX_SCALE, kv_cache_dtype=route_cache)
    out, _ = testing.poisoned_outputs(batch.num_tokens, num_heads, q_nope.device)
    topk_indices = batch.topk_indices if topk_indices is None else topk_indices
    return impl.forward((q_nope, q_rope), kv_cache, metadata, topk_indices, output=out, return_lse=True)


def _reference(batch, q_nope, q_rope, kv_cache):
    slot_ids = global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table,
                                         kv_cache.shape[0])
    return slot_ids, sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)


@pytest.mark.parametrize("topk", [8192, 16384])
@pytest.mark.parametrize("num_heads", [64, 128])
@pytest.mark.parametrize("route, kv_cache_dtype", ROUTE_CACHES)
def test_wide_topk_on_every_route(route, kv_cache_dtype, num_heads, topk):
    # decode, a speculative request and a short prefill: one plan with several splits, one without
    batch, metadata, q_nope, q_rope, kv_cache = _step(route, kv_cache_dtype, num_heads, [20000, 9000, 300],
                                                      [1, 3, 4], topk, seed=70)
    out, lse = _forward(kv_cache_dtype, num_heads, batch, metadata, q_nope, q_rope, kv_cache)
    _, (ref_out, ref_lse) = _reference(batch, q_nope, q_rope, kv_cache)
    testing.assert_attention_close(out, lse, ref_out, ref_lse, f"{route}/{kv_cache_dtype}/N={num_heads}/topk={topk}")


def test_a_failed_cuda_call_leaves_the_process_usable():
    if not decode.is_available():
        pytest.skip(f"the decode op library is not available: {decode.is_available().reason}")
    # The wide kernel with 8192 positions per split passes the op's shape checks but not the device's shared memory.
    wide = decode.DecodePlan(1, 64, decode.WIDE_HEAD_TILES, decode.WIDE_CTA_CHUNK, 1, 1, decode.MAX_POSITIONS_PER_SPLIT,
                             decode.WIDE_KERNEL, 1)
    with pytest.raises(RuntimeError, match="sparse_mla: cudaOccupancyMaxActiveClusters failed"):
        torch.ops.sparse_mla_decode.max_active_clusters(wide.op_value(), False)
    x = torch.randn(4, device="cuda")
    assert torch.isfinite((x * 2).sum()).item()


@pytest.mark.parametrize("offset_bytes", [2, 4, 8])
@pytest.mark.parametrize("route, kv_cache_dtype", ROUTE_CACHES)
def test_cache_at_a_byte_offset_is_refused_by_every_route(route, kv_cache_dtype, offset_bytes):
    batch, metadata, q_nope, q_rope, kv_cache = _step(route, kv_cache_dtype, 16, [3000, 500], [1, 2], 2048, seed=71)
    flat = kv_cache.reshape(-1).view(torch.uint8)
    storage = torch.empty(flat.numel() + 16, dtype=torch.uint8, device=flat.device)
    storage[offset_bytes : offset_bytes + flat.numel()] = flat
    shifted = storage[offset_bytes : offset_bytes + flat.numel()].view(kv_cache.dtype).view(kv_cache.shape)
    with pytest.raises(ValueError, match="argument 'kv_cache' expected a data pointer aligned to 16 bytes"):
        _forward(kv_cache_dtype, 16, batch, metadata, q_nope, q_rope, shifted)
    torch.cuda.synchronize()


@pytest.mark.parametrize("route, kv_cache_dtype", ROUTE_CACHES)
def test_column_major_topk_is_refused_by_every_route(route, kv_cache_dtype):
    batch, metadata, q_nope, q_rope, kv_cache = _step(route, kv_cache_dtype, 16, [3000, 500], [1, 2], 2048, seed=72)
    column_major = batch.topk_indices.t().contiguous().t()
    with pytest.raises(ValueError, match="argument 'topk_indices' expected unit stride in the last dim"):
        _forward(kv_cache_dtype, 16, batch, metadata, q_nope, q_rope, kv_cache, topk_indices=column_major)


def _nan_step(route, kv_cache_dtype, num_heads):
    """A step whose slot selected by token 0 holds a NaN latent (written by write_kv): the route's (out, lse),
    the reference's, and which tokens select that slot."""
    batch, metadata, q_nope, q_rope, kv_cache = _step(route, kv_cache_dtype, num_heads, [3000, 2500, 700],
                                                      [1, 2, 1], 2048, seed=73)
    slot_ids, _ = _reference(batch, q_nope, q_rope, kv_cache)
    poisoned_slot = int(slot_ids[0][slot_ids[0] >= 0][0])  # selected by token 0, maybe by others of its request
    kv_c = torch.randn(1, KV_LORA_RANK, device="cuda").to(torch.bfloat16)
    kv_c[0, 5] = float("nan")
    k_pe = torch.randn(1, QK_ROPE_HEAD_DIM, device="cuda").to(torch.bfloat16)
    write_kv(kv_c, k_pe, kv_cache, torch.tensor([poisoned_slot], device="cuda"))
    if kv_cache_dtype == "fp8_ds_mla":
        assert int(kv_cache.view(-1, kv_cache.shape[-1])[poisoned_slot, 5]) == E4M3_NAN_CODE
    out, lse = _forward(kv_cache_dtype, num_heads, batch, metadata, q_nope, q_rope, kv_cache)
    selects = (slot_ids == poisoned_slot).any(dim=1)
    assert selects[0]
    _, reference = _reference(batch, q_nope, q_rope, kv_cache)
    assert torch.isnan(reference[1][selects]).all()
    return (out, lse), reference, selects


@pytest.mark.parametrize("num_heads", [16, 128])
@pytest.mark.parametrize("route, kv_cache_dtype", NAN_PROPAGATING)
def test_nan_latent_propagates_to_the_tokens_that_select_it(route, kv_cache_dtype, num_heads):
    (out, lse), (ref_out, ref_lse), selects = _nan_step(route, kv_cache_dtype, num_heads)
    assert torch.isnan(out[selects]).any(dim=-1).all() and torch.isnan(lse[selects]).all(), \
        f"{route}: a NaN latent in a selected slot expected NaN in the output and LSE of its tokens"
    testing.assert_attention_close(out[~selects], lse[~selects], ref_out[~selects], ref_lse[~selects],
                                   f"{route}/{kv_cache_dtype}: tokens that do not select the NaN slot")


@pytest.mark.parametrize("num_heads", [16, 128])
def test_fa3_route_keeps_a_nan_latent_out_of_the_output(num_heads):
    (out, lse), (ref_out, ref_lse), selects = _nan_step("fa3", "auto", num_heads)
    assert torch.isfinite(out[selects]).all() and not torch.isnan(lse[selects]).any(), \
        "fa3: FA3's softmax drops a row whose sum is NaN (docs/using.md), expected no NaN in its tokens"
    testing.assert_attention_close(out[~selects], lse[~selects], ref_out[~selects], ref_lse[~selects],
                                   "fa3/bf16: tokens that do not select the NaN slot")

