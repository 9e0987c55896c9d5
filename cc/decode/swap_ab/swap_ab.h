// The decode kernel with the heads as wgmma's N dimension (cc/decode/swap_ab/), which the launcher
// (cc/decode/launch.cu) calls for the plan's kernel = kSwapAb. No torch types (nvcc alone).
#pragma once

#include <cuda_runtime.h>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {
namespace swap_ab {

constexpr int kCtaChunk = 64;  // positions per tile: the M of the score product
constexpr int kCluster = 1;    // one CTA per split

// Whether it is built for a plan's shape: 16 or 32 heads per CTA (head_tiles 1, 2: the N of its products),
// kCtaChunk positions per tile and kCluster CTAs per split.
constexpr bool built_shape(int head_tiles, int cta_chunk, int cluster_size) {
  return (head_tiles == 1 || head_tiles == 2) && cta_chunk == kCtaChunk && cluster_size == kCluster;
}

// Shared memory of one CTA of `head_tiles` (built_shape) (dynamic and static), in bytes.
int shared_memory_bytes(int head_tiles, bool fp8, int positions_per_split);

// Enqueues the kernel on `stream` (a plan of built_shape); the launch's error.
cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream);

// CTAs of `head_tiles` the current device runs at once, into `ctas`; the query's CUDA error.
cudaError_t max_active_ctas(int head_tiles, bool fp8, int positions_per_split, int* ctas);

}  // namespace swap_ab
}  // namespace decode
}  // namespace sparse_mla
