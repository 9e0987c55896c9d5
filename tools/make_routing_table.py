"""Writes the routing table of the CSVs' GPU (py/sparse_mla/routing_tables/<gpu>.json, by the `gpu` line of their
provenance: sparse_mla.routing.gpu_table_path) from tools/bench.py grid CSVs: for each cache format, per (N, T) the
fastest route that reads it (sparse_mla.routing.table_from_bench_rows: the bf16 grid from the `<route>_us`
columns, the fp8_ds_mla grid from the `<route>_fp8_us` columns); a format with fewer than two routes timed
keeps its grid. Several CSVs (each timing the same routes, e.g. T <= 1024 at one token a request and larger T
at several) make one grid of their points together; a provenance line that differs between them lists each
value. With --merge, the CSVs' heads N replace only their rows of each grid (they must time the grid's T), the
other rows and their provenance stay.
Run: PYTHONPATH=py "$(tools/python_env.sh)" tools/make_routing_table.py <out_dir>/bench.csv [more.csv ...] [--merge]
(an interpreter with torch: tools/python_env.sh prints one)."""

import argparse
import json
import os
import sys
from typing import List

from sparse_mla import routing


def main(bench_csvs: List[str], merge: bool = False) -> None:
    provenance, rows = {}, []
    for bench_csv in bench_csvs:
        csv_provenance, csv_rows = routing.read_bench_csv(bench_csv)
        for key, value in csv_provenance.items():
            if value not in provenance.get(key, "").split("; "):  # a value that differs between CSVs: each
                provenance[key] = f"{provenance[key]}; {value}" if key in provenance else value
        rows += csv_rows
    gpu = routing.gpu_of_provenance(provenance.get("gpu", ""))
    if not gpu or "; " in gpu:
        sys.exit(f"make_routing_table: the CSVs' provenance expected one 'gpu', got {provenance.get('gpu')!r}")
    path = routing.gpu_table_path(gpu)
    if merge and not os.path.exists(path):
        sys.exit(f"make_routing_table: --merge replaces rows of {path}, which does not exist (no table of {gpu})")
    for cache_format in routing.CACHE_FORMATS:
        table = routing.table_from_bench_rows(rows, cache_format)
        if table is None:
            print(f"{cache_format}: fewer than two routes timed in {', '.join(bench_csvs)}: grid left as it was")
            continue
        source = ", ".join(bench_csvs)
        if merge:
            measured = ", ".join(str(n) for n in table[0])
            table = routing.with_rows_of(routing.load_table(path, cache_format), table)
            with open(path) as f:
                old_source = json.load(f)[cache_format]["provenance"]["source"]
            source = f"{source} (rows N = {measured}); other rows: {old_source}"
        routing.write_table(table, {**provenance, "source": source}, path, cache_format)
        print(f"{cache_format}: wrote its grid into {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Write the CSVs' GPU's py/sparse_mla/routing_tables/<gpu>.json from tools/bench.py grid CSVs (run with "
        'PYTHONPATH=py "$(tools/python_env.sh)").')
    parser.add_argument("bench_csvs", nargs="+", metavar="bench.csv", help="grid CSVs of tools/bench.py")
    parser.add_argument("--merge", action="store_true", help="replace only the CSVs' rows N of each grid")
    arguments = parser.parse_args()
    main(arguments.bench_csvs, merge=arguments.merge)
