"""GPU: the tile64 decode kernel (``decode.TILE64_KERNEL``, cc/decode/tile64/: 64 heads per CTA on 64-position
tiles, split-KV merged by the split merge kernel) against the fp32 reference, on both caches.

Its plans are the planner's for the kernel (at small T: many splits, down to one tile each), or one split where a
test says so: N from 17 to 128 (heads past N are zero queries, never written; several head groups at N = 100, 128),
top-k rows of any width (a part-filled last tile), invalid entries of every kind (whole splits masked), strided
queries, a padded cache block stride and CUDA-graph replay with padded tokens. Outputs are poisoned (NaN) before
every call.

Accuracy (:func:`sparse_mla_testing.assert_attention_close`): ``||out - ref|| / ||ref|| < 1e-2``,
LSE within ``1e-2 * max(1, |ref|)`` and ``-inf`` exactly where the reference has no position.
"""

import dataclasses

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE
from sparse_mla.ops import decode
from sparse_mla_testing.decode_calls import case_on_cache, mark_every_invalid_kind, run_decode, with_splits

pytestmark = pytest.mark.skipif(not decode.is_available(), reason=f"decode kernel: {decode.is_available().reason}")

CACHE_FORMATS = ("bf16", "fp8_ds_mla")


def _device():
    return torch.device("cuda", torch.cuda.current_device())


def _num_sms():
    return torch.cuda.get_device_properties(_device()).multi_processor_count


def tile64_plan(num_tokens, num_heads, topk=2048, num_splits=None):
    """The planner's tile64 plan, or with ``num_splits`` asked for: whole tiles each, only splits that hold some."""
    launch = decode.plan(num_tokens, num_heads, _num_sms(), topk=topk, kernel=decode.TILE64_KERNEL)
    return launch if num_splits is None else with_splits(launch, num_splits, topk)


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("num_splits", [1, None])
@pytest.mark.parametrize("num_tokens, num_heads", [(1, 64), (3, 17), (3, 33), (2, 100), (3, 128), (5, 64)])
def test_each_head_count(num_tokens, num_heads, num_splits, cache_format):
    seed = num_heads * 10 + num_tokens
    case = case_on_cache(num_tokens, num_heads, seed, cache_format)
    launch = tile64_plan(num_tokens, num_heads, num_splits=num_splits)
    assert (launch.num_splits == 1) == (num_splits == 1), launch
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {launch}")


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("topk", [1, 64, 100, 2000])
def test_top_k_rows_of_any_width(topk, num_splits, cache_format):
    """Top-k rows narrower than 2048: one tile, a part-filled last tile (its positions past top-k are masked), in
    one split or up to three."""
    case = case_on_cache(3, 64, topk, cache_format)
    case = dataclasses.replace(case, topk_indices=case.topk_indices[:, :topk].contiguous())
    launch = tile64_plan(3, 64, topk, num_splits)
    assert launch.num_splits * launch.positions_per_split >= topk > (launch.num_splits - 1) * launch.positions_per_split
    assert num_splits > 1 or launch.positions_per_split == -(-topk // 64) * 64
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} top-k {topk}")


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("pattern", testing.INVALID_PATTERNS)
def test_invalid_entries(pattern, cache_format):
    """-1 at the start, the end or scattered; a row of -1 only; positions past the causal length, past the block
    table, and block ids outside the cache or negative: masked, never read, no NaN."""
    case = case_on_cache(5, 64, 7, cache_format, pattern=pattern)
    mark_every_invalid_kind(case)
    out, lse = run_decode(case, tile64_plan(5, 64))
    assert torch.isneginf(lse[0]).all() and (out[0] == 0).all()
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {pattern}")


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
def test_strided_queries_and_padded_cache(cache_format):
    """Queries as views of one fused [T, N, 576] tensor, a cache whose block stride is padded."""
    case = case_on_cache(4, 64, 11, cache_format)
    fused = torch.cat([case.q_nope, case.q_rope], dim=-1)
    padded = testing.padded_kv_cache(case.kv_cache, block_padding=16)
    case = dataclasses.replace(case, q_nope=fused[..., :512], q_rope=fused[..., 512:], kv_cache=padded)
    out, lse = run_decode(case, tile64_plan(4, 64))
    testing.assert_attention_close(out, lse, *case.reference(), what=cache_format)


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
def test_cuda_graph_replay_with_padding(cache_format):
    """Captured at T = 8, replayed on new contents whose last tokens are padding (every entry -1): equal to the
    reference on the real tokens, zero output and -inf LSE on the padding."""
    case = case_on_cache(8, 128, 21, cache_format)
    launch = tile64_plan(8, 128)
    workspace = decode.workspace_for_plans([launch], _device())
    out, lse = testing.poisoned_outputs(8, 128, _device())
    inputs = case.inputs()

    def call():
        decode.sparse_mla_decode(*inputs, DEEPSEEK_V32_SOFTMAX_SCALE, launch, workspace, out=out, lse=lse)

    graph, _ = testing.capture_cuda_graph(call)
    fresh = case_on_cache(8, 128, 22, cache_format)
    for mine, new in zip(inputs, fresh.inputs()):
        mine.copy_(new)
    inputs[3][5:] = -1  # topk_indices: tokens 5..7 are padding
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref_out, ref_lse = dataclasses.replace(fresh, topk_indices=inputs[3]).reference()
    testing.assert_attention_close(out, lse, ref_out, ref_lse, what=f"{cache_format} replay")
    assert torch.all(out[5:] == 0) and torch.all(lse[5:] == float("-inf"))


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("num_tokens, num_heads", [(132, 64), (66, 128), (160, 40)])
def test_planned_at_throughput_sizes(num_tokens, num_heads, cache_format):
    """The plan on this device's capacity, as the decode route makes it, at a full wave of 64-head CTAs (and past it
    with 40 heads padded to 64)."""
    capacity = decode.cluster_capacity(_device().index)
    launch = decode.plan(num_tokens, num_heads, _num_sms(), cluster_capacity=capacity,
                         fp8_ds_mla=cache_format == "fp8_ds_mla")
    assert launch.kernel == decode.TILE64_KERNEL, launch
    case = case_on_cache(num_tokens, num_heads, num_tokens, cache_format)
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {launch}")
