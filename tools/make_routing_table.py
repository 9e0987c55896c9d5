"""Writes py/sparse_mla/routing_table.json from a tools/bench.py grid CSV (the columns of the routes of
sparse_mla.routes.ROUTES it has): per (N, T) the fastest route. Run: python3 tools/make_routing_table.py <out_dir>/bench.csv"""

import csv
import sys

from sparse_mla import routing
from sparse_mla.routes import ROUTES


def main(bench_csv: str) -> None:
    with open(bench_csv) as f:
        lines = f.read().splitlines()
    provenance = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    timed = [name for name in ROUTES if rows and f"{name}_us" in rows[0]]
    us = {(int(r["N"]), int(r["T"]), k): float(r[f"{k}_us"]) for r in rows for k in timed}
    routing.write_table(routing.table_from_timings(us), {**provenance, "source": bench_csv})
    print(f"wrote {routing.ROUTING_TABLE}")


if __name__ == "__main__":
    main(sys.argv[1])
