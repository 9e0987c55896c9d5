"""Draws the README's plot from a tools/bench.py grid timed with the paths routed, fa3 and flashmla
(results/2026-12-01-h200/bench.csv): µs per call against T, one panel per head count, for sparse_mla (bf16 and
fp8_ds_mla caches), the FA3 route and FlashMLA's fp8 sparse decode, with the memory/compute bound. A grid without
the routed path draws sparse_mla's decode path instead; a series the grid lacks is left out.
Run: python3 tools/plot_side_by_side.py CSV PNG"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (columns, the first one the grid has is drawn; label)
SERIES = (
    (("routed_us", "decode_us"), "sparse_mla, bf16 cache"),
    (("routed_fp8_us", "decode_fp8_us"), "sparse_mla, fp8_ds_mla cache"),
    (("fa3_us",), "FA3 route (SGLang's FA3)"),
    (("flashmla_fp8_us",), "FlashMLA fp8 sparse decode"),
    (("bound_us",), "memory / compute bound"),
)


def read_grid(csv_path: str):
    """(GPU, rows) of a tools/bench.py grid: the GPU of its `# gpu: NAME (132 SMs)` header line, else "GPU"; one dict
    per row of the table below the `#` lines."""
    with open(csv_path) as f:
        lines = f.readlines()
    gpu = next((line[len("# gpu: "):].split(" (")[0].strip() for line in lines if line.startswith("# gpu: ")), "GPU")
    return gpu, list(csv.DictReader(line for line in lines if not line.startswith("#")))


def drawn_series(rows):
    """(column, label) of each SERIES entry: its first column that every row fills; none, and it is left out."""
    drawn = []
    for columns, label in SERIES:
        present = [c for c in columns if all(r.get(c) for r in rows)]
        if present:
            drawn.append((present[0], label))
    return drawn


def main(csv_path: str, png_path: str) -> None:
    gpu, rows = read_grid(csv_path)
    series = drawn_series(rows)
    heads = sorted({int(r["N"]) for r in rows})
    fig, axes = plt.subplots(1, len(heads), figsize=(4.5 * len(heads), 4), sharey=True, squeeze=False)
    axes = axes[0]  # one row of panels, also for one head count
    for ax, n in zip(axes, heads):
        points = sorted((int(r["T"]), r) for r in rows if int(r["N"]) == n)
        tokens = [t for t, _ in points]
        for column, label in series:
            style = dict(linestyle=":", color="gray") if column == "bound_us" else dict(marker="o", markersize=3)
            ax.plot(tokens, [float(r[column]) for _, r in points], label=label, **style)
        wide = tokens[-1] >= 8 * tokens[0]  # a log T axis only where T spans more than 3 octaves
        ax.set(xscale="log" if wide else "linear", yscale="log" if wide else "linear", title=f"N = {n} heads",
               xlabel="T (query tokens)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("µs per call (CUDA-graph replay)")
    fig.suptitle(gpu, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
