// Stage 00b — warp specialization: a producer warpgroup feeds the ring, a consumer warpgroup multiplies.
// Parent: sm90/00a_smem_ring
//
// What changes: the ring gets a warpgroup of its own. Warpgroup 0 only loads: one elected thread
// waits for a free stage (empty[s]), announces its bytes (arrive.expect_tx on full[s]) and starts the
// TMA loads of A (BM x 128 B) and B (BN x 128 B); it runs up to NUM_STAGES slices ahead. The consumer
// warpgroup (NUM_CONSUMERS = 1, its WG_M = 2 m64 slices: the 128 x 128 tile of 00) waits for full[s],
// issues its wgmma, keeps one wgmma group in flight (wgmma.wait_group 1) and frees the slice it
// finished reading with one arrive on empty[s] (count NUM_CONSUMERS). The consumer code no longer
// issues loads, and the producer no longer waits on wgmma: each role waits on its own barrier only.
// Still one tile per CTA and the register epilogue of 00. Structure after pranjalssh/fast.cu
// examples/matmul/matmul_11.cuh and CUTLASS KernelTmaWarpSpecializedCooperative.
// Why: the loads no longer sit in the consumer's instruction stream between its wgmma; the producer
// runs ahead as far as the ring allows. The TIMING build now records the producer's waits (producer
// wait, TMA issue) and the consumer's (TMA wait, K loop, epilogue) separately.
// Measured: results/2026-11-24-h100/sm90-stages.json: 2.190 ms (H100 80GB HBM3, 2026-11-24);
// results/2026-11-24-h200/sm90-split-stages.json: 2.156 ms (H200, 2026-11-24): 256 threads and 132 KiB still allow one CTA per SM, so
// the tile's prologue and epilogue still leave the tensor cores idle.
// Run: python -m pelib.stage sm90/00b_producer_warpgroup
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
#define BLOCK_N 128        // output columns per CTA = the wgmma N
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 4       // 32 KiB a stage at BM = BN = 128
#endif
#ifndef NUM_CONSUMERS
#define NUM_CONSUMERS 1    // consumer warpgroups, each 64 * WG_M output rows
#endif
#ifndef WG_M
#define WG_M 2             // m64 wgmma slices per consumer warpgroup
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

static_assert(BN % 64 == 0 && BN <= 256, "BLOCK_N: a wgmma N of 64..256");
static_assert(BM <= 256, "TMA box: A tile of at most 256 rows (NUM_CONSUMERS * WG_M * 64)");
static_assert(WG_M * BN <= 256, "accumulators: at most 128 FP32 registers per consumer thread");
static_assert(NUM_CONSUMERS >= 1 && NUM_CONSUMERS <= 3, "NUM_CONSUMERS: 1 to 3 consumer warpgroups");
static_assert(NUM_STAGES >= 2 && NUM_STAGES <= 8, "NUM_STAGES: 2 to 8");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "dynamic shared memory exceeds the 227 KiB per-block limit");

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
// The shared vocabulary (common/export.cuh); the family's own exports follow.
PELIB_EXPORT(smem_limit, PE_SMEM_LIMIT);
PELIB_EXPORT(cluster_x, 1);
PELIB_EXPORT(cluster_in_kernel, 0);   // no __cluster_dims__: the launch gives the cluster shape
PELIB_EXPORT(grid_kind, 0);           // one CTA per output tile
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
  const int m0 = (blockIdx.x / n_tiles) * BM;  // N fastest: the N tiles of one row block share A in L2
  const int n0 = (blockIdx.x % n_tiles) * BN;
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
    // ---- producer warpgroup: one thread issues every load ----
    if (warp == 0 && elect_one_sync()) {
      const u64 t0 = timing_now();
      u64 waited = 0;
      for (int kb = 0; kb < num_kb; ++kb) {
        const int s = kb % NUM_STAGES;
        const u32 phase = (kb / NUM_STAGES) & 1;
        const u64 tw = timing_now();
        mbarrier_wait_parity_nocall(&empty[s], phase ^ 1, 1);  // a fresh barrier passes parity 1 at once
        waited += timing_now() - tw;
        mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);
        tma_load_2d(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, m0);
        tma_load_2d(smem + SMEM_B_OFF + s * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, n0);
      }
      timing_record(timing, 0, PE_PHASE_PRODUCER_WAIT, t0, t0 + waited);
      PE_TIMING_END(timing, 0, PE_PHASE_TMA_ISSUE, t0);
    }
  } else {
    // ---- consumer warpgroups: wgmma on their rows of each stage, then the epilogue ----
    const int wg = warp / 4 - 1;
    const int tid = threadIdx.x % 128;
    const u64 t_tile = timing_now();
    u64 waited = 0;

    float d[WG_M][BN / 2];
#pragma unroll
    for (int mi = 0; mi < WG_M; ++mi)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[mi][i] = 0.f;

    const u64 desc_a0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_A_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
    const u64 desc_b0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_B_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
    for (int kb = 0; kb < num_kb; ++kb) {
      const int s = kb % NUM_STAGES;
      const u32 phase = (kb / NUM_STAGES) & 1;
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
      if (kb > 0 && tid == 0) mbarrier_arrive(&empty[(kb - 1) % NUM_STAGES]);
    }
    wgmma_wait_group<0>();
#pragma unroll
    for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);
    if (tid == 0) mbarrier_arrive(&empty[(num_kb - 1) % NUM_STAGES]);
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
      timing_record(timing, 0, PE_PHASE_TMA_WAIT, t_tile, t_tile + waited);
      timing_record(timing, 0, PE_PHASE_KLOOP, t_tile, t_epi);
      PE_TIMING_END(timing, 0, PE_PHASE_EPI_PHASE1, t_epi);
      PE_TIMING_END(timing, 0, PE_PHASE_TILE, t_tile);
    }
  }
}
