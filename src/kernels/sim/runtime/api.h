// The simulator engine as the simulated instruction headers (src/kernels/sim/common/*.cuh) see it, and
// the CUDA C++ built-ins a stage file uses (threadIdx, __syncthreads, __shfl_xor_sync, __shared__ ...),
// so that a stage file compiles unchanged with a host C++ compiler (g++ >= 11, clang++ >= 14).
//
// Execution model (runtime/engine.cpp): every CUDA thread of the grid is a cooperative fiber on one OS
// thread; a seeded random scheduler picks which ready fiber runs next or which queued asynchronous
// operation (TMA, wgmma, tcgen05.mma / cp, bulk store) completes. A fiber gives up the CPU only inside the
// functions below (its "scheduling points").
//
// Shared memory: `__shared__` is `thread_local`. Each CTA that is resident at once runs the kernel from its
// own loaded copy of the stage library (pelib.sim loads one copy per CTA slot), so the stage's
// `extern __shared__ u8 smem_raw[]` and any static `__shared__` variable are that copy's thread-local
// block: a CTA's shared window. A shared::cta address is (cluster rank << 24) | offset in that window,
// as on sm_90/sm_100 (common/wgmma.cuh gmma_desc_addr, common/tma.cuh PE_PEER_BIT_MASK); mapa swaps the
// rank bits.
//
// Every function takes the call site (file, line) through a defaulted argument, so a report names the
// stage's source line.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/limits.cuh"

// Capacity of a CTA's dynamic shared memory window: the per-block limit plus 1 KiB of alignment slack.
#define PE_SIM_SMEM_CAPACITY (PE_SMEM_LIMIT + 1024)

namespace pe_sim {

struct Dim3 {
  unsigned x, y, z;
};

// What a fiber's code reads as threadIdx / blockIdx / blockDim / gridDim (the engine points g_pub at the
// running fiber's copy before it switches to it).
struct ThreadPub {
  Dim3 threadIdx, blockIdx, blockDim, gridDim;
};
extern ThreadPub* g_pub;

// The call site of a simulated instruction: a defaulted `Site site = Site()` parameter takes the file and
// line of the call (the builtins as the constructor's default arguments are evaluated where the outer
// function is called, as std::source_location::current() is).
struct Site {
  const char* file;
  int line;
  constexpr Site(const char* f = __builtin_FILE(), int l = __builtin_LINE()) : file(f), line(l) {}
};
#define PE_SIM_SITE pe_sim::Site site = pe_sim::Site()

// ---- identity and addresses ----
unsigned smem_addr(const void* p, Site site);              // generic pointer -> shared::cta address
unsigned cluster_ctarank();
unsigned cluster_nctarank();
unsigned cluster_id_x();
unsigned cluster_nclusterid_x();
unsigned sm_id();
unsigned mapa(unsigned addr, unsigned rank, Site site);    // shared::cta -> shared::cluster of CTA `rank`

// ---- thread synchronization (each a scheduling point) ----
void syncthreads(Site site);
void syncwarp(unsigned mask, Site site);
unsigned shfl_xor(unsigned mask, unsigned v, int lane_mask, int width, Site site);
bool elect_one(unsigned mask, Site site);
void named_bar(unsigned id, unsigned count, bool wait, Site site);
void cluster_barrier_arrive(bool release, Site site);
void cluster_barrier_wait(Site site);
void aligned_op(const char* what, Site site);   // a .sync.aligned instruction with no data: gathers the warp
void yield(Site site);                          // a plain scheduling point (fences, prefetches)

// ---- mbarrier (PTX ISA 9.7.13.15) ----
// `expr` is the stage's own argument text ("&full[s]"): the barrier's name in the event log
void mbar_init(unsigned addr, unsigned count, const char* expr, Site site);
void mbar_inval(unsigned addr, Site site);
void mbar_arrive(unsigned addr, Site site);                   // addr: shared::cta or shared::cluster
void mbar_expect_tx(unsigned addr, unsigned bytes, bool arrive, Site site);
bool mbar_try_wait(unsigned addr, unsigned parity, Site site);  // one try (blocks until the phase moves)
void mbar_wait(unsigned addr, unsigned parity, unsigned tag, Site site);

// ---- TMA and bulk groups (PTX ISA 9.7.9.25 - 9.7.9.27) ----
void tma_load(const void* tmap, unsigned dst, unsigned bar, const int* coords, int ncoords, unsigned mcast_mask,
              int cta_group, Site site);
void tma_store(const void* tmap, unsigned src, const int* coords, int ncoords, Site site);
void tma_prefetch(const void* tmap, const int* coords, int ncoords, Site site);
void tensormap_prefetch(const void* tmap, Site site);
void bulk_commit(Site site);
void bulk_wait(int n, bool read, Site site);
void fence_proxy_async(Site site);

// ---- wgmma (PTX ISA 9.7.15) ----
void wgmma_fence(Site site);
void wgmma_commit(Site site);
void wgmma_wait(int n, Site site);
// type 0 .e4m3.e4m3, 1 .e5m2.e5m2 (model/gmma.h gmma_f8)
void wgmma_f8(float* d, int n, uint64_t desc_a, uint64_t desc_b, unsigned scale_d, int type, Site site);
inline void wgmma_e4m3(float* d, int n, uint64_t desc_a, uint64_t desc_b, unsigned scale_d, Site site) {
  wgmma_f8(d, n, desc_a, desc_b, scale_d, 0, site);
}
void setmaxnreg(bool inc, unsigned regs, Site site);

// ---- tcgen05 (PTX ISA 9.7.16) ----
void tc_alloc(int cg, unsigned dst, unsigned ncols, Site site);
void tc_dealloc(int cg, unsigned taddr, unsigned ncols, Site site);
void tc_relinquish(int cg, Site site);
// kind: 0 f16, 2 f8f6f4, 6 mxf4nvf4 (model/umma.h UmmaKind)
void tc_mma(int kind, int cg, unsigned d, uint64_t a, uint64_t b, unsigned idesc, unsigned sfa, unsigned sfb,
            unsigned accumulate, Site site);
void tc_commit(int cg, unsigned bar, unsigned mask, bool multicast, Site site);
void tc_ld_32x32b(unsigned taddr, unsigned* regs, int x, Site site);
void tc_st_32x32b(unsigned taddr, const unsigned* regs, int x, Site site);
void tc_wait_ld(Site site);
void tc_wait_st(Site site);
void tc_fence(bool before, Site site);
void tc_cp_32x128b_warpx4(int cg, unsigned taddr, uint64_t desc, Site site);

// ---- plain memory ----
void gmem_load(const void* p, void* dst, size_t n, Site site);
void gmem_store(void* p, const void* src, size_t n, Site site);
void smem_load(unsigned addr, void* dst, size_t n, Site site);    // addr: shared::cta or ::cluster
void smem_store(unsigned addr, const void* src, size_t n, Site site);

// ---- clocks: a simulated counter per SM, an order stamp (never a time) ----
uint64_t clock64(Site site);
uint64_t globaltimer(Site site);

[[noreturn]] void trap(const char* what, Site site);

// ---- the stage's phase marks (common/timing.cuh's twin, every simulated build) ----
// What a phase mark says: the role of the warp that records it, and what its waits wait for.
enum PhaseRole : int { ROLE_NONE = 0, ROLE_PRODUCER = 1, ROLE_MMA = 2, ROLE_EPILOGUE = 4 };
enum PhaseWaits : int { WAITS_NONE, WAITS_RING_EMPTY, WAITS_RING_FULL, WAITS_ACC_EMPTY, WAITS_ACC_FULL };
uint64_t phase_mark(Site site);   // timing_now(): the order stamp of the next event
// timing_record(): this warp spent [t0, t1) of its tile slot `tile` in `phase` (t1 may be t0 + a sum of
// bracketed waits, as the stages record their wait phases)
void phase_record(unsigned tile, unsigned phase, int role, int waits, uint64_t t0, uint64_t t1, Site site);

}  // namespace pe_sim

// ---- CUDA C++ built-ins (not in the engine's own translation units) -------------------------------------
#ifndef PE_SIM_ENGINE
#define threadIdx (pe_sim::g_pub->threadIdx)
#define blockIdx (pe_sim::g_pub->blockIdx)
#define blockDim (pe_sim::g_pub->blockDim)
#define gridDim (pe_sim::g_pub->gridDim)
#define __shared__ thread_local
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
// `__shared__ alignas(8) u64 bar;` puts alignas after a decl-specifier (thread_local), which C++ refuses;
// the GNU attribute means the same and may stand there. No standard header is included after this point
// (runtime/entry.h undefines it first).
#define alignas(n) __attribute__((aligned(n)))

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline void __syncthreads(PE_SIM_SITE) { pe_sim::syncthreads(site); }
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, PE_SIM_SITE) { pe_sim::syncwarp(mask, site); }
inline unsigned __shfl_xor_sync(unsigned mask, unsigned v, int lane_mask, int width = 32, PE_SIM_SITE) {
  return pe_sim::shfl_xor(mask, v, lane_mask, width, site);
}
inline int __shfl_xor_sync(unsigned mask, int v, int lane_mask, int width = 32, PE_SIM_SITE) {
  return (int)pe_sim::shfl_xor(mask, (unsigned)v, lane_mask, width, site);
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width = 32, PE_SIM_SITE) {
  return __uint_as_float(pe_sim::shfl_xor(mask, __float_as_uint(v), lane_mask, width, site));
}
inline size_t __cvta_generic_to_shared(const void* p, PE_SIM_SITE) { return pe_sim::smem_addr(p, site); }
[[noreturn]] inline void __trap(PE_SIM_SITE) { pe_sim::trap("trap", site); }

// The dynamic shared memory every stage declares as `extern __shared__ u8 smem_raw[]`: this copy's
// thread-local block (see the head of this file). Sized for the per-block limit plus 1 KiB of alignment
// slack; the launch's dynamic size bounds what the engine lets a kernel touch. Defined in assembly so that
// the compiler never sees its size: an access at a constant offset into a thread-local array of known size
// is one the kernel-address instrumentation leaves out (GCC's asan instrument_derefs skips every in-bounds
// access to a thread-local variable), and every access of the stage's own code must reach the engine.
#define PE_SIM_STR(x) PE_SIM_STR2(x)
#define PE_SIM_STR2(x) #x
asm(".section .tbss,\"awT\",%nobits\n"
    ".globl smem_raw\n"
    ".type smem_raw, %object\n"
    ".size smem_raw, " PE_SIM_STR(PE_SIM_SMEM_CAPACITY) "\n"
    ".p2align 10\n"
    "smem_raw:\n"
    ".zero " PE_SIM_STR(PE_SIM_SMEM_CAPACITY) "\n"
    ".previous\n");
extern thread_local unsigned char smem_raw[];
#endif  // PE_SIM_ENGINE
