// GPU test for the watchdog: HANG=1 waits on an mbarrier nobody arrives on (the bounded wait traps
// after PE_WAIT_LIMIT tries and prints its tag); HANG=0 spins on %globaltimer for SPIN_NS and
// exits normally (lets the host time out first without leaving a kernel running forever).
#include "common/mbarrier.cuh"
#include "common/timing.cuh"
#include "common/export.cuh"

#ifndef HANG
#define HANG 1
#endif
#ifndef SPIN_NS
#define SPIN_NS 4000000000ull
#endif
PELIB_EXPORT(smem_bytes, 0);

extern "C" __global__ void rt_hang(u32* out) {
  __shared__ u64 bar;
#if HANG
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  mbarrier_wait_parity(&bar, 0, 42);   // never completes: tag 42 in the timeout message
  out[threadIdx.x] = 1;
#else
  (void)bar;
  const u64 t0 = globaltimer_read();
  while (globaltimer_read() - t0 < SPIN_NS) {}
  out[threadIdx.x] = 2;
#endif
}
