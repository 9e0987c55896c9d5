// Throughput of the swap-AB decode kernel's wgmma pattern (m64n16k16: 64 positions as M, 16 heads as N) on one
// CTA per SM, 1-3 warpgroups issuing it at once, and of the tile64 kernel's (tile64_patterns.cuh), operands resident
// in shared memory (timing only: the values are constants). Prints one CSV row per (pattern, warpgroups): SM cycles
// per tile and per wgmma, per warpgroup and per SM.
#include <cuda_bf16.h>

#include <cstdio>
#include <utility>

#include "cc/common/ptx.cuh"
#include "cc/decode/swap_ab/swap_ab_kernel.cuh"
#include "tools/wgmma_probe/tile64_patterns.cuh"

namespace {

using namespace sparse_mla;
using decode::kAtomCols;
using decode::kSlotAtoms;
using decode::swap_ab::kOutTiles;
using decode::swap_ab::kQAtomBytes;
using decode::swap_ab::kTileAtomBytes;
using decode::swap_ab::kTileBytes;

// The kernel's shapes (cc/decode/swap_ab/swap_ab_kernel.cuh): S^T's k-steps (36) and out^T's wgmmas (32) a tile.
constexpr int kScoreSteps = kSlotElems / 16;
constexpr int kProductSteps = kOutTiles * (decode::swap_ab::kTile / 16);
constexpr int kSmemBytes = 200 * 1024;  // one CTA per SM
constexpr int kBlocks = 132, kIterations = 2000, kMaxGroups = 3;
static_assert(kMaxGroups == tile64_patterns::kCycleSlots, "one cycles layout for both pattern families");

// The patterns of one tile: S^T = K . Q^T (36 chained k-steps), out^T = V^T . P^T (8 m-tiles x 4 k-steps, V^T
// MN-major), both, S^T with K in registers (RS), S^T as two interleaved chains of 18, and both with a named
// barrier and a shared-memory exchange between them (the softmax's synchronization without its arithmetic).
enum Pattern { kScores, kProduct, kTile, kScoresRs, kScoresTwoChains, kTileExchange, kPatterns };
const char* const kNames[kPatterns] = {"scores_ss", "product_ss", "tile_ss", "scores_rs", "scores_two_chains",
                                       "tile_ss_exchange"};
constexpr int kWgmmas[kPatterns] = {kScoreSteps, kProductSteps, kScoreSteps + kProductSteps, kScoreSteps,
                                    kScoreSteps, kScoreSteps + kProductSteps};

// d[64 x 16] += A . B, A (64 x 16) in registers (the accumulator-like fragment of each warp's 16 rows), B K-major.
__device__ __forceinline__ void wgmma_m64n16k16_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// K-major operands: k-step ks of S^T is 32 bytes into the rows of atom ks / 4, as in the kernel's S^T loop.
constexpr int kStepsPerAtom = kAtomCols / 16;
__device__ __forceinline__ int key_offset(int ks) {
  return (ks / kStepsPerAtom) * kTileAtomBytes + (ks % kStepsPerAtom) * 32;
}
__device__ __forceinline__ int query_offset(int ks) {
  return (ks / kStepsPerAtom) * kQAtomBytes + (ks % kStepsPerAtom) * 32;
}

template <int kPattern>
__global__ void __launch_bounds__(kMaxGroups * 128, 1) probe(long long* cycles, float* sink, int iterations) {
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned char* tile = smem;
  unsigned char* q = smem + kTileBytes;
  unsigned char* prob = q + kSlotAtoms * kQAtomBytes;
  auto* exchange = reinterpret_cast<float*>(prob + kQAtomBytes);  // [warpgroup][128]
  for (int i = threadIdx.x; i < (kTileBytes + (kSlotAtoms + 1) * kQAtomBytes) / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u;  // bf16 pairs of small values
  fence_proxy_async();
  __syncthreads();
  const int group = threadIdx.x / 128, lane = threadIdx.x % 128;
  const SmemDescriptor query(q, 16, 1024), key(tile, 16, 1024), value(tile, kTileAtomBytes, 1024), p(prob, 16, 1024);
  float score[8] = {}, score2[8] = {}, out[kOutTiles][8] = {};
  uint32_t a[4][4];  // RS operands, 4 sets in turn (one set reused back to back serializes the wgmmas)
  for (int i = 0; i < 16; ++i) a[i / 4][i % 4] = reinterpret_cast<const uint32_t*>(tile)[(lane * 16 + i) % 4096];

  const long long start = clock64();
  for (int it = 0; it < iterations; ++it) {
    if (kPattern == kScores || kPattern == kTile || kPattern == kTileExchange || kPattern == kScoresRs) {
      keep_in_registers(score);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kScoreSteps; ++ks) {
        if (kPattern == kScoresRs)
          wgmma_m64n16k16_rs(score, a[ks % 4], query.at(query_offset(ks)));
        else
          wgmma_m64n16k16_ss<0>(score, key.at(key_offset(ks)), query.at(query_offset(ks)));
      }
      wgmma_commit();
      wgmma_wait_all();
      keep_in_registers(score);
    }
    if (kPattern == kScoresTwoChains) {
      keep_in_registers(score);
      keep_in_registers(score2);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kScoreSteps; ks += 2) {
        wgmma_m64n16k16_ss<0>(score, key.at(key_offset(ks)), query.at(query_offset(ks)));
        wgmma_m64n16k16_ss<0>(score2, key.at(key_offset(ks + 1)), query.at(query_offset(ks + 1)));
      }
      wgmma_commit();
      wgmma_wait_all();
      keep_in_registers(score);
      keep_in_registers(score2);
    }
    if (kPattern == kTileExchange) {
      exchange[group * 128 + lane] = score[0];
      sync_named(1 + group, 128);
      score[1] += exchange[group * 128 + (lane + 4) % 128];
      sync_named(1 + group, 128);
    }
    if (kPattern == kProduct || kPattern == kTile || kPattern == kTileExchange) {
#pragma unroll
      for (int j = 0; j < kOutTiles; ++j) keep_in_registers(out[j]);
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < kOutTiles; ++j)
#pragma unroll
        for (int kk = 0; kk < decode::swap_ab::kTile / 16; ++kk)
          wgmma_m64n16k16_ss<1>(out[j], value.at(j * kTileAtomBytes + kk * 2048), p.at(kk * 32));
      wgmma_commit();
      wgmma_wait_all();
#pragma unroll
      for (int j = 0; j < kOutTiles; ++j) keep_in_registers(out[j]);
    }
  }
  const long long end = clock64();
  if (lane == 0) cycles[blockIdx.x * kMaxGroups + group] = (end - start) / iterations;
  float s = score[0] + score2[0];
  for (int j = 0; j < kOutTiles; ++j) s += out[j][0];
  if (s == 12345.f) sink[threadIdx.x] = s;  // keeps the accumulators live
}

// Times `kernel` (pattern `name`, `wgmmas` a tile a warpgroup) on `groups` warpgroups a CTA with `smem_bytes`;
// prints its row and returns its CUDA error.
cudaError_t time_pattern(void (*kernel)(long long*, float*, int), const char* name, int wgmmas, int groups,
                         int smem_bytes, long long* cycles, float* sink) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  kernel<<<kBlocks, 128 * groups, smem_bytes>>>(cycles, sink, 10);  // warm-up
  cudaEventRecord(start);
  kernel<<<kBlocks, 128 * groups, smem_bytes>>>(cycles, sink, kIterations);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, start, stop);
  long long host[kBlocks * kMaxGroups];
  cudaMemcpy(host, cycles, sizeof(host), cudaMemcpyDeviceToHost);
  double mean = 0.;
  for (int b = 0; b < kBlocks; ++b) mean += host[b * kMaxGroups];
  mean /= kBlocks;
  const double per_wgmma = mean / wgmmas;
  const cudaError_t error = cudaGetLastError();
  printf("%s,%d,%d,%.0f,%.1f,%.1f,%.1f,%s\n", name, groups, wgmmas, mean, per_wgmma, per_wgmma / groups,
         ms * 1e6 / kIterations, cudaGetErrorString(error));
  return error;
}

template <int kPattern>
cudaError_t run(int groups, long long* cycles, float* sink) {
  return time_pattern(probe<kPattern>, kNames[kPattern], kWgmmas[kPattern], groups, kSmemBytes, cycles, sink);
}

// Times one tile64 pattern (tile64_patterns.cuh) as run() times the swap-AB ones.
template <int kPattern>
cudaError_t run_tile64_pattern(int groups, long long* cycles, float* sink) {
  namespace t = tile64_patterns;
  return time_pattern(t::probe<kPattern>, t::kNames[kPattern], t::kWgmmas[kPattern], groups, t::kSmemBytes, cycles,
                      sink);
}

// The tile64 patterns: S by warpgroup 0 alone, P . V by 1 and 2 warpgroups, the chain by 2.
int run_tile64(long long* cycles, float* sink) {
  namespace t = tile64_patterns;
  int failed = run_tile64_pattern<t::kScores>(1, cycles, sink) != cudaSuccess;
  for (int groups = 1; groups <= 2; ++groups)
    failed += run_tile64_pattern<t::kProduct>(groups, cycles, sink) != cudaSuccess;
  failed += run_tile64_pattern<t::kChain>(2, cycles, sink) != cudaSuccess;
  return failed;
}

// Times every pattern; returns the number that failed.
template <int... kPattern>
int run_all(int groups, long long* cycles, float* sink, std::integer_sequence<int, kPattern...>) {
  return ((run<kPattern>(groups, cycles, sink) != cudaSuccess) + ...);
}

}  // namespace

int main() {
  long long* cycles = nullptr;
  float* sink = nullptr;
  if (cudaMalloc(&cycles, kBlocks * kMaxGroups * sizeof(long long)) != cudaSuccess ||
      cudaMalloc(&sink, kMaxGroups * 128 * sizeof(float)) != cudaSuccess) {
    fprintf(stderr, "wgmma_probe: no CUDA device memory: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  printf("pattern,warpgroups,wgmmas_per_tile,cycles_per_tile_per_warpgroup,cycles_per_wgmma_per_warpgroup,"
         "sm_cycles_per_wgmma,ns_per_iteration,cuda_error\n");
  int failed = 0;
  for (int groups = 1; groups <= kMaxGroups; ++groups)
    failed += run_all(groups, cycles, sink, std::make_integer_sequence<int, kPatterns>{});
  failed += run_tile64(cycles, sink);
  return failed == 0 ? 0 : 1;
}
