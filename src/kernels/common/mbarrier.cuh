// mbarrier wrappers: init, arrive (local, expect_tx, remote in the cluster), parity waits.
// One PE_DEVICE function per PTX instruction; sections refer to the PTX ISA
// (docs.nvidia.com/cuda/parallel-thread-execution, "Parallel Synchronization and Communication
// Instructions: mbarrier"). Adapted from CUTLASS include/cutlass/arch/barrier.h
// (ClusterBarrier / ClusterTransactionBarrier) and DeepGEMM deep_gemm/include/deep_gemm/ptx/tma.cuh.
//
// Bounded waits: mbarrier_wait_parity spins at most PE_WAIT_LIMIT tries, then prints a line
// naming the barrier (its tag, shared address, parity, CTA, thread) and executes `trap`, so a
// hang becomes a launch error that pelib.launch reports, not a frozen notebook. On by default;
// define PE_UNBOUNDED_WAIT to compile the plain spin (for timing the last cycles out of a loop).
#pragma once
#include "common/types.cuh"
#include "common/cluster.cuh"

#if !defined(PE_UNBOUNDED_WAIT) && !defined(PE_BOUNDED_WAIT)
#define PE_BOUNDED_WAIT
#endif
#ifndef PE_WAIT_LIMIT
#define PE_WAIT_LIMIT (1u << 26)  // tries, each of which may suspend for a hardware time slice
#endif

// PTX ISA: mbarrier.init: expected arrival count of the first phase
PE_DEVICE void mbarrier_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}

// PTX ISA: mbarrier.inval (before the barrier's memory is reused for something else)
PE_DEVICE void mbarrier_inval(u64* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" :: "r"(smem_u32(bar)) : "memory");
}

// PTX ISA: Parallel Synchronization: membar/fence (fence.mbarrier_init): make mbarrier.init
// visible to the cluster (and to TMA/tcgen05 arrivals) before anyone uses the barrier.
// CUTLASS cutlass::arch::fence_barrier_init.
PE_DEVICE void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// PTX ISA: mbarrier.arrive (one arrival on this CTA's barrier)
PE_DEVICE void mbarrier_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(bar)) : "memory");
}

// PTX ISA: mbarrier.arrive (.expect_tx: arrive and add `bytes` to the pending transaction count,
// which TMA completions (complete_tx::bytes) count down)
PE_DEVICE void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// PTX ISA: mbarrier.expect_tx (add pending bytes without arriving)
PE_DEVICE void mbarrier_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// PTX ISA: mbarrier.arrive (.shared::cluster, release at cluster scope) on the barrier at the same
// shared-memory offset in CTA `cta_rank` of the cluster (address from mapa).
// CUTLASS ClusterBarrier::arrive(cta_id, pred).
PE_DEVICE void mbarrier_arrive_cluster(u64* bar, u32 cta_rank) {
  asm volatile(
      "{\n\t"
      ".reg .b32 remAddr32;\n\t"
      "mapa.shared::cluster.u32 remAddr32, %0, %1;\n\t"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remAddr32];\n\t"
      "}"
      :: "r"(smem_u32(bar)), "r"(cta_rank) : "memory");
}

// PTX ISA: mbarrier.test_wait/try_wait (.parity, one try, acquire at CTA scope): true once the
// phase with parity `parity` has completed. try_wait may suspend the thread for a
// system-dependent time before returning false. CUTLASS ClusterBarrier::try_wait.
PE_DEVICE bool mbarrier_try_wait_parity(u64* bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n\t"
      ".reg .pred P1;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%1], %2;\n\t"
      "selp.b32 %0, 1, 0, P1;\n\t"
      "}"
      : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done != 0;
}

// PTX ISA: mbarrier.test_wait/try_wait (.acquire.cluster): the one-try wait to use when the
// arrivals come from other CTAs of the cluster (remote arrive, 2-CTA commits), so their writes
// are visible after the wait.
PE_DEVICE bool mbarrier_try_wait_parity_cluster(u64* bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n\t"
      ".reg .pred P1;\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P1, [%1], %2;\n\t"
      "selp.b32 %0, 1, 0, P1;\n\t"
      "}"
      : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done != 0;
}

// The bounded wait gave up: say which barrier, then trap (the launch fails with an error).
__device__ __noinline__ void pe_wait_timeout(u64* bar, u32 parity, u32 tag) {
  printf("pelib: mbarrier wait timed out after %u tries: tag=%u smem=0x%x parity=%u "
         "cta=(%u,%u,%u) thread=%u\n", (u32)PE_WAIT_LIMIT, tag, smem_u32(bar), parity,
         blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
  asm volatile("trap;");
}

// Spin on mbarrier_try_wait_parity until phase `parity` completes; bounded under PE_BOUNDED_WAIT.
// `tag` names the wait site in the timeout message (a small number per barrier of the stage).
PE_DEVICE void mbarrier_wait_parity(u64* bar, u32 parity, u32 tag = 0) {
#ifdef PE_BOUNDED_WAIT
  u32 tries = 0;
  while (!mbarrier_try_wait_parity(bar, parity)) {
    if (++tries >= (u32)PE_WAIT_LIMIT) pe_wait_timeout(bar, parity, tag);
  }
#else
  while (!mbarrier_try_wait_parity(bar, parity)) {}
#endif
}

// Same, acquiring at cluster scope (arrivals from peer CTAs).
PE_DEVICE void mbarrier_wait_parity_cluster(u64* bar, u32 parity, u32 tag = 0) {
#ifdef PE_BOUNDED_WAIT
  u32 tries = 0;
  while (!mbarrier_try_wait_parity_cluster(bar, parity)) {
    if (++tries >= (u32)PE_WAIT_LIMIT) pe_wait_timeout(bar, parity, tag);
  }
#else
  while (!mbarrier_try_wait_parity_cluster(bar, parity)) {}
#endif
}

// ===== sm90 twin: call-free bounded waits and the remote-CTA arrive (appended section) ============
// ptxas serializes every wgmma of a kernel that contains a function call (warning C7510: "wgmma
// pipeline crossing function boundary"), and the printf in pe_wait_timeout above is such a call.
// These waits keep the bound but only trap, so a hang is still an error; define PE_WAIT_PRINTF to
// call pe_wait_timeout (tag, barrier, CTA, thread in the message) in a debugging build that accepts
// the serialized wgmma. Under PE_UNBOUNDED_WAIT they are the plain spin. Same arguments as
// mbarrier_wait_parity.
PE_DEVICE void mbarrier_wait_parity_nocall(u64* bar, u32 parity, u32 tag = 0) {
#ifdef PE_BOUNDED_WAIT
  u32 tries = 0;
  while (!mbarrier_try_wait_parity(bar, parity)) {
    if (++tries >= (u32)PE_WAIT_LIMIT) {
#ifdef PE_WAIT_PRINTF
      pe_wait_timeout(bar, parity, tag);
#else
      (void)tag;
      asm volatile("trap;");
#endif
    }
  }
#else
  (void)tag;
  while (!mbarrier_try_wait_parity(bar, parity)) {}
#endif
}

// The same, acquiring at cluster scope (arrivals from the peer CTA of a cluster).
PE_DEVICE void mbarrier_wait_parity_cluster_nocall(u64* bar, u32 parity, u32 tag = 0) {
#ifdef PE_BOUNDED_WAIT
  u32 tries = 0;
  while (!mbarrier_try_wait_parity_cluster(bar, parity)) {
    if (++tries >= (u32)PE_WAIT_LIMIT) {
#ifdef PE_WAIT_PRINTF
      pe_wait_timeout(bar, parity, tag);
#else
      (void)tag;
      asm volatile("trap;");
#endif
    }
  }
#else
  (void)tag;
  while (!mbarrier_try_wait_parity_cluster(bar, parity)) {}
#endif
}

// PTX ISA: mbarrier.arrive (.shared::cluster, default .release.cta) on the barrier at the same offset
// in CTA `cta_rank` of the cluster: a consumer's stage release to a producer there.
// mbarrier_arrive_cluster orders at .cluster scope, which ptxas turns into MEMBAR.ALL.GPU before the
// arrive: a wait for every outstanding global store of the thread (the previous tile's epilogue)
// inside the K-loop. The wgmma reads of the stage are complete already (wgmma.wait_group), so nothing
// else needs ordering. CUTLASS include/cutlass/arch/barrier.h ClusterBarrier::arrive(cta_id, pred).
PE_DEVICE void mbarrier_arrive_remote_cta(u64* bar, u32 cta_rank) {
  asm volatile(
      "{\n\t"
      ".reg .b32 remAddr32;\n\t"
      "mapa.shared::cluster.u32 remAddr32, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remAddr32];\n\t"
      "}"
      :: "r"(smem_u32(bar)), "r"(cta_rank) : "memory");
}
// ===== end of the sm90 twin section =================================================================
