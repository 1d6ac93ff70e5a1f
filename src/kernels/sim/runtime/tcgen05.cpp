// tcgen05 (twin: common/tcgen05.cuh; PTX ISA 9.7.16): TMEM allocation, tcgen05.mma / cp / commit queued
// in issue order per thread (model/umma.h), tcgen05.ld handed over at tcgen05.wait::ld.
#include "runtime/state.h"

namespace pe_sim {
namespace {
UmmaCta umma_cta(Cta* c) {
  UmmaCta u{};
  u.smem = c->win;
  u.smem_size = c->dyn_off + c->dyn_size;
  u.smem_base_addr = 0;
  u.tmem = c->tmem.empty() ? nullptr : c->tmem.data();
  if (!c->allocs.empty()) {
    u32 lo = 512, hi = 0;
    for (auto& a : c->allocs) {
      lo = std::min(lo, a.col0);
      hi = std::max(hi, a.col0 + a.ncols);
    }
    u.alloc_col0 = lo;
    u.alloc_cols = hi - lo;
  }
  return u;
}

u64 tc_chain(Fiber* f) { return (4ull << 60) | u64(f->id); }
}  // namespace

void tc_alloc(int cg, unsigned dst, unsigned ncols, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  if (ncols < 32 || ncols > 512 || (ncols & (ncols - 1)))
    misuse_fatal(fmt("tcgen05.alloc of %u columns: a power of two in 32..512", ncols), s);
  if (c->relinquished) misuse_fatal("tcgen05.alloc after tcgen05.relinquish_alloc_permit", s);
  SAddr a = resolve(dst, 4, s, "tcgen05.alloc destination");
  gather(cg == 2 ? "tcgen05.alloc.cta_group::2" : "tcgen05.alloc.cta_group::1", 0xFFFFFFFFu, s,
         [](WarpColl&, int, bool) {});
  if (f->lane != 0) return;
  for (;;) {
    if (c->tmem.empty()) c->tmem.assign(size_t(TMEM_LANES) * TMEM_COLS, 0xFFBADBADu);
    for (u32 col = 0; col + ncols <= 512; col += ncols) {
      bool free = true;
      for (auto& al : c->allocs) free &= col + ncols <= al.col0 || al.col0 + al.ncols <= col;
      if (free) {
        c->allocs.push_back({col, ncols});
        u32 taddr = col;
        std::memcpy(a.cta->win + a.off, &taddr, 4);
        event(EV_TMEM_ALLOC, f, s).bytes = int32_t(ncols * TMEM_LANES * 4);
        return;
      }
    }
    c->alloc_waiters.push_back(f);
    WaitInfo w;
    w.kind = W_TMEM_ALLOC;
    w.site = s;
    block(w);
  }
}

void tc_dealloc(int, unsigned taddr, unsigned ncols, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  gather("tcgen05.dealloc", 0xFFFFFFFFu, s, [](WarpColl&, int, bool) {});
  if (f->lane != 0) return;
  const u32 col = taddr & 0xFFFF;
  for (size_t i = 0; i < c->allocs.size(); ++i)
    if (c->allocs[i].col0 == col && c->allocs[i].ncols == ncols) {
      for (const Range& r : c->tmem_writes)
        if (r.lo < col + ncols && col < r.hi)
          misuse_fatal(fmt("tcgen05.dealloc of columns %u..%u while %s issued at %s:%d still writes them", col,
                           col + ncols - 1, r.what, short_file(r.site.file), r.site.line), s);
      c->allocs.erase(c->allocs.begin() + long(i));
      event(EV_TMEM_DEALLOC, f, s).bytes = int32_t(ncols * TMEM_LANES * 4);
      wake_all(c->alloc_waiters);
      return;
    }
  misuse_fatal(fmt("tcgen05.dealloc of %u columns at 0x%x, which is not an allocation of this CTA", ncols, taddr), s);
}

void tc_relinquish(int, Site s) {
  gather("tcgen05.relinquish_alloc_permit", 0xFFFFFFFFu, s, [](WarpColl&, int, bool) {});
  E->cur->cta->relinquished = true;
}

void tc_mma(int kind, int cg, unsigned d, uint64_t a, uint64_t b, unsigned idesc, unsigned sfa, unsigned sfb,
            unsigned accumulate, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  std::vector<Cta*> pair{c};
  if (cg == 2) {
    if (c->rank & 1) misuse_fatal("tcgen05.mma.cta_group::2 issued by the odd CTA of the pair (only the even one issues)", s);
    if (c->cluster->ctas.size() < size_t(c->rank) + 2)
      misuse_fatal("tcgen05.mma.cta_group::2 in a cluster without a peer CTA (launch a 2-CTA cluster)", s);
    pair.push_back(c->cluster->ctas[c->rank + 1]);
  }
  UmmaIdesc id;
  SmemDescFields fa, fb;
  try {
    id = decode_umma_idesc(idesc, kind);
    fa = decode_umma_smem_desc(a);
    fb = decode_umma_smem_desc(b);
  } catch (const ModelError& e) {
    misuse_fatal(e.what, s);
  }
  const u32 n_per_cta = cg == 2 ? id.n / 2 : id.n;
  auto ra = operand_range(fa, 128, 32), rb = operand_range(fb, n_per_cta, 32);
  Op* op = new_op("tcgen05.mma", tc_chain(f), s);
  op->touches = pair;
  const u64 oid = op->id;
  const u32 col = d & 0xFFFF;
  for (Cta* p : pair) {
    for (auto r : {ra, rb}) {
      if (const Range* w = overlap(p->writes, r.first, r.second))
        hazard(fmt("tcgen05.mma reads [0x%x, 0x%x) of CTA %d while %s issued at %s:%d has not landed there "
                   "(operand read before its TMA completed)", r.first, r.second, p->id, w->what,
                   short_file(w->site.file), w->site.line), s, f);
      check_proxy_fence(p, r.first, r.second, "a tcgen05.mma", s);
      p->reads.push_back(Range{r.first, r.second, oid, "a tcgen05.mma", s});
    }
    p->tmem_writes.push_back(Range{col, col + id.n, oid, "a tcgen05.mma", s});
  }
  for (Cta* p : pair) note_tc_remote(c, p);
  event(EV_MMA, f, s, nullptr, oid);
  submit(op, [kind, cg, d, a, b, idesc, sfa, sfb, accumulate, pair, oid, col, n = id.n, s]() {
    for (Cta* p : pair) {
      remove_ranges(p->reads, oid);
      remove_ranges(p->tmem_writes, oid);
    }
    std::vector<UmmaCta> us;
    for (Cta* p : pair) us.push_back(umma_cta(p));
    umma_mma(kind, cg, us.data(), d, a, b, idesc, accumulate != 0, sfa, sfb);
    // a tcgen05.ld that has not been waited for must not see this write
    [&] {
      for (Cta* p : pair)
        for (Fiber* g : p->fibers)
          for (auto& ld : g->lds)
            if (ld.col0 < col + n && col < ld.col0 + ld.ncols) {
              hazard(fmt("TMEM columns %u..%u written by a tcgen05.mma while a tcgen05.ld of them by warp %d is "
                         "not yet waited for (accumulator released before tcgen05.wait::ld)", col, col + n - 1,
                         g->warp), s);
              return;
            }
    }();
    event(EV_MMA_DONE, nullptr, s, pair[0], oid);
  });
}

void tc_commit(int cg, unsigned bar, unsigned mask, bool multicast, Site s) {
  Fiber* f = E->cur;
  Cta* me = f->cta;
  std::vector<std::pair<Cta*, u32>> targets;
  const u32 off = bar & 0xFFFFFF;
  if (multicast) {
    for (u32 r = 0; r < 16; ++r)
      if (mask >> r & 1) targets.push_back({cta_of_rank(me, r, s), off});
  } else {
    targets.push_back({cta_of_rank(me, (bar >> 24) & 0xFF, s), off});
  }
  (void)cg;
  for (auto& t : targets) note_tc_remote(me, t.first);
  Op* op = new_op("tcgen05.commit", tc_chain(f), s);
  for (auto& t : targets) op->touches.push_back(t.first);
  ev_barrier(event(EV_COMMIT, f, s, nullptr, op->id), targets[0].first, off, -1);
  submit(op, [targets, s, id = op->id]() {
    for (auto& t : targets) {
      ev_barrier(event(EV_ARRIVE, nullptr, s, t.first, id), t.first, t.second, phase_now(t.first, t.second));
      bar_signal(t.first, t.second, 1, 0, 0, s, nullptr, "tcgen05.commit arrive");
    }
  });
}

void tc_ld_32x32b(unsigned taddr, unsigned* regs, int x, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  std::string err;
  WarpColl& wc = gather("tcgen05.ld.32x32b", 0xFFFFFFFFu, s, [&](WarpColl& w, int l, bool last) {
    if (!last) {
      if (w.arrived == (1u << l)) w.taddr = taddr, w.x = x, w.a0 = 0;
      else if (w.taddr != taddr || w.x != x) w.a0 = 1;   // lanes disagree on the address or the width
      return;
    }
    if (w.taddr != taddr || w.x != x) w.a0 = 1;
    w.a1 = 0;
    w.words.assign(size_t(32) * x, 0);
    try {
      tmem_ld_32x32b(umma_cta(c), f->warp, taddr, x, w.words.data());
    } catch (const ModelError& e) {
      err = e.what;
      w.a1 = 1;
    }
  });
  if (wc.a0) misuse_fatal("tcgen05.ld.sync.aligned: the lanes of the warp give different addresses or widths", s);
  if (wc.a1) misuse_fatal(err.empty() ? std::string("tcgen05.ld outside the TMEM allocation or lane quarter") : err, s);
  const u32 col = taddr & 0xFFFF, lane0 = taddr >> 16;
  if (f->lane == 0) {
    for (const Range& r : c->tmem_writes)
      if (r.lo < col + u32(x) && col < r.hi) {
        hazard(fmt("tcgen05.ld of TMEM columns %u..%u while %s issued at %s:%d still writes them (read before the "
                   "MMA's commit was waited for)", col, col + x - 1, r.what, short_file(r.site.file), r.site.line), s, f);
        break;
      }
    event(EV_TMEM_LD, f, s).bytes = int32_t(32 * x * 4);
  }
  Fiber::PendingLd p;
  p.regs = regs;
  p.vals.assign(wc.words.begin() + size_t(f->lane) * x, wc.words.begin() + size_t(f->lane + 1) * x);
  p.lane0 = lane0;
  p.col0 = col;
  p.ncols = u32(x);
  for (int i = 0; i < x; ++i) regs[i] = 0x7FBADBADu;   // not valid until tcgen05.wait::ld
  f->lds.push_back(std::move(p));
}

void tc_wait_ld(Site s) {
  aligned_op("tcgen05.wait::ld", s);
  Fiber* f = E->cur;
  for (auto& p : f->lds) std::memcpy(p.regs, p.vals.data(), p.vals.size() * 4);
  f->lds.clear();
}

void tc_wait_st(Site s) { aligned_op("tcgen05.wait::st", s); }

void tc_fence(bool, Site s) { point(s); }

void tc_cp_32x128b_warpx4(int cg, unsigned taddr, uint64_t desc, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  SmemDescFields fd;
  try {
    fd = decode_umma_smem_desc(desc);
  } catch (const ModelError& e) {
    misuse_fatal(e.what, s);
  }
  auto r = operand_range(fd, 32, 16);
  std::vector<Cta*> pair{c};
  if (cg == 2 && c->cluster->ctas.size() > size_t(c->rank) + 1) pair.push_back(c->cluster->ctas[c->rank + 1]);
  Op* op = new_op("tcgen05.cp", tc_chain(f), s);
  op->touches = pair;
  const u64 oid = op->id;
  for (Cta* p : pair) {
    check_proxy_fence(p, r.first, r.second, "a tcgen05.cp", s);
    p->reads.push_back(Range{r.first, r.second, oid, "a tcgen05.cp", s});
    note_tc_remote(c, p);
  }
  event(EV_TMEM_CP, f, s, nullptr, oid).bytes = 32 * 16;   // 32 rows of 128 bits (copied to 4 lane quarters)
  submit(op, [pair, taddr, desc, oid]() {
    for (Cta* p : pair) {
      remove_ranges(p->reads, oid);
      tmem_cp_32x128b_warpx4(umma_cta(p), taddr, desc);
    }
  });
}

}  // namespace pe_sim
