// The slot gather of the decode kernels: cp.async copies of whole cache slots into a shared-memory ring.
#pragma once

#include <cstdint>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/decode/components/cta_work.cuh"
#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

// Issues the cp.async copies of kChunk whole slots, as stored in the cache (1152-byte bf16 or
// 656-byte fp8_ds_mla), rows[0..kChunk) of them, by the kBlockThreads threads running it (the CTA's,
// or one warpgroup's: consecutive threads): kBlockThreads / kChunk consecutive threads copy one slot,
// its address computed once, each of them every (kBlockThreads / kChunk)-th 16-byte piece of it,
// piece `part` of slot r to `destination(r, part)` in shared memory (the kernel's staging layout).
// Masked rows are zero-filled, never read.
template <bool kFp8>
constexpr int kSlotBytes = kFp8 ? kFp8SlotBytes : kSlotElems * 2;  // a slot as the cache stores it

// The address of global slot row `row` (block row / 64, slot row % 64) of the cache, row >= 0.
template <bool kFp8>
__device__ __forceinline__ const unsigned char* slot_address(const SparseDecodeParams& p, int row) {
  constexpr int kElemBytes = kFp8 ? 1 : 2;  // the cache's strides count elements of its dtype
  return static_cast<const unsigned char*>(p.kv_cache) +
         (static_cast<int64_t>(row / kBlockSize) * p.kv_block_stride +
          static_cast<int64_t>(row % kBlockSize) * p.kv_slot_stride) * kElemBytes;
}

template <int kChunk, bool kFp8, int kBlockThreads = kThreads, typename Destination>
__device__ __forceinline__ void gather_chunk(const SparseDecodeParams& p, const int* rows, Destination destination) {
  constexpr int kThreadsPerSlot = kBlockThreads / kChunk;
  constexpr int kSlotPieces = kSlotBytes<kFp8> / 16;
  const int tid = threadIdx.x % kBlockThreads, r = tid / kThreadsPerSlot;
  const int row = rows[r];
  // Masked rows: the cache's first slot, a valid address (its pieces lie within it), nothing read.
  const unsigned char* src = row >= 0 ? slot_address<kFp8>(p, row) : static_cast<const unsigned char*>(p.kv_cache);
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

}  // namespace decode
}  // namespace sparse_mla
