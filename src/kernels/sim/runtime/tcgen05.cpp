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

// The next operation of this thread's tcgen05 stream (known complete through a commit's mbarrier phase).
Access tc_access(Fiber* f, u64 op, AccessKind kind) {
  if (!f->tc_comp) f->tc_comp = new_comp(f->cta->cluster);
  return Access{f->tc_comp, ++f->tc_issued, u32(op), kind};
}
}  // namespace

void tc_alloc(int cg, unsigned dst, unsigned ncols, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  if (ncols < 32 || ncols > 512 || (ncols & (ncols - 1)))
    misuse_fatal(fmt("tcgen05.alloc of %u columns: a power of two in 32..512 (PTX ISA 9.7.16.7.1)", ncols), s);
  if (c->relinquished) misuse_fatal("tcgen05.alloc after tcgen05.relinquish_alloc_permit (PTX ISA 9.7.16.7.1)", s);
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
      const std::string busy = tmem_busy(c, col, col + ncols, f->vc);
      if (!busy.empty())   // PTX ISA 9.7.16.7.1: freed columns must no longer be accessed
        misuse_fatal(fmt("tcgen05.dealloc of TMEM columns %u..%u while %s: the columns are freed before this thread "
                         "knows the operation is done with them (PTX ISA 9.7.16.7.1)", col, col + ncols - 1,
                         busy.c_str()), s);
      c->allocs.erase(c->allocs.begin() + long(i));
      event(EV_TMEM_DEALLOC, f, s).bytes = int32_t(ncols * TMEM_LANES * 4);
      wake_all(c->alloc_waiters);
      return;
    }
  misuse_fatal(fmt("tcgen05.dealloc of %u columns at 0x%x, which is not an allocation of this CTA (PTX ISA 9.7.16.7.1)",
                   ncols, taddr), s);
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
    if (c->rank & 1)
      misuse_fatal("tcgen05.mma.cta_group::2 issued by the odd CTA of the pair (PTX ISA 9.7.16.10.9: only the even one "
                   "issues)", s);
    if (c->cluster->ctas.size() < size_t(c->rank) + 2)
      misuse_fatal("tcgen05.mma.cta_group::2 in a cluster without a peer CTA (PTX ISA 9.7.16.10.9; launch a 2-CTA "
                   "cluster)", s);
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
  const Access acc = tc_access(f, oid, AK_MMA);
  for (Cta* p : pair) {
    for (auto r : {ra, rb}) async_read(p, r.first, r.second, acc, f, s);
    if (kind == UMMA_KIND_MXF4NVF4) {   // the scale factors, 4 columns each in every lane (model/umma.h)
      tmem_read(p, 0xF, sfa & 0xFFFF, (sfa & 0xFFFF) + 4, acc, f->tvc, f, s, true);
      tmem_read(p, 0xF, sfb & 0xFFFF, (sfb & 0xFFFF) + 4, acc, f->tvc, f, s, true);
    }
    tmem_write(p, 0xF, col, col + id.n, acc, f, s);   // D: 128 lanes x N columns per CTA
  }
  for (Cta* p : pair) note_tc_remote(c, p);
  event(EV_MMA, f, s, nullptr, oid);
  submit(op, [kind, cg, d, a, b, idesc, sfa, sfb, accumulate, pair, oid, s]() {
    std::vector<UmmaCta> us;
    for (Cta* p : pair) us.push_back(umma_cta(p));
    umma_mma(kind, cg, us.data(), d, a, b, idesc, accumulate != 0, sfa, sfb);
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
  // PTX ISA 9.7.16.11.1: the arrive comes once every earlier tcgen05 op of this thread is complete, so whoever
  // observes that phase knows them complete (and what this thread knew when it committed)
  Clock rel = f->vc;
  {   // tcgen05.commit performs tcgen05.fence::before_thread_sync implicitly (PTX ISA 9.7.16.6.4.2)
    const WarpColl& wc = me->warps[size_t(f->warp)];
    f->rel_ld = at(f->vc, wc.ld_comp);
    f->rel_st = at(f->vc, wc.st_comp);
  }
  tick(f);
  if (f->tc_comp) set_max(rel, f->tc_comp, f->tc_issued);
  submit(op, [targets, s, id = op->id, rel]() {
    for (auto& t : targets) {
      ev_barrier(event(EV_ARRIVE, nullptr, s, t.first, id), t.first, t.second, phase_now(t.first, t.second));
      bar_signal(t.first, t.second, 1, 0, 0, s, nullptr, "tcgen05.commit arrive", &rel);
    }
  });
}

void tc_ld_32x32b(unsigned taddr, unsigned* regs, int x, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  std::string err;
  const u32 col = taddr & 0xFFFF, lane0 = taddr >> 16;
  WarpColl& wc = gather("tcgen05.ld.32x32b", 0xFFFFFFFFu, s, [&](WarpColl& w, int l, bool last) {
    if (!last) {
      if (w.arrived == (1u << l)) {
        w.taddr = taddr, w.x = x, w.a0 = 0, w.tm_hazard = false;
        w.op = sync_op("tcgen05.ld", s, E->cur);
      } else if (w.taddr != taddr || w.x != x) {
        w.a0 = 1;   // lanes disagree on the address or the width
      }
      // every lane reads what it knows has been written (one report per tcgen05.ld)
      if (!w.tm_hazard && !tmem_read(c, 1u << (lane0 / 32 % 4), col, col + u32(x), Access{}, E->cur->tvc, E->cur, s,
                                     true))
        w.tm_hazard = true;
      return;
    }
    if (!w.ld_comp) w.ld_comp = new_comp(c->cluster);
    ++w.ld_issued;   // read until tcgen05.wait::ld of the warp (PTX ISA 9.7.16.8.5)
    tmem_read(c, 1u << (lane0 / 32 % 4), col, col + u32(x), Access{w.ld_comp, w.ld_issued, w.op, AK_LD}, E->cur->tvc,
              E->cur, s, false);
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
  if (wc.a0)
    misuse_fatal("tcgen05.ld.sync.aligned: the lanes of the warp give different addresses or widths (PTX ISA 9.7.16.8.3)",
                 s);
  if (wc.a1)
    misuse_fatal(err.empty() ? std::string("tcgen05.ld outside the TMEM allocation or lane quarter (PTX ISA 9.7.16.8.3)")
                             : err, s);
  if (f->lane == 0) event(EV_TMEM_LD, f, s).bytes = int32_t(32 * x * 4);
  Fiber::PendingLd p;
  p.regs = regs;
  p.vals.assign(wc.words.begin() + size_t(f->lane) * x, wc.words.begin() + size_t(f->lane + 1) * x);
  p.lane0 = lane0;
  p.col0 = col;
  p.ncols = u32(x);
  for (int i = 0; i < x; ++i) regs[i] = 0x7FBADBADu;   // not valid until tcgen05.wait::ld
  f->lds.push_back(std::move(p));
}

// PTX ISA 9.7.16.8.4 tcgen05.st: an asynchronous write of the warp's lane quarter, columns col .. col + x - 1;
// its completion is observed only by tcgen05.wait::st of the warp (9.7.16.8.5, 9.7.16.6.2.1.2), so the write is
// a TMEM shadow entry of the warp's tcgen05.st stream. Each lane's write must itself come after what it does
// not know complete in those columns (an MMA's D, a tcgen05.ld not yet waited for).
void tc_st_32x32b(unsigned taddr, const unsigned* regs, int x, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  std::string err;
  const u32 col = taddr & 0xFFFF, quarter = 1u << ((taddr >> 16) / 32 % 4);
  WarpColl& wc = gather("tcgen05.st.32x32b", 0xFFFFFFFFu, s, [&](WarpColl& w, int l, bool last) {
    if (!last) {
      if (w.arrived == (1u << l)) {
        w.taddr = taddr, w.x = x, w.a0 = 0, w.tm_hazard = false, w.words.assign(size_t(32) * x, 0);
        w.op = sync_op("tcgen05.st", s, E->cur);
      } else if (w.taddr != taddr || w.x != x) {
        w.a0 = 1;   // lanes disagree on the address or the width
      }
      if (!w.a0) std::memcpy(&w.words[size_t(l) * x], regs, size_t(x) * 4);
      if (!w.a0 && !w.tm_hazard &&
          !tmem_write(c, quarter, col, col + u32(x), Access{0, 0, w.op, AK_ST}, E->cur, s, true, false))
        w.tm_hazard = true;
      return;
    }
    if (w.a0) return;
    if (!w.st_comp) w.st_comp = new_comp(c->cluster);
    ++w.st_issued;   // written until tcgen05.wait::st of the warp
    tmem_write(c, quarter, col, col + u32(x), Access{w.st_comp, w.st_issued, w.op, AK_ST}, E->cur, s, false, true);
    w.a1 = 0;
    try {
      tmem_st_32x32b(umma_cta(c), f->warp, taddr, x, w.words.data());
    } catch (const ModelError& e) {
      err = e.what;
      w.a1 = 1;
    }
  });
  if (wc.a0)
    misuse_fatal("tcgen05.st.sync.aligned: the lanes of the warp give different addresses or widths (PTX ISA 9.7.16.8.4)",
                 s);
  if (wc.a1)
    misuse_fatal(err.empty() ? std::string("tcgen05.st outside the TMEM allocation or lane quarter (PTX ISA 9.7.16.8.4)")
                             : err, s);
  if (f->lane == 0) event(EV_TMEM_ST, f, s).bytes = int32_t(32 * x * 4);
}

void tc_wait_ld(Site s) {
  aligned_op("tcgen05.wait::ld", s);
  Fiber* f = E->cur;
  for (auto& p : f->lds) std::memcpy(p.regs, p.vals.data(), p.vals.size() * 4);
  f->lds.clear();
  const WarpColl& wc = f->cta->warps[size_t(f->warp)];
  set_max(f->vc, wc.ld_comp, wc.ld_issued);   // every earlier tcgen05.ld of the warp is complete
  set_max(f->tvc, wc.ld_comp, wc.ld_issued);  // and ordered before this thread's later tcgen05 ops (no fence
                                              // needed in one thread: PTX ISA 9.7.16.6.4.2, example 1)
}

void tc_wait_st(Site s) {
  aligned_op("tcgen05.wait::st", s);
  const WarpColl& wc = E->cur->cta->warps[size_t(E->cur->warp)];
  set_max(E->cur->vc, wc.st_comp, wc.st_issued);   // every earlier tcgen05.st of the warp is complete (9.7.16.8.5)
  set_max(E->cur->tvc, wc.st_comp, wc.st_issued);
}

// PTX ISA 9.7.16.11.1 tcgen05.fence: ::before_thread_sync orders the thread's prior asynchronous tcgen05 ops
// before its later synchronisation (what released() passes on: its warp's tcgen05.ld / st completions known
// now); ::after_thread_sync orders its later asynchronous tcgen05 ops after its prior synchronisation (its
// tcgen05 view becomes its clock). 9.7.16.6.3: they compose with mbarrier, bar.sync and barrier.cluster.
void tc_fence(bool before, Site s) {
  Fiber* f = E->cur;
  if (before) {
    const WarpColl& wc = f->cta->warps[size_t(f->warp)];
    f->rel_ld = at(f->vc, wc.ld_comp);
    f->rel_st = at(f->vc, wc.st_comp);
  } else {
    f->tvc = f->vc;
  }
  point(s);
}

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
  const Access acc = tc_access(f, oid, AK_CP);
  const u32 col = taddr & 0xFFFF;
  for (Cta* p : pair) {
    async_read(p, r.first, r.second, acc, f, s);
    tmem_write(p, 0xF, col, col + 4, acc, f, s);   // 32 rows x 128 bits, into each of the 4 lane quarters
    note_tc_remote(c, p);
  }
  event(EV_TMEM_CP, f, s, nullptr, oid).bytes = 32 * 16;   // 32 rows of 128 bits (copied to 4 lane quarters)
  submit(op, [pair, taddr, desc]() {
    for (Cta* p : pair) tmem_cp_32x128b_warpx4(umma_cta(p), taddr, desc);
  });
}

}  // namespace pe_sim
