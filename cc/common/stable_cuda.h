// The current CUDA stream of a device through PyTorch's stable C shim, for ops built against the
// stable ABI. The shim's function lives in libtorch_cuda, which a CPU build of PyTorch lacks: it is
// bound weakly so that such a build still loads the library (and registers its ops).
#pragma once

#include <cuda_runtime_api.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstdint>
#include <stdexcept>
#include <string>

// Declared by shim.h only under USE_CUDA, which PyTorch's own build defines.
extern "C" __attribute__((weak)) AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index,
                                                                                  void** ret_stream);

namespace sparse_mla {

// PyTorch's current stream on CUDA device `device_index`; std::runtime_error when there is none.
inline cudaStream_t current_cuda_stream(int device_index) {
  if (aoti_torch_get_current_cuda_stream == nullptr)
    throw std::runtime_error("sparse_mla: this PyTorch build has no CUDA support");
  void* stream = nullptr;
  if (aoti_torch_get_current_cuda_stream(device_index, &stream) != AOTI_TORCH_SUCCESS)
    throw std::runtime_error("sparse_mla: no current CUDA stream on device " + std::to_string(device_index));
  return static_cast<cudaStream_t>(stream);
}

}  // namespace sparse_mla
