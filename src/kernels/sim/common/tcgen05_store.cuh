// Simulated twin of common/tcgen05_store.cuh (PTX ISA 9.7.16.8.4 tcgen05.st): the warp gathers, then the
// engine writes its 32 lanes' registers into TMEM (model/umma.h tmem_st_32x32b), checking the lane quarter
// and the allocation; the write is complete to the warp only at tcgen05.wait::st (runtime/tcgen05.cpp).
#pragma once
#include "common/types.cuh"

// PTX ISA 9.7.16.8.4 tcgen05.st (.sync.aligned.32x32b.x32): written when the warp has gathered
PE_DEVICE void tcgen05_st_32x32b_x32(u32 taddr, const u32 (&r)[32], PE_SIM_SITE) { pe_sim::tc_st_32x32b(taddr, r, 32, site); }
