// The m64nNk32 .f32 accumulator layout of wgmma (common/wgmma.cuh NOTES): which row and column each
// register of a warpgroup thread holds, and the quad transpose the epilogues use to turn its 4-B pairs
// into 16-B vectors. No wgmma instruction here (only shfl.sync), so the simulator's twin of
// common/wgmma.cuh includes this file as it is.
#pragma once
#include "common/types.cuh"

// ---------------------------------------------------------------------------------------------------
// Accumulator fragment coordinates (see NOTES)
// ---------------------------------------------------------------------------------------------------
// Row (0..63) inside the 64-row wgmma tile of accumulator i held by warpgroup thread t (0..127).
PE_DEVICE constexpr int wgmma_acc_row(int t, int i) { return 16 * (t / 32) + 8 * ((i >> 1) & 1) + (t % 32) / 4; }
// Column (0..N-1) of the same accumulator.
PE_DEVICE constexpr int wgmma_acc_col(int t, int i) { return 8 * (i >> 2) + 2 * (t % 4) + (i & 1); }

// ---------------------------------------------------------------------------------------------------
// The register accumulators' layout across a lane quad (16-B epilogue stores)
// ---------------------------------------------------------------------------------------------------

// A 4x4 transpose of 32-bit words across the 4 lanes of a quad (q = lane % 4), two butterfly steps
// (shfl.sync.bfly with lane masks 2, then 1). Before: v[u] of lane q is element (q, u); after: v[t] of
// lane q is element (t, q). Applied to the packed BF16 pairs of an m64nNk32 accumulator, v[u] = the
// pair at columns 8(4g+u) + 2q of a row becomes v[t] = columns 8(4g+q) + 2t: 16 contiguous bytes, so
// each lane stores one 16-B vector and a quad covers 64 contiguous bytes of the row. It is its own
// inverse, so it also turns comb read as 16-B vectors into the accumulator layout.
// (PTX ISA shfl.sync; the wgmma fragment layout of common/wgmma.cuh NOTES.)
PE_DEVICE void wgmma_quad_transpose(u32 (&v)[4], u32 q) {
  const bool hi2 = (q & 2u) != 0, hi1 = (q & 1u) != 0;
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // the off-diagonal 2x2 blocks change places (lane q <-> q ^ 2)
    const u32 send = hi2 ? v[k] : v[k + 2];
    const u32 recv = __shfl_xor_sync(0xFFFFFFFFu, send, 2);
    if (hi2) v[k] = recv; else v[k + 2] = recv;
  }
#pragma unroll
  for (int k = 0; k < 4; k += 2) {  // then each 2x2 block is transposed (lane q <-> q ^ 1)
    const u32 send = hi1 ? v[k] : v[k + 1];
    const u32 recv = __shfl_xor_sync(0xFFFFFFFFu, send, 1);
    if (hi1) v[k] = recv; else v[k + 1] = recv;
  }
}
