"""Which attention kernel serves a batch: FA3 or the fused Triton kernel.

The choice is read from ``routing_table.json`` beside this file: for each measured head count ``N``
and padded token count ``T``, the faster path of a benchmark run on the H200 (its provenance is in
the file; ``tools/bench.py --write_routing_table`` or ``tools/make_routing_table.py`` write it). A batch between
measured points takes the entry of the next measured ``N`` and ``T`` at or above it (the largest
beyond the table). The choice depends only on ``(N, padded T)``, so a CUDA graph captured for one
padded batch size always replays the same kernel. Where FA3 cannot run (not Hopper, or the
extension not built) every batch goes to the Triton kernel.
"""

import bisect
import functools
import json
import os
from typing import Dict, List, Tuple

from sparse_mla.ops import fa3

ROUTING_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "routing_table.json")
KERNELS = ("fa3", "triton")
TABLE_RULE = "per (N, T) the path with the lower CUDA-graph replay median, fa3 on a tie"
"""How :func:`table_from_timings` chooses; :func:`write_table` records it in the provenance."""


@functools.lru_cache(maxsize=None)
def load_table(path: str = ROUTING_TABLE) -> Tuple[List[int], List[int], Dict[int, List[str]]]:
    """``(heads, tokens, kernel)``: sorted measured N and T, and per N the kernel for each T.

    Raises
    ------
    ValueError
        If the file lists a kernel other than those of :data:`KERNELS` or a row of the wrong length.
    """
    with open(path) as f:
        table = json.load(f)
    heads, tokens = sorted(table["heads"]), sorted(table["tokens"])
    kernel = {int(n): row for n, row in table["kernel"].items()}
    for n in heads:
        row = kernel[n]
        if len(row) != len(tokens) or any(k not in KERNELS for k in row):
            raise ValueError(f"sparse_mla: {path}: row N={n} expected {len(tokens)} entries of {KERNELS}, got {row}")
    return heads, tokens, kernel


def table_from_timings(us: Dict[Tuple[int, int, str], float]) -> Tuple[List[int], List[int], Dict[int, List[str]]]:
    """Per measured (N, T) the kernel with the lower time; FA3 on a tie or where Triton has no time.

    ``us`` maps ``(N, T, kernel)`` to µs per call for both :data:`KERNELS` at every point.
    """
    heads = sorted({n for n, _, _ in us})
    tokens = sorted({t for _, t, _ in us})

    def faster(n: int, t: int) -> str:
        return "triton" if us[(n, t, "triton")] < us[(n, t, "fa3")] else "fa3"

    return heads, tokens, {n: [faster(n, t) for t in tokens] for n in heads}


def write_table(table: Tuple[List[int], List[int], Dict[int, List[str]]], provenance: Dict[str, str],
                path: str = ROUTING_TABLE) -> None:
    """Write ``table`` with its provenance (and :data:`TABLE_RULE`) to ``path``, one line per list so
    diffs read as changed choices."""
    heads, tokens, kernel = table
    provenance = {**provenance, "rule": TABLE_RULE}
    lines = ["{", f' "provenance": {json.dumps(provenance, indent=2)},'.replace("\n", "\n "),
             f' "heads": {json.dumps(heads)},', f' "tokens": {json.dumps(tokens)},', ' "kernel": {']
    lines += [f'  "{n}": {json.dumps(kernel[n])}' + ("," if i < len(heads) - 1 else "") for i, n in enumerate(heads)]
    lines += [" }", "}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    load_table.cache_clear()


def _at_or_above(values: List[int], x: int) -> int:
    return values[min(bisect.bisect_left(values, x), len(values) - 1)]


def lookup(table: Tuple[List[int], List[int], Dict[int, List[str]]], num_heads: int, num_tokens: int) -> str:
    """The table's kernel for the next measured ``N`` and ``T`` at or above ``(num_heads, num_tokens)``."""
    heads, tokens, kernel = table
    row = kernel[_at_or_above(heads, num_heads)]
    return row[tokens.index(_at_or_above(tokens, max(num_tokens, 1)))]


def choose_kernel(num_heads: int, num_tokens: int) -> str:
    """``"fa3"`` or ``"triton"`` for ``num_tokens`` (padded) query tokens of ``num_heads`` heads.

    Host-side only (no device work, no synchronization).
    """
    if not fa3.is_available():
        return "triton"
    return lookup(load_table(), num_heads, num_tokens)
