// sm_90 wgmma data path (no asynchrony: the engine runs this when the wgmma group completes).
//   decode_gmma_desc  the 64-bit wgmma matrix descriptor -> fields (reserved bits refused)
//   gmma_f8           one wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 (or .e5m2.e5m2) with both
//                     operands from shared-memory descriptors (the form src/kernels/common/wgmma.cuh and
//                     the sm90 stages issue), accumulating into the warpgroup's 128 register fragments
//                     (gmma_e4m3: the .e4m3 form)
//   wgmma_acc_row/col the D fragment map (thread t of the warpgroup, register i) -> (row, column)
// Reference: pelib.emulate.operand_addresses / wgmma_acc_map (GMMA reads proven on an H100).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/blockfma.h"
#include "model/error.h"
#include "model/smem_operand.h"

namespace pe_sim {

// PTX ISA 9.7.15.5.1 wgmma "Matrix Descriptor" (CUTLASS include/cute/arch/mma_sm90_desc.hpp GmmaDescriptor):
// [0,14) start>>4, [16,30) LBO>>4, [32,46) SBO>>4, [49,52) base offset, [62,64) layout type
// (0 interleave/none, 1 128B, 2 64B, 3 32B); bits 14-15, 30-31, 46-48, 52-61 are zero (an sm_100
// descriptor copied here shows as bit 46). pelib.isa.descriptors.decode_gmma_smem_desc is the Python twin.
inline SmemDescFields decode_gmma_desc(uint64_t d) {
  if ((d >> 46 & 7) || (d >> 52 & 0x3FF) || (d >> 14 & 3) || (d >> 30 & 3))
    model_fail("wgmma descriptor 0x%016llx sets bits sm_90 leaves zero (14-15, 30-31, 46-48 or 52-61; an "
               "sm_100 descriptor has bit 46 set): build it with gmma_smem_desc", (unsigned long long)d);
  static const int sw[4] = {0, 128, 64, 32};
  return SmemDescFields{uint32_t(d & 0x3FFF) << 4, uint32_t(d >> 16 & 0x3FFF) << 4, uint32_t(d >> 32 & 0x3FFF) << 4,
                        sw[d >> 62 & 3], uint32_t(d >> 49 & 7)};
}

// PTX ISA 9.7.15.5.1 "Matrix fragments for wgmma .m64nNk32" (D, .f32): register i of warpgroup thread t
// holds row 16*(t/32) + 8*((i>>1)&1) + (t%32)/4, column 8*(i>>2) + 2*(t%4) + (i&1)
// (CUTLASS CLayout_64xN; common/wgmma.cuh wgmma_acc_row/col).
inline int wgmma_acc_row(int t, int i) { return 16 * (t / 32) + 8 * ((i >> 1) & 1) + (t % 32) / 4; }
inline int wgmma_acc_col(int t, int i) { return 8 * (i >> 2) + 2 * (t % 4) + (i & 1); }

// PTX ISA 9.7.15.5.2 wgmma.mma_async (.m64nNk32 .f32 .e4m3.e4m3 / .e5m2.e5m2, A and B from descriptors,
// K-major both: FP8 wgmma has no transpose; CUTLASS SM90_64xNx32_F32E4M3E4M3_SS_TN).
// D[m][n] = (scale_d ? D[m][n] : 0) + sum_k A[m][k] * B[n][k], m < 64, n < N, k < 32.
// acc[t] points at thread t's N/2 floats (register i at acc[t][i], the fragment map above).
// Arithmetic: model/blockfma.h dot_f8 under p, by default accumulation().wgmma_f8: the Hopper tensor
// core's block FMA (13 fraction bits below the largest exponent sum, cut toward zero, the result cut
// again to 13 bits; measured bit for bit on an H100, results/2026-11-27-h100/tcprobe.json); EXACT_SUM is
// the exact sum rounded once to FP32 per instruction. fmt: 0 E4M3, 1 E5M2.
inline void gmma_f8(const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint64_t adesc,
                    uint64_t bdesc, int N, int fmt, bool scale_d, float* const acc[128],
                    const BlockFma& p = accumulation().wgmma_f8) {
  if (N < 8 || N > 256 || N % 8)
    model_fail("wgmma m64n%dk32: N must be a multiple of 8 in 8..256 (PTX ISA 9.7.15.5.2)", N);
  if (fmt != 0 && fmt != 1) model_fail("wgmma FP8 format code %d: 0 .e4m3, 1 .e5m2", fmt);
  SmemDescFields fa = decode_gmma_desc(adesc), fb = decode_gmma_desc(bdesc);
  std::vector<uint8_t> a(64 * 32), b(size_t(N) * 32);
  read_kmajor(fa, 64, 32, smem, smem_size, smem_base_addr, a.data(), "wgmma A");
  read_kmajor(fb, uint32_t(N), 32, smem, smem_size, smem_base_addr, b.data(), "wgmma B");
  check_dot_f8(p, 32, fmt, fmt, "wgmma");
  if (!arithmetic_on()) return;   // operands read and checked, D left as it was
  F8Rows ra, rb;   // decoded once for the instruction's 64 x N outputs
  ra.decode(a.data(), 64, 32, fmt);
  rb.decode(b.data(), N, 32, fmt);
  for (int t = 0; t < 128; ++t) {
    if (!acc[t]) model_fail("wgmma: accumulator pointer of warpgroup thread %d is null", t);
    for (int i = 0; i < N / 2; ++i) {
      const int m = wgmma_acc_row(t, i), n = wgmma_acc_col(t, i);
      uint32_t d;
      std::memcpy(&d, &acc[t][i], 4);
      d = dot_f8_rows(ra, m, rb, n, d, scale_d, p);
      std::memcpy(&acc[t][i], &d, 4);
    }
  }
}

inline void gmma_e4m3(const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint64_t adesc,
                      uint64_t bdesc, int N, bool scale_d, float* const acc[128]) {
  gmma_f8(smem, smem_size, smem_base_addr, adesc, bdesc, N, 0, scale_d, acc);
}

}  // namespace pe_sim
