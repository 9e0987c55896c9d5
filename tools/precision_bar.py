"""Element-wise precision of every route against FlashInfer's bar for sparse MLA decode.

FlashInfer's bar (``sparse_mla_testing.precision_bar``). This prints, per route and (N, T), the elements
that miss that bar, the worst ``|out - ref| - (atol + rtol * |ref|)``, the global relative error, and the same
for the float32 reference merely rounded to bf16 (the floor any bf16 output has).

    PYTHONPATH=py:tests python3 tools/precision_bar.py --heads=128 --tokens=1,4,16,64 --seeds=0,1,2,3
"""

import torch
from absl import app, flags

from sparse_mla.routes import ROUTES
from sparse_mla_testing.precision_bar import against_bar, decode_case, route_output

flags.DEFINE_list("heads", ["128"], "Query heads N.")
flags.DEFINE_list("tokens", ["1", "4", "16", "64"], "Query tokens T (one decode token per request).")
flags.DEFINE_list("seeds", ["0", "1", "2", "3"], "Seeds of the random inputs.")
flags.DEFINE_list("routes", sorted(ROUTES), "Routes to check.")
flags.DEFINE_integer("context", 8192, "Positions of each request's context.")
FLAGS = flags.FLAGS


def main(_):
    device = torch.device("cuda")
    print("route   N    T seed  misses / elements  worst excess  rel err  | bf16-rounded ref: misses  worst excess")
    for num_heads in map(int, FLAGS.heads):
        for num_tokens in map(int, FLAGS.tokens):
            for seed in map(int, FLAGS.seeds):
                case = decode_case(num_heads, num_tokens, seed, FLAGS.context, device)
                floor = against_bar(case.ref.to(torch.bfloat16), case.ref)
                for route in FLAGS.routes:
                    out = route_output(case, route)
                    misses, worst, rel = against_bar(out, case.ref)
                    print(f"{route:7s} {num_heads:3d} {num_tokens:4d} {seed:4d} {misses:7d} / {out.numel():8d} "
                          f"{worst:12.2e} {rel:8.2e}  | {floor[0]:7d} {floor[1]:12.2e}")


if __name__ == "__main__":
    app.run(main)
