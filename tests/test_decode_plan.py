"""CPU: the decode kernel's launch plan and workspace sizing (sparse_mla.ops.decode), no GPU needed."""

import pytest
import torch

from sparse_mla.constants import INDEX_TOPK
from sparse_mla.ops import decode

H200_SMS = 132


@pytest.mark.parametrize(
    "num_tokens, num_heads, head_tiles, head_groups, num_splits, positions",
    [
        (1, 16, 1, 1, 16, 128),  # 128 CTAs: one per SM
        (1, 1, 1, 1, 16, 128),
        (2, 16, 1, 1, 8, 256),
        (4, 16, 1, 1, 8, 256),  # from T * head_groups = 3 on: two CTAs per SM
        (8, 16, 1, 1, 4, 512),
        (16, 16, 1, 1, 2, 1024),
        (33, 16, 1, 1, 1, 2048),
        (1, 32, 2, 1, 16, 128),
        (1, 64, 4, 1, 16, 128),
        (1, 128, 4, 2, 8, 256),
        (2, 128, 4, 2, 8, 256),
        (8, 128, 4, 2, 2, 1024),
        (17, 128, 4, 2, 1, 2048),
        (1, 100, 4, 2, 8, 256),
        (1024, 128, 4, 2, 1, 2048),
    ],
)
def test_plan_on_h200(num_tokens, num_heads, head_tiles, head_groups, num_splits, positions):
    launch = decode.plan(num_tokens, num_heads, H200_SMS)
    assert (launch.head_tiles, launch.head_groups, launch.num_splits, launch.positions_per_split) == (
        head_tiles, head_groups, num_splits, positions)
    assert launch.num_splits * launch.positions_per_split >= INDEX_TOPK
    assert launch.num_ctas <= max(2 * H200_SMS, decode.CLUSTER_SIZE * num_tokens * head_groups)
    assert launch.heads_per_cta * launch.head_groups >= num_heads


H200_CLUSTERS_PER_WAVE = {1: 45, 2: 30, 4: 15}
"""cudaOccupancyMaxActiveClusters of the kernel on the H200 by head tiles (2026-11-30, 80/128/176 registers)."""


def h200_capacity(head_tiles, positions_per_split):
    assert positions_per_split % decode.CHUNK == 0
    return H200_CLUSTERS_PER_WAVE[head_tiles]


@pytest.mark.parametrize(
    "num_tokens, num_heads, num_splits",
    [
        (1, 16, 16),  # 16 clusters fit the 45 of a wave: as without capacity
        (16, 16, 2),
        (1, 128, 7),  # 16 clusters of 64 heads would be two waves of the 15 that fit: 14 instead
        (2, 128, 3),  # 32 clusters = 3 waves of 4 chunks; 12 clusters = 1 wave of 11 chunks is shorter
        (1, 64, 11),
        (8, 64, 3),  # more tokens than a wave holds: the split count with the fewest chunk steps
    ],
)
def test_plan_fits_cluster_waves(num_tokens, num_heads, num_splits):
    launch = decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=h200_capacity)
    assert launch.num_splits == num_splits
    assert launch.num_splits * launch.positions_per_split >= INDEX_TOPK
    unbounded = decode.plan(num_tokens, num_heads, H200_SMS)
    assert launch.num_splits <= unbounded.num_splits


def test_plan_with_unlimited_capacity_is_the_plain_plan():
    for num_tokens in (1, 2, 3, 8, 40):
        for num_heads in (1, 16, 32, 64, 128):
            assert decode.plan(num_tokens, num_heads, H200_SMS, cluster_capacity=lambda t, p: 10**6) == decode.plan(
                num_tokens, num_heads, H200_SMS)


def test_plan_drops_empty_splits_and_rounds_to_chunks():
    launch = decode.plan(1, 16, 48, topk=2048, ctas_per_sm=1)  # 6 splits asked: 2048 / 6 -> 384 per split -> 6
    assert (launch.num_splits, launch.positions_per_split) == (6, 384)
    launch = decode.plan(1, 16, H200_SMS, topk=100, ctas_per_sm=1)  # 2 chunks at most
    assert (launch.num_splits, launch.positions_per_split) == (2, 64)
    assert decode.plan(1, 16, H200_SMS, ctas_per_sm=2).num_splits == 32


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
