"""One barrier-protocol model: roles as interleaved actors over modelled mbarriers and named barriers.

The engine runs each role of a kernel (producer, MMA issuer, consumer or epilogue warps, and the
asynchronous completions: a TMA load landing, a tcgen05.commit arriving) as a Python generator that
yields the barrier operation it is about to do; a seeded random scheduler interleaves them, so many
orders are tried. The barrier rules are the PTX ISA's:
  - mbarrier: a phase completes when its pending arrivals reach the count and its transaction count
    is 0 (arrive.expect_tx adds bytes, complete_tx subtracts them; the count may go negative first);
    try_wait.parity(p) passes when the completed-phase count c has (c & 1) != p (PTX ISA, mbarrier
    "Phase completion" and mbarrier.test_wait/try_wait .parity);
  - named barrier (bar.sync / bar.arrive id, count): threads add to the count; the barrier completes
    when the count is reached; bar.sync also waits for that completion (PTX ISA, bar/barrier).
Three protocols are written on it, each with the index formulas of its kernel: `pingpong` (sm90 stages
04-09: producer, two ping-pong consumer warpgroups, optionally a multicast cluster), `persistent` (FP8
stage 09: producer, MMA issuer, epilogue warps, two TMEM accumulators) and `waves` (F23: two waves of
epilogue warps handing TMEM over on named barriers). Each can plant a bug, to show the model catches it.
"""
from __future__ import annotations

import random

EVIDENCE = "modelled"


class ProtocolError(AssertionError):
    """The modelled protocol deadlocked, overwrote a slot in use, or let a reader see stale data."""


class MBarrier:
    """An mbarrier: `count` arrivals and a zero transaction count complete a phase."""

    def __init__(self, count: int, name: str = ""):
        self.count, self.name = count, name
        self.arrivals = self.tx = self.completed = 0

    def _settle(self) -> None:
        if self.arrivals == self.count and self.tx == 0:
            self.completed, self.arrivals = self.completed + 1, 0

    def arrive(self, expect_tx: int = 0) -> None:
        """mbarrier.arrive (with .expect_tx, the bytes the phase now also waits for)."""
        self.tx += expect_tx
        self.arrivals += 1
        self._settle()

    def complete_tx(self, n: int = 1) -> None:
        """A transfer's complete_tx (a TMA load landing)."""
        self.tx -= n
        self._settle()

    def passed(self, parity: int) -> bool:
        return (self.completed & 1) != parity


class NamedBarrier:
    """bar.sync / bar.arrive on one id: warps add 32 threads; the count completes a generation."""

    def __init__(self, count: int, name: str = ""):
        self.count, self.name = count, name
        self.arrived = self.generation = 0

    def add(self, threads: int = 32) -> int:
        """Add threads; returns the generation they belong to."""
        gen = self.generation
        self.arrived += threads
        if self.arrived > self.count:
            raise ProtocolError(f"named barrier {self.name}: {self.arrived} threads arrived, the count is {self.count}")
        if self.arrived == self.count:
            self.arrived, self.generation = 0, self.generation + 1
        return gen


class Engine:
    """Interleaves actors. An actor yields ("wait", mbarrier, parity), ("sync", named barrier) (bar.sync:
    arrive and wait), ("arrive", named barrier) (bar.arrive) or ("step",) (any other point where another
    role may run). `later(fn)` starts an asynchronous completion that runs fn after a random delay."""

    def __init__(self, seed: int = 0, max_delay: int = 6):
        self.rng = random.Random(seed)
        self.actors: dict = {}
        self.max_delay = max_delay
        self._n = 0

    def add(self, name: str, gen) -> None:
        self.actors[name] = gen

    def later(self, fn) -> None:
        def completion():
            for _ in range(self.rng.randint(0, self.max_delay)):
                yield ("step",)
            fn()
        self._n += 1
        self.actors[f"async{self._n}"] = completion()

    def run(self, max_steps: int = 2_000_000) -> int:
        """Run every actor to its end; ProtocolError on a deadlock (naming every blocked wait)."""
        pending: dict = {}
        for step in range(max_steps):
            while any(k not in pending for k in self.actors):    # a step may have started completions
                for k in [k for k in self.actors if k not in pending]:
                    try:
                        pending[k] = self._enter(next(self.actors[k]))
                    except StopIteration:
                        del self.actors[k]
            if not self.actors:
                return step
            runnable = [k for k in self.actors if self._ready(pending[k])]
            if not runnable:
                raise ProtocolError("deadlock: " + ", ".join(f"{k} {self._describe(pending[k])}" for k in self.actors))
            del pending[self.rng.choice(runnable)]
        raise ProtocolError(f"no end after {max_steps} steps")

    @staticmethod
    def _enter(op):
        if op[0] == "sync":                # bar.sync: arrive now, then wait for this generation to complete
            return ("sync", op[1], op[1].add())
        if op[0] == "arrive":
            op[1].add() if isinstance(op[1], NamedBarrier) else op[1].arrive()
            return ("step",)
        return op

    @staticmethod
    def _ready(op) -> bool:
        if op[0] == "wait":
            return op[1].passed(op[2])
        if op[0] == "sync":
            return op[1].generation > op[2]
        return True

    @staticmethod
    def _describe(op) -> str:
        if op[0] == "wait":
            return f"waits {op[1].name} parity {op[2]} (completed {op[1].completed})"
        return f"waits at bar.sync {op[1].name}"


# ---- sm90 stages 04-09: the ping-pong consumers ----------------------------------------------------

def pingpong(num_kb: int, stages: int, tiles: int, *, seed: int = 0, turns: bool = True, ctas: int = 1,
             turn_early: bool = False, max_steps: int = 2_000_000) -> dict:
    """The producer and the two ping-pong consumer warpgroups of stage 04 (ctas=1), of the CTAs of one
    stage 05 cluster (ctas=3, A multicast) or of a stage-09 pair (ctas=2).

    The index formulas are the kernels' (04_pingpong_resident_b.cu, 05_multicast_a.cu): ring position
    it = i * num_kb + kb, slot it % stages, parity (it / stages) & 1. Each producer waits its empty[s]
    with parity ^ 1, posts arrive.expect_tx on its full[s]; the TMA load is issued by CTA it % ctas into
    the slot of every CTA of the cluster and lands later with complete_tx on each destination's full[s].
    Warpgroup w takes tiles w, w + 2, ..., waits turn[w] with parity (n + 1) & 1 (w = 0) or n & 1 (w = 1)
    before its n-th mainloop, arrives on turn[w ^ 1] after its last issue (turn_early: in the last K
    slice, before it frees the previous one: TURN_EARLY=1 of stages 06+), and frees each slot (after the
    next slice's wgmma are issued; the last after wait_group 0) with one arrive on empty[s] of every CTA
    of the cluster. With ctas > 1 a producer ends by waiting for the release of its last `stages`
    positions (no CTA leaves while a peer may still arrive on it). Raises ProtocolError on a deadlock, a
    slot written while a warpgroup reads it, or a read of another position's data; turns=False drops the
    turn barriers (to show what they prevent). Returns counts of what ran."""
    eng = Engine(seed)
    full = [[MBarrier(1, f"cta{c}.full[{s}]") for s in range(stages)] for c in range(ctas)]
    empty = [[MBarrier(ctas, f"cta{c}.empty[{s}]") for s in range(stages)] for c in range(ctas)]
    turn = [[MBarrier(1, f"cta{c}.turn[{w}]") for w in (0, 1)] for c in range(ctas)]
    slot_tag = [[None] * stages for _ in range(ctas)]
    in_use = [[0] * stages for _ in range(ctas)]
    log = {"fills": 0, "reads": 0, "tiles": [0, 0]}

    def land(dst, s, it):
        if in_use[dst][s]:
            raise ProtocolError(f"CTA {dst}: position {it} lands in slot {s} while a warpgroup reads it")
        slot_tag[dst][s] = it
        log["fills"] += 1
        full[dst][s].complete_tx(1)

    def producer(c):
        it = 0
        for _ in range(tiles * num_kb):
            s, ph = it % stages, (it // stages) & 1
            yield ("wait", empty[c][s], ph ^ 1)
            full[c][s].arrive(expect_tx=1)                  # one box, in units
            if it % ctas == c:                              # the issuer: to every CTA of the cluster
                for dst in range(ctas):
                    eng.later(lambda dst=dst, s=s, it=it: land(dst, s, it))
            it += 1
        if ctas > 1:
            for _ in range(stages):
                yield ("wait", empty[c][it % stages], ((it // stages) & 1) ^ 1)
                it += 1

    def release(c, slot):
        in_use[c][slot] -= 1
        for dst in range(ctas):
            yield ("arrive", empty[dst][slot])

    def consumer(c, wg):
        for n, i in enumerate(range(wg, tiles, 2)):
            if turns:
                yield ("wait", turn[c][wg], ((n + 1) & 1) if wg == 0 else (n & 1))
            it0 = i * num_kb
            for kb in range(num_kb):
                it = it0 + kb
                s, ph = it % stages, (it // stages) & 1
                yield ("wait", full[c][s], ph)
                if slot_tag[c][s] != it:
                    raise ProtocolError(f"CTA {c} warpgroup {wg} reads slot {s} for position {it} but it "
                                        f"holds {slot_tag[c][s]}")
                in_use[c][s] += 1
                log["reads"] += 1
                if turns and turn_early and kb == num_kb - 1:
                    yield ("arrive", turn[c][wg ^ 1])
                if kb > 0:
                    yield from release(c, (it - 1) % stages)
            if turns and not turn_early:
                yield ("arrive", turn[c][wg ^ 1])
            yield from release(c, (it0 + num_kb - 1) % stages)
            if c == 0:
                log["tiles"][wg] += 1

    for c in range(ctas):
        eng.add(f"producer{c}", producer(c))
        eng.add(f"wg0-{c}", consumer(c, 0))
        eng.add(f"wg1-{c}", consumer(c, 1))
    eng.run(max_steps)
    return log


# ---- FP8 stage 09: producer, MMA, epilogue, two accumulators ------------------------------------

PERSISTENT_BUGS = {
    "acc_empty_parity": "the MMA waits on acc_empty for the tile's own parity instead of its complement",
    "acc_empty_count": "acc_empty expects the leader's epilogue warps only (forgets the peer CTA's)",
    "release_before_read": "the epilogue releases the accumulator before reading it",
    "no_producer_wait": "the producer refills a slot without waiting on empty[s]",
}


def persistent(tiles: int = 11, clusters: int = 1, stages: int = 4, num_kb: int = 6, epi_warps: int = 4,
               acc_bufs: int = 2, cg: int = 2, seed: int = 0, trials: int = 20, bug: str | None = None) -> dict:
    """Stage 09's producer / MMA / epilogue protocol of one cluster under random timing.

    Roles follow 09_persistent_megakernel.cu: ring slots with PipelineState parities, empty[s] freed by a
    multicast commit, acc_full[b] by a multicast commit after the tile's MMAs, acc_empty[b] on the leader
    with cg * epi_warps arrivals (the early release). TMA completions and commits land after random
    delays. Checks: no deadlock; the MMA reads a slot only when it holds this tile's k-block; the producer
    refills a slot only after the MMAs that read it completed; the MMA writes an accumulator only after
    every epilogue warp released its previous tile; the epilogue reads an accumulator only after the MMAs
    of its tile completed. Returns counts and the first violation; `bug` (a key of PERSISTENT_BUGS) plants one."""
    if bug is not None and bug not in PERSISTENT_BUGS:
        raise ValueError(f"bug={bug!r}: one of {list(PERSISTENT_BUGS)}")
    my_tiles = list(range(0, tiles, clusters))
    violations: list[str] = []
    for trial in range(trials):
        eng = Engine(seed * 1000 + trial)
        full = [MBarrier(1 + cg, f"full[{s}]") for s in range(stages)]          # expect_tx arrive + one TMA per CTA
        empty = [[MBarrier(1, f"cta{v}.empty[{s}]") for s in range(stages)] for v in range(cg)]
        acc_full = [[MBarrier(1, f"cta{v}.acc_full[{b}]") for b in range(acc_bufs)] for v in range(cg)]
        acc_empty = [MBarrier(epi_warps if bug == "acc_empty_count" else cg * epi_warps, f"acc_empty[{b}]")
                     for b in range(acc_bufs)]                                  # the leader's
        slot, slot_busy = [None] * stages, [False] * stages
        acc, readers = [None] * acc_bufs, [set() for _ in range(acc_bufs)]

        def producer(v):
            idx, ph = 0, 0
            for t in my_tiles:
                for kb in range(num_kb):
                    if bug != "no_producer_wait":
                        yield ("wait", empty[v][idx], ph ^ 1)
                    if slot_busy[idx]:
                        violations.append(f"trial {trial}: producer {v} refills slot {idx} before the MMAs read it")
                    if v == 0:
                        full[idx].arrive()                                      # arrive.expect_tx
                    eng.later(lambda i=idx, data=(t, kb), v=v: (slot.__setitem__(i, data) if v == 0 else None,
                                                                full[i].arrive()))
                    idx, ph = (idx + 1) % stages, ph ^ (idx + 1 == stages)
            for _ in range(stages):
                yield ("wait", empty[v][idx], ph ^ 1)
                idx, ph = (idx + 1) % stages, ph ^ (idx + 1 == stages)

        def mma():
            idx, ph = 0, 0
            for it, t in enumerate(my_tiles):
                b, aph = it % acc_bufs, (it // acc_bufs) & 1
                yield ("wait", acc_empty[b], aph if bug == "acc_empty_parity" else aph ^ 1)
                if readers[b]:
                    violations.append(f"trial {trial}: MMA overwrites accumulator {b} while warps "
                                      f"{sorted(readers[b])} read it")
                acc[b] = None
                for kb in range(num_kb):
                    yield ("wait", full[idx], ph)
                    if slot[idx] != (t, kb):
                        violations.append(f"trial {trial}: MMA reads slot {idx} holding {slot[idx]}, wants {(t, kb)}")
                    slot_busy[idx] = True
                    eng.later(lambda i=idx: (slot_busy.__setitem__(i, False), [empty[v][i].arrive() for v in range(cg)]))
                    idx, ph = (idx + 1) % stages, ph ^ (idx + 1 == stages)
                eng.later(lambda b=b, t=t: (acc.__setitem__(b, t), [acc_full[v][b].arrive() for v in range(cg)]))

        def epilogue(v, w):
            for it, t in enumerate(my_tiles):
                b, aph = it % acc_bufs, (it // acc_bufs) & 1
                yield ("wait", acc_full[v][b], aph)
                if acc[b] != t:
                    violations.append(f"trial {trial}: epilogue ({v},{w}) reads accumulator {b} holding tile "
                                      f"{acc[b]}, wants {t}")
                if bug == "release_before_read":
                    acc_empty[b].arrive()
                readers[b].add((v, w))
                yield ("step",)                                                 # tcgen05.ld of the tile
                readers[b].discard((v, w))
                if bug != "release_before_read":
                    acc_empty[b].arrive()

        for v in range(cg):
            eng.add(f"producer{v}", producer(v))
        eng.add("mma", mma())
        for v in range(cg):
            for w in range(epi_warps):
                eng.add(f"epilogue{v}.{w}", epilogue(v, w))
        try:
            eng.run(10 ** 6)
        except ProtocolError as e:
            violations.append(f"trial {trial}: {e}")
        if violations:
            break
    return {"tiles per cluster": len(my_tiles), "stages": stages, "k-blocks": num_kb, "epilogue warps": epi_warps,
            "trials": trials, "ok": not violations, "first violation": violations[0] if violations else None,
            "evidence": "modelled (the barrier protocol of 09_persistent_megakernel.cu, random timing)"}


# ---- F23: two waves of epilogue warps on named barriers ---------------------------------------------

WAVE_BUGS = {"a_skips_wait": "wave A starts reading without waiting for wave B's hand-over",
             "b_hands_over_after_last": "wave B hands over after the last tile, to nobody"}


def waves(tiles: int = 9, seed: int = 0, bug: str | None = None) -> dict:
    """F23's epilogue as the variant writes it: wave A = warps 2, 3 (lane quarters 2, 3), wave B = warps
    4, 5 (quarters 0, 1). Wave B reads tile i after wave A's bar.arrive on BAR_WAVE_A_DONE (128 threads:
    A's 64 arrive, B's 64 sync); wave A reads tile i > 0 after B's hand-over on BAR_WAVE_B_DONE, which B
    skips after the last tile. Checks: at most two warps read TMEM at once, and no barrier is left with
    arrivals at exit. `bug` (a key of WAVE_BUGS) plants one mistake."""
    if bug is not None and bug not in WAVE_BUGS:
        raise ValueError(f"bug={bug!r}: one of {list(WAVE_BUGS)}")
    eng = Engine(seed)
    bars = {"A": NamedBarrier(128, "BAR_WAVE_A_DONE"), "B": NamedBarrier(128, "BAR_WAVE_B_DONE")}
    reading, most = set(), [0]

    def warp(w):
        wave_a = w % 4 >= 2
        for it in range(tiles):
            if (not wave_a or it > 0) and bug != "a_skips_wait":
                yield ("sync", bars["B" if wave_a else "A"])
            reading.add(w)
            most[0] = max(most[0], len(reading))
            yield ("step",)                                   # tcgen05.ld of its quarter
            reading.discard(w)
            if wave_a:
                yield ("arrive", bars["A"])
            elif it < tiles - 1 or bug == "b_hands_over_after_last":
                yield ("arrive", bars["B"])

    for w in (2, 3, 4, 5):
        eng.add(f"warp{w}", warp(w))
    try:
        eng.run(10 ** 5)
    except ProtocolError as e:
        return {"ok": False, "why": str(e), "most readers": most[0]}
    pending = {b.name: b.arrived for b in bars.values() if b.arrived}
    return {"ok": most[0] <= 2 and not pending, "most readers": most[0], "pending at exit": pending,
            "evidence": "modelled (F23's named-barrier hand-over, random timing)"}
