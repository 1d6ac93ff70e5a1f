// Calibration probe: the synchronization the stages' roles hand work over with, in cycles. sm_90a. Not
// book content. 256 threads (two warpgroups, as the ping-pong consumers), one record per CTA:
//   mode 0 (any grid, no cluster):
//     PINGPONG   thread 0 and thread 128 (two warpgroups) pass a token through two mbarriers
//                (mbarrier.arrive; try_wait.parity spin): cycles per round trip, two hand-overs;
//     ARRIVE     thread 0's back-to-back mbarrier.arrive on a barrier that never completes: issue cost;
//     PASS       thread 0's try_wait.parity on a completed phase (it passes at once): a wait that
//                finds its data already there, the cost every stage pays per K slice at best;
//     BAR256     bar.sync 1, 256 by all threads: a named barrier over both warpgroups;
//     BAR128     bar.sync 2, 128 by the first warpgroup alone;
//     SYNCTHREADS __syncthreads.
//   mode 1 (clusters of 2): PINGPONG between thread 0 of the two CTAs, each arriving on the peer's
//     barrier (mapa + mbarrier.arrive.shared::cluster, as stage 05/09's remote releases) and
//     waiting on its own: cycles per cross-SM round trip, read by rank 0.
// Each count is over `iters` repetitions (the fields hold totals; the host divides).
// Method: Luo et al. (arXiv 2501.12084) time Hopper's synchronization primitives by clock64 around
// repeated pairs; PTX ISA mbarrier, bar.sync.
#define PE_TIMING_WARPS 8
#include "probes/calib.cuh"
#include "common/mbarrier.cuh"

constexpr int SMEM_BYTES = 1024 + 64;

enum calib_sync_field : u32 {
  CALIB_SYNC_ITERS = 0,
  CALIB_SYNC_PINGPONG = 1,     // cycles for `iters` round trips (local in mode 0, remote in mode 1)
  CALIB_SYNC_ARRIVE = 2,       // cycles for `iters` mbarrier.arrive
  CALIB_SYNC_PASS = 3,         // cycles for `iters` passing try_wait.parity
  CALIB_SYNC_BAR256 = 4,       // cycles for `iters` bar.sync over 256 threads
  CALIB_SYNC_BAR128 = 5,       // cycles for `iters` bar.sync over 128 threads
  CALIB_SYNC_SYNCTHREADS = 6,  // cycles for `iters` __syncthreads
  CALIB_SYNC_MODE = 7,
  CALIB_SYNC_FIELDS = 8
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(fields, CALIB_SYNC_FIELDS);
PELIB_EXPORT(num_threads, 256);

extern "C" __global__ void __launch_bounds__(256, 1)
calib_sync(u64* out, u64* timing, u32 mode, u32 iters) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  u64* bar = reinterpret_cast<u64*>(smem);     // b0, b1 (ping-pong), never (arrive), done (pass)
  u64* rec = calib_rec(out, blockIdx.x, CALIB_SYNC_FIELDS);
  if (threadIdx.x == 0) {
    mbarrier_init(&bar[0], 1);
    mbarrier_init(&bar[1], 1);
    mbarrier_init(&bar[2], iters + 1 > (1u << 20) - 1 ? (1u << 20) - 1 : iters + 1);   // never completes
    mbarrier_init(&bar[3], 1);
    fence_barrier_init();
  }
  if (mode == 1) {
    cluster_sync();
    const u32 rank = cluster_ctarank();
    if (threadIdx.x == 0) {
      const u64 t0 = clock64_read();
      for (u32 i = 0; i < iters; ++i) {
        if (rank == 0) {
          mbarrier_arrive_remote_cta(&bar[0], 1);
          mbarrier_wait_parity_nocall(&bar[1], i & 1, 1);
        } else {
          mbarrier_wait_parity_nocall(&bar[0], i & 1, 2);
          mbarrier_arrive_remote_cta(&bar[1], 0);
        }
      }
      const u64 t1 = clock64_read();
      rec[CALIB_SYNC_PINGPONG] = t1 - t0;
      rec[CALIB_SYNC_ITERS] = iters;
      rec[CALIB_SYNC_MODE] = 1;
    }
    cluster_sync();   // neither CTA leaves while the peer may still arrive on its barriers
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const u64 t0 = clock64_read();
    for (u32 i = 0; i < iters; ++i) {
      mbarrier_arrive(&bar[0]);
      mbarrier_wait_parity_nocall(&bar[1], i & 1, 3);
    }
    rec[CALIB_SYNC_PINGPONG] = clock64_read() - t0;
  } else if (threadIdx.x == 128) {
    for (u32 i = 0; i < iters; ++i) {
      mbarrier_wait_parity_nocall(&bar[0], i & 1, 4);
      mbarrier_arrive(&bar[1]);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 t0 = clock64_read();
    for (u32 i = 0; i < iters; ++i) mbarrier_arrive(&bar[2]);
    rec[CALIB_SYNC_ARRIVE] = clock64_read() - t0;
    mbarrier_arrive(&bar[3]);                  // phase 0 of bar[3] completes
    u32 passed = 0;
    t0 = clock64_read();
    for (u32 i = 0; i < iters; ++i) passed += mbarrier_try_wait_parity(&bar[3], 0) ? 1u : 0u;
    rec[CALIB_SYNC_PASS] = clock64_read() - t0;
    rec[CALIB_SYNC_ITERS] = passed == iters ? iters : 0;   // 0: a try_wait failed to pass (wrong phase)
    rec[CALIB_SYNC_MODE] = 0;
  }
  __syncthreads();
  u64 t0 = clock64_read();
  for (u32 i = 0; i < iters; ++i) named_barrier_sync(1, 256);
  if (threadIdx.x == 0) rec[CALIB_SYNC_BAR256] = clock64_read() - t0;
  if (threadIdx.x < 128) {
    t0 = clock64_read();
    for (u32 i = 0; i < iters; ++i) named_barrier_sync(2, 128);
    if (threadIdx.x == 0) rec[CALIB_SYNC_BAR128] = clock64_read() - t0;
  }
  __syncthreads();
  t0 = clock64_read();
  for (u32 i = 0; i < iters; ++i) __syncthreads();
  if (threadIdx.x == 0) rec[CALIB_SYNC_SYNCTHREADS] = clock64_read() - t0;
}
