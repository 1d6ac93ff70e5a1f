// Stage 10 — a K loop with no run-time descriptor arithmetic
// Parent: sm90/06_permuted_b
// What changes: the consumer's K loop is unrolled over the resident B's K_MAX / 128 slices (a run-time
// guard keeps any K <= K_MAX correct), B's wgmma descriptors become compile-time offsets from one base,
// and A's are one 32-bit add per slice on the descriptor's low word. In 06 every wgmma descriptor was a
// 64-bit add with carry, moved through four R2UR, and the slot index a signed modulo: about 70
// instructions per K slice and 40 between a warpgroup taking its turn and its first QGMMA.
// Everything else is stage 06: B resident with permuted rows (5-D TMA view), ping-pong warpgroups with
// turn barriers, comb read into registers before the mainloop, 16-B streaming stores, A prefetched into
// L2 PREFETCH_TILES ahead. Ring slot of (local tile i, K slice kb) = i * num_kb + kb; slot
// s = it % NUM_STAGES, lap it / NUM_STAGES. Shared memory as 06. TIMING phases as 04.
// Why: in a ping-pong mainloop only one warpgroup feeds the tensor cores; at the turn the queue holds
// the other warpgroup's last slice (512 cycles of wgmma), and whatever the new warpgroup executes
// before its first QGMMA (descriptor arithmetic included) eats into that. The start-address field
// is 14 bits of a shared address below 228 KiB, so a low-word add never carries into the LBO field
// (common/descriptors.cuh smem_desc_advance states the same bound).
// Measured: results/2026-11-24-h100/hopper-perf.json: 0.936 ms against 0.940 / 0.947 ms for 06 in the
// same run (H100 80GB HBM3, unbounded waits); results/2026-11-24-h200/hopper-perf.json: 0.849 ms
// against 0.824 ms (H200). Within the H100 run's spread, slower on the H200: not kept (06 stays best).
// Run: python -m pelib.stage sm90/10_unrolled_kloop
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
#ifndef EPI_STREAM
#define EPI_STREAM 1       // 1: st.global.cs (evict-first) output stores; 0: st.global
#endif
#ifndef PREFETCH_TILES
#define PREFETCH_TILES 2   // L2 prefetch of A this many tiles ahead of the ring (0: none)
#endif
#ifndef B_PERM_TMA
#define B_PERM_TMA 1       // 1: a 5-D tensor map loads B already permuted; 0: plain load + permute in SMEM
#endif
#ifndef TURN_EARLY
#define TURN_EARLY 0       // 1: pass the turn after the last commit, before its wait_group<1>
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
constexpr int GROUPS32 = BN / 32;              // 32-column groups: one 16-B store per (row, group)
#if !B_PERM_TMA
constexpr u32 PERM_BARRIER = 1;                // named barrier of the in-SMEM permutation
#endif
// setmaxnreg: 40 for the producer, the rest to the two consumers (CUTLASS ping-pong: 40 / 232).
constexpr u32 ENTRY_REGS = (65536u / NUM_THREADS) & ~7u;
constexpr u32 PRODUCER_REGS = 40;
constexpr u32 CONSUMER_REGS = ((ENTRY_REGS * NUM_THREADS - PRODUCER_REGS * 128) / (NUM_CONSUMERS * 128)) & ~7u;

static_assert(BN == 128 || BN == 192 || BN == 256, "BLOCK_N: 128, 192 or 256 (a wgmma N, divides 768)");
static_assert(BN % 32 == 0, "the row permutation works on 32-row groups");
static_assert(K_MAX % BK == 0 && KB_MAX >= 1, "K_MAX: a multiple of 128");
static_assert(NUM_STAGES >= 2 && NUM_STAGES <= 16, "NUM_STAGES: 2 to 16");
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
PELIB_EXPORT(epi_vec, 1);
PELIB_EXPORT(b_perm, 1);               // B rows permuted: 32g + 8u + 2q + c <- 32g + 8q + 2u + c
PELIB_EXPORT(b_perm_tma, B_PERM_TMA);  // 1: the host builds B's map as the 5-D permuting view
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
PELIB_EXPORT(kloop_unrolled, KB_MAX);       // K slices the consumer loop is unrolled over

// A wgmma descriptor from its two 32-bit words.
PE_DEVICE u64 desc_join(u32 hi, u32 lo) { return ((u64)hi << 32) | lo; }

// One 16-B output store (EPI_STREAM picks the cache policy).
PE_DEVICE void store16(u16* p, const u32 (&v)[4]) {
#if EPI_STREAM
  st_global_cs_v4(p, v[0], v[1], v[2], v[3]);
#else
  st_global_v4(p, v[0], v[1], v[2], v[3]);
#endif
}

// B_PERM_TMA=0: permute one 32-row x 128-B block of the plainly loaded (SW128) B in place, by one warp.
// Row r = 8q + 2u + c of the block moves to row 8u + 2q + c; chunk k of row r is stored at chunk
// k ^ (r % 8) (the 128-B swizzle; the block starts 1024-B aligned). Reads all 256 chunks first.
PE_DEVICE void permute_b_block(u8* blk, int lane) {
  uint4 v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int e = lane + 32 * i, r = e >> 3, k = e & 7;
    v[i] = *reinterpret_cast<const uint4*>(blk + r * 128 + ((k ^ (r & 7)) << 4));
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int e = lane + 32 * i, r = e >> 3, k = e & 7;
    const int rho = 8 * ((r >> 1) & 3) + 2 * (r >> 3) + (r & 1);
    *reinterpret_cast<uint4*>(blk + rho * 128 + ((k ^ (rho & 7)) << 4)) = v[i];
  }
}

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
patch_embed_sm90(const __grid_constant__ CUtensorMap tmap_a,  // A [M, K] u8, box {128, 64}, SW128
                 const __grid_constant__ CUtensorMap tmap_b,  // B: 5-D permuting view (B_PERM_TMA) or [N, K]
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
      for (int kb = 0; kb < num_kb; ++kb) {
#if B_PERM_TMA
        // box {128 B of k, 2 c, 4 q, 4 u, BN/32 g} at (kb * 128, 0, 0, 0, n0 / 32)
        tma_load_5d(smem + SMEM_B_OFF + kb * B_SLICE_BYTES, &tmap_b, b_full, kb * BK, 0, 0, 0, n0 / 32);
#else
        tma_load_2d(smem + SMEM_B_OFF + kb * B_SLICE_BYTES, &tmap_b, b_full, kb * BK, n0);
#endif
      }
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
    // The descriptors as two 32-bit halves: the high word (SBO, layout type) never changes; the low
    // word's start-address field takes every slot and K offset (no carry: see the header).
    const u32 desc_hi_a = (u32)(desc_a0 >> 32), desc_hi_b = (u32)(desc_b0 >> 32);
    const u32 a_lo0 = (u32)desc_a0, b_lo0 = (u32)desc_b0;
    mbarrier_wait_parity_nocall(b_full, 0, 4);
#if !B_PERM_TMA
    // 8 consumer warps permute the (num_kb x BN/32) 4-KiB blocks of B, then hand them to the async proxy.
    for (int blk = warp - 4; blk < num_kb * GROUPS32; blk += 8)
      permute_b_block(smem + SMEM_B_OFF + (blk / GROUPS32) * B_SLICE_BYTES + (blk % GROUPS32) * 4096, lane);
    fence_proxy_async_shared_cta();
    named_barrier_sync(PERM_BARRIER, 256);
#endif
    float d[BN / 2];
    u32 cb[BN / 4];                            // comb pairs of this thread's two rows: [h][g][u]
    int n = 0;                                 // this warpgroup's tile count
    for (int i = wg; i < my_tiles; i += 2, ++n) {
      const int m0 = (g + i * groups) * BM;
      const u64 t_tile = timing_now();
      // Rows 16 wq + 8h + lane/4 of the tile (common/wgmma.cuh NOTES).
      const int row0 = m0 + 16 * wq + lane / 4;
      // comb before the mainloop: 16 B at columns 32g + 8q of each row = the pairs u = 0..3 of group g
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const u16* crow = comb + (size_t)comb_row(row0 + 8 * h) * N + n0 + 8 * q;
#pragma unroll
        for (int gg = 0; gg < GROUPS32; ++gg) {
          u32 v[4];
          ld_global_nc_v4(crow + 32 * gg, v);
#pragma unroll
          for (int u = 0; u < 4; ++u) cb[h * CPR + 4 * gg + u] = v[u];
        }
      }
      // Wait for the turn: the other warpgroup has issued its previous tile (WG 0's first tile goes).
      const u64 t_turn = timing_now();
      mbarrier_wait_parity_nocall(&turn[wg], wg == 0 ? ((n + 1) & 1) : (n & 1), 5);
      const u64 t_k = timing_now();
      u64 waited = 0;
      const u32 it0 = (u32)(i * num_kb);
#pragma unroll
      for (int kb = 0; kb < KB_MAX; ++kb) {
        if (kb < num_kb) {
          const u32 it = it0 + kb;
          const u32 s = it % NUM_STAGES;
          const u32 phase = (it / NUM_STAGES) & 1;
          const u64 tw = timing_now();
          mbarrier_wait_parity_nocall(&full[s], phase, 2);
          waited += timing_now() - tw;
          wgmma_fence_operand(d);
          warpgroup_arrive();
          const u32 a_lo = a_lo0 + s * (A_STAGE_BYTES >> 4);
#pragma unroll
          for (int ks = 0; ks < BK / 32; ++ks) {
            // K step: +32 B inside the swizzle atom (2 units of 16 B); B's offset is a constant
            wgmma_m64nNk32_f32_e4m3_e4m3<BN>(d, desc_join(desc_hi_a, a_lo + 2 * ks),
                                             desc_join(desc_hi_b, b_lo0 + (u32)((kb * B_SLICE_BYTES + ks * 32) >> 4)),
                                             (kb > 0 || ks > 0) ? 1u : 0u);
          }
          wgmma_commit_group();
#if TURN_EARLY
          if (kb == num_kb - 1 && tid == 0) mbarrier_arrive(&turn[wg ^ 1]);  // every wgmma of the tile issued
#endif
          wgmma_wait_group<1>();               // the previous slice's wgmmas are done: free its slot
          wgmma_fence_operand(d);
          if (kb > 0 && tid == 0) mbarrier_arrive(&empty[(it - 1) % NUM_STAGES]);
        }
      }
#if !TURN_EARLY
      if (tid == 0) mbarrier_arrive(&turn[wg ^ 1]);  // every wgmma of this tile is issued: the other's turn
#endif
      wgmma_wait_group<0>();
      wgmma_fence_operand(d);
      if (tid == 0) mbarrier_arrive(&empty[(it0 + num_kb - 1) % NUM_STAGES]);
      const u64 t_epi = timing_now();

      // ---- epilogue from registers: + comb, one BF16 rounding, 16-B stores, no shuffles ----
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        u16* orow = c + (size_t)row * N + n0 + 8 * q;
        const bool ok = row < M;
#pragma unroll
        for (int gg = 0; gg < GROUPS32; ++gg) {
          u32 v[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int j = 4 * gg + u;        // accumulator pair j: output columns 32gg + 8q + 2u, +1
            const u32 cv = cb[h * CPR + j];
            v[u] = f32x2_to_bf16x2(d[4 * j + 2 * h] + bf16lo_to_f32(cv), d[4 * j + 2 * h + 1] + bf16hi_to_f32(cv));
          }
          if (ok) store16(orow + 32 * gg, v);
        }
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
