// The simulator engine's core: the seeded scheduler of fibers (one per CUDA thread), shared-memory
// addressing, the queue of asynchronous operations (completed at scheduling points the seed picks, or as late
// / as early as allowed: the lazy and eager schedules), the launch of clusters into CTA slots, and each
// thread's and CTA's exit checks. State: runtime/state.h.
#include "runtime/state.h"

namespace pe_sim {

ThreadPub* g_pub = nullptr;

namespace {

void cta_exit_check(Cta* c);
void start_clusters();

// ---- scheduling ---------------------------------------------------------------------------------------
void make_ready(Fiber* f) {
  if (f->state == FS::Ready || f->state == FS::Done) return;
  f->state = FS::Ready;
  f->ready_pos = int(E->ready.size());
  E->ready.push_back(f);
}

void unready(Fiber* f) {
  if (f->state != FS::Ready) return;
  int p = f->ready_pos;
  Fiber* last = E->ready.back();
  E->ready[p] = last;
  last->ready_pos = p;
  E->ready.pop_back();
  f->ready_pos = -1;
}

void to_scheduler() {
  Fiber* f = E->cur;
  fiber_switch(&f->ctx, &E->sched);
  // resumed
  g_pub = &f->pub;
}

// A scheduling point: maybe let another fiber or an async op go first.
void point(Site s) {
  Fiber* f = E->cur;
  f->site = s;
  f->spin = 0;
  E->beats++;
  if (E->aborted) abort_fiber();
  if (E->chance(E->p_yield)) to_scheduler();
  if (E->aborted) abort_fiber();
}

// Block the current fiber until woken (the caller re-checks its condition in a loop).
void block(const WaitInfo& w) {
  Fiber* f = E->cur;
  f->w = w;
  f->site = w.site;
  f->spin = 0;
  unready(f);
  f->state = FS::Blocked;
  to_scheduler();
  if (E->aborted) abort_fiber();
}

void wake_all(std::vector<Fiber*>& v) {
  for (Fiber* f : v) make_ready(f);
  v.clear();
}

[[noreturn]] void abort_fiber() {
  Fiber* f = E->cur;
  unready(f);
  f->state = FS::Done;
  fiber_switch(&f->ctx, &E->sched);
  __builtin_unreachable();
}

// ---- shared memory addressing --------------------------------------------------------------------------
Cta* cta_of_rank(Cta* me, u32 rank, Site s) {
  auto& v = me->cluster->ctas;
  if (rank >= v.size()) {
    misuse_fatal(fmt("shared::cluster address names CTA rank %u, but the cluster has %zu CTAs (PTX ISA 9.7.9.22 mapa: "
                     "a rank of the cluster)", rank, v.size()), s);
  }
  return v[rank];
}

// A peer's tcgen05 operation on CTA c (its TMEM, shared memory or barriers), for the teardown check.
void note_tc_remote(Cta* from, Cta* c) {
  if (from == c) return;
  if (c->tc_from.size() < c->cluster->ctas.size()) c->tc_from.resize(c->cluster->ctas.size(), 0);
  c->tc_from[size_t(from->rank)] = c->cluster->bar_gen + 1;
}

// A shared (::cta or ::cluster) address -> (CTA, window offset), checked against the window.

bool in_window(const Cta* c, u32 off, u32 n) {
  const u32 dyn_end = c->dyn_off + c->dyn_size;
  if (off >= c->dyn_off && u64(off) + n <= dyn_end) return true;                          // dynamic
  if (u64(off) + n <= c->dyn_off) return true;                                            // static, before
  if (off >= c->dyn_off + PE_SIM_SMEM_CAPACITY && u64(off) + n <= c->win_size) return true;  // static, after
  return false;
}

SAddr resolve(u32 addr, u32 n, Site s, const char* what) {
  Cta* me = E->cur->cta;
  Cta* c = cta_of_rank(me, (addr >> 24) & 0xFF, s);
  u32 off = addr & 0xFFFFFFu;
  if (!in_window(c, off, n))
    misuse_fatal(fmt("%s at shared address 0x%x (%u B) is outside CTA %d's shared memory (%u B dynamic at "
                     "offset 0x%x): a wrong offset or too little dynamic shared memory (PTX ISA, State Spaces, shared: a "
                     "CTA owns only its allocation)",
                     what, addr, n, c->id, c->dyn_size, c->dyn_off), s);
  return {c, off};
}

u32 cta_addr(const Cta* c, u32 off) { return (u32(c->rank) << 24) | off; }

// ---- async operation queue -------------------------------------------------------------------------------
// An asynchronous operation of `what`, numbered in issue order; ops of one chain complete in order, the
// chains in any order the seed picks. The caller adds the CTAs it touches, then submit()s it.
Op* new_op(const char* what, u64 chain, Site s) {
  Op* op = new Op();
  op->id = ++E->op_seq;
  op->chain = chain;
  op->what = what;
  op->site = s;
  op_info(what, s, E->cur, op->id);
  return op;
}

// Queue `op` with what its completion does, then a scheduling point of the issuing thread.
void submit(Op* op, std::function<void()> complete, bool sched_point) {
  op->complete = std::move(complete);
  Fiber* f = E->cur;
  op->issuer = f;
  if (f) {
    op->issuer_cta = f->cta->id;
    op->issuer_warp = f->warp;
    op->issuer_lane = f->lane;
  }
  for (Cta* c : op->touches) c->pending_ops++;
  auto& q = E->chains[op->chain];
  if (q.empty()) E->active_chains.push_back(op->chain);
  q.push_back(op);
  E->ops_pending++;
  if (sched_point) point(op->site);
}

void complete_one_op() {
  u32 i = E->rnd(u32(E->active_chains.size()));
  u64 ch = E->active_chains[i];
  auto& q = E->chains[ch];
  Op* op = q.front();
  q.pop_front();
  if (q.empty()) {
    E->active_chains[i] = E->active_chains.back();
    E->active_chains.pop_back();
    E->chains.erase(ch);
  }
  E->ops_pending--;
  E->ops_done++;
  Fiber* saved = E->cur;
  E->cur = nullptr;
  try {
    op->complete();
  } catch (const ModelError& e) {
    add_record(E->rep.misuse, E->rep.misuse_total,
               record(e.what + fmt(" — %s issued by CTA %d warp %d lane %d at %s:%d", op->what, op->issuer_cta,
                                   op->issuer_warp, op->issuer_lane, short_file(op->site.file), op->site.line),
                      op->issuer, op->site));
    E->aborted = true;
  }
  E->cur = saved;
  for (Cta* c : op->touches) c->pending_ops--;
  delete op;
}

// ---- the fiber body ----------------------------------------------------------------------------------
void fiber_main(void* arg) {
  Fiber* f = static_cast<Fiber*>(arg);
  g_pub = &f->pub;
  try {
    f->cta->slot->entry(E->L.args);
  } catch (const ModelError& e) {
    misuse(e.what, f->site, f);
  } catch (...) {   // a C++ exception the kernel's own code threw: it would otherwise end the host process
    misuse("a C++ exception left the kernel (a GPU kernel has none: the host build's code threw it; the thread is "
           "stopped and the host process goes on)", f->site, f);
  }
  // exit checks: what the thread issued and never waited for (by what it knows, not by what completed)
  Site s = f->site;
  if (!f->lds.empty())
    misuse("thread exits with a tcgen05.ld whose registers it never waited for (PTX ISA 9.7.16.8.5: the "
           "destination registers are valid only after tcgen05.wait::ld)", s, f);
  bool bulk_left = !f->bulk_stores.empty();
  for (auto& g : f->bulk_pending) bulk_left |= g.second > 0;
  if (bulk_left)
    misuse("thread exits with bulk copies (TMA stores) not waited for (PTX ISA 9.7.9.26: the source shared memory "
           "may be read until cp.async.bulk.wait_group.read; it is freed when the CTA exits): "
           "cp.async.bulk.commit_group and cp.async.bulk.wait_group before exit", s, f);
  {
    WarpGroup& wg = f->cta->wgs[f->tid / 128];
    if (at(f->vc, wg.comp) < f->wg_issued)
      misuse("thread exits with wgmma.mma_async not waited for (PTX ISA 9.7.15.6.3: the accumulator registers "
             "and the shared operands are in use until wgmma.wait_group; wgmma.wait_group 0 before exit)", s, f);
  }
  event(EV_EXIT, f, s);
  unready(f);
  f->state = FS::Done;
  E->live_fibers--;
  Cta* c = f->cta;
  c->live--;
  c->cluster->live_threads--;
  // Exited threads count as arrived at __syncthreads, __syncwarp and the cluster barrier.
  {
    NamedBar& nb = c->nbar[0];
    if (nb.arrived && nb.arrived >= u32(c->live)) named_bar_complete(nb);
    Cluster* cl = c->cluster;
    if (cl->bar_arrived && cl->bar_arrived >= u32(cl->live_threads)) cluster_bar_complete(cl);
    WarpColl& wc = c->warps[f->warp];
    wc.mask &= ~(1u << f->lane);
    if (!wc.mask) regs_warp_exit(c, f->warp);   // the register pool (wgmma.cpp)
    if (wc.what && wc.arrived) {
      misuse(fmt("lane %d exited while lanes 0x%08x of its warp wait in %s at %s:%d (a warp collective needs "
                 "every lane of its mask: PTX ISA 9.7.13.2 / .sync.aligned)", f->lane, wc.arrived, wc.what,
                 short_file(wc.site.file), wc.site.line),
             s, f);
    }
  }
  if (c->live == 0) cta_exit_check(c);
  fiber_switch(&f->ctx, &E->sched);
  __builtin_unreachable();
}

void cta_exit_check(Cta* c) {
  tma_exit_check(c);   // TMA loads nobody observed or read (tma.cpp)
  Site s{"(CTA exit)", 0};
  if (!c->allocs.empty())
    misuse(fmt("CTA %d exits with %zu TMEM allocation(s) still held (%u columns at %u): PTX ISA 9.7.16.7.1, all "
               "TMEM a CTA allocated must be freed with tcgen05.dealloc before it exits",
               c->id, c->allocs.size(), c->allocs[0].ncols, c->allocs[0].col0), s, c->fibers[0]);
  if (c->pending_ops)
    misuse(fmt("CTA %d exits with %d asynchronous operation(s) still in flight on its shared memory, TMEM or "
               "barriers (its shared memory is gone once it exits: CUDA C++ Programming Guide, distributed shared "
               "memory, all accesses must complete before the block exits; wait for them, or keep the cluster "
               "together until its peers are done)", c->id, c->pending_ops), s, c->fibers[0]);
  for (auto& [off, b] : c->bars)
    if (b.init && b.tx != 0)   // legal: nothing in the PTX ISA asks a phase to complete before exit
      warning(fmt("CTA %d exits with its mbarrier at 0x%x holding a tx-count of %lld B%s (%s): armed for bytes that "
                  "never arrived here; harmless unless someone waits on that phase", c->id, off, (long long)b.tx,
                  b.waited ? "" : ", a barrier no thread of it ever waited on", bar_state(b).c_str()), s, c->fibers[0]);
  for (Cta* p : c->cluster->ctas) {
    if (p == c || p->live == 0) continue;
    for (auto& [off, b] : c->bars)
      if (b.init && b.pending != int64_t(b.count) && b.count > 1) {
        misuse(fmt("CTA %d exits while peer CTA %d still runs and its mbarrier at 0x%x is mid-phase (%lld of %u "
                   "arrivals missing): a peer may still arrive on it, in shared memory that is gone (CUDA C++ "
                   "Programming Guide, distributed shared memory; wait for its last phase, the producer tail, or "
                   "cluster_sync before exit)", c->id, p->id, off, (long long)b.pending, b.count), s,
               c->fibers[0]);
        break;
      }
    for (auto& [off, b] : c->bars)
      if (b.init && b.remote_gen == c->cluster->bar_gen + 1 && b.phase > b.observed) {
        misuse(fmt("CTA %d exits while peer CTA %d still runs: its mbarrier at 0x%x took arrivals from peers since "
                   "the last cluster barrier and its last completed phase was never waited for here, so nothing "
                   "shows the peers are done with it (CUDA C++ Programming Guide, distributed shared memory: a "
                   "block's shared memory must outlive every access to it; wait for the last phase, the producer "
                   "tail, or cluster_sync before exit)", c->id, p->id, off), s, c->fibers[0]);
        break;
      }
    if (size_t(p->rank) < c->tc_from.size() && c->tc_from[size_t(p->rank)] == c->cluster->bar_gen + 1)
      misuse(fmt("CTA %d exits while peer CTA %d, which issued tcgen05 operations on it since the last cluster "
                 "barrier, still runs (PTX ISA 9.7.16: a cta_group::2 pair shares TMEM and barriers, so it leaves "
                 "together: cluster_sync before exit)", c->id, p->id),
             s, c->fibers[0]);
  }
  c->exited = true;
  bool all = true;
  for (Cta* p : c->cluster->ctas) all &= p->exited;
  if (all) {   // the scheduler recycles the cluster's stacks and slots once no fiber runs on them
    E->finished.push_back(c->cluster);
  }
}

uint8_t* alloc_stack(size_t n) {
  if (!E->stacks_free.empty()) {
    uint8_t* p = E->stacks_free.back();
    E->stacks_free.pop_back();
    return p;
  }
  void* p = mmap(nullptr, n + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  mprotect(p, 4096, PROT_NONE);   // guard page below the stack
  return static_cast<uint8_t*>(p) + 4096;
}

void start_cta(Cta* c, Slot* sl) {
  c->slot = sl;
  sl->cta = c;
  c->win = sl->win;
  c->win_size = sl->win_size;
  c->dyn_off = sl->dyn_off;
  c->dyn_size = E->L.smem;
  // shared memory starts as garbage on hardware: poison it so a read before a write shows
  std::memset(c->win, 0xA5, c->win_size);
  c->sh.assign(c->win_size / 16 + 1, SChunk{});
  c->gw.assign(c->win_size / 4 + 1, GWord{});
  const u32 nthreads = E->L.block[0] * E->L.block[1] * E->L.block[2];
  c->warps.assign((nthreads + WARP - 1) / WARP, WarpColl{});
  c->warp_roles.assign(c->warps.size(), 0);
  c->wgs.assign((nthreads + 127) / 128, WarpGroup{});
  for (u32 w = 0; w < c->warps.size(); ++w) {
    u32 n = std::min<u32>(WARP, nthreads - w * WARP);
    c->warps[w].mask = n == 32 ? 0xFFFFFFFFu : ((1u << n) - 1);
  }
  for (u32 t = 0; t < nthreads; ++t) {
    Fiber* f = new Fiber();
    f->cta = c;
    f->tid = int(t);
    f->warp = int(t / WARP);
    f->lane = int(t % WARP);
    f->id = int(E->fibers_all.size());
    f->pub.threadIdx = Dim3{t % E->L.block[0], (t / E->L.block[0]) % E->L.block[1], t / (E->L.block[0] * E->L.block[1])};
    f->pub.blockIdx = c->idx;
    f->pub.blockDim = Dim3{E->L.block[0], E->L.block[1], E->L.block[2]};
    f->pub.gridDim = Dim3{E->L.grid[0], E->L.grid[1], E->L.grid[2]};
    f->stack_size = E->L.stack_bytes;
    f->stack = alloc_stack(f->stack_size);
    fiber_make(&f->ctx, f->stack, f->stack_size, fiber_main, f);
    c->fibers.push_back(f);
    E->fibers_all.push_back(f);
    make_ready(f);
    E->live_fibers++;
  }
  c->live = int(nthreads);
  c->cluster->live_threads += int(nthreads);
  c->started = true;
}

void start_clusters() {
  while (!E->pending_clusters.empty()) {
    Cluster& cl = E->clusters[E->pending_clusters.front()];
    std::vector<Slot*> free;
    for (Slot& s : E->slots)
      if (!s.cta) free.push_back(&s);
    if (free.size() < cl.ctas.size()) return;
    E->pending_clusters.pop_front();
    for (size_t i = 0; i < cl.ctas.size(); ++i) start_cta(cl.ctas[i], free[i]);
  }
}

void recycle() {
  for (Cluster* cl : E->finished)
    for (Cta* p : cl->ctas) {
      p->slot->cta = nullptr;
      std::vector<SChunk>().swap(p->sh);   // the happens-before shadows of a finished CTA
      std::vector<GWord>().swap(p->gw);
      std::vector<TCell>().swap(p->tsh);
      for (Fiber* f : p->fibers) {
        E->stacks_free.push_back(f->stack);
        f->stack = nullptr;
      }
    }
  E->finished.clear();
  start_clusters();
}

void run_loop() {
  start_clusters();
  while (!E->aborted) {
    if (!E->finished.empty()) recycle();
    if (E->ready.empty() && E->ops_pending == 0) {
      if (E->live_fibers > 0 || !E->pending_clusters.empty()) deadlock_report();
      break;
    }
    E->steps++;
    if (E->L.max_steps && E->steps > E->L.max_steps) {
      no_progress_report();
      break;
    }
    if (E->ops_pending && (E->ready.empty() || E->chance(E->p_async))) {
      complete_one_op();
      continue;
    }
    Fiber* f = E->ready[E->rnd(u32(E->ready.size()))];
    E->cur = f;
    g_pub = &f->pub;
    f->cta->clock += 1;
    E->switches++;
    fiber_switch(&E->sched, &f->ctx);
    E->cur = nullptr;
  }
}

// A launch: the engine of this run (the previous run's is freed here), its CTA slots and clusters, then the
// scheduler until every thread exited, a report stopped it, or nothing can run.
void run_launch(const PeSimLaunch* L) {
  static Engine* last = nullptr;
  if (last) {
    for (Fiber* f : last->fibers_all) delete f;
    for (uint8_t* st : last->stacks_free) munmap(st - 4096, last->L.stack_bytes + 4096);
    delete last;
  }
  E = last = new Engine();
  E->L = *L;
  E->rng.seed(L->seed * 0x9E3779B97F4A7C15ull + 12345);
  E->p_async = 10 + int(E->rng() % 50);
  E->p_yield = 20 + int(E->rng() % 70);
  if (L->schedule == 1) E->p_async = 0;                    // lazy: an op completes only when no thread can run
  if (L->schedule == 2) E->p_async = E->p_yield = 100;     // eager: every op completes at the next point
  E->tensors.assign(L->ranges, L->ranges + std::max(0, L->nranges));
  std::sort(E->tensors.begin(), E->tensors.end(), [](const PeSimRange& a, const PeSimRange& b) { return a.base < b.base; });
  E->gload.assign(E->tensors.size(), 0);
  E->gstore.assign(E->tensors.size(), 0);
  E->gprefetch.assign(E->tensors.size(), 0);
  E->code = loaded_segments();
  E->slots.resize(size_t(L->nslots));
  for (int i = 0; i < L->nslots; ++i) {
    Slot& s = E->slots[size_t(i)];
    s.entry = reinterpret_cast<void (*)(void**)>(L->entries[i]);
    s.window = reinterpret_cast<void (*)(void**, uint64_t*, uint64_t*)>(L->windows[i]);
    void* base;
    uint64_t size, dyn;
    s.window(&base, &size, &dyn);
    s.win = static_cast<uint8_t*>(base);
    s.win_size = u32(size);
    s.dyn_off = u32(dyn);
  }
  // counted in 64 bits: 2^32 CTAs must not wrap to none; the engine numbers CTAs with an int
  const u64 cx64 = u64(L->cluster[0]) * L->cluster[1] * L->cluster[2];
  const u64 nctas64 = u64(L->grid[0]) * L->grid[1] * L->grid[2];
  const u64 nthreads64 = u64(L->block[0]) * L->block[1] * L->block[2];
  Site s0{"(launch)", 0};
  std::string bad;
  if (cx64 == 0 || nctas64 == 0 || nthreads64 == 0 || nctas64 > u64(PE_SIM_MAX_CTAS) || cx64 > nctas64) {
    bad = fmt("a grid of %llu CTAs (cluster %llu, block %llu threads) is outside what the engine counts (1 to %llu "
              "CTAs; pelib.sim.engine.prepare estimates a launch and refuses a larger one first)",
              (unsigned long long)nctas64, (unsigned long long)cx64, (unsigned long long)nthreads64,
              (unsigned long long)PE_SIM_MAX_CTAS);
    add_record(E->rep.misuse, E->rep.misuse_total, record(bad + " (launch)", nullptr, s0));
    return;
  }
  const u32 cx = u32(cx64);
  const u32 nctas = u32(nctas64);
  E->ctas.resize(nctas);
  E->clusters.resize(nctas / cx);
  if (nctas % cx) bad = "the grid is not a whole number of clusters";
  if (cx > u32(L->nslots)) bad = "fewer CTA slots than CTAs in a cluster";
  if (!E->slots.empty() && L->smem + (E->slots[0].win_size - PE_SIM_SMEM_CAPACITY) > L->smem_limit)
    bad = fmt("the launch asks for %u B of dynamic shared memory plus %u B static, over the %u B per-block limit",
              L->smem, E->slots[0].win_size - PE_SIM_SMEM_CAPACITY, L->smem_limit);
  if (L->smem > PE_SIM_SMEM_CAPACITY) bad = fmt("dynamic shared memory %u B exceeds the simulator's window", L->smem);
  if (!bad.empty()) {
    add_record(E->rep.misuse, E->rep.misuse_total, record(bad + " (launch)", nullptr, s0));
  } else {
    for (u32 i = 0; i < nctas; ++i) {
      Cta& c = E->ctas[i];
      c.id = int(i);
      c.idx = Dim3{i % L->grid[0], (i / L->grid[0]) % L->grid[1], i / (L->grid[0] * L->grid[1])};
      // clusters tile the grid along x first (cluster dims (cx, 1, 1) in every stage)
      u32 k = i / cx;
      c.rank = int(i % cx);
      c.cluster = &E->clusters[k];
      E->clusters[k].id = int(k);
      E->clusters[k].ctas.push_back(&c);
    }
    for (u32 k = 0; k < E->clusters.size(); ++k) E->pending_clusters.push_back(int(k));
    faults_on();
    run_loop();
    faults_off();
  }
  // recycle stacks
  for (Fiber* f : E->fibers_all)
    if (f->stack) E->stacks_free.push_back(f->stack);
}

}  // namespace
}  // namespace pe_sim
