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

from ..events import check as check_events   # the one event checker (names, offsets in addr, bytes)

WARP_KINDS = ("wait_begin", "wait_end", "arrive", "expect_tx", "tma_load", "tma_store", "commit", "tmem_alloc",
              "tmem_dealloc", "tmem_ld", "tmem_cp", "bar_sync", "cluster_sync", "exit")
SIGNALS = ("arrive", "expect_tx", "complete_tx")
MARKS = ("phase_begin", "phase_end")        # the stage's clock64 phase marks: no instruction of their own
# Events the replay takes from the SASS instead (the MMAs) or that repeat another (the load's landing).
DROPPED = ("mma", "mma_done", "tma_load_done", "tma_store_done", "tmem_ld", "tmem_cp")


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
    op: int | None = None           # the log's operation id (issue and completion share it), where given
    given_phase: int | None = None  # the log's phase number, where given
    what: str | None = None         # a phase mark's phase name
    tile: int | None = None
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
        ev = [normalize(e) for e in check_events(events) if e["kind"] not in DROPPED]
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
        enriched = any(e["phase"] is not None for e in ev)
        remote = set() if enriched else _remote_lines(by_warp, ctas)

        def node(e, grp, warp):
            bar_cta = e["bar_cta"]
            if (not enriched and e["kind"] == "arrive" and (e["cta"], e["warp"], e["line"], e["off"]) in remote
                    and len(grp) == 1):
                bar_cta = _cta_of_rank(ctas, ctas[e["cta"]][0], e["lane"]) or bar_cta
            seq = max(x["seq"] for x in grp) if e["kind"] == "wait_end" else min(x["seq"] for x in grp)
            n = Node(len(nodes), e["cta"], warp, e["kind"], e["line"], seq, e["off"],
                     bar_cta if e["off"] is not None else None, e["parity"], e["nbytes"],
                     frozenset(x["lane"] for x in grp), cluster=ctas.get(e["cta"], (-1, -1))[0],
                     rank=ctas.get(e["cta"], (-1, -1))[1])
            n.op, n.given_phase, n.what, n.tile = e["op"], e["phase"], e["what"], e["tile"]
            nodes.append(n)
            return n
        for key in sorted(by_warp):
            threads[key] = [node(grp[0], grp, key[1]).idx for grp in _merge_lanes(by_warp[key])]
        for e in asyncs:
            if e["kind"] in ("complete_tx", "arrive"):       # a load's landing; a commit's arrive
                node(e, [e], -1)
        g = cls(nodes, threads, {}, {}, {}, ctas)
        if remote:
            g.assumptions.append("remote arrives: lane l of a multi-lane release arrives on the barrier of rank l")
        if not enriched:
            g.assumptions.append("mbarrier arrival counts inferred from the waits (the log carries no phases)")
        g._link_async()
        g._phases(enriched)
        g._groups()
        if sass is not None:
            g.attach_sass(sass)
        return g

    # ---- asynchronous completions -> what issued them -------------------------------------------------
    def _link_async(self) -> None:
        """A landing (complete_tx) to its TMA load, a commit's arrive to its commit: by the op id the log
        gives both, else the earliest earlier issue of the cluster on the same barrier (and bytes) that has
        not landed in that CTA yet."""
        by_op = {}
        for n in self.nodes:
            if n.warp >= 0 and n.op and n.kind in ("tma_load", "commit"):
                by_op[n.op] = n.idx
        pending = defaultdict(list)
        for n in self.nodes:
            if n.warp >= 0 and n.kind == "tma_load":
                pending[("tma_load", n.cluster, n.bar, n.tag)].append([n.seq, n, set()])
            elif n.warp >= 0 and n.kind == "commit":
                pending[("commit", n.cluster, n.bar, None)].append([n.seq, n, set()])
        for n in sorted((x for x in self.nodes if x.warp < 0), key=lambda x: x.seq):
            if n.op and n.op in by_op:
                n.source = by_op[n.op]
                continue
            issue = "tma_load" if n.kind == "complete_tx" else "commit"
            cands = pending.get((issue, n.cluster, n.bar, n.tag if issue == "tma_load" else None), [])
            hit = next((c for c in cands if c[0] < n.seq and n.bar_cta not in c[2]), None)
            if hit is None:
                what = f"a complete_tx of {n.tag} B" if issue == "tma_load" else "a commit's arrive"
                raise GraphError(f"{what} on barrier 0x{(n.bar or 0):x} of CTA {n.cta} (seq {n.seq}) matches no "
                                 f"earlier {issue} of the cluster")
            hit[2].add(n.bar_cta)
            n.source = hit[1].idx

    # ---- mbarrier phases -------------------------------------------------------------------------------
    def _phases(self, enriched: bool = False) -> None:
        per_bar = defaultdict(list)
        for n in self.nodes:
            if n.bar is None or n.kind not in SIGNALS + ("wait_end",):
                continue
            per_bar[(n.bar_cta, n.bar)].append(n)
        if enriched:           # the log names each event's phase (pelib.sim's enriched schema)
            for key, ns in per_bar.items():
                for n in sorted(ns, key=lambda n: n.seq):
                    if n.given_phase is None:
                        continue
                    pk = (key[0], key[1], n.given_phase)
                    ph = self.phases.setdefault(pk, Phase(pk))
                    n.phase = pk
                    (ph.waiters if n.kind == "wait_end" else ph.signals).append(n.idx)
                self.counts[key] = max((sum(1 for s in p.signals if self.nodes[s].kind in ("arrive", "expect_tx"))
                                        for k, p in self.phases.items() if k[:2] == key), default=0)
            return
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


def normalize(e: dict) -> dict:
    """One event in the keys the graph reads, from either event schema: the first (barrier = the shared
    offset, tag = the bytes of TMA and expect_tx events) or the enriched one (barrier = the name, addr = the
    offset, bytes, phase, op; bar_cta where the barrier belongs to another CTA of the cluster)."""
    kind = e["kind"]
    enriched = "addr" in e or "bytes" in e
    if enriched:
        off = e.get("tag") if kind == "bar_sync" else e.get("addr")
        nbytes = e.get("bytes")
    else:
        off, nbytes = e.get("barrier"), e.get("tag")
    bar_cta = e.get("bar_cta")
    return {"seq": e["seq"], "cta": e["cta"], "cluster": e.get("cluster", -1), "rank": e.get("rank", -1),
            "warp": e["warp"], "lane": e.get("lane", -1), "kind": kind, "line": e.get("line") or 0, "off": off,
            "bar_cta": e["cta"] if bar_cta is None else bar_cta, "parity": e.get("parity"), "nbytes": nbytes,
            "phase": e.get("phase") if enriched else None, "op": e.get("op") if enriched else None,
            "what": e.get("what"), "tile": e.get("tile")}


def _merge_lanes(lanes: dict) -> list[list[dict]]:
    """One warp's program order from its lanes' event lists: the k-th (kind, line, barrier) event of every
    lane is one node; lanes' own orders are edges; ties go to the smaller seq (Kahn's algorithm)."""
    key_of, succ, indeg, members = {}, defaultdict(set), defaultdict(int), defaultdict(list)
    for lane, evs in lanes.items():
        seen = defaultdict(int)
        prev = None
        for e in evs:
            # a lane's exit is logged at its last scheduling point's line: every lane's exit is the warp's one
            base = ("exit", None, None) if e["kind"] == "exit" else (e["kind"], e["line"], e.get("off"))
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
                    who[(e["line"], e["off"])].add(lane)
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
