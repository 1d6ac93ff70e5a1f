// Hopper (sm_90a) warpgroup MMA: wgmma.mma_async for FP8 E4M3 with FP32 accumulators in registers,
// its fence / commit / wait protocol, and setmaxnreg register reallocation.
//
// One PE_DEVICE function per instruction, named after it, one asm volatile each.
//   wgmma_fence()                 wgmma.fence.sync.aligned               (CUTLASS: warpgroup_arrive)
//   warpgroup_arrive()            the same instruction under CUTLASS's name
//   wgmma_commit_group()          wgmma.commit_group.sync.aligned        (CUTLASS: warpgroup_commit_batch)
//   wgmma_wait_group<N>()         wgmma.wait_group.sync.aligned N        (CUTLASS: warpgroup_wait<N>)
//   wgmma_fence_operand(d)        an empty asm that pins the accumulators (CUTLASS: warpgroup_fence_operand)
//   setmaxnreg_inc<R>() / setmaxnreg_dec<R>()   setmaxnreg.{inc,dec}.sync.aligned.u32 R
//   wgmma_m64n{64,96,128,192,256}k32_f32_e4m3_e4m3(d, desc_a, desc_b, scale_d)
//   wgmma_m64nNk32_f32_e4m3_e4m3<N>(d, ...)   the same, N picked at compile time
//   wgmma_m64n256k32_f32_e5m2_e5m2(d, desc_a, desc_b, scale_d)   the E5M2 form (the numerics probe only)
//   gmma_desc_addr(p)             the shared address a wgmma descriptor encodes (rank bits masked)
//   wgmma_quad_transpose(v, q)    4x4 transpose of packed pairs across a lane quad (16-B epilogue stores)
// The sm90 epilogue's loads and stores are in common/memory.cuh, its conversions in common/convert.cuh,
// the L2 prefetch and the 5-D box load of B (tma_prefetch_2d_l2, tma_load_5d) in common/tma.cuh.
// The call-free bounded waits (mbarrier_wait_parity_nocall, ..._cluster_nocall) and the remote-CTA
// arrive (mbarrier_arrive_remote_cta) live in common/mbarrier.cuh (sm90 twin section).
//
// Sources: PTX ISA 9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
// (9.7.15.5.2 wgmma.mma_async; 9.7.15.6 wgmma.fence, wgmma.commit_group, wgmma.wait_group),
// PTX ISA "setmaxnreg" (miscellaneous instructions, sm_90a, PTX 8.0); CUTLASS
// include/cute/arch/mma_sm90_gmma.hpp (SM90_64xNx32_F32E4M3E4M3_SS_TN, warpgroup_arrive/commit/wait,
// warpgroup_fence_operand), include/cutlass/arch/reg_reconfig.h (warpgroup_reg_alloc/dealloc).
// Worked raw-PTX users read for structure: ademeure/hopperian_tensor matmul.cu (m64n256k32 e4m3),
// pranjalssh/fast.cu examples/matmul/matmul_*.cuh (BF16 wgmma, setmaxnreg).
//
// NOTES:
// - FP8 wgmma takes NO transpose immediates: both operands are K-major (the "TN" of the CUTLASS name),
//   and K = 32 per instruction. The operand list after d, a-desc, b-desc is scale-d, imm-scale-a,
//   imm-scale-b. imm-scale-a/b are +1/-1 (negate the operand), not quantization scales; we pass 1, 1.
// - scale-d is a predicate: 0 makes D = A*B (the first K-step of a tile), 1 makes D = A*B + D.
// - Accumulator layout of m64nNk32 .f32 (PTX ISA 9.7.15.5.1 "Matrix fragments for wgmma .m64nNk32",
//   CUTLASS CLayout_64xN = ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512))): thread t of the warpgroup,
//   warp w = t/32, lane l = t%32, holds N/2 floats; d[4j + 2h + c] is
//   row 16w + 8h + l/4, column 8j + 2(l%4) + c, for j < N/8, h, c in {0,1}. See wgmma_acc_row/col.
// - The accumulators must stay in registers across an async wgmma: index them only with constants
//   (unrolled loops) and fence them (wgmma_fence_operand) around the issue, as CUTLASS does, so the
//   compiler neither moves their uses past wgmma.wait_group nor spills them.
#pragma once
#include "common/types.cuh"
#include "common/mbarrier.cuh"
#include "common/wgmma_layout.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "common/wgmma.cuh: wgmma and setmaxnreg need the arch-specific target sm_90a (arch=\"sm_90a\")"
#endif

// ---------------------------------------------------------------------------------------------------
// Ordering: fence, commit, wait
// ---------------------------------------------------------------------------------------------------

// PTX ISA 9.7.15.6.1 wgmma.fence: orders prior register/shared-memory writes before the next wgmma.
PE_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// CUTLASS mma_sm90_gmma.hpp warpgroup_arrive(): the same wgmma.fence under the name CUTLASS uses.
PE_DEVICE void warpgroup_arrive() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// PTX ISA 9.7.15.6.2 wgmma.commit_group: close the batch of uncommitted wgmma.mma_async into one group.
PE_DEVICE void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// PTX ISA 9.7.15.6.3 wgmma.wait_group N: wait until at most N committed groups are still pending.
template <int N>
PE_DEVICE void wgmma_wait_group() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes an immediate 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// CUTLASS warpgroup_fence_operand: no instruction, only a compiler barrier that keeps each accumulator
// register live and in place across the asynchronous wgmma.
template <int R>
PE_DEVICE void wgmma_fence_operand(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---------------------------------------------------------------------------------------------------
// Descriptor start address
// ---------------------------------------------------------------------------------------------------
// The shared address a descriptor encodes. On sm_90 the shared::cta address of a CTA in a cluster
// carries its rank in bits 24 and up (SASS: the window base is SR_CgaCtaId << 24 | offset), and the
// descriptor keeps only matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4 (PTX ISA 9.7.15.5.1; CUTLASS
// make_gmma_desc truncates the same way into the 14-bit start_address_ field). common/descriptors.cuh
// refuses addresses >= 2^18 with a trap, so pass it this masked address: unmasked, every CTA of rank
// >= 1 traps at its first descriptor.
PE_DEVICE u32 gmma_desc_addr(const void* p) { return smem_u32(p) & 0x3FFFFu; }

// ---------------------------------------------------------------------------------------------------
// Register reallocation (CUTLASS include/cutlass/arch/reg_reconfig.h)
// ---------------------------------------------------------------------------------------------------
// setmaxnreg takes effect only when the kernel has a register cap at entry (__launch_bounds__(T, 1))
// and each warpgroup's role is one branch; R is a multiple of 8 in [24, 256].

// PTX ISA setmaxnreg.inc: raise this warp's per-thread register budget to R (blocks until available).
template <u32 R>
PE_DEVICE void setmaxnreg_inc() {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: R must be a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

// PTX ISA setmaxnreg.dec: lower this warp's per-thread register budget to R, releasing the rest.
template <u32 R>
PE_DEVICE void setmaxnreg_dec() {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: R must be a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

// ---------------------------------------------------------------------------------------------------
// wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3, both operands from shared-memory descriptors
// (PTX ISA 9.7.15.5.2; CUTLASS SM90_64xNx32_F32E4M3E4M3_SS_TN::fma)
// ---------------------------------------------------------------------------------------------------
// The asm text names N/2 accumulator operands %0..%(N/2-1), then desc_a, desc_b, scale_d. The
// preprocessor spells those lists: PE_WG_TENS(t) is "%t0,...,%t9," and PE_WG_ACC8(d, i) eight "+f".
#define PE_WG_UNITS "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,"
#define PE_WG_TENS(t) "%" #t "0,%" #t "1,%" #t "2,%" #t "3,%" #t "4,%" #t "5,%" #t "6,%" #t "7,%" #t "8,%" #t "9,"
#define PE_WG_ACC8(d, i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
                         "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define PE_WG_ACC16(d, i) PE_WG_ACC8(d, i), PE_WG_ACC8(d, (i) + 8)
#define PE_WG_ACC32(d, i) PE_WG_ACC16(d, i), PE_WG_ACC16(d, (i) + 16)

// Register lists "%0,...,%(R-1)" for R = N/2 accumulators.
#define PE_WG_REGS_32  PE_WG_UNITS PE_WG_TENS(1) PE_WG_TENS(2) "%30,%31"
#define PE_WG_REGS_48  PE_WG_UNITS PE_WG_TENS(1) PE_WG_TENS(2) PE_WG_TENS(3) "%40,%41,%42,%43,%44,%45,%46,%47"
#define PE_WG_REGS_64  PE_WG_UNITS PE_WG_TENS(1) PE_WG_TENS(2) PE_WG_TENS(3) PE_WG_TENS(4) PE_WG_TENS(5) \
                       "%60,%61,%62,%63"
#define PE_WG_REGS_96  PE_WG_UNITS PE_WG_TENS(1) PE_WG_TENS(2) PE_WG_TENS(3) PE_WG_TENS(4) PE_WG_TENS(5) \
                       PE_WG_TENS(6) PE_WG_TENS(7) PE_WG_TENS(8) "%90,%91,%92,%93,%94,%95"
#define PE_WG_REGS_128 PE_WG_UNITS PE_WG_TENS(1) PE_WG_TENS(2) PE_WG_TENS(3) PE_WG_TENS(4) PE_WG_TENS(5) \
                       PE_WG_TENS(6) PE_WG_TENS(7) PE_WG_TENS(8) PE_WG_TENS(9) PE_WG_TENS(10) PE_WG_TENS(11) \
                       "%120,%121,%122,%123,%124,%125,%126,%127"

// Operand lists of R accumulators.
#define PE_WG_OPS_32(d)  PE_WG_ACC32(d, 0)
#define PE_WG_OPS_48(d)  PE_WG_ACC32(d, 0), PE_WG_ACC16(d, 32)
#define PE_WG_OPS_64(d)  PE_WG_ACC32(d, 0), PE_WG_ACC32(d, 32)
#define PE_WG_OPS_96(d)  PE_WG_ACC32(d, 0), PE_WG_ACC32(d, 32), PE_WG_ACC32(d, 64)
#define PE_WG_OPS_128(d) PE_WG_ACC32(d, 0), PE_WG_ACC32(d, 32), PE_WG_ACC32(d, 64), PE_WG_ACC32(d, 96)

// One function per N and FP8 type T (e4m3, e5m2). DA/DB/SD are the operand numbers of desc_a, desc_b,
// scale_d (R, R+1, R+2).
#define PE_DEFINE_WGMMA_F8(N, R, DA, DB, SD, T)                                                            \
  PE_DEVICE void wgmma_m64n##N##k32_f32_##T##_##T(float (&d)[R], u64 desc_a, u64 desc_b, u32 scale_d) {     \
    asm volatile(                                                                                         \
        "{\n.reg .pred p;\n"                                                                              \
        "setp.ne.b32 p, %" #SD ", 0;\n"                                                                   \
        "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." #T "." #T " {" PE_WG_REGS_##R "}, %" #DA        \
        ", %" #DB ", p, 1, 1;\n}\n"                                                                       \
        : PE_WG_OPS_##R(d)                                                                                \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                        \
  }
#define PE_DEFINE_WGMMA_E4M3(N, R, DA, DB, SD) PE_DEFINE_WGMMA_F8(N, R, DA, DB, SD, e4m3)

PE_DEFINE_WGMMA_E4M3(64, 32, 32, 33, 34)
PE_DEFINE_WGMMA_E4M3(96, 48, 48, 49, 50)
PE_DEFINE_WGMMA_E4M3(128, 64, 64, 65, 66)
PE_DEFINE_WGMMA_E4M3(192, 96, 96, 97, 98)
PE_DEFINE_WGMMA_E4M3(256, 128, 128, 129, 130)

// N chosen at compile time (a stage's BLOCK_N / consumer split); d holds N/2 floats per thread.
template <int N>
PE_DEVICE void wgmma_m64nNk32_f32_e4m3_e4m3(float (&d)[N / 2], u64 desc_a, u64 desc_b, u32 scale_d) {
  static_assert(N == 64 || N == 96 || N == 128 || N == 192 || N == 256,
                "wgmma e4m3: this header defines N = 64, 96, 128, 192, 256 (PTX allows N % 8 == 0, <= 256)");
  if constexpr (N == 64) wgmma_m64n64k32_f32_e4m3_e4m3(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 96) wgmma_m64n96k32_f32_e4m3_e4m3(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 128) wgmma_m64n128k32_f32_e4m3_e4m3(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 192) wgmma_m64n192k32_f32_e4m3_e4m3(d, desc_a, desc_b, scale_d);
  else wgmma_m64n256k32_f32_e4m3_e4m3(d, desc_a, desc_b, scale_d);
}

// The E5M2 form (PTX ISA 9.7.15.5.2: .atype/.btype .e4m3 or .e5m2, K = 32, both K-major; CUTLASS
// SM90_64xNx32_F32E5M2E5M2_SS_TN). No stage issues it: src/kernels/probes/wgmma_numerics.cu does, to
// probe the accumulator with E5M2's wider exponent range.
PE_DEFINE_WGMMA_F8(256, 128, 128, 129, 130, e5m2)

#undef PE_DEFINE_WGMMA_E4M3
#undef PE_DEFINE_WGMMA_F8
