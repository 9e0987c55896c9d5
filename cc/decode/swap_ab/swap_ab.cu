// The swap-AB decode kernel's launch (cc/decode/swap_ab/swap_ab.h) and its four instantiations (cache
// formats, 16 or 32 heads); several splits merge in the kernel (the last CTA of a token to arrive).
#include "cc/decode/swap_ab/swap_ab.h"

#include "cc/decode/swap_ab/swap_ab_kernel.cuh"

namespace sparse_mla {
namespace decode {
namespace swap_ab {
namespace {

// Calls `action` with the kernel of (fp8, head_tiles); head_tiles 2 unless 1.
template <typename Action>
auto with_kernel(bool fp8, int head_tiles, Action action) {
  if (fp8) return head_tiles == 1 ? action(SwapAbKernel<true, 1>{}) : action(SwapAbKernel<true, 2>{});
  return head_tiles == 1 ? action(SwapAbKernel<false, 1>{}) : action(SwapAbKernel<false, 2>{});
}

}  // namespace

int shared_memory_bytes(int head_tiles, bool fp8, int positions_per_split) {
  return with_kernel(fp8, head_tiles, [&](auto kernel) { return kernel.total_shared_bytes(positions_per_split); });
}

cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream) {
  return with_kernel(params.kv_fp8, params.head_tiles, [&](auto kernel) { return kernel.launch(params, stream); });
}

cudaError_t max_active_ctas(int head_tiles, bool fp8, int positions_per_split, int* ctas) {
  return with_kernel(fp8, head_tiles,
                     [&](auto kernel) { return kernel.max_active_clusters(positions_per_split, ctas); });
}

}  // namespace swap_ab
}  // namespace decode
}  // namespace sparse_mla
