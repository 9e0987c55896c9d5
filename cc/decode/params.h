// The decode kernels' launch parameters and geometry. No torch types here: the kernels' translation
// units compile with nvcc alone; cc/decode/decode_op.cc validates tensors and fills SparseDecodeParams.
#pragma once

#include <cstdint>

#include "cc/common/mla_layout.h"
#include "cc/common/topk_filter.h"

namespace sparse_mla {
namespace decode {

// The kernel's geometry; sparse_mla.ops.decode repeats the numbers its planner needs (CLUSTER_SIZES,
// CTA_CHUNKS, HEAD_TILE_ROWS, MAX_SPLITS). A split covers a multiple of cluster_size * cta_chunk positions.
constexpr int kClusterSize = 8;        // CTAs that share one split of a token's positions (the other size is 1)
constexpr int kHeadTileRows = 16;      // query heads per mma row tile (m16n8k16)
constexpr int kMaxSplits = 64;         // most splits of one token's positions (workspace sizes)
constexpr int kMaxPositionsPerSplit = 8192;
constexpr int kMaxGridZ = 65535;       // CUDA's limit on gridDim.z: (token, head group) pairs of one launch

// Which decode kernel a launch runs (the plan's `kernel` field; NARROW_KERNEL, WIDE_KERNEL, SWAP_AB_KERNEL,
// TILE64_KERNEL in Python).
enum class DecodeKernel : int {
  kNarrow = 0,  // 16 or 32 heads per CTA, mma.sync (cc/decode/narrow/)
  kWide = 1,    // 64 heads per CTA, wgmma with producer warpgroups (cc/decode/wide/)
  kSwapAb = 2,  // 16 heads per CTA as wgmma's N, 64-position tiles (cc/decode/swap_ab/)
  kTile64 = 3,  // 64 heads per CTA on 64-position tiles, splits of at most 2048 positions (cc/decode/tile64/)
};

struct SparseDecodeParams {
  // Queries: [T, N, 512] and [T, N, 64] bf16, last dimension contiguous, strides in elements.
  const void* q_nope;
  int64_t q_nope_token_stride, q_nope_head_stride;
  const void* q_rope;
  int64_t q_rope_token_stride, q_rope_head_stride;
  // Cache [num_blocks, 64, 576] bf16 or [num_blocks, 64, 656] uint8 fp8_ds_mla (kv_fp8 = 1), slot
  // elements contiguous, strides in elements of the cache's dtype.
  const void* kv_cache;
  int64_t kv_block_stride, kv_slot_stride;
  int kv_fp8;
  int num_blocks;
  // Top-k request-local positions [T, topk] int32 (-1 = none), and where they live.
  const int32_t* topk_indices;
  int64_t topk_token_stride;
  int topk;
  const int32_t* req_id;        // [T] block-table row of each token
  const int32_t* token_kv_len;  // [T] positions the token may attend
  const int32_t* block_table;   // [num_reqs, max_blocks_per_req]
  int64_t block_table_stride;
  int max_blocks_per_req;
  const int32_t* topk_length;   // [T] entries of each row to read (columns past it are -1), or nullptr
  DcpShard dcp;                 // the shard of the cache this rank holds (positions are global)
  // Output [T, N, 512] bf16 (last dimension contiguous) and optional LSE [T, N] fp32 (natural log).
  void* out;
  int64_t out_token_stride, out_head_stride;
  float* lse;
  // Split-KV workspace (num_splits > 1; regions of one tensor, cc/decode/decode_plan.h): partial
  // outputs, base-2 LSEs and arrival counters (zero between launches; the last arriving CTA of a group
  // resets its counter).
  float* partial_out;   // [T, head_groups, num_splits, heads_per_cta, 512] fp32 (the wide kernel from
                        // wide::kBf16PartialMinSplits splits on: bf16, in the first half)
  float* partial_lse;   // [T, head_groups, num_splits, kClusterSize, heads_per_cta]
  int32_t* counters;    // [T, head_groups, kClusterSize], T * head_groups <= kMaxGridZ (one launch)
  int num_tokens, num_heads;
  int head_tiles;       // heads per CTA = 16 * head_tiles, 1 or 2 (kNarrow), 4 (kWide, kTile64), 1 (kSwapAb)
  int cta_chunk;        // positions per pipeline stage of a CTA, 16 or 32 (kSwapAb, kTile64: 64)
  int cluster_size;     // CTAs per split: kClusterSize (slices merged through DSMEM) or 1 (large grids)
  int head_groups;      // ceil(num_heads / heads per CTA)
  int num_splits;       // position splits per token
  int positions_per_split;  // multiple of cluster_size * cta_chunk; splits past topk see only invalid entries
  float scale_log2;     // softmax_scale * log2(e)
  DecodeKernel kernel;  // the kernel that runs (host side: the launcher's choice)
};

}  // namespace decode
}  // namespace sparse_mla
