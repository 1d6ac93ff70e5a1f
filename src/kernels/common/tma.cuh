// TMA (cp.async.bulk.tensor) wrappers: tiled 2D/3D loads global -> shared::cluster completing on an
// mbarrier (plain, L2 cache hint, multicast, and the sm_100a cta_group::2 form), tiled stores
// shared::cta -> global in bulk groups, group commit/wait, tensor-map prefetch, the async-proxy
// fence, and the sm90 twin's L2 prefetch of a box and 5-D box load. One PE_DEVICE function per PTX instruction; sections refer to the PTX ISA
// (docs.nvidia.com/cuda/parallel-thread-execution, "Data Movement and Conversion Instructions:
// cp.async.bulk.tensor"). Adapted from CUTLASS include/cute/arch/copy_sm90_tma.hpp,
// copy_sm100_tma.hpp, copy_sm90_desc.hpp and DeepGEMM deep_gemm/include/deep_gemm/ptx/tma.cuh.
//
// Coordinates are in elements, innermost dimension first (c0 = the contiguous one), exactly the
// order of the tensor map's globalDim (pelib.tma.TensorMapSpec.dims).
#pragma once
#include "common/types.cuh"
#include "common/cluster.cuh"

// The 128-byte CUtensorMap the host encodes (cuTensorMapEncodeTiled), passed by value as
// `const __grid_constant__ TensorMap tmap`; instructions take its generic address (&tmap).
// CUDA driver API: CUtensorMap is 64-byte aligned, 16 x u64 (CUTLASS TmaDescriptor).
struct alignas(64) TensorMap {
  u64 opaque[16];
};

// L2 cache-hint policies for the .L2::cache_hint operand (CUTLASS CacheHintSm90/Sm100,
// include/cute/arch/copy_sm90_desc.hpp).
#define PE_CACHE_EVICT_NORMAL 0x1000000000000000ull
#define PE_CACHE_EVICT_FIRST 0x12F0000000000000ull
#define PE_CACHE_EVICT_LAST 0x14F0000000000000ull

// ---- loads: global -> shared::cluster, completion on an mbarrier (complete_tx::bytes) ----------

// PTX ISA: cp.async.bulk.tensor (.2d .shared::cluster.global .tile .mbarrier::complete_tx::bytes)
// CUTLASS SM90_TMA_LOAD_2D without the cache hint.
PE_DEVICE void tma_load_2d(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1) : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.3d ...)
PE_DEVICE void tma_load_3d(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.2d ... .L2::cache_hint); CUTLASS SM90_TMA_LOAD_2D
PE_DEVICE void tma_load_2d_hint(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, u64 hint) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "l"(hint) : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.3d ... .L2::cache_hint); CUTLASS SM90_TMA_LOAD_3D
PE_DEVICE void tma_load_3d_hint(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, i32 c2,
                                u64 hint) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "l"(hint)
      : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.multicast::cluster): the tile lands at the same shared offset
// (dst, bar) in every CTA whose rank bit is set in `cta_mask`; each gets complete_tx on its own
// barrier. CUTLASS SM90_TMA_LOAD_MULTICAST_2D.
PE_DEVICE void tma_load_2d_multicast(void* dst, const void* tmap, u64* bar, u16 cta_mask,
                                     i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%4, %5}], [%2], %3;"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar)), "h"(cta_mask), "r"(c0), "r"(c1)
      : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.3d .multicast::cluster); CUTLASS SM90_TMA_LOAD_MULTICAST_3D
PE_DEVICE void tma_load_3d_multicast(void* dst, const void* tmap, u64* bar, u16 cta_mask,
                                     i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%4, %5, %6}], [%2], %3;"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar)), "h"(cta_mask), "r"(c0), "r"(c1),
         "r"(c2)
      : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
// ---- sm_100a: cta_group::2 (a 2-SM pair shares one barrier) --------------------------------------
// Both CTAs of the pair issue their half; the transaction bytes must land on the leader CTA's
// (even rank's) barrier. A shared::cluster address carries the peer CTA in bit 24, so masking it
// off (& 0xFEFFFFFF) turns "my barrier" into "the leader's barrier at the same offset".
// CUTLASS include/cute/arch/copy_sm100_tma.hpp: Sm100MmaPeerBitMask, SM100_TMA_2SM_LOAD_2D.
#define PE_PEER_BIT_MASK 0xFEFFFFFFu

// PTX ISA: cp.async.bulk.tensor (.2d .cta_group::2 ...); CUTLASS SM100_TMA_2SM_LOAD_2D
PE_DEVICE void tma_load_2d_cta2(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar) & PE_PEER_BIT_MASK), "r"(c0), "r"(c1)
      : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.3d .cta_group::2 ...); CUTLASS SM100_TMA_2SM_LOAD_3D
PE_DEVICE void tma_load_3d_cta2(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar) & PE_PEER_BIT_MASK), "r"(c0), "r"(c1),
         "r"(c2)
      : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.2d .cta_group::2 ... .L2::cache_hint)
PE_DEVICE void tma_load_2d_cta2_hint(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1,
                                     u64 hint) {
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5;"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar) & PE_PEER_BIT_MASK), "r"(c0), "r"(c1),
         "l"(hint)
      : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.2d .cta_group::2 .multicast::cluster);
// CUTLASS SM100_TMA_2SM_LOAD_MULTICAST_2D
PE_DEVICE void tma_load_2d_cta2_multicast(void* dst, const void* tmap, u64* bar, u16 cta_mask,
                                          i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar) & PE_PEER_BIT_MASK), "h"(cta_mask),
         "r"(c0), "r"(c1)
      : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.3d .cta_group::2 .multicast::cluster)
PE_DEVICE void tma_load_3d_cta2_multicast(void* dst, const void* tmap, u64* bar, u16 cta_mask,
                                          i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar) & PE_PEER_BIT_MASK), "h"(cta_mask),
         "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
#endif  // __CUDA_ARCH__ >= 1000

// ---- stores: shared::cta -> global, bulk-group completion ------------------------------------

// PTX ISA: cp.async.bulk.tensor (.2d .global.shared::cta .tile .bulk_group); CUTLASS SM90_TMA_STORE_2D.
// Write the staging tile with ordinary st.shared first, then fence_proxy_async_shared_cta().
PE_DEVICE void tma_store_2d(const void* tmap, const void* src, i32 c0, i32 c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               :: "l"(tmap), "r"(smem_u32(src)), "r"(c0), "r"(c1) : "memory");
}

// PTX ISA: cp.async.bulk.tensor (.3d .global.shared::cta .tile .bulk_group); CUTLASS SM90_TMA_STORE_3D
PE_DEVICE void tma_store_3d(const void* tmap, const void* src, i32 c0, i32 c1, i32 c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
               :: "l"(tmap), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// PTX ISA: cp.async.bulk.commit_group: close the bulk group of this thread's prior bulk copies
PE_DEVICE void cp_async_bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// PTX ISA: cp.async.bulk.wait_group: wait until at most N of this thread's bulk groups are
// pending (writes to global complete and visible).
template <int N>
PE_DEVICE void cp_async_bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

// PTX ISA: cp.async.bulk.wait_group (.read): wait only until the sources of all but N groups
// have been read, i.e. the shared staging buffer may be overwritten. CUTLASS tma_store_wait<N>.
template <int N>
PE_DEVICE void cp_async_bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// ---- descriptor prefetch and proxy fence --------------------------------------------------

// PTX ISA: prefetch (prefetch.tensormap): bring the 128-B tensor map into the descriptor cache;
// generic address of the __grid_constant__ parameter. CUTLASS prefetch_tma_descriptor.
PE_DEVICE void prefetch_tensormap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(tmap) : "memory");
}

// PTX ISA: membar/fence (fence.proxy.async.shared::cta): order this thread's generic-proxy
// shared-memory writes before later async-proxy (TMA store, UMMA) reads of them.
// CUTLASS fence_view_async_shared / tma_store_fence.
PE_DEVICE void fence_proxy_async_shared_cta() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- the sm90 twin's L2 prefetch and 5-D box load ------------------------------------------------

// PTX ISA cp.async.bulk.prefetch.tensor (.2d .L2 .global .tile): start moving a box of the tensor map
// into L2 without a shared-memory destination; a later TMA load of it then hits L2.
// CUTLASS SM90_TMA_LOAD_2D::PREFETCH.
PE_DEVICE void tma_prefetch_2d_l2(const void* tmap, i32 c0, i32 c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               :: "l"(tmap), "r"(c0), "r"(c1) : "memory");
}

// PTX ISA cp.async.bulk.tensor (.5d .shared::cluster.global .tile .mbarrier::complete_tx::bytes):
// a 5-D box, written to shared memory densely with coordinate c0 fastest (c0 = the 128-B swizzled row).
// CUTLASS include/cute/arch/copy_sm90_tma.hpp SM90_TMA_LOAD_5D.
PE_DEVICE void tma_load_5d(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
      :: "r"(smem_u32(dst)), "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
