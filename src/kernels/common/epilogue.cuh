// The patch-embed epilogue fusion, shared by the sm_100a stages and the sm_90a twin:
//   out[m, n] = bf16( acc[m, n] + float(comb[m % PE_NUM_PATCHES, n]) )
// acc is the FP32 accumulator (TMEM on Blackwell, registers on Hopper), comb the pre-combined
// BF16 bias + positional-embedding table [PE_NUM_PATCHES, N]. One rounding, after the FP32 add.
//
// API:
//   int  comb_row(int m)                           m % PE_NUM_PATCHES (the patch index of output row m)
//   void fuse8(acc8, comb4, out4)                   acc + comb for 8 columns, one rounding
//   template <int NCOLS> void load_comb(const u16* comb_row_ptr, u32 (&c)[NCOLS / 2])
//       NCOLS (a multiple of 8) BF16 of one comb row, as packed pairs, straight from global memory (the
//       lab history found inline loads faster than an SMEM prefetch: fp8-megakernel-experiment-log.md,
//       892766c and F5). Issue it before waiting for the accumulator so the two latencies overlap.
//   template <int NCOLS> void fuse_store(const u32 (&acc)[NCOLS], const u32 (&c)[NCOLS / 2], u16* out_row_ptr)
//       acc holds FP32 bit patterns (as tcgen05.ld returns them) of NCOLS consecutive columns of one
//       output row; adds comb, rounds once to BF16, stores 16 B at a time.
//   template <int NCOLS> void fuse_comb_store(const u32 (&acc)[NCOLS], const u16* comb_row_ptr, u16* out_row_ptr)
//       load_comb + fuse_store. comb_row_ptr / out_row_ptr point at column n0, both 16-B aligned.
// A kernel building block: its instructions come from common/convert.cuh (cvt) and common/memory.cuh
// (ld.global.nc, st.global).
#pragma once
#include "common/types.cuh"
#include "common/convert.cuh"
#include "common/memory.cuh"

#ifndef PE_NUM_PATCHES
#define PE_NUM_PATCHES 196  // 14 x 14 patches per image (SigLIP2 patch embed, M = images * 196)
#endif

PE_DEVICE int comb_row(int m) { return m % PE_NUM_PATCHES; }

// acc + comb for 8 columns: acc8 = 8 FP32 bit patterns, comb4 = 4 packed BF16 pairs -> 4 packed outputs.
PE_DEVICE void fuse8(const u32* acc8, const u32 (&comb4)[4], u32 (&out4)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float lo = __uint_as_float(acc8[2 * j]) + bf16lo_to_f32(comb4[j]);
    const float hi = __uint_as_float(acc8[2 * j + 1]) + bf16hi_to_f32(comb4[j]);
    out4[j] = f32x2_to_bf16x2(lo, hi);
  }
}

template <int NCOLS>
PE_DEVICE void load_comb(const u16* comb_row_ptr, u32 (&c)[NCOLS / 2]) {
  static_assert(NCOLS % 8 == 0, "load_comb: NCOLS must be a multiple of 8 (one 16-B vector = 8 BF16)");
#pragma unroll
  for (int v = 0; v < NCOLS / 8; ++v) {
    u32 q[4];
    ld_global_nc_v4(comb_row_ptr + 8 * v, q);
#pragma unroll
    for (int j = 0; j < 4; ++j) c[4 * v + j] = q[j];
  }
}

template <int NCOLS>
PE_DEVICE void fuse_store(const u32 (&acc)[NCOLS], const u32 (&c)[NCOLS / 2], u16* out_row_ptr) {
  static_assert(NCOLS % 8 == 0, "fuse_store: NCOLS must be a multiple of 8 (one 16-B vector = 8 BF16)");
#pragma unroll
  for (int v = 0; v < NCOLS / 8; ++v) {
    const u32 c4[4] = {c[4 * v], c[4 * v + 1], c[4 * v + 2], c[4 * v + 3]};
    u32 o[4];
    fuse8(&acc[8 * v], c4, o);
    st_global_v4(out_row_ptr + 8 * v, o[0], o[1], o[2], o[3]);
  }
}

template <int NCOLS>
PE_DEVICE void fuse_comb_store(const u32 (&acc)[NCOLS], const u16* comb_row_ptr, u16* out_row_ptr) {
  u32 c[NCOLS / 2];
  load_comb<NCOLS>(comb_row_ptr, c);
  fuse_store<NCOLS>(acc, c, out_row_ptr);
}
