"""The one event model of a run: what each event means, one checker, one rule from events to spans, and
the run's happens-before graph.

    ev = events.check(report.events)     # the schema (KEYS), known kinds, seq order; EventError names a bad one
    sp = events.spans(ev)                # waits, role phases, instants, ring-slot and accumulator occupancy
    g = events.graph(ev)                 # nodes = events; program order, barrier phases, async operations

Two sources speak this schema: the simulator's event log (pelib.sim, SimReport.events; `seq` is an order
stamp, never a time) and measured clock64 records (pelib.timing.Timing.events(): phase_begin/phase_end
with `seq` the cycle count since the CTA's first record). Chrome's trace (pelib.timing.chrome_trace), the
book's protocol pictures (pelib.views.protocol) and the timing model (pelib.predict) read their spans and
the graph from here, so they cannot disagree.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from functools import lru_cache

from .paths import KERNELS

# The schema: every event has these keys (None where they do not apply). seq, cta, warp and kind are required.
KEYS = ("seq", "cta", "cluster", "rank", "warp", "lane", "role", "kind", "barrier", "index", "addr", "bar_cta", "phase",
        "parity", "tag", "bytes", "op", "slot", "acc", "tile", "what", "file", "line", "tensor", "dests", "coord")
REQUIRED = ("seq", "cta", "warp", "kind")
_KEYSET = frozenset(KEYS)
# The one table of event kinds: what each is in a picture (its category), how a picture marks it (marker,
# colour, legend; None: drawn as a span or not at all) and how the timing model's replay prices it (PRICES).
# An async unit (TMA, tensor core) records its completions with warp -1. The engine's kinds (pelib.sim.engine.EVENT_KINDS,
# from the engine's own list) must all be here: tests/test_events.py fails on a kind this table lacks.
@dataclass(frozen=True)
class KindInfo:
    category: str                     # wait, issue, completion, phase
    style: tuple | None               # (marker, colour, legend text) of an instant in a protocol picture
    price: str                        # how pelib.predict.replay prices it: one of PRICES


PRICES = {
    "wait": "an mbarrier wait: until its phase completes, plus the wake or pass cost",
    "signal": "an arrive or expect_tx: mbarrier.arrive_cycles, then it counts toward its phase",
    "landing": "an asynchronous completion that signals a barrier (a load's complete_tx, a commit's arrive)",
    "tma_load": "a TMA load: tma.issue_cycles, one box through the issuing SM's TMA unit, a landing per destination",
    "tma_store": "a TMA store: tma.issue_cycles (its bytes counted as traffic)",
    "commit": "tcgen05.commit: its arrive once the thread's earlier tcgen05 operations complete",
    "sync": "bar.sync / barrier.cluster: the last arrival plus bar_sync.cycles",
    "tmem": "a TMEM allocation or release: tma.issue_cycles (an issue cost)",
    "sass": "not a graph node: the replay prices the instruction from the SASS between events",
    "repeat": "not a graph node: another event of the same operation stands for it",
    "mark": "a phase mark: no instruction of its own",
    "exit": "the thread's end",
}
KIND_TABLE = {
    "wait_begin": KindInfo("wait", None, "wait"),
    "wait_end": KindInfo("wait", None, "wait"),
    "arrive": KindInfo("completion", ("|", "#34495e", "mbarrier arrive"), "signal"),
    "expect_tx": KindInfo("issue", ("|", "#5dade2", "arrive.expect_tx"), "signal"),
    "complete_tx": KindInfo("completion", None, "landing"),
    "tma_load": KindInfo("issue", ("v", "#2e86c1", "TMA load issued"), "tma_load"),
    "tma_load_done": KindInfo("completion", ("^", "#85c1e9", "TMA load landed"), "repeat"),
    "tma_store": KindInfo("issue", ("P", "#e67e22", "TMA store"), "tma_store"),
    "tma_store_done": KindInfo("completion", None, "repeat"),
    "mma": KindInfo("issue", ("s", "#c0392b", "MMA issued"), "sass"),
    "mma_done": KindInfo("completion", ("d", "#d7bde2", "MMA complete"), "repeat"),
    "commit": KindInfo("issue", ("D", "#7d3c98", "tcgen05.commit"), "commit"),
    "tmem_alloc": KindInfo("issue", ("<", "#95a5a6", "TMEM alloc"), "tmem"),
    "tmem_dealloc": KindInfo("completion", (">", "#95a5a6", "TMEM dealloc"), "tmem"),
    "tmem_ld": KindInfo("issue", ("o", "#27ae60", "tcgen05.ld (TMEM read)"), "sass"),
    "tmem_cp": KindInfo("issue", ("o", "#a9dfbf", "tcgen05.cp"), "sass"),
    "bar_sync": KindInfo("wait", ("_", "#7f8c8d", "bar.sync"), "sync"),
    "cluster_sync": KindInfo("wait", ("*", "#7f8c8d", "cluster sync"), "sync"),
    "exit": KindInfo("completion", None, "exit"),
    "phase_begin": KindInfo("phase", None, "mark"),
    "phase_end": KindInfo("phase", None, "mark"),
    "tmem_st": KindInfo("issue", ("o", "#1e8449", "tcgen05.st (TMEM write)"), "sass"),
}
KINDS = {k: v.category for k, v in KIND_TABLE.items()}     # kind -> what it is in a picture


def kinds_priced(*prices: str) -> tuple:
    """The kinds the replay prices one of these ways (PRICES), in the table's order."""
    bad = set(prices) - set(PRICES)
    if bad:
        raise KeyError(f"no price {sorted(bad)}; prices are {sorted(PRICES)}")
    return tuple(k for k, v in KIND_TABLE.items() if v.price in prices)


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
    required keys, a known kind, a barrier named by name with its offset in `addr`). A numpy structured array is
    converted. Raises EventError naming the first bad event and the fix."""
    if hasattr(events, "dtype") and getattr(events.dtype, "names", None):
        events = [{k: (v.item() if hasattr(v, "item") else v) for k, v in zip(events.dtype.names, row)}
                  for row in events]
    out = []
    required = operator.itemgetter(*REQUIRED)
    for n, e in enumerate(events):
        try:
            whole = None not in required(e)
        except KeyError:
            whole = False
        if not whole:
            missing = [k for k in REQUIRED if e.get(k) is None]
            raise EventError(f"event {n} lacks {missing}: every event has {REQUIRED} (pelib.events.KEYS)")
        if e["kind"] not in KINDS:
            raise EventError(f"event {n} has kind {e['kind']!r}, not one of the schema's {sorted(KINDS)}")
        b = e.get("barrier")
        if isinstance(b, int) and not isinstance(b, bool):
            raise EventError(f"event {n} names its barrier by the number {e['barrier']}: `barrier` is the barrier's "
                             "name (\"full\", with `index`), its shared-memory offset goes to `addr`, a bar.sync's id "
                             "to `tag` (the simulator's schema, pelib.sim.engine.event_schema())")
        # an event with every key (the simulator's) is copied as it is, any other filled with None first
        out.append(dict(e) if e.keys() == _KEYSET else {**dict.fromkeys(KEYS), **e})
    out.sort(key=lambda e: e["seq"])
    return fill_roles(out)


# What a warp does, by the first of these kinds it issues: the one rule for a warp's role where the stage's phase
# marks name none (a role they give is kept as it is), for every log, and the timing model's (warp_classes).
ROLE_BY_KIND = (("mma", "mma"), ("commit", "mma"), ("tma_load", "producer"), ("tmem_ld", "epilogue"),
                ("tma_store", "epilogue"))


def _issued(events) -> dict:
    """{(cta, warp): the set of kinds it logged} of every warp (not the asynchronous units)."""
    did: dict = {}
    for e in events:
        w = e["warp"]
        if w is not None and w >= 0:
            did.setdefault((e["cta"], w), set()).add(e["kind"])
    return did


def role_of(kinds) -> str | None:
    """A warp's role from the kinds it issued (ROLE_BY_KIND), else None (a warp that only synchronised)."""
    return next((r for k, r in ROLE_BY_KIND if k in kinds), None)


def warp_roles(events) -> dict:
    """{(cta, warp): role} of every warp in the log: the role its events carry (the stage's phase marks), else the
    one ROLE_BY_KIND gives what it issues, else none (a warp that only synchronised)."""
    named: dict = {}
    for e in events:
        w = e["warp"]
        role = str(e.get("role") or "")
        if w is not None and w >= 0 and role and role != f"warp {w}":
            named.setdefault((e["cta"], w), role)
    return {key: named.get(key) or role_of(kinds) for key, kinds in _issued(events).items()}


def warp_classes(events) -> dict:
    """{(cta, warp): "producer" | "consumer" | "mma" | "epilogue"}: ROLE_BY_KIND's role of what each warp issued
    (never a name the phase marks give, so a TIMING build's warps are classed as its plain build's), an "mma" warp
    split by its instruction: one that commits its MMAs (tcgen05.commit) is the tcgen05 issuer "mma", one that does
    not a wgmma "consumer". Warps that only synchronised are left out. What pelib.predict's per-role phases use."""
    out = {}
    for key, kinds in _issued(events).items():
        r = role_of(kinds)
        if r == "mma" and "commit" not in kinds:
            r = "consumer"
        if r is not None:
            out[key] = r
    return out


def fill_roles(events: list[dict]) -> list[dict]:
    """The events with each warp's role where the log names none (warp_roles), in place; returns them."""
    roles = warp_roles(events)
    for e in events:
        w = e["warp"]
        if w is not None and w >= 0 and (not e.get("role") or e["role"] == f"warp {w}"):
            r = roles.get((e["cta"], w))
            if r:
                e["role"] = r
    return events


def bar_label(e: dict) -> str:
    """'full[0]', 'acc_empty[1]', 'mma_done': the barrier an event names, as the stage writes it."""
    b, i = e.get("barrier"), e.get("index")
    return "" if b in (None, "") else f"{b}[{i}]" if i is not None else str(b)


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


def barrier_of(e: dict) -> tuple:
    """(the CTA the mbarrier lives in, its shared-memory offset, else its name): which barrier an event names. The
    barrier's CTA is `bar_cta` (the simulator names it for every barrier event; a remote arrive's is another CTA of
    the cluster), else the event's own CTA."""
    return (e["cta"] if e.get("bar_cta") is None else e["bar_cta"], e["addr"] if e["addr"] is not None else bar_label(e))


def phase_key(e: dict) -> tuple | None:
    """(CTA, barrier, k): the mbarrier phase an event signals or observed complete (barrier_of and the log's
    `phase`); None where it names none (a wait that passed a fresh barrier's parity 1 at once, a log without phases).
    The one key the graph's barrier edges and the timing model's replay join signals and waits by."""
    return None if e.get("phase") is None else barrier_of(e) + (e["phase"],)


def _barrier_edges(ev) -> tuple[list, bool]:
    """Signal -> wait_end edges: by phase where the log records barrier phases (phase_key; a wait_end with none
    observed a fresh barrier's parity-1 pass: no signal), else from the last signal on its barrier before it."""
    exact = any(e["phase"] is not None for e in ev if e["kind"] in SIGNALS)
    out, signals, last = [], {}, {}
    for i, e in enumerate(ev):
        if e["barrier"] is None and e["addr"] is None:
            continue
        if e["kind"] in SIGNALS:
            signals.setdefault(phase_key(e), []).append(i)
            last[barrier_of(e)] = i
        elif e["kind"] == "wait_end":
            if exact:
                out += [(s, i, "barrier") for s in signals.get(phase_key(e), []) if e["phase"] is not None]
            elif barrier_of(e) in last:
                out.append((last[barrier_of(e)], i, "barrier"))
    return out, exact
