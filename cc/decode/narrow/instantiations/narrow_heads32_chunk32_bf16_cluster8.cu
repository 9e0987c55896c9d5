// The 16/32-head decode kernel, 32 heads per CTA, 32-position stages, the bf16 cache, clusters of 8 CTAs.
#include "cc/decode/narrow/narrow_kernel.cuh"

template struct sparse_mla::decode::narrow::NarrowKernel<2, 32, false, sparse_mla::decode::kClusterSize>;
