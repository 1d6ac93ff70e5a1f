// Stage 00a — a NUM_STAGES-deep shared-memory ring: copy and math overlap, still one warpgroup.
// Parent: sm90/00_tma_wgmma
//
// What changes: shared memory holds NUM_STAGES (4) stages of A and B, each with its own full[s]
// mbarrier. Thread 0 fills the ring before the mainloop; then, for each K slice, the warpgroup waits
// on full[s], issues its wgmma, commits, and waits only for the PREVIOUS slice's wgmma group
// (wgmma.wait_group 1, no longer 0); as soon as that group has completed, no wgmma reads its stage any
// more, and thread 0 refills it with the slice NUM_STAGES ahead. No empty barrier is needed: the thread
// that refills a stage is the one that saw its readers finish. The wgmma of a warpgroup is one
// collective operation, so its completion seen from warp 0 covers the reads of all four warps (CUTLASS's
// consumer_release signals from one thread per warpgroup on the same grounds).
// Why: in 00 the tensor cores idle during every TMA round trip and the TMA idles during every wgmma;
// with the ring the next slices are already in flight while this one multiplies.
// Measured: results/2026-11-24-h100/sm90-stages.json: 2.122 ms against 1.749 ms for 00 (H100 80GB HBM3, 2026-11-24);
// results/2026-11-24-h200/sm90-split-stages.json: 2.088 ms against 1.676 ms (H200, 2026-11-24): 132 KiB of shared memory allow
// one CTA per SM where 00 ran three, whose loads and epilogues overlapped each other's mainloops.
// Run: python -m pelib.stage sm90/00a_smem_ring
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/cutensormap.cuh"
#include "common/cluster.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/descriptors.cuh"
#include "common/wgmma.cuh"
#include "common/epilogue.cuh"
#include "common/timing.cuh"

#ifndef BLOCK_N
#define BLOCK_N 128  // output columns per CTA = the wgmma N
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 4       // 32 KiB a stage at BM = BN = 128
#endif
constexpr int BM = 128;               // output rows per CTA: two m64 wgmma slices
constexpr int BN = BLOCK_N;
constexpr int BK = 128;               // one 128-byte swizzle atom of FP8 along K
constexpr int WG_M = BM / 64;         // m64 slices per warpgroup
constexpr int NUM_THREADS = 128;
constexpr int A_STAGE_BYTES = BM * BK;
constexpr int B_STAGE_BYTES = BN * BK;
constexpr int STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;  // transaction bytes per stage
constexpr int SMEM_ALIGN = 1024;      // SW128 atoms start 1024-B aligned (base_offset stays 0)
constexpr int SMEM_A_OFF = 0;
constexpr int SMEM_B_OFF = NUM_STAGES * A_STAGE_BYTES;
constexpr int SMEM_BAR_OFF = NUM_STAGES * STAGE_BYTES;
constexpr int SMEM_USED = SMEM_BAR_OFF + 8 * NUM_STAGES;
constexpr int SMEM_BYTES = SMEM_ALIGN + SMEM_USED;
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024, SWIZZLE = 128;

static_assert(BN % 64 == 0 && BN <= 256, "BLOCK_N: a wgmma N of 64..256 that tiles 768");
static_assert(BN * BK <= 256 * 128, "TMA box: at most 256 rows");
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
PELIB_EXPORT(epi_warps, 4);
PELIB_EXPORT(barrier_bytes, SMEM_USED - SMEM_BAR_OFF);
PELIB_EXPORT_TMAP(a, BM, BK, SWIZZLE, 1);        // A [M, K] FP8 as uint8
PELIB_EXPORT_TMAP(b, BN, BK, SWIZZLE, 1);  // B [N, K] FP8 as uint8 (outer box dims' product)
PELIB_EXPORT_TMAP(c, 32, 64, SWIZZLE, 2);        // C [M, N] BF16 (the map every stage receives)
PELIB_EXPORT(num_threads, NUM_THREADS);
PELIB_EXPORT(block_k, BK);
PELIB_EXPORT(desc_lbo, DESC_LBO);
PELIB_EXPORT(desc_sbo, DESC_SBO);
PELIB_EXPORT(k_advance_bytes, 32);
PELIB_EXPORT(desc_a_base0, gmma_smem_desc(0, DESC_LBO, DESC_SBO, SWIZZLE));  // descriptor of address 0
// pelib.emulate TileParams (EXPORT_NAMES): offsets relative to the 1024-B aligned dynamic base.
PELIB_EXPORT(mma_arch, 90);
PELIB_EXPORT(mma_kind, 2);            // f8f6f4 family: E4M3 x E4M3
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
PELIB_EXPORT(a_wg_stride, 64 * BK);   // the second m64 slice of A starts 64 rows x 128 B further

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
patch_embed_sm90(const __grid_constant__ CUtensorMap tmap_a,  // A [M, K] u8, box {BK, BM}, SW128
                 const __grid_constant__ CUtensorMap tmap_b,  // B [N, K] u8, box {BK, box_b_rows}, SW128
                 const __grid_constant__ CUtensorMap tmap_c,  // C [M, N] bf16 (TMA-store stages only)
                 const u16* __restrict__ comb,                // [196, N] bf16, bias + pos_embed
                 u16* __restrict__ c,                         // [M, N] bf16
                 int M, int N, int K, u64* timing) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  (void)tmap_c; (void)timing;
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((SMEM_ALIGN - (smem_u32(smem_raw) & (SMEM_ALIGN - 1))) & (SMEM_ALIGN - 1));
  u64* full = reinterpret_cast<u64*>(smem + SMEM_BAR_OFF);  // stage s holds data (TMA bytes landed)

  const int tid = threadIdx.x;
  const int n_tiles = N / BN;
  const int m0 = (blockIdx.x / n_tiles) * BM;  // N fastest: the N tiles of one row block share A in L2
  const int n0 = (blockIdx.x % n_tiles) * BN;
  const int num_kb = K / BK;
  // K slice kb into ring stage kb % NUM_STAGES; its bytes complete on full[kb % NUM_STAGES].
  auto load_slice = [&](int kb) {
    const int s = kb % NUM_STAGES;
    mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);
    tma_load_2d(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, m0);
    tma_load_2d(smem + SMEM_B_OFF + s * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, n0);
  };

  if (tid == 0) {
    prefetch_tensormap(&tmap_a);
    prefetch_tensormap(&tmap_b);
    for (int s = 0; s < NUM_STAGES; ++s) mbarrier_init(&full[s], 1);  // the loading thread's arrive.expect_tx
    fence_barrier_init();
    for (int kb = 0; kb < NUM_STAGES && kb < num_kb; ++kb) load_slice(kb);  // fill the ring
  }
  __syncthreads();

  float d[WG_M][BN / 2];
#pragma unroll
  for (int mi = 0; mi < WG_M; ++mi)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[mi][i] = 0.f;

  const u64 desc_a0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_A_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
  const u64 desc_b0 = gmma_smem_desc(gmma_desc_addr(smem + SMEM_B_OFF), DESC_LBO, DESC_SBO, SWIZZLE);
  for (int kb = 0; kb < num_kb; ++kb) {
    const int s = kb % NUM_STAGES;
    mbarrier_wait_parity_nocall(&full[s], (kb / NUM_STAGES) & 1, 1);

#pragma unroll
    for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);
    warpgroup_arrive();
#pragma unroll
    for (int ks = 0; ks < BK / 32; ++ks)
#pragma unroll
      for (int mi = 0; mi < WG_M; ++mi)
        wgmma_m64nNk32_f32_e4m3_e4m3<BN>(d[mi], desc_a0 + ((s * A_STAGE_BYTES + mi * 64 * BK + ks * 32) >> 4),
                                         desc_b0 + ((s * B_STAGE_BYTES + ks * 32) >> 4), (kb > 0 || ks > 0) ? 1u : 0u);
    wgmma_commit_group();
    wgmma_wait_group<1>();  // the previous slice's wgmmas (the whole warpgroup's) are done: refill its stage
#pragma unroll
    for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);
    if (tid == 0 && kb > 0 && kb - 1 + NUM_STAGES < num_kb) load_slice(kb - 1 + NUM_STAGES);
  }
  wgmma_wait_group<0>();
#pragma unroll
  for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);

  // Epilogue from registers: thread t holds, per 64-row slice, rows 16w + l/4 (+8) and column pairs
  // 8j + 2(l%4) (common/wgmma.cuh NOTES).
  const int warp = tid / 32, lane = tid % 32;
#pragma unroll
  for (int mi = 0; mi < WG_M; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + mi * 64 + 16 * warp + 8 * h + lane / 4;
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
}
