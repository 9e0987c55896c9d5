"""Compares bench CSVs of two trees cell by cell (tools/gpu_routine.sh's ab step).

    python3 tools/ab_compare.py OLD.csv[,OLD2.csv...] NEW.csv[,NEW2.csv...] [--columns=routed_us,routed_fp8_us]

For each (N, T) and column: the median over the given runs of each side, new / old, and whether the routes
(``route``, ``route_fp8``) agree. Exits 1 when a route differs.
"""

import csv
import statistics
import sys


def _rows(paths):
    runs = []
    for path in paths.split(","):
        with open(path) as f:
            runs.append({(r["N"], r["T"]): r for r in csv.DictReader(line for line in f if not line.startswith("#"))})
    return runs


def main(argv):
    old, new = _rows(argv[1]), _rows(argv[2])
    columns = ["routed_us", "routed_fp8_us"]
    for arg in argv[3:]:
        if arg.startswith("--columns="):
            columns = arg.split("=", 1)[1].split(",")
    routes_differ = False
    print(f"{'N':>4} {'T':>5}  " + "  ".join(f"{c + ' old/new (ratio)':>34}" for c in columns) + "  routes")
    for cell in old[0]:
        cells = []
        for column in columns:
            a = statistics.median(float(run[cell][column]) for run in old)
            b = statistics.median(float(run[cell][column]) for run in new)
            cells.append(f"{a:10.2f} / {b:10.2f} ({b / a:5.3f})")
        same = all(run[cell].get(k) == old[0][cell].get(k) for run in old + new for k in ("route", "route_fp8"))
        routes_differ |= not same
        route = f"{old[0][cell].get('route')}/{old[0][cell].get('route_fp8')}" if same else "DIFFER"
        print(f"{cell[0]:>4} {cell[1]:>5}  " + "  ".join(cells) + f"  {route}")
    return 1 if routes_differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
