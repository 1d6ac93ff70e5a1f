"""A stand-in event log in the simulator contract's schema, for testing the views without pelib.sim.

`persistent_log()` interleaves, with a seeded random scheduler, the roles of a cta_group::2 persistent
GEMM (FP8 stage 09's protocol): one producer per CTA, the leader's MMA issuer, epilogue warps in both
CTAs, a ring of `stages` slots and `accs` TMEM accumulators, and emits the events a simulator run
records (wait_begin/wait_end, tma_load, tma_load_done, complete_tx, mma, commit, tmem_ld, arrive, the
commits' arrivals by the asynchronous unit (warp -1), exit) with seq as the order stamp. A planted `bug` ('acc_empty_short': the MMA issuer waits for one
epilogue arrival more than exist) deadlocks it, leaving open waits. It is a test fixture: the views'
tests check the picture and the tables against what is planted here; the real logs come from pelib.sim.
"""
from __future__ import annotations

import random


class _Bar:
    def __init__(self, name, count):
        self.name, self.count, self.arr, self.tx, self.phase = name, count, 0, 0, 0

    def arrive(self, tx=0):
        self.tx += tx
        self.arr += 1
        self._settle()

    def complete(self, n):
        self.tx -= n
        self._settle()

    def _settle(self):
        if self.arr >= self.count and self.tx == 0:
            self.arr, self.phase = 0, self.phase + 1

    def passed(self, parity):
        return (self.phase & 1) != parity


def persistent_log(tiles: int = 4, kb: int = 3, stages: int = 2, accs: int = 2, epi_warps: int = 2, seed: int = 0,
                   bug: str | None = None, ctas: int = 2) -> list[dict]:
    rng = random.Random(seed)
    seq = [0]
    events: list[dict] = []

    def emit(cta, warp, role, kind, lane=0, **kw):
        events.append({"seq": seq[0], "cta": cta, "cluster": 0, "rank": cta, "warp": warp, "lane": lane,
                       "role": role, "kind": kind, **kw})
        seq[0] += 1

    full = [_Bar(f"full[{s}]", 1) for s in range(stages)]
    empty = [[_Bar(f"empty[{s}]", 1) for s in range(stages)] for _ in range(ctas)]
    acc_full = [[_Bar(f"acc_full[{a}]", 1) for a in range(accs)] for _ in range(ctas)]
    need = ctas * epi_warps + (1 if bug == "acc_empty_short" else 0)
    acc_empty = [_Bar(f"acc_empty[{a}]", need) for a in range(accs)]
    pending = []   # asynchronous completions: (actions)

    def wait(cta, warp, role, bar, parity, tag, **kw):
        began = False
        while not bar.passed(parity):
            if not began:
                emit(cta, warp, role, "wait_begin", barrier=bar.name, parity=parity, tag=tag, line=200 + tag, **kw)
                began = True
            yield "blocked"
        if began:
            emit(cta, warp, role, "wait_end", barrier=bar.name, parity=parity, tag=tag, line=200 + tag, **kw)

    def producer(c):
        for it in range(tiles * kb):
            s, ph = it % stages, (it // stages) & 1
            yield from wait(c, 0, "producer", empty[c][s], ph ^ 1, 1, slot=s)
            if c == 0:
                full[s].arrive(tx=ctas * 1000)
                emit(c, 0, "producer", "expect_tx", barrier=full[s].name, slot=s)
            emit(c, 0, "producer", "tma_load", slot=s)
            pending.append(lambda c=c, s=s: (full[s].complete(1000), emit(c, 0, "producer", "tma_load_done", slot=s)))
            yield "step"
        emit(c, 0, "producer", "exit")

    def mma():
        it = 0
        for t in range(tiles):
            a = t % accs
            yield from wait(0, 1, "MMA issuer", acc_empty[a], ((t // accs) & 1) ^ 1, 5, acc=a)
            for _ in range(kb):
                s, ph = it % stages, (it // stages) & 1
                yield from wait(0, 1, "MMA issuer", full[s], ph, 2, slot=s)
                emit(0, 1, "MMA issuer", "mma", slot=s, acc=a)
                emit(0, 1, "MMA issuer", "commit", slot=s, barrier=f"empty[{s}]")
                pending.append(lambda s=s: [(e[s].arrive(), emit(c, -1, "async unit", "arrive", barrier=f"empty[{s}]",
                                                                 slot=s)) for c, e in enumerate(empty)])
                it += 1
                yield "step"
            emit(0, 1, "MMA issuer", "commit", acc=a, barrier=f"acc_full[{a}]")
            pending.append(lambda a=a: [(f[a].arrive(), emit(c, -1, "async unit", "arrive", barrier=f"acc_full[{a}]",
                                                             acc=a)) for c, f in enumerate(acc_full)])
        emit(0, 1, "MMA issuer", "exit")

    def epilogue(c, w):
        for t in range(tiles):
            a = t % accs
            yield from wait(c, w, "epilogue", acc_full[c][a], (t // accs) & 1, 3, acc=a)
            for _ in range(2):
                emit(c, w, "epilogue", "tmem_ld", acc=a)
                yield "step"
            acc_empty[a].arrive()
            emit(c, w, "epilogue", "arrive", acc=a, barrier=f"acc_empty[{a}]")
            yield "step"
        emit(c, w, "epilogue", "exit")

    actors = [producer(c) for c in range(ctas)] + [mma()] + [epilogue(c, 2 + w) for c in range(ctas)
                                                             for w in range(epi_warps)]
    state = {id(a): "step" for a in actors}
    while actors:
        ready = [a for a in actors if state[id(a)] != "blocked"]
        if pending and (not ready or rng.random() < 0.4):
            pending.pop(rng.randrange(len(pending)))()
            state = {id(a): "step" for a in actors}
            continue
        if not ready:
            break   # deadlock: every actor blocked, nothing in flight
        a = rng.choice(ready)
        try:
            state[id(a)] = next(a)
        except StopIteration:
            actors.remove(a)
            state = {id(x): "step" for x in actors}
            continue
        if state[id(a)] != "blocked":
            state = {k: "step" for k in state}
    return events
