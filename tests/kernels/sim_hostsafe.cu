// A small kernel for tests/test_sim_hostsafe.py: what a simulated thread may do that would end or freeze the
// host process, one case per `mode` (the kernel's argument, so one build serves them all): thread 3 of CTA 0
// does it, the others store out[t] = t and exit. NVRTC never builds it: the host calls are host-only code.
//   mode 0  correct
//   mode 1  abort()                      mode 2  a failing <assert.h> assert
//   mode 3  exit(0)                      mode 4  _Exit(3)
//   mode 5  raise(SIGSEGV)               mode 6  raise(SIGFPE)
//   mode 7  raise(SIGABRT)               mode 8  raise(SIGILL)
//   mode 9  raise(SIGBUS)                mode 10 __trap()
//   mode 11 a loop on registers only that never ends (no scheduling point, no load)
//   mode 12 a spin on a volatile local nobody sets (loads of the thread's own stack only)
//   mode 13 quick_exit(0)
//   mode 15 _exit(0)                     mode 16 std::abort()
//   mode 17 memcpy 32 B over out's end   mode 18 memset 32 B over out's end
//   mode 19 memmove and memset inside out (benign)
#include <assert.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cstdlib>

#include "common/types.cuh"

extern "C" __global__ void sim_hostsafe(u32* out, int mode) {
  const int t = threadIdx.x;
  if (blockIdx.x == 0 && t == 3) {
    switch (mode) {
      case 1: abort();
      case 2: assert(mode != 2); break;
      case 3: exit(0);
      case 4: _Exit(3);
      case 5: raise(SIGSEGV); break;
      case 6: raise(SIGFPE); break;
      case 7: raise(SIGABRT); break;
      case 8: raise(SIGILL); break;
      case 9: raise(SIGBUS); break;
      case 10: __trap();
      case 11:
        for (unsigned x = 1; x != 0; x = x * 3u + 1u | 1u) {
          asm volatile("" : "+r"(x));
        }
        break;
      case 12: {
        volatile int flag = 0;
        while (flag == 0) {
        }
        break;
      }
      case 13: quick_exit(0);
      case 15: _exit(0);
      case 16: std::abort();
      case 17: memcpy(out + 60, out, 32); break;
      case 18: memset(out + 60, 0, 32); break;
      case 19: memmove(out + 4, out + 8, 16); memset(out + 8, 0, 16); break;
      default: break;
    }
  }
  out[blockIdx.x * blockDim.x + t] = (u32)t;
}
