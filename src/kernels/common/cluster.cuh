// Thread-block-cluster, shared-memory-window and warp-election wrappers (sm_90a and sm_100a).
// One PE_DEVICE function per PTX instruction; sections refer to the PTX ISA
// (docs.nvidia.com/cuda/parallel-thread-execution). Adapted from CUTLASS
// include/cute/arch/cluster_sm90.hpp and include/cutlass/arch/barrier.h.
#pragma once
#include "common/types.cuh"

// Shared::cta address (32-bit) of a generic pointer into shared memory; the form every
// shared-memory PTX operand below takes. (PTX ISA: cvta; CUTLASS cast_smem_ptr_to_uint)
PE_DEVICE u32 smem_u32(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// ---- special registers (PTX ISA: Special Registers) --------------------------------------

// PTX ISA: Special Registers: %cluster_ctarank (rank of this CTA in its cluster)
PE_DEVICE u32 cluster_ctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// PTX ISA: Special Registers: %cluster_nctarank (CTAs in this cluster)
PE_DEVICE u32 cluster_nctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// PTX ISA: Special Registers: %clusterid (x component: this cluster's index in the grid)
PE_DEVICE u32 cluster_id_x() {
  u32 r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}

// PTX ISA: Special Registers: %nclusterid (x component: clusters in the grid)
PE_DEVICE u32 cluster_nclusterid_x() {
  u32 r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}

// PTX ISA: Special Registers: %smid (the SM this thread runs on; may change across preemption)
PE_DEVICE u32 smid() {
  u32 r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}

// PTX ISA: Special Registers: %laneid
PE_DEVICE u32 lane_id() {
  u32 r;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
  return r;
}

// ---- cluster barrier (PTX ISA: barrier.cluster) --------------------------------------------

// PTX ISA: barrier.cluster (arrive, release semantics: prior writes visible to cluster waiters)
PE_DEVICE void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

// PTX ISA: barrier.cluster (arrive.relaxed: no memory ordering, e.g. to split init from use)
PE_DEVICE void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// PTX ISA: barrier.cluster (wait, acquire semantics)
PE_DEVICE void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// arrive + wait: every thread of every CTA in the cluster (CUTLASS cute::cluster_sync)
PE_DEVICE void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// ---- distributed shared memory addresses (PTX ISA: mapa) -----------------------------------

// PTX ISA: mapa: shared::cta address `addr` of this CTA -> the shared::cluster address of the
// same offset in CTA `cta_rank` of the cluster (CUTLASS set_block_rank)
PE_DEVICE u32 mapa_shared_cluster(u32 addr, u32 cta_rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(cta_rank));
  return r;
}

// The loads and stores at such addresses (ld/st .shared::cluster) are in common/memory.cuh.

// ---- warp election and named barriers ------------------------------------------------------

// PTX ISA: elect.sync: true in exactly one active lane of the (full) warp. Adapted from
// CUTLASS cute::elect_one_sync (include/cute/arch/cluster_sm90.hpp).
PE_DEVICE bool elect_one_sync() {
  u32 pred = 0;
  asm volatile(
      "{\n\t"
      ".reg .b32 %%rx;\n\t"
      ".reg .pred %%px;\n\t"
      "elect.sync %%rx|%%px, %1;\n\t"
      "@%%px mov.s32 %0, 1;\n\t"
      "}"
      : "+r"(pred)
      : "r"(0xFFFFFFFFu));
  return pred != 0;
}

// PTX ISA: bar.sync (named barrier `id` in 0..15, `count` threads, a multiple of 32).
// Barrier 0 is __syncthreads(); CUTLASS NamedBarrier::arrive_and_wait.
PE_DEVICE void named_barrier_sync(u32 id, u32 count) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}

// PTX ISA: bar.arrive (signal named barrier `id` without waiting; producers of a bar.sync)
PE_DEVICE void named_barrier_arrive(u32 id, u32 count) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(count) : "memory");
}
