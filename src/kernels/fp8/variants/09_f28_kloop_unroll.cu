// Stage 09 — go/no-go variant F28: precomputed descriptors and a K-loop unrolled at compile time.
// Parent: fp8/09_persistent_megakernel
//
// What changes: the card's changes A and C. The MMA warp computes the shared-memory descriptors of
// every ring slot once, before the tile loop, instead of twice per k-block; and the six k-blocks of a
// tile are unrolled so that each one's ring slot, barrier address, parity flip and accumulate flag are
// compile-time constants. The K-loop count becomes a compile-time K_ITERS = K / BK (6 for the patch
// embed's K = 768; exported as k_iters; the kernel traps on any other K). One thing the card did not
// have to deal with: the ring runs on across tiles here (PipelineState), so with 6 k-blocks and 4
// slots a tile starts in slot 0 or slot 2 - the unrolled K-loop exists twice, once per start slot,
// and the tile picks one with a single uniform branch; the lap parity stays one run-time bit.
// Why: the card's hypothesis: W1's bookkeeping between MMAs leaves tensor-core gaps; fewer
// instructions per tile shorten the K-loop. Its static fail-fast (ptxas registers > 240, or any
// spill) is settled at compile time; pelib.isa.sass_account counts the K-loop's instructions per tile
// before and after.
// Recorded: none yet: fp8-megakernel-future-proposals-F21-F28.md, card F28 sets the gate (K-loop -150
// cycles and wall clock +0.5 % with F22); not measured.
// Run: python -m pelib.stage fp8/variants/09_f28_kloop_unroll
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/cutensormap.cuh"
#include "common/cluster.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/tcgen05.cuh"
#include "common/descriptors.cuh"
#include "common/epilogue.cuh"
#include "common/tile_map.cuh"
#include "common/timing.cuh"
#include "common/staging.cuh"
#include "common/scheduler.cuh"

// ---- compile-time parameters ---------------------------------------------------------------
#ifndef NUM_STAGES
#define NUM_STAGES 4  // the lab's cefc59d (experiment log F6: 6 -> 4); K=768 is 6 k-blocks of 128
#endif
#ifndef K_ITERS
#define K_ITERS 6  // F28: k-blocks per tile, compile time (K = 768 = 6 x BK)
#endif
#ifndef NUM_EPI_WARPS
#define NUM_EPI_WARPS 4  // one per lane quarter again (the lab's F16: 5 -> 4)
#endif

constexpr int CG = 2;                  // cta_group: a 2-SM pair
constexpr int BM = 128;                // A rows per CTA = TMEM lanes
constexpr int TN = 256;                // output columns per tile = UMMA N (the UMMA maximum)
constexpr int BK = 128;                // K per stage: 128 FP8 = 128 B = one 128-B swizzle row
constexpr int UMMA_M = BM * CG;
constexpr int UMMA_N = TN;
constexpr int UMMA_K = 32;             // kind::f8f6f4: K is 32 bytes of operand per instruction
constexpr int B_ROWS = TN / CG;        // B rows this CTA loads: half of the tile's 256
constexpr int SWIZZLE = 128;
constexpr int A_STAGE_BYTES = BM * BK;
constexpr int B_STAGE_BYTES = B_ROWS * BK;
constexpr int STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;  // bytes per stage per CTA
constexpr int TMEM_COLS = 512;         // all of TMEM: two accumulators of TN columns
constexpr int TMEM_ACC_COL = 0;        // accumulator 0's first column
constexpr int ACC_BUFS = 2;            // accumulator b at TMEM_ACC_COL + b * TMEM_ACC_STRIDE
constexpr int TMEM_ACC_STRIDE = TN;
constexpr int TMEM_LD_COLS = 32;       // tcgen05.ld 32x32b.x32
constexpr int NUM_THREADS = 32 * (2 + NUM_EPI_WARPS);
using StageBuf = StagingRows<TN / 2>;  // per epilogue warp, two of them: 32 rows x (256 + 16) B each
constexpr int STAGING_HALVES = 2;
constexpr int STAGING_PITCH = StageBuf::PITCH;
constexpr int STAGING_WARP_BYTES = STAGING_HALVES * StageBuf::BYTES;
constexpr int PHASE2_UNROLL = 8;       // Phase 2 copy loop unroll (the lab's d882aba; 4 in c32ab7a)
// Epilogue warps are 2 .. EPI_LAST. Warp w reads lane quarter w % 4; warps w and w + 4 (both
// epilogue warps) share quarter w % 4 and split its columns in warp order (PTX ISA 9.7.16.8.1).
constexpr int EPI_LAST = 2 + NUM_EPI_WARPS - 1;
PE_HD_CONSTEXPR bool epi_shares(int w) { return w + 4 <= EPI_LAST || w - 4 >= 2; }
PE_HD_CONSTEXPR int epi_col_begin(int w) { return epi_shares(w) && w >= 6 ? TN / 2 : 0; }
PE_HD_CONSTEXPR int epi_col_end(int w) { return epi_shares(w) && w < 6 ? TN / 2 : TN; }
static_assert(NUM_EPI_WARPS == 4 || (epi_col_end(2) == TN / 2 && epi_col_begin(6) == TN / 2),
              "the drain<> instantiations in the kernel must match the exported column map");
// SW128 K-major canonical layout: 8 rows x 128 B atoms, SBO = 1024 B between 8-row groups, LBO
// unused (CUTLASS make_umma_desc K-major writes 1, i.e. 16 B): CUTLASS mma_sm100_desc.hpp.
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024;
constexpr u32 IDESC = umma_instr_desc(UMMA_M, UMMA_N, UMMA_FMT_E4M3, UMMA_FMT_E4M3, UMMA_C_F32);

// Shared memory: [A stages | B stages | staging (two halves per epilogue warp) | full[] | empty[] |
// acc_full[2] | acc_empty[2] | tmem slot], from a 1024-B aligned base (SW128 tiles must start
// 1024-B aligned); 1 KB slack pays for the alignment.
constexpr int SMEM_A_OFF = 0;
constexpr int SMEM_B_OFF = NUM_STAGES * A_STAGE_BYTES;
constexpr int SMEM_STAGING_OFF = NUM_STAGES * STAGE_BYTES;
constexpr int SMEM_BAR_OFF = SMEM_STAGING_OFF + NUM_EPI_WARPS * STAGING_WARP_BYTES;
constexpr int NUM_BARS = 2 * NUM_STAGES + 2 * ACC_BUFS;
constexpr int SMEM_TMEM_SLOT_OFF = SMEM_BAR_OFF + 8 * NUM_BARS;
constexpr int SMEM_USED = SMEM_TMEM_SLOT_OFF + 8;
constexpr int SMEM_BYTES = 1024 + SMEM_USED;

static_assert(NUM_EPI_WARPS >= 4 && NUM_EPI_WARPS <= 6,
              "NUM_EPI_WARPS must be 4, 5 or 6: 4 cover the lane quarters, warps 6 and 7 split one each");
static_assert(NUM_STAGES >= 1 && NUM_STAGES <= 16, "NUM_STAGES must be in [1, 16]");
static_assert(K_ITERS >= 1 && (2 * K_ITERS) % NUM_STAGES == 0,
              "F28: a tile must start in one of two ring slots (0 or K_ITERS % NUM_STAGES)");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "dynamic shared memory exceeds the 227 KB per-block limit");
static_assert(A_STAGE_BYTES % 1024 == 0 && B_STAGE_BYTES % 1024 == 0, "SW128 tiles must stay 1024-B aligned");
static_assert(BK % UMMA_K == 0 && BK == SWIZZLE, "one stage row is exactly one 128-B swizzle row");
static_assert(TN % TMEM_LD_COLS == 0 && TMEM_COLS >= ACC_BUFS * TMEM_ACC_STRIDE, "accumulators must fit the TMEM allocation");

// ---- exports: what pelib.emulate and the host side read from the cubin ---------------------
PELIB_EXPORT(smem_bytes, SMEM_BYTES);
// The shared vocabulary (common/export.cuh); the family's own exports follow.
PELIB_EXPORT(smem_limit, PE_SMEM_LIMIT);
PELIB_EXPORT(cluster_in_kernel, 1);  // __cluster_dims__(CG, 1, 1): launched without a cluster attribute
PELIB_EXPORT(grid_kind, 1);          // persistent: one cluster per SM pair, static schedule
PELIB_EXPORT(pipeline_stages, NUM_STAGES);
PELIB_EXPORT(wait_kind, PE_WAIT_KIND);  // the mbarrier wait build (common/mbarrier.cuh)
PELIB_EXPORT_TMAP(a, BM, BK, SWIZZLE, 1);      // A [M, K] FP8 as uint8: box {BK, BM}
PELIB_EXPORT_TMAP(b, B_ROWS, BK, SWIZZLE, 1);  // B [N, K] FP8 as uint8: box {BK, B_ROWS}
PELIB_EXPORT(mma_kind, 2);    // pelib.emulate code for kind::f8f6f4
PELIB_EXPORT(mma_arch, 100);  // tcgen05 / UMMA descriptors
PELIB_EXPORT(cta_group, CG);
PELIB_EXPORT(cluster_x, CG);
PELIB_EXPORT(tile_m, BM);
PELIB_EXPORT(tile_n, TN);
PELIB_EXPORT(block_k, BK);
PELIB_EXPORT(mma_m, UMMA_M);
PELIB_EXPORT(mma_n, UMMA_N);
PELIB_EXPORT(mma_k, UMMA_K);
PELIB_EXPORT(epi_warp0, 2);   // epilogue warps are 2 .. 2 + NUM_EPI_WARPS - 1
PELIB_EXPORT(epi_warps, NUM_EPI_WARPS);
PELIB_EXPORT(epi_poll_each, 1);  // 1: every epilogue warp waits on the accumulator barrier itself
// The epilogue's row/column map: warp w reads TMEM lanes 32*(w%4)..+31 and columns [begin, end),
// exported as begin | end << 16 (0 for a warp that is not an epilogue warp).
#define PE_EPI_COLS(w) ((w) <= EPI_LAST ? (epi_col_begin(w) | epi_col_end(w) << 16) : 0)
PELIB_EXPORT(epi_cols_w2, PE_EPI_COLS(2));
PELIB_EXPORT(epi_cols_w3, PE_EPI_COLS(3));
PELIB_EXPORT(epi_cols_w4, PE_EPI_COLS(4));
PELIB_EXPORT(epi_cols_w5, PE_EPI_COLS(5));
PELIB_EXPORT(epi_cols_w6, PE_EPI_COLS(6));
PELIB_EXPORT(epi_cols_w7, PE_EPI_COLS(7));
// The staging layout (pelib.layouts.staging): epilogue warp 2+e's buffer at staging_offset + e * staging_warp_bytes,
// half h at + h * 32 * staging_pitch, row l (= lane l) at + l * staging_pitch; half h holds the
// second h-th half of the warp's columns; Phase 2 stores staging_vec bytes per lane.
PELIB_EXPORT(staging_offset, SMEM_STAGING_OFF);
PELIB_EXPORT(staging_warp_bytes, STAGING_WARP_BYTES);
PELIB_EXPORT(staging_pitch, STAGING_PITCH);
PELIB_EXPORT(staging_rows, StageBuf::ROWS);
PELIB_EXPORT(staging_halves, STAGING_HALVES);
PELIB_EXPORT(staging_vec, 16);
PELIB_EXPORT(phase2_unroll, PHASE2_UNROLL);
PELIB_EXPORT(barrier_bytes, SMEM_USED - SMEM_BAR_OFF);  // mbarriers + TMEM address slot
PELIB_EXPORT(num_threads, NUM_THREADS);
PELIB_EXPORT(a_swizzle, SWIZZLE);
PELIB_EXPORT(b_swizzle, SWIZZLE);
PELIB_EXPORT(a_box_k, BK);          // TMA box of A: {K elements (= bytes), rows}
PELIB_EXPORT(a_box_m, BM);
PELIB_EXPORT(b_box_k, BK);
PELIB_EXPORT(b_box_n, B_ROWS);
PELIB_EXPORT(a_smem_offset, SMEM_A_OFF);
PELIB_EXPORT(b_smem_offset, SMEM_B_OFF);
PELIB_EXPORT(a_stage_bytes, A_STAGE_BYTES);
PELIB_EXPORT(b_stage_bytes, B_STAGE_BYTES);
PELIB_EXPORT(a_stage_stride, A_STAGE_BYTES);  // ring slot s of A at a_smem_offset + s * a_stage_stride (emulated ring)
PELIB_EXPORT(b_stage_stride, B_STAGE_BYTES);
PELIB_EXPORT(a_desc, umma_smem_desc(SMEM_A_OFF, DESC_LBO, DESC_SBO, SWIZZLE));  // stage 0, base-relative
PELIB_EXPORT(b_desc, umma_smem_desc(SMEM_B_OFF, DESC_LBO, DESC_SBO, SWIZZLE));
PELIB_EXPORT(idesc, IDESC);
PELIB_EXPORT(k_advance_bytes, UMMA_K);  // start-address step per UMMA_K inside a 128-B row
PELIB_EXPORT(tmem_cols, TMEM_COLS);
PELIB_EXPORT(tmem_acc_col, TMEM_ACC_COL);
PELIB_EXPORT(tmem_acc_stride, TMEM_ACC_STRIDE);
PELIB_EXPORT(tmem_acc_buffers, ACC_BUFS);
PELIB_EXPORT(acc_early_release, 1);  // F19a: freed after the warp's last TMEM load, before Phase 2
PELIB_EXPORT(epi_ld_x, TMEM_LD_COLS);
PELIB_EXPORT(k_iters, K_ITERS);  // F28: the kernel runs only K = k_iters * block_k

// A descriptor's start address is bits [4,18) of the shared address: PTX ISA "Shared Memory
// Descriptor", matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4 (CUTLASS keeps the same 14 bits).
PE_DEVICE u32 desc_addr(const void* p) { return smem_u32(p) & 0x3FFFFu; }

// One epilogue warp's share of a tile, columns [C0, C1) of its 32 rows, as two halves (the two
// staging buffers): chunks of half 0 go TMEM -> registers -> + comb -> BF16 -> buffer 0; then the
// chunks of half 1 go to buffer 1, and while each of their TMEM loads is in flight the warp copies
// a quarter of buffer 0 out (Phase 2 of half 0). After the last TMEM load the warp releases the
// accumulator (early: acc_empty on the leader CTA), then copies buffer 1 out (Phase 2 of half 1),
// which overlaps the MMA warp's next tiles. Returns the time Phase 1 ended (0 unless TIMING).
template <int C0, int C1>
PE_DEVICE u64 drain(u32 t_row, const u16* comb_ptr, u32 stage_buf, int lane, u16* out_blk, int ld_out,
                    u64* acc_empty) {
  static_assert(C0 % TMEM_LD_COLS == 0 && C1 % TMEM_LD_COLS == 0 && C0 < C1 && C1 <= TN, "bad column range");
  constexpr int HC = (C1 - C0) / STAGING_HALVES;       // columns per half
  constexpr int CH = HC / TMEM_LD_COLS;                // TMEM loads per half
  using H = StagingRows<HC, STAGING_PITCH>;
  static_assert(HC % TMEM_LD_COLS == 0 && H::COPIES % CH == 0, "half 0's copies must spread evenly over half 1's loads");
  constexpr int COPIES_PER_LOAD = H::COPIES / CH;
  const u32 buf0 = stage_buf, buf1 = stage_buf + StageBuf::BYTES;
#pragma unroll
  for (int j = 0; j < 2 * CH; ++j) {
    const int c = C0 + j * TMEM_LD_COLS;
    u32 cb[TMEM_LD_COLS / 2];
    load_comb<TMEM_LD_COLS>(comb_ptr + c, cb);  // in flight while TMEM is read
    u32 acc[TMEM_LD_COLS];
    tcgen05_ld_32x32b_x32(t_row + c, acc);
    if (j >= CH)  // Phase 2 of half 0, in the shadow of this TMEM load
      stage_copy_some<H, COPIES_PER_LOAD>(buf0, lane, out_blk + C0, ld_out, (j - CH) * COPIES_PER_LOAD);
    tcgen05_wait_ld();
#pragma unroll
    for (int v = 0; v < TMEM_LD_COLS / 8; ++v) {
      const u32 c4[4] = {cb[4 * v], cb[4 * v + 1], cb[4 * v + 2], cb[4 * v + 3]};
      u32 o[4];
      fuse8(&acc[8 * v], c4, o);
      stage_put<H>(j < CH ? buf0 : buf1, lane, (j % CH) * TMEM_LD_COLS + 8 * v, o);
    }
    if (j == CH - 1) __syncwarp();  // buffer 0 complete before any lane copies it out
  }
  const u64 t = timing_now();
  // Early release (F19a): this warp's TMEM reads of the tile are complete; order them before the
  // arrival (tcgen05.fence::before_thread_sync), then one lane arrives on the leader's acc_empty.
  tcgen05_fence_before_thread_sync();
  __syncwarp();  // every lane's loads done; also: buffer 1 complete, buffer 0 fully read
  if (lane == 0) mbarrier_arrive_remote_cta(acc_empty, 0);
  stage_copy_out<H, PHASE2_UNROLL>(buf1, lane, out_blk + C0 + HC, ld_out);
  return t;
}

// F28: one tile's K-loop with every ring slot, lap parity and accumulate flag a compile-time
// constant. S0 = the ring slot the tile starts in, KB = the k-block: each k-block is its own
// straight-line code (the recursion unrolls at compile time); `phase` is the ring's parity at the
// tile's start; descriptors come precomputed per slot. t2 gets the time the first stage landed.
template <int S0, int KB = 0>
PE_DEVICE void kloop_unrolled(u64* full, u64* empty, u32 phase, u32 d_tmem, const u64 (&a_desc)[NUM_STAGES],
                              const u64 (&b_desc)[NUM_STAGES], u64& t2) {
  constexpr int s = (S0 + KB) % NUM_STAGES;
  constexpr u32 lap = ((S0 + KB) / NUM_STAGES) & 1;   // the parity flips each time the ring wraps
  mbarrier_wait_parity(&full[s], phase ^ lap, 2);  // bytes from both CTAs
  tcgen05_fence_after_thread_sync();  // order the MMAs after the wait (PTX ISA 9.7.16, tcgen05 memory consistency; DeepGEMM ptx/tcgen05.cuh)
  if constexpr (KB == 0) t2 = timing_now();  // the tile's first stage has landed
#pragma unroll
  for (int k = 0; k < BK / UMMA_K; ++k)
    tcgen05_mma_f8f6f4<CG>(d_tmem, smem_desc_advance(a_desc[s], k * UMMA_K), smem_desc_advance(b_desc[s], k * UMMA_K),
                           IDESC, KB != 0 || k != 0);
  tcgen05_commit_multicast<CG>(smem_u32(&empty[s]), 0b11);  // slot free, in both CTAs
  if constexpr (KB + 1 < K_ITERS) kloop_unrolled<S0, KB + 1>(full, empty, phase, d_tmem, a_desc, b_desc, t2);
}

// The ring after a tile that started in slot S0: K_ITERS slots further (constants but one bit).
template <int S0>
PE_DEVICE void ring_after_tile(PipelineState<NUM_STAGES>& ring) {
  ring.index = (S0 + K_ITERS) % NUM_STAGES;
  ring.phase ^= ((S0 + K_ITERS) / NUM_STAGES) & 1;
}

extern "C" __global__ void __cluster_dims__(CG, 1, 1) __launch_bounds__(NUM_THREADS, 1)
patch_embed(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
            const u16* comb, u16* out, int M, int N, int K, u64* timing) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  extern __shared__ __align__(1024) u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);  // 1024-B aligned base
  // Waits acquire at CTA scope (why, per barrier: common/mbarrier.cuh, "Which scope a wait needs").
  u64* full = reinterpret_cast<u64*>(smem + SMEM_BAR_OFF);   // TMA bytes landed in stage s
  u64* empty = full + NUM_STAGES;                             // MMAs finished reading stage s
  u64* acc_full = empty + NUM_STAGES;                         // accumulator b complete (MMA -> epilogue)
  u64* acc_empty = acc_full + ACC_BUFS;                       // accumulator b drained (epilogue -> MMA)
  u32* tmem_slot = reinterpret_cast<u32*>(smem + SMEM_TMEM_SLOT_OFF);

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const u32 rank = cluster_ctarank();  // 0 = leader: issues the MMAs of the pair
  const bool leader = rank == 0;
  const int n_tiles = N / TN;
  const int total_tiles = num_cluster_tiles(M, N, BM, TN, CG);
  const int first = (int)cluster_id_x(), clusters = (int)cluster_nclusterid_x();
  const int num_kb = K / BK;

  // ---- setup: barriers (warp 0), TMEM (warp 1, a whole warp, in both CTAs) ----
  cluster_sync();  // both CTAs are running before the pair allocates TMEM (DeepGEMM sm100_bf16_gemm.cuh)
  if (warp == 0 && elect_one_sync()) {
    prefetch_tensormap(&tmap_a);
    prefetch_tensormap(&tmap_b);
    for (int s = 0; s < NUM_STAGES; ++s) {
      mbarrier_init(&full[s], 1);   // the leader producer's arrive.expect_tx (unused in the peer)
      mbarrier_init(&empty[s], 1);  // one multicast tcgen05.commit from the leader
    }
    for (int b = 0; b < ACC_BUFS; ++b) {
      mbarrier_init(&acc_full[b], 1);                  // one multicast tcgen05.commit from the leader
      mbarrier_init(&acc_empty[b], CG * NUM_EPI_WARPS);  // one arrival per epilogue warp of the pair (leader's used)
    }
    fence_barrier_init();
  } else if (warp == 1) {
    tcgen05_alloc<CG>(smem_u32(tmem_slot), TMEM_COLS);
    tcgen05_relinquish_alloc_permit<CG>();
  }
  // The TMEM address travels through shared memory: fence, sync, fence (DeepGEMM, CUTLASS
  // tmem_allocator usage: tcgen05 ops on either side of a thread sync need these fences).
  tcgen05_fence_before_thread_sync();
  cluster_sync();  // the peer must see the leader's barriers initialized before its TMA signals them
  tcgen05_fence_after_thread_sync();
  const u32 tmem_base = *tmem_slot;

  if (warp == 0) {
    // ---- producer: one thread issues every TMA load, tile after tile; the ring runs on ----
    if (elect_one_sync()) {
      PipelineState<NUM_STAGES> ring;
      for (PersistentTileScheduler<ACC_BUFS> sched(first, clusters, total_tiles, n_tiles); sched.valid(); sched.advance()) {
        const TileCoord tile = sched.coord(rank, BM, TN, CG);
        u64 t0 = timing_now(), t1 = t0;
        for (int kb = 0; kb < num_kb; ++kb) {
          const int s = ring.index;
          mbarrier_wait_parity(&empty[s], ring.phase ^ 1, 1);  // a fresh barrier passes parity 1
          if (kb == 0) t1 = timing_now();
          if (leader) mbarrier_arrive_expect_tx(&full[s], CG * STAGE_BYTES);  // both CTAs' bytes
          // cta_group::2 form: the bytes land here, the completion on the leader's full[s]
          tma_load_2d_cta2(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, tile.m0);
          tma_load_2d_cta2(smem + SMEM_B_OFF + s * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK,
                           tile.n0 + (int)rank * B_ROWS);  // this CTA's half of the tile's B rows
          ring.advance();
        }
        timing_record(timing, sched.slot(), PE_PHASE_PRODUCER_WAIT, t0, t1);
        PE_TIMING_END(timing, sched.slot(), PE_PHASE_TMA_ISSUE, t1);
      }
      // Producer tail (CUTLASS sm90_pipeline.hpp producer_tail): wait until the MMAs have released
      // every slot, so no commit is still on its way to this CTA's barriers when it exits.
      for (int i = 0; i < NUM_STAGES; ++i, ring.advance())
        mbarrier_wait_parity(&empty[ring.index], ring.phase ^ 1, 4);
    }
    __syncwarp();
  } else if (warp == 1) {
    // ---- MMA issuer: one thread of the LEADER issues every tcgen05.mma and commit for the pair ----
    if (leader && elect_one_sync()) {
      if (num_kb != K_ITERS) __trap();  // F28: the K-loop is unrolled for K = K_ITERS * BK
      // F28 (card change A): every ring slot's descriptors, once. K step inside the swizzled 128-B
      // row: +32 B on the start address (CUTLASS DescriptorIterator; gau-nernst learn-cuda
      // matmul_v5.cu "A_smem + k2 * 32"); the hardware applies the swizzle.
      u64 a_desc_s[NUM_STAGES], b_desc_s[NUM_STAGES];
#pragma unroll
      for (int s = 0; s < NUM_STAGES; ++s) {
        a_desc_s[s] = umma_smem_desc(desc_addr(smem + SMEM_A_OFF + s * A_STAGE_BYTES), DESC_LBO, DESC_SBO, SWIZZLE);
        b_desc_s[s] = umma_smem_desc(desc_addr(smem + SMEM_B_OFF + s * B_STAGE_BYTES), DESC_LBO, DESC_SBO, SWIZZLE);
      }
      PipelineState<NUM_STAGES> ring;
      for (PersistentTileScheduler<ACC_BUFS> sched(first, clusters, total_tiles, n_tiles); sched.valid(); sched.advance()) {
        const u32 buf = sched.acc_buf();
        const u64 t0 = timing_now();
        mbarrier_wait_parity(&acc_empty[buf], sched.acc_phase() ^ 1, 5);  // both CTAs drained it
        tcgen05_fence_after_thread_sync();
        u64 t1 = timing_now(), t2 = t1;
        const u32 d_tmem = tmem_base + TMEM_ACC_COL + buf * TMEM_ACC_STRIDE;
        // F28: the unrolled K-loop of the slot this tile starts in (0 or K_ITERS % NUM_STAGES).
        if (ring.index == 0) {
          kloop_unrolled<0>(full, empty, ring.phase, d_tmem, a_desc_s, b_desc_s, t2);
          ring_after_tile<0>(ring);
        } else {
          kloop_unrolled<K_ITERS % NUM_STAGES>(full, empty, ring.phase, d_tmem, a_desc_s, b_desc_s, t2);
          ring_after_tile<K_ITERS % NUM_STAGES>(ring);
        }
        tcgen05_commit_multicast<CG>(smem_u32(&acc_full[buf]), 0b11);  // both accumulator halves complete
        const u64 t3 = timing_now();
        timing_record(timing, sched.slot(), PE_PHASE_EPI_WAIT, t0, t1);
        timing_record(timing, sched.slot(), PE_PHASE_TMA_WAIT, t1, t2);
        timing_record(timing, sched.slot(), PE_PHASE_KLOOP, t2, t3);
      }
    }
    __syncwarp();
  } else {
    // ---- epilogue: warp w reads TMEM lanes 32*(w%4) .. +31 (the hardware's sub-partition rule),
    // columns [epi_col_begin(w), epi_col_end(w)) ----
    const int sub = warp % 4;
    const u32 stage_buf = smem_u32(smem + SMEM_STAGING_OFF + (warp - 2) * STAGING_WARP_BYTES);
    for (PersistentTileScheduler<ACC_BUFS> sched(first, clusters, total_tiles, n_tiles); sched.valid(); sched.advance()) {
      const TileCoord tile = sched.coord(rank, BM, TN, CG);
      const u32 buf = sched.acc_buf();
      const int m = tile.m0 + sub * 32 + lane;  // this lane's output row = its TMEM lane
      const u16* comb_ptr = comb + (u64)comb_row(m) * N + tile.n0;
      u16* out_blk = out + (u64)(tile.m0 + sub * 32) * N + tile.n0;  // row 0 of this warp's 32 rows
      const u32 t_row = tmem_base + ((u32)(sub * 32) << 16) + TMEM_ACC_COL + buf * TMEM_ACC_STRIDE;

      const u64 t0 = timing_now();
      mbarrier_wait_parity(&acc_full[buf], sched.acc_phase(), 3);  // each epilogue warp polls on its own
      tcgen05_fence_after_thread_sync();
      const u64 t1 = timing_now();
      u64 t2;
      if (NUM_EPI_WARPS == 4 || !epi_shares(warp))
        t2 = drain<0, TN>(t_row, comb_ptr, stage_buf, lane, out_blk, N, &acc_empty[buf]);  // a lane quarter of its own
      else if (warp < 6)
        t2 = drain<0, TN / 2>(t_row, comb_ptr, stage_buf, lane, out_blk, N, &acc_empty[buf]);
      else
        t2 = drain<TN / 2, TN>(t_row, comb_ptr, stage_buf, lane, out_blk, N, &acc_empty[buf]);
      if (lane == 0) {
        timing_record(timing, sched.slot(), PE_PHASE_ACC_WAIT, t0, t1);
        timing_record(timing, sched.slot(), PE_PHASE_EPI_PHASE1, t1, t2);
        PE_TIMING_END(timing, sched.slot(), PE_PHASE_EPI_PHASE2, t2);
      }
    }
  }

  // ---- teardown: every TMEM read of BOTH CTAs is done, and no arrival is still on its way to
  // either CTA, before the allocating warps free the columns and the pair exits ----
  tcgen05_fence_before_thread_sync();
  cluster_sync();
  if (warp == 1) {
    tcgen05_fence_after_thread_sync();
    tcgen05_dealloc<CG>(tmem_base, TMEM_COLS);
  }
}
