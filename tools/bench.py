"""Sparse-MLA benchmark on one GPU: the FA3 path, the fused Triton kernel, the decode kernel and the routed
backend, on the bf16 and the fp8_ds_mla KV cache.

``bazel run //tools:bench -- --out_dir=DIR [--heads=16,128] [--tokens=1,8] [--paths=triton]``, or outside Bazel
``PYTHONPATH=py:tests python3 tools/bench.py ...`` (the random inputs are the tests' ``sparse_mla_testing``)

For every point of the grid heads N x tokens T (DeepSeek-V3.2 decode: one query token per request, or
``--tokens_per_request``, ``--context`` positions per request, top-k 2048 random distinct positions per token) it
times, by CUDA-graph replay after warm-up, the median µs per call of

* ``fa3``: the backend's FA3 route, index conversion (``cc/fa3/topk_to_slots_kernel.cu``) + FA3, one op call;
* ``triton``: ``sparse_mla.kernels.sparse_mla_attention`` (its default launch configuration);
* ``routed``: ``sparse_mla.backend.SparseMLAImpl.forward`` as routed by ``sparse_mla.routing``;
* ``fa3_kernel``: the bare FA3 call of the FA3 route on a page table converted once, outside the
  timed graph, with the backend's split count (``routed - fa3_kernel`` = the backend's overhead);
* ``decode``: the decode kernel alone (``sparse_mla.ops.decode``), with its plan for the point;
* ``flashmla`` (with ``--flashmla_library``): FlashMLA's kernel alone on global slot ids (``tools/flashmla_calls.py``),
  its bf16 sparse prefill kernel on the bf16 cache (``flashmla_us``), its fp8 sparse decode on fp8_ds_mla
  (``flashmla_fp8_us``), heads padded to 64 / 128;

and the bound ``max(bytes / 4.3 TB/s, FLOPs / 790 TFLOP/s)`` with ``bytes = T·topk·1152 + q + out``
and ``FLOPs = 2·T·N·topk·(576 + 512)``. One replayed graph runs the call on several copies of the
inputs in turn (all drawing rows from one large cache), so that the rows of a call are not in the
L2 from the previous one (the copies together touch at least 4x the L2 in rows of the narrowest format timed).
It prints a line per point and a table, and writes ``bench.csv`` and ``bench.png`` (µs vs T, one panel per N)
into ``--out_dir``, each stamped with the date, GPU, driver, torch / triton versions and git revision, and with any
``--planner_constant=NAME=VALUE`` (repeatable: that value of a decode planner constant of ``sparse_mla.ops.decode``
for the run, to time a candidate against the current one). With ``--check`` each path's output is also compared
with the fp32 reference (``sparse_mla.reference.sparse_mla_reference``) on the cache it read: on the fp8_ds_mla
cache that reference dequantizes the gathered slots, so ``*_fp8_relerr`` is the kernel's error alone, not the
quantization's.

Each path runs on each format of ``--cache_formats`` it can read (default both): the bf16 cache
``[num_blocks, 64, 576]`` and the fp8_ds_mla cache ``[num_blocks, 64, 656]`` uint8, which is the bf16 cache
quantized by ``sparse_mla.fp8_ds_mla.quantize_slots`` before any timing (same values up to the quantization,
same inputs). ``fa3`` and ``fa3_kernel`` read bf16 only; ``triton``, ``decode`` and ``routed`` read both. A
path's bf16 columns keep their names (``triton_us``, ``triton_relerr``, ``triton_over_bound``: results of
earlier runs stay comparable), its fp8_ds_mla columns end in ``_fp8`` (``triton_fp8_us``, ``decode_fp8_us``,
``routed_fp8_us``, ...; ``sparse_mla.routing.bench_column``). The fp8 bound ``bound_fp8_us`` counts 656 bytes
per gathered position instead of 1152 (512 fp8 values, 4 fp32 scales and 64 bf16 k_rope values: what a
kernel must read), the same FLOPs (the dequantized values enter bf16 matrix products); the ``_fp8_over_bound``
columns divide by it. ``route`` and ``route_fp8`` name the route the routing table picks per format. A path
that fails on a format (e.g. a decode op that rejects the uint8 cache) leaves its columns empty (NaN) and
is named, with the reason, in the notes printed after the table.

``--sweep`` instead times the Triton kernel over a grid of launch configurations at the
``--sweep_points`` and prints the best configuration per point (and ``sweep.csv``). Kernels are
compiled ahead in ``--precompile_workers`` processes (Triton's on-disk cache), which is most of the
GPU time otherwise (about 4 s of CPU per kernel): the default grid compiles about 20 kernels, a sweep
point up to ~250 with the default ``--sweep_*`` lists (narrow them for a quick pass, e.g.
``--sweep_block_n=32,64 --sweep_warps=4 --sweep_stages=7``).

``--fa3_splits=0,4,8,16,32`` times ``fa3_kernel`` for each split count (0 = FA3's own heuristic) at the
``--fa3_split_points`` and prints the best per point next to the backend's choice (``fa3_splits.csv``).

``--nofa3_scheduler_metadata`` (an ablation of the grid's ``fa3``, ``fa3_kernel`` and ``routed`` paths and
of ``--fa3_splits``): FA3 runs without the step's precomputed scheduler metadata, i.e. with its own
scheduling kernel on every call, as before the plan existed; the difference is what the shared metadata buys.

``--host_time`` (bf16 cache only) measures host time instead: eager µs per call of ``SparseMLAMetadataBuilder.build`` and of
``SparseMLAImpl.forward`` on each route at the ``--host_time_points``, next to a bare ``x.add_(1)`` on the
same device in the same run, with their ratios (the targets: forward <= 3x, build <= 5x), written to
``host_time.csv``. Each measurement times ``--host_time_calls`` back-to-back calls (fewer launches than the
GPU's queue holds, so the host is what is timed) and reports the median of ``--host_time_repeats``. Without a
CUDA device it runs on the CPU with ``T = 0`` (every check, the dispatch and the plan lookup, no kernel: the
Triton interpreter would otherwise dominate).

``--write_routing_table``: after the first pass over the grid, each format's grid of this GPU's routing table
(``py/sparse_mla/routing_tables/<gpu>.json``, ``sparse_mla.routing.gpu_table_path``) is rewritten from its
columns (bf16 from ``<route>_us``, fp8_ds_mla from ``<route>_fp8_us``,
``sparse_mla.routing.table_from_bench_rows``), where at least two routes that read the format were timed, and
the table is copied into ``--out_dir``; then ``routed`` (and ``routed_fp8``) run with the new table.

``--sweep``, ``--fa3_splits`` and ``--host_time`` can be combined in one run; the grid runs when
none is given.
"""

import contextlib
import csv
import dataclasses
import datetime
import itertools
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import time
from concurrent import futures
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from absl import app, flags

import torch
import triton

from sparse_mla import kv_cache_format, reference, routing
import sparse_mla_testing as testing
from sparse_mla_testing import fa3_calls
import flashmla_calls
from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.common_metadata import CommonAttentionMetadata
from sparse_mla.constants import (
    DEEPSEEK_V32_SOFTMAX_SCALE,
    INDEX_TOPK,
    KV_BLOCK_SIZE,
    KV_CACHE_HEAD_SIZE,
    KV_LORA_RANK,
)
from sparse_mla.kernels import sparse_mla_attention as triton_attention
from sparse_mla_testing.topk_to_slots import topk_to_slots
from sparse_mla.ops import decode, fa3
from sparse_mla.routes import ROUTES

FLAGS = flags.FLAGS
flags.DEFINE_list("heads", ["16", "32", "64", "128"], "Query heads N of the grid.")
flags.DEFINE_list("tokens", ["1", "2", "4", "8", "12", "16", "30", "32", "64", "128", "256", "512", "1024"],
                  "Query tokens T of the grid. 12 and 30 lie in the plan's bands of clusters of 8 at N <= 16 "
                  "(sparse_mla.ops.decode.CLUSTER_LARGE_CHUNK_MIN_GROUPS, CLUSTER_ONE_SPLIT_GROUPS), so that a "
                  "routing table written from this grid routes them (the next measured T at or above).")
flags.DEFINE_list("paths", ["fa3", "fa3_kernel", "triton", "decode", "routed"],
                  "Paths to time: fa3, fa3_kernel, triton, decode, routed, flashmla.")
flags.DEFINE_string("flashmla_library", "", "FlashMLA's op library for the flashmla path (vLLM 0.26.0's "
                    "vllm/_flashmla_C.abi3.so, extracted outside this repository); empty: that path is skipped.")
flags.DEFINE_list("cache_formats", [f.name for f in kv_cache_format.FORMATS],
                  "Grid: KV-cache formats each path is timed on where it reads them (bfloat16, fp8_ds_mla).")
flags.DEFINE_integer("decode_cluster_size", None, "CTAs per split of the decode kernel's plan (8 or 1); default: the plan's rule (sparse_mla.ops.decode.plan).")
flags.DEFINE_integer("decode_cta_chunk", None, "Positions per pipeline stage of a decode CTA (16 or 32); default: the plan's rule.")
flags.DEFINE_integer("decode_head_tiles", None, "Head tiles of 16 per decode CTA (1, 2, or 4: the wide kernel); default: the plan's rule.")
flags.DEFINE_integer("decode_kernel", None, "The decode kernel of the plan (sparse_mla.ops.decode.SWAP_AB_KERNEL: "
                     "the swap-AB one, TILE64_KERNEL: the tile64 one); default: the plan's rule.")
flags.DEFINE_integer("decode_ctas_per_sm", None, "CTAs per SM the decode kernel's plan aims for; default: the plan's rule (sparse_mla.ops.decode.plan).")
flags.DEFINE_multi_string("planner_constant", [], "NAME=VALUE: this run's value of the decode planner's numeric "
                          "constant NAME (sparse_mla.ops.decode, e.g. WIDE_PARTIAL_COST_IN_POSITIONS=0), to time a "
                          "candidate against the current one; repeatable; recorded in the CSV header.")
flags.DEFINE_integer("topk", INDEX_TOPK, "Top-k positions per token.")
flags.DEFINE_integer("context", 32768, "Positions of each request's context (all valid, >= topk).")
flags.DEFINE_integer("tokens_per_request", 1, "Query tokens per request: each point's T tokens are split into "
                     "requests of this many (the last takes the rest), and a request's tokens pick their top-k "
                     "from its one context. Above 1 with --context near --topk, the gathers hit the L2: a step "
                     "whose gathers cost little, to time the kernels' own work.", lower_bound=1)
flags.DEFINE_string("out_dir", None, "Where bench.csv / bench.png (or sweep.csv) go; relative to the invoking directory.")
flags.DEFINE_integer("replays", 30, "Timed graph replays per measurement (the median is reported).")
flags.DEFINE_integer("warmup_replays", 5, "Untimed graph replays before timing.")
flags.DEFINE_integer("seed", 0, "Seed of every random input.")
flags.DEFINE_bool("sort_topk", False, "Sort each top-k row ascending (valid positions first): the order FA3 then reads KV rows in.")
flags.DEFINE_enum("block_placement", "random", ["random", "contiguous"],
                  "Cache blocks of a request: a random permutation of the cache (an engine after churn) or "
                  "consecutive (a fresh engine).")
flags.DEFINE_bool("write_routing_table", False,
                  "Grid: after timing the routes at every point, write each cache format's grid of "
                  "this GPU's routing table (py/sparse_mla/routing_tables/) from them (the fastest per point), then "
                  "time 'routed' with it.")
flags.DEFINE_string("git_revision", "", "Revision to record; empty: ask git (machines given a copy without .git need this).")
flags.DEFINE_bool("check", True, "Compare each path's output with the fp32 reference (rel err in the CSV).")
flags.DEFINE_integer("precompile_workers", min(os.cpu_count() or 1, 16), "Processes compiling Triton kernels ahead; 0 = off.")
flags.DEFINE_bool("sweep", False, "Time the Triton kernel over launch configurations instead of the grid.")
flags.DEFINE_list("sweep_points", ["16x1", "16x8"], "NxT points of the sweep.")
flags.DEFINE_list("sweep_block_h", [], "block_h values; empty = the default configuration's.")
flags.DEFINE_list("sweep_block_n", ["16", "32", "64"], "block_n values.")
flags.DEFINE_list("sweep_block_dv", ["64", "128", "256", "512"], "block_dv values.")
flags.DEFINE_list("sweep_splits", ["1", "2", "4", "8", "16", "32"], "num_splits values.")
flags.DEFINE_list("sweep_warps", ["4", "8"], "num_warps values.")
flags.DEFINE_list("sweep_stages", ["4", "7"], "num_stages values (KV prefetch distance (num_stages - 1) // 3).")
flags.DEFINE_float("sweep_max_waves", 2.0, "Skip configurations with more than this many programs per SM.")
flags.DEFINE_list("fa3_splits", [], "Split counts (0 = FA3's heuristic) for which fa3_kernel is timed; empty = off.")
flags.DEFINE_list("fa3_split_points", [f"{n}x{t}" for n in (16, 32, 64, 128) for t in (1, 2, 4, 8)], "NxT points of --fa3_splits.")
flags.DEFINE_bool("fa3_scheduler_metadata", True,
                  "FA3 calls get the step's precomputed scheduler metadata (false: FA3 schedules on every call).")
flags.DEFINE_bool("host_time", False, "Measure eager host µs per call of build and forward against a bare torch op.")
flags.DEFINE_list("host_time_points", ["16x1", "16x8", "128x1", "128x4"], "NxT points of --host_time.")
flags.DEFINE_integer("host_time_calls", 200, "Back-to-back calls per --host_time measurement.")
flags.DEFINE_integer("host_time_repeats", 21, "Measurements per --host_time value (the median is reported).")

BANDWIDTH_BYTES_PER_S = 4.3e12
"""H200 HBM3e bandwidth used by the bound (the anchors' figure)."""

PEAK_FLOPS = 790e12
"""H200 dense bf16 tensor-core peak used by the bound."""

DEFAULT_L2_BYTES = 60 * 2**20
"""H200 L2 size, when the device properties do not say."""

ROTATION_L2_MULTIPLE = 4
"""The copies of a point's inputs together touch at least 4x the L2 in KV rows."""

MAX_COPIES = 64
"""At most 64 input copies (calls) per replayed graph."""

CACHE_CHUNK_BLOCKS = 16384
"""The cache is filled 16384 blocks (1.1 GiB) at a time, bounding the fp32 temporary of its generator."""

PATH_FORMATS = {
    "fa3": (kv_cache_format.BF16,),
    "fa3_kernel": (kv_cache_format.BF16,),
    "triton": kv_cache_format.FORMATS,
    "decode": kv_cache_format.FORMATS,
    "routed": kv_cache_format.FORMATS,
    "flashmla": kv_cache_format.FORMATS,
}
"""Every path of the grid, and the cache formats it is timed on (the decode kernel may still reject the
fp8_ds_mla cache: its columns are then empty, with a note)."""

RELERR_LIMIT = 1e-2
"""A sweep configuration whose output is further than this from the fp32 reference is not a candidate."""


# --------------------------------------------------------------------------------------------------
# Inputs


@dataclasses.dataclass
class Copy:
    """One copy of a point's inputs and output buffer."""

    batch: testing.SparseMLABatch
    q_nope: torch.Tensor  # [T, N, 512] bf16
    q_rope: torch.Tensor  # [T, N, 64] bf16
    out: torch.Tensor  # [T, N, 512] bf16


def call_bytes(num_tokens: int, num_heads: int, topk: int, slot_bytes: int = kv_cache_format.BF16.slot_bytes) -> int:
    """Bytes one call must move: the gathered KV rows (``slot_bytes`` each: 1152 bf16, 656 fp8_ds_mla), the
    bf16 queries and the bf16 output."""
    rows = num_tokens * topk * slot_bytes
    return rows + num_tokens * num_heads * (KV_CACHE_HEAD_SIZE + KV_LORA_RANK) * 2


def bound_us(num_tokens: int, num_heads: int, topk: int, slot_bytes: int = kv_cache_format.BF16.slot_bytes) -> float:
    """µs of a call at the H200's bandwidth or tensor-core peak, whichever binds (the FLOPs do not depend on
    the cache format: fp8 values are dequantized into the same bf16 products)."""
    flops = 2 * num_tokens * num_heads * topk * (KV_CACHE_HEAD_SIZE + KV_LORA_RANK)
    return max(call_bytes(num_tokens, num_heads, topk, slot_bytes) / BANDWIDTH_BYTES_PER_S, flops / PEAK_FLOPS) * 1e6


def num_copies(num_tokens: int, topk: int, l2_bytes: int, slot_bytes: int = kv_cache_format.BF16.slot_bytes) -> int:
    """Input copies whose gathered rows of ``slot_bytes`` each touch :data:`ROTATION_L2_MULTIPLE` x the L2."""
    rows = num_tokens * topk * slot_bytes
    return max(1, min(MAX_COPIES, math.ceil(ROTATION_L2_MULTIPLE * l2_bytes / rows)))


def blocks_per_context(context: int) -> int:
    return -(-context // KV_BLOCK_SIZE)


def make_copies(num_tokens: int, num_heads: int, count: int, num_blocks: int, gen: torch.Generator) -> List[Copy]:
    """``count`` batches of ``num_tokens`` query tokens, ``--tokens_per_request`` a request (the last of
    ``--context`` positions each), each request with its own blocks of the one cache."""
    per_request = FLAGS.tokens_per_request
    query_lens = [min(per_request, num_tokens - first) for first in range(0, num_tokens, per_request)]
    copies = []
    for _ in range(count):
        batch = testing.make_batch([max(FLAGS.context, q) for q in query_lens], query_lens, num_blocks, gen,
                                   topk=FLAGS.topk, contiguous_blocks=FLAGS.block_placement == "contiguous")
        if FLAGS.sort_topk:  # -1 sorts first ascending: sort as unsigned so it goes last
            rows = batch.topk_indices.to(torch.int64) & 0xFFFFFFFF
            batch.topk_indices = rows.sort(dim=1).values.to(torch.int32)
        q_nope, q_rope = testing.make_queries(num_tokens, num_heads, gen.device, gen)
        out = torch.empty(num_tokens, num_heads, KV_LORA_RANK, dtype=torch.bfloat16, device=gen.device)
        copies.append(Copy(batch, q_nope, q_rope, out))
    return copies


def make_cache(num_blocks: int, gen: torch.Generator) -> torch.Tensor:
    """`[num_blocks, 64, 576]` bf16 from :func:`sparse_mla_testing.make_kv_cache`, chunk by chunk."""
    cache = torch.empty(num_blocks, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=gen.device)
    for start in range(0, num_blocks, CACHE_CHUNK_BLOCKS):
        stop = min(start + CACHE_CHUNK_BLOCKS, num_blocks)
        cache[start:stop] = testing.make_kv_cache(stop - start, gen.device, gen)
    return cache


def quantized_cache(kv_cache: torch.Tensor) -> torch.Tensor:
    """The fp8_ds_mla cache `[num_blocks, 64, 656]` uint8 of the bf16 ``kv_cache``, every slot quantized by
    :func:`sparse_mla_testing.fp8_ds_mla_kv_cache` (the host quantizer), :data:`CACHE_CHUNK_BLOCKS` blocks at a
    time to bound its fp32 temporaries."""
    fp8 = kv_cache_format.FP8_DS_MLA
    cache = torch.empty(kv_cache.shape[0], *fp8.block_shape, dtype=fp8.dtype, device=kv_cache.device)
    for start in range(0, kv_cache.shape[0], CACHE_CHUNK_BLOCKS):
        stop = min(start + CACHE_CHUNK_BLOCKS, kv_cache.shape[0])
        cache[start:stop] = testing.fp8_ds_mla_kv_cache(kv_cache[start:stop])
    return cache


def grid_caches(
    tokens: Sequence[int], formats: Sequence[kv_cache_format.KVCacheFormat], l2_bytes: int, gen: torch.Generator,
    info: Dict[str, str],
) -> Tuple[Dict[int, int], Dict[str, torch.Tensor]]:
    """The input copies per T of a grid over ``tokens`` (:func:`num_copies` in the narrowest of ``formats``) and
    one cache per format name holding them all: bf16 from :func:`make_cache`, fp8_ds_mla its quantization
    (:func:`quantized_cache`, same values up to it). Prints their size with ``info``."""
    narrowest = min(f.slot_bytes for f in formats)
    copies_of = {t: num_copies(t, FLAGS.topk, l2_bytes, narrowest) for t in tokens}
    requests = {t: -(-t // FLAGS.tokens_per_request) for t in tokens}  # make_copies: one context a request
    num_blocks = max(copies_of[t] * requests[t] for t in tokens) * blocks_per_context(FLAGS.context)
    cache_gib = sum(num_blocks * KV_BLOCK_SIZE * f.slot_bytes for f in formats) / 2**30
    print(f"caches: {num_blocks} blocks each of {', '.join(f.name for f in formats)} ({cache_gib:.1f} GiB); "
          f"{', '.join(f'{k} {v}' for k, v in info.items())}", flush=True)
    bf16_cache = make_cache(num_blocks, gen)
    caches = {f.name: bf16_cache if f is kv_cache_format.BF16 else quantized_cache(bf16_cache) for f in formats}
    return copies_of, caches


def reference_out(copy: Copy, kv_cache: torch.Tensor) -> torch.Tensor:
    b = copy.batch
    slot_ids = reference.global_slot_ids_reference(b.topk_indices, b.req_id, b.token_kv_len, b.block_table, kv_cache.shape[0])
    out, _ = reference.sparse_mla_reference(copy.q_nope, copy.q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
    return out


# --------------------------------------------------------------------------------------------------
# Paths


def build_step(c: "Copy", kv_cache: torch.Tensor, route: Optional[str]):
    """The backend's metadata of a copy's batch on ``route`` (``None``: the routing table's) for the format of
    ``kv_cache``, with FA3's step scheduler metadata dropped under ``--nofa3_scheduler_metadata``."""
    b = c.batch
    cache_format = kv_cache_format.format_of_cache("kv_cache", kv_cache).name
    builder = SparseMLAMetadataBuilder(b.num_tokens, kv_cache.device, c.q_nope.shape[1], index_topk=FLAGS.topk,
                                       route=route, kv_cache_dtype=cache_format)
    metadata = builder.build(0, testing.common_metadata(b))
    if metadata.route.name == "fa3" and not FLAGS.fa3_scheduler_metadata:
        metadata = dataclasses.replace(metadata, prepared=dataclasses.replace(metadata.prepared, scheduler_metadata=None))
    return builder, metadata


def fa3_kernel_call(c: Copy, kv_cache: torch.Tensor, num_splits: Optional[int] = None) -> Callable[[], None]:
    """The FA3 route's FA3 call alone: its page table is converted here, once, outside the timed graph.

    ``num_splits`` defaults to the backend's plan (:func:`sparse_mla.ops.fa3.choose_num_splits`); 0 = FA3's
    heuristic. The step's scheduler metadata is used when the split count is the plan's (it is made for it).
    """
    b = c.batch
    _, metadata = build_step(c, kv_cache, "fa3")
    step = metadata.prepared
    topk_to_slots(b.topk_indices, metadata.req_id, metadata.token_kv_len, metadata.block_table, kv_cache.shape[0],
                  slot_ids=step.page_table, valid_count=step.cache_seqlens)
    planned = metadata.step.plan.num_splits
    num_splits = planned if num_splits is None else num_splits
    scheduler_metadata = step.scheduler_metadata if num_splits == planned else None
    return lambda: fa3_calls.sparse_mla_fwd(
        c.q_nope, c.q_rope, kv_cache, page_table=step.page_table, cache_seqlens=step.cache_seqlens,
        cu_seqlens_q=metadata.cu_seqlens_q, softmax_scale=DEEPSEEK_V32_SOFTMAX_SCALE, num_splits=num_splits,
        scheduler_metadata=scheduler_metadata, out=c.out,
    )


def decode_call(c: Copy, kv_cache: torch.Tensor) -> Callable[[], None]:
    """The decode kernel alone, with its plan for this (T, N) and a workspace of its own."""
    num_tokens, num_heads = c.q_nope.shape[:2]
    num_sms = torch.cuda.get_device_properties(kv_cache.device).multi_processor_count
    launch = decode.plan(num_tokens, num_heads, num_sms, FLAGS.topk, FLAGS.decode_ctas_per_sm,
                         decode.cluster_capacity(torch.cuda.current_device()), FLAGS.decode_cluster_size,
                         FLAGS.decode_cta_chunk, FLAGS.decode_head_tiles,
                         fp8_ds_mla=kv_cache.dtype == kv_cache_format.FP8_DS_MLA.dtype, kernel=FLAGS.decode_kernel)
    workspace = decode.workspace_for_plans([launch], kv_cache.device)
    b = c.batch
    return lambda: decode.sparse_mla_decode(
        c.q_nope, c.q_rope, kv_cache, b.topk_indices, b.req_id, b.token_kv_len, b.block_table,
        DEEPSEEK_V32_SOFTMAX_SCALE, launch, workspace, out=c.out,
    )


def path_calls(
    path: str, copies: Sequence[Copy], kv_cache: torch.Tensor, config=None,
    fa3_splits: Optional[int] = None,
) -> List[Callable[[], None]]:
    """One zero-argument call per copy on ``kv_cache`` (either format); metadata is built here, outside the
    timed graph."""
    calls = []
    num_heads = copies[0].q_nope.shape[1]
    for c in copies:
        b = c.batch
        if path == "triton":
            calls.append(
                lambda c=c, b=b: triton_attention.sparse_mla_attention(
                    c.q_nope, c.q_rope, kv_cache, b.topk_indices, b.req_id, b.token_kv_len, b.block_table,
                    DEEPSEEK_V32_SOFTMAX_SCALE, out=c.out, config=config,
                )
            )
        elif path == "fa3_kernel":
            calls.append(fa3_kernel_call(c, kv_cache, fa3_splits))
        elif path == "decode":
            calls.append(decode_call(c, kv_cache))
        elif path == "flashmla":
            calls.append(flashmla_calls.SparseCall(FLAGS.flashmla_library, c.q_nope, c.q_rope, kv_cache, b.topk_indices,
                                                   b.req_id, b.token_kv_len, b.block_table, DEEPSEEK_V32_SOFTMAX_SCALE))
        else:  # "fa3": the backend on the FA3 route; "routed": as the routing table says
            builder, metadata = build_step(c, kv_cache, "fa3" if path == "fa3" else None)
            impl = SparseMLAImpl(num_heads, DEEPSEEK_V32_SOFTMAX_SCALE,
                                 kv_cache_dtype=kv_cache_format.format_of_cache("kv_cache", kv_cache).name)
            calls.append(
                lambda c=c, b=b, impl=impl, metadata=metadata, builder=builder: impl.forward(
                    (c.q_nope, c.q_rope), kv_cache, metadata, b.topk_indices, output=c.out
                )
            )
    return calls


def time_graph(calls: Sequence[Callable[[], None]]) -> float:
    """Median µs per call: one CUDA graph runs every call once; replayed after warm-up."""
    for call in calls:  # compiles
        call()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    for _ in range(FLAGS.warmup_replays):
        graph.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(FLAGS.replays)]
    for start, stop in events:
        start.record()
        graph.replay()
        stop.record()
    torch.cuda.synchronize()
    per_replay_ms = statistics.median(start.elapsed_time(stop) for start, stop in events)
    return per_replay_ms * 1e3 / len(calls)


# --------------------------------------------------------------------------------------------------
# Ahead-of-time compilation (Triton's on-disk cache), in worker processes


CompileJob = Tuple[int, int, int, int, Optional[triton_attention.LaunchConfig], str]
"""``(T, N, topk, max_blocks, config, cache format name)`` of one Triton kernel variant to compile."""


def _compile_job(job: CompileJob) -> str:
    """Run the kernel once on dummy inputs with the benchmark's shapes and strides (same compiled variant)."""
    num_tokens, num_heads, topk, max_blocks, config, cache_format = job
    cache_format = kv_cache_format.format_of_kv_cache_dtype(cache_format)
    device = torch.device("cuda")
    gen = testing.make_generator(device, 0)
    q_nope, q_rope = testing.make_queries(num_tokens, num_heads, device, gen)
    int32 = dict(dtype=torch.int32, device=device)
    try:
        triton_attention.sparse_mla_attention(
            q_nope, q_rope,
            torch.zeros(1, *cache_format.block_shape, dtype=cache_format.dtype, device=device),
            torch.full((num_tokens, topk), -1, **int32), torch.zeros(num_tokens, **int32),
            torch.zeros(num_tokens, **int32), torch.zeros(num_tokens, max_blocks, **int32),
            DEEPSEEK_V32_SOFTMAX_SCALE, config=config,
        )
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # noqa: BLE001 - reported, the timing run skips the configuration
        return f"{config}: {type(e).__name__}: {str(e).splitlines()[0][:200]}"


def precompile(jobs: List[CompileJob], num_sms: int) -> None:
    """Compile each distinct kernel variant of ``jobs`` once, in parallel worker processes."""
    if FLAGS.precompile_workers <= 0 or not jobs:
        return
    distinct = {}
    for job in jobs:  # the kernel does not specialize on sizes: one compiled variant per configuration
        num_tokens, num_heads, topk, _, config, cache_format = job
        config = config or triton_attention.default_launch_config(num_tokens, num_heads, num_sms, topk)
        plan = triton_attention.plan_launch(num_heads, topk, config)
        distinct.setdefault((config, plan, cache_format), job)
    jobs = list(distinct.values())
    start = datetime.datetime.now()
    ctx = multiprocessing.get_context("spawn")
    with futures.ProcessPoolExecutor(max_workers=min(FLAGS.precompile_workers, len(jobs)), mp_context=ctx) as pool:
        failures = [msg for msg in pool.map(_compile_job, jobs) if msg]
    secs = (datetime.datetime.now() - start).total_seconds()
    print(f"precompiled {len(jobs)} kernel variants in {secs:.0f} s ({len(failures)} failed)", flush=True)
    for msg in failures[:10]:
        print(f"  compile failure: {msg}", flush=True)


# --------------------------------------------------------------------------------------------------
# Provenance and outputs


def _git_revision() -> str:
    """HEAD of the checkout (with " (dirty)" for local changes), or "unknown" without git."""
    repo = os.environ.get("BUILD_WORKSPACE_DIRECTORY", os.path.dirname(os.path.abspath(__file__)))
    revision = "unknown"
    with contextlib.suppress(Exception):
        git = ["git", "-C", repo]
        revision = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, timeout=30).stdout.strip() or revision
        dirty = subprocess.run(git + ["status", "--porcelain"], capture_output=True, text=True, timeout=30).stdout.strip()
        revision += " (dirty)" if dirty else ""
    return revision


def provenance() -> Dict[str, str]:
    planner = {"planner": ", ".join(FLAGS.planner_constant)} if FLAGS.planner_constant else {}
    if not torch.cuda.is_available():  # --host_time on the CPU
        return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "device": "cpu (no CUDA device)", "torch": torch.__version__, "triton": triton.__version__,
                "git": FLAGS.git_revision or _git_revision(), "fa3": f"unavailable: {fa3.is_available().reason}",
                **planner}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = "unknown"
    with contextlib.suppress(Exception):
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(torch.cuda.current_device())],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip() or driver
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": f"{props.name} ({props.multi_processor_count} SMs)",
        "driver": driver,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "git": FLAGS.git_revision or _git_revision(),
        "fa3": "available" if fa3.is_available() else f"unavailable: {fa3.is_available().reason}",
        "inputs": f"context {FLAGS.context}, top-k {FLAGS.topk}, {FLAGS.tokens_per_request} token(s) a request, "
                  f"{FLAGS.block_placement} blocks",
        **planner,
    }


def out_dir() -> str:
    path = FLAGS.out_dir
    if not os.path.isabs(path):
        path = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), path)
    os.makedirs(path, exist_ok=True)
    return path


def write_csv(path: str, rows: List[dict], info: Dict[str, str]) -> None:
    with open(path, "w", newline="") as f:
        for key, value in info.items():
            f.write(f"# {key}: {value}\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)


def short(config: triton_attention.LaunchConfig) -> str:
    """``h16/n32/dv64/s16/w4/st7``: block_h, block_n, block_dv, num_splits, num_warps, num_stages."""
    c = config
    return f"h{c.block_h}/n{c.block_n}/dv{c.block_dv}/s{c.num_splits}/w{c.num_warps}/st{c.num_stages}"


def fmt(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.{digits}f}"


def print_table(rows: List[dict], columns: Sequence[str], bounds: Sequence[str]) -> None:
    """One line per point: the ``bounds`` (e.g. ``bound``, ``bound_fp8``), then µs and µs / bound of each of
    ``columns`` (``triton``, ``triton_fp8``, ...)."""
    header = ["N", "T"] + bounds + [f"{c} µs" for c in columns] + [f"{c}/bound" for c in columns]
    width = max(12, *(len(h) for h in header))
    print("\n" + " | ".join(f"{h:>{width}}" for h in header))
    for r in rows:
        cells = [str(r["N"]), str(r["T"])] + [fmt(r[f"{b}_us"], 2) for b in bounds]
        cells += [fmt(r[f"{c}_us"]) for c in columns] + [fmt(r[f"{c}_over_bound"], 2) for c in columns]
        print(" | ".join(f"{c:>{width}}" for c in cells))


def plot(path: str, rows: List[dict], columns: Sequence[str], bounds: Sequence[str], info: Dict[str, str],
         ylabel: str = "µs per call (CUDA graph)") -> bool:
    """µs vs T of ``columns`` and ``bounds`` (dashed), log-log, one panel per N, the y axis named ``ylabel``;
    ``False`` (no file) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False

    heads = sorted({r["N"] for r in rows})
    cols = min(2, len(heads))
    nrows = -(-len(heads) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 4.5 * nrows), squeeze=False)
    for ax, n in zip(axes.flat, heads):
        pts = sorted((r for r in rows if r["N"] == n), key=lambda r: r["T"])
        ts = [r["T"] for r in pts]
        for c in columns:
            ys = [r[f"{c}_us"] for r in pts]
            if any(not math.isnan(y) for y in ys):
                ax.plot(ts, ys, marker="o", label=c)
        for b, color in zip(bounds, ("gray", "black")):
            ax.plot(ts, [r[f"{b}_us"] for r in pts], linestyle="--", color=color, label=b)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ts, [str(t) for t in ts])
        ax.set_yscale("log")
        ax.set_xlabel("tokens T")
        ax.set_ylabel(ylabel)
        ax.set_title(f"N = {n} heads, top-k {FLAGS.topk}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    for ax in list(axes.flat)[len(heads):]:
        ax.axis("off")
    fig.suptitle("sparse MLA: " + ", ".join(f"{k} {v}" for k, v in info.items()), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------------------------------
# The grid


def run_grid(info: Dict[str, str]) -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    num_sms = props.multi_processor_count
    l2_bytes = getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES
    heads = [int(n) for n in FLAGS.heads]
    tokens = [int(t) for t in FLAGS.tokens]
    paths = [p for p in FLAGS.paths if p in PATH_FORMATS]
    formats = [f for f in kv_cache_format.FORMATS if f.name in FLAGS.cache_formats]  # names checked in main
    # (path, format) pairs in table order: each format's paths together, bf16 first as in older results.
    pairs = [(p, f) for f in formats for p in paths if f in PATH_FORMATS[p]]
    columns = [routing.bench_column(p, f.name) for p, f in pairs]
    bounds = [routing.bench_column("bound", f.name) for f in formats]
    notes: Dict[str, List[str]] = {}  # message -> the columns and points it concerns

    def note(message: str, where: str = "") -> None:
        notes.setdefault(message, []).append(where)

    skipped = set()
    if not fa3.is_available():
        note(f"fa3: {fa3.is_available().reason} (fa3 columns empty; routed runs the Triton kernel)")
        skipped |= {"fa3", "fa3_kernel"}
    if not decode.is_available():
        note(f"decode: {decode.is_available().reason} (decode columns empty)")
        skipped.add("decode")
    if not FLAGS.flashmla_library:
        note("flashmla: no --flashmla_library (flashmla columns empty)")
        skipped.add("flashmla")
    to_run = [(p, f) for p, f in pairs if p not in skipped]

    triton_formats = {f.name for p, f in to_run if p in ("triton", "routed")}
    precompile([(t, n, FLAGS.topk, blocks_per_context(FLAGS.context), None, name)
                for name in sorted(triton_formats) for n in heads for t in tokens], num_sms)
    gen = testing.make_generator(device, FLAGS.seed)
    copies_of, caches = grid_caches(tokens, formats, l2_bytes, gen, info)
    num_blocks = next(iter(caches.values())).shape[0]

    def time_pairs(row, copies, refs, timed):
        for p, f in timed:
            column = routing.bench_column(p, f.name)
            us, err = float("nan"), float("nan")
            if (p, f) in to_run:
                try:
                    calls = path_calls(p, copies, caches[f.name])
                    us = time_graph(calls)
                    if refs is not None:  # FlashMLA writes its own, head-padded output
                        out = calls[0].output() if p == "flashmla" else copies[0].out
                        err = testing.relative_error(out, refs[f.name])
                except Exception as e:  # noqa: BLE001 - one path failing must not lose the others
                    note(f"{column}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", f"N={row['N']} T={row['T']}")
            bound = row[f"{routing.bench_column('bound', f.name)}_us"]
            row[f"{column}_us"], row[f"{column}_relerr"], row[f"{column}_over_bound"] = us, err, us / bound
        cells = [routing.bench_column(p, f.name) for p, f in timed]
        timing = "  ".join(f"{c} {fmt(row[f'{c}_us'])} µs" for c in cells)
        bound = "  ".join(f"{b} {row[f'{b}_us']:.2f} µs" for b in bounds)
        print(f"N={row['N']:<4} T={row['T']:<5} copies={row['copies']:<3} {bound}  {timing}  "
              f"triton config {row['triton_config']}", flush=True)

    def warm_up(copies, timed):
        """Each path timed once and the time dropped: a pass's first cells otherwise ran 1.02-1.06x slow (the routed
        pass's N = 1, T = 1 and 2 on an H100, 2026-12-07: results/2026-12-07-h100/routing/README.md)."""
        for p, f in timed:
            if (p, f) in to_run:
                try:
                    time_graph(path_calls(p, copies, caches[f.name]))
                except Exception:  # noqa: BLE001 - time_pairs reports the same failure where it times the path
                    pass

    # With --write_routing_table, "routed" runs in a second pass, after the tables are written from the first.
    second_pass = [(p, f) for p, f in pairs if p == "routed"] if FLAGS.write_routing_table else []
    first_pass = [pair for pair in pairs if pair not in second_pass]
    rows, inputs = [], []
    for n, t in itertools.product(heads, tokens):
        copies = make_copies(t, n, copies_of[t], num_blocks, gen)
        refs = {name: reference_out(copies[0], cache) for name, cache in caches.items()} if FLAGS.check else None
        row = {"N": n, "T": t, "copies": len(copies)}
        if not rows:
            warm_up(copies, first_pass)
        for f in formats:
            row[f"{routing.bench_column('bound', f.name)}_us"] = bound_us(t, n, FLAGS.topk, f.slot_bytes)
        row["triton_config"] = short(triton_attention.default_launch_config(t, n, num_sms, FLAGS.topk))
        time_pairs(row, copies, refs, first_pass)
        rows.append(row)
        inputs.append((copies, refs) if second_pass else None)
    if FLAGS.write_routing_table:
        path = routing.gpu_table_path(torch.cuda.get_device_name())
        for f in formats:
            table = routing.table_from_bench_rows(rows, f.name)
            if table is None:
                note(f"--write_routing_table: fewer than two routes that read the {f.name} cache were timed: "
                     f"its grid left as it was")
                continue
            routing.write_table(table, {**info, "source": "tools/bench.py --write_routing_table"}, path, f.name)
            print(f"wrote the {f.name} grid of {path}", flush=True)
        if os.path.exists(path):  # under `bazel run` a new table lands in the runfiles, not the checkout: a copy
            shutil.copy(path, out_dir())
    if second_pass and inputs:
        warm_up(inputs[0][0], second_pass)
    for row, point_inputs in zip(rows, inputs):
        for f in formats:
            row[routing.bench_column("route", f.name)] = routing.choose_route(row["N"], row["T"], cache_format=f.name)
        if second_pass:
            time_pairs(row, *point_inputs, second_pass)

    print_table(rows, columns, bounds)
    for message, where in notes.items():
        points = [w for w in where if w]
        print("note:", message + (f" (at {len(points)} points: {', '.join(points[:4])}{', ...' if len(points) > 4 else ''})"
                                  if points else ""))
    directory = out_dir()
    write_csv(os.path.join(directory, "bench.csv"), rows, info)
    print(f"wrote {directory}/bench.csv")
    if plot(os.path.join(directory, "bench.png"), rows, columns, bounds, info):
        print(f"wrote {directory}/bench.png")
    else:
        print("note: matplotlib is not installed: no bench.png (pip install matplotlib)")


# --------------------------------------------------------------------------------------------------
# The sweep


def sweep_configs(num_tokens: int, num_heads: int, num_sms: int) -> List[triton_attention.LaunchConfig]:
    default = triton_attention.default_launch_config(num_tokens, num_heads, num_sms, FLAGS.topk)
    block_hs = [int(x) for x in FLAGS.sweep_block_h] or [default.block_h]
    configs = []
    for bh, bn, dv, s, w, st in itertools.product(
        block_hs, [int(x) for x in FLAGS.sweep_block_n], [int(x) for x in FLAGS.sweep_block_dv],
        [int(x) for x in FLAGS.sweep_splits], [int(x) for x in FLAGS.sweep_warps], [int(x) for x in FLAGS.sweep_stages],
    ):
        config = triton_attention.LaunchConfig(bh, bn, dv, s, w, st)
        plan = triton_attention.plan_launch(num_heads, FLAGS.topk, config)
        if plan.num_splits != s:
            continue  # the same as a smaller split count
        if num_tokens * plan.num_programs_per_token > FLAGS.sweep_max_waves * num_sms:
            continue
        configs.append(config)
    return list(dict.fromkeys([default] + configs))


def run_sweep(info: Dict[str, str]) -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    num_sms = props.multi_processor_count
    l2_bytes = getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES
    points = [tuple(int(x) for x in p.lower().split("x")) for p in FLAGS.sweep_points]
    per_context = blocks_per_context(FLAGS.context)
    num_blocks = max(num_copies(t, FLAGS.topk, l2_bytes) * t for _, t in points) * per_context
    plans = {(n, t): sweep_configs(t, n, num_sms) for n, t in points}
    print(f"sweep: {sum(len(c) for c in plans.values())} configurations over {len(points)} points; "
          f"{', '.join(f'{k} {v}' for k, v in info.items())}", flush=True)
    precompile([(t, n, FLAGS.topk, per_context, c, kv_cache_format.BF16.name) for (n, t), cs in plans.items() for c in cs], num_sms)
    gen = testing.make_generator(device, FLAGS.seed)
    kv_cache = make_cache(num_blocks, gen)
    rows, best = [], []
    for (n, t), configs in plans.items():
        copies = make_copies(t, n, num_copies(t, FLAGS.topk, l2_bytes), num_blocks, gen)
        ref = reference_out(copies[0], kv_cache) if FLAGS.check else None
        results = []
        for i, config in enumerate(configs):
            try:
                us = time_graph(path_calls("triton", copies, kv_cache, config=config))
                err = testing.relative_error(copies[0].out, ref) if ref is not None else float("nan")
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory: skip the configuration
                print(f"  N={n} T={t} {config}: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
                continue
            plan = triton_attention.plan_launch(n, FLAGS.topk, config)
            if not err < RELERR_LIMIT and ref is not None:
                print(f"  N={n} T={t} {config}: rel err {err:.2e}, expected < {RELERR_LIMIT:.0e}: excluded", flush=True)
            else:
                results.append((us, config))
            rows.append({"N": n, "T": t, **dataclasses.asdict(config), "programs": t * plan.num_programs_per_token,
                         "us": us, "relerr": err, "bound_us": bound_us(t, n, FLAGS.topk), "default": i == 0})
        results.sort(key=lambda r: r[0])
        default_us = next((us for us, c in results if c == configs[0]), float("nan"))
        print(f"\nN={n} T={t}: bound {bound_us(t, n, FLAGS.topk):.2f} µs, default {fmt(default_us, 2)} µs {short(configs[0])}")
        for us, config in results[:10]:
            print(f"  {us:8.2f} µs  {short(config)}")
        if results:
            best.append((n, t, results[0][0], default_us, results[0][1]))
        del copies
    print("\nbest configuration per point:")
    for n, t, us, default_us, config in best:
        print(f"  N={n} T={t}: {us:.2f} µs (default {fmt(default_us, 2)} µs) {short(config)}  {config}")
    if rows:
        path = os.path.join(out_dir(), "sweep.csv")
        write_csv(path, rows, info)
        print(f"wrote {path}")


# --------------------------------------------------------------------------------------------------
# Points and their cache


def parse_points(points: Sequence[str]) -> List[Tuple[int, int]]:
    """``["16x1", ...]`` -> ``[(N, T), ...]``."""
    return [tuple(int(x) for x in p.lower().split("x")) for p in points]


def point_cache(points: Sequence[Tuple[int, int]], l2_bytes: int, gen: torch.Generator) -> torch.Tensor:
    """One cache large enough for every point's rotated copies."""
    num_blocks = max(num_copies(t, FLAGS.topk, l2_bytes) * t for _, t in points) * blocks_per_context(FLAGS.context)
    return make_cache(num_blocks, gen)


# --------------------------------------------------------------------------------------------------
# FA3 split counts


def run_fa3_splits(info: Dict[str, str]) -> None:
    if not fa3.is_available():
        print(f"fa3_splits: skipped, FA3 {fa3.is_available().reason}")
        return
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    num_sms = props.multi_processor_count
    l2_bytes = getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES
    points = parse_points(FLAGS.fa3_split_points)
    splits = [int(x) for x in FLAGS.fa3_splits]
    gen = testing.make_generator(device, FLAGS.seed)
    kv_cache = point_cache(points, l2_bytes, gen)
    rows, best = [], []
    print(f"\nfa3_kernel by split count (0 = FA3's heuristic); {', '.join(f'{k} {v}' for k, v in info.items())}")
    for n, t in points:
        copies = make_copies(t, n, num_copies(t, FLAGS.topk, l2_bytes), num_blocks=kv_cache.shape[0], gen=gen)
        ours = fa3.choose_num_splits(t, n, num_sms, FLAGS.topk)
        results = []
        for count in dict.fromkeys(splits + [ours]):
            try:
                us = time_graph(path_calls("fa3_kernel", copies, kv_cache, fa3_splits=count))
            except Exception as e:  # noqa: BLE001
                print(f"  N={n} T={t} splits={count}: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
                continue
            results.append((us, count))
            rows.append({"N": n, "T": t, "num_splits": count, "backend_choice": count == ours, "us": us})
        if not results:
            continue
        ours_us = next(us for us, c in results if c == ours)
        top_us, top = min(results)
        best.append((n, t, top, top_us, ours, ours_us))
        print(f"N={n:<4} T={t:<4} " + "  ".join(f"s{c}={us:.1f}" for us, c in results)
              + f"  | best s{top} {top_us:.1f} µs, backend s{ours} {ours_us:.1f} µs", flush=True)
        del copies
    if rows:
        path = os.path.join(out_dir(), "fa3_splits.csv")
        write_csv(path, rows, info)
        print(f"wrote {path}")


# --------------------------------------------------------------------------------------------------
# Eager host time


def decode_step(num_tokens: int, device: torch.device) -> CommonAttentionMetadata:
    """A decode step of ``num_tokens`` requests of ``--context`` positions (contents irrelevant to host time)."""
    int32 = dict(dtype=torch.int32)
    starts = torch.arange(num_tokens + 1, **int32)
    seq_lens = torch.full((num_tokens,), FLAGS.context, **int32)
    per_context = blocks_per_context(FLAGS.context)
    blocks = torch.arange(num_tokens * per_context, **int32).view(num_tokens, per_context)
    return CommonAttentionMetadata(
        query_start_loc=starts.to(device), query_start_loc_cpu=starts, seq_lens=seq_lens.to(device),
        seq_lens_cpu=seq_lens, num_reqs=num_tokens, num_actual_tokens=num_tokens, max_query_len=1,
        max_seq_len=FLAGS.context, slot_mapping=torch.zeros(num_tokens, dtype=torch.int64, device=device),
        block_table_tensor=blocks.to(device),
    )


def host_us(call: Callable[[], object], device: torch.device) -> float:
    """Median over ``--host_time_repeats`` of the host µs per call of ``--host_time_calls`` back-to-back calls;
    the device is synchronized between measurements, never inside one."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):  # compile, first-use planning
        call()
    samples = []
    for _ in range(FLAGS.host_time_repeats):
        sync()
        start = time.perf_counter()
        for _ in range(FLAGS.host_time_calls):
            call()
        samples.append((time.perf_counter() - start) * 1e6 / FLAGS.host_time_calls)
    sync()
    return statistics.median(samples)


def run_host_time(info: Dict[str, str]) -> None:
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    points = parse_points(FLAGS.host_time_points)
    if device.type == "cpu":
        points = list(dict.fromkeys((n, 0) for n, _ in points))
        print("host_time: no CUDA device: T = 0 on the CPU (checks, dispatch, plan lookup; no kernel launch)")
    routes = [name for name in ROUTES if ROUTES[name].is_available() or device.type == "cpu"]
    gen = testing.make_generator(device, FLAGS.seed)
    x = torch.zeros(16, device=device)
    bare = host_us(lambda: x.add_(1), device)
    rows = []
    print(f"\nhost µs per eager call; bare x.add_(1) {bare:.2f} µs; {', '.join(f'{k} {v}' for k, v in info.items())}")
    print(f"{'N':>4} {'T':>5} {'route':>7} | {'build':>8} {'x bare':>6} | {'forward':>8} {'x bare':>6}")
    for n, t in points:
        num_blocks = max(t, 1) * blocks_per_context(FLAGS.context)
        kv_cache = torch.zeros(num_blocks, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=device)
        q_nope, q_rope = testing.make_queries(t, n, device, gen)
        topk = torch.randint(0, FLAGS.context, (t, FLAGS.topk), generator=gen, device=device, dtype=torch.int32)
        out = torch.empty(t, n, KV_LORA_RANK, dtype=torch.bfloat16, device=device)
        common = decode_step(t, device)
        impl = SparseMLAImpl(n)
        for route in routes:
            builder = SparseMLAMetadataBuilder(max(t, 1), device, n, index_topk=FLAGS.topk, route=route)
            build = host_us(lambda: builder.build(0, common), device)
            metadata = builder.build(0, common)
            forward = float("nan")
            if device.type == "cuda" or route == "triton":  # no FA3 on the CPU
                forward = host_us(lambda: impl.forward((q_nope, q_rope), kv_cache, metadata, topk, output=out), device)
            rows.append({"N": n, "T": t, "route": route, "bare_us": bare, "build_us": build, "build_x_bare": build / bare,
                         "forward_us": forward, "forward_x_bare": forward / bare})
            print(f"{n:>4} {t:>5} {route:>7} | {build:8.2f} {build / bare:6.1f} | {fmt(forward, 2):>8} "
                  f"{fmt(forward / bare):>6}", flush=True)
    path = os.path.join(out_dir(), "host_time.csv")
    write_csv(path, rows, info)
    print(f"wrote {path}")


def planner_constants() -> Dict[str, float]:
    """``--planner_constant`` as {NAME: value}, each NAME an int or float constant of sparse_mla.ops.decode and each
    value of its type; ``app.UsageError`` naming the flag otherwise."""
    constants = {}
    for item in FLAGS.planner_constant:
        name, _, text = item.partition("=")
        current = getattr(decode, name, None) if name.isupper() else None
        if type(current) not in (int, float):
            raise app.UsageError(f"--planner_constant expected NAME=VALUE with NAME an int or float constant of "
                                 f"sparse_mla.ops.decode, got {item!r}")
        try:
            constants[name] = type(current)(text)
        except ValueError:
            raise app.UsageError(
                f"--planner_constant {name} expected {'an int' if type(current) is int else 'a float'}, got {text!r}"
            ) from None
    return constants


def check_flags() -> None:
    """The flags every mode reads (also ``tools/model_step_bench.py``'s): ``app.UsageError`` naming a bad one. Sets the
    planner constants of ``--planner_constant``."""
    for name, value in planner_constants().items():
        setattr(decode, name, value)
    if FLAGS.out_dir is None:
        raise app.UsageError("--out_dir is required")
    unknown = [name for name in FLAGS.cache_formats if name not in routing.CACHE_FORMATS]
    if unknown or not FLAGS.cache_formats:
        raise app.UsageError(f"--cache_formats expected names of {routing.CACHE_FORMATS}, got {FLAGS.cache_formats}")
    if FLAGS.context < FLAGS.topk:
        raise app.UsageError(f"--context ({FLAGS.context}) must be >= --topk ({FLAGS.topk})")


def main(argv: Sequence[str]) -> None:
    del argv
    check_flags()
    gpu_modes = FLAGS.fa3_splits or FLAGS.sweep or not FLAGS.host_time
    if not torch.cuda.is_available() and gpu_modes:
        raise app.UsageError("the benchmark needs a CUDA GPU (only --host_time runs without one)")
    info = provenance()
    modes = [run for flag, run in ((bool(FLAGS.fa3_splits), run_fa3_splits),
                                   (FLAGS.sweep, run_sweep), (FLAGS.host_time, run_host_time)) if flag]
    for run in modes or [run_grid]:
        run(info)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


if __name__ == "__main__":
    app.run(main)
