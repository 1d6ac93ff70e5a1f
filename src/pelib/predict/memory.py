"""The memory side every SM shares: one DRAM/L2 server whose latency grows with the load it carries and
with how scattered the concurrent addresses are, and the full problem's A stream that sets both.

    sched = a_schedule(stage, problem, sm_count)     # per CTA, the row tiles of A it loads, in order
    loc = locality(sched, prefetch)             # 0: one contiguous window .. 1: scattered
    MemoryState(util, loc, clock_ghz).dram_cycles(cal)

The model (each constant from the calibration, pelib.predict.calibration):
  - DRAM latency (ns) = latency_idle x (1 + queue_factor x u / (1 - u)) + scatter x scatter_penalty, with u
    the DRAM utilisation (bytes the kernel must move / its time / the measured copy bandwidth): an M/M/1
    queue's growth, the shape of a bandwidth-latency curve; the loaded-latency sweep replaces it by the
    measured curve.
  - Locality: at each step of the full schedule the grid reads one A tile per CTA. `locality` is 0 when
    those tiles lie side by side (stage 06: the 44 row groups read 44 neighbouring tiles) and 1 when they
    are spread over all of A (stage 07: a CTA's consecutive tiles are 49 tiles apart and the groups'
    pieces lie far apart): 1 - tiles / the span of their indices. The calibration's "sequential window"
    and "scattered" TMA sweeps measure the latency at those two ends; the model mixes them.
  - A TMA load's latency = tma.l2_latency + bytes / tma.bytes_per_clk_sm + demand miss x DRAM
    latency: the fraction of demand loads that still find their data in DRAM (after the L2 prefetch
    and the other column blocks' loads of the same tile) pays the loaded DRAM latency. That fraction is
    no constant: `demand_misses` counts it on the full schedule, from the kernel's exported prefetch
    depth (PREFETCH_TILES) and L2's size.
  - Every load also queues at L2 (l2_queue_cycles): at the kernel's own L2 traffic (its loads', stores' and
    prefetches' bytes over its predicted time, iterated with the DRAM utilisation) and read/write mix, the
    stream probe's L2-resident chase curves give the loaded latency; what it adds to the unloaded chase is
    added to each load's, drawn as an M/M/1 queue's waiting time like the DRAM queueing.
The schedules restate the kernels' static tile orders (common/tile_map.cuh StaticTileScheduler, the
resident-B and residue orders of kinds/sm90.py, which the kernels' headers describe); tests/test_predict.py
checks them against the simulated order of TMA loads at the simulator's size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..kinds.sm90 import resident_b_schedule, residue_schedule, window_schedule


def interp(points: list[dict], gbps: float, clock_ghz: float) -> float:
    """A measured latency curve at `gbps`, in cycles at `clock_ghz` (each point's cycles were counted at
    its own launch clock: the latency in ns is what carries over). Beyond the last point the line through
    the last two is extended (a queue past its measured load), at most to three times the last latency."""
    xs = [p["gbps"] for p in points]
    ys = [p["cycles"] / p["clock_ghz"] for p in points]          # ns
    if gbps <= xs[0]:
        ns = ys[0]
    elif gbps >= xs[-1]:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 and xs[-1] > xs[-2] else 0.0
        ns = min(ys[-1] + max(slope, 0.0) * (gbps - xs[-1]), 3 * ys[-1])
    else:
        i = next(k for k in range(1, len(xs)) if xs[k] >= gbps)
        f = (gbps - xs[i - 1]) / (xs[i] - xs[i - 1]) if xs[i] > xs[i - 1] else 0.0
        ns = ys[i - 1] + f * (ys[i] - ys[i - 1])
    return ns * clock_ghz


@dataclass(frozen=True)
class MemoryState:
    util: float          # DRAM utilisation, 0..1
    locality: float      # 0 contiguous .. 1 scattered
    clock_ghz: float     # converts ns to SM cycles
    write_share: float = 0.0     # the stores' share of the kernel's DRAM bytes
    sms: int = 1
    demand_miss: float = 1.0     # the share of the streamed loads that find no L2 line (demand_misses)
    l2_gbps: float = 0.0         # the kernel's requests between the SMs and L2 (GB/s: its L2 bytes over its time)
    l2_write_share: float = 0.0  # the stores' share of those bytes

    def store_bytes_per_clk(self, cal) -> float:
        """One SM's store drain rate into L2. DRAM's write bandwidth does not slow an SM's stores directly:
        L2 takes the writes and drains them; DRAM's limit acts through the shared server (the loaded
        latency every read sees, and the bandwidth floor of the whole kernel, model.solve)."""
        return cal["store.bytes_per_clk_sm"]

    def _curve_cycles(self, cal, name: str):
        pts = cal.curve(name)
        if not pts:
            return None
        top = max(p["gbps"] for p in (cal.curve("tma_load.sequential") or pts))
        return interp(pts, self.util * top, self.clock_ghz)

    def dram_ns(self, cal) -> float:
        u = min(max(self.util, 0.0), 0.97)
        return cal["dram.latency_idle_ns"] * (1 + cal["dram.queue_factor"] * u / (1 - u)) + \
            self.locality * cal["dram.scatter_penalty_ns"]

    def dram_cycles(self, cal) -> float:
        """A demand miss's latency in SM cycles: the measured sequential and scattered TMA curves mixed by
        locality where the calibration has them, else the formula."""
        seq = self._curve_cycles(cal, "tma_load.sequential")
        if seq is not None:
            scat = self._curve_cycles(cal, "tma_load.scattered")
            return seq if scat is None else (1 - self.locality) * seq + self.locality * scat
        return self.dram_ns(cal) * self.clock_ghz

    def gbps(self, cal) -> float:
        """The kernel's DRAM traffic (reads and writes, GB/s): the utilisation times the copy bandwidth."""
        return min(max(self.util, 0.0), 0.97) * cal["dram.bandwidth_gbps"]

    def loaded_chase_ns(self, cal) -> float | None:
        """A dependent DRAM load's latency (ns) at the kernel's traffic and read/write mix: the stream probe's
        read, copy (half writes) and write curves, interpolated in the write share (0, 0.5, 1). None without
        the curves."""
        return chase_ns(cal, "dram", self.gbps(cal), self.write_share)

    def l2_queue_cycles(self, cal) -> float:
        """The queueing every request to L2 meets at the kernel's L2 traffic (l2_gbps) and read/write mix: the stream
        probe's L2-resident read, copy (half writes) and write chase curves at that bandwidth, interpolated in the
        write share, less the unloaded chase (the curves' first point), in SM cycles. 0 without the curves: an
        L2 whose latency does not grow with its load."""
        at = chase_ns(cal, "l2", self.l2_gbps, self.l2_write_share) if self.l2_gbps > 0 else None
        if at is None:
            return 0.0
        return max(0.0, at - _ns(_monotone(cal.curve("l2.read"))[0])) * self.clock_ghz

    def miss_share(self, streamed: bool, miss: float | None = None) -> float:
        """The share of a load's requests that miss L2: `miss` where given (a compulsory miss: 1.0), else the
        demand-miss share for a streamed operand and none for the others."""
        return miss if miss is not None else self.demand_miss if streamed else 0.0

    def tma_parts(self, cal, streamed: bool = True, miss: float | None = None):
        """(hit, miss base, miss queueing, miss share) of an A box's latency in cycles, or None without the
        stream curves: a hit is the TMA sweep's L2-resident box; a demand miss is the sweep's unloaded DRAM
        box plus the queueing the stream probe's chase meets at the kernel's traffic and mix (its loaded
        latency less its unloaded one); `demand_miss` of the streamed loads miss (demand_misses), or `miss` of
        them where given (a compulsory miss: 1.0)."""
        chase = self.loaded_chase_ns(cal)
        l2 = self._curve_cycles(cal, "tma_load.l2")
        seq = cal.curve("tma_load.sequential")
        if chase is None or l2 is None or not seq:
            return None
        base = _ns(seq[0]) * self.clock_ghz
        excess = max(0.0, chase - _ns(_monotone(cal.curve("dram.read"))[0])) * self.clock_ghz
        return l2, base, excess, self.miss_share(streamed, miss)

    def tma_draw(self, cal, nbytes: int, streamed: bool, rng, miss: float | None = None) -> float:
        """One load's latency drawn at random (rng: the replay's seeded random.Random): a hit, or a miss whose
        queueing is exponential with the loaded mean (an M/M/1 queue's waiting time, Kleinrock, Queueing
        Systems vol. 1, section 3.2), so that the ring's slots absorb the spread of arrivals as they can.
        Without the stream curves: the mean (tma_cycles)."""
        parts = self.tma_parts(cal, streamed, miss)
        if parts is None:
            return self.tma_cycles(cal, nbytes, streamed, miss)
        l2, base, excess, m = parts
        q = self.l2_queue_cycles(cal)
        wait = rng.expovariate(1.0 / q) if q > 0 else 0.0        # every request queues at L2 (hit or miss)
        if m <= 0 or rng.random() >= m:
            return l2 + wait
        return base + wait + (rng.expovariate(1.0 / excess) if excess > 0 else 0.0)

    def tma_cycles(self, cal, nbytes: int, streamed: bool = True, miss: float | None = None) -> float:
        """One TMA load of `nbytes` into shared memory: L2 latency, the SM's TMA bandwidth, and for a
        streamed operand the demand-miss share of the loaded DRAM latency. With measured curves
        (tma_load.l2 / .sequential / .scattered, an 8 KiB box each, the stages' A box): the L2 curve's
        latency, plus the demand-miss share (demand_misses) of (the DRAM curve mixed by locality - the L2 latency), at the
        kernel's load (util x the sequential curve's highest bandwidth). The box's transfer through the
        SM's TMA unit is the replay's (a server at tma.bytes_per_clk_sm)."""
        parts = self.tma_parts(cal, streamed, miss)
        if parts is not None:
            l2, base, excess, m = parts
            return l2 + self.l2_queue_cycles(cal) + m * max(0.0, base + excess - l2)
        l2 = self._curve_cycles(cal, "tma_load.l2")
        seq = self._curve_cycles(cal, "tma_load.sequential")
        m = self.miss_share(streamed, miss)
        if l2 is not None and seq is not None:
            return l2 + m * max(0.0, self.dram_cycles(cal) - l2)
        base = cal["tma.l2_latency_cycles"] + nbytes / cal["tma.bytes_per_clk_sm"]
        return base + m * self.dram_cycles(cal)


def chase_ns(cal, level: str, gbps: float, write_share: float) -> float | None:
    """A dependent load's latency (ns) at `gbps` of traffic through `level` ("dram" or "l2") with that share of
    writes: the stream probe's <level>.read, .copy (half writes) and .write chase curves, made monotone,
    interpolated in the write share (0, 0.5, 1). None without the three curves."""
    pts = {k: _monotone(cal.curve(f"{level}.{k}")) for k in ("read", "copy", "write")}
    if not all(pts.values()):
        return None
    ws = min(max(write_share, 0.0), 1.0)
    ns = {k: interp(v, gbps, 1.0) for k, v in pts.items()}
    if ws <= 0.5:
        return ns["read"] + (ns["copy"] - ns["read"]) * ws / 0.5
    return ns["copy"] + (ns["write"] - ns["copy"]) * (ws - 0.5) / 0.5


def _ns(p: dict) -> float:
    return p["cycles"] / p["clock_ghz"]


def _monotone(points):
    """A latency curve made non-decreasing in bandwidth (a point measured past saturation can read lower
    than one before it: the queue's latency does not fall as the traffic grows)."""
    if not points:
        return points
    out, top = [], 0.0
    for p in sorted(points, key=lambda q: q["gbps"]):
        ns = max(_ns(p), top)
        top = ns
        out.append({"gbps": p["gbps"], "cycles": ns, "clock_ghz": 1.0})
    return out


def a_schedule(exports, m: int, n: int, grid: int, sm_count: int) -> list[list[int]]:
    """Per CTA (grid order), the row tiles of A it loads, in order, for the full problem (M x N) on a grid
    of `grid` CTAs: the kernel's schedule read from its exports (grid_kind, residue_order, residue_windows,
    cluster_x): 04's strided walk, 07's contiguous pieces of the comb-residue order, 07a/07b's windows."""
    tm, tn, cx = exports["tile_m"], exports["tile_n"], exports["cluster_x"]
    kind = exports["grid_kind"]
    n_tiles = n // tn
    if kind == 2:
        period = exports.get("residue_order")
        if exports.get("residue_windows"):
            sched = window_schedule(m, n, tn, grid, tm, period)
        elif period:
            sched = residue_schedule(m, n, tn, grid, tm, period)
        else:
            sched = resident_b_schedule(m, n, tn, grid, tm)
        return [[t for t, _ in s] for s in sched]
    m_tiles = math.ceil(m / (tm * cx))
    total = m_tiles * n_tiles
    if kind == 0:
        # one CTA (cluster) per tile, N fastest (00_tma_wgmma.cu: m0 = (blockIdx / n_tiles) * BM); the CTAs
        # of one wave run together, so "step" i of SM s is the tile of block s + i * sm_count
        per = max(1, sm_count // cx)
        return [[(t // n_tiles) for t in range(w, total, per)] for w in range(per)]
    # persistent: worker w takes tiles w, w + workers, ... (common/tile_map.cuh StaticTileScheduler)
    workers = max(1, grid // cx)
    return [[(t // n_tiles) for t in range(w, total, workers)] for w in range(workers)]


def locality(schedule: list[list[int]], prefetch: int = 0, samples: int = 64) -> float:
    """0 when the tiles the grid reads at one step (and the `prefetch` steps after it) are one contiguous
    window of A, 1 when they are spread over all of it: 1 - (distinct tiles) / (the span of their indices),
    averaged over `samples` steps. The calibration's TMA sweep measures both ends: its "sequential" grid
    walks a window (0), its "scattered" one hashes each box anywhere (1)."""
    steps = max((len(s) for s in schedule), default=0)
    if steps == 0:
        return 0.0
    out = []
    for i in sorted({int(x) for x in range(0, steps, max(1, steps // samples))}):
        tiles = {s[j] for s in schedule for j in range(i, min(i + 1 + prefetch, len(s)))}
        if len(tiles) < 2:
            continue
        out.append(1.0 - len(tiles) / (max(tiles) - min(tiles) + 1))
    return float(sum(out) / len(out)) if out else 0.0


def demand_misses(schedule: list[list[int]], prefetch: int, tile_bytes: float, l2_bytes: float,
                  other_bytes_per_step: float = 0.0) -> float:
    """The share of the grid's demand loads of A that find their row tile in no L2 line, on the full schedule
    (per CTA, the row tiles it loads in order: a_schedule). The grid walks its schedules a step (one tile per
    CTA) at a time. A row tile is in L2 at step i when some CTA touched it (a demand load or an L2 prefetch) at
    an earlier step and fewer than `l2_bytes` have been brought into L2 since (an LRU's stack distance: every
    row tile brought in adds `tile_bytes`, every step's stores `other_bytes_per_step`). Loads of one row tile
    by several CTAs in the same step all wait for the one DRAM read (an L2 miss in flight is no hit).

    The kernels' prefetch (common/tma.cuh tma_prefetch_2d_l2, cp.async.bulk.prefetch.tensor.L2, PTX ISA
    9.7.9.27) asks L2 for the first `prefetch` row tiles before the ring starts, then, at tile i, for tile
    i + prefetch: the tile a CTA demands next was asked for a step or more before."""
    steps = max((len(s) for s in schedule), default=0)
    if steps == 0:
        return 0.0
    seen: dict = {}          # row tile -> (step it was brought into L2, bytes brought into L2 at its last touch)
    brought = 0.0

    def touch(r, i):
        nonlocal brought
        last = seen.get(r)
        if last is None or brought - last[1] > l2_bytes:      # not in L2: brought in now
            brought += tile_bytes
            seen[r] = (i, brought)
        else:                                                 # in L2: the LRU position moves, its arrival stays
            seen[r] = (last[0], brought)

    misses = demands = 0
    for w in schedule:                        # the prologue's prefetches, at step 0
        for r in w[:prefetch]:
            touch(r, 0)
    for i in range(steps):
        for w in schedule:
            if i < len(w):
                r = w[i]
                last = seen.get(r)
                demands += 1
                if last is None or last[0] >= i or brought - last[1] > l2_bytes:
                    misses += 1
                touch(r, i)
        if prefetch > 0:
            for w in schedule:
                if i + prefetch < len(w):
                    touch(w[i + prefetch], i)
        brought += other_bytes_per_step
    return misses / demands if demands else 0.0
