// Stand-ins for the FA3 forward kernels this build leaves out.
//
// With the defines of cc/fa3/fa3_config.bzl, hopper/flash_api.cpp's dispatch references twelve bf16
// head-dim-64 kernels, but sparse MLA (page size 1) only ever runs the two value-dim-512 paged ones.
// Under --//tools/cuda:fa3_variants=mla (the default) only those two are compiled, and each of the
// other ten is this explicit specialization of run_mha_fwd_, which raises an error naming the flag
// that builds it. Under =hdim64 all twelve are compiled and this file defines nothing.
#include <cuda_runtime_api.h>

#include <c10/util/Exception.h>
#include <cutlass/numeric_types.h>

#include "flash.h"

#ifndef SPARSE_MLA_FA3_ALL_HDIM64_VARIANTS

#define SPARSE_MLA_FA3_NOT_BUILT(DV, SPLIT, PAGED_NON_TMA, PACK_GQA)                                  \
  template <>                                                                                        \
  void run_mha_fwd_<90, cutlass::bfloat16_t, 64, DV, SPLIT, PAGED_NON_TMA, false, PACK_GQA>(         \
      Flash_fwd_params&, cudaStream_t) {                                                             \
    TORCH_CHECK(false, "sparse_mla: this build has no FA3 kernel for bf16, head dim 64, value dim " \
                #DV ", split=" #SPLIT ", paged_non_tma=" #PAGED_NON_TMA                              \
                "; rebuild with --//tools/cuda:fa3_variants=hdim64");                               \
  }

SPARSE_MLA_FA3_NOT_BUILT(64, false, false, false)
SPARSE_MLA_FA3_NOT_BUILT(64, false, true, true)
SPARSE_MLA_FA3_NOT_BUILT(64, true, false, true)
SPARSE_MLA_FA3_NOT_BUILT(64, true, true, true)
SPARSE_MLA_FA3_NOT_BUILT(256, false, false, false)
SPARSE_MLA_FA3_NOT_BUILT(256, false, true, true)
SPARSE_MLA_FA3_NOT_BUILT(256, true, false, true)
SPARSE_MLA_FA3_NOT_BUILT(256, true, true, true)
SPARSE_MLA_FA3_NOT_BUILT(512, false, false, false)
SPARSE_MLA_FA3_NOT_BUILT(512, true, false, true)

#endif  // SPARSE_MLA_FA3_ALL_HDIM64_VARIANTS
