// GPU test for fault reporting: thread 0 stores 3 through `where`, then every thread writes 3 to
// out. With where = out the launch is an ordinary one; with where = a bad address (0x10) the store
// faults (CUDA_ERROR_ILLEGAL_ADDRESS), a sticky error that leaves the context unusable.
#include "common/types.cuh"
#include "common/export.cuh"

PELIB_EXPORT(smem_bytes, 0);

extern "C" __global__ void rt_fault(u32* out, u32* where) {
  if (threadIdx.x == 0) *reinterpret_cast<volatile u32*>(where) = 3;
  __syncthreads();
  out[threadIdx.x] = 3;
}
