"""Attention where an engine runs it: the attention layers of a DeepSeek-V3.2 decode step in one CUDA graph.

``bazel run //tools:model_step_bench --config=sm90 -- --out_dir=DIR [--layers=61] [--heads=16,64,128]
[--tokens=1,2,4,8,16] [--cache_formats=...]``, or outside Bazel ``PYTHONPATH=py:tests python3 tools/model_step_bench.py
...``. The flags of ``tools/bench.py`` it shares (``--context``, ``--topk``, ``--replays``, ``--seed``, ...) mean
the same here; ``--helpfull`` lists them.

In a model, attention is not launched back to back with itself: per layer, a decode step runs the indexer's
top-k, the KV write and the attention. For every cell N heads x T tokens (one new token per request,
``--context`` positions each) and cache format, this captures ``--layers`` such layers in one CUDA graph on
one stream (:mod:`sparse_mla_testing.model_step`): per layer a stand-in indexer that writes the step's top-k
rows, shifted per layer, into the buffer the forward reads (:mod:`sparse_mla_testing.stand_in_indexer`: one pass
over the rows), ``write_kv`` of the step's new tokens into the layer's cache, and the routed
``SparseMLAImpl.forward``; the layers share the step's metadata (one build, one block table) as an engine's do.
Without host synchronization between the layers, a kernel launched with programmatic dependent launch can
start before its predecessor ends, as it would in the model. It reports, in µs per layer (the median graph
replay divided by the layers):

* ``step``: the whole sequence;
* ``neighbours``: the same graph without the forward (stand-in indexer + ``write_kv``);
* ``attention`` = ``step - neighbours``: what the forward adds to the step where it runs between its
  neighbours (what it overlaps with them is not counted);
* ``back_to_back``: ``tools/bench.py``'s ``routed`` path at the same cell, the forward replayed back to back
  on rotated input copies (its ``copies`` column), for comparison.

Cold L2 as in ``tools/bench.py``: each layer has its own queries, new rows, output and cache of the step's
blocks (a slice of one large cache), up to as many caches as ``tools/bench.py`` rotates input copies at that T
(enough to gather 4x the L2 in rows, at most 64); more layers rotate over them (``layer_caches``, and
``rotation_l2`` = the rows the distinct caches give one step over the L2 size the device reports). At T = 1
the 61 layers' rows are 61 x 2048 x 656 bytes = 82 MB (fp8_ds_mla) or 144 MB (bf16), about what the back-to-back
rotation's 64 copies gather. Columns and files as ``tools/bench.py``'s:
bf16 columns plain (``step_us``, ``attention_us``, ...), fp8_ds_mla ones with ``_fp8`` (``step_fp8_us``, ...),
``route`` / ``route_fp8`` the route the step took, ``bound_us`` / ``bound_fp8_us`` the memory / compute bound
of one forward; ``model_step.csv`` and ``model_step.png`` (µs per layer vs T, one panel per N) in
``--out_dir``, stamped with the provenance. The last line printed starts with ``summary:``.
"""

import math
import os
from typing import Dict, List, Sequence

from absl import app, flags

import torch

import bench
from sparse_mla import kv_cache_format, routing
import sparse_mla_testing as testing
from sparse_mla_testing import model_step

FLAGS = flags.FLAGS
flags.DEFINE_integer("layers", 61, "Attention layers L of the decode step captured in one CUDA graph (DeepSeek-V3.2: 61).")
FLAGS.set_default("heads", ["16", "64", "128"])
FLAGS.set_default("tokens", ["1", "2", "4", "8", "16"])

TIMED = ("step", "neighbours", "attention", "back_to_back")
"""The timed columns of each format, in µs per layer (module docstring)."""


def layer_caches(kv_cache: torch.Tensor, num_tokens: int, l2_bytes: int) -> List[torch.Tensor]:
    """Disjoint caches of ``num_tokens`` requests of ``--context`` positions, slices of ``kv_cache``: one per layer,
    or fewer whose rows of a step touch :data:`bench.ROTATION_L2_MULTIPLE` x the L2 (:func:`bench.num_copies`)."""
    fmt = kv_cache_format.format_of_cache("kv_cache", kv_cache)
    count = min(FLAGS.layers, bench.num_copies(num_tokens, FLAGS.topk, l2_bytes, fmt.slot_bytes))
    blocks = num_tokens * bench.blocks_per_context(FLAGS.context)
    if count * blocks > kv_cache.shape[0]:
        raise ValueError(f"{count} layer caches of {blocks} blocks expected to fit the {kv_cache.shape[0]} blocks given")
    return [kv_cache[i * blocks : (i + 1) * blocks] for i in range(count)]


def col(name: str, fmt: kv_cache_format.KVCacheFormat) -> str:
    """The stem of a column of ``name`` on ``fmt``'s cache, as ``tools/bench.py`` names them."""
    return routing.bench_column(name, fmt.name)


def time_format(row: Dict[str, object], step_copy: bench.Copy, copies: Sequence[bench.Copy], kv_cache: torch.Tensor,
                l2_bytes: int, gen: torch.Generator) -> None:
    """Times one cell on one format into ``row``: the step with and without the forward, then back to back."""
    fmt = kv_cache_format.format_of_cache("kv_cache", kv_cache)
    caches = layer_caches(kv_cache, step_copy.batch.num_tokens, l2_bytes)
    _, metadata = bench.build_step(step_copy, caches[0], None)
    step = model_step.make_model_step(step_copy.batch, metadata, caches, FLAGS.layers, gen)
    row[col("route", fmt)] = metadata.route.name
    row[col("layer_caches", fmt)] = len(caches)
    row[col("rotation_l2", fmt)] = len(caches) * step_copy.batch.num_tokens * FLAGS.topk * fmt.slot_bytes / l2_bytes
    row[f"{col('step', fmt)}_us"] = bench.time_graph(model_step.layer_calls(step))
    row[f"{col('neighbours', fmt)}_us"] = bench.time_graph(model_step.layer_calls(step, attention=False))
    row[f"{col('attention', fmt)}_us"] = row[f"{col('step', fmt)}_us"] - row[f"{col('neighbours', fmt)}_us"]
    row[f"{col('back_to_back', fmt)}_us"] = bench.time_graph(bench.path_calls("routed", copies, kv_cache))


def print_cell(row: Dict[str, object], fmt: kv_cache_format.KVCacheFormat) -> None:
    timings = "  ".join(f"{name} {bench.fmt(row[f'{col(name, fmt)}_us'], 2)}" for name in TIMED)
    print(f"N={row['N']:<4} T={row['T']:<3} {fmt.name:<10} route {row[col('route', fmt)]:<7} {timings} µs/layer "
          f"(layer caches {row[col('layer_caches', fmt)]}, {bench.fmt(row[col('rotation_l2', fmt)])}x L2)", flush=True)


def summary(rows: Sequence[Dict[str, object]], formats: Sequence[kv_cache_format.KVCacheFormat]) -> str:
    """One line: per format, attention in the step and back to back at the first cell, and their ratio's range."""
    first = rows[0]
    parts = []
    for f in formats:
        attention, back = f"{col('attention', f)}_us", f"{col('back_to_back', f)}_us"
        ratios = [r[attention] / r[back] for r in rows if not math.isnan(r[attention] / r[back])]
        spread = f"{min(ratios):.2f}..{max(ratios):.2f}" if ratios else "-"
        parts.append(f"{f.name} attention {bench.fmt(first[attention], 2)} µs/layer in the step vs "
                     f"{bench.fmt(first[back], 2)} back to back at N={first['N']} T={first['T']}, "
                     f"attention / back-to-back over {len(ratios)} cells {spread}")
    return f"summary: L={FLAGS.layers}; " + "; ".join(parts)


def run(info: Dict[str, str], device: torch.device, l2_bytes: int) -> None:
    """Every cell of ``--heads`` x ``--tokens`` on each of ``--cache_formats``, on ``device`` whose L2 holds
    ``l2_bytes``; prints a line per cell and format, writes the CSV and the plot, prints the summary."""
    heads, tokens = [int(n) for n in FLAGS.heads], [int(t) for t in FLAGS.tokens]
    formats = [f for f in kv_cache_format.FORMATS if f.name in FLAGS.cache_formats]  # names checked in main
    gen = testing.make_generator(device, FLAGS.seed)
    copies_of, caches = bench.grid_caches(tokens, formats, l2_bytes, gen, info)
    num_blocks = next(iter(caches.values())).shape[0]
    rows = []
    for n in heads:
        for t in tokens:
            step_copy = bench.make_copies(t, n, 1, t * bench.blocks_per_context(FLAGS.context), gen)[0]
            copies = bench.make_copies(t, n, copies_of[t], num_blocks, gen)
            row = {"N": n, "T": t, "layers": FLAGS.layers, "copies": len(copies)}
            for f in formats:
                row.update({col("route", f): "-", col("layer_caches", f): 0, col("rotation_l2", f): float("nan"),
                            f"{col('bound', f)}_us": bench.bound_us(t, n, FLAGS.topk, f.slot_bytes)})
                row.update({f"{col(name, f)}_us": float("nan") for name in TIMED})  # until timed
                try:
                    time_format(row, step_copy, copies, caches[f.name], l2_bytes, gen)
                except Exception as e:  # noqa: BLE001 - one cell failing must not lose the others
                    print(f"note: N={n} T={t} {f.name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
                print_cell(row, f)
            rows.append(row)
            del copies, step_copy
    directory = bench.out_dir()
    bench.write_csv(os.path.join(directory, "model_step.csv"), rows, info)
    print(f"wrote {directory}/model_step.csv")
    columns = [col(name, f) for f in formats for name in TIMED]
    bounds = [col("bound", f) for f in formats]
    if bench.plot(os.path.join(directory, "model_step.png"), rows, columns, bounds, info,
                  ylabel=f"µs per layer (CUDA graph of {FLAGS.layers} layers)"):
        print(f"wrote {directory}/model_step.png")
    else:
        print("note: matplotlib is not installed: no model_step.png (pip install matplotlib)")
    print(summary(rows, formats))


def main(argv: Sequence[str]) -> None:
    del argv
    bench.check_flags()
    if FLAGS.layers < 1:
        raise app.UsageError(f"--layers expected >= 1, got {FLAGS.layers}")
    if not torch.cuda.is_available():
        raise app.UsageError("the model-step benchmark needs a CUDA GPU")
    device = torch.device("cuda", torch.cuda.current_device())
    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or bench.DEFAULT_L2_BYTES
    run(bench.provenance(), device, l2_bytes)


if __name__ == "__main__":
    app.run(main)
