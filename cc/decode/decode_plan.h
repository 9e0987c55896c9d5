// The decode plan as the ops take it (one int[] value, fields in PlanField order) and the split-KV
// workspace it carves from one caller-owned uint8 tensor. Host code only (cc/decode/decode_op.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

// Positions of the plan value's fields (sparse_mla.ops.decode.PLAN_FIELDS packs them in this order).
enum PlanField : int {
  kPlanKernel,             // DecodeKernel: 0 narrow, 1 wide, 2 swap-AB, 3 tile64
  kPlanNumTokens,          // T of the call (0: nothing is launched)
  kPlanNumHeads,           // N of the call, 1..kMaxHeads
  kPlanHeadTiles,          // heads per CTA = kHeadTileRows * head_tiles
  kPlanCtaChunk,           // positions per pipeline stage of a CTA
  kPlanClusterSize,        // CTAs per split
  kPlanNumSplits,          // position splits per token, 1..kMaxSplits
  kPlanPositionsPerSplit,  // a multiple of cluster_size * cta_chunk, up to kMaxPositionsPerSplit
  kPlanFields,
};

constexpr int64_t kMaxHeads = 128;

struct DecodePlan {
  DecodeKernel kernel;
  int64_t num_tokens, num_heads, head_tiles, cta_chunk, cluster_size, num_splits, positions_per_split;

  int64_t heads_per_cta() const { return kHeadTileRows * head_tiles; }
  int64_t head_groups() const { return (num_heads + heads_per_cta() - 1) / heads_per_cta(); }
};

// The plan of `value`; throws std::invalid_argument (ValueError) naming argument 'plan' and the field
// for a wrong length, an unknown kernel or a shape the kernels are not built for.
DecodePlan checked_plan(const std::vector<int64_t>& value);

// A byte range of the workspace.
struct WorkspaceRegion {
  int64_t offset = 0, bytes = 0;
};

// Where a plan's split-KV buffers lie in its workspace (all empty for one split or T = 0). The counters come
// first, in a region of the same size for every plan, so that plans sharing one workspace (the steps
// of a batch, each layer's call, every graph replay) find them zero where others keep partials.
struct WorkspaceLayout {
  WorkspaceRegion counters;     // int32 [kMaxGridZ, kClusterSize]: zero between launches
  WorkspaceRegion partial_out;  // fp32 [T, head_groups, num_splits, heads_per_cta, 512]
  WorkspaceRegion partial_lse;  // fp32 [T, head_groups, num_splits, kClusterSize, heads_per_cta]
  int64_t bytes = 0;            // the workspace's least size
};

constexpr int64_t kWorkspaceAlignment = 256;  // region offsets: whole DRAM sectors, no two regions share one
constexpr int64_t kWorkspaceBaseAlignment = 16;  // the workspace's address: the kernels' 16-byte stores

WorkspaceLayout workspace_layout(const DecodePlan& plan);

// The layout as the op workspace_layout returns it: counters offset and bytes, partial_out's, partial_lse's,
// then the workspace's bytes (sparse_mla.ops.decode.WorkspaceLayout).
std::vector<int64_t> layout_value(const WorkspaceLayout& layout);

}  // namespace decode
}  // namespace sparse_mla
