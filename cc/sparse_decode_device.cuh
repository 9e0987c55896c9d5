// Building blocks of the decode kernels (cc/sparse_decode_kernel.cu: up to 32 heads per CTA,
// cc/sparse_decode_wide_kernel.cu: 64): tensor-core and copy instructions, the fp8_ds_mla
// dequantization, lazy softmax rescaling, position -> slot translation, the slot gather, named
// barriers, the split merge and the launcher; some serve one kernel only (the mma.sync, ldmatrix and
// movmatrix wrappers the first; the named-barrier arrive, the proxy fence and the programmatic
// dependent-launch pair the wide one). Included by those two translation units only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "cc/sparse_decode.h"

namespace sparse_mla {
namespace decode {

constexpr int kThreads = 256;  // 8 warps: a CTA of the first kernel and of the merge launch, the wide kernel's consumers
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGridZ = 65535;  // CUDA's limit on gridDim.z
constexpr float kNegInf = -INFINITY;
constexpr float kLn2 = 0.69314718055994530942f;

// Lazy softmax rescaling: the running maximum (base 2) of a head's scores moves only when a stage's
// maximum exceeds it by more than kLazyMaxSlackLog2. Most stages then keep alpha = 1 exactly and the
// kernels skip the rescale of their output accumulators. Probabilities reach 2^8 instead of 1: bf16
// holds them with the same relative precision, and fp32 sums of 2048 of them (< 2^19) cannot overflow;
// the normalization by the row sum at the end is unchanged. Idea and threshold (8, log2 units) are
// FlashAttention-4's conditional softmax rescaling (Dao et al., flash-attention's CuTe DSL kernels).
constexpr float kLazyMaxSlackLog2 = 8.f;

// The next running maximum for a stage whose scores peak at `stage_max` (both -inf while nothing was valid).
__device__ __forceinline__ float lazy_running_max(float running_max, float stage_max) {
  return stage_max > running_max + kLazyMaxSlackLog2 ? stage_max : running_max;
}

// Programmatic dependent launch (Hopper; PTX griddepcontrol). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start before the kernel ahead of it in the stream
// has finished: once every CTA of that kernel has called allow_dependent_launch or exited. It must call
// wait_for_prerequisite_grids before it reads anything that kernel wrote: that returns once the kernel
// has completed and its writes are visible (at once for a kernel launched the usual way).
__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_prerequisite_grids() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: fill 16 zero bytes, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 4 : 0;  // 0: fill 4 zero bytes, read nothing
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// This thread's generic-proxy shared-memory writes (st.shared, cp.async) made visible to the async
// proxy (wgmma operands) once a barrier orders them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

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

// The transpose of an 8 x 8 bf16 matrix held as an mma fragment (lane l: row l / 4, columns 2 (l % 4)
// and + 1 in one register), in the same layout.
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t load_pair(const __nv_bfloat16* row, int col, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint32_t*>(row + col)) : 0u;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Dequantizes four fp8 e4m3 values (the low byte first) times `scale` into two bf16 pairs: .x of the
// low two bytes, .y of the high two. e4m3 -> f16 is exact; each product is rounded to bf16 once, as
// the Triton kernel does (sparse_mla_attention.py). The word's halves go to the conversion as 16-bit
// registers, which it reads in place (F2FP ... R.H1): no shift for the high pair, 6 instructions a pair.
__device__ __forceinline__ uint2 dequantize_word(uint32_t word, float scale) {
  uint32_t halves[2];  // f16x2 of the low and the high two bytes
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
      : "=r"(halves[0]), "=r"(halves[1])
      : "r"(word));
  uint32_t pairs[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&halves[i]));
    pairs[i] = pack_bf16(f.x * scale, f.y * scale);
  }
  return make_uint2(pairs[0], pairs[1]);
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
    const float inv = total != 0.f ? 1.f / total : 0.f;  // NaN propagates
    return make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  }
  __device__ __forceinline__ float lse(float base) const { return total != 0.f ? base + log2f(total) : kNegInf; }
};

// Four output columns of one head of a finished token, as bf16.
__device__ __forceinline__ void store_output(const SparseDecodeParams& p, int token, int head, int col, const float4& x) {
  auto* out = reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + token * p.out_token_stride +
                                          head * p.out_head_stride + col);
  out[0] = pack_bf16(x.x, x.y);
  out[1] = pack_bf16(x.z, x.w);
}

// The (split, token, head group) of a CTA: the grid is cluster ranks x splits x (T x head groups).
struct CtaWork {
  int split, token, head_group;
  __device__ __forceinline__ explicit CtaWork(const SparseDecodeParams& p)
      : split(blockIdx.y), token(blockIdx.z / p.head_groups), head_group(blockIdx.z % p.head_groups) {}
};

// Positions [begin, begin + count) of `token`'s top-k row -> global slot rows (rows[i], -1 = masked),
// by the kBlockThreads threads running it (the CTA's, or one warpgroup's: consecutive threads), kUnroll
// independent loads in flight. Position p of request req_id[t], mapped to the rank's local position l
// (cc/topk_filter.h), lives in block block_table[req, l / 64], slot l % 64; -1, columns past the row's
// topk_length, p >= token_kv_len[t], positions of other DCP ranks, l past the block table and block
// ids outside [0, num_blocks) are masked.
template <int kBlockThreads = kThreads>
__device__ __forceinline__ void translate_positions(const SparseDecodeParams& p, int token, int begin, int count,
                                                    int* rows) {
  constexpr int kUnroll = 4;
  const int tid = threadIdx.x % kBlockThreads;
  const int kv_len = p.token_kv_len[token];
  const int length = row_length(p.topk_length, token, p.topk);
  const int32_t* index_row = p.topk_indices + token * p.topk_token_stride;
  const int32_t* block_row = p.block_table + static_cast<int64_t>(p.req_id[token]) * p.block_table_stride;
  for (int base = 0; base < count; base += kBlockThreads * kUnroll) {
    int position[kUnroll], block_id[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kBlockThreads + tid, j = begin + i;
      position[u] = i < count && j < p.topk ? __ldg(index_row + j) : -1;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = begin + base + u * kBlockThreads + tid;
      position[u] = attended_local_position(p.dcp, position[u], j, length, kv_len);
      const bool valid = position[u] >= 0 && position[u] / kBlockSize < p.max_blocks_per_req;
      block_id[u] = valid ? __ldg(block_row + position[u] / kBlockSize) : -1;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kBlockThreads + tid;
      if (i < count)
        rows[i] = block_id[u] >= 0 && block_id[u] < p.num_blocks ? block_id[u] * kBlockSize + position[u] % kBlockSize
                                                                 : -1;
    }
  }
}

// Issues the cp.async copies of kChunk whole slots, as stored in the cache (1152-byte bf16 or
// 656-byte fp8_ds_mla), rows[0..kChunk) of them, by the kBlockThreads threads running it (the CTA's,
// or one warpgroup's: consecutive threads): kBlockThreads / kChunk consecutive threads copy one slot,
// its address computed once, each of them every (kBlockThreads / kChunk)-th 16-byte piece of it,
// piece `part` of slot r to `destination(r, part)` in shared memory (the kernel's staging layout).
// Masked rows are zero-filled, never read.
template <int kChunk, bool kFp8, int kBlockThreads = kThreads, typename Destination>
__device__ __forceinline__ void gather_chunk(const SparseDecodeParams& p, const int* rows, Destination destination) {
  constexpr int kThreadsPerSlot = kBlockThreads / kChunk;
  constexpr int kSlotPieces = (kFp8 ? kFp8SlotBytes : kSlotElems * 2) / 16;
  constexpr int kElemBytes = kFp8 ? 1 : 2;  // the cache's strides count elements of its dtype
  const int tid = threadIdx.x % kBlockThreads, r = tid / kThreadsPerSlot;
  const int row = rows[r];
  // Masked rows: the cache's first slot, a valid address (its pieces lie within it), nothing read.
  const auto* src = static_cast<const unsigned char*>(p.kv_cache);
  if (row >= 0)
    src += (static_cast<int64_t>(row / kBlockSize) * p.kv_block_stride +
            static_cast<int64_t>(row % kBlockSize) * p.kv_slot_stride) * kElemBytes;
#pragma unroll
  for (int part = tid % kThreadsPerSlot; part < kSlotPieces; part += kThreadsPerSlot)
    cp_async_16(destination(r, part), src + part * 16, row >= 0);
}

// Starts a cp.async ring of kStages gathered chunks, `issue(c)` copying chunk c into stage c % kStages:
// issues chunks 0..kStages - 2, one commit group each (empty past num_chunks). The kernel then commits
// one group per chunk it takes on, so `cp_async_wait<kStages - 2>` finds the oldest chunk not yet
// awaited landed (for this thread; a barrier makes it every thread's).
template <int kStages, typename Issue>
__device__ __forceinline__ void start_gather_ring(const Issue& issue, int num_chunks) {
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_chunks) issue(s);
    cp_async_commit();
  }
}

// Barrier `id` (0..15) of the `threads` threads (whole warps) that use it; id 0 with every thread of
// the CTA is __syncthreads().
__device__ __forceinline__ void sync_named(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at barrier `id` for `threads` threads without waiting (the producer side of sync_named).
__device__ __forceinline__ void arrive_named(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Split-KV bookkeeping of one CTA after it stored its partial output and LSE (the workspace layout of
// SparseDecodeParams): bumps the arrival counter of its (token, head group, rank) and tells whether it
// arrived last, in which case it has reset the counter (so a later launch or CUDA-graph replay finds it
// zero) and may read every split's partials. Called by all threads of the CTA.
__device__ __forceinline__ bool arrived_last(const SparseDecodeParams& p, int64_t group_index, int rank) {
  __shared__ int last;
  __syncthreads();  // every thread's partial stores precede thread 0's fence (cumulativity)
  if (threadIdx.x == 0) {
    __threadfence();  // release: this CTA's partials are visible before its arrival counts
    int32_t* counter = p.counters + group_index * kClusterSize + rank;
    last = atomicAdd(counter, 1) == p.num_splits - 1;
    if (last) *counter = 0;  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();  // acquire: the other splits' partials are visible to this CTA's loads
  return true;
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

// The parameters of tokens [first, first + count) of `p` alone (the kernels index every per-token
// tensor and the split workspace by token).
inline SparseDecodeParams token_slice(const SparseDecodeParams& p, int first, int count) {
  SparseDecodeParams part = p;
  const int64_t t = first;
  const int64_t groups = t * p.head_groups;
  const int64_t heads_per_cta = kHeadTileRows * p.head_tiles;
  part.q_nope = static_cast<const __nv_bfloat16*>(p.q_nope) + t * p.q_nope_token_stride;
  part.q_rope = static_cast<const __nv_bfloat16*>(p.q_rope) + t * p.q_rope_token_stride;
  part.topk_indices = p.topk_indices + t * p.topk_token_stride;
  part.req_id = p.req_id + t;
  part.token_kv_len = p.token_kv_len + t;
  if (p.topk_length != nullptr) part.topk_length = p.topk_length + t;
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

// Calls `launch(part, count)` for consecutive slices of p's tokens, `count` tokens each, with at most
// kMaxGridZ (token, head group) pairs (a grid dimension's limit): more tokens take more launches, each
// on its own tokens' slices of every per-token tensor and of the workspace. Returns the first error.
template <typename Launch>
cudaError_t for_token_slices(const SparseDecodeParams& p, Launch launch) {
  const int max_tokens = kMaxGridZ / p.head_groups;
  for (int first = 0; first < p.num_tokens; first += max_tokens) {
    const int count = p.num_tokens - first < max_tokens ? p.num_tokens - first : max_tokens;
    const cudaError_t error = launch(token_slice(p, first, count), count);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

// Launches and sizes one kernel instantiation. `Kernel` provides kFunction (a __global__ taking
// SparseDecodeParams), kBlockThreads, kClusterCtas (CTAs per cluster along x, 1: none) and
// shared_bytes(positions_per_split).
template <typename Kernel>
struct Launcher {
  // Dynamic plus static shared memory of one CTA (its __shared__ variables, e.g. arrived_last's):
  // both count against the device's per-block limit. 0 static bytes if CUDA cannot say (the launch
  // then reports the error).
  static int total_shared_bytes(int positions_per_split) {
    static const int static_bytes = [] {
      cudaFuncAttributes attributes{};
      return cudaFuncGetAttributes(&attributes, Kernel::kFunction) == cudaSuccess
                 ? static_cast<int>(attributes.sharedSizeBytes)
                 : 0;
    }();
    return Kernel::shared_bytes(positions_per_split) + static_bytes;
  }

  // Raises the kernel's dynamic shared-memory limit to `bytes` on the current device (once per size seen).
  static cudaError_t allow_shared_memory(int bytes) {
    constexpr int kMaxDevices = 64;
    static int configured_bytes[kMaxDevices] = {};
    int device = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) return error;
    if (device < kMaxDevices && bytes <= configured_bytes[device]) return cudaSuccess;
    error = cudaFuncSetAttribute(Kernel::kFunction, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (error == cudaSuccess && device < kMaxDevices) configured_bytes[device] = bytes;
    return error;
  }

  // Grid kClusterCtas x splits x token_groups CTAs of kBlockThreads, in clusters of kClusterCtas along x.
  static cudaLaunchConfig_t config(int num_splits, int token_groups, int bytes, cudaStream_t stream,
                                   cudaLaunchAttribute* cluster) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(Kernel::kClusterCtas, num_splits, token_groups);
    config.blockDim = dim3(Kernel::kBlockThreads, 1, 1);
    config.dynamicSmemBytes = bytes;
    config.stream = stream;
    cluster->id = cudaLaunchAttributeClusterDimension;
    cluster->val.clusterDim.x = Kernel::kClusterCtas;
    cluster->val.clusterDim.y = 1;
    cluster->val.clusterDim.z = 1;
    config.attrs = cluster;
    config.numAttrs = Kernel::kClusterCtas > 1 ? 1 : 0;
    return config;
  }

  static cudaError_t launch(const SparseDecodeParams& p, cudaStream_t stream) {
    const int bytes = Kernel::shared_bytes(p.positions_per_split);
    const cudaError_t error = allow_shared_memory(bytes);
    if (error != cudaSuccess) return error;
    return for_token_slices(p, [&](const SparseDecodeParams& part, int count) {
      cudaLaunchAttribute cluster;
      const cudaLaunchConfig_t launch_config = config(part.num_splits, count * part.head_groups, bytes, stream, &cluster);
      return cudaLaunchKernelEx(&launch_config, Kernel::kFunction, part);
    });
  }

  static cudaError_t max_active_clusters(int positions_per_split, int* clusters) {
    const int bytes = Kernel::shared_bytes(positions_per_split);
    cudaError_t error = allow_shared_memory(bytes);
    if (error != cudaSuccess) return error;
    if constexpr (Kernel::kClusterCtas > 1) {
      cudaLaunchAttribute cluster;
      const cudaLaunchConfig_t launch_config = config(1, 1, bytes, nullptr, &cluster);
      return cudaOccupancyMaxActiveClusters(clusters, Kernel::kFunction, &launch_config);
    }
    int device = 0, sms = 0, per_sm = 0;
    if ((error = cudaGetDevice(&device)) != cudaSuccess) return error;
    if ((error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return error;
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel::kFunction, Kernel::kBlockThreads, bytes);
    if (error != cudaSuccess) return error;
    *clusters = sms * per_sm;
    return cudaSuccess;
  }
};

}  // namespace decode
}  // namespace sparse_mla
