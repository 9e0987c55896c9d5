// Request-local top-k positions -> global slot ids, valid ids first (stable), one CTA per token.
//
// Position p at column j of token t is valid when 0 <= p < token_kv_len[t], j < topk_length[t] (when
// given), this DCP rank owns p (cc/common/topk_filter.h: then l is its rank-local position, else l = p),
// req_id[t] is a row of the block table, l / 64 is a column of it and the block id b found there lies in
// [0, num_blocks); its slot id is b * block_stride_rows + l % 64 (the row of the flat slot view FA3's page-size-1 caches are cut from).
// Each thread takes kPerThread consecutive entries of a tile of the row; a block-wide exclusive scan of
// the per-thread valid counts gives every valid entry its place, so the order of the row is kept. The
// tail of the row is zeroed and the count written, exactly as sparse_mla.reference.topk_to_slots_reference.
#include "cc/fa3/topk_to_slots.h"

#include "cc/common/mla_layout.h"

namespace sparse_mla {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 8;  // 2048 entries (DeepSeek-V3.2's top-k) in one tile

__global__ void __launch_bounds__(kThreads) topk_to_slots_kernel(const TopkToSlotsParams p) {
  __shared__ int warp_totals[kWarps];
  const int token = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kv_len = p.token_kv_len[token];
  const int length = row_length(p.topk_length, token, p.topk);
  const int req = p.req_id[token];
  const bool req_ok = req >= 0 && req < p.num_reqs;
  const int32_t* index_row = p.topk_indices + token * p.topk_token_stride;
  const int32_t* block_row = p.block_table + static_cast<int64_t>(req_ok ? req : 0) * p.block_table_stride;
  int32_t* out_row = p.slot_ids + token * p.slot_ids_token_stride;

  int written = 0;  // valid entries of the tiles before this one
  for (int base = 0; base < p.topk; base += kThreads * kPerThread) {
    int position[kPerThread], slot[kPerThread];
    int count = 0;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int j = base + tid * kPerThread + i;
      position[i] = j < p.topk ? __ldg(index_row + j) : -1;
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int pos = attended_local_position(p.dcp, position[i], base + tid * kPerThread + i, length, kv_len);
      const bool in_table = req_ok && pos >= 0 && pos / kBlockSize < p.max_blocks_per_req;
      const int block_id = in_table ? __ldg(block_row + pos / kBlockSize) : -1;
      slot[i] = block_id >= 0 && block_id < p.num_blocks ? block_id * p.block_stride_rows + pos % kBlockSize : -1;
      count += slot[i] >= 0;
    }
    // Block-wide exclusive scan of `count`: within the warp, then over the warp totals.
    int inclusive = count;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    int before = 0, tile_total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? warp_totals[w] : 0;
      tile_total += warp_totals[w];
    }
    int at = written + before + inclusive - count;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
      if (slot[i] >= 0) out_row[at++] = slot[i];
    written += tile_total;
    __syncthreads();  // warp_totals is reused by the next tile
  }
  for (int j = written + tid; j < p.topk; j += kThreads) out_row[j] = 0;
  if (tid == 0) p.valid_count[token] = written;
}

}  // namespace

cudaError_t launch_topk_to_slots(const TopkToSlotsParams& params, cudaStream_t stream) {
  if (params.num_tokens == 0) return cudaSuccess;
  topk_to_slots_kernel<<<params.num_tokens, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace sparse_mla
