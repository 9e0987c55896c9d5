// Token t of request r (query_start_loc[r] <= t < query_start_loc[r + 1]) may attend
// seq_lens[r] - query_start_loc[r + 1] + t + 1 positions (at least 0): one for decode, one per
// speculative token, causal for prefill. Tokens at or past query_start_loc[num_reqs] are CUDA-graph
// padding: request 0, length 0. kv_len_bound = clamp(length, 1, index_topk). The same function as
// the PyTorch path of sparse_mla.backend.SparseMLAMetadataBuilder.build, in one launch.
#include "cc/metadata/token_metadata.h"

namespace sparse_mla {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) token_metadata_kernel(const TokenMetadataParams p) {
  const int t = blockIdx.x * kThreads + threadIdx.x;
  if (t >= p.end) return;
  int req = 0, length = 0;
  if (t < p.num_tokens && p.num_reqs > 0 && t < p.query_start_loc[p.num_reqs]) {
    int lo = 0, hi = p.num_reqs;  // requests that end at or before t (upper bound over the ends)
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (p.query_start_loc[mid + 1] <= t) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    req = lo;
    length = max(0, p.seq_lens[req] - p.query_start_loc[req + 1] + t + 1);
  }
  p.req_id[t] = req;
  p.token_kv_len[t] = length;
  p.kv_len_bound[t] = min(max(length, 1), p.index_topk);
}

}  // namespace

cudaError_t launch_token_metadata(const TokenMetadataParams& params, cudaStream_t stream) {
  if (params.end <= 0) return cudaSuccess;
  token_metadata_kernel<<<(params.end + kThreads - 1) / kThreads, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace sparse_mla
