// The 16/32-head decode kernel, 16 heads per CTA, 16-position stages, the bf16 cache, one CTA per split.
#include "cc/decode/narrow/narrow_kernel.cuh"

template struct sparse_mla::decode::narrow::NarrowKernel<1, 16, false, 1>;
