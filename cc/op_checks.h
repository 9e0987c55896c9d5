// Argument checks of our torch ops: each error names the argument and gives what was expected and
// what was given (TypeError for a dtype, ValueError otherwise, through TORCH_CHECK_TYPE/_VALUE).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace sparse_mla {

// Device, dtype, rank, the sizes given (-1 = any) and a unit last stride.
inline void check_tensor(const char* name, const at::Tensor& t, at::ScalarType dtype, const at::Device& device,
                         std::initializer_list<int64_t> sizes) {
  TORCH_CHECK_TYPE(t.scalar_type() == dtype, "sparse_mla: argument '", name, "' expected dtype ", dtype, ", got ",
                   t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == device, "sparse_mla: argument '", name, "' expected device ", device, ", got ",
                    t.device());
  TORCH_CHECK_VALUE(t.dim() == static_cast<int64_t>(sizes.size()), "sparse_mla: argument '", name, "' expected ",
                    sizes.size(), " dimensions, got shape ", t.sizes());
  int64_t d = 0;
  for (int64_t want : sizes) {
    TORCH_CHECK_VALUE(want < 0 || t.size(d) == want, "sparse_mla: argument '", name, "' expected size ", want,
                      " in dimension ", d, ", got shape ", t.sizes());
    ++d;
  }
  TORCH_CHECK_VALUE(t.dim() == 0 || t.stride(-1) == 1 || t.size(-1) <= 1, "sparse_mla: argument '", name,
                    "' expected a contiguous last dimension, got strides ", t.strides());
}

// A `bytes`-aligned address and strides that keep every row `bytes`-aligned (vector loads and stores).
inline void check_alignment(const char* name, const at::Tensor& t, int64_t bytes) {
  const int64_t elems = bytes / static_cast<int64_t>(t.element_size());
  bool ok = reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) ok = ok && (t.size(d) <= 1 || t.stride(d) % elems == 0);
  TORCH_CHECK_VALUE(ok, "sparse_mla: argument '", name, "' expected a ", bytes,
                    "-byte aligned address and strides (multiples of ", elems, " elements), got strides ",
                    t.strides());
}

// A failed CUDA runtime call as a RuntimeError naming it. The error is first taken off the thread's
// last-error state, so the next CUDA call of the process (ours or PyTorch's) does not fail with it.
inline void check_cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  (void)cudaGetLastError();
  TORCH_CHECK(false, "sparse_mla: ", what, " failed: ", cudaGetErrorString(error));
}

}  // namespace sparse_mla
