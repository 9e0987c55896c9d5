// Fills the index inputs every kernel of ours reads the same way -- top-k positions, the token's
// request and causal length, the block table, the rows' lengths and the DCP shard (cc/common/topk_filter.h)
// -- into a launch-parameter struct with these fields (SparseDecodeParams, TopkToSlotsParams), from
// torch::stable::Tensor or at::Tensor. Host code; the tensors are checked by the caller (int32, last
// dimension contiguous); topk_length is nullptr where the rows have no length.
#pragma once

#include <climits>
#include <cstdint>
#include <optional>

#include "cc/common/op_checks.h"
#include "cc/common/topk_filter.h"

namespace sparse_mla {

template <typename Params, typename Tensor>
void fill_topk_source(Params& p, const Tensor& topk_indices, const Tensor& req_id, const Tensor& token_kv_len,
                      const Tensor& block_table, const int32_t* topk_length, const DcpShard& dcp) {
  p.topk_indices = static_cast<const int32_t*>(topk_indices.data_ptr());
  p.topk_token_stride = topk_indices.stride(0);
  p.topk = static_cast<int>(topk_indices.size(1));
  p.req_id = static_cast<const int32_t*>(req_id.data_ptr());
  p.token_kv_len = static_cast<const int32_t*>(token_kv_len.data_ptr());
  p.block_table = static_cast<const int32_t*>(block_table.data_ptr());
  p.block_table_stride = block_table.stride(0);
  p.max_blocks_per_req = static_cast<int>(block_table.size(1));
  p.topk_length = topk_length;
  p.dcp = dcp;
}

// The optional `topk_length` argument checked ([num_tokens] int32 on CUDA device `device_index`) as
// the kernels' pointer, nullptr when absent.
template <typename Tensor>
const int32_t* checked_topk_length(const std::optional<Tensor>& topk_length, int64_t num_tokens, int device_index) {
  if (!topk_length.has_value()) return nullptr;
  check_tensor("topk_length", *topk_length, torch::headeronly::ScalarType::Int, device_index, {num_tokens});
  return static_cast<const int32_t*>(topk_length->data_ptr());
}

// The DCP arguments checked: 1 <= dcp_world_size, 0 <= dcp_rank < dcp_world_size, 1 <= dcp_interleave.
inline DcpShard checked_dcp_shard(int64_t dcp_rank, int64_t dcp_world_size, int64_t dcp_interleave) {
  SPARSE_MLA_CHECK_ARG(1 <= dcp_world_size && dcp_world_size <= INT32_MAX,
                       "sparse_mla: argument 'dcp_world_size' expected >= 1, got ", dcp_world_size);
  SPARSE_MLA_CHECK_ARG(0 <= dcp_rank && dcp_rank < dcp_world_size, "sparse_mla: argument 'dcp_rank' expected in [0, ",
                       dcp_world_size, "), got ", dcp_rank);
  SPARSE_MLA_CHECK_ARG(1 <= dcp_interleave && dcp_interleave <= INT32_MAX,
                       "sparse_mla: argument 'dcp_interleave' expected >= 1, got ", dcp_interleave);
  return DcpShard{static_cast<int>(dcp_rank), static_cast<int>(dcp_world_size), static_cast<int>(dcp_interleave)};
}

}  // namespace sparse_mla
