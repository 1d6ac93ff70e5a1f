// The three mbarrier wait builds (PE_WAIT_KIND; see "Three wait builds" in common/mbarrier.cuh), their
// names and the bound of the bounded ones. Kept apart from the wait instructions so the simulated twin of
// common/mbarrier.cuh (src/kernels/sim/common) compiles the same build selection.
#pragma once
#include "common/types.cuh"

#define PE_WAIT_BOUNDED_PRINTF 0
#define PE_WAIT_BOUNDED_TRAP 1
#define PE_WAIT_UNBOUNDED 2
#ifndef PE_WAIT_KIND
#ifdef PE_UNBOUNDED_WAIT
#define PE_WAIT_KIND PE_WAIT_UNBOUNDED
#else
#define PE_WAIT_KIND PE_WAIT_BOUNDED_PRINTF
#endif
#endif
#if PE_WAIT_KIND < 0 || PE_WAIT_KIND > 2
#error "PE_WAIT_KIND: 0 (bounded, printf), 1 (bounded, trap) or 2 (unbounded)"
#endif
#if PE_WAIT_KIND == PE_WAIT_BOUNDED_PRINTF && !defined(PE_WAIT_PRINTF)
#define PE_WAIT_KIND_NOCALL PE_WAIT_BOUNDED_TRAP
#else
#define PE_WAIT_KIND_NOCALL PE_WAIT_KIND
#endif
#ifndef PE_WAIT_LIMIT
#define PE_WAIT_LIMIT (1u << 26)  // tries, each of which may suspend for a hardware time slice
#endif
