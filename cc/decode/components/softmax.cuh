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

// The online softmax of the rows of an m64nN wgmma accumulator, as lane (group, quad) of a warp holds them: rows
// group and group + 8 at positions 8 nt + 2 quad + {0, 1} of n-tile nt (registers 4 nt + {0, 1} and 4 nt + {2, 3});
// the 4 lanes of a quad keep the same row statistics (base 2). kLazyMax: lazy_running_max, else the exact maximum.
template <int kTiles, bool kLazyMax>
struct QuadRowSoftmax {
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};

  // One tile of scores (positions with rows[position] < 0 masked to -inf, the others times scale_log2): moves the
  // running maxima, sets each row's alpha (the factor of everything before) and calls emit(nt, e0, e1, e2, e3)
  // with n-tile nt's probabilities (e0, e1 of row group, e2, e3 of row group + 8).
  template <typename Emit>
  __device__ __forceinline__ void step(float (&score)[4 * kTiles], const int* rows, int quad, float scale_log2,
                                       float (&alpha)[2], Emit emit) {
    float tile_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const bool valid = rows[nt * 8 + 2 * quad + j] >= 0;
        score[nt * 4 + j] = valid ? score[nt * 4 + j] * scale_log2 : kNegInf;
        score[nt * 4 + 2 + j] = valid ? score[nt * 4 + 2 + j] * scale_log2 : kNegInf;
        tile_max[0] = fmaxf(tile_max[0], score[nt * 4 + j]);
        tile_max[1] = fmaxf(tile_max[1], score[nt * 4 + 2 + j]);
      }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = kLazyMax ? lazy_running_max(row_max[r], tile_max[r]) : fmaxf(row_max[r], tile_max[r]);
      base[r] = new_max == kNegInf ? 0.f : new_max;  // no (-inf) - (-inf)
      alpha[r] = exp2f(row_max[r] - base[r]);        // 0 while nothing was valid
      row_max[r] = new_max;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
      const float e0 = exp2f(score[nt * 4] - base[0]), e1 = exp2f(score[nt * 4 + 1] - base[0]);
      const float e2 = exp2f(score[nt * 4 + 2] - base[1]), e3 = exp2f(score[nt * 4 + 3] - base[1]);
      sum[0] += e0 + e1;
      sum[1] += e2 + e3;
      emit(nt, e0, e1, e2, e3);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * alpha[r] + sum[r];
  }

  // After the last tile: each row's 1 / sum (0 where nothing was valid; NaN propagates) and base-2 LSE.
  __device__ __forceinline__ void finish(float (&inv)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      inv[r] = l != 0.f ? 1.f / l : 0.f;
      lse[r] = l != 0.f ? row_max[r] + log2f(l) : kNegInf;
    }
  }
};

}  // namespace decode
}  // namespace sparse_mla
