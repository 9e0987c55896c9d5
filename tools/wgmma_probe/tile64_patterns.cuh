// The tile64 kernel's products per 64-position tile (cc/decode/tile64/tile64_kernel.cuh) with its operand layouts,
// on one CTA per SM (timing only: the values are constants): S = Q . K^T (36 chained m64n64k16, warpgroup 0), P . V
// (8 m64n128k16 a warpgroup, its 256 columns), and the kernel's order of the two without the softmax: warpgroup 0's
// S, a 256-thread barrier, both warpgroups' P . V, a barrier.
#pragma once

#include "cc/common/ptx.cuh"
#include "cc/decode/tile64/tile64_kernel.cuh"

namespace tile64_patterns {

using namespace sparse_mla;
using decode::kAtomCols;
using decode::kKvAtoms;
using decode::kSlotAtoms;
using decode::tile64::kQAtomBytes;
using decode::tile64::kTileAtomBytes;
using decode::tile64::kTileBytes;

enum Pattern { kScores, kProduct, kChain, kPatterns };
const char* const kNames[kPatterns] = {"tile64_scores_ss", "tile64_product_ss", "tile64_chain_ss"};
constexpr int kScoreSteps = kSlotElems / 16;            // 36
constexpr int kProductSteps = 2 * (decode::tile64::kTile / 16);  // 8 a warpgroup
// wgmmas of one tile a warpgroup issues (warpgroup 0's in the chain).
constexpr int kWgmmas[kPatterns] = {kScoreSteps, kProductSteps, kScoreSteps + kProductSteps};
constexpr int kSmemBytes = (kSlotAtoms * kQAtomBytes) + kTileBytes;  // queries + one stage: 144 KiB
constexpr int kCycleSlots = 3;  // the cycles array's entries a CTA (wgmma_probe.cu's kMaxGroups)

template <int kPattern>
__global__ void __launch_bounds__(256, 1) probe(long long* cycles, float* sink, int iterations) {
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned char* q = smem;
  unsigned char* tile = smem + kSlotAtoms * kQAtomBytes;
  for (int i = threadIdx.x; i < kSmemBytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u;  // bf16 pairs of small values
  fence_proxy_async();
  __syncthreads();
  const int group = threadIdx.x / 128, lane = threadIdx.x % 128, threads = blockDim.x;
  // The kernel's descriptors: K-major Q, K and P (P in the stage's k_rope atom), V MN-major (256 columns a group).
  const SmemDescriptor query(q, 16, 1024), key(tile, 16, 1024), prob(tile + kKvAtoms * kTileAtomBytes, 16, 1024);
  const SmemDescriptor value(tile + group * 4 * kTileAtomBytes, kTileAtomBytes, 1024);
  float score[32] = {}, out[2][64] = {};
  const long long start = clock64();
  for (int it = 0; it < iterations; ++it) {
    if ((kPattern == kScores || kPattern == kChain) && group == 0) {
      keep_in_registers(score);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kScoreSteps; ++ks) {
        const int atom = ks / (kAtomCols / 16), within = (ks % (kAtomCols / 16)) * 32;
        wgmma_m64n64k16_ss(score, query.at(atom * kQAtomBytes + within), key.at(atom * kTileAtomBytes + within));
      }
      wgmma_commit();
      wgmma_wait_all();
      keep_in_registers(score);
    }
    if (kPattern == kChain) sync_named(1, threads);  // P written
    if (kPattern == kProduct || kPattern == kChain) {
#pragma unroll
      for (int h = 0; h < 2; ++h) keep_in_registers(out[h]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < decode::tile64::kTile / 16; ++kk)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wgmma_m64n128k16_ss(out[h], prob.at(kk * 32), value.at(2 * h * kTileAtomBytes + kk * 2048));
      wgmma_commit();
      wgmma_wait_all();
#pragma unroll
      for (int h = 0; h < 2; ++h) keep_in_registers(out[h]);
    }
    if (kPattern == kChain) sync_named(2, threads);  // the stage released
  }
  const long long end = clock64();
  if (lane == 0) cycles[blockIdx.x * kCycleSlots + group] = (end - start) / iterations;
  float s = score[0] + out[0][0] + out[1][0];
  if (s == 12345.f) sink[threadIdx.x] = s;  // keeps the accumulators live
}

}  // namespace tile64_patterns
