// Simulated twin of common/timing.cuh. In every simulated build (TIMING or not) the stage's phase marks tell
// the engine what each warp is doing: timing_now() is the order stamp of the next event, and
// timing_record(buf, tile_slot, phase, t_start, t_end) says that this warp spent [t_start, t_end) of its tile
// slot in `phase`. The event log gets them as phase_begin / phase_end events, and every event of the warp its
// role and tile from them (runtime/report.cpp finalize_events). A TIMING build also writes the records into
// its buffer, as on a GPU (the real header's timing_record; the stamps are simulated order, never a time).
// The phase enum, the layout and the exports stay in the one definition, common/timing.cuh, included here
// with its two functions renamed.
#pragma once
#include "common/types.cuh"

#define timing_now pe_sim_device_timing_now
#define timing_record pe_sim_device_timing_record
#include "../../common/timing.cuh"
#undef timing_now
#undef timing_record

// What each phase of common/timing.cuh says (its comments): the role of the warp that records it, and what
// the mbarrier waits inside it wait for (the ring's empty or full barriers, the accumulator's empty or full
// ones). PE_PHASE_TILE names the tile only.
PE_DEVICE void pe_sim_phase_meaning(u32 phase, int& role, int& waits) {
  using namespace pe_sim;
  role = ROLE_NONE;
  waits = WAITS_NONE;
  switch (phase) {
    case PE_PHASE_PRODUCER_WAIT: role = ROLE_PRODUCER, waits = WAITS_RING_EMPTY; break;
    case PE_PHASE_TMA_ISSUE: role = ROLE_PRODUCER; break;
    case PE_PHASE_TMA_WAIT: role = ROLE_MMA, waits = WAITS_RING_FULL; break;
    case PE_PHASE_KLOOP: role = ROLE_MMA; break;
    case PE_PHASE_EPI_WAIT: role = ROLE_MMA, waits = WAITS_ACC_EMPTY; break;
    case PE_PHASE_ACC_WAIT: role = ROLE_EPILOGUE, waits = WAITS_ACC_FULL; break;
    case PE_PHASE_EPI_PHASE1:
    case PE_PHASE_EPI_PHASE2: role = ROLE_EPILOGUE; break;
    default: break;
  }
}

PE_DEVICE u64 timing_now(PE_SIM_SITE) { return pe_sim::phase_mark(site); }

PE_DEVICE void timing_record(u64* buf, u32 tile_slot, u32 phase, u64 t_start, u64 t_end, PE_SIM_SITE) {
  int role, waits;
  pe_sim_phase_meaning(phase, role, waits);
  pe_sim::phase_record(tile_slot, phase, role, waits, t_start, t_end, site);
  pe_sim_device_timing_record(buf, tile_slot, phase, t_start, t_end);
}
