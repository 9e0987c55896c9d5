"""How far the planner's split count is from the best measured one, over the split sweeps of calls 79..81
(fp8_ds_mla, the decode kernel alone), for the first kernel with one CTA per split past one CTA per SM.

Run from the repository root: PYTHONPATH=py:tests python3 results/2026-11-30-h200/release10/iterations/call79_81_split_curves/regret.py
The plan uses the H200 capacities of tests/test_decode_plan.py (h200_capacity); 'capped' is the sweep's
default (the plan at the tree the sweep ran on, before the uncapped band)."""
import os
import re

import test_decode_plan
from sparse_mla.ops import decode

here = os.path.dirname(os.path.abspath(__file__))
points = {}
for name in ("call79_split_curve.txt", "call80_split_curve.txt", "call81_split_curve.txt"):
    for line in open(os.path.join(here, name)):
        m = re.match(r"fp8 N=(\d+) T=(\d+) ht=[12] cs=1 .* default=s(\d+) (.*)", line)
        if m and int(m[2]) > 132:
            times = {int(s): float(us) for s, us in re.findall(r"s(\d+):([\d.]+)", m[4])}
            points[int(m[1]), int(m[2])] = (int(m[3]), times)
for num_heads in (16, 32):
    for lo, hi, what in ((133, 528, "in the band (T = 133..528)"), (529, 1024, "past it")):
        capped, planned, slower = [], [], []
        for (n, t), (default, times) in sorted(points.items()):
            if n != num_heads or not lo <= t <= hi:
                continue
            best = min(times.values())
            plan = decode.plan(t, n, 132, cluster_capacity=test_decode_plan.h200_capacity, fp8_ds_mla=True)
            capped.append(times[default] / best - 1)
            planned.append(times[plan.num_splits] / best - 1)
            if times[plan.num_splits] > 1.005 * times[default]:
                slower.append(f"T={t}: {plan.num_splits} splits {times[plan.num_splits]} vs {times[default]}")
        if capped:
            print(f"N = {num_heads}, {len(capped)} values of T {what}: above the best split count, capped plan "
                  f"{100 * sum(capped) / len(capped):.1f} % on average ({100 * max(capped):.0f} % at most), "
                  f"this plan {100 * sum(planned) / len(planned):.1f} % ({100 * max(planned):.1f} %); "
                  f"slower than capped: {'; '.join(slower) or 'none'}")
