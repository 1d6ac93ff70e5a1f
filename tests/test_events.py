"""pelib.events: the one schema, its checker, the one rule from events to spans and the happens-before graph.

The logs here are written by hand in the simulator's schema (pelib.sim.engine.event_schema(): barriers named, their
offset in `addr`, phases and op ids as the engine gives them) or by tests/sim_events.py;
tests/test_views_sim_real.py runs the same functions on the real simulator, tests/test_trace.py on the committed
H100 clock64 records."""
from __future__ import annotations

import numpy as np
import pytest

from pelib import events

from sim_events import persistent_log

FULL, EMPTY, ACC_FULL, ACC_EMPTY = 0x100, 0x110, 0x120, 0x130   # two 8-byte mbarriers each
FILE = "fp8/09_persistent_megakernel.cu"
COUNT = {"full": 1, "empty": 1, "acc_full": 1, "acc_empty": 1}   # arrivals per phase


def engine_log(tiles: int = 2, kb: int = 2, stages: int = 2) -> list[dict]:
    """A persistent stage's protocol in the simulator's schema, one thread at a time: each mbarrier event names
    its barrier (name, index, offset, its CTA), the phase it signals (the barrier's current one) or observed
    complete (a wait that passed a fresh barrier's parity 1: none), an async completion its issue's op id, the
    bytes of a TMA in `bytes`, roles "warp N" (the stage marks none), the ring slot and the accumulator."""
    out, bars, op = [], {}, [0]
    base = {"full": FULL, "empty": EMPTY, "acc_full": ACC_FULL, "acc_empty": ACC_EMPTY}

    def bar(name, i):
        return bars.setdefault((name, i), {"phase": 0, "arr": 0, "tx": 0})

    def ev(warp, kind, name=None, i=None, line=0, lane=0, **kw):
        e = {"seq": len(out), "cta": 0, "cluster": 0, "rank": 0, "warp": warp, "lane": lane,
             "role": f"warp {warp}" if warp >= 0 else "async unit", "kind": kind, "line": line, "file": FILE, **kw}
        if name is not None:
            b = bar(name, i)
            e.update(barrier=name, index=i, addr=base[name] + 8 * i, bar_cta=0)
            if kind in ("wait_begin", "wait_end"):
                e["phase"] = b["phase"] - 1 if b["phase"] else None
            elif kind != "commit":
                e["phase"] = b["phase"]
            if kind in ("arrive", "expect_tx"):
                b["arr"] += 1
            b["tx"] += kw.get("bytes", 0) if kind == "expect_tx" else -kw.get("bytes", 0) if kind == "complete_tx" else 0
            if kind in events.SIGNALS and b["arr"] >= COUNT[name] and b["tx"] == 0:
                b["phase"], b["arr"] = b["phase"] + 1, 0
        out.append(e)
        return e

    def issue():
        op[0] += 1
        return op[0]
    it = 0
    for t in range(tiles):
        a = t % 2
        par = (t // 2) & 1
        ev(1, "wait_begin", "acc_empty", a, 290, parity=par ^ 1, tag=5, acc=a)
        ev(1, "wait_end", "acc_empty", a, 290, parity=par ^ 1, tag=5, acc=a)
        for _ in range(kb):
            s, sp = it % stages, (it // stages) & 1
            ev(0, "wait_begin", "empty", s, 265, parity=sp ^ 1, tag=1, slot=s)
            ev(0, "wait_end", "empty", s, 265, parity=sp ^ 1, tag=1, slot=s)
            ev(0, "expect_tx", "full", s, 267, bytes=1024, slot=s)
            ld = issue()
            ev(0, "tma_load", "full", s, 269, bytes=1024, op=ld, slot=s, tensor="a")
            ev(-1, "tma_load_done", "full", s, 269, bytes=1024, op=ld, slot=s)
            ev(-1, "complete_tx", "full", s, 269, bytes=1024, op=ld, slot=s)
            ev(1, "wait_begin", "full", s, 296, parity=sp, tag=2, slot=s)
            ev(1, "wait_end", "full", s, 296, parity=sp, tag=2, slot=s)
            m = issue()
            ev(1, "mma", line=305, op=m, slot=s, acc=a, tile=t)
            ev(-1, "mma_done", line=305, op=m, slot=s, acc=a, tile=t)
            c = issue()
            ev(1, "commit", "empty", s, 308, op=c, slot=s)
            ev(-1, "arrive", "empty", s, 308, op=c, slot=s)
            it += 1
        c = issue()
        ev(1, "commit", "acc_full", a, 311, op=c, acc=a)
        ev(-1, "arrive", "acc_full", a, 311, op=c, acc=a)
        for lane in (0, 1):
            ev(2, "wait_begin", "acc_full", a, 333, lane, parity=par, tag=3, acc=a)
            ev(2, "wait_end", "acc_full", a, 333, lane, parity=par, tag=3, acc=a)
        ev(2, "tmem_ld", line=187, bytes=32, acc=a)
        ev(2, "tmem_ld", line=187, bytes=32, acc=a)
        ev(2, "arrive", "acc_empty", a, 205, acc=a)
    ev(0, "exit", line=360)
    return out


# ---- the schema and its checker --------------------------------------------------------------------------

def test_check_gives_every_key_in_seq_order():
    ev = [{"seq": 2, "cta": 0, "warp": 1, "kind": "mma"}, {"seq": 0, "cta": 0, "warp": 0, "kind": "tma_load",
                                                           "barrier": "full", "index": 1}]
    out = events.check(ev)
    assert [e["seq"] for e in out] == [0, 2] and all(tuple(e) == events.KEYS for e in out)
    assert events.bar_label(out[0]) == "full[1]" and events.bar_label(out[1]) == ""
    assert events.check(out) == out                       # checking twice changes nothing
    arr = np.array([(0, 0, 1, "mma")], dtype=[("seq", "i8"), ("cta", "i4"), ("warp", "i4"), ("kind", "U8")])
    assert events.check(arr)[0]["kind"] == "mma"


@pytest.mark.parametrize("bad, says", [({"seq": None}, r"event 1 lacks \['seq'\]"),
                                       ({"kind": "teleport"}, "event 1 has kind 'teleport'"),
                                       ({"cta": None}, r"event 1 lacks \['cta'\]")])
def test_a_bad_event_is_named(bad, says):
    ev = [{"seq": 0, "cta": 0, "warp": 0, "kind": "mma"}, {"seq": 1, "cta": 0, "warp": 0, "kind": "exit", **bad}]
    with pytest.raises(events.EventError, match=says):
        events.check(ev)


# ---- the engine's schema ------------------------------------------------------------------------------------

def test_a_barrier_named_by_its_offset_is_refused():
    """The schema names a barrier by name and keeps its offset in `addr`: a log that puts the offset in `barrier`
    (the simulator's first schema) is refused with the fix, not renamed by guessing what each barrier does."""
    log = engine_log(tiles=1)
    log[0] = {**log[0], "barrier": log[0]["addr"]}
    with pytest.raises(events.EventError, match=r"event 0 names its barrier by the number 304: .*`addr`"):
        events.check(log)


def test_roles_come_from_what_each_warp_issued():
    ev = events.check(engine_log())
    assert {e["warp"]: e["role"] for e in ev} == {0: "producer", 1: "mma", 2: "epilogue", -1: "async unit"}
    assert events.warp_roles(ev) == {(0, 0): "producer", (0, 1): "mma", (0, 2): "epilogue"}


def test_warp_classes_split_the_mma_role_by_its_instruction():
    """The timing model's classes come from the one role rule: an MMA warp that commits is the tcgen05 issuer,
    one that does not a wgmma consumer; names the phase marks give do not change the class."""
    ev = events.check(engine_log())
    assert events.warp_classes(ev) == {(0, 0): "producer", (0, 1): "mma", (0, 2): "epilogue"}
    wg = [{"seq": 0, "cta": 0, "warp": 4, "kind": "mma", "role": "mma+epilogue"},
          {"seq": 1, "cta": 0, "warp": 4, "kind": "tma_store", "role": "mma+epilogue"},
          {"seq": 2, "cta": 0, "warp": 0, "kind": "tma_load", "role": "warp 0"},
          {"seq": 3, "cta": 0, "warp": 1, "kind": "bar_sync", "role": "warp 1"}]
    assert events.warp_classes(events.check(wg)) == {(0, 4): "consumer", (0, 0): "producer"}
    assert events.warp_roles(events.check(wg)) == {(0, 4): "mma+epilogue", (0, 0): "producer", (0, 1): None}


# ---- the one rule: spans ---------------------------------------------------------------------------------

def test_occupancy_follows_the_ring_and_the_accumulators():
    sp = events.spans(persistent_log(tiles=5, kb=4, stages=3, seed=3), ctas=[0])
    held = [s for s in sp.spans if s.args.get("part") == "held"]
    assert {sp.threads[(0, s.tid)] for s in held if s.tid < events.ACC_TID} == {"ring slot 0", "ring slot 1", "ring slot 2"}
    written = sorted((s for s in sp.spans if s.args.get("part") == "written"), key=lambda s: s.ts)
    assert [s.args["tile"] for s in written] == list(range(5))           # five tiles, numbered in order
    assert [s.args["acc"] for s in written] == [0, 1, 0, 1, 0]
    for tid in {s.tid for s in held}:     # a slot or accumulator is never held twice at once
        rounds = sorted((s for s in held if s.tid == tid), key=lambda s: s.ts)
        assert all(a.ts + a.dur <= b.ts for a, b in zip(rounds, rounds[1:]))
    for s in held:                        # its parts tile the round
        parts = sorted((p for p in sp.spans if p.tid == s.tid and p.args.get("part") not in (None, "held")
                        and s.ts <= p.ts < s.ts + max(s.dur, 1)), key=lambda p: p.ts)
        assert parts[0].ts == s.ts and parts[-1].ts + parts[-1].dur == s.ts + s.dur
    assert not any(s.args.get("open") for s in held)
    mma = [s for s in sp.spans if s.args.get("kind") == "mma"]
    assert mma and all(s.args.get("tile") is not None for s in mma)     # an MMA carries its tile's colour


def test_a_planted_deadlock_leaves_open_waits_and_held_resources():
    sp = events.spans(persistent_log(tiles=5, kb=4, stages=3, bug="acc_empty_short"))
    still = [s for s in sp.spans if s.cat == "wait" and s.args.get("open")]
    assert any(s.args["barrier"] == "acc_empty[0]" and s.args["tag"] == 5 and s.name.endswith("(never ends)")
               for s in still)
    assert any(s.args.get("open") for s in sp.spans if s.args.get("part") == "held")


def test_occupancy_reads_the_logs_slots_and_accumulators():
    """The rule reads slots and accumulators as the log names them: the engine's log of two tiles over a ring of
    two slots holds each slot twice and each accumulator once, every round released."""
    sp = events.spans(engine_log())
    held = [s for s in sp.spans if s.args.get("part") == "held"]
    assert sorted(sp.threads[(0, s.tid)] for s in held) == ["accumulator 0", "accumulator 1"] + ["ring slot 0"] * 2 + \
        ["ring slot 1"] * 2
    assert not any(s.args.get("open") for s in held)


# ---- the happens-before graph ----------------------------------------------------------------------------

def test_the_graph_of_an_engine_log():
    """Program order per lane, every async completion after its issue (by op), each commit's arrive after the MMAs
    it tracks, and each wait_end after exactly the signals of the phase it observed (phase_key)."""
    g = events.graph(engine_log())
    ev = g.events
    assert g.exact and all(ev[a]["seq"] < ev[b]["seq"] for a, b, _ in g.edges)
    why = lambda i: {w for a, b, w in g.edges if b == i}
    for i, e in enumerate(ev):
        if e["kind"] in ("mma_done", "tma_load_done", "complete_tx") or (e["kind"] == "arrive" and e["warp"] < 0):
            (src,) = [a for a, w in g.preds(i) if w == "async"]
            assert ev[src]["op"] == e["op"] and e["kind"] in events.COMPLETES[ev[src]["kind"]]
        if e["kind"] == "wait_end" and e["barrier"] == "full":
            src = [a for a, w in g.preds(i) if w == "barrier"]       # its phase: the producer's expect_tx, the bytes
            assert [ev[a]["kind"] for a in src] == ["expect_tx", "complete_tx"]
            assert {events.phase_key(ev[a]) for a in src} == {events.phase_key(e)}
    # the first waits on empty and acc_empty pass fresh barriers: no phase, no signal before them
    fresh = [i for i, e in enumerate(ev) if e["kind"] == "wait_end" and e["phase"] is None]
    assert fresh and all("barrier" not in why(i) for i in fresh)
    assert {ev[i]["barrier"] for i in fresh} == {"empty", "acc_empty"}
    commits = [(a, b) for a, b, w in g.edges if w == "commit"]
    assert commits and all(ev[a]["kind"] == "mma_done" and ev[b]["kind"] == "arrive" for a, b in commits)
    ends = [i for i, e in enumerate(ev) if e["kind"] == "wait_end" and e["warp"] == 2]
    assert all(len([a for a, b, w in g.edges if b == i and w == "program"]) <= 1 for i in ends)


def test_the_graph_follows_phases_where_the_log_has_them():
    """Two arrivals complete phase 0 of a barrier of count 2; a third arrives on phase 1 before the waiter
    wakes. The wait_end that observed phase 0 depends on the first two only."""
    base = dict(cta=0, cluster=0, rank=0, barrier="done", addr=0x40)
    ev = [dict(seq=0, warp=0, lane=0, kind="arrive", phase=0, **base),
          dict(seq=1, warp=1, lane=0, kind="arrive", phase=0, **base),
          dict(seq=2, warp=0, lane=0, kind="arrive", phase=1, **base),
          dict(seq=3, warp=2, lane=0, kind="wait_end", phase=0, parity=0, **base)]
    g = events.graph(ev)
    assert g.exact and sorted((a, b) for a, b, w in g.edges if w == "barrier") == [(0, 3), (1, 3)]
    assert (0, 2, "program") in g.edges and g.preds(3) == [(0, "barrier"), (1, "barrier")]


def test_role_phases_pair_into_spans():
    """phase_begin / phase_end (the schema's role phases; a clock64 record is one such pair) are one span of
    the phase's category per (warp, tile), summed waits marked."""
    base = dict(cta=0, cluster=None, rank=None, warp=0, lane=0, role="producer (warp 0)")
    ev = [dict(seq=0, kind="phase_begin", what="producer_wait", tile=0, **base),
          dict(seq=40, kind="phase_end", what="producer_wait", tile=0, **base),
          dict(seq=0, kind="phase_begin", what="tma_issue", tile=0, **base),
          dict(seq=90, kind="phase_end", what="tma_issue", tile=0, **base)]
    sp = events.spans(ev, order=events.MEASURED_ORDER, unit="cycles")
    got = {s.name: (s.cat, s.ts, s.dur, s.args["summed"]) for s in sp.spans}
    assert got == {"producer_wait": ("wait", 0, 40, True), "tma_issue": ("issue", 0, 90, False)}


def test_back_to_back_landings_of_one_site_follow_their_own_ops():
    """Two loads of one call site on one barrier in flight at once (a resident operand loaded slice by slice)
    land one after the other: each landing's async edge goes to the load of its op."""
    def ev(seq, warp, kind, op):
        return {"seq": seq, "cta": 0, "cluster": 0, "rank": 0, "warp": warp, "lane": 0, "kind": kind, "op": op,
                "barrier": "b_full", "addr": 0x200, "bar_cta": 0, "phase": 0, "bytes": 512, "line": 231, "file": FILE}
    log = [ev(0, 0, "tma_load", 1), ev(1, 0, "tma_load", 2), ev(2, -1, "tma_load_done", 1),
           ev(3, -1, "complete_tx", 1), ev(4, -1, "tma_load_done", 2), ev(5, -1, "complete_tx", 2)]
    g = events.graph(log)
    assert sorted((a, b) for a, b, w in g.edges if w == "async") == [(0, 2), (0, 3), (1, 4), (1, 5)]


# ---- the one table of kinds and the engine's vocabulary ------------------------------------------------------

def test_the_engine_publishes_its_vocabulary_and_the_table_knows_every_kind():
    """pelib.sim's kinds and record layout are the engine's (pe_sim_event_schema); every kind the engine can emit
    has one entry in pelib.events.KIND_TABLE (a new kind fails here until it is given a category, a picture
    style and a price), and the table names no kind the engine lacks."""
    from pelib.sim import engine as sim
    schema = sim.event_schema()
    assert schema.kinds == sim.EVENT_KINDS and schema.dtype == sim.EVENT_DTYPE
    assert schema.kinds[:3] == ("wait_begin", "wait_end", "arrive") and "tmem_st" in schema.kinds
    assert schema.dtype.itemsize == sim._engine().pe_sim_event_size()
    assert {"seq", "op", "kind", "bytes", "tensor", "dests", "coord"} <= set(schema.dtype.names)
    assert set(schema.kinds) == set(events.KIND_TABLE)
    assert all(v.price in events.PRICES for v in events.KIND_TABLE.values())


def test_pictures_and_the_replay_read_the_one_table():
    """The protocol picture's markers and the graph's dropped kinds come from KIND_TABLE; tcgen05.st is priced
    from the SASS, never as a TMA issue."""
    from pelib.predict import graph
    from pelib.views import protocol
    assert protocol.KIND_STYLE == {k: v.style for k, v in events.KIND_TABLE.items() if v.style}
    assert set(graph.DROPPED) == {k for k, v in events.KIND_TABLE.items() if v.price in ("sass", "repeat")}
    assert events.KIND_TABLE["tmem_st"].price == "sass" and "tmem_st" in graph.DROPPED
    assert events.KINDS == {k: v.category for k, v in events.KIND_TABLE.items()}
    with pytest.raises(KeyError, match="no price"):
        events.kinds_priced("tma")
