// The torch op sparse_mla_decode::fwd: validates every tensor (shape, dtype, device, strides and the
// alignment the kernel's vector loads need) and launches the decode kernels (cc/decode/launch.h) on the current
// stream. Built against PyTorch's stable ABI (one build loads in every supported torch); load with
// torch.ops.load_library (py/sparse_mla/ops/decode.py does).
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <optional>

#include "cc/common/op_checks.h"
#include "cc/common/stable_cuda.h"
#include "cc/common/topk_source.h"
#include "cc/decode/launch.h"
#include "cc/decode/params.h"
#include "cc/decode/wide/wide.h"

namespace sparse_mla {
namespace decode {
namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;
using OptionalTensor = std::optional<Tensor>;

constexpr int64_t kMaxHeads = 128;

void check_workspace(const char* name, const OptionalTensor& t, ScalarType dtype, int device, int64_t min_numel) {
  SPARSE_MLA_CHECK_ARG(t.has_value(), "sparse_mla: argument '", name, "' is required when num_splits > 1");
  check_tensor(name, *t, dtype, device, {-1});
  SPARSE_MLA_CHECK_ARG(t->numel() >= min_numel, "sparse_mla: argument '", name, "' expected at least ", min_numel,
                       " elements, got ", t->numel());
}

// The kernel (0: narrow, 1: wide) and its shape: heads per CTA (16 head_tiles: 16 or 32 on the narrow
// kernel, 64 on the wide one, which has one stage size and one CTA per split), a CTA's pipeline stage (16 or
// 32 positions), the CTAs of a split (8 or 1) and a split's positions: its CTAs' whole stages.
DecodeKernel check_launch_shape(int64_t kernel, int64_t head_tiles, int64_t cta_chunk, int64_t cluster_size,
                                int64_t positions_per_split) {
  SPARSE_MLA_CHECK_ARG(kernel == static_cast<int64_t>(DecodeKernel::kNarrow) ||
                           kernel == static_cast<int64_t>(DecodeKernel::kWide),
                       "sparse_mla: argument 'kernel' expected 0 (narrow) or 1 (wide), got ", kernel);
  if (kernel == static_cast<int64_t>(DecodeKernel::kWide)) {
    SPARSE_MLA_CHECK_ARG(
        head_tiles == wide::kHeadTiles && cta_chunk == wide::kCtaChunk && cluster_size == wide::kCluster,
        "sparse_mla: the wide kernel (kernel=1) expected head_tiles=", wide::kHeadTiles, ", cta_chunk=",
        wide::kCtaChunk, " and cluster_size=", wide::kCluster, ", got head_tiles=", head_tiles, ", cta_chunk=",
        cta_chunk, " and cluster_size=", cluster_size);
  } else {
    SPARSE_MLA_CHECK_ARG(head_tiles == 1 || head_tiles == 2,
                         "sparse_mla: argument 'head_tiles' expected 1 or 2 on the narrow kernel (kernel=0), got ",
                         head_tiles);
    SPARSE_MLA_CHECK_ARG(cta_chunk == 16 || cta_chunk == 32,
                         "sparse_mla: argument 'cta_chunk' expected 16 or 32, got ", cta_chunk);
    SPARSE_MLA_CHECK_ARG(cluster_size == kClusterSize || cluster_size == 1,
                         "sparse_mla: argument 'cluster_size' expected ", kClusterSize, " or 1, got ", cluster_size);
  }
  const int64_t granule = cluster_size * cta_chunk;
  SPARSE_MLA_CHECK_ARG(positions_per_split > 0 && positions_per_split % granule == 0 &&
                           positions_per_split <= kMaxPositionsPerSplit,
                       "sparse_mla: argument 'positions_per_split' expected a positive multiple of ", granule,
                       " (cluster_size * cta_chunk) up to ", kMaxPositionsPerSplit, ", got ", positions_per_split);
  return static_cast<DecodeKernel>(kernel);
}

// The opt-in shared-memory limit per block of CUDA device `index`, asked once per device.
int max_shared_memory_per_block(int index) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  if (index < kMaxDevices && cached[index].load(std::memory_order_relaxed) > 0) return cached[index];
  int bytes = 0;
  const cudaError_t error = cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, index);
  check_cuda(error, "cudaDeviceGetAttribute");
  if (index < kMaxDevices) cached[index].store(bytes, std::memory_order_relaxed);
  return bytes;
}

void fwd(const Tensor& q_nope, const Tensor& q_rope, const Tensor& kv_cache, const Tensor& topk_indices,
         const Tensor& req_id, const Tensor& token_kv_len, const Tensor& block_table, double softmax_scale,
         int64_t kernel, int64_t head_tiles, int64_t cta_chunk, int64_t cluster_size, int64_t num_splits,
         int64_t positions_per_split, const Tensor& out, const OptionalTensor& lse, const OptionalTensor& partial_out,
         const OptionalTensor& partial_lse, const OptionalTensor& counters, const OptionalTensor& topk_length,
         int64_t dcp_rank, int64_t dcp_world_size, int64_t dcp_interleave) {
  SPARSE_MLA_CHECK_ARG(q_nope.is_cuda(), "sparse_mla: argument 'q_nope' expected a CUDA tensor, got ",
                       format_device(q_nope));
  const int device = q_nope.get_device();
  const int64_t num_tokens = q_nope.dim() == 3 ? q_nope.size(0) : -1;
  const int64_t num_heads = q_nope.dim() == 3 ? q_nope.size(1) : -1;
  check_tensor("q_nope", q_nope, ScalarType::BFloat16, device, {-1, -1, kKvLoraRank});
  SPARSE_MLA_CHECK_ARG(1 <= num_heads && num_heads <= kMaxHeads, "sparse_mla: argument 'q_nope' expected 1..",
                       kMaxHeads, " heads, got shape ", format_ints(q_nope.sizes()));
  check_tensor("q_rope", q_rope, ScalarType::BFloat16, device, {num_tokens, num_heads, kRopeDim});
  // The cache's dtype names its format: bf16 [num_blocks, 64, 576] or uint8 fp8_ds_mla [num_blocks, 64, 656].
  const bool kv_fp8 = kv_cache.scalar_type() == ScalarType::Byte;
  check_tensor("kv_cache", kv_cache, kv_fp8 ? ScalarType::Byte : ScalarType::BFloat16, device,
               {-1, kBlockSize, kv_fp8 ? kFp8SlotBytes : kSlotElems});
  check_tensor("topk_indices", topk_indices, ScalarType::Int, device, {num_tokens, -1});
  check_tensor("req_id", req_id, ScalarType::Int, device, {num_tokens});
  check_tensor("token_kv_len", token_kv_len, ScalarType::Int, device, {num_tokens});
  check_tensor("block_table", block_table, ScalarType::Int, device, {-1, -1});
  const int32_t* row_lengths = checked_topk_length(topk_length, num_tokens, device);
  const DcpShard dcp = checked_dcp_shard(dcp_rank, dcp_world_size, dcp_interleave);
  check_tensor("out", out, ScalarType::BFloat16, device, {num_tokens, num_heads, kKvLoraRank});
  check_alignment("q_nope", q_nope, 4);
  check_alignment("q_rope", q_rope, 4);
  check_alignment("out", out, 4);
  check_alignment("kv_cache", kv_cache, 16);
  if (lse.has_value()) {
    check_tensor("lse", *lse, ScalarType::Float, device, {num_tokens, num_heads});
    SPARSE_MLA_CHECK_ARG(lse->is_contiguous(), "sparse_mla: argument 'lse' expected contiguous, got strides ",
                         format_ints(lse->strides()));
  }
  const int64_t num_blocks = kv_cache.size(0), topk = topk_indices.size(1);
  SPARSE_MLA_CHECK_ARG(num_blocks * kBlockSize <= INT32_MAX, "sparse_mla: argument 'kv_cache' expected at most ",
                       INT32_MAX / kBlockSize, " blocks, got ", num_blocks);
  SPARSE_MLA_CHECK_ARG(topk >= 1, "sparse_mla: argument 'topk_indices' expected at least one column, got shape ",
                       format_ints(topk_indices.sizes()));
  SPARSE_MLA_CHECK_ARG(1 <= num_splits && num_splits <= kMaxSplits, "sparse_mla: argument 'num_splits' expected 1..",
                       kMaxSplits, ", got ", num_splits);
  const DecodeKernel decode_kernel =
      check_launch_shape(kernel, head_tiles, cta_chunk, cluster_size, positions_per_split);
  SPARSE_MLA_CHECK_ARG(num_splits * positions_per_split >= topk, "sparse_mla: num_splits * positions_per_split = ",
                       num_splits * positions_per_split, " expected to cover topk = ", topk);
  const int64_t heads_per_cta = kHeadTileRows * head_tiles;
  const int64_t head_groups = (num_heads + heads_per_cta - 1) / heads_per_cta;
  if (num_splits > 1) {
    const int64_t groups = num_tokens * head_groups;
    check_workspace("partial_out", partial_out, ScalarType::Float, device,
                    groups * num_splits * heads_per_cta * kKvLoraRank);
    check_workspace("partial_lse", partial_lse, ScalarType::Float, device,
                    groups * num_splits * kClusterSize * heads_per_cta);
    check_workspace("counters", counters, ScalarType::Int, device, groups * kClusterSize);
  }
  if (num_tokens == 0) return;

  const torch::stable::accelerator::DeviceGuard guard(device);
  const int max_shared = max_shared_memory_per_block(device);
  const int shared =
      shared_memory_bytes(decode_kernel, static_cast<int>(head_tiles), static_cast<int>(cta_chunk), kv_fp8,
                          static_cast<int>(cluster_size), static_cast<int>(positions_per_split));
  SPARSE_MLA_CHECK_ARG(shared <= max_shared, "sparse_mla: the decode kernel needs ", shared,
                       " bytes of shared memory per block for head_tiles=", head_tiles, ", positions_per_split=",
                       positions_per_split, "; this device allows ", max_shared);

  SparseDecodeParams p{};
  p.q_nope = q_nope.data_ptr();
  p.q_nope_token_stride = q_nope.stride(0);
  p.q_nope_head_stride = q_nope.stride(1);
  p.q_rope = q_rope.data_ptr();
  p.q_rope_token_stride = q_rope.stride(0);
  p.q_rope_head_stride = q_rope.stride(1);
  p.kv_cache = kv_cache.data_ptr();
  p.kv_block_stride = kv_cache.stride(0);
  p.kv_slot_stride = kv_cache.stride(1);
  p.kv_fp8 = kv_fp8 ? 1 : 0;
  p.num_blocks = static_cast<int>(num_blocks);
  fill_topk_source(p, topk_indices, req_id, token_kv_len, block_table, row_lengths, dcp);
  p.out = out.data_ptr();
  p.out_token_stride = out.stride(0);
  p.out_head_stride = out.stride(1);
  p.lse = lse.has_value() ? static_cast<float*>(lse->data_ptr()) : nullptr;
  p.partial_out = num_splits > 1 ? static_cast<float*>(partial_out->data_ptr()) : nullptr;
  p.partial_lse = num_splits > 1 ? static_cast<float*>(partial_lse->data_ptr()) : nullptr;
  p.counters = num_splits > 1 ? static_cast<int32_t*>(counters->data_ptr()) : nullptr;
  p.num_tokens = static_cast<int>(num_tokens);
  p.num_heads = static_cast<int>(num_heads);
  p.head_tiles = static_cast<int>(head_tiles);
  p.cta_chunk = static_cast<int>(cta_chunk);
  p.cluster_size = static_cast<int>(cluster_size);
  p.head_groups = static_cast<int>(head_groups);
  p.num_splits = static_cast<int>(num_splits);
  p.positions_per_split = static_cast<int>(positions_per_split);
  p.scale_log2 = static_cast<float>(softmax_scale * 1.4426950408889634);  // log2(e)
  p.kernel = decode_kernel;
  const cudaError_t error = launch_sparse_decode(p, current_cuda_stream(device));
  check_cuda(error, "decode kernel launch");
}

int64_t max_active_clusters_op(int64_t kernel, int64_t head_tiles, int64_t cta_chunk, int64_t cluster_size,
                               bool kv_fp8, int64_t positions_per_split) {
  const DecodeKernel decode_kernel =
      check_launch_shape(kernel, head_tiles, cta_chunk, cluster_size, positions_per_split);
  int clusters = 0;
  const cudaError_t error =
      max_active_clusters(decode_kernel, static_cast<int>(head_tiles), static_cast<int>(cta_chunk), kv_fp8,
                          static_cast<int>(cluster_size), static_cast<int>(positions_per_split), &clusters);
  check_cuda(error, "cudaOccupancyMaxActiveClusters");
  return clusters;
}

}  // namespace
}  // namespace decode
}  // namespace sparse_mla

STABLE_TORCH_LIBRARY(sparse_mla_decode, m) {
  m.def(
      "fwd(Tensor q_nope, Tensor q_rope, Tensor kv_cache, Tensor topk_indices, Tensor req_id, "
      "Tensor token_kv_len, Tensor block_table, float softmax_scale, int kernel, int head_tiles, int cta_chunk, "
      "int cluster_size, int num_splits, "
      "int positions_per_split, Tensor(a!) out, Tensor(b!)? lse, Tensor(c!)? partial_out, "
      "Tensor(d!)? partial_lse, Tensor(e!)? counters, Tensor? topk_length=None, int dcp_rank=0, "
      "int dcp_world_size=1, int dcp_interleave=1) -> ()");
  m.def(
      "max_active_clusters(int kernel, int head_tiles, int cta_chunk, int cluster_size, bool kv_fp8, "
      "int positions_per_split) -> int");
}

STABLE_TORCH_LIBRARY_IMPL(sparse_mla_decode, CUDA, m) { m.impl("fwd", TORCH_BOX(&sparse_mla::decode::fwd)); }

// No tensor argument: one kernel for every dispatch key, on the current CUDA device.
STABLE_TORCH_LIBRARY_IMPL(sparse_mla_decode, CompositeExplicitAutograd, m) {
  m.impl("max_active_clusters", TORCH_BOX(&sparse_mla::decode::max_active_clusters_op));
}
