// GPU proof of pelib.emulate: A (64 x 128 B of E4M3) and B (N x 128 B) are TMA-loaded 128B-swizzled,
// then one warpgroup issues `steps` wgmma.m64nNk32 E4M3 with descriptors from gmma_smem_desc
// (common/descriptors.cuh), advanced by `k_adv` bytes per step, with the host's LBO/SBO. The FP32
// accumulator comes back as D[64][N]; the host compares it with the emulator's prediction, for right
// and for deliberately wrong descriptors. sm_90a. Not book content.
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "common/descriptors.cuh"
#include "common/export.cuh"

#ifndef WG_N
#define WG_N 64
#endif
#define A_BYTES (64 * 128)
#define B_BYTES (WG_N * 128)
#define B_OFFSET 8192                                 // 1024-B aligned, after A
PELIB_EXPORT(smem_bytes, B_OFFSET + B_BYTES + 2048);
PELIB_EXPORT(wg_n, WG_N);
PELIB_EXPORT(b_smem_offset, B_OFFSET);
static_assert(gmma_smem_desc(0, 16, 1024, 128) == 0x4000004000010000ull, "K-major SW128 GMMA descriptor");

extern "C" __global__ void __launch_bounds__(128) emu_wgmma(
    const __grid_constant__ TensorMap tmap_a, const __grid_constant__ TensorMap tmap_b, float* d_out,
    u64* descs, u32 lbo, u32 sbo_a, u32 sbo_b, u32 k_adv, u32 steps) {
  extern __shared__ __align__(1024) u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  u64* bar = reinterpret_cast<u64*>(smem + B_OFFSET + B_BYTES);
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(bar, A_BYTES + B_BYTES);
    tma_load_2d(smem, &tmap_a, bar, 0, 0);
    tma_load_2d(smem + B_OFFSET, &tmap_b, bar, 0, 0);
  }
  mbarrier_wait_parity_nocall(bar, 0);              // no call on the wgmma path (wgmma.cuh NOTES)

  const u64 desc_a = gmma_smem_desc(smem_u32(smem), lbo, sbo_a, 128);
  const u64 desc_b = gmma_smem_desc(smem_u32(smem + B_OFFSET), lbo, sbo_b, 128);
  float d[WG_N / 2];
#pragma unroll
  for (int i = 0; i < WG_N / 2; ++i) d[i] = 0.f;
  wgmma_fence_operand(d);
  for (u32 s = 0; s < steps; ++s) {
    const u64 da = smem_desc_advance(desc_a, s * k_adv);
    const u64 db = smem_desc_advance(desc_b, s * k_adv);
    if (threadIdx.x == 0) { descs[2 * s] = da; descs[2 * s + 1] = db; }
    wgmma_fence();
    wgmma_m64nNk32_f32_e4m3_e4m3<WG_N>(d, da, db, s > 0 ? 1u : 0u);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    wgmma_fence_operand(d);
  }
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < WG_N / 2; ++i) d_out[wgmma_acc_row(t, i) * WG_N + wgmma_acc_col(t, i)] = d[i];
}
