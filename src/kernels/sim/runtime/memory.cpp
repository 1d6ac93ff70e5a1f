// Plain memory (twin: common/memory.cuh, common/clock.cuh; PTX ISA 9.7.9.8-10 ld / st): global accesses
// against the tensors the launch was given, shared ones against the CTA's window and the asynchronous
// operations still reading it; the simulated clocks; trap.
#include "runtime/state.h"

namespace pe_sim {
namespace {
void check_gmem(const void* p, size_t n, bool write, Site s) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (auto& r : E->ranges)
    if (a >= r.first && a + n <= r.second) return;
  misuse_fatal(fmt("%s of %zu B at %p is outside every tensor the kernel was given (out-of-bounds global access)",
                   write ? "global store" : "global load", n, p), s);
}
}  // namespace

void gmem_load(const void* p, void* dst, size_t n, Site s) {
  check_gmem(p, n, false, s);
  std::memcpy(dst, p, n);
}

void gmem_store(void* p, const void* src, size_t n, Site s) {
  check_gmem(p, n, true, s);
  std::memcpy(p, src, n);
}

void smem_load(unsigned addr, void* dst, size_t n, Site s) {
  SAddr a = resolve(addr, u32(n), s, "ld.shared");
  if (a.off % std::min<size_t>(n, 16)) misuse_fatal(fmt("ld.shared of %zu B at unaligned 0x%x", n, addr), s);
  std::memcpy(dst, a.cta->win + a.off, n);
}

void smem_store(unsigned addr, const void* src, size_t n, Site s) {
  SAddr a = resolve(addr, u32(n), s, "st.shared");
  if (a.off % std::min<size_t>(n, 16)) misuse_fatal(fmt("st.shared of %zu B at unaligned 0x%x", n, addr), s);
  if (const Range* r = overlap(a.cta->reads, a.off, a.off + u32(n)))
    hazard(fmt("st.shared to 0x%x of CTA %d while %s issued at %s:%d still reads [0x%x, 0x%x) (staging buffer "
               "reused before the asynchronous read finished)", a.off, a.cta->id, r->what, short_file(r->site.file),
               r->site.line, r->lo, r->hi), s, E->cur);
  std::memcpy(a.cta->win + a.off, src, n);
  const u64 q = ++E->wseq;
  for (u32 k = a.off / 16; k < (a.off + u32(n) + 15) / 16 && k < a.cta->chunk_writer.size(); ++k) {
    a.cta->chunk_writer[k] = u32(E->cur->id) + 1;
    a.cta->chunk_seq[k] = q;
  }
}

uint64_t clock64(Site) { return ++E->cur->cta->clock; }
uint64_t globaltimer(Site) { return ++E->cur->cta->clock; }

void trap(const char* what, Site s) { misuse_fatal(fmt("the kernel trapped (%s)", what), s); }

}  // namespace pe_sim
