// The split-KV merge of the decode kernels as device functions: the arrival count that elects a split's
// last CTA, and the exp2-weighted merge of every split's partial output (by that CTA, or by the split
// merge kernel).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/decode/components/bf16_registers.cuh"
#include "cc/decode/components/cta_work.cuh"
#include "cc/decode/components/softmax.cuh"
#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

// Four output columns of one head of a finished token, as bf16.
__device__ __forceinline__ void store_output(const SparseDecodeParams& p, int token, int head, int col, const float4& x) {
  auto* out = reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + token * p.out_token_stride +
                                          head * p.out_head_stride + col);
  out[0] = pack_bf16(x.x, x.y);
  out[1] = pack_bf16(x.z, x.w);
}

// Split-KV bookkeeping of one CTA after it stored its partial output and LSE (the workspace layout of
// SparseDecodeParams): bumps the arrival counter of its (token, head group, rank) and tells whether it
// arrived last, in which case it has reset the counter (so a later launch or CUDA-graph replay finds it
// zero) and may read every split's partials. Called by all threads of the CTA.
__device__ __forceinline__ bool arrived_last(const SparseDecodeParams& p, int64_t group_index, int rank) {
  __shared__ int last;
  __syncthreads();  // every thread's partial stores precede thread 0's release (cumulativity)
  if (threadIdx.x == 0) {
    // One acquire-release atomic: this CTA's partials are visible before its arrival counts, and the other
    // splits' partials are visible to this CTA's loads after the barrier below.
    int32_t* counter = p.counters + group_index * kClusterSize + rank;
    last = atomic_increment_acq_rel_gpu(counter) == p.num_splits - 1;
    if (last) *counter = 0;  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  return last;
}

// Four consecutive columns of a split's partial output: fp32 (the first kernel; the wide kernel with
// few splits) or bf16 (the wide kernel with many splits: half the bytes written and merged).
__device__ __forceinline__ float4 load_partial(const float* at) { return __ldcg(reinterpret_cast<const float4*>(at)); }

__device__ __forceinline__ float4 load_partial(const __nv_bfloat16* at) {
  const uint2 raw = __ldcg(reinterpret_cast<const uint2*>(at));  // bf16 -> fp32: the bits shifted up by 16
  return make_float4(__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                     __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u));
}

// One CTA of kThreads per (token, head group, column slice) (the first kernel's last to arrive, or
// the wide kernel's merge launch): merges every split's partial output of its kHeads heads and output
// columns [col_begin, col_begin + kCols), reading the splits' LSEs from slot `lse_slot` of the
// workspace, each thread 4 columns of one head with kUnroll splits loaded at once (folded into a
// running max / sum / accumulator), and writes the output and (col_begin = 0) the LSE. The partials
// are stored as `Partial` (float, or __nv_bfloat16 in the first half of the workspace). The merge is
// bound by load latency: each round of kUnroll loads waits for the last.
template <int kHeads, int kCols, int kUnroll, typename Partial = float>
__device__ __forceinline__ void merge_splits(const SparseDecodeParams& p, int token, int head_base, int64_t group_index,
                                             int lse_slot, int col_begin) {
  constexpr int kVectorsPerHead = kCols / 4;
  constexpr int kVectors = kHeads * kVectorsPerHead;
  const float* lse_base = p.partial_lse + group_index * p.num_splits * kClusterSize * kHeads + lse_slot * kHeads;
  const Partial* partial_group =
      reinterpret_cast<const Partial*>(p.partial_out) + group_index * p.num_splits * kHeads * kKvLoraRank;
  for (int v = threadIdx.x; v < kVectors; v += kThreads) {
    const int h = v / kVectorsPerHead, col = col_begin + (v % kVectorsPerHead) * 4;
    float running_max = kNegInf;
    WeightedSum sum;
    for (int s0 = 0; s0 < p.num_splits; s0 += kUnroll) {
      float4 x[kUnroll];
      float lse[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool present = s0 + u < p.num_splits;
        lse[u] = present ? __ldcg(lse_base + (s0 + u) * kClusterSize * kHeads + h) : kNegInf;
        x[u] = present ? load_partial(partial_group + ((s0 + u) * kHeads + h) * kKvLoraRank + col)
                       : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      float group_max = running_max;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) group_max = fmaxf(group_max, lse[u]);
      const float base = group_max == kNegInf ? 0.f : group_max;  // no (-inf) - (-inf)
      sum.rescale(exp2f(running_max - base));                     // 0 while nothing was valid
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) sum.add(exp2f(lse[u] - base), x[u]);  // 0 for a split without valid positions
      running_max = group_max;
    }
    if (head_base + h >= p.num_heads) continue;
    store_output(p, token, head_base + h, col, sum.mean());
    if (p.lse != nullptr && col == 0)
      p.lse[token * p.num_heads + head_base + h] = sum.lse(running_max) * kLn2;
  }
}

}  // namespace decode
}  // namespace sparse_mla
