"""pelib.events: the one schema, its checker, the one rule from events to spans, the happens-before graph,
and the naming of logs whose barriers are shared offsets (from what each barrier does, not from source text).

The logs here are written by hand or by tests/sim_events.py; tests/test_views_sim_real.py runs the same
functions on the real simulator, tests/test_trace.py on the committed H100 clock64 records."""
from __future__ import annotations

import numpy as np
import pytest

from pelib import events

from sim_events import persistent_log

FULL, EMPTY, ACC_FULL, ACC_EMPTY = 0x100, 0x110, 0x120, 0x130   # two 8-byte mbarriers each
FILE = "fp8/09_persistent_megakernel.cu"


def offset_log(tiles: int = 2, kb: int = 2, stages: int = 2) -> list[dict]:
    """A persistent stage's protocol as the simulator logged it before its events carried names: barriers
    as shared offsets, the bytes of a TMA in "tag", roles "warp N", no slot, accumulator or op."""
    out = []

    def ev(warp, kind, bar=None, line=0, tag=None, parity=None, lane=0):
        out.append({"seq": len(out), "cta": 0, "cluster": 0, "rank": 0, "warp": warp, "lane": lane,
                    "role": f"warp {warp}" if warp >= 0 else "async unit", "kind": kind, "barrier": bar,
                    "slot": None, "acc": None, "parity": parity, "tag": tag, "line": line, "file": FILE})
    it = 0
    for t in range(tiles):
        a = t % 2
        ev(1, "wait_begin", ACC_EMPTY + 8 * a, 290, 5, 1)
        ev(1, "wait_end", ACC_EMPTY + 8 * a, 290, 5, 1)
        for _ in range(kb):
            s = it % stages
            ev(0, "wait_begin", EMPTY + 8 * s, 265, 1, 1)
            ev(0, "wait_end", EMPTY + 8 * s, 265, 1, 1)
            ev(0, "expect_tx", FULL + 8 * s, 267, 1024)
            ev(0, "tma_load", FULL + 8 * s, 269, 1024)
            ev(-1, "tma_load_done", FULL + 8 * s, 269, 1024)
            ev(-1, "complete_tx", FULL + 8 * s, 269, 1024)
            ev(1, "wait_begin", FULL + 8 * s, 296, 2, 0)
            ev(1, "wait_end", FULL + 8 * s, 296, 2, 0)
            ev(1, "mma", None, 305)
            ev(-1, "mma_done", None, 305)
            ev(1, "commit", EMPTY + 8 * s, 308)
            ev(-1, "arrive", EMPTY + 8 * s, 308)
            it += 1
        ev(1, "commit", ACC_FULL + 8 * a, 311)
        ev(-1, "arrive", ACC_FULL + 8 * a, 311)
        for lane in (0, 1):
            ev(2, "wait_begin", ACC_FULL + 8 * a, 333, 3, 0, lane)
            ev(2, "wait_end", ACC_FULL + 8 * a, 333, 3, 0, lane)
        ev(2, "tmem_ld", None, 187, 32)
        ev(2, "tmem_ld", None, 187, 32)
        ev(2, "arrive", ACC_EMPTY + 8 * a, 205)
    ev(0, "exit", None, 360)
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


# ---- a log with offsets, named from what its barriers do -----------------------------------------------

def test_offsets_are_named_by_what_each_barrier_does():
    ev = events.check(offset_log())
    names = {e["addr"]: events.bar_label(e) for e in ev if e["addr"] is not None}
    assert names == {FULL: "full[0]", FULL + 8: "full[1]", EMPTY: "empty[0]", EMPTY + 8: "empty[1]",
                     ACC_FULL: "acc_full[0]", ACC_FULL + 8: "acc_full[1]", ACC_EMPTY: "acc_empty[0]",
                     ACC_EMPTY + 8: "acc_empty[1]"}
    mma = [e for e in ev if e["kind"] == "mma"]
    assert [e["slot"] for e in mma] == [0, 1, 0, 1] and [e["acc"] for e in mma] == [0, 0, 1, 1]
    assert [e["acc"] for e in ev if e["kind"] == "tmem_ld"] == [0, 0, 1, 1]
    assert {e["warp"]: e["role"] for e in ev} == {0: "warp 0: producer", 1: "warp 1: MMA issuer",
                                                  2: "warp 2: epilogue", -1: "async unit"}
    load = next(e for e in ev if e["kind"] == "tma_load")
    assert load["bytes"] == 1024 and load["tag"] is None and load["slot"] == 0
    by_seq = {e["seq"]: e for e in ev}
    for e in ev:       # every completion carries its issue's op id
        if e["kind"] in ("tma_load_done", "complete_tx", "mma_done") or (e["kind"] == "arrive" and e["warp"] < 0):
            issue = by_seq[e["op"]]
            assert e["kind"] in events.COMPLETES[issue["kind"]] and issue["seq"] < e["seq"]


def test_a_barrier_no_rule_names_keeps_its_call_site():
    ev = offset_log(tiles=1)
    ev.insert(3, {**ev[2], "kind": "arrive", "barrier": 0x400, "line": 77, "warp": 3, "role": "warp 3"})
    ev = events.check([{**e, "seq": i} for i, e in enumerate(ev)])
    assert {events.bar_label(e) for e in ev if e["addr"] == 0x400} == {"bar@L77"}


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


def test_offsets_and_names_give_the_same_spans():
    """The rule reads names, slots and accumulators, not how they were found: the offset log and the same
    log with its names written in draw the same occupancy."""
    named = events.check(offset_log())
    occ = lambda ev: sorted((s.tid, s.name, s.ts, s.dur) for s in events.spans(ev).spans if s.cat == "occupancy")
    by_hand = [{**e, "addr": None} for e in named]
    assert occ(offset_log()) == occ(by_hand) and len(occ(by_hand)) > 8


# ---- the happens-before graph ----------------------------------------------------------------------------

def test_the_graph_of_an_offset_log():
    g = events.graph(offset_log())
    ev = g.events
    assert not g.exact and all(ev[a]["seq"] < ev[b]["seq"] for a, b, _ in g.edges)
    why = lambda i: {w for a, b, w in g.edges if b == i}
    for i, e in enumerate(ev):
        if e["kind"] in ("mma_done", "tma_load_done", "complete_tx") or (e["kind"] == "arrive" and e["warp"] < 0):
            assert "async" in why(i)
        if e["kind"] == "wait_end" and e["addr"] in (FULL, FULL + 8):
            (src,) = [a for a, b, w in g.edges if b == i and w == "barrier"]
            assert ev[src]["kind"] == "complete_tx" and ev[src]["addr"] == e["addr"]
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


def test_back_to_back_landings_of_one_site_are_two_ops():
    """Two loads of one call site on one barrier in flight at once (a resident operand loaded slice by slice)
    land one after the other: each landing (tma_load_done + complete_tx) is its own op."""
    def ev(seq, warp, kind, tag=None):
        return {"seq": seq, "cta": 0, "cluster": 0, "rank": 0, "warp": warp, "lane": 0, "role": None, "kind": kind,
                "barrier": 0x200, "parity": None, "tag": tag, "line": 231, "file": FILE}
    log = [ev(0, 0, "tma_load", 512), ev(1, 0, "tma_load", 512), ev(2, -1, "tma_load_done", 512),
           ev(3, -1, "complete_tx", 512), ev(4, -1, "tma_load_done", 512), ev(5, -1, "complete_tx", 512)]
    assert [e["op"] for e in events.check(log)] == [0, 1, 0, 0, 1, 1]
