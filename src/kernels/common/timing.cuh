// In-kernel clock64 timing records, compiled only in a TIMING build (define TIMING=1).
//
// Layout (pelib.timing decodes it): a global u64 buffer, passed to the kernel as an ordinary
// pointer argument (so the signature is the same in every build), indexed
//   [cta][warp][tile_slot][phase][2]   (the 2 = t_start, t_end)
// cta  = linear block index (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z))
// warp = threadIdx.x / 32 (< PE_TIMING_WARPS), tile_slot = the CTA's own tile counter
// (< PE_TIMING_TILES; later tiles are dropped), phase = a pe_phase id below.
// The host zero-fills the buffer; an all-zero pair means "not recorded".
// A TIMING build exports the layout (timing_warps, timing_tiles, timing_phases, timing_clock,
// timing_clock_words) through PELIB_EXPORT, so the decoder reads the shape the kernel was compiled with.
// Without TIMING every function here compiles to nothing.
//
// The launch clock. PE_TIMING_CTA(timing), the first statement of a kernel, has lane 0 of each warp
// (< PE_TIMING_WARPS) read %clock64 and %globaltimer when the kernel starts and again when the warp
// leaves it (a destructor: every return path records), and the CTA's %smid. These go after the
// phase records, indexed [cta][warp][PE_CLOCK_WORDS] at word ctas * warps * tiles * phases * 2, as
// { clock64 begin, globaltimer begin, clock64 end, globaltimer end, smid + 1 }.
// pelib.timing divides a CTA's cycles (last end - first begin on its SM's counter) by its
// nanoseconds: the SM clock of that very launch, per CTA. Both registers are read in the same order
// at both ends, so the fixed cost of a read cancels in the differences. (The calibration probes,
// src/kernels/probes/calib_*.cu, record the same block.)
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
#include "common/cluster.cuh"

#define PE_CLOCK_WORDS 5   // per (cta, warp): clock64 begin, globaltimer begin, clock64 end, globaltimer end, smid + 1

#ifdef TIMING
PELIB_EXPORT(timing_warps, PE_TIMING_WARPS);
PELIB_EXPORT(timing_clock_words, PE_CLOCK_WORDS);
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

// ---- the launch clock (see the head of this file) -------------------------------------------------
#ifdef TIMING
// The word index of (cta, warp)'s clock record: after every phase record of the grid.
PE_DEVICE u64 timing_clock_index(u64 cta, u32 warp) {
  const u64 ctas = (u64)gridDim.x * gridDim.y * gridDim.z;
  return ctas * PE_TIMING_WARPS * PE_TIMING_TILES * PE_PHASE_COUNT * 2 + (cta * PE_TIMING_WARPS + warp) * PE_CLOCK_WORDS;
}

// This warp's clock record, or null (not lane 0, a warp beyond PE_TIMING_WARPS, no buffer).
PE_DEVICE u64* timing_clock_slot(u64* buf) {
  const u32 warp = threadIdx.x / 32;
  if (buf == nullptr || warp >= PE_TIMING_WARPS || threadIdx.x % 32 != 0) return nullptr;
  const u64 cta = blockIdx.x + (u64)gridDim.x * (blockIdx.y + (u64)gridDim.y * blockIdx.z);
  return buf + timing_clock_index(cta, warp);
}

// Lane 0 of each recorded warp stamps (clock64, globaltimer) at construction and at destruction. It
// keeps only the kernel's pointer argument and finds its slot again at the end, so nothing but that
// pointer stays live across the kernel (a slot kept live spilled in the register-tight consumers).
struct pe_cta_clock {
  u64* buf;
  PE_DEVICE explicit pe_cta_clock(u64* b) : buf(b) {
    u64* slot = timing_clock_slot(buf);
    if (slot == nullptr) return;
    slot[0] = clock64_read();
    slot[1] = globaltimer_read();
    slot[4] = (u64)smid() + 1;
  }
  PE_DEVICE ~pe_cta_clock() {
    u64* slot = timing_clock_slot(buf);
    if (slot == nullptr) return;
    slot[2] = clock64_read();
    slot[3] = globaltimer_read();
  }
};
#define PE_TIMING_CTA(buf) pe_cta_clock pe_cta_clock_guard_(buf)
#else
#define PE_TIMING_CTA(buf) ((void)0)
#endif
