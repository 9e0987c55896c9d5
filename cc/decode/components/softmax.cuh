// Online-softmax pieces of the decode kernels: base-2 constants, lazy rescaling of the running
// maximum, and the exp2-weighted sum that merges normalized partial outputs.
#pragma once

#include <cmath>

namespace sparse_mla {
namespace decode {

constexpr float kNegInf = -INFINITY;
constexpr float kLn2 = 0.69314718055994530942f;

// Lazy softmax rescaling: the running maximum (base 2) of a head's scores moves only when a stage's
// maximum exceeds it by more than kLazyMaxSlackLog2. Most stages then keep alpha = 1 exactly and the
// kernels skip the rescale of their output accumulators. Probabilities reach 2^8 instead of 1: bf16
// holds them with the same relative precision, and fp32 sums of 2048 of them (< 2^19) cannot overflow;
// the normalization by the row sum at the end is unchanged. Idea and threshold (8, log2 units) are
// FlashAttention-4's conditional softmax rescaling (Dao et al., flash-attention's CuTe DSL kernels).
constexpr float kLazyMaxSlackLog2 = 8.f;

// The next running maximum for a stage whose scores peak at `stage_max` (both -inf while nothing was valid).
__device__ __forceinline__ float lazy_running_max(float running_max, float stage_max) {
  return stage_max > running_max + kLazyMaxSlackLog2 ? stage_max : running_max;
}

// exp2-weighted sum of normalized partial outputs (a slice's or a split's): with w = 2^(lse - base) per
// partial, the merged output is sum(w x) / sum(w) and its base-2 LSE base + log2(sum(w)).
struct WeightedSum {
  float total = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);

  __device__ __forceinline__ void add(float w, const float4& x) {
    total += w;
    acc.x += w * x.x;
    acc.y += w * x.y;
    acc.z += w * x.z;
    acc.w += w * x.w;
  }
  __device__ __forceinline__ void rescale(float r) {
    total *= r;
    acc.x *= r;
    acc.y *= r;
    acc.z *= r;
    acc.w *= r;
  }
  __device__ __forceinline__ float4 mean() const {
    const float inv = total != 0.f ? 1.f / total : 0.f;  // NaN propagates
    return make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  }
  __device__ __forceinline__ float lse(float base) const { return total != 0.f ? base + log2f(total) : kNegInf; }
};

}  // namespace decode
}  // namespace sparse_mla
