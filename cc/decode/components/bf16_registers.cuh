// bf16 pairs in 32-bit registers: loaded from global memory, packed from fp32, and dequantized from
// fp8 e4m3 (the fp8_ds_mla cache).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace sparse_mla {
namespace decode {

__device__ __forceinline__ uint32_t load_pair(const __nv_bfloat16* row, int col, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint32_t*>(row + col)) : 0u;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Dequantizes four fp8 e4m3 values (the low byte first) times `scale` into two bf16 pairs: .x of the
// low two bytes, .y of the high two. e4m3 -> f16 is exact; each product is rounded to bf16 once, as
// the Triton kernel does (sparse_mla_attention.py). The word's halves go to the conversion as 16-bit
// registers, which it reads in place (F2FP ... R.H1): no shift for the high pair, 6 instructions a pair.
__device__ __forceinline__ uint2 dequantize_word(uint32_t word, float scale) {
  uint32_t halves[2];  // f16x2 of the low and the high two bytes
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
      : "=r"(halves[0]), "=r"(halves[1])
      : "r"(word));
  uint32_t pairs[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&halves[i]));
    pairs[i] = pack_bf16(f.x * scale, f.y * scale);
  }
  return make_uint2(pairs[0], pairs[1]);
}

// One 16-byte piece of a slot's e4m3 c_kv (16 values) times `scale` as 16 bf16: values 0..7 in `lo`, 8..15 in `hi`.
__device__ __forceinline__ void dequantize_piece(const uint4& piece, float scale, uint4& lo, uint4& hi) {
  const uint2 a = dequantize_word(piece.x, scale), b = dequantize_word(piece.y, scale);
  const uint2 c = dequantize_word(piece.z, scale), d = dequantize_word(piece.w, scale);
  lo = make_uint4(a.x, a.y, b.x, b.y);
  hi = make_uint4(c.x, c.y, d.x, d.y);
}

}  // namespace decode
}  // namespace sparse_mla
