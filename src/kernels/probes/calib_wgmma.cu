// Calibration probe: the cost of wgmma.mma_async m64nNk32 e4m3 (both operands from shared memory, SW128
// descriptors exactly as the sm90 stages build them) on one SM's tensor pipe, with NUM_WG consumer
// warpgroups issuing at once (1, or 2 as the ping-pong stages 03c-11 run them). sm_90a. Not book content.
// Unit = (CTA, warpgroup); every warpgroup measures, each on its own A slice and the shared B, started
// together by a named barrier:
//   LAT      one wgmma, commit, wait_group 0: issue-to-complete latency of a single instruction;
//   ISSUE    one K slice as the stages issue it (fence, 4 wgmma k32 = 128 B of K, commit): cycles until
//            the commit returns (the issue cost the warpgroup pays);
//   SLICE    the same slice until wait_group 0 returns: its completion;
//   CHAIN    `chain` slices back to back as the stages' K loop runs them (commit, then wait_group 1 on
//            the slice before): cycles per wgmma in the steady state, the tensor pipe's throughput
//            as this warpgroup sees it (two warpgroups share one pipe: each sees about twice the
//            cycles when the pipe is the limit).
// Method: Luo et al., "Dissecting the NVIDIA Hopper Architecture through Microbenchmarking and
// Multiple Level Analysis" (arXiv 2501.12084), wgmma latency and throughput by clock64 around
// dependent and independent wgmma groups; PTX ISA 9.7.15 (wgmma.mma_async, commit_group, wait_group).
#ifndef BLOCK_N
#define BLOCK_N 256        // the wgmma N: 128, 192 or 256 (the sm90 stages' shapes)
#endif
#ifndef NUM_WG
#define NUM_WG 1           // consumer warpgroups issuing at once
#endif
#ifndef REPS
#define REPS 8             // samples of LAT, ISSUE and SLICE
#endif
#define PE_TIMING_WARPS (4 * NUM_WG)
#include "probes/calib.cuh"
#include "common/tma.cuh"
#include "common/descriptors.cuh"
#include "common/wgmma.cuh"

constexpr int BN = BLOCK_N;
constexpr int BK = 128;                          // one SW128 atom of FP8 along K: 4 k32 steps
constexpr int A_BYTES = 64 * BK;                 // one m64 slice per warpgroup
constexpr int B_BYTES = BN * BK;
constexpr int SMEM_A_OFF = 32 * 1024;            // B first (<= 32 KiB), then NUM_WG A slices
constexpr int SMEM_USED = SMEM_A_OFF + NUM_WG * A_BYTES;
// One CTA per SM: ask for more than half of the 227 KiB a CTA may have (the unused rest is never touched).
constexpr int SMEM_BYTES = 120 * 1024;
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024, SWIZZLE = 128;
static_assert(BN == 128 || BN == 192 || BN == 256, "BLOCK_N: the sm90 stages' wgmma N (128, 192, 256)");
static_assert(NUM_WG == 1 || NUM_WG == 2, "NUM_WG: 1 or 2 consumer warpgroups");
static_assert(SMEM_USED + 1024 <= SMEM_BYTES, "operands exceed the probe's shared memory");

enum calib_wgmma_field : u32 {
  CALIB_WGMMA_LAT_MIN = 0,       // cycles, one wgmma + commit + wait_group 0 (min over REPS)
  CALIB_WGMMA_LAT_SUM = 1,       // ... summed over REPS
  CALIB_WGMMA_ISSUE_MIN = 2,     // cycles, fence + 4 wgmma + commit (min over REPS)
  CALIB_WGMMA_ISSUE_SUM = 3,
  CALIB_WGMMA_SLICE_MIN = 4,     // cycles, fence + 4 wgmma + commit + wait_group 0 (min over REPS)
  CALIB_WGMMA_SLICE_SUM = 5,
  CALIB_WGMMA_REPS = 6,          // REPS
  CALIB_WGMMA_CHAIN_CYCLES = 7,  // cycles of `chain` slices in the K-loop pattern
  CALIB_WGMMA_CHAIN_WGMMAS = 8,  // wgmma instructions in the chain (4 per slice)
  CALIB_WGMMA_CHECK = 9,         // float bits of accumulator 0 of thread 0 after the chain (scale_d 0 first)
  CALIB_WGMMA_FIELDS = 10
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(fields, CALIB_WGMMA_FIELDS);
PELIB_EXPORT(num_threads, 128 * NUM_WG);
PELIB_EXPORT(wgmma_n, BN);
PELIB_EXPORT(num_wg, NUM_WG);
PELIB_EXPORT(units_per_cta, NUM_WG);   // records per CTA: one per warpgroup
PELIB_EXPORT(reps, REPS);

// One K slice: 4 wgmma k32 over A slice `desc_a` and B (K offset 32 B per step inside the SW128 atom).
PE_DEVICE void slice(float (&d)[BN / 2], u64 desc_a, u64 desc_b, u32 first) {
#pragma unroll
  for (int ks = 0; ks < BK / 32; ++ks)
    wgmma_m64nNk32_f32_e4m3_e4m3<BN>(d, desc_a + ((ks * 32) >> 4), desc_b + ((ks * 32) >> 4),
                                     (first && ks == 0) ? 0u : 1u);
}

extern "C" __global__ void __launch_bounds__(128 * NUM_WG, 1)
calib_wgmma(u64* out, u64* timing, u32 chain, u32 seed) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const u32 tid = threadIdx.x % 128, wg = threadIdx.x / 128;
  calib_fill_smem(smem, B_BYTES, seed, threadIdx.x, blockDim.x);
  calib_fill_smem(smem + SMEM_A_OFF, NUM_WG * A_BYTES, seed + 1, threadIdx.x, blockDim.x);
  fence_proxy_async_shared_cta();     // generic-proxy writes before the wgmma (async proxy) reads them
  __syncthreads();
  const u64 desc_b = gmma_smem_desc(gmma_desc_addr(smem), DESC_LBO, DESC_SBO, SWIZZLE);
  const u64 desc_a = gmma_smem_desc(gmma_desc_addr(smem + SMEM_A_OFF + wg * A_BYTES), DESC_LBO, DESC_SBO, SWIZZLE);
  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
  u64 lat_min = ~0ull, lat_sum = 0, iss_min = ~0ull, iss_sum = 0, sl_min = ~0ull, sl_sum = 0;
  for (int r = 0; r < REPS; ++r) {
    named_barrier_sync(1, 128 * NUM_WG);          // the warpgroups start each sample together
    u64 t0 = clock64_read();
    wgmma_fence_operand(d);
    warpgroup_arrive();
    wgmma_m64nNk32_f32_e4m3_e4m3<BN>(d, desc_a, desc_b, 1u);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    wgmma_fence_operand(d);
    u64 t1 = clock64_read();
    lat_min = t1 - t0 < lat_min ? t1 - t0 : lat_min;
    lat_sum += t1 - t0;
    named_barrier_sync(1, 128 * NUM_WG);
    t0 = clock64_read();
    wgmma_fence_operand(d);
    warpgroup_arrive();
    slice(d, desc_a, desc_b, 0);
    wgmma_commit_group();
    t1 = clock64_read();
    wgmma_wait_group<0>();
    wgmma_fence_operand(d);
    const u64 t2 = clock64_read();
    iss_min = t1 - t0 < iss_min ? t1 - t0 : iss_min;
    iss_sum += t1 - t0;
    sl_min = t2 - t0 < sl_min ? t2 - t0 : sl_min;
    sl_sum += t2 - t0;
  }
  // The K-loop pattern of the stages: slice kb committed, then wait for slice kb - 1 (wait_group 1).
  named_barrier_sync(1, 128 * NUM_WG);
  const u64 c0 = clock64_read();
  for (u32 kb = 0; kb < chain; ++kb) {
    wgmma_fence_operand(d);
    warpgroup_arrive();
    slice(d, desc_a, desc_b, kb == 0);
    wgmma_commit_group();
    wgmma_wait_group<1>();
  }
  wgmma_wait_group<0>();
  wgmma_fence_operand(d);
  const u64 c1 = clock64_read();
  if (tid == 0) {
    u64* rec = calib_rec(out, (u64)blockIdx.x * NUM_WG + wg, CALIB_WGMMA_FIELDS);
    rec[CALIB_WGMMA_LAT_MIN] = lat_min;
    rec[CALIB_WGMMA_LAT_SUM] = lat_sum;
    rec[CALIB_WGMMA_ISSUE_MIN] = iss_min;
    rec[CALIB_WGMMA_ISSUE_SUM] = iss_sum;
    rec[CALIB_WGMMA_SLICE_MIN] = sl_min;
    rec[CALIB_WGMMA_SLICE_SUM] = sl_sum;
    rec[CALIB_WGMMA_REPS] = REPS;
    rec[CALIB_WGMMA_CHAIN_CYCLES] = c1 - c0;
    rec[CALIB_WGMMA_CHAIN_WGMMAS] = (u64)chain * (BK / 32);
    rec[CALIB_WGMMA_CHECK] = __float_as_uint(d[0]);
  }
}
