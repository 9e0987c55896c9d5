// The decode kernel for 64 query heads per CTA (cc/decode/wide/), which the launcher
// (cc/decode/launch.cu) calls for head_tiles = kHeadTiles. No torch types (nvcc alone).
#pragma once

#include <cuda_runtime.h>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {
namespace wide {

constexpr int kHeadTiles = 4;  // 64 heads per CTA
constexpr int kCtaChunk = 32;  // positions per pipeline stage (its only stage size)
constexpr int kCluster = 1;    // one CTA per split (its only cluster size)

// Splits from which a CTA stores its partial output as bf16 (half the bytes; fp32 below): with many
// splits the partials outweigh the gathered slots. Why 8: docs/decode-kernels.md.
constexpr int kBf16PartialMinSplits = 8;

// Shared memory of one CTA (dynamic and static), in bytes.
int shared_memory_bytes(bool fp8, int positions_per_split);

// Enqueues the kernel on `stream` (params.head_tiles = kHeadTiles, cta_chunk = kCtaChunk,
// cluster_size = kCluster); the launch's error.
cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream);

// CTAs the current device runs at once, into `ctas`; the query's CUDA error.
cudaError_t max_active_ctas(bool fp8, int positions_per_split, int* ctas);

}  // namespace wide
}  // namespace decode
}  // namespace sparse_mla
