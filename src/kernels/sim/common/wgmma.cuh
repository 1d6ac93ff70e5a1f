// Simulated twin of common/wgmma.cuh (PTX ISA 9.7.15 wgmma; setmaxnreg). wgmma.mma_async is issued when
// all 128 threads of the warpgroup have executed it (each hands over its accumulator registers); the
// engine queues it per warpgroup, in order, and runs model/gmma.h on the CTA's shared memory when it
// completes; wgmma.wait_group N blocks until all but the newest N of the thread's commit groups are done.
// fence, commit_group, wait_group and setmaxnreg gather the warp (.sync.aligned).
#pragma once
#include "common/types.cuh"
#include "common/mbarrier.cuh"
#include "common/wgmma_layout.cuh"

// PTX ISA 9.7.15.6.1 wgmma.fence
PE_DEVICE void wgmma_fence(PE_SIM_SITE) { pe_sim::wgmma_fence(site); }
PE_DEVICE void warpgroup_arrive(PE_SIM_SITE) { pe_sim::wgmma_fence(site); }
// PTX ISA 9.7.15.6.2 wgmma.commit_group
PE_DEVICE void wgmma_commit_group(PE_SIM_SITE) { pe_sim::wgmma_commit(site); }
// PTX ISA 9.7.15.6.3 wgmma.wait_group N
template <int N>
PE_DEVICE void wgmma_wait_group(PE_SIM_SITE) {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes an immediate 0..7");
  pe_sim::wgmma_wait(N, site);
}
// CUTLASS warpgroup_fence_operand: a compiler barrier only
template <int R>
PE_DEVICE void wgmma_fence_operand(float (&d)[R]) {
  (void)d;
}

PE_DEVICE u32 gmma_desc_addr(const void* p, PE_SIM_SITE) { return smem_u32(p, site) & 0x3FFFFu; }

// PTX ISA 9.7.20.9 setmaxnreg (.sync.aligned): no register file to resize here
template <u32 R>
PE_DEVICE void setmaxnreg_inc(PE_SIM_SITE) {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: R must be a multiple of 8 in [24, 256]");
  pe_sim::setmaxnreg(true, R, site);
}
template <u32 R>
PE_DEVICE void setmaxnreg_dec(PE_SIM_SITE) {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: R must be a multiple of 8 in [24, 256]");
  pe_sim::setmaxnreg(false, R, site);
}

// PTX ISA 9.7.15.5.2 wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 (both operands by descriptor)
#define PE_SIM_DEFINE_WGMMA_E4M3(N)                                                                         \
  PE_DEVICE void wgmma_m64n##N##k32_f32_e4m3_e4m3(float (&d)[N / 2], u64 desc_a, u64 desc_b, u32 scale_d, \
                                                  PE_SIM_SITE) {                                         \
    pe_sim::wgmma_e4m3(d, N, desc_a, desc_b, scale_d, site);                                              \
  }
PE_SIM_DEFINE_WGMMA_E4M3(64)
PE_SIM_DEFINE_WGMMA_E4M3(96)
PE_SIM_DEFINE_WGMMA_E4M3(128)
PE_SIM_DEFINE_WGMMA_E4M3(192)
PE_SIM_DEFINE_WGMMA_E4M3(256)
#undef PE_SIM_DEFINE_WGMMA_E4M3

// PTX ISA 9.7.15.5.2 wgmma.mma_async ... .f32.e5m2.e5m2: model/gmma.h computes .e4m3 only, so a kernel
// that issues this form stops here with the reason (the numerics probe runs its E5M2 classes on a GPU only)
PE_DEVICE void wgmma_m64n256k32_f32_e5m2_e5m2(float (&d)[128], u64, u64, u32, PE_SIM_SITE) {
  (void)d;
  pe_sim::trap("wgmma .e5m2 is not modelled: src/kernels/sim/model/gmma.h computes .e4m3 only", site);
}

template <int N>
PE_DEVICE void wgmma_m64nNk32_f32_e4m3_e4m3(float (&d)[N / 2], u64 desc_a, u64 desc_b, u32 scale_d, PE_SIM_SITE) {
  static_assert(N == 64 || N == 96 || N == 128 || N == 192 || N == 256,
                "wgmma e4m3: this header defines N = 64, 96, 128, 192, 256 (PTX allows N % 8 == 0, <= 256)");
  pe_sim::wgmma_e4m3(d, N, desc_a, desc_b, scale_d, site);
}
