// The launcher of the decode kernels: picks the instantiation of the 16/32-head kernel
// (cc/decode/narrow/), the 64-head ones (cc/decode/wide/, cc/decode/tile64/) or the swap-AB one
// (cc/decode/swap_ab/) for the launch's shape.
#include "cc/decode/launch.h"

#include "cc/decode/narrow/narrow_kernel.h"
#include "cc/decode/swap_ab/swap_ab.h"
#include "cc/decode/tile64/tile64.h"
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

// A kernel built in one shape (the 64-head, 64-head tile and swap-AB kernels): its module's entry points, called as
// the 16/32-head kernel's instantiations are.
template <int kHeadTiles, int kCtaChunk, int kCluster, int (*kSharedBytes)(bool, int),
          cudaError_t (*kLaunch)(const SparseDecodeParams&, cudaStream_t), cudaError_t (*kMaxActive)(bool, int, int*)>
struct OneShapeKernel {
  bool fp8;
  static bool built(int head_tiles, int cta_chunk, int cluster_size) {
    return head_tiles == kHeadTiles && cta_chunk == kCtaChunk && cluster_size == kCluster;
  }
  int total_shared_bytes(int positions_per_split) const { return kSharedBytes(fp8, positions_per_split); }
  cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream) const { return kLaunch(params, stream); }
  cudaError_t max_active_clusters(int positions_per_split, int* clusters) const {
    return kMaxActive(fp8, positions_per_split, clusters);
  }
};
using WideModule = OneShapeKernel<wide::kHeadTiles, wide::kCtaChunk, wide::kCluster, wide::shared_memory_bytes,
                                  wide::launch, wide::max_active_ctas>;
using Tile64Module = OneShapeKernel<tile64::kHeadTiles, tile64::kCtaChunk, tile64::kCluster,
                                    tile64::shared_memory_bytes, tile64::launch, tile64::max_active_ctas>;

// The swap-AB kernel, built for 16 and 32 heads per CTA: its entry points for the plan's head_tiles.
struct SwapAbModule {
  bool fp8;
  int head_tiles;
  static bool built(int head_tiles, int cta_chunk, int cluster_size) {
    return swap_ab::built_shape(head_tiles, cta_chunk, cluster_size);
  }
  int total_shared_bytes(int positions_per_split) const {
    return swap_ab::shared_memory_bytes(head_tiles, fp8, positions_per_split);
  }
  cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream) const {
    return swap_ab::launch(params, stream);
  }
  cudaError_t max_active_clusters(int positions_per_split, int* clusters) const {
    return swap_ab::max_active_ctas(head_tiles, fp8, positions_per_split, clusters);
  }
};

// Calls `action` with the kernel of (kernel, head_tiles, cta_chunk, cluster_size) on the cache format `fp8`;
// cudaErrorInvalidValue for a shape that is not built.
template <typename Action>
cudaError_t dispatch(DecodeKernel kernel, int head_tiles, int cta_chunk, bool fp8, int cluster_size, Action action) {
  if (kernel == DecodeKernel::kWide)
    return WideModule::built(head_tiles, cta_chunk, cluster_size) ? action(WideModule{fp8}) : cudaErrorInvalidValue;
  if (kernel == DecodeKernel::kSwapAb)
    return SwapAbModule::built(head_tiles, cta_chunk, cluster_size) ? action(SwapAbModule{fp8, head_tiles})
                                                                    : cudaErrorInvalidValue;
  if (kernel == DecodeKernel::kTile64)
    return Tile64Module::built(head_tiles, cta_chunk, cluster_size) ? action(Tile64Module{fp8}) : cudaErrorInvalidValue;
  return fp8 ? dispatch_shape<true>(head_tiles, cta_chunk, cluster_size, action)
             : dispatch_shape<false>(head_tiles, cta_chunk, cluster_size, action);
}

}  // namespace

int shared_memory_bytes(DecodeKernel kernel, int head_tiles, int cta_chunk, bool fp8, int cluster_size,
                        int positions_per_split) {
  int bytes = 0;  // an unbuilt shape: 0 (the op checks shapes first)
  dispatch(kernel, head_tiles, cta_chunk, fp8, cluster_size, [&](const auto& instance) {
    bytes = instance.total_shared_bytes(positions_per_split);
    return cudaSuccess;
  });
  return bytes;
}

cudaError_t launch_sparse_decode(const SparseDecodeParams& params, cudaStream_t stream) {
  return dispatch(params.kernel, params.head_tiles, params.cta_chunk, params.kv_fp8 != 0, params.cluster_size,
                  [&](const auto& instance) { return instance.launch(params, stream); });
}

cudaError_t max_active_clusters(DecodeKernel kernel, int head_tiles, int cta_chunk, bool fp8, int cluster_size,
                                int positions_per_split, int* clusters) {
  return dispatch(kernel, head_tiles, cta_chunk, fp8, cluster_size, [&](const auto& instance) {
    return instance.max_active_clusters(positions_per_split, clusters);
  });
}

}  // namespace decode
}  // namespace sparse_mla
