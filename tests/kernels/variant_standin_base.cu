// Stand-in base kernel for tests/test_variants.py (never launched): the FP32-add epilogue of
// out = bf16(acc + comb) on pairs of columns, as the megakernel's Phase 1 does it.
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/epilogue.cuh"

#ifndef TIMING
#define TIMING 0   // the TIMING build of the stand-in exports 1 (a define variant of the same file)
#endif
PELIB_EXPORT(smem_bytes, 0);
PELIB_EXPORT(timing, TIMING);

extern "C" __global__ void variant_standin(const float* acc, const u32* comb, u32* out, int pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const float lo = acc[2 * i] + bf16lo_to_f32(comb[i]);
  const float hi = acc[2 * i + 1] + bf16hi_to_f32(comb[i]);
  out[i] = f32x2_to_bf16x2(lo, hi);
}
