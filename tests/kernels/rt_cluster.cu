// GPU test: a (2,1,1) cluster. Each CTA publishes values in shared memory, the cluster barrier
// orders them, each thread reads its peer CTA's value through mapa + ld.shared::cluster; CTA
// thread 0 arrives on the peer's mbarrier (remote arrive) and waits on its own; elect.sync picks
// one lane per warp. Not book content.
#include "common/mbarrier.cuh"
#include "common/cluster.cuh"
#include "common/memory.cuh"
#include "common/export.cuh"

PELIB_EXPORT(smem_bytes, 0);

extern "C" __global__ void rt_cluster(u32* out, u32* ranks, u32* elected) {
  __shared__ u32 vals[256];
  __shared__ u64 bar;
  const u32 rank = cluster_ctarank();
  const u32 cta = blockIdx.x;
  vals[threadIdx.x] = cta * 1000 + threadIdx.x;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  cluster_sync();   // peers' vals and barrier init visible cluster-wide
  const u32 peer = rank ^ 1;
  const u32 remote = mapa_shared_cluster(smem_u32(&vals[threadIdx.x]), peer);
  out[cta * blockDim.x + threadIdx.x] = ld_shared_cluster_u32(remote);
  if (threadIdx.x == 0) {
    mbarrier_arrive_cluster(&bar, peer);        // my peer's barrier
    mbarrier_wait_parity_cluster(&bar, 0, 1);   // my barrier, arrived by my peer
    ranks[cta * 3 + 0] = rank;
    ranks[cta * 3 + 1] = cluster_nctarank();
    ranks[cta * 3 + 2] = cluster_id_x();
  }
  if (elect_one_sync()) atomicAdd(&elected[cta * (blockDim.x / 32) + threadIdx.x / 32], 1u);
  cluster_sync();   // keep my shared memory alive until my peer has read it
}
