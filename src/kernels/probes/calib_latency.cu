// Calibration probe: the latency of the variable-latency instructions the timing model's scoreboards wait
// for (a warp shuffle, a shared-memory load), and how many warp shuffles an SM serves a cycle. sm_90a. Not
// book content.
// 512 threads per CTA, one CTA per SM; warps 0 .. `warps` - 1 of CTAs below `active` run `iters` steps of:
//   op 0 "shfl":      one dependent chain, v = shfl.sync.bfly(v, lane_mask): each step waits for the last
//                     one's result (SHFL.BFLY, then the next SHFL waiting on its scoreboard; the mask is an
//                     argument, so the compiler cannot fold two butterflies of one mask into none);
//   op 1 "lds":       a pointer chase through shared memory, off = *(u32*)(smem + off): each load's address
//                     is the last one's value (LDS, its scoreboard waited on by the next);
//   op 2 "shfl_many": UNROLL independent shuffle chains a warp, interleaved: with enough warps the SM's
//                     shuffle rate, not its latency, sets the pace.
// Unit = warp: its clock64 before the first step and after the last (after the result is used), and the
// steps it made (a step of op 2 is UNROLL shuffles). A chain's cycles per step with one warp are the
// latency; op 2's SM cycles per shuffle are its warps' span over the shuffles they issued.
// Method: the dependent-chain latency and many-in-flight throughput microbenchmarks of Jia et al.,
// "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking" (arXiv 1804.06826), and of
// Luo et al. (arXiv 2501.12084) on Hopper.
#define PE_TIMING_WARPS 16
#include "probes/calib.cuh"

constexpr int SMEM_BYTES = 64 * 1024;          // the chase's footprint (in shared memory, one CTA per SM)
constexpr int MAX_WARPS = 16;
constexpr int UNROLL = 8;                      // op 2: independent shuffles in flight per warp
constexpr u32 CHASE_STRIDE = 4 * 33;           // bytes between successive chase words: one word a bank apart

enum calib_latency_field : u32 {
  CALIB_LATENCY_T0 = 0,        // clock64 before the warp's first step
  CALIB_LATENCY_T1 = 1,        // clock64 after its last (its result used)
  CALIB_LATENCY_STEPS = 2,     // instructions of the measured kind the warp issued (0: the warp did not run)
  CALIB_LATENCY_SINK = 3,      // what the chain ended at (keeps it)
  CALIB_LATENCY_FIELDS = 4
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(num_threads, 512);
PELIB_EXPORT(units_per_cta, MAX_WARPS);
PELIB_EXPORT(unroll, UNROLL);
PELIB_EXPORT(chase_stride, CHASE_STRIDE);
PELIB_EXPORT(fields, CALIB_LATENCY_FIELDS);

extern "C" __global__ void __launch_bounds__(512, 1)
calib_latency(u64* out, u64* timing, u32 op, u32 iters, u32 warps, u32 active, u32 lane_mask) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  extern __shared__ u8 smem_raw[];
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  u64* rec = calib_rec(out, (u64)blockIdx.x * MAX_WARPS + warp, CALIB_LATENCY_FIELDS);
  // the chase: word at byte offset o holds the next offset, o + CHASE_STRIDE around the footprint
  constexpr u32 WORDS = SMEM_BYTES / CHASE_STRIDE;
  for (u32 i = threadIdx.x; i < WORDS; i += blockDim.x)
    *reinterpret_cast<u32*>(smem_raw + i * CHASE_STRIDE) = ((i + 1) % WORDS) * CHASE_STRIDE;
  __syncthreads();                               // the chase is written, and the SM's warps start together
  if (warp >= warps || warp >= MAX_WARPS || blockIdx.x >= active) return;
  u32 v = lane * 0x9E3779B9u + warp;
  u32 steps = 0;
  u64 t0 = 0;
  if (op == 0) {
    t0 = clock64_read();
#pragma unroll 8
    for (u32 i = 0; i < iters; ++i) v = __shfl_xor_sync(0xFFFFFFFFu, v, (int)lane_mask);
    steps = iters;
  } else if (op == 1) {
    u32 o = (lane * 7 % WORDS) * CHASE_STRIDE;
    t0 = clock64_read();
#pragma unroll 8
    for (u32 i = 0; i < iters; ++i) o = *reinterpret_cast<volatile u32*>(smem_raw + o);
    v = o;
    steps = iters;
  } else {
    u32 c[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) c[u] = v + u;
    t0 = clock64_read();
    for (u32 i = 0; i < iters; ++i) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) c[u] = __shfl_xor_sync(0xFFFFFFFFu, c[u], 1 + u % 4);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v ^= c[u];
    steps = iters * UNROLL;
  }
  const u64 t1 = clock64_read() + (v == 0x9E3779B9u ? 1 : 0);   // t1 after the last result is used
  if (lane == 0) {
    rec[CALIB_LATENCY_T0] = t0;
    rec[CALIB_LATENCY_T1] = t1;
    rec[CALIB_LATENCY_STEPS] = steps;
    rec[CALIB_LATENCY_SINK] = v;
  }
}
