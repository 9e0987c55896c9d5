// Does compute-sanitizer racecheck report false hazards for a
// warp-specialized producer/consumer pipeline with named barriers?
// Usage: racecheck_probe <A..F> [tiles blocks phases]   (no extra args: all configs)
// Warpgroup 0 = consumers, warpgroups 1..NP = producers. Stage barriers:
// Full = 1 + c%2, Empty = 3 + c%2 (count 256); 5 = consumers (128);
// 6 = producers (128*NP); 7 = whole block; 0 = __syncthreads.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cuda_runtime.h>

enum { VA, VB, VC, VD, VE, VF };
constexpr int kFull = 1, kEmpty = 3, kCons = 5, kProd = 6, kAll = 7;
constexpr int STAGE_V4 = 3072;                  // 48 KB per stage (uint4 units)
constexpr int SMEM_BYTES = 2 * STAGE_V4 * 16;   // 96 KB dynamic smem = 2 stages
constexpr int STAGED_INTS = 16384;              // 64 KB staged output at offset 0:
                                                // covers stage 0 + 1/3 of stage 1
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  printf("CUDA error '%s' at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
  exit(2); } } while (0)

__device__ __forceinline__ uint32_t hval(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = (a * 0x9E3779B1u) ^ ((b + 0x7F4A7C15u) * 0x85EBCA77u) ^ (c * 0xC2B2AE3Du);
  return h ^ (h >> 15);
}

// ---- barriers: ids/counts as registers ("r"), or immediates ("n") -------------
__device__ __forceinline__ void bar_sync(uint32_t id, uint32_t n) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t id, uint32_t n) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory");
}
template <int ID> __device__ __forceinline__ void bar_sync_n() {
  asm volatile("bar.sync %0, %1;" :: "n"(ID), "n"(256) : "memory");
}
template <int ID> __device__ __forceinline__ void bar_arrive_n() {
  asm volatile("bar.arrive %0, %1;" :: "n"(ID), "n"(256) : "memory");
}
// Stage barrier BASE + s (s = c % 2 at runtime), count 256.
// D: bar.sync instead of bar.arrive.  E: compile-time immediate ids.
template <int V, int BASE> __device__ __forceinline__ void stage_op(bool arrive, uint32_t s) {
  if (V == VD) arrive = false;
  if (V == VE) {
    if (arrive) { if (s) bar_arrive_n<BASE + 1>(); else bar_arrive_n<BASE>(); }
    else        { if (s) bar_sync_n<BASE + 1>();   else bar_sync_n<BASE>(); }
  } else {
    if (arrive) bar_arrive(BASE + s, 256); else bar_sync(BASE + s, 256);
  }
}

// ---- shared accesses through asm so they are never optimized away -------------
__device__ __forceinline__ uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void st_u32(uint32_t a, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" :: "r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void st_v4(uint32_t a, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" :: "r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint4 ld_v4(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
  return v;
}

template <int V>
__device__ __forceinline__ void body(int num_tiles, int phases, unsigned* mism) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int rows[256];
  __shared__ uint32_t scratch[2][128];
  __shared__ int last;
  volatile int* vrows = rows;
  volatile uint32_t* vscr = &scratch[0][0];
  volatile int* vlast = &last;
  constexpr int NP = (V == VB) ? 1 : 2;            // producer warpgroups
  constexpr uint32_t NTH = 128 * (NP + 1);         // block size
  constexpr uint32_t NROWS = 128 * NP;
  const uint32_t tid = threadIdx.x, wg = tid / 128, lt = tid % 128, blk = blockIdx.x;
  const uint32_t base = sa(smem);
  uint32_t bad = 0;

  // Producers write `rows` once, sync among themselves (bar 6); consumers read
  // rows later, ordered only transitively via bar 6 + Full barrier.
  if (V != VC && wg > 0) {
    vrows[tid - 128] = (int)hval(blk, tid - 128, 77);
    bar_sync(kProd, 128 * NP);
  }
  for (int ph = 0; ph < phases; ++ph) {
    if (V != VC && wg > 0) {                         // ===== producer warpgroup p
      const int p = wg - 1;
#pragma unroll 1
      for (int c = p; c < num_tiles; c += NP) {
        const uint32_t s = c & 1;
        if (c >= 2) stage_op<V, kEmpty>(false, s);   // wait: stage s drained
        const uint32_t stg = base + s * STAGE_V4 * 16;
        for (int j = 0; j < STAGE_V4 / 128; ++j) {
          const uint32_t i = lt + 128 * j, t = ph * 4096 + c;
          st_v4(stg + 16 * i, make_uint4(hval(t, 4 * i, blk), hval(t, 4 * i + 1, blk),
                                         hval(t, 4 * i + 2, blk), hval(t, 4 * i + 3, blk)));
        }
        stage_op<V, kFull>(true, s);                 // signal: stage s full
      }
      if (V == VF) return;                           // F: producers leave now
    } else if (V != VC) {                            // ===== consumer warpgroup
#pragma unroll 1
      for (int c = 0; c < num_tiles; ++c) {
        const uint32_t s = c & 1, t = ph * 4096 + c;
        stage_op<V, kFull>(false, s);                // wait: stage s full
        const uint32_t r0 = (lt + 64) % NROWS, r1 = (lt * 3 + 7) % NROWS;
        bad += vrows[r0] != (int)hval(blk, r0, 77);
        bad += vrows[r1] != (int)hval(blk, r1, 77);
        const uint32_t stg = base + s * STAGE_V4 * 16;
        for (int j = 0; j < STAGE_V4 / 128; ++j) {   // read other threads' data
          const uint32_t i = (lt + 37) % 128 + 128 * j;
          const uint4 v = ld_v4(stg + 16 * i);
          bad += (v.x != hval(t, 4 * i, blk)) + (v.y != hval(t, 4 * i + 1, blk)) +
                 (v.z != hval(t, 4 * i + 2, blk)) + (v.w != hval(t, 4 * i + 3, blk));
        }
        vscr[s * 128 + lt] = hval(t, lt, 5);         // consumer-only exchange
        bar_sync(kCons, 128);
        bad += vscr[s * 128 + (lt + 1) % 128] != hval(t, (lt + 1) % 128, 5);
        if (c + 2 < num_tiles) stage_op<V, kEmpty>(true, s);  // stage s free
      }
    }
    // ===== epilogue: consumers stage output into the (reused) stage memory
    constexpr uint32_t NREAD = (V == VF) ? 128 : NTH;
    auto sync_all = [] { if (V == VF) bar_sync(kCons, 128); else __syncthreads(); };
    if (V == VF) bar_sync(kCons, 128); else bar_sync(kAll, NTH);
    if (wg == 0) {
#pragma unroll 4
      for (int j = 0; j < STAGED_INTS / 128; ++j) {
        const uint32_t i = lt + 128 * j;
        st_u32(base + 4 * i, hval(ph + 100, i, blk));
      }
    }
    sync_all();
    for (uint32_t r = tid; r < STAGED_INTS / 4; r += NREAD) {  // 4 writers per uint4
      const uint4 v = ld_v4(base + 16 * r);
      bad += (v.x != hval(ph + 100, 4 * r, blk)) + (v.y != hval(ph + 100, 4 * r + 1, blk)) +
             (v.z != hval(ph + 100, 4 * r + 2, blk)) + (v.w != hval(ph + 100, 4 * r + 3, blk));
    }
    sync_all();
    if (tid == 0) *vlast = 1000 + 10 * ph + (int)blk;
    sync_all();
    bad += *vlast != 1000 + 10 * ph + (int)blk;
  }
  if (bad) atomicAdd(mism, bad);
}

#define KERNEL(NAME, V, NT) \
  __global__ void __launch_bounds__(NT, 1) NAME(int nt, int ph, unsigned* m) { body<V>(nt, ph, m); }
KERNEL(rc_A_384_arrive_regids, VA, 384)
KERNEL(rc_B_256_one_producer, VB, 256)
KERNEL(rc_C_epilogue_only, VC, 384)
KERNEL(rc_D_sync_not_arrive, VD, 384)
KERNEL(rc_E_immediate_ids, VE, 384)
KERNEL(rc_F_producers_exit, VF, 384)

int main(int argc, char** argv) {
  typedef void (*KFn)(int, int, unsigned*);
  const KFn fns[6] = {rc_A_384_arrive_regids, rc_B_256_one_producer, rc_C_epilogue_only,
                      rc_D_sync_not_arrive, rc_E_immediate_ids, rc_F_producers_exit};
  const int nthreads[6] = {384, 256, 384, 384, 384, 384};
  if (argc < 2 || argv[1][0] < 'A' || argv[1][0] > 'F') {
    printf("usage: %s <A|B|C|D|E|F> [tiles blocks phases]\n", argv[0]);
    return 1;
  }
  const int v = argv[1][0] - 'A';
  int tiles[3] = {1, 2, 32}, blocks[2] = {1, 4}, phases[2] = {1, 2};
  int nt = 3, nb = 2, np = (v == VF) ? 1 : 2;   // F: producers exit -> 1 phase only
  if (argc >= 5) {
    tiles[0] = atoi(argv[2]); blocks[0] = atoi(argv[3]); phases[0] = atoi(argv[4]);
    nt = nb = np = 1;
  }
  CK(cudaFuncSetAttribute(fns[v], cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
  unsigned* d_m;
  CK(cudaMalloc(&d_m, sizeof(unsigned)));
  unsigned long long total = 0;
  for (int a = 0; a < np; ++a)
    for (int b = 0; b < nb; ++b)
      for (int t = 0; t < nt; ++t) {
        unsigned h_m = 0;
        CK(cudaMemset(d_m, 0, sizeof(unsigned)));
        fns[v]<<<blocks[b], nthreads[v], SMEM_BYTES>>>(tiles[t], phases[a], d_m);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(&h_m, d_m, sizeof(unsigned), cudaMemcpyDeviceToHost));
        printf("variant %c tiles %d blocks %d phases %d: mismatches %u\n", 'A' + v,
               tiles[t], blocks[b], phases[a], h_m);
        fflush(stdout);
        total += h_m;
      }
  CK(cudaFree(d_m));
  return total ? 3 : 0;
}
