// Simulated twin of common/cluster.cuh: the same functions, run by the engine (runtime/api.h). Each cites
// the PTX ISA section of the instruction it stands for; what the engine models is said once per function.
#pragma once
#include "common/types.cuh"

// PTX ISA 9.7.9.21 cvta (.to.shared): the shared::cta address (cluster rank << 24 | window offset).
PE_DEVICE u32 smem_u32(const void* p, PE_SIM_SITE) { return pe_sim::smem_addr(p, site); }

// PTX ISA 10 "Special Registers": %cluster_ctarank, %cluster_nctarank, %clusterid.x, %nclusterid.x,
// %smid (the CTA slot the simulator runs it in), %laneid.
PE_DEVICE u32 cluster_ctarank() { return pe_sim::cluster_ctarank(); }
PE_DEVICE u32 cluster_nctarank() { return pe_sim::cluster_nctarank(); }
PE_DEVICE u32 cluster_id_x() { return pe_sim::cluster_id_x(); }
PE_DEVICE u32 cluster_nclusterid_x() { return pe_sim::cluster_nclusterid_x(); }
PE_DEVICE u32 smid() { return pe_sim::sm_id(); }
PE_DEVICE u32 lane_id() { return threadIdx.x % 32; }

// PTX ISA 9.7.13.4 barrier.cluster: arrive (every non-exited thread of the cluster), then wait for the
// phase; .release/.acquire order nothing more in a sequentially consistent model.
PE_DEVICE void cluster_arrive(PE_SIM_SITE) { pe_sim::cluster_barrier_arrive(true, site); }
PE_DEVICE void cluster_arrive_relaxed(PE_SIM_SITE) { pe_sim::cluster_barrier_arrive(false, site); }
PE_DEVICE void cluster_wait(PE_SIM_SITE) { pe_sim::cluster_barrier_wait(site); }
PE_DEVICE void cluster_sync(PE_SIM_SITE) {
  cluster_arrive(site);
  cluster_wait(site);
}

// PTX ISA 9.7.9.22 mapa (.shared::cluster): the same offset in CTA `cta_rank` of the cluster.
PE_DEVICE u32 mapa_shared_cluster(u32 addr, u32 cta_rank, PE_SIM_SITE) { return pe_sim::mapa(addr, cta_rank, site); }

// PTX ISA 9.7.13.7 elect.sync: all 32 lanes gather; the lowest lane of the member mask is elected.
PE_DEVICE bool elect_one_sync(PE_SIM_SITE) { return pe_sim::elect_one(0xFFFFFFFFu, site); }

// PTX ISA 9.7.13.1 bar.sync / bar.arrive: named barrier `id` completes when `count` threads arrived.
PE_DEVICE void named_barrier_sync(u32 id, u32 count, PE_SIM_SITE) { pe_sim::named_bar(id, count, true, site); }
PE_DEVICE void named_barrier_arrive(u32 id, u32 count, PE_SIM_SITE) { pe_sim::named_bar(id, count, false, site); }
