// GPU proof of pelib.emulate: a shared image given by the host (already swizzled) goes out through
// one TMA tiled 2D store at `src_offset`; the host compares global memory with the emulator's store
// (swizzle by address, out-of-bounds parts dropped). sm_90a. Not book content.
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/export.cuh"

#ifndef IMAGE_BYTES
#define IMAGE_BYTES 32768
#endif
PELIB_EXPORT(smem_bytes, IMAGE_BYTES + 1024);
PELIB_EXPORT(image_bytes, IMAGE_BYTES);

extern "C" __global__ void emu_tma_store(const __grid_constant__ TensorMap tmap, const u8* image,
                                         u32* info, i32 c0, i32 c1, u32 src_offset) {
  extern __shared__ __align__(1024) u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  for (u32 i = threadIdx.x; i < IMAGE_BYTES; i += blockDim.x) smem[i] = image[i];
  fence_proxy_async_shared_cta();                    // st.shared before the async-proxy read
  __syncthreads();
  if (threadIdx.x == 0) {
    tma_store_2d(&tmap, smem + src_offset, c0, c1);
    cp_async_bulk_commit_group();
    cp_async_bulk_wait_group<0>();
    info[0] = smem_u32(smem) % 1024;
  }
}
