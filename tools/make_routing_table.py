"""Writes py/sparse_mla/routing_table.json from a tools/bench.py grid CSV (the fa3 and triton
columns): per (N, T) the faster path. Run: python3 tools/make_routing_table.py <out_dir>/bench.csv"""

import csv
import sys

from sparse_mla import routing


def main(bench_csv: str) -> None:
    with open(bench_csv) as f:
        lines = f.read().splitlines()
    provenance = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
    rows = csv.DictReader(line for line in lines if not line.startswith("#"))
    us = {(int(r["N"]), int(r["T"]), k): float(r[f"{k}_us"]) for r in rows for k in routing.KERNELS}
    routing.write_table(routing.table_from_timings(us), {**provenance, "source": bench_csv})
    print(f"wrote {routing.ROUTING_TABLE}")


if __name__ == "__main__":
    main(sys.argv[1])
