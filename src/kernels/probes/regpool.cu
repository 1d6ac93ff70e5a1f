// Probe: what setmaxnreg.inc does when the CTA's register pool cannot give what it asks. sm_90a. Not book
// content. One CTA of three warpgroups (384 threads, __launch_bounds__(384, 1): ptxas caps every thread at
// the same count at entry, 168); warpgroup 2 (the "producer") lowers its count to RP_DEC (0: keeps its
// entry count), warpgroups 0 and 1 (the "consumers") raise theirs to RP_INC.
// PTX ISA, setmaxnreg: a pool of registers is kept per CTA; .dec releases registers to it, .inc takes
// registers from it and "blocks the execution until enough registers are available in the CTA's register
// pool"; the count is a multiple of 8 in 24..256; the kernel must be launched with a valid maximum
// per-thread register count. What the ISA does not say, and this probe records: whether an .inc that the
// pool can never satisfy blocks (a hang), traps, or is granted anyway; whether registers the CTA's launch
// left unallocated on the SM count; and whether a warpgroup that exits gives its registers back.
//   RP_HOLD 1: the producer holds its registers until both consumers report their .inc done, or until
//              RP_HOLD_CYCLES pass (then it exits): a bounded launch either way; an .inc that blocks
//              until the producer exits shows as a consumer T1 after the producer's T2.
//   RP_HOLD 0: the producer exits right after its .dec.
// After its .inc each consumer thread runs a register-heavy loop (RP_LIVE live words) whose checksum
// the host recomputes (pelib.measure.regpool_probe): registers that were not really granted would corrupt it.
// Records: [warpgroup][REGPOOL_FIELDS] u64 words, written by thread 0 of each warpgroup.
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/clock.cuh"
#include "common/wgmma.cuh"

#ifndef RP_DEC
#define RP_DEC 40
#endif
#ifndef RP_INC
#define RP_INC 232
#endif
#ifndef RP_HOLD
#define RP_HOLD 1
#endif
#ifndef RP_HOLD_CYCLES
#define RP_HOLD_CYCLES (1ull << 31)
#endif
#ifndef RP_LIVE
#define RP_LIVE 160
#endif

enum regpool_field : u32 {
  REGPOOL_T0 = 0,        // clock64 just before the warpgroup's setmaxnreg
  REGPOOL_T1 = 1,        // clock64 just after it
  REGPOOL_T2 = 2,        // clock64 at the warpgroup's exit
  REGPOOL_HELD = 3,      // producer: 1 both consumers' .inc seen done while holding, 2 it gave up (RP_HOLD_CYCLES)
  REGPOOL_CHECK = 4,     // consumer: thread 0's checksum of the register-heavy loop
  REGPOOL_SMID = 5,
  REGPOOL_DONE = 6,      // 1: the warpgroup's thread 0 got here
  REGPOOL_FIELDS = 7
};

PELIB_EXPORT(num_threads, 384);
PELIB_EXPORT(fields, REGPOOL_FIELDS);
PELIB_EXPORT(smem_bytes, 0);
PELIB_EXPORT(rp_dec, RP_DEC);
PELIB_EXPORT(rp_inc, RP_INC);
PELIB_EXPORT(rp_hold, RP_HOLD);
PELIB_EXPORT(rp_live, RP_LIVE);

PE_DEVICE u32 smid_read() {
  u32 r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}

extern "C" __global__ void __launch_bounds__(384, 1) regpool(u64* out, u32 seed, u32 rounds) {
  __shared__ volatile u32 got[2];
  const u32 tid = threadIdx.x, wg = tid / 128;
  if (tid < 2) got[tid] = 0;
  __syncthreads();
  u64* rec = out + u64(wg) * REGPOOL_FIELDS;
  const bool lead = tid % 128 == 0;
  if (wg == 2) {
    const u64 t0 = clock64_read();
#if RP_DEC
    setmaxnreg_dec<RP_DEC>();
#endif
    const u64 t1 = clock64_read();
    u64 held = 0;
#if RP_HOLD
    if (lead) {
      held = 2;
      while (clock64_read() - t1 < RP_HOLD_CYCLES)
        if (got[0] && got[1]) {
          held = 1;
          break;
        }
    }
#endif
    if (lead) {
      rec[REGPOOL_T0] = t0;
      rec[REGPOOL_T1] = t1;
      rec[REGPOOL_HELD] = held;
      rec[REGPOOL_SMID] = smid_read();
      rec[REGPOOL_DONE] = 1;
      rec[REGPOOL_T2] = clock64_read();
    }
    return;
  }
  const u64 t0 = clock64_read();
  setmaxnreg_inc<RP_INC>();
  const u64 t1 = clock64_read();
  __syncwarp();
  if (lead) got[wg] = 1;
  // RP_LIVE words live across `rounds` rounds of dependent integer work (the host recomputes thread 0's)
  u32 v[RP_LIVE];
#pragma unroll
  for (int i = 0; i < RP_LIVE; ++i) v[i] = (tid + 1) * 0x9E3779B9u + u32(i) * 0x85EBCA6Bu + seed;
  for (u32 r = 0; r < rounds; ++r) {
#pragma unroll
    for (int i = 0; i < RP_LIVE; ++i) v[i] = v[i] * 0x2C1B3C6Du + (v[(i + 1) % RP_LIVE] ^ (r + u32(i)));
  }
  u32 sum = 0;
#pragma unroll
  for (int i = 0; i < RP_LIVE; ++i) sum = (sum ^ v[i]) * 0x01000193u;
  if (lead) {
    rec[REGPOOL_T0] = t0;
    rec[REGPOOL_T1] = t1;
    rec[REGPOOL_CHECK] = sum;
    rec[REGPOOL_SMID] = smid_read();
    rec[REGPOOL_DONE] = 1;
    rec[REGPOOL_T2] = clock64_read();
  }
}
