"""CPU (with the op library, no GPU needed): the decode op's plan value and the workspace it carves
(the op sparse_mla_decode::workspace_layout, cc/decode/decode_plan.h): sizes, offsets, alignment, the
counters region every plan shares, the workspace sizing of a builder, and the op's refusals.

The op library is built under --config=sm90; without it every test here is skipped.
"""

import dataclasses

import pytest
import torch

from sparse_mla.ops import decode
from sparse_mla.ops.library import call_op
from sparse_mla_testing.decode_capacity import H200_SMS, h200_capacity


pytestmark = pytest.mark.skipif(not decode.library_loaded(), reason=decode.library_loaded().reason)

ALIGNMENT = 256  # kWorkspaceAlignment: every region's offset
COUNTERS_BYTES = 65535 * 8 * 4  # int32 counters of one launch's most (token, head group) pairs, 8 ranks each


def _expected_layout(launch):
    """The layout by the kernels' indexing (cc/decode/params.h): counters, partial outputs, LSEs."""
    rows = launch.num_tokens * launch.head_groups * launch.num_splits * launch.heads_per_cta

    def align(n):
        return -(-n // ALIGNMENT) * ALIGNMENT

    partial_out = (align(COUNTERS_BYTES), rows * 512 * 4)
    partial_lse = (align(sum(partial_out)), rows * 8 * 4)
    return decode.WorkspaceLayout(0, COUNTERS_BYTES, *partial_out, *partial_lse, sum(partial_lse))


@pytest.mark.parametrize("num_tokens, num_heads, topk, shape", [
    (1, 16, 2048, dict()),  # clusters of 8, 8 splits
    (2, 100, 2048, dict(head_tiles=2)),  # 4 head groups of 32 heads, the last one partly empty
    (20, 16, 4096, dict(cluster_size=1)),
    (3, 128, 2048, dict()),  # the wide kernel, 2 head groups of 64
    (1, 64, 4096, dict(head_tiles=decode.WIDE_HEAD_TILES)),  # 64 splits
    (1000, 16, 16384, dict(cta_chunk=16, cluster_size=1)),  # 2 splits: a split holds at most 8192 positions
])
def test_layout_of_split_plans(num_tokens, num_heads, topk, shape):
    launch = decode.plan(num_tokens, num_heads, H200_SMS, topk=topk, **shape)
    assert launch.num_splits > 1, launch
    layout = decode.workspace_layout(launch)
    assert layout == _expected_layout(launch)
    offsets = (layout.counters_offset, layout.partial_out_offset, layout.partial_lse_offset)
    assert all(offset % ALIGNMENT == 0 for offset in offsets)
    assert layout.counters_bytes <= layout.partial_out_offset  # in order, apart
    assert layout.partial_out_offset + layout.partial_out_bytes <= layout.partial_lse_offset
    assert decode.workspace_bytes(launch) == layout.total_bytes


def test_one_split_or_no_token_needs_no_workspace():
    unsplit, padding = decode.plan(512, 16, H200_SMS), decode.plan(0, 16, H200_SMS)  # T = 0: nothing is launched
    assert unsplit.num_splits == 1 and padding.num_splits > 1
    for launch in (unsplit, padding):
        assert decode.workspace_layout(launch) == decode.WorkspaceLayout(0, 0, 0, 0, 0, 0, 0)
    assert decode.workspace_for_plans([unsplit, padding], torch.device("cpu")).numel() == 0


def test_plans_sharing_a_workspace_find_the_counters_in_one_place():
    """The counters region is the same for every split plan and no plan's partials reach into it: the
    zero counters one launch leaves are the next plan's, whatever its T or kernel."""
    plans = [decode.plan(t, n, H200_SMS, cluster_capacity=h200_capacity) for t in (1, 2, 7, 40, 200) for n in (16, 64)]
    layouts = [decode.workspace_layout(p) for p in plans if p.num_splits > 1]
    assert len(layouts) > 4
    assert {(l.counters_offset, l.counters_bytes) for l in layouts} == {(0, COUNTERS_BYTES)}
    assert min(l.partial_out_offset for l in layouts) >= COUNTERS_BYTES


@pytest.mark.parametrize("fp8_ds_mla", [False, True])
@pytest.mark.parametrize("num_heads", [16, 32, 64, 128])
def test_workspace_covers_every_planned_token_count(num_heads, fp8_ds_mla):
    ws = decode.workspace_for_max_tokens(600, num_heads, H200_SMS, torch.device("cpu"),
                                         cluster_capacity=h200_capacity, fp8_ds_mla=fp8_ds_mla)
    for t in range(1, 601):
        for capacity in (None, h200_capacity):  # the planner on the CPU and on the H200
            for cluster_size in (None,) + decode.CLUSTER_SIZES:
                launch = decode.plan(t, num_heads, H200_SMS, cluster_capacity=capacity, cluster_size=cluster_size,
                                     fp8_ds_mla=fp8_ds_mla)
                assert ws.numel() >= decode.workspace_bytes(launch), launch
    one_wave = H200_SMS * 64 * 512 * 4  # fp32 partial outputs of one wave of the wide kernel's CTAs (17.3 MB)

    def at_most(waves):  # the counters, that many waves of partial outputs and their LSEs (1/64 of them)
        return ALIGNMENT + COUNTERS_BYTES + waves * one_wave * 65 / 64 + ALIGNMENT

    if fp8_ds_mla and num_heads > 16:  # FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM: 440 CTAs of 32 heads split 3 ways
        assert ws.numel() <= at_most(5)  # 86.5 MB of partials
    elif fp8_ds_mla:  # N = 16, T = 495, 4 splits
        assert ws.numel() <= at_most(3.75)  # 64.9 MB
    else:
        assert ws.numel() <= at_most(1)  # at most one wave of split partials
    assert ws.dtype == torch.uint8 and torch.count_nonzero(ws) == 0


@pytest.mark.parametrize("num_heads", [1, 16])
def test_workspace_covers_the_swap_ab_band_after_steps_that_do_not_split(num_heads):
    """At one CTA per SM no plan of N <= 16 splits at T = 67..132 (one wave is full), and the swap-AB kernel's split
    again at T = 133..198 (SWAP_AB_UNCAPPED_MAX_WAVES): the sizing goes on through them."""
    ws = decode.workspace_for_max_tokens(200, num_heads, H200_SMS, torch.device("cpu"), ctas_per_sm=1,
                                         cluster_capacity=h200_capacity)
    for t in (100, 132):
        assert decode.plan(t, num_heads, H200_SMS, ctas_per_sm=1, cluster_capacity=h200_capacity).num_splits == 1
    launch = decode.plan(160, num_heads, H200_SMS, ctas_per_sm=1, cluster_capacity=h200_capacity)
    assert (launch.kernel, launch.num_splits) == (decode.SWAP_AB_KERNEL, 2)
    assert ws.numel() >= decode.workspace_bytes(launch) > 0


@pytest.mark.parametrize("topk", [16384, 100_000, decode.MAX_TOPK])  # every plan splits (8192 per split at most)
def test_workspace_for_wide_topk_rows(topk):
    ws = decode.workspace_for_max_tokens(8, 64, H200_SMS, torch.device("cpu"), topk=topk,
                                         cluster_capacity=h200_capacity, fp8_ds_mla=True)
    for t in range(1, 9):
        launch = decode.plan(t, 64, H200_SMS, topk=topk, cluster_capacity=h200_capacity, fp8_ds_mla=True)
        assert ws.numel() >= decode.workspace_bytes(launch) > 0


BASE = decode.plan(1, 16, H200_SMS)  # the narrow kernel, clusters of 8, 32-position stages, 8 splits of 256


@pytest.mark.parametrize("field, value", [
    ("kernel", 4),
    ("num_tokens", -1),
    ("num_heads", 0),
    ("num_heads", 129),
    ("head_tiles", 4),  # the wide kernel's, on the narrow one
    ("cta_chunk", 64),
    ("cluster_size", 4),
    ("num_splits", 0),
    ("num_splits", 65),
    ("positions_per_split", 100),  # not whole stages of the cluster's CTAs
    ("positions_per_split", 2 * 8192),
])
def test_op_refuses_a_bad_plan_naming_the_field(field, value):
    """Each field at its place in PLAN_FIELDS: the op's message names the field the test set (so both
    sides agree on the order) and the argument 'plan'."""
    assert BASE.kernel == decode.NARROW_KERNEL and BASE.num_splits > 1
    with pytest.raises(ValueError, match=f"argument 'plan' expected {field} "):
        decode.workspace_layout(dataclasses.replace(BASE, **{field: value}))


def test_op_refuses_the_wide_kernel_with_another_shape():
    wide = decode.plan(1, 64, H200_SMS, kernel=decode.WIDE_KERNEL)
    assert wide.kernel == decode.WIDE_KERNEL
    for shape in (dict(cta_chunk=16), dict(cluster_size=8), dict(head_tiles=2)):
        with pytest.raises(ValueError, match="argument 'plan': the wide kernel .* expected head_tiles=4"):
            decode.workspace_layout(dataclasses.replace(wide, **shape))


def test_op_refuses_the_swap_ab_kernel_with_another_shape():
    swap_ab = decode.plan(16, 16, H200_SMS)
    assert swap_ab.kernel == decode.SWAP_AB_KERNEL and swap_ab.num_splits > 1
    assert decode.workspace_layout(swap_ab).total_bytes > 0
    assert decode.workspace_layout(dataclasses.replace(swap_ab, head_tiles=2)).total_bytes > 0
    for shape in (dict(cta_chunk=32), dict(cluster_size=8), dict(head_tiles=4)):
        with pytest.raises(ValueError,
                           match="argument 'plan': the swap-AB kernel .* expected head_tiles=1 or 2, cta_chunk=64"):
            decode.workspace_layout(dataclasses.replace(swap_ab, **shape))


def test_op_refuses_the_tile64_kernel_with_another_shape_or_wider_splits():
    tile64 = decode.plan(128, 64, H200_SMS)
    assert tile64.kernel == decode.TILE64_KERNEL and decode.workspace_layout(tile64).total_bytes == 0
    split = dataclasses.replace(tile64, num_splits=2, positions_per_split=1024)
    assert decode.workspace_layout(split) == decode.workspace_layout(
        dataclasses.replace(decode.plan(128, 64, H200_SMS, kernel=decode.WIDE_KERNEL), num_splits=2,
                            positions_per_split=1024))  # the wide kernel's partials and merge
    for shape in (dict(cta_chunk=32), dict(cluster_size=8), dict(head_tiles=2)):
        with pytest.raises(ValueError, match="argument 'plan': the tile64 kernel .* expected head_tiles=4, cta_chunk=64"):
            decode.workspace_layout(dataclasses.replace(tile64, **shape))
    for field in (dict(positions_per_split=2112), dict(num_splits=2, positions_per_split=4096)):
        with pytest.raises(ValueError, match="argument 'plan': the tile64 kernel .* expected positions_per_split up to 2048"):
            decode.workspace_layout(dataclasses.replace(tile64, **field))


@pytest.mark.parametrize("value", [[], BASE.op_value()[:-1], BASE.op_value() + [0]])
def test_op_refuses_a_plan_value_of_another_length(value):
    with pytest.raises(ValueError, match=r"argument 'plan' expected 8 entries \(kernel, num_tokens, "):
        call_op(torch.ops.sparse_mla_decode.workspace_layout, value)


def test_fwd_takes_cuda_tensors_only():
    """fwd is registered for CUDA: CPU tensors are refused by the dispatcher before any check or launch."""
    plan = decode.plan(1, 16, H200_SMS)
    q_nope, q_rope = torch.zeros(1, 16, 512, dtype=torch.bfloat16), torch.zeros(1, 16, 64, dtype=torch.bfloat16)
    index = torch.zeros(1, dtype=torch.int32)
    args = (q_nope, q_rope, torch.zeros(1, 64, 576, dtype=torch.bfloat16), torch.zeros(1, 2048, dtype=torch.int32),
            index, index, torch.zeros(1, 1, dtype=torch.int32), 0.1, plan.op_value(), torch.empty_like(q_nope), None,
            decode.workspace_for_plans([plan], torch.device("cpu")))
    with pytest.raises(NotImplementedError, match="'sparse_mla_decode::fwd' with arguments from the 'CPU' backend"):
        torch.ops.sparse_mla_decode.fwd(*args)
