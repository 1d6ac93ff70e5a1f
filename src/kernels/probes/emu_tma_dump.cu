// GPU proof of pelib.emulate: one TMA tiled 2D load into a poisoned, 1024-B aligned shared image at
// `dst_offset`; the whole image comes back so the host compares it byte for byte with the emulator's
// (swizzle by address, element strides, out-of-bounds zero fill). sm_90a. Not book content.
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/export.cuh"

#ifndef IMAGE_BYTES
#define IMAGE_BYTES 32768
#endif
#define POISON 0x7F                                  // pelib.emulate.SmemImage.POISON
PELIB_EXPORT(smem_bytes, IMAGE_BYTES + 2048);        // image + alignment slack + barrier
PELIB_EXPORT(image_bytes, IMAGE_BYTES);

extern "C" __global__ void emu_tma_dump(const __grid_constant__ TensorMap tmap, u8* image, u32* info,
                                        i32 c0, i32 c1, u32 dst_offset, u32 box_bytes) {
  extern __shared__ __align__(1024) u8 smem_raw[];
  // Align the image ourselves: the swizzle is a function of the shared address.
  u8* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  u64* bar = reinterpret_cast<u64*>(smem + IMAGE_BYTES);
  for (u32 i = threadIdx.x; i < IMAGE_BYTES; i += blockDim.x) smem[i] = POISON;
  fence_proxy_async_shared_cta();                    // the poison (generic proxy) before TMA's writes
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(bar, box_bytes);
    tma_load_2d(smem + dst_offset, &tmap, bar, c0, c1);
  }
  mbarrier_wait_parity(bar, 0, 1);
  for (u32 i = threadIdx.x; i < IMAGE_BYTES; i += blockDim.x) image[i] = smem[i];
  if (threadIdx.x == 0) info[0] = smem_u32(smem) % 1024;
}
