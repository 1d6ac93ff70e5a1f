// Stand-in variant kernel for tests/test_variants.py (never launched): the same epilogue with F22's
// idea, the accumulator pair rounded to BF16x2 first and added to comb with one packed BF16 add.
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/epilogue.cuh"

PELIB_EXPORT(smem_bytes, 0);

// PTX ISA add: add{.rnd}.bf16x2 d, a, b (.rn: round to nearest even), sm_90 and later.
PE_DEVICE u32 add_rn_bf16x2(u32 a, u32 b) {
  u32 d;
  asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

extern "C" __global__ void variant_standin(const float* acc, const u32* comb, u32* out, int pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  out[i] = add_rn_bf16x2(f32x2_to_bf16x2(acc[2 * i], acc[2 * i + 1]), comb[i]);
}
