"""Which route serves a step: the routing tables, their lookup, and the fallbacks where a route cannot run.

The choice is read from the routing table of the step's GPU: ``routing_tables/<gpu>.json`` beside this file
(:func:`table_path`; a GPU without a table of its own, and the CPU, take :data:`DEFAULT_GPU`'s). A table holds one
grid per KV-cache format (keyed by the names of :mod:`sparse_mla.kv_cache_format`: ``"bfloat16"``,
``"fp8_ds_mla"``): for each measured head count ``N`` and padded token count ``T``, the fastest route reading that
format in a benchmark run on that GPU (each grid's provenance, the GPU included, is in the file;
``tools/bench.py --write_routing_table`` or ``tools/make_routing_table.py`` write it), named by the keys of
:data:`sparse_mla.routes.ROUTES`. A step between measured points takes the entry of the next measured ``N`` and
``T`` at or above it (the largest beyond the table). Where the table's route cannot run here (e.g. FA3 without its
extension, or not on Hopper) or cannot read the step's KV-cache format (``Route.cache_formats``), its ``fallback``
runs instead.
A grid written by hand before it was measured says so in its provenance (``"note": "not measured yet"``).

The metadata builder asks once per padded ``T`` and keeps the answer (with the rest of the step's
plan), so a CUDA graph captured for one padded batch size always replays the same kernels; it also
takes an explicit ``route=`` that overrides the table (tests, the benchmark).
"""

import bisect
import csv
import functools
import json
import os
import re
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import torch

from sparse_mla.checks import check_int, check_num_heads
from sparse_mla.kv_cache_format import BF16, FORMATS
from sparse_mla.routes import ROUTES

ROUTING_TABLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "routing_tables")
"""The folder of the routing tables, one file a GPU (:func:`gpu_table_path`)."""
DEFAULT_GPU = "NVIDIA H100 80GB HBM3"
"""The GPU whose table serves a GPU without a table of its own, and the CPU."""
TABLE_RULE = "per (N, T) the route with the lowest CUDA-graph replay median, the earlier of sparse_mla.routes.ROUTES on a tie"
"""How :func:`table_from_timings` chooses; :func:`write_table` records it in the provenance."""

CACHE_FORMATS = tuple(fmt.name for fmt in FORMATS)
"""The names a table file's grids are keyed by, in the order :func:`write_table` writes them."""

Table = Tuple[List[int], List[int], Dict[int, List[str]]]
"""``(heads, tokens, route)`` of one cache format: sorted measured N and T, and per N the route name for each T."""


def _check_cache_format(cache_format: str) -> None:
    if cache_format not in CACHE_FORMATS:
        raise ValueError(f"sparse_mla: argument 'cache_format' expected one of {CACHE_FORMATS}, got {cache_format!r}")


def _read_file(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def gpu_table_path(gpu: str) -> str:
    """The routing-table file of GPU ``gpu`` (its CUDA device name, as ``torch.cuda.get_device_name`` gives it),
    whether or not it exists: :data:`ROUTING_TABLES`/ the name in lower case, each run of characters other than
    letters and digits as ``_``, ``.json`` (``"NVIDIA H100 80GB HBM3"``: ``nvidia_h100_80gb_hbm3.json``).

    Raises
    ------
    TypeError
        ``gpu`` not a string.
    ValueError
        ``gpu`` without a letter or digit.
    """
    if not isinstance(gpu, str):
        raise TypeError(f"sparse_mla: argument 'gpu' expected a CUDA device name (str), got {type(gpu).__name__} {gpu!r}")
    stem = re.sub(r"[^a-z0-9]+", "_", gpu.lower()).strip("_")
    if not stem:
        raise ValueError(f"sparse_mla: argument 'gpu' expected a CUDA device name, got {gpu!r}")
    return os.path.join(ROUTING_TABLES, stem + ".json")


def table_path(gpu: Optional[str] = None) -> str:
    """The routing table that serves GPU ``gpu``: its own (:func:`gpu_table_path`) where it exists, else
    :data:`DEFAULT_GPU`'s (also for ``None``: the CPU).

    Raises
    ------
    TypeError, ValueError
        As :func:`gpu_table_path`.
    """
    own = gpu_table_path(gpu) if gpu is not None else None
    return own if own is not None and os.path.exists(own) else gpu_table_path(DEFAULT_GPU)


@functools.lru_cache(maxsize=None)
def _device_name(device_index: int) -> str:
    return torch.cuda.get_device_name(device_index)


def device_table_path(device_type: str = "cuda", device_index: Optional[int] = None) -> str:
    """The routing table that serves tensors on a device of ``device_type``: for ``"cuda"``, that of CUDA device
    ``device_index`` (the current one when ``None``) by its name; for the CPU (or no CUDA device),
    :data:`DEFAULT_GPU`'s.

    Raises
    ------
    TypeError
        ``device_index`` neither ``None`` nor an int.
    ValueError
        ``device_type`` not one of :data:`DEVICE_TYPES`, or ``device_index`` not a CUDA device of this machine.
    """
    _check_device_type(device_type)
    if device_index is not None:
        device_index = check_int("device_index", device_index)
    if device_type != "cuda" or not torch.cuda.is_available():
        return table_path()
    if device_index is None:
        device_index = torch.cuda.current_device()
    elif not 0 <= device_index < torch.cuda.device_count():
        raise ValueError(f"sparse_mla: argument 'device_index' expected a CUDA device in [0, "
                         f"{torch.cuda.device_count()}), got {device_index}")
    return table_path(_device_name(device_index))


@functools.lru_cache(maxsize=None)
def load_table(path: Optional[str] = None, cache_format: str = BF16.name) -> Table:
    """The grid of ``cache_format`` in the routing-table file ``path`` (:func:`table_path`'s default when
    ``None``; read once per path and format).

    The file maps each cache-format name to a grid: ``"provenance"``, ``"heads"`` and ``"tokens"`` (the
    measured N and T) and ``"kernel"``, an object mapping each measured N (a string) to one route name per
    measured T.

    Raises
    ------
    ValueError
        ``cache_format`` is not a name of :mod:`sparse_mla.kv_cache_format`, the file has no grid for it,
        or its grid names a route that is not in :data:`sparse_mla.routes.ROUTES` or cannot read
        ``cache_format`` (``Route.cache_formats``), or has a row of the wrong length.
    """
    _check_cache_format(cache_format)
    path = table_path() if path is None else path
    grids = _read_file(path)
    if cache_format not in grids:
        raise ValueError(f"sparse_mla: {path}: expected a grid for the {cache_format} cache, got {sorted(grids)}")
    grid = grids[cache_format]
    heads, tokens = sorted(grid["heads"]), sorted(grid["tokens"])
    route = {int(n): row for n, row in grid["kernel"].items()}
    readers = tuple(name for name, r in ROUTES.items() if cache_format in r.cache_formats)
    for n in heads:
        row = route[n]
        if len(row) != len(tokens) or any(k not in readers for k in row):
            raise ValueError(
                f"sparse_mla: {path}: {cache_format} row N={n} expected {len(tokens)} entries of {readers}, got {row}"
            )
    return heads, tokens, route


def table_from_timings(us: Dict[Tuple[int, int, str], float], cache_format: str = BF16.name) -> Table:
    """Per measured (N, T) the route with the lowest time (:data:`TABLE_RULE`), a grid of ``cache_format``.

    ``us`` maps ``(N, T, route)`` to µs per call on a cache of ``cache_format``; every route timed at one
    point must be timed at all, and NaN times (a route that failed or was not timed) never win.

    Raises
    ------
    ValueError
        ``us`` times a route that cannot read ``cache_format`` (``Route.cache_formats``): its grid could
        not name it.
    """
    _check_cache_format(cache_format)
    heads = sorted({n for n, _, _ in us})
    tokens = sorted({t for _, t, _ in us})
    timed = [name for name in ROUTES if any(k == name for _, _, k in us)]
    foreign = [name for name in timed if cache_format not in ROUTES[name].cache_formats]
    if foreign:
        raise ValueError(f"sparse_mla: argument 'us' times routes that cannot read the {cache_format} cache: {foreign}")

    def fastest(n: int, t: int) -> str:
        times = [(us[(n, t, k)], i) for i, k in enumerate(timed) if us[(n, t, k)] == us[(n, t, k)]]  # NaN != NaN
        return timed[min(times)[1]] if times else timed[0]

    return heads, tokens, {n: [fastest(n, t) for t in tokens] for n in heads}


def with_rows_of(base: Table, rows: Table) -> Table:
    """``base`` with the rows (N) of ``rows``, taken at ``base``'s T, in place of its own (or added).

    Raises
    ------
    ValueError
        ``rows`` does not measure every T of ``base``.
    """
    base_heads, tokens, base_route = base
    heads, row_tokens, route = rows
    missing = [t for t in tokens if t not in row_tokens]
    if missing:
        raise ValueError(f"sparse_mla: argument 'rows' expected every T of the grid {tokens}, misses {missing}")
    columns = [row_tokens.index(t) for t in tokens]
    merged = {**base_route, **{n: [route[n][i] for i in columns] for n in heads}}
    return sorted(merged), tokens, merged


def bench_column(path: str, cache_format: str = BF16.name) -> str:
    """The stem of ``tools/bench.py``'s grid columns of ``path`` (a route name, or another timed path such as
    ``"fa3_kernel"``) on a cache of ``cache_format``: ``path`` itself on bf16 (the names of results from before
    the fp8_ds_mla cache), ``path + "_fp8"`` on fp8_ds_mla; the columns append ``_us``, ``_relerr`` and
    ``_over_bound``."""
    _check_cache_format(cache_format)
    return path if cache_format == BF16.name else f"{path}_fp8"


def gpu_of_provenance(gpu: str) -> str:
    """The CUDA device name in a ``tools/bench.py`` provenance ``gpu`` value (``"NAME (132 SMs)"``)."""
    return re.sub(r" \(\d+ SMs\)$", "", gpu)


def read_bench_csv(path: str) -> Tuple[Dict[str, str], List[Dict[str, str]]]:
    """A ``tools/bench.py`` grid CSV: its provenance (the ``# key: value`` lines above the header) and its rows
    (``csv.DictReader``'s dicts, as :func:`table_from_bench_rows` takes them)."""
    with open(path) as f:
        lines = f.read().splitlines()
    provenance = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
    return provenance, list(csv.DictReader(line for line in lines if not line.startswith("#")))


def table_from_bench_rows(rows: Iterable[Mapping[str, object]], cache_format: str = BF16.name) -> Optional[Table]:
    """The grid of ``cache_format`` from ``tools/bench.py``'s grid rows (its dicts, or ``csv.DictReader`` rows of
    its ``bench.csv``: ``"N"``, ``"T"`` and ``{bench_column(route, cache_format)}_us``), by :func:`table_from_timings`
    over the routes that read ``cache_format`` and have a number in at least one row.

    Returns ``None`` where fewer than two such routes were timed: there is nothing to choose between, and the
    grid in the file is better kept (e.g. FA3 missing on the machine, or a kernel that rejected the format).
    """
    rows = list(rows)
    us = {}
    for name, route in ROUTES.items():
        column = f"{bench_column(name, cache_format)}_us"
        if cache_format not in route.cache_formats or not rows or column not in rows[0]:
            continue
        times = {(int(r["N"]), int(r["T"]), name): float(r[column]) for r in rows}
        if any(x == x for x in times.values()):  # NaN != NaN: a column without a single time is not timed
            us.update(times)
    if len({k for _, _, k in us}) < 2:
        return None
    return table_from_timings(us, cache_format)


def write_table(table: Table, provenance: Dict[str, str], path: str, cache_format: str = BF16.name) -> None:
    """Write ``table`` as the grid of ``cache_format``, with its provenance (and :data:`TABLE_RULE`), into the
    file ``path``, keeping the file's grids of the other formats (a new file starts from :data:`DEFAULT_GPU`'s, so
    that it serves every format; each grid's provenance names its GPU); one line per list so diffs read as
    changed choices."""
    _check_cache_format(cache_format)
    heads, tokens, route = table
    grids = _read_file(path if os.path.exists(path) else table_path())
    grids[cache_format] = {"provenance": {**provenance, "rule": TABLE_RULE}, "heads": heads, "tokens": tokens,
                           "kernel": {str(n): route[n] for n in heads}}
    names = [name for name in CACHE_FORMATS if name in grids]
    lines = ["{"]
    for i, name in enumerate(names):
        grid = grids[name]
        kernel = grid["kernel"]
        lines += [f' "{name}": {{', f'  "provenance": {json.dumps(grid["provenance"], indent=2)},'.replace("\n", "\n  "),
                  f'  "heads": {json.dumps(grid["heads"])},', f'  "tokens": {json.dumps(grid["tokens"])},', '  "kernel": {']
        lines += [f'   "{n}": {json.dumps(row)}' + ("," if j < len(kernel) - 1 else "") for j, (n, row) in enumerate(kernel.items())]
        lines += ["  }", " }" + ("," if i < len(names) - 1 else "")]
    lines += ["}"]
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


DEVICE_TYPES = ("cuda", "cpu")
"""The device types a route serves: CUDA devices, and the CPU under Triton's interpreter."""


def _check_route(name: str) -> None:
    if name not in ROUTES:
        raise ValueError(f"sparse_mla: argument 'name' expected one of {tuple(ROUTES)}, got {name!r}")


def _check_device_type(device_type: str) -> None:
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"sparse_mla: argument 'device_type' expected one of {DEVICE_TYPES}, got {device_type!r}")


def serves(name: str, device_type: str = "cuda", cache_format: str = BF16.name,
           device_index: Optional[int] = None) -> bool:
    """Whether route ``name`` runs here for tensors on a device of ``device_type`` (``"cuda"``: CUDA device
    ``device_index``, the current one when ``None``; or ``"cpu"``: only routes with ``runs_on_cpu``) and
    reads caches of format ``cache_format`` (a name of :mod:`sparse_mla.kv_cache_format`).

    Raises
    ------
    ValueError
        ``name`` not a route of :data:`sparse_mla.routes.ROUTES`, ``device_type`` not one of :data:`DEVICE_TYPES`.
    """
    _check_route(name)
    _check_device_type(device_type)
    route = ROUTES[name]
    return bool(route.is_available(device_index)) and (device_type == "cuda" or route.runs_on_cpu) and (
        cache_format in route.cache_formats
    )


def runnable(name: str, device_type: str = "cuda", cache_format: str = BF16.name,
             device_index: Optional[int] = None) -> str:
    """``name``, or the first route of its fallback chain that :func:`serves` ``device_type`` (device
    ``device_index``) and ``cache_format``.

    Raises
    ------
    ValueError
        As :func:`serves`.
    RuntimeError
        No route of the chain serves them.
    """
    while not serves(name, device_type, cache_format, device_index):
        fallback = ROUTES[name].fallback
        if fallback is None:
            raise RuntimeError(
                f"sparse_mla: route {name!r} is not available here for {device_type} tensors and the "
                f"{cache_format} cache, and has no fallback"
            )
        name = fallback
    return name


def choose_route(num_heads: int, num_tokens: int, device_type: str = "cuda", cache_format: str = BF16.name,
                 device_index: Optional[int] = None) -> str:
    """The route of a step of ``num_tokens`` (padded) query tokens of ``num_heads`` heads on a cache of format
    ``cache_format`` on CUDA device ``device_index`` (the current one when ``None``): the route of that GPU's
    routing table (:func:`device_table_path`), or its fallback where that one cannot serve the step
    (:func:`runnable`). Host-side only (no device work).

    Raises
    ------
    TypeError
        ``num_heads`` or ``num_tokens`` not an int.
    ValueError
        ``num_heads`` outside [1, 128], a negative ``num_tokens``, an unknown ``cache_format``, or ``device_type``
        not one of :data:`DEVICE_TYPES` (:func:`serves`).
    RuntimeError
        No route serves the step here (:func:`runnable`).
    """
    num_heads = check_num_heads("num_heads", num_heads)
    if check_int("num_tokens", num_tokens) < 0:
        raise ValueError(f"sparse_mla: argument 'num_tokens' expected >= 0, got {num_tokens}")
    table = load_table(device_table_path(device_type, device_index), cache_format)
    return runnable(lookup(table, num_heads, num_tokens), device_type, cache_format, device_index)


def routes_up_to(num_heads: int, max_num_tokens: int, device_type: str = "cuda", cache_format: str = BF16.name,
                 device_index: Optional[int] = None) -> List[str]:
    """Every route :func:`choose_route` gives for ``num_heads`` heads, ``1 <= T <= max_num_tokens`` and
    ``cache_format`` (what a metadata builder allocates workspaces for), in :data:`~sparse_mla.routes.ROUTES` order.

    Raises
    ------
    TypeError, ValueError, RuntimeError
        As :func:`choose_route`, for ``max_num_tokens`` as for ``num_tokens``.
    """
    max_num_tokens = check_int("max_num_tokens", max_num_tokens)
    _, tokens, _ = load_table(device_table_path(device_type, device_index), cache_format)
    points = [t for t in tokens if t < max_num_tokens] + [max_num_tokens]
    chosen = {choose_route(num_heads, t, device_type, cache_format, device_index) for t in points}
    return [name for name in ROUTES if name in chosen]
