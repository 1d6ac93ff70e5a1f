// Stage 00 — NVFP4 block-scaled GEMM, one shared-memory stage, no overlap: the baseline.
//
// What changes: the family's first stage. C[M,N] = fp16( alpha * sum_k (A[m,k] * SFA[m,k/16]) *
// (B[n,k] * SFB[n,k/16]) ) with A, B packed E2M1 (two values per byte, K-major), SFA/SFB UE4M3 scale
// factors (one per 16 K-elements) and alpha the FP32 global scale (product of A's and B's tensor
// scales). One CTA per 128x128 output tile; K tiles of 256. Per K tile one thread:
//   TMA: A (128 rows x 128 B), B (128 x 128 B), SFA (2 KB), SFB (2 KB) -> SMEM, one mbarrier
//   wait -> tcgen05.cp the scale factors SMEM -> TMEM -> 4 x tcgen05.mma kind::mxf4nvf4 (K = 64 each)
//   -> tcgen05.commit to an mbarrier -> wait for the MMAs before the next load reuses the buffers.
// Epilogue: 4 warps, tcgen05.ld 32x32b (warp w reads TMEM lanes 32w..32w+31 = rows), x alpha,
// cvt to FP16, 16-B stores.
// Layouts (every one exported below with PELIB_EXPORT; pelib.nvfp4 builds tensor maps from them,
// pelib.emulate replays them):
//   A, B in global: uint8 [rows][K/2]; element k of a row in byte k/2, even k in the low nibble
//     (CUTLASS float_e2m1_t sub-byte packing, include/cutlass/subbyte_reference.h).
//   A, B tiles in SMEM: TMA box 128 B x 128 rows, SWIZZLE_128B; UMMA K-major SW128 descriptor,
//     SBO = 1024 (8 rows x 128 B), LBO unused for swizzled K-major (16), 1024-B aligned base;
//     the k-th MMA of a K tile starts 32 B (64 E2M1) further: descriptor start address + 2 (16-B units)
//     (CUTLASS mma_sm100_desc.hpp make_umma_desc / DescriptorIterator; PTX ISA 9.7.16.4.1).
//   SFA, SFB in global: the CUTLASS block-scaled atom, uint8 [MN/128][K/64][512]: inside an atom
//     byte (m%32)*16 + ((m%128)/32)*4 + (k/16)%4 (include/cutlass/detail/sm100_blockscaled_layout.hpp,
//     Sm1xxBlockScaledBasicChunk SfKMajorAtom; cudnn-frontend "mxfp8 scale factor 128x4 layout").
//     One K tile of one 128-row block = 4 atoms = 2048 contiguous bytes; the tensor map views the
//     buffer as rows of 256 B and loads a box of 256 B x 8 rows, no swizzle.
//   Scale factors in TMEM: tcgen05.cp 32x128b.warpx4 copies one 512-B atom (32 rows x 16 B) into 4
//     columns x 32 lanes and replicates it to all four 32-lane groups: lane (m%32)+32j, column (m/32),
//     byte (k/16)%4 (CUTLASS mma_traits_sm100_frag.hpp tmem_sf_frg, copy_traits_sm100.hpp
//     SM100_UTCCP_4x32dp128bit_1cta). Source descriptor: no swizzle, SBO = 128 (8 rows x 16 B),
//     LBO = 128 (one 16-B column: unused). MMA k of a K tile reads SFA at column TMEM_SFA + 4k and
//     SFB at TMEM_SFB + 4k; a_sf_id = b_sf_id = 0 (bits 30-31 of those addresses; CUTLASS
//     make_runtime_instr_desc_block_scaled).
//   Accumulator: TMEM columns [0,128), lane = row, FP32.
// Why: the smallest correct block-scaled tcgen05 GEMM; the load and the MMA never overlap, which
// 01_pipelined.cu fixes.
// Recorded: nvfp4-gemm-optimization-log.md, "Baseline" (num_ab_stage = 1): 96.8 / 51.6 / 37.6 us on
// a B200 for M=128 and N,K = 7168,16384 / 4096,7168 / 7168,2048.
// Run: python -m pelib.stage nvfp4/00_single_stage
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
constexpr u32 TILE_M = 128, TILE_N = 128, TILE_K = 256;   // output tile, K per stage (lab log)
constexpr u32 MMA_K = 64;                                  // kind::mxf4nvf4 dense K per instruction
constexpr u32 SF_VEC = 16;                                 // NVFP4: one UE4M3 scale per 16 elements
constexpr u32 MMAS_PER_KTILE = TILE_K / MMA_K;             // 4
constexpr u32 NUM_THREADS = 128;                           // 4 warps: all read TMEM in the epilogue
constexpr u32 NUM_STAGES = 1;

constexpr u32 ROW_BYTES = TILE_K / 2;                      // 128 B of packed E2M1 per row per K tile
constexpr u32 SWIZZLE = 128;                               // TMA SWIZZLE_128B == UMMA SW128
constexpr u32 A_BYTES = TILE_M * ROW_BYTES;                // 16384
constexpr u32 B_BYTES = TILE_N * ROW_BYTES;                // 16384
constexpr u32 SF_ATOM_BYTES = 512;                         // 128 rows x 4 scale factors
constexpr u32 SF_ATOM_K = 4 * SF_VEC;                      // 64 K-elements per atom
constexpr u32 SFA_BYTES = (TILE_M / 128) * (TILE_K / SF_ATOM_K) * SF_ATOM_BYTES;  // 2048
constexpr u32 SFB_BYTES = (TILE_N / 128) * (TILE_K / SF_ATOM_K) * SF_ATOM_BYTES;  // 2048
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
constexpr u32 OFF_BARRIERS = NUM_STAGES * STAGE_BYTES;
constexpr u32 NUM_BARRIERS = 2;                            // full (TMA -> MMA), mma_done (MMA -> TMA/epilogue)
constexpr u32 BARRIER_BYTES = (NUM_BARRIERS * 8 + 8 + 63) / 64 * 64;   // + the TMEM address slot
constexpr u32 ALIGN_SLACK = 1024;                          // dynamic SMEM base rounded up to 1024 B
constexpr u32 SMEM_BYTES = ALIGN_SLACK + OFF_BARRIERS + BARRIER_BYTES;

// TMEM columns: accumulator, then per stage 16 columns of SFA and 16 of SFB (4 per MMA).
constexpr u32 TMEM_ACC = 0;
constexpr u32 TMEM_SF_COLS_PER_MMA = 4;                    // 4 x 32 bit = 4 UE4M3 per row per MMA (K = 64)
constexpr u32 TMEM_SFA = TILE_N;                           // after the 128 accumulator columns
constexpr u32 TMEM_SFB = TMEM_SFA + MMAS_PER_KTILE * TMEM_SF_COLS_PER_MMA;
constexpr u32 TMEM_STAGE_COLS = 2 * MMAS_PER_KTILE * TMEM_SF_COLS_PER_MMA;   // 32
__host__ __device__ constexpr u32 tmem_alloc_cols(u32 used) { return used <= 32 ? 32 : used <= 64 ? 64 : used <= 128 ? 128 : used <= 256 ? 256 : 512; }
constexpr u32 TMEM_COLS = tmem_alloc_cols(TMEM_SFA + NUM_STAGES * TMEM_STAGE_COLS);

// Instruction descriptor: M=128, N=128, A/B packed E2M1 (MXF4 format 1), UE4M3 scales, K-major.
constexpr u32 IDESC = umma_instr_desc_block_scaled(TILE_M, TILE_N, UMMA_FMT_MXF4_E2M1, UMMA_FMT_MXF4_E2M1,
                                                   UMMA_SF_UE4M3, /*a_sf_id=*/0, /*b_sf_id=*/0);
// Descriptor words at shared address 0: the kernel adds its stage address (>>4) to the low bits.
constexpr u64 DESC_AB_BASE = umma_smem_desc(0, LBO_AB, SBO_AB, SWIZZLE);
constexpr u64 DESC_SF_BASE = umma_smem_desc(0, LBO_SF, SBO_SF, 0);

static_assert(TILE_M == 128, "kind::mxf4nvf4 with cta_group::1 needs M = 128 (lab log: M=64 rejected)");
static_assert(TILE_N % 16 == 0 && TILE_N <= 256, "UMMA N must be a multiple of 16 up to 256");
static_assert(TILE_N == 128, "one 512-B SF atom per MMA covers exactly 128 columns of B");
static_assert(ROW_BYTES == SWIZZLE, "a K tile row must fill one 128-B swizzle atom");
static_assert(SF_ROW_BYTES <= 256 && SF_ATOM_BYTES % SF_ROW_BYTES == 0, "SF map rows: a TMA box row is <= 256 elements, whole rows per atom");
static_assert(STAGE_BYTES % 1024 == 0, "stages must stay 1024-B aligned for SW128");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "exceeds the 227 KB per-block shared memory of sm_100");
static_assert(TMEM_SFB + MMAS_PER_KTILE * TMEM_SF_COLS_PER_MMA <= TMEM_COLS, "TMEM columns");

// ---- what pelib reads back from the cubin ------------------------------------------------------
// Names of pelib.emulate.EXPORT_NAMES (TileParams.from_exports replays the tile from them), then the
// ones only pelib.nvfp4 uses (tensor maps of the scale factors, the stage ring, launch config).
PELIB_EXPORT(smem_bytes, SMEM_BYTES);
// The shared vocabulary (common/export.cuh); the family's own exports follow.
PELIB_EXPORT(smem_limit, PE_SMEM_LIMIT);
PELIB_EXPORT(cluster_x, 1);
PELIB_EXPORT(cluster_in_kernel, 0);
PELIB_EXPORT(grid_kind, 0);                 // one CTA per output tile: grid (N/128, M/128)
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
PELIB_EXPORT(num_ab_stage, NUM_STAGES);
PELIB_EXPORT(stage_bytes, STAGE_BYTES);     // stage s lives at s * stage_bytes
PELIB_EXPORT(stage_tx_bytes, STAGE_TX_BYTES);
PELIB_EXPORT(tmem_stage_cols, TMEM_STAGE_COLS);   // stage s's scale factors at sf*_tmem_col + s * tmem_stage_cols
PELIB_EXPORT(num_threads, NUM_THREADS);
PELIB_EXPORT(tile_m, TILE_M);
PELIB_EXPORT(tile_n, TILE_N);

// ---- small helpers -----------------------------------------------------------------------------
// Issue the four TMA loads of K tile `kt` into the stage at `stage`; they complete on `bar`.
PE_DEVICE void load_ktile(u8* stage, u64* bar, const CUtensorMap* ta, const CUtensorMap* tb,
                          const CUtensorMap* tsfa, const CUtensorMap* tsfb, u32 kt, u32 m_blk, u32 n_blk,
                          u32 k_tiles) {
  mbarrier_arrive_expect_tx(bar, STAGE_TX_BYTES);
  tma_load_2d(stage + OFF_A, ta, bar, kt * ROW_BYTES, m_blk * TILE_M);
  tma_load_2d(stage + OFF_B, tb, bar, kt * ROW_BYTES, n_blk * TILE_N);
  // SF rows of 256 B: 128-row block b, K tile kt starts at atom (b * K/64 + 4 kt), 2 rows per atom
  // (pelib.nvfp4.sf_box_row is this formula; tests replay it through the emulated TMA).
  const u32 atoms_per_blk = k_tiles * (TILE_K / SF_ATOM_K);
  tma_load_2d(stage + OFF_SFA, tsfa, bar, 0, (m_blk * atoms_per_blk + kt * (TILE_K / SF_ATOM_K)) * SF_ROWS_PER_ATOM);
  tma_load_2d(stage + OFF_SFB, tsfb, bar, 0, (n_blk * atoms_per_blk + kt * (TILE_K / SF_ATOM_K)) * SF_ROWS_PER_ATOM);
}  // load_ktile

// Scale factors of one stage SMEM -> TMEM, then the 4 MMAs of the K tile. One thread.
PE_DEVICE void mma_ktile(const u8* stage, u32 tmem, u32 sf_col, bool first_ktile) {
  const u32 s = smem_u32(stage);
#pragma unroll
  for (u32 k = 0; k < MMAS_PER_KTILE; ++k) {
    const u64 dsfa = DESC_SF_BASE + ((s + OFF_SFA + k * SF_ATOM_BYTES) >> 4);
    const u64 dsfb = DESC_SF_BASE + ((s + OFF_SFB + k * SF_ATOM_BYTES) >> 4);
    tcgen05_cp_32x128b_warpx4<1>(tmem + sf_col + TMEM_SFA + k * TMEM_SF_COLS_PER_MMA, dsfa);
    tcgen05_cp_32x128b_warpx4<1>(tmem + sf_col + TMEM_SFB + k * TMEM_SF_COLS_PER_MMA, dsfb);
  }
  const u64 da = DESC_AB_BASE + ((s + OFF_A) >> 4);
  const u64 db = DESC_AB_BASE + ((s + OFF_B) >> 4);
#pragma unroll
  for (u32 k = 0; k < MMAS_PER_KTILE; ++k) {
    // tcgen05.cp -> tcgen05.mma from one thread is a pipelined pair (PTX ISA 9.7.16.6.2): no fence.
    // K step of 32 B inside a stage below 256 KiB: no carry out of the start field (descriptors.cuh).
    tcgen05_mma_mxf4nvf4_block16<1>(tmem + TMEM_ACC, smem_desc_advance_unchecked(da, k * K_ADVANCE_BYTES),
                                    smem_desc_advance_unchecked(db, k * K_ADVANCE_BYTES), IDESC,
                                    tmem + sf_col + TMEM_SFA + k * TMEM_SF_COLS_PER_MMA,
                                    tmem + sf_col + TMEM_SFB + k * TMEM_SF_COLS_PER_MMA,
                                    (first_ktile && k == 0) ? 0u : 1u);
  }
}  // mma_ktile

// Epilogue: warp w owns rows 32w..32w+31 (its TMEM lane quarter); 32 columns per tcgen05.ld.
PE_DEVICE void store_tile(u32 tmem, u16* out, u32 N, u32 m_blk, u32 n_blk, float alpha) {
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const u32 row = m_blk * TILE_M + warp * 32 + lane;
  u16* out_row = out + (u64)row * N + n_blk * TILE_N;
#pragma unroll 1
  for (u32 c = 0; c < TILE_N; c += 32) {
    u32 r[32];
    tcgen05_ld_32x32b_x32(tmem + TMEM_ACC + ((warp * 32) << 16) + c, r);
    tcgen05_wait_ld();
#pragma unroll
    for (u32 v = 0; v < 4; ++v) {
      u32 h[4];
#pragma unroll
      for (u32 j = 0; j < 4; ++j)
        h[j] = f32x2_to_f16x2(alpha * __uint_as_float(r[8 * v + 2 * j]), alpha * __uint_as_float(r[8 * v + 2 * j + 1]));
      st_global_v4(out_row + c + 8 * v, h[0], h[1], h[2], h[3]);
    }
  }
}  // store_tile

// ---- the kernel ----------------------------------------------------------------------------------
// grid (N/128, M/128), block 128, dynamic SMEM = SMEM_BYTES. M, N multiples of 128, K of 256 (host checks).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
nvfp4_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
           const __grid_constant__ CUtensorMap tmap_sfa, const __grid_constant__ CUtensorMap tmap_sfb,
           u16* __restrict__ out, float alpha, u32 M, u32 N, u32 K) {
  extern __shared__ u8 smem_raw[];
  u8* smem = (u8*)(((u64)smem_raw + ALIGN_SLACK - 1) & ~(u64)(ALIGN_SLACK - 1));
  // Waits acquire at CTA scope (why, per barrier: common/mbarrier.cuh, "Which scope a wait needs").
  u64* full = (u64*)(smem + OFF_BARRIERS);        // TMA bytes landed
  u64* mma_done = full + 1;                       // the MMAs reading the stage (and the tile) finished
  u32* tmem_slot = (u32*)(mma_done + 1);
  const u32 warp = threadIdx.x / 32;
  const u32 n_blk = blockIdx.x, m_blk = blockIdx.y, k_tiles = K / TILE_K;
  (void)M;

  if (threadIdx.x == 0) {
    prefetch_tensormap(&tmap_a); prefetch_tensormap(&tmap_b);
    prefetch_tensormap(&tmap_sfa); prefetch_tensormap(&tmap_sfb);
    mbarrier_init(full, 1);
    mbarrier_init(mma_done, 1);
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

  // ---- K loop, one thread: load, wait for the bytes, MMA, wait for the MMA ----
  if (threadIdx.x == 0) {
    for (u32 kt = 0; kt < k_tiles; ++kt) {
      load_ktile(smem, full, &tmap_a, &tmap_b, &tmap_sfa, &tmap_sfb, kt, m_blk, n_blk, k_tiles);
      mbarrier_wait_parity(full, kt & 1, /*tag=*/1);
      tcgen05_fence_after_thread_sync();
      mma_ktile(smem, tmem, 0, kt == 0);
      tcgen05_commit<1>(smem_u32(mma_done));
      mbarrier_wait_parity(mma_done, kt & 1, /*tag=*/2);   // nothing overlaps: the lesson of stage 00
    }
  }
  __syncthreads();
  // Every thread observes the last commit itself (its phase has completed, so this returns at once),
  // then orders its TMEM reads after it (PTX ISA 9.7.16.6.4, tcgen05.fence::after_thread_sync).
  mbarrier_wait_parity(mma_done, (k_tiles - 1) & 1, /*tag=*/3);
  tcgen05_fence_after_thread_sync();
  __syncwarp();   // lanes leave the spin at different times; tcgen05.ld is .sync.aligned
  store_tile(tmem, out, N, m_blk, n_blk, alpha);

  tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    tcgen05_fence_after_thread_sync();
    tcgen05_dealloc<1>(tmem, TMEM_COLS);
  }
}  // nvfp4_gemm
