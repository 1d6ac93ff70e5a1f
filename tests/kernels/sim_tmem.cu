// TMEM ordering on the simulator (tests/test_sim_engine.py): tcgen05.st, tcgen05.mma and tcgen05.ld on the same
// columns, ordered as PTX ISA 9.7.16.6 (tcgen05 memory consistency) asks, and each ordering step left out by
// one define. One CTA of 4 warps; warp w owns TMEM lanes 32w..32w+31 (its lane quarter), columns 0..31.
//   (default)      every warp stores D[row][col] = row + 256 * col (FP32) with tcgen05.st, waits (wait::st),
//                  reads it back (tcgen05.ld, wait::ld) into out[0 ..); thread 0 then issues one
//                  tcgen05.mma (kind::f8f6f4 E4M3, M 128, N 32, K 32, accumulate) of zero operands into the
//                  same columns and commits; the warps wait on that barrier and read D + 0 into out[4096 ..)
//   ST_NO_WAIT_LD  the read-back without tcgen05.wait::st before it (9.7.16.6.4.2: st -> wait::st -> ld)
//   ST_NO_WAIT_MMA no read-back and no tcgen05.wait::st: the warps reach the MMA's thread (fence, bar.sync,
//                  fence) with their stores in flight, and the MMA's write of D races them (9.7.16.8.5,
//                  example 2)
//   ST_DURING_MMA  the warps store into D again after the MMA is issued, before waiting on its commit
//   LD_THEN_ST     the read-back's columns are stored again before tcgen05.wait::ld
// The tcgen05 fences (PTX ISA 9.7.16.6.3, 9.7.16.11.1), each left out or moved by one define:
//   NO_BEFORE_MMA  no tcgen05.fence::before_thread_sync between the warps' wait::ld / wait::st and the bar.sync
//                  before the MMA: their reads and stores of D are not ordered before it (9.7.16.6.4.4)
//   NO_AFTER_MMA   no tcgen05.fence::after_thread_sync between that bar.sync and the MMA
//   NO_AFTER_LD    no tcgen05.fence::after_thread_sync between the wait on the MMA's commit and the read of D
//   AFTER_IN_MMA_THREAD  benign: the fence after the bar.sync only in the MMA's thread, right before the MMA
// Host-only (the simulator); the layout of the MMA's operands is the B200 probe's (probes/tcgen05_numerics.cu).
#include "common/types.cuh"
#include "common/descriptors.cuh"
#include "common/mbarrier.cuh"
#include "common/memory.cuh"
#include "common/tcgen05.cuh"
#include "common/tcgen05_store.cuh"
#include "common/tma.cuh"

constexpr u32 M = 128, N = 32, COLS = 32, ALIGN = 1024;
constexpr u32 OFF_A = 0, OFF_B = M * 128, OFF_BAR = OFF_B + N * 128;   // one 128-B swizzle atom of K each
constexpr u64 DESC_AB = umma_smem_desc(0, 16, 1024, 128);
constexpr u32 IDESC = umma_instr_desc(M, N, UMMA_FMT_E4M3, UMMA_FMT_E4M3, UMMA_C_F32);

PE_DEVICE void store_d(u32 tmem, u32 warp, u32 lane, u32 add) {
  u32 r[32];
  for (u32 j = 0; j < 32; ++j) {
    const float v = (float)(32 * warp + lane + 256 * j + add);
    r[j] = *reinterpret_cast<const u32*>(&v);
  }
  tcgen05_st_32x32b_x32(tmem + ((32 * warp) << 16), r);
}

PE_DEVICE void read_d(u32 tmem, u32 warp, u32 lane, u32* out) {
  u32 r[32];
  tcgen05_ld_32x32b_x32(tmem + ((32 * warp) << 16), r);
#ifdef LD_THEN_ST
  store_d(tmem, warp, lane, 1);
#endif
  tcgen05_wait_ld();
  for (u32 j = 0; j < 32; ++j) st_global_b32(out + (32 * warp + lane) * 32 + j, r[j]);
}

extern "C" __global__ void sim_tmem(u32* out) {
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((ALIGN - (smem_u32(smem_raw) & (ALIGN - 1))) & (ALIGN - 1));
  u64* done = reinterpret_cast<u64*>(smem + OFF_BAR);
  u32* tmem_slot = reinterpret_cast<u32*>(done + 1);
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (u32 i = threadIdx.x * 16; i < OFF_BAR; i += 128 * 16) st_shared_v4(smem_u32(smem + i), 0, 0, 0, 0);
  fence_proxy_async_shared_cta();   // the zero operands before the tensor core reads them
  if (threadIdx.x == 0) {
    mbarrier_init(done, 1);
    fence_barrier_init();
  }
  if (warp == 0) tcgen05_alloc<1>(smem_u32(tmem_slot), COLS);
  tcgen05_fence_before_thread_sync();
  __syncthreads();
  tcgen05_fence_after_thread_sync();
  const u32 tmem = *tmem_slot;

  store_d(tmem, warp, lane, 0);
#ifndef ST_NO_WAIT_MMA
#ifndef ST_NO_WAIT_LD
  tcgen05_wait_st();
#endif
  tcgen05_fence_before_thread_sync();
  read_d(tmem, warp, lane, out);
  tcgen05_wait_st();
#endif
#ifndef NO_BEFORE_MMA
  tcgen05_fence_before_thread_sync();
#endif
  __syncthreads();
#if !defined(NO_AFTER_MMA) && !defined(AFTER_IN_MMA_THREAD)
  tcgen05_fence_after_thread_sync();
#endif
  if (threadIdx.x == 0) {
#ifdef AFTER_IN_MMA_THREAD
    tcgen05_fence_after_thread_sync();
#endif
    tcgen05_mma_f8f6f4<1>(tmem, DESC_AB + (smem_u32(smem + OFF_A) >> 4), DESC_AB + (smem_u32(smem + OFF_B) >> 4),
                          IDESC, 1);
    tcgen05_commit<1>(smem_u32(done));
  }
#ifdef ST_DURING_MMA
  __syncthreads();   // the MMA is issued; its completion is not yet observed
  store_d(tmem, warp, lane, 0);
  tcgen05_wait_st();
#endif
  mbarrier_wait_parity(done, 0, 1);
#ifndef NO_AFTER_LD
  tcgen05_fence_after_thread_sync();
#endif
  read_d(tmem, warp, lane, out + M * 32);
  tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    tcgen05_fence_after_thread_sync();
    tcgen05_dealloc<1>(tmem, COLS);
  }
}
