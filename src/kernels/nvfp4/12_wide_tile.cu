// Stage 12 — 11 with a 256-wide N tile: two 128-wide MMAs per K step share one A, so A's rows serve twice the columns.
// Parent: nvfp4/11_ring_partials
//
// What changes: TILE_N 128 -> 256 (a define: TILE_N = 128 does 11's work). At M = 128 every CTA loads its
// whole 128-row A tile for each K tile, 16 KiB, whatever its width; at 128 wide that is half of what a K tile
// brings in (16 of 32 KiB of A and B). 256 wide, A is a third (16 of 48 KiB): 24 KiB a K tile per 128 output
// columns instead of 36 with the scale factors (compiled: the K-tile bytes table of the chapter). The grid is
// (SPLIT_K N / 256, M / 128): on N = 7168 a split of 4 gives 112 CTAs in one wave, each walking 16 K tiles of
// K = 16384 (11 at a split of 2: 112 CTAs, 32 K tiles of 36 KiB).
// How: the block-scaled MMA stays at N = 128 (the simulator models block-scaled tcgen05.mma up to N = 128; the
// TMEM layout of SFB for N = 256 is the one fact this book would have to take on trust). Each K step issues one
// MMA per 128-column half h: the same A descriptor, B's descriptor h x 16 KiB further (the B box is the tile's
// 256 rows, one TMA load: a box row count up to 256, PTX ISA cp.async.bulk.tensor / CUDA driver API
// cuTensorMapEncodeTiled, boxDim <= 256), the accumulator at TMEM column h x 128, and B's scale factors of
// the half's own 128-row SF block (a second SFB load per K tile, a second set of tcgen05.cp, their TMEM columns
// after the first set's). What follows: a stage of 54 KiB (4 fit: 217 KiB), 256 accumulator columns and
// 4 x 56 scale columns (480 of 512 TMEM columns), slices of 128 columns at SPLIT_K = 2 and 64 at 4 whose
// partials (64 or 96 KiB) fit in the ring as in 11.
// Why: the timing model's replay of 11 on k16384 spends 94 % of the critical path on the bytes the SM's TMA
// brings in; a K tile of 256 output columns brings a third fewer bytes per output than one of 128.
// Recorded: none of this stage (the lab never ran it). The published mid-table entry uses a 128 x 64 tile and a
// (1, 2) cluster instead (github.com/arseniivanov/arseniivanov.github.io, public/blog/posts/2026-01-21-nvidiagemm.md).
// Run: python -m pelib.stage nvfp4/12_wide_tile -D SPLIT_K=4
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/cutensormap.cuh"
#include "common/cluster.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/tcgen05.cuh"
#include "common/descriptors.cuh"
#include "common/convert.cuh"
#include "common/memory.cuh"

// ---- tile shape and layout constants -----------------------------------------------------------
#ifndef TILE_N
#define TILE_N 256
#endif
static_assert(TILE_N == 128 || TILE_N == 256, "TILE_N: 128 (11's tile) or 256 (two 128-wide MMAs per K step)");
constexpr u32 TILE_M = 128, TILE_K = 256;                  // output tile rows, K per stage
constexpr u32 MMA_N = 128;                                 // one block-scaled MMA's N (the simulator's limit)
constexpr u32 N_HALVES = TILE_N / MMA_N;                   // MMAs per K step, one per 128 output columns
constexpr u32 SF_ROWS = 128;                               // rows one 512-B SF atom covers
constexpr u32 MMA_K = 64;                                  // kind::mxf4nvf4 dense K per instruction
constexpr u32 SF_VEC = 16;                                 // NVFP4: one UE4M3 scale per 16 elements
constexpr u32 MMAS_PER_KTILE = TILE_K / MMA_K;             // 4
constexpr u32 NUM_THREADS = 128;                           // 4 warps: all read TMEM in the epilogue
#ifndef NUM_STAGES
#define NUM_STAGES (TILE_N == 256 ? 4 : 6)                  // what fits in 227 KB (54 or 36 KiB a stage)
#endif
static_assert(NUM_STAGES >= 1 && NUM_STAGES <= 7, "NUM_STAGES: 1..7 (7 x 36 KB already exceeds 227 KB)");
#ifndef SPLIT_K
#define SPLIT_K 2
#endif
static_assert(SPLIT_K == 2 || SPLIT_K == 4, "SPLIT_K: 2 or 4 CTAs of a cluster share a tile's K (each rank owns "
              "TILE_N / SPLIT_K output columns, whole 32-column tcgen05.ld groups)");

constexpr u32 ROW_BYTES = TILE_K / 2;                      // 128 B of packed E2M1 per row per K tile
constexpr u32 SWIZZLE = 128;                               // TMA SWIZZLE_128B == UMMA SW128
constexpr u32 A_BYTES = TILE_M * ROW_BYTES;                // 16384
constexpr u32 B_BYTES = TILE_N * ROW_BYTES;                // 32768 at TILE_N = 256: one box of 256 rows
constexpr u32 SF_ATOM_BYTES = 512;                         // 128 rows x 4 scale factors
constexpr u32 SF_ATOM_K = 4 * SF_VEC;                      // 64 K-elements per atom
constexpr u32 SFA_BYTES = (TILE_M / 128) * (TILE_K / SF_ATOM_K) * SF_ATOM_BYTES;  // 2048
constexpr u32 SFB_BLOCK_BYTES = (TILE_K / SF_ATOM_K) * SF_ATOM_BYTES;             // 2048: one 128-row block of B
constexpr u32 SFB_BYTES = N_HALVES * SFB_BLOCK_BYTES;                              // each half's own block
constexpr u32 SF_ROW_BYTES = 256;                          // the SF tensor map's row
constexpr u32 SF_BOX_ROWS = SFA_BYTES / SF_ROW_BYTES;      // 8
constexpr u32 SF_ROWS_PER_ATOM = SF_ATOM_BYTES / SF_ROW_BYTES;   // 2
constexpr u32 SBO_AB = 8 * ROW_BYTES;                      // 1024: 8-row core-matrix group stride
constexpr u32 LBO_AB = 16;                                 // ignored for swizzled K-major
constexpr u32 K_ADVANCE_BYTES = MMA_K / 2;                 // 32 B per MMA inside the 128-B atom
constexpr u32 SBO_SF = 128, LBO_SF = 128;                  // tcgen05.cp source: 8 rows x 16 B

// Stage layout in SMEM: [A | B | SFA | SFB], each stage 1024-B aligned (SW128 needs it).
constexpr u32 OFF_A = 0, OFF_B = OFF_A + A_BYTES, OFF_SFA = OFF_B + B_BYTES, OFF_SFB = OFF_SFA + SFA_BYTES;
constexpr u32 STAGE_BYTES = OFF_SFB + SFB_BYTES;           // 36864
constexpr u32 STAGE_TX_BYTES = STAGE_BYTES;                // every byte of a stage arrives by TMA
// In the ring, from offset 0, once the K loop is done: the partial slices this rank receives from the SPLIT_K - 1
// others, FP32, column-major (column c of the slice, row r at (c * TILE_M + r) * 4), so the 32 lanes of a warp
// store and load 32 consecutive words. Rank q's slice from rank r sits in slot r < q ? r : r - 1 (partial_slot).
constexpr u32 SLICE_N = TILE_N / SPLIT_K;                  // 128 columns at SPLIT_K = 2, 64 at 4 (TILE_N 256)
constexpr u32 PART_BYTES = TILE_M * SLICE_N * 4;           // 32768 at SPLIT_K = 2
constexpr u32 OFF_PARTIALS = 0;                            // over the ring's first stages
constexpr u32 RING_BYTES = NUM_STAGES * STAGE_BYTES, PARTIALS_BYTES = (SPLIT_K - 1) * PART_BYTES;
constexpr u32 OFF_BARRIERS = RING_BYTES > PARTIALS_BYTES ? RING_BYTES : PARTIALS_BYTES;
constexpr u32 NUM_BARRIERS = 2 * NUM_STAGES + 1;         // full[S], empty[S], acc_full
constexpr u32 BARRIER_BYTES = (NUM_BARRIERS * 8 + 8 + 63) / 64 * 64;   // + the TMEM address slot
constexpr u32 ALIGN_SLACK = 1024;                          // dynamic SMEM base rounded up to 1024 B
constexpr u32 SMEM_BYTES = ALIGN_SLACK + OFF_BARRIERS + BARRIER_BYTES;

// TMEM columns: accumulator, then per stage 16 columns of SFA and 16 of SFB (4 per MMA).
constexpr u32 TMEM_ACC = 0;
constexpr u32 TMEM_SF_COLS_PER_MMA = 4;                    // 4 x 32 bit = 4 UE4M3 per row per MMA (K = 64)
constexpr u32 TMEM_SFA = TILE_N;                           // after the TILE_N accumulator columns
constexpr u32 TMEM_SFB = TMEM_SFA + MMAS_PER_KTILE * TMEM_SF_COLS_PER_MMA;   // then half h's at + h * 16
constexpr u32 TMEM_SFB_HALF_COLS = MMAS_PER_KTILE * TMEM_SF_COLS_PER_MMA;
// A stage's 32 scale columns and 8 spare: an odd tile's MMA reads SFB from 2 columns past its copy, and
// the footprint of that read for N = 64 is not documented (taken as 01's 4 columns), so the last MMA of a
// stage must not reach the next stage's SFA, which a tcgen05.cp may be refilling.
constexpr u32 TMEM_SF_SPARE_COLS = 8;
constexpr u32 TMEM_STAGE_COLS = (1 + N_HALVES) * MMAS_PER_KTILE * TMEM_SF_COLS_PER_MMA + TMEM_SF_SPARE_COLS;   // 40 or 56
// Column shift of the MMA's SFB address per 32 rows of the tile's offset in its 128-row block: row r of
// the block sits in column r / 32 of an atom's 4 (the warpx4 copy broadcasts 32 rows x 16 B).
constexpr u32 SFB_SHIFT_COLS_PER_32_ROWS = 1;
__host__ __device__ constexpr u32 sfb_shift_cols(u32 n_blk) { return (n_blk * TILE_N % SF_ROWS) / 32 * SFB_SHIFT_COLS_PER_32_ROWS; }
__host__ __device__ constexpr u32 tmem_alloc_cols(u32 used) { return used <= 32 ? 32 : used <= 64 ? 64 : used <= 128 ? 128 : used <= 256 ? 256 : 512; }
constexpr u32 TMEM_COLS = tmem_alloc_cols(TMEM_SFA + NUM_STAGES * TMEM_STAGE_COLS);

// Instruction descriptor of one MMA: M=128, N=128, A/B packed E2M1 (MXF4 format 1), UE4M3 scales, K-major.
constexpr u32 IDESC = umma_instr_desc_block_scaled(TILE_M, MMA_N, UMMA_FMT_MXF4_E2M1, UMMA_FMT_MXF4_E2M1,
                                                   UMMA_SF_UE4M3, /*a_sf_id=*/0, /*b_sf_id=*/0);
// Descriptor words at shared address 0: the kernel adds its stage address (>>4) to the low bits.
constexpr u64 DESC_AB_BASE = umma_smem_desc(0, LBO_AB, SBO_AB, SWIZZLE);
constexpr u64 DESC_SF_BASE = umma_smem_desc(0, LBO_SF, SBO_SF, 0);

static_assert(SLICE_N % 32 == 0, "a rank's slice is whole 32-column groups of tcgen05.ld.32x32b.x32");
static_assert(TILE_M == 128, "kind::mxf4nvf4 with cta_group::1 needs M = 128 (lab log: M=64 rejected)");
static_assert(TILE_N % 16 == 0 && TILE_N <= 256, "UMMA N must be a multiple of 16 up to 256");
static_assert(TILE_N % SF_ROWS == 0, "each 128-wide half of the tile is one whole 128-row SF block");
static_assert(ROW_BYTES == SWIZZLE, "a K tile row must fill one 128-B swizzle atom");
static_assert(SF_ROW_BYTES <= 256 && SF_ATOM_BYTES % SF_ROW_BYTES == 0, "SF map rows: a TMA box row is <= 256 elements, whole rows per atom");
static_assert(STAGE_BYTES % 1024 == 0, "stages must stay 1024-B aligned for SW128");
// No static_assert on the 227 KB limit here: the 7-stage build must compile so that its SMEM
// demand can be read back (pelib.views.nvfp4.stage_table()); the host refuses to launch it.
static_assert(TMEM_SFA + NUM_STAGES * TMEM_STAGE_COLS <= 512, "TMEM columns: the accumulator and every stage's "
              "scale factors within 512 (at TILE_N = 256 at most 4 stages)");
static_assert(TMEM_SFB + N_HALVES * TMEM_SFB_HALF_COLS <= TMEM_SFA + TMEM_STAGE_COLS,
              "the last half's SFB columns stay inside its own stage's TMEM columns");

// ---- what pelib reads back from the cubin ------------------------------------------------------
// Names of pelib.emulate.EXPORT_NAMES (TileParams.from_exports replays the tile from them), then the
// ones only pelib.kinds.nvfp4 uses (tensor maps of the scale factors, the stage ring, launch config).
PELIB_EXPORT(smem_bytes, SMEM_BYTES);
// The shared vocabulary (common/export.cuh); the family's own exports follow.
PELIB_EXPORT(smem_limit, PE_SMEM_LIMIT);
PELIB_EXPORT(cluster_x, SPLIT_K);            // the cluster splits K, not M: grid (SPLIT_K N/128, M/128)
PELIB_EXPORT(cluster_in_kernel, 0);
PELIB_EXPORT(grid_kind, 0);                 // one cluster per output tile
PELIB_EXPORT(pipeline_stages, NUM_STAGES);
PELIB_EXPORT(wait_kind, PE_WAIT_KIND);  // the mbarrier wait build (common/mbarrier.cuh)
PELIB_EXPORT(barrier_bytes, BARRIER_BYTES);
PELIB_EXPORT_TMAP(a, TILE_M, ROW_BYTES, SWIZZLE, 1);          // A [M, K/2] packed E2M1 as uint8
PELIB_EXPORT_TMAP(b, TILE_N, ROW_BYTES, SWIZZLE, 1);          // B [N, K/2]
PELIB_EXPORT_TMAP(sfa, SF_BOX_ROWS, SF_ROW_BYTES, 0, 1);      // SFA as rows of 256 B, no swizzle
PELIB_EXPORT_TMAP(sfb, SF_BOX_ROWS, SF_ROW_BYTES, 0, 1);
PELIB_EXPORT(mma_kind, 6);                  // kind::mxf4nvf4
PELIB_EXPORT(idesc, IDESC);
PELIB_EXPORT(block_k, TILE_K);
PELIB_EXPORT(a_box_k, TILE_K);              // box in E2M1 elements: 256 = 128 B (the uint8 map's inner box)
PELIB_EXPORT(a_box_m, TILE_M);
PELIB_EXPORT(b_box_k, TILE_K);
PELIB_EXPORT(b_box_n, TILE_N);
PELIB_EXPORT(a_swizzle, SWIZZLE);
PELIB_EXPORT(b_swizzle, SWIZZLE);
PELIB_EXPORT(a_smem_offset, OFF_A);         // stage 0, relative to the 1024-B aligned dynamic SMEM base
PELIB_EXPORT(b_smem_offset, OFF_B);
PELIB_EXPORT(a_desc, DESC_AB_BASE + (OFF_A >> 4));
PELIB_EXPORT(b_desc, DESC_AB_BASE + (OFF_B >> 4));
PELIB_EXPORT(k_advance_bytes, K_ADVANCE_BYTES);
PELIB_EXPORT(tmem_cols, TMEM_COLS);
PELIB_EXPORT(tmem_acc_col, TMEM_ACC);
PELIB_EXPORT(epi_warp0, 0);
PELIB_EXPORT(epi_warps, NUM_THREADS / 32);
PELIB_EXPORT(epi_ld_x, 32);
PELIB_EXPORT(sf_vec, SF_VEC);
PELIB_EXPORT(sfa_smem_offset, OFF_SFA);
PELIB_EXPORT(sfb_smem_offset, OFF_SFB);
PELIB_EXPORT(sfa_tmem_col, TMEM_SFA);
PELIB_EXPORT(sfb_tmem_col, TMEM_SFB);
PELIB_EXPORT(sf_tmem_step_cols, TMEM_SF_COLS_PER_MMA);
PELIB_EXPORT(sf_desc, DESC_SF_BASE + (OFF_SFA >> 4));   // tcgen05.cp source descriptor of stage 0, atom 0
PELIB_EXPORT(sf_row_bytes, SF_ROW_BYTES);   // SFA/SFB tensor maps: uint8 rows of 256 B, box {256, 8}, no swizzle
PELIB_EXPORT(sf_box_rows, SF_BOX_ROWS);
PELIB_EXPORT(sf_rows_per_atom, SF_ROWS_PER_ATOM);
PELIB_EXPORT(sf_swizzle, 0);
PELIB_EXPORT(stage_bytes, STAGE_BYTES);     // stage s lives at s * stage_bytes
PELIB_EXPORT(stage_tx_bytes, STAGE_TX_BYTES);
PELIB_EXPORT(tmem_stage_cols, TMEM_STAGE_COLS);   // stage s's scale factors at sf*_tmem_col + s * tmem_stage_cols
PELIB_EXPORT(num_threads, NUM_THREADS);
PELIB_EXPORT(tile_m, TILE_M);
PELIB_EXPORT(tile_n, TILE_N);
PELIB_EXPORT(mma_n, MMA_N);                 // one MMA's N: TILE_N / MMA_N MMAs per K step
PELIB_EXPORT(sfb_blocks, N_HALVES);         // B's 128-row SF blocks a K tile loads, one per half
PELIB_EXPORT(sfb_half_cols, TMEM_SFB_HALF_COLS);   // TMEM columns between the halves' SFB copies
PELIB_EXPORT(split_k, SPLIT_K);             // CTAs of a cluster, each 1/SPLIT_K of K
PELIB_EXPORT(partial_smem_offset, OFF_PARTIALS);   // each rank's partial slices from the others (PART_BYTES each),
                                                   // in the ring once the K loop is done
PELIB_EXPORT(slice_n, SLICE_N);             // output columns each rank adds and stores
PELIB_EXPORT(partial_bytes, PART_BYTES);
PELIB_EXPORT(sf_rows, SF_ROWS);             // rows of A or B one SF atom (and one SF box) covers
PELIB_EXPORT(sfb_shift_cols_per_32, SFB_SHIFT_COLS_PER_32_ROWS);   // the MMA's SFB column shift inside the block

// ---- small helpers -----------------------------------------------------------------------------
// Issue the four TMA loads of K tile `kt` into the stage at `stage`; they complete on `bar`.
PE_DEVICE void load_ktile(u8* stage, u64* bar, const CUtensorMap* ta, const CUtensorMap* tb,
                          const CUtensorMap* tsfa, const CUtensorMap* tsfb, u32 kt, u32 m_blk, u32 n_blk,
                          u32 k_tiles) {
  mbarrier_arrive_expect_tx(bar, STAGE_TX_BYTES);
  tma_load_2d(stage + OFF_A, ta, bar, kt * ROW_BYTES, m_blk * TILE_M);
  tma_load_2d(stage + OFF_B, tb, bar, kt * ROW_BYTES, n_blk * TILE_N);
  // SF rows of 256 B: 128-row block b, K tile kt starts at atom (b * K/64 + 4 kt), 2 rows per atom
  // (pelib.kinds.nvfp4.sf_box_row is this formula; tests replay it through the emulated TMA).
  const u32 atoms_per_blk = k_tiles * (TILE_K / SF_ATOM_K);
  tma_load_2d(stage + OFF_SFA, tsfa, bar, 0, (m_blk * atoms_per_blk + kt * (TILE_K / SF_ATOM_K)) * SF_ROWS_PER_ATOM);
  const u32 sfb_blk = n_blk * TILE_N / SF_ROWS;             // the 128-row SF block of the tile's first half
#pragma unroll
  for (u32 h = 0; h < N_HALVES; ++h)
    tma_load_2d(stage + OFF_SFB + h * SFB_BLOCK_BYTES, tsfb, bar, 0,
                ((sfb_blk + h) * atoms_per_blk + kt * (TILE_K / SF_ATOM_K)) * SF_ROWS_PER_ATOM);
}  // load_ktile

// Scale factors of one stage SMEM -> TMEM, then the K tile's MMAs: 4 K steps, one MMA per half each. One thread.
PE_DEVICE void mma_ktile(const u8* stage, u32 tmem, u32 sf_col, u32 sfb_shift, bool first_ktile) {
  const u32 s = smem_u32(stage);
#pragma unroll
  for (u32 k = 0; k < MMAS_PER_KTILE; ++k) {
    const u64 dsfa = DESC_SF_BASE + ((s + OFF_SFA + k * SF_ATOM_BYTES) >> 4);
    tcgen05_cp_32x128b_warpx4<1>(tmem + sf_col + TMEM_SFA + k * TMEM_SF_COLS_PER_MMA, dsfa);
#pragma unroll
    for (u32 h = 0; h < N_HALVES; ++h) {
      const u64 dsfb = DESC_SF_BASE + ((s + OFF_SFB + h * SFB_BLOCK_BYTES + k * SF_ATOM_BYTES) >> 4);
      tcgen05_cp_32x128b_warpx4<1>(tmem + sf_col + TMEM_SFB + h * TMEM_SFB_HALF_COLS + k * TMEM_SF_COLS_PER_MMA, dsfb);
    }
  }
  const u64 da = DESC_AB_BASE + ((s + OFF_A) >> 4);
  const u64 db = DESC_AB_BASE + ((s + OFF_B) >> 4);
#pragma unroll
  for (u32 k = 0; k < MMAS_PER_KTILE; ++k) {
#pragma unroll
    for (u32 h = 0; h < N_HALVES; ++h) {
      // tcgen05.cp -> tcgen05.mma from one thread is a pipelined pair (PTX ISA 9.7.16.6.2): no fence.
      // Half h: B's rows h * 128.. (16 KiB on, whole 1024-B swizzle atoms), its accumulator columns h * 128..;
      // the K step of 32 B and the half's offset stay inside a stage below 256 KiB: no carry (descriptors.cuh).
      tcgen05_mma_mxf4nvf4_block16<1>(tmem + TMEM_ACC + h * MMA_N, smem_desc_advance_unchecked(da, k * K_ADVANCE_BYTES),
                                      smem_desc_advance_unchecked(db, h * MMA_N * ROW_BYTES + k * K_ADVANCE_BYTES), IDESC,
                                      tmem + sf_col + TMEM_SFA + k * TMEM_SF_COLS_PER_MMA,
                                      tmem + sf_col + TMEM_SFB + h * TMEM_SFB_HALF_COLS + k * TMEM_SF_COLS_PER_MMA + sfb_shift,
                                      (first_ktile && k == 0) ? 0u : 1u);
    }
  }
}  // mma_ktile


// The slot of rank q's partial area that rank r's slice lands in: the others in rank order, q itself skipped.
PE_DEVICE constexpr u32 partial_slot(u32 r, u32 q) { return r < q ? r : r - 1; }

// Every rank: slice q of its FP32 accumulator into rank q's slot partial_slot(rank, q), for each q != rank
// (st.shared::cluster, 4 B a word).
PE_DEVICE void scatter_partials(u32 tmem, u8* smem, u32 rank) {
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = warp * 32 + lane;
#pragma unroll 1
  for (u32 q = 0; q < SPLIT_K; ++q) {
    if (q == rank) continue;
    const u32 dst = mapa_shared_cluster(smem_u32(smem + OFF_PARTIALS + partial_slot(rank, q) * PART_BYTES), q);
#pragma unroll 1
    for (u32 c = 0; c < SLICE_N; c += 32) {
      u32 r[32];
      tcgen05_ld_32x32b_x32(tmem + TMEM_ACC + ((warp * 32) << 16) + q * SLICE_N + c, r);
      tcgen05_wait_ld();
#pragma unroll
      for (u32 j = 0; j < 32; ++j) st_shared_cluster_u32(dst + ((c + j) * TILE_M + row) * 4, r[j]);
    }
  }
}  // scatter_partials

// Rank RANK: its own slice, the SPLIT_K accumulators added in rank order (09's order: rank 0 first), then
// alpha and FP16 into the slice's columns of the output. RANK is a template argument so that which term is
// the rank's own (TMEM) and which are partials (shared memory) is fixed at compile time: no select per word.
template <u32 RANK>
PE_DEVICE void store_slice_reduced(u32 tmem, const u8* smem, u16* out, u32 N, u32 m_blk, u32 n_blk, float alpha) {
  constexpr u32 rank = RANK;
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const u32 row = m_blk * TILE_M + warp * 32 + lane, trow = warp * 32 + lane;
  const float* part = (const float*)(smem + OFF_PARTIALS);
  u16* out_row = out + (u64)row * N + n_blk * TILE_N + rank * SLICE_N;
#pragma unroll 1
  for (u32 c = 0; c < SLICE_N; c += 32) {
    u32 r[32];
    tcgen05_ld_32x32b_x32(tmem + TMEM_ACC + ((warp * 32) << 16) + rank * SLICE_N + c, r);
    tcgen05_wait_ld();
    float v[32];
#pragma unroll
    for (u32 j = 0; j < 32; ++j) {
      const u32 w = (c + j) * TILE_M + trow;
      v[j] = rank == 0 ? __uint_as_float(r[j]) : part[partial_slot(0, rank) * (PART_BYTES / 4) + w];
#pragma unroll
      for (u32 p = 1; p < SPLIT_K; ++p)
        v[j] += p == rank ? __uint_as_float(r[j]) : part[partial_slot(p, rank) * (PART_BYTES / 4) + w];
    }
#pragma unroll
    for (u32 q = 0; q < 4; ++q) {
      u32 h[4];
#pragma unroll
      for (u32 j = 0; j < 4; ++j) h[j] = f32x2_to_f16x2(alpha * v[8 * q + 2 * j], alpha * v[8 * q + 2 * j + 1]);
      st_global_v4(out_row + c + 8 * q, h[0], h[1], h[2], h[3]);
    }
  }
}  // store_slice_reduced

// ---- the kernel ----------------------------------------------------------------------------------
// Same signature as stage 00; grid (SPLIT_K N/TILE_N, M/128) in clusters of (SPLIT_K, 1, 1), block 128,
// dynamic SMEM = SMEM_BYTES. M a multiple of 128, N of TILE_N, K of 256 SPLIT_K (host checks).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
nvfp4_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
           const __grid_constant__ CUtensorMap tmap_sfa, const __grid_constant__ CUtensorMap tmap_sfb,
           u16* __restrict__ out, float alpha, u32 M, u32 N, u32 K) {
  extern __shared__ u8 smem_raw[];
  u8* smem = (u8*)(((u64)smem_raw + ALIGN_SLACK - 1) & ~(u64)(ALIGN_SLACK - 1));
  // Waits acquire at CTA scope (why, per barrier: common/mbarrier.cuh, "Which scope a wait needs").
  u64* full = (u64*)(smem + OFF_BARRIERS);        // [NUM_STAGES] TMA bytes landed in stage s
  u64* empty = full + NUM_STAGES;               // [NUM_STAGES] MMAs reading stage s finished
  u64* acc_full = empty + NUM_STAGES;           // the whole accumulator is ready
  u32* tmem_slot = (u32*)(acc_full + 1);
  const u32 warp = threadIdx.x / 32;
  const u32 rank = cluster_ctarank();                // which K range: tiles [rank k_tiles, (rank+1) k_tiles)
  const u32 n_blk = blockIdx.x / SPLIT_K, m_blk = blockIdx.y, all_k_tiles = K / TILE_K;
  const u32 k_tiles = all_k_tiles / SPLIT_K, kt0 = rank * k_tiles;
  (void)M;

  if (threadIdx.x == 0) {
    prefetch_tensormap(&tmap_a); prefetch_tensormap(&tmap_b);
    prefetch_tensormap(&tmap_sfa); prefetch_tensormap(&tmap_sfb);
    for (u32 s = 0; s < NUM_STAGES; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], 1);
    }
    mbarrier_init(acc_full, 1);
    fence_barrier_init();
  }
  __syncwarp();   // .sync.aligned below: warp 0 must be converged after thread 0's branch
  if (warp == 0) {
    tcgen05_alloc<1>(smem_u32(tmem_slot), TMEM_COLS);   // whole warp
    tcgen05_relinquish_alloc_permit<1>();               // this CTA allocates nothing else
  }
  tcgen05_fence_before_thread_sync();
  __syncthreads();
  tcgen05_fence_after_thread_sync();
  const u32 tmem = *tmem_slot;

  // ---- K loop, two elected threads: one lane of warp 0 loads, one lane of warp 1 issues the MMAs ----
  if (warp == 0) {
    if (elect_one_sync()) {
      for (u32 kt = 0; kt < k_tiles; ++kt) {
        const u32 s = kt % NUM_STAGES;
        if (kt >= NUM_STAGES)
          mbarrier_wait_parity(&empty[s], ((kt / NUM_STAGES) - 1) & 1, /*tag=*/2);   // producer: acquire it back
        load_ktile(smem + s * STAGE_BYTES, &full[s], &tmap_a, &tmap_b, &tmap_sfa, &tmap_sfb, kt0 + kt, m_blk, n_blk,
                   all_k_tiles);
      }
    }
    __syncwarp();   // the warp reconverges before the block barrier
  } else if (warp == 1) {
    if (elect_one_sync()) {
      for (u32 kt = 0; kt < k_tiles; ++kt) {
        const u32 s = kt % NUM_STAGES, phase = (kt / NUM_STAGES) & 1;
        mbarrier_wait_parity(&full[s], phase, /*tag=*/1);        // consumer: acquire the stage
        tcgen05_fence_after_thread_sync();
        mma_ktile(smem + s * STAGE_BYTES, tmem, s * TMEM_STAGE_COLS, sfb_shift_cols(n_blk), kt == 0);
        tcgen05_commit<1>(smem_u32(&empty[s]));                  // consumer: release it
      }
      tcgen05_commit<1>(smem_u32(acc_full));
    }
    __syncwarp();
  }
  __syncthreads();
  // Every thread observes the accumulator's commit, then orders its TMEM reads after it
  // (PTX ISA 9.7.16.6.4, tcgen05.fence::after_thread_sync).
  mbarrier_wait_parity(acc_full, 0, /*tag=*/3);
  tcgen05_fence_after_thread_sync();
  __syncwarp();   // lanes leave the spin at different times; tcgen05.ld and barrier.cluster are .aligned
  cluster_arrive();           // release: this CTA's MMAs are done with its ring, which the peers may now fill ...
  cluster_wait();             // ... acquired here: every peer's ring is free before this CTA pushes into it
  scatter_partials(tmem, smem, rank);
  cluster_arrive();           // release: this CTA's pushes ...
  cluster_wait();             // ... acquired by every owner before it reads them
  switch (rank) {             // each rank its own instantiation (SPLIT_K of them)
    case 0: store_slice_reduced<0>(tmem, smem, out, N, m_blk, n_blk, alpha); break;
    case 1: store_slice_reduced<1>(tmem, smem, out, N, m_blk, n_blk, alpha); break;
#if SPLIT_K == 4
    case 2: store_slice_reduced<2>(tmem, smem, out, N, m_blk, n_blk, alpha); break;
    case 3: store_slice_reduced<3>(tmem, smem, out, N, m_blk, n_blk, alpha); break;
#endif
  }

  tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    tcgen05_fence_after_thread_sync();
    tcgen05_dealloc<1>(tmem, TMEM_COLS);
  }
}  // nvfp4_gemm
