// Entry points of one instantiation of the 16/32-head decode kernel (cc/decode/narrow/narrow_kernel.cuh),
// each compiled in its own file, written by cc/decode/kernel_instances.bzl. No device code here.
#pragma once

#include <cuda_runtime.h>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {
namespace narrow {

// 16 * kHeadTiles heads per CTA (kHeadTiles 1 or 2), kCtaChunk positions per stage (16 or 32), the
// fp8_ds_mla cache or bf16, kCluster CTAs per split (kClusterSize or 1).
template <int kHeadTiles, int kCtaChunk, bool kFp8, int kCluster>
struct NarrowKernel {
  // Dynamic plus static shared memory of one CTA, in bytes.
  static int total_shared_bytes(int positions_per_split);
  // Enqueues the kernel on `stream`; the launch's error.
  static cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream);
  // Clusters (CTAs when kCluster is 1) the current device runs at once; the query's error.
  static cudaError_t max_active_clusters(int positions_per_split, int* clusters);
};

}  // namespace narrow
}  // namespace decode
}  // namespace sparse_mla
