// Which entries of a token's top-k row a rank attends, shared by every kernel that reads the rows
// (cc/decode/components/slot_translation.cuh, cc/fa3/topk_to_slots_kernel.cu): the row's length
// (topk_length: columns at or past it are -1) and the decode-context-parallel (DCP) shard of the KV
// cache this rank holds.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SPARSE_MLA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SPARSE_MLA_HOST_DEVICE inline
#endif

namespace sparse_mla {

// The rank's shard of every request's positions: global position p lives on rank (p / interleave) %
// world_size, at rank-local position (p / (world_size * interleave)) * interleave + p % interleave
// (vLLM's ownership rule). world_size 1: the whole cache, positions unchanged.
struct DcpShard {
  int rank = 0;
  int world_size = 1;
  int interleave = 1;
};

// Position `pos` of column `column` of a token's row -> the rank-local position to look up in the
// rank's block table, or -1: -1 entries, columns >= row_length, positions >= kv_len (the token's causal
// length, global: compared before the mapping) and positions another rank owns.
SPARSE_MLA_HOST_DEVICE int attended_local_position(const DcpShard& shard, int pos, int column, int row_length,
                                                   int kv_len) {
  if (pos < 0 || pos >= kv_len || column >= row_length) return -1;
  if (shard.world_size == 1) return pos;
  const int group = pos / shard.interleave;
  if (group % shard.world_size != shard.rank) return -1;
  return (group / shard.world_size) * shard.interleave + pos % shard.interleave;
}

// The length of `token`'s row: topk_length[token] when given (nullptr: none), else the whole row.
SPARSE_MLA_HOST_DEVICE int row_length(const int32_t* topk_length, int token, int topk) {
  return topk_length != nullptr ? topk_length[token] : topk;
}

}  // namespace sparse_mla
