// The thread block of the decode kernels and the (split, token, head group) a CTA works on.
#pragma once

#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

constexpr int kThreads = 256;  // 8 warps: a CTA of the first kernel and of the merge launch, the wide kernel's consumers
constexpr int kWarps = kThreads / 32;

// The (split, token, head group) of a CTA: the grid is cluster ranks x splits x (T x head groups).
struct CtaWork {
  int split, token, head_group;
  __device__ __forceinline__ explicit CtaWork(const SparseDecodeParams& p)
      : split(blockIdx.y), token(blockIdx.z / p.head_groups), head_group(blockIdx.z % p.head_groups) {}
};

}  // namespace decode
}  // namespace sparse_mla
