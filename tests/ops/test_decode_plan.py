"""CPU: the decode kernel's launch plan (sparse_mla.ops.decode), no GPU nor op library needed; its workspace
layout and the op's plan checks are tests/ops/test_decode_workspace.py's."""

import dataclasses

import numpy as np
import pytest
import torch

from sparse_mla.constants import INDEX_TOPK
from sparse_mla.ops import decode
from sparse_mla_testing.decode_capacity import H200_SMS, h200_capacity


@pytest.mark.parametrize(
    "num_tokens, num_heads, cluster_size, head_tiles, cta_chunk, head_groups, num_splits, positions",
    [
        (1, 16, 8, 1, 32, 1, 8, 256),  # 64 CTAs of 32 positions: every split a cluster of one stage each
        (1, 1, 8, 1, 32, 1, 8, 256),
        (2, 16, 8, 1, 32, 1, 8, 256),
        (4, 16, 8, 1, 32, 1, 8, 256),
        (8, 16, 8, 1, 32, 1, 4, 512),  # T * head_groups = 8: the last grid of clusters with 32-position stages
        (9, 16, 8, 1, 16, 1, 3, 768),
        (10, 16, 8, 1, 16, 1, 3, 768),  # the last grid of clusters with 16-position stages
        (11, 16, 8, 1, 32, 1, 3, 768),  # 32-position stages again (CLUSTER_LARGE_CHUNK_MIN_GROUPS)
        (15, 16, 8, 1, 32, 1, 2, 1024),  # the last grid of clusters
        (16, 16, 1, 1, 64, 1, 8, 256),  # N <= 16 from T = 16 on: the swap-AB kernel, one CTA per SM
        (23, 16, 1, 1, 64, 1, 5, 448),
        (30, 8, 1, 1, 64, 1, 4, 512),
        (128, 16, 1, 1, 64, 1, 1, 2048),
        (1, 64, 1, 4, 32, 1, 64, 32),  # N > 32: 64 heads per CTA, one CTA per SM; the wide kernel below T * groups 32
        (1, 128, 1, 4, 32, 2, 64, 32),
        (1, 100, 1, 4, 32, 2, 64, 32),
        (3, 64, 1, 4, 32, 1, 32, 64),
        (4, 64, 1, 4, 32, 1, 32, 64),
        (2, 128, 1, 4, 32, 2, 32, 64),
        (8, 64, 1, 4, 32, 1, 16, 128),
        (4, 128, 1, 4, 32, 2, 16, 128),
        (8, 128, 1, 4, 32, 2, 8, 256),
        (16, 64, 1, 4, 32, 1, 8, 256),
        (16, 128, 1, 4, 64, 2, 4, 512),  # T * head_groups = 32 (TILE64_MIN_TOKEN_GROUPS): tile64
        (32, 64, 1, 4, 64, 1, 4, 512),
        (16, 100, 1, 4, 64, 2, 4, 512),
        (1, 32, 8, 1, 32, 2, 8, 256),  # 16 < N <= 48 at T = 1: 16-head groups (ONE_TOKEN_MAX_HEADS_OF_16) ...
        (1, 17, 8, 1, 32, 2, 8, 256),
        (1, 48, 8, 1, 32, 3, 8, 256),
        (1, 49, 1, 4, 32, 1, 64, 32),  # ... above it, and from WIDE_PADDED_MIN_TOKENS on, 64 heads per CTA
        (2, 32, 1, 4, 32, 1, 64, 32),
        (8, 32, 1, 4, 32, 1, 16, 128),
        (16, 32, 1, 4, 32, 1, 8, 256),
        (31, 32, 1, 4, 32, 1, 4, 512),
        (32, 32, 1, 2, 64, 1, 4, 512),  # ... and the swap-AB kernel's 32 heads from SWAP_AB_32_MIN_TOKENS on
        (128, 17, 1, 2, 64, 1, 1, 2048),
        (129, 32, 1, 2, 64, 1, 1, 2048),
        (256, 24, 1, 2, 64, 1, 1, 2048),
        (256, 33, 1, 4, 64, 1, 1, 2048),
        (1024, 128, 1, 4, 64, 2, 1, 2048),
    ],
)
def test_plan_on_h200(num_tokens, num_heads, cluster_size, head_tiles, cta_chunk, head_groups, num_splits, positions):
    launch = decode.plan(num_tokens, num_heads, H200_SMS)
    assert (launch.cluster_size, launch.head_tiles, launch.cta_chunk, launch.head_groups, launch.num_splits,
            launch.positions_per_split) == (cluster_size, head_tiles, cta_chunk, head_groups, num_splits, positions)
    expected = decode.kernel_for(head_tiles)
    if cta_chunk == 64:  # SWAP_AB_CTA_CHUNK at 16 and 32 heads a CTA, TILE64_CTA_CHUNK at 64
        expected = decode.TILE64_KERNEL if head_tiles == decode.WIDE_HEAD_TILES else decode.SWAP_AB_KERNEL
    assert launch.kernel == expected
    assert launch.num_splits * launch.positions_per_split >= INDEX_TOPK
    assert launch.positions_per_split % (launch.cluster_size * launch.cta_chunk) == 0
    assert launch.num_ctas <= max(2 * H200_SMS, launch.cluster_size * num_tokens * head_groups)
    assert launch.heads_per_cta * launch.head_groups >= num_heads


@pytest.mark.parametrize(
    "num_tokens, num_heads, cluster_size, cta_chunk, num_splits, positions",
    [
        (16, 16, 1, 32, 16, 128),  # one CTA per split from T * head_groups = 16 on, 32-position stages
        (22, 16, 1, 32, 11, 192),
        (23, 16, 8, 16, 1, 2048),  # clusters of 8 again (CLUSTER_ONE_SPLIT_GROUPS), one split
        (30, 8, 8, 16, 1, 2048),
        (31, 16, 1, 32, 8, 256),
        (32, 16, 1, 16, 8, 256),  # ... and 16-position stages from 32 on
        (33, 16, 1, 16, 8, 256),
        (128, 16, 1, 16, 2, 1024),
    ],
)
def test_narrow_plan_for_16_heads_on_h200(num_tokens, num_heads, cluster_size, cta_chunk, num_splits, positions):
    """The 16/32-head kernel's rules at N <= 16 and T >= 16, where the plan takes it when asked for one head tile."""
    launch = decode.plan(num_tokens, num_heads, H200_SMS, head_tiles=1)
    assert (launch.kernel, launch.cluster_size, launch.cta_chunk, launch.num_splits, launch.positions_per_split) == (
        decode.NARROW_KERNEL, cluster_size, cta_chunk, num_splits, positions)


@pytest.mark.parametrize("num_tokens, num_heads",
                         [(15, 16), (16, 16), (512, 1), (16, 17), (31, 32), (32, 17), (32, 32), (64, 33), (512, 128)])
def test_swap_ab_kernel_from_16_tokens_at_16_heads_and_32_at_32(num_tokens, num_heads):
    """SWAP_AB_MIN_TOKENS, SWAP_AB_32_MIN_TOKENS: the swap-AB kernel serves N <= 16 from T = 16 on with 16 heads a
    CTA, 16 < N <= 32 from T = 32 on with 32, never N > 32 by default; asked for, it serves any (T, N), with the head
    tiles of narrow_head_tiles or those given."""
    launch = decode.plan(num_tokens, num_heads, H200_SMS)
    expected = (num_heads <= 16 and num_tokens >= decode.SWAP_AB_MIN_TOKENS) or (
        16 < num_heads <= 32 and num_tokens >= decode.SWAP_AB_32_MIN_TOKENS)
    assert (launch.kernel == decode.SWAP_AB_KERNEL) == expected
    if expected:
        assert launch.head_tiles == (1 if num_heads <= 16 else 2) and launch.head_groups == 1
    asked = decode.plan(num_tokens, num_heads, H200_SMS, kernel=decode.SWAP_AB_KERNEL)
    tiles = decode.narrow_head_tiles(num_heads)
    assert (asked.kernel, asked.head_tiles, asked.cta_chunk, asked.cluster_size) == (
        decode.SWAP_AB_KERNEL, tiles, 64, 1)
    assert asked.head_groups == -(-num_heads // (16 * tiles))
    assert asked.num_splits * asked.positions_per_split >= INDEX_TOPK
    for head_tiles in decode.SWAP_AB_HEAD_TILES:
        given = decode.plan(num_tokens, num_heads, H200_SMS, kernel=decode.SWAP_AB_KERNEL, head_tiles=head_tiles)
        assert (given.head_tiles, given.head_groups) == (head_tiles, -(-num_heads // (16 * head_tiles)))
    with pytest.raises(ValueError, match="argument 'kernel' 2 \\(the swap-AB kernel\\) expected head_tiles 1 or 2"):
        decode.plan(num_tokens, num_heads, H200_SMS, kernel=decode.SWAP_AB_KERNEL, head_tiles=4)


@pytest.mark.parametrize("fp8_ds_mla", [False, True])
@pytest.mark.parametrize("num_tokens, num_heads, topk", [(128, 64, 2048), (64, 128, 2048), (512, 33, 2000),
                                                          (300, 64, 4096), (1, 64, 2048), (16, 128, 2048),
                                                          (31, 64, 2048), (32, 64, 2048), (150, 64, 2048)])
def test_tile64_kernel_where_the_wide_kernel_would_run(num_tokens, num_heads, topk, fp8_ds_mla):
    """TILE64_KERNEL: the plan's choice wherever it would take the wide kernel from T * head_groups =
    TILE64_MIN_TOKEN_GROUPS on, with the wide kernel's split rule on 64-position tiles (a split within
    TILE64_MAX_POSITIONS); the wide kernel below."""
    wide = decode.plan(num_tokens, num_heads, H200_SMS, topk=topk, cluster_capacity=h200_capacity,
                       fp8_ds_mla=fp8_ds_mla, kernel=decode.WIDE_KERNEL)
    launch = decode.plan(num_tokens, num_heads, H200_SMS, topk=topk, cluster_capacity=h200_capacity,
                         fp8_ds_mla=fp8_ds_mla)
    if num_tokens * wide.head_groups < decode.TILE64_MIN_TOKEN_GROUPS:
        assert launch == wide
        return
    assert launch == decode.plan(num_tokens, num_heads, H200_SMS, topk=topk, cluster_capacity=h200_capacity,
                                 fp8_ds_mla=fp8_ds_mla, kernel=decode.TILE64_KERNEL)
    assert (launch.kernel, launch.head_tiles, launch.cta_chunk, launch.cluster_size, launch.head_groups) == (
        decode.TILE64_KERNEL, decode.WIDE_HEAD_TILES, decode.TILE64_CTA_CHUNK, 1, wide.head_groups)
    assert launch.positions_per_split % 64 == 0 and launch.positions_per_split <= decode.TILE64_MAX_POSITIONS
    assert launch.num_splits * launch.positions_per_split >= topk > (launch.num_splits - 1) * launch.positions_per_split
    if wide.positions_per_split % 64 == 0 and wide.positions_per_split <= decode.TILE64_MAX_POSITIONS:
        assert launch.num_splits <= wide.num_splits  # its waves are no more than the wide kernel's


@pytest.mark.parametrize(
    "num_tokens, num_heads, num_splits, positions",
    [
        (1, 16, 32, 64),  # one 64-head group: 132 SMs ask for 132 splits, 32 tiles give 32
        (4, 64, 32, 64),
        (8, 128, 8, 256),  # 16 (token, head group) pairs: 8 splits
        (66, 128, 1, 2048),
        (512, 128, 1, 2048),
    ],
)
def test_tile64_kernel_asked_for_splits_to_fill_the_sms(num_tokens, num_heads, num_splits, positions):
    launch = decode.plan(num_tokens, num_heads, H200_SMS, kernel=decode.TILE64_KERNEL)
    assert (launch.kernel, launch.head_tiles, launch.cta_chunk, launch.num_splits, launch.positions_per_split) == (
        decode.TILE64_KERNEL, decode.WIDE_HEAD_TILES, 64, num_splits, positions)
    assert launch.head_groups == -(-num_heads // 64)


def test_tile64_kernel_splits_wide_rows():
    """Rows wider than TILE64_MAX_POSITIONS: enough splits that each holds at most that many positions."""
    launch = decode.plan(512, 128, H200_SMS, topk=5000, kernel=decode.TILE64_KERNEL)
    assert (launch.num_splits, launch.positions_per_split) == (3, 1728)
    with pytest.raises(ValueError, match="argument 'topk' 131073 needs 65 splits"):
        decode.plan(512, 128, H200_SMS, topk=decode.TILE64_MAX_POSITIONS * decode.MAX_SPLITS + 1,
                    kernel=decode.TILE64_KERNEL)


@pytest.mark.parametrize("arguments", [dict(cta_chunk=32), dict(cluster_size=8), dict(head_tiles=2)])
def test_tile64_kernel_refuses_what_it_is_not_built_for(arguments):
    with pytest.raises(ValueError, match=r"argument 'kernel' 3 \(the tile64 kernel\) expected head_tiles 4"):
        decode.plan(128, 64, H200_SMS, kernel=decode.TILE64_KERNEL, **arguments)


@pytest.mark.parametrize(
    "num_tokens, num_heads, splits",
    [
        (16, 16, 8),  # within one wave: the capped plan, floor(132 / T) splits
        (66, 16, 2),
        (132, 16, 1),
        (133, 16, 2),  # 1 to SWAP_AB_UNCAPPED_MAX_WAVES waves: the wave model without the cap
        (160, 8, 2),
        (198, 1, 2),  # 396 CTAs: 3 waves of 1024 positions against 2 of 2048
        (199, 16, 1),  # the model's split cost (SWAP_AB_SPLIT_COST_IN_POSITIONS) keeps it whole
        (264, 16, 1),
        (265, 16, 1),  # past 2 waves: the capped plan again
        (400, 16, 1),
        (32, 32, 4),  # 32 heads a CTA (from SWAP_AB_32_MIN_TOKENS): capped within one wave
        (133, 32, 1),  # ... and a split costs twice as much: 3 waves of 1024 + 448 lose to 2 of 2048
        (198, 24, 1),
    ],
)
def test_swap_ab_plan_splits_a_short_second_wave(num_tokens, num_heads, splits):
    """The swap-AB kernel on either cache: an unsplit grid of 1 to 2 waves splits (T = 133..198 on the H200)."""
    for fp8_ds_mla in (False, True):
        launch = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity, fp8_ds_mla=fp8_ds_mla)
        assert (launch.kernel, launch.num_splits) == (decode.SWAP_AB_KERNEL, splits), launch
        assert launch.num_splits * launch.positions_per_split >= INDEX_TOPK
    assert decode.plan(num_tokens, num_heads, H200_SMS).num_splits == (splits if num_tokens <= 132 else 1)


@pytest.mark.parametrize("num_tokens, num_heads", [(1, 16), (16, 16), (4, 32), (1, 128), (300, 64)])
@pytest.mark.parametrize("kernel", ["NARROW_KERNEL", "WIDE_KERNEL"])
def test_kernel_asked_for_is_the_kernel_planned(num_tokens, num_heads, kernel):
    """A kernel asked for without head tiles gets its own: the 16/32-head kernel 1 or 2 (several head groups
    above 32 heads), the wide kernel 4, whatever the default for (T, N) would be."""
    kernel = getattr(decode, kernel)
    launch = decode.plan(num_tokens, num_heads, H200_SMS, kernel=kernel)
    head_tiles = decode.WIDE_HEAD_TILES if kernel == decode.WIDE_KERNEL else (1 if num_heads <= 16 else 2)
    assert (launch.kernel, launch.head_tiles) == (kernel, head_tiles)
    assert launch.head_groups == -(-num_heads // (16 * head_tiles))


@pytest.mark.parametrize(
    "num_tokens, num_heads, num_splits",
    [
        (1, 16, 8),  # 8 clusters fit the 15 of a wave: as without capacity
        (8, 16, 1),  # 32-position stages: 4 splits = 32 clusters = 3 waves of 15; 1 split = 8 clusters, one wave
        (9, 16, 3),  # 16-position stages: 3 splits = 27 clusters, one wave of 45
        (10, 16, 3),  # 30 clusters
        (24, 16, 1),  # one split of 16-position stages: 24 clusters (the 16/32-head kernel, asked for)
        (11, 16, 1),  # 32-position stages: 11 clusters of one split, one wave of 15 (3 splits: 3 waves)
        (15, 16, 1),
        (4, 16, 3),  # 8 splits = 32 clusters = 3 waves of 15; 3 splits = 12 clusters, one wave
        (1, 128, 32),  # the wide kernel: 2 head groups x 32 splits of 64 positions (64: twice the partial outputs)
        (32, 16, 8),  # one CTA per split: 256 CTAs (the split count aims at 2 CTAs per SM), one wave of 396
        (128, 16, 2),  # 256 CTAs of 1024 positions
    ],
)
def test_plan_fits_cluster_waves(num_tokens, num_heads, num_splits):
    head_tiles = decode.plan(num_tokens, num_heads, H200_SMS, cluster_size=1).head_tiles  # not the swap-AB kernel
    launch = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity, head_tiles=head_tiles)
    assert launch.num_splits == num_splits
    assert launch.num_splits * launch.positions_per_split >= INDEX_TOPK
    unbounded = decode.plan(num_tokens, num_heads, H200_SMS, head_tiles=head_tiles)
    assert launch.num_splits <= unbounded.num_splits
    assert launch.cta_chunk == unbounded.cta_chunk


@pytest.mark.parametrize(
    "num_tokens, num_heads, num_splits, uncharged",
    [
        (1, 64, 32, 64),  # one token group: 32 splits of 64 positions (64 of 32: more SMs, twice the partials)
        (2, 64, 32, 64),
        (6, 64, 16, 22),
        (1, 128, 32, 64),
        (3, 128, 16, 22),
        (8, 128, 8, 8),  # 16 token groups: the SMs cap it at 8 splits (128 CTAs) either way
    ],
)
def test_wide_kernel_splits_charge_their_partial_outputs(num_tokens, num_heads, num_splits, uncharged, monkeypatch):
    """The wide kernel's wave model charges WIDE_PARTIAL_COST_IN_POSITIONS per (token group, split) partial output."""
    launch = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity)
    assert (launch.kernel, launch.num_splits) == (decode.WIDE_KERNEL, num_splits)
    monkeypatch.setattr(decode, "WIDE_PARTIAL_COST_IN_POSITIONS", 0)
    assert decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity).num_splits == uncharged


def test_plan_with_unlimited_capacity_is_the_plain_plan(monkeypatch):
    """With every candidate in one wave and no charge for the wide kernel's partial outputs, the wave model keeps the
    plain plan's split count."""
    monkeypatch.setattr(decode, "WIDE_PARTIAL_COST_IN_POSITIONS", 0)
    for num_tokens in (1, 2, 3, 8, 40):
        for num_heads in (1, 16, 32, 64, 128):
            assert decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=lambda candidate: 10**6) == decode.plan(
                num_tokens, num_heads, H200_SMS)


def test_wide_kernel_only_up_to_its_topk():
    """The wide kernel keeps a split's slot ids in shared memory: above WIDE_MAX_TOPK the plan takes the
    32-head kernel, whatever T."""
    assert decode.plan(64, 128, H200_SMS, topk=decode.WIDE_MAX_TOPK).head_tiles == decode.WIDE_HEAD_TILES
    launch = decode.plan(64, 128, H200_SMS, topk=2 * decode.WIDE_MAX_TOPK)
    assert launch.head_tiles == 2 and launch.positions_per_split == 2 * decode.WIDE_MAX_TOPK


@pytest.mark.parametrize("topk", [4097, 8192, 8193, 16384, 100_000, decode.MAX_TOPK])
@pytest.mark.parametrize("fp8_ds_mla", [False, True])
def test_wide_topk_plans_are_launchable(topk, fp8_ds_mla):
    """Every plan of a top-k wider than the default is one the op accepts: no split above the kernel's
    positions limit, at most MAX_SPLITS splits that cover the row."""
    for num_heads in (1, 16, 32, 64, 128):
        shapes = [dict(), dict(cluster_size=1), dict(cluster_size=decode.CLUSTER_SIZE)]
        if topk <= decode.MAX_SPLITS * decode.WIDE_MAX_TOPK and num_heads > 16:
            shapes.append(dict(head_tiles=decode.WIDE_HEAD_TILES))
        for num_tokens in (1, 2, 8, 16, 64, 300):
            for capacity in (None, h200_capacity):
                for shape in shapes:
                    launch = decode.plan(num_tokens, num_heads, H200_SMS, topk=topk, cluster_capacity=capacity,
                                         fp8_ds_mla=fp8_ds_mla, **shape)
                    wide = launch.head_tiles == decode.WIDE_HEAD_TILES
                    limit = decode.WIDE_MAX_TOPK if wide else decode.MAX_POSITIONS_PER_SPLIT
                    assert launch.positions_per_split <= limit, (num_tokens, num_heads, shape, launch)
                    assert launch.positions_per_split % (launch.cluster_size * launch.cta_chunk) == 0
                    assert 1 <= launch.num_splits <= decode.MAX_SPLITS
                    assert launch.num_splits * launch.positions_per_split >= topk
                    assert (launch.num_splits - 1) * launch.positions_per_split < topk  # no empty split


def test_plan_refuses_a_topk_no_split_count_holds():
    with pytest.raises(ValueError, match=f"argument 'topk' expected at most {decode.MAX_TOPK}"):
        decode.plan(1, 16, H200_SMS, topk=decode.MAX_TOPK + 1)
    with pytest.raises(ValueError, match="argument 'topk' .* more than MAX_SPLITS"):
        decode.plan(1, 64, H200_SMS, topk=decode.MAX_SPLITS * decode.WIDE_MAX_TOPK + 1,
                    head_tiles=decode.WIDE_HEAD_TILES)


def test_plan_drops_empty_splits_and_rounds_to_chunks():
    launch = decode.plan(1, 16, 40, topk=2048, ctas_per_sm=1)  # 5 splits asked: 2048 / 5 -> 512 per split -> 4
    assert (launch.num_splits, launch.positions_per_split) == (4, 512)
    launch = decode.plan(1, 16, H200_SMS, topk=300, ctas_per_sm=1)  # 2 granules of 256 at most
    assert (launch.num_splits, launch.positions_per_split) == (2, 256)
    assert decode.plan(1, 16, H200_SMS, ctas_per_sm=2).num_splits == 8  # topk / 256: one stage per CTA


@pytest.mark.parametrize(
    "num_tokens, num_heads, fp8_splits, bf16_splits",
    [
        (47, 16, 5, 5),  # below FP8_THREE_CTAS_MIN_GROUPS: 2 CTAs per SM on both caches
        (48, 16, 8, 5),  # from there on, fp8_ds_mla with 16 heads per CTA aims at 3
        (96, 16, 4, 2),
        (192, 16, 2, 1),
        (300, 16, 1, 1),
        (96, 32, 1, 1),  # N = 32 and 128: 64 heads per CTA (the tile64 kernel), which does not fit 3 CTAs per SM:
        (300, 32, 1, 1),  # no change
        (96, 128, 1, 1),
    ],
)
def test_fp8_plan_aims_at_three_ctas_per_sm_with_16_heads(num_tokens, num_heads, fp8_splits, bf16_splits):
    """The 16/32-head kernel's rule (at N = 16 the plan takes it when asked for one head tile)."""
    shape = dict(head_tiles=1) if num_heads <= 16 else {}
    fp8 = decode.plan(num_tokens, num_heads, H200_SMS, fp8_ds_mla=True, **shape)
    bf16 = decode.plan(num_tokens, num_heads, H200_SMS, **shape)
    assert (fp8.num_splits, bf16.num_splits) == (fp8_splits, bf16_splits)
    assert dataclasses.replace(fp8, num_splits=bf16.num_splits, positions_per_split=bf16.positions_per_split) == bf16


@pytest.mark.parametrize(
    "num_tokens, num_heads",
    [(96, 64), (132, 64), (133, 64), (160, 64), (198, 64), (199, 64), (66, 128), (67, 128), (96, 128), (100, 128)],
)
def test_fp8_64_head_plans_leave_a_short_second_wave_unsplit(num_tokens, num_heads):
    """The tile64 kernel's fp8_ds_mla grids of 1 to 1.5 waves run unsplit, as on the bf16 cache: splitting them by
    the wave model was slower at N = 64 and no faster at N = 128 (docs/decode-tuning.md)."""
    fp8 = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity, fp8_ds_mla=True)
    bf16 = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity)
    assert fp8.kernel == decode.TILE64_KERNEL and fp8 == bf16 and fp8.num_splits == 1


@pytest.mark.parametrize(
    "num_tokens, num_heads, fp8_splits, bf16_splits",
    [
        (132, 16, 3, 2),  # 16 heads per CTA, one CTA per SM unsplit: the capped plan (3 and 2 CTAs per SM)
        (133, 16, 5, 1),  # more CTAs than SMs (FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM): the wave model without the cap
        (265, 16, 4, 1),
        (400, 16, 4, 1),
        (528, 16, 3, 1),  # 4 CTAs per SM
        (529, 16, 1, 1),  # past them: the capped plan again
        (132, 32, 2, 2),  # 32 heads per CTA
        (140, 32, 5, 1),
        (220, 32, 1, 1),  # the model's split cost (UNCAPPED_SPLIT_COST_PER_HEAD) keeps it whole
        (440, 32, 3, 1),
        (529, 32, 1, 1),
    ],
)
def test_fp8_narrow_plan_past_one_cta_per_sm_splits_without_the_cap(num_tokens, num_heads, fp8_splits, bf16_splits):
    shape = dict(head_tiles=decode.narrow_head_tiles(num_heads))  # at N = 16 the plan takes it when asked
    fp8 = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity, fp8_ds_mla=True, **shape)
    bf16 = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity, **shape)
    assert fp8.head_tiles == decode.narrow_head_tiles(num_heads) and fp8.cluster_size == 1
    assert (fp8.num_splits, bf16.num_splits) == (fp8_splits, bf16_splits)


def test_candidates_handed_to_the_capacity_are_the_plans_it_weighs():
    """``cluster_capacity`` sees whole candidate plans of the step (its T, N, shape), one per split count
    weighed, and the plan returned is one of them."""
    seen = []

    def capacity(candidate):
        seen.append(candidate)
        return h200_capacity(candidate)

    launch = decode.plan(9, 16, H200_SMS, cluster_capacity=capacity)
    assert launch in seen
    assert {(c.num_tokens, c.num_heads, c.head_tiles, c.cta_chunk, c.cluster_size, c.kernel) for c in seen} == {
        (9, 16, launch.head_tiles, launch.cta_chunk, launch.cluster_size, launch.kernel)}
    assert all(c.num_splits * c.positions_per_split >= INDEX_TOPK for c in seen)
    assert len({c.num_splits for c in seen}) > 1


def test_plan_value_is_the_fields_in_order():
    launch = decode.plan(3, 100, H200_SMS)
    assert launch.op_value() == [launch.kernel, 3, 100, launch.head_tiles, launch.cta_chunk, launch.cluster_size,
                                 launch.num_splits, launch.positions_per_split]
    assert all(isinstance(v, int) for v in launch.op_value())


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_tokens=1, num_heads=0, num_sms=132), "num_heads"),
    (dict(num_tokens=1, num_heads=129, num_sms=132), "num_heads"),
    (dict(num_tokens=-1, num_heads=16, num_sms=132), "num_tokens"),
    (dict(num_tokens=1, num_heads=16, num_sms=0), "num_sms"),
    (dict(num_tokens=1, num_heads=16, num_sms=132, topk=0), "topk"),
    (dict(num_tokens=1, num_heads=16, num_sms=132, ctas_per_sm=0), "ctas_per_sm"),
    (dict(num_tokens=1, num_heads=16, num_sms=132, cluster_size=4), "cluster_size"),
    (dict(num_tokens=1, num_heads=16, num_sms=132, cta_chunk=64), "cta_chunk"),
    (dict(num_tokens=1, num_heads=64, num_sms=132, head_tiles=3), "head_tiles"),
    (dict(num_tokens=1, num_heads=64, num_sms=132, head_tiles=4, cluster_size=8), "head_tiles"),
    (dict(num_tokens=1, num_heads=64, num_sms=132, head_tiles=4, cta_chunk=16), "head_tiles"),
    (dict(num_tokens=1, num_heads=64, num_sms=132, head_tiles=4, kernel=decode.NARROW_KERNEL), "head_tiles"),
    (dict(num_tokens=1, num_heads=16, num_sms=132, head_tiles=1, kernel=decode.WIDE_KERNEL), "head_tiles"),
])
def test_plan_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        decode.plan(**kwargs)


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_tokens=1.5, num_heads=16, num_sms=132), "num_tokens"),
    (dict(num_tokens=1, num_heads=16.0, num_sms=132), "num_heads"),
    (dict(num_tokens=1, num_heads=16, num_sms=None), "num_sms"),
    (dict(num_tokens=1, num_heads=16, num_sms=132, topk=2048.0), "topk"),
    (dict(num_tokens=1, num_heads=16, num_sms=132, ctas_per_sm=True), "ctas_per_sm"),
])
def test_plan_rejects_non_int_sizes(kwargs, name):
    with pytest.raises(TypeError, match=f"argument '{name}' expected an int"):
        decode.plan(**kwargs)


def test_plan_of_numpy_sizes_is_the_plan_of_ints():
    assert decode.plan(np.int64(8), np.int32(16), np.int64(H200_SMS), np.int64(INDEX_TOPK)) == decode.plan(
        8, 16, H200_SMS, INDEX_TOPK)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without CUDA")
def test_unavailable_without_cuda_says_why():
    availability = decode.is_available()
    assert not availability and "no CUDA device" in availability.reason
    with pytest.raises(RuntimeError, match="not available"):
        decode.sparse_mla_decode(*([None] * 7), 0.1, decode.plan(1, 16, 4), None, out=None)
