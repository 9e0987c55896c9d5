"""Which attention kernel serves a batch: FA3 or the fused Triton kernel.

The choice is read from ``routing_table.json`` beside this file: for each measured head count ``N``
and padded token count ``T``, the faster path of a benchmark run on the H200 (its provenance is in
the file; ``tools/make_routing_table.py`` writes it from ``tools/bench.py``'s CSV). A batch between
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
