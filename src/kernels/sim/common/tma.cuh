// Simulated twin of common/tma.cuh (PTX ISA 9.7.9.25 cp.async.bulk.tensor, 9.7.9.26 commit/wait_group,
// 9.7.9.27 cp.async.bulk.prefetch.tensor; 9.7.12.4 fence.proxy.async). The 128-byte CUtensorMap a kernel
// receives holds the map's spec (model/tensormap.h PeSimTensorMap, encoded by pelib.sim.tensormap). A load
// is queued: the engine copies the box with model/tma_box.h when it completes (at a scheduling point the
// seed picks) and then signals complete_tx on the barrier(s); a store reads the staging tile at completion.
#pragma once
#include "common/types.cuh"
#include "common/cluster.cuh"

struct alignas(64) TensorMap {
  u64 opaque[16];
};

#define PE_CACHE_EVICT_NORMAL 0x1000000000000000ull
#define PE_CACHE_EVICT_FIRST 0x12F0000000000000ull
#define PE_CACHE_EVICT_LAST 0x14F0000000000000ull
#define PE_PEER_BIT_MASK 0xFEFFFFFFu

namespace pe_sim_tma {
inline void load(void* dst, const void* tmap, u64* bar, u32 bar_addr, const int* c, int n, u32 mask, int cg,
                 pe_sim::Site site) {
  (void)bar;
  pe_sim::tma_load(tmap, smem_u32(dst, site), bar_addr, c, n, mask, cg, site);
}
}  // namespace pe_sim_tma

// ---- loads (.shared::cluster.global .tile .mbarrier::complete_tx::bytes) ----
PE_DEVICE void tma_load_2d(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, PE_SIM_SITE) {
  const int c[2] = {c0, c1};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site), c, 2, 0, 1, site);
}
PE_DEVICE void tma_load_3d(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, i32 c2, PE_SIM_SITE) {
  const int c[3] = {c0, c1, c2};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site), c, 3, 0, 1, site);
}
// .L2::cache_hint: a cache policy only
PE_DEVICE void tma_load_2d_hint(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, u64 hint, PE_SIM_SITE) {
  (void)hint;
  const int c[2] = {c0, c1};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site), c, 2, 0, 1, site);
}
PE_DEVICE void tma_load_3d_hint(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, i32 c2, u64 hint,
                                PE_SIM_SITE) {
  (void)hint;
  const int c[3] = {c0, c1, c2};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site), c, 3, 0, 1, site);
}
// .multicast::cluster: the box lands at the same offset in every CTA of cta_mask, each on its own barrier
PE_DEVICE void tma_load_2d_multicast(void* dst, const void* tmap, u64* bar, u16 cta_mask, i32 c0, i32 c1,
                                     PE_SIM_SITE) {
  const int c[2] = {c0, c1};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site), c, 2, cta_mask, 1, site);
}
PE_DEVICE void tma_load_3d_multicast(void* dst, const void* tmap, u64* bar, u16 cta_mask, i32 c0, i32 c1, i32 c2,
                                     PE_SIM_SITE) {
  const int c[3] = {c0, c1, c2};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site), c, 3, cta_mask, 1, site);
}

// ---- sm_100a .cta_group::2: complete_tx lands on the leader CTA's barrier (peer bit masked) ----
PE_DEVICE void tma_load_2d_cta2(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, PE_SIM_SITE) {
  const int c[2] = {c0, c1};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site) & PE_PEER_BIT_MASK, c, 2, 0, 2, site);
}
PE_DEVICE void tma_load_3d_cta2(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, i32 c2, PE_SIM_SITE) {
  const int c[3] = {c0, c1, c2};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site) & PE_PEER_BIT_MASK, c, 3, 0, 2, site);
}
PE_DEVICE void tma_load_2d_cta2_hint(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, u64 hint, PE_SIM_SITE) {
  (void)hint;
  const int c[2] = {c0, c1};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site) & PE_PEER_BIT_MASK, c, 2, 0, 2, site);
}
PE_DEVICE void tma_load_2d_cta2_multicast(void* dst, const void* tmap, u64* bar, u16 cta_mask, i32 c0, i32 c1,
                                          PE_SIM_SITE) {
  const int c[2] = {c0, c1};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site) & PE_PEER_BIT_MASK, c, 2, cta_mask, 2, site);
}
PE_DEVICE void tma_load_3d_cta2_multicast(void* dst, const void* tmap, u64* bar, u16 cta_mask, i32 c0, i32 c1,
                                          i32 c2, PE_SIM_SITE) {
  const int c[3] = {c0, c1, c2};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site) & PE_PEER_BIT_MASK, c, 3, cta_mask, 2, site);
}

// ---- stores (.global.shared::cta .tile .bulk_group) ----
PE_DEVICE void tma_store_2d(const void* tmap, const void* src, i32 c0, i32 c1, PE_SIM_SITE) {
  const int c[2] = {c0, c1};
  pe_sim::tma_store(tmap, smem_u32(src, site), c, 2, site);
}
PE_DEVICE void tma_store_3d(const void* tmap, const void* src, i32 c0, i32 c1, i32 c2, PE_SIM_SITE) {
  const int c[3] = {c0, c1, c2};
  pe_sim::tma_store(tmap, smem_u32(src, site), c, 3, site);
}
PE_DEVICE void cp_async_bulk_commit_group(PE_SIM_SITE) { pe_sim::bulk_commit(site); }
template <int N>
PE_DEVICE void cp_async_bulk_wait_group(PE_SIM_SITE) {
  pe_sim::bulk_wait(N, false, site);
}
template <int N>
PE_DEVICE void cp_async_bulk_wait_group_read(PE_SIM_SITE) {
  pe_sim::bulk_wait(N, true, site);
}

// ---- prefetches and the proxy fence ----
PE_DEVICE void prefetch_tensormap(const void* tmap, PE_SIM_SITE) { pe_sim::tensormap_prefetch(tmap, site); }
PE_DEVICE void fence_proxy_async_shared_cta(PE_SIM_SITE) { pe_sim::fence_proxy_async(site); }
PE_DEVICE void tma_prefetch_2d_l2(const void* tmap, i32 c0, i32 c1, PE_SIM_SITE) {
  const int c[2] = {c0, c1};
  pe_sim::tma_prefetch(tmap, c, 2, site);
}
PE_DEVICE void tma_load_5d(void* dst, const void* tmap, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4,
                           PE_SIM_SITE) {
  const int c[5] = {c0, c1, c2, c3, c4};
  pe_sim_tma::load(dst, tmap, bar, smem_u32(bar, site), c, 5, 0, 1, site);
}
