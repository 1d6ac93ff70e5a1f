// Bit-level probe of the Hopper FP8 tensor core's accumulation: each CTA is one warpgroup that loads
// D[64][N] (FP32 bit patterns) from memory into its accumulator registers, issues `steps`
// wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 into them (K = 32 * steps; .e5m2.e5m2 with
// PROBE_E5M2) and writes them back unchanged. Every output element (m, n) of a tile is one test
// vector: row m of A . row n of B + D[m][n]. sm_90a. Not book content: pelib.measure.tcprobe builds the
// vectors, runs this file on the GPU (or in the simulator, which compiles the same source) and scores
// the block-FMA models of pelib.numerics.blockfma against what it prints.
//
// Memory layout (all dense, tile t = blockIdx.x; K = 32 * steps bytes per row):
//   a      u8  [tiles][64][K]    A, K-major: row m, byte k is A[m][k] (E4M3, or E5M2)
//   b      u8  [tiles][N][K]     B, K-major: row n, byte k is B[n][k]: out = A . B^T
//   d_in   u32 [tiles][64][N]    the accumulator's initial FP32 bits
//   d_out  u32 [tiles][64][N]    its final FP32 bits
// flags: PROBE_FIRST_ZERO (bit 0) issues the first wgmma with scale-d = 0 (D is not read: D = A.B, what
// the stages do on their first K step); PROBE_WAIT_EACH (bit 1) commits and waits after every wgmma
// instead of issuing all `steps` as one commit group (the stages' form), to see whether anything but
// the FP32 registers carries from one instruction to the next.
// Shared memory, as the stages lay it out (sm90/00_tma_wgmma.cu): per 128-B atom of K, A is 64 rows x
// 128 B and B is N rows x 128 B, each 1024-B aligned and 128-B swizzled; K-major SW128 descriptors with
// SBO = 1024 B (LBO unused), advanced by +32 B per k32 step inside the atom and by one atom every 4
// steps. The threads write the swizzled bytes themselves (st.shared), then fence.proxy.async so the
// tensor core (async proxy) sees them.
// Sources: PTX ISA 9.7.15.5.1 (matrix descriptor, m64nNk32 D fragments), 9.7.15.5.2 wgmma.mma_async
// (scale-d), 9.7.15.6 (fence, commit_group, wait_group); the 128-B swizzle is a function of the shared
// address, byte bits [4,7) XOR bits [7,10) (PTX ISA "Tensor swizzling modes"; sim/model/tma_box.h;
// CUTLASS Swizzle<3,4,3> in include/cute/swizzle.hpp).
// Run: PYTHONPATH=src python3 -m pelib.measure.tcprobe collect --out DIR
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/memory.cuh"
#include "common/tma.cuh"
#include "common/descriptors.cuh"
#include "common/wgmma.cuh"

#ifndef PROBE_N
#define PROBE_N 256              // the wgmma N: 256 is what sm90/01..11 issue, 128 and 192 the others
#endif
#ifndef PROBE_MAX_STEPS
#define PROBE_MAX_STEPS 8        // longest chain of k32 instructions into one accumulator
#endif
#ifndef PROBE_E5M2
#define PROBE_E5M2 0             // 1: A and B are E5M2 (.f32.e5m2.e5m2, N = 256 only)
#endif
constexpr int N = PROBE_N;
constexpr int MAX_STEPS = PROBE_MAX_STEPS;
constexpr int ATOM = 128;                           // bytes of K per 128-B swizzle atom (4 k32 steps)
constexpr int ATOMS = (MAX_STEPS * 32 + ATOM - 1) / ATOM;
constexpr int A_ATOM_BYTES = 64 * ATOM;
constexpr int B_ATOM_BYTES = N * ATOM;
constexpr int A_BYTES = ATOMS * A_ATOM_BYTES;
constexpr int SMEM_ALIGN = 1024;                    // SW128 atoms start 1024-B aligned (base_offset 0)
constexpr int SMEM_BYTES = SMEM_ALIGN + A_BYTES + ATOMS * B_ATOM_BYTES;
constexpr u32 DESC_LBO = 16, DESC_SBO = 1024, SWIZZLE = 128;
constexpr u32 PROBE_FIRST_ZERO = 1, PROBE_WAIT_EACH = 2;

static_assert(N == 64 || N == 96 || N == 128 || N == 192 || N == 256,
              "PROBE_N: an N that common/wgmma.cuh defines (64, 96, 128, 192, 256)");
static_assert(!PROBE_E5M2 || N == 256, "PROBE_E5M2: common/wgmma.cuh defines the E5M2 form for N = 256");
static_assert(MAX_STEPS >= 1 && MAX_STEPS <= 16, "PROBE_MAX_STEPS: 1..16 k32 instructions");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "PROBE_N x PROBE_MAX_STEPS: the operands exceed 227 KiB of shared memory");

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(num_threads, 128);
PELIB_EXPORT(probe_n, N);
PELIB_EXPORT(probe_m, 64);
PELIB_EXPORT(probe_e5m2, PROBE_E5M2);
PELIB_EXPORT(probe_max_steps, MAX_STEPS);
PELIB_EXPORT(probe_flag_first_zero, PROBE_FIRST_ZERO);
PELIB_EXPORT(probe_flag_wait_each, PROBE_WAIT_EACH);
PELIB_EXPORT(probe_steps_mask, (1u << 1) | (1u << 2) | (1u << 4) | (1u << 8));   // the chains the switch below has

// Copy rows x K bytes of one operand into its swizzled atoms, 16 B per thread and step.
PE_DEVICE void probe_load_operand(u8* smem, const u8* g, int rows, int K, int atom_bytes) {
  const int chunks = K / 16;
  for (int i = threadIdx.x; i < rows * chunks; i += 128) {
    const int r = i / chunks, c = (i % chunks) * 16;
    u32 v[4];
    ld_global_nc_v4(g + (size_t)r * K + c, v);
    const u32 logical = (c / ATOM) * atom_bytes + r * ATOM + c % ATOM;
    const u32 phys = logical ^ (((logical >> 7) & 7u) << 4);   // SW128 (see the header)
    st_shared_v4(smem_u32(smem + phys), v[0], v[1], v[2], v[3]);
  }
}

// `S` wgmma into d, K step s reading bytes [32s, 32s + 32) of every row. Unrolled with constant
// offsets and unchecked descriptor advances (no trap branch between two wgmma), so ptxas issues them
// back to back with one scoreboard wait, as the stages' K loop does (sm90/01_warp_specialized.cu: a
// wgmma sequence it cannot follow gets serialized, a wait after every instruction).
// EACH: commit and wait after every wgmma instead (its own commit group each).
template <int S, bool EACH>
PE_DEVICE void probe_chain(float (&d)[N / 2], u64 desc_a0, u64 desc_b0, u32 first_scale_d) {
  static_assert(S <= MAX_STEPS, "probe_chain: S exceeds PROBE_MAX_STEPS");
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const u64 da = smem_desc_advance_unchecked(desc_a0, (s / 4) * A_ATOM_BYTES + (s % 4) * 32);
    const u64 db = smem_desc_advance_unchecked(desc_b0, (s / 4) * B_ATOM_BYTES + (s % 4) * 32);
#if PROBE_E5M2
    wgmma_m64n256k32_f32_e5m2_e5m2(d, da, db, s == 0 ? first_scale_d : 1u);
#else
    wgmma_m64nNk32_f32_e4m3_e4m3<N>(d, da, db, s == 0 ? first_scale_d : 1u);
#endif
    if (EACH || s == S - 1) {   // EACH: every wgmma is its own commit group, waited for at once
      wgmma_commit_group();
      wgmma_wait_group<0>();
      wgmma_fence_operand(d);
      if (s < S - 1) warpgroup_arrive();   // the next wgmma reads registers the last one wrote
    }
  }
}

extern "C" __global__ void __launch_bounds__(128, 1)
wgmma_numerics(const u8* __restrict__ a, const u8* __restrict__ b, const u32* __restrict__ d_in,
               u32* __restrict__ d_out, u32 steps, u32 flags) {
  extern __shared__ u8 smem_raw[];
  const u32 base = (smem_u32(smem_raw) + SMEM_ALIGN - 1) & ~(SMEM_ALIGN - 1);
  u8* sA = smem_raw + (base - smem_u32(smem_raw));
  u8* sB = sA + A_BYTES;
  const int K = 32 * (int)steps;
  const size_t t = blockIdx.x;

  probe_load_operand(sA, a + t * 64 * K, 64, K, A_ATOM_BYTES);
  probe_load_operand(sB, b + t * N * K, N, K, B_ATOM_BYTES);
  fence_proxy_async_shared_cta();   // the st.shared above before the tensor core's (async-proxy) reads
  __syncthreads();

  const int tid = threadIdx.x;
  const u32* din = d_in + t * 64 * N;
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    d[i] = __uint_as_float(ld_global_nc_b32(din + wgmma_acc_row(tid, i) * N + wgmma_acc_col(tid, i)));

  const u64 desc_a0 = gmma_smem_desc(gmma_desc_addr(sA), DESC_LBO, DESC_SBO, SWIZZLE);
  const u64 desc_b0 = gmma_smem_desc(gmma_desc_addr(sB), DESC_LBO, DESC_SBO, SWIZZLE);
  const u32 first = (flags & PROBE_FIRST_ZERO) ? 0u : 1u;
  const bool each = (flags & PROBE_WAIT_EACH) != 0;
  wgmma_fence_operand(d);
  warpgroup_arrive();   // the accumulators were written by ordinary loads: fence before the first wgmma
  switch (steps * 2 + (each ? 1 : 0)) {   // one fully unrolled chain per length (see probe_chain)
    case 2: probe_chain<1, false>(d, desc_a0, desc_b0, first); break;
    case 3: probe_chain<1, true>(d, desc_a0, desc_b0, first); break;
    case 4: probe_chain<2, false>(d, desc_a0, desc_b0, first); break;
    case 5: probe_chain<2, true>(d, desc_a0, desc_b0, first); break;
    case 8: probe_chain<4, false>(d, desc_a0, desc_b0, first); break;
    case 9: probe_chain<4, true>(d, desc_a0, desc_b0, first); break;
    case 16: probe_chain<8, false>(d, desc_a0, desc_b0, first); break;
    case 17: probe_chain<8, true>(d, desc_a0, desc_b0, first); break;
    default: __trap();   // pelib.measure.tcprobe launches only CHAIN_STEPS
  }

  u32* dout = d_out + t * 64 * N;
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    st_global_b32(dout + wgmma_acc_row(tid, i) * N + wgmma_acc_col(tid, i), __float_as_uint(d[i]));
}
