"""Chrome trace-event JSON (pelib.timing.chrome_trace): the schema Perfetto reads, from measured clock64
records (the committed H100 TIMING run of sm90/06) and from simulator events (the event-log schema),
and the command line that writes it (python -m pelib.stage ... --trace out.json)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pelib import events, paths, timing
from pelib.sim import host as sim_host
from pelib import stage as stage_mod

H100 = paths.RESULTS / "2026-11-24-h100"
RECORDS = H100 / "trace-sm90-06.records.npz"
TRACE = H100 / "trace-sm90-06.json"


def _sim_events():
    """A small event log in the simulator's schema: a producer fills ring slot 0, the MMA warp waits for
    it, issues, releases the slot and the accumulator; the epilogue waits on a barrier that never fires."""
    base = dict(cluster=0, rank=0, lane=0)
    ev = [dict(kind="tma_load", warp=0, role="producer", slot=0, barrier="full[0]", line=101),
          dict(kind="expect_tx", warp=0, role="producer", slot=0, barrier="full[0]"),
          dict(kind="wait_begin", warp=1, role="mma", slot=0, barrier="full[0]", parity=0, tag=2),
          dict(kind="complete_tx", warp=0, role="producer", slot=0, barrier="full[0]"),
          dict(kind="wait_end", warp=1, role="mma", slot=0, barrier="full[0]", parity=0, tag=2),
          dict(kind="mma", warp=1, role="mma", acc=0, line=140),
          dict(kind="arrive", warp=1, role="mma", slot=0, barrier="empty[0]"),
          dict(kind="commit", warp=1, role="mma", acc=0),
          dict(kind="wait_begin", warp=2, role="epilogue 0", acc=0, barrier="tmem_full[0]", parity=0, tag=4),
          dict(kind="exit", warp=0, role="producer")]
    return [{**base, "seq": i, "cta": 0, **e} for i, e in enumerate(ev)]


def _check_event_schema(tr: dict) -> None:
    """Trace Event Format, written out here rather than only through check_trace: required keys, ph,
    numeric ts and dur, the metadata names, and every pid/tid that carries events has its name."""
    assert set(tr) >= {"traceEvents", "displayTimeUnit", "otherData"} and tr["displayTimeUnit"] == "ns"
    named_p, named_t, used = set(), set(), set()
    for e in tr["traceEvents"]:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(e), e
        assert e["ph"] in ("X", "i", "M"), e
        assert isinstance(e["ts"], (int, float)) and not isinstance(e["ts"], bool)
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            if e["name"] == "process_name":
                named_p.add(e["pid"])
                assert e["args"]["name"].startswith("CTA ")
            if e["name"] == "thread_name":
                named_t.add((e["pid"], e["tid"]))
                assert isinstance(e["args"]["name"], str) and e["args"]["name"]
        else:
            assert isinstance(e["cat"], str) and isinstance(e["args"], dict)
            used.add((e["pid"], e["tid"]))
            if e["ph"] == "X":
                assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            else:
                assert e["s"] == "t"
    assert used and used <= named_t and {p for p, _ in used} <= named_p
    od = tr["otherData"]
    assert {"evidence", "stage", "device", "date", "git", "ts_unit"} <= set(od)
    assert timing.check_trace(tr) == []


def test_measured_trace_from_the_committed_h100_records():
    t = timing.load(RECORDS)
    assert t.meta["device"] == "NVIDIA H100 80GB HBM3" and t.meta["stage"] == "sm90/06_permuted_b"
    assert t.meta["git"] and t.meta["date"].startswith("2026-11-24") and t.layout.ctas == 132
    tr = timing.chrome_trace(t, ctas=range(4))
    _check_event_schema(tr)
    od = tr["otherData"]
    assert od["evidence"].startswith("measured clock64 (NVIDIA H100 80GB HBM3, 2026-11-24")
    assert od["git"] == t.meta["git"] and "cycles" in od["ts_unit"]
    threads = {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"}
    assert "producer (warp 0)" in threads and "consumer warpgroup 1 (warp 4)" in threads
    assert "consumer warpgroup 2 (warp 8)" in threads and "ring: tile in flight (1)" in threads
    # every recorded (warp, tile, phase) of those CTAs is one X event of its duration
    rec = t.recorded[:4]
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["tid"] < events.RING_TID]
    assert len(xs) == int(rec.sum())
    d = t.durations[:4]
    assert sorted(e["dur"] for e in xs) == sorted(d[~np.isnan(d)].tolist())
    # each CTA's clock starts at its own first record (SM clocks are not one clock)
    for c in range(4):
        assert min(e["ts"] for e in xs if e["pid"] == c) == 0


def test_committed_trace_is_the_records_trace():
    """results/2026-11-24-h100/trace-sm90-06.json is chrome_trace of the committed records (CTAs 0-7)."""
    committed = json.loads(TRACE.read_text())
    _check_event_schema(committed)
    again = timing.chrome_trace(timing.load(RECORDS), ctas=range(8))
    assert committed == json.loads(json.dumps(again))


def test_simulated_trace_is_order_not_time(tmp_path):
    ev = _sim_events()
    tr = timing.chrome_trace(ev, tmp_path / "sim.json", stage="fp8/01_warp_specialized")
    assert json.loads((tmp_path / "sim.json").read_text()) == json.loads(json.dumps(tr))
    _check_event_schema(tr)
    assert tr["otherData"]["evidence"] == "simulated order, not time"
    assert tr["otherData"]["ts_unit"] == "simulated order (seq), not time"
    by = {e["name"]: e for e in tr["traceEvents"] if e["ph"] != "M"}
    wait = by["wait full[0] (tag 2)"]                      # wait_begin (seq 2) .. wait_end (seq 4) of the MMA warp
    assert wait["ph"] == "X" and wait["ts"] == 2 and wait["dur"] == 2 and wait["tid"] == 1
    assert by["mma"]["ph"] == "i" and by["mma"]["ts"] == 5 and by["mma"]["cat"] == "issue"
    assert by["ring slot 0 held"]["ts"] == 0 and by["ring slot 0 held"]["dur"] == 6   # tma_load .. the MMA's release
    assert by["wait tmem_full[0] (tag 4) (never ends)"]["args"]["open"] is True
    assert by["accumulator 0 held (never released)"]["tid"] == events.ACC_TID
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"}
    assert names[(0, 0)] == "producer (warp 0)" and names[(0, 1)] == "mma (warp 1)"
    assert names[(0, events.RING_TID)] == "ring slot 0"
    procs = [e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"]
    assert procs == ["CTA 0 (cluster 0, rank 0)"]


def test_simulated_events_as_a_structured_array():
    ev = _sim_events()
    keys = ("seq", "cta", "warp", "kind", "role")
    arr = np.array([tuple(e[k] for k in keys) for e in ev],
                   dtype=[("seq", "i8"), ("cta", "i4"), ("warp", "i4"), ("kind", "U16"), ("role", "U16")])
    tr = timing.chrome_trace(arr)
    assert timing.check_trace(tr) == []
    assert sum(e["ph"] == "i" for e in tr["traceEvents"]) == 7   # 10 events: one wait of 2 events, one left open


@pytest.mark.parametrize("bad, word", [({"kind": "launch"}, "kind"), ({"seq": None}, "seq")])
def test_bad_events_are_named(bad, word):
    ev = _sim_events()
    ev[3] = {**ev[3], **bad}
    with pytest.raises(ValueError, match=f"event 3 .*{word}"):
        timing.chrome_trace(ev)


@pytest.mark.parametrize("mutate, says", [
    (lambda e: e.pop("ts"), "lacks 'ts'"),
    (lambda e: e.update(ph="B"), "ph 'B'"),
    (lambda e: e.update(ts="12"), "not a number"),
    (lambda e: e.update(dur=-1), "dur >= 0"),
    (lambda e: e.pop("cat"), "lacks 'cat'"),
])
def test_the_schema_check_can_fail(mutate, says):
    tr = timing.chrome_trace(_sim_events())
    x = next(e for e in tr["traceEvents"] if e["ph"] == "X")
    mutate(x)
    assert any(says in m for m in timing.check_trace(tr))
    tr = timing.chrome_trace(_sim_events())
    tr["traceEvents"][0]["name"] = "thread_label"
    assert any("metadata name" in m for m in timing.check_trace(tr))
    tr["otherData"]["evidence"] = "simulated"
    assert any("otherData.evidence" in m for m in timing.check_trace(tr))


def test_records_round_trip_and_refuse_other_phases(tmp_path):
    t = timing.load(RECORDS)
    p = t.save(tmp_path / "r.npz", note="copy")
    u = timing.load(p)
    assert (u.start == t.start).all() and (u.end == t.end).all() and u.meta["note"] == "copy"
    z = dict(np.load(p))
    z["phases"] = np.array(json.dumps({"0": "something_else"}))
    np.savez(tmp_path / "other.npz", **z)
    with pytest.raises(ValueError, match="recorded with phases"):
        timing.load(tmp_path / "other.npz")


# ---- the command line: --trace ----------------------------------------------------------------------------

def test_cli_trace_needs_gpu_or_sim(tmp_path, capsys):
    assert stage_mod.main(["sm90/06_permuted_b", "--device", "compile", "--trace", str(tmp_path / "t.json")]) == 1
    assert "--trace needs --device gpu" in capsys.readouterr().out
    assert not (tmp_path / "t.json").exists()


def test_cli_trace_gpu_writes_trace_and_records(tmp_path, monkeypatch, capsys):
    """The GPU path up to the launch: Stage.run and Stage.run_timing stand in for the GPU (the committed
    records come back from the TIMING run); the CLI writes the trace and the records beside it."""
    t = timing.load(RECORDS)
    monkeypatch.setattr(stage_mod.Stage, "run", lambda self, problem, device, time=True, launch=None: {
        "ok": True, "problem": problem, "label": self.label})
    monkeypatch.setattr(stage_mod.Stage, "run_timing", lambda self, problem: t)
    monkeypatch.setattr(stage_mod.bench, "environment", lambda info=None: {
        "device": "NVIDIA H100 80GB HBM3", "date": "2026-11-24T06:42:08+00:00", "git": "abc1234",
        "driver_version": 13000, "sm_clock_max_khz": 1980000})
    out = tmp_path / "t.json"
    assert stage_mod.main(["sm90/06_permuted_b", "--device", "gpu", "--problem", "full", "--trace", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    tr = json.loads(out.read_text())
    assert timing.check_trace(tr) == [] and tr["otherData"]["git"] == "abc1234"
    assert tr["otherData"]["stage"] == "sm90/06_permuted_b"
    assert timing.load(str(out) + ".records.npz").meta["problem"] == "siglip2"


def test_cli_trace_sim_writes_the_event_log(tmp_path, monkeypatch):
    monkeypatch.setattr(sim_host, "run", lambda stage, problem, sim_seed=0, grid=None: {
        "ok": True, "problem": problem, "label": stage.label, "events": _sim_events()})
    out = tmp_path / "s.json"
    assert sim_host.main(["fp8/01_warp_specialized", "--device", "sim", "--trace", str(out)]) == 0
    tr = json.loads(out.read_text())
    assert tr["otherData"]["evidence"] == "simulated order, not time" and timing.check_trace(tr) == []



def test_stage_cli_hands_sim_and_predict_to_their_host_modules(monkeypatch):
    """pelib.stage imports neither the simulator nor the timing model: --device sim / predict run the same
    arguments through python -m pelib.sim.host / pelib.predict.host, and the exit status is theirs."""
    calls = []
    monkeypatch.setattr(stage_mod.subprocess, "call", lambda cmd: calls.append(cmd) or 3)
    assert stage_mod.main(["fp8/06_stages", "--device", "sim", "--sim-seed", "2"]) == 3
    assert stage_mod.main(["sm90/06_permuted_b", "--device", "predict"]) == 3
    assert [c[1:3] for c in calls] == [["-m", "pelib.sim.host"], ["-m", "pelib.predict.host"]]
    assert calls[0][3:] == ["fp8/06_stages", "--device", "sim", "--sim-seed", "2"]

# ---- the protocol picture (pelib.views.protocol): the same spans, labelled by their evidence ---------------

def test_protocol_picture_measured_and_simulated():
    """One function draws both: the measured picture and the simulated one, each titled by its evidence."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pelib.views import protocol
    t = protocol.committed_records()
    assert t is not None and t.meta["stage"] == "sm90/06_permuted_b"
    ax = protocol.protocol_picture(t)
    title = ax.get_title("left")
    assert "measured clock64 (NVIDIA H100 80GB HBM3, 2026-11-24" in title and "not time" not in title
    ticks = [x.get_text() for x in ax.get_yticklabels()]      # top to bottom
    assert ticks == ["producer (warp 0)", "consumer warpgroup 1 (warp 4)", "consumer warpgroup 2 (warp 8)",
                     "ring: tile in flight (1)", "ring: tile in flight (2)"]
    assert "cycles" in ax.get_xlabel()
    assert ax.protocol_spans.spans == timing.timing_spans(t, ctas=[0]).spans     # the trace's spans
    plt.close(ax.figure)
    ax = protocol.protocol_picture(_sim_events(), stage="synthetic")
    assert ax.get_title("left").endswith("simulated order, not time") and "measured" not in ax.get_title("left")
    assert [x.get_text() for x in ax.get_yticklabels()] == ["producer (warp 0)", "mma (warp 1)", "epilogue 0 (warp 2)",
                                                            "ring slot 0", "accumulator 0"]
    assert ax.get_xlabel() == "simulated order (seq), not time"
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="no events or records for CTA 5"):
        protocol.protocol_picture(_sim_events(), cta=5)
    rows = protocol.role_table(t).rows
    assert {r["lane"] for r in rows} >= {"producer (warp 0)", "consumer warpgroup 1 (warp 4)"}
    assert any(r["span"] == "tma_wait (summed)" for r in rows)


SIM_TRACE = paths.RESULTS / "2026-11-24-sim" / "trace-fp8-09.json"


def test_committed_simulator_trace_of_fp8_09():
    """results/2026-11-24-sim/trace-fp8-09.json (python -m pelib.stage fp8/09_persistent_megakernel
    --device sim --trace ...): Trace Event Format, labelled simulated order, with both CTAs of each pair,
    the MMAs issued and completed, and the TMA loads landing on the full barriers."""
    tr = json.loads(SIM_TRACE.read_text())
    _check_event_schema(tr)
    od = tr["otherData"]
    assert od["evidence"] == "simulated order, not time" and "not time" in od["ts_unit"]
    assert od["stage"] == "fp8/09_persistent_megakernel" and od["date"] == "2026-11-24" and od["git"]
    procs = {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"}
    assert {"CTA 0 (cluster 0, rank 0)", "CTA 1 (cluster 0, rank 1)"} <= procs
    names = [e["name"] for e in tr["traceEvents"] if e["ph"] != "M"]
    assert names.count("mma") == names.count("mma_done") > 0
    assert any(n.startswith("tma_load") for n in names) and any(n.startswith("complete_tx") for n in names)


def test_cli_sweep_with_trace_writes_one_file_per_position(tmp_path, monkeypatch, capsys):
    """--sweep NUM_STAGES=2,3 --trace t.json wrote both traces to t.json: the first was lost without a word."""
    monkeypatch.setattr(sim_host, "run", lambda stage, problem, sim_seed=0, grid=None: {
        "ok": True, "problem": problem, "label": stage.label, "events": _sim_events()})
    out = tmp_path / "t.json"
    assert sim_host.main(["fp8/06_stages", "--device", "sim", "--sweep", "NUM_STAGES=2,3", "--trace", str(out)]) == 0
    said = capsys.readouterr().out
    assert not out.exists()
    for n in (2, 3):
        f = tmp_path / f"t-NUM_STAGES={n}.json"
        assert f"wrote {f}" in said
        tr = json.loads(f.read_text())
        assert tr["otherData"]["stage"] == f"fp8/06_stages NUM_STAGES={n}" and timing.check_trace(tr) == []


def test_cli_sweep_that_repeats_a_position_is_refused_before_it_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(stage_mod.Stage, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit):
        stage_mod.main(["fp8/06_stages", "--device", "sim", "--sweep", "NUM_STAGES=2,2", "--trace",
                        str(tmp_path / "t.json")])
    assert "--trace would write" in capsys.readouterr().err and not list(tmp_path.iterdir())
