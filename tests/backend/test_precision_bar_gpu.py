"""GPU: every route meets FlashInfer's element-wise precision bar (``sparse_mla_testing.precision_bar``: rtol
2e-2, atol 8e-4 on the output) against the float32 reference, on the bf16 cache at N = 128: one decode token
per request, 8192 positions each, top-k 2048. The decode route missed it by one to ten elements of 1-4M
with a lazily rescaled running maximum (docs/decode-kernels.md); outputs are NaN-poisoned before the call.
"""

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla_testing.markers import requires_compiled_gpu
from sparse_mla_testing.precision_bar import against_bar
from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK, KV_BLOCK_SIZE
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference
from sparse_mla.routes import ROUTES

pytestmark = requires_compiled_gpu

CONTEXT = 8192
NUM_HEADS = 128


@pytest.mark.parametrize("num_tokens", [16, 64])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_route_meets_flashinfer_bar(route, num_tokens):
    device = torch.device("cuda")
    gen = testing.make_generator(device, 0)
    num_blocks = num_tokens * -(-CONTEXT // KV_BLOCK_SIZE) + 4
    batch = testing.make_batch([CONTEXT] * num_tokens, [1] * num_tokens, num_blocks, gen)
    kv_cache = testing.make_kv_cache(num_blocks, device, gen)
    q_nope, q_rope = testing.make_queries(num_tokens, NUM_HEADS, device, gen)
    slot_ids = global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table,
                                         num_blocks)
    ref, _ = sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    metadata = SparseMLAMetadataBuilder(num_tokens, device, NUM_HEADS, INDEX_TOPK, route=route).build(
        0, testing.common_metadata(batch))
    out, _ = testing.poisoned_outputs(num_tokens, NUM_HEADS, device)
    SparseMLAImpl(NUM_HEADS).forward((q_nope, q_rope), kv_cache, metadata, batch.topk_indices, output=out)
    result = against_bar(out, ref)
    assert result.misses == 0, f"{route} N={NUM_HEADS} T={num_tokens}: {result}"
