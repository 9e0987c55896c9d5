"""GPU: the swap-AB decode kernel (``decode.SWAP_AB_KERNEL``, cc/decode/swap_ab/: 16 or 32 heads per CTA as
wgmma's N, 64-position tiles) against the fp32 reference, on both caches.

Its plans are given here (the planner's routing is tested in test_decode_gpu.py), but for the split of a
short second wave, planned on this device's capacity: with 16 heads a CTA N in {1, 7, 8, 16}, with 32
N in {17, 24, 32}, and several head groups (N = 33, 128), one split and splits that do not divide top-k (the
last CTA to arrive merges them in the kernel), invalid entries of every kind, strided queries, a padded cache
block stride, CUDA-graph replay with padded tokens, and fp8_ds_mla caches and queries far from unit
magnitude. Outputs are poisoned (NaN) before every call.

Accuracy (:func:`sparse_mla_testing.assert_attention_close`): ``||out - ref|| / ||ref|| < 1e-2``,
LSE within ``1e-2 * max(1, |ref|)`` and ``-inf`` exactly where the reference has no position.
"""

import dataclasses

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla import fp8_ds_mla
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK
from sparse_mla.ops import decode
from sparse_mla_testing.decode_calls import case_on_cache, run_decode, with_splits

pytestmark = pytest.mark.skipif(not decode.is_available(), reason=f"decode kernel: {decode.is_available().reason}")

CACHE_FORMATS = ("bf16", "fp8_ds_mla")


def _device():
    return torch.device("cuda", torch.cuda.current_device())


def swap_ab_plan(num_tokens, num_heads, num_splits, topk=INDEX_TOPK, head_tiles=1):
    """The swap-AB kernel's plan of ``16 * head_tiles`` heads a CTA with about ``num_splits`` splits of whole
    64-position tiles."""
    head_groups = -(-num_heads // (decode.HEAD_TILE_ROWS * head_tiles))
    launch = decode.DecodePlan(num_tokens, num_heads, head_tiles, decode.SWAP_AB_CTA_CHUNK, head_groups, 1, topk,
                               decode.SWAP_AB_KERNEL, 1)
    return with_splits(launch, num_splits, topk)


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("num_splits", [1, 3, 8, 32])
@pytest.mark.parametrize("num_tokens, num_heads, head_tiles", [
    (1, 16, 1), (5, 16, 1), (3, 1, 1), (2, 7, 1), (4, 8, 1), (3, 33, 1), (2, 128, 1),
    (1, 32, 2), (5, 32, 2), (3, 17, 2), (2, 24, 2), (3, 33, 2), (2, 128, 2),
])
def test_matches_reference(num_tokens, num_heads, head_tiles, num_splits, cache_format):
    """Every head count through 16- or 32-head groups (heads past N are zero queries, never written), one split
    over all 2048 positions, uneven splits and the most the test cases use (32 of one tile each)."""
    seed = num_heads * 100 + num_tokens * 10 + num_splits + head_tiles
    case = case_on_cache(num_tokens, num_heads, seed, cache_format)
    launch = swap_ab_plan(num_tokens, num_heads, num_splits, head_tiles=head_tiles)
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {launch}")


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("num_heads", [8, 16])
def test_planned_split_of_a_short_second_wave(num_heads, cache_format):
    """The plan on this device's capacity, as the decode route makes it, where the unsplit grid is a wave and a
    short tail (T = SMs + 8; decode.SWAP_AB_UNCAPPED_MAX_WAVES), in a workspace sized by
    decode.workspace_for_max_tokens."""
    num_sms = torch.cuda.get_device_properties(_device()).multi_processor_count
    num_tokens = num_sms + 8
    capacity = decode.cluster_capacity(_device().index)
    launch = decode.plan(num_tokens, num_heads, num_sms, cluster_capacity=capacity,
                         fp8_ds_mla=cache_format == "fp8_ds_mla")
    assert launch.kernel == decode.SWAP_AB_KERNEL and launch.num_splits > 1, launch
    workspace = decode.workspace_for_max_tokens(num_tokens, num_heads, num_sms, _device(), cluster_capacity=capacity,
                                                fp8_ds_mla=cache_format == "fp8_ds_mla")
    case = case_on_cache(num_tokens, num_heads, num_heads, cache_format)
    out, lse = run_decode(case, launch, workspace)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {launch}")


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
def test_planned_with_32_heads_past_a_wave(cache_format):
    """The plan on this device's capacity at N = 24, T = 160 (SWAP_AB_32_MIN_TOKENS): one 32-head group a token,
    one split, more CTAs than SMs."""
    num_tokens, num_heads = 160, 24
    capacity = decode.cluster_capacity(_device().index)
    launch = decode.plan(num_tokens, num_heads, torch.cuda.get_device_properties(_device()).multi_processor_count,
                         cluster_capacity=capacity, fp8_ds_mla=cache_format == "fp8_ds_mla")
    assert (launch.kernel, launch.head_tiles, launch.head_groups) == (decode.SWAP_AB_KERNEL, 2, 1), launch
    case = case_on_cache(num_tokens, num_heads, num_tokens, cache_format)
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {launch}")


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("pattern", testing.INVALID_PATTERNS)
@pytest.mark.parametrize("head_tiles", decode.SWAP_AB_HEAD_TILES)
def test_invalid_entries(head_tiles, pattern, cache_format):
    """-1 at the start, the end or scattered, positions past the causal length, past the block table and
    block ids outside the cache are masked (rows of short requests hold whole invalid tiles)."""
    num_heads = 16 * head_tiles
    case = case_on_cache(6, num_heads, 7, cache_format, pattern=pattern)
    launch = swap_ab_plan(6, num_heads, 2, head_tiles=head_tiles)
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {pattern}")


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
def test_strided_queries_and_padded_cache(cache_format):
    """Queries as views of one fused [T, N, 576] tensor (and non-contiguous head strides), a cache whose
    block stride is padded."""
    case = case_on_cache(4, 16, 11, cache_format)
    fused = torch.cat([case.q_nope, case.q_rope], dim=-1)
    padded = testing.padded_kv_cache(case.kv_cache, block_padding=16)
    case = dataclasses.replace(case, q_nope=fused[..., :512], q_rope=fused[..., 512:], kv_cache=padded)
    launch = swap_ab_plan(4, 16, 3)
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=cache_format)


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("head_tiles", decode.SWAP_AB_HEAD_TILES)
def test_cuda_graph_replay_with_padding(head_tiles, cache_format):
    """Captured at T = 8 with 3 splits, replayed on new contents whose last tokens are padding (every entry
    -1): equal to the reference on the real tokens, zero output and -inf LSE on the padding."""
    num_heads = 16 * head_tiles
    case = case_on_cache(8, num_heads, 21, cache_format)
    launch = swap_ab_plan(8, num_heads, 3, head_tiles=head_tiles)
    workspace = decode.workspace_for_plans([launch], _device())
    out, lse = testing.poisoned_outputs(8, num_heads, _device())
    inputs = case.inputs()

    def call():
        decode.sparse_mla_decode(*inputs, DEEPSEEK_V32_SOFTMAX_SCALE, launch, workspace, out=out, lse=lse)

    graph, _ = testing.capture_cuda_graph(call)
    fresh = case_on_cache(8, num_heads, 22, cache_format)
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


@pytest.mark.parametrize("cache_magnitude, query_magnitude", [(1e-7, 1.0), (3e4, 1.0), (1.0, 1e5)])
@pytest.mark.parametrize("head_tiles", decode.SWAP_AB_HEAD_TILES)
def test_fp8_ds_mla_magnitudes(head_tiles, cache_magnitude, query_magnitude):
    """fp8_ds_mla caches and queries far from unit magnitude: scales below f16's smallest normal (cache x 1e-7),
    values past f16's largest (cache x 3e4), q_nope x 1e5, and slots whose magnitudes span 2^20 (a power of two
    per slot) match the reference (range that any f16 or power-of-two shortcut in a kernel must keep). The
    reference attends the dequantized cache rounded to bf16, as the kernel's products do: at q_nope x 1e5 the
    softmax is nearly one-hot, and that rounding alone moves its peak in ~0.3 % of the rows."""
    num_heads = 16 * head_tiles
    case = case_on_cache(4, num_heads, 31, "bf16")
    gen = torch.Generator(device=case.kv_cache.device).manual_seed(5)
    slot_exponent = torch.randint(-10, 11, (case.num_blocks, 64, 1), device=case.kv_cache.device, generator=gen)
    kv_cache = (case.kv_cache.float() * cache_magnitude * torch.exp2(slot_exponent.float())).to(torch.bfloat16)
    q_nope = (case.q_nope.float() * query_magnitude).to(torch.bfloat16)
    case = testing.fp8_ds_mla_case(dataclasses.replace(case, kv_cache=kv_cache, q_nope=q_nope))
    launch = swap_ab_plan(4, num_heads, 3, head_tiles=head_tiles)
    out, lse = run_decode(case, launch)
    rounded = dataclasses.replace(case, kv_cache=fp8_ds_mla.dequantize_cache(case.kv_cache).to(torch.bfloat16))
    testing.assert_attention_close(out, lse, *rounded.reference(),
                                   what=f"cache x {cache_magnitude}, q_nope x {query_magnitude}")
