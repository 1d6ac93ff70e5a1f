// What every calibration probe (calib_*.cu, sm_90a) shares: the launch clock of common/timing.cuh, a
// record buffer, and operand data that is random but never NaN. Run only by pelib.predict.probes, which
// reads each probe's record layout from its `enum calib_<probe>_field` (one field per line, numbered
// densely from 0, CALIB_<PROBE>_FIELDS last) and its exports.
//
// Records: `u64* out` holds [unit][CALIB_<PROBE>_FIELDS] words per probe (a unit is a CTA, or a
// (CTA, warpgroup) pair, as the probe's head says); the host zero-fills it, so 0 means "not recorded".
// The launch clock: every probe is a TIMING build that records no phases (one empty tile slot), so its
// `u64* timing` buffer is the launch-clock block of common/timing.cuh behind zeros, decoded by
// pelib.timing (launch_clock): each probe's cycles come with the SM clock of that very launch.
#pragma once
#ifndef TIMING
#define TIMING 1
#endif
#define PE_TIMING_TILES 1   // no phase records: one empty slot keeps timing.cuh's bounds test meaningful
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/clock.cuh"
#include "common/cluster.cuh"
#include "common/timing.cuh"

// A 32-bit mix (the "lowbias32" integer hash, Chris Wellons, hash-prospector): operand bytes and
// scattered addresses that the compiler cannot fold and the DRAM sees as unrelated.
PE_DEVICE u32 calib_hash(u32 x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Four E4M3 bytes of word `i` under `seed`: random with the top exponent bit cleared (|x| <= 1.875, never
// the NaN pattern S.1111.111; OCP 8-bit floating point, E4M3), so the tensor cores see toggling data (a
// power-capped chip runs slower on random than on constant operands: METHOD of the device notes, and
// Horace He, "Strangely, matrix multiplications run faster when given predictable data"). With
// CALIB_FILL_ONES every byte is 0x38 (1.0): each k32 product sums to exactly 32, which the CPU tests check.
PE_DEVICE u32 calib_e4m3x4(u32 i, u32 seed) {
#ifdef CALIB_FILL_ONES
  (void)i;
  (void)seed;
  return 0x38383838u;
#else
  return calib_hash(i * 0x9E3779B9u + seed) & 0xBFBFBFBFu;
#endif
}

// Threads [tid0, tid0 + nthreads) fill `bytes` (a multiple of 16) of shared memory at `p` with
// calib_e4m3x4 words.
PE_DEVICE void calib_fill_smem(u8* p, u32 bytes, u32 seed, u32 tid, u32 nthreads) {
  for (u32 w = tid; w < bytes / 4; w += nthreads)
    reinterpret_cast<u32*>(p)[w] = calib_e4m3x4(w, seed);
}

// The record base of `unit` in a probe's buffer of `fields` words per unit.
PE_DEVICE u64* calib_rec(u64* out, u64 unit, u32 fields) { return out + unit * fields; }
