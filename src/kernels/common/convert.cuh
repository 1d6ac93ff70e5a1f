// Conversions and packed half-precision arithmetic of the epilogues (PTX ISA 9.7.9.21 cvt; 9.7.4
// "Half Precision Floating-Point Instructions": add.bf16x2), one PE_DEVICE function each.
//
//   bf16lo_to_f32(x) / bf16hi_to_f32(x)             the BF16 in bits [0,16) / [16,32) of x as FP32 (exact)
//   bf16lo_to_f32_pinned / bf16hi_to_f32_pinned     the same as shl.b32 / and.b32 the compiler does not move
//   f32x2_to_bf16x2(lo, hi) / f32x2_to_f16x2(lo, hi)  round to nearest even, lo -> bits [0,16)
//   add_rn_bf16x2(a, b)                             both halves' exact sums rounded once to nearest even
#pragma once
#include "common/types.cuh"

// BF16 -> FP32 is exact: the BF16 bits are the high half of the FP32 bits.
PE_DEVICE float bf16lo_to_f32(u32 x) { return __uint_as_float(x << 16); }
PE_DEVICE float bf16hi_to_f32(u32 x) { return __uint_as_float(x & 0xFFFF0000u); }

// PTX ISA shl.b32 / and.b32 (a .b32 operation may write an .f32 register): the BF16 in the low / high
// half of x widened to FP32 (exact), as asm volatile so the compiler neither hoists nor merges it. sm90
// stage 08 widens comb into the accumulators every tile; with the plain C forms above ptxas kept
// widened copies live across tiles and spilled.
PE_DEVICE float bf16lo_to_f32_pinned(u32 x) {
  float r;
  asm volatile("shl.b32 %0, %1, 16;" : "=f"(r) : "r"(x));
  return r;
}
PE_DEVICE float bf16hi_to_f32_pinned(u32 x) {
  float r;
  asm volatile("and.b32 %0, %1, 0xFFFF0000;" : "=f"(r) : "r"(x));
  return r;
}

// PTX ISA cvt: for .bf16x2, input a goes to the UPPER half and b to the lower half
// (CUTLASS include/cutlass/numeric_conversion.h: cvt.rn.bf16x2.f32 %0, source[1], source[0]).
PE_DEVICE u32 f32x2_to_bf16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// PTX ISA cvt (.f16x2.f32): the same operand order, FP16 halves.
PE_DEVICE u32 f32x2_to_f16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// PTX ISA, half-precision floating-point add: add{.rnd}.bf16x2 d, a, b (.rnd = .rn, sm_90+): both
// halves are the exact sums rounded once to nearest even (the go/no-go variant F22 adds comb this way).
PE_DEVICE u32 add_rn_bf16x2(u32 a, u32 b) {
  u32 d;
  asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
