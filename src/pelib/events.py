"""The one event model of a run: what each event means, one checker, one rule from events to spans, and
the run's happens-before graph.

    ev = events.check(report.events)     # the schema (KEYS), known kinds, seq order; EventError names a bad one
    sp = events.spans(ev)                # waits, role phases, instants, ring-slot and accumulator occupancy
    g = events.graph(ev)                 # nodes = events; program order, barrier phases, async operations

Two sources speak this schema: the simulator's event log (pelib.sim, SimReport.events; `seq` is an order
stamp, never a time) and measured clock64 records (pelib.timing.Timing.events(): phase_begin/phase_end
with `seq` the cycle count since the CTA's first record). Chrome's trace (pelib.timing.chrome_trace), the
book's protocol pictures (pelib.views.protocol) and the timing model (pelib.predict) read their spans and
the graph from here, so they cannot disagree. Logs that name barriers only by shared-memory offset (the
simulator before its events carried names) are converted by `from_offsets`, from what each barrier does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from .paths import KERNELS

# The schema: every event has these keys (None where they do not apply). seq, cta, warp and kind are required.
KEYS = ("seq", "cta", "cluster", "rank", "warp", "lane", "role", "kind", "barrier", "index", "addr", "phase",
        "parity", "tag", "bytes", "op", "slot", "acc", "tile", "what", "file", "line")
REQUIRED = ("seq", "cta", "warp", "kind")
# kind -> what it is in a picture. An async unit (TMA, tensor core) records its completions with warp -1.
KINDS = {"wait_begin": "wait", "wait_end": "wait", "arrive": "completion", "expect_tx": "issue",
         "complete_tx": "completion", "tma_load": "issue", "tma_load_done": "completion",
         "tma_store": "issue", "tma_store_done": "completion", "mma": "issue", "mma_done": "completion",
         "commit": "issue", "tmem_alloc": "issue", "tmem_dealloc": "completion", "tmem_ld": "issue",
         "tmem_cp": "issue", "bar_sync": "wait", "cluster_sync": "wait", "exit": "completion",
         "phase_begin": "phase", "phase_end": "phase", "tmem_st": "issue"}
SIGNALS = ("arrive", "expect_tx", "complete_tx")            # what moves an mbarrier toward its next phase
COMPLETES = {"tma_load": ("tma_load_done", "complete_tx"), "mma": ("mma_done",), "commit": ("arrive",),
             "tma_store": ("tma_store_done",)}            # an async issue and the events of its completion
MEASURED_ORDER = "measured clock64"
SIM_ORDER = "simulated order, not time"
PREDICTED_ORDER = "predicted cycles"     # pelib.predict: a simulated run replayed with calibrated costs
SIM_UNIT = "simulated order (seq), not time"
RING_TID, ACC_TID = 1000, 2000          # lanes of the ring's slots and the accumulators, after the warps

HEADER = KERNELS / "common" / "timing.cuh"
_PHASE_RE = re.compile(r"^\s*PE_PHASE_([A-Z0-9_]+)\s*=\s*(\d+)\s*,?\s*(?://\s*(.*))?$", re.M)
# What each role phase (common/timing.cuh) is in a picture; the *_wait phases the stages record as a sum
# over the tile's waits (start + total) are marked summed: their span is not one contiguous wait.
PHASE_CAT = {"producer_wait": "wait", "tma_issue": "issue", "tma_wait": "wait", "kloop": "mma",
             "epi_wait": "wait", "acc_wait": "wait", "epi_phase1": "epilogue", "epi_phase2": "epilogue",
             "tile": "tile"}
SUMMED = ("producer_wait", "tma_wait")


class EventError(ValueError):
    """An event log that does not follow the schema; the message names the event and what it lacks."""


@lru_cache(maxsize=1)
def phases() -> dict[int, str]:
    """{id: name} of the role phases, parsed from the pe_phase enum of common/timing.cuh (the one definition)."""
    out = {int(num): name.lower() for name, num, _ in _PHASE_RE.findall(HEADER.read_text()) if name != "COUNT"}
    if sorted(out) != list(range(len(out))):
        raise ValueError(f"{HEADER}: phase ids must run 0..n-1, got {sorted(out)}")
    return out


@lru_cache(maxsize=1)
def phase_notes() -> dict[str, str]:
    """{name: the header's comment on it}."""
    return {n.lower(): (c or "").strip() for n, _, c in _PHASE_RE.findall(HEADER.read_text()) if n != "COUNT"}


def phase_id(name: str) -> int:
    for k, v in phases().items():
        if v == name.lower():
            return k
    raise KeyError(f"no phase {name!r}; phases are {list(phases().values())}")


# ---- the checker -----------------------------------------------------------------------------------------

def check(events) -> list[dict]:
    """The events as dicts with every key of KEYS (None where absent), in seq order, each checked (the
    required keys, a known kind). A numpy structured array is converted; a log whose barriers are shared
    offsets is named by from_offsets. Raises EventError naming the first bad event and the fix."""
    if hasattr(events, "dtype") and getattr(events.dtype, "names", None):
        events = [{k: (v.item() if hasattr(v, "item") else v) for k, v in zip(events.dtype.names, row)}
                  for row in events]
    out = []
    for n, e in enumerate(events):
        missing = [k for k in REQUIRED if e.get(k) is None]
        if missing:
            raise EventError(f"event {n} lacks {missing}: every event has {REQUIRED} (pelib.events.KEYS)")
        if e["kind"] not in KINDS:
            raise EventError(f"event {n} has kind {e['kind']!r}, not one of the schema's {sorted(KINDS)}")
        out.append({**dict.fromkeys(KEYS), **e})
    out.sort(key=lambda e: e["seq"])
    if any(isinstance(e["barrier"], int) and not isinstance(e["barrier"], bool) for e in out):
        out = from_offsets(out)
    return out


def bar_label(e: dict) -> str:
    """'full[0]', 'acc_empty[1]', 'mma_done': the barrier an event names, as the stage writes it."""
    b, i = e.get("barrier"), e.get("index")
    return "" if b in (None, "") else f"{b}[{i}]" if i is not None else str(b)


# ---- logs that name barriers by offset ---------------------------------------------------------------------

_BYTES_IN_TAG = ("tma_load", "tma_load_done", "complete_tx", "expect_tx")   # the older log kept bytes in "tag"


def from_offsets(events: list[dict]) -> list[dict]:
    """A log whose events name barriers by shared-memory offset, given names, slots, accumulators, roles and
    async op ids from what the events do (no source text is read). A barrier's array is the offsets one call
    site uses; its role: 'full' (completed by TMA bytes, waited on before the MMAs; the largest such array is
    the ring), 'empty' (waited on by the TMA issuer before a fill), 'acc_full' (waited on by warps that read
    TMEM, signalled by a commit), 'acc_empty' (waited on by the MMA issuer, signalled by the TMEM readers),
    else 'bar@L<line>' (its first call site); a named barrier's id (bar.sync) goes to `tag`. An MMA's slot is
    the ring slot its thread last waited full for, its accumulator the acc_empty it last waited for; a TMEM
    load's the acc_full its warp last waited for. Roles come from what a warp issued: producer (TMA loads), MMA issuer, epilogue (TMEM loads, TMA stores)."""
    ev = [dict(e) for e in events]
    for e in ev:
        if e["kind"] in _BYTES_IN_TAG and e["bytes"] is None:
            e["bytes"], e["tag"] = e["tag"], None
        if e["kind"] == "bar_sync" and isinstance(e["barrier"], int):
            e["barrier"], e["tag"] = None, e["barrier"]        # a named barrier's id (bar.sync id), no mbarrier
        elif isinstance(e["barrier"], int):
            e["addr"], e["barrier"] = e["barrier"], None
    did: dict = {}
    for e in ev:
        did.setdefault((e["cta"], e["warp"]), set()).add(e["kind"])
    loaders = {k for k, v in did.items() if "tma_load" in v}
    mma = {k for k, v in did.items() if "mma" in v}
    readers = {k for k, v in did.items() if "tmem_ld" in v}
    groups = _offset_groups(ev)
    names = _group_names(ev, groups, loaders, mma, readers)
    for e in ev:
        if e["addr"] is not None and e["addr"] in names:
            e["barrier"], e["index"] = names[e["addr"]]
    _slots_and_accs(ev)
    _ops(ev)
    mma_warps: dict = {}
    for c, w in mma:
        mma_warps.setdefault(c, set()).add(w)
    for e in ev:
        if e["role"] is None or re.fullmatch(r"warp \d+", str(e["role"])):
            k = (e["cta"], e["warp"])
            mma_role = "MMA issuer" if len(mma_warps.get(k[0], ())) == 1 else f"consumer warpgroup {k[1] // 4}"
            epilogue = did.get(k, set()) & {"tmem_ld", "tma_store"} and k not in mma
            parts = (["producer"] if k in loaders else []) + ([mma_role] if k in mma else []) + \
                (["epilogue"] if epilogue else [])
            e["role"] = f"warp {e['warp']}: {' + '.join(parts)}" if parts else (
                f"warp {e['warp']}" if e["warp"] >= 0 else "async unit")
    return ev


def _offset_groups(ev) -> list[list[int]]:
    """Offsets joined when one call site (file, line) uses both: the elements of one barrier array."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    first: dict = {}
    for e in ev:
        a = e["addr"]
        if a is None:
            continue
        find(a)
        site = (e["file"], e["line"], e["kind"])
        if site in first:
            parent[find(a)] = find(first[site])
        else:
            first[site] = a
    out: dict = {}
    for a in list(parent):
        out.setdefault(find(a), []).append(a)
    return sorted(sorted(g) for g in out.values())


def _group_names(ev, groups, loaders, mma, readers) -> dict:
    """{offset: (name, index)} by what each group's barriers do (from_offsets)."""
    of = {a: i for i, g in enumerate(groups) for a in g}
    tx, waited_by, signalled_by, first_line, before_fill, waits = {}, {}, {}, {}, set(), {}
    last_wait: dict = {}
    for e in ev:
        a = e["addr"]
        who = (e["cta"], e["warp"])
        if a is not None:
            gi = of[a]
            first_line.setdefault(gi, e["line"])
            if e["kind"] == "complete_tx":
                tx[gi] = True
            elif e["kind"] == "wait_end":
                waited_by.setdefault(gi, set()).add(who)
                waits[gi] = waits.get(gi, 0) + 1
                last_wait[who] = gi
            elif e["kind"] in ("arrive", "commit") and e["warp"] >= 0:
                signalled_by.setdefault(gi, set()).add((who, e["kind"]))
        if e["kind"] in ("tma_load", "expect_tx") and who in last_wait:
            before_fill.add(last_wait[who])
    full = [gi for gi in range(len(groups)) if tx.get(gi) and waited_by.get(gi, set()) & mma]
    full = max(full, key=lambda gi: (len(groups[gi]), waits.get(gi, 0)), default=None)
    names = {}
    for gi, g in enumerate(groups):
        w, s = waited_by.get(gi, set()), signalled_by.get(gi, set())
        if gi == full:
            name = "full"
        elif gi in before_fill and w & loaders and not tx.get(gi):
            name = "empty"
        elif w & readers and any(k == "commit" for _, k in s):
            name = "acc_full"
        elif w & mma and any(who in readers for who, _ in s):
            name = "acc_empty"
        else:
            name = f"bar@L{first_line.get(gi)}"
        names[gi] = name
    out = {}
    for gi, g in enumerate(groups):
        array = names[gi] in ("full", "empty", "acc_full", "acc_empty") or len(g) > 1
        for i, a in enumerate(g):
            out[a] = (names[gi], i if array else None)
    return out


def _slots_and_accs(ev) -> None:
    """Ring slot and accumulator of every event (from_offsets): from its barrier, else from what its
    thread (MMA) or warp (TMEM load) last waited for."""
    has_acc = any(e["barrier"] in ("acc_full", "acc_empty") for e in ev)
    ring, acc_mma, acc_epi = {}, {}, {}
    for e in ev:
        b, i = e["barrier"], e["index"]
        if b in ("full", "empty") and e["slot"] is None:
            e["slot"] = i
        if b in ("acc_full", "acc_empty") and e["acc"] is None:
            e["acc"] = i
        thread, warp = (e["cta"], e["warp"], e["lane"]), (e["cta"], e["warp"])
        if e["kind"] == "wait_end":
            if b == "full":
                ring[thread] = i
            elif b == "acc_empty":
                acc_mma[thread] = i
            elif b == "acc_full":
                acc_epi[warp] = i
        elif e["kind"] == "mma":
            if e["slot"] is None:
                e["slot"] = ring.get(thread)
            if e["acc"] is None and has_acc:
                e["acc"] = acc_mma.get(thread, 0)
        elif e["kind"] == "tmem_ld" and e["acc"] is None and has_acc:
            e["acc"] = acc_epi.get(warp, 0)


def _ops(ev) -> None:
    """Async op ids (from_offsets): an issue's seq, given to its completion events. A completion is matched
    to the earliest pending issue of its call site (file, line), barrier, cluster and CTA (any CTA of the
    cluster where none), first in, first out; a complete_tx belongs to the landing just before it (one
    completion callback), and a landing or a commit's arrive with no pending issue left is another
    destination of the op before it (a multicast). Exact where one site has one op in flight per barrier; same-sized loads of one site on one
    barrier may swap ids."""
    pending: dict = {}
    prev = None
    for e in ev:
        k = e["kind"]
        if k in COMPLETES and e["warp"] >= 0:
            e["op"] = e["seq"]
            pending.setdefault((k, e["file"], e["line"]), []).append(e)
        elif e["warp"] < 0 and any(k in v for v in COMPLETES.values()):
            same_site = prev is not None and (prev["file"], prev["line"]) == (e["file"], e["line"])
            if k == "complete_tx" and same_site and prev["kind"] == "tma_load_done":
                e["op"] = prev["op"]
            else:
                e["op"] = _match(pending, e)
                if e["op"] is None and same_site and prev["kind"] == k and k in ("tma_load_done", "arrive"):
                    e["op"] = prev["op"]
        prev = e if e["warp"] < 0 else None


def _match(pending: dict, e: dict):
    for issue in (i for i, v in COMPLETES.items() if e["kind"] in v):
        queue = [x for x in pending.get((issue, e["file"], e["line"]), []) if x["cluster"] == e["cluster"]]
        for pick in ([x for x in queue if x["cta"] == e["cta"] and x["addr"] == e["addr"]],
                     [x for x in queue if x["addr"] == e["addr"]]):
            if pick:
                pending[(issue, e["file"], e["line"])].remove(pick[0])
                return pick[0]["op"]
    return None


# ---- spans: one rule for the trace, the pictures and the tables ------------------------------------------

@dataclass
class Span:
    """One bar of the protocol picture / one trace event: on lane (pid, tid), from ts for dur (None: an
    instant). Units: clock64 cycles since the CTA's first record (measured) or the simulator's seq."""

    pid: int
    tid: int
    name: str
    cat: str
    ts: float
    dur: float | None
    args: dict = field(default_factory=dict)


@dataclass
class Spans:
    """Spans with their lane names and what their axis is (`order`: MEASURED_ORDER or SIM_ORDER)."""

    spans: list
    processes: dict          # pid -> "CTA c (cluster k, rank r)"
    threads: dict            # (pid, tid) -> role or occupancy lane name
    order: str
    unit: str
    meta: dict = field(default_factory=dict)

    def lanes(self, pid: int) -> list[int]:
        """The tids of one CTA: warps first, then ring slots, then accumulators."""
        return sorted(t for p, t in self.threads if p == pid)


def cta_name(cta: int, cluster: int | None = None, rank: int | None = None) -> str:
    return f"CTA {cta}" + (f" (cluster {cluster}, rank {rank})" if cluster is not None else "")


_ARGS = ("lane", "barrier", "slot", "acc", "tile", "phase", "parity", "tag", "bytes", "op", "line")


def _args(e: dict) -> dict:
    out = {k: e[k] for k in _ARGS if e.get(k) is not None}
    if e.get("barrier") is not None:
        out["barrier"] = bar_label(e)
    return out


def _what(e: dict) -> str:
    """'full[0] (tag 2)': the barrier and the wait tag an event names, where it names them."""
    out = bar_label(e)
    if e.get("tag") not in (None, "") and e["kind"] in ("wait_begin", "wait_end"):
        out += f" (tag {e['tag']})"
    return out.strip()


def spans(events, *, order: str = SIM_ORDER, unit: str = SIM_UNIT, meta: dict | None = None, ctas=None,
          clusters=None) -> Spans:
    """The one rule from events to spans. Per CTA (pid) and warp (tid): wait_begin..wait_end of a thread
    is a wait span, phase_begin..phase_end of a role phase a span of its category (PHASE_CAT), every other
    event an instant; a wait or phase never closed runs to the end of the log, marked open. Then the
    occupancy lanes: ring slot s from the fill (TMA load or expect_tx) that starts a round to the last
    release (an arrive on the slot's other barrier) before the next fill, in parts filled / landed (its
    bytes arrived) / read (the first MMA on it); accumulator a from the MMA that starts a round (written,
    to its commit) to the last release before the next round, drained from the first TMEM load; its tile
    is the event's, else the round's number in the CTA. A round never released is held to the end of the
    log (marked open); its parts end at its last event. Events that name no slot (clock64 records) draw
    the ring as tiles in flight: local tile i from the producer's first TMA issue to the end of its K loop
    (consumer warpgroup g of G takes local tiles g, g + G, ...), stacked on as few lanes as overlap needs.
    Events that all carry a predicted `cycles` (pelib.predict.Prediction.events) are drawn on that axis:
    the same rule, in predicted cycles."""
    ev = check(events)
    if order == SIM_ORDER and ev and all(e.get("cycles") is not None for e in ev):
        ev = sorted(({**e, "seq": e["cycles"]} for e in ev), key=lambda e: e["seq"])
        order, unit = PREDICTED_ORDER, "predicted cycles since the CTA's start"
        meta = {**{k: ev[0][k] for k in ("label", "stage", "device") if ev[0].get(k)}, **(meta or {})}
    if ctas is not None:
        ev = [e for e in ev if e["cta"] in set(ctas)]
    if clusters is not None:
        ev = [e for e in ev if e["cluster"] in set(clusters)]
    out, procs, threads = [], {}, {}
    last = ev[-1]["seq"] if ev else 0
    open_: dict = {}
    phase_spans = []
    for e in ev:
        c, w, k = e["cta"], e["warp"], e["kind"]
        procs.setdefault(c, cta_name(c, e["cluster"], e["rank"]))
        threads.setdefault((c, w), _lane_name(e))
        if k in ("wait_begin", "phase_begin"):
            open_[_pair_key(e)] = e
        elif k in ("wait_end", "phase_end") and _pair_key(e) in open_:
            b = open_.pop(_pair_key(e))
            sp = _closed(b, e)
            (phase_spans if k == "phase_end" else out).append(sp)
        else:
            out.append(Span(c, w, k + (f" {_what(e)}" if _what(e) else ""), KINDS[k], e["seq"], None,
                            {"kind": k, **_args(e)}))
    for key, b in open_.items():          # a wait that never ended: where the run stopped
        sp = _closed(b, {**b, "seq": last})
        sp.name += " (never ends)"
        sp.args = {**sp.args, "open": True}
        (phase_spans if b["kind"] == "phase_begin" else out).append(sp)
    phase_spans.sort(key=lambda s: (s.pid, s.tid, s.args.get("tile_slot", 0), _phase_order(s.name)))
    out += phase_spans
    occ = _occupancy(ev, "slot", threads, last) + _occupancy(ev, "acc", threads, last)
    _tile_instants(out, occ)
    if not any(s.tid < ACC_TID for s in occ):
        occ += _tiles_in_flight(ev, threads)
    return Spans(out + occ, procs, threads, order, unit, dict(meta or {}))


def _lane_name(e: dict) -> str:
    """A warp's lane: its role, with the warp where the role does not name it ('epilogue (warp 3)')."""
    w, role = e["warp"], str(e["role"] or "")
    if w < 0:
        return role or "async unit"
    if not role or role == f"warp {w}":
        return f"warp {w}"
    return role if re.search(rf"\bwarp {w}\b", role) else f"{role} (warp {w})"


def _pair_key(e: dict):
    if e["kind"] in ("phase_begin", "phase_end"):
        return ("phase", e["cta"], e["warp"], e["lane"], _phase_name(e), e["tile"])
    return ("wait", e["cta"], e["warp"], e["lane"])


def _phase_name(e: dict) -> str:
    """A phase_begin / phase_end's role phase: `what` (a name of common/timing.cuh's pe_phase)."""
    w = e.get("what")
    return phases().get(w, str(w)) if isinstance(w, int) else str(w)


def _phase_order(name: str) -> int:
    try:
        return phase_id(name)
    except KeyError:
        return len(phases())


def _closed(b: dict, e: dict) -> Span:
    if b["kind"] == "phase_begin":
        name = _phase_name(b)
        return Span(b["cta"], b["warp"], name, PHASE_CAT.get(name, "phase"), b["seq"], e["seq"] - b["seq"],
                    {"tile_slot": b["tile"], "summed": name in SUMMED})
    return Span(b["cta"], b["warp"], ("wait " + _what(b)).strip(), "wait", b["seq"], e["seq"] - b["seq"], _args(e))


_FILL = {"slot": ("tma_load", "expect_tx"), "acc": ("mma",)}
_LANE = {"slot": (RING_TID, "ring slot"), "acc": (ACC_TID, "accumulator")}


def _occupancy(ev, res: str, threads: dict, last) -> list[Span]:
    """Rounds of one resource kind (slot or acc) per (CTA, index): see spans()."""
    tid0, what = _LANE[res]
    rounds: dict = {}
    for e in ev:
        r = e[res]
        if r is None or e["kind"] in ("wait_begin", "wait_end"):
            continue
        key = (e["cta"], int(r))
        cur = rounds.get(key, [])
        open_round = cur[-1] if cur else None
        k = e["kind"]
        if k in _FILL[res] and (open_round is None or open_round["released"] is not None):
            rounds.setdefault(key, cur).append({"start": e["seq"], "fill_bar": bar_label(e) if k != "mma" else None,
                                                "landed": None, "read": None, "commit": None, "drain": None,
                                                "released": None, "tile": e["tile"], "last": e["seq"]})
            continue
        if open_round is None:
            continue
        open_round["last"] = e["seq"]
        if res == "slot":
            if open_round["fill_bar"] is None and k in _FILL["slot"]:
                open_round["fill_bar"] = bar_label(e)
            if k in ("tma_load_done", "complete_tx") and open_round["read"] is None:
                open_round["landed"] = e["seq"]
            elif k == "mma" and open_round["read"] is None:
                open_round["read"] = e["seq"]
        else:
            if k == "commit" and open_round["drain"] is None:
                open_round["commit"], open_round["fill_bar"] = e["seq"], bar_label(e)
            elif k == "tmem_ld" and open_round["drain"] is None:
                open_round["drain"] = e["seq"]
        if k == "arrive" and e["barrier"] is not None and bar_label(e) != open_round["fill_bar"]:
            open_round["released"] = e["seq"]        # the last release before the next fill ends the round
    out = []
    tiles = _tile_numbers(rounds) if res == "acc" else {}
    for (c, r), cur in sorted(rounds.items()):
        threads.setdefault((c, tid0 + r), f"{what} {r}")
        for n, rd in enumerate(cur):
            end = rd["released"] if rd["released"] is not None else last
            base = {res: r, **({"tile": tiles[(c, r, n)]} if res == "acc" else {})}
            held = {**base, "part": "held"}
            if rd["released"] is None:
                held["open"] = True
            out.append(Span(c, tid0 + r, f"{what} {r} held" + (" (never released)" if rd["released"] is None else ""),
                            "occupancy", rd["start"], end - rd["start"], held))
            for part, a, b in _parts(res, rd, end if rd["released"] is not None else rd["last"]):
                out.append(Span(c, tid0 + r, part, "occupancy", a, b - a, {**base, "part": part}))
    return out


def _parts(res: str, rd: dict, end) -> list[tuple]:
    if res == "slot":
        marks = [("filled", rd["start"]), ("landed", rd["landed"]), ("read", rd["read"])]
    else:
        marks = [("written", rd["start"]), ("committed", rd["commit"]), ("drained", rd["drain"])]
    marks = [(p, t) for p, t in marks if t is not None]
    return [(p, t, marks[i + 1][1] if i + 1 < len(marks) else end) for i, (p, t) in enumerate(marks)]


def _tile_numbers(rounds: dict) -> dict:
    """{(cta, acc, round): tile}: the round's first MMA's tile, else the rounds' order of start in the CTA."""
    out = {}
    for c in sorted({c for c, _ in rounds}):
        starts = sorted((rd["start"], r, n, rd["tile"]) for (cc, r), cur in rounds.items() if cc == c
                        for n, rd in enumerate(cur))
        for i, (_, r, n, tile) in enumerate(starts):
            out[(c, r, n)] = tile if tile is not None else i
    return out


def _tile_instants(out: list, occ: list) -> None:
    """An instant naming an accumulator gets the tile of the round that holds it (where it names none)."""
    held = {}
    for s in occ:
        if s.args.get("part") == "held" and "acc" in s.args:
            held.setdefault((s.pid, s.args["acc"]), []).append(s)
    for s in out:
        if s.dur is None and s.args.get("acc") is not None and s.args.get("tile") is None:
            for h in held.get((s.pid, s.args["acc"]), ()):
                if h.ts <= s.ts <= h.ts + h.dur:
                    s.args["tile"] = h.args["tile"]
                    break


def _tiles_in_flight(ev, threads: dict) -> list[Span]:
    """The ring as tiles in flight, from role phases (see spans())."""
    begin, end, kinds = {}, {}, {}
    for e in ev:
        if e["kind"] in ("phase_begin", "phase_end"):
            kinds.setdefault((e["cta"], e["warp"]), set()).add(_phase_name(e))
    out = []
    for c in sorted({c for c, _ in kinds}):
        prod = sorted(w for (cc, w), v in kinds.items() if cc == c and v & {"producer_wait", "tma_issue"})
        cons = sorted(w for (cc, w), v in kinds.items() if cc == c and "kloop" in v and w not in prod)
        if not prod or not cons:
            continue
        groups = sorted({w // 4 for w in cons})
        for e in ev:
            if e["cta"] != c:
                continue
            name = _phase_name(e)
            if e["kind"] == "phase_begin" and e["warp"] == prod[0] and name == "tma_issue":
                begin.setdefault((c, e["tile"]), e["seq"])
            elif e["kind"] == "phase_end" and e["warp"] in cons and name == "kloop":
                i = e["tile"] * len(groups) + groups.index(e["warp"] // 4)
                end[(c, i)] = max(end.get((c, i), e["seq"]), e["seq"])
        busy: list = []          # end of the last tile on each stacked lane
        for (cc, i) in sorted(k for k in begin if k[0] == c):
            if (c, i) not in end:
                continue
            b = begin[(c, i)]
            k = next((j for j, x in enumerate(busy) if x <= b), len(busy))
            busy[k:k + 1] = [end[(c, i)]]
            threads[(c, RING_TID + k)] = f"ring: tile in flight ({k + 1})"
            out.append(Span(c, RING_TID + k, f"tile {i}", "occupancy", b, end[(c, i)] - b,
                            {"tile_slot": i, "from": "producer's first TMA issue", "to": "end of the K loop"}))
    return out


# ---- the happens-before graph ------------------------------------------------------------------------------

@dataclass
class Graph:
    """A run's happens-before graph: node i is events[i]; an edge (a, b, why) says event a happened before
    event b because of: "program" (one thread's order), "async" (an operation's issue before its completion),
    "commit" (an MMA's completion before the arrive of the tcgen05.commit that tracks it), "barrier" (a
    signal of an mbarrier phase before the wait_end that observed that phase complete). `exact` is False
    where the log has no barrier phases: a wait_end then gets an edge from the last signal on its barrier
    before it, which is the one that completed the phase only where one signal completes each phase."""

    events: list
    edges: list
    exact: bool
    _into: dict = field(default_factory=dict, repr=False)
    _out: dict = field(default_factory=dict, repr=False)

    def preds(self, i: int) -> list[tuple[int, str]]:
        """[(a, why)] of the edges into node i."""
        if not self._into:
            for a, b, why in self.edges:
                self._into.setdefault(b, []).append((a, why))
        return self._into.get(i, [])

    def succs(self, i: int) -> list[tuple[int, str]]:
        """[(b, why)] of the edges out of node i."""
        if not self._out:
            for a, b, why in self.edges:
                self._out.setdefault(a, []).append((b, why))
        return self._out.get(i, [])


def graph(events) -> Graph:
    """The happens-before graph of a simulated run (see Graph); nodes in seq order."""
    ev = check(events)
    edges: list = []
    prev: dict = {}
    issue_of: dict = {}
    for i, e in enumerate(ev):
        if e["warp"] >= 0:
            t = (e["cta"], e["warp"], e["lane"])
            if t in prev:
                edges.append((prev[t], i, "program"))
            prev[t] = i
        if e["op"] is not None:
            if e["kind"] in COMPLETES and e["warp"] >= 0:
                issue_of[e["op"]] = i
            elif e["op"] in issue_of:
                edges.append((issue_of[e["op"]], i, "async"))
    edges += _commit_edges(ev)
    bar_edges, exact = _barrier_edges(ev)
    edges += bar_edges
    return Graph(ev, sorted(set(edges)), exact)


def _commit_edges(ev) -> list[tuple]:
    """tcgen05.commit tracks every MMA its thread issued since its previous commit (PTX ISA, tcgen05.commit):
    each such MMA's completion happens before the commit's arrive."""
    done = {e["op"]: i for i, e in enumerate(ev) if e["kind"] == "mma_done" and e["op"] is not None}
    arrives: dict = {}
    for i, e in enumerate(ev):
        if e["kind"] == "arrive" and e["warp"] < 0 and e["op"] is not None:
            arrives.setdefault(e["op"], []).append(i)
    out, since = [], {}
    for e in ev:
        t = (e["cta"], e["warp"], e["lane"])
        if e["kind"] == "mma":
            since.setdefault(t, []).append(e["op"])
        elif e["kind"] == "commit":
            for op in since.pop(t, []):
                if op in done:
                    out += [(done[op], a, "commit") for a in arrives.get(e["op"], []) if done[op] < a]
    return out


def _bar_key(e: dict, waiters: dict):
    """(cluster, CTA of the barrier, offset or name). The barrier's CTA is the event's `bar_cta` where the
    log names it; else the CTA whose threads wait on it (a remote arrive names its barrier's offset only)."""
    ident = e["addr"] if e["addr"] is not None else bar_label(e)
    if e.get("bar_cta") is not None:
        return (e["cluster"], e["bar_cta"], ident)
    ctas = waiters.get((e["cluster"], ident), set())
    owner = e["cta"] if e["cta"] in ctas or len(ctas) != 1 else next(iter(ctas))
    return (e["cluster"], owner, ident)


def _barrier_edges(ev) -> tuple[list, bool]:
    """Signal -> wait_end edges: by phase where the log records barrier phases (a wait_end with none
    observed a fresh barrier's parity-1 pass: no signal), else from the last signal before it."""
    waiters: dict = {}
    for e in ev:
        if e["kind"] == "wait_end" and e["barrier"] is not None:
            ident = e["addr"] if e["addr"] is not None else bar_label(e)
            waiters.setdefault((e["cluster"], ident), set()).add(e.get("bar_cta", e["cta"]))
    exact = any(e["phase"] is not None for e in ev if e["kind"] in SIGNALS)
    out, signals, last = [], {}, {}
    for i, e in enumerate(ev):
        if e["barrier"] is None and e["addr"] is None:
            continue
        key = _bar_key(e, waiters)
        if e["kind"] in SIGNALS:
            signals.setdefault((key, e["phase"]), []).append(i)
            last[key] = i
        elif e["kind"] == "wait_end":
            if exact:
                out += [(s, i, "barrier") for s in signals.get((key, e["phase"]), []) if e["phase"] is not None]
            elif key in last:
                out.append((last[key], i, "barrier"))
    return out, exact
