// The launcher of the decode kernels: picks the instantiation of the 16/32-head kernel
// (cc/decode/narrow/), the 64-head one (cc/decode/wide/) or the swap-AB one (cc/decode/swap_ab/) for the
// launch's shape.
#include "cc/decode/launch.h"

#include "cc/decode/narrow/narrow_kernel.h"
#include "cc/decode/swap_ab/swap_ab.h"
#include "cc/decode/wide/wide.h"

namespace sparse_mla {
namespace decode {
namespace {

// Calls `action` with the Kernel instantiation of (head_tiles, cta_chunk, cluster_size) for the cache
// format kFp8; cudaErrorInvalidValue for others.
template <bool kFp8, typename Action>
cudaError_t dispatch_shape(int head_tiles, int cta_chunk, int cluster_size, Action action) {
  if (cluster_size == kClusterSize) {
    if (head_tiles == 1 && cta_chunk == 16) return action(narrow::NarrowKernel<1, 16, kFp8, kClusterSize>{});
    if (head_tiles == 1 && cta_chunk == 32) return action(narrow::NarrowKernel<1, 32, kFp8, kClusterSize>{});
    if (head_tiles == 2 && cta_chunk == 16) return action(narrow::NarrowKernel<2, 16, kFp8, kClusterSize>{});
    if (head_tiles == 2 && cta_chunk == 32) return action(narrow::NarrowKernel<2, 32, kFp8, kClusterSize>{});
  }
  if (cluster_size == 1) {
    if (head_tiles == 1 && cta_chunk == 16) return action(narrow::NarrowKernel<1, 16, kFp8, 1>{});
    if (head_tiles == 1 && cta_chunk == 32) return action(narrow::NarrowKernel<1, 32, kFp8, 1>{});
    if (head_tiles == 2 && cta_chunk == 16) return action(narrow::NarrowKernel<2, 16, kFp8, 1>{});
    if (head_tiles == 2 && cta_chunk == 32) return action(narrow::NarrowKernel<2, 32, kFp8, 1>{});
  }
  return cudaErrorInvalidValue;
}

template <typename Action>
cudaError_t dispatch(int head_tiles, int cta_chunk, bool fp8, int cluster_size, Action action) {
  return fp8 ? dispatch_shape<true>(head_tiles, cta_chunk, cluster_size, action)
             : dispatch_shape<false>(head_tiles, cta_chunk, cluster_size, action);
}

}  // namespace

// The wide kernel's one shape: wide::kHeadTiles, one stage size, one CTA per split.
static bool wide_shape(int head_tiles, int cta_chunk, int cluster_size) {
  return head_tiles == wide::kHeadTiles && cta_chunk == wide::kCtaChunk && cluster_size == wide::kCluster;
}

// The swap-AB kernel's one shape: swap_ab::kHeadTiles, 64-position tiles, one CTA per split.
static bool swap_ab_shape(int head_tiles, int cta_chunk, int cluster_size) {
  return head_tiles == swap_ab::kHeadTiles && cta_chunk == swap_ab::kCtaChunk && cluster_size == swap_ab::kCluster;
}

int shared_memory_bytes(DecodeKernel kernel, int head_tiles, int cta_chunk, bool fp8, int cluster_size,
                        int positions_per_split) {
  int bytes = 0;  // an unbuilt shape: 0 (the op checks shapes first)
  if (kernel == DecodeKernel::kWide) {
    return wide_shape(head_tiles, cta_chunk, cluster_size) ? wide::shared_memory_bytes(fp8, positions_per_split)
                                                           : bytes;
  }
  if (kernel == DecodeKernel::kSwapAb) {
    return swap_ab_shape(head_tiles, cta_chunk, cluster_size) ? swap_ab::shared_memory_bytes(fp8, positions_per_split)
                                                              : bytes;
  }
  dispatch(head_tiles, cta_chunk, fp8, cluster_size, [&](auto kernel) {
    bytes = kernel.total_shared_bytes(positions_per_split);
    return cudaSuccess;
  });
  return bytes;
}

cudaError_t launch_sparse_decode(const SparseDecodeParams& params, cudaStream_t stream) {
  if (params.kernel == DecodeKernel::kWide) {
    return wide_shape(params.head_tiles, params.cta_chunk, params.cluster_size) ? wide::launch(params, stream)
                                                                                : cudaErrorInvalidValue;
  }
  if (params.kernel == DecodeKernel::kSwapAb) {
    return swap_ab_shape(params.head_tiles, params.cta_chunk, params.cluster_size) ? swap_ab::launch(params, stream)
                                                                                   : cudaErrorInvalidValue;
  }
  return dispatch(params.head_tiles, params.cta_chunk, params.kv_fp8 != 0, params.cluster_size,
                  [&](auto kernel) { return kernel.launch(params, stream); });
}

cudaError_t max_active_clusters(DecodeKernel kernel, int head_tiles, int cta_chunk, bool fp8, int cluster_size,
                                int positions_per_split, int* clusters) {
  if (kernel == DecodeKernel::kWide) {
    return wide_shape(head_tiles, cta_chunk, cluster_size) ? wide::max_active_ctas(fp8, positions_per_split, clusters)
                                                           : cudaErrorInvalidValue;
  }
  if (kernel == DecodeKernel::kSwapAb) {
    return swap_ab_shape(head_tiles, cta_chunk, cluster_size)
               ? swap_ab::max_active_ctas(fp8, positions_per_split, clusters)
               : cudaErrorInvalidValue;
  }
  return dispatch(head_tiles, cta_chunk, fp8, cluster_size,
                  [&](auto kernel) { return kernel.max_active_clusters(positions_per_split, clusters); });
}

}  // namespace decode
}  // namespace sparse_mla
