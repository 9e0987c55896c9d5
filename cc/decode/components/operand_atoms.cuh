// wgmma operands in shared memory as 128-byte-swizzled "atoms" of 64 bf16 columns, and the copy of a
// token's queries into them (the wgmma kernels: cc/decode/wide/, cc/decode/swap_ab/).
#pragma once

#include <cuda_bf16.h>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

constexpr int kAtomCols = 64;     // bf16 columns of one 128-byte swizzled row
constexpr int kAtomAlign = 1024;  // the swizzle pattern repeats every 8 rows
constexpr int kSlotAtoms = kSlotElems / kAtomCols;  // 9: c_kv (8) and k_rope (1)
constexpr int kKvAtoms = kKvLoraRank / kAtomCols;   // 8

// Byte offset of bf16 column `col` (a multiple of 8) of row `row` in an operand of `rows` rows stored
// as atoms of 64 columns ([col / 64][rows / 8][8 rows][128 bytes], the 16-byte chunks of row r
// XOR-swizzled by r % 8: wgmma's 128-byte swizzle, 1024-byte aligned).
__host__ __device__ constexpr int atom_offset(int row, int col, int rows) {
  return (col / kAtomCols) * rows * 128 + (row / 8) * 1024 + (row % 8) * 128 +
         ((((col % kAtomCols) / 8) ^ (row % 8)) << 4);
}

// Thread `tid` (of kThreads) of the copies of kHeads heads' queries (q_nope and q_rope rows of one
// token, heads from head_base) into the atoms `q` of kHeads rows, kElems columns a copy (8: 16-byte
// copies, every row 16-byte aligned; 2: 4-byte copies, any even stride); heads past N are zero-filled.
// The caller commits and waits for the cp.async group.
template <int kHeads, int kThreads, int kElems>
__device__ __forceinline__ void copy_query_atoms(const SparseDecodeParams& p, const __nv_bfloat16* q_nope,
                                                 const __nv_bfloat16* q_rope, int head_base, int tid,
                                                 unsigned char* q) {
  constexpr int kPiecesPerHead = kSlotElems / kElems;
  for (int i = tid; i < kHeads * kPiecesPerHead; i += kThreads) {
    const int h = i / kPiecesPerHead, col = kElems * (i % kPiecesPerHead);
    const bool valid = head_base + h < p.num_heads;
    const int head = valid ? head_base + h : 0;
    const __nv_bfloat16* src = col < kKvLoraRank ? q_nope + head * p.q_nope_head_stride + col
                                                 : q_rope + head * p.q_rope_head_stride + col - kKvLoraRank;
    if constexpr (kElems == 8)
      cp_async_16(q + atom_offset(h, col, kHeads), src, valid);
    else
      cp_async_4(q + atom_offset(h, col & ~7, kHeads) + (col & 7) * 2, src, valid);
  }
}

// The queries of `token` (kHeads heads from head_base) into the atoms `q`, by thread `tid` of kThreads:
// 16-byte copies where every query row starts 16-byte aligned (the usual layouts, fused [T, N, 576]
// views included), else 4-byte ones (much slower: docs/decode-kernels.md). Returns with the copies
// landed for this thread (a barrier makes them every thread's; a proxy fence, wgmma's).
template <int kHeads, int kThreads>
__device__ __forceinline__ void stage_query_atoms(const SparseDecodeParams& p, int token, int head_base, int tid,
                                                  unsigned char* q) {
  const auto* q_nope = static_cast<const __nv_bfloat16*>(p.q_nope) + token * p.q_nope_token_stride;
  const auto* q_rope = static_cast<const __nv_bfloat16*>(p.q_rope) + token * p.q_rope_token_stride;
  const bool aligned = ((reinterpret_cast<uintptr_t>(q_nope) | reinterpret_cast<uintptr_t>(q_rope)) & 15) == 0 &&
                       ((p.q_nope_head_stride | p.q_rope_head_stride) & 7) == 0;
  if (aligned)
    copy_query_atoms<kHeads, kThreads, 8>(p, q_nope, q_rope, head_base, tid, q);
  else
    copy_query_atoms<kHeads, kThreads, 2>(p, q_nope, q_rope, head_base, tid, q);
  cp_async_commit();
  cp_async_wait<0>();
}

}  // namespace decode
}  // namespace sparse_mla
