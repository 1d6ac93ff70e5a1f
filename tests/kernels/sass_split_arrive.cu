// Timing-model test: a cluster barrier whose arrive and wait sit on lines of their own, with work
// between them (barrier.cluster.arrive.relaxed ... barrier.cluster.wait, PTX ISA 9.7.13.4), and one
// cluster_sync() whose arrive and wait share a line. tests/test_predict.py walks its SASS. Not book content.
#include "common/mbarrier.cuh"
#include "common/cluster.cuh"
#include "common/memory.cuh"
#include "common/export.cuh"

PELIB_EXPORT(smem_bytes, 0);

extern "C" __global__ void sass_split_arrive(u32* out, u32 n) {
  __shared__ u32 vals[128];
  vals[threadIdx.x] = threadIdx.x;
  __syncthreads();                                   // SPLIT_LINE_SYNC
  cluster_arrive_relaxed();                          // SPLIT_LINE_ARRIVE
  u32 acc = 0;
  for (u32 i = 0; i < n; ++i) acc += vals[(threadIdx.x + i) % 128] * i;
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;  // SPLIT_LINE_WORK
  cluster_wait();                                    // SPLIT_LINE_WAIT
  const u32 peer = mapa_shared_cluster(smem_u32(&vals[threadIdx.x]), cluster_ctarank() ^ 1);
  out[blockIdx.x * blockDim.x + threadIdx.x] += ld_shared_cluster_u32(peer);
  cluster_sync();                                    // SPLIT_LINE_SYNC_BOTH
}
