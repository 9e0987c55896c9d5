// Sparse MLA decode on Hopper for 16 or 32 heads per CTA with the products turned around: the gathered
// positions are wgmma's M (64 a tile) and the heads its N, so no tensor-core row is spent on padding
// heads. Producer warpgroups gather (and dequantize) each tile, one consumer warpgroup runs
// S^T = K . Q^T and out^T = V^T . P^T. Work decomposition and measurements: docs/decode-kernels.md.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/decode/components/bf16_registers.cuh"
#include "cc/decode/components/cta_work.cuh"
#include "cc/decode/components/operand_atoms.cuh"
#include "cc/decode/components/slot_gather.cuh"
#include "cc/decode/components/slot_translation.cuh"
#include "cc/decode/components/softmax.cuh"
#include "cc/decode/kernel_launcher.cuh"
#include "cc/decode/params.h"
#include "cc/decode/split_merge/merge_splits.cuh"
#include "cc/decode/swap_ab/swap_ab.h"

namespace sparse_mla {
namespace decode {
namespace swap_ab {

template <int kHeadTiles>
constexpr int kCtaHeads = kHeadTileRows * kHeadTiles;  // 16 or 32: the N of both products
constexpr int kTile = kCtaChunk;                    // 64 positions: the M of S^T, the K of out^T
constexpr int kGroupThreads = 128;                  // one warpgroup
// Producer warpgroups: fp8_ds_mla 2, each filling every other tile (one's slots load while the other
// dequantizes), bf16 1 (its copies land without it). Warpgroup 0 consumes.
template <bool kFp8>
constexpr int kProducerGroups = kFp8 ? 2 : 1;
template <bool kFp8>
constexpr int kBlockThreads = (1 + kProducerGroups<kFp8>) * kGroupThreads;
constexpr int kStageThreads = 2 * kGroupThreads;  // a stage's barriers: its producer warpgroup and the consumers
constexpr int kTileAtomBytes = kTile * 128;           // one atom (64 columns) of a tile's 64 rows
constexpr int kTileBytes = kSlotAtoms * kTileAtomBytes;  // a bf16 tile of 64 slots: 72 KB
template <int kHeads>
constexpr int kQAtomBytes = kHeads * 128;             // one atom of the query rows (and of P^T)
constexpr int kStages = 2;                            // tiles: one consumed while the next is filled
constexpr int kOutTiles = kKvLoraRank / 64;           // m-tiles of out^T (64 c_kv columns each)
constexpr int kOutStride = kKvLoraRank + 4;           // fp32 row stride of the staged output: conflict-free
constexpr int kMergeUnroll = 8;                       // split partials the last CTA loads at once

// Named barriers (0: __syncthreads).
constexpr int kFullBarrier = 1;      // + tile stage: filled (producers arrive, consumers wait)
constexpr int kEmptyBarrier = 3;     // + tile stage: consumed (consumers arrive, producers wait)
constexpr int kConsumerBarrier = 5;  // the consumers' 128 threads
constexpr int kProducerBarrier = 6;  // the producers' threads

// Byte offsets of the dynamic shared memory of one CTA of kHeads heads, from its first 1024-byte boundary.
template <int kHeads>
struct SharedLayout {
  int q, tiles, prob, exchange, lse, rows, total;
  __host__ __device__ explicit SharedLayout(int positions_per_split) {
    q = 0;                                        // kSlotAtoms atoms of the query rows
    tiles = q + kSlotAtoms * kQAtomBytes<kHeads>;  // kStages bf16 tiles (1024-aligned); after the loop, the output
    prob = tiles + kStages * kTileBytes;          // P^T: kHeads heads x 64 positions bf16, one atom
    exchange = prob + kQAtomBytes<kHeads>;        // [4 warps][kHeads] fp32: per-head maxima, then sums
    lse = exchange + 4 * kHeads * 4;              // [kHeads] fp32, base 2
    rows = lse + kHeads * 4;                      // [positions_per_split] int32
    total = rows + positions_per_split * 4 + kAtomAlign;  // + alignment slack
  }
};
static_assert(kCtaHeads<2> * kOutStride * 4 <= kStages * kTileBytes, "the staged output fits in the tiles");

// Accumulator register r (0..kHeads / 2 - 1) of an m64nkHeads fragment: row 16 warp + group (+ 8 for
// r % 4 = 2, 3), column (head) head_of(r, quad).
__device__ __forceinline__ int head_of(int r, int quad) { return 2 * quad + (r & 1) + 8 * (r >> 2); }
// The thread's kHeads / 4 heads k (head_of(register_of(k, 0), quad)) hold registers register_of(k, half).
__device__ __forceinline__ constexpr int register_of(int k, int half) { return 4 * (k >> 1) + (k & 1) + 2 * half; }

// d[64 x kHeads] += A . B on the warpgroup (A: 64 x 16, B: 16 x kHeads K-major; kTransposeA: A MN-major).
template <int kHeads, int kTransposeA>
__device__ __forceinline__ void wgmma_heads(float (&d)[kHeads / 2], uint64_t a, uint64_t b) {
  if constexpr (kHeads == 16)
    wgmma_m64n16k16_ss<kTransposeA>(d, a, b);
  else
    wgmma_m64n32k16_ss<kTransposeA>(d, a, b);
}

// Each of this lane's kHeads / 4 heads' values combined with `op` over the lanes and warps holding the
// head's positions (through `exchange`, behind a consumer barrier), in warp order.
template <int kHeads, typename Op>
__device__ __forceinline__ void combine_over_positions(float (&value)[kHeads / 4], float* exchange, int warp,
                                                       int group, int quad, Op op) {
#pragma unroll
  for (int k = 0; k < kHeads / 4; ++k)
#pragma unroll
    for (int offset = 4; offset < 32; offset *= 2) value[k] = op(value[k], __shfl_xor_sync(0xffffffffu, value[k], offset));
  if (group == 0)
#pragma unroll
    for (int k = 0; k < kHeads / 4; ++k) exchange[warp * kHeads + head_of(register_of(k, 0), quad)] = value[k];
  sync_named(kConsumerBarrier, kGroupThreads);
#pragma unroll
  for (int k = 0; k < kHeads / 4; ++k) {
    const int head = head_of(register_of(k, 0), quad);
    float x = exchange[head];
#pragma unroll
    for (int w = 1; w < 4; ++w) x = op(x, exchange[w * kHeads + head]);
    value[k] = x;
  }
}

// The row (0..3) of 4 consecutive slots whose pieces lane l % 8 of quarter warp l / 8 holds: pieces 0..3 of
// one row and 4..7 of its neighbour, so that a quarter warp's 16-byte stores fall on two rows of opposite
// parity and meet 8 distinct bank groups of the swizzled atoms (a row's pieces p and p + 4 would meet the
// same one: 4 extra wavefronts a store, docs/decode-kernels.md).
__device__ __forceinline__ int fp8_lane_row(int lane) { return 2 * (lane / 16) + ((lane / 8 % 2) ^ (lane % 8 / 4)); }

// Producer warpgroup `producer` (0, 1) on the fp8_ds_mla cache: tiles producer, producer + 2, ..., always into
// stage `producer`. Its warp w holds slots [16 w, 16 w + 16) of its next tile in registers while it waits for
// the stage, lane l the 16-byte pieces l % 8 + 8 j (j = 0..3: c_kv columns of scale group j), k_rope piece
// l % 8 and the 4 scales of slot 16 w + 4 i + fp8_lane_row(l) (i = 0..3): 24 loads, each warp's reading 128
// contiguous bytes of each of 4 slots. It dequantizes them into the stage (c_kv as bf16 atoms, k_rope
// copied), issuing each slot's loads of its next tile as soon as the slot is stored.
__device__ __forceinline__ void produce_fp8(const SparseDecodeParams& p, const int* rows, unsigned char* tiles,
                                            int num_tiles, int producer) {
  constexpr int kSlots = 4, kGroups = kKvLoraRank / kFp8ScaleGroup;  // slots of a lane; scale groups
  const int t = threadIdx.x % kGroupThreads, lane = t % 32, piece = lane % 8;
  const int first_row = 16 * (t / 32) + fp8_lane_row(lane);  // slot i of this lane: first_row + 4 i
  uint4 values[kSlots][kGroups], rope[kSlots];
  float4 scales[kSlots];
  auto load = [&](int c, int i) {  // slot i of this lane in tile c
    const int row = rows[c * kTile + first_row + 4 * i];
    const bool valid = row >= 0;
    const int slot_row = valid ? row : 0;  // masked: the cache's first slot, a valid address, nothing read
    const auto* slot = static_cast<const unsigned char*>(p.kv_cache) +
                       (static_cast<int64_t>(slot_row / kBlockSize) * p.kv_block_stride +
                        static_cast<int64_t>(slot_row % kBlockSize) * p.kv_slot_stride);
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int j = 0; j < kGroups; ++j)
      values[i][j] = valid ? __ldg(reinterpret_cast<const uint4*>(slot + 16 * (piece + 8 * j))) : zero;
    rope[i] = valid ? __ldg(reinterpret_cast<const uint4*>(slot + kFp8RopeOffset + 16 * piece)) : zero;
    scales[i] = valid ? __ldg(reinterpret_cast<const float4*>(slot + kFp8ScalesOffset)) : make_float4(0.f, 0.f, 0.f, 0.f);
  };
  if (producer < num_tiles)
#pragma unroll
    for (int i = 0; i < kSlots; ++i) load(producer, i);
  for (int c = producer; c < num_tiles; c += kStages) {
    if (c >= kStages) sync_named(kEmptyBarrier + c % kStages, kStageThreads);  // tile c - 2 consumed
    unsigned char* tile = tiles + (c % kStages) * kTileBytes;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int r = first_row + 4 * i;
      const float group_scale[kGroups] = {scales[i].x, scales[i].y, scales[i].z, scales[i].w};
#pragma unroll
      for (int j = 0; j < kGroups; ++j) {
        const int col = 16 * (piece + 8 * j);
        uint4 lo, hi;
        dequantize_piece(values[i][j], group_scale[j], lo, hi);
        *reinterpret_cast<uint4*>(tile + atom_offset(r, col, kTile)) = lo;
        *reinterpret_cast<uint4*>(tile + atom_offset(r, col + 8, kTile)) = hi;
      }
      *reinterpret_cast<uint4*>(tile + atom_offset(r, kKvLoraRank + 8 * piece, kTile)) = rope[i];
      if (c + kStages < num_tiles) load(c + kStages, i);  // in flight while the other slots are dequantized
    }
    fence_proxy_async();  // this thread's writes, for wgmma
    arrive_named(kFullBarrier + c % kStages, kStageThreads);
  }
}

// Registers a thread of the fp8_ds_mla kernel with 32 heads holds after setmaxnreg: the consumers' out^T takes 128,
// more than the 168 of an even split of 384 threads; 184 + 2 x 160 fill the SM's 64 K (docs/decode-kernels.md).
constexpr int kWideConsumerRegisters = 184;
constexpr int kWideProducerRegisters = 160;
static_assert((kWideConsumerRegisters + 2 * kWideProducerRegisters) * kGroupThreads <= 65536, "one CTA per SM");

template <bool kFp8, int kHeadTiles>
__global__ void __launch_bounds__(kBlockThreads<kFp8>, 1) sparse_decode_swap_ab_kernel(const SparseDecodeParams p) {
  constexpr int kHeads = kCtaHeads<kHeadTiles>;
  constexpr int kLaneHeads = kHeads / 4;  // heads of a lane's accumulator fragment
  constexpr int kAcc = kHeads / 2;        // a lane's accumulators of one m64nkHeads product
  constexpr bool kSetRegisters = kFp8 && kHeadTiles == 2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const SharedLayout<kHeads> layout(p.positions_per_split);
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + ((kAtomAlign - raw_addr % kAtomAlign) % kAtomAlign);
  unsigned char* q = smem + layout.q;
  unsigned char* tiles = smem + layout.tiles;
  unsigned char* prob = smem + layout.prob;
  auto* exchange = reinterpret_cast<float*>(smem + layout.exchange);
  auto* cta_lse = reinterpret_cast<float*>(smem + layout.lse);
  auto* rows = reinterpret_cast<int*>(smem + layout.rows);  // [positions_per_split] global slot, -1 = masked

  const CtaWork work(p);
  const int split = work.split, token = work.token, head_group = work.head_group;
  const int head_base = head_group * kHeads;
  const int tid = threadIdx.x, lane = tid & 31;
  const int group = lane >> 2, quad = lane & 3;  // accumulator fragment coordinates
  const int warpgroup = __shfl_sync(0xffffffffu, tid / kGroupThreads, 0);  // warp-uniform (uniform registers)
  const int warp = (tid / 32) % 4;
  const int positions = p.positions_per_split;
  const int num_tiles = positions / kTile;
  wait_for_prerequisite_grids();

  float out_acc[kOutTiles][kAcc];  // out^T: m-tile j, rows (columns 64 j + 16 warp + group, + 8), the heads
  float row_max[kLaneHeads], row_sum[kLaneHeads];  // the lane's heads k
#pragma unroll
  for (int k = 0; k < kLaneHeads; ++k) row_max[k] = kNegInf, row_sum[k] = 0.f;
  if (warpgroup >= 1) {
    // The producers: this split's positions -> global slot rows (masked entries -1), then the tiles.
    if constexpr (kSetRegisters) setmaxnreg_dec<kWideProducerRegisters>();
    constexpr int kProducerThreads = kProducerGroups<kFp8> * kGroupThreads;
    translate_positions<kProducerThreads>(p, token, split * positions, positions, rows);
    sync_named(kProducerBarrier, kProducerThreads);  // rows[] complete (the consumers see them behind kFullBarrier)
    if constexpr (kFp8)
      produce_fp8(p, rows, tiles, num_tiles, warpgroup - 1);
    else
      produce_bf16_tiles<kTile, kStages, kFullBarrier, kEmptyBarrier, kStageThreads>(p, rows, tiles, num_tiles);
  } else {
    if constexpr (kSetRegisters) setmaxnreg_inc<kWideConsumerRegisters>();
    // 1. The heads' queries -> shared memory as atoms (heads past N: zeros).
    stage_query_atoms<kHeads, kGroupThreads>(p, token, head_base, tid, q);
    fence_proxy_async();
    sync_named(kConsumerBarrier, kGroupThreads);

#pragma unroll
    for (int j = 0; j < kOutTiles; ++j)
#pragma unroll
      for (int i = 0; i < kAcc; ++i) out_acc[j][i] = 0.f;
    // K-major operands: a k-step of 16 columns is 32 bytes into an atom's rows, 8-row groups 1024 apart.
    // V^T is the tile read MN-major (its 64 columns of an atom are one 128-byte row; 8 positions 1024 apart).
    const SmemDescriptor query_desc(q, 16, 1024);
    const SmemDescriptor key_desc(tiles, 16, 1024);
    const SmemDescriptor value_desc(tiles, kTileAtomBytes, 1024);
    const SmemDescriptor prob_desc(prob, 16, 1024);

    for (int c = 0; c < num_tiles; ++c) {
      const int s = c % kStages;
      sync_named(kFullBarrier + s, kStageThreads);  // the producers have filled stage s
      const int stage = s * kTileBytes;

      // 2. S^T = K . Q^T: the tile's 64 positions x kHeads heads over all 576 columns.
      float score[kAcc];
#pragma unroll
      for (int i = 0; i < kAcc; ++i) score[i] = 0.f;
      keep_in_registers(score);  // the zeros are written before the fence
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kSlotElems / 16; ++ks) {
        const int atom = ks / (kAtomCols / 16), within = (ks % (kAtomCols / 16)) * 32;
        wgmma_heads<kHeads, 0>(score, key_desc.at(stage + atom * kTileAtomBytes + within),
                               query_desc.at(atom * kQAtomBytes<kHeads> + within));
      }
      wgmma_commit();
      wgmma_wait_all();
      keep_in_registers(score);

      // 3. Online softmax over positions, per head: this lane holds positions 16 warp + group (+ 8) of
      //    its heads k; the tile's maximum of a head is shared through `exchange`.
      const int* tile_rows = rows + c * kTile + 16 * warp + group;
      const bool valid[2] = {tile_rows[0] >= 0, tile_rows[8] >= 0};
      float tile_max[kLaneHeads];
#pragma unroll
      for (int k = 0; k < kLaneHeads; ++k) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& x = score[register_of(k, h)];
          x = valid[h] ? x * p.scale_log2 : kNegInf;
        }
        tile_max[k] = fmaxf(score[register_of(k, 0)], score[register_of(k, 1)]);
      }
      combine_over_positions<kHeads>(tile_max, exchange, warp, group, quad,
                                     [](float a, float b) { return fmaxf(a, b); });
      float alpha[kLaneHeads];
      bool moved = false;  // some head of the lane moved its maximum
#pragma unroll
      for (int k = 0; k < kLaneHeads; ++k) {
        const int head = head_of(register_of(k, 0), quad);
        // Lazy on fp8_ds_mla only, as in the other kernels (docs/decode-kernels.md).
        const float new_max = kFp8 ? lazy_running_max(row_max[k], tile_max[k]) : fmaxf(row_max[k], tile_max[k]);
        const float base = new_max == kNegInf ? 0.f : new_max;  // no (-inf) - (-inf)
        alpha[k] = exp2f(row_max[k] - base);                     // 0 while nothing was valid
        moved |= alpha[k] != 1.f;
        row_max[k] = new_max;
        float sum = 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float e = exp2f(score[register_of(k, h)] - base);
          sum += e;
          const int position = 16 * warp + group + 8 * h;  // P^T row `head`, column `position`
          *reinterpret_cast<__nv_bfloat16*>(prob + atom_offset(head, position & ~7, kHeads) + (position & 7) * 2) =
              __float2bfloat16_rn(e);
        }
        row_sum[k] = row_sum[k] * alpha[k] + sum;  // this lane's positions; the rest are added at the end
      }
      fence_proxy_async();  // P^T, for wgmma
      sync_named(kConsumerBarrier, kGroupThreads);

      // 4. out^T = alpha * out^T + V^T . P^T (skipped while no head of the warp moved its maximum).
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int j = 0; j < kOutTiles; ++j)
#pragma unroll
          for (int k = 0; k < kLaneHeads; ++k) {
            out_acc[j][register_of(k, 0)] *= alpha[k];
            out_acc[j][register_of(k, 1)] *= alpha[k];
          }
      }
#pragma unroll
      for (int j = 0; j < kOutTiles; ++j) keep_in_registers(out_acc[j]);
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < kOutTiles; ++j)
#pragma unroll
        for (int kk = 0; kk < kTile / 16; ++kk)
          wgmma_heads<kHeads, 1>(out_acc[j], value_desc.at(stage + j * kTileAtomBytes + kk * 2048),
                                 prob_desc.at(kk * 32));
      wgmma_commit();
      wgmma_wait_all();
#pragma unroll
      for (int j = 0; j < kOutTiles; ++j) keep_in_registers(out_acc[j]);
      if (c + kStages < num_tiles) arrive_named(kEmptyBarrier + s, kStageThreads);  // the producers may refill it
    }

    // 5. Each head's sum over the lanes and warps holding its positions; the normalized output to
    //    shared memory, [kHeads][kOutStride] fp32. The tiles are free: every tile was consumed, and the
    //    producers wrote their last one before this consumer waited for it.
    combine_over_positions<kHeads>(row_sum, exchange, warp, group, quad, [](float a, float b) { return a + b; });
    float inv[kLaneHeads];
#pragma unroll
    for (int k = 0; k < kLaneHeads; ++k) {
      const int head = head_of(register_of(k, 0), quad);
      const float l = row_sum[k];
      inv[k] = l != 0.f ? 1.f / l : 0.f;  // NaN propagates
      if (warp == 0 && group == 0) cta_lse[head] = l != 0.f ? row_max[k] + log2f(l) : kNegInf;
    }
    auto* staged = reinterpret_cast<float*>(tiles);
#pragma unroll
    for (int j = 0; j < kOutTiles; ++j)
#pragma unroll
      for (int k = 0; k < kLaneHeads; ++k)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = register_of(k, h), col = 64 * j + 16 * warp + group + 8 * ((r >> 1) & 1);
          staged[head_of(r, quad) * kOutStride + col] = out_acc[j][r] * inv[k];
        }
  }
  __syncthreads();  // the staged output and LSEs are complete

  // 6. The output (one split), or this split's partial (several; the last CTA to arrive merges them),
  //    written by every thread in float4s of consecutive columns.
  const auto* staged = reinterpret_cast<const float*>(tiles);
  constexpr int kVectorsPerHead = kKvLoraRank / 4;
  const int64_t group_index = static_cast<int64_t>(token) * p.head_groups + head_group;
  const int64_t split_index = group_index * p.num_splits + split;
#pragma unroll 4
  for (int v = tid; v < kHeads * kVectorsPerHead; v += kBlockThreads<kFp8>) {
    const int h = v / kVectorsPerHead, col = (v % kVectorsPerHead) * 4;
    const float4 x = *reinterpret_cast<const float4*>(staged + h * kOutStride + col);
    if (p.num_splits == 1) {
      if (head_base + h >= p.num_heads) continue;
      store_output(p, token, head_base + h, col, x);
      if (p.lse != nullptr && col == 0) p.lse[token * p.num_heads + head_base + h] = cta_lse[h] * kLn2;
    } else {
      __stcg(reinterpret_cast<float4*>(p.partial_out + (split_index * kHeads + h) * kKvLoraRank + col), x);
      if (col == 0) __stcg(p.partial_lse + split_index * kClusterSize * kHeads + h, cta_lse[h]);  // slot 0
    }
  }
  if (p.num_splits == 1 || !arrived_last(p, group_index, 0)) return;
  if (tid < kThreads) merge_splits<kHeads, kKvLoraRank, kMergeUnroll>(p, token, head_base, group_index, 0, 0);
}

template <bool kFp8, int kHeadTiles>
struct SwapAbKernel : Launcher<SwapAbKernel<kFp8, kHeadTiles>> {
  static constexpr auto kFunction = sparse_decode_swap_ab_kernel<kFp8, kHeadTiles>;
  static constexpr int kBlockThreads = swap_ab::kBlockThreads<kFp8>;
  static constexpr int kClusterCtas = kCluster;
  static constexpr bool kProgrammaticLaunch = false;
  static int shared_bytes(int positions_per_split) {
    return SharedLayout<kCtaHeads<kHeadTiles>>(positions_per_split).total;
  }
};

}  // namespace swap_ab
}  // namespace decode
}  // namespace sparse_mla
