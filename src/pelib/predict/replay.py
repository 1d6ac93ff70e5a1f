"""Replay a happens-before graph with costs: a discrete-event run of each warp's nodes and the SASS between
them, on the resources of its SM and the memory state every SM shares.

    r = Replay(graph, cal, MemoryState(...), ctas={0}).run()
    r.end, r.node_times[idx], r.op_done[(cta, wg)], r.critical_path()

Per SM (a CTA is one SM unless `sm_of` puts several co-resident CTAs of a non-persistent grid on one SM:
they then share its schedulers, tensor pipe, store path and TMA unit):
  - four issue schedulers, warp w on scheduler w % 4 (NVIDIA Hopper architecture whitepaper: four
    SM sub-partitions, each with its own warp scheduler); a run of instructions takes the sum of their
    stall counts alone (the compiler's fixed delays, sass_paths.stall) and shares the scheduler's
    issue.slots_per_clk with the other warps on it;
  - one tensor pipe, first come first served: a warpgroup MMA m x n x k occupies it 2mnk /
    tensor.flop_per_clk_sm cycles once the last of its warps issued it (PTX ISA 9.7.15.5: wgmma is a
    warpgroup instruction), and completes wgmma.tail_cycles after its service; wgmma.wait_group N
    (WARPGROUP.DEPBAR.LE gsb0, N) waits for all but the newest N commit groups;
  - one load/store path (the LSU): each warp-wide global store or load occupies it for the cycles the lsu
    probe measured for its bytes a lane (lsu.store_cycles.<w>B, lsu.load_cycles.<w>B), first come first
    served; a warp stalls until the path takes its access. A calibration without them (the B200's) prices
    a store by its bytes at store.bytes_per_clk_sm (a warp stalls when it would wait more than
    store.drain_cycles) and a load by its issue alone;
  - one TMA unit: the boxes it loads go one after another at tma.bytes_per_clk_sm, each landing its
    latency (MemoryState.tma_cycles) after it started;
  - scoreboards, where the calibration has the latency probe's costs (sb.latency_cycles.*, shfl.cycles_sm):
    an instruction the SASS marks as waiting waits until the shuffles, shared loads and global loads whose
    scoreboards it names have written their results (their latency after issue), and each shuffle takes the
    SM's shuffle unit for shfl.cycles_sm. Without those costs a warp never waits on a scoreboard.
Synchronisation: an mbarrier phase completes when its last signal does (an arrive, or the landing of a
TMA load's bytes); a waiter resumes mbarrier.wake_cycles later, or passes at once (wait_pass_cycles) if
the phase is already complete; a bar.sync generation releases when its last warp arrives. A TMA load
lands MemoryState.tma_cycles after its issue. Every wait is a "wait until": a spin loop is one node.
The run is processed in time order (a heap of warps by their clock), so each resource serves its
requests in the order they arrive.
"""
from __future__ import annotations

import heapq
import random
from collections import defaultdict
from dataclasses import dataclass, field

from ..events import KIND_TABLE

BUCKET = 64          # cycles per issue-capacity bucket of a scheduler
LSU_WIDTHS = (4, 8, 16)   # bytes a lane the lsu probe measures (st.global / ld.global.nc .b32, .v2, .v4)


def _all_or_none(cal, names: dict, what: tuple) -> dict | None:
    """{key: cal[name]} for names = {key: cost name}, or None where the calibration has none of them; some but
    not all is an error naming the missing (`what`: what they price, and how to give them)."""
    got = {k: cal[n] for k, n in names.items() if n in cal.constants}
    if not got:
        return None
    missing = [n for k, n in names.items() if k not in got]
    if missing:
        raise KeyError(f"the calibration prices some {what[0]} but lacks {missing}: {what[1]}")
    return got


def lsu_cycles(cal) -> dict | None:
    """{(op, bytes a lane): the SM load/store path's cycles per warp-wide access} from the calibration's
    lsu.<op>_cycles.<w>B costs, or None where it has none of them (then stores go by their bytes)."""
    return _all_or_none(cal, {(op, w): f"lsu.{op}_cycles.{w}B" for op in ("store", "load") for w in LSU_WIDTHS},
                        ("warp-wide accesses", "give all six (pelib.predict.measured from the lsu probe) or none"))


LOCAL_WIDTHS = (4, 16)    # bytes a lane of the lsu probe's coalesced "line" pattern, a spill's form


def local_cycles(cal) -> dict | None:
    """{(op, bytes a lane): the load/store path's cycles per warp-wide local access (a spill's STL or LDL)} from
    the calibration's lsu.local_<op>_cycles.<w>B costs, or None where it has none (a spill then costs its issue)."""
    return _all_or_none(cal, {(op, w): f"lsu.local_{op}_cycles.{w}B" for op in ("store", "load") for w in LOCAL_WIDTHS},
                        ("spills (local accesses)", "give all four (pelib.predict.measured from the lsu probe's "
                                                    "line pattern) or none"))


def lsu_access_cycles(lsu: dict, op: str, width: int, widths: tuple = LSU_WIDTHS) -> float:
    """Cycles of one access of `width` bytes a lane: the measured width, or the line between the two measured
    widths around it (a 2-B STG.U16 takes the 4-B cost; wider than the widest, its cost per its bytes). `widths`:
    the table's measured widths (LOCAL_WIDTHS for a spill's)."""
    if width <= widths[0]:
        return lsu[(op, widths[0])]
    if width >= widths[-1]:
        return lsu[(op, widths[-1])] * width / widths[-1]
    for a, b in zip(widths, widths[1:]):
        if a <= width <= b:
            return lsu[(op, a)] + (lsu[(op, b)] - lsu[(op, a)]) * (width - a) / (b - a)
    raise AssertionError(width)


SB_CLASSES = ("shfl", "lds")     # the latency probe's dependent chains (sass_paths.SB_LATENCY)


def sb_latencies(cal) -> dict | None:
    """{class: cycles from a variable-latency instruction's issue to its result} from the calibration's
    sb.latency_cycles.<class> costs, with "ldg" from ldg.latency_cycles, or None where it has none of them
    (then no instruction waits on a scoreboard)."""
    got = _all_or_none(cal, {c: f"sb.latency_cycles.{c}" for c in SB_CLASSES},
                       ("instruction latencies", f"give all {len(SB_CLASSES)} (pelib.predict.measured from the "
                                                 "latency probe) or none"))
    if got is None:
        return None
    if "shfl.cycles_sm" not in cal.constants:
        raise KeyError("the calibration prices instruction latencies but not the SM's shuffle rate "
                       "(shfl.cycles_sm): pelib.predict.measured gives them together from the latency probe")
    return {**got, "ldg": cal["ldg.latency_cycles"], "shfl_sm": cal["shfl.cycles_sm"]}


LANES = 32           # a store instruction's lanes (every lane active: the epilogue's stores are full warps)


class ReplayError(RuntimeError):
    """The replay cannot finish: a warp waits for something no replayed warp provides."""


@dataclass
class Span:
    t0: float
    t1: float
    cat: str                 # issue | tensor | store | latency | memory | sync | wait | barrier
    cause: tuple | None = None


@dataclass
class _Warp:
    key: tuple
    ids: list
    pos: int = 0
    item: int = -1           # -1: the node's segment has not started
    t: float = 0.0
    n_mma: int = 0
    n_groups: int = 0
    done: bool = False
    log: list = field(default_factory=list)
    marks: list = field(default_factory=list)      # (time, loop) of taken backward branches
    sb: dict = field(default_factory=dict)         # scoreboard -> when its last pending result is written


@dataclass
class ReplayResult:
    end: float
    node_times: dict                  # node idx -> (reach, done)
    warps: dict                       # key -> _Warp (its log and marks)
    ops: dict                         # (cta, wg) -> [(issue, start, done, last warp)]
    store_bytes: dict                 # cta -> bytes stored
    load_bytes: dict                  # cta -> bytes its TMA loads landed in its shared memory (every destination)
    phase_done: dict                  # phase key -> completion time
    pipe_busy: dict                   # cta -> cycles the tensor pipe served
    traffic: dict = field(default_factory=dict)   # (cta, what, in a tile?) -> bytes the CTA's own instructions moved:
                                                  # what = "tma_load.<tensor>" (a box once), "ldg", "stg", "tma_store"

    def mma_done_times(self, cta: int) -> list[float]:
        out = [d for (c, _), ops in self.ops.items() if c == cta for _, _, d, _ in ops]
        return sorted(out)


class Replay:
    def __init__(self, graph, cal, mem, ctas=None, streamed=None, umma_cycles: float = 0.0, seed: int = 0,
                 sm_of: dict | None = None, compulsory=()):
        self.g, self.cal, self.mem = graph, cal, mem
        self.sm_of = dict(sm_of or {})         # cta -> the SM it shares with other replayed CTAs (default: its own)
        self.ctas = set(ctas) if ctas is not None else set(graph.ctas)
        # the streamed operand: TMA loads of these tensors ("a") may miss L2 (None: every load may); decided by
        # the tensor the load's map addresses, never by its size (a B half-box can be as large as an A box)
        self.streamed = None if streamed is None else frozenset(streamed)
        # tensors no other CTA of the grid reads (model.COLUMN_SIDE on a grid of one row of tiles): every load of
        # theirs is the box's first touch since the L2 flush, a miss
        self.compulsory = frozenset(compulsory)
        self.umma_cycles = umma_cycles          # one tcgen05.mma's service on its SM's tensor pipe
        self.commit_src = defaultdict(list)     # commit node -> its arrives (one per destination CTA)
        self.store_bpc = mem.store_bytes_per_clk(cal)
        self.lsu = lsu_cycles(cal)              # (op, bytes a lane) -> the LSU's cycles per access, or None
        self.lsu_free = defaultdict(float)
        self.local = local_cycles(cal)          # (op, bytes a lane) -> cycles per spill access, or None
        self.sb_lat = sb_latencies(cal)         # class -> cycles to a result a scoreboard waits for, or None
        self.shfl_used = defaultdict(dict)      # SM -> {bucket: cycles of its shuffle unit claimed}
        self.slots = cal["issue.slots_per_clk"] * BUCKET
        self.used = defaultdict(dict)           # (cta, sub-partition) -> {bucket: slots used}
        self.pipe_free = defaultdict(float)
        self.store_free = defaultdict(float)
        self.tma_free = defaultdict(float)
        self.warps = {k: _Warp(k, ids) for k, ids in graph.threads.items() if k[0] in self.ctas}
        self.node_times: dict = {}
        self.phase_left = {}
        self.phase_t = defaultdict(float)
        self.phase_last = {}
        self.phase_done: dict = {}
        self.waiters = defaultdict(list)
        for key, ph in graph.phases.items():
            sig = [s for s in ph.signals if graph.nodes[s].cta in self.ctas or graph.nodes[s].bar_cta in self.ctas]
            if ph.key[0] in self.ctas and sig:
                self.phase_left[key] = len(sig)
        self.groups = {k: [i for i in v if graph.nodes[i].cta in self.ctas] for k, v in graph.groups.items()}
        self.group_in = defaultdict(list)
        self.landings = defaultdict(list)       # load node -> its complete_tx nodes
        for n in graph.nodes:
            if n.kind == "complete_tx" and n.source is not None and n.cta in self.ctas:
                self.landings[n.source].append(n.idx)
            elif n.kind == "arrive" and n.warp < 0 and n.source is not None and n.cta in self.ctas:
                self.commit_src[n.source].append(n.idx)
        # MMA bookkeeping per warpgroup
        self.mma_warps = defaultdict(set)
        for k, w in self.warps.items():
            if any(it[0] == "mma" for i in w.ids for it in (graph.nodes[i].seg.program if graph.nodes[i].seg else ())):
                self.mma_warps[(k[0], k[1] // 4)].add(k)
        self.ops = defaultdict(list)            # (cta, wg) -> [issue, start, done, last]
        # a warpgroup's epilogue: from its wait_group 0 to its next wait (or MMA). The tensor pipe serves another
        # warpgroup's wgmma tensor.beside_epilogue times slower meanwhile: the epilogue's loads, stores and
        # arithmetic share the SM sub-partitions' register files and the L1 data path with the wgmma operands
        # (pelib.predict.probes' epilogue probe times a wgmma chain beside it)
        self.epi_since = {wg: None for wg in self.mma_warps}
        self.epi_until = {wg: None for wg in self.mma_warps}
        self.beside = cal.cost("tensor.beside_epilogue")
        self.op_arrived = defaultdict(lambda: defaultdict(set))
        self.op_reach = defaultdict(lambda: defaultdict(float))
        self.group_end = defaultdict(dict)      # (cta, wg) -> {group: last op index}
        self.store_bytes = defaultdict(int)
        self.load_bytes = defaultdict(int)
        self.traffic = defaultdict(int)
        self.pipe_busy = defaultdict(float)
        self.heap: list = []
        self.tick = 0
        self.rng = random.Random(seed)          # the loads' latencies (MemoryState.tma_draw): seeded, reproducible

    # ---- resources -----------------------------------------------------------------------------------
    def _sm(self, cta: int) -> int:
        """The SM whose resources CTA `cta` uses (co-resident CTAs share one; sm_of names them)."""
        return self.sm_of.get(cta, cta)

    def issue(self, key: tuple, t: float, n: float, cycles: float | None = None) -> float:
        """n instructions of warp `key` from time t on its scheduler: alone they take `cycles` (the sum of
        their stall counts, sass_paths.stall; one cycle each where not given), within the scheduler's free
        issue slots (issue.slots_per_clk) shared with the other warps on it."""
        cycles = float(n) if cycles is None else float(cycles)
        if n <= 0:
            return t + max(0.0, cycles)
        used = self.used[(self._sm(key[0]), key[1] % 4)]
        rate = n / max(cycles, float(n))
        left, time = float(n), t
        while left > 1e-9:
            b = int(time // BUCKET)
            b_end = (b + 1) * BUCKET
            free = self.slots - used.get(b, 0.0)
            if free <= 1e-9:
                time = b_end
                continue
            room = rate * (b_end - time)
            can = min(free, room, left)
            used[b] = used.get(b, 0.0) + can
            left -= can
            time = b_end if (can >= free - 1e-9 and can < room - 1e-9 and left > 1e-9) else time + can / rate
        return time

    @staticmethod
    def _claim(used: dict, t: float, cost: float) -> float:
        """The first time from t at which a unit whose claimed cycles per BUCKET are `used` has `cost` cycles
        free in that bucket; claims them there."""
        b = int(t // BUCKET)
        while used.get(b, 0.0) + cost > BUCKET + 1e-9:
            b += 1
            t = float(b * BUCKET)
        used[b] = used.get(b, 0.0) + cost
        return t

    def _sb_wait(self, w: _Warp, mask: int) -> None:
        """The warp's next instruction waits until every result the scoreboards of `mask` count is written."""
        ready = max((w.sb.pop(b) for b in range(6) if mask >> b & 1 and b in w.sb), default=0.0)
        if ready > w.t:
            self._log(w, w.t, ready, "latency")
            w.t = ready

    def _alu_marked(self, w: _Warp, it: tuple) -> None:
        """A run of plain instructions with scoreboard marks: issued piece by piece between its waits; a
        producer's result is written its class's latency after it issues (its place in the piece)."""
        n_at = c_at = 0
        for m in it[3] + (("end", it[1], it[2]),):
            n, c = m[1] - n_at, m[2] - c_at
            t0 = w.t
            if n > 0 or c > 0:
                w.t = self.issue(w.key, w.t, n, c)
                self._log(w, t0, w.t, "issue")
            n_at, c_at = m[1], m[2]
            if m[0] == "wait":
                self._sb_wait(w, m[3])
            elif m[0] == "set":
                if m[4] == "shfl":
                    # the SM's shuffle unit takes one warp shuffle every shfl.cycles_sm: its cycles are claimed
                    # in the issue buckets' time (a run is executed at once, ahead of the other warps' clocks)
                    start = self._claim(self.shfl_used[self._sm(w.key[0])], w.t, self.sb_lat["shfl_sm"])
                    if start > w.t:
                        self._log(w, w.t, start, "latency")
                        w.t = start
                w.sb[m[3]] = max(w.sb.get(m[3], 0.0), w.t + self.sb_lat[m[4]])

    def _lsu_access(self, w: _Warp, op: str, width: int, cycles: float | None = None, cat: str = "store") -> None:
        """One warp-wide access through its SM's load/store path: served in arrival order for the measured
        cycles of its op and width (a global access's, or `cycles`: a spill's); the warp waits until the path
        takes it."""
        sm = self._sm(w.key[0])
        start = max(w.t, self.lsu_free[sm])
        self.lsu_free[sm] = start + (lsu_access_cycles(self.lsu, op, width) if cycles is None else cycles)
        if start > w.t:
            self._log(w, w.t, start, cat)
            w.t = start

    def _push(self, t: float, what: tuple) -> None:
        self.tick += 1
        heapq.heappush(self.heap, (t, self.tick, what))

    # ---- the run --------------------------------------------------------------------------------------
    def run(self) -> ReplayResult:
        for k, w in self.warps.items():
            self._push(0.0, ("warp", k))
        while self.heap:
            t, _, what = heapq.heappop(self.heap)
            if what[0] == "warp":
                w = self.warps[what[1]]
                if w.done:
                    continue
                self._step(w)
            elif what[0] == "land":
                self._signal(what[1], t)
        stuck = [w.key for w in self.warps.values() if not w.done]
        if stuck:
            w = self.warps[stuck[0]]
            n = self.g.nodes[w.ids[w.pos]]
            raise ReplayError(f"the replay of CTAs {sorted(self.ctas)} stops: warp {stuck[0]} waits at its "
                              f"{n.kind} (line {n.line}) for what no replayed warp provides "
                              f"({len(stuck)} warps stuck); replay whole clusters")
        end = max((w.t for w in self.warps.values()), default=0.0)
        return ReplayResult(end, self.node_times, self.warps, {k: [tuple(o) for o in v] for k, v in self.ops.items()},
                            dict(self.store_bytes), dict(self.load_bytes), dict(self.phase_done), dict(self.pipe_busy),
                            dict(self.traffic))

    def _step(self, w: _Warp) -> None:
        """Advance warp w by one program item or one node; re-queue it unless it blocks."""
        if w.pos >= len(w.ids):
            w.done = True
            return
        node = self.g.nodes[w.ids[w.pos]]
        prog = node.seg.program if node.seg is not None else ()
        if w.item < len(prog) - 1 or (w.item == -1 and prog):
            w.item += 1
            if not self._item(w, prog[w.item]):
                return
            self._push(w.t, ("warp", w.key))
            return
        if not self._node(w, node):
            return
        w.pos += 1
        w.item = -1
        if w.pos >= len(w.ids):
            w.done = True
            return
        self._push(w.t, ("warp", w.key))

    def _in_tile(self, w) -> bool:
        """Whether the warp's current program item lies inside a tile (its next node carries a tile slot): its
        bytes repeat per tile; outside (a prologue's resident B), once per CTA."""
        return w.pos < len(w.ids) and self.g.nodes[w.ids[w.pos]].tile is not None

    def _log(self, w, t0, t1, cat, cause=None):
        if t1 > t0:
            w.log.append(Span(t0, t1, cat, cause))

    def _item(self, w: _Warp, it: tuple) -> bool:
        """Execute one program item; False if the warp blocks (it is re-queued when released)."""
        kind = it[0]
        t0 = w.t
        if kind == "alu":
            if len(it) > 3 and self.sb_lat is not None:
                self._alu_marked(w, it)
            else:
                w.t = self.issue(w.key, w.t, it[1], it[2] if len(it) > 2 else None)
                self._log(w, t0, w.t, "issue")
        elif kind == "sbwait":
            if self.sb_lat is not None:
                self._sb_wait(w, it[1])
        elif kind == "ldg":
            w.t = self.issue(w.key, w.t, 1)
            self.traffic[(w.key[0], "ldg", self._in_tile(w))] += it[1] * LANES
            self._log(w, t0, w.t, "issue")
            if self.lsu is not None:
                self._lsu_access(w, "load", it[1])
            if self.sb_lat is not None and len(it) > 2 and it[2] is not None:
                w.sb[it[2]] = max(w.sb.get(it[2], 0.0), w.t + self.sb_lat["ldg"])
        elif kind in ("stl", "ldl"):
            # a spill: the SM's load/store path, no global traffic (its lines are taken to stay in L1); an LDL's
            # result is waited for at the L1's latency, taken as shared memory's (one SRAM: NVIDIA H100 Tensor Core
            # GPU Architecture whitepaper, "combined L1 data cache and shared memory")
            w.t = self.issue(w.key, w.t, 1)
            self._log(w, t0, w.t, "issue")
            op = "store" if kind == "stl" else "load"
            if self.local is not None:
                self._lsu_access(w, op, it[1], lsu_access_cycles(self.local, op, it[1], LOCAL_WIDTHS), "local")
            if kind == "ldl" and self.sb_lat is not None and it[2] is not None:
                w.sb[it[2]] = max(w.sb.get(it[2], 0.0), w.t + self.sb_lat["lds"])
        elif kind == "stg":
            w.t = self.issue(w.key, w.t, 1)
            self._log(w, t0, w.t, "issue")
            nbytes = it[1] * LANES
            cta = w.key[0]
            self.store_bytes[cta] += nbytes
            self.traffic[(cta, "stg", self._in_tile(w))] += nbytes
            if self.lsu is not None:
                self._lsu_access(w, "store", it[1])
            else:                                   # no lsu costs: the store path by bytes
                start = max(w.t, self.store_free[self._sm(cta)])
                self.store_free[self._sm(cta)] = start + nbytes / self.store_bpc
                stall = start - w.t - self.cal["store.drain_cycles"]
                if stall > 0:
                    self._log(w, w.t, w.t + stall, "store")
                    w.t += stall
        elif kind == "mma":
            w.t = self.issue(w.key, w.t, 1)
            self._log(w, t0, w.t, "issue")
            wg = (w.key[0], w.key[1] // 4)
            j = w.n_mma
            w.n_mma += 1
            if it[4]:
                self.group_end[wg][w.n_groups] = j
                w.n_groups += 1
            arrived = self.op_arrived[wg][j]
            arrived.add(w.key)
            self.op_reach[wg][j] = max(self.op_reach[wg][j], w.t)
            if arrived >= self.mma_warps[wg]:
                self._mma(wg, j, it, w.key)
        elif kind == "umma":
            # tcgen05.mma, issued by one thread: served in order on the SM's tensor pipe (a cta_group::2 MMA
            # keeps both SMs of the pair busy for its half each, PTX ISA 9.7.16.10; the issuing SM stands for both)
            w.t = self.issue(w.key, w.t, 1)
            self._log(w, t0, w.t, "issue")
            wg = (w.key[0], w.key[1] // 4)
            cta = wg[0]
            start = max(w.t, self.pipe_free[self._sm(cta)])
            self.pipe_free[self._sm(cta)] = start + self.umma_cycles
            self.pipe_busy[cta] += self.umma_cycles
            self.ops[wg].append([w.t, start, start + self.umma_cycles + self.cal.cost("umma.tail_cycles"),
                                 w.key])
        elif kind == "tmem_ld":
            t1 = self.issue(w.key, w.t, 1) + self.cal.cost("tmem.ld_cycles")
            self._log(w, t0, t1, "tmem")
            w.t = t1
        elif kind == "depbar":
            wg = (w.key[0], w.key[1] // 4)
            need = w.n_groups - it[1] - 1
            if need >= 0:
                j = self.group_end[wg].get(need)
                ops = self.ops[wg]
                if j is None or j >= len(ops):
                    w.item -= 1                      # retry this item when the warpgroup's next op issues
                    self.waiters[("op", wg)].append(w.key)
                    return False
                done = ops[j][2]
                if done > w.t:
                    self._log(w, w.t, done, "tensor", ("op", wg, j))
                    w.t = done
            t1 = self.issue(w.key, w.t, 1)
            self._log(w, w.t, t1, "issue")
            w.t = t1
            if it[1] == 0 and wg in self.epi_since:        # wait_group 0: the warpgroup leaves its K loop
                self.epi_since[wg], self.epi_until[wg] = t1, None
        elif kind == "back":
            w.marks.append((w.t, it[1]))
        return True

    def _mma(self, wg, j, it, last) -> None:
        _, m, n, k, _ = it
        cta = wg[0]
        ops = self.ops[wg]            # ops issue in order per warpgroup (PTX ISA 9.7.15.5): op j - 1 is out
        t_issue = self.op_reach[wg][j]
        start = max(t_issue, self.pipe_free[self._sm(cta)])
        service = 2.0 * m * n * k / self.cal["tensor.flop_per_clk_sm"]
        self.epi_since[wg], self.epi_until[wg] = None, None
        if self.beside > 1.0 and any(o != wg and self._sm(o[0]) == self._sm(cta) and self.epi_since.get(o) is not None and
                                     self.epi_since[o] <= start and (self.epi_until.get(o) is None or
                                                                     self.epi_until[o] > start) for o in self.epi_since):
            service *= self.beside
        self.pipe_free[self._sm(cta)] = start + service
        self.pipe_busy[cta] += service
        done = start + service + self.cal["wgmma.tail_cycles"]
        ops.append([t_issue, start, done, last])
        for wk in self.waiters.pop(("op", wg), []):
            self._push(max(self.warps[wk].t, t_issue), ("warp", wk))

    def _node(self, w: _Warp, node) -> bool:
        kind = node.kind
        t0 = w.t
        if kind in ("wait_begin", "exit", "phase_begin", "phase_end"):    # marks cost nothing
            self.node_times[node.idx] = (t0, t0)
            wg = (w.key[0], w.key[1] // 4)
            if kind == "wait_begin" and self.epi_since.get(wg) is not None and self.epi_until.get(wg) is None:
                self.epi_until[wg] = t0                     # its epilogue is over: it waits (for its turn)
            return True
        if kind == "wait_end":
            key = node.phase
            if key is None or key not in self.phase_left:
                w.t = t0 + self.cal["mbarrier.wait_pass_cycles"]
                self._log(w, t0, w.t, "sync")
            else:
                if self.phase_left[key] > 0:
                    self.waiters[("phase", key)].append(w.key)
                    return False
                done = self.phase_done[key] + self._wake(key)
                w.t = max(t0 + self.cal["mbarrier.wait_pass_cycles"], done)
                self._log(w, t0, w.t, "wait", ("phase", key))
            self.node_times[node.idx] = (t0, w.t)
            return True
        if kind in ("arrive", "expect_tx"):
            w.t = t0 + self.cal["mbarrier.arrive_cycles"]
            self._log(w, t0, w.t, "issue")
            self.node_times[node.idx] = (t0, w.t)
            self._signal(node.idx, w.t)
            return True
        if kind == "tma_load":
            w.t = t0 + self.cal["tma.issue_cycles"]
            self._log(w, t0, w.t, "issue")
            self.node_times[node.idx] = (t0, w.t)
            nbytes = node.bytes or 0          # the box: what each destination receives (a multicast reads it once)
            streamed = self.streamed is None or node.tensor in self.streamed
            lat = self.mem.tma_draw(self.cal, nbytes, streamed, self.rng,
                                    1.0 if node.tensor in self.compulsory else None)
            self.traffic[(node.cta, "tma_load." + (node.tensor or "?"), node.tile is not None)] += nbytes
            # the issuing SM's TMA unit moves one box at tma.bytes_per_clk_sm, one box after another: a box
            # issued while the unit is busy starts when it is free (its latency runs from there); a multicast
            # box is read once and lands in each destination (PTX ISA 9.7.9.25 .multicast::cluster)
            start = max(w.t, self.tma_free[self._sm(node.cta)])
            self.tma_free[self._sm(node.cta)] = start + nbytes / self.cal["tma.bytes_per_clk_sm"]
            for land in self.landings.get(node.idx, []):
                self.load_bytes[self.g.nodes[land].cta] += nbytes
                self._push(start + lat, ("land", land))
            return True
        if kind == "commit":
            # tcgen05.commit: the barrier's arrive once every prior tcgen05 op of the thread completes
            # (PTX ISA 9.7.16.7.2 tcgen05.commit)
            w.t = t0 + self.cal["mbarrier.arrive_cycles"]
            self._log(w, t0, w.t, "issue")
            self.node_times[node.idx] = (t0, w.t)
            ops = self.ops.get((w.key[0], w.key[1] // 4), [])
            done = max([w.t] + [o[2] for o in ops])
            for a in self.commit_src.get(node.idx, []):
                self._push(done + self.cal.cost("umma.commit_cycles"), ("land", a))
            return True
        if kind in ("bar_sync", "cluster_sync"):
            grp = node.group
            self.group_in[grp].append((w.key, t0))
            members = self.groups.get(grp, [])
            if len(self.group_in[grp]) < len(members):
                self.waiters[("group", grp)].append(w.key)
                self.node_times[node.idx] = (t0, None)
                return False
            t_rel = max(t for _, t in self.group_in[grp]) + self.cal["bar_sync.cycles"]
            for wk, _ in self.group_in[grp]:
                ww = self.warps[wk]
                if wk == w.key:
                    continue
                ww.pos += 1
                ww.item = -1
                self._log(ww, ww.t, t_rel, "barrier")
                ww.t = t_rel
                if ww.pos >= len(ww.ids):
                    ww.done = True
                else:
                    self._push(t_rel, ("warp", wk))
            for i in members:
                self.node_times[i] = (self.node_times.get(i, (t0, None))[0], t_rel)
            self.waiters.pop(("group", grp), None)
            self._log(w, t0, t_rel, "barrier")
            w.t = t_rel
            return True
        # TMEM allocation and release, TMA store: an issue cost (pelib.events.KIND_TABLE's "tmem" and "tma_store");
        # any other kind has no price here: refused, not priced as something it is not
        price = KIND_TABLE[kind].price if kind in KIND_TABLE else None
        if price not in ("tmem", "tma_store"):
            raise ReplayError(f"node {node.idx} ({kind}, line {node.line}): the replay has no price for "
                              f"{price or 'this kind'}; give it one in pelib.events.KIND_TABLE and Replay._node")
        if kind == "tma_store":
            self.traffic[(node.cta, "tma_store", node.tile is not None)] += node.bytes or 0
        w.t = t0 + self.cal["tma.issue_cycles"]
        self._log(w, t0, w.t, "issue")
        self.node_times[node.idx] = (t0, w.t)
        return True

    def _wake(self, key) -> float:
        """Phase completion to the waiter's next instruction. A phase completed by a TMA load's bytes: none
        beyond the load's latency, which the calibration measures from the issue to the first try_wait
        that passes (pelib.predict.probes' tma probe), the waiter's wake included; an arrive's phase:
        mbarrier.wake_cycles (the ping-pong probe's hand-over less the arrive)."""
        last = self.phase_last.get(key)
        if last is not None and self.g.nodes[last].kind == "complete_tx":
            return 0.0
        return self.cal["mbarrier.wake_cycles"]

    def _signal(self, idx: int, t: float) -> None:
        n = self.g.nodes[idx]
        key = n.phase
        if n.warp < 0:
            self.node_times[idx] = (t, t)
        if key is None or key not in self.phase_left:
            return
        self.phase_t[key] = max(self.phase_t[key], t)
        if t >= self.phase_t[key]:
            self.phase_last[key] = idx
        self.phase_left[key] -= 1
        if self.phase_left[key] == 0:
            self.phase_done[key] = self.phase_t[key]
            for wk in self.waiters.pop(("phase", key), []):
                self._push(max(self.warps[wk].t, self.phase_t[key]), ("warp", wk))
