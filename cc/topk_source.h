// Fills the index inputs every kernel of ours reads the same way -- top-k positions, the token's
// request and causal length, the block table -- into a launch-parameter struct with these fields
// (SparseDecodeParams, TopkToSlotsParams), from torch::stable::Tensor or at::Tensor. Host code; the
// tensors are checked by the caller (int32, last dimension contiguous).
#pragma once

#include <cstdint>

namespace sparse_mla {

template <typename Params, typename Tensor>
void fill_topk_source(Params& p, const Tensor& topk_indices, const Tensor& req_id, const Tensor& token_kv_len,
                      const Tensor& block_table) {
  p.topk_indices = static_cast<const int32_t*>(topk_indices.data_ptr());
  p.topk_token_stride = topk_indices.stride(0);
  p.topk = static_cast<int>(topk_indices.size(1));
  p.req_id = static_cast<const int32_t*>(req_id.data_ptr());
  p.token_kv_len = static_cast<const int32_t*>(token_kv_len.data_ptr());
  p.block_table = static_cast<const int32_t*>(block_table.data_ptr());
  p.block_table_stride = block_table.stride(0);
  p.max_blocks_per_req = static_cast<int>(block_table.size(1));
}

}  // namespace sparse_mla
