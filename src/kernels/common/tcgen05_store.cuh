// tcgen05.st (PTX ISA 9.7.16.8.4, "TensorCore 5th Generation Family Instructions"): registers -> TMEM. No stage
// stores into TMEM; the numerics probe (probes/tcgen05_numerics.cu) does, to set its accumulator D, so the
// wrapper lives here and not in common/tcgen05.cuh, whose stages' cubins stay as they are.
//   tcgen05_st_32x32b_x32(u32 taddr, const u32 (&r)[32])   lane i of the warp writes TMEM lane (taddr>>16)+i,
//                                                           register j column (taddr&0xFFFF)+j
#pragma once
#include "common/types.cuh"

// ---- registers -> TMEM, shape 32x32b (PTX tcgen05.st; CUTLASS copy_sm100.hpp SM100_TMEM_STORE_32dp32b32x):
// lane i of the warp writes TMEM lane (taddr>>16)+i, register j column (taddr&0xFFFF)+j. Asynchronous:
// tcgen05_wait_st() before the stored words are read (by an MMA: also a fence and a thread sync).
PE_DEVICE void tcgen05_st_32x32b_x32(u32 taddr, const u32 (&r)[32]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};"
      :: "r"(taddr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
         "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]), "r"(r[15]), "r"(r[16]),
         "r"(r[17]), "r"(r[18]), "r"(r[19]), "r"(r[20]), "r"(r[21]), "r"(r[22]), "r"(r[23]), "r"(r[24]), "r"(r[25]),
         "r"(r[26]), "r"(r[27]), "r"(r[28]), "r"(r[29]), "r"(r[30]), "r"(r[31])
      : "memory");
}
