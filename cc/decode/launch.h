// Latency-first sparse MLA decode kernels for Hopper (sm_90a): the launcher's entry points, which pick
// the kernel instantiation for SparseDecodeParams (cc/decode/launch.cu).
#pragma once

#include <cuda_runtime.h>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

// Shared memory one CTA needs for these parameters (dynamic and static), in bytes.
int shared_memory_bytes(DecodeKernel kernel, int head_tiles, int cta_chunk, bool fp8, int cluster_size,
                        int positions_per_split);

// Enqueues the kernel on `stream`. Returns the launch's error (cudaSuccess when enqueued).
cudaError_t launch_sparse_decode(const SparseDecodeParams& params, cudaStream_t stream);

// Clusters (of cluster_size CTAs; CTAs when it is 1) of this kernel configuration that the current
// device runs at once (one wave), into `clusters`; the planner keeps its grid within it. Returns the
// CUDA error of the query.
cudaError_t max_active_clusters(DecodeKernel kernel, int head_tiles, int cta_chunk, bool fp8, int cluster_size,
                                int positions_per_split, int* clusters);

}  // namespace decode
}  // namespace sparse_mla
