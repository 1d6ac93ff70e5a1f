// Per-warp shared-memory staging of an epilogue's BF16 output, and the coalesced copy-out.
//
// Without staging, lane l of an epilogue warp owns output row l and stores 16 B of it at a time:
// the 32 lanes of one store instruction hit 32 different rows (32 cache lines, 16 B each). With
// staging, Phase 1 writes each lane's row into a shared-memory buffer, and Phase 2 reads the
// buffer back so that consecutive lanes copy consecutive 16 B of the same row: every store
// instruction then writes whole row segments (lab note fp8-megakernel-experiment-log.md, "Why SMEM
// staging won": the uncoalesced stores caused L1 read-modify-write of partly written lines).
//
// Layout of one buffer (StagingRows<COLS, PITCH>; pelib.layouts.staging models it byte by byte):
//   32 rows, one per lane of the warp (= TMEM lane = output row), PITCH >= 2*COLS bytes each;
//   row l holds the BF16 of the warp's COLS columns at bytes [l*PITCH, l*PITCH + 2*COLS).
//   Phase 1: lane l writes its row, 16 B (8 columns) per st.shared.v4.
//   Phase 2: LANES_PER_ROW = 2*COLS/16 lanes cover one row, ROWS_PER_COPY = 32/LANES_PER_ROW rows per
//            instruction; copy t, lane l reads row t*ROWS_PER_COPY + l/LANES_PER_ROW, bytes
//            16*(l % LANES_PER_ROW).. of it, and stores them to the same row and columns in global.
// The pad: shared memory has 32 banks of 4 B (CUDA C++ Programming Guide, "Shared Memory" of the
// compute capabilities). With PITCH = 512 or 256 B every row starts in bank 0, and the Phase 1
// stores of 32 lanes all hit banks 0-3; with 16 B more (PITCH = 528 or 272) consecutive rows start
// 4 banks apart, so any 8 consecutive lanes' 16-B stores cover the 32 banks exactly once.
//
// API:
//   StagingRows<COLS, PITCH>          ROWS, PITCH, BYTES, LANES_PER_ROW, ROWS_PER_COPY, COPIES
//                                     (PITCH defaults to 2*COLS + 16; a narrower slice may use a
//                                     wider buffer's pitch)
//   (st_shared_v4 / ld_shared_v4 / st_global_v4 of common/memory.cuh do the accesses)
//   stage_put<S>(buf, lane, col, w[4])     Phase 1: 8 BF16 (4 packed words) of column col.. of this
//                                          lane's row (buf: 32-bit shared address of the buffer)
//   stage_copy_out<S, UNROLL>(buf, lane, out, ld_out)
//                                          Phase 2: the whole buffer to global; out = element (0, 0)
//                                          of the warp's block, ld_out = elements per output row
//   stage_copy_some<S, COUNT>(buf, lane, out, ld_out, first)
//                                          Phase 2 copies first .. first + COUNT - 1 only
// Callers __syncwarp() between Phase 1 and Phase 2 (lanes read rows other lanes wrote) and before
// a buffer is written again (lanes overwrite rows other lanes are still reading).
// A kernel building block: no instruction of its own (common/memory.cuh has them).
#pragma once
#include "common/types.cuh"
#include "common/memory.cuh"
#include "common/epilogue.cuh"

template <int COLS, int PITCH_ = 2 * COLS + 16>
struct StagingRows {
  static_assert(COLS % 8 == 0 && COLS >= 64 && COLS <= 256, "staging: COLS must be a multiple of 8 in [64, 256]");
  static_assert(PITCH_ % 16 == 0 && PITCH_ >= 2 * COLS, "staging: PITCH must hold a row and keep 16-B alignment");
  static constexpr int ROWS = 32;                                // one per lane
  static constexpr int DATA_BYTES = 2 * COLS;                    // BF16 of one row
  static constexpr int PITCH = PITCH_;
  static constexpr int BYTES = ROWS * PITCH;
  static constexpr int LANES_PER_ROW = DATA_BYTES / 16;          // Phase 2: 16 B per lane
  static constexpr int ROWS_PER_COPY = 32 / LANES_PER_ROW;
  static constexpr int COPIES = ROWS / ROWS_PER_COPY;            // Phase 2 instructions per buffer
  static_assert(32 % LANES_PER_ROW == 0, "staging: a row must take a divisor of 32 lanes in Phase 2");
};

// Phase 1: columns col .. col+7 of this lane's row (col a multiple of 8, relative to the slice).
template <class S>
PE_DEVICE void stage_put(u32 buf, int lane, int col, const u32 (&w)[4]) {
  st_shared_v4(buf + (u32)(lane * S::PITCH + 2 * col), w[0], w[1], w[2], w[3]);
}

// Phase 2: copy the warp's 32 x COLS block out, each instruction writing ROWS_PER_COPY row segments.
template <class S, int UNROLL>
PE_DEVICE void stage_copy_out(u32 buf, int lane, u16* out, int ld_out) {
  const int r0 = lane / S::LANES_PER_ROW;       // this lane's row within one copy
  const int q = lane % S::LANES_PER_ROW;        // its 16-B chunk of that row
#pragma unroll UNROLL
  for (int t = 0; t < S::COPIES; ++t) {
    const int r = t * S::ROWS_PER_COPY + r0;
    u32 v[4];
    ld_shared_v4(buf + (u32)(r * S::PITCH + 16 * q), v);
    st_global_v4(out + (i64)r * ld_out + 8 * q, v[0], v[1], v[2], v[3]);
  }
}

// Phase 2 in pieces: COUNT copies from copy `first` on (fully unrolled), for a caller that spreads
// the copy-out of one buffer over other work (the persistent kernel's TMEM loads).
template <class S, int COUNT>
PE_DEVICE void stage_copy_some(u32 buf, int lane, u16* out, int ld_out, int first) {
  static_assert(COUNT >= 1 && COUNT <= S::COPIES, "stage_copy_some: COUNT out of range");
  const int r0 = lane / S::LANES_PER_ROW;
  const int q = lane % S::LANES_PER_ROW;
#pragma unroll
  for (int i = 0; i < COUNT; ++i) {
    const int r = (first + i) * S::ROWS_PER_COPY + r0;
    u32 v[4];
    ld_shared_v4(buf + (u32)(r * S::PITCH + 16 * q), v);
    st_global_v4(out + (i64)r * ld_out + 8 * q, v[0], v[1], v[2], v[3]);
  }
}
