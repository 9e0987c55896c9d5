"""Routing between the routes of sparse_mla.routes: the checked-in table, its lookup, the fallbacks."""

import json

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


def test_checked_in_table_is_complete_and_has_provenance():
    heads, tokens, kernel = routing.load_table()
    assert heads and tokens and set(kernel) == set(heads)
    with open(routing.ROUTING_TABLE) as f:
        provenance = json.load(f)["provenance"]
    for key in ("date", "gpu", "driver", "torch", "triton", "git", "source", "rule"):
        assert provenance.get(key), f"routing table provenance expected '{key}', got {provenance}"


def test_rejects_a_malformed_table(tmp_path):
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"heads": [16], "tokens": [1, 2], "kernel": {"16": ["fa3", "flashmla"]}}))
    with pytest.raises(ValueError, match=r"row N=16 expected 2 entries of \(" + ", ".join(repr(r) for r in ROUTES) + r"\)"):
        routing.load_table(str(path))


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


def test_routes_up_to_lists_every_route_of_the_range():
    heads, tokens, _ = routing.load_table()
    for n in (16, 128):
        for max_tokens in (1, 3, 64, 5000):
            expected = {routing.choose_route(n, t) for t in range(1, max_tokens + 1)}
            assert set(routing.routes_up_to(n, max_tokens)) == expected, f"N={n} max T={max_tokens}"


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



def test_fp8_ds_mla_steps_take_a_route_that_reads_the_format():
    """FA3 reads the bf16 cache only, the decode kernel and Triton both: fp8_ds_mla steps never take FA3,
    CPU tensors always take Triton, for every step size."""
    assert ROUTES["triton"].cache_formats == {"bfloat16", "fp8_ds_mla"}
    assert ROUTES["decode"].cache_formats == {"bfloat16", "fp8_ds_mla"}
    assert ROUTES["fa3"].cache_formats == {"bfloat16"}
    for device_type in ("cuda", "cpu"):
        for name in ROUTES:
            taken = routing.runnable(name, device_type, "fp8_ds_mla")
            assert "fp8_ds_mla" in ROUTES[taken].cache_formats
            assert device_type == "cuda" or taken == "triton"
            assert not routing.serves(name, device_type, "fp8_ds_mla") or name != "fa3"
        for num_heads, num_tokens in ((16, 1), (64, 8), (128, 1024)):
            assert routing.choose_route(num_heads, num_tokens, device_type, "fp8_ds_mla") != "fa3"
        assert "fa3" not in routing.routes_up_to(128, 8192, device_type, "fp8_ds_mla")
