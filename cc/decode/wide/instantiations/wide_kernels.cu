// The 64-head decode kernel's four instantiations (cache format x partial-output type), in one
// translation unit: compiled one per file, the bf16 cache's two come out with other code (NVVM's
// optimization of the helpers they share with the fp8_ds_mla ones), so they stay together until an H200
// A/B shows such a build as fast.
#include "cc/decode/wide/wide_kernel.cuh"

template struct sparse_mla::decode::wide::WideKernelEntry<true, false>;
template struct sparse_mla::decode::wide::WideKernelEntry<false, false>;
template struct sparse_mla::decode::wide::WideKernelEntry<true, true>;
template struct sparse_mla::decode::wide::WideKernelEntry<false, true>;
