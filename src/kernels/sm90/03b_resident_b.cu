// Stage 03b — B resident in shared memory: a CTA owns one column block and loads its B once; only A streams.
// Parent: sm90/03a_register_epilogue
//
// What changes: in 03a every 128 x 256 tile streams its A rows AND its 256 x 768 slice of B from L2
// (half of B with the multicast): 4.3 GB of L2 -> SM traffic over the problem. Here a CTA owns one
// BLOCK_N-column block of the output for its whole life: its producer loads that block's B (BLOCK_N x K,
// 192 KiB at 256 x 768, K_MAX = 768: the host refuses a larger K) into shared memory once, on b_full;
// afterwards only A streams, through a ring of 128-row x 128-B stages (16 KiB; 2 fit beside B). The
// wgmma read B slice kb of the resident B. The grid is whole column blocks (grid_kind 2): CTA c takes
// column block c % NB and row tiles g, g + G/NB, g + 2G/NB, ... (g = c / NB, NB = N / BLOCK_N), so
// the NB CTAs that read the same A rows run side by side and A comes from DRAM once and from L2 for the
// other NB - 1. L2 -> SM traffic drops to A once per column block (3 x 0.71 GB at N = 768). The cluster
// and its multicast go: there is no B left to share.
// Why: B traffic was three quarters of 03a's L2 -> SM bytes. The cost: two A stages in flight instead
// of four, and both consumer warpgroups still finish their tile together, so the tensor cores idle
// during every epilogue (stage 03c).
// Measured: results/2026-11-24-h100/sm90-stages.json: 1.285 ms against 1.189 ms for 03a (H100 80GB HBM3, 2026-11-24);
// results/2026-11-24-h200/sm90-split-stages.json: 1.278 ms against 1.095 ms (H200, 2026-11-24): two A stages are too few to
// hide the loads while both warpgroups wait on the same slice.
// Run: python -m pelib.stage sm90/03b_resident_b
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
#define NUM_STAGES 2       // A ring: 16 KiB a stage at BM = 128; 2 fit beside a 192 KiB B
#endif
#ifndef EPI_VEC
#define EPI_VEC 1          // 1: quad transpose + 16-B stores (and 16-B comb loads); 0: 4-B pairs
#endif
#ifndef EPI_STREAM
#define EPI_STREAM 0       // 1: st.global.cs (evict-first) output stores
#endif
#ifndef NUM_CONSUMERS
#define NUM_CONSUMERS 2    // consumer warpgroups, each 64 * WG_M output rows
#endif
#ifndef WG_M
#define WG_M 1             // m64 wgmma slices per consumer warpgroup
#endif
#if defined(TIMING) && !defined(PE_TIMING_WARPS)
#define PE_TIMING_WARPS (4 * (NUM_CONSUMERS + 1))
#endif
#include "common/timing.cuh"

constexpr int BN = BLOCK_N;
constexpr int BK = 128;                       // one 128-byte swizzle atom of FP8 along K
constexpr int BM = NUM_CONSUMERS * WG_M * 64;
constexpr int KB_MAX = K_MAX / BK;            // resident B slices
constexpr int NUM_THREADS = 128 * (NUM_CONSUMERS + 1);
constexpr int A_STAGE_BYTES = BM * BK;
constexpr int B_SLICE_BYTES = BN * BK;        // one K slice of the resident B
constexpr int SMEM_ALIGN = 1024;              // SW128 atoms start 1024-B aligned (base_offset stays 0)
constexpr int SMEM_B_OFF = 0;
constexpr int SMEM_A_OFF = KB_MAX * B_SLICE_BYTES;
constexpr int SMEM_BAR_OFF = SMEM_A_OFF + NUM_STAGES * A_STAGE_BYTES;
constexpr int SMEM_USED = SMEM_BAR_OFF + 8 * (2 * NUM_STAGES + 1);  // full[], empty[], b_full
constexpr int SMEM_BYTES = SMEM_ALIGN + SMEM_USED;
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024, SWIZZLE = 128;
constexpr int CPR = BN / 8;                   // accumulator column groups of 8 (j) per row
// setmaxnreg budgets (CUTLASS sm90 cooperative kernel: 40 / 232 for 1 + 2 warpgroups): what the
// producer gives back is what the consumers take, 128 * (P + NUM_CONSUMERS * C) <= ENTRY_REGS * threads
// (ptxas gives each thread the __launch_bounds__ cap at entry when the kernel uses setmaxnreg).
constexpr u32 ENTRY_REGS = (65536u / NUM_THREADS) & ~7u;
constexpr u32 PRODUCER_REGS = NUM_CONSUMERS == 1 ? 56 : NUM_CONSUMERS == 2 ? 40 : 32;
constexpr u32 CONSUMER_REGS_RAW = ((ENTRY_REGS * NUM_THREADS - PRODUCER_REGS * 128) / (NUM_CONSUMERS * 128)) & ~7u;
constexpr u32 CONSUMER_REGS = CONSUMER_REGS_RAW > 256 ? 256 : CONSUMER_REGS_RAW;

static_assert(BN % 64 == 0 && BN <= 256, "BLOCK_N: a wgmma N of 64..256");
static_assert(BM <= 256, "TMA box: A tile of at most 256 rows (NUM_CONSUMERS * WG_M * 64)");
static_assert(WG_M * BN <= 256, "accumulators: at most 128 FP32 registers per consumer thread");
static_assert(NUM_CONSUMERS >= 1 && NUM_CONSUMERS <= 3, "NUM_CONSUMERS: 1 to 3 consumer warpgroups");
static_assert(128 * (PRODUCER_REGS + NUM_CONSUMERS * CONSUMER_REGS) <= ENTRY_REGS * NUM_THREADS,
              "setmaxnreg: the consumers would take more registers than the producer gives back");
static_assert(K_MAX % BK == 0 && KB_MAX >= 1, "K_MAX: a multiple of 128");
static_assert(CPR % 4 == 0, "EPI_VEC: column groups come in quads of 4");
static_assert(WG_M == 1, "the register epilogue holds one m64 slice per consumer warpgroup: WG_M = 1");
static_assert(NUM_STAGES >= 2 && NUM_STAGES <= 8, "NUM_STAGES: 2 to 8");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "dynamic shared memory exceeds the 227 KiB per-block limit");

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
// The shared vocabulary (common/export.cuh); the family's own exports follow.
PELIB_EXPORT(smem_limit, PE_SMEM_LIMIT);
PELIB_EXPORT(cluster_x, 1);
PELIB_EXPORT(cluster_in_kernel, 0);   // no __cluster_dims__: the launch gives the cluster shape
PELIB_EXPORT(grid_kind, 2);           // persistent by column block: the grid is a multiple of N / tile_n
PELIB_EXPORT(tile_m, BM);
PELIB_EXPORT(tile_n, BN);
PELIB_EXPORT(pipeline_stages, NUM_STAGES);
PELIB_EXPORT(wait_kind, PE_WAIT_KIND_NOCALL);  // the call-free mbarrier waits' build (common/mbarrier.cuh)
PELIB_EXPORT(epi_warps, 4 * NUM_CONSUMERS);
PELIB_EXPORT(barrier_bytes, SMEM_USED - SMEM_BAR_OFF);
PELIB_EXPORT_TMAP(a, BM, BK, SWIZZLE, 1);        // A [M, K] FP8 as uint8
PELIB_EXPORT_TMAP(b, BN, BK, SWIZZLE, 1);  // B [N, K] FP8 as uint8 (outer box dims' product)
PELIB_EXPORT_TMAP(c, 32, 64, SWIZZLE, 2);        // C [M, N] BF16 (the map every stage receives)
PELIB_EXPORT(num_threads, NUM_THREADS);
PELIB_EXPORT(block_k, BK);
PELIB_EXPORT(wg_m, WG_M);
PELIB_EXPORT(max_k, K_MAX);
PELIB_EXPORT(epi_vec, EPI_VEC);
PELIB_EXPORT(desc_lbo, DESC_LBO);
PELIB_EXPORT(desc_sbo, DESC_SBO);
PELIB_EXPORT(k_advance_bytes, 32);
PELIB_EXPORT(desc_a_base0, gmma_smem_desc(0, DESC_LBO, DESC_SBO, SWIZZLE));
PELIB_EXPORT(producer_regs, PRODUCER_REGS);
PELIB_EXPORT(consumer_regs, CONSUMER_REGS);
// pelib.emulate TileParams (EXPORT_NAMES). The emulator drives A and B with one stage index: for the
// first tile of a CTA, K slice kb sits in ring slot kb and B slice kb, so a replay with at most
// NUM_STAGES K slices (K <= 256 at 2 stages) follows the kernel's addresses exactly.
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
patch_embed_sm90(const __grid_constant__ CUtensorMap tmap_a,  // A [M, K] u8, box {BK, BM}, SW128
                 const __grid_constant__ CUtensorMap tmap_b,  // B [N, K] u8, box {BK, BLOCK_N}, SW128
                 const __grid_constant__ CUtensorMap tmap_c,  // unused (register epilogue)
                 const u16* __restrict__ comb,                // [196, N] bf16, bias + pos_embed
                 u16* __restrict__ c,                         // [M, N] bf16
                 int M, int N, int K, u64* timing) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  (void)tmap_c;
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((SMEM_ALIGN - (smem_u32(smem_raw) & (SMEM_ALIGN - 1))) & (SMEM_ALIGN - 1));
  u64* full = reinterpret_cast<u64*>(smem + SMEM_BAR_OFF);  // stage s holds data (TMA bytes landed)
  u64* empty = full + NUM_STAGES;                            // every consumer has read stage s
  u64* b_full = empty + NUM_STAGES;                          // the resident B landed

  const int warp = threadIdx.x / 32;
  const int nbs = N / BN;                     // column blocks
  const int groups = (int)gridDim.x / nbs;    // CTAs per column block
  const int cta = blockIdx.x;
  if (cta >= groups * nbs) return;            // a grid that is not whole column blocks: the rest idle
  const int g = cta / nbs;
  const int n0 = (cta % nbs) * BN;
  const int m_tiles = (M + BM - 1) / BM;
  const int my_tiles = g < m_tiles ? (m_tiles - 1 - g) / groups + 1 : 0;  // local tile i: row tile g + i * groups
  const int num_kb = K / BK;                  // <= KB_MAX (the host checks)

  if (threadIdx.x == 0) {
    prefetch_tensormap(&tmap_a);
    prefetch_tensormap(&tmap_b);
    for (int s = 0; s < NUM_STAGES; ++s) {
      mbarrier_init(&full[s], 1);               // the producer's arrive.expect_tx
      mbarrier_init(&empty[s], NUM_CONSUMERS);  // one arrive per consumer warpgroup
    }
    mbarrier_init(b_full, 1);                   // the producer's arrive.expect_tx for all of B
    fence_barrier_init();
  }
  __syncthreads();

  if (warp < 4) {
    // ---- producer warpgroup: registers back to the pool; one thread loads B once, then streams A ----
    setmaxnreg_dec<PRODUCER_REGS>();
    if (warp == 0 && elect_one_sync()) {
      mbarrier_arrive_expect_tx(b_full, (u32)(num_kb * B_SLICE_BYTES));
      for (int kb = 0; kb < num_kb; ++kb)
        tma_load_2d(smem + SMEM_B_OFF + kb * B_SLICE_BYTES, &tmap_b, b_full, kb * BK, n0);
      int it = 0;  // ring position, continued across tiles
      for (int i = 0; i < my_tiles; ++i) {
        const int m0 = (g + i * groups) * BM;
        const u64 t0 = timing_now();
        u64 waited = 0;
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
    // ---- consumer warpgroups: wgmma on their rows of each stage, then the epilogue ----
    setmaxnreg_inc<CONSUMER_REGS>();
    const int wg = warp / 4 - 1;
    const int tid = threadIdx.x % 128;
    const u64 desc_a0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_A_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
    const u64 desc_b0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_B_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
    mbarrier_wait_parity_nocall(b_full, 0, 4);
    float d[WG_M][BN / 2];
    int it = 0;  // ring position, continued across tiles
    for (int i = 0; i < my_tiles; ++i) {
      const int m0 = (g + i * groups) * BM;
      const u64 t_tile = timing_now();
      u64 waited = 0;
      for (int kb = 0; kb < num_kb; ++kb, ++it) {
        const int s = it % NUM_STAGES;
        const u32 phase = (it / NUM_STAGES) & 1;
        const u64 tw = timing_now();
        mbarrier_wait_parity_nocall(&full[s], phase, 2);
        waited += timing_now() - tw;
#pragma unroll
        for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);
        warpgroup_arrive();
#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks)
#pragma unroll
          for (int mi = 0; mi < WG_M; ++mi) {
            // Rows (wg * WG_M + mi) * 64 of the A stage; K step ks = +32 B inside the swizzle atom.
            const u32 a_off = s * A_STAGE_BYTES + (wg * WG_M + mi) * 64 * BK + ks * 32;
            const u32 b_off = kb * B_SLICE_BYTES + ks * 32;  // B slice kb of the resident B
            wgmma_m64nNk32_f32_e4m3_e4m3<BN>(d[mi], desc_a0 + (a_off >> 4), desc_b0 + (b_off >> 4),
                                             (kb > 0 || ks > 0) ? 1u : 0u);
          }
        wgmma_commit_group();
        wgmma_wait_group<1>();  // the previous slice's wgmmas are done: free its stage
#pragma unroll
        for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);
        if (kb > 0 && tid == 0) mbarrier_arrive(&empty[(it - 1) % NUM_STAGES]);
      }
      wgmma_wait_group<0>();
#pragma unroll
      for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);
      if (tid == 0) mbarrier_arrive(&empty[(it - 1) % NUM_STAGES]);
      const u64 t_epi = timing_now();

      // ---- epilogue from registers: + comb, one BF16 rounding, straight to global memory ----
      const int wq = tid / 32, lane = tid % 32;
      const u32 q = lane % 4;
      // Rows 16 wq + 8h + lane/4 of this warpgroup's 64 rows of the tile (common/wgmma.cuh NOTES).
      const int row0 = m0 + wg * 64 + 16 * wq + lane / 4;
      const u16* crow[2] = {comb + (size_t)comb_row(row0) * N + n0, comb + (size_t)comb_row(row0 + 8) * N + n0};
      u32 cb[BN / 4];                        // comb for this thread's two rows: [h][column pairs]
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
            v[u] = f32x2_to_bf16x2(d[0][4 * j + 2 * h] + bf16lo_to_f32(cv[u]),
                                   d[0][4 * j + 2 * h + 1] + bf16hi_to_f32(cv[u]));
          }
          wgmma_quad_transpose(v, q);        // now columns 8(4gq+q) + 0..7 of this row
          if (ok) store16(orow + 32 * gq + 8 * q, v);
        }
#else
#pragma unroll
        for (int j = 0; j < CPR; ++j) {
          const u32 cv = cb[h * CPR + j];
          const u32 v = f32x2_to_bf16x2(d[0][4 * j + 2 * h] + bf16lo_to_f32(cv), d[0][4 * j + 2 * h + 1] + bf16hi_to_f32(cv));
          if (ok) store4(orow + 8 * j + 2 * q, v);
        }
#endif
      }
      if (lane == 0 && i < PE_TIMING_TILES) {
        timing_record(timing, i, PE_PHASE_TMA_WAIT, t_tile, t_tile + waited);
        timing_record(timing, i, PE_PHASE_KLOOP, t_tile, t_epi);
        PE_TIMING_END(timing, i, PE_PHASE_EPI_PHASE1, t_epi);
        PE_TIMING_END(timing, i, PE_PHASE_TILE, t_tile);
      }
    }  // tile loop
  }
}
