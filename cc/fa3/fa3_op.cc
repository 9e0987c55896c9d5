// The torch ops sparse_mla_fa3::fwd and sparse_mla_fa3::get_scheduler_metadata: FA3's forward and its
// scheduler planning (mha_fwd and mha_fwd_get_scheduler_metadata of sgl-attn hopper/flash_api.cpp)
// with their full parameter lists, registered for CUDA tensors. Load the shared library with
// torch.ops.load_library (py/sparse_mla/ops/fa3.py does) and call torch.ops.sparse_mla_fa3.<name>.
#include <torch/library.h>

#include "cc/fa3/fa3_api.h"

namespace sparse_mla {
namespace {

using OptionalTensor = std::optional<at::Tensor>;

// Adapts the dispatcher's argument types (const references, int64_t, double) to mha_fwd's
// (optionals by value, and the sinks as a reference to an optional const tensor).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fwd(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const OptionalTensor& k_new, const OptionalTensor& v_new, const OptionalTensor& q_v,
    const OptionalTensor& out,
    const OptionalTensor& cu_seqlens_q, const OptionalTensor& cu_seqlens_k,
    const OptionalTensor& cu_seqlens_k_new,
    const OptionalTensor& seqused_q, const OptionalTensor& seqused_k,
    std::optional<int64_t> max_seqlen_q, std::optional<int64_t> max_seqlen_k,
    const OptionalTensor& page_table, const OptionalTensor& kv_batch_idx,
    const OptionalTensor& leftpad_k,
    const OptionalTensor& rotary_cos, const OptionalTensor& rotary_sin,
    const OptionalTensor& seqlens_rotary,
    const OptionalTensor& q_descale, const OptionalTensor& k_descale, const OptionalTensor& v_descale,
    std::optional<double> softmax_scale, bool is_causal,
    int64_t window_size_left, int64_t window_size_right, int64_t attention_chunk,
    double softcap, bool is_rotary_interleaved,
    const OptionalTensor& scheduler_metadata, int64_t num_splits,
    std::optional<bool> pack_gqa, int64_t sm_margin,
    const OptionalTensor& sinks) {
  std::optional<const at::Tensor> sinks_const =
      sinks.has_value() ? std::optional<const at::Tensor>(*sinks) : std::nullopt;
  return mha_fwd(q, k, v, k_new, v_new, q_v, out, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new,
                 seqused_q, seqused_k, max_seqlen_q, max_seqlen_k, page_table, kv_batch_idx,
                 leftpad_k, rotary_cos, rotary_sin, seqlens_rotary, q_descale, k_descale, v_descale,
                 softmax_scale, is_causal, window_size_left, window_size_right, attention_chunk,
                 softcap, is_rotary_interleaved, scheduler_metadata, num_splits, pack_gqa,
                 sm_margin, sinks_const);
}

// Adapts the dispatcher's argument types to mha_fwd_get_scheduler_metadata's (optionals by value).
at::Tensor get_scheduler_metadata(
    int64_t batch_size, int64_t max_seqlen_q, int64_t max_seqlen_k,
    int64_t num_heads, int64_t num_heads_k, int64_t headdim, int64_t headdim_v,
    at::ScalarType qkv_dtype, const at::Tensor& seqused_k,
    const OptionalTensor& cu_seqlens_q, const OptionalTensor& cu_seqlens_k,
    const OptionalTensor& cu_seqlens_k_new,
    const OptionalTensor& seqused_q, const OptionalTensor& leftpad_k,
    std::optional<int64_t> page_size, int64_t max_seqlen_k_new, bool is_causal,
    int64_t window_size_left, int64_t window_size_right, int64_t attention_chunk,
    bool has_softcap, int64_t num_splits, std::optional<bool> pack_gqa, int64_t sm_margin) {
  return mha_fwd_get_scheduler_metadata(
      batch_size, max_seqlen_q, max_seqlen_k, num_heads, num_heads_k, headdim, headdim_v, qkv_dtype,
      seqused_k, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new, seqused_q, leftpad_k, page_size,
      max_seqlen_k_new, is_causal, window_size_left, window_size_right, attention_chunk, has_softcap,
      num_splits, pack_gqa, sm_margin);
}

}  // namespace
}  // namespace sparse_mla

TORCH_LIBRARY(sparse_mla_fa3, m) {
  m.def(
      "fwd(Tensor q, Tensor k, Tensor v, Tensor? k_new, Tensor? v_new, Tensor? q_v, "
      "Tensor(a!)? out, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? cu_seqlens_k_new, "
      "Tensor? seqused_q, Tensor? seqused_k, int? max_seqlen_q, int? max_seqlen_k, "
      "Tensor? page_table, Tensor? kv_batch_idx, Tensor? leftpad_k, Tensor? rotary_cos, "
      "Tensor? rotary_sin, Tensor? seqlens_rotary, Tensor? q_descale, Tensor? k_descale, "
      "Tensor? v_descale, float? softmax_scale, bool is_causal, int window_size_left, "
      "int window_size_right, int attention_chunk, float softcap, bool is_rotary_interleaved, "
      "Tensor? scheduler_metadata, int num_splits, bool? pack_gqa, int sm_margin, Tensor? sinks) "
      "-> (Tensor out, Tensor softmax_lse, Tensor out_accum, Tensor softmax_lse_accum)");
  m.def(
      "get_scheduler_metadata(int batch_size, int max_seqlen_q, int max_seqlen_k, int num_heads, "
      "int num_heads_k, int headdim, int headdim_v, ScalarType qkv_dtype, Tensor seqused_k, "
      "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? cu_seqlens_k_new, Tensor? seqused_q, "
      "Tensor? leftpad_k, int? page_size, int max_seqlen_k_new, bool is_causal, "
      "int window_size_left, int window_size_right, int attention_chunk, bool has_softcap, "
      "int num_splits, bool? pack_gqa, int sm_margin) -> Tensor");
}

TORCH_LIBRARY_IMPL(sparse_mla_fa3, CUDA, m) {
  m.impl("fwd", TORCH_FN(sparse_mla::fwd));
  m.impl("get_scheduler_metadata", TORCH_FN(sparse_mla::get_scheduler_metadata));
}
