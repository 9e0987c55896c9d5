// A CUDA device attribute asked of the runtime once per device and then read from a cache: the decode op's
// shared-memory limit and the split merge's SM count are read on every call.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>

namespace sparse_mla {

// Attribute `kAttribute` of CUDA device `device` into `value`; the runtime's error on the first ask. A device index
// of kMaxCachedDevices or more is asked every time.
template <cudaDeviceAttr kAttribute>
inline cudaError_t device_attribute(int device, int* value) {
  constexpr int kMaxCachedDevices = 64;
  static std::atomic<int> cached[kMaxCachedDevices] = {};  // 0: not asked yet (every attribute we ask is positive)
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable && (*value = cached[device].load(std::memory_order_relaxed)) > 0) return cudaSuccess;
  const cudaError_t error = cudaDeviceGetAttribute(value, kAttribute, device);
  if (error == cudaSuccess && cacheable) cached[device].store(*value, std::memory_order_relaxed);
  return error;
}

}  // namespace sparse_mla
