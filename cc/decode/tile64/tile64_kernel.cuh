// Sparse MLA decode on Hopper for 64 heads per CTA on 64-position tiles, one CTA per (split, token, head group):
// warpgroup 0 scores each tile and runs the softmax, P goes to both consumer warpgroups through shared memory,
// each runs P . V for 256 of the 512 output columns; producer warpgroups gather (and dequantize) the tiles.
// Work decomposition and measurements: docs/decode-kernels.md.
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
#include "cc/decode/tile64/tile64.h"

namespace sparse_mla {
namespace decode {
namespace tile64 {

constexpr int kHeads = kHeadTileRows * kHeadTiles;  // 64: the M of both products
constexpr int kTile = kCtaChunk;                    // 64 positions
constexpr int kGroupThreads = 128;                  // one warpgroup
// Producer warpgroups: fp8_ds_mla 2 (they dequantize each tile together), bf16 1 (cp.async alone).
template <bool kFp8>
constexpr int kProducerGroups = kFp8 ? 2 : 1;
template <bool kFp8>
constexpr int kBlockThreads = (2 + kProducerGroups<kFp8>) * kGroupThreads;
constexpr int kConsumerThreads = 2 * kGroupThreads;
constexpr int kTileAtomBytes = kTile * 128;              // one atom (64 columns) of a tile's 64 rows
constexpr int kTileBytes = kSlotAtoms * kTileAtomBytes;  // a bf16 tile of 64 slots: 72 KiB
constexpr int kQAtomBytes = kHeads * 128;                // one atom of the 64 query rows
constexpr int kStages = 2;                               // tiles: one consumed while the next is filled
// Registers a thread of each role keeps (setmaxnreg; 4 x 128 threads share 64K on fp8_ds_mla): consumers need
// their 128 accumulators and, in warpgroup 0, 32 scores without serializing wgmma (ptxas C7512 at 176).
constexpr int kConsumerRegisters = 192;
template <bool kFp8>
constexpr int kProducerRegisters = kFp8 ? 64 : 120;

// Named barriers (0: __syncthreads).
constexpr int kFullBarrier = 1;      // + stage: filled (producers arrive, consumers wait)
constexpr int kEmptyBarrier = 3;     // + stage: consumed (consumers arrive, producers wait)
constexpr int kProbBarrier = 5;      // + stage: P and the alphas written (the consumers)
constexpr int kConsumerBarrier = 7;  // the consumers' 256 threads
constexpr int kScorerBarrier = 8;    // warpgroup 0
constexpr int kProducerBarrier = 9;  // the producers' threads

// Byte offsets of the dynamic shared memory of one CTA, from its first 1024-byte boundary: 226 KiB at 2048
// positions (Hopper allows 227 KiB a CTA).
struct SharedLayout {
  int q = 0, tiles = 0, alpha = 0, stats = 0, rows = 0, total = 0;
  __host__ __device__ constexpr explicit SharedLayout(int positions_per_split) {
    q = 0;                                  // kSlotAtoms atoms of the 64 query rows
    tiles = q + kSlotAtoms * kQAtomBytes;   // kStages tiles; P overwrites a stage's k_rope atom once scored
    alpha = tiles + kStages * kTileBytes;   // [kStages][64] fp32
    stats = alpha + kStages * kHeads * 4;   // [64] 1 / sum, [64] base-2 LSE
    rows = stats + 2 * kHeads * 4;          // [positions_per_split] int32
    total = rows + positions_per_split * 4 + kAtomAlign;  // + alignment slack
  }
};
static_assert(SharedLayout(kMaxPositions).total <= 232448, "one split of kMaxPositions fits an H200 CTA (227 KiB)");

// Two producer warpgroups on fp8_ds_mla, each slot dequantized in the stage it lands in: tile c's e4m3 c_kv
// (64 x 512 bytes) lands in its stage's c_kv atoms 4..7, its scales ([64][4] fp32) in atom 0, its k_rope in the
// k_rope atom (cp.async: no registers hold bytes in flight); then warp w (of 8) reads rows [8 w, 8 w + 8) (lane l:
// bytes [16 l, 16 l + 16) of each) and their scales and, once every warp has read, writes them as bf16 to atoms
// 0..7. Tile c + 1 is issued once tile c is written and stage (c + 1) % 2 consumed (issued before tile c's
// dequantization, it makes the consumers wait for it: docs/decode-kernels.md).
__device__ __forceinline__ void produce_fp8(const SparseDecodeParams& p, const int* rows, unsigned char* tiles,
                                            int num_tiles) {
  constexpr int kThreads = kProducerGroups<true> * kGroupThreads;
  // 8 threads a slot, 32 slots a pass: a warp's copies read 128 contiguous bytes of each of 4 slots (4 threads a
  // slot, 8 slots a warp, was 5-9 % slower: docs/decode-kernels.md).
  constexpr int kThreadsPerSlot = 8, kSlotsPerPass = kThreads / kThreadsPerSlot;
  constexpr int kValuePieces = kKvLoraRank / 16, kPieces = kValuePieces + kRopeDim / 8;  // 32 + 8 of 16 bytes
  const int t = threadIdx.x % kThreads, lane = t % 32, warp = t / 32;
  auto issue = [&](int c) {
    unsigned char* tile = tiles + (c % kStages) * kTileBytes;
    unsigned char* raw = tile + 4 * kTileAtomBytes;
#pragma unroll
    for (int first = 0; first < kTile; first += kSlotsPerPass) {
      const int r = first + t / kThreadsPerSlot, row = rows[c * kTile + r];
      const unsigned char* src = cache_slot<true>(p, row);  // masked rows: zero-filled, never read
#pragma unroll
      for (int piece = t % kThreadsPerSlot; piece < kPieces; piece += kThreadsPerSlot) {
        if (piece < kValuePieces)
          cp_async_16(raw + r * kKvLoraRank + 16 * piece, src + 16 * piece, row >= 0);
        else
          cp_async_16(tile + atom_offset(r, kKvLoraRank + 8 * (piece - kValuePieces), kTile),
                      src + kFp8RopeOffset + 16 * (piece - kValuePieces), row >= 0);
      }
      if (t % kThreadsPerSlot == 0) cp_async_16(tile + 16 * r, src + kFp8ScalesOffset, row >= 0);
    }
  };
  if (num_tiles > 0) issue(0);
  cp_async_commit();
  for (int c = 0; c < num_tiles; ++c) {
    unsigned char* tile = tiles + (c % kStages) * kTileBytes;
    const unsigned char* raw = tile + 4 * kTileAtomBytes;
    cp_async_wait<0>();
    sync_named(kProducerBarrier, kThreads);  // every producer's copies of tile c have landed
    uint4 values[8];
    float scale[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = 8 * warp + i;
      values[i] = *reinterpret_cast<const uint4*>(raw + r * kKvLoraRank + 16 * lane);
      scale[i] = reinterpret_cast<const float*>(tile)[4 * r + lane / 8];
    }
    // Every warp has read atoms 4..7 and the scales before they are overwritten.
    sync_named(kProducerBarrier, kThreads);
    // Lanes of odd atoms store their halves the other way round: a quarter warp's stores meet 8 bank groups.
    const int col = 16 * lane;
    const bool swapped = (lane / 4) % 2;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = 8 * warp + i;
      uint4 lo, hi;
      dequantize_piece(values[i], scale[i], lo, hi);
      *reinterpret_cast<uint4*>(tile + atom_offset(r, col + (swapped ? 8 : 0), kTile)) = swapped ? hi : lo;
      *reinterpret_cast<uint4*>(tile + atom_offset(r, col + (swapped ? 0 : 8), kTile)) = swapped ? lo : hi;
    }
    fence_proxy_async();  // the bf16 atoms and the landed k_rope, for wgmma
    arrive_named(kFullBarrier + c % kStages, kBlockThreads<true>);
    if (c + 1 < num_tiles) {
      if (c + 1 >= kStages) sync_named(kEmptyBarrier + (c + 1) % kStages, kBlockThreads<true>);  // tile c - 1 consumed
      issue(c + 1);
    }
    cp_async_commit();
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kBlockThreads<kFp8>, 1) sparse_decode_tile64_kernel(const SparseDecodeParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const SharedLayout layout(p.positions_per_split);
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  allow_dependent_launch();  // the split merge's CTAs may take SMs as this grid's CTAs leave them
  unsigned char* smem = smem_raw + ((kAtomAlign - raw_addr % kAtomAlign) % kAtomAlign);
  unsigned char* q = smem + layout.q;
  unsigned char* tiles = smem + layout.tiles;
  auto* alpha_smem = reinterpret_cast<float*>(smem + layout.alpha);
  auto* stats = reinterpret_cast<float*>(smem + layout.stats);
  auto* rows = reinterpret_cast<int*>(smem + layout.rows);

  const CtaWork work(p);
  const int token = work.token, head_base = work.head_group * kHeads;
  const int tid = threadIdx.x, lane = tid & 31;
  const int group = lane >> 2, quad = lane & 3;
  const int warpgroup = __shfl_sync(0xffffffffu, tid / kGroupThreads, 0);
  const int warp = (tid / 32) % 4;
  const int positions = p.positions_per_split;
  const int num_tiles = positions / kTile;

  if (warpgroup >= 2) {
    constexpr int kProducerThreads = kProducerGroups<kFp8> * kGroupThreads;
    setmaxnreg_dec<kProducerRegisters<kFp8>>();
    translate_positions<kProducerThreads>(p, token, work.split * positions, positions, rows);
    sync_named(kProducerBarrier, kProducerThreads);
    if constexpr (kFp8)
      produce_fp8(p, rows, tiles, num_tiles);
    else
      produce_bf16_tiles<kTile, kStages, kFullBarrier, kEmptyBarrier, kBlockThreads<false>>(p, rows, tiles, num_tiles);
    return;
  }
  setmaxnreg_inc<kConsumerRegisters>();

  // The 64 heads' queries -> shared memory as atoms (heads past N: zeros).
  stage_query_atoms<kHeads, kConsumerThreads>(p, token, head_base, tid, q);
  fence_proxy_async();
  sync_named(kConsumerBarrier, kConsumerThreads);

  float out_acc[2][64];  // columns 256 warpgroup + 128 h + 8 nt + 2 quad + {0, 1}, rows group / group + 8
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) out_acc[h][i] = 0.f;
  // Lazy maximum on fp8_ds_mla only: on the bf16 cache it misses FlashInfer's precision bar (docs/decode-kernels.md).
  QuadRowSoftmax<kTile / 8, kFp8> softmax;  // warpgroup 0's
  // K-major operands: a k-step of 16 columns is 32 bytes into an atom's rows, 8-row groups 1024 apart. V is the
  // tile read MN-major (its 64 columns of an atom are one 128-byte row; 8 positions 1024 apart).
  const SmemDescriptor query_desc(q, 16, 1024);
  const SmemDescriptor key_desc(tiles, 16, 1024);
  const SmemDescriptor prob_desc(tiles + kKvAtoms * kTileAtomBytes, 16, 1024);
  const SmemDescriptor value_desc(tiles + warpgroup * 4 * kTileAtomBytes, kTileAtomBytes, 1024);
  const int row0 = 16 * warp + group;  // this lane's heads: row0, row0 + 8

  for (int c = 0; c < num_tiles; ++c) {
    const int s = c % kStages;
    const int stage = s * kTileBytes;
    sync_named(kFullBarrier + s, kBlockThreads<kFp8>);  // the producers have filled stage s
    float alpha[2];
    if (warpgroup == 0) {
      // 1. S = Q . K^T over the 576 columns (36 k-steps), 64 heads x 64 positions in registers.
      float score[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) score[i] = 0.f;
      keep_in_registers(score);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kSlotElems / 16; ++ks) {
        const int atom = ks / (kAtomCols / 16), within = (ks % (kAtomCols / 16)) * 32;
        wgmma_m64n64k16_ss(score, query_desc.at(atom * kQAtomBytes + within),
                           key_desc.at(stage + atom * kTileAtomBytes + within));
      }
      wgmma_commit();
      wgmma_wait_all();
      keep_in_registers(score);
      sync_named(kScorerBarrier, kGroupThreads);  // every warp's S has read the k_rope atom P overwrites
      // 2. The online softmax; P (bf16) into the stage's k_rope atom, each head's alpha beside it.
      unsigned char* prob = tiles + stage + kKvAtoms * kTileAtomBytes;
      softmax.step(score, rows + c * kTile, quad, p.scale_log2, alpha,
                   [&](int nt, float e0, float e1, float e2, float e3) {
                     const int col = nt * 8 + 2 * quad;
                     *reinterpret_cast<uint32_t*>(prob + atom_offset(row0, col & ~7, kHeads) + (col & 7) * 2) =
                         pack_bf16(e0, e1);
                     *reinterpret_cast<uint32_t*>(prob + atom_offset(row0 + 8, col & ~7, kHeads) + (col & 7) * 2) =
                         pack_bf16(e2, e3);
                   });
      if (quad == 0) {
        alpha_smem[s * kHeads + row0] = alpha[0];
        alpha_smem[s * kHeads + row0 + 8] = alpha[1];
      }
      fence_proxy_async();
      sync_named(kProbBarrier + s, kConsumerThreads);
    } else {
      sync_named(kProbBarrier + s, kConsumerThreads);
      alpha[0] = alpha_smem[s * kHeads + row0];
      alpha[1] = alpha_smem[s * kHeads + row0 + 8];
    }
    // 3. out[:, cols] = alpha * out + P . V[:, cols], the rescale skipped while no row of the warp moved its maximum.
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) {
          out_acc[h][nt * 4] *= alpha[0];
          out_acc[h][nt * 4 + 1] *= alpha[0];
          out_acc[h][nt * 4 + 2] *= alpha[1];
          out_acc[h][nt * 4 + 3] *= alpha[1];
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) keep_in_registers(out_acc[h]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk)
#pragma unroll
      for (int h = 0; h < 2; ++h)  // two m64n128 (bf16 could take one m64n256: docs/decode-kernels.md)
        wgmma_m64n128k16_ss(out_acc[h], prob_desc.at(stage + kk * 32),
                            value_desc.at(stage + 2 * h * kTileAtomBytes + kk * 2048));
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int h = 0; h < 2; ++h) keep_in_registers(out_acc[h]);
    if (c + kStages < num_tiles) arrive_named(kEmptyBarrier + s, kBlockThreads<kFp8>);  // the producers may refill it
  }

  // 4. Normalize and write the output (one split) or this split's fp32 partial and base-2 LSE (several: the split
  // merge kernel combines them); warpgroup 0 holds the row statistics.
  if (warpgroup == 0) {
    float inv[2], lse[2];
    softmax.finish(inv, lse);
    if (quad == 0)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        stats[row0 + 8 * r] = inv[r];
        stats[kHeads + row0 + 8 * r] = lse[r];
      }
  }
  sync_named(kConsumerBarrier, kConsumerThreads);
  const int64_t group_index = static_cast<int64_t>(token) * p.head_groups + work.head_group;
  const int64_t split_index = group_index * p.num_splits + work.split;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = row0 + 8 * r, head = head_base + h;
    const float inv = stats[h];
    if (p.num_splits > 1) {
      float* partial = p.partial_out + (split_index * kHeads + h) * kKvLoraRank + warpgroup * 256 + 2 * quad;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
          __stcg(reinterpret_cast<float2*>(partial + 128 * hh + nt * 8),
                 make_float2(out_acc[hh][nt * 4 + 2 * r] * inv, out_acc[hh][nt * 4 + 2 * r + 1] * inv));
      if (warpgroup == 0 && quad == 0) __stcg(p.partial_lse + split_index * kClusterSize * kHeads + h, stats[kHeads + h]);
      continue;
    }
    if (head >= p.num_heads) continue;
    auto* out = static_cast<__nv_bfloat16*>(p.out) + token * p.out_token_stride + head * p.out_head_stride +
                warpgroup * 256 + 2 * quad;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int nt = 0; nt < 16; ++nt)
        *reinterpret_cast<uint32_t*>(out + 128 * hh + nt * 8) =
            pack_bf16(out_acc[hh][nt * 4 + 2 * r] * inv, out_acc[hh][nt * 4 + 2 * r + 1] * inv);
    if (p.lse != nullptr && warpgroup == 0 && quad == 0) p.lse[token * p.num_heads + head] = stats[kHeads + h] * kLn2;
  }
}

template <bool kFp8>
struct Tile64Kernel : Launcher<Tile64Kernel<kFp8>> {
  static constexpr auto kFunction = sparse_decode_tile64_kernel<kFp8>;
  static constexpr int kBlockThreads = tile64::kBlockThreads<kFp8>;
  static constexpr int kClusterCtas = kCluster;
  static constexpr bool kProgrammaticLaunch = false;
  static int shared_bytes(int positions_per_split) { return SharedLayout(positions_per_split).total; }
};

}  // namespace tile64
}  // namespace decode
}  // namespace sparse_mla
