// tcgen05 (5th-generation tensor core, sm_100a) PTX wrappers: TMEM allocation, UMMA issue,
// commit to an mbarrier, TMEM loads, fences. One PE_DEVICE function per instruction, one asm each.
//
// API (CG = cta_group, 1 or 2; every call of a CG-templated wrapper in a kernel must use one CG):
//   tcgen05_alloc<CG>(u32 dst_smem, u32 ncols)        one whole warp; writes the TMEM base address to
//                                                     the shared word at dst_smem (32-bit shared address)
//   tcgen05_dealloc<CG>(u32 taddr, u32 ncols)         same warp that allocated, before the CTA exits
//   tcgen05_relinquish_alloc_permit<CG>()             this CTA will allocate no more
//   tcgen05_mma_f16<CG>(d_tmem, a_desc, b_desc, idesc, accumulate)      kind::f16 (BF16/F16 in, F32 out)
//   tcgen05_mma_f8f6f4<CG>(d_tmem, a_desc, b_desc, idesc, accumulate)   kind::f8f6f4 (E4M3/E5M2/...)
//       a_desc/b_desc: 64-bit shared-memory descriptors (common/descriptors.cuh umma_smem_desc);
//       idesc: the 32-bit instruction descriptor (umma_instr_desc); accumulate 0 overwrites D.
//       Issue from ONE thread. With CG=2 only the even (leader) CTA of the pair issues.
//   tcgen05_commit<CG>(u32 mbar)                      arrive once on the mbarrier (a 32-bit shared
//                                                     address of this CTA) when all prior MMAs finish
//   tcgen05_commit_multicast<CG>(u32 mbar, u16 mask)  same, on the mbarrier at that offset in every
//                                                     CTA of the cluster whose bit is set in mask
//   tcgen05_ld_32x32b_x16(u32 taddr, u32 (&r)[16])    warp reads 32 lanes x 16 columns of 32 bit
//   tcgen05_ld_32x32b_x32(u32 taddr, u32 (&r)[32])    ... 32 columns; lane i of the warp gets TMEM lane
//                                                     (taddr>>16)+i, register j gets column (taddr&0xFFFF)+j
//   tcgen05_wait_ld() / tcgen05_wait_st()             registers of earlier tcgen05.ld/st are ready
//   tcgen05_fence_before_thread_sync() / tcgen05_fence_after_thread_sync()
//                                                     order tcgen05 ops around mbarrier/bar.sync syncs
//   tcgen05_cp_32x128b_warpx4<CG>(u32 taddr, u64 src_desc)   SMEM -> TMEM copy (scale factors)
// TMEM address: bits [31:16] lane, [15:0] column. A warp may access only lanes 32*(warp_id%4)...+31.
//
// Sources: PTX ISA, "TensorCore 5th Generation Family Instructions" (9.7.16), one subsection per
// instruction named below as "PTX tcgen05.xxx"; CUTLASS include/cute/arch/tmem_allocator_sm100.hpp,
// mma_sm100_umma.hpp, copy_sm100.hpp, include/cutlass/arch/barrier.h (umma_arrive*);
// DeepGEMM deep_gemm/include/deep_gemm/ptx/tcgen05.cuh.
#pragma once
#include "common/types.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 1000)
#error "common/tcgen05.cuh: tcgen05 needs sm_100a (compile with arch=sm_100a); the Hopper twin uses wgmma"
#endif

#define PE_TCGEN05_CG_CHECK(CG) static_assert((CG) == 1 || (CG) == 2, "tcgen05: cta_group must be 1 or 2")

// ---- TMEM allocation (PTX tcgen05.alloc/dealloc/relinquish_alloc_permit; CUTLASS tmem_allocator_sm100.hpp Allocator1Sm/Allocator2Sm) ----
// ncols: a power of two in [32, 512]. Executed by all 32 lanes of one warp (.sync.aligned).
template <int CG>
PE_DEVICE void tcgen05_alloc(u32 dst_smem, u32 ncols) {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" :: "r"(dst_smem), "r"(ncols) : "memory");
  else
    asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;" :: "r"(dst_smem), "r"(ncols) : "memory");
}

// (PTX tcgen05.alloc/dealloc/relinquish_alloc_permit; CUTLASS Allocator*Sm::free)
template <int CG>
PE_DEVICE void tcgen05_dealloc(u32 taddr, u32 ncols) {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(taddr), "r"(ncols) : "memory");
  else
    asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;" :: "r"(taddr), "r"(ncols) : "memory");
}

// (PTX tcgen05.alloc/dealloc/relinquish_alloc_permit; CUTLASS Allocator*Sm::release_allocation_lock)
template <int CG>
PE_DEVICE void tcgen05_relinquish_alloc_permit() {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
  else
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory");
}

// ---- MMA, both operands in shared memory (PTX tcgen05.mma; CUTLASS mma_sm100_umma.hpp SM100_MMA_*_SS,
// DeepGEMM ptx/tcgen05.cuh SM100_MMA_F8F6F4_SS / _2x1SM_SS). D[tmem] (+)= A[smem] * B[smem]^T.
// `accumulate` becomes the enable-input-d predicate: 0 on the first K step of a tile.
template <int CG>
PE_DEVICE void tcgen05_mma_f16(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, u32 accumulate) {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate));
  else
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate));
}

template <int CG>
PE_DEVICE void tcgen05_mma_f8f6f4(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, u32 accumulate) {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate));
  else
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::2.kind::f8f6f4 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate));
}

// ---- commit: mbarrier arrive when all prior tcgen05.mma of this thread complete (PTX tcgen05.commit;
// CUTLASS barrier.h umma_arrive / umma_arrive_2x1SM / umma_arrive_multicast[_2x1SM]).
// Issue from the thread that issued the MMAs. The commit also implies fence::before_thread_sync.
template <int CG>
PE_DEVICE void tcgen05_commit(u32 mbar) {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" :: "r"(mbar) : "memory");
  else
    asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.b64 [%0];" :: "r"(mbar) : "memory");
}

// mask: bit r set = also arrive on the mbarrier at the same shared offset in cluster CTA rank r.
template <int CG>
PE_DEVICE void tcgen05_commit_multicast(u32 mbar, u16 mask) {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;"
                 :: "r"(mbar), "h"(mask) : "memory");
  else
    asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;"
                 :: "r"(mbar), "h"(mask) : "memory");
}

// ---- TMEM -> registers, shape 32x32b (PTX tcgen05.ld; CUTLASS copy_sm100.hpp SM100_TMEM_LOAD_32dp32b16x/32x).
// Asynchronous: the registers are valid only after tcgen05_wait_ld().
PE_DEVICE void tcgen05_ld_32x32b_x16(u32 taddr, u32 (&r)[16]) {
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x16.b32 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, [%16];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
                 "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15])
               : "r"(taddr));
}

PE_DEVICE void tcgen05_ld_32x32b_x32(u32 taddr, u32 (&r)[32]) {
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x32.b32 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
               "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, [%32];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
                 "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]),
                 "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]),
                 "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
               : "r"(taddr));
}

// (PTX tcgen05.wait; CUTLASS barrier.h fence_view_async_tmem_load/store). wait::ld waits for ALL of this
// thread's outstanding tcgen05.ld, not one of them (lab note fp8-megakernel-experiment-log.md, F1).
PE_DEVICE void tcgen05_wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }
PE_DEVICE void tcgen05_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }

// (PTX tcgen05.fence; DeepGEMM tcgen05_before_thread_sync/after_thread_sync). before: tcgen05 ops issued so
// far are ordered before the next thread sync; after: tcgen05 ops that follow are ordered after the last
// thread sync (an mbarrier wait or bar.sync). Needed after waiting on a barrier, before mma/ld.
PE_DEVICE void tcgen05_fence_before_thread_sync() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
PE_DEVICE void tcgen05_fence_after_thread_sync() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// ---- SMEM -> TMEM copy, 32x128b broadcast to the four 32-lane groups (PTX tcgen05.cp;
// CUTLASS copy_sm100.hpp SM100_UTCCP_4x32dp128bit_1cta/_2cta). src_desc: a shared-memory descriptor.
template <int CG>
PE_DEVICE void tcgen05_cp_32x128b_warpx4(u32 taddr, u64 src_desc) {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;" :: "r"(taddr), "l"(src_desc) : "memory");
  else
    asm volatile("tcgen05.cp.cta_group::2.32x128b.warpx4 [%0], %1;" :: "r"(taddr), "l"(src_desc) : "memory");
}

// ==== block-scaled forms (kind::mxf8f6f4 / mxf4 / mxf4nvf4) are appended below this line ====

// ---- NVFP4: kind::mxf4nvf4 block-scaled MMA (appended for the src/kernels/nvfp4 stages) ------------
// D[tmem] (+)= (A .* SFA) * (B .* SFB)^T with packed E2M1 A/B in shared memory (descriptors),
// UE4M3 scale factors in TMEM (one per 16 K-elements: .block16, the CUDA >= 12.9 spelling of
// .scale_vec::4X), one MMA covers K = 64. idesc: umma_instr_desc_block_scaled(..., UMMA_FMT_MXF4_E2M1,
// UMMA_FMT_MXF4_E2M1, UMMA_SF_UE4M3, a_sf_id, b_sf_id); sfa_tmem/sfb_tmem: TMEM addresses of the
// scale-factor columns (tcgen05.cp'd there). Issue from ONE thread; SASS: UTCOMMA.4X.
// (PTX ISA 9.7.16.10.9 tcgen05.mma, .kind::mxf4nvf4 .block_scale; CUTLASS mma_sm100_umma.hpp
// SM100_MMA_MXF4_SS (VS = 16) / SM100_MMA_MXF4_2x1SM_SS)
template <int CG>
PE_DEVICE void tcgen05_mma_mxf4nvf4_block16(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc,
                                            u32 sfa_tmem, u32 sfb_tmem, u32 accumulate) {
  PE_TCGEN05_CG_CHECK(CG);
  if constexpr (CG == 1)
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16 [%0], %1, %2, %3, [%5], [%6], p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate),
                    "r"(sfa_tmem), "r"(sfb_tmem));
  else
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.block16 [%0], %1, %2, %3, [%5], [%6], p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate),
                    "r"(sfa_tmem), "r"(sfb_tmem));
}
// ---- end of the NVFP4 section ------------------------------------------------------------------
