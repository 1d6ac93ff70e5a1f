// Plain memory (twin: common/memory.cuh, common/clock.cuh; PTX ISA 9.7.9.8-10 ld / st), and every memory
// access the stage's own code makes between two engine calls. pelib.sim builds a stage with the compiler's
// kernel-address instrumentation in outline mode (a call before every load and store, no runtime library):
// the __asan_* functions below receive them. So every access, a wrapper's or a raw pointer's, is checked:
// global ones against the extents of the tensors bound to the kernel's parameters (the report names the
// tensor and the element), shared ones against the CTA's declared window and the asynchronous operations that
// touch it (runtime/order.cpp), and a thread that keeps loading memory without ever reaching a scheduling
// point is a hang. What still faults (an access the instrumentation does not see, a fiber's stack overflowing
// into its guard page) is caught by a SIGSEGV / SIGBUS handler on its own stack, which turns it into a report
// and abandons the simulated thread: no kernel can take the host process down.
#include <assert.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "runtime/state.h"

namespace pe_sim {
namespace {

// ---- where an address is -------------------------------------------------------------------------------
// An access inside a tensor counted against it (Engine::gload / gstore); false where it lies in none.
bool count_tensor(uintptr_t a, size_t n, bool write) {
  for (size_t i = 0; i < E->tensors.size(); ++i) {
    const PeSimRange& t = E->tensors[i];
    if (a >= t.base && a + n <= t.base + t.bytes) {
      (write ? E->gstore : E->gload)[i] += n;
      return true;
    }
  }
  return false;
}

// "element [4097, 12] of `c` (4096 x 128, 2 B elements): 8 B past its end" for an access outside every tensor.
std::string oob_where(uintptr_t a, size_t n) {
  const PeSimRange* best = nullptr;
  uint64_t dist = ~0ull;
  for (const PeSimRange& t : E->tensors) {
    const uint64_t d = a < t.base ? t.base - a : a + n > t.base + t.bytes ? a + n - (t.base + t.bytes) : 0;
    if (d < dist) dist = d, best = &t;
  }
  if (!best) return "the kernel was given no tensors";
  const PeSimRange& t = *best;
  std::string idx, shape;
  for (uint32_t i = 0; i < t.ndim; ++i) shape += (i ? " x " : "") + std::to_string(t.shape[i]);
  if (dist > t.bytes)   // farther from every tensor than the nearest one's size: whose pointer it was is unknown
    return fmt("no tensor's element: %llu B %s the nearest tensor, `%s` (%s, %u B elements)",
               (unsigned long long)dist, a < t.base ? "before" : "past the end of", t.name ? t.name : "?",
               shape.c_str(), t.elem);
  const int64_t el = (int64_t(a) - int64_t(t.base)) / int64_t(t.elem ? t.elem : 1);
  if (t.ndim >= 1) {
    int64_t rest = el, inner = 1;
    for (uint32_t i = 1; i < t.ndim; ++i) inner *= int64_t(t.shape[i]);
    std::vector<int64_t> ix;
    for (uint32_t i = 0; i < t.ndim; ++i) {
      const int64_t q = i + 1 < t.ndim ? (rest >= 0 ? rest / inner : -((-rest + inner - 1) / inner)) : rest;
      ix.push_back(q);
      rest -= q * inner;
      if (i + 1 < t.ndim) inner /= int64_t(t.shape[i + 1]);
    }
    for (size_t i = 0; i < ix.size(); ++i) idx += (i ? ", " : "") + std::to_string(ix[i]);
  }
  const bool before = a < t.base;
  return fmt("element [%s] of `%s` (%s, %u B elements): %llu B %s", idx.c_str(), t.name ? t.name : "?",
             shape.c_str(), t.elem, (unsigned long long)dist, before ? "before its start" : "past its end");
}

bool in_segments(uintptr_t a) {
  for (auto& [lo, hi] : E->code)
    if (a >= lo && a < hi) return true;
  return false;
}

int add_segment(struct dl_phdr_info* info, size_t, void* data) {
  auto* v = static_cast<std::vector<std::pair<uintptr_t, uintptr_t>>*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) v->push_back({info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz});
  }
  return 0;
}

// The loaded objects' segments (the stage libraries' constants and globals, the engine's g_pub): memory
// the stage's code may read that is no tensor.
std::vector<std::pair<uintptr_t, uintptr_t>> loaded_segments() {
  std::vector<std::pair<uintptr_t, uintptr_t>> v;
  dl_iterate_phdr(add_segment, &v);
  return v;
}

// ---- reports of the stage's own accesses ------------------------------------------------------------------
// A report about the instruction at `pc` (resolved to its source line by pelib.sim through the stage
// library's line table; the text names it "@@pc@@").
struct AtPc {
  AtPc(void* pc) { E->raw_pc = uintptr_t(pc); }
  ~AtPc() { E->raw_pc = 0; }
};

[[noreturn]] void raw_fatal(const std::string& what, Fiber* f, void* pc) {
  {
    AtPc at(pc);
    misuse(what, f->site, f);
  }
  abort_fiber();
}

[[noreturn]] void spin_hang(Fiber* f, void* pc) {
  {
    AtPc at(pc);
    E->rep.deadlock.push_back(record(
        fmt("hang: the thread loaded memory %llu times since its last scheduling point (%s:%d) without reaching "
            "another — a spin on memory nothing in the kernel can change (a flag nobody sets?) — ",
            (unsigned long long)f->spin, short_file(f->site.file), f->site.line) + where(f, f->site),
        f, f->site, Json().put("wait", "spin")));
  }
  E->aborted = true;
  abort_fiber();
}

void raw_slow(Fiber* f, uintptr_t a, size_t n, bool write, void* pc) {
  if (a - uintptr_t(&f->pub) < sizeof(ThreadPub)) return;   // threadIdx, blockIdx, ...
  Cta* c = f->cta;
  const uintptr_t w = uintptr_t(c->win);
  if (a - w < c->win_size) {   // this CTA's shared memory
    const u32 off = u32(a - w);
    if (!in_window(c, off, u32(n)))
      raw_fatal(fmt("a plain %s of %zu B at shared offset 0x%x is outside CTA %d's shared memory (%u B of dynamic "
                    "shared memory declared at offset 0x%x): a wrong index or too little dynamic shared memory",
                    write ? "store" : "load", n, off - c->dyn_off, c->id, c->dyn_size, c->dyn_off), f, pc);
    if (!write && ++f->spin > E->L.max_spin) spin_hang(f, pc);
    AtPc at(pc);
    generic_access(c, off, u32(n), write, f, f->site);
    return;
  }
  if (count_tensor(a, n, write)) {
    if (!write && ++f->spin > E->L.max_spin) spin_hang(f, pc);
    return;
  }
  if (in_segments(a) && !write) return;
  // a range that starts inside a tensor and runs past its end (a block copy's) is that tensor's overrun,
  // wherever the heap put the tensor beside the shared windows
  bool starts_in_tensor = false;
  for (const PeSimRange& tr : E->tensors) starts_in_tensor |= a - tr.base < tr.bytes;
  // past the shared window (smem_raw[600 KiB], a pointer with a bad offset), unless it is nearer the end of a
  // tensor it could overrun (by less than the tensor's own size): where the heap put the tensors and the
  // windows decides no more than that, so a shared index far past the window is reported as one
  uint64_t to_tensor = ~0ull;
  for (const PeSimRange& tr : E->tensors)
    if (a >= tr.base + tr.bytes && a - (tr.base + tr.bytes) <= tr.bytes)
      to_tensor = std::min<uint64_t>(to_tensor, a - (tr.base + tr.bytes));
  if (!starts_in_tensor && a >= w && a - w < c->win_size + (16u << 20) && a - w - c->win_size < to_tensor)
    raw_fatal(fmt("a plain %s of %zu B at shared offset 0x%llx (smem_raw + %llu) is outside CTA %d's shared memory "
                  "(%u B of dynamic shared memory declared; the simulator's window ends at %u B)",
                  write ? "store" : "load", n, (unsigned long long)(a - w - c->dyn_off),
                  (unsigned long long)(a - w - c->dyn_off), c->id, c->dyn_size, PE_SIM_SMEM_CAPACITY), f, pc);
  if (in_segments(a)) return;
  raw_fatal(fmt("a plain global %s of %zu B at %p is outside every tensor the kernel was given (out-of-bounds "
                "global access): %s", write ? "store" : "load", n, reinterpret_cast<void*>(a), oob_where(a, n).c_str()),
            f, pc);
}

inline void raw_access(uintptr_t a, size_t n, bool write, void* pc) {
  Engine* e = E;
  if (!e) return;
  Fiber* f = e->cur;
  if (!f || a - uintptr_t(f->stack) < f->stack_size) return;   // outside a simulated thread, or its stack
  raw_slow(f, a, n, write, pc);
}

// ---- faults: a report, and the simulated thread abandoned ---------------------------------------------------
// What a fault in a simulated thread is: a bad access, an arithmetic trap (integer division by zero), an
// illegal instruction (__builtin_trap), a breakpoint trap, SIGABRT (raised by the C++ runtime's abort, which
// the stage's own calls never reach: see the host calls below).
constexpr int FAULTS[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP};
constexpr int NFAULTS = int(sizeof FAULTS / sizeof FAULTS[0]);
struct sigaction old_action[NFAULTS];
stack_t old_alt;
alignas(16) uint8_t alt_stack[1 << 16];

bool in_stage_text(uintptr_t pc) {
  for (auto& [lo, hi] : E->stage_text)
    if (pc >= lo && pc < hi) return true;
  return false;
}

void on_fault(int sig, siginfo_t* si, void* uctx) {
  Fiber* f = E ? E->cur : nullptr;
  if (!f || !E->in_run) {   // not in a simulated thread: the previous handler takes it when it faults again
    for (int i = 0; i < NFAULTS; ++i) sigaction(FAULTS[i], &old_action[i], nullptr);
    if (sig == SIGABRT || sig == SIGTRAP) raise(sig);   // raised, not faulted: nothing repeats it
    return;
  }
  void* pc = nullptr;
#if defined(__x86_64__)
  pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(uctx)->uc_mcontext.pc);
#endif
  const uintptr_t a = uintptr_t(si->si_addr), st = uintptr_t(f->stack);
  std::string what;
  if (a < st && a + 4096 >= st)
    what = fmt("the simulated thread's stack overflowed its %zu B (PELIB_SIM_STACK raises it; deep recursion or "
               "large local arrays in the stage?)", f->stack_size);
  else if (sig == SIGFPE)
    what = "an arithmetic trap (integer division by zero?) in the simulated thread (stopped; the host process goes on)";
  else if (sig == SIGILL)
    what = "an illegal instruction (a trap) in the simulated thread (stopped; the host process goes on)";
  else if (sig == SIGABRT)
    what = "SIGABRT in the simulated thread (an abort of the C++ runtime: an uncaught exception, a failed check "
           "of the standard library?; stopped; the host process goes on)";
  else if (sig == SIGTRAP)
    what = "a breakpoint trap (SIGTRAP) in the simulated thread (stopped; the host process goes on)";
  else
    what = fmt("%s at %p in the simulated thread: an access the simulator's checks did not see (the thread is "
               "stopped; the host process goes on)", sig == SIGBUS ? "a bus error" : "a memory fault", si->si_addr);
  {
    // an instruction of the stage names its line; one in a library (raise, memcpy) would name the library's
    AtPc at(in_stage_text(uintptr_t(pc)) ? pc : nullptr);
    misuse(what, f->site, f);
  }
  unready(f);
  f->state = FS::Done;
  E->cur = nullptr;
  fiber_switch(&f->ctx, &E->sched);   // never resumed
}

// ---- the watchdog: a thread that runs on with no scheduling point and no load the engine sees ---------------
// A loop on registers or on the thread's own stack (`volatile int flag = 0; while (flag == 0) {}`) never calls
// the engine, so neither the step limit nor the spin count can end it. A timer on this host thread's CPU time
// (timer_create(2), CLOCK_THREAD_CPUTIME_ID, delivered to this thread: SIGEV_THREAD_ID) ticks; a thread that
// ran the whole limit (PeSimLaunch::watchdog_us, PELIB_SIM_WATCHDOG_S) without a scheduling point or a counted
// load is a hang, reported at the instruction it was stopped at. It is stopped only while that instruction is
// the stage's own code (no lock of the C library or the engine is held there); otherwise the next tick looks
// again.
#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif
constexpr int WATCHDOG_SIG = SIGVTALRM;
struct sigaction old_tick;
timer_t wd_timer{};
bool wd_armed = false;
u64 wd_tick_us = 0, wd_stuck_us = 0, wd_beats = 0, wd_spin = 0;
const Fiber* wd_fiber = nullptr;

void on_tick(int, siginfo_t*, void* uctx) {
  Engine* e = E;
  if (!e || !e->in_run) return;
  Fiber* f = e->cur;
  if (!f || f != wd_fiber || e->beats != wd_beats || f->spin != wd_spin) {
    wd_fiber = f, wd_beats = e->beats, wd_spin = f ? f->spin : 0, wd_stuck_us = 0;
    return;
  }
  wd_stuck_us += wd_tick_us;
  if (wd_stuck_us < e->L.watchdog_us) return;
  void* pc = nullptr;
#if defined(__x86_64__)
  pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(uctx)->uc_mcontext.pc);
#endif
  if (!in_stage_text(uintptr_t(pc))) return;
  {
    AtPc at(pc);
    e->rep.deadlock.push_back(record(
        fmt("hang: the thread ran %.1f s of CPU time %s without reaching a scheduling point or loading memory "
            "the simulator tracks — a loop on registers or on its own stack that never ends? (the watchdog, "
            "PELIB_SIM_WATCHDOG_S=%g, stopped it) — ",
            double(wd_stuck_us) * 1e-6,
            (std::strstr(f->site.file ? f->site.file : "", "sim/runtime/")
                 ? std::string("since it started")
                 : fmt("since its last scheduling point (%s:%d)", short_file(f->site.file), f->site.line)).c_str(),
            double(e->L.watchdog_us) * 1e-6) +
            where(f, f->site),
        f, f->site, Json().put("wait", "watchdog")));
  }
  e->aborted = true;
  wd_fiber = nullptr;
  unready(f);
  f->state = FS::Done;
  e->cur = nullptr;
  fiber_switch(&f->ctx, &e->sched);   // never resumed
}

int add_text(struct dl_phdr_info* info, size_t, void*) {
  bool mine = false;   // an object that holds a CTA slot's entry point: a stage library
  for (int i = 0; i < info->dlpi_phnum && !mine; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    for (const Slot& s : E->slots) mine |= uintptr_t(s.entry) >= lo && uintptr_t(s.entry) < hi;
  }
  if (!mine) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      E->stage_text.push_back({info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz});
  }
  return 0;
}

void watchdog_on() {
  E->stage_text.clear();
  dl_iterate_phdr(add_text, nullptr);
  wd_fiber = nullptr;
  wd_stuck_us = 0;
  if (!E->L.watchdog_us) return;
  wd_tick_us = std::clamp<u64>(E->L.watchdog_us / 4, 10'000, 250'000);
  struct sigaction sa{};
  sa.sa_sigaction = on_tick;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(WATCHDOG_SIG, &sa, &old_tick);
  struct sigevent sev{};
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = WATCHDOG_SIG;
  sev.sigev_notify_thread_id = int(syscall(SYS_gettid));
  if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &wd_timer) != 0) {
    sigaction(WATCHDOG_SIG, &old_tick, nullptr);
    return;
  }
  struct itimerspec its{};
  its.it_interval.tv_sec = time_t(wd_tick_us / 1'000'000);
  its.it_interval.tv_nsec = long(wd_tick_us % 1'000'000) * 1000;
  its.it_value = its.it_interval;
  timer_settime(wd_timer, 0, &its, nullptr);
  wd_armed = true;
}

void watchdog_off() {
  if (!wd_armed) return;
  timer_delete(wd_timer);   // no tick is generated after this returns
  sigaction(WATCHDOG_SIG, &old_tick, nullptr);
  wd_armed = false;
}

void faults_on() {
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, &old_alt);
  struct sigaction sa{};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NFAULTS; ++i) sigaction(FAULTS[i], &sa, &old_action[i]);
  E->in_run = true;
  watchdog_on();
}

void faults_off() {
  watchdog_off();
  E->in_run = false;
  for (int i = 0; i < NFAULTS; ++i) sigaction(FAULTS[i], &old_action[i], nullptr);
  sigaltstack(&old_alt, nullptr);
}

// ---- host calls that end a process: a report, and the simulated thread abandoned --------------------------
// pelib.sim.build links a stage library with --wrap for each (GNU ld manual, --wrap=symbol: an undefined
// reference to `symbol` in the objects linked resolves to `__wrap_symbol`), so the stage's own calls come here;
// outside a simulated thread they go on to the C library's.
void host_call(const std::string& what, void* pc, Site at = Site{nullptr, 0}) {
  Engine* e = E;
  Fiber* f = e ? e->cur : nullptr;
  if (!f || !e->in_run) return;
  const std::string text = what + " in a simulated thread: a call that would end the host process (the thread is "
                                  "stopped, the run ends, the host process goes on)";
  if (at.file) {
    misuse(text, at, f);
  } else {
    AtPc here(pc);
    misuse(text, f->site, f);
  }
  abort_fiber();
}

}  // namespace

// ---- the twins of common/memory.cuh ----------------------------------------------------------------------
namespace {
void check_gmem(const void* p, size_t n, bool write, Site s) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (count_tensor(a, n, write)) return;
  misuse_fatal(fmt("%s of %zu B at %p is outside every tensor the kernel was given (out-of-bounds global access, "
                   "undefined: PTX ISA, State Spaces, global): %s",
                   write ? "global store" : "global load", n, p, oob_where(a, n).c_str()), s);
}
}  // namespace

void gmem_load(const void* p, void* dst, size_t n, Site s) {
  check_gmem(p, n, false, s);
  if (++E->cur->spin > E->L.max_spin) spin_hang(E->cur, nullptr);
  std::memcpy(dst, p, n);
}

void gmem_store(void* p, const void* src, size_t n, Site s) {
  check_gmem(p, n, true, s);
  std::memcpy(p, src, n);
}

void smem_load(unsigned addr, void* dst, size_t n, Site s) {
  SAddr a = resolve(addr, u32(n), s, "ld.shared");
  if (a.off % std::min<size_t>(n, 16))
    misuse_fatal(fmt("ld.shared of %zu B at unaligned 0x%x (PTX ISA 9.7.9.8: naturally aligned)", n, addr), s);
  if (++E->cur->spin > E->L.max_spin) spin_hang(E->cur, nullptr);
  generic_access(a.cta, a.off, u32(n), false, E->cur, s);
  std::memcpy(dst, a.cta->win + a.off, n);
}

void smem_store(unsigned addr, const void* src, size_t n, Site s) {
  SAddr a = resolve(addr, u32(n), s, "st.shared");
  if (a.off % std::min<size_t>(n, 16))
    misuse_fatal(fmt("st.shared of %zu B at unaligned 0x%x (PTX ISA 9.7.9.10: naturally aligned)", n, addr), s);
  generic_access(a.cta, a.off, u32(n), true, E->cur, s);
  std::memcpy(a.cta->win + a.off, src, n);
}

uint64_t clock64(Site) { return ++E->cur->cta->clock; }
uint64_t globaltimer(Site) { return ++E->cur->cta->clock; }

void trap(const char* what, Site s) { misuse_fatal(fmt("the kernel trapped (%s)", what), s); }

}  // namespace pe_sim

// ---- the instrumentation's entry points (GCC / Clang -fsanitize=kernel-address, outline calls) -------------
extern "C" {
#define PE_SIM_ACCESS_HOOKS(N)                                                                                   \
  void __asan_load##N##_noabort(uintptr_t a) { pe_sim::raw_access(a, N, false, __builtin_return_address(0)); } \
  void __asan_store##N##_noabort(uintptr_t a) { pe_sim::raw_access(a, N, true, __builtin_return_address(0)); }
PE_SIM_ACCESS_HOOKS(1)
PE_SIM_ACCESS_HOOKS(2)
PE_SIM_ACCESS_HOOKS(4)
PE_SIM_ACCESS_HOOKS(8)
PE_SIM_ACCESS_HOOKS(16)
#undef PE_SIM_ACCESS_HOOKS
void __asan_loadN_noabort(uintptr_t a, size_t n) { pe_sim::raw_access(a, n, false, __builtin_return_address(0)); }
void __asan_storeN_noabort(uintptr_t a, size_t n) { pe_sim::raw_access(a, n, true, __builtin_return_address(0)); }
void __asan_handle_no_return() {}

#define PE_SIM_PC __builtin_return_address(0)
[[noreturn]] void __wrap_abort() {
  pe_sim::host_call("abort()", PE_SIM_PC);
  abort();
}
[[noreturn]] void __wrap_exit(int st) {
  pe_sim::host_call(pe_sim::fmt("exit(%d)", st), PE_SIM_PC);
  exit(st);
}
[[noreturn]] void __wrap__exit(int st) {
  pe_sim::host_call(pe_sim::fmt("_exit(%d)", st), PE_SIM_PC);
  _exit(st);
}
[[noreturn]] void __wrap__Exit(int st) {
  pe_sim::host_call(pe_sim::fmt("_Exit(%d)", st), PE_SIM_PC);
  _Exit(st);
}
[[noreturn]] void __wrap_quick_exit(int st) {
  pe_sim::host_call(pe_sim::fmt("quick_exit(%d)", st), PE_SIM_PC);
  quick_exit(st);
}
[[noreturn]] void __wrap_pthread_exit(void* r) {
  pe_sim::host_call("pthread_exit()", PE_SIM_PC);
  pthread_exit(r);
}
// <assert.h>'s failure (glibc): the assertion's own file and line
[[noreturn]] void __wrap___assert_fail(const char* expr, const char* file, unsigned line, const char* fn) {
  pe_sim::host_call(pe_sim::fmt("assertion `%s` failed (in %s)", expr ? expr : "?", fn ? fn : "?"), PE_SIM_PC,
                    pe_sim::Site{file, int(line)});
  __assert_fail(expr, file, line, fn);
}
int __wrap_raise(int sig) {
  if (sig != 0) pe_sim::host_call(pe_sim::fmt("raise(%d: %s)", sig, strsignal(sig)), PE_SIM_PC);
  return raise(sig);
}
int __wrap_kill(pid_t pid, int sig) {
  if (sig != 0 && (pid == 0 || pid == -1 || pid == getpid()))
    pe_sim::host_call(pe_sim::fmt("kill(%d, %d: %s)", int(pid), sig, strsignal(sig)), PE_SIM_PC);
  return kill(pid, sig);
}
// The C library's block copies: their own loads and stores are not instrumented, so the stage's calls are
// checked here as one access of n bytes at each end (a global range past its tensor, a shared one past the
// CTA's window, the happens-before shadows) before the copy runs. memcpy, memmove and memset are the
// C library's (ISO C 7.24.2.1, 7.24.2.2, 7.24.6.1), which the engine (not linked with --wrap) calls as they are.
void* __wrap_memcpy(void* d, const void* s, size_t n) {
  if (n) {
    pe_sim::raw_access(uintptr_t(s), n, false, PE_SIM_PC);
    pe_sim::raw_access(uintptr_t(d), n, true, PE_SIM_PC);
  }
  return memcpy(d, s, n);
}
void* __wrap_memmove(void* d, const void* s, size_t n) {
  if (n) {
    pe_sim::raw_access(uintptr_t(s), n, false, PE_SIM_PC);
    pe_sim::raw_access(uintptr_t(d), n, true, PE_SIM_PC);
  }
  return memmove(d, s, n);
}
void* __wrap_memset(void* d, int c, size_t n) {
  if (n) pe_sim::raw_access(uintptr_t(d), n, true, PE_SIM_PC);
  return memset(d, c, n);
}
#undef PE_SIM_PC
}
