"""Fused sparse MLA attention in Triton: request-local top-k positions in, attention out, one launch.

For query token ``t`` every head attends the (at most) ``K = 2048`` positions the indexer picked in the
token's request: slot ``[c_kv (512) | k_rope (64)]`` of the bf16 cache `[num_blocks, 64, 576]`, or of the
uint8 fp8_ds_mla cache `[num_blocks, 64, 656]` (:mod:`sparse_mla.fp8_ds_mla`, dequantized in registers).
The kernel translates the indices itself, reads each gathered row once for all heads of a token, and
splits a token's row over several programs whose last one merges the splits (no second kernel);
docs/triton-kernel.md says how, and what Triton's interpreter (the CPU tests) needs.

CUDA graphs: no host synchronization, no data-dependent shapes; the launch configuration depends on
``(T, N, SM count, K)`` only, and the split-KV workspace (:class:`SplitWorkspace`) belongs to the caller.
:func:`sparse_mla_attention` checks and plans one call; :func:`launch` runs a resolved :class:`LaunchPlan`
on checked arguments (what the Triton route calls once per layer). :class:`LaunchConfig` fields can be
overridden per call (``tools/bench.py --sweep`` tunes them; :func:`default_launch_config` is the default).

Example
-------
>>> out, lse = sparse_mla_attention(q_nope, q_rope, kv_cache, topk_indices, req_id, token_kv_len,
...                                 block_table, softmax_scale=DEEPSEEK_V32_SOFTMAX_SCALE, return_lse=True)
"""

import dataclasses
import functools
import itertools
import math
from typing import List, Optional, Tuple, Union

import torch
import triton
import triton.language as tl

from sparse_mla import kv_cache_format
from sparse_mla.checks import (
    check_kv_cache_slot_strides,
    check_num_heads,
    check_same_device,
    check_tensor,
    check_unit_last_stride,
)
from sparse_mla.constants import (
    FP8_DS_MLA_GROUP_SIZE,
    FP8_DS_MLA_ROPE_OFFSET,
    FP8_DS_MLA_SCALE_OFFSET,
    KV_BLOCK_SIZE,
    KV_CACHE_HEAD_SIZE,
    KV_LORA_RANK,
    MAX_NUM_HEADS,
    QK_ROPE_HEAD_DIM,
)
from sparse_mla import device_info
from sparse_mla.kernels.triton_support import bf16_rne, dot_in_fp32, kernel_device_type, round_bf16_by_bits
from sparse_mla.topk_filter import NO_DCP, DcpShard, check_topk_length

MIN_DOT_ROWS = 16
"""``tl.dot`` needs at least 16 rows, so a program always holds at least 16 (possibly padded) heads."""

LOG2_E = math.log2(math.e)
"""Scores are scaled by ``softmax_scale * log2(e)`` so that the softmax runs on ``exp2``."""

LN_2 = math.log(2.0)
"""Converts the kernel's base-2 log-sum-exp to the natural log the API returns."""

MERGE_ELEMS_PER_THREAD = 64
"""fp32 partial-output values each thread holds per step of the split merge (a register budget)."""

THREADS_PER_WARP = 32
"""NVIDIA warp width, for the merge's register budget."""

# --------------------------------------------------------------------------------------------------
# The kernel


# Sizes that vary from call to call are not specialized (Triton would compile a variant for values equal
# to 1 or divisible by 16), so batches of any size share one compiled kernel per launch configuration;
# strides stay specialized (unit strides make the index loads vector loads).
@triton.jit(do_not_specialize=["num_heads", "topk", "num_reqs", "max_blocks", "num_blocks", "num_splits", "dcp_rank"])
def _sparse_mla_attention_kernel(
    q_nope_ptr,  # [T, N, 512] bf16, unit stride along the last dim
    q_nope_stride_t,
    q_nope_stride_h,
    q_rope_ptr,  # [T, N, 64] bf16, unit stride along the last dim
    q_rope_stride_t,
    q_rope_stride_h,
    kv_ptr,  # [num_blocks, 64, 576] bf16, or [num_blocks, 64, 656] uint8 when FP8_DS_MLA; unit stride along the last dim
    kv_stride_block,  # elements between blocks: 64 * 576 (64 * 656), or more for a padded (vLLM) cache
    kv_stride_slot,  # elements between the slots of a block (576, or 656 bytes, for vLLM's caches)
    topk_ptr,  # [T, K] int32 request-local positions, -1 = none
    topk_stride_t,
    topk_stride_k,
    req_id_ptr,  # [T] int32
    req_id_stride,
    kv_len_ptr,  # [T] int32
    kv_len_stride,
    block_table_ptr,  # [R, max_blocks] int32
    block_table_stride_r,
    block_table_stride_b,
    topk_length_ptr,  # [T] int32 entries of each row to read, when HAS_TOPK_LENGTH
    out_ptr,  # [T, N, 512] bf16, unit stride along the last dim
    out_stride_t,
    out_stride_h,
    lse_ptr,  # [T, N] fp32, written when HAS_LSE
    lse_stride_t,
    lse_stride_h,
    part_out_ptr,  # [T, S, HB, DVB, BLOCK_H, BLOCK_DV] fp32 workspace (SPLIT only)
    part_lse_ptr,  # [T, S, HB, DVB, BLOCK_H] fp32 workspace, base-2 LSE (SPLIT only)
    counter_ptr,  # [T, HB, DVB] int32 workspace, zero between launches (SPLIT only)
    num_heads,
    topk,
    num_reqs,
    max_blocks,
    num_blocks,
    num_splits,  # S
    dcp_rank,  # this rank of DCP_WORLD_SIZE (sparse_mla.topk_filter.DcpShard); a runtime value: one compile for all ranks
    scale_log2,  # softmax_scale * log2(e)
    LORA_RANK: tl.constexpr,
    ROPE_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    LN2: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    SPLIT_ITERS: tl.constexpr,  # loop steps per split: a split covers SPLIT_ITERS * BLOCK_N top-k columns
    SPLIT: tl.constexpr,  # S > 1
    SPLIT_PAD: tl.constexpr,  # S rounded up to a power of 2
    MERGE_H: tl.constexpr,
    MERGE_DV: tl.constexpr,
    HAS_LSE: tl.constexpr,
    HAS_TOPK_LENGTH: tl.constexpr,
    DCP_WORLD_SIZE: tl.constexpr,  # the shard of the cache this rank holds (sparse_mla.topk_filter.DcpShard)
    DCP_INTERLEAVE: tl.constexpr,
    DOT_FP32: tl.constexpr,
    BF16_BY_BITS: tl.constexpr,  # interpreter only: round fp32 -> bf16 by bits (it truncates conversions)
    FP8_DS_MLA: tl.constexpr,  # kv_ptr is the uint8 fp8_ds_mla cache: dequantize gathered slots in registers
    SCALE_OFFSET: tl.constexpr,  # fp8_ds_mla slot layout: byte offset of the 4 fp32 scales (512)
    ROPE_OFFSET: tl.constexpr,  # byte offset of the 64 bf16 k_rope values (528)
    GROUP_SIZE: tl.constexpr,  # c_kv values per scale (128)
):
    # Program -> (token, split, head block, column block). The programs of one token and split are
    # adjacent in launch order, so the ones reading the same KV rows run together (L2 reuse).
    NUM_DV: tl.constexpr = LORA_RANK // BLOCK_DV
    num_head_blocks = tl.cdiv(num_heads, BLOCK_H)
    pid = tl.program_id(0)
    dv_block = pid % NUM_DV
    rest = pid // NUM_DV
    head_block = rest % num_head_blocks
    rest = rest // num_head_blocks
    split = rest % num_splits
    token = (rest // num_splits).to(tl.int64)

    req = tl.load(req_id_ptr + token * req_id_stride).to(tl.int64)
    kv_len = tl.load(kv_len_ptr + token * kv_len_stride)
    kv_len = tl.where((req >= 0) & (req < num_reqs), kv_len, 0)  # a bad request row: nothing is valid

    heads = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < num_heads
    d_nope = tl.arange(0, LORA_RANK)
    d_rope = tl.arange(0, ROPE_DIM)
    d_out = dv_block * BLOCK_DV + tl.arange(0, BLOCK_DV)
    q_nope = tl.load(
        q_nope_ptr + token * q_nope_stride_t + heads[:, None] * q_nope_stride_h + d_nope[None, :],
        mask=head_ok[:, None],
        other=0.0,
    )  # [BLOCK_H, 512]
    q_rope = tl.load(
        q_rope_ptr + token * q_rope_stride_t + heads[:, None] * q_rope_stride_h + d_rope[None, :],
        mask=head_ok[:, None],
        other=0.0,
    )  # [BLOCK_H, 64]
    if DOT_FP32:
        # Only in Triton's interpreter (CPU tests), whose tl.dot is wrong on bf16 operands (see
        # sparse_mla.kernels.triton_support): every dot runs on fp32 copies there. Compiled kernels
        # keep bf16 operands on the tensor cores, with fp32 accumulation.
        q_nope = q_nope.to(tl.float32)
        q_rope = q_rope.to(tl.float32)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)  # running max of the base-2 scores
    l_i = tl.zeros([BLOCK_H], tl.float32)  # running softmax denominator, relative to m_i
    acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)  # running numerator, relative to m_i
    topk_row = topk_ptr + token * topk_stride_t
    block_table_row = block_table_ptr + req * block_table_stride_r
    col_begin = split * (SPLIT_ITERS * BLOCK_N)
    col_end = tl.minimum(col_begin + SPLIT_ITERS * BLOCK_N, topk)
    if HAS_TOPK_LENGTH:  # columns at or past the row's length are -1
        col_end = tl.minimum(col_end, tl.load(topk_length_ptr + token))
    # A constexpr trip count: Triton's interpreter cannot run a loop with runtime bounds (numpy >= 2.4
    # refuses its one-element-array loop bounds), and the pipeliner likes a known count.
    for step in range(SPLIT_ITERS):
        cols = col_begin + step * BLOCK_N + tl.arange(0, BLOCK_N)
        pos = tl.load(topk_row + cols * topk_stride_k, mask=cols < col_end, other=-1)
        valid = (pos >= 0) & (pos < kv_len)  # kv_len is global: bounds p before the DCP mapping
        if DCP_WORLD_SIZE > 1:  # keep this rank's positions, as positions of its own block table
            group = pos // DCP_INTERLEAVE
            valid = valid & (group % DCP_WORLD_SIZE == dcp_rank)
            pos = (group // DCP_WORLD_SIZE) * DCP_INTERLEAVE + pos % DCP_INTERLEAVE
        block_col = pos // BLOCK_SIZE
        valid = valid & (block_col < max_blocks)
        block = tl.load(block_table_row + block_col * block_table_stride_b, mask=valid, other=-1)
        valid = valid & (block >= 0) & (block < num_blocks)
        row = block.to(tl.int64) * kv_stride_block + (pos % BLOCK_SIZE) * kv_stride_slot  # [BLOCK_N] slot offsets
        if FP8_DS_MLA:
            c_kv = _dequantized_c_kv(kv_ptr, row, d_nope, valid, SCALE_OFFSET, GROUP_SIZE, BF16_BY_BITS)  # [BLOCK_N, 512]
            rope_ptrs = (kv_ptr + row + ROPE_OFFSET).to(tl.pointer_type(tl.bfloat16))  # [BLOCK_N]
            k_rope = tl.load(rope_ptrs[:, None] + d_rope[None, :], mask=valid[:, None], other=0.0)
        else:
            c_kv = tl.load(kv_ptr + row[:, None] + d_nope[None, :], mask=valid[:, None], other=0.0)  # [BLOCK_N, 512]
            k_rope = tl.load(kv_ptr + row[:, None] + (LORA_RANK + d_rope)[None, :], mask=valid[:, None], other=0.0)
        if BLOCK_DV == LORA_RANK:
            v = c_kv  # the tile already holds every value column
        elif FP8_DS_MLA:
            v = _dequantized_c_kv(kv_ptr, row, d_out, valid, SCALE_OFFSET, GROUP_SIZE, BF16_BY_BITS)  # [BLOCK_N, BLOCK_DV]
        else:
            v = tl.load(kv_ptr + row[:, None] + d_out[None, :], mask=valid[:, None], other=0.0)  # [BLOCK_N, BLOCK_DV]
        if DOT_FP32:
            v = v.to(tl.float32)
        if DOT_FP32:
            c_kv = c_kv.to(tl.float32)
            k_rope = k_rope.to(tl.float32)
        s = tl.dot(q_nope, tl.trans(c_kv))
        s = tl.dot(q_rope, tl.trans(k_rope), s)  # [BLOCK_H, BLOCK_N] fp32
        s = tl.where(valid[None, :], s * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_base = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing valid yet: no inf - inf
        alpha = tl.exp2(m_i - m_base)
        p = tl.exp2(s - m_base[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if BF16_BY_BITS:
            p = bf16_rne(p)  # the interpreter truncates .to(bf16): round as the GPU does, kept in fp32
        else:
            p = p.to(q_nope_ptr.dtype.element_ty)  # bf16 probabilities into the value product, as in FA
        if DOT_FP32:
            p = p.to(tl.float32)
        acc = tl.dot(p, v, acc * alpha[:, None])
        m_i = m_new

    has_any = l_i != 0.0  # a NaN sum (a NaN in a selected slot) propagates, as from the reference
    l_safe = tl.where(has_any, l_i, 1.0)
    o = acc / l_safe[:, None]  # [BLOCK_H, BLOCK_DV]; 0 for a head without a valid position
    lse2 = tl.where(has_any, m_i + tl.log2(l_safe), float("-inf"))  # [BLOCK_H] base-2 LSE

    if SPLIT:
        # Publish this program's partial result, then arrive; the last program of the group merges.
        program = ((token * num_splits + split) * num_head_blocks + head_block) * NUM_DV + dv_block
        h_local = tl.arange(0, BLOCK_H)
        tl.store(
            part_out_ptr + program * (BLOCK_H * BLOCK_DV) + h_local[:, None] * BLOCK_DV + tl.arange(0, BLOCK_DV)[None, :],
            o,
            mask=head_ok[:, None],
        )
        tl.store(part_lse_ptr + program * BLOCK_H + h_local, lse2, mask=head_ok)
        # All threads' stores come before the barrier, the barrier before the single gpu-scope release
        # of the counter update (CUDA's __syncthreads + release pattern); the last arrival's acquire
        # then orders its reads of the other programs' partials after their stores.
        tl.debug_barrier()
        group = (token * num_head_blocks + head_block) * NUM_DV + dv_block
        arrived = tl.atomic_add(counter_ptr + group, 1, sem="acq_rel", scope="gpu")
        if arrived == num_splits - 1:
            _merge_splits(
                part_out_ptr,
                part_lse_ptr,
                out_ptr + token * out_stride_t,
                out_stride_h,
                lse_ptr + token * lse_stride_t,
                lse_stride_h,
                token,
                head_block,
                dv_block,
                num_head_blocks,
                num_heads,
                num_splits,
                LORA_RANK,
                LN2,
                BLOCK_H,
                BLOCK_DV,
                SPLIT_PAD,
                MERGE_H,
                MERGE_DV,
                HAS_LSE,
            )
            tl.store(counter_ptr + group, 0)  # clean for the next launch or graph replay
    else:
        out_rows = out_ptr + token * out_stride_t + heads[:, None] * out_stride_h
        tl.store(out_rows + d_out[None, :], o.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
        if HAS_LSE:
            lse_ptrs = lse_ptr + token * lse_stride_t + heads * lse_stride_h
            tl.store(lse_ptrs, lse2 * LN2, mask=head_ok & (dv_block == 0))


@triton.jit
def _dequantized_c_kv(kv_ptr, row, cols, valid, SCALE_OFFSET: tl.constexpr, GROUP_SIZE: tl.constexpr,
                      BF16_BY_BITS: tl.constexpr):
    """`[BLOCK_N, len(cols)]` ``c_kv`` columns ``cols`` of the fp8_ds_mla slots at byte offsets ``row``:
    ``float(fp8) * scale[col // 128]`` in fp32, rounded to bf16 (the dots' operand type; with ``BF16_BY_BITS``,
    in the interpreter, rounded by :func:`bf16_rne` and kept in fp32); 0 where not ``valid``.

    The scale of each column is gathered from the slot's 4 fp32 scales (4 distinct addresses per row).
    """
    codes = tl.load(kv_ptr + row[:, None] + cols[None, :], mask=valid[:, None], other=0)  # uint8
    scale_ptrs = (kv_ptr + row + SCALE_OFFSET).to(tl.pointer_type(tl.float32))  # [BLOCK_N]
    scale = tl.load(scale_ptrs[:, None] + (cols // GROUP_SIZE)[None, :], mask=valid[:, None], other=0.0)
    values = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    # The NaN codes read as NaN on every device (the interpreter's conversion reads them as +-480).
    values = tl.where((codes & 0x7F) == 0x7F, float("nan"), values) * scale
    if BF16_BY_BITS:
        return bf16_rne(values)
    return values.to(tl.bfloat16)


@triton.jit
def _merge_splits(
    part_out_ptr,  # [T, S, HB, DVB, BLOCK_H, BLOCK_DV] fp32
    part_lse_ptr,  # [T, S, HB, DVB, BLOCK_H] fp32, base 2
    out_row_ptr,  # out[token]: [N, 512] bf16
    out_stride_h,
    lse_row_ptr,  # lse[token]: [N] fp32
    lse_stride_h,
    token,
    head_block,
    dv_block,
    num_head_blocks,
    num_heads,
    num_splits,
    LORA_RANK: tl.constexpr,
    LN2: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    SPLIT_PAD: tl.constexpr,
    MERGE_H: tl.constexpr,
    MERGE_DV: tl.constexpr,
    HAS_LSE: tl.constexpr,
):
    """Combine the ``S`` partial results of one (token, head block, column block) group.

    ``out = Σ_s 2^(lse_s - M) o_s / Σ_s 2^(lse_s - M)`` and ``lse = M + log2 Σ_s 2^(lse_s - M)`` with
    ``M = max_s lse_s``; a split without a valid position has ``lse_s = -inf`` and weighs 0. Steps of
    `[SPLIT_PAD, MERGE_H, MERGE_DV]` values; the partials come from other programs, so the loads use
    ``.cg`` (L2, never a stale L1 line).
    """
    NUM_DV: tl.constexpr = LORA_RANK // BLOCK_DV
    splits = tl.arange(0, SPLIT_PAD)
    split_ok = splits < num_splits
    programs = ((token * num_splits + splits) * num_head_blocks + head_block) * NUM_DV + dv_block  # [SPLIT_PAD]
    heads_here = tl.minimum(num_heads - head_block * BLOCK_H, BLOCK_H)
    for h0 in range(0, BLOCK_H, MERGE_H):  # constexpr bounds, see the top-k loop
        if h0 < heads_here:
            h_local = h0 + tl.arange(0, MERGE_H)
            h_ok = h_local < heads_here
            lse_parts = tl.load(
                part_lse_ptr + programs[:, None] * BLOCK_H + h_local[None, :],
                mask=split_ok[:, None] & h_ok[None, :],
                other=float("-inf"),
                cache_modifier=".cg",
            )  # [SPLIT_PAD, MERGE_H]
            lse_max = tl.max(lse_parts, 0)
            base = tl.where(lse_max == float("-inf"), 0.0, lse_max)
            weight = tl.exp2(lse_parts - base[None, :])  # [SPLIT_PAD, MERGE_H]
            weight_sum = tl.sum(weight, 0)
            has_any = weight_sum != 0.0
            sum_safe = tl.where(has_any, weight_sum, 1.0)
            inv_sum = tl.where(has_any, 1.0 / sum_safe, 0.0)
            heads = head_block * BLOCK_H + h_local
            for d0 in tl.static_range(0, BLOCK_DV, MERGE_DV):
                d_local = d0 + tl.arange(0, MERGE_DV)
                o_parts = tl.load(
                    part_out_ptr
                    + programs[:, None, None] * (BLOCK_H * BLOCK_DV)
                    + h_local[None, :, None] * BLOCK_DV
                    + d_local[None, None, :],
                    mask=split_ok[:, None, None] & h_ok[None, :, None],
                    other=0.0,
                    cache_modifier=".cg",
                )  # [SPLIT_PAD, MERGE_H, MERGE_DV]
                merged = tl.sum(o_parts * weight[:, :, None], 0) * inv_sum[:, None]  # [MERGE_H, MERGE_DV]
                tl.store(
                    out_row_ptr + heads[:, None] * out_stride_h + (dv_block * BLOCK_DV + d_local)[None, :],
                    merged.to(out_row_ptr.dtype.element_ty),
                    mask=h_ok[:, None],
                )
            if HAS_LSE:
                lse = tl.where(has_any, (base + tl.log2(sum_safe)) * LN2, float("-inf"))
                tl.store(lse_row_ptr + heads * lse_stride_h, lse, mask=h_ok & (dv_block == 0))


# --------------------------------------------------------------------------------------------------
# Launch configuration

DEFAULT_BLOCK_N = 32
"""Top-k entries per loop step: a `[32, 576]` bf16 tile (36 KiB) per pipeline stage."""

ONE_STEP_BLOCK_N = 64
"""``block_n`` of the column-split rule for 16-head blocks: each program then does one 64-row step."""

COLUMN_SPLIT_BLOCK_DV = 64
"""Output columns per program under the column-split rule (8 programs share a token's KV rows)."""

COLUMN_SPLIT_MAX_GROUPS = 2
"""At most this many (token, head block) groups use the column-split rule; more use ``block_dv = 512``."""

MAX_FULL_COLUMN_SPLITS = 16
"""Split cap for ``block_dv = 512``: the merging program reads ``splits * block_h * 512`` fp32 partials alone."""

SMALL_HEAD_BLOCK_PROGRAMS_PER_SM = 2
"""16-head programs of the column-split rule are small (51 KiB of shared memory): two per SM."""

LOAD_CHAIN_LEVELS = 3
"""Loads in the dependent chain of a loop step: top-k positions -> block-table entries -> KV rows.

Triton's pipeliner gives each level ``(num_stages - 1) // 3`` steps of prefetch, so the KV tile is
single-buffered up to ``num_stages = 6`` (the next tile is only requested after this step's dots) and
double-buffered from 7 on (checked in the sm_90a TTGIR of triton 3.6.0)."""

DEFAULT_NUM_STAGES = 2 * LOAD_CHAIN_LEVELS + 1
"""7: the KV tile of the next step is in flight while this step computes."""


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """How one call is cut into programs (Triton CTAs). ``block_h``, ``block_n`` and ``block_dv`` are
    powers of 2.

    A call runs ``T * plan.num_splits * ceil(N / block_h) * (512 / block_dv)`` programs, with the
    effective split count of :func:`plan_launch`.
    """

    block_h: int  # query heads per program, >= 16 (tl.dot's minimum rows; extra rows are masked)
    block_n: int  # top-k entries (gathered KV rows) per loop step, >= 16
    block_dv: int  # output columns per program, divides 512; below 512 the QK product is repeated
    num_splits: int  # programs sharing one token's top-k row; 1 = no workspace and no merge
    num_warps: int
    num_stages: int  # Triton's pipelining depth; KV tiles are prefetched (num_stages - 1) // 3 steps ahead


def default_launch_config(num_tokens: int, num_heads: int, num_sms: int, topk: int) -> LaunchConfig:
    """The launch configuration used when the caller gives none; a function of its arguments only.

    Rules, fitted to the H200 sweep of ``tools/bench.py --sweep`` (triton 3.6.0; best configurations
    there: N=16 T=1 ``h16/n64/dv64/s32/w4``, N=16 T=8 ``h16/n32/dv512/s16/w8``, N=128 T=1
    ``h64/n32/dv64/s8/w4``, N=128 T=8 ``h64/n32/dv512/s8/w8``, N=64 and 128 at T=256 ``dv512/s1/w8``,
    all ``num_stages = 7``). With ``G = T * ceil(N / block_h)`` (token, head block) groups:

    1. ``block_h``: 16 heads for ``N <= 16``, 32 for ``N <= 32``, else 64 (Hopper's wgmma tile rows;
       smaller blocks use mma.sync).
    2. ``2 * G > num_sms``: no split, ``block_dv = 512`` (the groups alone fill half the SMs or more).
    3. Column split, ``G <= 2``: ``block_dv = 64`` (8 programs per group share its KV rows through the
       L2) and ``num_splits`` the largest power of 2 with ``G * 8 * num_splits <= num_sms`` (twice that
       for 16-head blocks, whose small programs run two per SM, with ``block_n = 64``: one loop step
       each), 4 warps.
    4. Otherwise ``block_dv = 512`` and ``num_splits`` the largest power of 2 with
       ``G * num_splits <= num_sms``, at most :data:`MAX_FULL_COLUMN_SPLITS`, 8 warps.
    5. ``num_warps``: 8 for ``block_dv = 512`` except unsplit 16-head blocks (4); ``num_stages`` 7,
       a double-buffered KV tile (:data:`LOAD_CHAIN_LEVELS`). Every default fits sm_90a's 227 KiB
       of shared memory (the largest, ``h64/n32/dv64``, takes 194 KiB).

    Parameters
    ----------
    num_tokens, num_heads : int
        ``T`` and ``N`` of the call.
    num_sms : int
        Streaming multiprocessors of the GPU (132 on an H200).
    topk : int
        Width ``K`` of the top-k rows (2048 for DeepSeek-V3.2).

    Returns
    -------
    LaunchConfig
    """
    block_h = MIN_DOT_ROWS if num_heads <= MIN_DOT_ROWS else 32 if num_heads <= 32 else 64
    groups = max(num_tokens, 1) * triton.cdiv(num_heads, block_h)
    max_splits = max(triton.cdiv(topk, DEFAULT_BLOCK_N), 1)
    if 2 * groups > num_sms:
        num_warps = 4 if block_h == MIN_DOT_ROWS else 8
        return LaunchConfig(block_h, DEFAULT_BLOCK_N, KV_LORA_RANK, 1, num_warps, DEFAULT_NUM_STAGES)
    if groups <= COLUMN_SPLIT_MAX_GROUPS:
        small = block_h == MIN_DOT_ROWS
        programs = num_sms * (SMALL_HEAD_BLOCK_PROGRAMS_PER_SM if small else 1)
        splits = _pow2_floor(programs // (groups * (KV_LORA_RANK // COLUMN_SPLIT_BLOCK_DV)))
        block_n = ONE_STEP_BLOCK_N if small else DEFAULT_BLOCK_N
        return LaunchConfig(block_h, block_n, COLUMN_SPLIT_BLOCK_DV, min(splits, max_splits), 4, DEFAULT_NUM_STAGES)
    splits = min(_pow2_floor(num_sms // groups), MAX_FULL_COLUMN_SPLITS)
    return LaunchConfig(block_h, DEFAULT_BLOCK_N, KV_LORA_RANK, min(splits, max_splits), 8, DEFAULT_NUM_STAGES)


def _check_config(config: LaunchConfig) -> None:
    """Raise ``ValueError`` naming the first field of ``config`` the kernel cannot run."""
    pow2 = lambda x: x > 0 and x & (x - 1) == 0  # noqa: E731
    rules = [
        ("block_h", pow2(config.block_h) and MIN_DOT_ROWS <= config.block_h <= MAX_NUM_HEADS, "a power of 2 in [16, 128]"),
        ("block_n", pow2(config.block_n) and config.block_n >= MIN_DOT_ROWS, "a power of 2 >= 16"),
        ("block_dv", pow2(config.block_dv) and MIN_DOT_ROWS <= config.block_dv <= KV_LORA_RANK, "a power of 2 in [16, 512]"),
        ("num_splits", config.num_splits >= 1, "an int >= 1"),
        ("num_warps", pow2(config.num_warps), "a power of 2"),
        ("num_stages", config.num_stages >= 1, "an int >= 1"),
    ]
    for name, ok, want in rules:
        if not ok:
            raise ValueError(f"sparse_mla: launch config '{name}' expected {want}, got {getattr(config, name)}")


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """A :class:`LaunchConfig` resolved for one call's shapes (:func:`plan_launch`)."""

    config: LaunchConfig
    num_splits: int  # effective: no empty split
    cols_per_split: int  # top-k columns per split, a multiple of block_n
    head_blocks: int
    column_blocks: int
    split_pad: int  # num_splits rounded up to a power of 2 (merge tile)
    merge_h: int  # heads per merge step
    merge_dv: int  # columns per merge step

    @property
    def num_programs_per_token(self) -> int:
        return self.num_splits * self.head_blocks * self.column_blocks


BF16_BYTES = 2
INT32_BYTES = 4
INDEX_LOADS_PER_STEP = 2
"""Index loads of a loop step staged in shared memory: the top-k positions and the block-table entries."""


FP8_NUM_STAGES = 1
"""Pipelining depth of every launch on the fp8_ds_mla cache: Triton stages the byte, scale and rope loads
of the dequantization, so the bf16 configurations' depth (7) asks for 233-410 KB of shared memory at 17
of 28 H200 benchmark points (OutOfResources, 2026-11-30); unpipelined fits all of them. The fp8 cache is
served by the decode kernel on Hopper; this kernel is its fallback."""


def shared_memory_bytes(config: LaunchConfig, split_iters: int) -> int:
    """Shared memory one program of ``config`` needs, in bytes: an upper bound of what triton 3.6.0 allocates.

    What the kernel keeps in shared memory (sm_90a TTGIR of triton 3.6.0, see :data:`LOAD_CHAIN_LEVELS`):

    * the query tile `[block_h, 576]` bf16 (wgmma reads its A operand there);
    * ``kv_buffers = min((num_stages - 1) // 3 + 1, split_iters)`` KV tiles `[block_n, 576]` bf16, plus as
      many value tiles `[block_n, block_dv]` bf16 when ``block_dv < 512`` (a loop of ``split_iters`` steps
      holds at most that many tiles);
    * ``min(num_stages - 1, split_iters)`` buffers of each of the two index loads, `[block_n]` int32.

    Exact for the wgmma configurations Triton 3.6.0's compiler report measured on the H200 (2026-11-29): h64/n32/dv512/st7 185,856 B; h64/n32/dv64/st7 (split_iters 8) 198,144 B, the
    "194 KiB" of :func:`default_launch_config`. Above the 16-head mma.sync ones, which keep the query in
    registers: h16/n32/dv512 (split_iters 4) 94,720 B measured (bound 130,048 B), h16/n64/dv64 with one step 51,200 B
    (bound 100,864 B).

    Parameters
    ----------
    config : LaunchConfig
    split_iters : int
        Loop steps per program: ``plan_launch(...).cols_per_split // config.block_n``.
    """
    steps = max(split_iters, 1)
    kv_buffers = min((config.num_stages - 1) // LOAD_CHAIN_LEVELS + 1, steps)
    value_tile = config.block_n * config.block_dv if config.block_dv < KV_LORA_RANK else 0
    index_buffers = min(max(config.num_stages - 1, 1), steps)
    return (
        config.block_h * KV_CACHE_HEAD_SIZE * BF16_BYTES
        + kv_buffers * (config.block_n * KV_CACHE_HEAD_SIZE + value_tile) * BF16_BYTES
        + index_buffers * INDEX_LOADS_PER_STEP * config.block_n * INT32_BYTES
    )


def default_launch_configs(num_sms: int, topk: int) -> List[LaunchConfig]:
    """Every configuration :func:`default_launch_config` returns on a GPU of ``num_sms`` SMs for top-k width
    ``topk``, over all head counts ``1 <= N <= 128`` and token counts ``T >= 1`` (once ``2 * G > num_sms``
    every larger ``T`` gets rule 2's configuration)."""
    configs = set()
    for num_heads in range(1, MAX_NUM_HEADS + 1):
        for num_tokens in itertools.count(1):
            config = default_launch_config(num_tokens, num_heads, num_sms, topk)
            configs.add(config)
            if 2 * num_tokens * triton.cdiv(num_heads, config.block_h) > num_sms:
                break
    return sorted(configs, key=dataclasses.astuple)


@functools.lru_cache(maxsize=None)
def max_default_shared_memory_bytes(num_sms: int, topk: int) -> int:
    """Most shared memory (:func:`shared_memory_bytes`) any of :func:`default_launch_configs` needs, in bytes."""
    def split_iters(config: LaunchConfig) -> int:
        return plan_launch(config.block_h, topk, config).cols_per_split // config.block_n  # independent of N

    return max(shared_memory_bytes(c, split_iters(c)) for c in default_launch_configs(num_sms, topk))


def _pow2_floor(x: int) -> int:
    return 1 << (max(x, 1).bit_length() - 1)


def plan_launch(num_heads: int, topk: int, config: LaunchConfig) -> LaunchPlan:
    """Resolve ``config`` for ``N`` heads and top-k width ``topk``: drop empty splits, size the merge tile.

    The top-k row is cut into ``ceil(K / cols_per_split)`` splits of ``cols_per_split`` columns, a
    multiple of ``block_n``, so the effective split count may be below ``config.num_splits``.
    """
    cols_per_split = triton.cdiv(triton.cdiv(max(topk, 1), config.num_splits), config.block_n) * config.block_n
    num_splits = max(triton.cdiv(topk, cols_per_split), 1)
    split_pad = triton.next_power_of_2(num_splits)
    merge_elems = MERGE_ELEMS_PER_THREAD * THREADS_PER_WARP * config.num_warps  # [split_pad, merge_h, merge_dv]
    merge_dv = min(config.block_dv, _pow2_floor(merge_elems // split_pad))
    merge_h = min(config.block_h, _pow2_floor(merge_elems // (split_pad * merge_dv)))
    return LaunchPlan(
        config=config,
        num_splits=num_splits,
        cols_per_split=cols_per_split,
        head_blocks=triton.cdiv(num_heads, config.block_h),
        column_blocks=KV_LORA_RANK // config.block_dv,
        split_pad=split_pad,
        merge_h=merge_h,
        merge_dv=merge_dv,
    )


# --------------------------------------------------------------------------------------------------
# Split-KV workspace


class SplitWorkspace:
    """Persistent scratch of the split-KV merge: partial outputs, partial LSEs, arrival counters.

    The counters are zero between launches: the kernel's merging program resets its group's counter.
    Buffers never move once allocated, so a CUDA graph captured with a workspace replays correctly as
    long as the workspace lives and is large enough for the captured shapes. One workspace serves one
    stream at a time (concurrent launches on two streams would share counters).

    Parameters
    ----------
    device : torch.device
        Where the kernel runs.
    partial_values : int
        fp32 partial-output values, ``T * splits * head_blocks * block_h * 512`` for a call.
    partial_lse_values : int
        fp32 partial LSE values, ``T * splits * head_blocks * column_blocks * block_h``.
    num_counters : int
        int32 arrival counters, ``T * head_blocks * column_blocks``.

    Example
    -------
    >>> ws = SplitWorkspace.for_max_tokens(64, num_heads=16, device=torch.device("cuda"), topk=2048)
    >>> out = sparse_mla_attention(..., workspace=ws)   # any T <= 64, default configuration
    """

    def __init__(self, device: torch.device, partial_values: int, partial_lse_values: int, num_counters: int):
        self.partial_out = torch.empty(max(partial_values, 1), dtype=torch.float32, device=device)  # [...] fp32
        self.partial_lse = torch.empty(max(partial_lse_values, 1), dtype=torch.float32, device=device)  # [...] fp32
        self.counters = torch.zeros(max(num_counters, 1), dtype=torch.int32, device=device)  # [...] int32, zero

    @staticmethod
    def sizes(num_tokens: int, num_heads: int, topk: int, config: LaunchConfig) -> Tuple[int, int, int]:
        """``(partial_values, partial_lse_values, num_counters)`` one call needs (zeros: no split)."""
        plan = plan_launch(num_heads, topk, config)
        if plan.num_splits == 1:
            return 0, 0, 0
        programs = num_tokens * plan.num_programs_per_token
        return (
            programs * config.block_h * config.block_dv,
            programs * config.block_h,
            num_tokens * plan.head_blocks * plan.column_blocks,
        )

    @classmethod
    def for_max_tokens(
        cls, max_num_tokens: int, num_heads: int, device: torch.device, topk: int, num_sms: Optional[int] = None
    ) -> "SplitWorkspace":
        """A workspace for every call of up to ``max_num_tokens`` tokens under :func:`default_launch_config`.

        ``num_sms`` defaults to the device's SM count. At most 17.3 MB of partials on an H200 (132 SMs), any N <= 128.
        """
        sms = device_info.num_sms(device) if num_sms is None else num_sms
        need = [0, 0, 0]
        for t in range(1, max_num_tokens + 1):
            config = default_launch_config(t, num_heads, sms, topk)
            need = [max(a, b) for a, b in zip(need, cls.sizes(t, num_heads, topk, config))]
            if 2 * t * triton.cdiv(num_heads, config.block_h) > sms:
                break  # larger batches never split (rule 2)
        return cls(device, *need)

    def fits(self, sizes: Tuple[int, int, int]) -> bool:
        """Whether this workspace holds a call of the given :meth:`sizes`."""
        have = (self.partial_out.numel(), self.partial_lse.numel(), self.counters.numel())
        return all(n <= h for n, h in zip(sizes, have))


# --------------------------------------------------------------------------------------------------
# Public entry point


def sparse_mla_attention(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    softmax_scale: float,
    *,
    out: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
    return_lse: bool = False,
    num_splits: Optional[int] = None,
    config: Optional[LaunchConfig] = None,
    workspace: Optional[SplitWorkspace] = None,
    topk_length: Optional[torch.Tensor] = None,
    dcp: DcpShard = NO_DCP,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Sparse MLA attention of DeepSeek-V3.2 over request-local top-k positions, in one kernel launch.

    For token ``t`` and head ``h``, over the valid positions ``p`` of ``topk_indices[t]`` (slot
    ``s = block_table[req_id[t], p // 64] * 64 + p % 64``):
    ``score_p = (q_nope[t,h]·c_kv[s] + q_rope[t,h]·k_rope[s]) * softmax_scale``,
    ``out[t,h] = Σ_p softmax(score)_p c_kv[s]``, ``lse[t,h] = log Σ_p exp(score_p)``.
    A position is valid when ``0 <= p < token_kv_len[t]``, its column is below ``topk_length[t]`` (when
    given), this rank owns it (``dcp``; ``p`` then stands for its rank-local position, see
    :mod:`sparse_mla.topk_filter`), ``p // 64 < max_blocks`` and the block id lies in ``[0, num_blocks)``;
    others (``-1`` included) are skipped wherever they sit in the row.
    A token without a valid position gets ``out = 0`` and ``lse = -inf``.

    No host synchronization and, with ``out`` (and ``lse``) given and a :class:`SplitWorkspace` large
    enough, no allocation: the call can be captured in a CUDA graph and replayed with new contents.

    Parameters
    ----------
    q_nope : torch.Tensor
        `[T, N, 512]` bf16, ``1 <= N <= 128``; unit stride in the last dim, any other strides (views of
        a `[T, N, 576]` tensor, or vLLM's ``ql_nope``: a `[N, T, 512]` bmm result transposed to `[T, N, 512]`).
    q_rope : torch.Tensor
        `[T, N, 64]` bf16, unit stride in the last dim.
    kv_cache : torch.Tensor
        `[num_blocks, 64, 576]` bf16, unit stride in the last dim; any block and slot strides (a vLLM
        cache whose blocks sit further apart than `64 * 576` elements is read in place);
        slot = `[c_kv (512) | k_rope (64)]`. Or the uint8 fp8_ds_mla cache `[num_blocks, 64, 656]`
        (:mod:`sparse_mla.fp8_ds_mla`), contiguous slots with a block stride of whole slots
        (:func:`sparse_mla.checks.check_kv_cache_slot_strides`), 4-byte aligned; read in place, each gathered
        slot dequantized in registers.
    topk_indices : torch.Tensor
        `[T, K]` int32 positions inside each token's request, ``-1`` = none (K = 2048 for DeepSeek-V3.2).
    req_id : torch.Tensor
        `[T]` int32 row of ``block_table`` of each token; outside ``[0, R)`` = no valid position.
    token_kv_len : torch.Tensor
        `[T]` int32 causal length of each token.
    block_table : torch.Tensor
        `[R, max_blocks]` int32 cache block ids of each request.
    softmax_scale : float
        Score scale (DeepSeek-V3.2: ``192 ** -0.5``, :data:`sparse_mla.constants.DEEPSEEK_V32_SOFTMAX_SCALE`).
    out : torch.Tensor, optional
        `[T, N, 512]` bf16 output buffer, unit stride in the last dim. Allocated when ``None``.
    lse : torch.Tensor, optional
        `[T, N]` fp32 buffer for the natural-log LSE; when given, the LSE is written there.
    return_lse : bool
        Return ``(out, lse)`` instead of ``out`` (``lse`` allocated when not given).
    num_splits : int, optional
        Overrides the split count of the launch configuration (programs per token's top-k row).
    config : LaunchConfig, optional
        Full launch configuration; :func:`default_launch_config` of ``(T, N, SM count, K)`` when ``None``.
    workspace : SplitWorkspace, optional
        Split-KV scratch. When ``None`` and the configuration splits, one is allocated for this call
        (zeroed counters: one more launch, and an allocation in a captured graph's private pool); pass
        one (e.g. :meth:`SplitWorkspace.for_max_tokens`) to reuse it across calls.
    topk_length : torch.Tensor, optional
        `[T]` int32: entries at columns ``>= topk_length[t]`` count as ``-1`` (a device tensor: no host sync).
    dcp : DcpShard
        This rank's decode-context-parallel shard of the cache (:mod:`sparse_mla.topk_filter`); the
        positions in ``topk_indices`` and ``token_kv_len`` are global, ``block_table`` the rank's.

    Returns
    -------
    torch.Tensor or tuple of torch.Tensor
        ``out`` `[T, N, 512]` bf16, and ``lse`` `[T, N]` fp32 when ``return_lse``.

    Raises
    ------
    TypeError
        A tensor has another dtype.
    ValueError
        A shape, stride or device is wrong, ``N`` is outside ``[1, 128]``, the launch configuration is
        invalid, or the given workspace is too small.

    Example
    -------
    >>> out = sparse_mla_attention(q_nope, q_rope, kv_cache, topk, req_id, token_kv_len, block_table,
    ...                            DEEPSEEK_V32_SOFTMAX_SCALE)   # [T, N, 512] bf16
    """
    device = kernel_device_type()
    check_tensor("q_nope", q_nope, shape=(None, None, KV_LORA_RANK), dtype=torch.bfloat16, device=device)
    num_tokens, num_heads, _ = q_nope.shape
    check_num_heads("q_nope", num_heads)
    check_tensor("q_rope", q_rope, shape=(num_tokens, num_heads, QK_ROPE_HEAD_DIM), dtype=torch.bfloat16)
    if kv_cache_format.check_kv_cache("kv_cache", kv_cache) is kv_cache_format.FP8_DS_MLA:
        check_kv_cache_slot_strides("kv_cache", kv_cache)
    check_tensor("topk_indices", topk_indices, shape=(num_tokens, None), dtype=torch.int32)
    check_tensor("req_id", req_id, shape=(num_tokens,), dtype=torch.int32)
    check_tensor("token_kv_len", token_kv_len, shape=(num_tokens,), dtype=torch.int32)
    check_tensor("block_table", block_table, shape=(None, None), dtype=torch.int32)
    check_topk_length(topk_length, num_tokens, q_nope.device)
    if out is None:
        out = torch.empty(num_tokens, num_heads, KV_LORA_RANK, dtype=torch.bfloat16, device=q_nope.device)
    check_tensor("out", out, shape=(num_tokens, num_heads, KV_LORA_RANK), dtype=torch.bfloat16)
    if lse is None and return_lse:
        lse = torch.empty(num_tokens, num_heads, dtype=torch.float32, device=q_nope.device)
    if lse is not None:
        check_tensor("lse", lse, shape=(num_tokens, num_heads), dtype=torch.float32)
    tensors = dict(q_nope=q_nope, q_rope=q_rope, kv_cache=kv_cache, topk_indices=topk_indices, req_id=req_id,
                   token_kv_len=token_kv_len, block_table=block_table, out=out)
    check_same_device(**tensors, **({} if lse is None else {"lse": lse}))
    for name in ("q_nope", "q_rope", "kv_cache", "out"):
        check_unit_last_stride(name, tensors[name])

    topk = topk_indices.shape[1]
    if config is None:
        config = default_launch_config(num_tokens, num_heads, device_info.num_sms(q_nope.device), topk)
    if num_splits is not None:
        config = dataclasses.replace(config, num_splits=num_splits)
    _check_config(config)
    plan = plan_launch(num_heads, topk, config)
    sizes = SplitWorkspace.sizes(num_tokens, num_heads, topk, config)
    if workspace is None:
        workspace = SplitWorkspace(q_nope.device, *sizes) if plan.num_splits > 1 and num_tokens else None
    elif not workspace.fits(sizes):
        raise ValueError(
            f"sparse_mla: argument 'workspace' expected room for (partial values, partial LSEs, counters) = "
            f"{sizes}, got {(workspace.partial_out.numel(), workspace.partial_lse.numel(), workspace.counters.numel())}"
        )
    launch(plan, q_nope, q_rope, kv_cache, topk_indices, req_id, token_kv_len, block_table, softmax_scale,
           out, lse, workspace, topk_length, dcp)
    return (out, lse) if return_lse else out


def launch(
    plan: LaunchPlan,
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    softmax_scale: float,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    workspace: Optional[SplitWorkspace],
    topk_length: Optional[torch.Tensor] = None,
    dcp: DcpShard = NO_DCP,
):
    """Launch the kernel of a resolved :class:`LaunchPlan` on arguments the caller has checked.

    The per-layer half of :func:`sparse_mla_attention` (same arguments and meanings): no checks, no
    planning, so a caller that plans once per step (the backend's metadata builder) and validates once
    per call pays only for the launch. ``workspace`` must hold :meth:`SplitWorkspace.sizes` of the
    call when ``plan.num_splits > 1`` (unused otherwise); ``lse`` is written when given.

    Returns
    -------
    triton.compiler.CompiledKernel or None
        The launched kernel (``None`` when ``T = 0``: nothing is launched).
    """
    num_tokens, num_heads = q_nope.shape[0], q_nope.shape[1]
    if num_tokens == 0:
        return None
    topk = topk_indices.shape[1]
    config = plan.config
    split = plan.num_splits > 1
    if split:
        part_out, part_lse, counters = workspace.partial_out, workspace.partial_lse, workspace.counters
    else:
        part_out = part_lse = counters = out  # not dereferenced: SPLIT is off
    lse_arg = out if lse is None else lse  # not dereferenced without HAS_LSE
    fp8 = kv_cache.dtype == kv_cache_format.FP8_DS_MLA.dtype

    grid = (num_tokens * plan.num_programs_per_token,)
    compiled = _sparse_mla_attention_kernel[grid](
        q_nope, q_nope.stride(0), q_nope.stride(1),
        q_rope, q_rope.stride(0), q_rope.stride(1),
        kv_cache, kv_cache.stride(0), kv_cache.stride(1),
        topk_indices, topk_indices.stride(0), topk_indices.stride(1),
        req_id, req_id.stride(0),
        token_kv_len, token_kv_len.stride(0),
        block_table, block_table.stride(0), block_table.stride(1),
        topk_indices if topk_length is None else topk_length,  # not dereferenced without HAS_TOPK_LENGTH
        out, out.stride(0), out.stride(1),
        lse_arg, lse_arg.stride(0), lse_arg.stride(1),
        part_out, part_lse, counters,
        num_heads, topk, block_table.shape[0], block_table.shape[1], kv_cache.shape[0],
        plan.num_splits,
        dcp.rank,
        softmax_scale * LOG2_E,
        LORA_RANK=KV_LORA_RANK,
        ROPE_DIM=QK_ROPE_HEAD_DIM,
        BLOCK_SIZE=KV_BLOCK_SIZE,
        LN2=LN_2,
        BLOCK_H=config.block_h,
        BLOCK_N=config.block_n,
        BLOCK_DV=config.block_dv,
        SPLIT_ITERS=plan.cols_per_split // config.block_n,
        SPLIT=split,
        SPLIT_PAD=plan.split_pad,
        MERGE_H=plan.merge_h,
        MERGE_DV=plan.merge_dv,
        HAS_LSE=lse is not None,
        HAS_TOPK_LENGTH=topk_length is not None,
        DCP_WORLD_SIZE=dcp.world_size,
        DCP_INTERLEAVE=dcp.interleave,
        DOT_FP32=dot_in_fp32(),
        BF16_BY_BITS=round_bf16_by_bits(),
        FP8_DS_MLA=fp8,
        SCALE_OFFSET=FP8_DS_MLA_SCALE_OFFSET,
        ROPE_OFFSET=FP8_DS_MLA_ROPE_OFFSET,
        GROUP_SIZE=FP8_DS_MLA_GROUP_SIZE,
        num_warps=config.num_warps,
        num_stages=FP8_NUM_STAGES if fp8 else config.num_stages,
    )
    return compiled
