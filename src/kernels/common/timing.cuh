// In-kernel clock64 timing records, compiled only in a TIMING build (define TIMING=1).
//
// Layout (pelib.timing decodes it): a global u64 buffer, passed to the kernel as an ordinary
// pointer argument (so the signature is the same in every build), indexed
//   [cta][warp][tile_slot][phase][2]   (the 2 = t_start, t_end)
// cta  = linear block index (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z))
// warp = threadIdx.x / 32 (< PE_TIMING_WARPS), tile_slot = the CTA's own tile counter
// (< PE_TIMING_TILES; later tiles are dropped), phase = a pe_phase id below.
// The host zero-fills the buffer; an all-zero pair means "not recorded".
// A TIMING build exports the layout (timing_warps, timing_tiles, timing_phases, timing_clock)
// through PELIB_EXPORT, so the decoder reads the shape the kernel was compiled with.
// Without TIMING every function here compiles to nothing.
//
// Clocks: %clock64 is the SM's cycle counter (per SM, not synchronised across SMs);
// %globaltimer is a nanosecond system timer (define PE_TIMING_GLOBALTIMER to use it instead).
// PTX ISA: Special Registers: %clock64, %globaltimer. (gau-nernst/learn-cuda 02_matmul_sm100/profiler.h
// uses %globaltimer and %smid the same way.)
#pragma once
#include "common/types.cuh"
#include "common/export.cuh"

// Phase ids, shared with pelib.timing, which parses this enum: keep one "PE_PHASE_<NAME> = <n>,"
// per line, numbered densely from 0, PE_PHASE_COUNT last.
enum pe_phase : u32 {
  PE_PHASE_PRODUCER_WAIT = 0,  // producer: wait for a free smem stage (empty barrier)
  PE_PHASE_TMA_ISSUE = 1,      // producer: issue a tile's TMA loads
  PE_PHASE_TMA_WAIT = 2,       // MMA warp: wait for a stage's TMA data (full barrier)
  PE_PHASE_KLOOP = 3,          // MMA warp: the K-loop of one tile
  PE_PHASE_EPI_WAIT = 4,       // MMA warp: wait for the epilogue to free the accumulator
  PE_PHASE_ACC_WAIT = 5,       // epilogue: wait for the accumulator (mainloop barrier)
  PE_PHASE_EPI_PHASE1 = 6,     // epilogue Phase 1: accumulator -> registers -> SMEM staging
  PE_PHASE_EPI_PHASE2 = 7,     // epilogue Phase 2: SMEM staging -> global stores
  PE_PHASE_TILE = 8,           // one warp's whole tile, start to end
  PE_PHASE_COUNT = 9
};

#ifndef PE_TIMING_WARPS
#define PE_TIMING_WARPS 8
#endif
#ifndef PE_TIMING_TILES
#define PE_TIMING_TILES 16
#endif

#include "common/clock.cuh"

#ifdef TIMING
PELIB_EXPORT(timing_warps, PE_TIMING_WARPS);
PELIB_EXPORT(timing_tiles, PE_TIMING_TILES);
PELIB_EXPORT(timing_phases, PE_PHASE_COUNT);
#ifdef PE_TIMING_GLOBALTIMER
PELIB_EXPORT(timing_clock, 1);  // 1 = %globaltimer nanoseconds
#else
PELIB_EXPORT(timing_clock, 0);  // 0 = %clock64 cycles
#endif
#endif

// A timestamp in a TIMING build, 0 otherwise (and then the compiler drops it).
PE_DEVICE u64 timing_now() {
#ifdef TIMING
#ifdef PE_TIMING_GLOBALTIMER
  return globaltimer_read();
#else
  return clock64_read();
#endif
#else
  return 0;
#endif
}

// Store (t_start, t_end) of `phase` for this CTA, this warp, tile slot `tile_slot`.
// Call from one lane of the warp (e.g. lane 0 or inside elect_one_sync()).
PE_DEVICE void timing_record(u64* buf, u32 tile_slot, u32 phase, u64 t_start, u64 t_end) {
#ifdef TIMING
  const u32 warp = threadIdx.x / 32;
  if (buf == nullptr || warp >= PE_TIMING_WARPS || tile_slot >= PE_TIMING_TILES ||
      phase >= PE_PHASE_COUNT)
    return;
  const u64 cta = blockIdx.x + (u64)gridDim.x * (blockIdx.y + (u64)gridDim.y * blockIdx.z);
  const u64 idx = (((cta * PE_TIMING_WARPS + warp) * PE_TIMING_TILES + tile_slot) *
                       PE_PHASE_COUNT + phase) * 2;
  buf[idx] = t_start;
  buf[idx + 1] = t_end;
#else
  (void)buf; (void)tile_slot; (void)phase; (void)t_start; (void)t_end;
#endif
}

// Record `phase` from t_start to now (one line at the end of a timed region).
#define PE_TIMING_END(buf, tile_slot, phase, t_start) \
  timing_record((buf), (tile_slot), (phase), (t_start), timing_now())
