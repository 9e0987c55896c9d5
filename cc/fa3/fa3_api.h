// Declarations of FA3's forward entry points, defined in sgl-attn hopper/flash_api.cpp (which has no
// header of its own). The parameter lists must match that file exactly: they decide the mangled names.
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

// Returns (out, softmax_lse, out_accum, softmax_lse_accum).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> mha_fwd(
    at::Tensor q, at::Tensor k, at::Tensor v,
    std::optional<at::Tensor> k_new, std::optional<at::Tensor> v_new, std::optional<at::Tensor> q_v,
    std::optional<at::Tensor> out,
    std::optional<at::Tensor> cu_seqlens_q, std::optional<at::Tensor> cu_seqlens_k,
    std::optional<at::Tensor> cu_seqlens_k_new,
    std::optional<at::Tensor> seqused_q, std::optional<at::Tensor> seqused_k,
    std::optional<int64_t> max_seqlen_q, std::optional<int64_t> max_seqlen_k,
    std::optional<at::Tensor> page_table, std::optional<at::Tensor> kv_batch_idx,
    std::optional<at::Tensor> leftpad_k,
    std::optional<at::Tensor> rotary_cos, std::optional<at::Tensor> rotary_sin,
    std::optional<at::Tensor> seqlens_rotary,
    std::optional<at::Tensor> q_descale, std::optional<at::Tensor> k_descale,
    std::optional<at::Tensor> v_descale,
    std::optional<double> softmax_scale, bool is_causal,
    int64_t window_size_left, int64_t window_size_right, int64_t attention_chunk,
    double softcap, bool is_rotary_interleaved,
    std::optional<at::Tensor> scheduler_metadata, int64_t num_splits,
    std::optional<bool> pack_gqa, int64_t sm_margin,
    std::optional<const at::Tensor>& sinks);

// The tile scheduler's metadata of one batch shape, for mha_fwd's scheduler_metadata argument (which
// then skips its own scheduling kernel). Launches FA3's prepare_varlen_num_blocks kernel on the
// current stream; the result holds, per batch entry rounded up to 4, the dynamic split count, the
// query tiles and the batch order, then the tile semaphore (zeroed here, re-zeroed by each mha_fwd).
at::Tensor mha_fwd_get_scheduler_metadata(
    int64_t batch_size, int64_t max_seqlen_q, int64_t max_seqlen_k,
    int64_t num_heads, int64_t num_heads_k, int64_t headdim, int64_t headdim_v,
    at::ScalarType qkv_dtype, at::Tensor seqused_k,
    std::optional<at::Tensor> cu_seqlens_q, std::optional<at::Tensor> cu_seqlens_k,
    std::optional<at::Tensor> cu_seqlens_k_new,
    std::optional<at::Tensor> seqused_q, std::optional<at::Tensor> leftpad_k,
    std::optional<int64_t> page_size, int64_t max_seqlen_k_new, bool is_causal,
    int64_t window_size_left, int64_t window_size_right, int64_t attention_chunk,
    bool has_softcap, int64_t num_splits, std::optional<bool> pack_gqa, int64_t sm_margin);
