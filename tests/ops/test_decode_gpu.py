"""GPU: the latency-first CUDA decode kernel (sparse_mla.ops.decode) against the fp32 reference.

Top-k 2048 over requests of 32k, 1.5k, 20k and 700 positions (tokens of one request are
speculative / prefill tokens with their own causal lengths; rows of short requests hold fewer
valid positions), -1 at the end, the start or scattered with extra holes; N in {1, 8, 16, 32, 64,
128} and odd {7, 100}; T in {1, 2, 4, 8, 12, 16, 24, 33}. Invalid entries of every kind; strided queries
and a padded cache block stride; the fp8_ds_mla cache (against the reference on its dequantized values); CUDA-graph capture at padded T replayed with fewer real tokens and
new contents (equal to eager); argument errors. Outputs are poisoned (NaN) before every call.

Accuracy (:func:`sparse_mla_testing.assert_attention_close`): ``||out - ref|| / ||ref|| < 1e-2``,
LSE within ``1e-2 * max(1, |ref|)`` and ``-inf`` exactly where the reference has no position.
"""

import dataclasses
import math

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK, KV_BLOCK_SIZE
from sparse_mla.ops import decode
from sparse_mla_testing.decode_calls import mark_every_invalid_kind, run_decode, with_splits

pytestmark = pytest.mark.skipif(not decode.is_available(), reason=f"decode kernel: {decode.is_available().reason}")

PATTERNS = testing.INVALID_PATTERNS


def _device():
    return torch.device("cuda", torch.cuda.current_device())


def _num_sms():
    return torch.cuda.get_device_properties(_device()).multi_processor_count


def plan_with(num_tokens, num_heads, num_splits, cta_chunk, cluster_size=decode.CLUSTER_SIZE, head_tiles=None):
    """The planner's head tiling for ``(T, N)`` (or ``head_tiles``) with about ``num_splits`` splits of
    ``cta_chunk``-position stages on ``cluster_size`` CTAs each instead of its own choice (fewer when
    ``num_splits`` does not divide top-k into whole stages)."""
    if head_tiles is None:
        head_tiles = decode.plan(num_tokens, num_heads, _num_sms(), cluster_size=cluster_size, cta_chunk=cta_chunk).head_tiles
    head_groups = -(-num_heads // (decode.HEAD_TILE_ROWS * head_tiles))
    return with_splits(decode.DecodePlan(num_tokens, num_heads, head_tiles, cta_chunk, head_groups, 1, INDEX_TOPK,
                                         decode.kernel_for(head_tiles), cluster_size), num_splits)


def _counters(workspace, launch):
    """The arrival counters' bytes of ``launch`` in ``workspace`` (empty for one split)."""
    layout = decode.workspace_layout(launch)
    return workspace[layout.counters_offset:layout.counters_offset + layout.counters_bytes]


@pytest.mark.parametrize("num_tokens", [1, 2, 4, 8, 12, 16, 24, 33])
@pytest.mark.parametrize("num_heads", [1, 8, 16, 32, 64, 128, 7, 100])
def test_matches_reference(num_heads, num_tokens):
    seed = num_heads * 1000 + num_tokens
    case = testing.make_attention_case(num_tokens, num_heads, _device(), seed, PATTERNS[seed % 3], drop_fraction=0.1)
    out, lse = run_decode(case)
    launch = decode.plan(num_tokens, num_heads, _num_sms())
    testing.assert_attention_close(out, lse, *case.reference(), what=f"T={num_tokens} N={num_heads} {launch}")


@pytest.mark.parametrize("num_splits", [1, 3, 16, 64])
@pytest.mark.parametrize("num_heads", [16, 48])
@pytest.mark.parametrize("cta_chunk", decode.CTA_CHUNKS)
@pytest.mark.parametrize("cluster_size", decode.CLUSTER_SIZES)
def test_any_split_count(num_splits, num_heads, cta_chunk, cluster_size):
    """Splits that do not divide top-k evenly, one split over all 2048 positions, the most splits
    (clusters of 8: 16 of 128 positions with 16-position stages, 8 of 256 with 32; one CTA per split:
    64 of 32), with either stage size and either cluster size, on the first kernel (16 or 32 heads per
    CTA; the planner takes the wide one for N = 48)."""
    case = testing.make_attention_case(3, num_heads, _device(), seed=num_splits, pattern="scattered", drop_fraction=0.3)
    launch = plan_with(3, num_heads, num_splits, cta_chunk, cluster_size, head_tiles=decode.narrow_head_tiles(num_heads))
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=str(launch))


@pytest.mark.parametrize("num_heads", [17, 32, 33, 64, 100, 128])
@pytest.mark.parametrize("num_splits", [1, 3, 4, 8, 64])
@pytest.mark.parametrize("cache_format", ["bf16", "fp8_ds_mla"])
def test_wide_kernel_matches_reference(num_heads, num_splits, cache_format):
    """The wide kernel (64 heads per CTA) at head counts that fill its groups or leave rows empty (17 and
    32: the planner pads them for some T), with one split, splits that do not divide top-k, both sides
    of the switch to bf16 partial outputs (4: fp32, 8: bf16; ``kBf16PartialMinSplits``), and the most
    (64 of 32 positions), on both caches."""
    seed = num_heads * 10 + num_splits
    case = testing.make_attention_case(3, num_heads, _device(), seed, PATTERNS[seed % 3], drop_fraction=0.3)
    if cache_format == "fp8_ds_mla":
        case = testing.fp8_ds_mla_case(case)
    launch = plan_with(3, num_heads, num_splits, decode.WIDE_CTA_CHUNK, 1, head_tiles=decode.WIDE_HEAD_TILES)
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {launch}")


@pytest.mark.parametrize("num_heads", [17, 24, 32, 33, 48])
@pytest.mark.parametrize("cache_format", ["bf16", "fp8_ds_mla"])
def test_16_head_groups_at_one_token(num_heads, cache_format):
    """16 < N <= ONE_TOKEN_MAX_HEADS_OF_16 at T = 1: the plan's groups of 16 heads (the last padded where 16 does not
    divide N), on both caches."""
    case = testing.make_attention_case(1, num_heads, _device(), 90 + num_heads, "scattered", drop_fraction=0.2)
    if cache_format == "fp8_ds_mla":
        case = testing.fp8_ds_mla_case(case)
    launch = decode.plan(1, num_heads, _num_sms(), fp8_ds_mla=cache_format == "fp8_ds_mla")
    assert (launch.kernel, launch.head_tiles, launch.head_groups) == (decode.NARROW_KERNEL, 1, -(-num_heads // 16))
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {launch}")


@pytest.mark.parametrize("cache_format", ["bf16", "fp8_ds_mla"])
def test_wide_kernel_largest_split(cache_format):
    """One split of WIDE_MAX_TOPK positions: the most shared memory the planner gives the wide kernel
    (its slot ids beside the operand stages and, for fp8_ds_mla, the raw ring); the positions past
    top-k are masked."""
    case = testing.make_attention_case(2, 64, _device(), 71, "scattered", drop_fraction=0.1)
    if cache_format == "fp8_ds_mla":
        case = testing.fp8_ds_mla_case(case)
    launch = decode.DecodePlan(2, 64, decode.WIDE_HEAD_TILES, decode.WIDE_CTA_CHUNK, 1, 1, decode.WIDE_MAX_TOPK,
                               decode.WIDE_KERNEL, 1)
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{cache_format} {launch}")


@pytest.mark.parametrize("num_heads, cache_format, num_splits",
                         [(1, "bf16", 1), (128, "fp8_ds_mla", 1), (1, "bf16", 2)])
def test_more_token_groups_than_a_grid_holds(num_heads, cache_format, num_splits):
    """T * head_groups above the 65535 CTAs of a grid's z dimension: the op launches the rest of the tokens
    after (each launch on its tokens' slices), on the narrow kernel (N = 1) and the wide one (N = 128).
    Top-k 16 of one 128-position request keeps it small. With 2 splits (of 16 positions: the second sees
    only invalid entries) the second launch reuses the counters the first left zero, and leaves them zero."""
    device = _device()
    num_tokens = 65535 // decode.plan(65535, num_heads, _num_sms(), topk=16).head_groups + 9  # the large-T plan's groups
    gen = testing.make_generator(device, 17)
    kv_cache = testing.make_kv_cache(3, device, gen)
    topk = torch.randint(0, 2 * KV_BLOCK_SIZE, (num_tokens, 16), generator=gen, device=device, dtype=torch.int32)
    topk[::7, 3] = -1
    q_nope, q_rope = testing.make_queries(num_tokens, num_heads, device, gen)
    case = testing.AttentionCase(
        q_nope, q_rope, kv_cache, topk, torch.zeros(num_tokens, dtype=torch.int32, device=device),
        torch.full((num_tokens,), 2 * KV_BLOCK_SIZE, dtype=torch.int32, device=device),
        torch.tensor([[2, 0]], dtype=torch.int32, device=device))
    if cache_format == "fp8_ds_mla":
        case = testing.fp8_ds_mla_case(case)
    shape = dict(head_tiles=decode.narrow_head_tiles(num_heads)) if num_heads <= 16 else {}  # not the swap-AB kernel
    launch = decode.plan(num_tokens, num_heads, _num_sms(), topk=16, **shape)
    if num_splits > 1:
        launch = dataclasses.replace(launch, cta_chunk=16, cluster_size=1, num_splits=num_splits,
                                     positions_per_split=16)
    assert launch.num_tokens * launch.head_groups > 65535
    workspace = decode.workspace_for_plans([launch], device)
    out, lse = run_decode(case, launch, workspace)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"T={num_tokens} N={num_heads} {launch}")
    assert torch.count_nonzero(_counters(workspace, launch)) == 0, "arrival counters must be zero after every launch"


def test_invalid_entries_are_skipped():
    """All -1, past the causal length, past the block table, block ids outside the cache: masked, no NaN."""
    case = testing.make_attention_case(4, 16, _device(), seed=5, pattern="scattered")
    mark_every_invalid_kind(case)
    out, lse = run_decode(case)
    assert torch.isneginf(lse[0]).all() and (out[0] == 0).all()
    testing.assert_attention_close(out, lse, *case.reference())


@pytest.mark.parametrize("head_tiles", [None, decode.WIDE_HEAD_TILES])
def test_strided_queries_and_padded_cache(head_tiles):
    """q_nope / q_rope as views of one [T, N, 576] tensor and a cache whose block stride is padded, on
    the planner's kernel and on the wide one."""
    case = testing.make_attention_case(5, 24, _device(), seed=9, pattern="start", drop_fraction=0.2)
    padded = torch.randn(case.num_blocks, KV_BLOCK_SIZE + 3, 576, device=_device()).to(torch.bfloat16)
    padded[:, :KV_BLOCK_SIZE] = case.kv_cache
    view = padded[:, :KV_BLOCK_SIZE]
    assert not view.is_contiguous()
    strided = testing.AttentionCase(case.q_nope, case.q_rope, view, *case.inputs()[3:])
    out, lse = run_decode(strided, decode.plan(5, 24, _num_sms(), head_tiles=head_tiles))
    testing.assert_attention_close(out, lse, *case.reference())


@pytest.mark.parametrize("head_tiles", [2, decode.WIDE_HEAD_TILES])
def test_queries_with_rows_not_16_byte_aligned(head_tiles):
    """q_nope / q_rope as views of a [T, N, 580] tensor (head stride 1160 bytes; the op accepts any even
    stride), on both kernels: the wide one then copies the queries 4 bytes at a time instead of 16."""
    case = testing.make_attention_case(5, 40, _device(), seed=11, pattern="start", drop_fraction=0.2)
    fused = torch.zeros(5, 40, 580, dtype=torch.bfloat16, device=_device())
    fused[..., :512] = case.q_nope
    fused[..., 512:576] = case.q_rope
    q_nope, q_rope = fused[..., :512], fused[..., 512:576]
    assert q_nope.stride(1) % 8 != 0
    strided = testing.AttentionCase(q_nope, q_rope, *case.inputs()[2:])
    out, lse = run_decode(strided, decode.plan(5, 40, _num_sms(), head_tiles=head_tiles))
    testing.assert_attention_close(out, lse, *case.reference())


@pytest.mark.parametrize("head_tiles", [None, decode.WIDE_HEAD_TILES])
def test_output_views_and_no_lse(head_tiles):
    """``out`` may be a view with a head stride other than 512; ``lse`` may be omitted (either kernel)."""
    case = testing.make_attention_case(2, 16, _device(), seed=3)
    storage = torch.full((2, 16, 600), float("nan"), dtype=torch.bfloat16, device=_device())
    out = storage[..., :512]
    run_decode(case, decode.plan(2, 16, _num_sms(), head_tiles=head_tiles), out=out, lse=None)
    ref_out, _ = case.reference()
    assert testing.relative_error(out, ref_out) < testing.ATTENTION_REL_TOL
    assert torch.isnan(storage[..., 512:]).all(), "the kernel wrote past the output view"


@pytest.mark.parametrize("padded_tokens", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("num_heads", [16, 128])
def test_cuda_graph_replays_with_padding_and_new_contents(padded_tokens, num_heads):
    """Capture at a padded T; replay with fewer real tokens (padding: req 0, length 0) and new data."""
    device = _device()
    launch = decode.plan(padded_tokens, num_heads, _num_sms())
    workspace = decode.workspace_for_max_tokens(16, num_heads, _num_sms(), device)
    static = testing.make_attention_case(padded_tokens, num_heads, device, seed=1)
    out, lse = testing.poisoned_outputs(padded_tokens, num_heads, device)

    def call():
        decode.sparse_mla_decode(*static.inputs(), DEEPSEEK_V32_SOFTMAX_SCALE, launch, workspace, out=out, lse=lse)

    graph, _ = testing.capture_cuda_graph(call)

    for seed in (2, 3):
        real = max(1, padded_tokens - seed + 1)
        fresh = testing.make_attention_case(padded_tokens, num_heads, device, seed=seed, pattern=PATTERNS[seed % 3],
                                            drop_fraction=0.2)
        fresh.req_id[real:] = 0
        fresh.token_kv_len[real:] = 0  # CUDA-graph padding tokens: nothing to attend
        for dst, src in zip(static.inputs(), fresh.inputs()):
            dst.copy_(src)  # same shapes: the case's request lengths depend on T only
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref_out, ref_lse = static.reference()
        testing.assert_attention_close(out, lse, ref_out, ref_lse, what=f"replay seed {seed}")
        assert (out[real:] == 0).all() and torch.isneginf(lse[real:]).all()
        eager_out, eager_lse = run_decode(static, launch, workspace)
        assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse), "replay differs from eager"
    assert torch.count_nonzero(_counters(workspace, launch)) == 0, "arrival counters must be zero after every launch"


@pytest.mark.parametrize("num_tokens, num_heads",
                         [(1, 16), (4, 16), (2, 32), (1, 128), (10, 16), (12, 16), (16, 16), (24, 16), (16, 48), (33, 7), (40, 128),
                          (96, 16)])
def test_fp8_ds_mla_cache_matches_reference(num_tokens, num_heads):
    """The fp8_ds_mla cache (uint8 [num_blocks, 64, 656]) against the reference on its dequantized values,
    with invalid entries, on the planner's default plans: the first kernel's clusters of 8 below T * head
    groups = 16 (32-position stages up to 8 and from 11 on, 16 at 9 and 10) and at 23..30 (16-position
    stages), else one CTA per split (32-position stages below 32, 16 from 32 on; 3 CTAs per SM from 48 on),
    the swap-AB kernel (N = 16 from T = 16 on: 16, 24, 96) and the wide kernel."""
    case = testing.fp8_ds_mla_case(testing.make_attention_case(num_tokens, num_heads, _device(), seed=num_tokens + num_heads,
                                                               pattern=PATTERNS[num_tokens % 3], drop_fraction=0.1))
    out, lse = run_decode(case)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"fp8_ds_mla T={num_tokens} N={num_heads}")


@pytest.mark.parametrize("num_tokens, num_heads", [(265, 16), (140, 32)])
def test_fp8_ds_mla_grids_split_without_the_cap_match_reference(num_tokens, num_heads):
    """fp8_ds_mla where the plan on this device's capacity, as the decode route makes it, splits without
    the CTAs-per-SM cap, in a workspace sized by decode.workspace_for_max_tokens: the first kernel's grids
    between 1 and 4 CTAs per SM (16 and 32 heads per CTA; decode.FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM)."""
    case = testing.fp8_ds_mla_case(testing.make_attention_case(num_tokens, num_heads, _device(), seed=num_tokens,
                                                               pattern=PATTERNS[num_tokens % 3], drop_fraction=0.1))
    capacity = decode.cluster_capacity(torch.cuda.current_device())
    # the first kernel asked for (the plan takes the swap-AB kernel at N <= 16, tile64 at 16 < N <= 32)
    head_tiles = decode.narrow_head_tiles(num_heads)
    launch = decode.plan(num_tokens, num_heads, _num_sms(), cluster_capacity=capacity, fp8_ds_mla=True,
                         head_tiles=head_tiles)
    assert launch.head_tiles == head_tiles and launch.num_splits > 1, launch
    workspace = decode.workspace_for_max_tokens(num_tokens, num_heads, _num_sms(), _device(),
                                                cluster_capacity=capacity, fp8_ds_mla=True)
    out, lse = run_decode(case, launch, workspace)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"fp8_ds_mla T={num_tokens} N={num_heads} {launch}")


@pytest.mark.parametrize(
    "cta_chunk, cluster_size, head_tiles",
    [(chunk, size, None) for chunk in decode.CTA_CHUNKS for size in decode.CLUSTER_SIZES]
    + [(decode.WIDE_CTA_CHUNK, 1, decode.WIDE_HEAD_TILES), (decode.TILE64_CTA_CHUNK, 1, decode.WIDE_HEAD_TILES)],
)
def test_fp8_ds_mla_padded_cache_and_scales_of_every_magnitude(cta_chunk, cluster_size, head_tiles):
    """Blocks apart by a NaN-filled gap (never read), 128-groups scaled from 1e-4 to 1e3 within each slot
    and some all-zero groups (scale 0). Queries are scaled by 1e-3 so that scores stay O(1) (at 1e3 the
    bf16 rounding of dequantized values, 2^-9 relative, would move scores of ~1e3 by whole units);
    each column group's output is checked on its own, so the 1e-4 group is not hidden by the 1e3 one."""
    case = testing.make_attention_case(3, 16, _device(), seed=7, pattern="scattered", drop_fraction=0.2)
    flat = case.kv_cache.view(-1, case.kv_cache.shape[-1])
    magnitudes = torch.tensor([1e-4, 1e-1, 1e1, 1e3], device=flat.device)
    groups = flat[:, :512].float().view(-1, 4, 128) * magnitudes[None, :, None]
    groups[::5, 2] = 0  # an all-zero group in every fifth slot
    flat[:, :512] = groups.view(-1, 512).to(torch.bfloat16)
    case.q_nope.mul_(1e-3)
    case = dataclasses.replace(case, kv_cache=testing.padded_kv_cache(testing.fp8_ds_mla_kv_cache(case.kv_cache), 32))
    tile64 = cta_chunk == decode.TILE64_CTA_CHUNK  # the tile64 kernel (its own split rule)
    launch = (decode.plan(3, 16, _num_sms(), kernel=decode.TILE64_KERNEL) if tile64
              else plan_with(3, 16, 4, cta_chunk, cluster_size, head_tiles))
    out, lse = run_decode(case, launch)
    ref_out, ref_lse = case.reference()
    testing.assert_attention_close(out, lse, ref_out, ref_lse,
                                   what=f"fp8 padded, stage {cta_chunk}, cluster {cluster_size}, head tiles {head_tiles}")
    for g in range(4):
        cols = slice(128 * g, 128 * g + 128)
        err = testing.relative_error(out[..., cols], ref_out[..., cols])
        assert err < 1e-2, f"column group {g} (magnitude {magnitudes[g]:.0e}): rel err {err:.3e}"


_RAMP_LOG2 = {  # score offsets along a top-k row, log2 units, of row index i of n
    "rise": lambda i, n: 60.0 * i / n,  # the running maximum creeps up: moves only every 8 units
    "jump": lambda i, n: 40.0 * (i >= n // 2),  # one move far past the slack, halfway
    "sawtooth": lambda i, n: 7.9 * ((i // 32) % 8),  # +7.9 per 32 positions (just below the slack), 8 times over
}


@pytest.mark.parametrize("cache_format", ["bf16", "fp8_ds_mla"])
@pytest.mark.parametrize("num_heads", [16, 64])
@pytest.mark.parametrize("single_split", [True, False])
@pytest.mark.parametrize("profile", sorted(_RAMP_LOG2))
def test_scores_climbing_along_the_row(profile, single_split, num_heads, cache_format):
    """Scores that climb along the top-k row, so that the kernels' running maximum keeps moving by less
    and more than the lazy rescaling's slack of 8 log2 units (cc/decode/components/softmax.cuh): q_rope is
    e_0 for every head and each slot's k_rope[0] adds the profile's offset for its row index (on top of
    the random q_nope . c_kv scores), probabilities reach 2^8 before a rescale. Both kernels, both
    formats (k_rope is bf16 in fp8_ds_mla too), one split (64 stages on one CTA) and the planner's."""
    case = testing.make_attention_case(1, num_heads, _device(), seed=31)
    row = case.topk_indices[0].long()
    index = torch.nonzero((row >= 0) & (row < case.token_kv_len[0])).squeeze(1)
    positions = row[index]
    slots = case.block_table[case.req_id[0].long(), positions // KV_BLOCK_SIZE].long() * KV_BLOCK_SIZE
    slots += positions % KV_BLOCK_SIZE
    offsets = _RAMP_LOG2[profile](index.float(), row.numel())
    case.kv_cache.view(-1, case.kv_cache.shape[-1])[slots, 512] = (
        offsets / (DEEPSEEK_V32_SOFTMAX_SCALE * math.log2(math.e))).to(torch.bfloat16)
    case.q_rope.zero_()[..., 0] = 1
    if cache_format == "fp8_ds_mla":
        case = testing.fp8_ds_mla_case(case)
    launch = None
    if single_split:
        wide = num_heads > 32
        launch = plan_with(1, num_heads, 1, decode.WIDE_CTA_CHUNK if wide else 32, 1, decode.WIDE_HEAD_TILES if wide else None)
    out, lse = run_decode(case, launch)
    testing.assert_attention_close(out, lse, *case.reference(), what=f"{profile} {cache_format} N={num_heads} {launch}")


def test_fp8_ds_mla_cuda_graph_replays_new_contents():
    """Captured once, replayed on a re-quantized cache and new indices with fewer real tokens."""
    device = _device()
    static = testing.fp8_ds_mla_case(testing.make_attention_case(4, 16, device, seed=11))
    launch = decode.plan(4, 16, _num_sms())
    workspace = decode.workspace_for_plans([launch], device)
    out, lse = testing.poisoned_outputs(4, 16, device)

    def call():
        decode.sparse_mla_decode(*static.inputs(), DEEPSEEK_V32_SOFTMAX_SCALE, launch, workspace, out=out, lse=lse)

    graph, _ = testing.capture_cuda_graph(call)
    fresh = testing.fp8_ds_mla_case(testing.make_attention_case(4, 16, device, seed=12, pattern="start", drop_fraction=0.3))
    fresh.req_id[3:] = 0
    fresh.token_kv_len[3:] = 0
    for dst, src in zip(static.inputs(), fresh.inputs()):
        dst.copy_(src)
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    testing.assert_attention_close(out, lse, *static.reference(), what="fp8 replay")
    assert (out[3:] == 0).all() and torch.isneginf(lse[3:]).all()


def test_bad_arguments_raise_naming_the_argument():
    case = testing.make_attention_case(2, 16, _device(), seed=4)
    launch = decode.plan(2, 16, _num_sms())
    assert launch.num_splits > 1, launch  # the workspace is read
    workspace = decode.workspace_for_plans([launch], _device())
    out, lse = testing.poisoned_outputs(2, 16, _device())
    inputs = list(case.inputs())

    def call(args, **kwargs):
        params = dict(plan=launch, workspace=workspace, out=out, lse=lse)
        params.update(kwargs)
        decode.sparse_mla_decode(*args, DEEPSEEK_V32_SOFTMAX_SCALE, **params)

    bad = [
        (0, inputs[0].float(), ValueError, "q_nope"),  # stable-ABI ops raise no TypeError
        (1, inputs[1][:, :, :32], ValueError, "q_rope"),
        (2, inputs[2].cpu(), ValueError, "kv_cache"),
        (3, inputs[3].long(), ValueError, "topk_indices"),
        (4, inputs[4][:1], ValueError, "req_id"),
        (6, inputs[6].t(), ValueError, "block_table"),
    ]
    for position, value, error, name in bad:
        args = list(inputs)
        args[position] = value
        with pytest.raises(error, match=name):
            call(args)
    with pytest.raises(ValueError, match="out"):
        call(inputs, out=out[:, :8])
    with pytest.raises(ValueError, match="lse"):
        call(inputs, lse=lse[:1])
    with pytest.raises(ValueError, match=r"argument 'plan' was made for \(T, N\) = \(3, 16\)"):
        call(inputs, plan=decode.plan(3, 16, _num_sms()))
    with pytest.raises(ValueError, match="argument 'plan' expected cluster_size"):
        call(inputs, plan=dataclasses.replace(launch, cluster_size=2))
    with pytest.raises(ValueError, match="argument 'plan' expected kernel"):
        call(inputs, plan=dataclasses.replace(launch, kernel=4))
    with pytest.raises(ValueError, match="argument 'plan': the swap-AB kernel"):  # 64-position tiles only
        call(inputs, plan=dataclasses.replace(launch, kernel=decode.SWAP_AB_KERNEL, head_tiles=1, cluster_size=1))
    with pytest.raises(ValueError, match="argument 'plan' expected head_tiles"):  # the narrow kernel's: 1 or 2
        call(inputs, plan=dataclasses.replace(launch, head_tiles=decode.WIDE_HEAD_TILES))
    with pytest.raises(ValueError, match="argument 'plan': the wide kernel"):  # the wide kernel has one stage size
        call(inputs, plan=dataclasses.replace(launch, kernel=decode.WIDE_KERNEL, head_tiles=decode.WIDE_HEAD_TILES,
                                              cta_chunk=16, cluster_size=1))
    uncovered = launch.positions_per_split  # one split: less than the top-k row
    with pytest.raises(ValueError, match=f"argument 'plan': num_splits \\* positions_per_split = {uncovered} expected"):
        call(inputs, plan=dataclasses.replace(launch, num_splits=1))
    # One wide split of 7712 positions: 232,576 B of shared memory, over Hopper's 232,448 per block.
    too_long = decode.DecodePlan(2, 16, decode.WIDE_HEAD_TILES, decode.WIDE_CTA_CHUNK, 1, 1, 7712, decode.WIDE_KERNEL, 1)
    with pytest.raises(ValueError, match="shared memory"):
        call(inputs, plan=too_long)
    needed = decode.workspace_bytes(launch)
    for bad, message in [
        (workspace[:needed - 1], f"argument 'workspace' expected at least {needed} bytes"),
        (workspace[8:], "argument 'workspace' expected a 16-byte aligned address, got one 8 bytes past"),
        (workspace.view(torch.int32), "argument 'workspace' expected dtype"),
        (workspace.cpu(), "argument 'workspace' expected device cuda"),
        (workspace.view(-1, 2), "argument 'workspace' expected 1 dimensions"),
    ]:
        with pytest.raises(ValueError, match=message):
            call(inputs, workspace=bad)
    assert torch.isnan(out.float()).all(), "a rejected call must not write the output"
