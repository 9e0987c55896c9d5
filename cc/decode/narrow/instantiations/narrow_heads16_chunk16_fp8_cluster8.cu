// The 16/32-head decode kernel, 16 heads per CTA, 16-position stages, the fp8_ds_mla cache, clusters of 8 CTAs.
#include "cc/decode/narrow/narrow_kernel.cuh"

template struct sparse_mla::decode::narrow::NarrowKernel<1, 16, true, sparse_mla::decode::kClusterSize>;
