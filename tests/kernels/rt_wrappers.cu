// Compile test: instantiates every wrapper of common/{mbarrier,tma,cluster,timing}.cuh once, so
// ptxas checks each PTX string for sm_90a and sm_100a (the cta_group::2 forms only on sm_100a).
// Never launched.
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/cluster.cuh"
#include "common/memory.cuh"
#include "common/timing.cuh"

extern "C" __global__ void rt_wrappers(const __grid_constant__ TensorMap tmap, u64* timing,
                                       u32* out, u32 flag) {
  __shared__ alignas(1024) u8 tile[8192];
  __shared__ u64 bars[2];
  u64 t0 = timing_now();
  const u32 tid = threadIdx.x;
  if (tid == 0) {
    prefetch_tensormap(&tmap);
    mbarrier_init(&bars[0], 1);
    mbarrier_init(&bars[1], cluster_nctarank());
    fence_barrier_init();
  }
  cluster_arrive_relaxed();
  cluster_wait();
  if (elect_one_sync() && tid < 32) {
    mbarrier_arrive_expect_tx(&bars[0], 4096);
    mbarrier_expect_tx(&bars[0], 0);
    tma_load_2d(tile, &tmap, &bars[0], 0, 0);
    tma_load_3d(tile, &tmap, &bars[0], 0, 0, 0);
    tma_load_2d_hint(tile, &tmap, &bars[0], 0, 0, PE_CACHE_EVICT_FIRST);
    tma_load_3d_hint(tile, &tmap, &bars[0], 0, 0, 0, PE_CACHE_EVICT_LAST);
    tma_load_2d_multicast(tile, &tmap, &bars[0], (u16)0x3, 0, 0);
    tma_load_3d_multicast(tile, &tmap, &bars[0], (u16)0x3, 0, 0, 0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
    tma_load_2d_cta2(tile, &tmap, &bars[0], 0, 0);
    tma_load_3d_cta2(tile, &tmap, &bars[0], 0, 0, 0);
    tma_load_2d_cta2_hint(tile, &tmap, &bars[0], 0, 0, PE_CACHE_EVICT_NORMAL);
    tma_load_2d_cta2_multicast(tile, &tmap, &bars[0], (u16)0x3, 0, 0);
    tma_load_3d_cta2_multicast(tile, &tmap, &bars[0], (u16)0x3, 0, 0, 0);
#endif
  }
  mbarrier_wait_parity(&bars[0], 0, 1);
  if (!mbarrier_try_wait_parity(&bars[0], 1)) mbarrier_wait_parity_cluster(&bars[0], 1, 2);
  if (flag) (void)mbarrier_try_wait_parity_cluster(&bars[0], 0);
  if (tid == 0) {
    mbarrier_arrive(&bars[1]);
    mbarrier_arrive_cluster(&bars[1], cluster_ctarank() ^ 1);
  }
  tile[tid] = (u8)tid;
  fence_proxy_async_shared_cta();
  named_barrier_sync(1, blockDim.x);
  if (tid == 0) {
    tma_store_2d(&tmap, tile, 0, 0);
    tma_store_3d(&tmap, tile, 0, 0, 0);
    cp_async_bulk_commit_group();
    cp_async_bulk_wait_group_read<0>();
    cp_async_bulk_wait_group<0>();
  }
  if (tid >= 32) named_barrier_arrive(2, blockDim.x);
  const u32 peer = mapa_shared_cluster(smem_u32(tile), cluster_ctarank() ^ 1);
  u32 v = ld_shared_cluster_u32(peer) + (u32)ld_shared_cluster_u64(peer + 8);
  if (flag == 7) st_shared_cluster_u32(peer, v);
  v += smid() + lane_id() + cluster_id_x() + cluster_nclusterid_x() + (u32)globaltimer_read() +
       (u32)clock64_read();
  cluster_sync();
  if (tid == 0) mbarrier_inval(&bars[0]);
  out[blockIdx.x * blockDim.x + tid] = v;
  timing_record(timing, 0, PE_PHASE_TILE, t0, timing_now());
  PE_TIMING_END(timing, 1, PE_PHASE_KLOOP, t0);
}
