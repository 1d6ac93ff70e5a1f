// mbarrier wrappers: init, arrive (local, expect_tx, remote in the cluster), parity waits.
// One PE_DEVICE function per PTX instruction; sections refer to the PTX ISA
// (docs.nvidia.com/cuda/parallel-thread-execution, "Parallel Synchronization and Communication
// Instructions: mbarrier"). Adapted from CUTLASS include/cutlass/arch/barrier.h
// (ClusterBarrier / ClusterTransactionBarrier) and DeepGEMM deep_gemm/include/deep_gemm/ptx/tma.cuh.
//
// Which scope a wait needs. Every wait of the sm_100a stages acquires at CTA scope
// (mbarrier_wait_parity: mbarrier.try_wait.parity.shared::cta.b64, whose .sem and .scope default to
// .acquire and .cta; PTX ISA, mbarrier.test_wait/try_wait), also where the arrivals come from the
// other CTA of a pair, because no generic-proxy data crosses a CTA through a barrier: what a waiter
// touches after the wait is ordered by the barrier's own mechanism, not by a cluster-scope acquire:
//   - TMA complete_tx (full[s], the leader counting both CTAs' bytes): the transfer's writes are
//     performed before complete-tx decrements the tx-count (PTX ISA cp.async.bulk.tensor,
//     mbarrier-based completion), and the MMA reads them through the async proxy after
//     tcgen05.fence::after_thread_sync;
//   - tcgen05.commit, multicast to both CTAs (empty[s], mma_done, acc_full): the arrive happens when
//     the MMAs have completed; the waiter then only rewrites the slot with TMA (async proxy) or reads
//     TMEM after tcgen05.fence::after_thread_sync;
//   - an epilogue warp's arrive, local or on the leader (acc_empty): it follows tcgen05.wait::ld and
//     tcgen05.fence::before_thread_sync, and the MMA warp issues its next tcgen05.mma after
//     tcgen05.fence::after_thread_sync: the tcgen05 ordering across threads that PTX ISA 9.7.16.6
//     ("Memory Consistency Model for 5th generation of TensorCore operations") builds from any thread
//     synchronization between the two fences.
// CUTLASS (ClusterBarrier::wait, used by every sm100 pipeline, 2-SM ones included), DeepGEMM's sm100
// GEMMs and learn-cuda's 2-SM matmul_v5/v6 wait the same way. A cluster-scope wait
// (mbarrier_wait_parity_cluster) compiles to CCTL.IVALL after every completed wait, an L1
// invalidate; the Blackwell stages use none (tests/test_stage_files.py checks their loops' SASS).
// The remote arrive likewise needs no cluster-scope release: mbarrier_arrive_remote_cta (CUTLASS
// umma_arrive_2x1SM_sm0) instead of mbarrier_arrive_cluster, whose .release.cluster compiles to
// MEMBAR.ALL.GPU (a wait for the thread's outstanding global stores) before the arrive.
//
// Three wait builds, PE_WAIT_KIND (every stage exports the one it was compiled with as wait_kind):
//   0 PE_WAIT_BOUNDED_PRINTF (the default: tests and chapters): spin at most PE_WAIT_LIMIT tries,
//     then print the barrier's tag, shared address, parity, CTA and thread, and trap, so a hang
//     becomes a launch error that pelib.launch reports. The printf is a call: the wait's slow path
//     carries a CALL and the kernel a stack frame.
//   1 PE_WAIT_BOUNDED_TRAP: the same bound, then trap without printing: call-free.
//   2 PE_WAIT_UNBOUNDED: the plain spin a production kernel ships (CUTLASS ClusterBarrier::wait).
// The *_nocall waits (the sm90 twin's: ptxas serializes every wgmma of a kernel that contains a call,
// warning C7510) build kind 0 as kind 1 unless PE_WAIT_PRINTF is defined; PE_WAIT_KIND_NOCALL is the
// kind they compile to. PE_UNBOUNDED_WAIT is kind 2 spelled the old way.
#pragma once
#include "common/types.cuh"
#include "common/cluster.cuh"

#include "common/wait_kind.cuh"

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
// shared-memory offset in CTA `cta_rank` of the cluster (address from mapa): for a peer that must see
// this thread's generic-proxy writes. It compiles to MEMBAR.ALL.GPU first; the stages use
// mbarrier_arrive_remote_cta (below).
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

// Spin until phase `parity` of `bar` completes, as wait build KIND (see the head of this file).
// `tag` names the wait site in the timeout message (a small number per barrier of the stage).
template <int KIND, bool CLUSTER>
PE_DEVICE void pe_wait_parity(u64* bar, u32 parity, u32 tag) {
  auto done = [&] { return CLUSTER ? mbarrier_try_wait_parity_cluster(bar, parity) : mbarrier_try_wait_parity(bar, parity); };
  if constexpr (KIND == PE_WAIT_UNBOUNDED) {
    (void)tag;
    while (!done()) {}
  } else {
    u32 tries = 0;
    while (!done()) {
      if (++tries >= (u32)PE_WAIT_LIMIT) {
        if constexpr (KIND == PE_WAIT_BOUNDED_PRINTF) pe_wait_timeout(bar, parity, tag);
        else asm volatile("trap;");
      }
    }
  }
}

// The waits of the stages: acquire at CTA scope (the sm_100a stages' only form, see above) ...
PE_DEVICE void mbarrier_wait_parity(u64* bar, u32 parity, u32 tag = 0) {
  pe_wait_parity<PE_WAIT_KIND, false>(bar, parity, tag);
}

// ... or at cluster scope (the runtime tests' cluster kernel and the sm90 twin's cluster stages).
PE_DEVICE void mbarrier_wait_parity_cluster(u64* bar, u32 parity, u32 tag = 0) {
  pe_wait_parity<PE_WAIT_KIND, true>(bar, parity, tag);
}

// ===== sm90 twin: call-free bounded waits and the remote-CTA arrive (appended section) ============
// ptxas serializes every wgmma of a kernel that contains a function call (warning C7510: "wgmma
// pipeline crossing function boundary"), and the printf in pe_wait_timeout above is such a call.
// These waits compile as PE_WAIT_KIND_NOCALL: the bound without the printf unless PE_WAIT_PRINTF is
// defined (a debugging build that accepts the serialized wgmma). Same arguments as mbarrier_wait_parity.
PE_DEVICE void mbarrier_wait_parity_nocall(u64* bar, u32 parity, u32 tag = 0) {
  pe_wait_parity<PE_WAIT_KIND_NOCALL, false>(bar, parity, tag);
}

// The same, acquiring at cluster scope (arrivals from the peer CTA of a cluster).
PE_DEVICE void mbarrier_wait_parity_cluster_nocall(u64* bar, u32 parity, u32 tag = 0) {
  pe_wait_parity<PE_WAIT_KIND_NOCALL, true>(bar, parity, tag);
}

// ===== end of the sm90 twin section =================================================================

// PTX ISA: mbarrier.arrive (.shared::cluster; .sem/.scope default .release.cta) on the barrier at the
// same offset in CTA `cta_rank` of the cluster (address from mapa): the peer's release of a stage
// (sm90: after wgmma.wait_group) or of an accumulator (sm100: after tcgen05.wait::ld and
// tcgen05.fence::before_thread_sync). Nothing but the barrier's phase needs ordering (see "Which
// scope a wait needs" above), so no cluster-scope release: mbarrier_arrive_cluster's .release.cluster
// compiles to MEMBAR.ALL.GPU before the arrive, a wait for every outstanding global store of the
// thread. CUTLASS include/cutlass/arch/barrier.h ClusterBarrier::arrive(cta_id, pred) and
// umma_arrive_2x1SM_sm0 (PipelineUmmaAsync::consumer_release_2x1SM) arrive this way.
PE_DEVICE void mbarrier_arrive_remote_cta(u64* bar, u32 cta_rank) {
  asm volatile(
      "{\n\t"
      ".reg .b32 remAddr32;\n\t"
      "mapa.shared::cluster.u32 remAddr32, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remAddr32];\n\t"
      "}"
      :: "r"(smem_u32(bar)), "r"(cta_rank) : "memory");
}
