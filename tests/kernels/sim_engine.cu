// A small kernel for the simulator's engine tests (tests/test_sim_engine.py): warp collectives, named
// barriers, an mbarrier, shared and global memory, TMEM, and one planted mistake per MODE.
//   MODE 0  correct: out[t] = lane ^ 1 (shfl) | elected << 8 | warp << 16; out[T + t] = the mbarrier's
//           phase after one completed phase (1) + the named barrier's count of threads (blockDim.x << 4)
//   MODE 1  deadlock: every thread waits for parity 0 (tag 7) on a barrier of count 2 that gets 1 arrival
//   MODE 2  misuse: three arrivals on a count-2 barrier whose phase is held open by an expect_tx
//   MODE 3  deadlock: half of warp 0 calls __syncwarp, the other half __syncthreads (a divergent warp)
//   MODE 4  misuse: st.shared past the launch's dynamic shared memory
//   MODE 5  misuse: a global store past the end of `out`
//   MODE 6  misuse: warp 0 allocates TMEM and the CTA exits without tcgen05.dealloc
//   MODE 7  correct: thread 0 stages 16 x 64 BF16 in shared memory and TMA-stores them to out2 (rows
//           16 * blockIdx.x ..) through tmap; with STORE_RACE the staging tile is rewritten before
//           cp.async.bulk.wait_group.read (a hazard whatever the interleaving); with NO_PROXY_FENCE the
//           st.shared writes reach the TMA store without fence.proxy.async (a hazard); with RAW_STORES the
//           staging tile is written through a plain pointer instead of st.shared
//   MODE 8  misuse: thread 0 stores through a plain pointer at smem_raw[n] (past the launch's window)
//   MODE 9  misuse: thread 0 stores through a plain pointer at out[n] (past the tensor)
//   MODE 10 hang: every thread spins on a global flag nobody sets (no scheduling point in the loop)
//   MODE 11 misuse: thread 0 recurses until its stack overflows
//   MODE 12 thread 0 TMA-loads 16 x 64 BF16 from out2 into shared memory and copies 8 rows into out; with
//           EARLY_READ it reads before waiting on the load's barrier (a hazard on every schedule, landed or not)
//   MODE 13 warning: thread 0 arms a second barrier (expect_tx) that nobody waits on and exits; the run is ok
//   MODE 14 misuse: thread 0 divides by n (0: an arithmetic trap)
//   MODE 15 plain accesses of one shared word by two threads (raw pointers; PTX ISA 8.7.1), ordered or not by
//           PLAIN: 0 thread 0 stores, bar.sync, thread 32 loads (clean); 1 the same without the bar.sync (a data
//           race); 2 lane 0 stores, __syncwarp, lane 1 loads (clean); 3 the same without the __syncwarp (a race);
//           4 thread 0 stores, then arrives on the mbarrier thread 32 waits on before it loads (clean); 5 thread 0
//           stores after its arrive (a race); 6 threads 0 and 32 both store (a race); 7 thread 32 loads, then
//           thread 0 stores, with no barrier between (a race)
//   MODE 12 with READ_BEFORE_LOAD: thread 32 loads the TMA destination before thread 0 issues the load, with a
//           bar.sync between (READ_BEFORE_LOAD=2, clean) or none (1: the load may overwrite bytes still read)
#include "common/types.cuh"
#include "common/cluster.cuh"
#include "common/mbarrier.cuh"
#include "common/memory.cuh"
#include "common/tcgen05.cuh"
#include "common/tma.cuh"

#ifndef MODE
#define MODE 0
#endif
#ifndef PLAIN
#define PLAIN 0
#endif

#if MODE == 11
// A frame of 4 KiB per call: the 64 KiB stack of a simulated thread overflows after a few.
__noinline__ u32 recurse(int depth) {
  volatile u8 frame[4096];
  frame[depth % 4096] = (u8)depth;
  return depth > 0 ? recurse(depth - 1) + frame[0] : 0;
}
#endif

extern "C" __global__ void sim_engine(const __grid_constant__ TensorMap tmap, u32* out, u16* out2, int n) {
  extern __shared__ __align__(1024) u8 smem_raw[];
  u64* bar = reinterpret_cast<u64*>(smem_raw);
  u32* tmem_slot = reinterpret_cast<u32*>(smem_raw + 64);
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, T = blockDim.x;
  if (t == 0) mbarrier_init(bar, 2);
  __syncthreads();
#if MODE == 0
  const u32 x = __shfl_xor_sync(0xFFFFFFFFu, (u32)lane, 1);
  const bool e = elect_one_sync();
  st_global_b32(out + t, x | (e ? 1u << 8 : 0u) | ((u32)warp << 16));
  if (lane == 0 && warp < 2) mbarrier_arrive(bar);
  mbarrier_wait_parity(bar, 0, 7);
  named_barrier_sync(1, T);
  st_global_b32(out + T + t, 1u + ((u32)T << 4));
#elif MODE == 1
  if (t == 0) mbarrier_arrive(bar);
  mbarrier_wait_parity(bar, 0, 7);
#elif MODE == 2
  if (t == 0) {
    mbarrier_expect_tx(bar, 128);
    mbarrier_arrive(bar);
    mbarrier_arrive(bar);
    mbarrier_arrive(bar);
  }
#elif MODE == 3
  if (warp == 0 && lane < 16) __syncwarp();
  else __syncthreads();
#elif MODE == 4
  if (t == 0) st_shared_v4(smem_u32(smem_raw) + (u32)n, 1, 2, 3, 4);
#elif MODE == 5
  if (t == 0) st_global_b32(out + n, 1);
#elif MODE == 6
  if (warp == 0) tcgen05_alloc<1>(smem_u32(tmem_slot), 32);
#elif MODE == 7
  const u32 stg = smem_u32(smem_raw + 1024);   // 16 rows x 128 B
  if (t == 0) {
    for (int i = 0; i < 16 * 128 / 16; ++i) {
      const u32 v = (u32)(blockIdx.x * 1000 + i);
#ifdef RAW_STORES
      u32* p = reinterpret_cast<u32*>(smem_raw + 1024 + 16 * i);
      p[0] = v, p[1] = v, p[2] = v, p[3] = v;
#else
      st_shared_v4(stg + 16 * i, v, v, v, v);
#endif
    }
#ifndef NO_PROXY_FENCE
    fence_proxy_async_shared_cta();
#endif
    tma_store_2d(&tmap, smem_raw + 1024, 0, 16 * (int)blockIdx.x);
    cp_async_bulk_commit_group();
#ifdef STORE_RACE
    st_shared_v4(stg, 7, 7, 7, 7);
#endif
    cp_async_bulk_wait_group_read<0>();
    cp_async_bulk_wait_group<0>();
  }
#elif MODE == 8
  if (t == 0) smem_raw[n] = 1;
#elif MODE == 9
  if (t == 0) out[n] = 1;
#elif MODE == 10
  while (*reinterpret_cast<volatile u32*>(out + 2 * T * gridDim.x - 1) == 0) {
  }
#elif MODE == 11
  if (t == 0) out[0] = recurse(n);
#elif MODE == 12
  u64* lbar = bar + 1;
#ifdef READ_BEFORE_LOAD
  if (t == 32) (void)*reinterpret_cast<volatile u32*>(smem_raw + 2048 + 64);
#if READ_BEFORE_LOAD == 2
  __syncthreads();
#endif
#endif
  if (t == 0) {
    mbarrier_init(lbar, 1);
    fence_barrier_init();
    mbarrier_arrive_expect_tx(lbar, 16 * 128);
    tma_load_2d(smem_raw + 2048, &tmap, lbar, 0, 16 * (int)blockIdx.x);
#ifndef EARLY_READ
    mbarrier_wait_parity(lbar, 0, 8);
#endif
    const u32* src = reinterpret_cast<const u32*>(smem_raw + 2048);
    for (int i = 0; i < 256; ++i) out[blockIdx.x * 256 + i] = src[i];   // the first 8 rows
#ifdef EARLY_READ
    mbarrier_wait_parity(lbar, 0, 8);
#endif
  }
#elif MODE == 14
  if (t == 0) out[0] = 7u / (u32)n;
#elif MODE == 15
  volatile u32* word = reinterpret_cast<volatile u32*>(smem_raw + 256);
  const int other = PLAIN == 2 || PLAIN == 3 ? 1 : 32;   // the second thread: another lane or another warp
  if (PLAIN == 7 && t == other) out[blockIdx.x] = *word;
  if (t == 0 && PLAIN != 5) *word = 5u + blockIdx.x;
  if (t == 0 && (PLAIN == 4 || PLAIN == 5)) mbarrier_arrive(bar), mbarrier_arrive(bar);   // count 2: the phase
  if (t == 0 && PLAIN == 5) *word = 5u + blockIdx.x;
  if (PLAIN == 6 && t == other) *word = 6u;
  if (PLAIN == 0) __syncthreads();
  if (PLAIN == 2 && warp == 0) __syncwarp();
  if ((PLAIN == 4 || PLAIN == 5) && t == other) mbarrier_wait_parity(bar, 0, 9);
  if (PLAIN != 6 && PLAIN != 7 && t == other) out[blockIdx.x] = *word;
#elif MODE == 13
  if (t == 0) {
    mbarrier_init(bar + 1, 1);
    mbarrier_arrive_expect_tx(bar + 1, 128);   // armed for bytes that never come; nobody waits on it
  }
#endif
  (void)n, (void)out2, (void)tmap;
}
