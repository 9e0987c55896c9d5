// The plan value's checks and the workspace layout (cc/decode/decode_plan.h).
#include "cc/decode/decode_plan.h"

#include "cc/common/op_checks.h"
#include "cc/decode/swap_ab/swap_ab.h"
#include "cc/decode/tile64/tile64.h"
#include "cc/decode/wide/wide.h"

namespace sparse_mla {
namespace decode {
namespace {

constexpr const char* kPlanOrder =
    "(kernel, num_tokens, num_heads, head_tiles, cta_chunk, cluster_size, num_splits, positions_per_split)";

int64_t align_up(int64_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// A kernel of one shape (wide, swap-AB, tile64): the plan's head_tiles, cta_chunk and cluster_size are its own.
void check_fixed_shape(const DecodePlan& p, const char* name, int head_tiles, int cta_chunk, int cluster_size) {
  SPARSE_MLA_CHECK_ARG(p.head_tiles == head_tiles && p.cta_chunk == cta_chunk && p.cluster_size == cluster_size,
                       "sparse_mla: argument 'plan': the ", name, " kernel (kernel=", static_cast<int>(p.kernel),
                       ") expected head_tiles=", head_tiles, ", cta_chunk=", cta_chunk, " and cluster_size=",
                       cluster_size, ", got head_tiles=", p.head_tiles, ", cta_chunk=", p.cta_chunk,
                       " and cluster_size=", p.cluster_size);
}

// The kernel's shape: 16 or 32 heads per CTA, 16- or 32-position stages and 8 or 1 CTAs per split on
// the narrow kernel; 16 or 32 heads, 64 positions and 1 CTA on the swap-AB kernel; the wide and tile64 ones
// have one of each (64 heads, 32 positions, 1 CTA; 64 heads, 64 positions, 1 CTA, splits of at most 2048
// positions).
void check_launch_shape(const DecodePlan& p) {
  if (p.kernel == DecodeKernel::kTile64) {
    check_fixed_shape(p, "tile64", tile64::kHeadTiles, tile64::kCtaChunk, tile64::kCluster);
    SPARSE_MLA_CHECK_ARG(p.positions_per_split <= tile64::kMaxPositions,
                         "sparse_mla: argument 'plan': the tile64 kernel (kernel=3) expected positions_per_split up to ",
                         tile64::kMaxPositions, ", got ", p.positions_per_split);
  } else if (p.kernel == DecodeKernel::kSwapAb) {
    SPARSE_MLA_CHECK_ARG(swap_ab::built_shape(p.head_tiles, p.cta_chunk, p.cluster_size),
                         "sparse_mla: argument 'plan': the swap-AB kernel (kernel=2) expected head_tiles=1 or 2, "
                         "cta_chunk=",
                         swap_ab::kCtaChunk, " and cluster_size=", swap_ab::kCluster, ", got head_tiles=", p.head_tiles,
                         ", cta_chunk=", p.cta_chunk, " and cluster_size=", p.cluster_size);
  } else if (p.kernel == DecodeKernel::kWide) {
    check_fixed_shape(p, "wide", wide::kHeadTiles, wide::kCtaChunk, wide::kCluster);
  } else {
    SPARSE_MLA_CHECK_ARG(p.head_tiles == 1 || p.head_tiles == 2,
                         "sparse_mla: argument 'plan' expected head_tiles 1 or 2 on the narrow kernel (kernel=0), got ",
                         p.head_tiles);
    SPARSE_MLA_CHECK_ARG(p.cta_chunk == 16 || p.cta_chunk == 32,
                         "sparse_mla: argument 'plan' expected cta_chunk 16 or 32, got ", p.cta_chunk);
    SPARSE_MLA_CHECK_ARG(p.cluster_size == kClusterSize || p.cluster_size == 1,
                         "sparse_mla: argument 'plan' expected cluster_size ", kClusterSize, " or 1, got ",
                         p.cluster_size);
  }
  const int64_t granule = p.cluster_size * p.cta_chunk;
  SPARSE_MLA_CHECK_ARG(
      p.positions_per_split > 0 && p.positions_per_split % granule == 0 &&
          p.positions_per_split <= kMaxPositionsPerSplit,
      "sparse_mla: argument 'plan' expected positions_per_split a positive multiple of ", granule,
      " (cluster_size * cta_chunk) up to ", kMaxPositionsPerSplit, ", got ", p.positions_per_split);
}

}  // namespace

DecodePlan checked_plan(const std::vector<int64_t>& value) {
  SPARSE_MLA_CHECK_ARG(value.size() == kPlanFields, "sparse_mla: argument 'plan' expected ",
                       static_cast<int>(kPlanFields), " entries ", kPlanOrder, ", got ", value.size());
  const int64_t kernel = value[kPlanKernel];
  SPARSE_MLA_CHECK_ARG(kernel == static_cast<int64_t>(DecodeKernel::kNarrow) ||
                           kernel == static_cast<int64_t>(DecodeKernel::kWide) ||
                           kernel == static_cast<int64_t>(DecodeKernel::kSwapAb) ||
                           kernel == static_cast<int64_t>(DecodeKernel::kTile64),
                       "sparse_mla: argument 'plan' expected kernel 0 (narrow), 1 (wide), 2 (swap-AB) or 3 (tile64), got ",
                       kernel);
  const DecodePlan plan{static_cast<DecodeKernel>(kernel), value[kPlanNumTokens], value[kPlanNumHeads],
                        value[kPlanHeadTiles], value[kPlanCtaChunk], value[kPlanClusterSize],
                        value[kPlanNumSplits], value[kPlanPositionsPerSplit]};
  SPARSE_MLA_CHECK_ARG(plan.num_tokens >= 0, "sparse_mla: argument 'plan' expected num_tokens >= 0, got ",
                       plan.num_tokens);
  SPARSE_MLA_CHECK_ARG(1 <= plan.num_heads && plan.num_heads <= kMaxHeads,
                       "sparse_mla: argument 'plan' expected num_heads 1..", kMaxHeads, ", got ", plan.num_heads);
  check_launch_shape(plan);
  SPARSE_MLA_CHECK_ARG(1 <= plan.num_splits && plan.num_splits <= kMaxSplits,
                       "sparse_mla: argument 'plan' expected num_splits 1..", kMaxSplits, ", got ", plan.num_splits);
  return plan;
}

WorkspaceLayout workspace_layout(const DecodePlan& plan) {
  WorkspaceLayout layout;
  if (plan.num_splits == 1 || plan.num_tokens == 0) return layout;  // nothing split, or nothing launched
  constexpr int64_t kFloat = sizeof(float), kInt32 = sizeof(int32_t);
  const int64_t split_rows = plan.num_tokens * plan.head_groups() * plan.num_splits * plan.heads_per_cta();
  layout.counters = {0, int64_t{kMaxGridZ} * kClusterSize * kInt32};
  layout.partial_out = {align_up(layout.counters.bytes), split_rows * kKvLoraRank * kFloat};
  const int64_t partial_out_end = layout.partial_out.offset + layout.partial_out.bytes;
  layout.partial_lse = {align_up(partial_out_end), split_rows * kClusterSize * kFloat};
  layout.bytes = layout.partial_lse.offset + layout.partial_lse.bytes;
  return layout;
}

std::vector<int64_t> layout_value(const WorkspaceLayout& layout) {
  return {layout.counters.offset,    layout.counters.bytes,    layout.partial_out.offset, layout.partial_out.bytes,
          layout.partial_lse.offset, layout.partial_lse.bytes, layout.bytes};
}

}  // namespace decode
}  // namespace sparse_mla
