"""The latency-first sparse-MLA decode kernels (``cc/decode/``) as the torch op
``sparse_mla_decode::fwd``: its launch plan, its split-KV workspace and the call. The op takes the plan
as one ``int[]`` value (:meth:`DecodePlan.op_value`) and one caller-owned uint8 workspace of at least
:func:`workspace_bytes` bytes, which it carves itself (the op ``workspace_layout`` says where). The same
library holds the metadata builder's kernel (:mod:`sparse_mla.ops.token_metadata`).

One launch per call (two on the wide kernel with several splits): each CTA gathers whole slots of
its slice of a token's top-k row and attends them on its own; the 8 CTAs of a cluster merge their
slices through distributed shared memory (small grids), or one CTA takes a whole split (large
grids), and (when a token's positions are split over several clusters) the last-arriving CTA merges
the splits (the wide kernel: a second launch, 32 CTAs per token and head group). A CTA serves 16 or
32 heads (``cc/decode/narrow/narrow_kernel.cuh``), or 64 on the wide kernel
(``cc/decode/wide/wide_kernel.cuh``, ``head_tiles`` 4) and on the tile64 kernel (one split,
``cc/decode/tile64/tile64_kernel.cuh``), which gather and dequantize each slot once for all of them.
The kernel files' headers say how.

The op library is built by Bazel under ``--config=sm90`` (``//cc:libsparse_mla_decode.so`` beside
this package in the runfiles, or in the installed wheel) against PyTorch's stable ABI: one build
loads in every torch from 2.11 on. Elsewhere, point ``SPARSE_MLA_DECODE_LIBRARY`` at it.

Example
-------
>>> plan = decode.plan(num_tokens=1, num_heads=16, num_sms=132)
>>> workspace = decode.workspace_for_max_tokens(16, 16, 132, device=q_nope.device)
>>> decode.sparse_mla_decode(q_nope, q_rope, kv_cache, topk_indices, req_id, token_kv_len,
...                          block_table, DEEPSEEK_V32_SOFTMAX_SCALE, plan, workspace, out=out)
"""

import dataclasses
import functools
from typing import Callable, Iterable, List, NamedTuple, Optional, Tuple

import torch

from sparse_mla.checks import check_int, check_num_heads
from sparse_mla.constants import INDEX_TOPK
from sparse_mla.ops.library import Availability, call_op, load_once, op_availability, tensor_device_index
from sparse_mla.topk_filter import NO_DCP, DcpShard

# The tuning constants below each say why in a line; docs/decode-tuning.md has the H200 measurements behind them.

LIBRARY_NAME = "libsparse_mla_decode.so"
LIBRARY_ENV = "SPARSE_MLA_DECODE_LIBRARY"

CLUSTER_SIZE = 8
"""CTAs per cluster of a small grid, i.e. slices of one split; rank r merges output columns
[64 r, 64 r + 64) (``kClusterSize`` in cc/decode/params.h). The workspace is laid out for it."""

CLUSTER_SIZES = (CLUSTER_SIZE, 1)
"""CTAs per split the kernel is built for: 8 (slices merged through distributed shared memory) or 1."""

SINGLE_CTA_MIN_GROUPS = 16
"""From this ``T * head_groups`` on, one CTA per split beats clusters of 8 on the H200."""

CLUSTER_ONE_SPLIT_GROUPS = (23, 30)
"""``T * head_groups`` in this range (inclusive) takes clusters of 8 again: one split of 16 stages per CTA."""

HEAD_TILE_ROWS = 16
"""Query heads per tensor-core row tile (mma m16n8k16); a CTA holds 1, 2 or (wide kernel) 4 tiles."""

HEAD_TILES = (1, 2, 4)
"""Head tiles per CTA the kernels are built for (16, 32 or 64 heads)."""

NARROW_KERNEL = 0
"""The 16/32-head kernel (``DecodeKernel::kNarrow``, cc/decode/narrow/): mma.sync, 1 or 2 head tiles."""

WIDE_KERNEL = 1
"""The 64-head kernel (``DecodeKernel::kWide``, cc/decode/wide/): wgmma with producer warpgroups."""

WIDE_HEAD_TILES = 4
"""The wide kernel's head tiles (``wide::kHeadTiles``): 64 heads per CTA, 32-position stages
(``WIDE_CTA_CHUNK``), one CTA per split, one CTA per SM (its consumers' 128 accumulators a lane)."""

WIDE_CTA_CHUNK = 32

SWAP_AB_KERNEL = 2
"""The swap-AB kernel (``DecodeKernel::kSwapAb``, cc/decode/swap_ab/): 16 or 32 heads per CTA (``head_tiles`` in
:data:`SWAP_AB_HEAD_TILES`) as wgmma's N, the positions its M, 64-position tiles (``SWAP_AB_CTA_CHUNK``), one CTA per
split."""

SWAP_AB_HEAD_TILES = (1, 2)

SWAP_AB_CTA_CHUNK = 64

TILE64_KERNEL = 3
"""The 64-head tile kernel (``DecodeKernel::kTile64``, cc/decode/tile64/): 64 heads per CTA (``head_tiles``
:data:`WIDE_HEAD_TILES`) on 64-position tiles (:data:`TILE64_CTA_CHUNK`), one CTA per (split, token, head group), splits
of at most :data:`TILE64_MAX_POSITIONS` positions merged by the wide kernel's split merge. The plan takes it where it
would take the wide kernel from :data:`TILE64_MIN_TOKEN_GROUPS` on, with the wide kernel's split rule."""

TILE64_CTA_CHUNK = 64

TILE64_MIN_TOKEN_GROUPS = 32
"""The plan takes the tile64 kernel for the wide kernel from this ``T * head_groups`` on. On an H100 (2026-12-07,
results/2026-12-07-h100/tile64-split/) its splits took 1.04-1.29x the wide kernel's time at 1 to 16 (T = 1, 4 at
N = 64, 128; T = 16 at N = 64) and 0.89-0.92x at 32 (T = 16, N = 128)."""

TILE64_MAX_POSITIONS = 2048
"""The tile64 kernel's most positions per split (``tile64::kMaxPositions``): its slot ids fill 8 KiB of its 226 KiB of
shared memory (Hopper allows 227 KiB a CTA)."""

SWAP_AB_MIN_TOKENS = 16
"""The plan takes the swap-AB kernel for ``N <= 16`` from this ``T`` on (below, the 16/32-head kernel's clusters
are faster: its merges are shorter than the swap-AB kernel's in-kernel merge of many splits)."""

SWAP_AB_32_MIN_TOKENS = 32
"""The plan takes the swap-AB kernel with 32 heads per CTA for ``16 < N <= 32`` from this ``T`` on, where it is faster
than the wide kernel's 64 heads (3/4 or 1/2 of them padding); docs/decode-tuning.md."""

MAX_SPLITS = 64
"""Most splits of one token's positions (``kMaxSplits``)."""

MAX_POSITIONS_PER_SPLIT = 8192
"""Most positions of one split on the first kernel (``kMaxPositionsPerSplit``): its slot ids sit in shared memory."""

MAX_TOPK = MAX_SPLITS * MAX_POSITIONS_PER_SPLIT
"""The widest top-k row the plan serves: every split at its most positions."""

CTA_CHUNKS = (16, 32)
"""Positions per pipeline stage of one CTA the kernel is built for; a split covers a multiple of
``cluster_size * cta_chunk`` positions."""

LARGE_CHUNK_MAX_GROUPS = 8
"""Up to this ``T * head_groups``, 32-position stages are faster; larger grids fit more CTAs per SM with 16."""

CLUSTER_LARGE_CHUNK_MIN_GROUPS = 11
"""In clusters of 8, from this ``T * head_groups`` on, one split of 32-position stages (16 would split 3 ways)."""

SMALL_CHUNK_MIN_GROUPS = 32
"""With one CTA per split, 16-position stages from this ``T * head_groups`` on (more CTAs share an SM), 32 below."""

FP8_THREE_CTAS_MIN_GROUPS = 48
"""fp8_ds_mla, 16 heads per CTA: 3 CTAs per SM from this ``T * head_groups`` on (2 leave SMs idle in a wave)."""

FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM = 4
"""fp8_ds_mla, first kernel: an unsplit grid of (1, this] CTAs per SM is split by the wave model past the cap."""

SWAP_AB_UNCAPPED_MAX_WAVES = 2
"""The swap-AB kernel: an unsplit grid of (1, this] waves is split by the wave model past the cap."""

SWAP_AB_SPLIT_COST_IN_POSITIONS = 224
"""The swap-AB kernel, uncapped: each split past the first costs this many positions per CTA and head tile (its
16 x 512 fp32 partial per head tile written, then merged by the CTA that arrives last)."""

UNCAPPED_MAX_SPLITS = 8
"""Most splits the uncapped wave model weighs: it never chose more on the H200; each costs host time per plan."""

UNCAPPED_SPLIT_COST_PER_HEAD = 1
"""Uncapped, each split past the first costs this many positions per head of a CTA (its partial, merged again)."""

WIDE_PADDED_MIN_TOKENS = 2
"""The wide kernel (the tile64 kernel from ``TILE64_MIN_TOKEN_GROUPS`` on) serves every ``N > 16`` from this ``T`` on,
where it is faster than 32 heads per CTA or groups of 16 (docs/decode-tuning.md)."""

ONE_TOKEN_MAX_HEADS_OF_16 = 48
"""Below ``WIDE_PADDED_MIN_TOKENS`` (T = 1) the first kernel with 16 heads per CTA (``ceil(N / 16)`` head groups)
serves ``16 < N <=`` this, 0.82-0.95x the time of 32 heads per CTA or the wide kernel on the H200; the wide kernel
above (N = 64: 1.02-1.04x; docs/decode-tuning.md)."""

WIDE_MAX_TOPK = 4096
"""Above this top-k the wide kernel is left out: a split's slot ids share its ~200 KB of shared memory."""

WAVE_COST_IN_POSITIONS = 64
"""A wave's fixed cost in positions per CTA: ~5 µs of index translation, first gather and merges."""

WIDE_PARTIAL_COST_IN_POSITIONS = 1
"""The wide kernel's wave model charges each partial output (one per token group and split, which the split merge
kernel reads back) this many positions of a CTA: at T * head_groups <= 2 it takes 32 splits of 64 positions, not 64."""


@dataclasses.dataclass(frozen=True)
class DecodePlan:
    """Launch configuration of one call; depends only on :func:`plan`'s arguments.

    Grid: ``cluster_size x num_splits x (num_tokens * head_groups)`` CTAs of 256 threads
    (512 on the wide kernel: two producer warpgroups beside its two consumers; the tile64 kernel's: 384 on the
    bf16 cache, 512 on fp8_ds_mla; the swap-AB kernel's: 256 on the bf16 cache, 384 on fp8_ds_mla).
    """

    num_tokens: int
    num_heads: int
    head_tiles: int  # heads per CTA = 16 * head_tiles, in HEAD_TILES (4: the wide and tile64 kernels; swap-AB: 1, 2)
    cta_chunk: int  # positions per pipeline stage of one CTA, in CTA_CHUNKS (the swap-AB and tile64 kernels: 64)
    head_groups: int  # ceil(num_heads / heads per CTA)
    num_splits: int  # position splits per token (1: no workspace, no merge)
    positions_per_split: int  # multiple of cluster_size * cta_chunk
    kernel: int  # the kernel that runs: NARROW_KERNEL, WIDE_KERNEL, SWAP_AB_KERNEL or TILE64_KERNEL
    cluster_size: int = CLUSTER_SIZE  # CTAs per split, in CLUSTER_SIZES

    @property
    def heads_per_cta(self) -> int:
        return HEAD_TILE_ROWS * self.head_tiles

    @property
    def num_ctas(self) -> int:
        return self.cluster_size * self.num_splits * self.num_tokens * self.head_groups

    def op_value(self) -> List[int]:
        """The plan as the ops take it: its :data:`PLAN_FIELDS` in that order (``head_groups`` follows from them)."""
        return [getattr(self, field) for field in PLAN_FIELDS]


PLAN_FIELDS = ("kernel", "num_tokens", "num_heads", "head_tiles", "cta_chunk", "cluster_size", "num_splits",
               "positions_per_split")
"""The order of the ops' ``int[] plan`` (``PlanField`` in cc/decode/decode_plan.h)."""


def plan(
    num_tokens: int,
    num_heads: int,
    num_sms: int,
    topk: int = INDEX_TOPK,
    ctas_per_sm: Optional[int] = None,
    cluster_capacity: Optional[Callable[[DecodePlan], int]] = None,
    cluster_size: Optional[int] = None,
    cta_chunk: Optional[int] = None,
    head_tiles: Optional[int] = None,
    fp8_ds_mla: bool = False,
    kernel: Optional[int] = None,
) -> DecodePlan:
    """Split each token's ``topk`` positions just enough to give every SM ``ctas_per_sm`` CTAs.

    Heads per CTA (``16 * head_tiles``, unless given): 16 for ``N <= 16``; for ``N > 16`` while
    ``topk <= WIDE_MAX_TOPK``, 16 (``ceil(N / 16)`` head groups) below ``T =`` ``WIDE_PADDED_MIN_TOKENS`` up to
    ``N =`` :data:`ONE_TOKEN_MAX_HEADS_OF_16`, else 64 (the wide kernel); else 32. The wide kernel has one stage
    size (32) and one CTA per split, and aims at 1 CTA per SM. Stage of a CTA:
    32 positions while ``T * head_groups <= LARGE_CHUNK_MAX_GROUPS``, in clusters of 8 from
    ``CLUSTER_LARGE_CHUNK_MIN_GROUPS`` on, and with one CTA per split while
    ``T * head_groups < SMALL_CHUNK_MIN_GROUPS``, else 16 (unless given). CTAs per split
    (``cluster_size``, unless given): 8 below ``T * head_groups = SINGLE_CTA_MIN_GROUPS`` and within
    ``CLUSTER_ONE_SPLIT_GROUPS``, else 1. A
    split covers a multiple of ``cluster_size * cta_chunk`` positions (one stage of each of its CTAs).
    Splits ``s = floor(num_sms * ctas_per_sm / (cluster_size * T * head_groups))`` clamped to
    ``[1, min(64, topk / (cluster_size * cta_chunk))]``, then positions per split ``ceil(topk / s)``
    rounded up to that granule (and ``s`` reduced to the splits that still hold positions); never fewer
    splits than keep a split within :data:`MAX_POSITIONS_PER_SPLIT` (the wide kernel: :data:`WIDE_MAX_TOPK`).
    ``ctas_per_sm`` defaults to 1 while ``T * head_groups <= 2`` or on the wide kernel, and 2 above (measured on
    the H200, docs/decode-tuning.md), except on the fp8_ds_mla cache
    (``fp8_ds_mla``) with 16 heads per CTA from ``T * head_groups = FP8_THREE_CTAS_MIN_GROUPS`` on: 3. Example
    (H200, 132 SMs, N = 16, topk 2048): T = 1 → 8 splits of 256 positions (64 CTAs of 32 positions),
    T = 8 → 4 splits of 512.

    Kernel (``kernel``, unless given): the swap-AB kernel (:data:`SWAP_AB_KERNEL`: 16 heads per CTA, 64-position
    tiles, one CTA per split, aiming at 1 CTA per SM, the same split rule but for :data:`SWAP_AB_UNCAPPED_MAX_WAVES`)
    for ``N <= 16`` from ``T =`` :data:`SWAP_AB_MIN_TOKENS` on, and with 32 heads per CTA for ``16 < N <= 32`` from
    ``T =`` :data:`SWAP_AB_32_MIN_TOKENS` on, where no ``head_tiles``, ``cluster_size`` or ``cta_chunk`` is given;
    the swap-AB kernel asked for without ``head_tiles`` takes :func:`narrow_head_tiles`; otherwise
    the one ``head_tiles`` names; where none of the four is given and that is the wide kernel from
    ``T * head_groups =`` :data:`TILE64_MIN_TOKEN_GROUPS` on, the tile64 kernel (:data:`TILE64_KERNEL`: the wide
    kernel's split rule on 64-position granules, a split within :data:`TILE64_MAX_POSITIONS`; with one split 12-28 %
    faster on the H200, docs/decode-kernels.md). A ``kernel``
    given without ``head_tiles`` takes its own: the first kernel's for ``num_heads`` (:func:`narrow_head_tiles`), the
    wide kernel's :data:`WIDE_HEAD_TILES`, the tile64 kernel's.

    ``cluster_capacity(candidate)``, when given, is the number of clusters (CTAs, for ``cluster_size`` 1) of
    a candidate plan's kernel configuration the device runs at once (:func:`max_active_clusters`).
    A cluster's 8 CTAs must share one GPC, so fewer clusters fit than ``SMs / 8 * CTAs per SM``
    suggests, and a grid one cluster too large runs twice as long. The splits are then chosen, up to
    the count above, to minimize waves x (:data:`WAVE_COST_IN_POSITIONS` + positions per CTA), plus, for the wide
    kernel, :data:`WIDE_PARTIAL_COST_IN_POSITIONS` per partial output (``T * head_groups * splits``), the
    fewest splits among equals. On the fp8_ds_mla cache the count goes up to
    :data:`UNCAPPED_MAX_SPLITS` instead, each split beyond the first charged
    :data:`UNCAPPED_SPLIT_COST_PER_HEAD`, where the first kernel's unsplit grid (one CTA per split) has between 1
    and :data:`FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM` CTAs per SM (the 64-head kernels' never: docs/decode-tuning.md);
    on either cache, where the swap-AB
    kernel's is between 1 and :data:`SWAP_AB_UNCAPPED_MAX_WAVES` waves, each split beyond the first charged
    :data:`SWAP_AB_SPLIT_COST_IN_POSITIONS` per head tile (H200, N <= 16, top-k 2048: 2 splits at T = 133..198).

    Raises
    ------
    TypeError
        ``num_tokens``, ``num_heads``, ``num_sms``, ``topk`` or a given ``ctas_per_sm`` not an int.
    ValueError
        ``num_heads`` outside [1, 128], a negative ``num_tokens`` (0: an all-padding step, nothing
        launched), a non-positive ``num_sms``, ``topk`` or ``ctas_per_sm``, ``topk`` above :data:`MAX_TOPK`,
        ``cluster_size`` not in
        :data:`CLUSTER_SIZES`, ``cta_chunk`` not in :data:`CTA_CHUNKS`, ``head_tiles`` not in
        :data:`HEAD_TILES` (the swap-AB kernel's: :data:`SWAP_AB_HEAD_TILES`), the wide kernel's ``head_tiles`` with
        another stage or cluster size, ``kernel``
        other than :data:`NARROW_KERNEL`, :data:`WIDE_KERNEL`, :data:`SWAP_AB_KERNEL` or :data:`TILE64_KERNEL`, a
        ``kernel`` with the ``head_tiles`` of another, the swap-AB or tile64 kernel with a ``cta_chunk`` or
        ``cluster_size`` of another kernel, or the tile64 kernel with ``topk`` above :data:`TILE64_MAX_POSITIONS` x
        :data:`MAX_SPLITS`.
    """
    num_heads = check_num_heads("num_heads", num_heads)
    num_tokens, num_sms, topk = (check_int(name, value) for name, value in (
        ("num_tokens", num_tokens), ("num_sms", num_sms), ("topk", topk)))
    if ctas_per_sm is not None:
        ctas_per_sm = check_int("ctas_per_sm", ctas_per_sm)
    if topk > MAX_TOPK:
        raise ValueError(f"sparse_mla: argument 'topk' expected at most {MAX_TOPK} (MAX_TOPK), got {topk}")
    if num_tokens < 0:
        raise ValueError(f"sparse_mla: argument 'num_tokens' expected >= 0, got {num_tokens}")
    for name, value in (("num_sms", num_sms), ("topk", topk), ("ctas_per_sm", 1 if ctas_per_sm is None else ctas_per_sm)):
        if value < 1:
            raise ValueError(f"sparse_mla: argument '{name}' expected >= 1, got {value}")
    if kernel is not None and kernel not in (NARROW_KERNEL, WIDE_KERNEL, SWAP_AB_KERNEL, TILE64_KERNEL):
        raise ValueError(f"sparse_mla: argument 'kernel' expected {NARROW_KERNEL}, {WIDE_KERNEL}, {SWAP_AB_KERNEL} or "
                         f"{TILE64_KERNEL}, got {kernel}")
    if kernel == TILE64_KERNEL:
        if head_tiles not in (None, WIDE_HEAD_TILES) or cluster_size not in (None, 1) or cta_chunk not in (
                None, TILE64_CTA_CHUNK):
            raise ValueError(
                f"sparse_mla: argument 'kernel' {kernel} (the tile64 kernel) expected head_tiles {WIDE_HEAD_TILES}, "
                f"cluster_size 1 and cta_chunk {TILE64_CTA_CHUNK}, got {head_tiles}, {cluster_size} and {cta_chunk}")
        return _tile64_plan(num_tokens, num_heads, num_sms, topk, ctas_per_sm, cluster_capacity, fp8_ds_mla)
    chosen = kernel is None and head_tiles is None and cluster_size is None and cta_chunk is None
    if chosen:
        kernel = SWAP_AB_KERNEL if _swap_ab_serves(num_tokens, num_heads) else None
    if kernel == SWAP_AB_KERNEL:
        if head_tiles not in (None,) + SWAP_AB_HEAD_TILES or cluster_size not in (None, 1) or cta_chunk not in (
                None, SWAP_AB_CTA_CHUNK):
            raise ValueError(
                f"sparse_mla: argument 'kernel' {kernel} (the swap-AB kernel) expected head_tiles 1 or 2, cluster_size "
                f"1 and cta_chunk {SWAP_AB_CTA_CHUNK}, got {head_tiles}, {cluster_size} and {cta_chunk}")
        head_tiles = head_tiles or narrow_head_tiles(num_heads)
        cluster_size, cta_chunk, ctas_per_sm = 1, SWAP_AB_CTA_CHUNK, ctas_per_sm or 1
    else:
        if cluster_size is not None and cluster_size not in CLUSTER_SIZES:
            raise ValueError(f"sparse_mla: argument 'cluster_size' expected one of {CLUSTER_SIZES}, got {cluster_size}")
        if cta_chunk is not None and cta_chunk not in CTA_CHUNKS:
            raise ValueError(f"sparse_mla: argument 'cta_chunk' expected one of {CTA_CHUNKS}, got {cta_chunk}")
        if head_tiles is not None and head_tiles not in HEAD_TILES:
            raise ValueError(f"sparse_mla: argument 'head_tiles' expected one of {HEAD_TILES}, got {head_tiles}")
        if head_tiles is None and kernel == NARROW_KERNEL:
            head_tiles = narrow_head_tiles(num_heads)
        elif head_tiles is None and kernel == WIDE_KERNEL:
            head_tiles = WIDE_HEAD_TILES
        elif head_tiles is None:
            head_tiles = _default_head_tiles(num_tokens, num_heads, topk, cluster_size, cta_chunk)
        if kernel is not None and kernel != kernel_for(head_tiles):
            raise ValueError(
                f"sparse_mla: argument 'head_tiles' expected {WIDE_HEAD_TILES if kernel == WIDE_KERNEL else '1 or 2'} "
                f"for kernel {kernel}, got {head_tiles}")
        if head_tiles == WIDE_HEAD_TILES and (cluster_size not in (None, 1) or cta_chunk not in (None, WIDE_CTA_CHUNK)):
            raise ValueError(
                f"sparse_mla: argument 'head_tiles' {head_tiles} (the wide kernel) expected cluster_size 1 and "
                f"cta_chunk {WIDE_CTA_CHUNK}, got {cluster_size} and {cta_chunk}")
        kernel = kernel_for(head_tiles)
    wide = kernel == WIDE_KERNEL
    head_groups = -(-num_heads // (HEAD_TILE_ROWS * head_tiles))
    token_groups = max(num_tokens, 1) * head_groups
    if ctas_per_sm is None:
        three = fp8_ds_mla and head_tiles == 1 and token_groups >= FP8_THREE_CTAS_MIN_GROUPS
        ctas_per_sm = 1 if token_groups <= 2 or wide else (3 if three else 2)
    if chosen and wide and token_groups >= TILE64_MIN_TOKEN_GROUPS:
        return _tile64_plan(num_tokens, num_heads, num_sms, topk, ctas_per_sm, cluster_capacity, fp8_ds_mla)
    if cluster_size is None:
        clustered = token_groups < SINGLE_CTA_MIN_GROUPS or (
            CLUSTER_ONE_SPLIT_GROUPS[0] <= token_groups <= CLUSTER_ONE_SPLIT_GROUPS[1])
        cluster_size = CLUSTER_SIZE if clustered and not wide else 1
    if cta_chunk is None:
        large = (
            token_groups <= LARGE_CHUNK_MAX_GROUPS
            or (cluster_size == CLUSTER_SIZE and CLUSTER_LARGE_CHUNK_MIN_GROUPS <= token_groups < SINGLE_CTA_MIN_GROUPS)
            or (cluster_size == 1 and token_groups < SMALL_CHUNK_MIN_GROUPS)
        )
        cta_chunk = CTA_CHUNKS[1] if large or wide else CTA_CHUNKS[0]
    return _plan_splits(num_tokens, num_heads, num_sms, topk, ctas_per_sm, cluster_capacity, cluster_size, cta_chunk,
                        head_tiles, head_groups, token_groups, fp8_ds_mla, kernel)


def _tile64_plan(
    num_tokens: int, num_heads: int, num_sms: int, topk: int, ctas_per_sm: Optional[int],
    cluster_capacity: Optional[Callable[[DecodePlan], int]], fp8_ds_mla: bool,
) -> DecodePlan:
    """The tile64 kernel's plan: :func:`plan`'s split rule of the wide kernel (1 CTA per SM unless ``ctas_per_sm``) on
    whole 64-position tiles, every split within :data:`TILE64_MAX_POSITIONS`."""
    head_groups = -(-num_heads // (HEAD_TILE_ROWS * WIDE_HEAD_TILES))
    return _plan_splits(num_tokens, num_heads, num_sms, topk, ctas_per_sm or 1, cluster_capacity, 1, TILE64_CTA_CHUNK,
                        WIDE_HEAD_TILES, head_groups, max(num_tokens, 1) * head_groups, fp8_ds_mla, TILE64_KERNEL)


def _plan_splits(
    num_tokens: int, num_heads: int, num_sms: int, topk: int, ctas_per_sm: int,
    cluster_capacity: Optional[Callable[[DecodePlan], int]], cluster_size: int, cta_chunk: int, head_tiles: int,
    head_groups: int, token_groups: int, fp8_ds_mla: bool, kernel: int,
) -> DecodePlan:
    """:func:`plan`'s split count and positions per split for a kernel configuration it has chosen
    (``head_groups = ceil(N / (16 * head_tiles))``, ``token_groups = max(T, 1) * head_groups``: plan's)."""
    wide = kernel in (WIDE_KERNEL, TILE64_KERNEL)  # 64 heads and one CTA per SM
    granule = cluster_size * cta_chunk
    chunks = -(-topk // granule)
    # Enough splits that none holds more positions than its CTA's shared memory keeps slot ids of.
    most_positions = {WIDE_KERNEL: WIDE_MAX_TOPK, TILE64_KERNEL: TILE64_MAX_POSITIONS}.get(kernel,
                                                                                        MAX_POSITIONS_PER_SPLIT)
    min_splits = -(-chunks * granule // most_positions)
    if min_splits > MAX_SPLITS:
        raise ValueError(
            f"sparse_mla: argument 'topk' {topk} needs {min_splits} splits on head_tiles={head_tiles}, "
            f"more than MAX_SPLITS = {MAX_SPLITS}")
    splits = (num_sms * ctas_per_sm) // (cluster_size * token_groups)
    splits = max(min_splits, min(splits, MAX_SPLITS, chunks))

    def candidate(s: int) -> DecodePlan:  # s splits asked for: whole granules each, only splits that hold positions
        positions = -(-chunks // s) * granule
        return DecodePlan(num_tokens=num_tokens, num_heads=num_heads, head_tiles=head_tiles, cta_chunk=cta_chunk,
                          head_groups=head_groups, num_splits=-(-topk // positions), positions_per_split=positions,
                          kernel=kernel, cluster_size=cluster_size)

    if cluster_capacity is not None:

        def positions_and_capacity(s: int) -> Tuple[int, int]:  # a split's positions, clusters per wave
            launch = candidate(s)
            return launch.positions_per_split, max(1, cluster_capacity(launch))

        if kernel == SWAP_AB_KERNEL:  # SWAP_AB_UNCAPPED_MAX_WAVES
            uncapped = 1 < token_groups / positions_and_capacity(1)[1] <= SWAP_AB_UNCAPPED_MAX_WAVES
            split_cost = SWAP_AB_SPLIT_COST_IN_POSITIONS * head_tiles
        else:  # FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM
            uncapped = (fp8_ds_mla and cluster_size == 1 and not wide
                        and 1 < token_groups / num_sms <= FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM)
            split_cost = UNCAPPED_SPLIT_COST_PER_HEAD * HEAD_TILE_ROWS * head_tiles

        def wave_steps(s: int) -> float:  # waves x (fixed cost + positions per CTA + a split's cost), + partials
            positions, capacity = positions_and_capacity(s)
            split = split_cost if uncapped and s > 1 else 0
            per_cta = WAVE_COST_IN_POSITIONS + positions // cluster_size + split
            partials = WIDE_PARTIAL_COST_IN_POSITIONS * token_groups * s if kernel == WIDE_KERNEL and s > 1 else 0
            return -(-token_groups * s // capacity) * per_cta + partials

        if uncapped:
            splits = max(min_splits, min(UNCAPPED_MAX_SPLITS, chunks))
        splits = min(range(min_splits, splits + 1), key=wave_steps)  # the fewest splits among the shortest
    return candidate(splits)


def kernel_for(head_tiles: int) -> int:
    """The kernel that serves ``head_tiles`` head tiles per CTA: :data:`WIDE_KERNEL` for
    :data:`WIDE_HEAD_TILES`, else :data:`NARROW_KERNEL` (the rule of :func:`plan`)."""
    return WIDE_KERNEL if head_tiles == WIDE_HEAD_TILES else NARROW_KERNEL


def narrow_head_tiles(num_heads: int) -> int:
    """Head tiles of the first kernel (``cc/decode/narrow/``) for ``num_heads``: 1 (16 heads
    per CTA) up to 16 heads, else 2 (32 heads per CTA; more heads take several head groups)."""
    return 1 if num_heads <= HEAD_TILE_ROWS else 2


def _swap_ab_serves(num_tokens: int, num_heads: int) -> bool:
    """Whether :func:`plan` takes the swap-AB kernel by default: one 16-head group from ``T =``
    :data:`SWAP_AB_MIN_TOKENS` on, one 32-head group from :data:`SWAP_AB_32_MIN_TOKENS` on."""
    if num_heads <= HEAD_TILE_ROWS:
        return num_tokens >= SWAP_AB_MIN_TOKENS
    return num_heads <= 2 * HEAD_TILE_ROWS and num_tokens >= SWAP_AB_32_MIN_TOKENS


def _wide_serves(num_heads: int) -> bool:
    """Whether the wide kernel is a candidate for ``num_heads``: above 16 (1..16 would be 3/4 padding)."""
    return num_heads > HEAD_TILE_ROWS


def _default_head_tiles(
    num_tokens: int, num_heads: int, topk: int, cluster_size: Optional[int], cta_chunk: Optional[int]
) -> int:
    """:func:`plan`'s head tiles when not given: the wide kernel only where ``topk`` and a caller's
    cluster size or stage size do not rule it out, but for ``N <=`` :data:`ONE_TOKEN_MAX_HEADS_OF_16` below
    :data:`WIDE_PADDED_MIN_TOKENS` (16 heads a CTA)."""
    wide_fits = cluster_size in (None, 1) and cta_chunk in (None, WIDE_CTA_CHUNK) and topk <= WIDE_MAX_TOPK
    if not (wide_fits and _wide_serves(num_heads)):
        return narrow_head_tiles(num_heads)
    if num_tokens < WIDE_PADDED_MIN_TOKENS and num_heads <= ONE_TOKEN_MAX_HEADS_OF_16:
        return 1
    return WIDE_HEAD_TILES


class WorkspaceLayout(NamedTuple):
    """Where a plan's split-KV buffers lie in its workspace, in bytes (all 0 for one split or T = 0): int32 arrival
    counters first (a region of one size for every plan, so that plans sharing a workspace find them
    zero), then fp32 partial outputs `[T, head_groups, splits, heads per CTA, 512]` (the wide kernel stores
    bf16 in their first half from 8 splits on) and fp32 base-2 LSEs `[T, head_groups, splits, 8, heads per
    CTA]`, each at a 256-byte offset. The op ``workspace_layout`` computes it (cc/decode/decode_plan.h)."""

    counters_offset: int
    counters_bytes: int
    partial_out_offset: int
    partial_out_bytes: int
    partial_lse_offset: int
    partial_lse_bytes: int
    total_bytes: int  # the least workspace size of the plan


def workspace_layout(plan: DecodePlan) -> WorkspaceLayout:
    """The layout the op carves from the workspace of ``plan``; needs the op library, not a GPU.

    Raises
    ------
    RuntimeError
        The op library is not built or does not load (the reason is in the message).
    ValueError
        ``plan`` is not one the kernels are built for (the message names the field).
    """
    _load_host_ops()
    return WorkspaceLayout(*call_op(torch.ops.sparse_mla_decode.workspace_layout, plan.op_value()))


def workspace_bytes(plan: DecodePlan) -> int:
    """The least size in bytes of ``plan``'s workspace (0 for one split or T = 0); raises as
    :func:`workspace_layout`."""
    return workspace_layout(plan).total_bytes


def workspace_for_plans(plans: Iterable[DecodePlan], device: torch.device) -> torch.Tensor:
    """A zeroed uint8 workspace `[bytes]` on ``device`` for every plan of ``plans``, the largest's size.

    Its counters are zero and stay zero between launches (the last CTA of each group resets its own), so
    one workspace serves every layer of a step, every plan of ``plans`` and every replay of a CUDA graph,
    on one stream at a time; its address is fixed for CUDA graphs.
    """
    return torch.zeros(max((workspace_bytes(p) for p in plans), default=0), dtype=torch.uint8, device=device)


def workspace_for_max_tokens(
    max_tokens: int, num_heads: int, num_sms: int, device: torch.device, topk: int = INDEX_TOPK,
    ctas_per_sm: Optional[int] = None, cluster_capacity: Optional[Callable[[DecodePlan], int]] = None,
    fp8_ds_mla: bool = False,
) -> torch.Tensor:
    """:func:`workspace_for_plans` of every token count ``1..max_tokens`` of :func:`plan` (without and, when
    given, with ``cluster_capacity``) on the bf16 or (``fp8_ds_mla``) the fp8_ds_mla cache, with either
    cluster size and every kernel that serves ``num_heads`` (the wide and tile64 kernels both).

    Grids smaller than ``num_sms * ctas_per_sm`` CTAs split, which keeps their partial outputs below
    ``num_sms * ctas_per_sm * 64 heads * 512 * 4`` bytes (~17 MB on the H200: the wide kernel aims at
    one CTA per SM). With ``cluster_capacity``, the first kernel's fp8_ds_mla grids of 1 to
    :data:`FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM` CTAs per SM (N = 16: 64.9 MB at T = 495, 4 splits;
    N = 32: 86.5 MB at T = 440, 3 splits), and the swap-AB kernel's of 1 to :data:`SWAP_AB_UNCAPPED_MAX_WAVES`
    waves on either cache (N <= 16: 13.0 MB at T = 198, 2 splits). The counters add 2 MiB (one launch's: 65535
    groups of 8)."""
    shapes = [dict(head_tiles=narrow_head_tiles(num_heads), cluster_size=size) for size in CLUSTER_SIZES]
    if _wide_serves(num_heads) and topk <= WIDE_MAX_TOPK:  # the plans never take them above
        shapes += [dict(head_tiles=WIDE_HEAD_TILES), dict(kernel=TILE64_KERNEL)]
    if _swap_ab_serves(max_tokens, num_heads):
        shapes.append(dict(kernel=SWAP_AB_KERNEL))
    capacities = (None,) if cluster_capacity is None else (None, cluster_capacity)
    # More tokens never split again once a step's plans do not and the swap-AB kernel's grid (one CTA per SM: its
    # two tiles take 144 KB of shared memory) is past SWAP_AB_UNCAPPED_MAX_WAVES waves; on the fp8_ds_mla cache also
    # once the default CTAs per SM is fixed (FP8_THREE_CTAS_MIN_GROUPS) and the first kernel's grid is past
    # FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM CTAs per SM.
    min_tokens = SWAP_AB_UNCAPPED_MAX_WAVES * num_sms if _swap_ab_serves(max_tokens, num_heads) else 0
    if fp8_ds_mla:
        min_tokens = max(min_tokens, FP8_THREE_CTAS_MIN_GROUPS, FP8_NARROW_UNCAPPED_MAX_CTAS_PER_SM * num_sms)
    plans = []
    for t in range(1, max_tokens + 1):
        step = [plan(t, num_heads, num_sms, topk, ctas_per_sm, capacity, fp8_ds_mla=fp8_ds_mla, **shape)
                for shape in shapes for capacity in capacities]
        plans += [p for p in step if p.num_splits > 1]
        if t >= min_tokens and all(p.num_splits == 1 for p in step):
            break
    return workspace_for_plans(plans, device)


def max_active_clusters(candidate: DecodePlan, device_index: int) -> int:
    """Clusters of ``candidate``'s kernel configuration (kernel, head tiles, stage, cluster size, positions
    per split) that CUDA device ``device_index`` runs at once (``cudaOccupancyMaxActiveClusters``; for
    ``cluster_size`` 1, CTAs per SM times SMs; cached per configuration). Pass it to :func:`plan` as
    ``cluster_capacity`` (:func:`cluster_capacity`). Counted for the bf16 cache's kernel: the fp8_ds_mla
    one stages 656-byte rows in less shared memory, and where it takes more registers (32-position
    stages: ~134 with 16 heads, ~190 with 32) the bf16 one's shared memory already holds it to 1 CTA per
    SM; so at least as many of its clusters fit and one count serves both formats.

    Raises
    ------
    RuntimeError
        The op library is not available (the reason is in the message) or the query failed.
    ValueError
        ``candidate`` is not a plan the kernels are built for (the message names the field).
    """
    configuration = dataclasses.replace(candidate, num_tokens=1, num_splits=1)  # what occupancy depends on
    return _max_active_clusters(configuration, device_index)


@functools.lru_cache(maxsize=None)
def _max_active_clusters(configuration: DecodePlan, device_index: int) -> int:
    availability = is_available(device_index)
    if not availability:
        raise RuntimeError(f"sparse_mla: the decode kernel is not available: {availability.reason}")
    with torch.cuda.device(device_index):
        return call_op(torch.ops.sparse_mla_decode.max_active_clusters, configuration.op_value(), False)


def cluster_capacity(device_index: int) -> Callable[[DecodePlan], int]:
    """:func:`plan`'s ``cluster_capacity`` on CUDA device ``device_index``: ``candidate plan -> clusters per
    wave`` (:func:`max_active_clusters`)."""
    return functools.partial(max_active_clusters, device_index=device_index)


def is_available(device_index: Optional[int] = None) -> Availability:
    """Whether the decode op runs on CUDA device ``device_index`` (the current one when ``None``): a
    Hopper, the library built and loadable. Answered once per device."""
    return op_availability(LIBRARY_NAME, LIBRARY_ENV, _register_fake, device_index)


def library_loaded() -> Availability:
    """Whether the op library is loaded here, loading it if not (once; no CUDA device needed): what the
    host-only op ``workspace_layout`` needs. False with the reason when it is not built or does not load."""
    return load_once(LIBRARY_NAME, LIBRARY_ENV, _register_fake, False)


def _load_host_ops() -> None:
    loaded = library_loaded()
    if not loaded:
        raise RuntimeError(f"sparse_mla: the decode op library is not available: {loaded.reason}")


def _register_fake() -> None:
    """The library's ops write in place and return nothing: all ``torch.compile`` needs to know."""

    @torch.library.register_fake("sparse_mla_decode::fwd")
    def _fwd_fake(*args, **kwargs):
        return None

    @torch.library.register_fake("sparse_mla_decode::token_metadata")
    def _token_metadata_fake(*args, **kwargs):
        return None


def sparse_mla_decode(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    softmax_scale: float,
    plan: DecodePlan,
    workspace: torch.Tensor,
    out: torch.Tensor,
    lse: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    dcp: DcpShard = NO_DCP,
) -> torch.Tensor:
    """Sparse MLA attention of request-local top-k positions, written into ``out`` (one launch; the
    wide kernel with several splits adds one for the split merge).

    Parameters
    ----------
    q_nope, q_rope : torch.Tensor
        `[T, N, 512]` and `[T, N, 64]` bf16 on one Hopper GPU; last dimension contiguous, other
        strides even (views of a fused `[T, N, 576]` query are fine).
    kv_cache : torch.Tensor
        `[num_blocks, 64, 576]` bf16, or the fp8_ds_mla cache `[num_blocks, 64, 656]` uint8
        (:mod:`sparse_mla.fp8_ds_mla`, dequantized in the kernel chunk by chunk as it is gathered,
        never a copy of the cache); slot elements contiguous; block and slot strides multiples of 16
        bytes (a padded block stride is fine).
    topk_indices : torch.Tensor
        `[T, topk]` int32 request-local positions; ``-1``, positions ``>= token_kv_len``, past the
        block table or in blocks outside ``[0, num_blocks)`` are skipped, never read.
    req_id, token_kv_len : torch.Tensor
        `[T]` int32: block-table row and causal length of each token (``SparseMLAMetadata``'s).
    block_table : torch.Tensor
        `[num_reqs, max_blocks]` int32, last dimension contiguous.
    softmax_scale : float
        Score scale (DeepSeek-V3.2: ``192 ** -0.5``).
    plan : DecodePlan
        From :func:`plan` for this ``(T, N)``; the op takes it as one value (:meth:`DecodePlan.op_value`).
    workspace : torch.Tensor
        uint8 `[bytes]` on the queries' device, 16-byte aligned, at least :func:`workspace_bytes` of
        ``plan`` (0 for one split), its counters region zero (:func:`workspace_for_plans`); the op carves
        it (:func:`workspace_layout`).
    out : torch.Tensor
        `[T, N, 512]` bf16, written; zero for a token without valid positions.
    lse : torch.Tensor, optional
        `[T, N]` fp32 contiguous: natural-log LSE of the scaled scores, ``-inf`` without valid positions.
    topk_length : torch.Tensor, optional
        `[T]` int32: entries at columns ``>= topk_length[t]`` count as ``-1``.
    dcp : DcpShard
        This rank's DCP shard (:mod:`sparse_mla.topk_filter`): other ranks' positions count as ``-1``,
        this rank's are looked up at their rank-local position.

    Returns
    -------
    torch.Tensor
        ``out``.

    Raises
    ------
    RuntimeError
        The op library is not available here (the reason is in the message).
    ValueError
        A tensor's dtype, shape, device, strides or alignment, the plan (its fields, or a ``(T, N)`` other
        than the queries'), or the workspace's dtype, device, size or alignment is wrong (checked in the op,
        before any launch; the message names the argument). A wrong dtype
        is a ValueError too: an op of PyTorch's stable ABI can raise no TypeError.
    """
    availability = is_available(tensor_device_index(q_nope))
    if not availability:
        raise RuntimeError(f"sparse_mla: the decode kernel is not available: {availability.reason}")
    call_op(
        torch.ops.sparse_mla_decode.fwd, q_nope, q_rope, kv_cache, topk_indices, req_id, token_kv_len, block_table,
        softmax_scale, plan.op_value(), out, lse, workspace, topk_length, dcp.rank, dcp.world_size, dcp.interleave,
    )
    return out
