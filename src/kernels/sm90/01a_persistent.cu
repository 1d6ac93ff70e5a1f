// Stage 01a — persistent CTAs: one CTA per SM walks the output tiles; the ring runs on across tiles.
// Parent: sm90/01_warp_specialized
//
// What changes: 01 launches one CTA per tile (21,756 at BM=128, BN=256), so every tile pays the CTA
// start (barrier init, tensor-map fetch, the first loads with an empty pipeline) and the tensor cores
// idle while the consumers store. Here the grid is one CTA per SM and every role walks the same static
// list of tiles (common/tile_map.cuh StaticTileScheduler: tiles c, c + grid, ..., N fastest). The ring
// position it (slot it % NUM_STAGES, parity (it / NUM_STAGES) & 1) continues across tiles, so the
// producer loads the next tile's stages while the consumers run the epilogue of this one.
// Why: the CTA start is paid once per SM instead of once per tile, and the producer keeps the ring full
// across the tile boundary.
// Measured: results/2026-11-24-h100/sm90-stages.json: 1.731 ms against 1.965 ms for 01 (H100 80GB HBM3, 2026-11-24);
// results/2026-11-24-h200/sm90-split-stages.json: 1.575 ms against 1.918 ms for 01 (H200,
// 2026-11-24); on the H100 (2026-11-23) the same code path, 02 with CLUSTER_M=1, ran 1.773 ms
// (results/2026-11-23-h100/hopper-sweep-2026-11-23T055530-nvidia-h100-80gb-hbm3.json).
// Run: python -m pelib.stage sm90/01a_persistent
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/cutensormap.cuh"
#include "common/cluster.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/descriptors.cuh"
#include "common/wgmma.cuh"
#include "common/epilogue.cuh"
#include "common/tile_map.cuh"

#ifndef BLOCK_N
#define BLOCK_N 256        // output columns per CTA = the wgmma N
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 4       // 48 KiB a stage at BN = 256: 4 fit the 227 KiB limit
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
constexpr int NUM_THREADS = 128 * (NUM_CONSUMERS + 1);
constexpr int A_STAGE_BYTES = BM * BK;
constexpr int B_STAGE_BYTES = BN * BK;
constexpr int STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;  // transaction bytes per stage
constexpr int SMEM_ALIGN = 1024;              // SW128 atoms start 1024-B aligned (base_offset stays 0)
constexpr int SMEM_A_OFF = 0;
constexpr int SMEM_B_OFF = NUM_STAGES * A_STAGE_BYTES;
constexpr int SMEM_BAR_OFF = NUM_STAGES * STAGE_BYTES;
constexpr int SMEM_USED = SMEM_BAR_OFF + 8 * 2 * NUM_STAGES;
constexpr int SMEM_BYTES = SMEM_ALIGN + SMEM_USED;
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024, SWIZZLE = 128;
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
static_assert(NUM_STAGES >= 2 && NUM_STAGES <= 8, "NUM_STAGES: 2 to 8");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "dynamic shared memory exceeds the 227 KiB per-block limit");

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
// The shared vocabulary (common/export.cuh); the family's own exports follow.
PELIB_EXPORT(smem_limit, PE_SMEM_LIMIT);
PELIB_EXPORT(cluster_x, 1);
PELIB_EXPORT(cluster_in_kernel, 0);   // no __cluster_dims__: the launch gives the cluster shape
PELIB_EXPORT(grid_kind, 1);           // persistent: grid = resident clusters, static schedule
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
PELIB_EXPORT(desc_lbo, DESC_LBO);
PELIB_EXPORT(desc_sbo, DESC_SBO);
PELIB_EXPORT(k_advance_bytes, 32);
PELIB_EXPORT(desc_a_base0, gmma_smem_desc(0, DESC_LBO, DESC_SBO, SWIZZLE));
PELIB_EXPORT(producer_regs, PRODUCER_REGS);
PELIB_EXPORT(consumer_regs, CONSUMER_REGS);
// pelib.emulate TileParams (EXPORT_NAMES): offsets relative to the 1024-B aligned dynamic base.
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
PELIB_EXPORT(b_stage_stride, B_STAGE_BYTES);
PELIB_EXPORT(a_wg_stride, 64 * BK);

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
patch_embed_sm90(const __grid_constant__ CUtensorMap tmap_a,  // A [M, K] u8, box {BK, BM}, SW128
                 const __grid_constant__ CUtensorMap tmap_b,  // B [N, K] u8, box {BK, box_b_rows}, SW128
                 const __grid_constant__ CUtensorMap tmap_c,  // C [M, N] bf16 (TMA-store stages only)
                 const u16* __restrict__ comb,                // [196, N] bf16, bias + pos_embed
                 u16* __restrict__ c,                         // [M, N] bf16
                 int M, int N, int K, u64* timing) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  (void)tmap_c;
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((SMEM_ALIGN - (smem_u32(smem_raw) & (SMEM_ALIGN - 1))) & (SMEM_ALIGN - 1));
  u64* full = reinterpret_cast<u64*>(smem + SMEM_BAR_OFF);  // stage s holds data (TMA bytes landed)
  u64* empty = full + NUM_STAGES;                            // every consumer has read stage s

  const int warp = threadIdx.x / 32;
  const int n_tiles = N / BN;
  const int total_tiles = ((M + BM - 1) / BM) * n_tiles;
  const int num_kb = K / BK;

  if (threadIdx.x == 0) {
    prefetch_tensormap(&tmap_a);
    prefetch_tensormap(&tmap_b);
    for (int s = 0; s < NUM_STAGES; ++s) {
      mbarrier_init(&full[s], 1);               // the producer's arrive.expect_tx
      mbarrier_init(&empty[s], NUM_CONSUMERS);  // one arrive per consumer warpgroup
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp < 4) {
    // ---- producer warpgroup: registers back to the pool, one thread issues every load ----
    setmaxnreg_dec<PRODUCER_REGS>();
    if (warp == 0 && elect_one_sync()) {
      int it = 0;  // ring position, continued across tiles
      u32 slot = 0;
      for (StaticTileScheduler sched(blockIdx.x, gridDim.x, total_tiles, n_tiles);
           sched.valid(); sched.advance(), ++slot) {
        const TileCoord tc = sched.coord(0, BM, BN, 1);
        const u64 t0 = timing_now();
        u64 waited = 0;
        for (int kb = 0; kb < num_kb; ++kb, ++it) {
          const int s = it % NUM_STAGES;
          const u32 phase = (it / NUM_STAGES) & 1;
          const u64 tw = timing_now();
          mbarrier_wait_parity_nocall(&empty[s], phase ^ 1, 1);  // a fresh barrier passes parity 1 at once
          waited += timing_now() - tw;
          mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);
          tma_load_2d(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, tc.m0);
          tma_load_2d(smem + SMEM_B_OFF + s * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, tc.n0);
        }
        timing_record(timing, slot, PE_PHASE_PRODUCER_WAIT, t0, t0 + waited);
        PE_TIMING_END(timing, slot, PE_PHASE_TMA_ISSUE, t0);
      }
    }
  } else {
    // ---- consumer warpgroups: wgmma on their rows of each stage, then the epilogue ----
    setmaxnreg_inc<CONSUMER_REGS>();
    const int wg = warp / 4 - 1;
    const int tid = threadIdx.x % 128;
    const u64 desc_a0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_A_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
    const u64 desc_b0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_B_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
    float d[WG_M][BN / 2];
    int it = 0;  // ring position, continued across tiles
    u32 slot = 0;
    for (StaticTileScheduler sched(blockIdx.x, gridDim.x, total_tiles, n_tiles);
         sched.valid(); sched.advance(), ++slot) {
      const TileCoord tc = sched.coord(0, BM, BN, 1);
      const int m0 = tc.m0, n0 = tc.n0;
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
            const u32 b_off = s * B_STAGE_BYTES + ks * 32;
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

      // Epilogue from registers (as in 00): rows 16w + l/4 (+8), column pairs 8j + 2(l%4).
      const int wq = tid / 32, lane = tid % 32;
#pragma unroll
      for (int mi = 0; mi < WG_M; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + (wg * WG_M + mi) * 64 + 16 * wq + 8 * h + lane / 4;
          if (row >= M) continue;
          const u16* crow = comb + (size_t)comb_row(row) * N + n0 + 2 * (lane % 4);
          u16* orow = c + (size_t)row * N + n0 + 2 * (lane % 4);
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
            const u32 cb = *reinterpret_cast<const u32*>(crow + 8 * j);
            const float lo = d[mi][4 * j + 2 * h] + bf16lo_to_f32(cb);
            const float hi = d[mi][4 * j + 2 * h + 1] + bf16hi_to_f32(cb);
            *reinterpret_cast<u32*>(orow + 8 * j) = f32x2_to_bf16x2(lo, hi);
          }
        }
      }
      if (lane == 0) {
        timing_record(timing, slot, PE_PHASE_TMA_WAIT, t_tile, t_tile + waited);
        timing_record(timing, slot, PE_PHASE_KLOOP, t_tile, t_epi);
        PE_TIMING_END(timing, slot, PE_PHASE_EPI_PHASE1, t_epi);
        PE_TIMING_END(timing, slot, PE_PHASE_TILE, t_tile);
      }
    }  // tile loop
  }
}
