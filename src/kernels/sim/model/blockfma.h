// The tensor core's block fused multiply-add, bit for bit: how one MMA instruction adds its products and D.
//   BlockFma            the rule's parameters (fraction bits, the result's cut, rounding, products per block)
//   WGMMA_F8_H100 ...   the presets: Hopper wgmma FP8 (measured), tcgen05 f8f6f4 / mxf4nvf4 (modelled), exact
//   accumulation()      the presets the engine uses now (pelib.sim sets them per launch: pe_sim_set_accumulation)
//   fp_*                exact decode of E4M3, E5M2, E2M1, UE4M3, UE8M0 and FP32 into integer significand,
//                       last-bit weight and the exponent the aligner reads
//   block_fma           one block: integer products and D aligned to one exponent, truncated, summed, cut
//   dot_f8              one instruction's k FP8 products into D (blocks of p.block, D carried between them)
//   F8Rows, dot_f8_rows the same with an instruction's operand rows decoded once (wgmma, tcgen05 f8f6f4)
//
// The rule (Hopper wgmma .f32.e4m3/.e5m2, measured on an H100 on 2026-11-27 over 2,867,200 probe outputs
// with 0 mismatches, results/2026-11-27-h100/tcprobe.json; source of the model: Khattak & Mikaitis,
// "Accurate Models of NVIDIA Tensor Cores", arXiv 2512.07004, and their north-numerical-computing/
// MATLAB-tensor-core models/H100TC.m with models/tools/Generic_BFMA_TC.m and models/tools/GEMM.m;
// pelib.numerics.blockfma H100TC_MATLAB is the Python twin, tests/test_sim_numerics.py checks the two bit for bit):
//   1. every product is exact: significand M_a M_b, its window exponent e_a + e_b where a subnormal input
//      counts as the format's emin and a significand product in [2, 4) does not move it;
//   2. R = the largest window exponent among the nonzero products and D (FP32 D: its exponent field,
//      -126 when subnormal), at least min_exp;
//   3. each term's magnitude is cut toward zero to a multiple of 2^(R - frac_bits) (13 fraction bits);
//   4. the signed integers are summed exactly;
//   5. the sum is cut again to out_bits (13) fraction bits after its own leading bit, toward zero, into FP32;
//      an exact zero is +0; NaN in (or Inf - Inf, Inf x 0) gives 0x7FFFFFFF, Inf in gives Inf.
// Blackwell tcgen05 (modelled: MMA-Sim's hardware-validated rules, arXiv 2511.10909, not yet run on a B200
// here): kind::f8f6f4 the same rule with 25 fraction bits and the result in FP32 (github.com/microsoft/MMA-Sim
// src/mmasim/mmasim/nv_ptx/sim.py TCGen05MMA; DeepGEMM issue #176; MATLAB-tensor-core models/B200TC.m);
// kind::mxf4nvf4 (where the PTX ISA 9.7.16.10.7 leaves it open) MMA-Sim's grouped rule, block_fma_groups
// below (src/mmasim/mmasim/arithmetic/fdpa.py gst_fdpa; nv_ptx/sim.py TCGen05MMABlockScale: G = 16, F = 35,
// RZ-FP32, e_zero = -139): each 16-product group summed exactly, its window the two scales' exponents.
// The earlier candidate (every product a b s_a s_b its own term, windows of all four exponents; DeepGEMM
// issue #176: "34, 35, 36, 37 bits are tested") stays available as UMMA_MXF4NVF4_GUESS (group 0).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/error.h"

namespace pe_sim {

struct BlockFma {
  int frac_bits;      // fraction bits kept below the alignment exponent R; 0: the exact sum (below)
  int out_bits;       // fraction bits the result keeps after its own leading bit (23: FP32)
  int min_exp;        // floor on R
  int block;          // products aligned together; an instruction of k products runs k / block blocks in K order
  int round_nearest;  // the result's cut: 0 toward zero, 1 to nearest even
  int group;          // block-scaled only: 0 every product its own term (windows of all four exponents); > 0
                      // MMA-Sim's rule, products summed exactly in groups of `group` (block_fma_groups)
};
// frac_bits = 0 is the exact sum: D plus the products in K order in double (each exact), one rounding to
// nearest FP32 per instruction: what a kernel that promotes every instruction's sum to FP32 approaches
// (CUTLASS "2xAcc", mma_promotion_interval = 1), and what this simulator computed before 2026-11-27.
constexpr BlockFma WGMMA_F8_H100 = {13, 13, -133, 32, 0, 0};          // measured (see the header)
constexpr BlockFma UMMA_F8F6F4_B200 = {25, 23, -133, 32, 0, 0};       // modelled (MMA-Sim TCGen05MMA)
constexpr BlockFma UMMA_MXF4NVF4_B200 = {35, 23, -139, 64, 0, 16};    // modelled (MMA-Sim TCGen05MMABlockScale)
constexpr BlockFma UMMA_MXF4NVF4_GUESS = {35, 23, -133, 64, 0, 0};    // the earlier candidate (#176)
constexpr BlockFma EXACT_SUM = {0, 23, 0, 0, 0, 0};

struct Accumulation {
  BlockFma wgmma_f8, umma_f8f6f4, umma_mxf4nvf4;
};
inline Accumulation& accumulation() {   // pelib.sim sets it before every launch (pe_sim_set_accumulation)
  static Accumulation a{WGMMA_F8_H100, UMMA_F8F6F4_B200, UMMA_MXF4NVF4_B200};
  return a;
}
// Whether an MMA computes its outputs (pelib.sim sets it before every launch: pe_sim_set_arithmetic). Off, wgmma
// and tcgen05.mma still read and check their operands but leave D as it was: a run whose events are all that is
// wanted (the timing model's; pelib.sim.host.events), the protocol and every event the same, the outputs not a GEMM.
inline bool& arithmetic_on() {
  static bool on = true;
  return on;
}

inline void check_block_fma(const BlockFma& p, int k, const char* what) {
  if (p.frac_bits == 0) return;
  if (p.frac_bits < 1 || p.frac_bits > 40 || p.out_bits < 1 || p.out_bits > 23 || p.block < 1 || k % p.block ||
      (p.round_nearest != 0 && p.round_nearest != 1) || p.group < 0 || (p.group && (p.group > 16 || p.block % p.group)))
    model_fail("%s: block FMA {frac_bits %d, out_bits %d, block %d, round_nearest %d, group %d} with %d products: "
               "frac_bits 1..40 (0 = exact sum), out_bits 1..23, a block dividing %d, group 0 or 1..16 dividing the "
               "block", what, p.frac_bits, p.out_bits, p.block, p.round_nearest, p.group, k, k);
}

// A number as the aligner sees it: value = (neg ? -1 : 1) * mag * 2^lsb; expo = the exponent field read
// as a normal number's (a subnormal: emin); nan / inf flags (mag 0 then).
struct Fp {
  int64_t mag;
  int32_t lsb, expo;
  bool neg, nan, inf;
};

// OCP FP8 (PTX ISA "Alternate floating-point data formats"): E4M3 bias 7, no Inf, S.1111.111 NaN; E5M2
// bias 15, IEEE specials; E2M1 bias 1; UE4M3 an E4M3 without sign (bit 7 set: NaN here, as
// smem_operand.h ue4m3_to_float); UE8M0 2^(v - 127), 0xFF NaN.
inline Fp fp_minifloat(uint32_t v, int exp_bits, int mant_bits, bool ieee_specials, bool fn_nan) {
  const int bias = (1 << (exp_bits - 1)) - 1, emax = (1 << exp_bits) - 1;
  const int e = int(v >> mant_bits) & emax, m = int(v) & ((1 << mant_bits) - 1);
  Fp f{};
  f.neg = (v >> (exp_bits + mant_bits)) & 1;
  f.nan = ieee_specials ? (e == emax && m) : (fn_nan && e == emax && m == (1 << mant_bits) - 1);
  f.inf = ieee_specials && e == emax && !m;
  f.mag = (f.nan || f.inf) ? 0 : e == 0 ? m : m + (1 << mant_bits);
  f.expo = (e ? e : 1) - bias;
  f.lsb = f.expo - mant_bits;
  return f;
}
inline Fp fp_e4m3(uint8_t v) { return fp_minifloat(v, 4, 3, false, true); }
inline Fp fp_e5m2(uint8_t v) { return fp_minifloat(v, 5, 2, true, false); }
inline Fp fp_e2m1(uint8_t nibble) { return fp_minifloat(nibble & 15u, 2, 1, false, false); }
inline Fp fp_ue4m3(uint8_t v) {
  Fp f = fp_minifloat(v & 0x7Fu, 4, 3, false, true);
  if (v & 0x80) f = Fp{0, 0, 0, false, true, false};
  return f;
}
inline Fp fp_ue8m0(uint8_t v) { return v == 255 ? Fp{0, 0, 0, false, true, false} : Fp{1, int(v) - 127, int(v) - 127, false, false, false}; }
inline Fp fp_f32(uint32_t u) {   // IEEE 754 binary32
  Fp f{};
  const int e = int(u >> 23 & 255);
  const uint32_t m = u & 0x7FFFFFu;
  f.neg = u >> 31;
  f.nan = e == 255 && m;
  f.inf = e == 255 && !m;
  f.mag = e == 255 ? 0 : e ? (m | 0x800000u) : m;
  f.expo = (e ? e : 1) - 127;
  f.lsb = f.expo - 23;
  return f;
}

// One aligned term: a product (or D) with its window exponent.
struct Term {
  int64_t mag;
  int32_t lsb, ref;
  bool neg, nan, inf;
};
inline Term product(const Fp* f, int n) {
  Term t{1, 0, 0, false, false, false};
  bool zero = false, inf = false;
  for (int i = 0; i < n; ++i) {
    t.mag *= f[i].mag;
    t.lsb += f[i].lsb;
    t.ref += f[i].expo;
    t.neg ^= f[i].neg;
    t.nan |= f[i].nan;
    inf |= f[i].inf;
    zero |= !f[i].nan && !f[i].inf && f[i].mag == 0;
  }
  t.nan |= inf && zero;   // Inf x 0
  t.inf = inf && !t.nan;
  if (t.nan || t.inf) t.mag = 0;
  return t;
}

constexpr uint32_t F32_NAN = 0x7FFFFFFFu;   // the NaN the tensor core writes (probe classes specials, e5m2_specials)

namespace detail {
inline int ilog2(uint64_t x) { return 63 - __builtin_clzll(x); }
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// (neg ? -1 : 1) * mag * 2^lsb (mag > 0) -> FP32 bits keeping out_bits fraction bits after the leading bit
// (FP32's subnormal grid 2^-149 at most), cut toward zero or to nearest even; 2^128 and above: Inf.
inline uint32_t encode_f32(bool neg, uint64_t mag, int lsb, int out_bits, bool nearest) {
  const int e = ilog2(mag) + lsb;
  const int keep = std::max(std::max(e - out_bits, -126 - out_bits), -149);
  const int drop = std::min(std::max(keep - lsb, 0), 62);
  uint64_t kept = mag >> drop;
  if (nearest && drop > 0) {
    const uint64_t rest = mag & ((uint64_t(1) << drop) - 1), half = uint64_t(1) << (drop - 1);
    kept += (rest > half) || (rest == half && (kept & 1));
  }
  // kept * 2^(lsb + drop), exactly (kept has at most out_bits + 2 <= 25 bits, lsb + drop >= -149)
  uint32_t bits = 0;
  if (kept) {
    const int top = ilog2(kept), E = top + lsb + drop;
    if (E > 127) bits = 0x7F800000u;                                       // 2^128 and above: Inf
    else if (E >= -126) bits = uint32_t(E + 127) << 23 | uint32_t((top <= 23 ? kept << (23 - top) : kept >> (top - 23)) & 0x7FFFFF);
    else bits = uint32_t(kept << (lsb + drop + 149));                      // subnormal: units of 2^-149
  }
  return bits | (neg ? 0x80000000u : 0u);
}
}  // namespace detail

// One block: terms t[0..n) and D (FP32 bits; not read when !scale_d) -> FP32 bits, under p (frac_bits > 0).
inline uint32_t block_fma(const Term* t, int n, uint32_t d_bits, bool scale_d, const BlockFma& p) {
  const Fp d = scale_d ? fp_f32(d_bits) : Fp{0, 0, 0, false, false, false};
  bool nan = d.nan, pos = d.inf && !d.neg, neg_inf = d.inf && d.neg;
  for (int i = 0; i < n; ++i) {
    nan |= t[i].nan;
    pos |= t[i].inf && !t[i].neg;
    neg_inf |= t[i].inf && t[i].neg;
  }
  if (nan || (pos && neg_inf)) return F32_NAN;
  if (pos || neg_inf) return pos ? 0x7F800000u : 0xFF800000u;
  bool any = d.mag != 0;
  int R = d.mag ? d.expo : INT32_MIN;
  for (int i = 0; i < n; ++i)
    if (t[i].mag) {
      any = true;
      R = std::max(R, int(t[i].ref));
    }
  if (!any) return 0;   // +0 whatever the signs of the zeros (probe class zero_signs)
  R = std::max(R, p.min_exp);
  const int grid = R - p.frac_bits;
  auto aligned = [grid](int64_t mag, int lsb) -> int64_t {   // magnitude cut toward zero onto the grid
    const int s = lsb - grid;
    return s >= 0 ? (mag << s) : (-s >= 63 ? 0 : mag >> -s);
  };
  int64_t sum = 0;
  for (int i = 0; i < n; ++i)
    if (t[i].mag) {
      const int64_t a = aligned(t[i].mag, t[i].lsb);
      sum += t[i].neg ? -a : a;
    }
  if (d.mag) {
    const int64_t a = aligned(d.mag, d.lsb);
    sum += d.neg ? -a : a;
  }
  if (sum == 0) return 0;
  return detail::encode_f32(sum < 0, uint64_t(sum < 0 ? -sum : sum), grid, p.out_bits, p.round_nearest != 0);
}

// The exact sum (frac_bits = 0) of one instruction, as the simulator computed it before: s = D (or 0), then
// s += a_k b_k in K order in double (every product exact), one round to nearest FP32. va, vb: exact values.
inline uint32_t exact_dot(const float* va, const float* vb, int k, uint32_t d_bits, bool scale_d) {
  float d;
  std::memcpy(&d, &d_bits, 4);
  double s = scale_d ? double(d) : 0.0;
  for (int i = 0; i < k; ++i) s += double(va[i]) * double(vb[i]);
  return detail::f32_bits(float(s));
}

// Element k of a row of packed E2M1 (two per byte, the lower K index in the low nibble: PTX ISA 5.2.5.1,
// packed FP4 in shared memory; pelib.emulate.decode_values).
inline Fp fp_e2m1_packed(const uint8_t* row, int k) { return fp_e2m1(uint8_t(k & 1 ? row[k / 2] >> 4 : row[k / 2] & 15)); }

// An E2M1 element as a signed integer in units of 2^-1 (0, +-1, 2, 3, 4, 6, 8, 12: the value times 2, exact):
// the form block_fma_groups sums a group in, decoded once per row (umma_block_fma) or per call (dot_mxf4).
inline int32_t e2m1_halves(const Fp& f) {
  const int32_t v = int32_t(f.mag << (f.lsb + 1));   // an E2M1 last bit is 2^-1 or more
  return f.neg ? -v : v;
}

// MMA-Sim's block-scaled rule (p.group > 0; github.com/microsoft/MMA-Sim src/mmasim/mmasim/arithmetic/fdpa.py
// gst_fdpa): n E2M1 products a[i] b[i], A's scale sa[i / vec] and B's sb[i / vec] (vec elements per scale, a
// multiple of p.group), and D. Each group of p.group products is summed exactly and times s_a s_b; its window
// is e(s_a) + e(s_b), the scales' exponents alone, and it counts while the group has a nonzero product (a
// group whose products cancel to 0 keeps it); R = the largest window of those and D's, at least min_exp (MMA-Sim's
// e_zero); each group sum and D cut toward zero onto 2^(R - frac_bits), summed exactly, cut to FP32. A NaN scale
// or D gives 0x7FFFFFFF, an infinite D itself. pelib.numerics.blockfma B200_MXF4NVF4 is the Python twin.
// block_fma_groups_halves takes the elements as e2m1_halves, block_fma_groups as Fp.
inline uint32_t block_fma_groups_halves(const int32_t* a2, const int32_t* b2, const Fp* sa, const Fp* sb, int n, int vec,
                                        uint32_t d_bits, bool scale_d, const BlockFma& p) {
  if (p.group < 1 || vec % p.group || n % p.group) model_fail("block_fma_groups: group %d, %d per scale, %d products", p.group, vec, n);
  const Fp d = scale_d ? fp_f32(d_bits) : Fp{0, 0, 0, false, false, false};
  bool nan = d.nan;
  for (int g = 0; g < n / vec; ++g) nan |= sa[g].nan || sb[g].nan;
  if (nan) return F32_NAN;
  if (d.inf) return d.neg ? 0xFF800000u : 0x7F800000u;
  int64_t gmag[64];
  int32_t glsb[64], gref[64];
  bool live[64];
  int R = d.mag ? d.expo : INT32_MIN;
  const int ng = n / p.group;
  for (int j = 0; j < ng; ++j) {
    const Fp &s = sa[j * p.group / vec], &t = sb[j * p.group / vec];
    int32_t isum = 0, any = 0;   // the group's products in units of 2^-2: exact (16 x 12 x 12 at most)
    const int32_t *x = a2 + j * p.group, *y = b2 + j * p.group;
    for (int i = 0; i < p.group; ++i) {
      const int32_t m = x[i] * y[i];
      isum += m;
      any |= m;
    }
    live[j] = any != 0 && s.mag && t.mag;
    gmag[j] = int64_t(isum) * s.mag * t.mag;
    glsb[j] = s.lsb + t.lsb - 2;
    gref[j] = s.expo + t.expo;
    if (live[j]) R = std::max(R, gref[j]);
  }
  if (R == INT32_MIN) return 0;   // every term zero: +0
  R = std::max(R, p.min_exp);
  const int grid = R - p.frac_bits;
  auto aligned = [grid](int64_t mag, int lsb) -> int64_t {   // magnitude cut toward zero onto the grid
    const int s = lsb - grid;
    return s >= 0 ? (mag << s) : (-s >= 63 ? 0 : mag >> -s);
  };
  int64_t sum = 0;
  for (int j = 0; j < ng; ++j)
    if (live[j] && gmag[j]) {
      const int64_t x = aligned(gmag[j] < 0 ? -gmag[j] : gmag[j], glsb[j]);
      sum += gmag[j] < 0 ? -x : x;
    }
  if (d.mag) {
    const int64_t x = aligned(d.mag, d.lsb);
    sum += d.neg ? -x : x;
  }
  if (sum == 0) return 0;
  return detail::encode_f32(sum < 0, uint64_t(sum < 0 ? -sum : sum), grid, p.out_bits, p.round_nearest != 0);
}

inline uint32_t block_fma_groups(const Fp* a, const Fp* b, const Fp* sa, const Fp* sb, int n, int vec, uint32_t d_bits,
                                 bool scale_d, const BlockFma& p) {
  if (n > 64) model_fail("block_fma_groups: %d products, at most 64", n);
  int32_t a2[64], b2[64];
  for (int i = 0; i < n; ++i) a2[i] = e2m1_halves(a[i]), b2[i] = e2m1_halves(b[i]);
  return block_fma_groups_halves(a2, b2, sa, sb, n, vec, d_bits, scale_d, p);
}

namespace detail {
// The FP8 bytes as the fast path reads them, packed: bits 0-7 the significand (an integer, at most 15),
// bits 8-15 the window exponent + 64, bit 16 the sign, bit 17 NaN or Inf.
constexpr uint32_t F8_SPECIAL = 1u << 17;
struct F8Tables {
  Fp f[2][256];
  uint32_t p[2][256];
  float v[2][256];
  F8Tables() {
    for (int i = 0; i < 256; ++i) {
      f[0][i] = fp_e4m3(uint8_t(i));
      f[1][i] = fp_e5m2(uint8_t(i));
      for (int j = 0; j < 2; ++j) {
        const Fp& x = f[j][i];
        p[j][i] = uint32_t(x.mag) | uint32_t(x.expo + 64) << 8 | uint32_t(x.neg) << 16 | (x.nan || x.inf ? F8_SPECIAL : 0u);
        const float mag = x.inf ? __builtin_inff() : std::ldexp(float(x.mag), x.lsb);
        v[j][i] = x.nan ? __builtin_nanf("") : x.neg ? -mag : mag;   // a NaN byte of either sign: +NaN
      }
    }
  }
};
inline const F8Tables& f8_tables() {
  static const F8Tables T;
  return T;
}
constexpr int F8_MANT[2] = {3, 2};

// The rule of block_fma over n finite terms in integers: term i is (-1)^neg[i] mag[i] 2^(ref[i] - mant), its
// window exponent ref[i]; d finite. mag[i] < 2^12 and frac_bits - mant < 40 (callers: FP8 mant >= 4, E2M1 with
// its scales >= 2, frac_bits <= 40), so every shift below is in range. Returns the FP32 bits.
inline uint32_t block_fma_ints(const int32_t* mag, const int32_t* ref, const int64_t* neg, int n, int mant,
                               const Fp& d, const BlockFma& p) {
  int R = d.mag ? d.expo : INT32_MIN;
  for (int i = 0; i < n; ++i) R = std::max(R, mag[i] ? ref[i] : INT32_MIN);   // over the nonzero terms
  if (R == INT32_MIN) return 0;   // every term zero: +0 (probe class zero_signs)
  R = std::max(R, p.min_exp);
  const int grid = R - p.frac_bits, base = mant + grid;
  int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    // the term's magnitude cut toward zero onto the grid: its last bit is 2^(ref - mant), so it moves by
    // s = ref - base bits (s <= frac_bits - mant < 40 for a nonzero term); mag << 40 >> (40 - s) is that
    // shift, a right one truncating, with no branch (a zero term's shift is clamped: 0 either way)
    const int sh = std::min(std::max(40 - (ref[i] - base), 0), 63);
    const int64_t t = (int64_t(mag[i]) << 40) >> sh;
    sum += (t ^ -neg[i]) + neg[i];
  }
  if (d.mag) {
    const int s = d.lsb - grid;
    const int64_t t = s >= 0 ? d.mag << s : (-s >= 63 ? 0 : d.mag >> -s);
    sum += d.neg ? -t : t;
  }
  return sum == 0 ? 0 : encode_f32(sum < 0, uint64_t(sum < 0 ? -sum : sum), grid, p.out_bits, p.round_nearest != 0);
}

// FP8 elements as the block FMA reads them, decoded once per instruction (F8Rows) rather than once per output:
// significand (an integer, at most 15), window exponent (F8_ZERO_REF for a zero, so a zero product never sets R),
// sign (0 or 1) and exact value in their own arrays, so that the loops over a block below run without table lookups.
constexpr int32_t F8_ZERO_REF = -(1 << 20);
inline void decode_f8(const uint8_t* v, int n, int fmt, int32_t* mag, int32_t* ref, int32_t* neg, double* val,
                      bool& special) {
  const uint32_t* t = f8_tables().p[fmt];
  const float* fv = f8_tables().v[fmt];
  uint32_t any = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t x = t[v[i]];
    any |= x;
    mag[i] = int32_t(x & 0xFF);
    ref[i] = mag[i] ? int32_t(x >> 8 & 0xFF) - 64 : F8_ZERO_REF;
    neg[i] = int32_t(x >> 16 & 1);
    val[i] = double(fv[v[i]]);
  }
  special = (any & F8_SPECIAL) != 0;
}

// The two loops over a 32-product block, built for the host's vector unit where it has AVX2 (a resolver picks at
// load time; the result is the same integers either way).
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define PE_SIM_VECTOR_CLONES __attribute__((target_clones("avx2", "default"), optimize("O3")))   // GCC vectorises at -O3
#elif defined(__x86_64__) && defined(__linux__) && defined(__clang__)
#define PE_SIM_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PE_SIM_VECTOR_CLONES
#endif
PE_SIM_VECTOR_CLONES static int max_ref32(const int32_t* ar, const int32_t* br) {
  int R = INT32_MIN;
  for (int i = 0; i < 32; ++i) R = std::max(R, ar[i] + br[i]);
  return R;
}
PE_SIM_VECTOR_CLONES static int64_t terms32(const double* av, const double* bv, double scale) {
  int32_t t[32];
  for (int i = 0; i < 32; ++i) t[i] = int32_t(av[i] * bv[i] * scale);
  int64_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += t[i];
  return sum;
}

// The rule of block_fma_ints for one block of n FP8 products a[i] b[i], the operands decoded (decode_f8), none NaN
// or Inf, D finite: R = the largest window exponent among the nonzero products and D, at least min_exp; each
// product, its last bit 2^(ref - mant), cut toward zero onto 2^(R - frac_bits); the integers summed; the sum cut
// into FP32. A product's significand is below 2^8 (15 x 15) and a term moves it by at most smax = frac_bits - mant
// bits, so where smax <= 23 a term is the exact product value times 2^(frac_bits - R) converted to int32 (a
// conversion that truncates, the cut toward zero); wider rules take the 64-bit shifts of block_fma_ints.
template <int N>
inline uint32_t block_f8_decoded(const int32_t* am, const int32_t* ar, const int32_t* an, const double* av,
                                 const int32_t* bm, const int32_t* br, const int32_t* bn, const double* bv, int n_dyn,
                                 int mant, const Fp& d, const BlockFma& p) {
  const int n = N ? N : n_dyn;
  int R = INT32_MIN;
  if (N == 32)
    R = max_ref32(ar, br);
  else
    for (int i = 0; i < n; ++i) R = std::max(R, ar[i] + br[i]);
  if (R < F8_ZERO_REF / 2) R = INT32_MIN;   // every product zero
  if (d.mag) R = std::max(R, int(d.expo));
  if (R == INT32_MIN) return 0;             // every term zero: +0 (probe class zero_signs)
  R = std::max(R, p.min_exp);
  const int grid = R - p.frac_bits, smax = p.frac_bits - mant, e = p.frac_bits - R;
  if (smax > 23 || e <= -1000 || e >= 1000) {   // a wider rule: block_fma_ints on the products
    int32_t mag[64], ref[64];
    int64_t neg[64];
    for (int i = 0; i < n; ++i) mag[i] = am[i] * bm[i], ref[i] = ar[i] + br[i], neg[i] = an[i] ^ bn[i];
    return block_fma_ints(mag, ref, neg, n, mant, d, p);
  }
  // a term is the signed product a b (exact in a double: 4-bit significands) times 2^(frac_bits - R), cut
  // toward zero: below 2^31 in magnitude (2^8 x 2^smax), so a double -> int32 conversion (truncating) is exact
  const uint64_t scale_bits = uint64_t(e + 1023) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, 8);
  int64_t sum = 0;
  if (N == 32) {
    sum = terms32(av, bv, scale);
  } else {
    int32_t t[64];
    for (int i = 0; i < n; ++i) t[i] = int32_t(av[i] * bv[i] * scale);
    for (int i = 0; i < n; ++i) sum += t[i];
  }
  if (d.mag) {
    const int s = d.lsb - grid;
    const int64_t t = s >= 0 ? d.mag << s : (-s >= 63 ? 0 : d.mag >> -s);
    sum += d.neg ? -t : t;
  }
  return sum == 0 ? 0 : encode_f32(sum < 0, uint64_t(sum < 0 ? -sum : sum), grid, p.out_bits, p.round_nearest != 0);
}
}  // namespace detail

// One instruction's FP8 operand rows (rows x k bytes, one format), decoded once: dot_f8_rows reads row r's
// elements at r * k. The bytes stay the caller's (the path for a block with a NaN or Inf reads them).
struct F8Rows {
  const uint8_t* bytes = nullptr;
  int rows = 0, k = 0, fmt = 0;
  std::vector<int32_t> mag, ref, neg;
  std::vector<double> val;
  std::vector<uint8_t> special;   // per row
  void decode(const uint8_t* b, int nrows, int kk, int f) {
    if (f != 0 && f != 1) model_fail("FP8 format code %d: 0 E4M3, 1 E5M2", f);
    bytes = b, rows = nrows, k = kk, fmt = f;
    const size_t n = size_t(nrows) * size_t(kk);
    mag.resize(n), ref.resize(n), neg.resize(n), val.resize(n), special.resize(size_t(nrows));
    for (int r = 0; r < nrows; ++r) {
      bool sp = false;
      const size_t o = size_t(r) * size_t(kk);
      detail::decode_f8(b + o, kk, f, &mag[o], &ref[o], &neg[o], &val[o], sp);
      special[size_t(r)] = sp;
    }
  }
};


// The checks of one FP8 instruction of k products under p (dot_f8 makes them on every call; the callers of
// dot_f8_rows once per instruction).
inline void check_dot_f8(const BlockFma& p, int k, int fmt, int fmt_b, const char* what) {
  if (fmt != 0 && fmt != 1) model_fail("FP8 format code %d: 0 E4M3, 1 E5M2", fmt);
  if (fmt_b != 0 && fmt_b != 1) model_fail("FP8 format code %d: 0 E4M3, 1 E5M2", fmt_b);
  if (k > 64) model_fail("%s: %d products, at most 64 per instruction", what, k);
  if (p.frac_bits == 0) return;
  check_block_fma(p, k, what);
  if (p.group) model_fail("%s: FP8 products have no scales: group must be 0, got %d", what, p.group);
}

namespace detail {
// One instruction's k products of a row of A and one of B, each given as its bytes and decoded (decode_f8), into
// D under p (checked: check_dot_f8). A block with a NaN or Inf operand, or a special D, takes the Term path
// (product, block_fma); every other block block_f8_decoded.
inline uint32_t dot_f8_decoded(const uint8_t* a, const int32_t* am, const int32_t* ar, const int32_t* an, const double* av,
                               bool a_special, const uint8_t* b, const int32_t* bm, const int32_t* br, const int32_t* bn,
                               const double* bv, bool b_special,
                               int k, int fmt, int fmt_b, uint32_t d_bits, bool scale_d, const BlockFma& p) {
  const F8Tables& T = f8_tables();
  if (p.frac_bits == 0) {
    float va[64], vb[64];
    for (int i = 0; i < k; ++i) {
      va[i] = T.v[fmt][a[i]];
      vb[i] = T.v[fmt_b][b[i]];
    }
    return exact_dot(va, vb, k, d_bits, scale_d);
  }
  const int mant = F8_MANT[fmt] + F8_MANT[fmt_b];
  for (int b0 = 0; b0 < k; b0 += p.block) {
    const int n = p.block;
    const Fp d = scale_d ? fp_f32(d_bits) : Fp{0, 0, 0, false, false, false};
    bool special = d.nan || d.inf;
    if (!special && (a_special || b_special))
      for (int i = b0; i < b0 + n; ++i) special |= ((T.p[fmt][a[i]] | T.p[fmt_b][b[i]]) & F8_SPECIAL) != 0;
    if (!special) {
      d_bits = n == 32 ? block_f8_decoded<32>(am + b0, ar + b0, an + b0, av + b0, bm + b0, br + b0, bn + b0, bv + b0, n,
                                              mant, d, p)
                       : block_f8_decoded<0>(am + b0, ar + b0, an + b0, av + b0, bm + b0, br + b0, bn + b0, bv + b0, n,
                                             mant, d, p);
    } else {
      Term t[64];
      for (int i = 0; i < n; ++i) {
        const Fp f[2] = {T.f[fmt][a[b0 + i]], T.f[fmt_b][b[b0 + i]]};
        t[i] = product(f, 2);
      }
      d_bits = block_fma(t, n, d_bits, scale_d, p);
    }
    scale_d = true;
  }
  return d_bits;
}
}  // namespace detail

// One instruction: k FP8 products a[i] b[i] (fmt 0 E4M3, 1 E5M2; fmt_b for B when it differs, kind::f8f6f4)
// into D under p.
inline uint32_t dot_f8(const uint8_t* a, const uint8_t* b, int k, int fmt, uint32_t d_bits, bool scale_d,
                       const BlockFma& p, int fmt_b = -1) {
  if (fmt_b < 0) fmt_b = fmt;
  check_dot_f8(p, k, fmt, fmt_b, "dot_f8");
  int32_t am[64], ar[64], an[64], bm[64], br[64], bn[64];
  double av[64], bv[64];
  bool as = false, bs = false;
  detail::decode_f8(a, k, fmt, am, ar, an, av, as);
  detail::decode_f8(b, k, fmt_b, bm, br, bn, bv, bs);
  return detail::dot_f8_decoded(a, am, ar, an, av, as, b, bm, br, bn, bv, bs, k, fmt, fmt_b, d_bits, scale_d, p);
}

// dot_f8 of row m of A and row n of B, both decoded once for the instruction (F8Rows; k = A.k = B.k), under p
// checked once by the caller (check_dot_f8): gmma_f8 and umma_block_fma.
inline uint32_t dot_f8_rows(const F8Rows& A, int m, const F8Rows& B, int n, uint32_t d_bits, bool scale_d,
                            const BlockFma& p) {
  const size_t oa = size_t(m) * size_t(A.k), ob = size_t(n) * size_t(B.k);
  return detail::dot_f8_decoded(A.bytes + oa, &A.mag[oa], &A.ref[oa], &A.neg[oa], &A.val[oa], A.special[size_t(m)],
                                B.bytes + ob, &B.mag[ob], &B.ref[ob], &B.neg[ob], &B.val[ob], B.special[size_t(n)], A.k,
                                A.fmt, B.fmt, d_bits, scale_d, p);
}

// One kind::mxf4nvf4 instruction (64 E2M1 products, block16 scales: sa[k / 16], sb[k / 16]; scale_fmt 0 UE4M3,
// 1 UE8M0) into D under p: p.group > 0 MMA-Sim's rule (block_fma_groups), else blocks of p.block products, each
// a b s_a s_b exact with the four exponents summed as its window (block_fma). umma.h umma_block_fma and the
// ABI's pe_sim_dot_mxf4_tiles both call it.
// a2, b2 (optional): the same elements as e2m1_halves, decoded once per row by the caller.
inline uint32_t dot_mxf4(const Fp* a, const Fp* b, const Fp* sa, const Fp* sb, uint32_t d, bool scale_d, int scale_fmt,
                         const BlockFma& p, const int32_t* a2 = nullptr, const int32_t* b2 = nullptr) {
  constexpr int K = 64;
  bool first = scale_d;
  Term t[64];
  for (int b0 = 0; b0 < K; b0 += p.block) {
    if (p.group) {   // MMA-Sim's rule: exact group sums, windows from the scales
      d = a2 && b2 ? block_fma_groups_halves(a2 + b0, b2 + b0, sa + b0 / 16, sb + b0 / 16, p.block, 16, d, first, p)
                   : block_fma_groups(a + b0, b + b0, sa + b0 / 16, sb + b0 / 16, p.block, 16, d, first, p);
      first = true;
      continue;
    }
    const Fp dq = first ? fp_f32(d) : Fp{0, 0, 0, false, false, false};
    bool special = dq.nan || dq.inf;
    for (int g = b0 / 16; g <= (b0 + p.block - 1) / 16; ++g) special |= sa[g].nan || sb[g].nan;
    if (!special) {   // E2M1 has no NaN or Inf: each product in integers, its four exponents summed
      int32_t mag[64], ref[64];
      int64_t neg[64];
      for (int i = 0; i < p.block; ++i) {
        const int k = b0 + i, g = k / 16;
        mag[i] = int32_t(a[k].mag * b[k].mag) * int32_t(sa[g].mag * sb[g].mag);
        ref[i] = a[k].expo + b[k].expo + sa[g].expo + sb[g].expo;
        neg[i] = int64_t(a[k].neg ^ b[k].neg);
      }
      // each factor's last bit lies its mantissa bits below its exponent: E2M1 1, UE4M3 3, UE8M0 0
      d = detail::block_fma_ints(mag, ref, neg, p.block, 2 + (scale_fmt == 0 ? 6 : 0), dq, p);
    } else {
      for (int i = 0; i < p.block; ++i) {
        const int k = b0 + i;
        const Fp f[4] = {a[k], sa[k / 16], b[k], sb[k / 16]};
        t[i] = product(f, 4);
      }
      d = block_fma(t, p.block, d, first, p);
    }
    first = true;
  }
  return d;
}

}  // namespace pe_sim
