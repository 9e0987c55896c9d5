"""CPU: the decode kernel's launch plan and workspace sizing (sparse_mla.ops.decode), no GPU needed."""

import pytest
import torch

from sparse_mla.constants import INDEX_TOPK
from sparse_mla.ops import decode

H200_SMS = 132


@pytest.mark.parametrize(
    "num_tokens, num_heads, head_tiles, cta_chunk, head_groups, num_splits, positions",
    [
        (1, 16, 1, 32, 1, 8, 256),  # 64 CTAs of 32 positions: every split a cluster of one stage each
        (1, 1, 1, 32, 1, 8, 256),
        (2, 16, 1, 32, 1, 8, 256),
        (4, 16, 1, 32, 1, 8, 256),  # T * head_groups = 4: the last grid with 32-position stages
        (8, 16, 1, 16, 1, 4, 512),
        (16, 16, 1, 16, 1, 2, 1024),
        (33, 16, 1, 16, 1, 1, 2048),
        (1, 32, 2, 32, 1, 8, 256),
        (1, 64, 2, 32, 2, 8, 256),
        (1, 128, 2, 32, 4, 8, 256),
        (2, 128, 2, 16, 4, 4, 512),
        (8, 128, 2, 16, 4, 1, 2048),
        (1, 100, 2, 32, 4, 8, 256),
        (1024, 128, 2, 16, 4, 1, 2048),
    ],
)
def test_plan_on_h200(num_tokens, num_heads, head_tiles, cta_chunk, head_groups, num_splits, positions):
    launch = decode.plan(num_tokens, num_heads, H200_SMS)
    assert (launch.head_tiles, launch.cta_chunk, launch.head_groups, launch.num_splits, launch.positions_per_split) == (
        head_tiles, cta_chunk, head_groups, num_splits, positions)
    assert launch.num_splits * launch.positions_per_split >= INDEX_TOPK
    assert launch.positions_per_split % (decode.CLUSTER_SIZE * launch.cta_chunk) == 0
    assert launch.num_ctas <= max(2 * H200_SMS, decode.CLUSTER_SIZE * num_tokens * head_groups)
    assert launch.heads_per_cta * launch.head_groups >= num_heads


H200_CLUSTERS_PER_WAVE = {16: 30, 32: 15}
"""cudaOccupancyMaxActiveClusters of the kernel on the H200 by CTA stage size, for 16 and 32 heads
alike (2026-11-30, tools/decode_variants.sh: 80 / 128 registers, 84 / 130 KB of shared memory)."""


def h200_capacity(head_tiles, cta_chunk, positions_per_split):
    assert head_tiles in (1, 2) and positions_per_split % (decode.CLUSTER_SIZE * cta_chunk) == 0
    return H200_CLUSTERS_PER_WAVE[cta_chunk]


@pytest.mark.parametrize(
    "num_tokens, num_heads, num_splits",
    [
        (1, 16, 8),  # 8 clusters fit the 15 of a wave: as without capacity
        (16, 16, 1),  # 2 splits = 32 clusters, two waves of 30: one split of 256 positions per CTA is shorter
        (4, 16, 3),  # 8 splits = 32 clusters = 3 waves of 15; 3 splits = 12 clusters, one wave
        (1, 128, 3),  # 4 head groups: 3 splits = 12 clusters, one wave
        (8, 64, 1),  # more groups than a wave holds: the split count with the fewest steps
    ],
)
def test_plan_fits_cluster_waves(num_tokens, num_heads, num_splits):
    launch = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity)
    assert launch.num_splits == num_splits
    assert launch.num_splits * launch.positions_per_split >= INDEX_TOPK
    unbounded = decode.plan(num_tokens, num_heads, H200_SMS)
    assert launch.num_splits <= unbounded.num_splits
    assert launch.cta_chunk == unbounded.cta_chunk


def test_plan_with_unlimited_capacity_is_the_plain_plan():
    for num_tokens in (1, 2, 3, 8, 40):
        for num_heads in (1, 16, 32, 64, 128):
            assert decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=lambda t, c, p: 10**6) == decode.plan(
                num_tokens, num_heads, H200_SMS)


def test_plan_drops_empty_splits_and_rounds_to_chunks():
    launch = decode.plan(1, 16, 40, topk=2048, ctas_per_sm=1)  # 5 splits asked: 2048 / 5 -> 512 per split -> 4
    assert (launch.num_splits, launch.positions_per_split) == (4, 512)
    launch = decode.plan(1, 16, H200_SMS, topk=300, ctas_per_sm=1)  # 2 granules of 256 at most
    assert (launch.num_splits, launch.positions_per_split) == (2, 256)
    assert decode.plan(1, 16, H200_SMS, ctas_per_sm=2).num_splits == 8  # topk / 256: one stage per CTA


def test_workspace_covers_every_planned_token_count():
    ws = decode.DecodeWorkspace.for_max_tokens(64, 128, H200_SMS, torch.device("cpu"))
    for t in range(1, 65):
        launch = decode.plan(t, 128, H200_SMS)
        assert ws.partial_out.numel() >= launch.partial_out_numel
        assert ws.partial_lse.numel() >= launch.partial_lse_numel
        assert ws.counters.numel() >= launch.counters_numel
    assert ws.partial_out.dtype == torch.float32 and ws.counters.dtype == torch.int32
    assert torch.count_nonzero(ws.counters) == 0
    unsplit = decode.plan(33, 16, H200_SMS)
    assert unsplit.num_splits == 1 and unsplit.partial_out_numel == 0 and unsplit.counters_numel == 0


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_tokens=1, num_heads=0, num_sms=132), "num_heads"),
    (dict(num_tokens=1, num_heads=129, num_sms=132), "num_heads"),
    (dict(num_tokens=-1, num_heads=16, num_sms=132), "num_tokens"),
    (dict(num_tokens=1, num_heads=16, num_sms=0), "num_sms"),
    (dict(num_tokens=1, num_heads=16, num_sms=132, topk=0), "topk"),
])
def test_plan_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        decode.plan(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without CUDA")
def test_unavailable_without_cuda_says_why():
    availability = decode.is_available()
    assert not availability and "no CUDA device" in availability.reason
    with pytest.raises(RuntimeError, match="not available"):
        decode.sparse_mla_decode(*([None] * 7), 0.1, decode.plan(1, 16, 4), None, out=None)
