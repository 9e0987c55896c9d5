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

// Splits from which a CTA stores its partial output as bf16 (half the bytes; fp32 below). With many
// splits the partials outweigh the gathered slots (N = 64, T = 4: 32 splits write 16.8 MB, the cache
// rows read are 9.4 MB), and writing them took ~4 µs of a CTA. Measured on the H200, the decode kernel
// alone, bf16 / fp8_ds_mla µs, bf16 partials (store_partial_bf16) vs fp32 ones as stored below
// (results/2026-11-30-h200/release7/README.md; calls 52 and 54): 32 splits (N = 64, T = 4)
// 17.5 / 16.7 vs 21.0 / 20.1; 16 (N = 64, T = 8) 21.7 / 21.0 vs 24.2 / 24.0; 8 (N = 64, T = 16)
// 31.3 / 30.8 vs 31.8 / 32.5 (grids at c72e002 and c0e6861: N = 64, T = 16 31.0 / 30.9 vs
// 31.7 / 32.5; N = 128, T = 8 30.7 / 30.6 vs 31.5 / 32.4; N = 32, T = 16 29.6 / 30.5 vs 30.4 / 32.2;
// results/2026-11-30-h200/release8/iterations/call59_grid_c72e002.csv, release7/bench.csv);
// 4 (N = 128, T = 16) 47.0 / 49.2 vs 46.0 / 50.5; 2 (N = 128, T = 32) 80.4 / 88.2 vs 76.2 / 87.4.
// Hence 8: below it the bf16 cache loses more than fp8_ds_mla gains.
// The rounding adds ~0.5e-3 to the relative error against the float32 reference (1.75e-3 -> 2.2e-3
// on the bf16 cache, 2.95e-3 -> 3.25e-3 on fp8_ds_mla; the output itself is bf16).
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
