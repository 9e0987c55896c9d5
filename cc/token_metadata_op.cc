// The torch op sparse_mla_decode::token_metadata: the metadata builder's per-token request ids and
// causal lengths (cc/token_metadata_kernel.cu) in one launch, with the tail of the persistent buffers
// reset, so a step's build costs one dispatcher call instead of eight PyTorch ops.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>

#include "cc/op_checks.h"
#include "cc/token_metadata.h"

namespace sparse_mla {
namespace {

void token_metadata(const at::Tensor& query_start_loc, const at::Tensor& seq_lens, int64_t num_tokens, int64_t end,
                    int64_t index_topk, const at::Tensor& req_id, const at::Tensor& token_kv_len,
                    const at::Tensor& kv_len_bound) {
  TORCH_CHECK_VALUE(seq_lens.is_cuda() && seq_lens.dim() == 1, "sparse_mla: argument 'seq_lens' expected a 1-D CUDA tensor, got ",
                    seq_lens.sizes(), " on ", seq_lens.device());
  const at::Device device = seq_lens.device();
  const int64_t num_reqs = seq_lens.size(0);
  check_tensor("seq_lens", seq_lens, at::kInt, device, {num_reqs});
  check_tensor("query_start_loc", query_start_loc, at::kInt, device, {num_reqs + 1});
  TORCH_CHECK_VALUE(0 <= num_tokens && num_tokens <= end, "sparse_mla: expected 0 <= num_tokens <= end, got num_tokens ",
                    num_tokens, ", end ", end);
  TORCH_CHECK_VALUE(index_topk >= 1, "sparse_mla: argument 'index_topk' expected >= 1, got ", index_topk);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"req_id", req_id},
                                {"token_kv_len", token_kv_len},
                                {"kv_len_bound", kv_len_bound}}) {
    check_tensor(name, t, at::kInt, device, {-1});
    TORCH_CHECK_VALUE(t.size(0) >= end, "sparse_mla: argument '", name, "' expected at least ", end,
                      " elements, got ", t.size(0));
  }
  const c10::cuda::CUDAGuard guard(device);
  TokenMetadataParams p{};
  p.query_start_loc = query_start_loc.data_ptr<int32_t>();
  p.seq_lens = seq_lens.data_ptr<int32_t>();
  p.num_reqs = static_cast<int>(num_reqs);
  p.req_id = req_id.data_ptr<int32_t>();
  p.token_kv_len = token_kv_len.data_ptr<int32_t>();
  p.kv_len_bound = kv_len_bound.data_ptr<int32_t>();
  p.num_tokens = static_cast<int>(num_tokens);
  p.end = static_cast<int>(end);
  p.index_topk = static_cast<int>(index_topk);
  const cudaError_t error = launch_token_metadata(p, c10::cuda::getCurrentCUDAStream(device.index()).stream());
  check_cuda(error, "token metadata launch");
}

}  // namespace
}  // namespace sparse_mla

TORCH_LIBRARY_FRAGMENT(sparse_mla_decode, m) {
  m.def(
      "token_metadata(Tensor query_start_loc, Tensor seq_lens, int num_tokens, int end, int index_topk, "
      "Tensor(a!) req_id, Tensor(b!) token_kv_len, Tensor(c!) kv_len_bound) -> ()");
}

TORCH_LIBRARY_IMPL(sparse_mla_decode, CUDA, m) { m.impl("token_metadata", TORCH_FN(sparse_mla::token_metadata)); }
