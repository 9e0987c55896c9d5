// The split merge kernel's launch (cc/decode/split_merge/split_merge_kernel.cuh), one instantiation per
// partial-output type, written by cc/decode/kernel_instances.bzl. No device code here.
#pragma once

#include <cuda_runtime.h>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {
namespace split_merge {

// Enqueues the merge of params.num_splits partial outputs stored as `Partial` (float or
// __nv_bfloat16) on `stream`, after the wide kernel that wrote them; the first launch error.
template <typename Partial>
cudaError_t launch_split_merge(const SparseDecodeParams& params, cudaStream_t stream);

}  // namespace split_merge
}  // namespace decode
}  // namespace sparse_mla
