// Sparse MLA decode for many heads (64 per CTA) on Hopper: the kernel the planner takes where every
// gathered slot should serve many query heads, i.e. large N x T (sparse_mla.ops.decode.plan).
//
// Why a second kernel: cc/sparse_decode_kernel.cu splits the 576 columns over its 8 warps, so each
// of its CTAs serves at most 32 heads, and a token with 64 or 128 heads gathers (and, for
// fp8_ds_mla, dequantizes) every slot 2 or 4 times, through an 8-way partial-score reduction in
// shared memory per chunk. Here a CTA serves 64 heads of one (token, split): every slot is gathered
// and dequantized once for all of them.
//
// Work decomposition
// ------------------
// 8 warps = 4 head tiles (16 heads, the mma m16 rows) x 2 column halves (kColSplits). Warp (t, c)
// owns heads [16 t, 16 t + 16) and c_kv columns [256 c, 256 c + 256) with k_rope columns [32 c, 32 c + 32):
//   - scores: its partial q[:, cols] . k[:, cols] (mma.sync m16n8k16, bf16 in, fp32 out), queries
//     from shared memory (ldmatrix, staged once per CTA), keys from the chunk's rows (ldmatrix);
//   - the warps of a head tile add their partials through shared memory (a named barrier of those
//     warps, not a CTA barrier), in the same order, so each holds the same full scores in registers,
//     in the accumulator layout;
//   - an fp32 online softmax (base 2) in registers, row statistics shared by the 4 lanes of a row
//     (quad shuffles); the probabilities become the A fragments of the next product directly;
//   - out[:, cols] = alpha * out + P . c_kv[:, cols] (values through ldmatrix.trans): 16 x 256 fp32
//     accumulators per warp (128 registers a lane), hence one CTA of 256 threads per SM.
// Where the time goes (Nsight Compute, N = 64, T = 128, bf16: 188 µs): shared-memory reads, ~64 % of
// L1 throughput (mma.sync fragments: every warp of a head tile reads the same keys, every chunk
// reads the queries again), with 2 warps per scheduler to hide their latency; tensor pipe ~30 %.
// Pipeline: 32 positions per stage, 3 stages of cp.async whole slots (the gather of
// cc/sparse_decode_device.cuh), one CTA barrier per stage; the fp8_ds_mla cache adds a pass in which
// all 256 threads dequantize the stage's c_kv (16 values from one 16-byte load, e4m3 -> f16 exactly,
// times the group's scale, rounded to bf16) into a bf16 tile, and a second barrier: each value is
// converted once for 64 heads.
// Splits (the planner's num_splits): one CTA per split; with several, each writes its normalized
// partial output and LSE to the workspace and the last to arrive merges them (merge_splits).
#include <cuda_bf16.h>

#include "cc/sparse_decode_device.cuh"
#include "cc/sparse_decode_wide.h"

namespace sparse_mla {
namespace decode {
namespace wide {
namespace {

constexpr int kHeads = kHeadTileRows * kHeadTiles;      // 64 heads per CTA
// Warps sharing a head tile, each its share of the columns: 2 (8 warps, one CTA of 238 registers a
// lane per SM). 4 (16 warps of 128 registers) was slower on the H200 at large T (N = 64, T = 128:
// 235 vs 183 µs), faster only where the grid is too small for this kernel anyway (N = 128, T = 4:
// 53 vs 58): results/2026-11-30-h200/release4/README.md.
constexpr int kColSplits = 2;
constexpr int kWideWarps = kHeadTiles * kColSplits;
constexpr int kBlockThreads = 32 * kWideWarps;
constexpr int kNopePerWarp = kKvLoraRank / kColSplits;  // c_kv columns per warp
constexpr int kRopePerWarp = kRopeDim / kColSplits;     // k_rope columns per warp
constexpr int kStages = 3;                              // gathered chunks held (two in flight)
constexpr int kRowStride = kSlotElems + 8;              // bf16 per query row and staged bf16 row: 1168 B
constexpr int kFp8RowBytes = kFp8SlotBytes + 32;        // staged fp8_ds_mla row: 688 B
constexpr int kTileStride = kKvLoraRank + 8;            // bf16 per dequantized c_kv row: 1040 B
constexpr int kScoreTiles = kCtaChunk / 8;              // n-tiles of 8 positions per stage
constexpr int kOutTiles = kNopePerWarp / 8;             // n-tiles of 8 output columns per warp
constexpr int kExchangeFloats = kScoreTiles * 4 * 32;   // one warp's partial scores, as its lanes hold them
// Row strides of 1168, 688 and 1040 bytes put the 8 rows of an 8x8 ldmatrix in distinct bank groups.
static_assert(kNopePerWarp % 16 == 0 && kRopePerWarp % 16 == 0, "whole k-steps of 16 columns per warp");
static_assert(kCtaChunk % 16 == 0 && kOutTiles % 2 == 0, "fragments come in pairs");

// Byte offsets of the dynamic shared memory of one CTA.
struct SharedLayout {
  int q, ring, tile, exchange, rows, total;
  __host__ __device__ SharedLayout(bool fp8, int positions_per_split) {
    q = 0;                                                              // [kHeads][kRowStride] bf16: q_nope | q_rope
    ring = q + kHeads * kRowStride * 2;                                 // [kStages][kCtaChunk] staged rows
    tile = ring + kStages * kCtaChunk * (fp8 ? kFp8RowBytes : kRowStride * 2);  // fp8: [kCtaChunk][kTileStride] bf16
    exchange = tile + (fp8 ? kCtaChunk * kTileStride * 2 : 0);          // [kWideWarps][kExchangeFloats] fp32
    rows = exchange + kWideWarps * kExchangeFloats * 4;                 // [positions_per_split] int32
    total = rows + positions_per_split * 4;
  }
};

// Barrier `id` (1..15) of the `threads` threads (whole warps) that use it.
__device__ __forceinline__ void sync_warps(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <bool kFp8>
__global__ void __launch_bounds__(kBlockThreads, 1) sparse_decode_wide_kernel(const SparseDecodeParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const SharedLayout layout(kFp8, p.positions_per_split);
  auto* q = reinterpret_cast<__nv_bfloat16*>(smem + layout.q);
  unsigned char* ring = smem + layout.ring;
  auto* tile = reinterpret_cast<__nv_bfloat16*>(smem + layout.tile);
  auto* exchange = reinterpret_cast<float*>(smem + layout.exchange);
  auto* rows = reinterpret_cast<int*>(smem + layout.rows);  // [positions_per_split] global slot, -1 = masked

  const CtaWork work(p);
  const int split = work.split, token = work.token, head_group = work.head_group;
  const int head_base = head_group * kHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = lane >> 2, quad = lane & 3;  // mma fragment coordinates
  const int head_tile = warp / kColSplits, col_split = warp % kColSplits;
  const int positions = p.positions_per_split;

  // 1. The 64 heads' queries -> shared memory, [q_nope | q_rope] per row (heads past N: zeros), with
  //    4-byte copies (any even stride); committed with the first stage.
  {
    constexpr int kPairsPerHead = kSlotElems / 2;
    const auto* q_nope = static_cast<const __nv_bfloat16*>(p.q_nope) + token * p.q_nope_token_stride;
    const auto* q_rope = static_cast<const __nv_bfloat16*>(p.q_rope) + token * p.q_rope_token_stride;
    for (int i = tid; i < kHeads * kPairsPerHead; i += kBlockThreads) {
      const int h = i / kPairsPerHead, col = 2 * (i % kPairsPerHead);
      const bool valid = head_base + h < p.num_heads;
      const int head = valid ? head_base + h : 0;
      const __nv_bfloat16* src = col < kKvLoraRank ? q_nope + head * p.q_nope_head_stride + col
                                                   : q_rope + head * p.q_rope_head_stride + col - kKvLoraRank;
      cp_async_4(q + h * kRowStride + col, src, valid);
    }
  }

  // 2. This split's positions -> global slot rows (masked entries -1).
  translate_positions<kBlockThreads>(p, token, split * positions, positions, rows);
  __syncthreads();  // rows[] complete

  // 3. Gather ring: chunk c's kCtaChunk whole slots, as stored, into stage c % kStages.
  constexpr int kStagedRowBytes = kFp8 ? kFp8RowBytes : kRowStride * 2;
  auto issue_chunk = [&](int chunk) {
    gather_chunk<kCtaChunk, kFp8, kStagedRowBytes, kBlockThreads>(p, rows + chunk * kCtaChunk,
                                                                  ring + (chunk % kStages) * kCtaChunk * kStagedRowBytes);
  };
  const int num_chunks = positions / kCtaChunk;
  GatherRing<kStages, decltype(issue_chunk)> gather{issue_chunk, num_chunks};
  gather.start();

  float out_acc[kOutTiles][4];
#pragma unroll
  for (int nt = 0; nt < kOutTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) out_acc[nt][i] = 0.f;
  // Rows group and group + 8 of this warp's head tile: running max (base 2) and this lane's share of
  // the running sum (its columns; the quad's shares are added at the end).
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};

  // ldmatrix lane addresses. Queries (A, 16 x 16): rows lane % 16, columns + 8 for lanes 16..31.
  const __nv_bfloat16* q_frag = q + (head_tile * kHeadTileRows + (lane & 15)) * kRowStride + (lane >> 4) * 8;
  // Keys (B of two n-tiles, stored [position][column]): matrix m = lane / 8 covers positions
  // 8 (m / 2).. and columns 8 (m % 2)..; values (B transposed): positions 8 (m % 2).., columns 8 (m / 2)...
  const int key_position = (lane >> 4) * 8 + (lane & 7), key_col = ((lane >> 3) & 1) * 8;
  const int value_position = ((lane >> 3) & 1) * 8 + (lane & 7), value_col = (lane >> 4) * 8;
  constexpr int kKeyStride = kFp8 ? kTileStride : kRowStride;  // bf16 per c_kv operand row

  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    gather.wait_for(chunk);
    const unsigned char* stage = ring + (chunk % kStages) * kCtaChunk * kStagedRowBytes;

    // 4. fp8_ds_mla: the stage's c_kv -> the bf16 tile, 16 values per thread and step.
    if constexpr (kFp8) {
      constexpr int kPiecesPerRow = kKvLoraRank / 16;
#pragma unroll
      for (int k = 0; k < kCtaChunk * kPiecesPerRow / kBlockThreads; ++k) {
        const int i = tid + k * kBlockThreads, row = i / kPiecesPerRow, piece = i % kPiecesPerRow;
        const unsigned char* slot = stage + row * kStagedRowBytes;
        const uint4 bytes = *reinterpret_cast<const uint4*>(slot + piece * 16);
        const float scale = reinterpret_cast<const float*>(slot + kFp8ScalesOffset)[piece * 16 / kFp8ScaleGroup];
        const uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
        uint32_t pairs[8];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          pairs[2 * w] = dequantize_pair(static_cast<uint16_t>(words[w] & 0xffffu), scale);
          pairs[2 * w + 1] = dequantize_pair(static_cast<uint16_t>(words[w] >> 16), scale);
        }
        auto* dst = reinterpret_cast<uint4*>(tile + row * kTileStride + piece * 16);
        dst[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
        dst[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
      }
      __syncthreads();
    }
    const auto* keys = kFp8 ? tile : reinterpret_cast<const __nv_bfloat16*>(stage);
    const unsigned char* rope = stage + (kFp8 ? kFp8RopeOffset : kKvLoraRank * 2);  // bf16 k_rope of row 0

    // 5. This warp's partial scores over its 256 + 32 columns.
    float score[kScoreTiles][4];
#pragma unroll
    for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) score[nt][i] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kNopePerWarp / 16; ++ks) {
      const int col = col_split * kNopePerWarp + ks * 16;
      uint32_t a[4];
      ldmatrix_x4(a, q_frag + col);
#pragma unroll
      for (int np = 0; np < kScoreTiles / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, keys + (np * 16 + key_position) * kKeyStride + col + key_col);
        mma_m16n8k16(score[2 * np], a, b[0], b[1]);
        mma_m16n8k16(score[2 * np + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
    for (int ks = 0; ks < kRopePerWarp / 16; ++ks) {
      const int col = col_split * kRopePerWarp + ks * 16;
      uint32_t a[4];
      ldmatrix_x4(a, q_frag + kKvLoraRank + col);
#pragma unroll
      for (int np = 0; np < kScoreTiles / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, rope + (np * 16 + key_position) * kStagedRowBytes + (col + key_col) * 2);
        mma_m16n8k16(score[2 * np], a, b[0], b[1]);
        mma_m16n8k16(score[2 * np + 1], a, b[2], b[3]);
      }
    }

    // 6. The head tile's warps add their partials, in column order in every warp (the same sums).
    {
      float* tile_partials = exchange + head_tile * kColSplits * kExchangeFloats;
#pragma unroll
      for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) tile_partials[col_split * kExchangeFloats + (nt * 4 + i) * 32 + lane] = score[nt][i];
      sync_warps(1 + head_tile, 32 * kColSplits);
#pragma unroll
      for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float total = 0.f;
#pragma unroll
          for (int c = 0; c < kColSplits; ++c) {
            total += c == col_split ? score[nt][i] : tile_partials[c * kExchangeFloats + (nt * 4 + i) * 32 + lane];
          }
          score[nt][i] = total;
        }
    }

    // 7. Online softmax in registers: lane (group, quad) holds rows group / group + 8 at positions
    //    8 nt + 2 quad + {0, 1}; masked positions score -inf.
    const int* chunk_rows = rows + chunk * kCtaChunk;
    float chunk_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const bool valid = chunk_rows[nt * 8 + 2 * quad + j] >= 0;
        score[nt][j] = valid ? score[nt][j] * p.scale_log2 : kNegInf;
        score[nt][2 + j] = valid ? score[nt][2 + j] * p.scale_log2 : kNegInf;
        chunk_max[0] = fmaxf(chunk_max[0], score[nt][j]);
        chunk_max[1] = fmaxf(chunk_max[1], score[nt][2 + j]);
      }
    float base[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      chunk_max[r] = fmaxf(chunk_max[r], __shfl_xor_sync(0xffffffffu, chunk_max[r], 1));
      chunk_max[r] = fmaxf(chunk_max[r], __shfl_xor_sync(0xffffffffu, chunk_max[r], 2));
      const float new_max = fmaxf(row_max[r], chunk_max[r]);
      base[r] = new_max == kNegInf ? 0.f : new_max;  // no (-inf) - (-inf)
      alpha[r] = exp2f(row_max[r] - base[r]);        // 0 while nothing was valid
      row_max[r] = new_max;
    }
    // Probabilities as the A fragments of P . V: k-step kk takes n-tiles 2 kk and 2 kk + 1.
    uint32_t prob[kCtaChunk / 16][4];
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < kScoreTiles; ++nt) {
      const float e0 = exp2f(score[nt][0] - base[0]), e1 = exp2f(score[nt][1] - base[0]);
      const float e2 = exp2f(score[nt][2] - base[1]), e3 = exp2f(score[nt][3] - base[1]);
      sum[0] += e0 + e1;
      sum[1] += e2 + e3;
      prob[nt / 2][(nt % 2) * 2] = pack_bf16(e0, e1);
      prob[nt / 2][(nt % 2) * 2 + 1] = pack_bf16(e2, e3);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * alpha[r] + sum[r];

    // 8. out[:, cols] = alpha * out + P . c_kv[:, cols].
#pragma unroll
    for (int nt = 0; nt < kOutTiles; ++nt) {
      out_acc[nt][0] *= alpha[0];
      out_acc[nt][1] *= alpha[0];
      out_acc[nt][2] *= alpha[1];
      out_acc[nt][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < kCtaChunk / 16; ++kk)
#pragma unroll
      for (int n2 = 0; n2 < kOutTiles / 2; ++n2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, keys + (kk * 16 + value_position) * kKeyStride + col_split * kNopePerWarp + n2 * 16 + value_col);
        mma_m16n8k16(out_acc[2 * n2], prob[kk], b[0], b[1]);
        mma_m16n8k16(out_acc[2 * n2 + 1], prob[kk], b[2], b[3]);
      }
  }
  cp_async_wait<0>();

  // 9. Normalize; write the output (one split) or this split's partial (several; the last CTA merges).
  float inv[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = l > 0.f ? 1.f / l : 0.f;
    lse[r] = l > 0.f ? row_max[r] + log2f(l) : kNegInf;
  }
  const int col0 = col_split * kNopePerWarp + 2 * quad;
  if (p.num_splits == 1) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int head = head_base + head_tile * kHeadTileRows + group + 8 * r;
      if (head >= p.num_heads) continue;
      auto* out = static_cast<__nv_bfloat16*>(p.out) + token * p.out_token_stride + head * p.out_head_stride + col0;
#pragma unroll
      for (int nt = 0; nt < kOutTiles; ++nt)
        *reinterpret_cast<uint32_t*>(out + nt * 8) =
            pack_bf16(out_acc[nt][2 * r] * inv[r], out_acc[nt][2 * r + 1] * inv[r]);
      if (p.lse != nullptr && col_split == 0 && quad == 0) p.lse[token * p.num_heads + head] = lse[r] * kLn2;
    }
    return;
  }
  const int64_t group_index = static_cast<int64_t>(token) * p.head_groups + head_group;
  const int64_t split_index = group_index * p.num_splits + split;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = head_tile * kHeadTileRows + group + 8 * r;
    float* partial = p.partial_out + (split_index * kHeads + h) * kKvLoraRank + col0;
#pragma unroll
    for (int nt = 0; nt < kOutTiles; ++nt)
      __stcg(reinterpret_cast<float2*>(partial + nt * 8),
             make_float2(out_acc[nt][2 * r] * inv[r], out_acc[nt][2 * r + 1] * inv[r]));
    if (col_split == 0 && quad == 0) __stcg(p.partial_lse + split_index * kClusterSize * kHeads + h, lse[r]);
  }
  if (!arrived_last(p, group_index, 0) || (p.ablate & kAblateMerge)) return;
  merge_splits<kHeads, kKvLoraRank, kBlockThreads>(p, token, head_base, group_index, 0);
}

template <bool kFp8>
struct WideKernel : Launcher<WideKernel<kFp8>> {
  static constexpr auto kFunction = sparse_decode_wide_kernel<kFp8>;
  static constexpr int kBlockThreads = wide::kBlockThreads;
  static constexpr int kClusterCtas = kCluster;
  static int shared_bytes(int positions_per_split) { return SharedLayout(kFp8, positions_per_split).total; }
};

}  // namespace

int shared_memory_bytes(bool fp8, int positions_per_split) { return SharedLayout(fp8, positions_per_split).total; }

cudaError_t launch(const SparseDecodeParams& params, cudaStream_t stream) {
  return params.kv_fp8 ? WideKernel<true>::launch(params, stream) : WideKernel<false>::launch(params, stream);
}

cudaError_t max_active_ctas(bool fp8, int positions_per_split, int* ctas) {
  return fp8 ? WideKernel<true>::max_active_clusters(positions_per_split, ctas)
             : WideKernel<false>::max_active_clusters(positions_per_split, ctas);
}

}  // namespace wide
}  // namespace decode
}  // namespace sparse_mla
