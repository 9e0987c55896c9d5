// The split merge kernel over partial outputs stored as bf16.
#include "cc/decode/split_merge/split_merge_kernel.cuh"

template cudaError_t sparse_mla::decode::split_merge::launch_split_merge<__nv_bfloat16>(
    const sparse_mla::decode::SparseDecodeParams& params, cudaStream_t stream);
