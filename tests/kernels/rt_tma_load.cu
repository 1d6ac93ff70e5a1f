// GPU test: one TMA tiled load (2D or 3D, RANK=2|3) of a 128-B swizzled box into dynamic shared
// memory above 48 KB, completion through mbarrier expect_tx; the raw shared bytes are dumped so
// the host can check the swizzle element by element. Not book content.
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/export.cuh"

#ifndef RANK
#define RANK 2
#endif
#ifndef BOX_BYTES
#define BOX_BYTES 8192          // bytes one box delivers (the expect_tx count)
#endif
#define SMEM_BYTES (64 * 1024 + 1024)   // > 48 KB on purpose: launch must set the attribute
PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(box_bytes, BOX_BYTES);

extern "C" __global__ void rt_tma_load(const __grid_constant__ TensorMap tmap, u8* dump, u32* info,
                                       i32 c0, i32 c1, i32 c2) {
  extern __shared__ __align__(1024) u8 smem[];
  u64* bar = reinterpret_cast<u64*>(smem + 64 * 1024);   // barrier after the tile region
  if (threadIdx.x == 0) {
    prefetch_tensormap(&tmap);
    mbarrier_init(bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(bar, BOX_BYTES);
#if RANK == 3
    tma_load_3d(smem, &tmap, bar, c0, c1, c2);
#else
    tma_load_2d_hint(smem, &tmap, bar, c0, c1, PE_CACHE_EVICT_FIRST);
#endif
  }
  mbarrier_wait_parity(bar, 0, 1);
  for (u32 i = threadIdx.x; i < BOX_BYTES; i += blockDim.x) dump[i] = smem[i];
  if (threadIdx.x == 0) info[0] = smem_u32(smem) % 1024;   // the swizzle reads address bits
}
