// Identity and thread synchronization (twin: common/cluster.cuh): cluster and CTA identity, cvta / mapa,
// warp collectives (__syncwarp, shfl.sync, elect.sync, any .sync.aligned instruction), named barriers
// (bar.sync / bar.arrive, __syncthreads) and the cluster barrier.
#include "runtime/state.h"

namespace pe_sim {
namespace {

// ---- warp collectives ----------------------------------------------------------------------------------
// Gather the calling lane into its warp's collective `what`; the last lane to arrive runs `fn` (with the
// warp's record) and wakes the others. Lanes must all execute the same collective (PTX ISA .sync.aligned).
template <class Fn>
WarpColl& gather(const char* what, u32 mask, Site s, Fn&& fn) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  WarpColl& wc = c->warps[f->warp];
  const u32 bit = 1u << f->lane;
  if (!(mask & bit)) misuse_fatal(fmt("%s: the calling lane %d is not in the member mask 0x%08x (PTX ISA 9.7.13.2: the executing "
                          "thread must be in membermask)", what, f->lane, mask), s);
  if (wc.arrived && wc.what != what)
    misuse_fatal(fmt("warp-collective mismatch: lane %d executes %s while lanes 0x%08x wait in %s at %s:%d (.sync.aligned: "
                     "every lane of the warp executes the same instruction)", f->lane,
                     what, wc.arrived, wc.what, short_file(wc.site.file), wc.site.line), s);
  if (!wc.arrived) {
    wc.what = what;
    wc.site = s;
  }
  wc.arrived |= bit;
  const u64 gen = wc.gen;
  fn(wc, f->lane, false);
  const u32 need = mask & wc.mask;
  if ((wc.arrived & need) == need) {
    fn(wc, f->lane, true);
    wc.arrived = 0;
    wc.what = nullptr;
    wc.gen++;
    wake_all(wc.waiters);
    point(s);
  } else {
    while (wc.gen == gen) {
      wc.waiters.push_back(f);
      WaitInfo w;
      w.kind = W_WARP;
      w.site = s;
      w.what = what;
      block(w);
    }
  }
  return wc;
}

}  // namespace



unsigned smem_addr(const void* p, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  uintptr_t a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(c->win);
  if (a < b || a >= b + c->win_size)
    misuse_fatal(fmt("cvta.to.shared of %p, which is not in this CTA's shared memory (PTX ISA 9.7.9.21: the result "
                     "is undefined for an address outside the shared window)", p), s);
  return cta_addr(c, u32(a - b));
}

unsigned cluster_ctarank() { return unsigned(E->cur->cta->rank); }
unsigned cluster_nctarank() { return unsigned(E->cur->cta->cluster->ctas.size()); }
unsigned cluster_id_x() { return unsigned(E->cur->cta->cluster->id); }
unsigned cluster_nclusterid_x() { return unsigned(E->clusters.size()); }
unsigned sm_id() { return unsigned(E->cur->cta->slot - E->slots.data()); }

unsigned mapa(unsigned addr, unsigned rank, Site s) {
  Cta* me = E->cur->cta;
  if (rank >= me->cluster->ctas.size())
    misuse_fatal(fmt("mapa to CTA rank %u: the cluster has %zu CTAs (PTX ISA 9.7.9.22)", rank, me->cluster->ctas.size()),
                 s);
  return (rank << 24) | (addr & 0xFFFFFFu);
}

void yield(Site s) { point(s); }

namespace {
// A named barrier's generation completes: its waiters learn what every arrival knew (PTX ISA 9.7.13.1:
// bar.arrive releases, bar.sync / bar.red wait and acquire).
void named_bar_complete(NamedBar& nb) {
  nb.arrived = 0;
  nb.gen++;
  for (Fiber* g : nb.waiters) join(g->vc, nb.acc);
  nb.acc.clear();
  wake_all(nb.waiters);
}

// The cluster barrier's generation completes (PTX ISA 9.7.13.4: arrive.release, wait.acquire).
void cluster_bar_complete(Cluster* cl) {
  cl->bar_arrived = 0;
  cl->bar_gen++;
  cl->bar_done = cl->bar_acc;
  cl->bar_acc.clear();
  wake_all(cl->bar_waiters);
}
}  // namespace

void syncthreads(Site s) { named_bar(0, 0, true, s); }

void named_bar(unsigned id, unsigned count, bool wait, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  if (id > 15) misuse_fatal(fmt("bar.sync %u: named barriers are 0..15 (PTX ISA 9.7.13.1)", id), s);
  const bool all = count == 0;   // __syncthreads / bar.sync 0 without a count: every live thread
  if (!all && (count % 32 || count == 0))
    misuse_fatal(fmt("bar.sync %u, %u: the thread count must be a non-zero multiple of 32 (PTX ISA 9.7.13.1)", id,
                     count), s);
  NamedBar& nb = c->nbar[id];
  const u32 need = all ? u32(c->live) : count;
  if (nb.arrived && nb.count != need && !all)
    misuse_fatal(fmt("named barrier %u used with thread count %u while %u threads wait with count %u (PTX ISA 9.7.13.1: "
                     "every use of a barrier in one phase gives the same count)", id, count,
                     nb.arrived, nb.count), s);
  nb.count = need;
  nb.arrived++;
  join_released(nb.acc, f);
  tick(f);
  event(EV_BAR_SYNC, f, s).tag = int32_t(id);   // the named barrier's id
  const u64 gen = nb.gen;
  if (nb.arrived >= need) {
    if (wait) join(f->vc, nb.acc);
    named_bar_complete(nb);
    point(s);
    return;
  }
  if (!wait) {
    point(s);
    return;
  }
  while (nb.gen == gen) {
    nb.waiters.push_back(f);
    WaitInfo w;
    w.kind = W_NAMED_BAR;
    w.addr = id;
    w.site = s;
    block(w);
  }
}

void syncwarp(unsigned mask, Site s) {
  // bar.warp.sync orders the memory accesses of the lanes that take part (PTX ISA 9.7.13.2)
  gather("__syncwarp", mask, s, [](WarpColl& w, int, bool last) {
    join_released(w.acc, E->cur);
    tick(E->cur);
    if (!last) return;
    for (Fiber* g : w.waiters) join(g->vc, w.acc);
    join(E->cur->vc, w.acc);
    w.acc.clear();
  });
}

unsigned shfl_xor(unsigned mask, unsigned v, int lane_mask, int width, Site s) {
  Fiber* f = E->cur;
  const int lane = f->lane;
  WarpColl& wc = gather("shfl.sync.bfly", mask, s, [&](WarpColl& w, int l, bool last) {
    if (!last) {
      w.vals[l] = v;
      return;
    }
    for (int i = 0; i < WARP; ++i) {
      int src = i ^ lane_mask;
      if (width < 32) src = (i & ~(width - 1)) | (src & (width - 1));
      w.res[i] = (w.mask >> src & 1) ? w.vals[src] : w.vals[i];
    }
  });
  return wc.res[lane];
}

bool elect_one(unsigned mask, Site s) {
  Fiber* f = E->cur;
  const int lane = f->lane;
  WarpColl& wc = gather("elect.sync", mask, s, [&](WarpColl& w, int, bool last) {
    if (!last) return;
    u32 m = mask & w.mask;
    int leader = m ? __builtin_ctz(m) : 0;
    for (int i = 0; i < WARP; ++i) w.res[i] = i == leader;
  });
  return wc.res[lane] != 0;
}

void aligned_op(const char* what, Site s) { gather(what, 0xFFFFFFFFu, s, [](WarpColl&, int, bool) {}); }

void cluster_barrier_arrive(bool, Site s) {
  Fiber* f = E->cur;
  Cluster* cl = f->cta->cluster;
  if (f->cluster_arrived)
    misuse_fatal("barrier.cluster.arrive twice without barrier.cluster.wait in between (PTX ISA 9.7.13.4)", s);
  f->cluster_arrived = true;
  f->cluster_arrive_gen = cl->bar_gen;
  cl->bar_arrived++;
  join_released(cl->bar_acc, f);
  tick(f);
  event(EV_CLUSTER_SYNC, f, s);
  if (cl->bar_arrived >= u32(cl->live_threads)) cluster_bar_complete(cl);
  point(s);
}

void cluster_barrier_wait(Site s) {
  Fiber* f = E->cur;
  Cluster* cl = f->cta->cluster;
  if (!f->cluster_arrived)
    misuse_fatal("barrier.cluster.wait without a barrier.cluster.arrive before it (PTX ISA 9.7.13.4)", s);
  while (cl->bar_gen == f->cluster_arrive_gen) {
    cl->bar_waiters.push_back(f);
    WaitInfo w;
    w.kind = W_CLUSTER;
    w.site = s;
    block(w);
  }
  f->cluster_arrived = false;
  join(f->vc, cl->bar_done);
  point(s);
}

}  // namespace pe_sim
