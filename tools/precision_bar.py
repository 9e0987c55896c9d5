"""Element-wise precision of every route against FlashInfer's bar for sparse MLA decode.

FlashInfer's bar (``sparse_mla_testing.precision_bar``). This prints, per route and (N, T), the elements
that miss that bar, the worst ``|out - ref| - (atol + rtol * |ref|)``, the global relative error, and the same
for the float32 reference merely rounded to bf16 (the floor any bf16 output has).

    PYTHONPATH=py:tests python3 tools/precision_bar.py --heads=128 --tokens=1,4,16,64 --seeds=0,1,2,3
"""

import sparse_mla_testing as fixtures
from sparse_mla_testing.precision_bar import against_bar
import torch
from absl import app, flags

from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK, KV_BLOCK_SIZE
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference
from sparse_mla.routes import ROUTES

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
                gen = fixtures.make_generator(device, seed)
                seq_lens = [FLAGS.context] * num_tokens
                num_blocks = num_tokens * -(-FLAGS.context // KV_BLOCK_SIZE) + 4
                batch = fixtures.make_batch(seq_lens, [1] * num_tokens, num_blocks, gen)
                kv_cache = fixtures.make_kv_cache(num_blocks, device, gen)
                q_nope, q_rope = fixtures.make_queries(num_tokens, num_heads, device, gen)
                slot_ids = global_slot_ids_reference(batch.topk_indices, batch.req_id, batch.token_kv_len,
                                                     batch.block_table, num_blocks)
                ref, _ = sparse_mla_reference(q_nope, q_rope, kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)
                floor = against_bar(ref.to(torch.bfloat16), ref)
                for route in FLAGS.routes:
                    builder = SparseMLAMetadataBuilder(num_tokens, device, num_heads, INDEX_TOPK, route=route)
                    metadata = builder.build(0, fixtures.common_metadata(batch))
                    out = SparseMLAImpl(num_heads).forward((q_nope, q_rope), kv_cache, metadata, batch.topk_indices)
                    misses, worst, rel = against_bar(out, ref)
                    print(f"{route:7s} {num_heads:3d} {num_tokens:4d} {seed:4d} {misses:7d} / {out.numel():8d} "
                          f"{worst:12.2e} {rel:8.2e}  | {floor[0]:7d} {floor[1]:12.2e}")


if __name__ == "__main__":
    app.run(main)
