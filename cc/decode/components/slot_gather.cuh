// The slot gather of the decode kernels: cp.async copies of whole cache slots into a shared-memory ring.
#pragma once

#include <cstdint>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/decode/components/cta_work.cuh"
#include "cc/decode/components/operand_atoms.cuh"
#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

// The first byte of the cache slot of `row` (block row / 64, slot row % 64) on the bf16 cache or (kFp8) the
// fp8_ds_mla one; for a masked row (< 0) the cache's first slot: a valid address, never read.
template <bool kFp8>
__device__ __forceinline__ const unsigned char* cache_slot(const SparseDecodeParams& p, int row) {
  constexpr int kElemBytes = kFp8 ? 1 : 2;  // the cache's strides count elements of its dtype
  const auto* slot = static_cast<const unsigned char*>(p.kv_cache);
  if (row >= 0)
    slot += (static_cast<int64_t>(row / kBlockSize) * p.kv_block_stride +
             static_cast<int64_t>(row % kBlockSize) * p.kv_slot_stride) * kElemBytes;
  return slot;
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
  const int tid = threadIdx.x % kBlockThreads, r = tid / kThreadsPerSlot;
  const int row = rows[r];
  const unsigned char* src = cache_slot<kFp8>(p, row);  // masked rows: its pieces lie within the first slot
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

// One producer warpgroup on the bf16 cache: tile c's kTile slots straight into stage c % kStages of `tiles` (bf16
// slots as 9 atoms: 16-byte piece j -> chunk j % 8 of atom j / 8), one tile in flight while the consumers read
// another. Stage s is announced on named barrier kFullBarrier + s and taken back on kEmptyBarrier + s, each of
// kStageThreads threads. Copied 16 slots at a time, 8 threads a slot: a warp's copies read 128 contiguous bytes
// of each of 4 slots.
template <int kTile, int kStages, int kFullBarrier, int kEmptyBarrier, int kStageThreads>
__device__ __forceinline__ void produce_bf16_tiles(const SparseDecodeParams& p, const int* rows, unsigned char* tiles,
                                                   int num_tiles) {
  constexpr int kRowsPerCopy = 16, kWarpgroupThreads = 128;
  constexpr int kTileBytes = kSlotAtoms * kTile * 128;
  auto issue = [&](int c) {
    unsigned char* tile = tiles + (c % kStages) * kTileBytes;
#pragma unroll
    for (int first = 0; first < kTile; first += kRowsPerCopy)
      gather_chunk<kRowsPerCopy, false, kWarpgroupThreads>(p, rows + c * kTile + first, [=](int r, int part) {
        return tile + atom_offset(first + r, part * 8, kTile);
      });
  };
  issue(0);
  cp_async_commit();
  for (int c = 0; c < num_tiles; ++c) {
    cp_async_wait<0>();   // this thread's copies of tile c have landed
    fence_proxy_async();  // ... for wgmma too
    arrive_named(kFullBarrier + c % kStages, kStageThreads);
    if (c + 1 < num_tiles) {
      if (c + 1 >= kStages) sync_named(kEmptyBarrier + (c + 1) % kStages, kStageThreads);  // tile c - 1 consumed
      issue(c + 1);
    }
    cp_async_commit();
  }
}

}  // namespace decode
}  // namespace sparse_mla
