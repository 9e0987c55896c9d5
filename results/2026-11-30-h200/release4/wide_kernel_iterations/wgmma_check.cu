// Checks the wide kernel's wgmma operand layouts (cc/sparse_decode_wide_kernel.cu: 128-byte-swizzled
// atoms, K-major for the scores, MN-major for P . V) against a CPU product, on one warpgroup. Call 26
// ran it on the variant that became that file (max abs error 1.63e-5 for the scores, 5.96e-7 for
// P . V with leading 4096 / stride 1024; the swapped offsets give 10.2). Build from the repository root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -std=c++17 -O3 --expt-relaxed-constexpr -I. \
//     -o /tmp/wgmma_check results/2026-11-30-h200/release4/wide_kernel_iterations/wgmma_check.cu
#include "cc/sparse_decode_wide_kernel.cu"
#include <cstdio>
#include <vector>
#include <cmath>
using namespace sparse_mla::decode::wide;
using sparse_mla::decode::pack_bf16;
using sparse_mla::decode::fence_proxy_async;

__global__ void scores_check(const __nv_bfloat16* q, const __nv_bfloat16* k, float* s_out) {
  __shared__ __align__(1024) unsigned char q_s[9 * 8192];
  __shared__ __align__(1024) unsigned char k_s[9 * 4096];
  const int tid = threadIdx.x;
  for (int i = tid; i < 64 * 72; i += 128) { int r = i / 72, c = (i % 72) * 8;
    *reinterpret_cast<uint4*>(q_s + atom_offset(r, c, 64)) = *reinterpret_cast<const uint4*>(q + r * 576 + c); }
  for (int i = tid; i < 32 * 72; i += 128) { int r = i / 72, c = (i % 72) * 8;
    *reinterpret_cast<uint4*>(k_s + atom_offset(r, c, 32)) = *reinterpret_cast<const uint4*>(k + r * 576 + c); }
  fence_proxy_async();
  __syncthreads();
  float s[16];
  for (int i = 0; i < 16; ++i) s[i] = 0.f;
  wgmma_fence();
  for (int ks = 0; ks < 36; ++ks) {
    const int col = ks * 16, atom = col / 64, within = (col % 64) * 2;
    wgmma_m64n32k16_ss(s, smem_descriptor(q_s + atom * 8192 + within, 16, 1024), smem_descriptor(k_s + atom * 4096 + within, 16, 1024));
  }
  wgmma_commit(); wgmma_wait_all(); keep_in_registers(s);
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
  for (int nt = 0; nt < 4; ++nt) for (int i = 0; i < 4; ++i) {
    const int row = warp * 16 + g + (i >= 2 ? 8 : 0), col = nt * 8 + 2 * qd + (i & 1);
    s_out[row * 32 + col] = s[nt * 4 + i];
  }
}

__global__ void pv_check(const __nv_bfloat16* pm, const __nv_bfloat16* v, float* o_out, int leading, int stride) {
  __shared__ __align__(1024) unsigned char v_s[8 * 4096];
  const int tid = threadIdx.x;
  for (int i = tid; i < 32 * 64; i += 128) { int r = i / 64, c = (i % 64) * 8;
    *reinterpret_cast<uint4*>(v_s + atom_offset(r, c, 32)) = *reinterpret_cast<const uint4*>(v + r * 512 + c); }
  fence_proxy_async();
  __syncthreads();
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
  auto P = [&](int r, int c) { return __bfloat162float(pm[r * 32 + c]); };
  for (int half = 0; half < 2; ++half) {
    float o[128];
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    wgmma_fence();
    for (int kk = 0; kk < 2; ++kk) {
      const int r0 = warp * 16 + g, k0 = kk * 16 + 2 * qd;
      uint32_t a[4] = {pack_bf16(P(r0, k0), P(r0, k0 + 1)), pack_bf16(P(r0 + 8, k0), P(r0 + 8, k0 + 1)),
                       pack_bf16(P(r0, k0 + 8), P(r0, k0 + 9)), pack_bf16(P(r0 + 8, k0 + 8), P(r0 + 8, k0 + 9))};
      wgmma_m64n256k16_rs(o, a, smem_descriptor(v_s + half * 4 * 4096 + kk * 2048, leading, stride));
    }
    wgmma_commit(); wgmma_wait_all(); keep_in_registers(o);
    for (int nt = 0; nt < 32; ++nt) for (int i = 0; i < 4; ++i) {
      const int row = warp * 16 + g + (i >= 2 ? 8 : 0), col = half * 256 + nt * 8 + 2 * qd + (i & 1);
      o_out[row * 512 + col] = o[nt * 4 + i];
    }
  }
}

static float bf(float x) { return __bfloat162float(__float2bfloat16(x)); }

int main() {
  srand(1);
  auto rnd = [] { return (rand() / (float)RAND_MAX - 0.5f) * 2.f; };
  std::vector<__nv_bfloat16> q(64 * 576), k(32 * 576), pm(64 * 32), v(32 * 512);
  std::vector<float> qf(q.size()), kf(k.size()), pf(pm.size()), vf(v.size());
  for (size_t i = 0; i < q.size(); ++i) { qf[i] = bf(rnd()); q[i] = __float2bfloat16(qf[i]); }
  for (size_t i = 0; i < k.size(); ++i) { kf[i] = bf(rnd()); k[i] = __float2bfloat16(kf[i]); }
  for (size_t i = 0; i < pm.size(); ++i) { pf[i] = bf(rnd()); pm[i] = __float2bfloat16(pf[i]); }
  for (size_t i = 0; i < v.size(); ++i) { vf[i] = bf(rnd()); v[i] = __float2bfloat16(vf[i]); }
  __nv_bfloat16 *dq, *dk, *dp, *dv; float *ds, *dout;
  cudaMalloc(&dq, q.size() * 2); cudaMalloc(&dk, k.size() * 2); cudaMalloc(&dp, pm.size() * 2); cudaMalloc(&dv, v.size() * 2);
  cudaMalloc(&ds, 64 * 32 * 4); cudaMalloc(&dout, 64 * 512 * 4);
  cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice); cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dp, pm.data(), pm.size() * 2, cudaMemcpyHostToDevice); cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice);
  scores_check<<<1, 128>>>(dq, dk, ds);
  std::vector<float> s(64 * 32);
  cudaError_t e = cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost);
  double err = 0, ref_norm = 0;
  for (int r = 0; r < 64; ++r) for (int c = 0; c < 32; ++c) { double ref = 0; for (int j = 0; j < 576; ++j) ref += qf[r * 576 + j] * kf[c * 576 + j];
    err = fmax(err, fabs(ref - s[r * 32 + c])); ref_norm = fmax(ref_norm, fabs(ref)); }
  printf("scores: %s max abs err %.3g (max |ref| %.3g)\n", cudaGetErrorString(e), err, ref_norm);
  int variants[2][2] = {{4096, 1024}, {1024, 4096}};
  for (auto& var : variants) {
    cudaMemset(dout, 0, 64 * 512 * 4);
    pv_check<<<1, 128>>>(dp, dv, dout, var[0], var[1]);
    std::vector<float> o(64 * 512);
    e = cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost);
    err = 0; ref_norm = 0;
    for (int r = 0; r < 64; ++r) for (int c = 0; c < 512; ++c) { double ref = 0; for (int j = 0; j < 32; ++j) ref += pf[r * 32 + j] * vf[j * 512 + c];
      err = fmax(err, fabs(ref - o[r * 512 + c])); ref_norm = fmax(ref_norm, fabs(ref)); }
    printf("pv leading %d stride %d: %s max abs err %.3g (max |ref| %.3g)\n", var[0], var[1], cudaGetErrorString(e), err, ref_norm);
  }
  return 0;
}
