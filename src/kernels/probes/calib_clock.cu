// Calibration probe: the clocks themselves. sm_90a. Not book content. One warp per CTA, one CTA per SM;
// lane 0 measures, per CTA:
//   READ_CLOCK64, READ_GLOBALTIMER   cycles per read, over 64 back-to-back reads of each register;
//   TICK_NS, TICK_CYCLES   the smallest step %globaltimer takes (ns) and the clock64 cycles between the
//                          last two steps it saw: the timer's resolution, which bounds how short a span
//                          the launch clock can time (PTX ISA, Special Registers: %globaltimer);
//   SPIN_CYCLES, SPIN_NS   a spin of `spin` cycles of dependent integer work, on both clocks.
// `spin` also sets how long the launch lasts: launched right after a timed kernel, the probe reads the
// clock the GPU has just then (pelib.predict.blind's clock beside the timed launches).
#define PE_TIMING_WARPS 1
#include "probes/calib.cuh"

constexpr int SMEM_BYTES = 120 * 1024;         // one CTA per SM

enum calib_clock_field : u32 {
  CALIB_CLOCK_READ_CLOCK64 = 0,    // cycles for 64 reads of %clock64
  CALIB_CLOCK_READ_GLOBALTIMER = 1, // cycles for 64 reads of %globaltimer
  CALIB_CLOCK_TICK_NS = 2,         // smallest nonzero %globaltimer step seen (ns)
  CALIB_CLOCK_TICK_CYCLES = 3,     // clock64 cycles between the last two steps
  CALIB_CLOCK_SPIN_CYCLES = 4,
  CALIB_CLOCK_SPIN_NS = 5,
  CALIB_CLOCK_SINK = 6,
  CALIB_CLOCK_FIELDS = 7
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(fields, CALIB_CLOCK_FIELDS);
PELIB_EXPORT(num_threads, 32);

extern "C" __global__ void __launch_bounds__(32, 1)
calib_clock(u64* out, u64* timing, u32 spin, u32 ticks) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  if (threadIdx.x != 0) return;
  u64* rec = calib_rec(out, blockIdx.x, CALIB_CLOCK_FIELDS);
  u64 acc = 0;
  u64 t0 = clock64_read();
#pragma unroll
  for (int i = 0; i < 64; ++i) acc += clock64_read();
  rec[CALIB_CLOCK_READ_CLOCK64] = clock64_read() - t0;
  t0 = clock64_read();
#pragma unroll
  for (int i = 0; i < 64; ++i) acc += globaltimer_read();
  rec[CALIB_CLOCK_READ_GLOBALTIMER] = clock64_read() - t0;
  // the globaltimer's step: watch `ticks` changes (bounded by 2^22 reads, so a frozen timer cannot hang)
  u64 g = globaltimer_read(), c = clock64_read(), step = ~0ull, step_cycles = 0, seen = 0;
  for (u32 n = 0; n < (1u << 22) && seen < ticks; ++n) {
    const u64 g1 = globaltimer_read(), c1 = clock64_read();
    if (g1 != g) {
      step = g1 - g < step ? g1 - g : step;
      step_cycles = c1 - c;
      g = g1;
      c = c1;
      ++seen;
    }
  }
  rec[CALIB_CLOCK_TICK_NS] = seen ? step : 0;
  rec[CALIB_CLOCK_TICK_CYCLES] = step_cycles;
  // dependent integer work for `spin` cycles
  const u64 s0 = clock64_read(), n0 = globaltimer_read();
  u32 x = threadIdx.x + 1;
  while (clock64_read() - s0 < spin) {
#pragma unroll
    for (int i = 0; i < 16; ++i) x = x * 1664525u + 1013904223u;
  }
  rec[CALIB_CLOCK_SPIN_CYCLES] = clock64_read() - s0;
  rec[CALIB_CLOCK_SPIN_NS] = globaltimer_read() - n0;
  rec[CALIB_CLOCK_SINK] = acc + x;
}
