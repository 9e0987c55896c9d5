// The split merge as a kernel of its own: the second launch of the 64-head decode kernels with several
// splits, which merges every split's partial output of a (token, head group).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cc/common/mla_layout.h"
#include "cc/common/ptx.cuh"
#include "cc/decode/components/cta_work.cuh"
#include "cc/decode/kernel_launcher.cuh"
#include "cc/decode/params.h"
#include "cc/decode/split_merge/merge_splits.cuh"
#include "cc/decode/split_merge/split_merge_kernel.h"
#include "cc/decode/wide/wide.h"

namespace sparse_mla {
namespace decode {
namespace split_merge {

constexpr int kHeads = kHeadTileRows * wide::kHeadTiles;  // the 64 heads per CTA of the wide and tile64 kernels

// The split merge launch: kMergeSlices CTAs per (token, head group), each kMergeCols output columns of
// the 64 heads (4 columns a thread), kMergeUnroll splits' partials loaded at once: the merge is bound
// by load latency, so it is spread wide (docs/decode-kernels.md). The splits' LSEs are read from slot 0
// of the workspace's kClusterSize slots per split.
constexpr int kMergeSlices = 32;
constexpr int kMergeCols = kKvLoraRank / kMergeSlices;  // 16
constexpr int kMergeUnroll = 16;
static_assert(kHeads * kMergeCols / 4 == kThreads, "4 columns of the merge per thread");

// The split merge starts early (a programmatic dependent launch) up to this many splits, or while the kernel's
// CTAs fill at most half the SMs; otherwise its early CTAs crowd onto the few SMs the kernel leaves free
// (docs/decode-kernels.md).
constexpr int kEarlyMergeMaxSplits = 16;

// Whether the merge of a launch of `kernel_ctas` CTAs with `num_splits` splits starts early (see above).
inline bool merge_starts_early(int num_splits, int64_t kernel_ctas) {
  if (num_splits <= kEarlyMergeMaxSplits) return true;
  int sms = 0;
  return current_device_sms(&sms) == cudaSuccess && 2 * kernel_ctas <= sms;
}

// The split merge as a second launch: CTA (c, g) merges output columns [16 c, 16 c + 16) of every
// split of (token, head group) g of its launch's tokens, and writes them (and, c = 0, the LSE);
// Partial: how the kernel stored the partials (kBf16PartialMinSplits). Up to kEarlyMergeMaxSplits
// splits it is a programmatic dependent launch: its CTAs start as the kernel's CTAs leave SMs and wait
// there for the whole kernel.
template <typename Partial>
__global__ void __launch_bounds__(kThreads) merge_splits_kernel(const SparseDecodeParams p) {
  const int slice = blockIdx.x;
  const int64_t group_index = blockIdx.y;
  const int token = static_cast<int>(group_index / p.head_groups);
  const int head_base = static_cast<int>(group_index % p.head_groups) * kHeads;
  wait_for_prerequisite_grids();  // every split's partial output and LSE are written
  merge_splits<kHeads, kMergeCols, kMergeUnroll, Partial>(p, token, head_base, group_index, 0, slice * kMergeCols);
}

template <typename Partial>
cudaError_t launch_split_merge(const SparseDecodeParams& params, cudaStream_t stream) {
  return for_token_slices(params, [&](const SparseDecodeParams& part, int count) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(kMergeSlices, count * part.head_groups);
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute early;  // launched while the kernel's last CTAs run: its launch latency is hidden
    early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &early;
    const int64_t kernel_ctas = static_cast<int64_t>(part.num_splits) * count * part.head_groups;
    config.numAttrs = merge_starts_early(part.num_splits, kernel_ctas) ? 1 : 0;
    return cudaLaunchKernelEx(&config, merge_splits_kernel<Partial>, part);
  });
}

}  // namespace split_merge
}  // namespace decode
}  // namespace sparse_mla
