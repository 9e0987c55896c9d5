"""One DeepSeek-V3.2 sparse-MLA decode step through sparse_mla's backend, checked against float32.

Four requests with 300 to 5000 tokens of context each decode one token with 16 query heads (128 heads
at tensor parallelism 8): the new tokens' latents are written into the paged KV cache, the metadata
is built, and each token attends the 2048 positions its indexer picked. Runs on the GPU when PyTorch
sees one, otherwise on the CPU through Triton's interpreter. Exits with status 1 when the cache
differs from a plain PyTorch write of the new tokens or the output differs from the float32
reference by more than the bf16 bound.
"""

import os
import time

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # Triton kernels on the CPU; set before sparse_mla loads Triton

from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadataBuilder
from sparse_mla.common_metadata import CommonAttentionMetadata
from sparse_mla.kernels.kv_cache_writer import write_kv
from sparse_mla.reference import global_slot_ids_reference, sparse_mla_reference

MAX_RELATIVE_ERROR = 1e-2  # bf16 output (8-bit mantissa, about 2e-3 from rounding alone)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
num_heads, topk, block_size = 16, 2048, 64
seq_lens = [5000, 2100, 1024, 300]  # context of each request, this step's token included
num_reqs = len(seq_lens)

# The paged cache [num_blocks, 64, 576] = [c_kv (512) | k_rope (64)] per slot, holding earlier steps' tokens.
blocks_per_req = [-(-n // block_size) for n in seq_lens]
num_blocks = sum(blocks_per_req) + 8
kv_cache = torch.randn(num_blocks, block_size, 576, device=device).to(torch.bfloat16)
free_blocks = torch.randperm(num_blocks).tolist()
block_table = torch.zeros(num_reqs, max(blocks_per_req), dtype=torch.int32)
for r, n in enumerate(blocks_per_req):
    block_table[r, :n] = torch.tensor([free_blocks.pop() for _ in range(n)])

# This step: one new token per request, at position seq_len - 1.
positions = torch.tensor(seq_lens) - 1
slot_mapping = (block_table[torch.arange(num_reqs), positions // block_size] * block_size + positions % block_size).long()
common = CommonAttentionMetadata(
    query_start_loc=torch.arange(num_reqs + 1, dtype=torch.int32, device=device),
    query_start_loc_cpu=torch.arange(num_reqs + 1, dtype=torch.int32),
    seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
    seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32),
    num_reqs=num_reqs,
    num_actual_tokens=num_reqs,
    max_query_len=1,
    max_seq_len=max(seq_lens),
    slot_mapping=slot_mapping.to(device),
    block_table_tensor=block_table.to(device),
)
kv_c_normed = torch.randn(num_reqs, 512, device=device).to(torch.bfloat16)  # the new tokens' latents
k_pe = torch.randn(num_reqs, 64, device=device).to(torch.bfloat16)  # and rotary keys
q = torch.randn(num_reqs, num_heads, 576, device=device).to(torch.bfloat16)
q_nope, q_rope = q[..., :512], q[..., 512:]
# The indexer's pick: the top-2048 of random scores over each request's positions, -1 where fewer.
topk_indices = torch.full((num_reqs, topk), -1, dtype=torch.int32)
for r, n in enumerate(seq_lens):
    topk_indices[r, : min(n, topk)] = torch.rand(n).topk(min(n, topk)).indices.to(torch.int32)
topk_indices = topk_indices.to(device)

builder = SparseMLAMetadataBuilder(max_num_batched_tokens=256, device=device, num_heads=num_heads)
impl = SparseMLAImpl(num_heads)  # softmax scale 192 ** -0.5 (DeepSeek-V3.2)
reference_cache = kv_cache.clone()
reference_cache.view(-1, 576)[common.slot_mapping] = torch.cat([kv_c_normed, k_pe], dim=-1)  # what write_kv must do

write_kv(kv_c_normed, k_pe, kv_cache, common.slot_mapping)
metadata = builder.build(0, common)
out = impl.forward((q_nope, q_rope), kv_cache, metadata, topk_indices)  # [4, 16, 512] bf16; compiles on a GPU
if device.type == "cuda":
    torch.cuda.synchronize()
repeats = 100 if device.type == "cuda" else 1
start = time.perf_counter()
for _ in range(repeats):
    out = impl.forward((q_nope, q_rope), kv_cache, metadata, topk_indices)
if device.type == "cuda":
    torch.cuda.synchronize()
elapsed_ms = (time.perf_counter() - start) * 1e3 / repeats

slot_ids = global_slot_ids_reference(
    topk_indices, torch.arange(num_reqs, device=device), common.seq_lens, common.block_table_tensor, num_blocks
)
expected, _ = sparse_mla_reference(q_nope, q_rope, reference_cache, slot_ids, impl.softmax_scale)
error = ((out.float() - expected).norm() / expected.norm()).item()  # NaN fails the bound below
cache_written = torch.equal(kv_cache, reference_cache)
where = torch.cuda.get_device_name() if device.type == "cuda" else "CPU, Triton interpreter"
print(f"sparse_mla decode step: {num_reqs} requests x {num_heads} heads, top-{topk} of contexts {seq_lens}, on {where}")
print(f"forward {elapsed_ms:.3f} ms (mean of {repeats}); relative error ||out - ref|| / ||ref|| vs the float32 reference {error:.2e} (bound {MAX_RELATIVE_ERROR:.0e})")
print(f"write_kv: the cache {'equals' if cache_written else 'DIFFERS FROM'} the reference write of the {num_reqs} new tokens")
raise SystemExit(0 if cache_written and error <= MAX_RELATIVE_ERROR else 1)
