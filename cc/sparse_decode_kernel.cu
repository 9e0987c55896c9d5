// Latency-first sparse MLA decode for Hopper: one launch, request-local top-k positions in, attention
// out, for any number of query heads (1..128) and any token count (split-KV chosen by the planner).
//
// Work decomposition
// ------------------
// A CTA serves one (token, group of <= 32 heads, slice of the token's top-k row) and gathers whole
// slots of its slice as the cache stores them, 16 or 32 positions per pipeline stage (kCtaChunk, the
// planner's choice), with 16-byte cp.async into a kStages-deep ring (16 or 8 threads per slot, its
// address computed once). Nothing is exchanged between CTAs while positions are processed: the 8 warps
// split the 576 columns instead. Warp w owns the c_kv columns [64 w, 64 w + 64) and the k_rope
// columns [8 w, 8 w + 8): it computes partial scores q[:, cols_w] . k[:, cols_w] on tensor cores
// (mma.sync m16n8k16 / m16n8k8, bf16 in, fp32 out), the CTA adds the 8 partials in shared memory,
// runs an fp32 online softmax (base 2), and warp w multiplies the probabilities with its 64 c_kv
// columns: c_kv is both the key (with q_nope) and the value, and the one latent head serves all
// query heads of the CTA.
//
// Positions -> rows: every CTA translates its slice's positions through the block table up front
// (position p of request req_id[t] lives in block block_table[req, p / 64], slot p % 64); -1, p >=
// token_kv_len[t], p past the block table, and block ids outside [0, num_blocks) are masked (their
// rows are zero-filled by cp.async and their scores set to -inf, never read from memory).
//
// Merging the slices (kCluster = 8, small grids): a cluster of 8 CTAs holds 8 consecutive slices (one
// "split" of the plan). Each CTA leaves its normalized partial output and base-2 LSE in shared memory;
// after a cluster barrier, rank r merges the output columns [64 r, 64 r + 64) of the 8 partials, read
// through distributed shared memory. With kCluster = 1 (large grids, where a cluster's 8 CTAs would
// wait for one GPC and merge for nothing) a CTA's slice is the whole split and rank 0 owns all 512
// columns. With one split per token that is the output. With several, rank r writes the split's
// merged columns and LSE to the workspace and bumps the arrival counter of its (token, head group,
// rank); the last CTA to arrive merges the splits of its columns (kMergeUnroll split partials loaded
// at once) and resets the counter, so a later launch or CUDA-graph replay finds it zero.
//
// Cache formats: bf16 slots (1152 bytes) are staged as they are and read by the tensor-core code
// directly. fp8_ds_mla slots (656 bytes: 512 e4m3 c_kv values, 4 fp32 scales of 128 values, 64 bf16
// k_rope) are staged as they are too (0.57x the bytes gathered); warp w dequantizes its 64 c_kv
// columns in registers as it loads them as keys (e4m3 -> f16 exactly, times the group's scale,
// rounded to bf16) and leaves them in its columns of a bf16 tile, from which it reads them again as
// values: no extra pass, no extra barrier, ~6 more instructions per pair of values.
#include "cc/sparse_decode.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>

namespace sparse_mla {
namespace decode {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;                                 // 8 warps
constexpr int kWarps = kThreads / 32;
// Positions per pipeline stage of one CTA: 32 where the grid is small (latency: fewer, larger steps),
// 16 where it is large (occupancy: a smaller ring); the planner chooses (DecodePlan.cta_chunk).
// Gathered chunks held per CTA: 3 (two in flight while one is consumed). With 16-position stages a
// fourth was slower on the H200: 2 instead of 3 CTAs per SM fit (results/2026-11-30-h200/release3).
constexpr int kStages = 3;
constexpr int kColsPerWarp = kKvLoraRank / kWarps;            // 64 c_kv columns
constexpr int kRopePerWarp = kRopeDim / kWarps;               // 8 k_rope columns
constexpr int kRowStride = kSlotElems + 8;                    // bf16 per staged row: 1168 B, conflict-free
constexpr int kTileStride = kKvLoraRank + 8;                  // bf16 per dequantized c_kv row: 1040 B, conflict-free
constexpr int kPiecesPerRow = kSlotElems * 2 / 16;            // 72 16-byte copies per bf16 row
constexpr int kFp8RowBytes = kFp8SlotBytes + 16;              // staged fp8_ds_mla row: 672 B
constexpr int kFp8PiecesPerRow = kFp8SlotBytes / 16;          // 41 16-byte copies per fp8_ds_mla row
constexpr int kOutStride = kKvLoraRank + 4;                   // fp32 partial-output row stride
constexpr int kMergeUnroll = 8;                               // split partials loaded at once
constexpr int kMaxGridZ = 65535;                              // CUDA's limit on gridDim.z
constexpr float kNegInf = -INFINITY;
constexpr float kLn2 = 0.69314718055994530942f;

static_assert(kColsPerWarp == 64 && kRopePerWarp == 8, "fragment code assumes 64 + 8 columns per warp");

// Byte offsets of the dynamic shared memory of one CTA.
struct SharedLayout {
  int kv, partial, prob, row_max, row_sum, row_alpha, lse, rows, total;
  int tile;  // fp8_ds_mla: the chunk's c_kv dequantized to bf16, [cta_chunk][kTileStride] (bf16: unused)
  __host__ __device__ SharedLayout(int head_tiles, int cta_chunk, bool fp8, int cluster_size, int positions_per_split) {
    const int heads = kHeadTileRows * head_tiles;
    kv = 0;                                  // ring [stages][cta_chunk] rows of kRowStride bf16 / kFp8RowBytes
    const int out = heads * kOutStride * 4;  // epilogue: [heads][kOutStride] fp32
    const int ring = kStages * cta_chunk * (fp8 ? kFp8RowBytes : kRowStride * 2);
    tile = ring;
    const int staged = ring + (fp8 ? cta_chunk * kTileStride * 2 : 0);
    partial = kv + (staged > out ? staged : out);                  // [kWarps][heads][cta_chunk] fp32
    prob = partial + kWarps * heads * cta_chunk * 4;               // [heads][cta_chunk + 8] bf16
    row_max = prob + heads * (cta_chunk + 8) * 2;                  // [heads] fp32 each
    row_sum = row_max + heads * 4;
    row_alpha = row_sum + heads * 4;
    lse = row_alpha + heads * 4;                                   // [heads] fp32, base 2
    rows = lse + heads * 4;                                        // [positions per CTA] int32
    total = rows + positions_per_split / cluster_size * 4;
  }
};

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: fill 16 zero bytes, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// D += A . B, A 16x16 bf16 (row), B 16x8 bf16 (col), D 16x8 fp32.
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A . B, A 16x8 bf16 (row), B 8x8 bf16 (col), D 16x8 fp32.
__device__ __forceinline__ void mma_m16n8k8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// Two transposed 8x8 bf16 matrices; lane l < 16 gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

__device__ __forceinline__ uint32_t load_pair(const __nv_bfloat16* row, int col, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint32_t*>(row + col)) : 0u;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The two halves of a cluster-wide barrier (all threads of all ranks): release this thread's shared
// memory writes, then acquire those every rank released before arriving.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// CTAs per SM the register budget must allow (16 heads: 3 of <= 85 registers; 32 heads: 2 of 128):
// the planner sizes its grid to the clusters one wave holds (max_active_clusters).
template <int kHeadTiles>
constexpr int kMinBlocksPerSm = kHeadTiles == 1 ? 3 : 2;

// Dequantizes two fp8 e4m3 values (the low byte first) times `scale` into a bf16 pair. e4m3 -> f16 is
// exact; the product is rounded to bf16 once, as the Triton kernel does (sparse_mla_attention.py).
__device__ __forceinline__ uint32_t dequantize_pair(uint16_t bytes, float scale) {
  const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bytes), __NV_E4M3));
  const float2 f = __half22float2(h);
  return pack_bf16(f.x * scale, f.y * scale);
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
    const float inv = total > 0.f ? 1.f / total : 0.f;
    return make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  }
  __device__ __forceinline__ float lse(float base) const { return total > 0.f ? base + log2f(total) : kNegInf; }
};

// Four output columns of one head of a finished token, as bf16.
__device__ __forceinline__ void store_output(const SparseDecodeParams& p, int token, int head, int col, const float4& x) {
  auto* out = reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + token * p.out_token_stride +
                                          head * p.out_head_stride + col);
  out[0] = pack_bf16(x.x, x.y);
  out[1] = pack_bf16(x.z, x.w);
}

template <int kHeadTiles, int kCtaChunk, bool kFp8, int kCluster>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kHeadTiles>)
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
  __shared__ int arrived_last;

  const int rank = kCluster > 1 ? static_cast<int>(cg::this_cluster().block_rank()) : 0;
  const int split = blockIdx.y;
  const int token = blockIdx.z / p.head_groups;
  const int head_group = blockIdx.z % p.head_groups;
  const int head_base = head_group * kHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = lane >> 2, quad = lane & 3;  // mma fragment coordinates
  const int positions = p.positions_per_split / kCluster;  // this CTA's slice

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
        const int col = ks * 16 + 2 * quad;
        q_nope_frag[mt][ks][0] = load_pair(n0, col, v0);
        q_nope_frag[mt][ks][1] = load_pair(n1, col, v1);
        q_nope_frag[mt][ks][2] = load_pair(n0, col + 8, v0);
        q_nope_frag[mt][ks][3] = load_pair(n1, col + 8, v1);
      }
      const __nv_bfloat16* r0 = q_rope + (v0 ? h0 : 0) * p.q_rope_head_stride + warp * kRopePerWarp;
      const __nv_bfloat16* r1 = q_rope + (v1 ? h1 : 0) * p.q_rope_head_stride + warp * kRopePerWarp;
      q_rope_frag[mt][0] = load_pair(r0, 2 * quad, v0);
      q_rope_frag[mt][1] = load_pair(r1, 2 * quad, v1);
    }
  }

  // 2. This slice's positions -> global slot rows (masked entries -1), kUnroll independent loads in flight.
  {
    constexpr int kUnroll = 4;
    const int kv_len = p.token_kv_len[token];
    const int32_t* index_row = p.topk_indices + token * p.topk_token_stride;
    const int32_t* block_row = p.block_table + static_cast<int64_t>(p.req_id[token]) * p.block_table_stride;
    const int begin = split * p.positions_per_split + rank * positions;
    for (int base = 0; base < positions; base += kThreads * kUnroll) {
      int position[kUnroll], block_id[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + tid, j = begin + i;
        position[u] = i < positions && j < p.topk ? __ldg(index_row + j) : -1;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool valid = position[u] >= 0 && position[u] < kv_len && position[u] / kBlockSize < p.max_blocks_per_req;
        block_id[u] = valid ? __ldg(block_row + position[u] / kBlockSize) : -1;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + tid;
        if (i < positions)
          rows[i] = block_id[u] >= 0 && block_id[u] < p.num_blocks ? block_id[u] * kBlockSize + position[u] % kBlockSize
                                                                   : -1;
      }
    }
  }
  for (int h = tid; h < kHeads; h += kThreads) {
    row_max[h] = kNegInf;
    row_sum[h] = 0.f;
  }
  __syncthreads();  // rows[] complete

  // 3. Gather ring: chunk c's kCtaChunk whole slots, as stored, into stage c % kStages.
  constexpr int kStagedRowBytes = kFp8 ? kFp8RowBytes : kRowStride * 2;
  constexpr int kSlotPieces = kFp8 ? kFp8PiecesPerRow : kPiecesPerRow;
  constexpr int kElemBytes = kFp8 ? 1 : 2;  // the cache's strides count elements of its dtype
  constexpr int kOperandStride = kFp8 ? kTileStride : kRowStride;  // bf16 per row of the c_kv operand
  const auto* cache = static_cast<const unsigned char*>(p.kv_cache);
  // kThreads / kCtaChunk consecutive threads copy one slot: its address is computed once per chunk,
  // and each of them copies every (kThreads / kCtaChunk)-th 16-byte piece of it.
  constexpr int kThreadsPerSlot = kThreads / kCtaChunk;
  auto issue_chunk = [&](int chunk) {
    const int r = tid / kThreadsPerSlot;
    const int row = rows[chunk * kCtaChunk + r];
    const unsigned char* src = cache;  // masked rows: a valid address, nothing read (zero fill)
    if (row >= 0)
      src += (static_cast<int64_t>(row / kBlockSize) * p.kv_block_stride +
              static_cast<int64_t>(row % kBlockSize) * p.kv_slot_stride) * kElemBytes;
    unsigned char* dst = ring + ((chunk % kStages) * kCtaChunk + r) * kStagedRowBytes;
    if (p.ablate & kAblateGather) return;
#pragma unroll
    for (int part = tid % kThreadsPerSlot; part < kSlotPieces; part += kThreadsPerSlot)
      cp_async_16(dst + part * 16, src + (row >= 0 ? part * 16 : 0), row >= 0);
  };

  const int num_chunks = positions / kCtaChunk;
  float out_acc[kHeadTiles][8][4];
#pragma unroll
  for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) out_acc[mt][nt][i] = 0.f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_chunks) issue_chunk(s);
    cp_async_commit();
  }

  constexpr int kThreadsPerRow = kThreads / kHeads;  // softmax: threads sharing one head's row
  constexpr int kColsPerThread = kCtaChunk / kThreadsPerRow;  // 1, 2 or 4
  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    cp_async_wait<kStages - 2>();  // chunk has landed (kStages - 1 groups were outstanding)
    __syncthreads();               // ... for every thread; and the previous chunk is fully consumed
    if (chunk + kStages - 1 < num_chunks) issue_chunk(chunk + kStages - 1);  // into the stage just freed
    cp_async_commit();
    const unsigned char* stage = ring + (chunk % kStages) * kCtaChunk * kStagedRowBytes;
    // bf16 operand rows of the probabilities . c_kv product: the stage itself (bf16 cache), or the
    // tile this warp fills with its own dequantized columns while it computes the scores (fp8_ds_mla).
    const auto* kv = reinterpret_cast<const __nv_bfloat16*>(kFp8 ? smem + layout.tile : stage);

    // 4. Partial scores over this warp's 72 columns -> partial[warp]. fp8_ds_mla: each key fragment is
    //    dequantized from the staged bytes as it is loaded (its 64 columns share one scale, since
    //    64 divides the scale group of 128) and stored into this warp's columns of the bf16 tile, which
    //    only this warp reads, after the two CTA barriers below: no extra pass, no extra barrier.
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
        const unsigned char* slot = stage + row * kStagedRowBytes;
        const float scale = reinterpret_cast<const float*>(slot + kFp8ScalesOffset)[warp * kColsPerWarp / kFp8ScaleGroup];
        auto* tile_row = reinterpret_cast<uint32_t*>(smem + layout.tile) + row * (kTileStride / 2);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const int col = warp * kColsPerWarp + ks * 16 + 2 * quad;
          const uint32_t b0 = dequantize_pair(*reinterpret_cast<const uint16_t*>(slot + col), scale);
          const uint32_t b1 = dequantize_pair(*reinterpret_cast<const uint16_t*>(slot + col + 8), scale);
          tile_row[col / 2] = b0;
          tile_row[col / 2 + 4] = b1;
#pragma unroll
          for (int mt = 0; mt < kHeadTiles; ++mt) mma_m16n8k16(score[mt], q_nope_frag[mt][ks], b0, b1);
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
    __syncthreads();

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
      const float new_max = fmaxf(old_max, chunk_max);
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
      if (tid % kThreadsPerRow == 0) {
        const float alpha = exp2f(old_max - base);  // 0 while nothing was valid
        row_alpha[h] = alpha;
        row_sum[h] = row_sum[h] * alpha + sum;
        row_max[h] = new_max;
      }
    }
    __syncthreads();

    // 6. out[:, cols_w] = alpha * out + P . c_kv[:, cols_w].
#pragma unroll
    for (int mt = 0; mt < kHeadTiles; ++mt) {
      const float a0 = row_alpha[mt * kHeadTileRows + group], a1 = row_alpha[mt * kHeadTileRows + group + 8];
      const auto* p0 = reinterpret_cast<const uint32_t*>(prob + (mt * kHeadTileRows + group) * kProbStride);
      const auto* p1 = reinterpret_cast<const uint32_t*>(prob + (mt * kHeadTileRows + group + 8) * kProbStride);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        out_acc[mt][nt][0] *= a0;
        out_acc[mt][nt][1] *= a0;
        out_acc[mt][nt][2] *= a1;
        out_acc[mt][nt][3] *= a1;
      }
#pragma unroll
      for (int ks = 0; ks < kCtaChunk / 16; ++ks) {
        const uint32_t a[4] = {p0[ks * 8 + quad], p1[ks * 8 + quad], p0[ks * 8 + 4 + quad], p1[ks * 8 + 4 + quad]};
        const int position = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);  // lanes 0..15 address rows
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          uint32_t v_frag[2];
          ldmatrix_x2_trans(v_frag, kv + position * kOperandStride + warp * kColsPerWarp + nt * 8);
          mma_m16n8k16(out_acc[mt][nt], a, v_frag[0], v_frag[1]);
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
      const float l = row_sum[h], inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        *reinterpret_cast<float2*>(cta_out + h * kOutStride + warp * kColsPerWarp + nt * 8 + 2 * quad) =
            make_float2(out_acc[mt][nt][2 * half] * inv, out_acc[mt][nt][2 * half + 1] * inv);
    }
  for (int h = tid; h < kHeads; h += kThreads) {
    const float l = row_sum[h];
    cta_lse[h] = l > 0.f ? row_max[h] + log2f(l) : kNegInf;
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
        const bool own_only = p.ablate & kAblateExchange;  // benchmark: no distributed shared memory reads
        const int source = own_only ? rank : q;
        lse[q] = *cg::this_cluster().map_shared_rank(cta_lse + h, source);
        x[q] = *reinterpret_cast<const float4*>(cg::this_cluster().map_shared_rank(cta_out + h * kOutStride + col, source));
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
  __syncthreads();  // every thread's partial stores precede thread 0's fence (cumulativity)
  if (tid == 0) {
    __threadfence();  // release: this CTA's partials are visible before its arrival counts
    int32_t* counter = p.counters + group_index * kClusterSize + rank;
    arrived_last = atomicAdd(counter, 1) == p.num_splits - 1;
    if (arrived_last) *counter = 0;  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  if (!arrived_last || (p.ablate & kAblateMerge)) {
    if constexpr (kCluster > 1) cluster_wait();
    return;
  }
  __threadfence();  // acquire: the other splits' partials are visible to this CTA's loads

  // Each thread merges float4s of one head's output columns: kMergeUnroll splits' partials and LSEs
  // loaded at once, folded into a running max / sum / accumulator.
  const float* lse_base = p.partial_lse + group_index * p.num_splits * kClusterSize * kHeads + rank * kHeads;
  const float* partial_group = p.partial_out + group_index * p.num_splits * kHeads * kKvLoraRank;
  for (int v = tid; v < kVectors; v += kThreads) {
    const int h = v / kVectorsPerHead, col = rank * kColsPerRank + (v % kVectorsPerHead) * 4;
    float running_max = kNegInf;
    WeightedSum sum;
    for (int s0 = 0; s0 < p.num_splits; s0 += kMergeUnroll) {
      float4 x[kMergeUnroll];
      float lse[kMergeUnroll];
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) {
        const bool present = s0 + u < p.num_splits;
        lse[u] = present ? __ldcg(lse_base + (s0 + u) * kClusterSize * kHeads + h) : kNegInf;
        x[u] = present ? __ldcg(reinterpret_cast<const float4*>(partial_group + ((s0 + u) * kHeads + h) * kKvLoraRank + col))
                       : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      float group_max = running_max;
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) group_max = fmaxf(group_max, lse[u]);
      const float base = group_max == kNegInf ? 0.f : group_max;  // no (-inf) - (-inf)
      sum.rescale(exp2f(running_max - base));                     // 0 while nothing was valid
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) sum.add(exp2f(lse[u] - base), x[u]);  // 0 for a split without valid positions
      running_max = group_max;
    }
    if (head_base + h >= p.num_heads) continue;
    store_output(p, token, head_base + h, col, sum.mean());
    if (p.lse != nullptr && rank == 0 && v % kVectorsPerHead == 0)
      p.lse[token * p.num_heads + head_base + h] = sum.lse(running_max) * kLn2;
  }
  if constexpr (kCluster > 1) cluster_wait();
}

// The parameters of tokens [first, first + count) of `p` alone (the kernel indexes every per-token
// tensor and the split workspace by token).
SparseDecodeParams token_slice(const SparseDecodeParams& p, int first, int count) {
  SparseDecodeParams part = p;
  const int64_t t = first;
  const int64_t groups = t * p.head_groups;
  const int64_t heads_per_cta = kHeadTileRows * p.head_tiles;
  part.q_nope = static_cast<const __nv_bfloat16*>(p.q_nope) + t * p.q_nope_token_stride;
  part.q_rope = static_cast<const __nv_bfloat16*>(p.q_rope) + t * p.q_rope_token_stride;
  part.topk_indices = p.topk_indices + t * p.topk_token_stride;
  part.req_id = p.req_id + t;
  part.token_kv_len = p.token_kv_len + t;
  part.out = static_cast<__nv_bfloat16*>(p.out) + t * p.out_token_stride;
  if (p.lse != nullptr) part.lse = p.lse + t * p.num_heads;
  if (p.num_splits > 1) {
    part.partial_out = p.partial_out + groups * p.num_splits * heads_per_cta * kKvLoraRank;
    part.partial_lse = p.partial_lse + groups * p.num_splits * kClusterSize * heads_per_cta;
    part.counters = p.counters + groups * kClusterSize;
  }
  part.num_tokens = count;
  return part;
}

template <int kHeadTiles, int kCtaChunk, bool kFp8, int kCluster>
struct Kernel {
  static constexpr auto kFunction = sparse_decode_kernel<kHeadTiles, kCtaChunk, kFp8, kCluster>;

  // Raises the kernel's dynamic shared-memory limit to `bytes` on the current device (once per size seen).
  static cudaError_t allow_shared_memory(int bytes) {
    constexpr int kMaxDevices = 64;
    static int configured_bytes[kMaxDevices] = {};
    int device = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) return error;
    if (device < kMaxDevices && bytes <= configured_bytes[device]) return cudaSuccess;
    error = cudaFuncSetAttribute(kFunction, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (error == cudaSuccess && device < kMaxDevices) configured_bytes[device] = bytes;
    return error;
  }

  // Grid kCluster x splits x token_groups CTAs of kThreads, in clusters of kCluster along x.
  static cudaLaunchConfig_t config(int num_splits, int token_groups, int bytes, cudaStream_t stream,
                                   cudaLaunchAttribute* cluster) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(kCluster, num_splits, token_groups);
    config.blockDim = dim3(kThreads, 1, 1);
    config.dynamicSmemBytes = bytes;
    config.stream = stream;
    cluster->id = cudaLaunchAttributeClusterDimension;
    cluster->val.clusterDim.x = kCluster;
    cluster->val.clusterDim.y = 1;
    cluster->val.clusterDim.z = 1;
    config.attrs = cluster;
    config.numAttrs = kCluster > 1 ? 1 : 0;
    return config;
  }

  static cudaError_t launch(const SparseDecodeParams& p, cudaStream_t stream) {
    const int bytes = shared_memory_bytes(kHeadTiles, kCtaChunk, kFp8, kCluster, p.positions_per_split);
    const cudaError_t error = allow_shared_memory(bytes);
    if (error != cudaSuccess) return error;
    // A grid's z dimension holds at most kMaxGridZ (token, head group) pairs: more tokens take more
    // launches, each on its own tokens' slices of every per-token tensor and of the workspace.
    const int max_tokens = kMaxGridZ / p.head_groups;
    for (int first = 0; first < p.num_tokens; first += max_tokens) {
      const int count = p.num_tokens - first < max_tokens ? p.num_tokens - first : max_tokens;
      const SparseDecodeParams part = token_slice(p, first, count);
      cudaLaunchAttribute cluster;
      const cudaLaunchConfig_t launch_config = config(part.num_splits, count * part.head_groups, bytes, stream, &cluster);
      const cudaError_t launch_error = cudaLaunchKernelEx(&launch_config, kFunction, part);
      if (launch_error != cudaSuccess) return launch_error;
    }
    return cudaSuccess;
  }

  static cudaError_t max_active_clusters(int positions_per_split, int* clusters) {
    const int bytes = shared_memory_bytes(kHeadTiles, kCtaChunk, kFp8, kCluster, positions_per_split);
    cudaError_t error = allow_shared_memory(bytes);
    if (error != cudaSuccess) return error;
    if constexpr (kCluster > 1) {
      cudaLaunchAttribute cluster;
      const cudaLaunchConfig_t launch_config = config(1, 1, bytes, nullptr, &cluster);
      return cudaOccupancyMaxActiveClusters(clusters, kFunction, &launch_config);
    }
    int device = 0, sms = 0, per_sm = 0;
    if ((error = cudaGetDevice(&device)) != cudaSuccess) return error;
    if ((error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return error;
    if ((error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kFunction, kThreads, bytes)) != cudaSuccess)
      return error;
    *clusters = sms * per_sm;
    return cudaSuccess;
  }
};

// Calls `action` with the Kernel instantiation of (head_tiles, cta_chunk, cluster_size) for the cache
// format kFp8; cudaErrorInvalidValue for others.
template <bool kFp8, typename Action>
cudaError_t dispatch_shape(int head_tiles, int cta_chunk, int cluster_size, Action action) {
  if (cluster_size == kClusterSize) {
    if (head_tiles == 1 && cta_chunk == 16) return action(Kernel<1, 16, kFp8, kClusterSize>{});
    if (head_tiles == 1 && cta_chunk == 32) return action(Kernel<1, 32, kFp8, kClusterSize>{});
    if (head_tiles == 2 && cta_chunk == 16) return action(Kernel<2, 16, kFp8, kClusterSize>{});
    if (head_tiles == 2 && cta_chunk == 32) return action(Kernel<2, 32, kFp8, kClusterSize>{});
  }
  if (cluster_size == 1) {
    if (head_tiles == 1 && cta_chunk == 16) return action(Kernel<1, 16, kFp8, 1>{});
    if (head_tiles == 1 && cta_chunk == 32) return action(Kernel<1, 32, kFp8, 1>{});
    if (head_tiles == 2 && cta_chunk == 16) return action(Kernel<2, 16, kFp8, 1>{});
    if (head_tiles == 2 && cta_chunk == 32) return action(Kernel<2, 32, kFp8, 1>{});
  }
  return cudaErrorInvalidValue;
}

template <typename Action>
cudaError_t dispatch(int head_tiles, int cta_chunk, bool fp8, int cluster_size, Action action) {
  return fp8 ? dispatch_shape<true>(head_tiles, cta_chunk, cluster_size, action)
             : dispatch_shape<false>(head_tiles, cta_chunk, cluster_size, action);
}

}  // namespace

int shared_memory_bytes(int head_tiles, int cta_chunk, bool fp8, int cluster_size, int positions_per_split) {
  return SharedLayout(head_tiles, cta_chunk, fp8, cluster_size, positions_per_split).total;
}

cudaError_t launch_sparse_decode(const SparseDecodeParams& params, cudaStream_t stream) {
  return dispatch(params.head_tiles, params.cta_chunk, params.kv_fp8 != 0, params.cluster_size,
                  [&](auto kernel) { return kernel.launch(params, stream); });
}

cudaError_t max_active_clusters(int head_tiles, int cta_chunk, bool fp8, int cluster_size, int positions_per_split,
                                int* clusters) {
  return dispatch(head_tiles, cta_chunk, fp8, cluster_size,
                  [&](auto kernel) { return kernel.max_active_clusters(positions_per_split, clusters); });
}

}  // namespace decode
}  // namespace sparse_mla
