// Sparse MLA decode on Hopper for 64 heads per CTA (N > 32, and 16 < N <= 32 at 2 <= T <= 128): producer
// warpgroups gather (and dequantize) each slot once for all heads, consumer warpgroups run wgmma. The
// kernel template and its entry points (cc/decode/wide/wide_kernel.h), instantiated in
// cc/decode/kernel_instances.bzl. Work decomposition, pipeline, split merge and their measurements:
// docs/decode-kernels.md.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/decode/components/bf16_registers.cuh"
#include "cc/decode/components/operand_atoms.cuh"
#include "cc/decode/components/cta_work.cuh"
#include "cc/decode/components/slot_gather.cuh"
#include "cc/decode/components/slot_translation.cuh"
#include "cc/decode/components/softmax.cuh"
#include "cc/decode/kernel_launcher.cuh"
#include "cc/decode/params.h"
#include "cc/decode/wide/wide.h"
#include "cc/decode/wide/wide_kernel.h"

namespace sparse_mla {
namespace decode {
namespace wide {

constexpr int kHeads = kHeadTileRows * kHeadTiles;      // 64 heads per CTA: the wgmma M
constexpr int kWarpgroups = 2;                          // consumers, each its half of the columns
constexpr int kConsumerThreads = 128 * kWarpgroups;
constexpr int kProducerThreads = 256;                   // two more warpgroups: gather (and dequantize)
constexpr int kBlockThreads = kConsumerThreads + kProducerThreads;
constexpr int kProducerRegisters = 40;                  // setmaxnreg: the producers give registers away ...
constexpr int kConsumerRegisters = 216;                 // ... to the consumers' 128 accumulators a lane
static_assert(kProducerThreads * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= 65536,
              "the register file of one SM");
constexpr int kNopePerGroup = kKvLoraRank / kWarpgroups;  // 256 c_kv columns
constexpr int kRopePerGroup = kRopeDim / kWarpgroups;     // 32 k_rope columns
constexpr int kStageAtomBytes = kCtaChunk * 128;        // one atom of the stage's 32 rows
constexpr int kStageBytes = kSlotAtoms * kStageAtomBytes;  // a bf16 operand stage: 36 KB
constexpr int kQAtomBytes = kHeads * 128;               // one atom of the 64 query rows
// Operand stages: bf16 slots are gathered straight into them (3: two chunks in flight while one is
// consumed); fp8_ds_mla slots land as stored in a ring of half-chunk stages (kRawStages of kRawRows
// slots: three half-chunks in flight while one is dequantized), and the producers dequantize each
// into one of 2 operand stages (one being filled while the consumers read the other).
template <bool kFp8>
constexpr int kOperandStages = kFp8 ? 2 : 3;
constexpr int kRawRows = kCtaChunk / 2;
constexpr int kRawStages = 4;
constexpr int kRawStageBytes = kRawRows * kFp8SlotBytes;
constexpr int kScoreTiles = kCtaChunk / 8;              // n-tiles of 8 positions per stage
constexpr int kOutTiles = kNopePerGroup / 8;            // n-tiles of 8 output columns per warpgroup
constexpr int kExchangeFloats = kScoreTiles * 4 * 32;   // one warp's partial scores (16 a lane)
static_assert(kCtaChunk == 32, "the score product is wgmma m64n32k16");

// Named barriers (0: unused, __syncthreads would need the producers too).
constexpr int kExchangeBarrier = 1;   // + head tile: the two warps holding the same heads (64 threads)
constexpr int kFullBarrier = 5;       // + operand stage: the stage is filled (producers arrive, consumers wait)
constexpr int kEmptyBarrier = 8;      // + operand stage: the stage is consumed (consumers arrive, producers wait)
constexpr int kConsumerBarrier = 11;  // the consumers' 256 threads
constexpr int kProducerBarrier = 12;  // the producers' 256 threads

// Byte offsets of the dynamic shared memory of one CTA, from its first 1024-byte boundary.
struct SharedLayout {
  int q, operand, raw, exchange, rows, total;
  __host__ __device__ SharedLayout(bool fp8, int positions_per_split) {
    q = 0;                                                              // kSlotAtoms atoms of 64 query rows
    operand = q + kSlotAtoms * kQAtomBytes;                             // operand stages (1024-aligned)
    raw = operand + (fp8 ? kOperandStages<true> : kOperandStages<false>) * kStageBytes;  // fp8: raw ring
    exchange = raw + (fp8 ? kRawStages * kRawStageBytes : 0);           // [8 warps][kExchangeFloats] fp32
    rows = exchange + 8 * kExchangeFloats * 4;                          // [positions_per_split] int32
    total = rows + positions_per_split * 4 + kAtomAlign;                // + alignment slack
  }
};

// The producers on the bf16 cache: each chunk's slots straight into operand stage c % 3 (bf16 slots as
// 9 atoms: 16-byte piece j -> chunk j % 8 of atom j / 8), two chunks in flight; a stage is refilled once
// the consumers have released it.
__device__ __forceinline__ void produce_bf16(const SparseDecodeParams& p, const int* rows, unsigned char* operand,
                                             int num_chunks) {
  constexpr int kStages = kOperandStages<false>;
  auto issue = [&](int chunk) {
    unsigned char* stage = operand + (chunk % kStages) * kStageBytes;
    gather_chunk<kCtaChunk, false, kProducerThreads>(
        p, rows + chunk * kCtaChunk, [=](int r, int part) { return stage + atom_offset(r, part * 8, kCtaChunk); });
  };
  start_gather_ring<kStages>(issue, num_chunks);
  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    cp_async_wait<kStages - 2>();  // this thread's copies of the chunk have landed
    fence_proxy_async();           // ... for wgmma too
    arrive_named(kFullBarrier + chunk % kStages, kBlockThreads);
    const int next = chunk + kStages - 1;
    if (next < num_chunks) {
      if (next >= kStages) sync_named(kEmptyBarrier + next % kStages, kBlockThreads);  // chunk next - 3 consumed
      issue(next);
    }
    cp_async_commit();
  }
}

// The producers on the fp8_ds_mla cache: slots land as stored in the ring of kRawStages half-chunks
// (three in flight), and each half-chunk is dequantized into its 16 rows of operand stage c % 2 (c_kv
// as bf16 atoms, k_rope copied into its atom); the stage is announced when both halves are in.
__device__ __forceinline__ void produce_fp8(const SparseDecodeParams& p, const int* rows, unsigned char* operand,
                                            unsigned char* raw, int num_chunks) {
  constexpr int kStages = kOperandStages<true>;
  constexpr int kPiecesPerThread = kRawRows * (kKvLoraRank / 16) / kProducerThreads;  // 2 of 16 c_kv values
  const int t = threadIdx.x % kProducerThreads;
  const int num_halves = 2 * num_chunks;
  auto issue = [&](int half) {
    unsigned char* slots = raw + (half % kRawStages) * kRawStageBytes;
    gather_chunk<kRawRows, true, kProducerThreads>(
        p, rows + half * kRawRows, [=](int r, int part) { return slots + r * kFp8SlotBytes + part * 16; });
  };
  start_gather_ring<kRawStages>(issue, num_halves);
  for (int half = 0; half < num_halves; ++half) {
    cp_async_wait<kRawStages - 2>();
    sync_named(kProducerBarrier, kProducerThreads);  // the half has landed for all; all are done with the last
    if (half + kRawStages - 1 < num_halves) issue(half + kRawStages - 1);  // into the last one's stage
    cp_async_commit();
    const int chunk = half / 2, first_row = (half % 2) * kRawRows;
    if (half % 2 == 0 && chunk >= kStages) sync_named(kEmptyBarrier + chunk % kStages, kBlockThreads);
    const unsigned char* slots = raw + (half % kRawStages) * kRawStageBytes;
    // The half's 16 rows of operand stage c % 2: row r of the half is row first_row + r of the stage, which
    // lies first_row * 128 bytes further in every atom (first_row: 0 or 16, whole swizzle periods), so
    // the offsets below do not depend on the half.
    unsigned char* stage = operand + (chunk % kStages) * kStageBytes + first_row * 128;
    // c_kv: lane l takes row l % 16 (656-byte rows: 8 consecutive lanes read 8 distinct bank groups,
    // and the swizzle spreads their writes alike).
#pragma unroll
    for (int k = 0; k < kPiecesPerThread; ++k) {
      const int i = t + k * kProducerThreads, row = i % kRawRows, piece = i / kRawRows;
      const unsigned char* slot = slots + row * kFp8SlotBytes;
      const uint4 bytes = *reinterpret_cast<const uint4*>(slot + piece * 16);
      const float scale = reinterpret_cast<const float*>(slot + kFp8ScalesOffset)[piece * 16 / kFp8ScaleGroup];
      const uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
      uint2 pairs[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) pairs[w] = dequantize_word(words[w], scale);
      *reinterpret_cast<uint4*>(stage + atom_offset(row, piece * 16, kCtaChunk)) =
          make_uint4(pairs[0].x, pairs[0].y, pairs[1].x, pairs[1].y);
      *reinterpret_cast<uint4*>(stage + atom_offset(row, piece * 16 + 8, kCtaChunk)) =
          make_uint4(pairs[2].x, pairs[2].y, pairs[3].x, pairs[3].y);
    }
    if (t < kRawRows * kRopeDim / 8) {  // k_rope: one 16-byte piece (8 values) a thread (128 threads) into its atom
      const int row = t % kRawRows, part = t / kRawRows;
      *reinterpret_cast<uint4*>(stage + kKvAtoms * kStageAtomBytes + atom_offset(row, part * 8, kCtaChunk)) =
          *reinterpret_cast<const uint4*>(slots + row * kFp8SlotBytes + kFp8RopeOffset + part * 16);
    }
    if (half % 2 == 1) {
      fence_proxy_async();  // this thread's writes, for wgmma
      arrive_named(kFullBarrier + chunk % kStages, kBlockThreads);
    }
  }
}

// A consumer lane's share of its CTA's normalized partial output as bf16: `row` points at its
// warpgroup's 256 columns of one row of the split's [64 heads][512] block, filled from this lane's
// accumulator columns of that row (half r of out_acc; columns
// 8 nt + 2 quad + {0, 1} of its warpgroup's 256). The 4 lanes of a quad transpose their pairs of 4
// consecutive n-tiles (3 shuffles), so that each stores the 8 columns of one n-tile as one 16-byte
// store (a warp's store: 64 contiguous bytes of each of its 8 rows; 4-byte stores of the pairs were
// slower than fp32, docs/decode-kernels.md).
__device__ __forceinline__ void store_partial_bf16(__nv_bfloat16* row, const float (&out_acc)[kOutTiles * 4], int r,
                                                   float inv, int quad) {
#pragma unroll
  for (int k = 0; k < kOutTiles / 4; ++k) {
    uint32_t mine[4], columns[4];  // mine[j]: n-tile 4k + j, columns 2 quad, +1; columns[j]: n-tile 4k + quad, 2j, +1
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      mine[j] = pack_bf16(out_acc[(4 * k + j) * 4 + 2 * r] * inv, out_acc[(4 * k + j) * 4 + 2 * r + 1] * inv);
      columns[j] = mine[j];  // j = quad stays
    }
#pragma unroll
    for (int s = 1; s < 4; ++s) {  // lane quad ^ s wants my pair of its n-tile; I want its pair of mine
      const int other = quad ^ s;
      uint32_t send = mine[0];
#pragma unroll
      for (int j = 1; j < 4; ++j) send = j == other ? mine[j] : send;  // registers: no dynamic indexing
      const uint32_t got = __shfl_xor_sync(0xffffffffu, send, s);
#pragma unroll
      for (int j = 0; j < 4; ++j) columns[j] = j == other ? got : columns[j];
    }
    __stcg(reinterpret_cast<uint4*>(row + 8 * (4 * k + quad)), make_uint4(columns[0], columns[1], columns[2], columns[3]));
  }
}

// kBf16Partials: the partial outputs are stored as bf16 (the launch takes this instantiation from
// kBf16PartialMinSplits splits on), else as fp32. Two instantiations, not a branch: both stores in one
// kernel slow the bf16 cache's main loop (docs/decode-kernels.md).
template <bool kFp8, bool kBf16Partials>
__global__ void __launch_bounds__(kBlockThreads, 1) sparse_decode_wide_kernel(const SparseDecodeParams p) {
  constexpr int kStages = kOperandStages<kFp8>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const SharedLayout layout(kFp8, p.positions_per_split);
  allow_dependent_launch();  // the split merge's CTAs may take SMs as this grid's CTAs leave them
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + ((kAtomAlign - raw_addr % kAtomAlign) % kAtomAlign);
  unsigned char* q = smem + layout.q;
  unsigned char* operand = smem + layout.operand;
  auto* exchange = reinterpret_cast<float*>(smem + layout.exchange);
  auto* rows = reinterpret_cast<int*>(smem + layout.rows);  // [positions_per_split] global slot, -1 = masked

  const CtaWork work(p);
  const int split = work.split, token = work.token, head_group = work.head_group;
  const int head_base = head_group * kHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = lane >> 2, quad = lane & 3;  // accumulator fragment coordinates
  // The warpgroup index through a shuffle: the compiler then knows it warp-uniform and keeps the wgmma
  // descriptors built from it in uniform registers (measured: docs/decode-kernels.md).
  const int warpgroup = __shfl_sync(0xffffffffu, warp / 4, 0), head_tile = warp % 4;
  const int positions = p.positions_per_split;
  const int num_chunks = positions / kCtaChunk;

  // The producers: this split's positions -> global slot rows (masked entries -1), then the stages.
  if (warpgroup >= kWarpgroups) {
    setmaxnreg_dec<kProducerRegisters>();
    translate_positions<kProducerThreads>(p, token, split * positions, positions, rows);
    sync_named(kProducerBarrier, kProducerThreads);  // rows[] complete (the consumers see them behind kFullBarrier)
    if constexpr (kFp8)
      produce_fp8(p, rows, operand, smem + layout.raw, num_chunks);
    else
      produce_bf16(p, rows, operand, num_chunks);
    return;
  }
  setmaxnreg_inc<kConsumerRegisters>();

  // 1. The 64 heads' queries -> shared memory as atoms (heads past N: zeros).
  stage_query_atoms<kHeads, kConsumerThreads>(p, token, head_base, tid, q);
  fence_proxy_async();
  sync_named(kConsumerBarrier, kConsumerThreads);

  float out_acc[kOutTiles * 4];
#pragma unroll
  for (int i = 0; i < kOutTiles * 4; ++i) out_acc[i] = 0.f;
  QuadRowSoftmax<kScoreTiles, kFp8> softmax;  // rows group and group + 8 of this warp's heads

  // This warpgroup's operands of the score product (its 4 c_kv atoms and its half of the k_rope atom, of the
  // queries and of operand stage 0) and of P . V (its c_kv atoms of stage 0, MN-major: N-atoms
  // kStageAtomBytes apart, k groups of 8 positions 1024 apart).
  const int own_atoms = warpgroup * (kNopePerGroup / kAtomCols), own_rope = warpgroup * kRopePerGroup * 2;
  const SmemDescriptor q_nope_desc(q + own_atoms * kQAtomBytes, 16, 1024);
  const SmemDescriptor q_rope_desc(q + kKvAtoms * kQAtomBytes + own_rope, 16, 1024);
  const SmemDescriptor kv_nope_desc(operand + own_atoms * kStageAtomBytes, 16, 1024);
  const SmemDescriptor kv_rope_desc(operand + kKvAtoms * kStageAtomBytes + own_rope, 16, 1024);
  const SmemDescriptor value_desc(operand + own_atoms * kStageAtomBytes, kStageAtomBytes, 1024);

  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    const int s = chunk % kStages;
    sync_named(kFullBarrier + s, kBlockThreads);  // the producers have filled stage s
    const int stage = s * kStageBytes;  // operand stage s, in bytes from stage 0

    // 2. This warpgroup's partial scores over its 256 + 32 columns, all 64 heads (K-major operands;
    //    a k-step of 16 columns is 32 bytes into an atom's rows).
    float score[kScoreTiles * 4];
#pragma unroll
    for (int i = 0; i < kScoreTiles * 4; ++i) score[i] = 0.f;
    keep_in_registers(score);  // the zeros are written before the fence (PTX: no accumulator access after it)
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kNopePerGroup / 16; ++ks) {  // atom ks / 4 of the warpgroup's, 32 bytes a k-step
      const int atom = ks / (kAtomCols / 16), within = (ks % (kAtomCols / 16)) * 32;
      wgmma_m64n32k16_ss<0>(score, q_nope_desc.at(atom * kQAtomBytes + within),
                            kv_nope_desc.at(stage + atom * kStageAtomBytes + within));
    }
#pragma unroll
    for (int ks = 0; ks < kRopePerGroup / 16; ++ks)
      wgmma_m64n32k16_ss<0>(score, q_rope_desc.at(ks * 32), kv_rope_desc.at(stage + ks * 32));
    wgmma_commit();
    wgmma_wait_all();
    keep_in_registers(score);

    // 3. The two warps holding these heads add their partials (a warp rewrites its partials only
    //    after the next kFullBarrier, which its partner reaches after reading these).
    {
      auto* tile_partials = reinterpret_cast<float4*>(exchange + head_tile * kWarpgroups * kExchangeFloats);
#pragma unroll
      for (int v = 0; v < kScoreTiles; ++v)  // lane-major float4s: 4 conflict-free 16-byte stores
        tile_partials[(warpgroup * kScoreTiles + v) * 32 + lane] =
            make_float4(score[4 * v], score[4 * v + 1], score[4 * v + 2], score[4 * v + 3]);
      sync_named(kExchangeBarrier + head_tile, 32 * kWarpgroups);
#pragma unroll
      for (int v = 0; v < kScoreTiles; ++v) {  // (a + b = b + a: both warps hold the same sums)
        const float4 other = tile_partials[((1 - warpgroup) * kScoreTiles + v) * 32 + lane];
        score[4 * v] += other.x;
        score[4 * v + 1] += other.y;
        score[4 * v + 2] += other.z;
        score[4 * v + 3] += other.w;
      }
    }

    // 4. Online softmax in registers (lazy maximum on fp8_ds_mla only: on the bf16 cache it misses FlashInfer's
    //    precision bar, docs/decode-kernels.md); the probabilities become the register A operand of P . V:
    //    k-step kk takes n-tiles 2 kk and 2 kk + 1.
    float alpha[2];
    uint32_t prob[kCtaChunk / 16][4];
    softmax.step(score, rows + chunk * kCtaChunk, quad, p.scale_log2, alpha,
                 [&](int nt, float e0, float e1, float e2, float e3) {
                   prob[nt / 2][(nt % 2) * 2] = pack_bf16(e0, e1);
                   prob[nt / 2][(nt % 2) * 2 + 1] = pack_bf16(e2, e3);
                 });

    // 5. out[:, cols] = alpha * out + P . c_kv[:, cols] (MN-major B: N-atoms 4096 bytes apart, k
    //    groups of 8 positions 1024 apart).
    // The rescale is skipped while no row of the warp has moved its maximum (alpha = 1 exactly, which
    // lazy_running_max makes the common case on fp8_ds_mla): 128 multiplications a lane, the longest
    // serial step of the softmax once the maxima settle.
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int nt = 0; nt < kOutTiles; ++nt) {
        out_acc[nt * 4] *= alpha[0];
        out_acc[nt * 4 + 1] *= alpha[0];
        out_acc[nt * 4 + 2] *= alpha[1];
        out_acc[nt * 4 + 3] *= alpha[1];
      }
    }
    keep_in_registers(out_acc);  // rescaled before the fence
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kCtaChunk / 16; ++kk)
#pragma unroll
      for (int h = 0; h < 2; ++h)  // columns [128 h, 128 h + 128) of the warpgroup's 256 (C7602: see the top)
        wgmma_m64n128k16_rs(out_acc + 64 * h, prob[kk], value_desc.at(stage + 2 * h * kStageAtomBytes + kk * 2 * 1024));
    wgmma_commit();
    wgmma_wait_all();
    keep_in_registers(out_acc);
    if (chunk + kStages < num_chunks) arrive_named(kEmptyBarrier + s, kBlockThreads);  // the producers may refill it
  }

  // 6. Normalize; write the output (one split) or this split's partial (several; the last CTA merges).
  float inv[2], lse[2];
  softmax.finish(inv, lse);
  const int col0 = warpgroup * kNopePerGroup + 2 * quad;
  if (p.num_splits == 1) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int head = head_base + head_tile * kHeadTileRows + group + 8 * r;
      if (head >= p.num_heads) continue;
      auto* out = static_cast<__nv_bfloat16*>(p.out) + token * p.out_token_stride + head * p.out_head_stride + col0;
#pragma unroll
      for (int nt = 0; nt < kOutTiles; ++nt)
        *reinterpret_cast<uint32_t*>(out + nt * 8) =
            pack_bf16(out_acc[nt * 4 + 2 * r] * inv[r], out_acc[nt * 4 + 2 * r + 1] * inv[r]);
      if (p.lse != nullptr && warpgroup == 0 && quad == 0) p.lse[token * p.num_heads + head] = lse[r] * kLn2;
    }
    return;
  }
  const int64_t group_index = static_cast<int64_t>(token) * p.head_groups + head_group;
  const int64_t split_index = group_index * p.num_splits + split;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = head_tile * kHeadTileRows + group + 8 * r;
    const int64_t row = (split_index * kHeads + h) * kKvLoraRank + warpgroup * kNopePerGroup;
    if constexpr (kBf16Partials) {
      store_partial_bf16(reinterpret_cast<__nv_bfloat16*>(p.partial_out) + row, out_acc, r, inv[r], quad);
    } else {
      float* partial = p.partial_out + row + 2 * quad;
#pragma unroll
      for (int nt = 0; nt < kOutTiles; ++nt)
        __stcg(reinterpret_cast<float2*>(partial + nt * 8),
               make_float2(out_acc[nt * 4 + 2 * r] * inv[r], out_acc[nt * 4 + 2 * r + 1] * inv[r]));
    }
    if (warpgroup == 0 && quad == 0) __stcg(p.partial_lse + split_index * kClusterSize * kHeads + h, lse[r]);  // slot 0
  }
}

template <bool kFp8, bool kBf16Partials>
struct WideKernel : Launcher<WideKernel<kFp8, kBf16Partials>> {
  static constexpr auto kFunction = sparse_decode_wide_kernel<kFp8, kBf16Partials>;
  static constexpr int kBlockThreads = wide::kBlockThreads;
  static constexpr int kClusterCtas = kCluster;
  static constexpr bool kProgrammaticLaunch = false;  // docs/decode-kernels.md: no faster, at N = 128 T = 1 slower
  static int shared_bytes(int positions_per_split) { return SharedLayout(kFp8, positions_per_split).total; }
};

template <bool kFp8, bool kBf16Partials>
int WideKernelEntry<kFp8, kBf16Partials>::total_shared_bytes(int positions_per_split) {
  return WideKernel<kFp8, kBf16Partials>::total_shared_bytes(positions_per_split);
}

template <bool kFp8, bool kBf16Partials>
cudaError_t WideKernelEntry<kFp8, kBf16Partials>::launch(const SparseDecodeParams& params, cudaStream_t stream) {
  return WideKernel<kFp8, kBf16Partials>::launch(params, stream);
}

template <bool kFp8, bool kBf16Partials>
cudaError_t WideKernelEntry<kFp8, kBf16Partials>::max_active_ctas(int positions_per_split, int* ctas) {
  return WideKernel<kFp8, kBf16Partials>::max_active_clusters(positions_per_split, ctas);
}

}  // namespace wide
}  // namespace decode
}  // namespace sparse_mla
