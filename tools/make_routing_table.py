"""Writes py/sparse_mla/routing_table.json from a tools/bench.py grid CSV: per (N, T), the faster of
the "fa3" and "triton" paths. Run: python3 tools/make_routing_table.py results/<run>/bench.csv"""

import csv
import json
import os
import sys

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py", "sparse_mla", "routing_table.json")


def main(bench_csv: str) -> None:
    with open(bench_csv) as f:
        lines = f.read().splitlines()
    provenance = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    heads = sorted({int(r["N"]) for r in rows})
    tokens = sorted({int(r["T"]) for r in rows})
    us = {(int(r["N"]), int(r["T"]), path): float(r[f"{path}_us"]) for r in rows for path in ("fa3", "triton")}
    kernel = {
        str(n): ["triton" if us[(n, t, "triton")] < us[(n, t, "fa3")] else "fa3" for t in tokens] for n in heads
    }
    provenance["source"] = os.path.relpath(bench_csv, os.path.dirname(TABLE))
    provenance["rule"] = "per (N, T) the path with the lower CUDA-graph replay median, fa3 on a tie"
    # One line per list, so a diff of the table reads as a diff of choices.
    body = ",\n".join(
        [f' "provenance": {json.dumps(provenance, indent=2)}'.replace("\n", "\n ")]
        + [f' "heads": {json.dumps(heads)}', f' "tokens": {json.dumps(tokens)}']
        + [' "kernel": {\n' + ",\n".join(f'  "{n}": {json.dumps(row)}' for n, row in kernel.items()) + "\n }"]
    )
    with open(TABLE, "w") as f:
        f.write("{\n" + body + "\n}\n")
    print(f"wrote {TABLE}")


if __name__ == "__main__":
    main(sys.argv[1])
