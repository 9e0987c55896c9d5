"""Routing between the routes of sparse_mla.routes: the checked-in table, its lookup, the fallbacks."""

import dataclasses
import json
import pathlib
import re

import pytest
import torch

from sparse_mla import routing
from sparse_mla.ops import fa3
from sparse_mla.routes import ROUTES

TABLE = ([16, 64], [1, 8, 128], {16: ["triton", "fa3", "fa3"], 64: ["fa3", "triton", "fa3"]})


@pytest.mark.parametrize(
    "num_heads, num_tokens, expected",
    [
        (16, 1, "triton"),  # a measured point
        (16, 8, "fa3"),
        (64, 8, "triton"),
        (8, 1, "triton"),  # fewer heads than measured: the smallest measured N
        (17, 1, "fa3"),  # between measured N: the next N at or above (64)
        (64, 2, "triton"),  # between measured T: the next T at or above (8)
        (16, 0, "triton"),  # no tokens (all padding): as T = 1
        (128, 100000, "fa3"),  # beyond the table: its largest N and T
    ],
)
def test_lookup_takes_the_next_measured_point(num_heads, num_tokens, expected):
    assert routing.lookup(TABLE, num_heads, num_tokens) == expected


TABLE_FILES = sorted(pathlib.Path(routing.ROUTING_TABLES).glob("*.json"))


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda path: path.name)
def test_checked_in_tables_have_a_complete_grid_per_cache_format_with_provenance(path):
    with open(path) as f:
        grids = json.load(f)
    assert sorted(grids) == sorted(routing.CACHE_FORMATS) == ["bfloat16", "fp8_ds_mla"]
    for cache_format in routing.CACHE_FORMATS:
        heads, tokens, kernel = routing.load_table(str(path), cache_format)  # raises on a route that cannot read it
        assert heads and tokens and set(kernel) == set(heads), cache_format
        provenance = grids[cache_format]["provenance"]
        measured = ("date", "gpu", "driver", "torch", "triton", "git", "source", "rule")
        if provenance.get("note") == "not measured yet":  # the fp8_ds_mla grid until a bench run writes it
            assert cache_format != "bfloat16" and provenance.get("source"), provenance
            assert {k for row in kernel.values() for k in row} == {"triton"}, "an unmeasured grid names Triton only"
            continue
        for key in measured:
            assert provenance.get(key), f"{cache_format} provenance expected '{key}', got {provenance}"
    assert routing.gpu_table_path(routing.gpu_of_provenance(grids["bfloat16"]["provenance"]["gpu"])) == str(path), "a file is named by its GPU"
    assert routing.load_table(str(path)) == routing.load_table(str(path), "bfloat16"), "the default grid is bf16's"


def test_each_gpu_takes_its_own_table_and_any_other_the_default_gpus():
    default = routing.gpu_table_path(routing.DEFAULT_GPU)
    assert pathlib.Path(default) in TABLE_FILES and default.endswith("routing_tables/nvidia_h100_80gb_hbm3.json")
    assert routing.gpu_table_path("NVIDIA H200") == str(pathlib.Path(routing.ROUTING_TABLES) / "nvidia_h200.json")
    for path in TABLE_FILES:
        with open(path) as f:
            gpu = routing.gpu_of_provenance(json.load(f)["bfloat16"]["provenance"]["gpu"])
        assert routing.table_path(gpu) == str(path)
    assert routing.table_path("NVIDIA GeForce RTX 4090") == routing.table_path() == default  # no table of its own
    assert routing.device_table_path("cpu") == default
    here = routing.table_path(torch.cuda.get_device_name()) if torch.cuda.is_available() else default
    assert routing.device_table_path("cuda") == here
    assert routing.load_table() == routing.load_table(default)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: routing.gpu_table_path(None), TypeError, "argument 'gpu' expected a CUDA device name \\(str\\), got NoneType"),
        (lambda: routing.table_path(9.0), TypeError, "argument 'gpu' expected a CUDA device name \\(str\\), got float"),
        (lambda: routing.gpu_table_path(" - "), ValueError, "argument 'gpu' expected a CUDA device name, got ' - '"),
        (lambda: routing.device_table_path("meta"), ValueError, "argument 'device_type' expected one of"),
        (lambda: routing.device_table_path("cuda", "0"), TypeError, "argument 'device_index' expected an int, got str"),
    ],
)
def test_table_paths_name_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_device_table_path_names_a_device_this_machine_lacks():
    if not torch.cuda.is_available():
        assert routing.device_table_path("cuda", 99) == routing.table_path()  # no CUDA device: the default table
        return
    with pytest.raises(ValueError, match=r"argument 'device_index' expected a CUDA device in \[0, \d+\), got 99"):
        routing.device_table_path("cuda", 99)


ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda path: path.name)
@pytest.mark.parametrize("cache_format", routing.CACHE_FORMATS)
def test_checked_in_tables_are_their_sources_fastest_routes(path, cache_format):
    """The provenance's CSVs are in the repository and give the checked-in grid (tools/make_routing_table.py's rule),
    so a table cannot name a measurement that is not committed or drift from it."""
    with open(path) as f:
        source = json.load(f)[cache_format]["provenance"]["source"]
    paths = re.findall(r"[^\s,;()]+\.csv", source)
    assert paths, f"{cache_format} provenance 'source' names no CSV: {source!r}"
    missing = [csv for csv in paths if not (ROOT / csv).is_file()]
    assert not missing, f"{cache_format} provenance 'source' names CSVs not in the repository: {missing}"
    if "other rows" in source:  # a --merge of several runs: the rows' split is not recorded, only the files
        return
    rows = [row for csv in paths for row in routing.read_bench_csv(str(ROOT / csv))[1]]
    assert routing.table_from_bench_rows(rows, cache_format) == routing.load_table(str(path), cache_format)


def _write_grids(path, grids):
    path.write_text(json.dumps({name: {"heads": [16], "tokens": [1, 2], "kernel": {"16": row}}
                                for name, row in grids.items()}))
    return str(path)


def test_rejects_a_malformed_table(tmp_path):
    path = _write_grids(tmp_path / "table.json", {"bfloat16": ["fa3", "flashmla"]})
    with pytest.raises(ValueError, match=r"bfloat16 row N=16 expected 2 entries of \(" + ", ".join(repr(r) for r in ROUTES) + r"\)"):
        routing.load_table(path)
    with pytest.raises(ValueError, match=r"expected a grid for the fp8_ds_mla cache, got \['bfloat16'\]"):
        routing.load_table(path, "fp8_ds_mla")
    with pytest.raises(ValueError, match=r"argument 'cache_format' expected one of \('bfloat16', 'fp8_ds_mla'\), got 'fp8'"):
        routing.load_table(path, "fp8")


def test_rejects_a_grid_naming_a_route_that_cannot_read_its_format(tmp_path):
    path = _write_grids(tmp_path / "table.json", {"bfloat16": ["fa3", "triton"], "fp8_ds_mla": ["triton", "fa3"]})
    assert routing.load_table(path, "bfloat16")[2] == {16: ["fa3", "triton"]}
    readers = tuple(name for name, r in ROUTES.items() if "fp8_ds_mla" in r.cache_formats)
    with pytest.raises(ValueError, match=r"fp8_ds_mla row N=16 expected 2 entries of " + re.escape(str(readers))):
        routing.load_table(path, "fp8_ds_mla")


def test_write_table_replaces_one_format_and_keeps_the_others(tmp_path):
    path = str(tmp_path / "table.json")
    bf16 = ([16, 64], [1, 8], {16: ["decode", "fa3"], 64: ["fa3", "triton"]})
    fp8 = ([16], [1, 8, 64], {16: ["triton", "triton", "triton"]})
    routing.write_table(bf16, {"source": "first"}, path)  # the default format: bf16
    routing.write_table(fp8, {"source": "second"}, path, "fp8_ds_mla")
    assert routing.load_table(path) == bf16 and routing.load_table(path, "fp8_ds_mla") == fp8
    new_bf16 = ([16], [1], {16: ["triton"]})
    routing.write_table(new_bf16, {"source": "third"}, path, "bfloat16")  # clears load_table's cache
    assert routing.load_table(path) == new_bf16 and routing.load_table(path, "fp8_ds_mla") == fp8
    with open(path) as f:
        grids = json.load(f)
    assert list(grids) == ["bfloat16", "fp8_ds_mla"]
    assert grids["fp8_ds_mla"]["provenance"] == {"source": "second", "rule": routing.TABLE_RULE}
    assert grids["bfloat16"]["provenance"] == {"source": "third", "rule": routing.TABLE_RULE}


def test_a_new_gpus_table_starts_from_the_default_gpus_grids(tmp_path):
    """A table written for a GPU without one serves every format at once: the grids not written are the default
    GPU's, their provenance (its GPU) kept."""
    path = str(tmp_path / "new_gpu.json")
    bf16 = ([16], [1, 8], {16: ["decode", "fa3"]})
    routing.write_table(bf16, {"source": "new", "gpu": "NEW GPU (8 SMs)"}, path)
    assert routing.load_table(path) == bf16
    assert routing.load_table(path, "fp8_ds_mla") == routing.load_table(cache_format="fp8_ds_mla")
    with open(path) as f, open(routing.table_path()) as g:
        assert json.load(f)["fp8_ds_mla"]["provenance"] == json.load(g)["fp8_ds_mla"]["provenance"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of machines without FA3")
def test_without_fa3_every_batch_goes_to_triton():
    assert not fa3.is_available()
    assert routing.runnable("fa3") == "triton" and routing.runnable("triton") == "triton"
    assert routing.runnable("decode") == "triton", "decode falls back to FA3, which falls back to Triton"
    for num_heads, num_tokens in ((16, 1), (16, 8), (128, 1024)):
        assert routing.choose_route(num_heads, num_tokens) == "triton"
    assert routing.routes_up_to(16, 8192) == ["triton"]


def test_cpu_tensors_take_a_route_that_runs_on_the_cpu():
    """Whatever this machine has, a step on CPU tensors runs where they can be read: Triton's interpreter."""
    for name in ROUTES:
        assert routing.runnable(name, "cpu") == "triton"
    assert routing.routes_up_to(16, 8192, "cpu") == ["triton"]
    assert routing.choose_route(16, 1, "cpu") == "triton"


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((0, 1), ValueError, "argument 'num_heads' expected 1 <= num_heads <= 128, got 0"),
        ((129, 1), ValueError, "argument 'num_heads' expected 1 <= num_heads <= 128, got 129"),
        ((16.5, 1), TypeError, "argument 'num_heads' expected an int, got float 16.5"),
        (("16", 1), TypeError, "argument 'num_heads' expected an int, got str '16'"),
        ((16, 3.5), TypeError, "argument 'num_tokens' expected an int, got float 3.5"),
        ((16, -1), ValueError, "argument 'num_tokens' expected >= 0, got -1"),
        ((16, 1, "meta"), ValueError, r"argument 'device_type' expected one of \('cuda', 'cpu'\), got 'meta'"),
    ],
)
def test_choose_route_names_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        routing.choose_route(*args)


@pytest.mark.parametrize("check", [routing.serves, routing.runnable])
def test_an_unknown_route_is_named(check):
    with pytest.raises(ValueError, match="argument 'name' expected one of .*'triton'.*, got 'bogus'"):
        check("bogus", "cpu")


@pytest.mark.parametrize("cache_format", routing.CACHE_FORMATS)
def test_routes_up_to_lists_every_route_of_the_range(cache_format):
    for n in (16, 128):
        for max_tokens in (1, 3, 64, 5000):
            expected = {routing.choose_route(n, t, cache_format=cache_format) for t in range(1, max_tokens + 1)}
            got = routing.routes_up_to(n, max_tokens, cache_format=cache_format)
            assert set(got) == expected, f"{cache_format} N={n} max T={max_tokens}"


def test_table_from_timings_takes_the_fastest_route():
    nan = float("nan")
    us = {
        (16, 1, "fa3"): 19.0, (16, 1, "triton"): 18.0,  # triton faster
        (16, 8, "fa3"): 24.0, (16, 8, "triton"): 24.0,  # a tie: the earlier timed route of ROUTES
        (64, 1, "fa3"): nan, (64, 1, "triton"): 50.0,  # a failed route never wins
        (64, 8, "fa3"): 30.0, (64, 8, "triton"): nan,
    }
    heads, tokens, route = routing.table_from_timings(us)
    assert (heads, tokens) == ([16, 64], [1, 8])
    assert route == {16: ["triton", "fa3"], 64: ["triton", "fa3"]}
    assert list(ROUTES).index("fa3") < list(ROUTES).index("triton")
    with pytest.raises(ValueError, match=r"times routes that cannot read the fp8_ds_mla cache: \['fa3'\]"):
        routing.table_from_timings(us, "fp8_ds_mla")


def test_with_rows_of_replaces_the_measured_rows_at_the_grid_tokens():
    base = ([16, 32], [1, 128], {16: ["decode", "fa3"], 32: ["decode", "fa3"]})
    rows = ([16, 64], [1, 64, 128], {16: ["decode", "fa3", "decode"], 64: ["fa3", "fa3", "triton"]})
    assert routing.with_rows_of(base, rows) == (
        [16, 32, 64], [1, 128], {16: ["decode", "decode"], 32: ["decode", "fa3"], 64: ["fa3", "triton"]})
    with pytest.raises(ValueError, match=r"argument 'rows' expected every T of the grid \[1, 128\], misses \[128\]"):
        routing.with_rows_of(base, ([16], [1, 64], {16: ["decode", "fa3"]}))


def test_gpu_of_provenance_drops_the_sm_count():
    assert routing.gpu_of_provenance("NVIDIA H100 80GB HBM3 (132 SMs)") == "NVIDIA H100 80GB HBM3"
    assert routing.gpu_of_provenance("NVIDIA H200") == "NVIDIA H200"


def test_bench_columns_keep_the_bf16_names_and_mark_fp8():
    assert routing.bench_column("triton") == routing.bench_column("triton", "bfloat16") == "triton"
    assert routing.bench_column("decode", "fp8_ds_mla") == "decode_fp8"
    assert routing.bench_column("routed", "fp8_ds_mla") == "routed_fp8"


def _bench_rows():
    """Rows as csv.DictReader gives them from a bench.csv: strings, "nan" where a path failed."""
    rows = []
    for n, t, fa3_us, triton_us, decode_fp8_us, triton_fp8_us in (
        (16, 1, "20.0", "18.0", "9.0", "15.0"),
        (16, 8, "24.0", "30.0", "nan", "26.0"),
    ):
        rows.append({"N": str(n), "T": str(t), "fa3_us": fa3_us, "triton_us": triton_us, "routed_us": "1.0",
                     "fa3_kernel_us": "1.0", "decode_fp8_us": decode_fp8_us, "triton_fp8_us": triton_fp8_us,
                     "routed_fp8_us": "1.0"})
    return rows


def test_table_from_bench_rows_takes_each_format_from_its_columns(monkeypatch):
    rows = _bench_rows()
    assert routing.table_from_bench_rows(rows) == ([16], [1, 8], {16: ["triton", "fa3"]})
    if "fp8_ds_mla" not in ROUTES["decode"].cache_formats:
        assert routing.table_from_bench_rows(rows, "fp8_ds_mla") is None, "one route reads fp8: nothing to choose"
        monkeypatch.setitem(ROUTES, "decode", dataclasses.replace(
            ROUTES["decode"], cache_formats=frozenset({"bfloat16", "fp8_ds_mla"})))  # as once the kernel reads it
    assert routing.table_from_bench_rows(rows, "fp8_ds_mla") == ([16], [1, 8], {16: ["decode", "triton"]})
    for row in rows:
        row["decode_fp8_us"] = "nan"  # the decode op rejected the uint8 cache: not timed
    assert routing.table_from_bench_rows(rows, "fp8_ds_mla") is None
    assert routing.table_from_bench_rows([{"N": "16", "T": "1", "triton_us": "3.0"}]) is None, "old CSV, one route"


def test_fp8_ds_mla_steps_take_a_route_that_reads_the_format():
    """FA3 reads the bf16 cache only, the decode kernel and Triton both: fp8_ds_mla steps take the fp8 grid's
    route where it serves them, else its fallback that does, on any machine, for every step size; CPU
    tensors take Triton."""
    assert ROUTES["triton"].cache_formats == {"bfloat16", "fp8_ds_mla"} and ROUTES["fa3"].cache_formats == {"bfloat16"}
    assert ROUTES["decode"].cache_formats == {"bfloat16", "fp8_ds_mla"}
    fp8_grid = routing.load_table(cache_format="fp8_ds_mla")
    for device_type in ("cuda", "cpu"):
        for name in ROUTES:
            chosen = routing.runnable(name, device_type, "fp8_ds_mla")
            assert routing.serves(chosen, device_type, "fp8_ds_mla") and "fp8_ds_mla" in ROUTES[chosen].cache_formats
        assert routing.runnable("fa3", device_type, "fp8_ds_mla") == "triton"
        for num_heads, num_tokens in ((16, 1), (64, 8), (128, 1024)):
            expected = routing.runnable(routing.lookup(fp8_grid, num_heads, num_tokens), device_type, "fp8_ds_mla")
            assert routing.choose_route(num_heads, num_tokens, device_type, "fp8_ds_mla") == expected
        assert "fa3" not in routing.routes_up_to(128, 8192, device_type, "fp8_ds_mla")
    assert routing.routes_up_to(128, 8192, "cpu", "fp8_ds_mla") == ["triton"]
