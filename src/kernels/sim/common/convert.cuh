// Simulated twin of common/convert.cuh (PTX ISA 9.7.9.21 cvt with .rn; 9.7.4 add.rn.bf16x2): the same
// roundings in integer arithmetic, so the host compiler's flags cannot change a bit. Every NaN converts to
// the canonical 0x7FFF, whatever its payload (CUDA include/cuda_bf16.hpp __internal_float2bfloat16 and
// cuda_fp16.hpp __internal_float2half, the toolkit's host twins of cvt.rn), so a NaN that the host's FP32
// add carried with another payload than the GPU's (which writes 0x7FFFFFFF) leaves the same bits.
#pragma once
#include "common/types.cuh"

PE_DEVICE float bf16lo_to_f32(u32 x) { return __uint_as_float(x << 16); }
PE_DEVICE float bf16hi_to_f32(u32 x) { return __uint_as_float(x & 0xFFFF0000u); }
PE_DEVICE float bf16lo_to_f32_pinned(u32 x) { return __uint_as_float(x << 16); }
PE_DEVICE float bf16hi_to_f32_pinned(u32 x) { return __uint_as_float(x & 0xFFFF0000u); }

namespace pe_sim_cvt {
// FP32 -> BF16, round to nearest even; NaN -> 0x7FFF.
inline u32 f32_to_bf16(float f) {
  const u32 u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
// FP32 -> FP16, round to nearest even (subnormals, overflow to infinity, NaN).
inline u32 f32_to_f16(float f) {
  const u32 u = __float_as_uint(f);
  const u32 sign = (u >> 16) & 0x8000u;
  const u32 au = u & 0x7FFFFFFFu;
  if (au > 0x7F800000u) return 0x7FFFu;
  if (au >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: infinity
  if (au < 0x38800000u) {                         // below the smallest normal 2^-14: subnormal or zero
    const float a = __uint_as_float(au);
    const float q = std::nearbyint(a * 16777216.0f);  // units of 2^-24, exact, nearest even
    return sign | u32(q);
  }
  const u32 e = ((au >> 23) - 112u) << 10;        // rebias 127 -> 15
  u32 m = au & 0x7FFFFFu;
  u32 h = e | (m >> 13);
  const u32 rest = m & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | h;
}
// An exact double (the sum of two BF16) rounded once to BF16, nearest even.
inline u32 f64_to_bf16(double d) {
  if (std::isnan(d)) return 0x7FFFu;
  const float f = float(d);                       // exact when d has <= 24 significant bits
  if (double(f) == d) return f32_to_bf16(f);
  // not exact in FP32: round the double's significand at BF16 precision directly
  int e;
  const double m = std::frexp(std::fabs(d), &e);  // d = m * 2^e, m in [0.5, 1)
  double q = std::nearbyint(std::ldexp(m, 8));    // 8 significant bits
  const float r = float(std::ldexp(q, e - 8));
  return f32_to_bf16(d < 0 ? -r : r);
}
}  // namespace pe_sim_cvt

// cvt.rn.bf16x2.f32 d, hi, lo: lo -> bits [0, 16)
PE_DEVICE u32 f32x2_to_bf16x2(float lo, float hi) { return pe_sim_cvt::f32_to_bf16(lo) | (pe_sim_cvt::f32_to_bf16(hi) << 16); }
PE_DEVICE u32 f32x2_to_f16x2(float lo, float hi) { return pe_sim_cvt::f32_to_f16(lo) | (pe_sim_cvt::f32_to_f16(hi) << 16); }

// add.rn.bf16x2: each half's exact sum rounded once to BF16
PE_DEVICE u32 add_rn_bf16x2(u32 a, u32 b) {
  const double lo = double(bf16lo_to_f32(a)) + double(bf16lo_to_f32(b));
  const double hi = double(bf16hi_to_f32(a)) + double(bf16hi_to_f32(b));
  return pe_sim_cvt::f64_to_bf16(lo) | (pe_sim_cvt::f64_to_bf16(hi) << 16);
}
