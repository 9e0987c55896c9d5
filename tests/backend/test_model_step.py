"""The benchmark's decode step (sparse_mla_testing.model_step) layer by layer, without a CUDA graph: each layer's
call leaves the top-k buffer, its cache and its output as the indexer's reference, ``write_kv`` and a direct
forward on them do (on the CPU: the Triton route in the interpreter; on a GPU: the routed one)."""

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.backend import SparseMLAMetadataBuilder
from sparse_mla.kernels.kv_cache_writer import write_kv
from sparse_mla.kernels.triton_support import kernel_device_type
from sparse_mla_testing.markers import requires_triton_device
from sparse_mla_testing.model_step import layer_calls, make_model_step
from sparse_mla_testing.stand_in_indexer import shifted_rows_reference

pytestmark = requires_triton_device

DEVICE = torch.device(kernel_device_type())
POISON = 0x7F7F7F7F
TOPK = 64
NUM_HEADS = 4
NUM_BLOCKS = 8


def _bits(kv_cache: torch.Tensor) -> torch.Tensor:
    return kv_cache.view(torch.uint8)


@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16", "fp8_ds_mla"])
def test_each_layer_matches_its_kernels_called_directly(kv_cache_dtype):
    """Three layers on two caches (the third reuses the first's, after the first wrote it); top-k rows of 64 out
    of 150 and 200 positions, so each layer's shift selects other positions."""
    gen = testing.make_generator(DEVICE, seed=41)
    batch = testing.make_batch([150, 200], [1, 1], NUM_BLOCKS, gen, topk=TOPK, pattern="scattered", drop_fraction=0.1)
    caches = [testing.make_kv_cache(NUM_BLOCKS, DEVICE, gen) for _ in range(2)]
    if kv_cache_dtype == "fp8_ds_mla":
        caches = [testing.fp8_ds_mla_kv_cache(c) for c in caches]
    builder = SparseMLAMetadataBuilder(batch.num_tokens, DEVICE, NUM_HEADS, index_topk=TOPK,
                                       kv_cache_dtype=kv_cache_dtype)
    metadata = builder.build(0, testing.common_metadata(batch))
    step = make_model_step(batch, metadata, caches, num_layers=3, generator=gen)

    for layer, call in enumerate(layer_calls(step)):
        inputs = step.inputs_of(layer)
        rows = shifted_rows_reference(step.rows, step.shifts[layer], step.token_kv_len)
        kv_cache = inputs.kv_cache.clone()
        write_kv(inputs.kv_c_normed, inputs.k_pe, kv_cache, step.slot_mapping)
        direct = step.impl.forward((inputs.q_nope, inputs.q_rope), kv_cache, metadata, rows)
        step.topk.fill_(POISON)
        inputs.out.fill_(float("nan"))
        call()
        assert torch.equal(step.topk, rows), f"layer {layer}: the top-k buffer holds other rows"
        assert torch.equal(_bits(inputs.kv_cache), _bits(kv_cache)), f"layer {layer}: the cache differs"
        assert torch.equal(inputs.out, direct), f"layer {layer}: the output differs from the direct forward"
    assert len(step.layers) == 2 and step.inputs_of(2) is step.layers[0]


def test_without_attention_the_layers_write_rows_and_cache_only():
    gen = testing.make_generator(DEVICE, seed=42)
    batch = testing.make_batch([150, 200], [1, 1], NUM_BLOCKS, gen, topk=TOPK, pattern="scattered")
    metadata = SparseMLAMetadataBuilder(batch.num_tokens, DEVICE, NUM_HEADS, index_topk=TOPK).build(
        0, testing.common_metadata(batch))
    step = make_model_step(batch, metadata, [testing.make_kv_cache(NUM_BLOCKS, DEVICE, gen)], 2, gen)
    inputs = step.inputs_of(1)
    kv_cache = inputs.kv_cache.clone()
    write_kv(inputs.kv_c_normed, inputs.k_pe, kv_cache, step.slot_mapping)
    inputs.out.fill_(float("nan"))
    layer_calls(step, attention=False)[1]()
    assert torch.equal(step.topk, shifted_rows_reference(step.rows, step.shifts[1], step.token_kv_len))
    assert torch.equal(_bits(inputs.kv_cache), _bits(kv_cache))
    assert inputs.out.isnan().all(), "the output was written without attention"


def test_make_model_step_rejects_no_layers():
    gen = testing.make_generator(DEVICE, seed=43)
    batch = testing.make_batch([100], [1], NUM_BLOCKS, gen, topk=TOPK)
    metadata = SparseMLAMetadataBuilder(1, DEVICE, NUM_HEADS, index_topk=TOPK).build(0, testing.common_metadata(batch))
    with pytest.raises(ValueError, match="num_layers >= 1"):
        make_model_step(batch, metadata, [testing.make_kv_cache(NUM_BLOCKS, DEVICE, gen)], 0, gen)
