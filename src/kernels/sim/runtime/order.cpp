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
// Plain accesses race each other too: two plain accesses of overlapping bytes of shared memory by different
// threads, one a store, not ordered by a bar.sync / bar.arrive, an mbarrier arrive -> wait, barrier.cluster or
// __syncwarp between them are a data race (PTX ISA 8.7.1: conflicting weak operations not related in causality
// order). Each thread has its own component, ticked after every publication of its clock; shared memory keeps,
// per 4 B, the last plain store and up to two plain loads since it, with the bytes each touched.
// tcgen05 fences (PTX ISA 9.7.16.6.3, 9.7.16.11.1): an asynchronous tcgen05 operation is ordered after what
// its thread learned at a thread synchronisation only through a tcgen05.fence::after_thread_sync between
// the two (Fiber::tvc: the clock at that fence, plus the thread's own waits since), and a warp's
// tcgen05.ld / st completion (tcgen05.wait::ld / ::st) leaves its thread at a synchronisation only through
// a tcgen05.fence::before_thread_sync after the wait (released(); tcgen05.commit performs one implicitly,
// 9.7.16.6.4.2). The pipelined pairs need neither (9.7.16.6.2: mma -> mma, cp -> mma of one thread).
#include <dlfcn.h>

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

// The clock an access of kind `kind` by `by` is checked with: its tcgen05 view for tcgen05 operations.
bool tc_kind(uint8_t kind) { return kind == AK_MMA || kind == AK_CP || kind == AK_LD || kind == AK_ST; }
const Clock& view(Fiber* by, uint8_t kind) { return tc_kind(kind) ? by->tvc : by->vc; }

// Why a tcgen05 operation does not know `x` complete though its thread does: no after_thread_sync since.
std::string after_hint(const Fiber* by, const Clock& used, const Access& x) {
  if (!by || &used != &by->tvc || !knows(by->vc, x)) return "";
  return "; this thread's wait observed it, but no tcgen05.fence::after_thread_sync since orders this tcgen05 "
         "operation after that wait (PTX ISA 9.7.16.6.3: an asynchronous tcgen05 operation is ordered after the "
         "thread's prior synchronisation only through tcgen05.fence::after_thread_sync)";
}

// Why a tcgen05.ld / st its warp waited for is not known complete to another thread: released unfenced.
std::string before_hint(const Access& r) {
  if (r.kind != AK_LD && r.kind != AK_ST) return "";
  const Engine::OpInfo& o = E->ops[r.op < E->ops.size() ? r.op : 0];
  if (o.fiber < 0 || !knows(E->fibers_all[size_t(o.fiber)]->vc, r)) return "";
  return fmt("; its warp waited for it (tcgen05.wait::%s), but released the columns at a thread synchronisation "
             "with no tcgen05.fence::before_thread_sync between that wait and the release (PTX ISA 9.7.16.6.4.4: "
             "wait, then tcgen05.fence::before_thread_sync, then synchronise)", r.kind == AK_LD ? "ld" : "st");
}

// What `f` passes on at a thread synchronisation (an arrive, bar.sync / bar.arrive, barrier.cluster.arrive,
// __syncwarp): its clock, with its warp's tcgen05.ld / st streams as it knew them at its last
// tcgen05.fence::before_thread_sync (or tcgen05.commit): PTX ISA 9.7.16.6.3, 9.7.16.6.4.4.
const Clock& released(Fiber* f) {
  static Clock scratch;
  const WarpColl& wc = f->cta->warps[size_t(f->warp)];
  const bool ld = wc.ld_comp && at(f->vc, wc.ld_comp) > f->rel_ld, st = wc.st_comp && at(f->vc, wc.st_comp) > f->rel_st;
  if (!ld && !st) return f->vc;
  scratch = f->vc;
  if (ld) scratch[wc.ld_comp] = f->rel_ld;
  if (st) scratch[wc.st_comp] = f->rel_st;
  return scratch;
}

// join(dst, released(f)) without the copy: a bar.sync / __syncwarp / barrier.cluster arrival.
void join_released(Clock& dst, Fiber* f) {
  const WarpColl& wc = f->cta->warps[size_t(f->warp)];
  const u32 ld0 = at(dst, wc.ld_comp), st0 = at(dst, wc.st_comp);
  join(dst, f->vc);
  if (wc.ld_comp && at(f->vc, wc.ld_comp) > f->rel_ld) dst[wc.ld_comp] = std::max(ld0, f->rel_ld);
  if (wc.st_comp && at(f->vc, wc.st_comp) > f->rel_st) dst[wc.st_comp] = std::max(st0, f->rel_st);
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

// ---- plain accesses: each thread's own epoch ------------------------------------------------------------
// A thread's epoch, its own component allocated at its first plain access of shared memory.
u32 own_epoch(Fiber* f) {
  if (!f->self_comp) {
    f->self_comp = new_comp(f->cta->cluster);
    set_max(f->vc, f->self_comp, 1);
  }
  return at(f->vc, f->self_comp);
}

// After a thread published its clock (an arrive, bar.sync / bar.arrive, __syncwarp, barrier.cluster.arrive,
// tcgen05.commit): what it does from now on is not known to whoever learns what it published.
void tick(Fiber* f) {
  if (f && f->self_comp) ++f->vc[f->self_comp];
}

// Whether `vc` knows thread `fid - 1`'s plain access at `epoch`.
bool knows_plain(const Clock& vc, u32 fid, u32 epoch) {
  return !fid || at(vc, E->fibers_all[fid - 1]->self_comp) >= epoch;
}

// Where a plain access comes from (the raw instruction being checked, else the wrapper's call site), as an id.
u32 where_id(Fiber* f, Site s) {
  const uintptr_t k0 = E->raw_pc ? E->raw_pc : uintptr_t(s.file), k1 = E->raw_pc ? 0 : uintptr_t(s.line) + 1;
  if (f->where_id && f->where_key[0] == k0 && f->where_key[1] == k1) return f->where_id;
  auto it = E->where_ids.find({k0, k1});
  u32 id;
  if (it != E->where_ids.end()) {
    id = it->second;
  } else {
    id = u32(E->wheres.size());
    E->wheres.push_back(Engine::Where{s, E->raw_pc});
    E->where_ids[{k0, k1}] = id;
  }
  f->where_key[0] = k0, f->where_key[1] = k1, f->where_id = id;
  return id;
}

// "warp 3 lane 7's plain store at <where>": the other access of a race (a raw one's line: pelib.sim, @@pc2@@).
std::string plain_text(u32 fid, u32 at_id, const char* what, Json& extra) {
  const Fiber* o = E->fibers_all[fid - 1];
  const Engine::Where& w = E->wheres[at_id < E->wheres.size() ? at_id : 0];
  std::string place = fmt("%s:%d", short_file(w.site.file), w.site.line);
  if (w.pc) {
    Dl_info di{};
    if (dladdr(reinterpret_cast<void*>(w.pc), &di) && di.dli_fname) {
      extra.put("lib2", di.dli_fname).unum("pc2", w.pc - uintptr_t(di.dli_fbase));
      place = fmt("@@pc2@@ (after %s:%d)", short_file(w.site.file), w.site.line);
    }
  }
  return fmt("warp %d lane %d's plain %s at %s", o->warp, o->lane, what, place.c_str());
}

const char* const DATA_RACE = "nothing orders the two (a bar.sync, an mbarrier arrive -> wait, barrier.cluster or "
                              "__syncwarp between them): a data race (PTX ISA 8.7.1: conflicting accesses not related "
                              "in causality order)";

// The bytes of word w that [off, off + n) touches.
uint8_t word_mask(u32 w, u32 off, u32 n) {
  const u32 lo = std::max(off, 4 * w), hi = std::min(off + n, 4 * w + 4);
  return uint8_t(((1u << (hi - lo)) - 1) << (lo - 4 * w));
}

// A plain load or store of [off, off + n) of c by f: checked against the word's last plain store and the plain
// loads since that f does not know of, then recorded.
void plain_access(Cta* c, u32 off, u32 n, bool write, Fiber* f, Site s) {
  const u32 fid = u32(f->id) + 1, ep = own_epoch(f), here = where_id(f, s);
  for (u32 w = off / 4; w < (off + n + 3) / 4 && w < c->gw.size(); ++w) {
    GWord& g = c->gw[w];
    const uint8_t m = word_mask(w, off, n);
    if (g.writer && g.writer != fid && (g.wmask & m) && !knows_plain(f->vc, g.writer, g.wepoch)) {
      Json extra;
      const std::string other = plain_text(g.writer, g.wat, "store", extra);
      race(write ? "data-waw" : "data-raw",
           fmt("a plain %s [0x%x, 0x%x) of CTA %d races %s to the same bytes: %s", write ? "store to" : "load of",
               off, off + n, c->id, other.c_str(), DATA_RACE), s, f, extra);
    }
    if (write)
      for (int i = 0; i < 2; ++i)
        if (g.reader[i] && g.reader[i] != fid && (g.rmask[i] & m) && !knows_plain(f->vc, g.reader[i], g.repoch[i])) {
          Json extra;
          const std::string other = plain_text(g.reader[i], g.rat[i], "load", extra);
          race("data-war", fmt("a plain store to [0x%x, 0x%x) of CTA %d races %s of the same bytes: %s", off,
                               off + n, c->id, other.c_str(), DATA_RACE), s, f, extra);
        }
    // Record. A record keeps one epoch for its bytes: an older one where an access leaves some of a record's
    // bytes untouched (what is ordered after the newer access may then pass as ordered after the older: a race
    // missed, never one reported that is not there).
    if (write) {
      const bool covers = (g.wmask & ~m) == 0;
      if (g.writer == fid && !covers) {
        g.wmask |= m;
      } else {
        g.writer = fid, g.wepoch = ep, g.wmask = m, g.wat = here;
      }
      g.fences = f->fences;
      for (int i = 0; i < 2; ++i)
        if ((g.rmask[i] & ~m) == 0) g.reader[i] = 0, g.rmask[i] = 0;
      continue;
    }
    int slot = -1;
    for (int i = 0; i < 2 && slot < 0; ++i)
      if (g.reader[i] == fid) slot = i;
    if (slot >= 0 && (g.rmask[slot] & ~m)) {
      g.rmask[slot] |= m;
      continue;
    }
    for (int i = 0; i < 2 && slot < 0; ++i)   // a free slot, or a load ordered before this one
      if (!g.reader[i] || knows_plain(f->vc, g.reader[i], g.repoch[i])) slot = i;
    if (slot < 0) {   // the older of two unordered loads goes
      g.reader[0] = g.reader[1], g.repoch[0] = g.repoch[1], g.rat[0] = g.rat[1], g.rmask[0] = g.rmask[1];
      slot = 1;
    }
    g.reader[slot] = fid, g.repoch[slot] = ep, g.rat[slot] = here, g.rmask[slot] = m;
  }
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
  // the bytes' plain accesses must come before the issue; the landing bytes replace what they wrote
  bool said = false;
  for (u32 w = lo / 4; w < (hi + 3) / 4 && w < c->gw.size(); ++w) {
    GWord& g = c->gw[w];
    for (int i = -1; i < 2 && !said; ++i) {
      const u32 fid = i < 0 ? g.writer : g.reader[i], ep = i < 0 ? g.wepoch : g.repoch[i];
      if (!fid || knows_plain(by->vc, fid, ep)) continue;
      Json extra;
      const std::string other = plain_text(fid, i < 0 ? g.wat : g.rat[i], i < 0 ? "store" : "load", extra);
      race(i < 0 ? "async-after-store" : "async-after-load",
           fmt("%s into [0x%x, 0x%x) of CTA %d races %s %s the same bytes: nothing orders that access before this "
               "issue (its thread's arrive -> this thread's wait, or a bar.sync between them; PTX ISA 8.7.1)",
               E->ops[a.op].what, lo, hi, c->id, other.c_str(), i < 0 ? "to" : "of"), s, by, extra);
      said = true;
    }
    g = GWord{};
  }
}

// An asynchronous read of [lo, hi) of c (an MMA operand, a TMA store or tcgen05.cp source) issued by `by`.
void async_read(Cta* c, u32 lo, u32 hi, const Access& a, Fiber* by, Site s) {
  const Clock& vc = view(by, a.kind);
  for (u32 k = lo / 16; k < (hi + 15) / 16 && k < c->sh.size(); ++k) {
    SChunk& ch = c->sh[k];
    if (!knows(vc, ch.w))
      race(&vc == &by->tvc && knows(by->vc, ch.w) ? "raw-fence" : "raw",
           fmt("%s reads [0x%x, 0x%x) of CTA %d, which %s writes, before this thread knows it landed "
               "(needs %s%s%s)", E->ops[a.op].what, lo, hi, c->id, op_text(ch.w).c_str(), how_known(ch.w),
               short_by_one(vc, ch.w).c_str(), after_hint(by, vc, ch.w).c_str()), s, by);
    add_read(ch.r, 3, a);
  }
  for (u32 w = lo / 4; w < (hi + 3) / 4 && w < c->gw.size(); ++w) {
    const GWord& g = c->gw[w];
    if (!g.writer) continue;
    const Fiber* wr = E->fibers_all[g.writer - 1];
    if (at(vc, wr->fence_comp) > g.fences) continue;   // a fence.proxy.async of the writer after the write
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
  if (write && !f->fence_comp) {
    f->fence_comp = new_comp(c->cluster);
    set_max(f->vc, f->fence_comp, f->fences);
  }
  plain_access(c, off, n, write, f, s);
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
  const Clock& vc = view(by, a.kind);
  for_cells(c, quarters, lo, hi, [&](TCell& t) {
    if (!said && !knows(vc, t.w) && !pipelined(t.w, a) && t.w.op != a.op) {
      said = true;
      race("tmem-waw", fmt("%s writes TMEM columns %u..%u of CTA %d while %s writes them and is not known complete "
                           "(needs %s%s)", E->ops[a.op].what, lo, hi - 1, c->id, op_text(t.w).c_str(), how_known(t.w),
                           after_hint(by, vc, t.w).c_str()), s, by);
    }
    for (const Access& r : t.r)
      if (!said && !knows(vc, r) && !pipelined(r, a)) {
        said = true;
        race("tmem-war", fmt("%s writes TMEM columns %u..%u of CTA %d while %s may still read them (needs %s%s%s%s)",
                             E->ops[a.op].what, lo, hi - 1, c->id, op_text(r).c_str(), how_known(r),
                             a.kind == AK_CP && r.kind == AK_MMA
                                 ? "; tcgen05.mma -> tcgen05.cp is not a pipelined pair, PTX ISA 9.7.16.6.2"
                                 : "", after_hint(by, vc, r).c_str(), before_hint(r).c_str()), s, by);
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
                             "completed (needs %s%s%s)", a.kind == AK_LD || !a.op ? "tcgen05.ld" : E->ops[a.op].what,
                             lo, hi - 1, c->id, op_text(t.w).c_str(), how_known(t.w), after_hint(by, vc, t.w).c_str(),
                             before_hint(t.w).c_str()), s, by);
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
