// What pelib.sim's generated translation unit adds after the stage file: the kernel's entry point with
// its arguments unpacked from an array of pointers (the same binding as a CUDA launch's kernelParams),
// and this library copy's shared-memory window (its thread-local block; runtime/api.h).
#pragma once
#undef alignas
#include <link.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace pe_sim_entry {

// Not instrumented (the arguments come from pelib.sim's buffers, which are no tensor of the kernel's).
template <class... P, size_t... I>
__attribute__((no_sanitize_address)) inline void call(void (*f)(P...), void** a, std::index_sequence<I...>) {
  f(*static_cast<std::decay_t<P>*>(a[I])...);
}
template <class... P>
inline void call(void (*f)(P...), void** a) {
  call(f, a, std::index_sequence_for<P...>{});
}

struct Find {
  const void* self;
  void* base;
  uint64_t size;
};

inline int visit(struct dl_phdr_info* info, size_t, void* data) {
  Find* q = static_cast<Find*>(data);
  const uintptr_t self = reinterpret_cast<uintptr_t>(q->self);
  bool mine = false;
  uint64_t tls = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && self >= info->dlpi_addr + ph.p_vaddr &&
        self < info->dlpi_addr + ph.p_vaddr + ph.p_memsz)
      mine = true;
    if (ph.p_type == PT_TLS) tls = ph.p_memsz;
  }
  if (!mine) return 0;
  q->base = info->dlpi_tls_data;
  q->size = tls;
  return 1;
}

}  // namespace pe_sim_entry

// This copy's shared window: its thread-local block (smem_raw and any static __shared__ variable).
extern "C" __attribute__((visibility("default"))) void pe_sim_window(void** base, uint64_t* size, uint64_t* dyn_off) {
  volatile unsigned char touch = smem_raw[0];   // allocate this thread's block of this module
  (void)touch;
  pe_sim_entry::Find q{reinterpret_cast<const void*>(&pe_sim_window), nullptr, 0};
  dl_iterate_phdr(pe_sim_entry::visit, &q);
  *base = q.base;
  *size = q.size;
  *dyn_off = uint64_t(reinterpret_cast<uintptr_t>(&smem_raw[0]) - reinterpret_cast<uintptr_t>(q.base));
}

#define PE_SIM_ENTRY(kernel)                                                              \
  extern "C" __attribute__((visibility("default"))) void pe_sim_kernel_entry(void** args) { \
    pe_sim_entry::call(&kernel, args);                                                    \
  }
