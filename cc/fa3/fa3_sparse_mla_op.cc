// The torch op sparse_mla_fa3::sparse_mla_fwd: one layer of the FA3 route in one dispatcher call --
// the index conversion kernel (cc/fa3/topk_to_slots_kernel.cu) into the step's page table, then FA3's
// mha_fwd on the cache viewed as pages of one slot (keys k_rope, values c_kv) -- so the route pays one
// call's host time instead of a Triton launch, Python views and a 36-argument FA3 call.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <climits>
#include <cstdint>
#include <optional>

#include "cc/common/mla_layout.h"
#include "cc/common/op_checks.h"
#include "cc/common/topk_source.h"
#include "cc/fa3/fa3_api.h"
#include "cc/fa3/topk_to_slots.h"

namespace sparse_mla {
namespace {

void sparse_mla_fwd(const at::Tensor& q_nope, const at::Tensor& q_rope, const at::Tensor& kv_cache,
                    const at::Tensor& topk_indices, const at::Tensor& req_id, const at::Tensor& token_kv_len,
                    const at::Tensor& block_table, const at::Tensor& page_table, const at::Tensor& cache_seqlens,
                    const at::Tensor& cu_seqlens_q, const std::optional<at::Tensor>& scheduler_metadata,
                    int64_t num_splits, double softmax_scale, const at::Tensor& out,
                    const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& topk_length,
                    int64_t dcp_rank, int64_t dcp_world_size, int64_t dcp_interleave) {
  TORCH_CHECK_VALUE(q_nope.is_cuda() && q_nope.dim() == 3, "sparse_mla: argument 'q_nope' expected a 3-D CUDA tensor, got ",
                    q_nope.sizes(), " on ", q_nope.device());
  const at::Device device = q_nope.device();
  const int device_index = device.index();
  const int64_t num_tokens = q_nope.size(0), num_heads = q_nope.size(1);
  check_tensor("q_nope", q_nope, at::kBFloat16, device_index, {num_tokens, num_heads, kKvLoraRank});
  check_tensor("q_rope", q_rope, at::kBFloat16, device_index, {num_tokens, num_heads, kRopeDim});
  check_tensor("kv_cache", kv_cache, at::kBFloat16, device_index, {-1, kBlockSize, kSlotElems});
  check_tensor("topk_indices", topk_indices, at::kInt, device_index, {num_tokens, -1});
  const int64_t topk = topk_indices.size(1);
  check_tensor("req_id", req_id, at::kInt, device_index, {num_tokens});
  check_tensor("token_kv_len", token_kv_len, at::kInt, device_index, {num_tokens});
  check_tensor("block_table", block_table, at::kInt, device_index, {-1, -1});
  check_tensor("page_table", page_table, at::kInt, device_index, {num_tokens, topk});
  check_tensor("cache_seqlens", cache_seqlens, at::kInt, device_index, {num_tokens});
  check_tensor("cu_seqlens_q", cu_seqlens_q, at::kInt, device_index, {num_tokens + 1});
  check_tensor("out", out, at::kBFloat16, device_index, {num_tokens, num_heads, kKvLoraRank});
  if (lse.has_value()) check_tensor("lse", *lse, at::kFloat, device_index, {num_tokens, num_heads});
  const int32_t* row_lengths = checked_topk_length(topk_length, num_tokens, device_index);
  const DcpShard dcp = checked_dcp_shard(dcp_rank, dcp_world_size, dcp_interleave);
  const int64_t num_blocks = kv_cache.size(0), block_stride = kv_cache.stride(0);
  TORCH_CHECK_VALUE(kv_cache.stride(1) == kSlotElems && block_stride % kSlotElems == 0 &&
                        block_stride >= kBlockSize * kSlotElems,
                    "sparse_mla: argument 'kv_cache' expected contiguous slots and a block stride that is a multiple "
                    "of 576 elements and >= 36864 (FA3 reads it as pages of one slot), got strides ",
                    kv_cache.strides());
  const int64_t block_stride_rows = block_stride / kSlotElems;
  const int64_t rows = num_blocks > 0 ? (num_blocks - 1) * block_stride_rows + kBlockSize : 0;
  TORCH_CHECK_VALUE(rows <= INT32_MAX, "sparse_mla: argument 'kv_cache' expected at most 2^31 slot rows, got ", rows);
  if (num_tokens == 0) return;

  const c10::cuda::CUDAGuard guard(device);
  TopkToSlotsParams p{};
  fill_topk_source(p, topk_indices, req_id, token_kv_len, block_table, row_lengths, dcp);
  p.num_reqs = static_cast<int>(block_table.size(0));
  p.num_blocks = static_cast<int>(num_blocks);
  p.block_stride_rows = static_cast<int>(block_stride_rows);
  p.slot_ids = page_table.data_ptr<int32_t>();
  p.slot_ids_token_stride = page_table.stride(0);
  p.valid_count = cache_seqlens.data_ptr<int32_t>();
  p.num_tokens = static_cast<int>(num_tokens);
  const cudaError_t error = launch_topk_to_slots(p, c10::cuda::getCurrentCUDAStream(device.index()).stream());
  check_cuda(error, "index conversion launch");

  // Slot s of the flat view is page s; keys the rotary part, values the latent part.
  const at::Tensor slots = kv_cache.as_strided({rows, kSlotElems}, {kSlotElems, 1}, kv_cache.storage_offset());
  const at::Tensor k_cache = slots.narrow(1, kKvLoraRank, kRopeDim).view({rows, 1, 1, kRopeDim});
  const at::Tensor v_cache = slots.narrow(1, 0, kKvLoraRank).view({rows, 1, 1, kKvLoraRank});
  std::optional<const at::Tensor> no_sinks;
  auto result = mha_fwd(q_rope, k_cache, v_cache, std::nullopt, std::nullopt, q_nope, out, cu_seqlens_q,
                        std::nullopt, std::nullopt, std::nullopt, cache_seqlens, /*max_seqlen_q=*/1, std::nullopt,
                        page_table, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                        std::nullopt, std::nullopt, std::nullopt, softmax_scale, /*is_causal=*/false, -1, -1, 0,
                        /*softcap=*/0.0, /*is_rotary_interleaved=*/true, scheduler_metadata, num_splits,
                        std::nullopt, /*sm_margin=*/0, no_sinks);
  if (lse.has_value()) lse->copy_(std::get<1>(result).t());  // FA3's LSE is [N, T]
}

}  // namespace
}  // namespace sparse_mla

TORCH_LIBRARY_FRAGMENT(sparse_mla_fa3, m) {
  m.def(
      "sparse_mla_fwd(Tensor q_nope, Tensor q_rope, Tensor kv_cache, Tensor topk_indices, Tensor req_id, "
      "Tensor token_kv_len, Tensor block_table, Tensor(a!) page_table, Tensor(b!) cache_seqlens, "
      "Tensor cu_seqlens_q, Tensor? scheduler_metadata, int num_splits, float softmax_scale, Tensor(c!) out, "
      "Tensor(d!)? lse, Tensor? topk_length=None, int dcp_rank=0, int dcp_world_size=1, int dcp_interleave=1) "
      "-> ()");
}

TORCH_LIBRARY_IMPL(sparse_mla_fa3, CUDA, m) { m.impl("sparse_mla_fwd", TORCH_FN(sparse_mla::sparse_mla_fwd)); }
