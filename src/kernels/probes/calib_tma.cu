// Calibration probe: TMA load latency as a function of the DRAM load and of access locality (a loaded-
// latency sweep). sm_90a. Not book content.
// One thread per CTA keeps `depth` (<= RING) TMA tile loads of A's shape in flight (box 64 rows x 128 B,
// 128-B swizzle: one K slice of one row tile, 8 KiB, as every sm90 stage loads A) and records each
// load's latency: clock64 just before the cp.async.bulk.tensor to the clock64 at which its mbarrier
// try_wait first passes. CTAs with blockIdx.x >= `active` (clusters >= active / CALIB_CLUSTER) return at once,
// so `active` sets how many SMs load concurrently, `depth` how much each keeps in flight; together they
// set the DRAM load. `pattern`:
//   0 sequential window: CTA c walks row tiles c, c + active, ... and in each the K slices 0..k_slices-1,
//     the order in which the stages stream A (the grid sweeps A front to back, `active` tiles at a time);
//   1 scattered: each load a hashed (row tile, K slice) anywhere in the tensor (no locality at all);
//   2 resident: the sequential walk folded onto the first `footprint` row tiles (the host launches it
//     twice and keeps the second: the L2 latency under the same load).
// CALIB_CLUSTER=2: the CTAs of a cluster walk one tile sequence together and each loads half the box (32
// rows) multicast to both (.multicast::cluster, mask 0b11, as stage 05 loads A); a slot is reused once
// both CTAs saw it full (an empty barrier per slot with one arrival from each CTA, the stages'
// protocol). The latency is then issue-to-full at each CTA: its own half and the peer's.
// Loads are waited for in issue order: one that lands before an older one is seen when the older one
// is (in-order completion is what the stages' rings wait for too).
// CALIB_BURST=1: the thread issues `depth` boxes back to back, all completing on one mbarrier armed with
// their bytes, and waits for that one barrier; a sample is one burst's time (first issue to the wait
// passing). A burst of d boxes takes the first box's latency plus what the SM's TMA unit needs to move the
// other d - 1: the slope over d is the unit's rate, free of the one-barrier-per-box waits above (whose
// latency at depth d reads d times one box's even from L2).
// Unit = CTA: the summary fields below, then SAMPLES per-load latencies (cycles, in issue order).
// Method: the loaded-latency curve of Intel Memory Latency Checker (latency measured while other
// agents inject traffic at controlled rates), here with the stages' own access unit; Luo et al.
// (arXiv 2501.12084) measure Hopper TMA latency per access pattern the same way.
#ifndef CALIB_CLUSTER
#define CALIB_CLUSTER 1          // 1: plain loads; 2: a cluster pair, each CTA half the box, multicast to both
#endif
#ifndef RING
#define RING 8             // most loads in flight per CTA (shared-memory slots of 8 KiB)
#endif
#ifndef CALIB_BURST
#define CALIB_BURST 0      // 1: bursts of `depth` boxes on one barrier (the TMA unit's rate), see above
#endif
#ifndef SAMPLES
#define SAMPLES 512        // per-load latencies recorded per CTA (loads beyond are summarized only)
#endif
#define PE_TIMING_WARPS 1
#include "probes/calib.cuh"
#include "common/mbarrier.cuh"
#include "common/cutensormap.cuh"

constexpr int BOX_ROWS = 64 / CALIB_CLUSTER;          // rows this CTA's load brings (the whole box across the cluster)
constexpr int SLOT_BYTES = 64 * 128;            // one A tile slice
constexpr int SMEM_BAR_OFF = RING * SLOT_BYTES;
// One CTA per SM: more than half of the 227 KiB a CTA may have, whatever the ring needs.
constexpr int SMEM_NEED = 1024 + SMEM_BAR_OFF + 2 * RING * 8;
constexpr int SMEM_BYTES = SMEM_NEED > 120 * 1024 ? SMEM_NEED : 120 * 1024;
static_assert(CALIB_CLUSTER == 1 || CALIB_CLUSTER == 2, "CALIB_CLUSTER: 1 or 2");
static_assert(RING >= 1 && RING <= 16, "RING: 1 to 16 slots");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "the ring exceeds the per-block shared memory");

enum calib_tma_field : u32 {
  CALIB_TMA_LOADS = 0,         // loads issued (and waited for) by this CTA
  CALIB_TMA_LAT_SUM = 1,       // cycles, summed over the loads
  CALIB_TMA_LAT_MIN = 2,
  CALIB_TMA_LAT_MAX = 3,
  CALIB_TMA_BYTES = 4,         // bytes this CTA's loads brought into its shared memory
  CALIB_TMA_FIRST = 5,         // clock64 at the first issue (the host maps it onto the globaltimer)
  CALIB_TMA_LAST = 6,          // clock64 at the last completion
  CALIB_TMA_SAMPLE0 = 7,       // SAMPLES latencies follow, one per word, from here
  CALIB_TMA_FIELDS = 7 + SAMPLES
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(num_threads, 32);
PELIB_EXPORT(cluster_x, CALIB_CLUSTER);
PELIB_EXPORT(ring, RING);
PELIB_EXPORT(samples, SAMPLES);
PELIB_EXPORT(fields, CALIB_TMA_FIELDS);
PELIB_EXPORT_TMAP(a, BOX_ROWS, 128, 128, 1);

// The (row tile, K slice) of load `it` of walker `w` (of `walkers`) under `pattern`.
PE_DEVICE void calib_tile(u32 pattern, u32 w, u32 walkers, u32 it, u32 m_tiles, u32 k_slices, u32 footprint,
                          u32& tile, u32& kb) {
  if (pattern == 1) {
    const u32 h = calib_hash(w * 0x01000193u + it * 0x9E3779B9u + 0x51ED27u);
    tile = h % m_tiles;
    kb = calib_hash(h) % k_slices;
    return;
  }
  tile = w + (it / k_slices) * walkers;
  kb = it % k_slices;
  tile %= (pattern == 2 ? footprint : m_tiles);
}

extern "C" __global__ void __launch_bounds__(32, 1)
calib_tma(const __grid_constant__ CUtensorMap tmap_a, u64* out, u64* timing, u32 pattern, u32 depth, u32 iters,
          u32 active, u32 m_tiles, u32 k_slices, u32 footprint) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  u64* full = reinterpret_cast<u64*>(smem + SMEM_BAR_OFF);
  u64* empty = full + RING;
  const u32 rank = CALIB_CLUSTER > 1 ? cluster_ctarank() : 0;
  (void)rank;
  const u32 walker = blockIdx.x / CALIB_CLUSTER, walkers = active / CALIB_CLUSTER;
  const bool on = blockIdx.x < walkers * CALIB_CLUSTER;
  if (threadIdx.x == 0) {
    prefetch_tensormap(&tmap_a);
    for (int s = 0; s < RING; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], CALIB_CLUSTER);
    }
    fence_barrier_init();
  }
  if (CALIB_CLUSTER > 1) cluster_sync(); else __syncthreads();   // barriers initialized before any peer uses them
#if CALIB_BURST
  static_assert(CALIB_CLUSTER == 1, "CALIB_BURST: plain loads only");
  if (on && threadIdx.x == 0) {
    const u32 d = depth < 1 ? 1 : (depth > RING ? RING : depth);
    u64 lat_sum = 0, lat_min = ~0ull, lat_max = 0, first = 0, last = 0;
    u64* rec = calib_rec(out, blockIdx.x, CALIB_TMA_FIELDS);
    const u32 bursts = iters / d;
    for (u32 b = 0; b < bursts; ++b) {
      const u64 t = clock64_read();
      if (b == 0) first = t;
      mbarrier_arrive_expect_tx(&full[0], d * SLOT_BYTES);
      for (u32 s = 0; s < d; ++s) {
        u32 tile, kb;
        calib_tile(pattern, walker, walkers, b * d + s, m_tiles, k_slices, footprint, tile, kb);
        tma_load_2d(smem + s * SLOT_BYTES, &tmap_a, &full[0], (i32)(kb * 128), (i32)(tile * 64));
      }
      mbarrier_wait_parity_nocall(&full[0], b & 1, 2);
      const u64 t1 = clock64_read();
      const u64 lat = t1 - t;
      last = t1;
      lat_sum += lat;
      lat_min = lat < lat_min ? lat : lat_min;
      lat_max = lat > lat_max ? lat : lat_max;
      if (b < SAMPLES) rec[CALIB_TMA_SAMPLE0 + b] = lat;
    }
    rec[CALIB_TMA_LOADS] = bursts;
    rec[CALIB_TMA_LAT_SUM] = lat_sum;
    rec[CALIB_TMA_LAT_MIN] = lat_min;
    rec[CALIB_TMA_LAT_MAX] = lat_max;
    rec[CALIB_TMA_BYTES] = (u64)bursts * d * SLOT_BYTES;
    rec[CALIB_TMA_FIRST] = first;
    rec[CALIB_TMA_LAST] = last;
  }
#else
  if (on && threadIdx.x == 0) {
    const u32 d = depth < 1 ? 1 : (depth > RING ? RING : depth);
    u64 issued_at[RING];
    u64 lat_sum = 0, lat_min = ~0ull, lat_max = 0, first = 0, last = 0;
    u64* rec = calib_rec(out, blockIdx.x, CALIB_TMA_FIELDS);
    // issue load `it` into slot it % d: arm the slot's full barrier, then the box (or this CTA's half)
    auto issue = [&](u32 it) {
      const u32 s = it % d;
      if (CALIB_CLUSTER > 1 && it >= d) mbarrier_wait_parity_nocall(&empty[s], ((it / d) - 1) & 1, 1);
      u32 tile, kb;
      calib_tile(pattern, walker, walkers, it, m_tiles, k_slices, footprint, tile, kb);
      const u64 t = clock64_read();
      mbarrier_arrive_expect_tx(&full[s], SLOT_BYTES);
#if CALIB_CLUSTER > 1
      tma_load_2d_multicast(smem + s * SLOT_BYTES + rank * BOX_ROWS * 128, &tmap_a, &full[s], (u16)0x3,
                            (i32)(kb * 128), (i32)(tile * 64 + rank * BOX_ROWS));
#else
      tma_load_2d(smem + s * SLOT_BYTES, &tmap_a, &full[s], (i32)(kb * 128), (i32)(tile * 64));
#endif
      issued_at[s] = t;
      if (it == 0) first = t;
    };
    for (u32 it = 0; it < d && it < iters; ++it) issue(it);
    for (u32 it = 0; it < iters; ++it) {
      const u32 s = it % d;
      mbarrier_wait_parity_nocall(&full[s], (it / d) & 1, 2);
      const u64 t = clock64_read();
      const u64 lat = t - issued_at[s];
      last = t;
      lat_sum += lat;
      lat_min = lat < lat_min ? lat : lat_min;
      lat_max = lat > lat_max ? lat : lat_max;
      if (it < SAMPLES) rec[CALIB_TMA_SAMPLE0 + it] = lat;
#if CALIB_CLUSTER > 1
      mbarrier_arrive(&empty[s]);                       // this CTA saw the slot full ...
      mbarrier_arrive_remote_cta(&empty[s], rank ^ 1);  // ... and tells the peer, whose multicast refills it
#endif
      if (it + d < iters) issue(it + d);
    }
    rec[CALIB_TMA_LOADS] = iters;
    rec[CALIB_TMA_LAT_SUM] = lat_sum;
    rec[CALIB_TMA_LAT_MIN] = lat_min;
    rec[CALIB_TMA_LAT_MAX] = lat_max;
    rec[CALIB_TMA_BYTES] = (u64)iters * SLOT_BYTES;
    rec[CALIB_TMA_FIRST] = first;
    rec[CALIB_TMA_LAST] = last;
  }
#endif
  if (CALIB_CLUSTER > 1) cluster_sync();   // neither CTA leaves while the peer may still arrive on its barriers
}
