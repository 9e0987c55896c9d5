// The 64-head decode kernel's launch (cc/decode/wide/wide.h): the instantiation for the cache format and
// the split count, then the split merge kernel.
#include <cuda_bf16.h>

#include <type_traits>

#include "cc/decode/split_merge/split_merge_kernel.h"
#include "cc/decode/wide/wide.h"
#include "cc/decode/wide/wide_kernel.h"

namespace sparse_mla {
namespace decode {
namespace wide {
namespace {

// The kernel and its split merge with partial outputs stored as `Partial` (float or __nv_bfloat16).
template <typename Partial>
cudaError_t launch_with(const SparseDecodeParams& params, cudaStream_t stream) {
  constexpr bool kBf16Partials = std::is_same_v<Partial, __nv_bfloat16>;
  const cudaError_t error = params.kv_fp8 ? WideKernelEntry<true, kBf16Partials>::launch(params, stream)
                                          : WideKernelEntry<false, kBf16Partials>::launch(params, stream);
  if (error != cudaSuccess || params.num_splits == 1) return error;
  return split_merge::launch_split_merge<Partial>(params, stream);
}

}  // namespace

// Both instantiations of a cache format have the same shared memory and one CTA per SM: the fp32 one answers.
int shared_memory_bytes(bool fp8, int positions_per_split) {
  return fp8 ? WideKernelEntry<true, false>::total_shared_bytes(positions_per_split)
             : WideKernelEntry<false, false>::total_shared_bytes(positions_per_split);
}

cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream) {
  return params.num_splits >= kBf16PartialMinSplits ? launch_with<__nv_bfloat16>(params, stream)
                                                    : launch_with<float>(params, stream);
}

cudaError_t max_active_ctas(bool fp8, int positions_per_split, int* ctas) {
  return fp8 ? WideKernelEntry<true, false>::max_active_ctas(positions_per_split, ctas)
             : WideKernelEntry<false, false>::max_active_ctas(positions_per_split, ctas);
}

}  // namespace wide
}  // namespace decode
}  // namespace sparse_mla
