"""tools/model_step_bench.py end to end without a CUDA graph: its timing (tools/bench.py's ``time_graph``) replaced
by one plain run of each timed sequence, numbered in the order they run, every cell and format runs its layers
and the back-to-back forward (on the CPU: the Triton route in the interpreter) and lands in the CSV's columns."""

import csv
import pathlib
import sys

import pytest
import torch

from sparse_mla.backend import SparseMLAImpl
from sparse_mla.kernels.triton_support import kernel_device_type
from sparse_mla.routes import ROUTES
from sparse_mla_testing.markers import requires_triton_device

ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel
sys.path.insert(0, str(ROOT / "tools"))

import bench  # noqa: E402
import model_step_bench  # noqa: E402

pytestmark = requires_triton_device


@pytest.fixture(autouse=True)
def default_flags():
    """Each test parses its own command line; the flags return to their defaults after it."""
    yield
    bench.FLAGS.unparse_flags()

LAYERS = 3
ROW_BYTES = 64 * 656
"""One T = 1 step's top-k rows of 64 on the fp8_ds_mla cache: the L2 size given below, so bench rotates 4 copies."""


def test_every_cell_and_format_runs_its_sequences_into_the_csv(tmp_path, monkeypatch, capsys):
    sequences, forwards = [], []
    forward = SparseMLAImpl.forward

    def counted_forward(*args, **kwargs):
        forwards.append(1)
        return forward(*args, **kwargs)

    def run_once(calls):
        forwards.clear()
        for call in calls:
            call()
        sequences.append((len(calls), len(forwards)))
        return float(len(sequences))

    monkeypatch.setattr(SparseMLAImpl, "forward", counted_forward)
    monkeypatch.setattr(bench, "time_graph", run_once)
    bench.FLAGS([sys.argv[0], f"--out_dir={tmp_path}", "--context=128", "--topk=64", "--heads=4", "--tokens=1,2",
                 f"--layers={LAYERS}"])
    model_step_bench.run({"device": "test"}, torch.device(kernel_device_type()), ROW_BYTES)

    with open(tmp_path / "model_step.csv") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    assert [(r["N"], r["T"]) for r in rows] == [("4", "1"), ("4", "2")]
    assert [r["copies"] for r in rows] == ["4", "2"]  # bench.num_copies(T, 64, ROW_BYTES, 656 bytes)
    # Per cell and format (bf16, then fp8): the step, the step without the forward, then back to back.
    expected_lengths, number = [], 0
    for row, layer_caches in zip(rows, ({"": 3, "_fp8": 3}, {"": 2, "_fp8": 2})):
        for suffix in ("", "_fp8"):
            copies = int(row["copies"])
            expected_lengths += [(LAYERS, LAYERS), (LAYERS, 0), (copies, copies)]  # (calls, forwards)
            assert row[f"route{suffix}"] in ROUTES
            assert int(row[f"layer_caches{suffix}"]) == layer_caches[suffix]
            assert float(row[f"step{suffix}_us"]) == number + 1 and float(row[f"neighbours{suffix}_us"]) == number + 2
            assert float(row[f"attention{suffix}_us"]) == -1.0  # step - neighbours
            assert float(row[f"back_to_back{suffix}_us"]) == number + 3
            number += 3
    assert sequences == expected_lengths
    assert (tmp_path / "model_step.png").stat().st_size > 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"summary: L={LAYERS}; bfloat16 attention -1.00")
    assert not any(r[k] in ("", "nan") for r in rows for k in r), "a cell failed"


@pytest.mark.parametrize("layers", [0, -2])
def test_refuses_no_layers(layers, tmp_path):
    bench.FLAGS([sys.argv[0], f"--out_dir={tmp_path}", f"--layers={layers}"])
    with pytest.raises(model_step_bench.app.UsageError, match="--layers expected >= 1"):
        model_step_bench.main([])
