// Cooperative fibers (see fiber.h).
#include "runtime/fiber.h"

#include <cstdlib>

#if defined(__x86_64__)

extern "C" void pe_sim_fiber_switch_asm(void** from_sp, void* to_sp);
extern "C" void pe_sim_fiber_start_asm();

// Saved frame, from the saved stack pointer up: [MXCSR | x87 CW] r15 r14 r13 r12 rbx rbp return-address.
asm(R"(
  .text
  .globl pe_sim_fiber_switch_asm
  .hidden pe_sim_fiber_switch_asm
  .type pe_sim_fiber_switch_asm,@function
pe_sim_fiber_switch_asm:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size pe_sim_fiber_switch_asm, .-pe_sim_fiber_switch_asm

  .globl pe_sim_fiber_start_asm
  .hidden pe_sim_fiber_start_asm
  .type pe_sim_fiber_start_asm,@function
pe_sim_fiber_start_asm:
  .cfi_startproc
  .cfi_undefined rip
  movq %r13, %rdi
  callq *%r12
  ud2
  .cfi_endproc
  .size pe_sim_fiber_start_asm, .-pe_sim_fiber_start_asm
)");

namespace pe_sim {

void fiber_make(FiberContext* ctx, void* stack, size_t size, FiberFn fn, void* arg) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top - 64 - 16);
  // after the 7 pops and the ret, rsp = sp + 64 = top - 16: 16-byte aligned before the call in the trampoline
  uint32_t csr = 0x1F80, cw = 0x037F;
  sp[0] = uint64_t(csr) | (uint64_t(cw) << 32);
  sp[1] = 0;                                     // r15
  sp[2] = 0;                                     // r14
  sp[3] = reinterpret_cast<uint64_t>(arg);       // r13
  sp[4] = reinterpret_cast<uint64_t>(fn);        // r12
  sp[5] = 0;                                     // rbx
  sp[6] = 0;                                     // rbp
  sp[7] = reinterpret_cast<uint64_t>(&pe_sim_fiber_start_asm);
  ctx->sp = sp;
}

void fiber_switch(FiberContext* from, FiberContext* to) { pe_sim_fiber_switch_asm(&from->sp, to->sp); }

}  // namespace pe_sim

#else  // portable fallback

#include <ucontext.h>

namespace pe_sim {

namespace {
struct Start {
  FiberFn fn;
  void* arg;
};
void trampoline(unsigned hi, unsigned lo) {
  Start* s = reinterpret_cast<Start*>((uintptr_t(hi) << 32) | lo);
  s->fn(s->arg);
  std::abort();
}
}  // namespace

void fiber_make(FiberContext* ctx, void* stack, size_t size, FiberFn fn, void* arg) {
  auto* uc = static_cast<ucontext_t*>(ctx->uc ? ctx->uc : std::calloc(1, sizeof(ucontext_t)));
  ctx->uc = uc;
  getcontext(uc);
  uc->uc_stack.ss_sp = stack;
  uc->uc_stack.ss_size = size;
  uc->uc_link = nullptr;
  auto* s = new Start{fn, arg};
  uintptr_t p = reinterpret_cast<uintptr_t>(s);
  makecontext(uc, reinterpret_cast<void (*)()>(trampoline), 2, unsigned(p >> 32), unsigned(p));
}

void fiber_switch(FiberContext* from, FiberContext* to) {
  if (!from->uc) from->uc = std::calloc(1, sizeof(ucontext_t));
  swapcontext(static_cast<ucontext_t*>(from->uc), static_cast<ucontext_t*>(to->uc));
}

}  // namespace pe_sim

#endif
