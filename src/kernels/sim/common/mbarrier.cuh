// Simulated twin of common/mbarrier.cuh. The engine keeps each mbarrier's state (expected count, pending
// arrivals, tx-count, phase) beside the CTA's shared memory, keyed by its address (PTX ISA 9.7.13.15
// "mbarrier"): a phase completes when its pending arrivals and its tx-count are both zero; an arrival past
// the count or a tx-count below zero with no arrival left is reported as misuse. Waits never time out here:
// a wait that can never complete is reported by the deadlock detector with its tag and barrier state.
#pragma once
#include "common/types.cuh"
#include "common/cluster.cuh"
#include "common/wait_kind.cuh"

// PTX ISA 9.7.13.15.9 mbarrier.init. The macro hands the engine the stage's own argument text ("&full[s]"),
// which names the barrier in the event log (its index comes from its address).
PE_DEVICE void pe_sim_mbarrier_init(u64* bar, u32 count, const char* expr, PE_SIM_SITE) {
  pe_sim::mbar_init(smem_u32(bar, site), count, expr, site);
}
#define mbarrier_init(bar, count) pe_sim_mbarrier_init((bar), (count), #bar)

// PTX ISA 9.7.13.15.10 mbarrier.inval
PE_DEVICE void mbarrier_inval(u64* bar, PE_SIM_SITE) { pe_sim::mbar_inval(smem_u32(bar, site), site); }

// PTX ISA 9.7.12.4 membar/fence (fence.mbarrier_init): ordering only (a scheduling point here).
PE_DEVICE void fence_barrier_init(PE_SIM_SITE) { pe_sim::yield(site); }

// PTX ISA 9.7.13.15.13 mbarrier.arrive
PE_DEVICE void mbarrier_arrive(u64* bar, PE_SIM_SITE) { pe_sim::mbar_arrive(smem_u32(bar, site), site); }

// PTX ISA 9.7.13.15.13 mbarrier.arrive.expect_tx (expect-tx, then arrive)
PE_DEVICE void mbarrier_arrive_expect_tx(u64* bar, u32 bytes, PE_SIM_SITE) {
  pe_sim::mbar_expect_tx(smem_u32(bar, site), bytes, true, site);
}

// PTX ISA 9.7.13.15.11 mbarrier.expect_tx
PE_DEVICE void mbarrier_expect_tx(u64* bar, u32 bytes, PE_SIM_SITE) {
  pe_sim::mbar_expect_tx(smem_u32(bar, site), bytes, false, site);
}

// PTX ISA 9.7.13.15.13 mbarrier.arrive (.shared::cluster) at the same offset in CTA cta_rank (mapa).
PE_DEVICE void mbarrier_arrive_cluster(u64* bar, u32 cta_rank, PE_SIM_SITE) {
  pe_sim::mbar_arrive(pe_sim::mapa(smem_u32(bar, site), cta_rank, site), site);
}

// PTX ISA 9.7.13.15.16 mbarrier.test_wait/try_wait (.parity): one try. A false answer comes only after the
// barrier's phase moved (the hardware may suspend the thread before answering).
PE_DEVICE bool mbarrier_try_wait_parity(u64* bar, u32 parity, PE_SIM_SITE) {
  return pe_sim::mbar_try_wait(smem_u32(bar, site), parity, site);
}
PE_DEVICE bool mbarrier_try_wait_parity_cluster(u64* bar, u32 parity, PE_SIM_SITE) {
  return pe_sim::mbar_try_wait(smem_u32(bar, site), parity, site);
}

// The bounded wait's timeout cannot happen in the simulator (see the head of this file).
PE_DEVICE void pe_wait_timeout(u64* bar, u32 parity, u32 tag, PE_SIM_SITE) {
  (void)bar, (void)parity, (void)tag;
  pe_sim::trap("mbarrier wait timed out", site);
}

// Spin until phase `parity` of `bar` completes; every wait build is the same blocking wait here.
template <int KIND, bool CLUSTER>
PE_DEVICE void pe_wait_parity(u64* bar, u32 parity, u32 tag, PE_SIM_SITE) {
  pe_sim::mbar_wait(smem_u32(bar, site), parity, tag, site);
}

PE_DEVICE void mbarrier_wait_parity(u64* bar, u32 parity, u32 tag = 0, PE_SIM_SITE) {
  pe_sim::mbar_wait(smem_u32(bar, site), parity, tag, site);
}
PE_DEVICE void mbarrier_wait_parity_cluster(u64* bar, u32 parity, u32 tag = 0, PE_SIM_SITE) {
  pe_sim::mbar_wait(smem_u32(bar, site), parity, tag, site);
}
PE_DEVICE void mbarrier_wait_parity_nocall(u64* bar, u32 parity, u32 tag = 0, PE_SIM_SITE) {
  pe_sim::mbar_wait(smem_u32(bar, site), parity, tag, site);
}
PE_DEVICE void mbarrier_wait_parity_cluster_nocall(u64* bar, u32 parity, u32 tag = 0, PE_SIM_SITE) {
  pe_sim::mbar_wait(smem_u32(bar, site), parity, tag, site);
}

// PTX ISA 9.7.13.15.13 mbarrier.arrive (.shared::cluster) on CTA cta_rank's barrier (mapa).
PE_DEVICE void mbarrier_arrive_remote_cta(u64* bar, u32 cta_rank, PE_SIM_SITE) {
  pe_sim::mbar_arrive(pe_sim::mapa(smem_u32(bar, site), cta_rank, site), site);
}
