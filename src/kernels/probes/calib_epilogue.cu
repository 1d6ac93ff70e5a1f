// Calibration probe: the cycles of plain SASS between two protocol events, on sm90/06's epilogue
// (per tile: 16 B x 16 loads of comb, then + comb, one BF16 rounding, 16 x 16-B stores from the 128
// accumulators of a 64 x 256 tile), so a model can price the instructions between events at a measured
// CPI (cycles / SASS instructions of the loop, counted by pelib.predict.probes from this cubin). sm_90a.
// Not book content. 256 threads: warpgroup 0 runs `tiles` epilogues back to back on 06's schedule
// (CTA c: column block c % 3, row tiles c / 3, c / 3 + grid / 3, ...), timed per tile by thread 0;
// warpgroup 1 is the neighbour the epilogue shares the SM's sub-partitions with (`other`):
//   0 idle (it returns at once);  1 the same epilogue on the next row tiles;
//   2 a wgmma m64n256k32 chain of `chain` K slices from shared memory (the other warpgroup's K loop).
// `store` = 0 predicates the stores off (the compiler cannot prove it): the same instructions without
// the output traffic. Unit = CTA, warpgroup 0's thread 0; with `other` = 2, warpgroup 1's thread 0 also
// times its chain (CHAIN_CYCLES over CHAIN_WGMMAS): the tensor pipe's rate beside an epilogue, whose
// loads, stores and arithmetic share the SM sub-partitions and the L1 data path with the wgmma operands.
// Launched on 3 SMs (one row group) the stores meet no other SM's traffic: one SM's own store path.
#define PE_TIMING_WARPS 8
#include "probes/calib.cuh"
#include "common/tma.cuh"
#include "common/memory.cuh"
#include "common/convert.cuh"
#include "common/epilogue.cuh"
#include "common/descriptors.cuh"
#include "common/wgmma.cuh"

constexpr int BN = 256;
constexpr int CPR = BN / 8;
constexpr int GROUPS32 = BN / 32;
constexpr int SMEM_BYTES = 120 * 1024;         // one CTA per SM; B (32 KiB) and A (8 KiB) of the chain
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024, SWIZZLE = 128;

enum calib_epilogue_field : u32 {
  CALIB_EPILOGUE_TILES = 0,     // epilogues timed
  CALIB_EPILOGUE_TILE_SUM = 1,  // cycles per tile (comb loads + epilogue), summed
  CALIB_EPILOGUE_TILE_MIN = 2,
  CALIB_EPILOGUE_TILE_MAX = 3,
  CALIB_EPILOGUE_COMB_SUM = 4,  // cycles from the tile's start to its comb loads issued, summed
  CALIB_EPILOGUE_OTHER = 5,     // what warpgroup 1 ran (the `other` argument)
  CALIB_EPILOGUE_STORE = 6,     // the `store` argument
  CALIB_EPILOGUE_CHAIN_CYCLES = 7,  // other 2: warpgroup 1's chain, first fence to its last wait_group 0
  CALIB_EPILOGUE_CHAIN_WGMMAS = 8,  // other 2: the wgmma of that chain
  CALIB_EPILOGUE_FIELDS = 9
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(fields, CALIB_EPILOGUE_FIELDS);
PELIB_EXPORT(num_threads, 256);
PELIB_EXPORT(tile_m, 64);
PELIB_EXPORT(tile_n, BN);

// sm90/06's epilogue of one 64 x BN tile (rows m0.., columns n0..) by one warpgroup; `store` as above.
// Returns the clock64 after the comb loads were issued.
PE_DEVICE u64 epilogue(const float (&d)[BN / 2], const u16* comb, u16* c, int m0, int n0, int M, int N,
                       u32 store, int wq, int lane) {
  const u32 q = lane % 4;
  const int row0 = m0 + 16 * wq + lane / 4;
  u32 cb[BN / 4];
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
  const u64 t_loaded = clock64_read();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    u16* orow = c + (size_t)row * N + n0 + 8 * q;
    const bool ok = row < M && store != 0;
#pragma unroll
    for (int gg = 0; gg < GROUPS32; ++gg) {
      u32 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int j = 4 * gg + u;
        const u32 cv = cb[h * CPR + j];
        v[u] = f32x2_to_bf16x2(d[4 * j + 2 * h] + bf16lo_to_f32(cv), d[4 * j + 2 * h + 1] + bf16hi_to_f32(cv));
      }
      if (ok) st_global_cs_v4(orow + 32 * gg, v[0], v[1], v[2], v[3]);
    }
  }
  return t_loaded;
}

extern "C" __global__ void __launch_bounds__(256, 1)
calib_epilogue(const u16* __restrict__ comb, u16* __restrict__ c, u64* out, u64* timing, int M, int N, u32 tiles,
               u32 other, u32 chain, u32 store, u32 seed) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, wq = tid / 32, lane = tid % 32;
  if (wg == 1 && other == 0) return;
  const int nbs = N / BN, groups = (int)gridDim.x / nbs;
  const int g = (int)blockIdx.x / nbs, n0 = ((int)blockIdx.x % nbs) * BN;
  const int m_tiles = (M + 63) / 64;
  if (wg == 1 && other == 2) {
    calib_fill_smem(smem, BN * 128 + 64 * 128, seed, tid, 128);
    fence_proxy_async_shared_cta();
    named_barrier_sync(1, 128);
    const u64 desc_b = gmma_smem_desc(gmma_desc_addr(smem), DESC_LBO, DESC_SBO, SWIZZLE);
    const u64 desc_a = gmma_smem_desc(gmma_desc_addr(smem + BN * 128), DESC_LBO, DESC_SBO, SWIZZLE);
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    const u64 c0 = clock64_read();
    for (u32 kb = 0; kb < chain; ++kb) {
      wgmma_fence_operand(acc);
      warpgroup_arrive();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        wgmma_m64nNk32_f32_e4m3_e4m3<BN>(acc, desc_a + ((ks * 32) >> 4), desc_b + ((ks * 32) >> 4),
                                         (kb == 0 && ks == 0) ? 0u : 1u);
      wgmma_commit_group();
      wgmma_wait_group<1>();
    }
    wgmma_wait_group<0>();
    wgmma_fence_operand(acc);
    const u64 c1 = clock64_read();
    if (tid == 0) {
      u64* rec = calib_rec(out, blockIdx.x, CALIB_EPILOGUE_FIELDS);
      rec[CALIB_EPILOGUE_CHAIN_CYCLES] = c1 - c0;
      rec[CALIB_EPILOGUE_CHAIN_WGMMAS] = 4ull * chain;
    }
    return;
  }
  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = (float)(calib_hash(seed + threadIdx.x * 131u + i) & 0xFFFF) * (1.0f / 65536.0f);
  u64 sum = 0, mn = ~0ull, mx = 0, comb_sum = 0;
  const int first = wg == 0 ? 0 : (int)tiles;   // warpgroup 1 (other 1) takes the row tiles after warpgroup 0's
  for (u32 i = 0; i < tiles; ++i) {
    const int t = g + (first + (int)i) * groups;
    const int m0 = (t % m_tiles) * 64;
    const u64 t0 = clock64_read();
    const u64 t1 = epilogue(d, comb, c, m0, n0, M, N, store, wq, lane);
    const u64 t2 = clock64_read();
    sum += t2 - t0;
    comb_sum += t1 - t0;
    mn = t2 - t0 < mn ? t2 - t0 : mn;
    mx = t2 - t0 > mx ? t2 - t0 : mx;
  }
  if (wg == 0 && tid == 0) {
    u64* rec = calib_rec(out, blockIdx.x, CALIB_EPILOGUE_FIELDS);
    rec[CALIB_EPILOGUE_TILES] = tiles;
    rec[CALIB_EPILOGUE_TILE_SUM] = sum;
    rec[CALIB_EPILOGUE_TILE_MIN] = mn;
    rec[CALIB_EPILOGUE_TILE_MAX] = mx;
    rec[CALIB_EPILOGUE_COMB_SUM] = comb_sum;
    rec[CALIB_EPILOGUE_OTHER] = other;
    rec[CALIB_EPILOGUE_STORE] = store;
  }
}
