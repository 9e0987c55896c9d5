// Argument checks of our torch ops: each error names the argument and gives what was expected and
// what was given, after "sparse_mla: argument '<name>'". They throw std::invalid_argument, which PyTorch raises in
// Python as ValueError (from torch 2.15, for a stable-ABI op, as RuntimeError: sparse_mla.ops.library.call_op
// maps those back by that prefix), and take torch::stable::Tensor (the stable-ABI decode ops) and at::Tensor (the
// FA3 route's op) alike.
// A failed CUDA call is a std::runtime_error (RuntimeError).
#pragma once

#include <cuda_runtime_api.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>

namespace sparse_mla {

// Throws std::invalid_argument whose message is the arguments streamed one after the other.
template <typename... Args>
[[noreturn]] void throw_invalid_argument(const Args&... args) {
  std::ostringstream message;
  (message << ... << args);
  throw std::invalid_argument(message.str());
}

// Formats the message only when `cond` fails (the checks run on every call).
#define SPARSE_MLA_CHECK_ARG(cond, ...)                                   \
  do {                                                                    \
    if (!(cond)) ::sparse_mla::throw_invalid_argument(__VA_ARGS__);       \
  } while (0)

// "[2, 16, 512]" for sizes or strides.
template <typename Ints>
std::string format_ints(const Ints& values) {
  std::ostringstream out;
  out << "[";
  const char* separator = "";
  for (int64_t v : values) {
    out << separator << v;
    separator = ", ";
  }
  out << "]";
  return out.str();
}

// "cuda:0", "cpu" or "another device".
template <typename Tensor>
std::string format_device(const Tensor& t) {
  if (t.is_cuda()) return "cuda:" + std::to_string(static_cast<int>(t.get_device()));
  return t.is_cpu() ? "cpu" : "another device";
}

// Dtype, CUDA device `device_index`, rank, the sizes given (-1 = any) and a unit last stride.
template <typename Tensor>
void check_tensor(const char* name, const Tensor& t, torch::headeronly::ScalarType dtype, int device_index,
                  std::initializer_list<int64_t> sizes) {
  SPARSE_MLA_CHECK_ARG(t.scalar_type() == dtype, "sparse_mla: argument '", name, "' expected dtype ", dtype,
                       ", got ", t.scalar_type());
  SPARSE_MLA_CHECK_ARG(t.is_cuda() && static_cast<int>(t.get_device()) == device_index, "sparse_mla: argument '",
                       name, "' expected device cuda:", device_index, ", got ", format_device(t));
  SPARSE_MLA_CHECK_ARG(t.dim() == static_cast<int64_t>(sizes.size()), "sparse_mla: argument '", name, "' expected ",
                       sizes.size(), " dimensions, got shape ", format_ints(t.sizes()));
  int64_t d = 0;
  for (int64_t want : sizes) {
    SPARSE_MLA_CHECK_ARG(want < 0 || t.size(d) == want, "sparse_mla: argument '", name, "' expected size ", want,
                         " in dimension ", d, ", got shape ", format_ints(t.sizes()));
    ++d;
  }
  SPARSE_MLA_CHECK_ARG(t.dim() == 0 || t.stride(t.dim() - 1) == 1 || t.size(t.dim() - 1) <= 1,
                       "sparse_mla: argument '", name, "' expected a contiguous last dimension, got strides ",
                       format_ints(t.strides()));
}

// A `bytes`-aligned address and strides that keep every row `bytes`-aligned (vector loads and stores).
template <typename Tensor>
void check_alignment(const char* name, const Tensor& t, int64_t bytes) {
  const int64_t elems = bytes / static_cast<int64_t>(t.element_size());
  bool ok = reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) ok = ok && (t.size(d) <= 1 || t.stride(d) % elems == 0);
  SPARSE_MLA_CHECK_ARG(ok, "sparse_mla: argument '", name, "' expected a ", bytes,
                       "-byte aligned address and strides (multiples of ", elems, " elements), got strides ",
                       format_ints(t.strides()));
}

// A failed CUDA runtime call as a RuntimeError naming it. The error is first taken off the thread's
// last-error state, so the next CUDA call of the process (ours or PyTorch's) does not fail with it.
inline void check_cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error(std::string("sparse_mla: ") + what + " failed: " + cudaGetErrorString(error));
}

}  // namespace sparse_mla
