"""Writes py/sparse_mla/routing_table.json from a tools/bench.py grid CSV: for each cache format, per (N, T) the
fastest route that reads it (sparse_mla.routing.table_from_bench_rows: the bf16 grid from the `<route>_us`
columns, the fp8_ds_mla grid from the `<route>_fp8_us` columns); a format with fewer than two routes timed
keeps its grid. Run: python3 tools/make_routing_table.py <out_dir>/bench.csv"""

import csv
import sys

from sparse_mla import routing


def main(bench_csv: str) -> None:
    with open(bench_csv) as f:
        lines = f.read().splitlines()
    provenance = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    for cache_format in routing.CACHE_FORMATS:
        table = routing.table_from_bench_rows(rows, cache_format)
        if table is None:
            print(f"{cache_format}: fewer than two routes timed in {bench_csv}: grid left as it was")
            continue
        routing.write_table(table, {**provenance, "source": bench_csv}, cache_format=cache_format)
        print(f"{cache_format}: wrote its grid into {routing.ROUTING_TABLE}")


if __name__ == "__main__":
    main(sys.argv[1])
