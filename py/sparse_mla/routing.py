"""Which route serves a step: the routing table, its lookup, and the fallbacks where a route cannot run.

The choice is read from ``routing_table.json`` beside this file: for each measured head count ``N``
and padded token count ``T``, the fastest route of a benchmark run on the H200 (its provenance is in
the file; ``tools/bench.py --write_routing_table`` or ``tools/make_routing_table.py`` write it), named
by the keys of :data:`sparse_mla.routes.ROUTES`. A step between measured points takes the entry of the
next measured ``N`` and ``T`` at or above it (the largest beyond the table). Where the table's route
cannot run here (e.g. FA3 without its extension, or not on Hopper) or cannot read the step's KV-cache
format (``Route.cache_formats``: the fp8_ds_mla cache is read by Triton only, for now), its ``fallback``
runs instead. The table was measured on the bf16 cache; the fp8_ds_mla cache has no table of its own yet.

The metadata builder asks once per padded ``T`` and keeps the answer (with the rest of the step's
plan), so a CUDA graph captured for one padded batch size always replays the same kernels; it also
takes an explicit ``route=`` that overrides the table (tests, the benchmark).
"""

import bisect
import functools
import json
import os
from typing import Dict, List, Tuple

from sparse_mla.kv_cache_format import BF16
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


def serves(name: str, device_type: str = "cuda", cache_format: str = BF16.name) -> bool:
    """Whether route ``name`` runs here for tensors on a device of ``device_type`` (``"cuda"``, or ``"cpu"``:
    only routes with ``runs_on_cpu``) and reads caches of format ``cache_format`` (a name of
    :mod:`sparse_mla.kv_cache_format`)."""
    route = ROUTES[name]
    return bool(route.is_available()) and (device_type == "cuda" or route.runs_on_cpu) and (
        cache_format in route.cache_formats
    )


def runnable(name: str, device_type: str = "cuda", cache_format: str = BF16.name) -> str:
    """``name``, or the first route of its fallback chain that :func:`serves` ``device_type`` and ``cache_format``."""
    while not serves(name, device_type, cache_format):
        fallback = ROUTES[name].fallback
        if fallback is None:
            raise RuntimeError(
                f"sparse_mla: route {name!r} is not available here for {device_type} tensors and the "
                f"{cache_format} cache, and has no fallback"
            )
        name = fallback
    return name


def choose_route(num_heads: int, num_tokens: int, device_type: str = "cuda", cache_format: str = BF16.name) -> str:
    """The route of a step of ``num_tokens`` (padded) query tokens of ``num_heads`` heads on a cache of format
    ``cache_format``: the checked-in table's, or its fallback where that one cannot serve the step
    (:func:`runnable`). Host-side only (no device work)."""
    return runnable(lookup(load_table(), num_heads, num_tokens), device_type, cache_format)


def routes_up_to(num_heads: int, max_num_tokens: int, device_type: str = "cuda", cache_format: str = BF16.name) -> List[str]:
    """Every route :func:`choose_route` gives for ``num_heads`` heads, ``1 <= T <= max_num_tokens`` and
    ``cache_format`` (what a metadata builder allocates workspaces for), in :data:`~sparse_mla.routes.ROUTES` order."""
    _, tokens, _ = load_table()
    points = [t for t in tokens if t < max_num_tokens] + [max_num_tokens]
    chosen = {choose_route(num_heads, t, device_type, cache_format) for t in points}
    return [name for name in ROUTES if name in chosen]
