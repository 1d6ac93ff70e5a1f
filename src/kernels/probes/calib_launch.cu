// Calibration probe: what a launch and a CTA start cost, for the grids that are not persistent. sm_90a.
// Not book content. 384 threads and more than half of the shared memory a CTA may have, as the
// non-persistent sm90 stages hold one CTA per SM: `waves` x the SM count CTAs, each spinning `spin` cycles
// of dependent integer work in thread 0 (the other threads leave at once). The launch-clock block of
// common/timing.cuh (clock64 and %globaltimer at the CTA's start and exit, and %smid) is the whole
// measurement: per SM, a CTA's start after the previous CTA's exit is the relaunch gap (the block
// scheduler's hand-over, PTX ISA: Special Registers: %smid, %globaltimer); the launch's event time less
// the span from the first CTA's start to the last CTA's exit is the launch's own overhead.
// Unit = CTA.
#define PE_TIMING_WARPS 1
#include "probes/calib.cuh"

constexpr int SMEM_BYTES = 160 * 1024;         // one CTA per SM, as the non-persistent stages' 193 KiB

enum calib_launch_field : u32 {
  CALIB_LAUNCH_SPIN_CYCLES = 0,  // cycles thread 0 spun
  CALIB_LAUNCH_SINK = 1,         // the spin's result (keeps the work)
  CALIB_LAUNCH_FIELDS = 2
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(fields, CALIB_LAUNCH_FIELDS);
PELIB_EXPORT(num_threads, 384);

extern "C" __global__ void __launch_bounds__(384, 1)
calib_launch(u64* out, u64* timing, u32 spin) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  if (threadIdx.x != 0) return;
  u64* rec = calib_rec(out, blockIdx.x, CALIB_LAUNCH_FIELDS);
  const u64 s0 = clock64_read();
  u32 x = blockIdx.x + 1;
  while (clock64_read() - s0 < spin) {
#pragma unroll
    for (int i = 0; i < 16; ++i) x = x * 1664525u + 1013904223u;
  }
  rec[CALIB_LAUNCH_SPIN_CYCLES] = clock64_read() - s0;
  rec[CALIB_LAUNCH_SINK] = x;
}
