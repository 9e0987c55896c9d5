// The torch ops sparse_mla_decode::fwd (validates the plan value, every tensor's shape, dtype, device,
// strides and the alignment the kernel's vector loads need, and the workspace; carves the workspace and
// launches the decode kernels of cc/decode/launch.h on the current stream), ::max_active_clusters and
// ::workspace_layout (cc/decode/decode_plan.h). Built against PyTorch's stable ABI (one build loads in
// every supported torch); load with torch.ops.load_library (py/sparse_mla/ops/decode.py does).
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <vector>

#include "cc/common/device_attribute.h"
#include "cc/common/op_checks.h"
#include "cc/common/stable_cuda.h"
#include "cc/common/topk_source.h"
#include "cc/decode/decode_plan.h"
#include "cc/decode/launch.h"
#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {
namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;
using OptionalTensor = std::optional<Tensor>;

// One caller-owned uint8 tensor on `device`, 16-byte aligned, of at least `layout.bytes`.
void check_workspace(const Tensor& workspace, const WorkspaceLayout& layout, int device) {
  check_tensor("workspace", workspace, ScalarType::Byte, device, {-1});
  const auto address = reinterpret_cast<uintptr_t>(workspace.data_ptr());
  SPARSE_MLA_CHECK_ARG(address % kWorkspaceBaseAlignment == 0, "sparse_mla: argument 'workspace' expected a ",
                       kWorkspaceBaseAlignment, "-byte aligned address, got one ", address % kWorkspaceBaseAlignment,
                       " bytes past");
  SPARSE_MLA_CHECK_ARG(workspace.numel() >= layout.bytes, "sparse_mla: argument 'workspace' expected at least ",
                       layout.bytes, " bytes for this plan (decode.workspace_bytes), got ", workspace.numel());
}

// A region of `workspace` as a T pointer (nullptr when empty: one split).
template <typename T>
T* region(const Tensor& workspace, const WorkspaceRegion& r) {
  return r.bytes == 0 ? nullptr : reinterpret_cast<T*>(static_cast<uint8_t*>(workspace.data_ptr()) + r.offset);
}

// The opt-in shared-memory limit per block of CUDA device `index`, asked once per device.
int max_shared_memory_per_block(int index) {
  int bytes = 0;
  check_cuda(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(index, &bytes), "cudaDeviceGetAttribute");
  return bytes;
}

void fwd(const Tensor& q_nope, const Tensor& q_rope, const Tensor& kv_cache, const Tensor& topk_indices,
         const Tensor& req_id, const Tensor& token_kv_len, const Tensor& block_table, double softmax_scale,
         const std::vector<int64_t>& plan_value, const Tensor& out, const OptionalTensor& lse,
         const Tensor& workspace, const OptionalTensor& topk_length, int64_t dcp_rank, int64_t dcp_world_size,
         int64_t dcp_interleave) {
  SPARSE_MLA_CHECK_ARG(q_nope.is_cuda(), "sparse_mla: argument 'q_nope' expected a CUDA tensor, got ",
                       format_device(q_nope));
  const int device = q_nope.get_device();
  const DecodePlan plan = checked_plan(plan_value);
  const int64_t num_tokens = plan.num_tokens, num_heads = plan.num_heads;
  SPARSE_MLA_CHECK_ARG(q_nope.dim() == 3 && q_nope.size(0) == num_tokens && q_nope.size(1) == num_heads,
                       "sparse_mla: argument 'plan' was made for (T, N) = (", num_tokens, ", ", num_heads,
                       "), got q_nope of shape ", format_ints(q_nope.sizes()));
  check_tensor("q_nope", q_nope, ScalarType::BFloat16, device, {num_tokens, num_heads, kKvLoraRank});
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
  SPARSE_MLA_CHECK_ARG(plan.num_splits * plan.positions_per_split >= topk,
                       "sparse_mla: argument 'plan': num_splits * positions_per_split = ",
                       plan.num_splits * plan.positions_per_split, " expected to cover topk = ", topk);
  const WorkspaceLayout layout = workspace_layout(plan);
  check_workspace(workspace, layout, device);
  if (num_tokens == 0) return;

  const torch::stable::accelerator::DeviceGuard guard(device);
  const int max_shared = max_shared_memory_per_block(device);
  const int shared = shared_memory_bytes(plan.kernel, static_cast<int>(plan.head_tiles),
                                         static_cast<int>(plan.cta_chunk), kv_fp8, static_cast<int>(plan.cluster_size),
                                         static_cast<int>(plan.positions_per_split));
  SPARSE_MLA_CHECK_ARG(shared <= max_shared, "sparse_mla: argument 'plan' needs ", shared,
                       " bytes of shared memory per block for head_tiles=", plan.head_tiles, ", positions_per_split=",
                       plan.positions_per_split, "; this device allows ", max_shared);

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
  p.partial_out = region<float>(workspace, layout.partial_out);
  p.partial_lse = region<float>(workspace, layout.partial_lse);
  p.counters = region<int32_t>(workspace, layout.counters);
  p.num_tokens = static_cast<int>(num_tokens);
  p.num_heads = static_cast<int>(num_heads);
  p.head_tiles = static_cast<int>(plan.head_tiles);
  p.cta_chunk = static_cast<int>(plan.cta_chunk);
  p.cluster_size = static_cast<int>(plan.cluster_size);
  p.head_groups = static_cast<int>(plan.head_groups());
  p.num_splits = static_cast<int>(plan.num_splits);
  p.positions_per_split = static_cast<int>(plan.positions_per_split);
  p.scale_log2 = static_cast<float>(softmax_scale * 1.4426950408889634);  // log2(e)
  p.kernel = plan.kernel;
  const cudaError_t error = launch_sparse_decode(p, current_cuda_stream(device));
  check_cuda(error, "decode kernel launch");
}

// Clusters of the plan's kernel configuration (its kernel, head_tiles, cta_chunk, cluster_size and
// positions_per_split; T, N and num_splits do not matter) that the current device runs at once.
int64_t max_active_clusters_op(const std::vector<int64_t>& plan_value, bool kv_fp8) {
  const DecodePlan plan = checked_plan(plan_value);
  int clusters = 0;
  const cudaError_t error = max_active_clusters(
      plan.kernel, static_cast<int>(plan.head_tiles), static_cast<int>(plan.cta_chunk), kv_fp8,
      static_cast<int>(plan.cluster_size), static_cast<int>(plan.positions_per_split), &clusters);
  check_cuda(error, "cudaOccupancyMaxActiveClusters");
  return clusters;
}

std::vector<int64_t> workspace_layout_op(const std::vector<int64_t>& plan_value) {
  return layout_value(workspace_layout(checked_plan(plan_value)));
}

}  // namespace
}  // namespace decode
}  // namespace sparse_mla

// `plan` is int[] in sparse_mla.ops.decode.PLAN_FIELDS order (cc/decode/decode_plan.h): plain ints, which
// torch.compile guards on and a CUDA graph keeps, as the launch shape they decide.
STABLE_TORCH_LIBRARY(sparse_mla_decode, m) {
  m.def(
      "fwd(Tensor q_nope, Tensor q_rope, Tensor kv_cache, Tensor topk_indices, Tensor req_id, "
      "Tensor token_kv_len, Tensor block_table, float softmax_scale, int[] plan, Tensor(a!) out, "
      "Tensor(b!)? lse, Tensor(c!) workspace, Tensor? topk_length=None, int dcp_rank=0, "
      "int dcp_world_size=1, int dcp_interleave=1) -> ()");
  m.def("max_active_clusters(int[] plan, bool kv_fp8) -> int");
  // [counters offset, bytes, partial_out offset, bytes, partial_lse offset, bytes, workspace bytes]
  m.def("workspace_layout(int[] plan) -> int[]");
}

STABLE_TORCH_LIBRARY_IMPL(sparse_mla_decode, CUDA, m) { m.impl("fwd", TORCH_BOX(&sparse_mla::decode::fwd)); }

// No tensor argument: one kernel for every dispatch key (max_active_clusters asks the current CUDA device).
STABLE_TORCH_LIBRARY_IMPL(sparse_mla_decode, CompositeExplicitAutograd, m) {
  m.impl("max_active_clusters", TORCH_BOX(&sparse_mla::decode::max_active_clusters_op));
  m.impl("workspace_layout", TORCH_BOX(&sparse_mla::decode::workspace_layout_op));
}
