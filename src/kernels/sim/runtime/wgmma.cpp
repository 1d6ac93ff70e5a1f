// wgmma (twin: common/wgmma.cuh; PTX ISA 9.7.15): an mma_async starts when all 128 threads of the
// warpgroup issued it; the warpgroup's ops complete in order (model/gmma.h on the CTA's shared memory).
#include "runtime/state.h"

namespace pe_sim {
// PTX ISA 9.7.15.7.1 wgmma.fence: orders the thread's prior accesses of its accumulator registers before a
// later wgmma.mma_async; required before the warpgroup's first wgmma.mma_async and between a register
// access and a wgmma.mma_async on the same registers (wgmma.mma_async of one shape into one accumulator are
// ordered without it). The simulator cannot see register accesses: it takes the accumulators as touched
// from the thread's start and whenever a wgmma.wait_group leaves none of its wgmma ops in flight (the
// registers are then the code's to read or reset), and fenced again by wgmma.fence (Fiber::wg_open).
void wgmma_fence(Site s) {
  aligned_op("wgmma.fence.sync.aligned", s);
  E->cur->wg_open = false;
}

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
  if (need == f->wg_issued) f->wg_open = true;   // nothing in flight: its accumulators are the code's again
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

void wgmma_f8(float* d, int n, uint64_t da, uint64_t db, unsigned scale_d, int type, Site s) {
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
  if (f->wg_open)
    race("wgmma-fence", fmt("wgmma.mma_async by thread %d of warpgroup %u with no wgmma.fence since %s (PTX ISA "
                            "9.7.15.7.1: wgmma.fence must order the accumulator registers' prior accesses before "
                            "a wgmma.mma_async that uses them, and precede the warpgroup's first one)", f->tid, wgi,
                            f->wg_marks.empty() && idx == 0 ? "the thread started"
                                                            : "a wgmma.wait_group left none of its wgmma ops in flight"),
         s, f);
  if (o->arrived == 0) {
    o->da = da;
    o->db = db;
    o->n = n;
    o->scale_d = scale_d;
    o->type = type;
    o->site = s;
  } else if (o->da != da || o->db != db || o->n != n || (o->scale_d != 0) != (scale_d != 0) || o->type != type) {
    misuse_fatal(fmt("wgmma.mma_async #%llu of the warpgroup: thread %d gives other operands than the threads before "
                     "it (descriptors, N, type or scale-d differ across the warpgroup; PTX ISA 9.7.15.5.2: .sync.aligned, one instruction "
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
      gmma_f8(c->win, c->dyn_off + c->dyn_size, 0, o->da, o->db, o->n, o->type, o->scale_d != 0, o->acc);
      event(EV_MMA_DONE, nullptr, s, c, id);
      wg.done++;
      wake_all(wg.waiters);
      delete o;
    }, false);   // the issuing thread's scheduling point follows
  }
  point(s);
}

// ---- the register pool (PTX ISA 9.7.20.9 setmaxnreg) ---------------------------------------------------
// "A pool of available registers is maintained per-CTA": .dec releases the warp's registers above the new
// count to it, .inc takes them from it and "blocks the execution until enough registers are available in
// the CTA's register pool"; every warp starts at the kernel's entry count. The ISA leaves open what an
// over-request does on a real SM and where else registers come from; pelib.measure.regpool_probe measures it
// (src/kernels/probes/regpool.cu). Measured on an H200 (2026-12-02): an .inc the pool covers returns in about
// 150 cycles; one it cannot cover never returns (the launch hangs), also after the warpgroup holding the
// registers exits, and also when the SM's registers the launch left unallocated would cover it. The one
// place to switch the model (all three false: what the H200 does):
constexpr bool REGPOOL_OVER_GRANTED = false;   // an .inc the pool cannot satisfy is granted anyway (no block)
constexpr bool REGPOOL_EXIT_RETURNS = false;   // a warp that exits gives its registers to its CTA's pool
constexpr bool REGPOOL_SM_SPARE = false;       // the SM's registers the launch left unallocated start the pool
constexpr u32 SM_REGS = 65536;                 // registers per SM, sm_90 / sm_100 (CUDA C++ Programming
                                               // Guide, technical specifications per compute capability)

namespace {
// The per-thread count every warp starts with: what ptxas gives a kernel of this block size under
// __launch_bounds__(T, 1), which setmaxnreg requires (the stages' own ENTRY_REGS: 65536 / T, to a multiple
// of 8, at most 256).
u32 entry_regs(const Cta* c) { return std::min<u32>(256, (SM_REGS / u32(std::max<size_t>(1, c->fibers.size()))) & ~7u); }

void regs_init(Cta* c) {
  if (!c->wregs.empty()) return;
  c->wregs.assign(c->warps.size(), entry_regs(c));
  c->wgen.assign(c->warps.size(), 0);
  c->reg_pool = REGPOOL_SM_SPARE ? int64_t(SM_REGS) - int64_t(entry_regs(c)) * int64_t(c->warps.size()) * WARP : 0;
}

void regs_warp_exit(Cta* c, int warp) {
  if (!REGPOOL_EXIT_RETURNS || c->wregs.empty()) return;
  c->reg_pool += int64_t(c->wregs[size_t(warp)]) * WARP;
  c->wregs[size_t(warp)] = 0;
  wake_all(c->reg_waiters);
}
}  // namespace

void setmaxnreg(bool inc, unsigned regs, Site s) {
  if (regs % 8 || regs < 24 || regs > 256)
    misuse_fatal(fmt("setmaxnreg %u: a multiple of 8 in 24..256 (PTX ISA 9.7.20.9)", regs), s);
  aligned_op("setmaxnreg.sync.aligned", s);
  Fiber* f = E->cur;
  Cta* c = f->cta;
  regs_init(c);
  const size_t w = size_t(f->warp);
  const u64 mine = f->nreg_done++;   // this lane's setmaxnreg count: the warp's request it takes part in
  // the warp asks once (whichever lane gets here first acts for it; the others wait for its grant)
  while (c->wgen[w] <= mine) {
    const u32 cur = c->wregs[w];
    if (inc ? regs < cur : regs > cur)
      misuse_fatal(fmt("setmaxnreg.%s %u by warp %d, whose count is %u: .inc raises the per-thread maximum from its "
                       "current value, .dec lowers it (PTX ISA 9.7.20.9)", inc ? "inc" : "dec", regs, f->warp, cur),
                   s);
    const int64_t need = (int64_t(regs) - int64_t(cur)) * WARP;   // < 0: released
    if (need <= c->reg_pool || REGPOOL_OVER_GRANTED) {
      c->reg_pool -= need;
      c->wregs[w] = regs;
      c->wgen[w]++;
      wake_all(c->reg_waiters);   // a .dec refills the pool; a grant releases the warp's other lanes
      break;
    }
    c->reg_waiters.push_back(f);
    WaitInfo wi;
    wi.kind = W_REGS;
    wi.site = s;
    static std::deque<std::string> texts;   // one per blocked request: the deadlock report reads it
    texts.push_back(fmt("setmaxnreg.inc %u: the warp holds %u registers a thread and needs %lld more registers, the CTA's "
               "pool has %lld (PTX ISA 9.7.20.9: .inc blocks until the pool has them; only a .dec of another "
               "warp refills it; on an H200 such a request never returns)", regs, cur, (long long)need, (long long)c->reg_pool));
    wi.what = texts.back().c_str();
    block(wi);
  }
  point(s);
}

}  // namespace pe_sim
