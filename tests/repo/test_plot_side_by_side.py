"""tools/plot_side_by_side.py on small grids as tools/bench.py writes them: which series it draws, and the plot."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel
spec = importlib.util.spec_from_file_location("plot_side_by_side", ROOT / "tools" / "plot_side_by_side.py")
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)

ROUTED = ["routed_us", "routed_fp8_us", "fa3_us", "flashmla_fp8_us", "decode_us", "decode_fp8_us"]
DECODE_ONLY = ["decode_us", "decode_fp8_us", "flashmla_fp8_us"]


def _write_grid(path, columns, gpu="NVIDIA H100 80GB HBM3 (132 SMs)", empty=()):
    """A grid of N = 16, 64 x T = 1, 8, 64 with every column of ``columns`` filled but those in ``empty``; no
    `# gpu:` line where ``gpu`` is None."""
    header = ["N", "T", "bound_us"] + columns
    lines = ["# date: 2026-12-07 07:28 UTC"] + ([f"# gpu: {gpu}"] if gpu else []) + [",".join(header)]
    for n in (16, 64):
        for t in (1, 8, 64):
            values = [str(n), str(t), str(0.5 * t)] + ["" if c in empty else str(10.0 + t + n / 8) for c in columns]
            lines.append(",".join(values))
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(path):
    return plot.read_grid(str(path))[1]


def test_routed_grid_draws_the_routed_paths(tmp_path):
    rows = _rows(_write_grid(tmp_path / "grid.csv", ROUTED))
    assert [c for c, _ in plot.drawn_series(rows)] == ["routed_us", "routed_fp8_us", "fa3_us", "flashmla_fp8_us",
                                                       "bound_us"]


def test_grid_without_routed_or_fa3_draws_the_decode_path(tmp_path):
    rows = _rows(_write_grid(tmp_path / "grid.csv", DECODE_ONLY))
    assert [c for c, _ in plot.drawn_series(rows)] == ["decode_us", "decode_fp8_us", "flashmla_fp8_us", "bound_us"]


def test_a_column_with_empty_cells_is_not_drawn(tmp_path):
    rows = _rows(_write_grid(tmp_path / "grid.csv", ROUTED, empty={"fa3_us"}))
    assert "fa3_us" not in [c for c, _ in plot.drawn_series(rows)]


def test_read_grid_takes_the_gpu_from_the_header(tmp_path):
    gpu, rows = plot.read_grid(str(_write_grid(tmp_path / "h200.csv", DECODE_ONLY, gpu="NVIDIA H200 (132 SMs)")))
    assert gpu == "NVIDIA H200"
    assert [(r["N"], r["T"], r["decode_us"]) for r in rows[:2]] == [("16", "1", "13.0"), ("16", "8", "20.0")]
    assert plot.read_grid(str(_write_grid(tmp_path / "none.csv", DECODE_ONLY, gpu=None)))[0] == "GPU"


def test_writes_a_png(tmp_path):
    png = tmp_path / "grid.png"
    plot.main(str(_write_grid(tmp_path / "grid.csv", DECODE_ONLY)), str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
