// Fills the index inputs every kernel of ours reads the same way -- top-k positions, the token's
// request and causal length, the block table -- into a launch-parameter struct with these fields
// (SparseDecodeParams, TopkToSlotsParams). Host code; the tensors are checked by the caller.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace sparse_mla {

template <typename Params>
void fill_topk_source(Params& p, const at::Tensor& topk_indices, const at::Tensor& req_id,
                      const at::Tensor& token_kv_len, const at::Tensor& block_table) {
  p.topk_indices = topk_indices.data_ptr<int32_t>();
  p.topk_token_stride = topk_indices.stride(0);
  p.topk = static_cast<int>(topk_indices.size(1));
  p.req_id = req_id.data_ptr<int32_t>();
  p.token_kv_len = token_kv_len.data_ptr<int32_t>();
  p.block_table = block_table.data_ptr<int32_t>();
  p.block_table_stride = block_table.stride(0);
  p.max_blocks_per_req = static_cast<int>(block_table.size(1));
}

}  // namespace sparse_mla
