// The SM clock right now, for a launch that carries no clock of its own (a library GEMM): launched on
// the same stream right after it, each CTA (one per SM) reads %clock64 and %globaltimer, spins
// `spin` cycles of its SM's counter, and reads both again. Cycles over nanoseconds is that SM's clock
// over the spin (pelib.energy.probe_clock). A measurement tool, not a stage; sm_90a and sm_100a.
// The record has the word order of a TIMING build's launch-clock block (common/timing.cuh):
// { clock64 begin, globaltimer begin, clock64 end, globaltimer end, smid + 1 } per CTA, so one decoder
// reads both. PTX ISA: Special Registers: %clock64, %globaltimer (nanoseconds), %smid.
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/clock.cuh"
#include "common/cluster.cuh"

#define SM_CLOCK_WORDS 5
PELIB_EXPORT(smem_bytes, 0);
PELIB_EXPORT(clock_words, SM_CLOCK_WORDS);

extern "C" __global__ void __launch_bounds__(32, 1) sm_clock(u64* out, u32 spin) {
  if (threadIdx.x != 0) return;
  u64* rec = out + (u64)blockIdx.x * SM_CLOCK_WORDS;
  const u64 c0 = clock64_read();
  const u64 t0 = globaltimer_read();
  u64 c1 = c0;
  while (c1 - c0 < spin) c1 = clock64_read();
  const u64 t1 = globaltimer_read();
  rec[0] = c0;
  rec[1] = t0;
  rec[2] = c1;
  rec[3] = t1;
  rec[4] = (u64)smid() + 1;
}
