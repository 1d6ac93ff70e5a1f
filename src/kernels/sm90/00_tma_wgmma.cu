// Stage 00 — the Hopper twin in its simplest correct form: TMA + wgmma + the fused epilogue, no pipeline.
//
// What changes: the family's first stage. C[M,N] = A[M,K] . B[N,K]^T + comb[m % 196, N], FP8 E4M3 in,
// BF16 out. One CTA = one warpgroup (128 threads) computes a BM x BN tile:
//   for each BK = 128 slice of K: thread 0 starts two TMA loads (A and B tiles, 128-byte swizzle)
//   that complete on one mbarrier; the warpgroup waits, issues BK/32 x BM/64 wgmma.mma_async
//   m64nBNk32 e4m3 (FP32 accumulators in registers), waits for them, and only then lets the next
//   load overwrite the tile.
// Epilogue: every thread adds comb to the accumulator pairs it holds and writes BF16 pairs (4 B)
// straight from registers; rows past M are skipped (TMA zero-fills them on the load side).
// Layout facts (exported below, checked by pelib.stage and the emulator):
//   A tile: BM rows x 128 B, TMA box {128, BM}, SWIZZLE_128B, 1024-B aligned; B tile likewise {128, BN}.
//   wgmma descriptors: K-major, SW128 (layout type 1), SBO = 1024 B (8 rows x 128 B), LBO = 16 B
//   (ignored for swizzled K-major); K step of 32 FP8 = +32 B on the start address inside the atom;
//   the next 64-row slice of A starts 64 x 128 B = 8 KiB further.
//   (PTX ISA 9.7.15.5.1 matrix descriptor; CUTLASS mma_sm90_desc.hpp; DeepGEMM advances the same way.)
// Kernel signature shared by every sm90 stage: see patch_embed_sm90 below.
// Why: copy and math never overlap: this is the baseline the later stages beat.
// Measured: results/2026-11-23-h100/hopper-sweep-2026-11-23T062323-nvidia-h100-80gb-hbm3.json: 1.750 ms (H100 80GB HBM3, 2026-11-23).
// Run: python -m pelib.stage sm90/00_tma_wgmma
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
constexpr int BM = 128;               // output rows per CTA: two m64 wgmma slices
constexpr int BN = BLOCK_N;
constexpr int BK = 128;               // one 128-byte swizzle atom of FP8 along K
constexpr int WG_M = BM / 64;         // m64 slices per warpgroup
constexpr int NUM_THREADS = 128;
constexpr int A_BYTES = BM * BK;      // FP8: one byte per element
constexpr int B_BYTES = BN * BK;
constexpr int SMEM_ALIGN = 1024;      // SW128 atoms start 1024-B aligned (base_offset stays 0)
constexpr int SMEM_BYTES = SMEM_ALIGN + A_BYTES + B_BYTES;
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024, SWIZZLE = 128;

static_assert(BN % 64 == 0 && BN <= 256, "BLOCK_N: a wgmma N of 64..256 that tiles 768");
static_assert(BN * BK <= 256 * 128, "TMA box: at most 256 rows");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "dynamic shared memory exceeds the 227 KiB per-block limit");

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
// The shared vocabulary (common/export.cuh); the family's own exports follow.
PELIB_EXPORT(smem_limit, PE_SMEM_LIMIT);
PELIB_EXPORT(cluster_x, 1);
PELIB_EXPORT(cluster_in_kernel, 0);   // no __cluster_dims__: the launch gives the cluster shape
PELIB_EXPORT(grid_kind, 0);           // one CTA per output tile
PELIB_EXPORT(tile_m, BM);
PELIB_EXPORT(tile_n, BN);
PELIB_EXPORT(pipeline_stages, 1);
PELIB_EXPORT(wait_kind, PE_WAIT_KIND_NOCALL);  // the call-free mbarrier waits' build (common/mbarrier.cuh)
PELIB_EXPORT(epi_warps, 4);
PELIB_EXPORT(barrier_bytes, 8);  // full_bar, in static shared memory
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
PELIB_EXPORT(a_smem_offset, 0);
PELIB_EXPORT(b_smem_offset, A_BYTES);
PELIB_EXPORT(a_desc, gmma_smem_desc(0, DESC_LBO, DESC_SBO, SWIZZLE));
PELIB_EXPORT(b_desc, gmma_smem_desc(A_BYTES, DESC_LBO, DESC_SBO, SWIZZLE));
PELIB_EXPORT(a_stage_stride, 0);
PELIB_EXPORT(b_stage_stride, 0);
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
  __shared__ alignas(8) u64 full_bar;
  const u32 base = (smem_u32(smem_raw) + SMEM_ALIGN - 1) & ~(SMEM_ALIGN - 1);
  u8* sA = smem_raw + (base - smem_u32(smem_raw));
  u8* sB = sA + A_BYTES;

  const int tid = threadIdx.x;
  const int n_tiles = N / BN;
  const int m0 = (blockIdx.x / n_tiles) * BM;  // N fastest: the N tiles of one row block share A in L2
  const int n0 = (blockIdx.x % n_tiles) * BN;

  if (tid == 0) {
    prefetch_tensormap(&tmap_a);
    prefetch_tensormap(&tmap_b);
    mbarrier_init(&full_bar, 1);
    fence_barrier_init();
  }
  __syncthreads();

  float d[WG_M][BN / 2];
#pragma unroll
  for (int mi = 0; mi < WG_M; ++mi)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[mi][i] = 0.f;

  const u64 desc_a0 = gmma_smem_desc(gmma_desc_addr(sA), DESC_LBO, DESC_SBO, SWIZZLE);
  const u64 desc_b0 = gmma_smem_desc(gmma_desc_addr(sB), DESC_LBO, DESC_SBO, SWIZZLE);
  const int num_kb = K / BK;
  for (int kb = 0; kb < num_kb; ++kb) {
    if (tid == 0) {
      mbarrier_arrive_expect_tx(&full_bar, A_BYTES + B_BYTES);
      tma_load_2d(sA, &tmap_a, &full_bar, kb * BK, m0);
      tma_load_2d(sB, &tmap_b, &full_bar, kb * BK, n0);
    }
    mbarrier_wait_parity_nocall(&full_bar, kb & 1, 1);

#pragma unroll
    for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);
    warpgroup_arrive();
#pragma unroll
    for (int ks = 0; ks < BK / 32; ++ks)
#pragma unroll
      for (int mi = 0; mi < WG_M; ++mi)
        wgmma_m64nNk32_f32_e4m3_e4m3<BN>(d[mi], desc_a0 + ((mi * 64 * BK + ks * 32) >> 4),
                                         desc_b0 + ((ks * 32) >> 4), (kb > 0 || ks > 0) ? 1u : 0u);
    wgmma_commit_group();
    wgmma_wait_group<0>();
#pragma unroll
    for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);
    __syncthreads();  // every warp's wgmma has read the tile before thread 0 overwrites it
  }

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
