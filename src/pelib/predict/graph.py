"""The happens-before graph of one simulated run, as the timing model replays it.

    g = Graph.build(events, sass=SassPaths.of(stage))
    g.threads[(cta, warp)]      # that warp's nodes in program order, each with the SASS before it
    g.phases[(cta, bar, k)]     # the signals that complete phase k of an mbarrier, and its waiters

Nodes are the simulator's events (pelib.sim.EVENT_KINDS). Edges:
  - program order per warp: the lanes of a warp are merged into one stream (a lane's own order is kept,
    a collective event - a wait every lane makes - is one node);
  - arrive / arrive.expect_tx / complete_tx -> the wait_end that observes the phase they complete
    (PTX ISA 9.7.13.15 mbarrier: a phase completes when its pending arrivals reach zero and its
    tx-count is zero; try_wait.parity p passes once the phase of parity p has completed);
  - tma_load -> its complete_tx (the bytes land on the barrier the load names);
  - bar.sync: the k-th bar.sync of every participating warp is one barrier generation;
  - the MMAs, their commit groups and wgmma.wait_group are read from the SASS each warp walks between
    two events (sass_paths), not from the log: the log has no wait_group event.
The spin loop of a wait is one node (wait_begin..wait_end): "wait until the phase completes".

Until pelib.events carries each event's phase and the barrier's CTA, two things are inferred here
(named in every prediction's assumptions):
  - a barrier's arrival count: the largest count under which every wait_end of the run observes a
    completed phase of its parity (a fresh barrier passes parity 1 at once);
  - a remote arrive's CTA: the simulator logs it with the arriving thread's CTA; where several lanes
    of one warp arrive at one line on the same offset in a cluster of more than one CTA, lane l's
    arrive goes to rank l (the cluster stages' `tid < CLUSTER` release loops).
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from ..timing import check_events

WARP_KINDS = ("wait_begin", "wait_end", "arrive", "expect_tx", "tma_load", "tma_store", "commit", "tmem_alloc",
              "tmem_dealloc", "tmem_ld", "tmem_cp", "bar_sync", "cluster_sync", "exit")
SIGNALS = ("arrive", "expect_tx", "complete_tx")
# Events the replay takes from the SASS instead (the MMAs) or that repeat another (the load's landing).
DROPPED = ("mma", "mma_done", "tma_load_done", "tma_store_done")


class GraphError(ValueError):
    """The event log cannot be turned into a happens-before graph (the message says why)."""


@dataclass
class Node:
    idx: int
    cta: int
    warp: int               # -1: an asynchronous unit (a load's landing, a commit's arrive)
    kind: str
    line: int
    seq: int
    bar: int | None = None  # shared-memory offset of the mbarrier (of `bar_cta`)
    bar_cta: int | None = None
    parity: int | None = None
    tag: int | None = None  # a wait's tag, or the bytes of a TMA load / expect_tx / complete_tx
    lanes: frozenset = frozenset()
    phase: tuple | None = None      # (cta, bar, k) this node signals or waits for
    source: int | None = None       # an async node: the node that issued it
    group: tuple | None = None      # bar.sync: (cta, id, generation)
    seg: object = None              # sass_paths.Segment before this node (warp nodes)
    cluster: int = -1
    rank: int = -1

    @property
    def thread(self) -> tuple:
        return (self.cta, self.warp)


@dataclass
class Phase:
    key: tuple
    signals: list = field(default_factory=list)     # node indices
    waiters: list = field(default_factory=list)
    count: int = 1
    tx: int = 0


@dataclass
class Graph:
    nodes: list
    threads: dict                    # (cta, warp) -> [node idx] in program order
    phases: dict                     # (cta, bar, k) -> Phase
    groups: dict                     # (cta, id, generation) -> [node idx]
    counts: dict                     # (cta, bar) -> inferred arrival count
    ctas: dict                       # cta -> (cluster, rank)
    assumptions: list = field(default_factory=list)

    @classmethod
    def build(cls, events, sass=None) -> "Graph":
        ev = [e for e in check_events(events) if e["kind"] not in DROPPED]
        if not ev:
            raise GraphError("the event log is empty: simulate the stage first (Stage.run(problem, 'sim'))")
        ctas = {e["cta"]: (e.get("cluster", -1), e.get("rank", -1)) for e in ev if e["cta"] >= 0}
        nodes: list[Node] = []
        threads: dict = {}
        by_warp = defaultdict(lambda: defaultdict(list))
        asyncs = []
        for e in ev:
            if e["warp"] < 0:
                asyncs.append(e)
            else:
                by_warp[(e["cta"], e["warp"])][e["lane"]].append(e)
        remote = _remote_lines(by_warp, ctas)
        for key in sorted(by_warp):
            order = _merge_lanes(by_warp[key])
            ids = []
            for grp in order:
                e = grp[0]
                bar_cta = e["cta"]
                if (e["kind"] == "arrive" and (e["cta"], e["warp"], e["line"], e["barrier"]) in remote
                        and len(grp) == 1):
                    bar_cta = _cta_of_rank(ctas, ctas[e["cta"]][0], e["lane"]) or bar_cta
                n = Node(len(nodes), e["cta"], e["warp"], e["kind"], e["line"],
                         min(x["seq"] for x in grp) if e["kind"] != "wait_end" else max(x["seq"] for x in grp),
                         e.get("barrier"), bar_cta if e.get("barrier") is not None else None,
                         e.get("parity"), e.get("tag"), frozenset(x["lane"] for x in grp),
                         cluster=ctas.get(e["cta"], (-1, -1))[0], rank=ctas.get(e["cta"], (-1, -1))[1])
                nodes.append(n)
                ids.append(n.idx)
            threads[key] = ids
        for e in asyncs:
            if e["kind"] != "complete_tx":
                continue
            nodes.append(Node(len(nodes), e["cta"], -1, e["kind"], e["line"], e["seq"], e.get("barrier"), e["cta"],
                              None, e.get("tag"), frozenset(), cluster=ctas.get(e["cta"], (-1, -1))[0],
                              rank=ctas.get(e["cta"], (-1, -1))[1]))
        g = cls(nodes, threads, {}, {}, {}, ctas)
        if remote:
            g.assumptions.append("remote arrives: lane l of a multi-lane release arrives on the barrier of rank l")
        g._link_loads()
        g._phases()
        g._groups()
        if sass is not None:
            g.attach_sass(sass)
        return g

    # ---- TMA loads -> their landings ----------------------------------------------------------------
    def _link_loads(self) -> None:
        issued = [n for n in self.nodes if n.kind == "tma_load"]
        pending = defaultdict(list)        # (cluster, bar, bytes) -> [(seq, node, set of CTAs landed)]
        for n in issued:
            pending[(n.cluster, n.bar, n.tag)].append([n.seq, n, set()])
        for n in sorted((x for x in self.nodes if x.kind == "complete_tx"), key=lambda x: x.seq):
            cands = pending.get((n.cluster, n.bar, n.tag), [])
            hit = next((c for c in cands if c[0] < n.seq and n.cta not in c[2]), None)
            if hit is None:
                raise GraphError(f"a complete_tx of {n.tag} B on barrier 0x{n.bar:x} of CTA {n.cta} (seq {n.seq}) "
                                 "matches no earlier TMA load of the cluster")
            hit[2].add(n.cta)
            n.source = hit[1].idx

    # ---- mbarrier phases -------------------------------------------------------------------------------
    def _phases(self) -> None:
        per_bar = defaultdict(list)
        for n in self.nodes:
            if n.bar is None or n.kind not in SIGNALS + ("wait_end",):
                continue
            per_bar[(n.bar_cta, n.bar)].append(n)
        for key, ns in per_bar.items():
            ns.sort(key=lambda n: n.seq)
            count = _infer_count(ns)
            if count is None:
                raise GraphError(f"mbarrier 0x{key[1]:x} of CTA {key[0]}: no arrival count makes every wait of the "
                                 "run observe a completed phase (is the log truncated?)")
            self.counts[key] = count
            self._assign(key, ns, count)

    def _assign(self, key, ns, count) -> None:
        k, arrivals, tx, completed = 0, 0, 0, []
        cur = Phase((key[0], key[1], 0), count=count)
        for n in ns:
            if n.kind == "wait_end":
                done = [p for p in completed if p.key[2] % 2 == n.parity]
                if done and not (n.parity == 1 and len(completed) == 0):
                    p = done[-1]
                    p.waiters.append(n.idx)
                    n.phase = p.key
                continue
            cur.signals.append(n.idx)
            n.phase = cur.key
            if n.kind in ("arrive", "expect_tx"):
                arrivals += 1
            if n.kind == "expect_tx":
                tx += n.tag or 0
            if n.kind == "complete_tx":
                tx -= n.tag or 0
            if arrivals >= count and tx == 0:
                self.phases[cur.key] = cur
                completed.append(cur)
                k += 1
                arrivals = 0
                cur = Phase((key[0], key[1], k), count=count)
        if cur.signals:
            self.phases[cur.key] = cur     # never completed in this run (the run's last, incomplete phase)

    # ---- bar.sync generations -------------------------------------------------------------------------
    def _groups(self) -> None:
        gen = defaultdict(int)
        for key, ids in self.threads.items():
            for i in ids:
                n = self.nodes[i]
                if n.kind in ("bar_sync", "cluster_sync"):
                    scope = n.cluster if n.kind == "cluster_sync" else n.cta
                    bid = n.bar if n.kind == "bar_sync" else 0
                    g = gen[(key, n.kind, bid)]
                    gen[(key, n.kind, bid)] += 1
                    n.group = (n.kind, scope, bid, g)
                    self.groups.setdefault(n.group, []).append(i)

    # ---- the SASS between events ------------------------------------------------------------------------
    def attach_sass(self, sass) -> None:
        """Each warp node gets the fast path of SASS its warp walks from the previous node (sass_paths)."""
        for key, ids in self.threads.items():
            at, ks = -1, None
            for i in ids:
                n = self.nodes[i]
                n.seg = sass.walk(at, n.kind, None if n.kind == "exit" else n.line, ks)
                at, ks = n.seg.end, n.seg.k_state

    def describe(self) -> str:
        kinds = defaultdict(int)
        for n in self.nodes:
            kinds[n.kind] += 1
        return (f"{len(self.nodes)} nodes ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}), "
                f"{len(self.threads)} warps, {len(self.phases)} mbarrier phases, {len(self.groups)} barrier generations")


def _merge_lanes(lanes: dict) -> list[list[dict]]:
    """One warp's program order from its lanes' event lists: the k-th (kind, line, barrier) event of every
    lane is one node; lanes' own orders are edges; ties go to the smaller seq (Kahn's algorithm)."""
    key_of, succ, indeg, members = {}, defaultdict(set), defaultdict(int), defaultdict(list)
    for lane, evs in lanes.items():
        seen = defaultdict(int)
        prev = None
        for e in evs:
            # a lane's exit is logged at its last scheduling point's line: every lane's exit is the warp's one
            base = ("exit", None, None) if e["kind"] == "exit" else (e["kind"], e["line"], e.get("barrier"))
            k = (base, seen[base])
            seen[base] += 1
            members[k].append(e)
            indeg.setdefault(k, 0)
            if prev is not None and k not in succ[prev]:
                succ[prev].add(k)
                indeg[k] += 1
            prev = k
            key_of[id(e)] = k
    first = {k: min(e["seq"] for e in v) for k, v in members.items()}
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


def _remote_lines(by_warp, ctas) -> set:
    """(cta, warp, line, barrier) where several lanes of one warp arrive on one offset in a multi-CTA cluster."""
    sizes = defaultdict(int)
    for c, (cl, _) in ctas.items():
        sizes[cl] += 1
    out = set()
    for (cta, warp), lanes in by_warp.items():
        if sizes[ctas.get(cta, (-1, -1))[0]] < 2:
            continue
        who = defaultdict(set)
        for lane, evs in lanes.items():
            for e in evs:
                if e["kind"] == "arrive":
                    who[(e["line"], e["barrier"])].add(lane)
        for (line, bar), ls in who.items():
            if len(ls) > 1:
                out.add((cta, warp, line, bar))
    return out


def _cta_of_rank(ctas, cluster, rank):
    for c, (cl, r) in ctas.items():
        if cl == cluster and r == rank:
            return c
    return None


def _infer_count(ns) -> int | None:
    """The largest arrival count under which every wait_end observes a completed phase of its parity: a
    smaller count completes phases sooner and also explains the waits, a larger one leaves some wait of
    the run without the phase it passed on."""
    arrivals = sum(1 for n in ns if n.kind in ("arrive", "expect_tx"))
    best, misses = None, 0
    for count in range(1, max(arrivals, 1) + 1):
        if _consistent(ns, count):
            best, misses = count, 0
        else:
            misses += 1
            if best is not None and misses > 8:   # consistency fails for good past the true count
                break
    return best


def _consistent(ns, count) -> bool:
    k, arrivals, tx, parities = 0, 0, 0, set()
    for n in ns:
        if n.kind == "wait_end":
            if n.parity not in parities and not (n.parity == 1 and k == 0):
                return False
            continue
        if n.kind in ("arrive", "expect_tx"):
            arrivals += 1
        if n.kind == "expect_tx":
            tx += n.tag or 0
        if n.kind == "complete_tx":
            tx -= n.tag or 0
        if arrivals >= count and tx == 0:
            parities.add(k % 2)
            k += 1
            arrivals = 0
    return True
