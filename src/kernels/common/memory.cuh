// Plain loads and stores (PTX ISA 9.7.9 "Data Movement and Conversion Instructions": ld, st), one
// PE_DEVICE function each, by state space and vector width. The asynchronous copies (TMA,
// cp.async.bulk) are in common/tma.cuh, the tensor-memory moves (tcgen05.ld/st/cp) in common/tcgen05.cuh.
//
//   global     ld_global_nc_v4 / _v2 / _b32         read-only (.nc) path, 16 B / 8 B / 4 B
//              st_global_v4 / _v2 / _b32            16 B / 8 B / 4 B
//              st_global_cs_v4 / st_global_cs_b32   .cs: cache streaming (evict-first; the output is written once)
//   shared     st_shared_v4 / ld_shared_v4          16 B at a 32-bit shared::cta address
//   cluster    ld_shared_cluster_u32 / _u64, st_shared_cluster_u32
//                                                   a cluster peer's shared memory at a shared::cluster
//                                                   address (common/cluster.cuh mapa_shared_cluster)
// The 16-B forms need 16-B aligned addresses. Sources: PTX ISA ld, ld.global.nc, st (state spaces
// .global, .shared::cta, .shared::cluster; .v4; cache operators .cs); CUTLASS include/cute/arch/copy.hpp
// and copy_sm90.hpp for the same inline-PTX forms.
#pragma once
#include "common/types.cuh"

// ---- global ----------------------------------------------------------------------------------------

// PTX ISA ld: .global.nc is the non-coherent (read-only) path; only for data the kernel never writes.
PE_DEVICE void ld_global_nc_v4(const void* p, u32 (&r)[4]) {
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}

// PTX ISA ld (.global.nc, .v2.b32: 8 bytes)
PE_DEVICE void ld_global_nc_v2(const void* p, u32& a, u32& b) {
  asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "l"(p));
}

// PTX ISA ld (.global.nc, 4 bytes). volatile so that a load issued before a mainloop stays there (its
// latency hides behind the MMAs) instead of sinking to its first use.
PE_DEVICE u32 ld_global_nc_b32(const void* p) {
  u32 r;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

// PTX ISA st (.global, .v4.b32)
PE_DEVICE void st_global_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// PTX ISA st (.global, .v2.b32: 8 bytes)
PE_DEVICE void st_global_v2(void* p, u32 a, u32 b) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" :: "l"(p), "r"(a), "r"(b) : "memory");
}

// PTX ISA st (.global, 4 bytes)
PE_DEVICE void st_global_b32(void* p, u32 a) {
  asm volatile("st.global.b32 [%0], %1;" :: "l"(p), "r"(a) : "memory");
}

// PTX ISA st (.global.cs = cache streaming: allocate with evict-first, the output is written once).
PE_DEVICE void st_global_cs_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}
PE_DEVICE void st_global_cs_b32(void* p, u32 a) {
  asm volatile("st.global.cs.b32 [%0], %1;" :: "l"(p), "r"(a) : "memory");
}

// ---- shared (this CTA) -----------------------------------------------------------------------------

// PTX ISA st (.shared, .v4.b32): 16 B at a 16-B aligned shared address
PE_DEVICE void st_shared_v4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// PTX ISA ld (.shared, .v4.b32)
PE_DEVICE void ld_shared_v4(u32 addr, u32 (&r)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// ---- shared::cluster (distributed shared memory) ---------------------------------------------------

// PTX ISA: ld (state space .shared::cluster): read 4 bytes of a cluster peer's shared memory
PE_DEVICE u32 ld_shared_cluster_u32(u32 cluster_addr) {
  u32 v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(cluster_addr) : "memory");
  return v;
}

// PTX ISA: ld (state space .shared::cluster), 8 bytes
PE_DEVICE u64 ld_shared_cluster_u64(u32 cluster_addr) {
  u64 v;
  asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(cluster_addr) : "memory");
  return v;
}

// PTX ISA: st (state space .shared::cluster): write 4 bytes into a cluster peer's shared memory
PE_DEVICE void st_shared_cluster_u32(u32 cluster_addr, u32 v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;" :: "r"(cluster_addr), "r"(v) : "memory");
}
