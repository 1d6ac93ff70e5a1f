// The simulator engine, one translation unit (pelib.sim builds it with fiber.cpp): runtime/state.h holds the
// machine and the declarations its files share through one anonymous namespace, and each file is a layer:
//   scheduler.cpp  fibers for CUDA threads, the seeded scheduler (random, lazy or eager), shared-memory
//                  addressing, the asynchronous operation queue (new_op / submit), launch, lifecycle, exit checks
//   order.cpp      happens-before: vector clocks, the shared-memory and TMEM shadows, the hazard rules
//   events.cpp     the event log in the stage's own terms (barrier names and phases, ops; roles, tiles, ring
//                  slots and accumulators from the stage's phase marks)
//   report.cpp     reports (deadlock, hazard, misuse, warning) through one JSON writer; the C ABI
// and one semantics file per instruction family, mirroring the twins in ../common/:
//   sync.cpp (cluster.cuh), mbarrier.cpp, tma.cpp, wgmma.cpp, tcgen05.cpp, memory.cpp (memory.cuh, clock.cuh,
//   and every plain access of the stage's code). The data paths are the pure models of ../model/.
#include "runtime/scheduler.cpp"
#include "runtime/order.cpp"
#include "runtime/events.cpp"
#include "runtime/report.cpp"
#include "runtime/sync.cpp"
#include "runtime/mbarrier.cpp"
#include "runtime/tma.cpp"
#include "runtime/wgmma.cpp"
#include "runtime/tcgen05.cpp"
#include "runtime/memory.cpp"
