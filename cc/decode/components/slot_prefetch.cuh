// The decode kernels' speculative L2 warm-up, run before a programmatic dependent launch waits on the
// kernel ahead of it: the slots a CTA's slice will gather, looked up from indices and metadata that
// kernel may still be writing.
#pragma once

#include <cstdint>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/common/topk_filter.h"
#include "cc/decode/components/slot_gather.cuh"
#include "cc/decode/params.h"

namespace sparse_mla {
namespace decode {

// Entry i of positions [begin, begin + count) of `token`'s top-k row: its slot, prefetched into L2.
// Nothing read here is kept or trusted: the loads bypass L1 (__ldcg, so no stale line is left for the
// kernel's own loads after the wait), every value is bounded before it forms an address (the request
// clamped to the block table's rows, the block to the cache), and the prefetch only warms L2, which
// stays coherent with any write. DCP and the causal length apply as in translate_positions; the row's
// topk_length does not (a column past it prefetches a slot for nothing).
template <bool kFp8>
__device__ __forceinline__ void prefetch_slot(const SparseDecodeParams& p, int token, int begin, int count, int i) {
  const int column = begin + i;
  if (i >= count || column >= p.topk || p.num_reqs <= 0) return;
  const int req = min(max(__ldcg(p.req_id + token), 0), p.num_reqs - 1);
  const int kv_len = __ldcg(p.token_kv_len + token);
  const int position = attended_local_position(
      p.dcp, __ldcg(p.topk_indices + token * p.topk_token_stride + column), column, p.topk, kv_len);
  if (position < 0 || position / kBlockSize >= p.max_blocks_per_req) return;
  const int block = __ldcg(p.block_table + static_cast<int64_t>(req) * p.block_table_stride + position / kBlockSize);
  if (block < 0 || block >= p.num_blocks) return;
  prefetch_l2(slot_address<kFp8>(p, block * kBlockSize + position % kBlockSize), kSlotBytes<kFp8>);
}

}  // namespace decode
}  // namespace sparse_mla
