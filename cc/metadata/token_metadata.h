// Per-token request ids and causal lengths of one step (the metadata builder's device work) as one
// CUDA kernel. No torch types here.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sparse_mla {

struct TokenMetadataParams {
  const int32_t* query_start_loc;  // [num_reqs + 1] non-decreasing
  const int32_t* seq_lens;         // [num_reqs]
  int num_reqs;
  int32_t* req_id;        // [>= end] out
  int32_t* token_kv_len;  // [>= end] out
  int32_t* kv_len_bound;  // [>= end] out
  int num_tokens;         // entries [0, num_tokens) are this step's (padding past query_start_loc[num_reqs])
  int end;                // entries [num_tokens, end) are reset to the padding values (0, 0, 1)
  int index_topk;
};

// Enqueues ceil(end / 256) CTAs on `stream`; returns the launch's error.
cudaError_t launch_token_metadata(const TokenMetadataParams& params, cudaStream_t stream);

}  // namespace sparse_mla
