// wgmma (twin: common/wgmma.cuh; PTX ISA 9.7.15): an mma_async starts when all 128 threads of the
// warpgroup issued it; the warpgroup's ops complete in order (model/gmma.h on the CTA's shared memory).
#include "runtime/state.h"

namespace pe_sim {
void wgmma_fence(Site s) { aligned_op("wgmma.fence.sync.aligned", s); }

void wgmma_commit(Site s) {
  aligned_op("wgmma.commit_group.sync.aligned", s);
  Fiber* f = E->cur;
  f->wg_marks.push_back(f->wg_issued);
}

void wgmma_wait(int n, Site s) {
  aligned_op("wgmma.wait_group.sync.aligned", s);
  Fiber* f = E->cur;
  WarpGroup& wg = f->cta->wgs[f->tid / 128];
  const int64_t g = int64_t(f->wg_marks.size()) - n;
  if (g <= 0) return;
  const u64 need = f->wg_marks[size_t(g - 1)];
  while (wg.done < need) {
    wg.waiters.push_back(f);
    WaitInfo w;
    w.kind = W_WGMMA;
    w.site = s;
    w.what = "the warpgroup's earlier wgmma groups have not completed (a wgmma issued by only some of the "
             "warpgroup's 4 warps never starts)";
    block(w);
  }
  set_max(f->vc, wg.comp, u32(need));   // this thread knows its first `need` wgmma ops are complete
}

namespace {
// The shared bytes a K-major operand occupies (its bounding range, whole 128-B rows).
std::pair<u32, u32> operand_range(const SmemDescFields& fd, u32 rows, u32 kbytes) {
  u32 lo = ~0u, hi = 0;
  for (u32 r = 0; r < rows; ++r)
    for (u32 c : {0u, kbytes - 1}) {
      u32 a = kmajor_addr(fd, r, c);
      lo = std::min(lo, a);
      hi = std::max(hi, a);
    }
  return {lo & ~127u, (hi | 127u) + 1};
}
}  // namespace

void wgmma_e4m3(float* d, int n, uint64_t da, uint64_t db, unsigned scale_d, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  const u32 wgi = u32(f->tid / 128);
  WarpGroup& wg = c->wgs[wgi];
  const u64 idx = f->wg_issued++;
  while (wg.base + wg.forming.size() <= idx) {
    WgOp* o = new WgOp();
    o->index = wg.base + wg.forming.size();
    wg.forming.push_back(o);
  }
  WgOp* o = wg.forming[size_t(idx - wg.base)];
  if (o->arrived == 0) {
    o->da = da;
    o->db = db;
    o->n = n;
    o->scale_d = scale_d;
    o->site = s;
  } else if (o->da != da || o->db != db || o->n != n || (o->scale_d != 0) != (scale_d != 0)) {
    misuse_fatal(fmt("wgmma.mma_async #%llu of the warpgroup: thread %d gives other operands than the threads before "
                     "it (descriptors, N or scale-d differ across the warpgroup; PTX ISA 9.7.15.5.2: .sync.aligned, one instruction "
                     "of the whole warpgroup)", (unsigned long long)idx, f->tid), s);
  }
  o->acc[f->tid % 128] = d;
  o->arrived++;
  u32 nthreads = std::min<u32>(128, u32(c->fibers.size()) - wgi * 128);
  if (o->arrived == int(nthreads)) {
    // the whole warpgroup issued it: the tensor core starts (in order per warpgroup)
    while (!wg.forming.empty() && wg.forming.front()->arrived == int(nthreads) && wg.forming.front() == o) {
      wg.forming.pop_front();
      wg.base++;
    }
    SmemDescFields fa = decode_gmma_desc(o->da), fb = decode_gmma_desc(o->db);
    auto ra = operand_range(fa, 64, 32), rb = operand_range(fb, u32(o->n), 32);
    Op* op = new_op("wgmma.mma_async", (3ull << 60) | (u64(c->id) << 8) | wgi, s);
    op->touches.push_back(c);
    const u64 id = op->id;
    if (!wg.comp) wg.comp = new_comp(c->cluster);
    // its operands are read until a wgmma.wait_group of the issuing threads covers it (PTX ISA 9.7.15.6.3);
    // the last thread of the warpgroup to issue it stands for the warpgroup
    for (auto r : {ra, rb})
      async_read(c, r.first, r.second, Access{wg.comp, u32(o->index) + 1, u32(id), AK_WGMMA}, f, s);
    event(EV_MMA, f, s, nullptr, id);
    submit(op, [o, c, id, &wg, s]() {
      gmma_e4m3(c->win, c->dyn_off + c->dyn_size, 0, o->da, o->db, o->n, o->scale_d != 0, o->acc);
      event(EV_MMA_DONE, nullptr, s, c, id);
      wg.done++;
      wake_all(wg.waiters);
      delete o;
    }, false);   // the issuing thread's scheduling point follows
  }
  point(s);
}

void setmaxnreg(bool, unsigned regs, Site s) {
  if (regs % 8 || regs < 24 || regs > 256)
    misuse_fatal(fmt("setmaxnreg %u: a multiple of 8 in 24..256 (PTX ISA 9.7.20.9)", regs), s);
  aligned_op("setmaxnreg.sync.aligned", s);
}

}  // namespace pe_sim
