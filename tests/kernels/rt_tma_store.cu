// GPU test: fill a shared tile with ordinary stores, fence to the async proxy, and write it to
// global memory with one TMA tensor store (bulk group commit + wait). Not book content.
#include "common/tma.cuh"
#include "common/export.cuh"

#define ROWS 16
#define COLS 32   // float32: 128 B rows
PELIB_EXPORT(smem_bytes, 0);

extern "C" __global__ void rt_tma_store(const __grid_constant__ TensorMap tmap, i32 c0, i32 c1) {
  __shared__ __align__(128) float tile[ROWS * COLS];
  for (u32 i = threadIdx.x; i < ROWS * COLS; i += blockDim.x)
    tile[i] = (float)((i / COLS) * 1000 + (i % COLS));   // value = row * 1000 + col
  fence_proxy_async_shared_cta();   // generic-proxy writes before the async-proxy read
  __syncthreads();
  if (threadIdx.x == 0) {
    tma_store_2d(&tmap, tile, c0, c1);
    cp_async_bulk_commit_group();
    cp_async_bulk_wait_group_read<0>();   // smem may be reused from here
    cp_async_bulk_wait_group<0>();        // global writes done
  }
  __syncthreads();
}
