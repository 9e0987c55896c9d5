"""Decode kernel time against the split count (fp8_ds_mla or bf16), CUDA-graph replay, to fit the planner's
wave model. Prints one line per (format, N, T): the default plan's splits and µs per split count."""
import dataclasses, sys
import torch
from sparse_mla import testing
from sparse_mla.ops import decode
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE

dev = torch.device("cuda")
gen = testing.make_generator(dev, 0)
nb, ctx = 131072, 8192
bf16 = testing.make_kv_cache(nb, dev, gen)
caches = {"bf16": bf16}
caches["fp8"] = testing.fp8_ds_mla_kv_cache(bf16)
if "bf16" not in sys.argv[1]:
    del caches["bf16"], bf16
sms = torch.cuda.get_device_properties(0).multi_processor_count
capacity = decode.cluster_capacity(0)
points = []  # (fmt, N, [T...], [splits...])
for arg in sys.argv[2:]:
    n, ts, ss, chunk, cs = (arg.split(":") + ["0", "0"])[:5]
    points.append((int(n), [int(t) for t in ts.split(",")], [int(s) for s in ss.split(",")], int(chunk) or None, int(cs) or None))
for fmt in sys.argv[1].split(","):
    kv = caches[fmt]
    slot_bytes = kv.shape[-1] * kv.element_size()
    for n, tokens, split_counts, chunk, cs in points:
        for t in tokens:
            base = decode.plan(t, n, sms, 2048, None, capacity, cluster_size=cs, cta_chunk=chunk, fp8_ds_mla=fmt == "fp8")
            granule = base.cluster_size * base.cta_chunk
            chunks = -(-2048 // granule)
            copies = max(1, -(-64 * 2**20 // (t * 2048 * slot_bytes)))
            sets = []
            for _ in range(copies):
                b = testing.make_batch([ctx] * t, [1] * t, nb, gen)
                qn, qr = testing.make_queries(t, n, dev, gen)
                sets.append((qn, qr, b))
            out = torch.empty(t, n, 512, dtype=torch.bfloat16, device=dev)
            res, seen = [], set()
            for s in [base.num_splits] + split_counts:
                positions = -(-chunks // min(s, chunks)) * granule
                if positions in seen:
                    continue
                seen.add(positions)
                plan = dataclasses.replace(base, num_splits=-(-2048 // positions), positions_per_split=positions)
                ws = decode.DecodeWorkspace.for_plans([plan], dev)

                def body():
                    for qn, qr, b in sets:
                        decode.sparse_mla_decode(qn, qr, kv, b.topk_indices, b.req_id, b.token_kv_len, b.block_table,
                                                 DEEPSEEK_V32_SOFTMAX_SCALE, plan, ws, out=out)
                body()
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    body()
                for _ in range(3):
                    g.replay()
                times = []
                for _ in range(15):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record(); g.replay(); e1.record(); torch.cuda.synchronize()
                    times.append(e0.elapsed_time(e1) * 1000 / copies)
                cap = capacity(plan.head_tiles, plan.cta_chunk, plan.cluster_size, positions)
                res.append(f"s{plan.num_splits}:{sorted(times)[7]:.1f}")
                del g, ws
            print(f"{fmt} N={n} T={t} ht={base.head_tiles} cs={base.cluster_size} chunk={base.cta_chunk} "
                  f"cap={cap} default=s{base.num_splits} " + " ".join(res), flush=True)
