// The decode kernel for 64 query heads per CTA on 64-position tiles (cc/decode/tile64/), which the launcher
// (cc/decode/launch.cu) calls for the plan's kernel = kTile64: one CTA per (split, token, head group). No torch types
// (nvcc alone).
#pragma once

#include <cuda_runtime.h>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {
namespace tile64 {

constexpr int kHeadTiles = 4;   // 64 heads per CTA: the M of both products
constexpr int kCtaChunk = 64;   // positions per tile: the N of the scores, the K of P . V
constexpr int kCluster = 1;     // one CTA per split
constexpr int kMaxPositions = 2048;  // a split's most positions: its slot ids fill the last 8 KiB of shared memory

// Shared memory of one CTA (dynamic and static), in bytes.
int shared_memory_bytes(bool fp8, int positions_per_split);

// Enqueues the kernel on `stream` (params.head_tiles = kHeadTiles, cta_chunk = kCtaChunk, cluster_size = kCluster,
// positions_per_split <= kMaxPositions) and, with several splits, the split merge kernel; the first launch error.
cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream);

// CTAs the current device runs at once, into `ctas`; the query's CUDA error.
cudaError_t max_active_ctas(bool fp8, int positions_per_split, int* ctas);

}  // namespace tile64
}  // namespace decode
}  // namespace sparse_mla
