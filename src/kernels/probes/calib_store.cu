// Calibration probe: TMA store issue and drain (cp.async.bulk.tensor shared -> global, bulk groups), the
// way the staged epilogues of sm90/03 store C. sm_90a. Not book content.
// One thread per active CTA stores `iters` boxes of C's shape (32 rows x 64 BF16 = 4 KiB, 128-B swizzle,
// the box of the stages' tmap_c) from a ring of STAGING shared buffers, row tiles in order (CTA c:
// rows 32c, 32(c + active), ...; all 12 column boxes of a 768-wide row band before the next band):
//   ISSUE   clock64 around one store + its commit_group: what the storing thread pays per box;
//   READ    every `group` stores, cp.async.bulk.wait_group.read 0: until the staging may be rewritten;
//   DRAIN   then cp.async.bulk.wait_group 0: until the writes are complete (PTX ISA
//           cp.async.bulk.wait_group: .read waits for the source reads only).
// `group` (<= STAGING) is how many stores are in flight before the thread waits.
// Unit = CTA. The write bandwidth of the sweep is the stored bytes over the launch-clock span.
#ifndef STAGING
#define STAGING 8          // 4-KiB staging buffers (the most stores in flight)
#endif
#define PE_TIMING_WARPS 1
#include "probes/calib.cuh"
#include "common/cutensormap.cuh"

constexpr int BOX_BYTES = 32 * 64 * 2;
constexpr int SMEM_NEED = 1024 + STAGING * BOX_BYTES;
constexpr int SMEM_BYTES = SMEM_NEED > 120 * 1024 ? SMEM_NEED : 120 * 1024;   // one CTA per SM
constexpr int COL_BOXES = 768 / 64;   // boxes per row band of the patch-embed output (N = 768)
static_assert(STAGING >= 1 && STAGING <= 32, "STAGING: 1 to 32 buffers");

enum calib_store_field : u32 {
  CALIB_STORE_STORES = 0,      // boxes stored by this CTA
  CALIB_STORE_ISSUE_SUM = 1,   // cycles of store + commit, summed
  CALIB_STORE_ISSUE_MAX = 2,
  CALIB_STORE_GROUPS = 3,      // wait points (every `group` stores, and the tail)
  CALIB_STORE_READ_SUM = 4,    // cycles in wait_group.read 0, summed over the wait points
  CALIB_STORE_DRAIN_SUM = 5,   // cycles in the wait_group 0 after it, summed
  CALIB_STORE_DRAIN_MAX = 6,
  CALIB_STORE_BYTES = 7,
  CALIB_STORE_FIRST = 8,       // clock64 before the first store
  CALIB_STORE_LAST = 9,        // clock64 after the last drain
  CALIB_STORE_FIELDS = 10
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(num_threads, 32);
PELIB_EXPORT(staging, STAGING);
PELIB_EXPORT(fields, CALIB_STORE_FIELDS);
PELIB_EXPORT_TMAP(c, 32, 64, 128, 2);

extern "C" __global__ void __launch_bounds__(32, 1)
calib_store(const __grid_constant__ CUtensorMap tmap_c, u64* out, u64* timing, u32 iters, u32 group, u32 active,
            u32 m_bands, u32 seed) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  if (blockIdx.x >= active) return;
  calib_fill_smem(smem, STAGING * BOX_BYTES, seed, threadIdx.x, 32);   // BF16 bits: any pattern is a value
  fence_proxy_async_shared_cta();     // generic-proxy writes before the TMA store (async proxy) reads them
  __syncwarp();
  if (threadIdx.x != 0) return;
  prefetch_tensormap(&tmap_c);
  const u32 g = group < 1 ? 1 : (group > STAGING ? STAGING : group);
  u64 iss_sum = 0, iss_max = 0, rd_sum = 0, dr_sum = 0, dr_max = 0, waits = 0;
  const u64 first = clock64_read();
  for (u32 it = 0; it < iters; ++it) {
    const u32 band = (blockIdx.x + (it / COL_BOXES) * active) % m_bands;
    const u64 t0 = clock64_read();
    tma_store_2d(&tmap_c, smem + (it % g) * BOX_BYTES, (i32)((it % COL_BOXES) * 64), (i32)(band * 32));
    cp_async_bulk_commit_group();
    const u64 t1 = clock64_read();
    iss_sum += t1 - t0;
    iss_max = t1 - t0 > iss_max ? t1 - t0 : iss_max;
    if ((it + 1) % g == 0 || it + 1 == iters) {
      const u64 w0 = clock64_read();
      cp_async_bulk_wait_group_read<0>();
      const u64 w1 = clock64_read();
      cp_async_bulk_wait_group<0>();
      const u64 w2 = clock64_read();
      rd_sum += w1 - w0;
      dr_sum += w2 - w1;
      dr_max = w2 - w1 > dr_max ? w2 - w1 : dr_max;
      ++waits;
    }
  }
  const u64 last = clock64_read();
  u64* rec = calib_rec(out, blockIdx.x, CALIB_STORE_FIELDS);
  rec[CALIB_STORE_STORES] = iters;
  rec[CALIB_STORE_ISSUE_SUM] = iss_sum;
  rec[CALIB_STORE_ISSUE_MAX] = iss_max;
  rec[CALIB_STORE_GROUPS] = waits;
  rec[CALIB_STORE_READ_SUM] = rd_sum;
  rec[CALIB_STORE_DRAIN_SUM] = dr_sum;
  rec[CALIB_STORE_DRAIN_MAX] = dr_max;
  rec[CALIB_STORE_BYTES] = (u64)iters * BOX_BYTES;
  rec[CALIB_STORE_FIRST] = first;
  rec[CALIB_STORE_LAST] = last;
}
