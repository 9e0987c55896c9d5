"""FlashInfer's element-wise precision bar for sparse MLA decode, and the decode step it is checked on; shared by
its GPU test and tools/precision_bar.py.

FlashInfer's trtllm-gen sparse MLA decode tests compare the output element-wise with
``torch.testing.assert_close(out, ref, rtol=2e-2, atol=8e-4)`` (tests/attention/test_trtllm_gen_mla.py).
"""

import dataclasses
from typing import NamedTuple

import torch

import sparse_mla_testing as testing
from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK, KV_BLOCK_SIZE
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference

RTOL, ATOL = 2e-2, 8e-4


class BarResult(NamedTuple):
    misses: int           # elements with |out - ref| > ATOL + RTOL * |ref|
    worst_excess: float   # max of |out - ref| - (ATOL + RTOL * |ref|): <= 0 when every element passes
    relative_error: float  # ||out - ref|| / ||ref||


def against_bar(out: torch.Tensor, ref: torch.Tensor) -> BarResult:
    """``out`` (any float dtype) against the float32 reference ``ref`` of the same shape."""
    error = (out.float() - ref).abs()
    excess = error - (ATOL + RTOL * ref.abs())
    return BarResult(int((excess > 0).sum()), float(excess.max()), float(error.norm() / ref.norm()))


@dataclasses.dataclass
class DecodeCase:
    """One decode token per request, ``context`` positions each, top-k 2048, on the bf16 cache, with its
    float32 reference output ``ref`` `[T, N, 512]`."""

    num_heads: int
    batch: testing.SparseMLABatch
    kv_cache: torch.Tensor
    q_nope: torch.Tensor
    q_rope: torch.Tensor
    ref: torch.Tensor


def decode_case(num_heads: int, num_tokens: int, seed: int, context: int, device: torch.device) -> DecodeCase:
    """The random step of ``num_tokens`` requests (seeded), and its reference."""
    gen = testing.make_generator(device, seed)
    num_blocks = num_tokens * -(-context // KV_BLOCK_SIZE) + 4
    batch = testing.make_batch([context] * num_tokens, [1] * num_tokens, num_blocks, gen)
    kv_cache = testing.make_kv_cache(num_blocks, device, gen)
    q_nope, q_rope = testing.make_queries(num_tokens, num_heads, device, gen)
    slot_ids = global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table,
                                         num_blocks)
    ref, _ = sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    return DecodeCase(num_heads, batch, kv_cache, q_nope, q_rope, ref)


def route_output(case: DecodeCase, route: str) -> torch.Tensor:
    """The backend's output on ``case`` with ``route`` forced, into a NaN-poisoned buffer `[T, N, 512]` bf16."""
    num_tokens = case.q_nope.shape[0]
    builder = SparseMLAMetadataBuilder(num_tokens, case.q_nope.device, case.num_heads, INDEX_TOPK, route=route)
    metadata = builder.build(0, testing.common_metadata(case.batch))
    out, _ = testing.poisoned_outputs(num_tokens, case.num_heads, case.q_nope.device)
    SparseMLAImpl(case.num_heads).forward((case.q_nope, case.q_rope), case.kv_cache, metadata, case.batch.topk_indices,
                                          output=out)
    return out
