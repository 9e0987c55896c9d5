// Latency-first sparse MLA decode on Hopper for 16 or 32 heads per CTA: the kernel template and its
// entry points (cc/decode/narrow/narrow_kernel.h), instantiated one per file (kernel_instances.bzl). Work
// decomposition, slice and split merges and the fp8_ds_mla staging: docs/decode-kernels.md.
#pragma once

#include <cooperative_groups.h>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/decode/components/bf16_registers.cuh"
#include "cc/decode/components/cta_work.cuh"
#include "cc/decode/components/slot_gather.cuh"
#include "cc/decode/components/slot_translation.cuh"
#include "cc/decode/components/softmax.cuh"
#include "cc/decode/kernel_launcher.cuh"
#include "cc/decode/narrow/narrow_kernel.h"
#include "cc/decode/params.h"
#include "cc/decode/split_merge/merge_splits.cuh"

namespace sparse_mla {
namespace decode {
namespace narrow {

namespace cg = cooperative_groups;

// Positions per pipeline stage of one CTA: 32 where the grid is small (latency: fewer, larger steps),
// 16 where it is large (occupancy: a smaller ring); the planner chooses (DecodePlan.cta_chunk).
// Gathered chunks held per CTA: 3, two in flight while one is consumed (a fourth: docs/decode-kernels.md).
constexpr int kStages = 3;
constexpr int kColsPerWarp = kKvLoraRank / kWarps;            // 64 c_kv columns
constexpr int kRopePerWarp = kRopeDim / kWarps;               // 8 k_rope columns
constexpr int kRowStride = kSlotElems + 8;                    // bf16 per staged row: 1168 B, conflict-free
constexpr int kFp8RowBytes = 768;                             // staged fp8_ds_mla row pitch (656 B + skew)
constexpr int kOutStride = kKvLoraRank + 4;                   // fp32 partial-output row stride
constexpr int kMergeUnroll = 8;  // split partials the last CTA loads at once (registers: the kernel's 85 or 128 a thread)

static_assert(kColsPerWarp == 64 && kRopePerWarp == 8, "fragment code assumes 64 + 8 columns per warp");

// Bytes per staged row of the gather ring: kRowStride bf16 values, or kFp8RowBytes.
__host__ __device__ constexpr int staged_row_bytes(bool fp8) { return fp8 ? kFp8RowBytes : kRowStride * 2; }

// Byte offsets of the dynamic shared memory of one CTA.
struct SharedLayout {
  int kv, partial, prob, row_max, row_sum, row_alpha, lse, rows, total;
  __host__ __device__ SharedLayout(int head_tiles, int cta_chunk, bool fp8, int cluster_size, int positions_per_split) {
    const int heads = kHeadTileRows * head_tiles;
    kv = 0;                                  // ring [stages][cta_chunk] rows of kRowStride bf16 / kFp8RowBytes
    const int out = heads * kOutStride * 4;  // epilogue: [heads][kOutStride] fp32
    const int ring = kStages * cta_chunk * staged_row_bytes(fp8);
    partial = kv + (ring > out ? ring : out);                      // [kWarps][heads][cta_chunk] fp32
    prob = partial + kWarps * heads * cta_chunk * 4;               // [heads][cta_chunk + 8] bf16
    row_max = prob + heads * (cta_chunk + 8) * 2;                  // [heads] fp32 each
    row_sum = row_max + heads * 4;
    row_alpha = row_sum + heads * 4;
    lse = row_alpha + heads * 4;                                   // [heads] fp32, base 2
    rows = lse + heads * 4;                                        // [positions per CTA] int32
    total = rows + positions_per_split / cluster_size * 4;
  }
};

// Byte offset of staged row r in a ring stage. fp8_ds_mla rows (656 bytes) start fp8_row_skew(r) bytes
// into their 768-byte pitch: 0, 64, 16, 80, 32, 96, 48, 112 (mod 128) for r = 0..7. So the shared-memory
// reads of step 4 meet no bank conflicts: a quarter warp's 16-byte key loads (rows 2i and 2i + 1, 64
// bytes each) cover the 32 banks once, and the scale and k_rope loads (rows 8i..8i + 7, 4 and 16
// bytes each) fall in 8 distinct 16-byte bank groups (the pitch it replaced: docs/decode-kernels.md).
__device__ __forceinline__ int fp8_row_skew(int r) { return (r & 1) * 64 + ((r >> 1) & 3) * 16; }

template <bool kFp8>
__device__ __forceinline__ int staged_row_offset(int r) {
  return r * staged_row_bytes(kFp8) + (kFp8 ? fp8_row_skew(r) : 0);
}

// CTAs per SM the register budget must allow (16 heads: 3 of <= 85 registers; 32 heads: 2 of 128):
// the planner sizes its grid to the clusters one wave holds (max_active_clusters). fp8_ds_mla with
// 32-position stages holds 32 registers of values (step 4) and gets the registers it needs (~134 with
// 16 heads, ~190 with 32: 1 CTA per SM; a cap spills, docs/decode-kernels.md).
template <int kHeadTiles, int kCtaChunk, bool kFp8>
constexpr int kMinBlocksPerSm = kFp8 && kCtaChunk == 32 ? 1 : kHeadTiles == 1 ? 3 : 2;

template <int kHeadTiles, int kCtaChunk, bool kFp8, int kCluster>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kHeadTiles, kCtaChunk, kFp8>)
    sparse_decode_kernel(const SparseDecodeParams p) {
  constexpr int kHeads = kHeadTileRows * kHeadTiles;
  constexpr int kProbStride = kCtaChunk + 8;  // bf16 probability row stride: conflict-free A fragments
  extern __shared__ __align__(128) unsigned char smem[];
  const SharedLayout layout(kHeadTiles, kCtaChunk, kFp8, kCluster, p.positions_per_split);
  unsigned char* ring = smem + layout.kv;  // gathered rows as stored in the cache (bf16 or fp8_ds_mla)
  auto* partial = reinterpret_cast<float*>(smem + layout.partial);  // [warp][head][position] partial scores
  auto* prob = reinterpret_cast<__nv_bfloat16*>(smem + layout.prob);
  auto* row_max = reinterpret_cast<float*>(smem + layout.row_max);  // running max, base 2
  auto* row_sum = reinterpret_cast<float*>(smem + layout.row_sum);  // running sum of exp2
  auto* row_alpha = reinterpret_cast<float*>(smem + layout.row_alpha);  // this chunk's rescale
  auto* cta_lse = reinterpret_cast<float*>(smem + layout.lse);      // this CTA's base-2 LSE per head
  auto* rows = reinterpret_cast<int*>(smem + layout.rows);  // [positions per CTA] global slot, -1 = masked
  auto* cta_out = reinterpret_cast<float*>(smem + layout.kv);  // epilogue: normalized partial output

  const int rank = kCluster > 1 ? static_cast<int>(cg::this_cluster().block_rank()) : 0;
  const CtaWork work(p);
  const int split = work.split, token = work.token, head_group = work.head_group;
  const int head_base = head_group * kHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = lane >> 2, quad = lane & 3;  // mma fragment coordinates
  const int positions = p.positions_per_split / kCluster;  // this CTA's slice
  wait_for_prerequisite_grids();  // a programmatic dependent launch: nothing is read before this

  // 1. Query fragments of this warp's columns, kept in registers for the whole loop (loaded first:
  //    they do not depend on the index -> block-table chain below, so both are in flight together).
  uint32_t q_nope_frag[kHeadTiles][4][4];
  uint32_t q_rope_frag[kHeadTiles][2];
  {
    const auto* q_nope = static_cast<const __nv_bfloat16*>(p.q_nope) + token * p.q_nope_token_stride;
    const auto* q_rope = static_cast<const __nv_bfloat16*>(p.q_rope) + token * p.q_rope_token_stride;
#pragma unroll
    for (int mt = 0; mt < kHeadTiles; ++mt) {
      const int h0 = head_base + mt * kHeadTileRows + group, h1 = h0 + 8;
      const bool v0 = h0 < p.num_heads, v1 = h1 < p.num_heads;
      const __nv_bfloat16* n0 = q_nope + (v0 ? h0 : 0) * p.q_nope_head_stride + warp * kColsPerWarp;
      const __nv_bfloat16* n1 = q_nope + (v1 ? h1 : 0) * p.q_nope_head_stride + warp * kColsPerWarp;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        // The fragment's k pairs (2 quad, +1) and (2 quad + 8, +9) of k-step ks are columns col, +1 and
        // col + 8, +9; fp8_ds_mla permutes the warp's 64 columns instead (as its key fragments, step 4):
        // col, +1 and col + 2, +3 with col = 16 quad + 4 ks, so that a lane's keys are 16 consecutive bytes.
        const int col = kFp8 ? 16 * quad + 4 * ks : ks * 16 + 2 * quad, col_hi = kFp8 ? col + 2 : col + 8;
        q_nope_frag[mt][ks][0] = load_pair(n0, col, v0);
        q_nope_frag[mt][ks][1] = load_pair(n1, col, v1);
        q_nope_frag[mt][ks][2] = load_pair(n0, col_hi, v0);
        q_nope_frag[mt][ks][3] = load_pair(n1, col_hi, v1);
      }
      const __nv_bfloat16* r0 = q_rope + (v0 ? h0 : 0) * p.q_rope_head_stride + warp * kRopePerWarp;
      const __nv_bfloat16* r1 = q_rope + (v1 ? h1 : 0) * p.q_rope_head_stride + warp * kRopePerWarp;
      q_rope_frag[mt][0] = load_pair(r0, 2 * quad, v0);
      q_rope_frag[mt][1] = load_pair(r1, 2 * quad, v1);
    }
  }

  // 2. This slice's positions -> global slot rows (masked entries -1).
  translate_positions(p, token, split * p.positions_per_split + rank * positions, positions, rows);
  for (int h = tid; h < kHeads; h += kThreads) {
    row_max[h] = kNegInf;
    row_sum[h] = 0.f;
  }
  __syncthreads();  // rows[] complete

  // 3. Gather ring: chunk c's kCtaChunk whole slots, as stored, into stage c % kStages.
  constexpr int kStagedRowBytes = staged_row_bytes(kFp8);
  auto issue_chunk = [&](int chunk) {
    unsigned char* stage = ring + (chunk % kStages) * kCtaChunk * kStagedRowBytes;
    gather_chunk<kCtaChunk, kFp8>(p, rows + chunk * kCtaChunk,
                                  [=](int r, int part) { return stage + staged_row_offset<kFp8>(r) + part * 16; });
  };

  const int num_chunks = positions / kCtaChunk;
  float out_acc[kHeadTiles][8][4];
#pragma unroll
  for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) out_acc[mt][nt][i] = 0.f;

  start_gather_ring<kStages>(issue_chunk, num_chunks);
  cp_async_wait<kStages - 2>();
  __syncthreads();  // chunk 0 has landed

  constexpr int kThreadsPerRow = kThreads / kHeads;  // softmax: threads sharing one head's row
  constexpr int kColsPerThread = kCtaChunk / kThreadsPerRow;  // 1, 2 or 4
  // Two CTA barriers per stage: chunk c's landing is awaited with the barrier before P . c_kv of chunk
  // c - 1, and chunk c + kStages - 1 goes into the stage of chunk c - 1 once no warp reads it (against
  // three: docs/decode-kernels.md).
  auto issue_next = [&](int chunk) {
    if (chunk + kStages - 1 < num_chunks) issue_chunk(chunk + kStages - 1);
    cp_async_commit();
  };
  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    // fp8_ds_mla: chunk - 1's stage was read by its scores only, before both barriers of chunk - 1
    // (and no dequantized values are live here, which spared 20 bytes of spills at N = 16, T = 8).
    if constexpr (kFp8) issue_next(chunk);
    const unsigned char* stage = ring + (chunk % kStages) * kCtaChunk * kStagedRowBytes;
    const auto* kv = reinterpret_cast<const __nv_bfloat16*>(stage);  // bf16: keys and values as staged

    // fp8_ds_mla: this warp's c_kv values of the chunk, dequantized, as the B fragments of step 6's
    // P . c_kv (value_frag[nt][j]: positions 8 nt..8 nt + 7 of its n-tile j, see step 4).
    [[maybe_unused]] uint32_t value_frag[kFp8 ? kCtaChunk / 8 : 1][8];

    // 4. Partial scores over this warp's 72 columns -> partial[warp]. fp8_ds_mla: each key fragment is
    //    dequantized from the staged bytes as it is loaded (its 64 columns share one scale, since
    //    64 divides the scale group of 128), and kept in registers as values: transposed (movmatrix),
    //    the 8 x 8 block of the fragment's low or high pairs (8 positions x 8 columns) is the
    //    B fragment of P . c_kv for those 8 columns, a k-half of 8 positions. No bf16 copy in shared
    //    memory, no second read of it.
#pragma unroll
    for (int nt = 0; nt < kCtaChunk / 8; ++nt) {
      float score[kHeadTiles][4];
#pragma unroll
      for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) score[mt][i] = 0.f;
      const int row = nt * 8 + group;
      uint32_t b_rope;
      if constexpr (kFp8) {
        const unsigned char* slot = stage + staged_row_offset<true>(row);
        const float scale = reinterpret_cast<const float*>(slot + kFp8ScalesOffset)[warp * kColsPerWarp / kFp8ScaleGroup];
        // This lane's 16 key bytes at once: columns 16 quad + 4 ks + {0, 1} are k-step ks's pair
        // (2 quad, +1) and + {2, 3} its pair (2 quad + 8, +9), as the query fragments were loaded (step 1).
        const int col0 = warp * kColsPerWarp + 16 * quad;
        const uint4 bytes = *reinterpret_cast<const uint4*>(slot + col0);
        const uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const uint2 b = dequantize_word(words[ks], scale);
#pragma unroll
          for (int mt = 0; mt < kHeadTiles; ++mt) mma_m16n8k16(score[mt], q_nope_frag[mt][ks], b.x, b.y);
          // n-tile 2 ks (+1): columns 16 i + 4 ks (+2) + {0, 1} of the warp's 64 for i = 0..7.
          value_frag[nt][2 * ks] = transpose_8x8(b.x);
          value_frag[nt][2 * ks + 1] = transpose_8x8(b.y);
        }
        b_rope = *reinterpret_cast<const uint32_t*>(slot + kFp8RopeOffset + (warp * kRopePerWarp + 2 * quad) * 2);
      } else {
        const auto* k_row = reinterpret_cast<const uint32_t*>(kv + row * kRowStride);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const uint32_t b0 = k_row[warp * kColsPerWarp / 2 + ks * 8 + quad];
          const uint32_t b1 = k_row[warp * kColsPerWarp / 2 + ks * 8 + 4 + quad];
#pragma unroll
          for (int mt = 0; mt < kHeadTiles; ++mt) mma_m16n8k16(score[mt], q_nope_frag[mt][ks], b0, b1);
        }
        b_rope = k_row[(kKvLoraRank + warp * kRopePerWarp) / 2 + quad];
      }
#pragma unroll
      for (int mt = 0; mt < kHeadTiles; ++mt) {
        mma_m16n8k8(score[mt], q_rope_frag[mt][0], q_rope_frag[mt][1], b_rope);
        float* tile = partial + (warp * kHeads + mt * kHeadTileRows + group) * kCtaChunk + nt * 8 + 2 * quad;
        *reinterpret_cast<float2*>(tile) = make_float2(score[mt][0], score[mt][1]);
        *reinterpret_cast<float2*>(tile + 8 * kCtaChunk) = make_float2(score[mt][2], score[mt][3]);
      }
    }
    __syncthreads();  // partial scores complete; every warp is done with chunk - 1 (P . c_kv before these scores)
    if constexpr (!kFp8) issue_next(chunk);  // bf16: chunk - 1's stage was read by its P . c_kv

    // 5. Scores = sum of the 8 partials; online softmax (base 2); probabilities to shared memory as bf16.
    {
      const int h = tid / kThreadsPerRow, col0 = (tid % kThreadsPerRow) * kColsPerThread;
      float x[kColsPerThread];
      float chunk_max = kNegInf;
#pragma unroll
      for (int i = 0; i < kColsPerThread; ++i) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s += partial[(w * kHeads + h) * kCtaChunk + col0 + i];
        x[i] = rows[chunk * kCtaChunk + col0 + i] >= 0 ? s * p.scale_log2 : kNegInf;
        chunk_max = fmaxf(chunk_max, x[i]);
      }
#pragma unroll
      for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2)
        chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
      const float old_max = row_max[h];
      // Lazy on fp8_ds_mla only: it slows the bf16 cache (docs/decode-kernels.md).
      const float new_max = kFp8 ? lazy_running_max(old_max, chunk_max) : fmaxf(old_max, chunk_max);
      const float base = new_max == kNegInf ? 0.f : new_max;  // no (-inf) - (-inf)
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < kColsPerThread; ++i) {
        const float e = exp2f(x[i] - base);
        sum += e;
        prob[h * kProbStride + col0 + i] = __float2bfloat16_rn(e);
      }
#pragma unroll
      for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      __syncwarp();  // every lane of the row has read row_max[h]: shuffles do not order shared memory
      if (tid % kThreadsPerRow == 0) {
        const float alpha = exp2f(old_max - base);  // 0 while nothing was valid
        row_alpha[h] = alpha;
        row_sum[h] = row_sum[h] * alpha + sum;
        row_max[h] = new_max;
      }
    }
    cp_async_wait<kStages - 2>();  // chunk + 1 has landed (this thread's copies) ...
    __syncthreads();               // ... for every thread; and the probabilities are complete

    // 6. out[:, cols_w] = alpha * out + P . c_kv[:, cols_w].
#pragma unroll
    for (int mt = 0; mt < kHeadTiles; ++mt) {
      const float a0 = row_alpha[mt * kHeadTileRows + group], a1 = row_alpha[mt * kHeadTileRows + group + 8];
      const auto* p0 = reinterpret_cast<const uint32_t*>(prob + (mt * kHeadTileRows + group) * kProbStride);
      const auto* p1 = reinterpret_cast<const uint32_t*>(prob + (mt * kHeadTileRows + group + 8) * kProbStride);
      if (!kFp8 || __any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) {  // alpha = 1 exactly: nothing to rescale
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          out_acc[mt][nt][0] *= a0;
          out_acc[mt][nt][1] *= a0;
          out_acc[mt][nt][2] *= a1;
          out_acc[mt][nt][3] *= a1;
        }
      }
#pragma unroll
      for (int ks = 0; ks < kCtaChunk / 16; ++ks) {
        const uint32_t a[4] = {p0[ks * 8 + quad], p1[ks * 8 + quad], p0[ks * 8 + 4 + quad], p1[ks * 8 + 4 + quad]};
        const int position = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);  // lanes 0..15 address rows
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          if constexpr (kFp8) {
            mma_m16n8k16(out_acc[mt][nt], a, value_frag[2 * ks][nt], value_frag[2 * ks + 1][nt]);
          } else {
            uint32_t v_frag[2];
            ldmatrix_x2_trans(v_frag, kv + position * kRowStride + warp * kColsPerWarp + nt * 8);
            mma_m16n8k16(out_acc[mt][nt], a, v_frag[0], v_frag[1]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring is free: it holds the partial output now

  // 7. This CTA's normalized partial output and LSE -> shared memory; merge the cluster's kCluster
  //    (with one CTA per split: its own).
#pragma unroll
  for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = mt * kHeadTileRows + group + half * 8;
      const float l = row_sum[h], inv = l != 0.f ? 1.f / l : 0.f;  // NaN propagates
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        // n-tile nt's columns of this lane: 8 nt + 2 quad, +1 (bf16); 16 quad + 2 nt, +1 (fp8_ds_mla, step 4)
        const int col = warp * kColsPerWarp + (kFp8 ? 16 * quad + 2 * nt : 8 * nt + 2 * quad);
        *reinterpret_cast<float2*>(cta_out + h * kOutStride + col) =
            make_float2(out_acc[mt][nt][2 * half] * inv, out_acc[mt][nt][2 * half + 1] * inv);
      }
    }
  for (int h = tid; h < kHeads; h += kThreads) {
    const float l = row_sum[h];
    cta_lse[h] = l != 0.f ? row_max[h] + log2f(l) : kNegInf;
  }
  if constexpr (kCluster > 1) {
    cluster_arrive();
    cluster_wait();  // every rank's partial is in its shared memory
  } else {
    __syncthreads();
  }

  // Rank r: output columns [kColsPerRank r, kColsPerRank (r + 1)) of the cluster's partials (64 of 8
  // partials, or all 512 of a CTA's own), merged, then written out or (several splits) to the workspace.
  constexpr int kColsPerRank = kKvLoraRank / kCluster;
  constexpr int kVectorsPerHead = kColsPerRank / 4;
  constexpr int kVectors = kHeads * kVectorsPerHead;
  static_assert(kVectors % kThreads == 0, "every thread merges the same number of float4s");
  const int64_t group_index = static_cast<int64_t>(token) * p.head_groups + head_group;
  float* partial_out = p.partial_out + (group_index * p.num_splits + split) * kHeads * kKvLoraRank;
  float* partial_lse = p.partial_lse + ((group_index * p.num_splits + split) * kClusterSize + rank) * kHeads;
#pragma unroll 2  // 1 or 2 float4s per thread with 8 ranks, 8 or 16 with one: registers
  for (int k = 0; k < kVectors / kThreads; ++k) {
    const int v = tid + k * kThreads;
    const int h = v / kVectorsPerHead, col = rank * kColsPerRank + (v % kVectorsPerHead) * 4;
    float lse[kCluster];
    float4 x[kCluster];
#pragma unroll
    for (int q = 0; q < kCluster; ++q) {
      if constexpr (kCluster > 1) {
        lse[q] = *cg::this_cluster().map_shared_rank(cta_lse + h, q);
        x[q] = *reinterpret_cast<const float4*>(cg::this_cluster().map_shared_rank(cta_out + h * kOutStride + col, q));
      } else {
        lse[q] = cta_lse[h];
        x[q] = *reinterpret_cast<const float4*>(cta_out + h * kOutStride + col);
      }
    }
    float max_lse = kNegInf;
#pragma unroll
    for (int q = 0; q < kCluster; ++q) max_lse = fmaxf(max_lse, lse[q]);
    const float base = max_lse == kNegInf ? 0.f : max_lse;
    WeightedSum sum;
#pragma unroll
    for (int q = 0; q < kCluster; ++q) sum.add(exp2f(lse[q] - base), x[q]);  // 0 for a slice without valid positions
    if (p.num_splits == 1) {
      if (head_base + h >= p.num_heads) continue;
      store_output(p, token, head_base + h, col, sum.mean());
      if (p.lse != nullptr && rank == 0 && v % kVectorsPerHead == 0)
        p.lse[token * p.num_heads + head_base + h] = sum.lse(base) * kLn2;
    } else {
      __stcg(reinterpret_cast<float4*>(partial_out + h * kKvLoraRank + col), sum.mean());
      if (v % kVectorsPerHead == 0) __stcg(partial_lse + h, sum.lse(base));
    }
  }
  // This rank is done reading the others' shared memory; it waits for them to be done with its own
  // before it exits.
  if constexpr (kCluster > 1) cluster_arrive();
  if (p.num_splits == 1) {
    if constexpr (kCluster > 1) cluster_wait();
    return;
  }

  // 8. Several splits: the last CTA of this rank's columns to arrive merges the splits.
  if (!arrived_last(p, group_index, rank)) {
    if constexpr (kCluster > 1) cluster_wait();
    return;
  }
  merge_splits<kHeads, kColsPerRank, kMergeUnroll>(p, token, head_base, group_index, rank, rank * kColsPerRank);
  if constexpr (kCluster > 1) cluster_wait();
}

template <int kHeadTiles, int kCtaChunk, bool kFp8, int kCluster>
struct Kernel : Launcher<Kernel<kHeadTiles, kCtaChunk, kFp8, kCluster>> {
  static constexpr auto kFunction = sparse_decode_kernel<kHeadTiles, kCtaChunk, kFp8, kCluster>;
  static constexpr int kBlockThreads = kThreads;
  static constexpr int kClusterCtas = kCluster;
  static constexpr bool kProgrammaticLaunch = true;  // docs/decode-kernels.md: faster back to back at N <= 32
  static int shared_bytes(int positions_per_split) {
    return SharedLayout(kHeadTiles, kCtaChunk, kFp8, kCluster, positions_per_split).total;
  }
};

template <int kHeadTiles, int kCtaChunk, bool kFp8, int kCluster>
int NarrowKernel<kHeadTiles, kCtaChunk, kFp8, kCluster>::total_shared_bytes(int positions_per_split) {
  return Kernel<kHeadTiles, kCtaChunk, kFp8, kCluster>::total_shared_bytes(positions_per_split);
}

template <int kHeadTiles, int kCtaChunk, bool kFp8, int kCluster>
cudaError_t NarrowKernel<kHeadTiles, kCtaChunk, kFp8, kCluster>::launch(const SparseDecodeParams& params,
                                                                         cudaStream_t stream) {
  return Kernel<kHeadTiles, kCtaChunk, kFp8, kCluster>::launch(params, stream);
}

template <int kHeadTiles, int kCtaChunk, bool kFp8, int kCluster>
cudaError_t NarrowKernel<kHeadTiles, kCtaChunk, kFp8, kCluster>::max_active_clusters(int positions_per_split,
                                                                                      int* clusters) {
  return Kernel<kHeadTiles, kCtaChunk, kFp8, kCluster>::max_active_clusters(positions_per_split, clusters);
}

}  // namespace narrow
}  // namespace decode
}  // namespace sparse_mla
