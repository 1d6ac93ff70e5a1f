// Cooperative fibers: one stack per simulated CUDA thread and, on x86-64, a hand-rolled context switch
// (SysV: the callee-saved registers rbx, rbp, r12-r15, MXCSR and the x87 control word), much cheaper than
// swapcontext, which also saves the signal mask with a system call. Other targets use <ucontext.h>.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pe_sim {

using FiberFn = void (*)(void*);

struct FiberContext {
  void* sp = nullptr;   // saved stack pointer (hand-rolled switch)
  void* uc = nullptr;   // ucontext_t* (fallback)
};

// Prepare `ctx` to run fn(arg) on [stack, stack + size) at the first switch to it. fn must never return.
void fiber_make(FiberContext* ctx, void* stack, size_t size, FiberFn fn, void* arg);
// Save the current context into `from` and resume `to`.
void fiber_switch(FiberContext* from, FiberContext* to);

}  // namespace pe_sim
