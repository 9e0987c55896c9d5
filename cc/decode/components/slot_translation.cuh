// Position -> slot translation of the decode kernels: a token's top-k positions to global cache rows.
#pragma once

#include "cc/common/mla_layout.h"
#include "cc/common/topk_filter.h"
#include "cc/decode/components/cta_work.cuh"
#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

// Positions [begin, begin + count) of `token`'s top-k row -> global slot rows (rows[i], -1 = masked),
// by the kBlockThreads threads running it (the CTA's, or one warpgroup's: consecutive threads), kUnroll
// independent loads in flight. Position p of request req_id[t], mapped to the rank's local position l
// (cc/common/topk_filter.h), lives in block block_table[req, l / 64], slot l % 64; -1, columns past the row's
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

}  // namespace decode
}  // namespace sparse_mla
