// The SM's clock registers, read by the TIMING build (common/timing.cuh). One PE_DEVICE function per
// special register; apart from timing.cuh so the simulator's twin (src/kernels/sim/common/clock.cuh)
// replaces only these two reads.
#pragma once
#include "common/types.cuh"

// PTX ISA: Special Registers: %clock64 (volatile: not moved across the timed code)
PE_DEVICE u64 clock64_read() {
  u64 t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory");
  return t;
}

// PTX ISA: Special Registers: %globaltimer (nanoseconds)
PE_DEVICE u64 globaltimer_read() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
  return t;
}
