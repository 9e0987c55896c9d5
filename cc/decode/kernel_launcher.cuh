// Host side of a decode kernel instantiation: its launch configuration, shared-memory sizing and
// occupancy, and the slicing of a launch's tokens to CUDA's grid limit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cc/common/device_attribute.h"
#include "cc/common/mla_layout.h"
#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

// The parameters of tokens [first, first + count) of `p` alone (the kernels index every per-token
// tensor and the split partials by token). The slices' launches run in turn and reuse one set of
// counters, which each leaves zero: a workspace's counters region holds one launch's (decode_plan.h).
inline SparseDecodeParams token_slice(const SparseDecodeParams& p, int first, int count) {
  SparseDecodeParams part = p;
  const int64_t t = first;
  const int64_t groups = t * p.head_groups;
  const int64_t heads_per_cta = kHeadTileRows * p.head_tiles;
  part.q_nope = static_cast<const __nv_bfloat16*>(p.q_nope) + t * p.q_nope_token_stride;
  part.q_rope = static_cast<const __nv_bfloat16*>(p.q_rope) + t * p.q_rope_token_stride;
  part.topk_indices = p.topk_indices + t * p.topk_token_stride;
  part.req_id = p.req_id + t;
  part.token_kv_len = p.token_kv_len + t;
  if (p.topk_length != nullptr) part.topk_length = p.topk_length + t;
  part.out = static_cast<__nv_bfloat16*>(p.out) + t * p.out_token_stride;
  if (p.lse != nullptr) part.lse = p.lse + t * p.num_heads;
  if (p.num_splits > 1) {
    part.partial_out = p.partial_out + groups * p.num_splits * heads_per_cta * kKvLoraRank;
    part.partial_lse = p.partial_lse + groups * p.num_splits * kClusterSize * heads_per_cta;
  }
  part.num_tokens = count;
  return part;
}

// The current device's SMs, into `sms` (asked once per device); the queries' CUDA error.
inline cudaError_t current_device_sms(int* sms) {
  int device = 0;
  const cudaError_t error = cudaGetDevice(&device);
  return error != cudaSuccess ? error : device_attribute<cudaDevAttrMultiProcessorCount>(device, sms);
}

// Calls `launch(part, count)` for consecutive slices of p's tokens, `count` tokens each, with at most
// kMaxGridZ (token, head group) pairs (a grid dimension's limit): more tokens take more launches, each
// on its own tokens' slices of every per-token tensor and of the workspace. Returns the first error.
template <typename Launch>
cudaError_t for_token_slices(const SparseDecodeParams& p, Launch launch) {
  const int max_tokens = kMaxGridZ / p.head_groups;
  for (int first = 0; first < p.num_tokens; first += max_tokens) {
    const int count = p.num_tokens - first < max_tokens ? p.num_tokens - first : max_tokens;
    const cudaError_t error = launch(token_slice(p, first, count), count);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

// Launches and sizes one kernel instantiation. `Kernel` provides kFunction (a __global__ taking
// SparseDecodeParams), kBlockThreads, kClusterCtas (CTAs per cluster along x, 1: none),
// kProgrammaticLaunch (a programmatic dependent launch: the kernel calls wait_for_prerequisite_grids
// before it reads anything) and shared_bytes(positions_per_split).
template <typename Kernel>
struct Launcher {
  // Dynamic plus static shared memory of one CTA (its __shared__ variables, e.g. arrived_last's):
  // both count against the device's per-block limit. 0 static bytes if CUDA cannot say (the launch
  // then reports the error).
  static int total_shared_bytes(int positions_per_split) {
    static const int static_bytes = [] {
      cudaFuncAttributes attributes{};
      return cudaFuncGetAttributes(&attributes, Kernel::kFunction) == cudaSuccess
                 ? static_cast<int>(attributes.sharedSizeBytes)
                 : 0;
    }();
    return Kernel::shared_bytes(positions_per_split) + static_bytes;
  }

  // Raises the kernel's dynamic shared-memory limit to `bytes` on the current device (once per size seen).
  static cudaError_t allow_shared_memory(int bytes) {
    constexpr int kMaxDevices = 64;
    static int configured_bytes[kMaxDevices] = {};
    int device = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) return error;
    if (device < kMaxDevices && bytes <= configured_bytes[device]) return cudaSuccess;
    error = cudaFuncSetAttribute(Kernel::kFunction, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (error == cudaSuccess && device < kMaxDevices) configured_bytes[device] = bytes;
    return error;
  }

  // Grid kClusterCtas x splits x token_groups CTAs of kBlockThreads, in clusters of kClusterCtas along x.
  // Its CTAs may start while the kernel ahead in the stream finishes (kProgrammaticLaunch).
  static cudaLaunchConfig_t config(int num_splits, int token_groups, int bytes, cudaStream_t stream,
                                   cudaLaunchAttribute (&attributes)[2]) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(Kernel::kClusterCtas, num_splits, token_groups);
    config.blockDim = dim3(Kernel::kBlockThreads, 1, 1);
    config.dynamicSmemBytes = bytes;
    config.stream = stream;
    config.attrs = attributes;
    config.numAttrs = 0;
    if constexpr (Kernel::kClusterCtas > 1) {
      cudaLaunchAttribute& cluster = attributes[config.numAttrs++];
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim.x = Kernel::kClusterCtas;
      cluster.val.clusterDim.y = 1;
      cluster.val.clusterDim.z = 1;
    }
    if constexpr (Kernel::kProgrammaticLaunch) {
      cudaLaunchAttribute& early = attributes[config.numAttrs++];
      early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      early.val.programmaticStreamSerializationAllowed = 1;
    }
    return config;
  }

  static cudaError_t launch(const SparseDecodeParams& p, cudaStream_t stream) {
    const int bytes = Kernel::shared_bytes(p.positions_per_split);
    const cudaError_t error = allow_shared_memory(bytes);
    if (error != cudaSuccess) return error;
    return for_token_slices(p, [&](const SparseDecodeParams& part, int count) {
      cudaLaunchAttribute attributes[2];
      const cudaLaunchConfig_t launch_config = config(part.num_splits, count * part.head_groups, bytes, stream, attributes);
      return cudaLaunchKernelEx(&launch_config, Kernel::kFunction, part);
    });
  }

  static cudaError_t max_active_clusters(int positions_per_split, int* clusters) {
    const int bytes = Kernel::shared_bytes(positions_per_split);
    cudaError_t error = allow_shared_memory(bytes);
    if (error != cudaSuccess) return error;
    if constexpr (Kernel::kClusterCtas > 1) {
      cudaLaunchAttribute attributes[2];
      cudaLaunchConfig_t launch_config = config(1, 1, bytes, nullptr, attributes);
      launch_config.numAttrs = 1;  // the cluster shape (attributes[0]) alone: what occupancy depends on
      return cudaOccupancyMaxActiveClusters(clusters, Kernel::kFunction, &launch_config);
    }
    int sms = 0, per_sm = 0;
    if ((error = current_device_sms(&sms)) != cudaSuccess) return error;
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel::kFunction, Kernel::kBlockThreads, bytes);
    if (error != cudaSuccess) return error;
    *clusters = sms * per_sm;
    return cudaSuccess;
  }
};

}  // namespace decode
}  // namespace sparse_mla
