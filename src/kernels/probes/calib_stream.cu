// Calibration probe: DRAM and L2 bandwidth-latency curves (read, write, copy) by the loaded-latency
// method. sm_90a. Not book content.
// 512 threads per CTA, one CTA per SM. Warp 0 (lane 0) is the latency probe: a dependent pointer chase
// of `hops` steps through `chain` (each entry in its own 128-B line, in a random cyclic order the host
// builds, so every step is a fresh miss of the footprint the host chose: DRAM or L2), timed by clock64.
// Warps 1 .. `stream_warps` are the load: each moves `iters` x 2 KiB (4 x 16 B per lane in flight) of
// `src`/`dst` with op 0 read (ld.global.nc), 1 write (st.global), 2 copy (both), grid-strided over
// `words` 16-B words (a power of two: the footprint). CTAs with blockIdx.x >= `active` do not stream.
// The achieved bandwidth comes from the launch-clock block (bytes over the streaming warps' span), the
// latency under that load from the chase; `stream_warps` and `active` set the load.
// Unit = CTA. Method: Intel Memory Latency Checker's loaded latency (one thread chases dependent loads
// while others inject traffic; latency against achieved bandwidth), and the pointer-chase latency
// benchmarks of Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking"
// (arXiv 1804.06826), whose method Luo et al. (arXiv 2501.12084) apply to Hopper.
#define PE_TIMING_WARPS 16
#include "probes/calib.cuh"
#include "common/memory.cuh"

constexpr int SMEM_BYTES = 120 * 1024;         // one CTA per SM
constexpr int UNROLL = 4;                       // 16-B accesses per lane in flight

enum calib_stream_field : u32 {
  CALIB_STREAM_HOPS = 0,       // chase steps taken
  CALIB_STREAM_CHASE_T0 = 1,   // clock64 when the chase started
  CALIB_STREAM_CHASE_T1 = 2,   // clock64 when it ended
  CALIB_STREAM_CHASE_END = 3,  // the index the chase ended on (the host checks it against the chain)
  CALIB_STREAM_BYTES = 4,      // bytes this CTA's streaming warps moved (read + written)
  CALIB_STREAM_SINK = 5,       // xor of what the read warps loaded (keeps the loads)
  CALIB_STREAM_FIELDS = 6
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(num_threads, 512);
PELIB_EXPORT(unroll, UNROLL);
PELIB_EXPORT(fields, CALIB_STREAM_FIELDS);

extern "C" __global__ void __launch_bounds__(512, 1)
calib_stream(const u32* __restrict__ chain, const uint4* __restrict__ src, uint4* __restrict__ dst, u64* out,
             u64* timing, u32 op, u32 hops, u32 iters, u32 stream_warps, u32 active, u32 words) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  u64* rec = calib_rec(out, blockIdx.x, CALIB_STREAM_FIELDS);
  __syncthreads();                               // the chase and the load start together
  if (warp == 0) {
    if (lane != 0 || hops == 0) return;
    u32 i = blockIdx.x * 32u;                    // each CTA enters the cycle at its own line
    const u64 t0 = clock64_read();
    for (u32 h = 0; h < hops; ++h) i = ld_global_nc_b32(chain + i);
    rec[CALIB_STREAM_CHASE_T1] = clock64_read();
    rec[CALIB_STREAM_CHASE_T0] = t0;
    rec[CALIB_STREAM_HOPS] = hops;
    rec[CALIB_STREAM_CHASE_END] = i;
    return;
  }
  if (warp > stream_warps || blockIdx.x >= active) return;
  const u32 w = (warp - 1) + (stream_warps) * blockIdx.x;           // this warp among all streaming warps
  const u32 nw = stream_warps * active;
  const u32 mask = words - 1;
  u32 sink = 0;
  for (u32 it = 0; it < iters; ++it) {
    const u32 base = ((it * nw + w) * 32u * UNROLL) & mask;         // 2 KiB per warp and iteration
    uint4 v[UNROLL];
    if (op != 1) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        u32 r[4];
        ld_global_nc_v4(src + ((base + u * 32u + lane) & mask), r);
        v[u] = uint4{r[0], r[1], r[2], r[3]};
      }
    } else {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) v[u] = uint4{it, w, lane, (u32)u};
    }
    if (op != 0) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) st_global_v4(dst + ((base + u * 32u + lane) & mask), v[u].x, v[u].y, v[u].z, v[u].w);
    } else {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) sink ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
  }
  if (lane == 0 && warp == 1) {
    rec[CALIB_STREAM_BYTES] = (u64)iters * stream_warps * 32u * UNROLL * 16u * (op == 2 ? 2u : 1u);
    rec[CALIB_STREAM_SINK] = sink;
  }
  if (op == 0 && sink == 0x9E3779B9u) rec[CALIB_STREAM_SINK] = 1;   // makes every warp's sink live
}
