"""The vLLM adapter's forward on a Hopper GPU inside a CUDA graph, against the float32 reference.

vLLM 0.33.0's calls (``vllm_adapter_steps``, on the stand-in of ``vllm_stand_in/``) on real tensors: a
padded cache (blocks 5 slots apart, NaN between them), the transposed ``ql_nope`` view, the indexer's
top-k buffer. Per route (decode kernel, FA3, fused Triton kernel; forced through the adapter's
``additional_config`` override) and batch (decode with padding, speculative): warm up
eagerly, capture ``forward_mqa`` in a CUDA graph, load a second step of the same shape into the captured
tensors, rebuild the metadata (same buffers), replay, and compare with the reference:
``‖out − ref‖ / ‖ref‖ < 1e-2``.
"""

import pytest
import torch

import vllm_adapter_steps as steps
import sparse_mla_testing as testing
from sparse_mla.routes import ROUTES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MAX_REL_ERR = 1e-2
NUM_BLOCKS = 200
MAX_TOKENS = 64
BATCHES = {
    "decode-padded": ([300, 2100, 4000, 70], [1, 1, 1, 1], 8),  # 4 real tokens captured at 8
    "speculative": ([700, 2600], [3, 3], None),  # 1 + 2 draft tokens per request
}


@pytest.fixture(params=sorted(ROUTES))
def route(request):
    """Runs the test once per route, whatever sparse_mla.routing would pick."""
    availability = ROUTES[request.param].is_available()
    assert availability, f"the GPU suite needs route {request.param}: {getattr(availability, 'reason', '')}"
    return request.param


@pytest.mark.parametrize("num_heads", [16, 128])
@pytest.mark.parametrize("kind", sorted(BATCHES))
def test_forward_mqa_in_cuda_graph_matches_reference(route, kind, num_heads):
    device = torch.device("cuda")
    seq_lens, query_lens, num_tokens = BATCHES[kind]
    engine = steps.make_engine(num_heads, NUM_BLOCKS, MAX_TOKENS, device, route=route)
    gen = testing.make_generator(device, seed=num_heads + len(kind))
    captured = steps.make_step(engine, seq_lens, query_lens, num_tokens, gen, num_heads)
    metadata = engine.builder.build(0, captured.common)
    q = (captured.ql_nope, captured.q_pe)

    graph, (out, _) = testing.capture_cuda_graph(lambda: engine.impl.forward_mqa(q, engine.kv_cache, metadata, None))

    replayed = steps.make_step(engine, seq_lens, query_lens, num_tokens, gen, num_heads)  # new cache and top-k rows
    captured.ql_nope.copy_(replayed.ql_nope)
    captured.q_pe.copy_(replayed.q_pe)
    captured.common.block_table_tensor.copy_(replayed.common.block_table_tensor)
    engine.builder.build(0, captured.common)  # the same buffers the graph reads
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()

    ref = steps.reference_out(engine, replayed)
    rel = testing.relative_error(out.cpu(), ref)
    assert rel < MAX_REL_ERR, f"{route}, {kind}, N={num_heads}: relative error {rel:.2e} expected < {MAX_REL_ERR}"
    real = replayed.batch.num_tokens
    assert (out[real:] == 0).all(), f"{route}, {kind}: padding tokens expected out 0"
