"""GPU: the fused Triton sparse-MLA kernel on DeepSeek-V3.2 shapes, against the fp32 reference.

Top-k 2048 over contexts of up to 32k positions, several requests with different lengths (some
shorter than 2048, so those tokens have fewer valid positions), -1 entries at the end, at the start
and scattered; N in {16, 128} and the odd {7, 100}; T in {1, 4, 16, 64} (several tokens per request
are speculative / prefill tokens with their own causal lengths). Then CUDA-graph capture and replay
with new contents, through the split path's arrival counters.

Accuracy (:func:`sparse_mla_testing.assert_attention_close`): ``rel = ||out - ref|| / ||ref|| < 1e-2``;
the natural-log LSE within ``1e-2 * max(1, |ref|)`` where finite and ``-inf`` exactly where the
reference has no valid position. Outputs are poisoned (NaN) before every call.
"""

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla_testing.markers import requires_compiled_gpu
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK, KV_BLOCK_SIZE
from sparse_mla.kernels.sparse_mla_attention import (
    LaunchConfig,
    SplitWorkspace,
    plan_launch,
    default_launch_config,
    sparse_mla_attention,
)

pytestmark = requires_compiled_gpu

PATTERNS = testing.INVALID_PATTERNS


def _device():
    return torch.device("cuda", torch.cuda.current_device())


def make_case(num_tokens, num_heads, seed, pattern, drop_fraction=0.0):
    return testing.make_attention_case(num_tokens, num_heads, _device(), seed, pattern, drop_fraction)


def poisoned_outputs(num_tokens, num_heads):
    return testing.poisoned_outputs(num_tokens, num_heads, _device())


assert_close = testing.assert_attention_close


@pytest.mark.parametrize("num_tokens", [1, 4, 16, 64])
@pytest.mark.parametrize("num_heads", [16, 128, 7, 100])
def test_default_config_matches_reference(num_heads, num_tokens):
    seed = num_heads * 1000 + num_tokens
    pattern = PATTERNS[seed % len(PATTERNS)]
    case = make_case(num_tokens, num_heads, seed, pattern, drop_fraction=0.1 if num_tokens > 1 else 0.0)
    out, lse = poisoned_outputs(num_tokens, num_heads)
    sparse_mla_attention(*case.inputs(), DEEPSEEK_V32_SOFTMAX_SCALE, out=out, lse=lse)
    torch.cuda.synchronize()
    config = default_launch_config(num_tokens, num_heads, torch.cuda.get_device_properties(_device()).multi_processor_count, INDEX_TOPK)
    assert_close(out, lse, *case.reference(), what=f"T={num_tokens} N={num_heads} {config}")


@pytest.mark.parametrize(
    "config",
    [
        LaunchConfig(block_h=64, block_n=32, block_dv=512, num_splits=1, num_warps=8, num_stages=3),
        LaunchConfig(block_h=16, block_n=32, block_dv=128, num_splits=4, num_warps=4, num_stages=2),
        LaunchConfig(block_h=32, block_n=16, block_dv=256, num_splits=12, num_warps=4, num_stages=4),
        LaunchConfig(block_h=64, block_n=32, block_dv=64, num_splits=16, num_warps=4, num_stages=3),
        LaunchConfig(block_h=16, block_n=64, block_dv=512, num_splits=2, num_warps=8, num_stages=3),
    ],
    ids=str,
)
def test_other_configs_match_reference(config):
    """Configurations the tuning sweep may pick, on one batch of 5 tokens x 48 heads."""
    case = make_case(5, 48, seed=77, pattern="scattered", drop_fraction=0.2)
    out, lse = poisoned_outputs(5, 48)
    sparse_mla_attention(*case.inputs(), DEEPSEEK_V32_SOFTMAX_SCALE, out=out, lse=lse, config=config)
    torch.cuda.synchronize()
    assert_close(out, lse, *case.reference(), what=str(config))


def test_invalid_entries_are_skipped():
    """All -1, past the length, past the block table, bad block ids: skipped, never read, no NaN."""
    case = make_case(4, 16, seed=5, pattern="scattered")
    topk = case.topk_indices
    topk[0] = -1
    topk[1, :64] = case.token_kv_len[1] + torch.arange(64, device=topk.device, dtype=torch.int32)
    case.token_kv_len[2] = 1 << 20  # past the block table: its width decides
    topk[2, :64] = case.block_table.shape[1] * KV_BLOCK_SIZE + torch.arange(64, device=topk.device, dtype=torch.int32)
    used_columns = topk[3][topk[3] >= 0][:32].long() // KV_BLOCK_SIZE
    case.block_table[case.req_id[3].long(), used_columns] = case.num_blocks + 1
    out, lse = poisoned_outputs(4, 16)
    sparse_mla_attention(*case.inputs(), DEEPSEEK_V32_SOFTMAX_SCALE, out=out, lse=lse, num_splits=8)
    torch.cuda.synchronize()
    ref_out, ref_lse = case.reference()
    assert torch.isneginf(lse[0]).all() and (out[0] == 0).all()
    assert_close(out, lse, ref_out, ref_lse)


@pytest.mark.parametrize("num_tokens, num_heads", [(1, 16), (4, 128), (8, 7)])
@pytest.mark.parametrize("explicit_workspace", [True, False], ids=["workspace", "default-workspace"])
def test_cuda_graph_replays_with_new_contents(num_tokens, num_heads, explicit_workspace):
    """Capture once (split path: workspace and arrival counters), replay with new inputs, match the reference."""
    device = _device()
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count
    config = default_launch_config(num_tokens, num_heads, num_sms, INDEX_TOPK)
    assert plan_launch(num_heads, INDEX_TOPK, config).num_splits > 1, "the graph test should exercise the split path"
    static = make_case(num_tokens, num_heads, seed=1, pattern="end")
    out, lse = poisoned_outputs(num_tokens, num_heads)
    workspace = SplitWorkspace.for_max_tokens(num_tokens, num_heads, device, INDEX_TOPK) if explicit_workspace else None

    def run():
        sparse_mla_attention(*static.inputs(), DEEPSEEK_V32_SOFTMAX_SCALE, out=out, lse=lse, workspace=workspace)

    graph, _ = testing.capture_cuda_graph(run)  # the first run also sizes the default workspace

    for seed in (2, 3, 4):
        fresh = make_case(num_tokens, num_heads, seed=seed, pattern=PATTERNS[seed % len(PATTERNS)], drop_fraction=0.3)
        for dst, src in zip(static.inputs(), fresh.inputs()):
            dst.copy_(src)  # same shapes: make_case's request lengths depend on T only
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, lse, *static.reference(), what=f"replay seed {seed}")
    if workspace is not None:
        assert torch.count_nonzero(workspace.counters) == 0, "arrival counters must be zero after a replay"
