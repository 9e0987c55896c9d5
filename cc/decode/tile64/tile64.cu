// The 64-head tile kernel's launch (cc/decode/tile64/tile64.h), its two instantiations (cache formats), then the
// split merge kernel (several splits).
#include "cc/decode/tile64/tile64.h"

#include "cc/decode/split_merge/split_merge_kernel.h"
#include "cc/decode/tile64/tile64_kernel.cuh"

namespace sparse_mla {
namespace decode {
namespace tile64 {

int shared_memory_bytes(bool fp8, int positions_per_split) {
  return fp8 ? Tile64Kernel<true>::total_shared_bytes(positions_per_split)
             : Tile64Kernel<false>::total_shared_bytes(positions_per_split);
}

cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream) {
  if (params.positions_per_split > kMaxPositions) return cudaErrorInvalidValue;
  const cudaError_t error =
      params.kv_fp8 ? Tile64Kernel<true>::launch(params, stream) : Tile64Kernel<false>::launch(params, stream);
  if (error != cudaSuccess || params.num_splits == 1) return error;
  return split_merge::launch_split_merge<float>(params, stream);
}

cudaError_t max_active_ctas(bool fp8, int positions_per_split, int* ctas) {
  return fp8 ? Tile64Kernel<true>::max_active_clusters(positions_per_split, ctas)
             : Tile64Kernel<false>::max_active_clusters(positions_per_split, ctas);
}

}  // namespace tile64
}  // namespace decode
}  // namespace sparse_mla
