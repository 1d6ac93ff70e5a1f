// Simulated twin of common/clock.cuh: %clock64 and %globaltimer read the simulated counter of the CTA's
// SM, which only orders events (it advances at every scheduling step); never a time.
#pragma once
#include "common/types.cuh"

// PTX ISA 10 "Special Registers": %clock64
PE_DEVICE u64 clock64_read(PE_SIM_SITE) { return pe_sim::clock64(site); }

// PTX ISA 10 "Special Registers": %globaltimer (the same simulated counter)
PE_DEVICE u64 globaltimer_read(PE_SIM_SITE) { return pe_sim::globaltimer(site); }
