// GPU test: clock64 timing records. Lane 0 of warp w spins (w+1)*SPIN cycles in the K-loop phase and
// SPIN/2 cycles in epilogue Phase 1, for NTILES tiles; pelib.timing decodes the buffer. Not book content.
#include "common/timing.cuh"
#include "common/export.cuh"

#ifndef SPIN
#define SPIN 2000
#endif
#ifndef NTILES
#define NTILES 4
#endif
PELIB_EXPORT(smem_bytes, 0);
PELIB_EXPORT(spin, SPIN);

__device__ __noinline__ u64 spin_cycles(u64 n) {
  const u64 t0 = clock64_read();
  u64 t = t0;
  while (t - t0 < n) t = clock64_read();
  return t;
}

extern "C" __global__ void rt_timing(u64* timing, u64* sink) {
  const u32 warp = threadIdx.x / 32;
  if (threadIdx.x % 32 != 0) return;
  u64 acc = 0;
  for (u32 tile = 0; tile < NTILES; ++tile) {
    const u64 t_tile = timing_now();
    u64 t0 = timing_now();
    acc += spin_cycles((u64)(warp + 1) * SPIN);
    PE_TIMING_END(timing, tile, PE_PHASE_KLOOP, t0);
    t0 = timing_now();
    acc += spin_cycles(SPIN / 2);
    PE_TIMING_END(timing, tile, PE_PHASE_EPI_PHASE1, t0);
    PE_TIMING_END(timing, tile, PE_PHASE_TILE, t_tile);
  }
  sink[blockIdx.x * (blockDim.x / 32) + warp] = acc;
}
