// The decode kernel with the heads as wgmma's N dimension (cc/decode/swap_ab/), which the launcher
// (cc/decode/launch.cu) calls for the plan's kernel = kSwapAb. No torch types (nvcc alone).
#pragma once

#include <cuda_runtime.h>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {
namespace swap_ab {

constexpr int kHeadTiles = 1;  // 16 heads per CTA: the N of its products
constexpr int kCtaChunk = 64;  // positions per tile: the M of the score product
constexpr int kCluster = 1;    // one CTA per split

// Shared memory of one CTA (dynamic and static), in bytes.
int shared_memory_bytes(bool fp8, int positions_per_split);

// Enqueues the kernel on `stream` (params.head_tiles = kHeadTiles, cta_chunk = kCtaChunk,
// cluster_size = kCluster); the launch's error.
cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream);

// CTAs the current device runs at once, into `ctas`; the query's CUDA error.
cudaError_t max_active_ctas(bool fp8, int positions_per_split, int* ctas);

}  // namespace swap_ab
}  // namespace decode
}  // namespace sparse_mla
