// The event log, in the stage's own terms: every barrier, TMA, MMA, commit, TMEM, store, sync and exit event
// names its barrier as the stage's mbarrier_init wrote it ("&full[s]" -> full, the index from the address),
// the barrier phase it arrives on, completes, waits for or observes, the asynchronous operation an issue and
// its completion share, its bytes; and, from the stage's phase marks (common/timing.cuh's twin: timing_now,
// timing_record), the role of its warp, its tile slot, and whether its barrier is a ring slot or an
// accumulator (the barriers a PRODUCER_WAIT / TMA_WAIT waits on are the ring's empty / full ones,
// EPI_WAIT / ACC_WAIT the accumulator's empty / full ones). finalize_events() fills in what only the whole
// run shows (roles, tiles, slots, accumulators, indices) once the run ended.
#include "runtime/state.h"

namespace pe_sim {
namespace {

int file_id(const char* f) {
  auto it = E->file_ids.find(f);
  if (it != E->file_ids.end()) return it->second;
  int id = int(E->files.size());
  E->files.push_back(short_file(f));
  E->file_ids[f] = id;
  return id;
}

PeSimEvent& event(int kind, Fiber* f, Site s, Cta* c, u64 op) {
  if (int64_t(E->events.size()) >= E->L.max_events) {
    E->events_truncated = true;
    E->scratch = PeSimEvent{};
    return E->scratch;
  }
  E->events.emplace_back();
  PeSimEvent& e = E->events.back();
  e.seq = E->seq++;
  e.op = op;
  Cta* cc = f ? f->cta : c;
  e.cta = cc ? cc->id : -1;
  e.cluster = cc ? cc->cluster->id : -1;
  e.rank = cc ? cc->rank : -1;
  e.warp = f ? f->warp : -1;
  e.lane = f ? f->lane : -1;
  e.kind = kind;
  e.role = e.name = e.index = e.addr = e.bcta = e.phase = e.parity = e.tag = e.bytes = -1;
  e.slot = e.acc = e.tile = e.what = e.tensor = e.dests = e.coord = -1;
  e.line = s.line;
  e.file = file_id(s.file);
  return e;
}

void ev_barrier(PeSimEvent& e, Cta* bc, u32 off, int phase) {
  e.addr = int32_t(off);
  e.bcta = bc->id;
  e.phase = phase;
  auto it = bc->bar_name.find(off);
  e.name = it == bc->bar_name.end() ? -1 : it->second;
}

int name_id(const std::string& n) {
  auto it = E->name_ids.find(n);
  if (it != E->name_ids.end()) return it->second;
  E->names.push_back(n);
  return E->name_ids[n] = int(E->names.size()) - 1;
}

int tensor_id(u64 global_address) {
  for (const PeSimRange& t : E->tensors)
    if (global_address >= t.base && global_address < t.base + std::max<u64>(t.bytes, 1))
      return t.name ? name_id(t.name) : -1;
  return -1;
}

// ---- the stage's phase marks ----------------------------------------------------------------------------
std::vector<std::string> role_names;                       // the report's "roles"
std::unordered_map<int, int> role_ids;                     // PhaseRole bits -> index

int role_id(int bits) {
  if (!bits) return -1;
  auto it = role_ids.find(bits);
  if (it != role_ids.end()) return it->second;
  std::string n;
  for (auto [b, s] : {std::pair<int, const char*>{ROLE_PRODUCER, "producer"}, {ROLE_MMA, "mma"}, {ROLE_EPILOGUE, "epilogue"}})
    if (bits & b) n += (n.empty() ? "" : "+") + std::string(s);
  role_names.push_back(n);
  return role_ids[bits] = int(role_names.size()) - 1;
}

std::string roles_json() { return jstrs(role_names); }

void add_piece(Fiber* f, u32 tile, u32 phase, int role, int waits, size_t i0, size_t i1, Site s) {
  E->pieces.push_back({f->cta->id, f->warp, f->lane, tile, phase, role, waits, f->marks[i0].seq, f->marks[i1].seq,
                       u32(i0), u32(i1), true, s});
}

}  // namespace

uint64_t phase_mark(Site) {
  Fiber* f = E->cur;
  const u64 q = E->seq;
  if (f->marks.empty() || f->marks.back().seq != q) f->marks.push_back({q, false});
  return q;
}

void phase_record(unsigned tile, unsigned phase, int role, int waits, uint64_t t0, uint64_t t1, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  c->warp_roles[size_t(f->warp)] |= uint8_t(role);
  auto& m = f->marks;
  auto at = [&](u64 q) {
    return size_t(std::lower_bound(m.begin(), m.end(), q, [](const Fiber::Mark& x, u64 v) { return x.seq < v; }) -
                  m.begin());
  };
  const size_t b = at(t0), e = at(t1);
  if (b == m.size() || m[b].seq != t0 || t1 < t0) return;
  if (e < m.size() && m[e].seq == t1) {   // a contiguous stretch between two stamps
    add_piece(f, tile, phase, role, waits, b, e, s);
    return;
  }
  // t1 = t0 + the sum of the waits the stage bracketed with two stamps since t0: those stretches
  u64 sum = 0;
  for (size_t i = b; i + 1 < m.size(); ++i)
    if (m[i].waited) sum += m[i + 1].seq - m[i].seq;
  if (sum != t1 - t0) return;
  for (size_t i = b; i + 1 < m.size(); ++i)
    if (m[i].waited) add_piece(f, tile, phase, role, waits, i, i + 1, s);
}

namespace {

// The recording lane's phase marks on the other lanes of its warp that took the same timing_now() stamps (the
// stages record from one lane; every lane runs the marked code): each lane's events get its own stretches.
void spread_pieces() {
  const size_t n = E->pieces.size();
  for (size_t k = 0; k < n; ++k) {
    const Engine::Piece p = E->pieces[k];
    const Cta& c = E->ctas[size_t(p.cta)];
    const Fiber* r = c.fibers[size_t(p.warp * 32 + p.lane)];
    for (int l = 0; l < 32; ++l) {
      const size_t t = size_t(p.warp * 32 + l);
      if (l == p.lane || t >= c.fibers.size()) continue;
      const Fiber* f = c.fibers[t];
      if (f->marks.size() != r->marks.size()) continue;
      Engine::Piece q = p;
      q.lane = l;
      q.t0 = f->marks[p.i0].seq;
      q.t1 = f->marks[p.i1].seq;
      q.recorded = false;
      E->pieces.push_back(q);
    }
  }
}

// Piece boundaries in stamp order: at one stamp the ends, then the begins (outer first), then the event that
// stamp belongs to.
std::vector<std::pair<u64, int64_t>> boundaries() {   // (stamp, +piece + 1 begin / -(piece + 1) end)
  std::vector<std::pair<u64, int64_t>> b;
  for (size_t k = 0; k < E->pieces.size(); ++k) {
    b.push_back({E->pieces[k].t0, int64_t(k) + 1});
    b.push_back({E->pieces[k].t1, -(int64_t(k) + 1)});
  }
  auto key = [](const std::pair<u64, int64_t>& x) {
    const auto& p = E->pieces[size_t(std::llabs(x.second) - 1)];
    return std::make_tuple(x.first, x.second < 0 ? 0 : 1, x.second < 0 ? -int64_t(p.t0) : -int64_t(p.t1));
  };
  std::stable_sort(b.begin(), b.end(), [&](const auto& x, const auto& y) { return key(x) < key(y); });
  return b;
}

// The recorded phase marks as phase_begin / phase_end events, merged into the log in the same order.
void merge_phase_events(const std::vector<std::pair<u64, int64_t>>& bounds) {
  std::vector<PeSimEvent> out;
  out.reserve(E->events.size() + bounds.size());
  size_t i = 0;
  auto emit = [&](const std::pair<u64, int64_t>& x) {
    const auto& p = E->pieces[size_t(std::llabs(x.second) - 1)];
    if (!p.recorded) return;
    const Cta& c = E->ctas[size_t(p.cta)];
    PeSimEvent e{};
    e.seq = x.first;
    e.cta = p.cta;
    e.cluster = c.cluster->id;
    e.rank = c.rank;
    e.warp = p.warp;
    e.lane = p.lane;
    e.kind = x.second < 0 ? EV_PHASE_END : EV_PHASE_BEGIN;
    e.role = role_id(c.warp_roles[size_t(p.warp)]);
    e.name = e.index = e.addr = e.bcta = e.phase = e.parity = e.tag = e.bytes = e.slot = e.acc = -1;
    e.tile = int32_t(p.tile);
    e.what = int32_t(p.phase);
    e.line = p.site.line;
    e.file = file_id(p.site.file ? p.site.file : "");
    out.push_back(e);
  };
  for (const PeSimEvent& e : E->events) {
    while (i < bounds.size() && bounds[i].first <= e.seq) emit(bounds[i++]);
    out.push_back(e);
  }
  while (i < bounds.size()) emit(bounds[i++]);
  E->events.swap(out);
}

}  // namespace

namespace {

void finalize_events() {
  spread_pieces();
  const auto bounds = boundaries();
  const int nthreads = int(E->L.block[0] * E->L.block[1] * E->L.block[2]);
  const int nwarps = (nthreads + 31) / 32;
  const size_t nctas = E->ctas.size();
  // the lowest offset of each barrier name in each CTA: an event's index in its array
  std::unordered_map<u64, u32> lowest;
  for (const Cta& c : E->ctas)
    for (auto [off, nm] : c.bar_name) {
      const u64 k = (u64(c.id) << 32) | u32(nm);
      auto it = lowest.find(k);
      if (it == lowest.end() || off < it->second) lowest[k] = off;
    }
  // pass 1: each thread's open phase marks give its events' tile, and what the barriers it waits on are
  std::vector<std::vector<size_t>> open(nctas * size_t(nthreads));   // pieces, innermost last
  std::vector<int> waits_of(E->names.size(), WAITS_NONE);
  std::unordered_map<u64, std::pair<int, int>> op_from;   // op -> (role, tile) of its issue
  size_t bi = 0;
  for (PeSimEvent& e : E->events) {
    for (; bi < bounds.size() && bounds[bi].first <= e.seq; ++bi) {
      const size_t k = size_t(std::llabs(bounds[bi].second) - 1);
      const auto& p = E->pieces[k];
      auto& o = open[size_t(p.cta) * size_t(nthreads) + size_t(p.warp * 32 + p.lane)];
      if (bounds[bi].second > 0) {
        o.push_back(k);
      } else {
        auto it = std::find(o.begin(), o.end(), k);
        if (it != o.end()) o.erase(it);
      }
    }
    if (e.warp < 0 || e.cta < 0) continue;
    const auto& o = open[size_t(e.cta) * size_t(nthreads) + size_t(e.warp * 32 + e.lane)];
    e.tile = o.empty() ? -1 : int32_t(E->pieces[o.back()].tile);
    e.role = role_id(E->ctas[size_t(e.cta)].warp_roles[size_t(e.warp)]);
    if ((e.kind == EV_WAIT_BEGIN || e.kind == EV_WAIT_END) && e.name >= 0 && waits_of[size_t(e.name)] == WAITS_NONE)
      for (size_t j = o.size(); j-- > 0;) {
        const int w = E->pieces[o[j]].waits;
        if (w != WAITS_NONE) {
          waits_of[size_t(e.name)] = w;
          break;
        }
      }
    if (e.op && !op_from.count(e.op)) op_from[e.op] = {e.role, e.tile};
  }
  // pass 2: indices, slots and accumulators (an MMA reads the slot its thread last waited full for and
  // writes the accumulator it last waited empty for; a TMEM load reads the one its warp last waited full for)
  std::vector<int> last_full(nctas * size_t(nthreads), -1), last_acc_empty(nctas * size_t(nthreads), -1);
  std::vector<int> last_acc_full(nctas * size_t(nwarps), -1);
  std::unordered_map<u64, std::pair<int, int>> op_slot;   // op -> (slot, acc) of its issue
  for (PeSimEvent& e : E->events) {
    int cls = WAITS_NONE;
    if (e.name >= 0) {
      auto it = lowest.find((u64(u32(e.bcta)) << 32) | u32(e.name));
      if (it != lowest.end()) e.index = int32_t((u32(e.addr) - it->second) / 8);
      cls = waits_of[size_t(e.name)];
      if (cls == WAITS_RING_EMPTY || cls == WAITS_RING_FULL) e.slot = e.index;
      if (cls == WAITS_ACC_EMPTY || cls == WAITS_ACC_FULL) e.acc = e.index;
    }
    if (e.warp >= 0) {
      const size_t th = size_t(e.cta) * size_t(nthreads) + size_t(e.warp * 32 + e.lane);
      const size_t wp = size_t(e.cta) * size_t(nwarps) + size_t(e.warp);
      if (e.kind == EV_WAIT_END) {
        if (cls == WAITS_RING_FULL) last_full[th] = e.index;
        if (cls == WAITS_ACC_EMPTY) last_acc_empty[th] = e.index;
        if (cls == WAITS_ACC_FULL) last_acc_full[wp] = e.index;
      } else if (e.kind == EV_MMA) {
        e.slot = last_full[th];
        e.acc = last_acc_empty[th];
      } else if (e.kind == EV_TMEM_LD) {
        e.acc = last_acc_full[wp];
      }
      if (e.op && !op_slot.count(e.op)) op_slot[e.op] = {e.slot, e.acc};
    } else if (e.op) {   // the asynchronous unit: the role and tile of the issue
      auto r = op_from.find(e.op);
      if (r != op_from.end()) e.role = r->second.first, e.tile = r->second.second;
      auto q = op_slot.find(e.op);
      if (q != op_slot.end() && e.kind == EV_MMA_DONE) e.slot = q->second.first, e.acc = q->second.second;
    }
  }
  if (!E->pieces.empty()) merge_phase_events(bounds);
  for (size_t i = 0; i < E->events.size(); ++i) E->events[i].seq = i;
}

}  // namespace
}  // namespace pe_sim
