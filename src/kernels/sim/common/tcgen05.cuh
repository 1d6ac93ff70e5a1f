// Simulated twin of common/tcgen05.cuh (PTX ISA 9.7.16 "TensorCore 5th Generation Family Instructions").
// TMEM is uint32[128 lanes][512 columns] per CTA; alloc/dealloc keep column accounting (a second
// allocation that does not fit waits); mma, cp and commit are queued in issue order per thread and run
// model/umma.h when they complete (a commit arrives after every earlier tcgen05 op of its thread); ld
// gathers the warp, checks the lane quarter and hands the registers over at tcgen05.wait::ld.
#pragma once
#include "common/types.cuh"

#define PE_TCGEN05_CG_CHECK(CG) static_assert((CG) == 1 || (CG) == 2, "tcgen05: cta_group must be 1 or 2")

// PTX ISA 9.7.16.7.1 tcgen05.alloc / dealloc / relinquish_alloc_permit
template <int CG>
PE_DEVICE void tcgen05_alloc(u32 dst_smem, u32 ncols, PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_alloc(CG, dst_smem, ncols, site);
}
template <int CG>
PE_DEVICE void tcgen05_dealloc(u32 taddr, u32 ncols, PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_dealloc(CG, taddr, ncols, site);
}
template <int CG>
PE_DEVICE void tcgen05_relinquish_alloc_permit(PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_relinquish(CG, site);
}

// PTX ISA 9.7.16.10.9 tcgen05.mma (kind::f16, kind::f8f6f4; both operands by descriptor)
template <int CG>
PE_DEVICE void tcgen05_mma_f16(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, u32 accumulate, PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_mma(0, CG, d_tmem, a_desc, b_desc, idesc, 0, 0, accumulate, site);
}
template <int CG>
PE_DEVICE void tcgen05_mma_f8f6f4(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, u32 accumulate, PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_mma(2, CG, d_tmem, a_desc, b_desc, idesc, 0, 0, accumulate, site);
}

// PTX ISA 9.7.16.11.1 tcgen05.commit (.mbarrier::arrive::one, plain and .multicast::cluster)
template <int CG>
PE_DEVICE void tcgen05_commit(u32 mbar, PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_commit(CG, mbar, 0, false, site);
}
template <int CG>
PE_DEVICE void tcgen05_commit_multicast(u32 mbar, u16 mask, PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_commit(CG, mbar, mask, true, site);
}

// PTX ISA 9.7.16.8.3 tcgen05.ld (.sync.aligned.32x32b.xN)
PE_DEVICE void tcgen05_ld_32x32b_x16(u32 taddr, u32 (&r)[16], PE_SIM_SITE) { pe_sim::tc_ld_32x32b(taddr, r, 16, site); }
PE_DEVICE void tcgen05_ld_32x32b_x32(u32 taddr, u32 (&r)[32], PE_SIM_SITE) { pe_sim::tc_ld_32x32b(taddr, r, 32, site); }

// PTX ISA 9.7.16.8.5 tcgen05.wait::ld / wait::st
PE_DEVICE void tcgen05_wait_ld(PE_SIM_SITE) { pe_sim::tc_wait_ld(site); }
PE_DEVICE void tcgen05_wait_st(PE_SIM_SITE) { pe_sim::tc_wait_st(site); }

// PTX ISA 9.7.16.6.4 tcgen05.fence::before_thread_sync / after_thread_sync: ordering only
PE_DEVICE void tcgen05_fence_before_thread_sync(PE_SIM_SITE) { pe_sim::tc_fence(true, site); }
PE_DEVICE void tcgen05_fence_after_thread_sync(PE_SIM_SITE) { pe_sim::tc_fence(false, site); }

// PTX ISA 9.7.16.9.2 tcgen05.cp (.32x128b.warpx4)
template <int CG>
PE_DEVICE void tcgen05_cp_32x128b_warpx4(u32 taddr, u64 src_desc, PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_cp_32x128b_warpx4(CG, taddr, src_desc, site);
}

// PTX ISA 9.7.16.10.9 tcgen05.mma (.kind::mxf4nvf4.block_scale.block16), scale factors in TMEM
template <int CG>
PE_DEVICE void tcgen05_mma_mxf4nvf4_block16(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, u32 sfa_tmem,
                                            u32 sfb_tmem, u32 accumulate, PE_SIM_SITE) {
  PE_TCGEN05_CG_CHECK(CG);
  pe_sim::tc_mma(6, CG, d_tmem, a_desc, b_desc, idesc, sfa_tmem, sfb_tmem, accumulate, site);
}
