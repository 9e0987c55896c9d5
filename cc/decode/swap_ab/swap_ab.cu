// The swap-AB decode kernel's launch (cc/decode/swap_ab/swap_ab.h) and its two instantiations (cache
// formats); several splits merge in the kernel (the last CTA of a token to arrive).
#include "cc/decode/swap_ab/swap_ab.h"

#include "cc/decode/swap_ab/swap_ab_kernel.cuh"

namespace sparse_mla {
namespace decode {
namespace swap_ab {

int shared_memory_bytes(bool fp8, int positions_per_split) {
  return fp8 ? SwapAbKernel<true>::total_shared_bytes(positions_per_split)
             : SwapAbKernel<false>::total_shared_bytes(positions_per_split);
}

cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream) {
  return params.kv_fp8 ? SwapAbKernel<true>::launch(params, stream) : SwapAbKernel<false>::launch(params, stream);
}

cudaError_t max_active_ctas(bool fp8, int positions_per_split, int* ctas) {
  return fp8 ? SwapAbKernel<true>::max_active_clusters(positions_per_split, ctas)
             : SwapAbKernel<false>::max_active_clusters(positions_per_split, ctas);
}

}  // namespace swap_ab
}  // namespace decode
}  // namespace sparse_mla
