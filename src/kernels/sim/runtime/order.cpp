// Happens-before, not timing. Every thread carries a vector clock (state.h Clock) over its cluster's
// components; every asynchronous operation gets, at its issue, a component and an epoch, and its completion
// reaches a thread only through the mechanism PTX defines for it:
//   TMA load                 the phase of its mbarrier its complete_tx counts in (PTX ISA 9.7.9.25; 9.7.13.15
//                            mbarrier: a wait that observes the phase completion)
//   tcgen05.mma / cp         tcgen05.commit -> an mbarrier arrive once all earlier tcgen05 ops of the thread
//                            are complete (9.7.16.11.1), observed by a wait on that phase
//   wgmma.mma_async          wgmma.wait_group N: all but the newest N groups of the thread (9.7.15.6.3)
//   TMA store (source read)  cp.async.bulk.wait_group(.read) N (9.7.9.26)
//   tcgen05.ld / st          tcgen05.wait::ld / wait::st of the issuing warp (9.7.16.8.5; 9.7.16.6.2.1.2)
// and between threads through mbarrier arrive -> wait, bar.sync / bar.arrive, barrier.cluster, __syncwarp.
// Shared memory and TMEM keep, per 16 B chunk / per (lane quarter, column), the last asynchronous write and
// the asynchronous reads since; every access checks that what it conflicts with is known complete to the
// accessing (or issuing) thread, whether or not the simulated operation has completed yet: a hazard on every
// seed. Generic-proxy writes (st.shared and raw pointer stores alike) reach an async-proxy reader only after a
// fence.proxy.async of their writer that the issuing thread knows of (9.7.12.4, proxy fences).
#include "runtime/state.h"

namespace pe_sim {
namespace {

u32 new_comp(Cluster* cl) { return cl->ncomp++; }

u32 at(const Clock& c, u32 k) { return k < c.size() ? c[k] : 0; }

void set_max(Clock& c, u32 k, u32 v) {
  if (!k) return;
  if (c.size() <= k) c.resize(k + 1, 0);
  if (c[k] < v) c[k] = v;
}

void join(Clock& a, const Clock& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (size_t i = 0; i < b.size(); ++i)
    if (a[i] < b[i]) a[i] = b[i];
}

bool knows(const Clock& c, const Access& a) { return a.epoch == 0 || at(c, a.comp) >= a.epoch; }

u32 op_info(const char* what, Site s, Fiber* f, u64 id) {
  if (E->ops.size() <= id) E->ops.resize(id + 1, Engine::OpInfo{"", Site{"", 0}, -1});
  E->ops[id] = Engine::OpInfo{what, s, f ? f->id : -1};
  return u32(id);
}

// An operation the engine completes at its issue but PTX does not (tcgen05.ld / st: their data moves at the
// gather, their completion is observed only at tcgen05.wait): an id for its reports, no queue entry.
u32 sync_op(const char* what, Site s, Fiber* f) { return op_info(what, s, f, ++E->op_seq); }

std::string op_text(const Access& a) {
  const Engine::OpInfo& o = E->ops[a.op < E->ops.size() ? a.op : 0];
  std::string who;
  if (o.fiber >= 0) {
    const Fiber* f = E->fibers_all[size_t(o.fiber)];
    who = fmt(" by CTA %d warp %d lane %d", f->cta->id, f->warp, f->lane);
  }
  return fmt("%s issued at %s:%d%s", o.what, short_file(o.site.file), o.site.line, who.c_str());
}

// A hint when a thread saw the phase just before the one a TMA load counts in (the load was issued after that
// phase completed: an expect_tx short of its loads lets a phase complete without them).
std::string short_by_one(const Clock& vc, const Access& a) {
  if (a.kind != AK_TMA_LOAD || a.epoch < 2 || at(vc, a.comp) != a.epoch - 1) return "";
  return fmt("; this thread saw phase %u complete, and the load was issued after that: an expect_tx short of the "
             "bytes its loads deliver lets a phase complete without them", a.epoch - 2);
}

// What a thread needs to know before it may touch what `a` did, in the words of a report.
const char* how_known(const Access& a) {
  switch (a.kind) {
    case AK_TMA_LOAD: return "a wait that observes the phase of its mbarrier its bytes complete";
    case AK_TMA_STORE: return "cp.async.bulk.wait_group.read of its group by the issuing thread";
    case AK_WGMMA: return "wgmma.wait_group covering it";
    case AK_MMA:
    case AK_CP: return "a wait on the mbarrier phase a later tcgen05.commit of its thread arrives on";
    case AK_LD: return "tcgen05.wait::ld of its warp";
    case AK_ST: return "tcgen05.wait::st of its warp";
    default: return "its completion";
  }
}

// A hazard, once per (source line, kind) (the report counts the others).
void race(const std::string& kind, const std::string& text, Site s, Fiber* f, const Json& extra = Json()) {
  const std::string key = fmt("%s:%d:%zx:", s.file ? s.file : "", s.line, size_t(E->raw_pc)) + kind;
  auto it = E->hazard_seen.find(key);
  if (it != E->hazard_seen.end()) {
    ++E->rep.hazards_total;
    return;
  }
  E->hazard_seen[key] = 1;
  add_record(E->rep.hazards, E->rep.hazards_total, record(text + " — " + where(f, s), f, s, extra));
}

void add_read(Access* r, size_t n, const Access& a) {
  for (size_t i = 0; i < n; ++i)
    if (r[i].epoch == 0 || r[i].comp == a.comp) {
      r[i] = a;
      return;
    }
  for (size_t i = 0; i + 1 < n; ++i) r[i] = r[i + 1];   // the oldest goes
  r[n - 1] = a;
}

// ---- shared memory ------------------------------------------------------------------------------------
// An asynchronous write of [lo, hi) of c (a TMA load landing there) issued by `by`.
void async_write(Cta* c, u32 lo, u32 hi, const Access& a, Fiber* by, Site s) {
  for (u32 k = lo / 16; k < (hi + 15) / 16 && k < c->sh.size(); ++k) {
    SChunk& ch = c->sh[k];
    if (!knows(by->vc, ch.w) && ch.w.op != a.op)
      race("waw", fmt("%s into [0x%x, 0x%x) of CTA %d while %s into the same bytes is not known complete to this "
                      "thread (needs %s)", E->ops[a.op].what, lo, hi, c->id, op_text(ch.w).c_str(), how_known(ch.w)),
           s, by);
    for (const Access& r : ch.r)
      if (!knows(by->vc, r))
        race("war", fmt("%s into [0x%x, 0x%x) of CTA %d while %s still reads them: the slot is refilled before its "
                        "reader is known done (needs %s)", E->ops[a.op].what, lo, hi, c->id, op_text(r).c_str(),
                        how_known(r)), s, by);
    ch.w = a;
    for (Access& r : ch.r) r = Access{};
  }
}

// An asynchronous read of [lo, hi) of c (an MMA operand, a TMA store or tcgen05.cp source) issued by `by`.
void async_read(Cta* c, u32 lo, u32 hi, const Access& a, Fiber* by, Site s) {
  for (u32 k = lo / 16; k < (hi + 15) / 16 && k < c->sh.size(); ++k) {
    SChunk& ch = c->sh[k];
    if (!knows(by->vc, ch.w))
      race("raw", fmt("%s reads [0x%x, 0x%x) of CTA %d, which %s writes, before this thread knows it landed "
                      "(needs %s%s)", E->ops[a.op].what, lo, hi, c->id, op_text(ch.w).c_str(), how_known(ch.w),
                      short_by_one(by->vc, ch.w).c_str()), s, by);
    add_read(ch.r, 3, a);
  }
  for (u32 w = lo / 4; w < (hi + 3) / 4 && w < c->gw.size(); ++w) {
    const GWord& g = c->gw[w];
    if (!g.writer) continue;
    const Fiber* wr = E->fibers_all[g.writer - 1];
    if (at(by->vc, wr->fence_comp) > g.fences) continue;   // a fence.proxy.async of the writer after the write
    race("proxy", fmt("%s reads [0x%x, 0x%x) of CTA %d, which warp %d lane %d wrote through the generic proxy "
                      "(st.shared or a plain store) with no fence.proxy.async after it that this thread knows of "
                      "(PTX ISA 9.7.12.4: generic-proxy writes are not visible to the async proxy without it)",
                      E->ops[a.op].what, w * 4, w * 4 + 4, c->id, wr->warp, wr->lane), s, by);
    break;
  }
}

// A generic load or store of [off, off + n) of c by f (st.shared / ld.shared, or a plain pointer: pc set).
void generic_access(Cta* c, u32 off, u32 n, bool write, Fiber* f, Site s) {
  for (u32 k = off / 16; k < (off + n + 15) / 16 && k < c->sh.size(); ++k) {
    SChunk& ch = c->sh[k];
    if (!knows(f->vc, ch.w))
      race(write ? "gwaw" : "graw",
           fmt("%s of [0x%x, 0x%x) of CTA %d, which %s writes, before this thread knows it landed (needs %s%s)",
               write ? "a store" : "a load", off, off + n, c->id, op_text(ch.w).c_str(), how_known(ch.w),
               short_by_one(f->vc, ch.w).c_str()), s, f);
    if (write)
      for (const Access& r : ch.r)
        if (!knows(f->vc, r))
          race("gwar", fmt("a store to [0x%x, 0x%x) of CTA %d while %s still reads it (staging buffer reused before "
                           "%s)", off, off + n, c->id, op_text(r).c_str(), how_known(r)), s, f);
  }
  if (!write) return;
  if (!f->fence_comp) {
    f->fence_comp = new_comp(c->cluster);
    set_max(f->vc, f->fence_comp, f->fences);
  }
  for (u32 w = off / 4; w < (off + n + 3) / 4 && w < c->gw.size(); ++w) c->gw[w] = GWord{u32(f->id) + 1, f->fences};
}

// ---- TMEM ---------------------------------------------------------------------------------------------
// Columns [lo, hi) of the lane quarters in `quarters` (bit q: lanes 32q .. 32q + 31).
template <class Fn>
void for_cells(Cta* c, u32 quarters, u32 lo, u32 hi, Fn&& fn) {
  if (c->tsh.empty()) c->tsh.assign(4 * TMEM_COLS, TCell{});
  for (u32 q = 0; q < 4; ++q)
    if (quarters >> q & 1)
      for (u32 col = lo; col < hi && col < TMEM_COLS; ++col) fn(c->tsh[q * TMEM_COLS + col]);
}

// tcgen05 ops of one thread that execute in issue order (PTX ISA 9.7.16.6.2, the tcgen05 pipelined pairs:
// mma -> mma on the same accumulator, cp -> mma). tcgen05.st pairs with nothing but tcgen05.wait::st: an MMA
// into columns a tcgen05.st wrote must come after that wait (9.7.16.8.5, example 2).
bool pipelined(const Access& first, const Access& then) {
  return first.comp == then.comp && (then.kind == AK_MMA && (first.kind == AK_MMA || first.kind == AK_CP));
}

// A tcgen05.mma (D), tcgen05.cp or tcgen05.st write of TMEM by `by`: checked against the columns' last writer
// and readers that `by` does not know complete (check), then the columns' last writer (record). Clean: true.
bool tmem_write(Cta* c, u32 quarters, u32 lo, u32 hi, const Access& a, Fiber* by, Site s, bool check, bool record) {
  bool said = !check;
  for_cells(c, quarters, lo, hi, [&](TCell& t) {
    if (!said && !knows(by->vc, t.w) && !pipelined(t.w, a) && t.w.op != a.op) {
      said = true;
      race("tmem-waw", fmt("%s writes TMEM columns %u..%u of CTA %d while %s writes them and is not known complete "
                           "(needs %s)", E->ops[a.op].what, lo, hi - 1, c->id, op_text(t.w).c_str(), how_known(t.w)),
           s, by);
    }
    for (const Access& r : t.r)
      if (!said && !knows(by->vc, r) && !pipelined(r, a)) {
        said = true;
        race("tmem-war", fmt("%s writes TMEM columns %u..%u of CTA %d while %s may still read them (needs %s%s)",
                             E->ops[a.op].what, lo, hi - 1, c->id, op_text(r).c_str(), how_known(r),
                             a.kind == AK_CP && r.kind == AK_MMA
                                 ? "; tcgen05.mma -> tcgen05.cp is not a pipelined pair, PTX ISA 9.7.16.6.2"
                                 : ""), s, by);
      }
    if (!record) return;
    t.w = a;
    for (Access& r : t.r) r = Access{};
  });
  return check ? !said : true;
}

// A read of TMEM (tcgen05.ld by a warp, an MMA's scale factors) with the clock `vc` of the reading thread.
bool tmem_read(Cta* c, u32 quarters, u32 lo, u32 hi, const Access& a, const Clock& vc, Fiber* by, Site s, bool report) {
  bool said = false;
  for_cells(c, quarters, lo, hi, [&](TCell& t) {
    if (!said && !knows(vc, t.w) && !pipelined(t.w, a)) {
      said = true;
      if (report)
        race("tmem-raw", fmt("%s reads TMEM columns %u..%u of CTA %d, which %s writes, before this thread knows it "
                             "completed (needs %s)", a.kind == AK_LD || !a.op ? "tcgen05.ld" : E->ops[a.op].what, lo, hi - 1,
                             c->id, op_text(t.w).c_str(), how_known(t.w)), s, by);
    }
    add_read(t.r, 2, a);
  });
  return !said;
}

// What a thread may free: TMEM columns no operation it does not know complete still touches.
std::string tmem_busy(Cta* c, u32 lo, u32 hi, const Clock& vc) {
  std::string why;
  for_cells(c, 0xF, lo, hi, [&](TCell& t) {
    if (!why.empty()) return;
    if (!knows(vc, t.w)) why = op_text(t.w) + " writes them (needs " + how_known(t.w) + ")";
    for (const Access& r : t.r)
      if (why.empty() && !knows(vc, r)) why = op_text(r) + " reads them (needs " + how_known(r) + ")";
  });
  return why;
}

}  // namespace
}  // namespace pe_sim
