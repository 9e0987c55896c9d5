"""Which route serves a step: the routing table, its lookup, and the fallbacks where a route cannot run.

The choice is read from ``routing_table.json`` beside this file: for each measured head count ``N``
and padded token count ``T``, the fastest route of a benchmark run on the H200 (its provenance is in
the file; ``tools/bench.py --write_routing_table`` or ``tools/make_routing_table.py`` write it), named
by the keys of :data:`sparse_mla.routes.ROUTES`. A step between measured points takes the entry of the
next measured ``N`` and ``T`` at or above it (the largest beyond the table). Where the table's route
cannot run here (e.g. FA3 without its extension, or not on Hopper), its ``fallback`` runs instead.

The metadata builder asks once per padded ``T`` and keeps the answer (with the rest of the step's
plan), so a CUDA graph captured for one padded batch size always replays the same kernels; it also
takes an explicit ``route=`` that overrides the table (tests, the benchmark).
"""

import bisect
import functools
import json
import os
from typing import Dict, List, Tuple

from sparse_mla.routes import ROUTES

ROUTING_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "routing_table.json")
TABLE_RULE = "per (N, T) the route with the lowest CUDA-graph replay median, the earlier of sparse_mla.routes.ROUTES on a tie"
"""How :func:`table_from_timings` chooses; :func:`write_table` records it in the provenance."""

Table = Tuple[List[int], List[int], Dict[int, List[str]]]
"""``(heads, tokens, route)``: sorted measured N and T, and per N the route name for each T."""


@functools.lru_cache(maxsize=None)
def load_table(path: str = ROUTING_TABLE) -> Table:
    """The routing table in ``path`` (read once per path).

    The file's ``"kernel"`` object maps each measured N (a string) to one route name per measured T.

    Raises
    ------
    ValueError
        If the file names a route that is not in :data:`sparse_mla.routes.ROUTES`, or a row has the wrong length.
    """
    with open(path) as f:
        table = json.load(f)
    heads, tokens = sorted(table["heads"]), sorted(table["tokens"])
    route = {int(n): row for n, row in table["kernel"].items()}
    for n in heads:
        row = route[n]
        if len(row) != len(tokens) or any(k not in ROUTES for k in row):
            raise ValueError(f"sparse_mla: {path}: row N={n} expected {len(tokens)} entries of {tuple(ROUTES)}, got {row}")
    return heads, tokens, route


def table_from_timings(us: Dict[Tuple[int, int, str], float]) -> Table:
    """Per measured (N, T) the route with the lowest time (:data:`TABLE_RULE`).

    ``us`` maps ``(N, T, route)`` to µs per call; every route timed at one point must be timed at all,
    and NaN times (a route that failed or was not timed) never win.
    """
    heads = sorted({n for n, _, _ in us})
    tokens = sorted({t for _, t, _ in us})
    timed = [name for name in ROUTES if any(k == name for _, _, k in us)]

    def fastest(n: int, t: int) -> str:
        times = [(us[(n, t, k)], i) for i, k in enumerate(timed) if us[(n, t, k)] == us[(n, t, k)]]  # NaN != NaN
        return timed[min(times)[1]] if times else timed[0]

    return heads, tokens, {n: [fastest(n, t) for t in tokens] for n in heads}


def write_table(table: Table, provenance: Dict[str, str], path: str = ROUTING_TABLE) -> None:
    """Write ``table`` with its provenance (and :data:`TABLE_RULE`) to ``path``, one line per list so
    diffs read as changed choices."""
    heads, tokens, route = table
    provenance = {**provenance, "rule": TABLE_RULE}
    lines = ["{", f' "provenance": {json.dumps(provenance, indent=2)},'.replace("\n", "\n "),
             f' "heads": {json.dumps(heads)},', f' "tokens": {json.dumps(tokens)},', ' "kernel": {']
    lines += [f'  "{n}": {json.dumps(route[n])}' + ("," if i < len(heads) - 1 else "") for i, n in enumerate(heads)]
    lines += [" }", "}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    load_table.cache_clear()


def _at_or_above(values: List[int], x: int) -> int:
    return values[min(bisect.bisect_left(values, x), len(values) - 1)]


def lookup(table: Table, num_heads: int, num_tokens: int) -> str:
    """The table's route for the next measured ``N`` and ``T`` at or above ``(num_heads, num_tokens)``."""
    heads, tokens, route = table
    row = route[_at_or_above(heads, num_heads)]
    return row[tokens.index(_at_or_above(tokens, max(num_tokens, 1)))]


def runnable(name: str, device_type: str = "cuda") -> str:
    """``name``, or the first route of its fallback chain that is available here for tensors on a
    device of ``device_type`` (``"cuda"``, or ``"cpu"``: only routes with ``runs_on_cpu``)."""
    while not (ROUTES[name].is_available() and (device_type == "cuda" or ROUTES[name].runs_on_cpu)):
        fallback = ROUTES[name].fallback
        if fallback is None:
            raise RuntimeError(f"sparse_mla: route {name!r} is not available here and has no fallback")
        name = fallback
    return name


def choose_route(num_heads: int, num_tokens: int, device_type: str = "cuda") -> str:
    """The route of a step of ``num_tokens`` (padded) query tokens of ``num_heads`` heads: the checked-in
    table's, or its fallback where it cannot run here (:func:`runnable`). Host-side only (no device work)."""
    return runnable(lookup(load_table(), num_heads, num_tokens), device_type)


def routes_up_to(num_heads: int, max_num_tokens: int, device_type: str = "cuda") -> List[str]:
    """Every route :func:`choose_route` gives for ``num_heads`` heads and ``1 <= T <= max_num_tokens``
    (what a metadata builder allocates workspaces for), in :data:`~sparse_mla.routes.ROUTES` order."""
    _, tokens, _ = load_table()
    points = [t for t in tokens if t < max_num_tokens] + [max_num_tokens]
    chosen = {choose_route(num_heads, t, device_type) for t in points}
    return [name for name in ROUTES if name in chosen]
