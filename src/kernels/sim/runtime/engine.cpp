// The simulator engine: fibers for CUDA threads, a seeded random scheduler, shared memory windows,
// mbarriers, named and cluster barriers, warp collectives, the asynchronous units (TMA, wgmma, tcgen05,
// bulk stores) as a queue of operations completed at scheduling points the seed chooses, and the reports
// (deadlock, hazard, misuse) with the event log. The data paths are the pure models of ../model/.
//
// C ABI for pelib.sim (ctypes): pe_sim_run(launch) -> status; pe_sim_report_json() -> the report;
// pe_sim_events(&n) -> the event records (struct PeSimEvent below).
#include <sys/mman.h>

#define PE_SIM_ENGINE 1

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/error.h"
#include "model/gmma.h"
#include "model/tensormap.h"
#include "model/tma_box.h"
#include "model/umma.h"
#include "runtime/api.h"
#include "runtime/fiber.h"

namespace pe_sim {

ThreadPub* g_pub = nullptr;

namespace {

// ---- event log ---------------------------------------------------------------------------------------
enum EvKind : int32_t {
  EV_WAIT_BEGIN, EV_WAIT_END, EV_ARRIVE, EV_EXPECT_TX, EV_COMPLETE_TX, EV_TMA_LOAD, EV_TMA_LOAD_DONE,
  EV_TMA_STORE, EV_TMA_STORE_DONE, EV_MMA, EV_MMA_DONE, EV_COMMIT, EV_TMEM_ALLOC, EV_TMEM_DEALLOC, EV_TMEM_LD,
  EV_TMEM_CP, EV_BAR_SYNC, EV_CLUSTER_SYNC, EV_EXIT
};

}  // namespace
}  // namespace pe_sim

// One record of the event log (pelib.sim reads this layout; keep both in step).
struct PeSimEvent {
  uint64_t seq;
  int32_t cta, cluster, rank, warp, lane, kind;
  int32_t barrier;   // shared-memory offset of the barrier (-1: none)
  int32_t parity;    // -1: none
  int32_t tag;       // wait tag, or -1
  int32_t line;      // source line of the call
  int32_t file;      // index into the report's file table
  int32_t pad;
};

struct PeSimLaunch {
  uint32_t grid[3], block[3], cluster[3];
  uint32_t smem;          // dynamic shared memory bytes of the launch
  uint32_t smem_limit;    // the per-block limit (PE_SMEM_LIMIT)
  uint64_t seed;
  int32_t nslots;         // loaded copies of the stage library
  void** entries;         // per slot: void (*)(void** args)
  void** windows;         // per slot: void (*)(void** base, uint64_t* size, uint64_t* dyn_off)
  void** args;            // the kernel's arguments (pointers to their values)
  int32_t nranges;        // global memory the kernel may touch: [ptr, ptr + len) pairs
  const uint64_t* ranges;
  int64_t max_events;
  uint64_t stack_bytes;   // per fiber
  uint64_t max_steps;     // scheduler steps before the run is reported as not finishing (0: no limit)
};

namespace pe_sim {
namespace {

constexpr int WARP = 32;
using u64 = uint64_t;
using u32 = uint32_t;

struct Cta;
struct Cluster;
struct Fiber;
struct Op;

enum class FS : uint8_t { New, Ready, Blocked, Done };

enum WaitKind : int {
  W_NONE, W_MBAR, W_MBAR_TRY, W_NAMED_BAR, W_WARP, W_CLUSTER, W_WGMMA, W_BULK, W_TMEM_ALLOC
};

struct WaitInfo {
  int kind = W_NONE;
  u32 addr = 0;   // barrier address / barrier id
  u32 parity = 0;
  u32 tag = 0;
  Site site{};
  const char* what = "";
  u64 gen = 0;    // generation / count the waiter needs
};

struct Fiber {
  ThreadPub pub{};
  FiberContext ctx;
  uint8_t* stack = nullptr;
  size_t stack_size = 0;
  Cta* cta = nullptr;
  int tid = 0, warp = 0, lane = 0;
  int id = 0;
  FS state = FS::New;
  int ready_pos = -1;
  WaitInfo w;
  Site site{};
  // wgmma: marks[i] = mma_async count when commit group i closed
  u64 wg_issued = 0;
  std::vector<u64> wg_marks;
  // bulk async-groups (TMA stores): ops issued since the last commit, then per committed group its pending ops
  u64 bulk_open_group = 0;                       // the group new copies join until the next commit
  std::unordered_map<u64, int> bulk_pending;     // group -> copies not yet complete
  std::deque<u64> bulk_committed;                // committed groups, oldest first
  struct StoreRec {
    Cta* cta;
    u32 off, n;
    u64 op;
    std::vector<uint8_t> snap;   // the source bytes when the store was issued
    Site site;
  };
  std::unordered_map<u64, std::vector<StoreRec>> bulk_stores;   // group -> its stores (until retired)
  // tcgen05.ld results waiting for tcgen05.wait::ld
  struct PendingLd {
    u32* regs;
    std::vector<u32> vals;
    u32 lane0, col0, ncols;
  };
  std::vector<PendingLd> lds;
  u64 last_proxy_fence = 0;          // E->wseq of this thread's last fence.proxy.async
  u64 cluster_arrive_gen = ~0ull;   // the cluster barrier generation this thread arrived in
  bool cluster_arrived = false;
};

struct Barrier {
  bool init = false;
  u32 count = 0;
  int64_t pending = 0;
  int64_t tx = 0;
  u64 phase = 0;    // completed phases; the current phase's parity is phase & 1
  u64 observed = 0; // completed phases a wait of this CTA has seen
  u64 remote_gen = 0;   // cluster barrier generation + 1 of the last signal from a peer CTA
  std::vector<Fiber*> waiters;
};

struct NamedBar {
  u32 count = 0;
  u32 arrived = 0;
  u64 gen = 0;
  std::vector<Fiber*> waiters;
};

struct WarpColl {
  const char* what = nullptr;
  Site site{};
  u32 arrived = 0;   // lane mask
  u32 mask = 0;
  u32 vals[WARP]{};
  u32 res[WARP]{};
  u64 gen = 0;
  std::vector<Fiber*> waiters;
  // data of the gathered instruction
  u32 taddr = 0;
  u32* regs[WARP]{};
  int x = 0;
  int cg = 0;
  u32 a0 = 0, a1 = 0;
  std::vector<u32> words;   // tcgen05.ld: the warp's rows, filled by the last lane to arrive
};

struct WgOp {
  u64 index;
  u64 da = 0, db = 0;
  int n = 0, type = 0;   // type: 0 .e4m3, 1 .e5m2
  u32 scale_d = 0;
  float* acc[128]{};
  int arrived = 0;
  Site site{};
};

struct WarpGroup {
  std::deque<WgOp*> forming;   // issued by some threads of the warpgroup, not yet all 128
  u64 base = 0;                // index of forming.front()
  u64 done = 0;                // ops completed (they complete in order)
  std::vector<Fiber*> waiters;
};

struct Range {
  u32 lo, hi;
  u64 op;
  const char* what;
  Site site;
};

struct TmemAlloc {
  u32 col0, ncols;
};

struct Slot {
  void (*entry)(void**) = nullptr;
  void (*window)(void**, uint64_t*, uint64_t*) = nullptr;
  uint8_t* win = nullptr;
  u32 win_size = 0, dyn_off = 0;
  Cta* cta = nullptr;   // resident CTA
};

struct Cta {
  int id = 0;            // linear block index
  Dim3 idx{};
  Cluster* cluster = nullptr;
  int rank = 0;
  Slot* slot = nullptr;
  uint8_t* win = nullptr;
  u32 win_size = 0, dyn_off = 0, dyn_size = 0;
  std::vector<Fiber*> fibers;
  int live = 0;
  bool started = false, exited = false;
  NamedBar nbar[16];
  std::unordered_map<u32, Barrier> bars;
  std::vector<WarpColl> warps;
  std::vector<WarpGroup> wgs;
  std::vector<u32> tmem;
  std::vector<TmemAlloc> allocs;
  bool relinquished = false;
  std::vector<Fiber*> alloc_waiters;
  std::vector<Range> reads, writes;      // in-flight async reads / writes of shared memory
  std::vector<Range> tmem_writes;        // in-flight MMA writes of TMEM: lo/hi = columns, lanes in what
  u64 clock = 0;
  int pending_ops = 0;                   // queued async ops that touch this CTA
  std::vector<u32> chunk_writer;         // per 16 B of the window: fiber id + 1 of its last st.shared (0: none)
  std::vector<u64> chunk_seq;            // ... and when (E->wseq)
  std::vector<u64> tc_from;              // per peer rank: cluster barrier generation + 1 of its last
                                         // tcgen05 op on this CTA (cta_group::2 MMA / cp, commit multicast)
};

struct Cluster {
  int id = 0;
  std::vector<Cta*> ctas;
  u64 bar_gen = 0;
  u32 bar_arrived = 0;
  std::vector<Fiber*> bar_waiters;
  int live_threads = 0;
};

struct Op {
  u64 id = 0;
  u64 chain = 0;
  const char* what = "";
  Site site{};
  Fiber* issuer = nullptr;
  int issuer_cta = -1, issuer_warp = -1, issuer_lane = -1;
  std::vector<Cta*> touches;
  std::function<void()> complete;
};

struct Report {
  std::vector<std::string> deadlock, hazards, misuse;
};

[[noreturn]] void abort_fiber();

struct Engine {
  PeSimLaunch L{};
  std::mt19937_64 rng;
  int p_async = 30;        // percent: complete a queued op instead of running a fiber
  int p_yield = 50;        // percent: a scheduling point switches
  std::vector<Slot> slots;
  std::vector<Cta> ctas;
  std::vector<Cluster> clusters;
  std::vector<Fiber*> ready;
  std::vector<Fiber*> fibers_all;
  std::deque<int> pending_clusters;
  FiberContext sched;
  Fiber* cur = nullptr;
  u64 seq = 0, op_seq = 0;
  std::unordered_map<u64, std::deque<Op*>> chains;
  std::vector<u64> active_chains;
  int ops_pending = 0;
  bool aborted = false;
  Report rep;
  std::vector<PeSimEvent> events;
  bool events_truncated = false;
  std::vector<std::string> files;
  std::unordered_map<const char*, int> file_ids;
  std::string report_json;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  int live_fibers = 0;
  u64 steps = 0, switches = 0, ops_done = 0;
  std::vector<uint8_t*> stacks_free;
  std::vector<Cluster*> finished;   // clusters whose CTAs all exited: slots and stacks to recycle
  u64 wseq = 0;                     // order of st.shared writes and proxy fences

  u32 rnd(u32 n) { return n ? u32(rng() % n) : 0; }
  bool chance(int pct) { return int(rng() % 100) < pct; }
};

Engine* E = nullptr;

// ---- text helpers ------------------------------------------------------------------------------------
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string jesc(const std::string& t) {
  std::string o = "\"";
  for (char ch : t) {
    if (ch == '"' || ch == '\\') o += '\\', o += ch;
    else if (ch == '\n') o += "\\n";
    else if ((unsigned char)ch < 0x20) o += ' ';
    else o += ch;
  }
  return o + "\"";
}

const char* short_file(const char* f) {
  if (!f) return "?";
  const char* k = std::strstr(f, "src/kernels/");
  return k ? k + 12 : f;
}

std::string where(const Fiber* f, Site s) {
  if (!f) return fmt("(engine) at %s:%d", short_file(s.file), s.line);
  const Cta* c = f->cta;
  return fmt("CTA %d (cluster %d, rank %d) warp %d lane %d [warp %d] at %s:%d", c->id, c->cluster->id, c->rank,
             f->warp, f->lane, f->warp, short_file(s.file), s.line);
}

// A report record as a JSON object: its text and the thread and source line it names.
std::string record(const std::string& text, const Fiber* f, Site s, const std::string& extra = "") {
  std::string o = "{\"text\":" + jesc(text);
  if (f) {
    const Cta* c = f->cta;
    o += fmt(",\"cta\":%d,\"cluster\":%d,\"rank\":%d,\"warp\":%d,\"lane\":%d,\"role\":\"warp %d\"", c->id,
             c->cluster->id, c->rank, f->warp, f->lane, f->warp);
  }
  o += ",\"file\":" + jesc(short_file(s.file)) + fmt(",\"line\":%d", s.line) + extra + "}";
  return o;
}

int file_id(const char* f) {
  auto it = E->file_ids.find(f);
  if (it != E->file_ids.end()) return it->second;
  int id = int(E->files.size());
  E->files.push_back(short_file(f));
  E->file_ids[f] = id;
  return id;
}

void event(int kind, Fiber* f, Site s, int barrier = -1, int parity = -1, int tag = -1, Cta* c = nullptr) {
  if (int64_t(E->events.size()) >= E->L.max_events) {
    E->events_truncated = true;
    return;
  }
  PeSimEvent e{};
  e.seq = E->seq++;
  Cta* cc = f ? f->cta : c;
  e.cta = cc ? cc->id : -1;
  e.cluster = cc ? cc->cluster->id : -1;
  e.rank = cc ? cc->rank : -1;
  e.warp = f ? f->warp : -1;
  e.lane = f ? f->lane : -1;
  e.kind = kind;
  e.barrier = barrier;
  e.parity = parity;
  e.tag = tag;
  e.line = s.line;
  e.file = file_id(s.file);
  E->events.push_back(e);
}

// ---- errors ------------------------------------------------------------------------------------------
void misuse(const std::string& what, Site s, Fiber* f = nullptr) {
  if (E->rep.misuse.size() < 50) E->rep.misuse.push_back(record(what + " — " + where(f ? f : E->cur, s), f ? f : E->cur, s));
  E->aborted = true;
}
[[noreturn]] void misuse_fatal(const std::string& what, Site s) {
  misuse(what, s);
  abort_fiber();
}
void hazard(const std::string& what, Site s, Fiber* f = nullptr) {
  if (E->rep.hazards.size() < 50) E->rep.hazards.push_back(record(what + " — " + where(f, s), f, s));
}

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
  if (E->aborted) abort_fiber();
  if (E->chance(E->p_yield)) to_scheduler();
  if (E->aborted) abort_fiber();
}

// Block the current fiber until woken (the caller re-checks its condition in a loop).
void block(const WaitInfo& w) {
  Fiber* f = E->cur;
  f->w = w;
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
inline Cta* cta_of_rank(Cta* me, u32 rank, Site s) {
  auto& v = me->cluster->ctas;
  if (rank >= v.size()) {
    misuse_fatal(fmt("shared::cluster address names CTA rank %u, but the cluster has %zu CTAs", rank, v.size()), s);
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
struct SAddr {
  Cta* cta;
  u32 off;
};

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
                     "offset 0x%x): a wrong offset or too little dynamic shared memory",
                     what, addr, n, c->id, c->dyn_size, c->dyn_off), s);
  return {c, off};
}

u32 cta_addr(const Cta* c, u32 off) { return (u32(c->rank) << 24) | off; }

// ---- async operation queue -------------------------------------------------------------------------------
void enqueue(Op* op) {
  op->id = ++E->op_seq;
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
}

void remove_ranges(std::vector<Range>& v, u64 op) {
  v.erase(std::remove_if(v.begin(), v.end(), [&](const Range& r) { return r.op == op; }), v.end());
}

const Range* overlap(const std::vector<Range>& v, u32 lo, u32 hi) {
  for (const Range& r : v)
    if (r.lo < hi && lo < r.hi) return &r;
  return nullptr;
}

// A generic-proxy write (st.shared) in [lo, hi) of c that its thread has not yet ordered before async-proxy
// reads with fence.proxy.async (PTX ISA 9.7.12.4 membar/fence: proxy fences): the writing fiber, or null.
Fiber* unfenced_writer(Cta* c, u32 lo, u32 hi) {
  for (u32 k = lo / 16; k < (hi + 15) / 16 && k < c->chunk_writer.size(); ++k) {
    const u32 w = c->chunk_writer[k];
    if (w && c->chunk_seq[k] > E->fibers_all[w - 1]->last_proxy_fence) return E->fibers_all[w - 1];
  }
  return nullptr;
}

void check_proxy_fence(Cta* c, u32 lo, u32 hi, const char* reader, Site s) {
  if (Fiber* w = unfenced_writer(c, lo, hi))
    hazard(fmt("%s reads [0x%x, 0x%x) of CTA %d, which warp %d lane %d wrote with st.shared and never ordered "
               "with fence.proxy.async (generic-proxy writes are not visible to the async proxy without it)",
               reader, lo, hi, c->id, w->warp, w->lane), s, E->cur);
}

void cta_exit_check(Cta* c);
void start_clusters();

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
    E->rep.misuse.push_back(record(e.what + fmt(" — %s issued by CTA %d warp %d lane %d at %s:%d", op->what,
                                                op->issuer_cta, op->issuer_warp, op->issuer_lane,
                                                short_file(op->site.file), op->site.line),
                                   op->issuer, op->site));
    E->aborted = true;
  }
  E->cur = saved;
  for (Cta* c : op->touches) {
    c->pending_ops--;
    if (c->exited && c->pending_ops == 0) {}
  }
  delete op;
}

// ---- mbarrier core -----------------------------------------------------------------------------------
Barrier* find_bar(Cta* c, u32 off) {
  auto it = c->bars.find(off);
  return it == c->bars.end() ? nullptr : &it->second;
}

std::string bar_state(const Barrier& b) {
  return fmt("phase parity %llu (completed phases %llu), pending arrivals %lld of %u, tx-count %lld B",
             (unsigned long long)(b.phase & 1), (unsigned long long)b.phase, (long long)b.pending, b.count,
             (long long)b.tx);
}

void bar_check_complete(Barrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    b.phase++;
    b.pending = b.count;
    b.tx = 0;
    wake_all(b.waiters);
  }
}

// An arrival (count 1) and/or transaction bytes on CTA c's barrier at offset off, from fiber f or an op.
void bar_signal(Cta* c, u32 off, int arrivals, int64_t tx_add, int64_t tx_done, Site s, Fiber* f, const char* what) {
  if (c->exited) {
    misuse(fmt("%s on the mbarrier at 0x%x of CTA %d, which has already exited (a peer arrives after its "
               "partner left: keep both CTAs alive with a cluster barrier before exit)", what, off, c->id), s, f);
    return;
  }
  Barrier* b = find_bar(c, off);
  if (!b || !b->init) {
    misuse(fmt("%s on shared offset 0x%x of CTA %d, which holds no initialized mbarrier (mbarrier.init first, "
               "then fence.mbarrier_init and a CTA or cluster barrier before anyone signals it)", what, off, c->id), s, f);
    return;
  }
  Cta* from = f ? f->cta : (E->cur ? E->cur->cta : nullptr);
  if (from && from != c) b->remote_gen = c->cluster->bar_gen + 1;
  b->tx += tx_add;
  b->tx -= tx_done;
  if (arrivals) {
    if (b->pending <= 0) {
      misuse(fmt("%s on the mbarrier at 0x%x of CTA %d: more arrivals than its count %u in one phase (%s)", what,
                 off, c->id, b->count, bar_state(*b).c_str()), s, f);
      return;
    }
    b->pending -= arrivals;
  }
  if (b->pending == 0 && b->tx < 0) {
    misuse(fmt("%s on the mbarrier at 0x%x of CTA %d: the tx-count fell below zero with no arrival left "
               "(more bytes completed than expect_tx announced; %s)", what, off, c->id, bar_state(*b).c_str()), s, f);
    return;
  }
  bar_check_complete(*b);
}

// ---- the fiber body ----------------------------------------------------------------------------------
void fiber_main(void* arg) {
  Fiber* f = static_cast<Fiber*>(arg);
  g_pub = &f->pub;
  try {
    f->cta->slot->entry(E->L.args);
  } catch (const ModelError& e) {
    misuse(e.what, f->site, f);
  }
  // exit checks (PTX ISA: async operations must be waited before the thread exits)
  Site s = f->site;
  if (!f->lds.empty()) misuse("thread exits with a tcgen05.ld whose registers it never waited for (tcgen05.wait::ld)", s, f);
  bool bulk_left = !f->bulk_stores.empty();
  for (auto& g : f->bulk_pending) bulk_left |= g.second > 0;
  for (auto& [g, recs] : f->bulk_stores)
    for (auto& r : recs) remove_ranges(r.cta->reads, r.op);
  if (bulk_left)
    misuse("thread exits with bulk copies (TMA stores) not waited for: cp.async.bulk.commit_group and "
           "cp.async.bulk.wait_group before exit", s, f);
  {
    WarpGroup& wg = f->cta->wgs[f->tid / 128];
    if (wg.done < f->wg_issued)
      misuse("thread exits with wgmma.mma_async not waited for (wgmma.wait_group 0 before exit)", s, f);
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
    if (nb.arrived && nb.arrived >= u32(c->live)) {
      nb.arrived = 0;
      nb.gen++;
      wake_all(nb.waiters);
    }
    Cluster* cl = c->cluster;
    if (cl->bar_arrived && cl->bar_arrived >= u32(cl->live_threads)) {
      cl->bar_arrived = 0;
      cl->bar_gen++;
      wake_all(cl->bar_waiters);
    }
    WarpColl& wc = c->warps[f->warp];
    wc.mask &= ~(1u << f->lane);
    if (wc.what && wc.arrived) {
      misuse(fmt("lane %d exited while lanes 0x%08x of its warp wait in %s at %s:%d (a warp collective needs "
                 "every lane of its mask)", f->lane, wc.arrived, wc.what, short_file(wc.site.file), wc.site.line),
             s, f);
    }
  }
  if (c->live == 0) cta_exit_check(c);
  fiber_switch(&f->ctx, &E->sched);
  __builtin_unreachable();
}

void cta_exit_check(Cta* c) {
  Site s{"(CTA exit)", 0};
  if (!c->allocs.empty())
    misuse(fmt("CTA %d exits with %zu TMEM allocation(s) still held (%u columns at %u): tcgen05.dealloc before exit",
               c->id, c->allocs.size(), c->allocs[0].ncols, c->allocs[0].col0), s, c->fibers[0]);
  if (c->pending_ops)
    misuse(fmt("CTA %d exits with %d asynchronous operation(s) still in flight on its shared memory, TMEM or "
               "barriers (wait for them, or keep the cluster together until its peers are done)", c->id,
               c->pending_ops), s, c->fibers[0]);
  for (auto& [off, b] : c->bars)
    if (b.init && b.tx != 0)
      misuse(fmt("CTA %d exits with its mbarrier at 0x%x holding a tx-count of %lld B (expect_tx and the bytes "
                 "that arrived differ; %s)", c->id, off, (long long)b.tx, bar_state(b).c_str()), s, c->fibers[0]);
  for (Cta* p : c->cluster->ctas) {
    if (p == c || p->live == 0) continue;
    for (auto& [off, b] : c->bars)
      if (b.init && b.pending != int64_t(b.count) && b.count > 1) {
        misuse(fmt("CTA %d exits while peer CTA %d still runs and its mbarrier at 0x%x is mid-phase (%lld of %u "
                   "arrivals missing): a peer may still arrive on it (wait for its last phase, the producer "
                   "tail, or cluster_sync before exit)", c->id, p->id, off, (long long)b.pending, b.count), s,
               c->fibers[0]);
        break;
      }
    for (auto& [off, b] : c->bars)
      if (b.init && b.remote_gen == c->cluster->bar_gen + 1 && b.phase > b.observed) {
        misuse(fmt("CTA %d exits while peer CTA %d still runs: its mbarrier at 0x%x took arrivals from peers since "
                   "the last cluster barrier and its last completed phase was never waited for here, so nothing "
                   "shows the peers are done with it (wait for the last phase, the producer tail, or cluster_sync "
                   "before exit)", c->id, p->id, off), s, c->fibers[0]);
        break;
      }
    if (size_t(p->rank) < c->tc_from.size() && c->tc_from[size_t(p->rank)] == c->cluster->bar_gen + 1)
      misuse(fmt("CTA %d exits while peer CTA %d, which issued tcgen05 operations on it since the last cluster "
                 "barrier, still runs (a cta_group::2 pair leaves together: cluster_sync before exit)", c->id, p->id),
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
  c->chunk_writer.assign(c->win_size / 16 + 1, 0);
  c->chunk_seq.assign(c->win_size / 16 + 1, 0);
  const u32 nthreads = E->L.block[0] * E->L.block[1] * E->L.block[2];
  c->warps.assign((nthreads + WARP - 1) / WARP, WarpColl{});
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

void deadlock_report() {
  struct Group {
    std::vector<int> lanes;
    const Fiber* f;
    std::string extra;
  };
  std::map<std::string, Group> groups;   // one record per (CTA, warp, wait site), with its lanes
  for (Fiber* f : E->fibers_all) {
    if (f->state != FS::Blocked) continue;
    const WaitInfo& w = f->w;
    Cta* c = f->cta;
    std::string what, extra;
    if (w.kind == W_MBAR || w.kind == W_MBAR_TRY) {
      Cta* bc = c;
      u32 r = (w.addr >> 24) & 0xFF;
      if (r < c->cluster->ctas.size()) bc = c->cluster->ctas[r];
      Barrier* b = find_bar(bc, w.addr & 0xFFFFFF);
      what = fmt("mbarrier wait (tag %u) on the barrier at 0x%x for parity %u; %s", w.tag, w.addr & 0xFFFFFF, w.parity,
                 b ? bar_state(*b).c_str() : "no barrier initialized there");
      extra = fmt(",\"wait\":\"mbarrier\",\"tag\":%u,\"barrier\":%u,\"barrier_cta\":%d,\"parity\":%u", w.tag,
                  w.addr & 0xFFFFFF, bc->id, w.parity);
      if (b)
        extra += fmt(",\"phase\":%llu,\"phase_parity\":%llu,\"pending\":%lld,\"count\":%u,\"tx\":%lld",
                     (unsigned long long)b->phase, (unsigned long long)(b->phase & 1), (long long)b->pending, b->count,
                     (long long)b->tx);
    } else if (w.kind == W_NAMED_BAR) {
      NamedBar& nb = c->nbar[w.addr];
      what = fmt("named barrier %u (bar.sync, %u threads): %u arrived", w.addr, nb.count, nb.arrived);
      extra = fmt(",\"wait\":\"bar.sync\",\"barrier\":%u,\"count\":%u,\"arrived\":%u", w.addr, nb.count, nb.arrived);
    } else if (w.kind == W_WARP) {
      WarpColl& wc = c->warps[f->warp];
      what = fmt("%s: lanes 0x%08x of 0x%08x arrived (the other lanes never reach it: divergent warp)", w.what,
                 wc.arrived, wc.mask);
      extra = ",\"wait\":" + jesc(w.what);
    } else if (w.kind == W_CLUSTER) {
      what = fmt("barrier.cluster.wait: %u of %d threads of the cluster arrived", c->cluster->bar_arrived,
                 c->cluster->live_threads);
      extra = ",\"wait\":\"barrier.cluster\"";
    } else if (w.kind == W_WGMMA) {
      what = fmt("wgmma.wait_group: %s", w.what);
      extra = ",\"wait\":\"wgmma.wait_group\"";
    } else if (w.kind == W_BULK) {
      what = "cp.async.bulk.wait_group";
      extra = ",\"wait\":\"cp.async.bulk.wait_group\"";
    } else if (w.kind == W_TMEM_ALLOC) {
      what = "tcgen05.alloc: no free TMEM columns (an earlier allocation is never freed)";
      extra = ",\"wait\":\"tcgen05.alloc\"";
    } else {
      what = w.what;
    }
    std::string key = fmt("CTA %d (cluster %d, rank %d) warp %d: %s at %s:%d", c->id, c->cluster->id, c->rank, f->warp,
                          what.c_str(), short_file(w.site.file), w.site.line);
    Group& g = groups[key];
    if (!g.f) g.f = f, g.extra = extra;
    g.lanes.push_back(f->lane);
  }
  for (auto& [k, g] : groups) {
    std::string l, lj = "[";
    if (g.lanes.size() == 32) l = "lanes 0-31";
    else l = "lane" + std::string(g.lanes.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < g.lanes.size(); ++i) {
      if (g.lanes.size() != 32) l += (i ? "," : "") + std::to_string(g.lanes[i]);
      lj += (i ? "," : "") + std::to_string(g.lanes[i]);
    }
    E->rep.deadlock.push_back(record(k + " [" + l + "]", g.f, g.f->w.site, g.extra + ",\"lanes\":" + lj + "]"));
  }
  if (E->rep.deadlock.empty())
    E->rep.deadlock.push_back(record("no fiber can run, none is blocked, and CTAs wait to start", nullptr, Site{"", 0}));
}

void recycle() {
  for (Cluster* cl : E->finished)
    for (Cta* p : cl->ctas) {
      p->slot->cta = nullptr;
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
      std::map<std::string, int> sites;
      for (Fiber* f : E->fibers_all)
        if (f->state != FS::Done)
          sites[fmt("CTA %d warp %d %s at %s:%d", f->cta->id, f->warp, f->state == FS::Blocked ? "blocked" : "runnable",
                    short_file((f->state == FS::Blocked ? f->w.site : f->site).file),
                    (f->state == FS::Blocked ? f->w.site : f->site).line)]++;
      for (auto& [k, n] : sites)
        E->rep.deadlock.push_back(record(fmt("no progress after %llu steps: %s (%d threads)",
                                             (unsigned long long)E->L.max_steps, k.c_str(), n), nullptr, Site{"", 0}));
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

// ---- warp collectives ----------------------------------------------------------------------------------
// Gather the calling lane into its warp's collective `what`; the last lane to arrive runs `fn` (with the
// warp's record) and wakes the others. Lanes must all execute the same collective (PTX ISA .sync.aligned).
template <class Fn>
WarpColl& gather(const char* what, u32 mask, Site s, Fn&& fn) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  WarpColl& wc = c->warps[f->warp];
  const u32 bit = 1u << f->lane;
  if (!(mask & bit)) misuse_fatal(fmt("%s: the calling lane %d is not in the member mask 0x%08x", what, f->lane, mask), s);
  if (wc.arrived && wc.what != what)
    misuse_fatal(fmt("warp-collective mismatch: lane %d executes %s while lanes 0x%08x wait in %s at %s:%d", f->lane,
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

// ====================================================================================================
// API (runtime/api.h)
// ====================================================================================================

unsigned smem_addr(const void* p, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  uintptr_t a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(c->win);
  if (a < b || a >= b + c->win_size)
    misuse_fatal(fmt("cvta.to.shared of %p, which is not in this CTA's shared memory", p), s);
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
    misuse_fatal(fmt("mapa to CTA rank %u: the cluster has %zu CTAs", rank, me->cluster->ctas.size()), s);
  return (rank << 24) | (addr & 0xFFFFFFu);
}

void yield(Site s) { point(s); }

void syncthreads(Site s) { named_bar(0, 0, true, s); }

void named_bar(unsigned id, unsigned count, bool wait, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  if (id > 15) misuse_fatal(fmt("bar.sync %u: named barriers are 0..15", id), s);
  const bool all = count == 0;   // __syncthreads / bar.sync 0 without a count: every live thread
  if (!all && (count % 32 || count == 0))
    misuse_fatal(fmt("bar.sync %u, %u: the thread count must be a non-zero multiple of 32", id, count), s);
  NamedBar& nb = c->nbar[id];
  const u32 need = all ? u32(c->live) : count;
  if (nb.arrived && nb.count != need && !all)
    misuse_fatal(fmt("named barrier %u used with thread count %u while %u threads wait with count %u", id, count,
                     nb.arrived, nb.count), s);
  nb.count = need;
  nb.arrived++;
  event(EV_BAR_SYNC, f, s, int(id));
  const u64 gen = nb.gen;
  if (nb.arrived >= need) {
    nb.arrived = 0;
    nb.gen++;
    wake_all(nb.waiters);
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
  gather("__syncwarp", mask, s, [](WarpColl&, int, bool) {});
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
    misuse_fatal("barrier.cluster.arrive twice without barrier.cluster.wait in between", s);
  f->cluster_arrived = true;
  f->cluster_arrive_gen = cl->bar_gen;
  cl->bar_arrived++;
  event(EV_CLUSTER_SYNC, f, s);
  if (cl->bar_arrived >= u32(cl->live_threads)) {
    cl->bar_arrived = 0;
    cl->bar_gen++;
    wake_all(cl->bar_waiters);
  }
  point(s);
}

void cluster_barrier_wait(Site s) {
  Fiber* f = E->cur;
  Cluster* cl = f->cta->cluster;
  if (!f->cluster_arrived) misuse_fatal("barrier.cluster.wait without a barrier.cluster.arrive before it", s);
  while (cl->bar_gen == f->cluster_arrive_gen) {
    cl->bar_waiters.push_back(f);
    WaitInfo w;
    w.kind = W_CLUSTER;
    w.site = s;
    block(w);
  }
  f->cluster_arrived = false;
  point(s);
}

// ---- mbarrier ----
void mbar_init(unsigned addr, unsigned count, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.init");
  if (a.off % 8) misuse_fatal(fmt("mbarrier.init at 0x%x: an mbarrier is 8-byte aligned", addr), s);
  if (count == 0 || count >= (1u << 20))
    misuse_fatal(fmt("mbarrier.init with count %u: the expected arrival count is 1 .. 2^20 - 1", count), s);
  Barrier& b = a.cta->bars[a.off];
  if (b.init && !b.waiters.empty())
    misuse_fatal(fmt("mbarrier.init at 0x%x while %zu threads wait on it", addr, b.waiters.size()), s);
  b = Barrier{};
  b.init = true;
  b.count = count;
  b.pending = count;
  point(s);
}

void mbar_inval(unsigned addr, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.inval");
  a.cta->bars.erase(a.off);
  point(s);
}

void mbar_arrive(unsigned addr, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.arrive");
  event(EV_ARRIVE, E->cur, s, int(a.off), -1, -1);
  bar_signal(a.cta, a.off, 1, 0, 0, s, E->cur, "mbarrier.arrive");
  point(s);
}

void mbar_expect_tx(unsigned addr, unsigned bytes, bool arrive, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.expect_tx");
  event(EV_EXPECT_TX, E->cur, s, int(a.off), -1, int(bytes));
  bar_signal(a.cta, a.off, arrive ? 1 : 0, bytes, 0, s, E->cur,
             arrive ? "mbarrier.arrive.expect_tx" : "mbarrier.expect_tx");
  point(s);
}

bool mbar_try_wait(unsigned addr, unsigned parity, Site s) {
  SAddr a = resolve(addr, 8, s, "mbarrier.try_wait");
  Barrier* b = find_bar(a.cta, a.off);
  if (!b || !b->init)
    misuse_fatal(fmt("mbarrier.try_wait on 0x%x, which holds no initialized mbarrier", addr), s);
  point(s);
  b = find_bar(a.cta, a.off);
  if (b && (b->phase & 1) != (parity & 1)) {
    b->observed = std::max(b->observed, b->phase);
    return true;
  }
  // try_wait may suspend the thread for a while before it returns false: here, until the phase moves
  const u64 ph = b ? b->phase : 0;
  while (b && b->phase == ph) {
    b->waiters.push_back(E->cur);
    WaitInfo w;
    w.kind = W_MBAR_TRY;
    w.addr = addr;
    w.parity = parity;
    w.site = s;
    block(w);
    b = find_bar(a.cta, a.off);
  }
  return b && (b->phase & 1) != (parity & 1);
}

void mbar_wait(unsigned addr, unsigned parity, unsigned tag, Site s) {
  Fiber* f = E->cur;
  SAddr a = resolve(addr, 8, s, "mbarrier wait");
  Barrier* b = find_bar(a.cta, a.off);
  if (!b || !b->init)
    misuse_fatal(fmt("mbarrier wait (tag %u) on 0x%x, which holds no initialized mbarrier (a wait before "
                     "mbarrier.init is visible: fence.mbarrier_init and a barrier after init)", tag, addr), s);
  event(EV_WAIT_BEGIN, f, s, int(a.off), int(parity & 1), int(tag));
  point(s);
  for (;;) {
    b = find_bar(a.cta, a.off);
    if (!b) misuse_fatal(fmt("mbarrier wait (tag %u): the barrier at 0x%x was invalidated", tag, addr), s);
    if ((b->phase & 1) != (parity & 1)) {
      b->observed = std::max(b->observed, b->phase);
      break;
    }
    b->waiters.push_back(f);
    WaitInfo w;
    w.kind = W_MBAR;
    w.addr = addr;
    w.parity = parity & 1;
    w.tag = tag;
    w.site = s;
    block(w);
  }
  event(EV_WAIT_END, f, s, int(a.off), int(parity & 1), int(tag));
}

// ---- TMA ----
namespace {
PeSimTensorMap read_map(const void* tmap, Site s) {
  PeSimTensorMap m;
  std::memcpy(&m, tmap, sizeof m);
  std::string why = tensormap_problems(m);
  if (!why.empty()) misuse_fatal("TMA with an invalid tensor map: " + why, s);
  return m;
}
}  // namespace

void tensormap_prefetch(const void* tmap, Site s) {
  read_map(tmap, s);
  point(s);
}

void tma_prefetch(const void* tmap, const int*, int ncoords, Site s) {
  PeSimTensorMap m = read_map(tmap, s);
  if (ncoords != m.rank) misuse_fatal(fmt("TMA prefetch gives %d coordinates for a rank-%d map", ncoords, m.rank), s);
  point(s);
}

void tma_load(const void* tmap, unsigned dst, unsigned bar, const int* coords, int ncoords, unsigned mcast_mask,
              int cta_group, Site s) {
  Fiber* f = E->cur;
  PeSimTensorMap m = read_map(tmap, s);
  if (ncoords != m.rank)
    misuse_fatal(fmt("TMA load gives %d coordinates for a rank-%d tensor map: use the .%dd form", ncoords, m.rank,
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
      misuse_fatal(fmt("TMA load box [0x%x, 0x%x) lies outside CTA %d's shared memory", dst_off,
                       dst_off + g.footprint, c->id), s);
    u32 br = mcast_mask ? (cta_group == 2 ? (r & ~1u) : r) : bar_rank;
    dests.push_back({c, cta_of_rank(me, br, s)});
  }
  int32_t cs[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < ncoords; ++i) cs[i] = coords[i];
  Op* op = new Op();
  op->chain = (1ull << 62) | E->op_seq + 1;   // independent: loads complete in any order
  op->what = "TMA load";
  op->site = s;
  for (auto& d : dests) {
    op->touches.push_back(d.cta);
    if (d.bar_cta != d.cta) op->touches.push_back(d.bar_cta);
  }
  const u64 id = E->op_seq + 1;
  for (auto& d : dests) {
    if (const Range* r = overlap(d.cta->reads, dst_off, dst_off + g.footprint))
      hazard(fmt("TMA load into [0x%x, 0x%x) of CTA %d issued while %s issued at %s:%d still reads [0x%x, 0x%x) "
                 "(the slot is refilled before its reader finished)", dst_off, dst_off + g.footprint, d.cta->id, r->what,
                 short_file(r->site.file), r->site.line, r->lo, r->hi), s, f);
    d.cta->writes.push_back(Range{dst_off, dst_off + g.footprint, id, "a TMA load", s});
  }
  event(EV_TMA_LOAD, f, s, int(bar_off), -1, int(g.bytes));
  op->complete = [m, cs, ncoords, dst_off, bar_off, dests, g, id, s]() {
    for (const Dest& d : dests) {
      Cta* c = d.cta;
      remove_ranges(c->writes, id);
      if (c->exited) {
        misuse(fmt("a TMA load lands in CTA %d after it exited", c->id), s);
        continue;
      }
      if (const Range* r = overlap(c->reads, dst_off, dst_off + g.footprint))
        hazard(fmt("shared memory [0x%x, 0x%x) of CTA %d written by a TMA load while %s issued at %s:%d still "
                   "reads [0x%x, 0x%x)", dst_off, dst_off + g.footprint, c->id, r->what, short_file(r->site.file),
                   r->site.line, r->lo, r->hi), s);
      tma_load_box(m, cs, ncoords, c->win, c->dyn_off + c->dyn_size, 0, dst_off);
      event(EV_TMA_LOAD_DONE, nullptr, s, int(bar_off), -1, int(g.bytes), c);
      event(EV_COMPLETE_TX, nullptr, s, int(bar_off), -1, int(g.bytes), d.bar_cta);
      bar_signal(d.bar_cta, bar_off, 0, 0, g.bytes, s, nullptr, "TMA complete_tx");
    }
  };
  enqueue(op);
  point(s);
}

void tma_store(const void* tmap, unsigned src, const int* coords, int ncoords, Site s) {
  Fiber* f = E->cur;
  PeSimTensorMap m = read_map(tmap, s);
  if (ncoords != m.rank)
    misuse_fatal(fmt("TMA store gives %d coordinates for a rank-%d tensor map", ncoords, m.rank), s);
  BoxGeometry g = tma_box_geometry(m);
  SAddr a = resolve(src, g.footprint, s, "TMA store source");
  const u32 align = tma_smem_alignment(m.swizzle);
  if (a.off % align)
    misuse_fatal(fmt("TMA store source 0x%x is not %u-B aligned (%s)", a.off, align,
                     m.swizzle ? "a swizzled tile starts on its swizzle pattern" : "cp.async.bulk.tensor"), s);
  int32_t cs[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < ncoords; ++i) cs[i] = coords[i];
  Op* op = new Op();
  op->chain = (2ull << 60) | u64(f->id);
  op->what = "TMA store";
  op->site = s;
  op->touches.push_back(a.cta);
  const u64 id = E->op_seq + 1;
  const u32 off = a.off;
  Cta* c = a.cta;
  check_proxy_fence(c, off, off + g.footprint, "a TMA store", s);
  c->reads.push_back(Range{off, off + g.footprint, id, "a TMA store", s});
  const u64 group = f->bulk_open_group;
  f->bulk_pending[group]++;
  f->bulk_stores[group].push_back(
      Fiber::StoreRec{c, off, g.footprint, id, std::vector<uint8_t>(c->win + off, c->win + off + g.footprint), s});
  event(EV_TMA_STORE, f, s);
  op->complete = [m, cs, ncoords, c, off, f, group, s]() {
    tma_store_box(m, cs, ncoords, c->win, c->dyn_off + c->dyn_size, 0, off);
    event(EV_TMA_STORE_DONE, nullptr, s, -1, -1, -1, c);
    f->bulk_pending[group]--;
    if (f->state == FS::Blocked && f->w.kind == W_BULK) make_ready(f);
  };
  enqueue(op);
  point(s);
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
  // retire them: until now their sources could still be read, so a write to them before this point was a race
  while (f->bulk_committed.size() > size_t(n)) {
    const u64 g = f->bulk_committed.front();
    f->bulk_committed.pop_front();
    f->bulk_pending.erase(g);
    for (auto& r : f->bulk_stores[g]) {
      remove_ranges(r.cta->reads, r.op);
      if (std::memcmp(r.snap.data(), r.cta->win + r.off, r.n) != 0)
        hazard(fmt("shared memory [0x%x, 0x%x) of CTA %d, the source of a TMA store issued at %s:%d, was written "
                   "before cp.async.bulk.wait_group.read retired the store (staging buffer reused before the "
                   "store read it)", r.off, r.off + r.n, r.cta->id, short_file(r.site.file), r.site.line), s, f);
    }
    f->bulk_stores.erase(g);
  }
}

void fence_proxy_async(Site s) {
  E->cur->last_proxy_fence = ++E->wseq;
  point(s);
}

// ---- wgmma ----
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
  if (o->arrived == 0) {
    o->da = da;
    o->db = db;
    o->n = n;
    o->scale_d = scale_d;
    o->type = type;
    o->site = s;
  } else if (o->da != da || o->db != db || o->n != n || (o->scale_d != 0) != (scale_d != 0) || o->type != type) {
    misuse_fatal(fmt("wgmma.mma_async #%llu of the warpgroup: thread %d gives other operands than the threads before "
                     "it (descriptors, N, type or scale-d differ across the warpgroup)", (unsigned long long)idx, f->tid), s);
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
    Op* op = new Op();
    op->chain = (3ull << 60) | (u64(c->id) << 8) | wgi;
    op->what = "wgmma.mma_async";
    op->site = s;
    op->touches.push_back(c);
    const u64 id = E->op_seq + 1;
    for (auto r : {ra, rb}) {
      if (const Range* w = overlap(c->writes, r.first, r.second))
        hazard(fmt("wgmma reads [0x%x, 0x%x) while %s issued at %s:%d has not landed there (operand read before "
                   "its TMA completed)", r.first, r.second, w->what, short_file(w->site.file), w->site.line), s, f);
      check_proxy_fence(c, r.first, r.second, "a wgmma.mma_async", s);
      c->reads.push_back(Range{r.first, r.second, id, "a wgmma.mma_async", s});
    }
    event(EV_MMA, f, s);
    op->complete = [o, c, id, &wg, s]() {
      remove_ranges(c->reads, id);
      gmma_f8(c->win, c->dyn_off + c->dyn_size, 0, o->da, o->db, o->n, o->type, o->scale_d != 0, o->acc);
      event(EV_MMA_DONE, nullptr, s, -1, -1, -1, c);
      wg.done++;
      wake_all(wg.waiters);
      delete o;
    };
    enqueue(op);
  }
  point(s);
}

void setmaxnreg(bool, unsigned regs, Site s) {
  if (regs % 8 || regs < 24 || regs > 256) misuse_fatal(fmt("setmaxnreg %u: a multiple of 8 in 24..256", regs), s);
  aligned_op("setmaxnreg.sync.aligned", s);
}

// ---- tcgen05 ----
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
        event(EV_TMEM_ALLOC, f, s, -1, -1, int(ncols));
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
      event(EV_TMEM_DEALLOC, f, s, -1, -1, int(ncols));
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
  const u64 oid = E->op_seq + 1;
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
  Op* op = new Op();
  op->chain = tc_chain(f);
  op->what = "tcgen05.mma";
  op->site = s;
  op->touches = pair;
  event(EV_MMA, f, s);
  op->complete = [kind, cg, d, a, b, idesc, sfa, sfb, accumulate, pair, oid, col, n = id.n, s]() {
    for (Cta* p : pair) {
      remove_ranges(p->reads, oid);
      remove_ranges(p->tmem_writes, oid);
    }
    std::vector<UmmaCta> us;
    for (Cta* p : pair) us.push_back(umma_cta(p));
    umma_mma(kind, cg, us.data(), d, a, b, idesc, accumulate != 0, sfa, sfb);
    // a tcgen05.ld that has not been waited for must not see this write
    for (Cta* p : pair)
      for (Fiber* g : p->fibers)
        for (auto& ld : g->lds)
          if (ld.col0 < col + n && col < ld.col0 + ld.ncols) {
            hazard(fmt("TMEM columns %u..%u written by a tcgen05.mma while a tcgen05.ld of them by warp %d is not "
                       "yet waited for (accumulator released before tcgen05.wait::ld)", col, col + n - 1, g->warp), s);
            goto next;
          }
  next:
    event(EV_MMA_DONE, nullptr, s, -1, -1, -1, pair[0]);
  };
  enqueue(op);
  point(s);
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
  Op* op = new Op();
  op->chain = tc_chain(f);
  op->what = "tcgen05.commit";
  op->site = s;
  for (auto& t : targets) op->touches.push_back(t.first);
  event(EV_COMMIT, f, s, int(off));
  op->complete = [targets, s]() {
    for (auto& t : targets) {
      event(EV_ARRIVE, nullptr, s, int(t.second), -1, -1, t.first);
      bar_signal(t.first, t.second, 1, 0, 0, s, nullptr, "tcgen05.commit arrive");
    }
  };
  enqueue(op);
  point(s);
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
    event(EV_TMEM_LD, f, s, -1, -1, x);
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

void tc_st_32x32b(unsigned taddr, const unsigned* regs, int x, Site s) {
  Fiber* f = E->cur;
  Cta* c = f->cta;
  std::string err;
  WarpColl& wc = gather("tcgen05.st.32x32b", 0xFFFFFFFFu, s, [&](WarpColl& w, int l, bool last) {
    if (w.arrived == (1u << l)) w.taddr = taddr, w.x = x, w.a0 = 0, w.words.assign(size_t(32) * x, 0);
    else if (w.taddr != taddr || w.x != x) w.a0 = 1;   // lanes disagree on the address or the width
    if (!w.a0) std::memcpy(&w.words[size_t(l) * x], regs, size_t(x) * 4);
    if (!last || w.a0) return;
    w.a1 = 0;
    try {
      tmem_st_32x32b(umma_cta(c), f->warp, taddr, x, w.words.data());
    } catch (const ModelError& e) {
      err = e.what;
      w.a1 = 1;
    }
  });
  if (wc.a0) misuse_fatal("tcgen05.st.sync.aligned: the lanes of the warp give different addresses or widths", s);
  if (wc.a1) misuse_fatal(err.empty() ? std::string("tcgen05.st outside the TMEM allocation or lane quarter") : err, s);
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
  const u64 oid = E->op_seq + 1;
  std::vector<Cta*> pair{c};
  if (cg == 2 && c->cluster->ctas.size() > size_t(c->rank) + 1) pair.push_back(c->cluster->ctas[c->rank + 1]);
  for (Cta* p : pair) {
    check_proxy_fence(p, r.first, r.second, "a tcgen05.cp", s);
    p->reads.push_back(Range{r.first, r.second, oid, "a tcgen05.cp", s});
    note_tc_remote(c, p);
  }
  Op* op = new Op();
  op->chain = tc_chain(f);
  op->what = "tcgen05.cp";
  op->site = s;
  op->touches = pair;
  event(EV_TMEM_CP, f, s);
  op->complete = [pair, taddr, desc, oid]() {
    for (Cta* p : pair) {
      remove_ranges(p->reads, oid);
      tmem_cp_32x128b_warpx4(umma_cta(p), taddr, desc);
    }
  };
  enqueue(op);
  point(s);
}

// ---- plain memory ----
namespace {
void check_gmem(const void* p, size_t n, bool write, Site s) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (auto& r : E->ranges)
    if (a >= r.first && a + n <= r.second) return;
  misuse_fatal(fmt("%s of %zu B at %p is outside every tensor the kernel was given (out-of-bounds global access)",
                   write ? "global store" : "global load", n, p), s);
}
}  // namespace

void gmem_load(const void* p, void* dst, size_t n, Site s) {
  check_gmem(p, n, false, s);
  std::memcpy(dst, p, n);
}

void gmem_store(void* p, const void* src, size_t n, Site s) {
  check_gmem(p, n, true, s);
  std::memcpy(p, src, n);
}

void smem_load(unsigned addr, void* dst, size_t n, Site s) {
  SAddr a = resolve(addr, u32(n), s, "ld.shared");
  if (a.off % std::min<size_t>(n, 16)) misuse_fatal(fmt("ld.shared of %zu B at unaligned 0x%x", n, addr), s);
  std::memcpy(dst, a.cta->win + a.off, n);
}

void smem_store(unsigned addr, const void* src, size_t n, Site s) {
  SAddr a = resolve(addr, u32(n), s, "st.shared");
  if (a.off % std::min<size_t>(n, 16)) misuse_fatal(fmt("st.shared of %zu B at unaligned 0x%x", n, addr), s);
  if (const Range* r = overlap(a.cta->reads, a.off, a.off + u32(n)))
    hazard(fmt("st.shared to 0x%x of CTA %d while %s issued at %s:%d still reads [0x%x, 0x%x) (staging buffer "
               "reused before the asynchronous read finished)", a.off, a.cta->id, r->what, short_file(r->site.file),
               r->site.line, r->lo, r->hi), s, E->cur);
  std::memcpy(a.cta->win + a.off, src, n);
  const u64 q = ++E->wseq;
  for (u32 k = a.off / 16; k < (a.off + u32(n) + 15) / 16 && k < a.cta->chunk_writer.size(); ++k) {
    a.cta->chunk_writer[k] = u32(E->cur->id) + 1;
    a.cta->chunk_seq[k] = q;
  }
}

uint64_t clock64(Site) { return ++E->cur->cta->clock; }
uint64_t globaltimer(Site) { return ++E->cur->cta->clock; }

void trap(const char* what, Site s) { misuse_fatal(fmt("the kernel trapped (%s)", what), s); }

}  // namespace pe_sim

// ====================================================================================================
// C ABI for pelib.sim
// ====================================================================================================
namespace {
std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\', o += ch;
    else if (ch == '\n') o += "\\n";
    else if ((unsigned char)ch < 0x20) o += ' ';
    else o += ch;
  }
  return o + "\"";
}
std::string jobjs(const std::vector<std::string>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + v[i];
  return o + "]";
}
std::string jlist(const std::vector<std::string>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + jstr(v[i]);
  return o + "]";
}
}  // namespace

extern "C" {

// Run one launch. Returns 0 when the kernel ran to the end without a report, 1 otherwise (see the report).
int pe_sim_run(const PeSimLaunch* L) {
  using namespace pe_sim;
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
  for (int i = 0; i < L->nranges; ++i)
    E->ranges.push_back({uintptr_t(L->ranges[2 * i]), uintptr_t(L->ranges[2 * i] + L->ranges[2 * i + 1])});
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
  const u32 cx = L->cluster[0] * L->cluster[1] * L->cluster[2];
  const u32 nctas = L->grid[0] * L->grid[1] * L->grid[2];
  E->ctas.resize(nctas);
  E->clusters.resize(nctas / cx);
  Site s0{"(launch)", 0};
  std::string bad;
  if (nctas % cx) bad = "the grid is not a whole number of clusters";
  if (cx > u32(L->nslots)) bad = "fewer CTA slots than CTAs in a cluster";
  if (!E->slots.empty() && L->smem + (E->slots[0].win_size - PE_SIM_SMEM_CAPACITY) > L->smem_limit)
    bad = fmt("the launch asks for %u B of dynamic shared memory plus %u B static, over the %u B per-block limit",
              L->smem, E->slots[0].win_size - PE_SIM_SMEM_CAPACITY, L->smem_limit);
  if (L->smem > PE_SIM_SMEM_CAPACITY) bad = fmt("dynamic shared memory %u B exceeds the simulator's window", L->smem);
  if (!bad.empty()) {
    E->rep.misuse.push_back(record(bad + " (launch)", nullptr, s0));
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
    run_loop();
  }
  // recycle stacks
  for (Fiber* f : E->fibers_all)
    if (f->stack) E->stacks_free.push_back(f->stack);
  const bool ok = E->rep.deadlock.empty() && E->rep.hazards.empty() && E->rep.misuse.empty();
  E->report_json = "{\"ok\":" + std::string(ok ? "true" : "false") + ",\"deadlock\":" + jobjs(E->rep.deadlock) +
                   ",\"hazards\":" + jobjs(E->rep.hazards) + ",\"misuse\":" + jobjs(E->rep.misuse) +
                   ",\"files\":" + jlist(E->files) + ",\"events_truncated\":" +
                   (E->events_truncated ? "true" : "false") + ",\"steps\":" + std::to_string(E->steps) +
                   ",\"switches\":" + std::to_string(E->switches) + ",\"ops\":" + std::to_string(E->ops_done) +
                   ",\"p_async\":" + std::to_string(E->p_async) + ",\"p_yield\":" + std::to_string(E->p_yield) + "}";
  return ok ? 0 : 1;
}

const char* pe_sim_report_json() { return pe_sim::E ? pe_sim::E->report_json.c_str() : "{}"; }

const PeSimEvent* pe_sim_events(int64_t* n) {
  *n = pe_sim::E ? int64_t(pe_sim::E->events.size()) : 0;
  return pe_sim::E ? pe_sim::E->events.data() : nullptr;
}

int pe_sim_event_size() { return int(sizeof(PeSimEvent)); }

}  // extern "C"
