// Latency-first sparse MLA decode for Hopper: one launch, request-local top-k positions in, attention
// out, for any number of query heads (1..128) and any token count (split-KV chosen by the planner).
//
// Work decomposition
// ------------------
// A thread-block cluster of 8 CTAs serves one (token, split of its top-k row, group of <= 64 heads).
// CTA rank r of the cluster owns the c_kv columns [64 r, 64 r + 64) and the k_rope columns
// [8 r, 8 r + 8): per position it gathers only those 144 bytes of the 1152-byte slot, so the 8 CTAs
// together read each selected slot once. Scores need all 576 columns, so each CTA computes a partial
// score q[:, cols_r] . k[:, cols_r] on tensor cores (mma.sync m16n8k16 / m16n8k8, bf16 in, fp32 out)
// and the cluster sums the 8 partials through distributed shared memory: rank r owns 8 of each
// chunk's 64 positions; every rank pushes its partial scores of those positions into rank r with
// st.async (the bytes count down an mbarrier of the receiver, so no cluster-wide barrier and no
// fence that would wait for the gathers in flight), rank r adds them in rank order and pushes the
// sums to all 8 CTAs the same way, so every CTA holds bit-identical scores. The exchange is
// software-pipelined: while chunk c is normalized and multiplied with the values, the partial
// scores of chunk c + 2 are pushed and chunk c + 1 is summed (kExchangeBuffers buffers of each
// kind; see the main loop for why three suffice). The softmax then runs redundantly in every CTA,
// and P . c_kv[:, cols_r] gives exactly the output columns the CTA owns: c_kv is both the key (with q_nope) and the value. One latent head is
// shared by all query heads, so each gathered row serves all heads of the CTA.
//
// Positions -> rows: every CTA translates its split's positions through the block table up front
// (position p of request req_id[t] lives in block block_table[req, p / 64], slot p % 64); -1, p >=
// token_kv_len[t], p past the block table, and block ids outside [0, num_blocks) are masked (their
// rows are zero-filled by cp.async and their scores set to -inf, never read from memory). Rows are
// then gathered with 16-byte cp.async into a kStages-deep ring of 64-position chunks.
//
// Split-KV merge without a second kernel: with num_splits > 1 each CTA writes its normalized partial
// output (its 64 columns) and base-2 LSE to the workspace, then bumps the arrival counter of its
// (token, head group, rank); the last CTA to arrive merges the splits of its 64 columns (one fp32
// read of each partial, in parallel over 8 CTAs per token and head group) and resets the counter, so
// a later launch or CUDA-graph replay finds it zero.
//
// Ready for fp8_ds_mla (656-byte slots: 512 fp8 e4m3 c_kv, 4 fp32 scales per 128 columns, 64 bf16
// k_rope): rank r's 64 columns lie inside scale group r / 2, so the same gather (64 fp8 bytes, one
// scale, 16 rope bytes) and an fp8 -> bf16 conversion of the fragments in registers serve that format.
#include "cc/sparse_decode.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cmath>

namespace sparse_mla {
namespace decode {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;                       // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kWarpTiles = 64 / (8 * kWarps);       // 8-wide position / column tiles per warp
constexpr int kLookahead = 2;                       // scores of chunk c + 2 are pushed while c finishes
constexpr int kExchangeBuffers = kLookahead + 1;    // score exchanges in flight
constexpr int kStages = 4;                          // gathered chunks held per CTA (kLookahead + 1 in use)
constexpr int kColsPerRank = kKvLoraRank / kClusterSize;   // 64 c_kv columns
constexpr int kRopePerRank = kRopeDim / kClusterSize;      // 8 k_rope columns
constexpr int kRowElems = kColsPerRank + kRopePerRank;     // 72 bf16 = 144 B per gathered row
constexpr int kPiecesPerRow = kRowElems * 2 / 16;          // 9 16-byte copies per row
constexpr int kScoreStride = kChunk + 4;            // fp32 score row stride (16-byte aligned rows)
constexpr int kProbStride = kChunk + 8;             // bf16 probability row stride: 144 B, conflict-free
constexpr float kNegInf = -INFINITY;
constexpr float kLn2 = 0.69314718055994530942f;

static_assert(kColsPerRank == 64 && kRopePerRank == 8, "fragment code assumes 64 + 8 columns per rank");
static_assert(kChunk == 8 * kWarpTiles * kWarps, "each warp owns 8 * kWarpTiles positions of a chunk (scores)");
static_assert(kColsPerRank == 8 * kWarpTiles * kWarps, "each warp owns 8 * kWarpTiles output columns (values)");

constexpr int kColsPerOwner = kChunk / kClusterSize;  // 8 positions of a chunk summed by each rank

// Byte offsets of the dynamic shared memory of one CTA.
struct SharedLayout {
  int kv, received, scores, prob, row_max, row_sum, row_alpha, barriers, rows, total;
  __host__ __device__ SharedLayout(int head_tiles, int positions_per_split) {
    const int heads = kHeadTileRows * head_tiles;
    kv = 0;                                                          // [kStages][kChunk][kRowElems] bf16
    received = kv + kStages * kChunk * kRowElems * 2;  // [kExchangeBuffers][kClusterSize][heads][8] fp32
    scores = received + kExchangeBuffers * kClusterSize * heads * kColsPerOwner * 4;  // [..][heads][kScoreStride]
    prob = scores + kExchangeBuffers * heads * kScoreStride * 4;     // [heads][kProbStride] bf16
    row_max = prob + heads * kProbStride * 2;                        // [heads] fp32 each
    row_sum = row_max + heads * 4;
    row_alpha = row_sum + heads * 4;
    barriers = (row_alpha + heads * 4 + 7) / 8 * 8;  // mbarriers: received[kExchangeBuffers], scores[...]
    rows = barriers + 2 * kExchangeBuffers * 8;                      // [positions_per_split] int32
    total = rows + positions_per_split * 4;
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

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The address of the same shared-memory location in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t in_rank(uint32_t address, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
  return remote;
}

__device__ __forceinline__ void barrier_init(uint32_t barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(barrier));
}

// The one local arrival of a phase, which also expects `bytes` from st.async (possibly already there).
__device__ __forceinline__ void barrier_expect(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}

__device__ __forceinline__ void barrier_wait(uint32_t barrier, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
}

// Stores 16 bytes into another CTA's shared memory; they complete that CTA's mbarrier transaction count.
__device__ __forceinline__ void push4(uint32_t remote, float4 v, uint32_t remote_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   remote),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(remote_barrier)
               : "memory");
}

// The two halves of a cluster-wide barrier (all threads of all ranks): release what this thread wrote
// (here the mbarrier initialization), and later acquire what every rank released before arriving.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// CTAs per SM the register budget must allow: the planner sizes its grid to the clusters one wave
// holds (max_active_clusters), so registers set how many splits fit (16 heads: 3 CTAs of <= 85
// registers; 32 heads: 2 of 128; 64 heads: 1).
template <int kHeadTiles>
constexpr int kMinBlocksPerSm = kHeadTiles == 1 ? 3 : kHeadTiles == 2 ? 2 : 1;

template <int kHeadTiles>
__global__ void __cluster_dims__(kClusterSize, 1, 1) __launch_bounds__(kThreads, kMinBlocksPerSm<kHeadTiles>)
    sparse_decode_kernel(const SparseDecodeParams p) {
  constexpr int kHeads = kHeadTileRows * kHeadTiles;
  extern __shared__ __align__(128) unsigned char smem[];
  const SharedLayout layout(kHeadTiles, p.positions_per_split);
  auto* kv_stages = reinterpret_cast<__nv_bfloat16*>(smem + layout.kv);
  auto* received = reinterpret_cast<float*>(smem + layout.received);  // partial scores of my 8 positions
  auto* scores = reinterpret_cast<float*>(smem + layout.scores);      // full scores of the chunk
  auto* prob = reinterpret_cast<__nv_bfloat16*>(smem + layout.prob);
  auto* row_max = reinterpret_cast<float*>(smem + layout.row_max);  // running max, base 2
  auto* row_sum = reinterpret_cast<float*>(smem + layout.row_sum);  // running sum of exp2
  auto* row_alpha = reinterpret_cast<float*>(smem + layout.row_alpha);  // this chunk's rescale
  auto* rows = reinterpret_cast<int*>(smem + layout.rows);  // [positions_per_split] global slot, -1 = masked
  const uint32_t received_barrier = shared_address(smem + layout.barriers);  // + 8 * buffer
  const uint32_t scores_barrier = received_barrier + 8 * kExchangeBuffers;  // + 8 * buffer
  __shared__ int arrived_last;

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int split = blockIdx.y;
  const int token = blockIdx.z / p.head_groups;
  const int head_group = blockIdx.z % p.head_groups;
  const int head_base = head_group * kHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = lane >> 2, quad = lane & 3;  // mma fragment coordinates

  if (tid == 0) {
    for (int b = 0; b < 2 * kExchangeBuffers; ++b) barrier_init(received_barrier + 8 * b);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Every rank's mbarriers must be initialized before anyone pushes to them: arrive now, wait only
  // before the first push, so the cluster barrier's latency hides behind the loads below.
  cluster_arrive();

  // 1. Query fragments of this rank's columns, kept in registers for the whole loop (loaded first: they
  //    do not depend on the index -> block-table chain below, so both are in flight together).
  uint32_t q_nope_frag[kHeadTiles][4][4];
  uint32_t q_rope_frag[kHeadTiles][2];
  {
    const auto* q_nope = static_cast<const __nv_bfloat16*>(p.q_nope) + token * p.q_nope_token_stride;
    const auto* q_rope = static_cast<const __nv_bfloat16*>(p.q_rope) + token * p.q_rope_token_stride;
#pragma unroll
    for (int mt = 0; mt < kHeadTiles; ++mt) {
      const int h0 = head_base + mt * kHeadTileRows + group, h1 = h0 + 8;
      const bool v0 = h0 < p.num_heads, v1 = h1 < p.num_heads;
      const __nv_bfloat16* n0 = q_nope + (v0 ? h0 : 0) * p.q_nope_head_stride + rank * kColsPerRank;
      const __nv_bfloat16* n1 = q_nope + (v1 ? h1 : 0) * p.q_nope_head_stride + rank * kColsPerRank;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const int col = ks * 16 + 2 * quad;
        q_nope_frag[mt][ks][0] = load_pair(n0, col, v0);
        q_nope_frag[mt][ks][1] = load_pair(n1, col, v1);
        q_nope_frag[mt][ks][2] = load_pair(n0, col + 8, v0);
        q_nope_frag[mt][ks][3] = load_pair(n1, col + 8, v1);
      }
      const __nv_bfloat16* r0 = q_rope + (v0 ? h0 : 0) * p.q_rope_head_stride + rank * kRopePerRank;
      const __nv_bfloat16* r1 = q_rope + (v1 ? h1 : 0) * p.q_rope_head_stride + rank * kRopePerRank;
      q_rope_frag[mt][0] = load_pair(r0, 2 * quad, v0);
      q_rope_frag[mt][1] = load_pair(r1, 2 * quad, v1);
    }
  }
  // 2. This split's positions -> global slot rows (masked entries -1), kUnroll independent loads in flight.
  {
    constexpr int kUnroll = 4;
    const int kv_len = p.token_kv_len[token];
    const int32_t* index_row = p.topk_indices + token * p.topk_token_stride;
    const int32_t* block_row = p.block_table + static_cast<int64_t>(p.req_id[token]) * p.block_table_stride;
    const int begin = split * p.positions_per_split;
    for (int base = 0; base < p.positions_per_split; base += kThreads * kUnroll) {
      int position[kUnroll], block_id[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + tid, j = begin + i;
        position[u] = i < p.positions_per_split && j < p.topk ? __ldg(index_row + j) : -1;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool valid = position[u] >= 0 && position[u] < kv_len && position[u] / kBlockSize < p.max_blocks_per_req;
        block_id[u] = valid ? __ldg(block_row + position[u] / kBlockSize) : -1;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + tid;
        if (i < p.positions_per_split)
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

  // 3. Gather ring: chunk c's 64 rows (this rank's 144 bytes of each) into stage c % kStages.
  const auto* cache = static_cast<const __nv_bfloat16*>(p.kv_cache);
  auto issue_chunk = [&](int chunk) {
    __nv_bfloat16* stage = kv_stages + (chunk % kStages) * kChunk * kRowElems;
    for (int piece = tid; piece < kChunk * kPiecesPerRow; piece += kThreads) {
      const int r = piece / kPiecesPerRow, part = piece % kPiecesPerRow;
      const int row = rows[chunk * kChunk + r];
      const __nv_bfloat16* src = cache;
      if (row >= 0) {
        src = cache + static_cast<int64_t>(row / kBlockSize) * p.kv_block_stride +
              static_cast<int64_t>(row % kBlockSize) * p.kv_slot_stride +
              (part < 8 ? rank * kColsPerRank + part * 8 : kKvLoraRank + rank * kRopePerRank);
      }
      if (!(p.ablate & kAblateGather)) cp_async_16(stage + r * kRowElems + part * 8, src, row >= 0);
    }
  };

  // 4. Partial scores of chunk c over this rank's columns (warp w: positions [8 w, 8 w + 8) per tile),
  //    pushed to the rank that owns each 8 positions: received[c % 3][my rank] of rank (w * kWarpTiles + nt).
  auto score_and_push = [&](int chunk) {
    const __nv_bfloat16* kv = kv_stages + (chunk % kStages) * kChunk * kRowElems;
    const int buffer = chunk % kExchangeBuffers;
    float score[kHeadTiles][kWarpTiles][4];
#pragma unroll
    for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kWarpTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) score[mt][nt][i] = 0.f;
#pragma unroll
    for (int nt = 0; nt < kWarpTiles; ++nt) {
      const auto* k_row = reinterpret_cast<const uint32_t*>(kv + (warp * 8 * kWarpTiles + nt * 8 + group) * kRowElems);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint32_t b0 = k_row[ks * 8 + quad], b1 = k_row[ks * 8 + 4 + quad];
#pragma unroll
        for (int mt = 0; mt < kHeadTiles; ++mt) mma_m16n8k16(score[mt][nt], q_nope_frag[mt][ks], b0, b1);
      }
      const uint32_t b_rope = k_row[kColsPerRank / 2 + quad];
#pragma unroll
      for (int mt = 0; mt < kHeadTiles; ++mt)
        mma_m16n8k8(score[mt][nt], q_rope_frag[mt][0], q_rope_frag[mt][1], b_rope);
    }
    // Lanes quad and quad ^ 1 hold columns 2 quad.. of rows g and g + 8: the even lane pushes 4
    // columns of row g, the odd lane 4 columns of row g + 8, one 16-byte store each.
    if (p.ablate & kAblateExchange) {  // own partial scores as the full scores, no exchange
#pragma unroll
      for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kWarpTiles; ++nt) {
          const int row = mt * kHeadTileRows + group, col = warp * 8 * kWarpTiles + nt * 8 + 2 * quad;
          float* tile = scores + buffer * kHeads * kScoreStride;
          *reinterpret_cast<float2*>(tile + row * kScoreStride + col) = make_float2(score[mt][nt][0], score[mt][nt][1]);
          *reinterpret_cast<float2*>(tile + (row + 8) * kScoreStride + col) =
              make_float2(score[mt][nt][2], score[mt][nt][3]);
        }
      return;
    }
    const float* mine = received + (buffer * kClusterSize + rank) * kHeads * kColsPerOwner;
    const bool even = (quad & 1) == 0;
    const int col = 2 * (quad & ~1);
#pragma unroll
    for (int nt = 0; nt < kWarpTiles; ++nt) {
      const int owner = warp * kWarpTiles + nt;
      const uint32_t barrier = in_rank(received_barrier + 8 * buffer, owner);
#pragma unroll
      for (int mt = 0; mt < kHeadTiles; ++mt) {
        const float* c = score[mt][nt];
        const float x0 = __shfl_xor_sync(0xffffffffu, c[0], 1), x1 = __shfl_xor_sync(0xffffffffu, c[1], 1);
        const float x2 = __shfl_xor_sync(0xffffffffu, c[2], 1), x3 = __shfl_xor_sync(0xffffffffu, c[3], 1);
        const int row = mt * kHeadTileRows + group + (even ? 0 : 8);
        const float4 v = even ? make_float4(c[0], c[1], x0, x1) : make_float4(x2, x3, c[2], c[3]);
        push4(in_rank(shared_address(mine + row * kColsPerOwner + col), owner), v, barrier);
      }
    }
  };

  // 5. Owner of 8 positions: wait for the 8 partials of chunk c, add them in rank order, push the sums
  //    to scores[c % 2] of every rank.
  constexpr uint32_t kExchangeBytes = kClusterSize * kHeads * kColsPerOwner * 4;  // per buffer, either way
  auto reduce_and_broadcast = [&](int chunk) {
    if (p.ablate & kAblateExchange) return;
    const int buffer = chunk % kExchangeBuffers;
    if (tid == 0) barrier_expect(received_barrier + 8 * buffer, kExchangeBytes);
    barrier_wait(received_barrier + 8 * buffer, (chunk / kExchangeBuffers) & 1);
    const float* partials = received + buffer * kClusterSize * kHeads * kColsPerOwner;
    for (int v = tid; v < kHeads * kColsPerOwner / 4; v += kThreads) {
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int q = 0; q < kClusterSize; ++q) {
        const float4 x = reinterpret_cast<const float4*>(partials + q * kHeads * kColsPerOwner)[v];
        sum.x += x.x;
        sum.y += x.y;
        sum.z += x.z;
        sum.w += x.w;
      }
      const int row = v / (kColsPerOwner / 4), col = rank * kColsPerOwner + (v % (kColsPerOwner / 4)) * 4;
      const uint32_t local = shared_address(scores + (buffer * kHeads + row) * kScoreStride + col);
#pragma unroll
      for (int q = 0; q < kClusterSize; ++q)
        push4(in_rank(local, q), sum, in_rank(scores_barrier + 8 * buffer, q));
    }
  };

  const int num_chunks = p.positions_per_split / kChunk;
  float out_acc[kHeadTiles][kWarpTiles][4];
#pragma unroll
  for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kWarpTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) out_acc[mt][nt][i] = 0.f;

  // Pipeline. Iteration c: gather chunk c + kStages - 1; sum chunk c + 1 (its partials were pushed
  // one iteration earlier); push the partial scores of chunk c + kLookahead; wait for the sums of
  // chunk c, then softmax and P . V of chunk c. Buffer b = c % kExchangeBuffers of either kind is
  // written again only for chunk c + kExchangeBuffers, whose partials a rank pushes in iteration
  // c + 1 or later, i.e. after it received the sums of chunk c -- which every owner sent after
  // reading its received[b] -- and after it read its own scores[b]. The same order proves that an
  // mbarrier phase has completed before bytes of its next phase arrive.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_chunks) issue_chunk(s);
    cp_async_commit();
  }
  cp_async_wait<kStages - 2>();  // chunk 0 has landed
  __syncthreads();
  cluster_wait();  // every rank's mbarriers are initialized
  score_and_push(0);
  if (1 < num_chunks) {
    cp_async_wait<kStages - 3>();  // chunk 1 has landed
    __syncthreads();
    score_and_push(1);
  }
  reduce_and_broadcast(0);
  static_assert(kLookahead == 2, "the prologue pushes chunks 0 and 1");

  constexpr int kThreadsPerRow = kThreads / kHeads;  // softmax: threads sharing one head's row
  constexpr int kColsPerThread = kChunk / kThreadsPerRow;
  static_assert(kColsPerThread % 2 == 0, "probabilities are stored in pairs");

  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    // Stage (chunk - 1) % kStages is free: chunk - 1 was consumed before the last barrier.
    if (chunk + kStages - 1 < num_chunks) issue_chunk(chunk + kStages - 1);
    cp_async_commit();
    if (chunk + 1 < num_chunks) reduce_and_broadcast(chunk + 1);
    if (chunk + kLookahead < num_chunks) {
      cp_async_wait<kStages - 1 - kLookahead>();  // chunk + kLookahead has landed
      __syncthreads();
      score_and_push(chunk + kLookahead);
    }
    const int buffer = chunk % kExchangeBuffers;
    if (p.ablate & kAblateExchange) {
      __syncthreads();
    } else {
      if (tid == 0) barrier_expect(scores_barrier + 8 * buffer, kExchangeBytes);
      barrier_wait(scores_barrier + 8 * buffer, (chunk / kExchangeBuffers) & 1);
    }
    const float* score_full = scores + buffer * kHeads * kScoreStride;

    // 6. Online softmax (base 2), identical in every rank; probabilities to shared memory as bf16.
    {
      const int h = tid / kThreadsPerRow, col0 = (tid % kThreadsPerRow) * kColsPerThread;
      float x[kColsPerThread];
      float chunk_max = kNegInf;
#pragma unroll
      for (int i = 0; i < kColsPerThread; ++i) {
        const int col = col0 + i;
        x[i] = rows[chunk * kChunk + col] >= 0 ? score_full[h * kScoreStride + col] * p.scale_log2 : kNegInf;
        chunk_max = fmaxf(chunk_max, x[i]);
      }
#pragma unroll
      for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2)
        chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
      const float old_max = row_max[h];
      const float new_max = fmaxf(old_max, chunk_max);
      const float base = new_max == kNegInf ? 0.f : new_max;  // no (-inf) - (-inf)
      float sum = 0.f;
      auto* prob_row = reinterpret_cast<uint32_t*>(prob + h * kProbStride + col0);
#pragma unroll
      for (int i = 0; i < kColsPerThread; i += 2) {
        const float e0 = exp2f(x[i] - base), e1 = exp2f(x[i + 1] - base);
        sum += e0 + e1;
        prob_row[i / 2] = pack_bf16(e0, e1);
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

    // 7. out[:, cols_r] = alpha * out + P . c_kv[:, cols_r]: warp w takes columns [8 w, 8 w + 8) per tile.
    const __nv_bfloat16* kv = kv_stages + (chunk % kStages) * kChunk * kRowElems;
#pragma unroll
    for (int mt = 0; mt < kHeadTiles; ++mt) {
      const float a0 = row_alpha[mt * kHeadTileRows + group], a1 = row_alpha[mt * kHeadTileRows + group + 8];
#pragma unroll
      for (int nt = 0; nt < kWarpTiles; ++nt) {
        out_acc[mt][nt][0] *= a0;
        out_acc[mt][nt][1] *= a0;
        out_acc[mt][nt][2] *= a1;
        out_acc[mt][nt][3] *= a1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kChunk / 16; ++ks) {
      const int position = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);  // lanes 0..15 address rows
#pragma unroll
      for (int nt = 0; nt < kWarpTiles; ++nt) {
        uint32_t v_frag[2];
        ldmatrix_x2_trans(v_frag, kv + position * kRowElems + warp * 8 * kWarpTiles + nt * 8);
#pragma unroll
        for (int mt = 0; mt < kHeadTiles; ++mt) {
          const auto* p0 = reinterpret_cast<const uint32_t*>(prob + (mt * kHeadTileRows + group) * kProbStride);
          const auto* p1 = reinterpret_cast<const uint32_t*>(prob + (mt * kHeadTileRows + group + 8) * kProbStride);
          const uint32_t a[4] = {p0[ks * 8 + quad], p1[ks * 8 + quad], p0[ks * 8 + 4 + quad], p1[ks * 8 + 4 + quad]};
          mma_m16n8k16(out_acc[mt][nt], a, v_frag[0], v_frag[1]);
        }
      }
    }
    __syncthreads();  // this stage and the probabilities may be overwritten
  }
  cp_async_wait<0>();

  // 8. Normalize; write the output (one split) or this split's partial and merge if last.
  const int col_base = rank * kColsPerRank + warp * 8 * kWarpTiles;
  if (p.num_splits == 1) {
#pragma unroll
    for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int h = mt * kHeadTileRows + group + half * 8;
        if (head_base + h >= p.num_heads) continue;
        const float l = row_sum[h], inv = l > 0.f ? 1.f / l : 0.f;
        auto* out_row = static_cast<__nv_bfloat16*>(p.out) + token * p.out_token_stride +
                        (head_base + h) * p.out_head_stride + col_base;
#pragma unroll
        for (int nt = 0; nt < kWarpTiles; ++nt)
          *reinterpret_cast<uint32_t*>(out_row + nt * 8 + 2 * quad) =
              pack_bf16(out_acc[mt][nt][2 * half] * inv, out_acc[mt][nt][2 * half + 1] * inv);
      }
    if (p.lse != nullptr && rank == 0) {
      for (int h = tid; h < kHeads && head_base + h < p.num_heads; h += kThreads) {
        const float l = row_sum[h];
        p.lse[token * p.num_heads + head_base + h] = l > 0.f ? (row_max[h] + log2f(l)) * kLn2 : kNegInf;
      }
    }
    return;
  }

  const int64_t group_index = static_cast<int64_t>(token) * p.head_groups + head_group;
  float* partial_out = p.partial_out + (group_index * p.num_splits + split) * kHeads * kKvLoraRank;
#pragma unroll
  for (int mt = 0; mt < kHeadTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = mt * kHeadTileRows + group + half * 8;
      const float l = row_sum[h], inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
      for (int nt = 0; nt < kWarpTiles; ++nt)
        __stcg(reinterpret_cast<float2*>(partial_out + h * kKvLoraRank + col_base + nt * 8 + 2 * quad),
               make_float2(out_acc[mt][nt][2 * half] * inv, out_acc[mt][nt][2 * half + 1] * inv));
    }
  float* partial_lse = p.partial_lse + ((group_index * p.num_splits + split) * kClusterSize + rank) * kHeads;
  for (int h = tid; h < kHeads; h += kThreads) {
    const float l = row_sum[h];
    __stcg(partial_lse + h, l > 0.f ? row_max[h] + log2f(l) : kNegInf);
  }
  __syncthreads();  // every thread's partial stores precede thread 0's fence (cumulativity)
  if (tid == 0) {
    __threadfence();  // release: this CTA's partials are visible before its arrival counts
    int32_t* counter = p.counters + group_index * kClusterSize + rank;
    arrived_last = atomicAdd(counter, 1) == p.num_splits - 1;
    if (arrived_last) *counter = 0;  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  if (!arrived_last || (p.ablate & kAblateMerge)) return;
  __threadfence();  // acquire: the other splits' partials are visible to this CTA's loads

  // Merge (last CTA of this rank's columns): each thread merges float4s of one head's output
  // columns. It loads kMergeUnroll splits' partials and base-2 LSEs at once (one L2 round trip for
  // up to kMergeUnroll splits; no barrier) and folds them into a running max / sum / accumulator.
  constexpr int kMergeUnroll = 8;
  const float* lse_base = p.partial_lse + group_index * p.num_splits * kClusterSize * kHeads + rank * kHeads;
  const float* partial_group = p.partial_out + group_index * p.num_splits * kHeads * kKvLoraRank;
  for (int v = tid; v < kHeads * kColsPerRank / 4; v += kThreads) {
    const int h = v / (kColsPerRank / 4), col = rank * kColsPerRank + (v % (kColsPerRank / 4)) * 4;
    float running_max = kNegInf, total = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
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
      const float rescale = exp2f(running_max - base);            // 0 while nothing was valid
      total *= rescale;
      acc.x *= rescale;
      acc.y *= rescale;
      acc.z *= rescale;
      acc.w *= rescale;
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) {
        const float w = exp2f(lse[u] - base);  // 0 for a split without valid positions
        total += w;
        acc.x += w * x[u].x;
        acc.y += w * x[u].y;
        acc.z += w * x[u].z;
        acc.w += w * x[u].w;
      }
      running_max = group_max;
    }
    if (head_base + h >= p.num_heads) continue;
    const float inv = total > 0.f ? 1.f / total : 0.f;
    auto* out = reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + token * p.out_token_stride +
                                            (head_base + h) * p.out_head_stride + col);
    out[0] = pack_bf16(acc.x * inv, acc.y * inv);
    out[1] = pack_bf16(acc.z * inv, acc.w * inv);
    if (p.lse != nullptr && rank == 0 && v % (kColsPerRank / 4) == 0)
      p.lse[token * p.num_heads + head_base + h] = total > 0.f ? (running_max + log2f(total)) * kLn2 : kNegInf;
  }
}

// Raises the kernel's dynamic shared-memory limit to `bytes` on the current device (once per size seen).
template <int kHeadTiles>
cudaError_t allow_shared_memory(int bytes) {
  constexpr int kMaxDevices = 64;
  static int configured_bytes[kMaxDevices] = {};
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return error;
  if (device < kMaxDevices && bytes <= configured_bytes[device]) return cudaSuccess;
  error = cudaFuncSetAttribute(sparse_decode_kernel<kHeadTiles>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (error == cudaSuccess && device < kMaxDevices) configured_bytes[device] = bytes;
  return error;
}

template <int kHeadTiles>
cudaError_t launch(const SparseDecodeParams& p, cudaStream_t stream) {
  const int bytes = shared_memory_bytes(kHeadTiles, p.positions_per_split);
  const cudaError_t error = allow_shared_memory<kHeadTiles>(bytes);
  if (error != cudaSuccess) return error;
  const dim3 grid(kClusterSize, p.num_splits, p.num_tokens * p.head_groups);
  sparse_decode_kernel<kHeadTiles><<<grid, kThreads, bytes, stream>>>(p);
  return cudaGetLastError();
}

template <int kHeadTiles>
cudaError_t max_active_clusters(int positions_per_split, int* clusters) {
  const int bytes = shared_memory_bytes(kHeadTiles, positions_per_split);
  const cudaError_t error = allow_shared_memory<kHeadTiles>(bytes);
  if (error != cudaSuccess) return error;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kClusterSize, 1, 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = bytes;
  return cudaOccupancyMaxActiveClusters(clusters, sparse_decode_kernel<kHeadTiles>, &config);
}

}  // namespace

int shared_memory_bytes(int head_tiles, int positions_per_split) {
  return SharedLayout(head_tiles, positions_per_split).total;
}

cudaError_t launch_sparse_decode(const SparseDecodeParams& params, cudaStream_t stream) {
  switch (params.head_tiles) {
    case 1:
      return launch<1>(params, stream);
    case 2:
      return launch<2>(params, stream);
    case 4:
      return launch<4>(params, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t max_active_clusters(int head_tiles, int positions_per_split, int* clusters) {
  switch (head_tiles) {
    case 1:
      return max_active_clusters<1>(positions_per_split, clusters);
    case 2:
      return max_active_clusters<2>(positions_per_split, clusters);
    case 4:
      return max_active_clusters<4>(positions_per_split, clusters);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace decode
}  // namespace sparse_mla
