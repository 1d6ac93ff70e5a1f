// The simulator engine's state: the C ABI records (PeSimEvent, PeSimLaunch, PeSimRange), the machine (fibers,
// CTAs, clusters, barriers, warp collectives, warpgroups, the asynchronous operation queue, the happens-before
// clocks and shadows) and the declarations every file of the engine shares (runtime/engine.cpp lists them).
#pragma once
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
namespace {

// ---- event log ---------------------------------------------------------------------------------------
// The event vocabulary, one list each: the kinds in enum order and the record's fields. pelib.sim reads both
// through the C ABI (pe_sim_event_schema: names, offsets, types) and builds its dtype and kind list from them.
#define PE_SIM_EVENT_KINDS(X)                                                                                  \
  X(WAIT_BEGIN, "wait_begin") X(WAIT_END, "wait_end") X(ARRIVE, "arrive") X(EXPECT_TX, "expect_tx")             \
  X(COMPLETE_TX, "complete_tx") X(TMA_LOAD, "tma_load") X(TMA_LOAD_DONE, "tma_load_done")                       \
  X(TMA_STORE, "tma_store") X(TMA_STORE_DONE, "tma_store_done") X(MMA, "mma") X(MMA_DONE, "mma_done")           \
  X(COMMIT, "commit") X(TMEM_ALLOC, "tmem_alloc") X(TMEM_DEALLOC, "tmem_dealloc") X(TMEM_LD, "tmem_ld")         \
  X(TMEM_CP, "tmem_cp") X(BAR_SYNC, "bar_sync") X(CLUSTER_SYNC, "cluster_sync") X(EXIT, "exit")                 \
  X(PHASE_BEGIN, "phase_begin") X(PHASE_END, "phase_end") X(TMEM_ST, "tmem_st")
enum EvKind : int32_t {
#define PE_EV_ENUM(e, name) EV_##e,
  PE_SIM_EVENT_KINDS(PE_EV_ENUM)
#undef PE_EV_ENUM
};

}  // namespace
}  // namespace pe_sim

// One record of the event log (-1: none). X(type, name, numpy type):
//   seq     order stamp (never a time)
//   op      the asynchronous operation an issue and its completion share (0: none)
//   cta, cluster, rank, warp, lane, kind   warp / lane -1: the asynchronous unit doing `op`
//   role    index into the report's "roles" (the stage's phase marks name them)
//   name    the barrier's name as the stage's mbarrier_init writes it: index into "names"
//   index   its index in that array (from its address); addr its shared-memory offset; bcta the CTA it lives in
//   phase   the barrier phase the event arrives on / completes / waits for / observes
//   parity, tag, bytes   bytes: a TMA load's box (each destination receives it once)
//   slot, acc, tile      the ring slot, the accumulator, the CTA's tile slot (the stage's phase marks)
//   what    phase_begin / phase_end: the common/timing.cuh phase id
//   line, file           source line of the call, index into the report's file table
//   tensor  TMA load / store: the tensor its map addresses (the launch's range), index into "names"
//   dests   TMA load: the CTAs its box lands in (a multicast's destinations); `bytes` is per destination
//   coord   TMA load / store: the box's start on the map's outermost dimension (a 2-D map's row)
#define PE_SIM_EVENT_FIELDS(X)                                                                                 \
  X(uint64_t, seq, "<u8") X(uint64_t, op, "<u8") X(int32_t, cta, "<i4") X(int32_t, cluster, "<i4")               \
  X(int32_t, rank, "<i4") X(int32_t, warp, "<i4") X(int32_t, lane, "<i4") X(int32_t, kind, "<i4")               \
  X(int32_t, role, "<i4") X(int32_t, name, "<i4") X(int32_t, index, "<i4") X(int32_t, addr, "<i4")              \
  X(int32_t, bcta, "<i4") X(int32_t, phase, "<i4") X(int32_t, parity, "<i4") X(int32_t, tag, "<i4")             \
  X(int32_t, bytes, "<i4") X(int32_t, slot, "<i4") X(int32_t, acc, "<i4") X(int32_t, tile, "<i4")               \
  X(int32_t, what, "<i4") X(int32_t, line, "<i4") X(int32_t, file, "<i4") X(int32_t, tensor, "<i4")             \
  X(int32_t, dests, "<i4") X(int32_t, coord, "<i4")
struct PeSimEvent {
#define PE_EV_FIELD(type, name, np) type name;
  PE_SIM_EVENT_FIELDS(PE_EV_FIELD)
#undef PE_EV_FIELD
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
  int32_t nranges;        // global memory the kernel may touch: the tensors bound to its parameters
  const struct PeSimRange* ranges;
  int64_t max_events;
  uint64_t stack_bytes;   // per fiber
  uint64_t max_steps;     // scheduler steps before the run is reported as not finishing (0: no limit)
  int32_t schedule;       // 0: random (from the seed), 1: lazy (asynchronous operations complete as late as
                          // allowed), 2: eager (as soon as issued)
  int32_t pad;
  uint64_t max_spin;      // loads of memory by one thread between two scheduling points before it is a hang
  uint64_t watchdog_us;   // CPU time one thread may run with no scheduling point and no load before it is a hang
};

// A tensor the kernel may touch: [base, base + bytes), its parameter's name, element size and shape.
struct PeSimRange {
  uint64_t base, bytes;
  const char* name;
  uint32_t elem, ndim;
  uint64_t shape[4];
};
namespace pe_sim {
namespace {

constexpr int WARP = 32;
constexpr uint64_t PE_SIM_MAX_CTAS = 1u << 24;   // CTAs one launch may have (ids are int; pelib.sim.engine.MAX_CTAS)
using u64 = uint64_t;
using u32 = uint32_t;

struct Cta;
struct Cluster;
struct Fiber;
struct Op;

// ---- happens-before (runtime/order.cpp) ----------------------------------------------------------------
// A thread's vector clock over its cluster's components: one per mbarrier (phases completed), per thread's
// tcgen05 stream and bulk-store groups, per warpgroup's wgmma stream, per warp's tcgen05.ld and .st streams,
// and per thread that writes shared memory (its fence.proxy.async count). An asynchronous access is known
// complete to a thread whose clock has its component at or past its epoch.
using Clock = std::vector<uint32_t>;
enum AccessKind : uint8_t { AK_NONE, AK_TMA_LOAD, AK_TMA_STORE, AK_WGMMA, AK_MMA, AK_CP, AK_LD, AK_ST };
struct Access {
  uint32_t comp = 0, epoch = 0;   // epoch 0: none
  uint32_t op = 0;                // the operation (Engine::ops), for the report
  uint8_t kind = AK_NONE;
};
struct SChunk {                   // per 16 B of a CTA's shared window
  Access w;                       // the last asynchronous write
  Access r[3];                    // asynchronous reads since it
};
struct GWord {                    // per 4 B of a CTA's shared window: its plain (generic-proxy) accesses
  uint32_t writer = 0;            // the last plain write: fiber id + 1
  uint32_t fences = 0;            // the writer's fence.proxy.async count at the write
  uint32_t wepoch = 0, wat = 0;   // the writer's own epoch then, and where (Engine::wheres)
  uint32_t reader[2]{}, repoch[2]{}, rat[2]{};   // plain reads since it (fiber id + 1, epoch, where)
  uint8_t wmask = 0, rmask[2]{};  // the bytes of the word each touched
};
struct TCell {                    // per TMEM lane quarter and column
  Access w;
  Access r[2];
};

enum class FS : uint8_t { New, Ready, Blocked, Done };

enum WaitKind : int {
  W_NONE, W_MBAR, W_MBAR_TRY, W_NAMED_BAR, W_WARP, W_CLUSTER, W_WGMMA, W_BULK, W_TMEM_ALLOC, W_REGS
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
  Clock vc;                          // what this thread knows has happened (happens-before)
  uint32_t fence_comp = 0, fences = 0;   // its fence.proxy.async component and count
  uint32_t self_comp = 0;                // its own component (epoch: clock publications, for plain accesses)
  uintptr_t where_key[2]{};              // the last place it accessed shared memory from, and its id
  uint32_t where_id = 0;
  uint32_t tc_comp = 0, tc_issued = 0;   // its tcgen05 stream: component and ops issued
  uint32_t bulk_comp = 0;                // its bulk-store groups (epoch: group + 1)
  u64 spin = 0;                          // loads of memory since its last scheduling point
  // tcgen05 fences (order.cpp): what its asynchronous tcgen05 ops are ordered after (its clock at its last
  // tcgen05.fence::after_thread_sync, and its own waits since), and its warp's tcgen05.ld / st completions
  // it knew at its last tcgen05.fence::before_thread_sync (what a thread synchronisation may pass on)
  Clock tvc;
  uint32_t rel_ld = 0, rel_st = 0;
  bool wg_open = true;                   // wgmma.fence: its accumulators may be touched since the last one
  u64 nreg_done = 0;                     // setmaxnreg instructions it has passed (wgmma.cpp, the register pool)
  // the stage's phase marks (common/timing.cuh's twin): each timing_now() stamp, and whether an mbarrier
  // wait of this thread began after it (a wait the stage brackets with two stamps)
  struct Mark {
    u64 seq;
    bool waited;
  };
  std::vector<Mark> marks;
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
  uint32_t comp = 0;    // happens-before: its component (phases completed)
  Clock pending_vc, done;  // the arrivals' clocks of the current phase; what its completed phases released
  bool waited = false;  // a wait on it ever began (an armed barrier nobody waits on is only a warning)
};

struct NamedBar {
  u32 count = 0;
  u32 arrived = 0;
  u64 gen = 0;
  std::vector<Fiber*> waiters;
  Clock acc;            // the arrivals' clocks of this generation
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
  Clock acc;                // __syncwarp: the lanes' clocks
  uint32_t ld_comp = 0, ld_issued = 0;   // the warp's tcgen05.ld stream
  uint32_t st_comp = 0, st_issued = 0;   // the warp's tcgen05.st stream
  uint32_t op = 0;          // the tcgen05.ld / st being gathered (Engine::ops, for reports)
  bool tm_hazard = false;   // one report per tcgen05.ld / st
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
  uint32_t comp = 0;           // happens-before: its wgmma stream (epoch: op index + 1)
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
  u64 clock = 0;
  int pending_ops = 0;                   // queued async ops that touch this CTA
  std::vector<u64> tc_from;              // per peer rank: cluster barrier generation + 1 of its last
                                         // tcgen05 op on this CTA (cta_group::2 MMA / cp, commit multicast)
  std::unordered_map<u32, int> bar_name; // barrier offset -> name id (its mbarrier_init's expression)
  std::vector<SChunk> sh;                // happens-before shadows of its shared window and TMEM
  std::vector<GWord> gw;
  std::vector<TCell> tsh;
  std::vector<uint8_t> warp_roles;       // per warp: the PhaseRole bits its phase marks named
  // the register pool (wgmma.cpp, PTX ISA setmaxnreg): per warp its per-thread count and setmaxnreg done
  std::vector<u32> wregs;
  std::vector<u64> wgen;
  int64_t reg_pool = 0;
  std::vector<Fiber*> reg_waiters;
};

struct Cluster {
  int id = 0;
  std::vector<Cta*> ctas;
  u64 bar_gen = 0;
  u32 bar_arrived = 0;
  std::vector<Fiber*> bar_waiters;
  int live_threads = 0;
  uint32_t ncomp = 1;   // happens-before components allocated (0: none)
  Clock bar_acc, bar_done;   // the cluster barrier: arrivals of this generation, the last one's
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

// The report's lists (each record a JSON object): hazards and misuse keep the first MAX_RECORDS records
// and count them all (the report says so: hazards_total, misuse_total, records_cap).
struct Report {
  static constexpr size_t MAX_RECORDS = 50;
  std::vector<std::string> deadlock, hazards, misuse, warnings;
  size_t hazards_total = 0, misuse_total = 0, warnings_total = 0;
};

// The one JSON writer of the engine (report.cpp): an object built field by field.
class Json {
 public:
  Json& put(const char* k, const std::string& v);
  Json& put(const char* k, const char* v);
  Json& put(const char* k, bool v);
  Json& num(const char* k, long long v);
  Json& unum(const char* k, unsigned long long v);
  Json& raw(const char* k, const std::string& json);   // a value already in JSON
  Json& merge(const Json& o);                         // o's fields after these
  std::string str() const;

 private:
  std::string body_;
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
  int live_fibers = 0;
  u64 steps = 0, switches = 0, ops_done = 0;
  std::vector<uint8_t*> stacks_free;
  std::vector<Cluster*> finished;   // clusters whose CTAs all exited: slots and stacks to recycle
  PeSimEvent scratch{};             // where events go once the log is full
  std::vector<std::string> names;   // barrier names (the report's "names")
  std::unordered_map<std::string, int> name_ids;
  struct Piece {                    // a contiguous stretch [t0, t1) of one phase mark of a thread
    int cta, warp, lane;
    u32 tile, phase;
    int role, waits;
    u64 t0, t1;
    u32 i0, i1;                     // the ordinals of its stamps among the thread's timing_now() stamps
    bool recorded;                  // recorded by this thread (else: the recording lane's, on a lane that
                                    // took the same stamps)
    Site site;
  };
  std::vector<Piece> pieces;
  struct OpInfo {                   // every asynchronous operation, by id: what, where, by whom
    const char* what;
    Site site;
    int fiber;
  };
  std::vector<OpInfo> ops{OpInfo{"", Site{"", 0}, -1}};
  std::unordered_map<std::string, size_t> hazard_seen;   // one record per (site, kind); the rest counted
  struct Where {                    // a place plain shared-memory accesses come from: a wrapper's call site,
    Site site;                      // or a raw access's instruction (pc)
    uintptr_t pc;
  };
  std::vector<Where> wheres{Where{Site{"", 0}, 0}};
  std::map<std::pair<uintptr_t, uintptr_t>, uint32_t> where_ids;
  std::vector<PeSimRange> tensors;  // sorted by base
  std::vector<u64> gload, gstore;   // per tensor (in that order): bytes of the kernel's own global loads and
                                    // stores (plain and wrapped; TMA's are in the event log), the report's "gmem"
  std::vector<u64> gprefetch;       // per tensor: the boxes its L2 prefetches name (cp.async.bulk.prefetch.tensor)
  std::vector<std::pair<uintptr_t, uintptr_t>> code;     // the stage libraries' and the engine's segments
  uintptr_t raw_pc = 0;             // a report about a plain access: the instruction (memory.cpp)
  bool in_run = false;              // the fault handler is ours
  u64 beats = 0;                    // scheduling points passed (the watchdog's sign of progress: memory.cpp)
  std::vector<std::pair<uintptr_t, uintptr_t>> stage_text;   // the stage libraries' code (the watchdog's)

  u32 rnd(u32 n) { return n ? u32(rng() % n) : 0; }
  bool chance(int pct) { return int(rng() % 100) < pct; }
};

Engine* E = nullptr;

// ---- shared by the engine's files (defined in engine.cpp and report.cpp) ------------------------------
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string jesc(const std::string& t);
const char* short_file(const char* f);
std::string where(const Fiber* f, Site s);
std::string record(const std::string& text, const Fiber* f, Site s, const Json& extra = Json());
std::string jarr(const std::vector<std::string>& items);
std::string jstrs(const std::vector<std::string>& v);
void add_record(std::vector<std::string>& list, size_t& total, std::string rec);
void no_progress_report();
std::string report_json(bool ok);
PeSimEvent& event(int kind, Fiber* f, Site s, Cta* c = nullptr, u64 op = 0);
void ev_barrier(PeSimEvent& e, Cta* bc, u32 off, int phase);
void finalize_events();
std::string roles_json();
int name_id(const std::string& n);
int tensor_id(u64 global_address);   // the launch range holding this address, as an index into "names" (-1: none)
int phase_now(Cta* c, u32 off);
void misuse(const std::string& what, Site s, Fiber* f = nullptr);
[[noreturn]] void misuse_fatal(const std::string& what, Site s);
void warning(const std::string& what, Site s, Fiber* f = nullptr);
void deadlock_report();
void make_ready(Fiber* f);
void unready(Fiber* f);
void point(Site s);
void block(const WaitInfo& w);
void wake_all(std::vector<Fiber*>& v);
Cta* cta_of_rank(Cta* me, u32 rank, Site s);
void note_tc_remote(Cta* from, Cta* c);
struct SAddr {
  Cta* cta;
  u32 off;
};
bool in_window(const Cta* c, u32 off, u32 n);
SAddr resolve(u32 addr, u32 n, Site s, const char* what);
u32 cta_addr(const Cta* c, u32 off);
Op* new_op(const char* what, u64 chain, Site s);
void submit(Op* op, std::function<void()> complete, bool sched_point = true);
Barrier* find_bar(Cta* c, u32 off);
std::string bar_state(const Barrier& b);
void bar_signal(Cta* c, u32 off, int arrivals, int64_t tx_add, int64_t tx_done, Site s, Fiber* f, const char* what,
                const Clock* rel = nullptr);
template <class Fn>
WarpColl& gather(const char* what, u32 mask, Site s, Fn&& fn);
void run_loop();
void run_launch(const PeSimLaunch* L);
void named_bar_complete(NamedBar& nb);
void cluster_bar_complete(Cluster* cl);
void faults_on();
void faults_off();
std::vector<std::pair<uintptr_t, uintptr_t>> loaded_segments();
// happens-before (order.cpp)
u32 new_comp(Cluster* cl);
u32 at(const Clock& c, u32 k);
void set_max(Clock& c, u32 k, u32 v);
void join(Clock& a, const Clock& b);
u32 op_info(const char* what, Site s, Fiber* f, u64 id);
u32 sync_op(const char* what, Site s, Fiber* f);
void async_write(Cta* c, u32 lo, u32 hi, const Access& a, Fiber* by, Site s);
void async_read(Cta* c, u32 lo, u32 hi, const Access& a, Fiber* by, Site s);
void generic_access(Cta* c, u32 off, u32 n, bool write, Fiber* f, Site s);
void tick(Fiber* f);
const Clock& released(Fiber* f);
void join_released(Clock& dst, Fiber* f);
void regs_warp_exit(Cta* c, int warp);
void tma_exit_check(Cta* c);
bool tmem_write(Cta* c, u32 quarters, u32 lo, u32 hi, const Access& a, Fiber* by, Site s, bool check = true,
                bool record = true);
bool tmem_read(Cta* c, u32 quarters, u32 lo, u32 hi, const Access& a, const Clock& vc, Fiber* by, Site s, bool report);
std::string tmem_busy(Cta* c, u32 lo, u32 hi, const Clock& vc);

}  // namespace
}  // namespace pe_sim
