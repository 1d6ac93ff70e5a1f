"""The ping-pong barrier protocol of the sm90 stages 04-09 as a model: roles as interleaved actors over
modelled mbarriers, for what the simulator shows only at a rare seed.

The simulator (pelib.sim) runs a stage's own source and is the protocol checker of record: every stage
at three scheduler seeds, every planted mistake of pelib.sim.catalog. It tries one interleaving per seed.
A race whose window is narrow can pass three seeds: sm90/03c with its turns removed finishes correct at
the seeds the tests run and goes wrong or deadlocks only at other seeds (tests/test_hopper.py). This model
restates only the ping-pong protocol (producer, two consumer warpgroups taking turns, optionally a
multicast cluster), with the kernel's index formulas, and tries many interleavings per second: TMA
completions land after random delays and a seeded random scheduler picks the next role. The barrier rules
are the PTX ISA's (mbarrier, "Phase completion" and mbarrier.test_wait/try_wait .parity): a phase
completes when its pending arrivals reach the count and its transaction count is 0 (arrive.expect_tx adds
bytes, complete_tx subtracts them); try_wait.parity(p) passes when the completed-phase count c has
(c & 1) != p.
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


class Engine:
    """Interleaves actors. An actor yields ("wait", mbarrier, parity), ("arrive", mbarrier) or ("step",) (any
    other point where another role may run). `later(fn)` starts an asynchronous completion that runs fn
    after a random delay."""

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
        if op[0] == "arrive":
            op[1].arrive()
            return ("step",)
        return op

    @staticmethod
    def _ready(op) -> bool:
        return op[1].passed(op[2]) if op[0] == "wait" else True

    @staticmethod
    def _describe(op) -> str:
        return f"waits {op[1].name} parity {op[2]} (completed {op[1].completed})"


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
