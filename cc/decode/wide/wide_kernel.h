// Entry points of one instantiation of the 64-head decode kernel (cc/decode/wide/wide_kernel.cuh), all
// compiled in one file written by cc/decode/kernel_instances.bzl. No device code here.
#pragma once

#include <cuda_runtime.h>

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {
namespace wide {

// The fp8_ds_mla cache or bf16; partial outputs stored as bf16 (kBf16Partials) or fp32.
template <bool kFp8, bool kBf16Partials>
struct WideKernelEntry {
  // Dynamic plus static shared memory of one CTA, in bytes.
  static int total_shared_bytes(int positions_per_split);
  // Enqueues the kernel (not the split merge) on `stream`; the launch's error.
  static cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream);
  // CTAs the current device runs at once; the query's error.
  static cudaError_t max_active_ctas(int positions_per_split, int* ctas);
};

}  // namespace wide
}  // namespace decode
}  // namespace sparse_mla
