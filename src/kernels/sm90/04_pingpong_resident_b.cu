// Stage 04 — A prefetched into L2 PREFETCH_TILES tiles ahead of the ring.
// Parent: sm90/03d_comb_early
//
// What changes: the producer asks L2 for the A rows of the tile PREFETCH_TILES (2) ahead of the one it
// loads into the ring (cp.async.bulk.prefetch.tensor, tma_prefetch_2d_l2: no shared memory, no
// barrier); it prefetches the first PREFETCH_TILES tiles before the ring starts.
// Everything else is 03d: B resident per column block, ping-pong consumer warpgroups with turn
// barriers, comb read before the mainloop, the register epilogue with 16-B stores.
// Why: the ring's TMA loads of A then hit L2 instead of waiting on DRAM, with only 4 x 8 KiB of A in
// flight per CTA.
// Measured: results/2026-11-23-h100/hopper-sweep-2026-11-23T062323-nvidia-h100-80gb-hbm3.json: 1.015 ms, PREFETCH_TILES=0 1.070 ms (H100 80GB HBM3, 2026-11-23); results/2026-11-24-h200/sm90-split-stages.json: 0.990 ms
// against 1.001 ms for 03d (H200, 2026-11-24).
// Run: python -m pelib.stage sm90/04_pingpong_resident_b --sweep PREFETCH_TILES=0,1,2
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/cutensormap.cuh"
#include "common/cluster.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/descriptors.cuh"
#include "common/wgmma.cuh"
#include "common/epilogue.cuh"

#ifndef BLOCK_N
#define BLOCK_N 256        // output columns per CTA (its resident B rows) = the wgmma N
#endif
#ifndef K_MAX
#define K_MAX 768          // resident B holds K_MAX columns of K; the host refuses a larger K
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 4       // A ring: 8 KiB a stage; 4 fit beside a 192 KiB B
#endif
#ifndef EPI_VEC
#define EPI_VEC 1          // 1: quad transpose + 16-B stores (and 16-B comb loads); 0: 4-B pairs
#endif
#ifndef EPI_STREAM
#define EPI_STREAM 0       // 1: st.global.cs (evict-first) output stores
#endif
#ifndef COMB_EARLY
#define COMB_EARLY 1       // 1: comb into registers before the mainloop; 0: at the epilogue start
#endif
#ifndef PREFETCH_TILES
#define PREFETCH_TILES 2   // L2 prefetch of A this many tiles ahead of the ring (0: none)
#endif
#define NUM_CONSUMERS 2
#if defined(TIMING) && !defined(PE_TIMING_WARPS)
#define PE_TIMING_WARPS 12
#endif
#include "common/timing.cuh"

constexpr int BN = BLOCK_N;
constexpr int BM = 64;                         // rows per warpgroup tile (one m64 wgmma)
constexpr int BK = 128;                        // one 128-byte swizzle atom of FP8 along K
constexpr int KB_MAX = K_MAX / BK;             // resident B slices
constexpr int NUM_THREADS = 128 * (NUM_CONSUMERS + 1);
constexpr int A_STAGE_BYTES = BM * BK;         // 8 KiB
constexpr int B_SLICE_BYTES = BN * BK;         // one K slice of the resident B
constexpr int SMEM_ALIGN = 1024;
constexpr int SMEM_B_OFF = 0;
constexpr int SMEM_A_OFF = KB_MAX * B_SLICE_BYTES;
constexpr int SMEM_BAR_OFF = SMEM_A_OFF + NUM_STAGES * A_STAGE_BYTES;
constexpr int NUM_BARS = 2 * NUM_STAGES + 3;   // full[], empty[], b_full, turn[2]
constexpr int SMEM_USED = SMEM_BAR_OFF + 8 * NUM_BARS;
constexpr int SMEM_BYTES = SMEM_ALIGN + SMEM_USED;
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024, SWIZZLE = 128;
constexpr int CPR = BN / 8;                    // accumulator column groups of 8 (j) per row
// setmaxnreg: 40 for the producer, the rest to the two consumers (CUTLASS ping-pong: 40 / 232).
constexpr u32 ENTRY_REGS = (65536u / NUM_THREADS) & ~7u;
constexpr u32 PRODUCER_REGS = 40;
constexpr u32 CONSUMER_REGS = ((ENTRY_REGS * NUM_THREADS - PRODUCER_REGS * 128) / (NUM_CONSUMERS * 128)) & ~7u;

static_assert(BN == 128 || BN == 192 || BN == 256, "BLOCK_N: 128, 192 or 256 (a wgmma N, divides 768)");
static_assert(K_MAX % BK == 0 && KB_MAX >= 1, "K_MAX: a multiple of 128");
static_assert(BN <= 256, "TMA box: B slice of at most 256 rows");
static_assert(NUM_STAGES >= 2 && NUM_STAGES <= 16, "NUM_STAGES: 2 to 16");
static_assert(CPR % 4 == 0, "EPI_VEC: column groups come in quads of 4");
static_assert(128 * (PRODUCER_REGS + NUM_CONSUMERS * CONSUMER_REGS) <= ENTRY_REGS * NUM_THREADS,
              "setmaxnreg: the consumers would take more registers than the producer gives back");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "dynamic shared memory exceeds the 227 KiB per-block limit: "
              "fewer NUM_STAGES, a smaller BLOCK_N or K_MAX");

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
// The shared vocabulary (common/export.cuh); the family's own exports follow.
PELIB_EXPORT(smem_limit, PE_SMEM_LIMIT);
PELIB_EXPORT(cluster_x, 1);
PELIB_EXPORT(cluster_in_kernel, 0);   // no __cluster_dims__: the launch gives the cluster shape
PELIB_EXPORT(grid_kind, 2);           // persistent by column block: the grid is a multiple of N / tile_n
PELIB_EXPORT(tile_m, BM);
PELIB_EXPORT(tile_n, BN);
PELIB_EXPORT(pipeline_stages, NUM_STAGES);
PELIB_EXPORT(prefetch_tiles, PREFETCH_TILES);   // A rows asked of L2 this many tiles ahead of the ring (0: none)
PELIB_EXPORT(wait_kind, PE_WAIT_KIND_NOCALL);  // the call-free mbarrier waits' build (common/mbarrier.cuh)
PELIB_EXPORT(epi_warps, 4 * NUM_CONSUMERS);
PELIB_EXPORT(barrier_bytes, SMEM_USED - SMEM_BAR_OFF);
PELIB_EXPORT_TMAP(a, BM, BK, SWIZZLE, 1);        // A [M, K] FP8 as uint8
PELIB_EXPORT_TMAP(b, BN, BK, SWIZZLE, 1);  // B [N, K] FP8 as uint8 (outer box dims' product)
PELIB_EXPORT_TMAP(c, 32, 64, SWIZZLE, 2);        // C [M, N] BF16 (the map every stage receives)
PELIB_EXPORT(num_threads, NUM_THREADS);
PELIB_EXPORT(block_k, BK);
PELIB_EXPORT(wg_m, 1);
PELIB_EXPORT(max_k, K_MAX);
PELIB_EXPORT(pingpong, 1);
PELIB_EXPORT(epi_vec, EPI_VEC);
PELIB_EXPORT(desc_lbo, DESC_LBO);
PELIB_EXPORT(desc_sbo, DESC_SBO);
PELIB_EXPORT(k_advance_bytes, 32);
PELIB_EXPORT(desc_a_base0, gmma_smem_desc(0, DESC_LBO, DESC_SBO, SWIZZLE));
PELIB_EXPORT(producer_regs, PRODUCER_REGS);
PELIB_EXPORT(consumer_regs, CONSUMER_REGS);
// pelib.emulate TileParams (EXPORT_NAMES). The emulator drives A and B with one stage index: for the
// first tile of a CTA, K slice kb sits in ring slot kb and B slice kb, so a replay with at most
// NUM_STAGES K slices (K <= 512 at 4 stages) follows the kernel's addresses exactly.
PELIB_EXPORT(mma_arch, 90);
PELIB_EXPORT(mma_kind, 2);
PELIB_EXPORT(mma_m, 64);
PELIB_EXPORT(mma_n, BN);
PELIB_EXPORT(a_box_k, BK);
PELIB_EXPORT(a_box_m, BM);
PELIB_EXPORT(b_box_k, BK);
PELIB_EXPORT(b_box_n, BN);
PELIB_EXPORT(a_smem_offset, SMEM_A_OFF);
PELIB_EXPORT(b_smem_offset, SMEM_B_OFF);
PELIB_EXPORT(a_desc, gmma_smem_desc(SMEM_A_OFF, DESC_LBO, DESC_SBO, SWIZZLE));
PELIB_EXPORT(b_desc, gmma_smem_desc(SMEM_B_OFF, DESC_LBO, DESC_SBO, SWIZZLE));
PELIB_EXPORT(a_stage_stride, A_STAGE_BYTES);
PELIB_EXPORT(b_stage_stride, B_SLICE_BYTES);
PELIB_EXPORT(a_wg_stride, 64 * BK);

// One 16-B or 4-B output store (EPI_STREAM picks the cache policy).
PE_DEVICE void store16(u16* p, const u32 (&v)[4]) {
#if EPI_STREAM
  st_global_cs_v4(p, v[0], v[1], v[2], v[3]);
#else
  st_global_v4(p, v[0], v[1], v[2], v[3]);
#endif
}
PE_DEVICE void store4(u16* p, u32 v) {
#if EPI_STREAM
  st_global_cs_b32(p, v);
#else
  st_global_b32(p, v);
#endif
}

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
patch_embed_sm90(const __grid_constant__ CUtensorMap tmap_a,  // A [M, K] u8, box {128, 64}, SW128
                 const __grid_constant__ CUtensorMap tmap_b,  // B [N, K] u8, box {128, BLOCK_N}, SW128
                 const __grid_constant__ CUtensorMap tmap_c,  // unused (register epilogue)
                 const u16* __restrict__ comb,                // [196, N] bf16, bias + pos_embed
                 u16* __restrict__ c,                         // [M, N] bf16
                 int M, int N, int K, u64* timing) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  (void)tmap_c;
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((SMEM_ALIGN - (smem_u32(smem_raw) & (SMEM_ALIGN - 1))) & (SMEM_ALIGN - 1));
  u64* full = reinterpret_cast<u64*>(smem + SMEM_BAR_OFF);  // ring slot s holds A (TMA bytes landed)
  u64* empty = full + NUM_STAGES;                            // the warpgroup that read slot s is done
  u64* b_full = empty + NUM_STAGES;                          // the resident B landed
  u64* turn = b_full + 1;                                    // turn[w]: the other warpgroup issued a tile

  const int nbs = N / BN;                     // column blocks
  const int groups = (int)gridDim.x / nbs;    // CTAs per column block
  const int cta = blockIdx.x;
  if (cta >= groups * nbs) return;            // a grid that is not whole column blocks: the rest idle
  const int g = cta / nbs;
  const int n0 = (cta % nbs) * BN;
  const int m_tiles = (M + BM - 1) / BM;
  const int my_tiles = g < m_tiles ? (m_tiles - 1 - g) / groups + 1 : 0;  // local tile i: row tile g + i * groups
  const int num_kb = K / BK;                  // <= KB_MAX (the host checks)
  const int warp = threadIdx.x / 32;

  if (threadIdx.x == 0) {
    prefetch_tensormap(&tmap_a);
    prefetch_tensormap(&tmap_b);
    for (int s = 0; s < NUM_STAGES; ++s) {
      mbarrier_init(&full[s], 1);   // the producer's arrive.expect_tx
      mbarrier_init(&empty[s], 1);  // one arrive by the warpgroup that consumed the slot
    }
    mbarrier_init(b_full, 1);
    mbarrier_init(&turn[0], 1);
    mbarrier_init(&turn[1], 1);
    fence_barrier_init();
  }
  __syncthreads();

  if (warp < 4) {
    // ---- producer warpgroup: one thread loads B once, then streams A through the ring ----
    setmaxnreg_dec<PRODUCER_REGS>();
    if (warp == 0 && elect_one_sync()) {
      mbarrier_arrive_expect_tx(b_full, (u32)(num_kb * B_SLICE_BYTES));
      for (int kb = 0; kb < num_kb; ++kb)
        tma_load_2d(smem + SMEM_B_OFF + kb * B_SLICE_BYTES, &tmap_b, b_full, kb * BK, n0);
#if PREFETCH_TILES > 0
      for (int i = 0; i < PREFETCH_TILES && i < my_tiles; ++i)
        for (int kb = 0; kb < num_kb; ++kb) tma_prefetch_2d_l2(&tmap_a, kb * BK, (g + i * groups) * BM);
#endif
      int it = 0;
      for (int i = 0; i < my_tiles; ++i) {
        const int m0 = (g + i * groups) * BM;
        const u64 t0 = timing_now();
        u64 waited = 0;
#if PREFETCH_TILES > 0
        if (i + PREFETCH_TILES < my_tiles)
          for (int kb = 0; kb < num_kb; ++kb)
            tma_prefetch_2d_l2(&tmap_a, kb * BK, (g + (i + PREFETCH_TILES) * groups) * BM);
#endif
        for (int kb = 0; kb < num_kb; ++kb, ++it) {
          const int s = it % NUM_STAGES;
          const u32 phase = (it / NUM_STAGES) & 1;
          const u64 tw = timing_now();
          mbarrier_wait_parity_nocall(&empty[s], phase ^ 1, 1);  // a fresh barrier passes parity 1 at once
          waited += timing_now() - tw;
          mbarrier_arrive_expect_tx(&full[s], A_STAGE_BYTES);
          tma_load_2d(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, m0);
        }
        if (i < PE_TIMING_TILES) {
          timing_record(timing, i, PE_PHASE_PRODUCER_WAIT, t0, t0 + waited);
          PE_TIMING_END(timing, i, PE_PHASE_TMA_ISSUE, t0);
        }
      }
    }
  } else {
    // ---- consumer warpgroups: alternate tiles; mainloops in turn, epilogues overlapped ----
    setmaxnreg_inc<CONSUMER_REGS>();
    const int wg = warp / 4 - 1;               // 0 or 1
    const int tid = threadIdx.x % 128;
    const int wq = tid / 32, lane = tid % 32;
    const u32 q = lane % 4;
    const u64 desc_a0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_A_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
    const u64 desc_b0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_B_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
    mbarrier_wait_parity_nocall(b_full, 0, 4);
    float d[BN / 2];
    u32 cb[BN / 4];                            // comb for this thread's two rows: [h][column pairs]
    int n = 0;                                 // this warpgroup's tile count
    for (int i = wg; i < my_tiles; i += 2, ++n) {
      const int m0 = (g + i * groups) * BM;
      const u64 t_tile = timing_now();
      // Rows 16 wq + 8h + lane/4 of the tile (common/wgmma.cuh NOTES).
      const int row0 = m0 + 16 * wq + lane / 4;
      const u16* crow[2] = {comb + (size_t)comb_row(row0) * N + n0, comb + (size_t)comb_row(row0 + 8) * N + n0};
#if COMB_EARLY
#if EPI_VEC
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int gq = 0; gq < CPR / 4; ++gq) {
          u32 v[4];
          ld_global_nc_v4(crow[h] + 32 * gq + 8 * q, v);  // columns 8(4gq+q)..+7: transposed layout
#pragma unroll
          for (int t = 0; t < 4; ++t) cb[h * (CPR) + 4 * gq + t] = v[t];
        }
#else
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < CPR; ++j) cb[h * CPR + j] = ld_global_nc_b32(crow[h] + 8 * j + 2 * q);
#endif
#endif
      // Wait for the turn: the other warpgroup has issued its previous tile (WG 0's first tile goes).
      const u64 t_turn = timing_now();
      mbarrier_wait_parity_nocall(&turn[wg], wg == 0 ? ((n + 1) & 1) : (n & 1), 5);
      const u64 t_k = timing_now();
      u64 waited = 0;
      const int it0 = i * num_kb;
      for (int kb = 0; kb < num_kb; ++kb) {
        const int it = it0 + kb;
        const int s = it % NUM_STAGES;
        const u32 phase = (it / NUM_STAGES) & 1;
        const u64 tw = timing_now();
        mbarrier_wait_parity_nocall(&full[s], phase, 2);
        waited += timing_now() - tw;
        wgmma_fence_operand(d);
        warpgroup_arrive();
#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks) {
          const u32 a_off = s * A_STAGE_BYTES + ks * 32;  // K step: +32 B inside the swizzle atom
          const u32 b_off = kb * B_SLICE_BYTES + ks * 32;
          wgmma_m64nNk32_f32_e4m3_e4m3<BN>(d, desc_a0 + (a_off >> 4), desc_b0 + (b_off >> 4),
                                           (kb > 0 || ks > 0) ? 1u : 0u);
        }
        wgmma_commit_group();
        wgmma_wait_group<1>();               // the previous slice's wgmmas are done: free its slot
        wgmma_fence_operand(d);
        if (kb > 0 && tid == 0) mbarrier_arrive(&empty[(it - 1) % NUM_STAGES]);
      }
      if (tid == 0) mbarrier_arrive(&turn[wg ^ 1]);  // every wgmma of this tile is issued: the other's turn
      wgmma_wait_group<0>();
      wgmma_fence_operand(d);
      if (tid == 0) mbarrier_arrive(&empty[(it0 + num_kb - 1) % NUM_STAGES]);
      const u64 t_epi = timing_now();

      // ---- epilogue from registers: + comb, one BF16 rounding, straight to global memory ----
#if !COMB_EARLY
#if EPI_VEC
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int gq = 0; gq < CPR / 4; ++gq) {
          u32 v[4];
          ld_global_nc_v4(crow[h] + 32 * gq + 8 * q, v);
#pragma unroll
          for (int t = 0; t < 4; ++t) cb[h * (CPR) + 4 * gq + t] = v[t];
        }
#else
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < CPR; ++j) cb[h * CPR + j] = ld_global_nc_b32(crow[h] + 8 * j + 2 * q);
#endif
#endif
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        u16* orow = c + (size_t)row * N + n0;
        const bool ok = row < M;
#if EPI_VEC
#pragma unroll
        for (int gq = 0; gq < CPR / 4; ++gq) {
          u32 cv[4] = {cb[h * CPR + 4 * gq], cb[h * CPR + 4 * gq + 1], cb[h * CPR + 4 * gq + 2],
                       cb[h * CPR + 4 * gq + 3]};
          wgmma_quad_transpose(cv, q);       // comb pairs of columns 8(4gq+u) + 2q, u = 0..3
          u32 v[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int j = 4 * gq + u;
            v[u] = f32x2_to_bf16x2(d[4 * j + 2 * h] + bf16lo_to_f32(cv[u]),
                                   d[4 * j + 2 * h + 1] + bf16hi_to_f32(cv[u]));
          }
          wgmma_quad_transpose(v, q);        // now columns 8(4gq+q) + 0..7 of this row
          if (ok) store16(orow + 32 * gq + 8 * q, v);
        }
#else
#pragma unroll
        for (int j = 0; j < CPR; ++j) {
          const u32 cv = cb[h * CPR + j];
          const u32 v = f32x2_to_bf16x2(d[4 * j + 2 * h] + bf16lo_to_f32(cv), d[4 * j + 2 * h + 1] + bf16hi_to_f32(cv));
          if (ok) store4(orow + 8 * j + 2 * q, v);
        }
#endif
      }
      if (lane == 0 && n < PE_TIMING_TILES) {
        timing_record(timing, n, PE_PHASE_EPI_WAIT, t_turn, t_k);
        timing_record(timing, n, PE_PHASE_TMA_WAIT, t_k, t_k + waited);
        timing_record(timing, n, PE_PHASE_KLOOP, t_k, t_epi);
        PE_TIMING_END(timing, n, PE_PHASE_EPI_PHASE1, t_epi);
        PE_TIMING_END(timing, n, PE_PHASE_TILE, t_tile);
      }
    }
  }
}
