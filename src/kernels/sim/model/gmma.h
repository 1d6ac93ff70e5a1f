// sm_90 wgmma data path (no asynchrony: the engine runs this when the wgmma group completes).
//   decode_gmma_desc  the 64-bit wgmma matrix descriptor -> fields (reserved bits refused)
//   gmma_e4m3         one wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 with both operands
//                     from shared-memory descriptors (the only form src/kernels/common/wgmma.cuh and
//                     the sm90 stages issue), accumulating into the warpgroup's 128 register fragments
//   wgmma_acc_row/col the D fragment map (thread t of the warpgroup, register i) -> (row, column)
// Reference: pelib.emulate.operand_addresses / wgmma_acc_map (GMMA reads proven on an H100).
#pragma once
#include <cstdint>
#include <vector>

#include "model/error.h"
#include "model/smem_operand.h"

namespace pe_sim {

// PTX ISA 9.7.15.5.1 wgmma "Matrix Descriptor" (CUTLASS include/cute/arch/mma_sm90_desc.hpp GmmaDescriptor):
// [0,14) start>>4, [16,30) LBO>>4, [32,46) SBO>>4, [49,52) base offset, [62,64) layout type
// (0 interleave/none, 1 128B, 2 64B, 3 32B); bits 14-15, 30-31, 46-48, 52-61 are zero (an sm_100
// descriptor copied here shows as bit 46). pelib.descriptors.decode_gmma_smem_desc is the Python twin.
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

// PTX ISA 9.7.15.5.2 wgmma.mma_async (.m64nNk32 .f32 .e4m3 .e4m3, A and B from descriptors, K-major
// both: FP8 wgmma has no transpose; CUTLASS SM90_64xNx32_F32E4M3E4M3_SS_TN).
// D[m][n] = (scale_d ? D[m][n] : 0) + sum_k A[m][k] * B[n][k], m < 64, n < N, k < 32.
// acc[t] points at thread t's N/2 floats (register i at acc[t][i], the fragment map above).
// Arithmetic: each E4M3 value is decoded exactly; the 32 products are exact in double and so is their
// sum; that sum plus D is rounded once to FP32 per instruction. The tensor core's own FP8 accumulation
// (order, internal width, truncation) is not IEEE-sequential and is not modelled: results agree with the
// hardware exactly when every partial sum is exactly representable (small-integer inputs), and within
// FP32 rounding otherwise. A NaN operand (0x7F/0xFF) makes the sums it enters NaN.
inline void gmma_e4m3(const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint64_t adesc,
                      uint64_t bdesc, int N, bool scale_d, float* const acc[128]) {
  if (N < 8 || N > 256 || N % 8)
    model_fail("wgmma m64n%dk32 e4m3: N must be a multiple of 8 in 8..256 (PTX ISA 9.7.15.5.2)", N);
  SmemDescFields fa = decode_gmma_desc(adesc), fb = decode_gmma_desc(bdesc);
  std::vector<uint8_t> a(64 * 32), b(size_t(N) * 32);
  read_kmajor(fa, 64, 32, smem, smem_size, smem_base_addr, a.data(), "wgmma A");
  read_kmajor(fb, uint32_t(N), 32, smem, smem_size, smem_base_addr, b.data(), "wgmma B");
  float lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = e4m3_to_float(uint8_t(v));
  std::vector<float> av(64 * 32), bv(size_t(N) * 32);
  for (size_t i = 0; i < av.size(); ++i) av[i] = lut[a[i]];
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = lut[b[i]];
  for (int t = 0; t < 128; ++t) {
    if (!acc[t]) model_fail("wgmma: accumulator pointer of warpgroup thread %d is null", t);
    for (int i = 0; i < N / 2; ++i) {
      const int m = wgmma_acc_row(t, i), n = wgmma_acc_col(t, i);
      const float* ar = &av[size_t(m) * 32];
      const float* br = &bv[size_t(n) * 32];
      double s = scale_d ? double(acc[t][i]) : 0.0;
      for (int k = 0; k < 32; ++k) s += double(ar[k]) * double(br[k]);
      acc[t][i] = float(s);
    }
  }
}

}  // namespace pe_sim
