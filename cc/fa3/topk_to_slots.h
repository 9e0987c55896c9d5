// Request-local top-k positions -> global slot ids (valid ids first), as a CUDA kernel: the index
// conversion of the FA3 route, launched by the fused op of cc/fa3/fa3_sparse_mla_op.cc. No torch types here.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cc/common/topk_filter.h"

namespace sparse_mla {

struct TopkToSlotsParams {
  const int32_t* topk_indices;  // [T, topk], unit last stride
  int64_t topk_token_stride;
  int topk;
  const int32_t* req_id;        // [T]
  const int32_t* token_kv_len;  // [T]
  const int32_t* block_table;   // [num_reqs, max_blocks], unit last stride
  int64_t block_table_stride;
  int num_reqs, max_blocks_per_req;
  const int32_t* topk_length;   // [T] entries of each row to read (columns past it are -1), or nullptr
  DcpShard dcp;                 // the shard of the cache this rank holds (positions are global)
  int num_blocks;               // blocks in the cache
  int block_stride_rows;        // slots from one block to the next in the flat slot view (64 if contiguous)
  int32_t* slot_ids;            // [T, topk] out: valid slot ids in their original order, then 0
  int64_t slot_ids_token_stride;
  int32_t* valid_count;         // [T] out
  int num_tokens;
};

// Enqueues one CTA per token on `stream`; returns the launch's error.
cudaError_t launch_topk_to_slots(const TopkToSlotsParams& params, cudaStream_t stream);

}  // namespace sparse_mla
