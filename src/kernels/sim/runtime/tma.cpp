// TMA and bulk groups (twin: common/tma.cuh; PTX ISA 9.7.9.25-27 cp.async.bulk(.tensor), commit_group,
// wait_group; 9.7.12.4 fence.proxy.async): a load is an asynchronous operation that copies its box with
// model/tma_box.h and signals complete_tx; a store reads its staging box when it completes.
#include "runtime/state.h"

namespace pe_sim {
namespace {
PeSimTensorMap read_map(const void* tmap, Site s) {
  PeSimTensorMap m;
  std::memcpy(&m, tmap, sizeof m);
  std::string why = tensormap_problems(m);
  if (!why.empty()) misuse_fatal("TMA with an invalid tensor map (CUDA driver API, cuTensorMapEncodeTiled): " + why, s);
  return m;
}
}  // namespace

void tensormap_prefetch(const void* tmap, Site s) {
  read_map(tmap, s);
  point(s);
}

void tma_prefetch(const void* tmap, const int*, int ncoords, Site s) {
  PeSimTensorMap m = read_map(tmap, s);
  if (ncoords != m.rank)
    misuse_fatal(fmt("TMA prefetch gives %d coordinates for a rank-%d map (PTX ISA 9.7.9.27)", ncoords, m.rank), s);
  for (size_t i = 0; i < E->tensors.size(); ++i)   // the bytes it asks L2 for: one box (the report's gmem)
    if (m.global_address >= E->tensors[i].base && m.global_address < E->tensors[i].base + E->tensors[i].bytes) {
      E->gprefetch[i] += tma_box_geometry(m).bytes;
      break;
    }
  point(s);
}

void tma_load(const void* tmap, unsigned dst, unsigned bar, const int* coords, int ncoords, unsigned mcast_mask,
              int cta_group, Site s) {
  Fiber* f = E->cur;
  PeSimTensorMap m = read_map(tmap, s);
  if (ncoords != m.rank)
    misuse_fatal(fmt("TMA load gives %d coordinates for a rank-%d tensor map: use the .%dd form (PTX ISA 9.7.9.25)", ncoords,
                     m.rank,
                     m.rank), s);
  BoxGeometry g = tma_box_geometry(m);
  const u32 align = tma_smem_alignment(m.swizzle);
  const u32 dst_off = dst & 0xFFFFFF;
  if (dst_off % align)
    misuse_fatal(fmt("TMA load destination 0x%x is not %u-B aligned: a %s tile must start on its swizzle pattern "
                     "(%u B)", dst_off, align, m.swizzle ? "swizzled" : "TMA", align), s);
  Cta* me = f->cta;
  std::vector<u32> ranks;
  if (mcast_mask) {
    for (u32 r = 0; r < 16; ++r)
      if (mcast_mask >> r & 1) ranks.push_back(r);
  } else {
    ranks.push_back((dst >> 24) & 0xFF);
  }
  const u32 bar_rank = (bar >> 24) & 0xFF;
  const u32 bar_off = bar & 0xFFFFFF;
  struct Dest {
    Cta* cta;
    Cta* bar_cta;
  };
  std::vector<Dest> dests;
  for (u32 r : ranks) {
    Cta* c = cta_of_rank(me, r, s);
    if (!in_window(c, dst_off, g.footprint))
      misuse_fatal(fmt("TMA load box [0x%x, 0x%x) lies outside CTA %d's shared memory (PTX ISA, State Spaces, shared: a "
                       "CTA owns only its allocation)", dst_off,
                       dst_off + g.footprint, c->id), s);
    u32 br = mcast_mask ? (cta_group == 2 ? (r & ~1u) : r) : bar_rank;
    dests.push_back({c, cta_of_rank(me, br, s)});
  }
  int32_t cs[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < ncoords; ++i) cs[i] = coords[i];
  Op* op = new_op("TMA load", 0, s);
  op->chain = (1ull << 62) | op->id;   // independent: loads complete in any order
  for (auto& d : dests) {
    op->touches.push_back(d.cta);
    if (d.bar_cta != d.cta) op->touches.push_back(d.bar_cta);
  }
  const u64 id = op->id;
  std::vector<u64> issued;   // the phase of each destination's barrier the bytes are issued into
  for (auto& d : dests) {   // known landed to whoever observes the phase of its barrier its bytes count in
    const Barrier* b = find_bar(d.bar_cta, bar_off);
    const Access a{b ? b->comp : 0, b ? u32(b->phase) + 1 : 0, u32(id), AK_TMA_LOAD};
    async_write(d.cta, dst_off, dst_off + g.footprint, a, f, s);
    issued.push_back(b ? b->phase : 0);
  }
  {
    PeSimEvent& e = event(EV_TMA_LOAD, f, s, nullptr, id);
    ev_barrier(e, dests[0].bar_cta, bar_off, phase_now(dests[0].bar_cta, bar_off));
    e.bytes = int32_t(g.bytes);            // the box; each destination receives it (PTX ISA 9.7.9.25 .multicast::cluster)
    e.dests = int32_t(dests.size());
    e.tensor = tensor_id(m.global_address);
    e.coord = coords[ncoords - 1];
  }
  submit(op, [m, cs, ncoords, dst_off, bar_off, dests, g, id, s, issued]() {
    for (size_t k = 0; k < dests.size(); ++k) {
      const Dest& d = dests[k];
      Cta* c = d.cta;
      const Barrier* b = find_bar(d.bar_cta, bar_off);
      if (b && b->phase != issued[k])   // PTX ISA 9.7.13.15: complete_tx counts in the phase current then
        race("late-tx", fmt("the bytes of this TMA load arrive in phase %llu of the mbarrier at 0x%x of CTA %d, after "
                            "phase %llu they were issued for completed without them: the expect_tx of that phase "
                            "announced fewer bytes than its loads deliver, and a wait on it does not order them",
                            (unsigned long long)b->phase, bar_off, d.bar_cta->id, (unsigned long long)issued[k]),
             s, nullptr);
      if (c->exited) {
        misuse(fmt("a TMA load lands in CTA %d after it exited (CUDA C++ Programming Guide, distributed shared "
                   "memory: a block's shared memory must outlive every access to it)", c->id), s);
        continue;
      }
      tma_load_box(m, cs, ncoords, c->win, c->dyn_off + c->dyn_size, 0, dst_off);
      PeSimEvent& e = event(EV_TMA_LOAD_DONE, nullptr, s, c, id);
      ev_barrier(e, d.bar_cta, bar_off, phase_now(d.bar_cta, bar_off));
      e.bytes = int32_t(g.bytes);
      PeSimEvent& x = event(EV_COMPLETE_TX, nullptr, s, d.bar_cta, id);
      ev_barrier(x, d.bar_cta, bar_off, phase_now(d.bar_cta, bar_off));
      x.bytes = int32_t(g.bytes);
      bar_signal(d.bar_cta, bar_off, 0, 0, g.bytes, s, nullptr, "TMA complete_tx");
    }
  });
}

// Loads nobody consumes. At a CTA's exit (its last thread's), each TMA load still the last asynchronous write of
// some of its shared memory is checked by what the CTA's threads know, not by whether the simulated copy has
// landed: one that no thread of the CTA knows complete (none observed the mbarrier phase its bytes complete,
// nor learned of it) may still be writing when the CTA exits, on every schedule: misuse (the CTA's shared
// memory is released at its exit while the bulk copy writes it; PTX ISA 9.7.9.25 cp.async.bulk.tensor
// completes through its mbarrier only, and CUDA C++ Programming Guide, distributed shared memory: every access
// to a block's shared memory must complete before it exits). One known complete whose bytes no thread and no
// asynchronous operation ever read is only waste (a warning): a refill past the last k-tile that is drained.
namespace {
void tma_exit_check(Cta* c) {
  struct Load {
    Access a;
    u32 lo, hi;
    bool read;
  };
  std::vector<Load> loads;
  for (u32 k = 0; k < c->sh.size(); ++k) {
    const SChunk& ch = c->sh[k];
    if (ch.w.kind != AK_TMA_LOAD) continue;
    bool read = false;
    for (const Access& r : ch.r) read |= r.epoch != 0;
    for (u32 w = 4 * k; w < 4 * k + 4 && w < c->gw.size() && !read; ++w) read |= c->gw[w].reader[0] || c->gw[w].reader[1];
    Load* l = nullptr;
    for (size_t i = loads.size(); i-- > 0 && !l;)
      if (loads[i].a.op == ch.w.op) l = &loads[i];
    if (!l) {
      loads.push_back(Load{ch.w, 16 * k, 16 * k + 16, false});
      l = &loads.back();
    }
    l->hi = 16 * k + 16;
    l->read |= read;
  }
  for (const Load& l : loads) {
    bool known = false;
    for (const Fiber* f : c->fibers) known = known || knows(f->vc, l.a);
    const Engine::OpInfo& o = E->ops[l.a.op < E->ops.size() ? l.a.op : 0];
    Fiber* by = o.fiber >= 0 ? E->fibers_all[size_t(o.fiber)] : c->fibers[0];
    if (!known) {
      misuse(fmt("CTA %d exits while the %s into [0x%x, 0x%x) issued here may still be in flight: no thread of the "
                 "CTA observed the mbarrier phase its bytes complete (a load nobody consumes, e.g. a refill past the "
                 "last k-tile; PTX ISA 9.7.9.25: it completes only through its mbarrier; CUDA C++ Programming Guide: "
                 "a block's shared memory must outlive every access to it)", c->id, o.what, l.lo, l.hi), o.site, by);
      continue;
    }
    if (l.read) continue;
    const std::string key = fmt("unread:%s:%d", o.site.file ? o.site.file : "", o.site.line);
    if (E->hazard_seen.count(key)) continue;
    E->hazard_seen[key] = 1;
    warning(fmt("the %s into [0x%x, 0x%x) of CTA %d issued here landed and was waited for, but nothing ever read its "
                "bytes: a load nobody consumes (e.g. a refill past the last k-tile), only waste", o.what, l.lo,
                l.hi, c->id), o.site, by);
  }
}
}  // namespace

void tma_store(const void* tmap, unsigned src, const int* coords, int ncoords, Site s) {
  Fiber* f = E->cur;
  PeSimTensorMap m = read_map(tmap, s);
  if (ncoords != m.rank)
    misuse_fatal(fmt("TMA store gives %d coordinates for a rank-%d tensor map (PTX ISA 9.7.9.25)", ncoords, m.rank), s);
  BoxGeometry g = tma_box_geometry(m);
  SAddr a = resolve(src, g.footprint, s, "TMA store source");
  const u32 align = tma_smem_alignment(m.swizzle);
  if (a.off % align)
    misuse_fatal(fmt("TMA store source 0x%x is not %u-B aligned (%s)", a.off, align,
                     m.swizzle ? "a swizzled tile starts on its swizzle pattern" : "cp.async.bulk.tensor"), s);
  int32_t cs[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < ncoords; ++i) cs[i] = coords[i];
  Op* op = new_op("TMA store", (2ull << 60) | u64(f->id), s);
  op->touches.push_back(a.cta);
  const u64 id = op->id;
  const u32 off = a.off;
  Cta* c = a.cta;
  const u64 group = f->bulk_open_group;
  if (!f->bulk_comp) f->bulk_comp = new_comp(c->cluster);
  // its source is read until cp.async.bulk.wait_group.read retires its group (PTX ISA 9.7.9.26)
  async_read(c, off, off + g.footprint, Access{f->bulk_comp, u32(group) + 1, u32(id), AK_TMA_STORE}, f, s);
  f->bulk_pending[group]++;
  f->bulk_stores[group].push_back(Fiber::StoreRec{c, off, g.footprint, id, s});
  {
    PeSimEvent& e = event(EV_TMA_STORE, f, s, nullptr, id);
    e.bytes = int32_t(g.footprint);
    e.tensor = tensor_id(m.global_address);
    e.coord = coords[ncoords - 1];
  }
  submit(op, [m, cs, ncoords, c, off, f, group, s, id, bytes = g.footprint]() {
    tma_store_box(m, cs, ncoords, c->win, c->dyn_off + c->dyn_size, 0, off);
    event(EV_TMA_STORE_DONE, nullptr, s, c, id).bytes = int32_t(bytes);
    f->bulk_pending[group]--;
    if (f->state == FS::Blocked && f->w.kind == W_BULK) make_ready(f);
  });
}

void bulk_commit(Site s) {
  Fiber* f = E->cur;
  f->bulk_committed.push_back(f->bulk_open_group++);
  point(s);
}

void bulk_wait(int n, bool, Site s) {
  Fiber* f = E->cur;
  point(s);
  for (;;) {
    // every committed group but the newest n must be complete (PTX ISA 9.7.9.26 cp.async.bulk.wait_group)
    bool done = true;
    for (size_t i = 0; i + size_t(n) < f->bulk_committed.size(); ++i) done &= f->bulk_pending[f->bulk_committed[i]] == 0;
    if (done) break;
    WaitInfo w;
    w.kind = W_BULK;
    w.site = s;
    block(w);
  }
  // retire them: this thread now knows their sources are read (and may tell others)
  while (f->bulk_committed.size() > size_t(n)) {
    const u64 g = f->bulk_committed.front();
    f->bulk_committed.pop_front();
    f->bulk_pending.erase(g);
    f->bulk_stores.erase(g);
    set_max(f->vc, f->bulk_comp, u32(g) + 1);
  }
}

// PTX ISA 9.7.12.4 fence.proxy.async: this thread's earlier generic-proxy writes become visible to the async
// proxy (to operations issued by threads that know of this fence).
void fence_proxy_async(Site s) {
  Fiber* f = E->cur;
  ++f->fences;
  set_max(f->vc, f->fence_comp, f->fences);
  set_max(f->tvc, f->fence_comp, f->fences);   // its own fence: its tcgen05 reads of shared memory see it too
  point(s);
}

}  // namespace pe_sim
