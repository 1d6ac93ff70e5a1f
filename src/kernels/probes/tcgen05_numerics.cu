// Bit-level probe of the Blackwell tensor core's accumulation (the B200 twin of wgmma_numerics.cu): one CTA
// of 4 warps stores D[128][N] (FP32 bit patterns) into TMEM with tcgen05.st (common/tcgen05_store.cuh), issues `steps` tcgen05.mma
// into it from one thread (K = 32 bytes of A and B per instruction: 32 FP8 values of kind::f8f6f4, or 64
// packed E2M1 values with 4 UE4M3 scales per row of kind::mxf4nvf4.block_scale.block16), and reads it back
// with tcgen05.ld. Every output (m, n) is one test vector: row m of A . row n of B (scaled) + D[m][n].
// sm_100a. Not book content: pelib.measure.tcprobe_sm100 builds the vectors (pelib.numerics.tcvectors), runs this file on a
// B200 (or in the simulator, which compiles the same source) and scores the PREDICTED Blackwell models of
// pelib.numerics.blockfma against what it prints.
//
// Memory layout (dense, tile t = blockIdx.x; KB = 32 * steps bytes per row):
//   a     u8  [tiles][128][KB]      A, K-major (PROBE_KIND 2: packed E2M1, the lower K index in the low nibble)
//   b     u8  [tiles][N][KB]        B, K-major: out = A . B^T
//   sfa   u8  [tiles][steps][512]   PROBE_KIND 2: A's UE4M3 scales of instruction s in the CUTLASS blocked
//   sfb   u8  [tiles][steps][512]   atom (pelib.emulate.sf_to_blocked of 128 rows x 4); else unused
//   d_in  u32 [tiles][128][N]       the accumulator's initial FP32 bits
//   d_out u32 [tiles][128][N]       its final FP32 bits
// flags: bit 0 (first_zero) issues the first MMA with enable-input-d = 0.
// Shared memory as the FP8 and NVFP4 stages lay it out: per 128-B atom of K, A is 128 rows x 128 B and B
// N rows x 128 B, 1024-B aligned and 128-B swizzled (the threads store the swizzled bytes and fence the
// async proxy), UMMA K-major SW128 descriptors with SBO = 1024, +32 B per instruction inside the atom; the
// scale atoms at 512 B each, tcgen05.cp 32x128b.warpx4 into TMEM columns after D (nvfp4/00_single_stage.cu).
// Sources: PTX ISA 9.7.16.10 tcgen05.mma (kinds f8f6f4, mxf4nvf4 .block16), 9.7.16.8 tcgen05.ld / st,
// 9.7.16.9 tcgen05.cp, 9.7.16.4 descriptors; CUTLASS mma_sm100_umma.hpp, copy_sm100.hpp.
// Run: PYTHONPATH=src python3 -m pelib.measure.tcprobe_sm100 collect --out DIR
#include "common/types.cuh"
#include "common/export.cuh"
#include "common/memory.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/tcgen05.cuh"
#include "common/tcgen05_store.cuh"
#include "common/descriptors.cuh"

#ifndef PROBE_KIND
#define PROBE_KIND 0             // 0 kind::f8f6f4 E4M3, 1 kind::f8f6f4 E5M2, 2 kind::mxf4nvf4 (block16, UE4M3)
#endif
#ifndef PROBE_N
#define PROBE_N 256              // the MMA's N: 256 (f8f6f4, as fp8/01..09 issue), 128 (mxf4nvf4, as nvfp4/00)
#endif
#ifndef PROBE_MAX_STEPS
#define PROBE_MAX_STEPS 4        // longest chain of instructions into one accumulator
#endif
constexpr u32 N = PROBE_N, M = 128, MAX_STEPS = PROBE_MAX_STEPS, THREADS = 128;
constexpr bool SCALED = PROBE_KIND == 2;
constexpr u32 ATOM = 128;                            // bytes of K per 128-B swizzle atom (4 instructions)
constexpr u32 ATOMS = (MAX_STEPS * 32 + ATOM - 1) / ATOM;
constexpr u32 A_ATOM_BYTES = M * ATOM, B_ATOM_BYTES = N * ATOM;
constexpr u32 SF_ATOM_BYTES = 512;                   // 128 rows x 4 UE4M3 (CUTLASS blocked atom)
constexpr u32 OFF_A = 0, OFF_B = ATOMS * A_ATOM_BYTES, OFF_SFA = OFF_B + ATOMS * B_ATOM_BYTES;
constexpr u32 OFF_SFB = OFF_SFA + (SCALED ? MAX_STEPS * SF_ATOM_BYTES : 0);
constexpr u32 OFF_BAR = OFF_SFB + (SCALED ? MAX_STEPS * SF_ATOM_BYTES : 0);
constexpr u32 ALIGN = 1024;
constexpr u32 SMEM_BYTES = ALIGN + OFF_BAR + 64;
constexpr u32 TMEM_SFA = N, TMEM_SFB = N + 4 * MAX_STEPS, TMEM_COLS = 512;
constexpr u32 FMT = PROBE_KIND == 1 ? UMMA_FMT_E5M2 : UMMA_FMT_E4M3;
constexpr u32 IDESC = SCALED ? umma_instr_desc_block_scaled(M, N, UMMA_FMT_MXF4_E2M1, UMMA_FMT_MXF4_E2M1,
                                                            UMMA_SF_UE4M3, 0, 0)
                             : umma_instr_desc(M, N, FMT, FMT, UMMA_C_F32);
constexpr u64 DESC_AB = umma_smem_desc(0, 16, 1024, 128), DESC_SF = umma_smem_desc(0, 128, 128, 0);
constexpr u32 PROBE_FIRST_ZERO = 1;

static_assert(PROBE_KIND >= 0 && PROBE_KIND <= 2, "PROBE_KIND: 0 f8f6f4 E4M3, 1 f8f6f4 E5M2, 2 mxf4nvf4");
static_assert(N % 32 == 0 && N <= 256 && (!SCALED || N == 128),
              "PROBE_N: a multiple of 32 up to 256 (mxf4nvf4: 128, one scale atom of B per instruction)");
static_assert(MAX_STEPS >= 1 && MAX_STEPS <= 4, "PROBE_MAX_STEPS: 1..4 instructions (one 128-B atom of K)");
static_assert(TMEM_SFB + 4 * MAX_STEPS <= TMEM_COLS, "TMEM columns: D, then 4 scale columns per instruction");
static_assert(SMEM_BYTES <= PE_SMEM_LIMIT, "the operands exceed shared memory");

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(num_threads, THREADS);
PELIB_EXPORT(probe_n, N);
PELIB_EXPORT(probe_m, M);
PELIB_EXPORT(probe_kind, PROBE_KIND);
PELIB_EXPORT(probe_max_steps, MAX_STEPS);
PELIB_EXPORT(probe_flag_first_zero, PROBE_FIRST_ZERO);
PELIB_EXPORT(probe_idesc, IDESC);

// rows x KB bytes of one operand into its swizzled atoms, 16 B per thread and step (as wgmma_numerics.cu).
PE_DEVICE void probe_load_operand(u8* smem, const u8* g, u32 rows, u32 kb, u32 atom_bytes) {
  const u32 chunks = kb / 16;
  for (u32 i = threadIdx.x; i < rows * chunks; i += THREADS) {
    const u32 r = i / chunks, c = (i % chunks) * 16;
    u32 v[4];
    ld_global_nc_v4(g + (size_t)r * kb + c, v);
    const u32 logical = (c / ATOM) * atom_bytes + r * ATOM + c % ATOM;
    const u32 phys = logical ^ (((logical >> 7) & 7u) << 4);   // SW128: byte bits [4,7) ^= bits [7,10)
    st_shared_v4(smem_u32(smem + phys), v[0], v[1], v[2], v[3]);
  }
}

PE_DEVICE void probe_copy(u8* smem, const u8* g, u32 bytes) {
  for (u32 i = threadIdx.x * 16; i < bytes; i += THREADS * 16) {
    u32 v[4];
    ld_global_nc_v4(g + i, v);
    st_shared_v4(smem_u32(smem + i), v[0], v[1], v[2], v[3]);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
tcgen05_numerics(const u8* __restrict__ a, const u8* __restrict__ b, const u8* __restrict__ sfa,
                 const u8* __restrict__ sfb, const u32* __restrict__ d_in, u32* __restrict__ d_out, u32 steps,
                 u32 flags) {
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((ALIGN - (smem_u32(smem_raw) & (ALIGN - 1))) & (ALIGN - 1));
  u64* done = reinterpret_cast<u64*>(smem + OFF_BAR);
  u32* tmem_slot = reinterpret_cast<u32*>(done + 1);
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32, kb = 32 * steps;
  const size_t t = blockIdx.x;
  if (steps < 1 || steps > MAX_STEPS) __trap();   // pelib.measure.tcprobe_sm100 launches 1..PROBE_MAX_STEPS

  probe_load_operand(smem + OFF_A, a + t * M * kb, M, kb, A_ATOM_BYTES);
  probe_load_operand(smem + OFF_B, b + t * N * kb, N, kb, B_ATOM_BYTES);
  if (SCALED) {
    probe_copy(smem + OFF_SFA, sfa + t * MAX_STEPS * SF_ATOM_BYTES, steps * SF_ATOM_BYTES);
    probe_copy(smem + OFF_SFB, sfb + t * MAX_STEPS * SF_ATOM_BYTES, steps * SF_ATOM_BYTES);
  }
  fence_proxy_async_shared_cta();   // the st.shared above before the tensor core's (async-proxy) reads
  if (threadIdx.x == 0) {
    mbarrier_init(done, 1);
    fence_barrier_init();
  }
  __syncwarp();
  if (warp == 0) {
    tcgen05_alloc<1>(smem_u32(tmem_slot), TMEM_COLS);
    tcgen05_relinquish_alloc_permit<1>();
  }
  tcgen05_fence_before_thread_sync();
  __syncthreads();
  tcgen05_fence_after_thread_sync();
  const u32 tmem = *tmem_slot;

  // D -> TMEM: warp w owns lanes 32w..32w+31 (its lane quarter), rows = lanes
  const u32* din = d_in + (t * M + 32 * warp + lane) * N;
  for (u32 c = 0; c < N; c += 32) {
    u32 r[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) r[j] = ld_global_nc_b32(din + c + j);
    tcgen05_st_32x32b_x32(tmem + ((32 * warp) << 16) + c, r);
  }
  tcgen05_wait_st();
  tcgen05_fence_before_thread_sync();
  __syncthreads();
  tcgen05_fence_after_thread_sync();

  if (threadIdx.x == 0) {
    const u64 da = DESC_AB + (smem_u32(smem + OFF_A) >> 4), db = DESC_AB + (smem_u32(smem + OFF_B) >> 4);
    for (u32 s = 0; s < steps; ++s) {
      const u32 acc = (s == 0 && (flags & PROBE_FIRST_ZERO)) ? 0u : 1u;
      const u64 das = smem_desc_advance_unchecked(da, s * 32), dbs = smem_desc_advance_unchecked(db, s * 32);
      if (SCALED) {
        tcgen05_cp_32x128b_warpx4<1>(tmem + TMEM_SFA + 4 * s, DESC_SF + (smem_u32(smem + OFF_SFA + s * SF_ATOM_BYTES) >> 4));
        tcgen05_cp_32x128b_warpx4<1>(tmem + TMEM_SFB + 4 * s, DESC_SF + (smem_u32(smem + OFF_SFB + s * SF_ATOM_BYTES) >> 4));
        tcgen05_mma_mxf4nvf4_block16<1>(tmem, das, dbs, IDESC, tmem + TMEM_SFA + 4 * s, tmem + TMEM_SFB + 4 * s, acc);
      } else {
        tcgen05_mma_f8f6f4<1>(tmem, das, dbs, IDESC, acc);
      }
    }
    tcgen05_commit<1>(smem_u32(done));
  }
  mbarrier_wait_parity(done, 0, 1);
  tcgen05_fence_after_thread_sync();
  __syncwarp();   // tcgen05.ld is .sync.aligned

  u32* dout = d_out + (t * M + 32 * warp + lane) * N;
  for (u32 c = 0; c < N; c += 32) {
    u32 r[32];
    tcgen05_ld_32x32b_x32(tmem + ((32 * warp) << 16) + c, r);
    tcgen05_wait_ld();
#pragma unroll
    for (int j = 0; j < 32; ++j) st_global_b32(dout + c + j, r[j]);
  }
  tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    tcgen05_fence_after_thread_sync();
    tcgen05_dealloc<1>(tmem, TMEM_COLS);
  }
}
