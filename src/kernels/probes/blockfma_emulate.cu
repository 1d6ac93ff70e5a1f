// The Hopper FP8 tensor core's arithmetic without a tensor core: the sm90 stages' patch embedding
// out[m][n] = bf16(acc + comb[m % P][n]) with acc = the chain of wgmma k32 instructions over K in K order,
// each one the block FMA of src/kernels/sim/model/blockfma.h (pelib.numerics.blockfma H100TC_MATLAB), computed in
// integers by CUDA cores. Its output is compared on the device with a stage's own, so a full siglip2 output
// (712,900,608 BF16 values) is checked bit for bit without leaving the GPU; the same source runs in the CPU
// simulator, where tests/test_numerics_proof.py checks it against pelib.numerics.blockfma. Not book content.
//
// The rule per instruction (measured on an H100, results/2026-11-27-h100/tcprobe.json; Khattak & Mikaitis,
// arXiv 2512.07004, MATLAB-tensor-core models/H100TC.m): an E4M3 byte is (-1)^s M 2^(e - 3), M < 16, e its
// exponent field read as a normal's (a subnormal's is emin = -6); a product's window exponent is e_a + e_b;
// R = the largest over the nonzero products and D (FP32: its exponent field, -126 when subnormal), at least
// -133; every term's magnitude is cut toward zero to a multiple of 2^(R - 13); the signed sum is exact (it
// fits an int32: 33 terms below 2^15); the result keeps 13 fraction bits after its leading bit, toward zero.
// COMB_INIT = 1: the accumulator starts from comb and the epilogue only converts (sm90/08_comb_init).
// Layout: a u8 [M][K], b u8 [N][K] (K-major, B as the model multiplies it: output column n is B row n),
// comb u16 [P][N] BF16, out u16 [M][N] BF16; M, N multiples of 64, K of 32 (pelib.measure.numerics_proof checks).
// Run: PYTHONPATH=src python3 -m pelib.measure.numerics_proof --out DIR
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/convert.cuh"

#ifndef COMB_INIT
#define COMB_INIT 0
#endif
constexpr int BM = 64, BN = 64, BK = 32, THREADS = 256, TM = 4, TN = 4;   // 16 x 16 threads, 4 x 4 outputs each
constexpr int FRAC = 13, OUT_BITS = 13, MIN_EXP = -133;                   // the rule's constants (see above)
constexpr int ZERO_EXP = -4096;     // a zero factor's exponent: its products stay below every real one
constexpr int NAN_EXP = 1 << 20;    // a NaN byte's: R becomes huge (even beside a zero factor), the result NaN

PELIB_EXPORT(smem_bytes, 0);
PELIB_EXPORT(num_threads, THREADS);
PELIB_EXPORT(emu_bm, BM);
PELIB_EXPORT(emu_bn, BN);
PELIB_EXPORT(emu_bk, BK);
PELIB_EXPORT(emu_frac_bits, FRAC);
PELIB_EXPORT(emu_out_bits, OUT_BITS);
PELIB_EXPORT(emu_min_exp_neg, -MIN_EXP);   // exports are unsigned: 133
PELIB_EXPORT(emu_comb_init, COMB_INIT);

// E4M3 (OCP FP8; PTX ISA "Alternate floating-point data formats"): signed significand and exponent.
PE_DEVICE void emu_decode(u32 v, i32& mag, i32& e) {
  const i32 f = (v >> 3) & 15, m = v & 7;
  if (f == 15 && m == 7) {   // S.1111.111: NaN
    mag = 0;
    e = NAN_EXP;
    return;
  }
  const i32 M = f ? m + 8 : m;
  mag = (v & 0x80) ? -M : M;
  e = M ? (f ? f : 1) - 7 : ZERO_EXP;
}

PE_DEVICE i32 emu_max(i32 x, i32 y) { return x > y ? x : y; }

// floor(log2 x) for 0 < x < 2^24, exact (the conversion to FP32 is exact there).
PE_DEVICE i32 emu_ilog2(u32 x) { return i32((__float_as_uint(float(x)) >> 23) & 255) - 127; }

// One block's result: S * 2^(R - FRAC) with 13 fraction bits kept after its leading bit, toward zero.
PE_DEVICE u32 emu_encode(i32 S, i32 R) {
  if (S == 0) return 0u;
  const u32 neg = S < 0 ? 0x80000000u : 0u;
  const u32 mag = u32(S < 0 ? -S : S);
  const i32 lsb = R - FRAC, e = emu_ilog2(mag) + lsb;
  i32 keep = e - OUT_BITS;
  if (keep < -126 - OUT_BITS) keep = -126 - OUT_BITS;
  i32 drop = keep - lsb;
  if (drop < 0) drop = 0;
  const u32 kept = drop > 30 ? 0u : mag >> drop;
  if (!kept) return neg;
  const i32 top = emu_ilog2(kept), E = top + lsb + drop;
  if (E > 127) return neg | 0x7F800000u;
  if (E >= -126) return neg | u32(E + 127) << 23 | ((kept << (23 - top)) & 0x7FFFFFu);
  return neg | (kept << (lsb + drop + 149));   // subnormal: units of 2^-149
}

extern "C" __global__ void __launch_bounds__(THREADS)
blockfma_emulate(const u8* __restrict__ a, const u8* __restrict__ b, const u16* __restrict__ comb,
                 u16* __restrict__ out, u32 M, u32 N, u32 K, u32 P) {
  (void)M;   // grid = (N / BN, M / BM): every tile is whole
  __shared__ i32 sa_mag[BK][BM + 1], sa_exp[BK][BM + 1], sb_mag[BK][BN + 1], sb_exp[BK][BN + 1];
  const u32 tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const u32 m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  u32 acc[TM][TN];   // FP32 bits
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const u32 m = m0 + ty * TM + i, n = n0 + tx * TN + j;
      acc[i][j] = COMB_INIT ? u32(comb[(m % P) * N + n]) << 16 : 0u;
    }
  for (u32 k0 = 0; k0 < K; k0 += BK) {
    __syncthreads();   // the previous block's reads are done
    for (u32 i = tid; i < BM * BK; i += THREADS) {
      const u32 r = i / BK, k = i % BK;
      emu_decode(a[(size_t)(m0 + r) * K + k0 + k], sa_mag[k][r], sa_exp[k][r]);
      emu_decode(b[(size_t)(n0 + r) * K + k0 + k], sb_mag[k][r], sb_exp[k][r]);
    }
    __syncthreads();
    // pass 1: R per output, from D and the nonzero products
    i32 R[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const u32 d = acc[i][j];
        const i32 f = i32(d >> 23 & 255);
        R[i][j] = (d & 0x7FFFFFFFu) ? (f ? f : 1) - 127 : 2 * ZERO_EXP;
        if (f == 255) R[i][j] = NAN_EXP;   // D Inf or NaN: never from these inputs (comb is finite)
      }
    for (int k = 0; k < BK; ++k) {
      i32 ea[TM], eb[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) ea[i] = sa_exp[k][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) eb[j] = sb_exp[k][tx * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) R[i][j] = emu_max(R[i][j], ea[i] + eb[j]);
    }
    // pass 2: the cut terms, summed
    i32 S[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        R[i][j] = emu_max(R[i][j], MIN_EXP);
        S[i][j] = 0;
      }
    for (int k = 0; k < BK; ++k) {
      i32 ma[TM], ea[TM], mb[TN], eb[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        ma[i] = sa_mag[k][ty * TM + i];
        ea[i] = sa_exp[k][ty * TM + i];
      }
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        mb[j] = sb_mag[k][tx * TN + j];
        eb[j] = sb_exp[k][tx * TN + j];
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          // the product's last bit is 2^(e_a + e_b - 6); against the grid 2^(R - 13): shift 7 - delta
          const i32 p = ma[i] * mb[j], delta = R[i][j] - (ea[i] + eb[j]);
          const u32 q = u32(p < 0 ? -p : p);
          const u32 t = delta <= 7 ? q << (7 - delta) : (delta >= 15 ? 0u : q >> (delta - 7));
          S[i][j] += p < 0 ? -i32(t) : i32(t);
        }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const u32 d = acc[i][j];
        if (R[i][j] >= NAN_EXP / 2) {   // a NaN byte (or a special D): NaN, the tensor core's 0x7FFFFFFF
          acc[i][j] = 0x7FFFFFFFu;
          continue;
        }
        const i32 f = i32(d >> 23 & 255);
        const u32 dm = f ? (d & 0x7FFFFFu) | 0x800000u : d & 0x7FFFFFu;
        if (dm) {   // D's last bit is 2^(e_d - 23): against the grid, a right shift by R - e_d + 10 >= 10
          const i32 s = R[i][j] - ((f ? f : 1) - 127) + 10;
          const i32 t = s >= 24 ? 0 : i32(dm >> s);
          S[i][j] += (d >> 31) ? -t : t;
        }
        acc[i][j] = emu_encode(S[i][j], R[i][j]);
      }
  }
  // epilogue: + comb in FP32 (round to nearest), BF16 round to nearest even (sm90/06: d + bf16lo_to_f32(cv));
  // COMB_INIT: the conversion only (sm90/08)
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const u32 m = m0 + ty * TM + i;
#pragma unroll
    for (int j = 0; j < TN; j += 2) {
      const u32 n = n0 + tx * TN + j;
      float lo = __uint_as_float(acc[i][j]), hi = __uint_as_float(acc[i][j + 1]);
      if (!COMB_INIT) {
        lo = lo + __uint_as_float(u32(comb[(m % P) * N + n]) << 16);
        hi = hi + __uint_as_float(u32(comb[(m % P) * N + n + 1]) << 16);
      }
      const u32 v = f32x2_to_bf16x2(lo, hi);
      out[(size_t)m * N + n] = u16(v & 0xFFFF);
      out[(size_t)m * N + n + 1] = u16(v >> 16);
    }
  }
}
