"""The timing model's view of a run's happens-before graph: pelib.events.graph, with the warps' lanes merged,
the SASS a warp walks before each event, and each mbarrier phase's signals and waiters gathered for the replay.

    g = Graph.build(events, sass=SassPaths.of(stage))
    g.events[g.nodes[i].ev]     # the checked event node i stands for (pelib.events.check: the simulator's own)
    g.threads[(cta, warp)]      # that warp's nodes in program order, each with the SASS before it
    g.phases[(cta, bar, k)]     # the signals that complete phase k of an mbarrier, and its waiters

pelib.events.graph is the one graph: its nodes are the checked events, its edges program order, an async
operation's issue before its completion (by the op id the simulator gives both), a commit's MMAs before its
arrive, and a barrier phase's signals before its waiters (by the phase the simulator names). A node here is one
of its events (its index `ev`; every other field is read from that event) and adds only what the replay needs:
  - lane merge: the lanes of a warp are one stream (a lane's own order is kept, a collective event - a wait
    every lane makes - is one node whose `evs` are every lane's event);
  - `source`: an asynchronous completion's issuing node (a load's complete_tx, a commit's arrive), the
    graph's async edge;
  - `phase`: the key (CTA, barrier, k) of the mbarrier phase it signals or observed (PTX ISA 9.7.13.15
    mbarrier: a phase completes when its pending arrivals reach zero and its tx-count is zero; try_wait.parity p
    passes once the phase of parity p has completed), pelib.events.phase_key of its event;
  - `group`: a bar.sync's generation (the k-th bar.sync of every participating warp);
  - `seg`: the SASS its warp walks from the previous node (sass_paths): the MMAs, their commit groups and
    wgmma.wait_group are read there, not from the log (the log has no wait_group event).
The spin loop of a wait is one node (wait_begin..wait_end): "wait until the phase completes". A log without the
simulator's phases or op ids (an older or hand-written one) is refused, not guessed at.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from .. import events as _events   # the one event checker, the one graph and the one kind table

# Events the replay takes from the SASS instead (the MMAs, TMEM loads and stores) or that repeat another (the
# load's landing), and the phase marks (no instruction of their own): pelib.events.KIND_TABLE says which.
DROPPED = _events.kinds_priced("sass", "repeat")
MARKS = _events.kinds_priced("mark")


class GraphError(ValueError):
    """The event log cannot be turned into the replay's graph (the message says why)."""


@dataclass(eq=False)
class Node:
    idx: int
    ev: int                         # its event: Graph.events[ev] (a merged node's first lane's)
    warp: int                       # -1: an asynchronous unit (a load's landing, a commit's arrive)
    seq: int                        # a merged wait_end: its last lane's seq; any other node its first lane's
    evs: tuple                      # every lane's event it merges (indices into Graph.events)
    e: dict = field(repr=False)     # Graph.events[ev]
    phase: tuple | None = None      # (cta, bar, k) this node signals or waits for
    source: int | None = None       # an async node: the node that issued it
    group: tuple | None = None      # bar.sync / cluster_sync: (kind, scope, id, generation)
    seg: object = None              # sass_paths.Segment before this node (warp nodes)

    # what the event says (pelib.events.KEYS), read where it is
    kind = property(lambda self: self.e["kind"])
    cta = property(lambda self: self.e["cta"])
    line = property(lambda self: self.e["line"] or 0)
    parity = property(lambda self: self.e["parity"])
    bytes = property(lambda self: self.e["bytes"])      # a TMA load's box per destination, a store's, expect_tx's
    op = property(lambda self: self.e["op"])
    what = property(lambda self: self.e["what"])
    tile = property(lambda self: self.e["tile"])
    tensor = property(lambda self: self.e["tensor"])
    cluster = property(lambda self: -1 if self.e["cluster"] is None else self.e["cluster"])
    rank = property(lambda self: -1 if self.e["rank"] is None else self.e["rank"])
    dests = property(lambda self: int(self.e["dests"] or 1))   # a TMA load's destination CTAs

    @property
    def bar(self):
        """The mbarrier's shared-memory offset (of `bar_cta`); a bar.sync's barrier id."""
        return self.e["tag"] if self.kind == "bar_sync" else self.e["addr"]

    @property
    def bar_cta(self):
        return None if self.bar is None else _events.barrier_of(self.e)[0]

    @property
    def thread(self) -> tuple:
        return (self.cta, self.warp)


@dataclass
class Phase:
    key: tuple
    signals: list = field(default_factory=list)     # node indices
    waiters: list = field(default_factory=list)


@dataclass
class Graph:
    hb: _events.Graph                # pelib.events.graph of the run: the checked events and their edges
    nodes: list
    threads: dict                    # (cta, warp) -> [node idx] in program order
    phases: dict                     # (cta, bar, k) -> Phase
    groups: dict                     # (kind, scope, id, generation) -> [node idx]
    ctas: dict                       # cta -> (cluster, rank)
    node_of: dict = field(default_factory=dict, repr=False)   # an event's index -> the node that stands for it
    assumptions: list = field(default_factory=list)
    _classes: dict | None = field(default=None, repr=False)

    @property
    def events(self) -> list:
        """The checked log (every kind, pelib.events.check), the graph's node `ev` indexes."""
        return self.hb.events

    @property
    def warp_classes(self) -> dict:
        """pelib.events.warp_classes of the log, worked out once per graph (every replay of it asks)."""
        if self._classes is None:
            self._classes = _events.warp_classes(self.events)
        return self._classes

    @classmethod
    def build(cls, events, sass=None) -> "Graph":
        hb = _events.graph(events)
        ev = hb.events
        kept = [i for i, e in enumerate(ev) if e["kind"] not in DROPPED]
        if not kept:
            raise GraphError("the event log is empty: simulate the stage first (pelib.sim.host.run(stage, problem))")
        ctas = {ev[i]["cta"]: (_or(ev[i]["cluster"]), _or(ev[i]["rank"])) for i in kept if ev[i]["cta"] >= 0}
        g = cls(hb, [], {}, {}, {}, ctas)
        by_warp = defaultdict(lambda: defaultdict(list))
        asyncs = []
        for i in kept:
            e = ev[i]
            if e["warp"] < 0:
                if e["kind"] in ("complete_tx", "arrive"):       # a load's landing; a commit's arrive
                    asyncs.append(i)
            else:
                by_warp[(e["cta"], e["warp"])][e["lane"]].append(i)
        for key in sorted(by_warp):
            g.threads[key] = [g._node(grp, key[1]).idx for grp in _merge_lanes(ev, by_warp[key])]
        for i in asyncs:
            g._node([i], -1)
        g._link_async()
        g._phases()
        g._groups()
        if sass is not None:
            g.attach_sass(sass)
        return g

    def _node(self, grp: list, warp: int) -> Node:
        ev = self.hb.events
        seqs = [ev[i]["seq"] for i in grp]
        first = ev[grp[0]]
        n = Node(len(self.nodes), grp[0], warp, max(seqs) if first["kind"] == "wait_end" else min(seqs), tuple(grp),
                 first)
        self.nodes.append(n)
        for i in grp:
            self.node_of[i] = n.idx
        return n

    # ---- asynchronous completions -> what issued them: the graph's async edges ------------------------
    def _link_async(self) -> None:
        """A landing (complete_tx) to its TMA load, a commit's arrive to its commit: pelib.events.graph's async
        edge, by the op id the simulator gives the issue and its completions."""
        ev = self.hb.events
        for n in self.nodes:
            if n.warp >= 0:
                continue
            issue = "tma_load" if n.kind == "complete_tx" else "commit"
            src = [a for a, why in self.hb.preds(n.ev) if why == "async" and ev[a]["kind"] == issue]
            if not src:
                what = f"a complete_tx of {n.bytes} B" if issue == "tma_load" else "a commit's arrive"
                raise GraphError(f"{what} on barrier 0x{(n.bar or 0):x} of CTA {n.cta} (seq {n.seq}) has no earlier "
                                 f"{issue} of its op ({n.op}): the log is not the simulator's (pelib.sim's events "
                                 "give an async completion its issue's op); simulate the stage with pelib.sim")
            n.source = self.node_of[src[-1]]

    # ---- mbarrier phases: the phase the simulator names ----------------------------------------------
    def _phases(self) -> None:
        per_bar = defaultdict(list)
        for n in self.nodes:
            if n.bar is None or n.kind not in _events.SIGNALS + ("wait_end",):
                continue
            if n.kind != "wait_end" and n.e["phase"] is None:
                raise GraphError(f"{n.kind} of CTA {n.cta} warp {n.warp} (seq {n.seq}, line {n.line}) on barrier "
                                 f"0x{n.bar:x} names no phase: the log is not the simulator's (pelib.sim names each "
                                 "mbarrier event's phase); simulate the stage with pelib.sim")
            per_bar[_events.barrier_of(n.e)].append(n)
        for ns in per_bar.values():
            for n in sorted(ns, key=lambda n: n.seq):
                pk = _events.phase_key(n.e)
                if pk is None:         # a wait that passed a fresh barrier's parity 1 at once: no phase observed
                    continue
                ph = self.phases.setdefault(pk, Phase(pk))
                n.phase = pk
                (ph.waiters if n.kind == "wait_end" else ph.signals).append(n.idx)

    # ---- bar.sync generations -------------------------------------------------------------------------
    def _groups(self) -> None:
        gen = defaultdict(int)
        for key, ids in self.threads.items():
            for i in ids:
                n = self.nodes[i]
                if n.kind in ("bar_sync", "cluster_sync"):
                    scope = n.cluster if n.kind == "cluster_sync" else n.cta
                    bid = n.bar if n.kind == "bar_sync" else 0
                    k = gen[(key, n.kind, bid)]
                    gen[(key, n.kind, bid)] += 1
                    n.group = (n.kind, scope, bid, k)
                    self.groups.setdefault(n.group, []).append(i)

    # ---- the SASS between events ------------------------------------------------------------------------
    def attach_sass(self, sass) -> None:
        """Each warp node gets the fast path of SASS its warp walks from the previous node (sass_paths)."""
        relaxed = 0
        sass.use_log({("wait_begin" if n.kind == "wait_end" else n.kind, n.line) for n in self.nodes if n.warp >= 0})
        for key, ids in self.threads.items():
            at, ks = -1, None
            for i in ids:
                n = self.nodes[i]
                if n.kind in MARKS:
                    n.seg = None
                    continue
                n.seg = sass.walk(at, n.kind, None if n.kind == "exit" else n.line, ks)
                at, ks = n.seg.end, n.seg.k_state
                relaxed += n.seg.relaxed

        if relaxed:
            self.assumptions.append(f"{relaxed} segments of SASS walked past another event's instruction "
                                    "(no path between the two events avoids one): their cost is approximate")

    def describe(self) -> str:
        kinds = defaultdict(int)
        for n in self.nodes:
            kinds[n.kind] += 1
        return (f"{len(self.nodes)} nodes ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}), "
                f"{len(self.threads)} warps, {len(self.phases)} mbarrier phases, {len(self.groups)} barrier generations")


def _or(x, none=-1):
    return none if x is None else x


def _merge_lanes(ev: list, lanes: dict) -> list[list[int]]:
    """One warp's program order from its lanes' events (indices into ev, each lane's in its program order: the
    graph's program edges): the k-th (kind, line, barrier) event of every lane is one node; lanes' own orders are
    edges; ties go to the smaller seq (Kahn's algorithm)."""
    succ, indeg, members = defaultdict(set), defaultdict(int), defaultdict(list)
    for lane, idxs in lanes.items():
        seen = defaultdict(int)
        prev = None
        for i in idxs:
            e = ev[i]
            # a lane's exit is logged at its last scheduling point's line: every lane's exit is the warp's one
            off = e["tag"] if e["kind"] == "bar_sync" else e["addr"]
            base = ("exit", None, None) if e["kind"] == "exit" else (e["kind"], e["line"] or 0, off)
            k = (base, seen[base])
            seen[base] += 1
            members[k].append(i)
            indeg.setdefault(k, 0)
            if prev is not None and k not in succ[prev]:
                succ[prev].add(k)
                indeg[k] += 1
            prev = k
    first = {k: min(ev[i]["seq"] for i in v) for k, v in members.items()}
    heap = [(first[k], k) for k, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, k = heapq.heappop(heap)
        out.append(members[k])
        for s in succ[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (first[s], s))
    if len(out) != len(members):
        raise GraphError("the lanes of a warp disagree on their program order (a cycle between lanes)")
    return out
