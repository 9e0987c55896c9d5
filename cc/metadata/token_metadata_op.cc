// The torch op sparse_mla_decode::token_metadata: the metadata builder's per-token request ids and
// causal lengths (cc/metadata/token_metadata_kernel.cu) in one launch, with the tail of the persistent buffers
// reset, so a step's build costs one dispatcher call instead of eight PyTorch ops. Stable ABI, like
// the decode op it shares its library with.
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <utility>

#include "cc/common/op_checks.h"
#include "cc/common/stable_cuda.h"
#include "cc/metadata/token_metadata.h"

namespace sparse_mla {
namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

void token_metadata(const Tensor& query_start_loc, const Tensor& seq_lens, int64_t num_tokens, int64_t end,
                    int64_t index_topk, const Tensor& req_id, const Tensor& token_kv_len, const Tensor& kv_len_bound) {
  SPARSE_MLA_CHECK_ARG(seq_lens.is_cuda() && seq_lens.dim() == 1,
                       "sparse_mla: argument 'seq_lens' expected a 1-D CUDA tensor, got ",
                       format_ints(seq_lens.sizes()), " on ", format_device(seq_lens));
  const int device = seq_lens.get_device();
  const int64_t num_reqs = seq_lens.size(0);
  check_tensor("seq_lens", seq_lens, ScalarType::Int, device, {num_reqs});
  check_tensor("query_start_loc", query_start_loc, ScalarType::Int, device, {num_reqs + 1});
  SPARSE_MLA_CHECK_ARG(0 <= num_tokens && num_tokens <= end,
                       "sparse_mla: argument 'num_tokens' expected 0 <= num_tokens <= end, got num_tokens ",
                       num_tokens, ", end ", end);
  SPARSE_MLA_CHECK_ARG(index_topk >= 1, "sparse_mla: argument 'index_topk' expected >= 1, got ", index_topk);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor&>{"req_id", req_id},
                                {"token_kv_len", token_kv_len},
                                {"kv_len_bound", kv_len_bound}}) {
    check_tensor(name, t, ScalarType::Int, device, {-1});
    SPARSE_MLA_CHECK_ARG(t.size(0) >= end, "sparse_mla: argument '", name, "' expected at least ", end,
                         " elements, got ", t.size(0));
  }
  const torch::stable::accelerator::DeviceGuard guard(device);
  TokenMetadataParams p{};
  p.query_start_loc = static_cast<const int32_t*>(query_start_loc.data_ptr());
  p.seq_lens = static_cast<const int32_t*>(seq_lens.data_ptr());
  p.num_reqs = static_cast<int>(num_reqs);
  p.req_id = static_cast<int32_t*>(req_id.data_ptr());
  p.token_kv_len = static_cast<int32_t*>(token_kv_len.data_ptr());
  p.kv_len_bound = static_cast<int32_t*>(kv_len_bound.data_ptr());
  p.num_tokens = static_cast<int>(num_tokens);
  p.end = static_cast<int>(end);
  p.index_topk = static_cast<int>(index_topk);
  const cudaError_t error = launch_token_metadata(p, current_cuda_stream(device));
  check_cuda(error, "token metadata launch");
}

}  // namespace
}  // namespace sparse_mla

STABLE_TORCH_LIBRARY_FRAGMENT(sparse_mla_decode, m) {
  m.def(
      "token_metadata(Tensor query_start_loc, Tensor seq_lens, int num_tokens, int end, int index_topk, "
      "Tensor(a!) req_id, Tensor(b!) token_kv_len, Tensor(c!) kv_len_bound) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(sparse_mla_decode, CUDA, m) {
  m.impl("token_metadata", TORCH_BOX(&sparse_mla::token_metadata));
}
