// mbarrier (twin: common/mbarrier.cuh; PTX ISA 9.7.13.15): each barrier's expected count, pending
// arrivals, tx-count and completed phases, kept beside the CTA's shared memory by offset.
#include "runtime/state.h"

namespace pe_sim {
namespace {

// ---- mbarrier core -----------------------------------------------------------------------------------
Barrier* find_bar(Cta* c, u32 off) {
  auto it = c->bars.find(off);
  return it == c->bars.end() ? nullptr : &it->second;
}

std::string bar_state(const Barrier& b) {
  return fmt("phase parity %llu (completed phases %llu), pending arrivals %lld of %u, tx-count %lld B",
             (unsigned long long)(b.phase & 1), (unsigned long long)b.phase, (long long)b.pending, b.count,
             (long long)b.tx);
}

// A phase completes when its pending arrivals and its tx-count are zero (PTX ISA 9.7.13.15.4): it releases
// what its arrivals knew, and that the phase (with every TMA load counted in it) is complete.
void bar_check_complete(Barrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    b.phase++;
    b.pending = b.count;
    b.tx = 0;
    join(b.done, b.pending_vc);
    b.pending_vc.clear();
    set_max(b.done, b.comp, u32(b.phase));
    wake_all(b.waiters);
  }
}

// An arrival (count 1) and/or transaction bytes on CTA c's barrier at offset off, from fiber f or an op; an
// arrival releases `rel` (the arriving thread's clock, or a commit's).
void bar_signal(Cta* c, u32 off, int arrivals, int64_t tx_add, int64_t tx_done, Site s, Fiber* f, const char* what,
                const Clock* rel) {
  if (c->exited) {
    misuse(fmt("%s on the mbarrier at 0x%x of CTA %d, which has already exited (a peer arrives after its "
               "partner left, in shared memory that is gone: CUDA C++ Programming Guide, distributed shared memory; "
               "keep both CTAs alive with a cluster barrier before exit)", what, off, c->id), s, f);
    return;
  }
  Barrier* b = find_bar(c, off);
  if (!b || !b->init) {
    misuse(fmt("%s on shared offset 0x%x of CTA %d, which holds no initialized mbarrier (PTX ISA 9.7.13.15.9: "
               "mbarrier.init first, then fence.mbarrier_init and a CTA or cluster barrier before anyone signals "
               "it)", what, off, c->id), s, f);
    return;
  }
  Cta* from = f ? f->cta : (E->cur ? E->cur->cta : nullptr);
  if (from && from != c) b->remote_gen = c->cluster->bar_gen + 1;
  b->tx += tx_add;
  b->tx -= tx_done;
  if (arrivals) {
    if (b->pending <= 0) {
      misuse(fmt("%s on the mbarrier at 0x%x of CTA %d: more arrivals than its count %u in one phase (%s; PTX "
                 "ISA 9.7.13.15.1: the pending count must not go below zero)", what, off, c->id, b->count,
                 bar_state(*b).c_str()), s, f);
      return;
    }
    b->pending -= arrivals;
    if (rel) join(b->pending_vc, *rel);
  }
  if (b->pending == 0 && b->tx < 0) {
    misuse(fmt("%s on the mbarrier at 0x%x of CTA %d: the tx-count fell below zero with no arrival left "
               "(more bytes completed than expect_tx announced; %s; PTX ISA 9.7.13.15.1: the tx-count range is "
               "-(2^20 - 1) .. 2^20 - 1 and the phase completes on pending arrivals and tx-count zero)", what, off,
               c->id, bar_state(*b).c_str()), s, f);
    return;
  }
  bar_check_complete(*b);
}

// The phase an arrival counts in now (-1: no barrier there).
int phase_now(Cta* c, u32 off) {
  Barrier* b = find_bar(c, off);
  return b ? int(b->phase) : -1;
}

// The stage's argument text "&full[s]" -> "full" (also "full + s", "bar", "&s.full[i]"); any other
// expression as written.
std::string bar_name_of(const char* expr) {
  std::string s;
  for (const char* p = expr; *p; ++p)
    if (*p != ' ') s += *p;
  size_t i = 0;
  while (i < s.size() && (s[i] == '&' || s[i] == '(')) ++i;
  size_t j = i;
  while (j < s.size() && (std::isalnum((unsigned char)s[j]) || s[j] == '_' || s[j] == '.' ||
                          (s[j] == '-' && j + 1 < s.size() && s[j + 1] == '>') || (s[j] == '>' && j && s[j - 1] == '-')))
    ++j;
  std::string n = s.substr(i, j - i);
  const bool simple = !n.empty() && (j == s.size() || s[j] == '[' || s[j] == '+' || s[j] == ')');
  return simple ? n : s;
}

}  // namespace

void mbar_init(unsigned addr, unsigned count, const char* expr, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.init");
  if (a.off % 8) misuse_fatal(fmt("mbarrier.init at 0x%x: an mbarrier is a 64-bit object, 8-byte aligned (PTX ISA 9.7.13.15.1)", addr), s);
  if (count == 0 || count >= (1u << 20))
    misuse_fatal(fmt("mbarrier.init with count %u: the expected arrival count is 1 .. 2^20 - 1 (PTX ISA "
                     "9.7.13.15.9)", count), s);
  Barrier& b = a.cta->bars[a.off];
  if (b.init && !b.waiters.empty())
    misuse_fatal(fmt("mbarrier.init at 0x%x while %zu threads wait on it (PTX ISA 9.7.13.15.9: init on an object in use "
                     "is undefined)", addr, b.waiters.size()), s);
  b = Barrier{};
  b.init = true;
  b.count = count;
  b.pending = count;
  b.comp = new_comp(a.cta->cluster);
  a.cta->bar_name[a.off] = name_id(bar_name_of(expr ? expr : "mbarrier"));
  point(s);
}

void mbar_inval(unsigned addr, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.inval");
  a.cta->bars.erase(a.off);
  point(s);
}

void mbar_arrive(unsigned addr, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.arrive");
  ev_barrier(event(EV_ARRIVE, E->cur, s), a.cta, a.off, phase_now(a.cta, a.off));
  bar_signal(a.cta, a.off, 1, 0, 0, s, E->cur, "mbarrier.arrive", &released(E->cur));
  tick(E->cur);
  point(s);
}

void mbar_expect_tx(unsigned addr, unsigned bytes, bool arrive, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.expect_tx");
  PeSimEvent& e = event(EV_EXPECT_TX, E->cur, s);
  ev_barrier(e, a.cta, a.off, phase_now(a.cta, a.off));
  e.bytes = int32_t(bytes);
  bar_signal(a.cta, a.off, arrive ? 1 : 0, bytes, 0, s, E->cur,
             arrive ? "mbarrier.arrive.expect_tx" : "mbarrier.expect_tx", &released(E->cur));
  if (arrive) tick(E->cur);
  point(s);
}

bool mbar_try_wait(unsigned addr, unsigned parity, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.try_wait");
  Barrier* b = find_bar(a.cta, a.off);
  if (!b || !b->init)
    misuse_fatal(fmt("mbarrier.try_wait on 0x%x, which holds no initialized mbarrier (PTX ISA 9.7.13.15.9: init "
                     "before any other mbarrier operation)", addr), s);
  point(s);
  b = find_bar(a.cta, a.off);
  if (b && (b->phase & 1) != (parity & 1)) {
    b->observed = std::max(b->observed, b->phase);
    join(E->cur->vc, b->done);
    return true;
  }
  // try_wait may suspend the thread for a while before it returns false: here, until the phase moves
  const u64 ph = b ? b->phase : 0;
  while (b && b->phase == ph) {
    b->waiters.push_back(E->cur);
    WaitInfo w;
    w.kind = W_MBAR_TRY;
    w.addr = addr;
    w.parity = parity;
    w.site = s;
    block(w);
    b = find_bar(a.cta, a.off);
  }
  if (b && (b->phase & 1) != (parity & 1)) {
    join(E->cur->vc, b->done);
    return true;
  }
  return false;
}

void mbar_wait(unsigned addr, unsigned parity, unsigned tag, Site s) {
  Fiber* f = E->cur;
  SAddr a = resolve(addr, 8, s, "mbarrier wait");
  Barrier* b = find_bar(a.cta, a.off);
  if (!b || !b->init)
    misuse_fatal(fmt("mbarrier wait (tag %u) on 0x%x, which holds no initialized mbarrier (a wait before "
                     "mbarrier.init is visible: fence.mbarrier_init and a barrier after init; PTX ISA 9.7.13.15.9)", tag, addr), s);
  {   // the phase it waits for: the current one if its parity is the one named, else the last completed
    PeSimEvent& e = event(EV_WAIT_BEGIN, f, s);
    ev_barrier(e, a.cta, a.off, (b->phase & 1) == (parity & 1) ? int(b->phase) : int(b->phase) - 1);
    b->waited = true;
    e.parity = int32_t(parity & 1);
    e.tag = int32_t(tag);
    if (!f->marks.empty()) f->marks.back().waited = true;
  }
  point(s);
  for (;;) {
    b = find_bar(a.cta, a.off);
    if (!b)
      misuse_fatal(fmt("mbarrier wait (tag %u): the barrier at 0x%x was invalidated (PTX ISA 9.7.13.15.10)", tag, addr),
                   s);
    if ((b->phase & 1) != (parity & 1)) {
      b->observed = std::max(b->observed, b->phase);
      join(f->vc, b->done);   // the observed completion and everything it released (PTX ISA 9.7.13.15.16)
      break;
    }
    b->waiters.push_back(f);
    WaitInfo w;
    w.kind = W_MBAR;
    w.addr = addr;
    w.parity = parity & 1;
    w.tag = tag;
    w.site = s;
    block(w);
  }
  PeSimEvent& e = event(EV_WAIT_END, f, s);
  ev_barrier(e, a.cta, a.off, int(b->phase) - 1);   // the completed phase it observed
  e.parity = int32_t(parity & 1);
  e.tag = int32_t(tag);
}

}  // namespace pe_sim
