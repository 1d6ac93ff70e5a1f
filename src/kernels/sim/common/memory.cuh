// Simulated twin of common/memory.cuh (PTX ISA 9.7.9.8 ld, 9.7.9.9 ld.global.nc, 9.7.9.10 st): global
// accesses are checked against the tensors the launch was given; shared accesses against the CTA's window
// and the in-flight asynchronous reads of it (a hazard when a store lands in bytes a TMA store or an MMA
// still reads).
#pragma once
#include "common/types.cuh"

PE_DEVICE void ld_global_nc_v4(const void* p, u32 (&r)[4], PE_SIM_SITE) { pe_sim::gmem_load(p, r, 16, site); }
PE_DEVICE void ld_global_nc_v2(const void* p, u32& a, u32& b, PE_SIM_SITE) {
  u32 v[2];
  pe_sim::gmem_load(p, v, 8, site);
  a = v[0];
  b = v[1];
}
PE_DEVICE u32 ld_global_nc_b32(const void* p, PE_SIM_SITE) {
  u32 v;
  pe_sim::gmem_load(p, &v, 4, site);
  return v;
}
PE_DEVICE void st_global_v4(void* p, u32 a, u32 b, u32 c, u32 d, PE_SIM_SITE) {
  const u32 v[4] = {a, b, c, d};
  pe_sim::gmem_store(p, v, 16, site);
}
PE_DEVICE void st_global_v2(void* p, u32 a, u32 b, PE_SIM_SITE) {
  const u32 v[2] = {a, b};
  pe_sim::gmem_store(p, v, 8, site);
}
PE_DEVICE void st_global_b32(void* p, u32 a, PE_SIM_SITE) { pe_sim::gmem_store(p, &a, 4, site); }
PE_DEVICE void st_global_cs_v4(void* p, u32 a, u32 b, u32 c, u32 d, PE_SIM_SITE) {
  const u32 v[4] = {a, b, c, d};
  pe_sim::gmem_store(p, v, 16, site);
}
PE_DEVICE void st_global_cs_b32(void* p, u32 a, PE_SIM_SITE) { pe_sim::gmem_store(p, &a, 4, site); }

PE_DEVICE void st_shared_v4(u32 addr, u32 a, u32 b, u32 c, u32 d, PE_SIM_SITE) {
  const u32 v[4] = {a, b, c, d};
  pe_sim::smem_store(addr, v, 16, site);
}
PE_DEVICE void ld_shared_v4(u32 addr, u32 (&r)[4], PE_SIM_SITE) { pe_sim::smem_load(addr, r, 16, site); }

PE_DEVICE u32 ld_shared_cluster_u32(u32 cluster_addr, PE_SIM_SITE) {
  u32 v;
  pe_sim::smem_load(cluster_addr, &v, 4, site);
  return v;
}
PE_DEVICE u64 ld_shared_cluster_u64(u32 cluster_addr, PE_SIM_SITE) {
  u64 v;
  pe_sim::smem_load(cluster_addr, &v, 8, site);
  return v;
}
PE_DEVICE void st_shared_cluster_u32(u32 cluster_addr, u32 v, PE_SIM_SITE) { pe_sim::smem_store(cluster_addr, &v, 4, site); }
