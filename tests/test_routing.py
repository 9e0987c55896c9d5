"""Routing between FA3 and the Triton kernel: the checked-in table and its lookup."""

import json

import pytest
import torch

from sparse_mla import routing
from sparse_mla.ops import fa3

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
    with pytest.raises(ValueError, match="row N=16 expected 2 entries of"):
        routing.load_table(str(path))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of machines without FA3")
def test_without_fa3_every_batch_goes_to_triton():
    assert not fa3.is_available()
    for num_heads, num_tokens in ((16, 1), (128, 1024)):
        assert routing.choose_kernel(num_heads, num_tokens) == "triton"

