"""pelib.predict: the SASS between events, the happens-before graph, the replay's resources, the memory
model's locality, the extrapolation, the calibration files, the comparison, and the front doors
(Stage.run(device="predict"), python -m pelib.predict, the predicted trace and picture). Every
prediction here uses a committed calibration (provisional until the measured one lands): these tests
check the model's mechanics, never a time."""
from __future__ import annotations

import json

import pytest

from pelib import events, evidence, stages, timing
from pelib.isa import sass
from pelib.predict import calibration as cal_mod, compare, model
from pelib.predict.graph import Graph, GraphError
from pelib.predict.memory import MemoryState, a_schedule, locality
from pelib.predict.replay import Replay
from pelib.predict.sass_paths import SassPaths, lineinfo_build
from pelib.stage import Stage

S06 = "sm90/06_permuted_b"


@pytest.fixture(scope="module")
def cal():
    # the provisional file: these tests check mechanics, and the formula path its DRAM constants take
    return cal_mod.load(cal_mod.HERE / "provisional-h100.json")


@pytest.fixture(scope="module")
def setup06(cal):
    return model.prepare(Stage(S06), int(cal["sm_count"]))


@pytest.fixture(scope="module")
def p06(setup06, cal):
    return model.solve(setup06, cal, "timed", "h100")


# ---- the SASS between events -------------------------------------------------------------------------------

def test_lineinfo_build_has_the_device_builds_sass():
    s = Stage(S06)
    li = lineinfo_build(str(s.path), s.arch, {})
    assert [(o, op) for o, op, _ in sass.instructions(li.sass)] == \
        [(o, op) for o, op, _ in sass.instructions(s.build.sass)]


def test_segments_of_the_k_loop_and_the_epilogue(setup06):
    """A consumer warp walks 4 QGMMA and a wgmma.wait_group per K slice, and 16-byte stores after its tile."""
    g = setup06.graph
    c = min(setup06.ctas)
    progs = [g.nodes[i].seg.program for i in g.threads[(c, 8)] if g.nodes[i].seg is not None]
    kslices = [p for p in progs if sum(1 for it in p if it[0] == "mma") == 4]
    ex = Stage(S06).exports
    assert kslices and all(it[1:4] == (64, ex["mma_n"], 32) for p in kslices for it in p if it[0] == "mma")
    assert all(any(it[0] == "depbar" for it in p) for p in kslices)
    stores = [it for p in progs for it in p if it[0] == "stg"]
    assert stores and {it[1] for it in stores} == {16}
    # every (64 x 256 BF16) tile of the warpgroup stores 32 KiB: 2 rows x 8 groups of 16 B per thread
    tiles = len([p for p in progs if any(it[0] == "stg" for it in p)])
    assert len(stores) == 16 * tiles


def test_retry_loops_are_off_the_fast_path():
    """A bounded wait's inline retry loop holds a second TRYWAIT of the same line; no event anchors there.
    An unbounded wait's spin loop holds its line's only TRYWAIT: that one is the wait, and stays."""
    sp = SassPaths.of(Stage(S06))
    assert sp.retry, "the default (bounded) build has inline retry loops"
    assert not any(k in sp.retry for ids in sp.by_line.values() for k in ids)
    for d in ({}, {"PE_WAIT_KIND": 2}):
        sp = SassPaths.of(Stage("sm90/00_tma_wgmma", d))
        lines = {i.line for i in sp.instrs if i.op.startswith("SYNCS.PHASECHK") and not i.out_of_line}
        assert lines and all(sp.anchors("wait_begin", ln) for ln in lines)


def test_a_cluster_arrive_split_from_its_wait_is_anchored_at_the_arrive():
    """The simulator logs a cluster barrier (cluster_sync) at its arrive. An arrive on a line of its own, its wait
    lines later (barrier.cluster.arrive.relaxed ... wait), is anchored at that arrive (UCGABAR_ARV): the walk
    from the __syncthreads before it stops there, and the warp's next event after it is still reachable (the
    anchor used to be the next BAR.SYNC or wait anywhere, past the warp's later events). A cluster_sync() whose
    arrive and wait share a line keeps its wait as the anchor."""
    import pathlib

    from pelib.predict.sass_paths import lines_sass
    path = pathlib.Path(__file__).parent / "kernels" / "sass_split_arrive.cu"
    src = path.read_text().splitlines()
    line = {tag: next(i + 1 for i, t in enumerate(src) if t.rstrip().endswith(f"// {tag}"))
            for tag in ("SPLIT_LINE_SYNC", "SPLIT_LINE_ARRIVE", "SPLIT_LINE_WAIT", "SPLIT_LINE_SYNC_BOTH")}
    sp = SassPaths(lines_sass(lineinfo_build(str(path), "sm_100a", {})), str(path))
    arrive = sp.anchors("cluster_sync", line["SPLIT_LINE_ARRIVE"])
    assert arrive and all(sp.instrs[k].op.startswith("UCGABAR_ARV") for k in arrive)
    sync = sp.walk(-1, "bar_sync", line["SPLIT_LINE_SYNC"])
    seg = sp.walk(sync.end, "cluster_sync", line["SPLIT_LINE_ARRIVE"])
    assert seg.end in arrive and not seg.relaxed
    assert all(sp.instrs[k].line != line["SPLIT_LINE_WAIT"] for k in seg.path)    # not walked past its wait
    both = sp.anchors("cluster_sync", line["SPLIT_LINE_SYNC_BOTH"])
    assert both and all(sp.instrs[k].op.startswith(("UCGABAR_WAIT", "BAR.SYNC")) for k in both)
    last = sp.walk(seg.end, "cluster_sync", line["SPLIT_LINE_SYNC_BOTH"])
    assert last.end in both and not last.relaxed
    # the arrive is an event's instruction: a path between two other events may not pass it unlogged
    sp.use_log({("cluster_sync", line["SPLIT_LINE_ARRIVE"]), ("bar_sync", line["SPLIT_LINE_SYNC"])})
    assert set(arrive) <= sp.forbid


# ---- the graph ---------------------------------------------------------------------------------------------

def _ev(seq, kind, warp=0, **kw):
    """One event in the simulator's schema (pelib.sim.engine.event_schema()) on barrier "full" at offset 8."""
    return {"seq": seq, "cta": 0, "cluster": 0, "rank": 0, "warp": warp, "lane": 0 if warp >= 0 else -1,
            "kind": kind, "barrier": "full", "index": 0, "addr": 8, "bar_cta": 0, "line": 10 + seq % 3,
            "file": "x.cu", **kw}


def test_the_models_graph_is_the_events_graph(setup06):
    """One graph: every node stands for a checked event of pelib.events.graph (its fields are that event's), every
    kept event has one node, a landing's source is the graph's async edge, and the replay's phases hold exactly the
    graph's barrier edges (a wait's phase's signals are the signals its barrier edges come from)."""
    g = setup06.graph
    hb, ev = g.hb, g.events
    assert ev is hb.events and hb.exact
    for n in g.nodes:
        assert ev[n.ev] is n.e and n.kind == ev[n.ev]["kind"] and n.cta == ev[n.ev]["cta"]
        assert all(g.node_of[i] == n.idx for i in n.evs) and n.ev in n.evs
    kept = [i for i, e in enumerate(ev) if e["kind"] not in ("mma", "mma_done", "tma_load_done", "tmem_ld", "tmem_st",
                                                            "tmem_cp", "tma_store_done")]
    assert set(g.node_of) == set(kept)
    lands = [n for n in g.nodes if n.kind == "complete_tx"]
    assert lands and all((g.nodes[n.source].ev, "async") in hb.preds(n.ev) for n in lands)
    assert all(g.nodes[n.source].kind == "tma_load" for n in lands)
    waits = [n for n in g.nodes if n.kind == "wait_end" and n.phase]
    assert waits
    for n in waits:
        assert n.idx in g.phases[n.phase].waiters and n.phase == events.phase_key(n.e)
        edges = {g.node_of[a] for i in n.evs for a, why in hb.preds(i) if why == "barrier"}
        assert edges == set(g.phases[n.phase].signals)
    # 06's every mbarrier phase completes on one arrival (an arrive or an expect_tx, plus the bytes it expects)
    assert {sum(g.nodes[s].kind in ("arrive", "expect_tx") for s in ph.signals) for ph in g.phases.values()} == {1}


def test_the_predicted_events_are_the_simulators_with_cycles(p06):
    """Prediction.events: the checked events of the replayed CTAs, each unchanged but for its predicted `cycles`
    (and seq renumbered in that order, the simulator's kept in sim_seq)."""
    out = p06.events()
    by_seq = {e["seq"]: e for e in p06.graph.events}
    assert out and all(e["cta"] in p06.ctas for e in out)
    assert [e["cycles"] for e in out] == sorted(e["cycles"] for e in out)
    for e in out:
        orig = by_seq[e["sim_seq"]]
        assert {k: v for k, v in e.items() if k in events.KEYS and k != "seq"} == \
            {k: v for k, v in orig.items() if k != "seq"}


def test_a_landing_without_its_load_is_refused():
    ev = [_ev(0, "complete_tx", warp=-1, bytes=64, phase=0, op=7), _ev(1, "exit")]
    with pytest.raises(GraphError, match=r"complete_tx of 64 B .* has no earlier tma_load of its op \(7\)"):
        Graph.build(ev)


def test_a_log_without_phases_is_refused():
    """A log that names no mbarrier phase (a hand-written or older one) is refused, not guessed at."""
    ev = [_ev(0, "arrive"), _ev(1, "wait_end", warp=1, parity=0), _ev(2, "exit")]
    with pytest.raises(GraphError, match=r"arrive of CTA 0 warp 0 \(seq 0, line 10\) on barrier 0x8 names no phase"):
        Graph.build(ev)
    ok = Graph.build([_ev(0, "arrive", phase=0), _ev(1, "wait_end", warp=1, parity=0, phase=0), _ev(2, "exit")])
    ph = ok.phases[(0, 8, 0)]
    assert [ok.nodes[i].kind for i in ph.signals] == ["arrive"] and [ok.nodes[i].kind for i in ph.waiters] == ["wait_end"]


# ---- the replay's resources ------------------------------------------------------------------------------------

def test_the_tensor_pipe_is_never_double_booked(p06, cal):
    """One MMA at a time per SM: each starts no earlier than the previous one's service ends."""
    tail = cal["wgmma.tail_cycles"]
    for cta in p06.ctas:
        ops = sorted((o for (c, _), v in p06.replay.ops.items() if c == cta for o in v), key=lambda o: o[1])
        assert len(ops) > 24
        assert all(b[1] >= a[2] - tail - 1e-6 for a, b in zip(ops, ops[1:]))
        assert all(o[1] >= o[0] for o in ops)                 # never served before its last warp issued it


def test_the_period_respects_the_tensor_floor(p06, cal):
    ex = Stage(S06).exports
    floor = 768 // 32 * 2 * 64 * ex["mma_n"] * 32 / cal["tensor.flop_per_clk_sm"]
    assert p06.per_tile >= floor


def test_cheaper_costs_never_slow_the_replay(setup06, cal):
    base = model.solve(setup06, cal).cycles
    assert model.solve(setup06, cal.with_values(tensor__flop_per_clk_sm=2 * cal["tensor.flop_per_clk_sm"])).cycles <= base
    no_prefetch = model.prepare(Stage(S06, {"PREFETCH_TILES": 0}), int(cal["sm_count"]))
    assert model.solve(no_prefetch, cal).cycles >= base      # every demand load of A then waits for DRAM


def test_demand_misses_count_the_schedule_and_the_prefetch():
    """Three CTAs of a row group load the same row tile at each step: without a prefetch every load waits for
    DRAM (the first misses, the other two wait for its line in flight); a prefetch one tile ahead leaves only the
    first step's; a row tile that L2 evicted before its reuse misses again."""
    from pelib.predict.memory import demand_misses
    group = [[0, 1, 2, 3]] * 3
    assert demand_misses(group, 0, 1.0, 100.0) == 1.0
    assert demand_misses(group, 1, 1.0, 100.0) == pytest.approx(3 / 12)
    assert demand_misses(group, 2, 1.0, 100.0) == pytest.approx(3 / 12)
    reuse = [[0, 0, 1, 1]]                          # one CTA that loads each row tile twice, a step apart
    assert demand_misses(reuse, 0, 1.0, 100.0) == pytest.approx(2 / 4)
    assert demand_misses(reuse, 0, 1.0, 100.0, other_bytes_per_step=200.0) == 1.0    # evicted in between


def test_the_prefetch_depth_is_the_kernels_export(cal):
    """The model reads PREFETCH_TILES from the build's exports (one fact, one home): 06 at its default misses
    almost never, 06 without the prefetch always; a stage with no prefetch exports none."""
    sms = int(cal["sm_count"])
    assert Stage(S06).exports["prefetch_tiles"] == 2 and Stage(S06, {"PREFETCH_TILES": 0}).exports["prefetch_tiles"] == 0
    assert model.demand_share(model.prepare(Stage(S06), sms), cal) < 0.02
    assert model.demand_share(model.prepare(Stage(S06, {"PREFETCH_TILES": 0}), sms), cal) == 1.0
    assert "prefetch_tiles" not in Stage("sm90/03_staged_epilogue").exports


def test_phases_in_the_timing_schema(p06):
    assert isinstance(p06.timing, timing.Timing)
    for ph in ("tma_wait", "kloop", "epi_wait", "epi_phase1", "producer_wait", "tile"):
        assert p06.phases[ph]["avg"] > 0
    assert p06.timing.meta["order"] == timing.PREDICTED_ORDER


# ---- memory: locality from the full schedule -------------------------------------------------------------------

def test_locality_of_the_resident_b_and_residue_orders(cal):
    """06's 44 row groups read neighbouring tiles (one window); 07's residue order scatters them."""
    full = Stage(S06).problem("full")
    s06 = a_schedule(Stage(S06).exports, full.m, full.n, 132, 132)
    s07 = a_schedule(Stage("sm90/07_comb_resident").exports, full.m, full.n, 132, 132)
    assert locality(s06) < 0.1 < 0.9 < locality(s07)
    assert locality([[0], [7]]) == pytest.approx(1 - 2 / 8) and locality([[3], [4]]) == 0.0


def test_locality_costs_time_only_through_the_scatter_penalty(cal):
    """The model explains 07 against 06 through locality: with no scatter penalty the A loads cost the same."""
    m = MemoryState(0.7, 1.0, 1.4)
    assert m.tma_cycles(cal, 8192) > MemoryState(0.7, 0.0, 1.4).tma_cycles(cal, 8192)
    flat = cal.with_values(dram__scatter_penalty_ns=0.0)
    assert m.tma_cycles(flat, 8192) == MemoryState(0.7, 0.0, 1.4).tma_cycles(flat, 8192)


def test_schedule_matches_the_simulated_loads():
    """The restated schedule gives each simulated CTA as many A tiles as its simulated TMA loads of A say."""
    s = Stage("sm90/07_comb_resident")
    events, prob, cfg, _ = model.simulate(s)
    ex = s.exports
    sched = a_schedule(ex, prob.m, prob.n, cfg.grid[0], s.kind.SIM_SM_COUNT)
    a_box = ex["tmap_a_box_rows"] * ex["tmap_a_box_cols"]
    for c in range(cfg.ctas):
        loads = sum(1 for e in events if e["cta"] == c and e["kind"] == "tma_load"
                    and e.get("bytes", e["tag"]) == a_box)   # the event's bytes (the first schema: its tag)
        assert loads == len(sched[c]) * (prob.k // ex.block_k)


# ---- the prediction ----------------------------------------------------------------------------------------------

def test_prediction_fields_and_evidence(p06, cal):
    assert p06.ms == pytest.approx(p06.cycles / (p06.clock_ghz * 1e6))
    assert p06.sentence.startswith("bound by ")
    assert evidence.kinds_in(p06.evidence) == ["predicted"] and "provisional" in p06.evidence
    d = p06.to_json()
    assert d["provisional"] is True and d["tiles"] == 330 and d["cycles"] > 0
    assert 0.0 <= d["dram_utilisation"] <= 0.97


def test_clock_names_and_numbers(cal):
    assert model.clock_of(cal, "timed")[0] == cal["clock_ghz.timed"]
    assert model.clock_of(cal, 1.5)[0] == 1.5
    with pytest.raises(model.PredictError, match="regimes"):
        model.clock_of(cal, "boost")
    with pytest.raises(model.PredictError, match="GHz"):
        model.clock_of(cal, 1500)


def test_predicted_trace_and_picture(p06, tmp_path):
    tr = model.trace(p06, tmp_path / "t.json")
    assert timing.check_trace(tr) == [] and tr["otherData"]["evidence"].startswith(timing.PREDICTED_ORDER)
    sp = timing.protocol_spans(p06.events())
    assert sp.order == timing.PREDICTED_ORDER and sp.unit.startswith("predicted cycles")
    from pelib.views import protocol
    ax = protocol.protocol_picture(p06.timing, cta=min(p06.ctas))
    assert ax.get_xlabel().startswith("predicted cycles") and "predicted" in ax.get_title("left")


def test_nothing_is_fitted_on_a_stage(capsys):
    """--fit is refused with the way to measure instead; the gate's record reader names what is missing."""
    from pelib.predict import __main__ as cli, gate
    with pytest.raises(SystemExit):
        cli.main(["--fit", "--gpu", "h200"])
    assert "no constant of the timing model is fitted" in capsys.readouterr().err
    with pytest.raises(gate.GateError, match="no committed TIMING record"):
        gate.measured_06("a100")
    for chip in ("h100", "h200"):
        c = cal_mod.load(cal_mod.HERE / f"provisional-{chip}.json")
        assert not c.fitted and "l2.demand_miss" not in c.constants
    assert not cal_mod.load("h200").fitted

def test_stage_command_line_predicts(monkeypatch, capsys):
    from pelib.predict import host as predict_host
    from pelib import stage as stage_mod
    fake = type("P", (), {"ms": 1.0, "cycles": 1.4e6, "evidence": "predicted (x)", "gpu_device": "H"})()
    monkeypatch.setattr("pelib.predict.predict", lambda *a, **k: fake)
    monkeypatch.setattr("pelib.predict.report", lambda p: "REPORT")
    assert predict_host.main([S06, "--device", "predict", "--gpu", "h200"]) == 0
    assert "REPORT" in capsys.readouterr().out
    assert stage_mod.parser().parse_args([S06, "--device", "predict"]).gpu is None      # the stage's own GPU
    got = {}
    monkeypatch.setattr("pelib.predict.predict", lambda st, gpu, *a, **k: got.setdefault("gpu", gpu) and fake)
    assert predict_host.main([S06, "--device", "predict"]) == 0 and got["gpu"] == "h200"     # the Hopper measured here


def test_prediction_is_its_own_call():
    """Stage.run runs or compiles; a prediction is pelib.predict.predict's, with its own parameters."""
    from pelib.stage import StageError
    with pytest.raises(StageError, match="pelib.predict.predict"):
        Stage(S06).run("full", "predict")


@pytest.mark.parametrize("argv,says", [
    ([S06, "--device", "predict", "--grid", "132"], "reads no --grid"),
    ([S06, "--device", "predict", "--sim-seed", "lazy"], "--sim-seed"),
    ([S06, "--device", "compile", "--gpu", "h200"], "--gpu / --calibration"),
    ([S06, "-D", "NUM_STAGES=3", "--sweep", "NUM_STAGES=2,4"], "same define"),
    (["--table", "-D", "NUM_STAGES=2"], "reads no -D"),
    (["--table", "--device", "sim"], "reads no --device"),
])
def test_flags_a_mode_does_not_read_are_refused(argv, says, capsys):
    from pelib import stage as stage_mod
    with pytest.raises(SystemExit):
        stage_mod.main(argv)
    assert says in capsys.readouterr().err


def test_the_command_and_the_chapter_print_the_same_number(capsys):
    """python -m pelib.stage ... --device predict --gpu h200 prices with the newest measured H200 calibration at
    06's launch clock, as the chapter's predict_06 and the prediction documents do: the same ms, the file named."""
    from pelib.predict import host as predict_host
    from pelib.views import blind_rounds as pv
    assert cal_mod.load("h200").path == "results/2026-12-07-h200/predict-calibration-h200.json"
    assert predict_host.main([S06, "--device", "predict", "--gpu", "h200"]) == 0
    out = capsys.readouterr().out
    p = pv.predict_06("h200")
    assert f"= {p.ms:.4f} ms" in out and "results/2026-12-07-h200/predict-calibration-h200.json" in out
    assert "provisional" not in out.split("costs:")[1]


# ---- calibration files ------------------------------------------------------------------------------------------

def test_committed_calibrations_are_complete():
    for name in cal_mod.available():
        c = cal_mod.load(cal_mod.HERE / f"{name}.json")
        assert set(cal_mod.REQUIRED) <= set(c.constants)
        assert all(e["source"] for e in c.constants.values())


def test_bad_calibrations_are_refused(tmp_path, cal):
    doc = cal.to_json()
    del doc["constants"]["issue.cpi"]
    doc["constants"]["sm_count"]["kind"] = "guessed"
    bad = cal_mod.check(doc, "x.json")
    assert any("issue.cpi" in b for b in bad) and any("guessed" in b for b in bad)
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(cal_mod.CalibrationError, match="issue.cpi"):
        cal_mod.load(p)
    doc = cal.to_json()
    doc["provisional"] = False
    assert any("provisional" in b for b in cal_mod.check(doc))
    with pytest.raises(cal_mod.CalibrationError, match="no chip 'a100'"):
        cal_mod.load("a100")


# ---- the comparison ------------------------------------------------------------------------------------------------

def _pred(rows):
    return {"meta": {"gpu": "h100"}, "predictions": [
        {"stage": s, "defines": d, "cycles": c, "clock_ghz": 1.4, "clock": "timed"} for s, d, c in rows]}


def test_compare_errors_and_ranking():
    names = [p.stem for p in stages.family_stages("sm90")][:3]
    pred = _pred([(f"sm90/{names[0]}", {}, 1.4e6), (f"sm90/{names[1]}", {}, 1.5e6), (f"sm90/{names[2]}", {}, 1.2e6),
                  (f"sm90/{names[0]}", {"PE_WAIT_KIND": 2}, 1.3e6)])
    meas = {"env": {"device": "H100", "date": "d"}, "variants": [
        {"key": names[0][:2] if names[0][2] == "_" else names[0][:3], "stage": f"sm90/{names[0]}", "defines": {},
         "median_ms": 1.0, "ok": True},
        {"stage": f"sm90/{names[1]}", "defines": {}, "median_ms": 1.1, "ok": True, "clock_ghz": 1.5},
        {"stage": f"sm90/{names[2]}", "defines": {}, "median_ms": 0.9, "ok": True},
        {"stage": f"sm90/{names[0]}", "defines": {"PE_UNBOUNDED_WAIT": 1}, "median_ms": 0.95, "ok": True}]}
    doc = compare.compare(pred, meas)
    rows = {(r["stage"], r["defines"]): r for r in doc["rows"]}
    assert len(rows) == 4                                   # PE_UNBOUNDED_WAIT=1 is PE_WAIT_KIND=2
    r0 = rows[(f"sm90/{names[0]}", "")]
    assert r0["measured_cycles"] == 1_400_000 and r0["error_cycles"] == 0.0
    assert rows[(f"sm90/{names[1]}", "")]["clock"].startswith("the launch's own clock")
    assert doc["summary"]["ranking_exact"] is True and doc["summary"]["kendall_tau"] == 1.0
    assert doc["summary"]["worst"] == max(abs(r["error_cycles"]) for r in doc["rows"])
    assert compare.table_rows(doc)[0]["error"].endswith("%")
    with pytest.raises(compare.CompareError, match="no predicted stage"):
        compare.compare(_pred([("sm90/nope", {}, 1.0)]), meas)
    with pytest.raises(compare.CompareError, match="predictions"):
        compare.compare({}, meas)


def test_cli_compare_and_errors(tmp_path, capsys):
    from pelib.predict.__main__ import main
    names = [p.stem for p in stages.family_stages("sm90")][:1]
    (tmp_path / "p.json").write_text(json.dumps(_pred([(f"sm90/{names[0]}", {}, 1.4e6)])))
    (tmp_path / "m.json").write_text(json.dumps({"variants": [
        {"stage": f"sm90/{names[0]}", "defines": {}, "median_ms": 1.0, "ok": True}]}))
    assert main(["--compare", str(tmp_path / "p.json"), "--measured", str(tmp_path / "m.json"),
                 "--out", str(tmp_path / "c.json")]) == 0
    assert json.loads((tmp_path / "c.json").read_text())["summary"]["stages"] == 1
    assert main(["--calibration", str(tmp_path / "missing.json"), S06]) == 2
    assert "no calibration file" in capsys.readouterr().err


def test_all_sm90_predicts_exactly_what_the_blind_run_measures():
    from pelib.predict import blind
    from pelib.predict.__main__ import sm90_builds
    assert [(s.key, dict(s.defines)) for s in sm90_builds()] == blind.entries()


def test_compare_reads_a_blind_run(tmp_path, capsys):
    """The comparison step on a file shaped as pelib.predict.blind writes it: cycles at each launch's own clock, and
    sm90/06's phases over every tile in its production build's entry."""
    from pelib.predict.__main__ import main
    names = [p.stem for p in stages.family_stages("sm90")][:2]
    pred = _pred([(S06, {}, 1.5e6), (S06, {"PE_WAIT_KIND": 2}, 1.45e6), (f"sm90/{names[0]}", {}, 3.0e6),
                  (f"sm90/{names[1]}", {}, 2.0e6)])
    pred["predictions"][1]["timing_phases"] = {"kloop": 4000.0, "epi_wait": 2500.0}
    meas = {"schema": "pelib.blind/1", "env": {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-28"}, "entries": [
        {"stage": S06, "defines": {}, "label": "06", "ok": True, "median_ms": 1.0, "cycles": 1.6e6,
         "clock_source": "timing_run"},
        {"stage": S06, "defines": {"PE_WAIT_KIND": 2}, "label": "06 w2", "ok": True, "median_ms": 0.9, "cycles": 1.44e6,
         "clock_source": "timing_run",
         "phases": {"every_tile": {"phases": {"kloop": {"avg": 4400.0}, "epi_wait": {"avg": 2500.0}}, "cta": {}}}},
        {"stage": f"sm90/{names[0]}", "defines": {}, "ok": True, "median_ms": 2.0, "cycles": 3.2e6},
        {"stage": f"sm90/{names[1]}", "defines": {}, "ok": False, "median_ms": None}]}
    (tmp_path / "p.json").write_text(json.dumps(pred))
    (tmp_path / "blind-nvidia-h100.json").write_text(json.dumps(meas))
    out = tmp_path / "prediction-vs-measured.json"
    assert main(["--compare", str(tmp_path / "p.json"), "--measured", str(tmp_path / "blind-nvidia-h100.json"),
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {(r["stage"], r["defines"]): r for r in doc["rows"]}
    assert len(rows) == 3                                  # the failed entry is left out
    r = rows[(S06, "")]
    assert r["measured_cycles"] == 1_600_000 and r["error_cycles"] == pytest.approx(-0.0625)
    assert r["clock_ghz"] == pytest.approx(1.6) and "launch's own clock" in r["clock"]
    assert doc["phases_06"]["kloop"]["error"] == pytest.approx(4000 / 4400 - 1, abs=1e-4)
    assert doc["summary"]["stages"] == 3 and doc["measurement"]["device"] == "NVIDIA H100 80GB HBM3"


# ---- a measured calibration wired in --------------------------------------------------------------------------------

def _measured_doc():
    def c(v, unit="cycles"):
        return {"value": v, "unit": unit, "what": "x", "probe": "p", "launch": None, "clock_ghz": 1.5,
                "regime": "short burst", "n": 1}

    def pts(lat):
        return [{"gbps": g, "lat_p50": lat + g / 10, "clock_ghz": 1.5} for g in (100.0, 1000.0, 2500.0)]
    return {"schema": "pelib.calibration/1", "evidence": "measured (NVIDIA H100 80GB HBM3, 2026-11-28)",
            "env": {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-28", "git": "abc", "sm_count": 132,
                    "l2_bytes": 52428800},
            "constants": {"clock.burst_ghz": c(1.5, "GHz"), "clock.sustained_ghz": c(1.3, "GHz"),
                          "wgmma.m64n256k32.sm_cycles_per_wgmma": c(130.0), "wgmma.m64n256k32.latency_cycles": c(200.0),
                          "epilogue.cpi.alone": c(2.5, "cycles/instruction"), "mbarrier.arrive_cycles": c(10.0),
                          "mbarrier.try_wait_pass_cycles": c(30.0), "mbarrier.local_roundtrip_cycles": c(200.0),
                          "bar_sync.256_cycles": c(20.0), "tma.load.latency_cycles.l2": c(600.0),
                          "tma.load.latency_cycles.unloaded": c(1400.0), "tma.load.latency_cycles.scattered": c(2000.0),
                          "dram.copy_gbps": c(3000.0, "GB/s"), "epilogue.tile_cycles.alone": c(1500.0),
                          "epilogue.tile_cycles.no_store": c(900.0), "l2.latency_cycles.unloaded": c(270.0),
                          "epilogue.instructions_per_tile": c(455.0, "instructions"),
                          "tma.store.issue_cycles": c(20.0)},
            "curves": {"tma_load.sequential": {"x": "gbps", "y": "lat_p50", "points": pts(1400.0)},
                       "tma_load.scattered": {"x": "gbps", "y": "lat_p50", "points": pts(2000.0)},
                       "tma_load.l2": {"x": "gbps", "y": "lat_p50", "points": pts(600.0)}}}


def test_a_measured_calibration_replaces_the_provisional_constants(tmp_path, cal):
    from pelib.predict import measured
    doc = _measured_doc()
    m = measured.from_measured(doc, "calibration-h100.json", cal)
    assert m["tensor.flop_per_clk_sm"] == pytest.approx(2 * 64 * 256 * 32 / 130)
    assert m["wgmma.tail_cycles"] == 70 and m["mbarrier.wake_cycles"] == 90
    assert not set(cal_mod.FORMULA) & set(m.constants)        # the measured curves replace the DRAM formula
    assert cal_mod.check(m.to_json()) == []
    assert m.entry("issue.cpi")["kind"] == "measured" and "epilogue.tile_cycles.no_store" in m.entry("issue.cpi")["source"]
    assert "l2.demand_miss" not in m.constants          # no cost any more: counted from the schedule
    assert set(m.curves) == {"tma_load.sequential", "tma_load.scattered", "tma_load.l2"}
    assert m.provisional == any(c["kind"] == "provisional" for c in m.constants.values())
    assert m["store.drain_cycles"] == 0 and m["issue.cpi"] == pytest.approx(900 / 455)
    assert "launch.overhead_us" in measured.missing(doc)
    # values no rate allows are rejected, said why, and left at their default or provisional value (not fitted)
    bad = _measured_doc()
    bad["constants"]["wgmma.m64n256k32.cycles_beside_epilogue"] = {**bad["constants"]["bar_sync.256_cycles"], "value": 8.6}
    bad["constants"]["launch.overhead_us"] = {**bad["constants"]["bar_sync.256_cycles"], "value": 538.0, "launch": 7}
    bad["launches"] = [{"index": 7, "probe": "launch", "launches": 1}]
    why = measured.rejected(bad)
    assert set(why) == {"wgmma.m64n256k32.cycles_beside_epilogue", "launch.overhead_us"}
    mb = measured.from_measured(bad, "calibration-h100.json", cal)
    assert "tensor.beside_epilogue" not in mb.constants and mb.entry("launch.overhead_us")["kind"] != "measured"
    assert mb.notes[0]["rejected"] == why and cal_mod.from_json(mb.to_json()).notes == mb.notes
    bad["constants"]["wgmma.m64n256k32.cycles_beside_epilogue"]["value"] = 143.0
    bad["launches"][0]["launches"] = 20
    good = measured.from_measured(bad, "calibration-h100.json", cal)
    assert good["tensor.beside_epilogue"] == pytest.approx(1.1) and good["launch.overhead_us"] == 538.0
    # the curves decide the TMA latency: scattered costs more than the window at the same load
    win, scat = MemoryState(0.5, 0.0, 1.5), MemoryState(0.5, 1.0, 1.5)
    assert scat.tma_cycles(m, 8192) > win.tma_cycles(m, 8192) > m.curve("tma_load.l2")[0]["cycles"]
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(doc))
    assert measured.resolve(str(p), "h100").curves
    with pytest.raises(cal_mod.CalibrationError, match="not a measured calibration"):
        measured.from_measured({"schema": "other"}, "x.json", cal)


def test_b200_calibration_is_public_fitted_or_transferred(cal):
    from pelib.predict import blackwell
    b = blackwell.b200_calibration(cal)
    assert b["sm_count"] == 148 and b["tensor.flop_per_clk_sm"] == 16384
    kinds = {n: c["kind"] for n, c in b.constants.items()}
    assert [n for n, k in kinds.items() if k == "fitted"] == ["clock_ghz.timed", "clock_ghz.sustained"]
    assert b["clock_ghz.timed"] == pytest.approx(6063 * 147 / 0.579e6)      # the one recorded point
    assert set(kinds.values()) <= {"public", "fitted", "transferred", "provisional"}
    assert cal_mod.check(b.to_json()) == [] and b.provisional


def test_views_tables_say_predicted_and_measured():
    from pelib.views import predict as vp
    names = [p.stem for p in stages.family_stages("sm90")][:2]
    pred = _pred([(f"sm90/{n}", {}, 1.4e6 + i) for i, n in enumerate(names)])
    pred["meta"].update(device="NVIDIA H100 80GB HBM3", calibration_date="2026-11-28", provisional=False)
    meas = {"env": {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-29"},
            "variants": [{"stage": f"sm90/{n}", "defines": {}, "median_ms": 1.0, "ok": True} for n in names]}
    doc = compare.compare(pred, meas)
    doc["predictions"] = pred["meta"]
    t = vp.comparison_table(doc)
    assert evidence.kinds_in(t.caption) == ["predicted", "measured"] and "mean absolute error" in t.notes[0]
    for p in pred["predictions"]:
        p.update(ms=1.0, critical_path="bound by x")
    assert evidence.kinds_in(vp.predictions_table(pred).caption) == ["predicted"]
    rows = [{"stage": "fp8/09_x", "predicted_ms": 0.5, "recorded_ms": 0.54, "error": -0.07, "sign_right": None}]
    assert "recorded" in vp.history_table(rows).caption


def test_price_an_edit_in_one_call():
    from pelib.views import predict as vp
    out = vp.price(Stage(S06), "h100", seeds=(0,))
    assert out["simulated"][0]["ok"] and out["compiled"]["registers"] > 0
    assert out["ms"] > 0 and evidence.kinds_in(out["evidence"]) == ["predicted"]


def test_all_sm90_documents_name_their_sources(monkeypatch, cal):
    """--all-sm90's plumbing with the simulation and the replay stubbed: one document per chip, each entry
    with its defines, 06's TIMING phases on its production build, the calibration, git revision, model version
    and the files the model read; one simulation per build for both chips."""
    from pelib.predict import __main__ as cli
    prepared = []

    class P:
        def __init__(self, st, cal):
            self.cycles, self.phases, self.seconds, self.st, self.cal = 1.5e6, {"kloop": {"avg": 4000.0}}, 0.0, st, cal

        def to_json(self):
            return {"stage": self.st.key, "cycles": self.cycles, "ms": self.cycles / 1.5e6, "seconds": 0.0,
                    "critical_path": "x", "gpu": self.cal.chip}
    monkeypatch.setattr(cli, "prepare", lambda st, sms, tiles, timing_build: prepared.append((st.key, timing_build)) or st)
    monkeypatch.setattr(cli, "solve", lambda su, c, clk, g: P(su, c))
    builds = [Stage(S06), Stage(S06, {"PE_WAIT_KIND": 2})]
    docs = cli.predict_all(builds, ["h100", "h200"], [cal, cal_mod.load("h200")], log=lambda s: None)
    assert len(prepared) == 3 and prepared[-1] == (S06, True)         # one simulation per build, both chips
    assert [d["meta"]["gpu"] for d in docs] == ["h100", "h200"]
    m = docs[0]["meta"]
    assert m["calibration"] and m["git"] and len(m["model_version"]) == 16 and m["files_read"][0] == m["calibration"]
    assert m["clock"] == "timed (1.436 GHz)" or m["clock_ghz"] == cal["clock_ghz.timed"]
    e = docs[1]["predictions"]
    assert [x["defines"] for x in e] == [{}, {"PE_WAIT_KIND": 2}] and e[1]["timing_phases"] == {"kloop": 4000.0}
    assert "timing_phases" not in e[0]


def test_out_that_is_a_folder_is_refused(tmp_path, capsys):
    from pelib.predict.__main__ import main
    with pytest.raises(SystemExit) as e:
        main(["--compare", "p.json", "--measured", "m.json", "--out", str(tmp_path)])
    assert e.value.code == 2 and "is a folder: give the JSON file's path" in capsys.readouterr().err


def test_define_effects_and_inversions_are_read_against_the_stage_file():
    """A variant's effect is its cycles over its stage file's at the defaults, measured and predicted; the
    targets count the effects of 3 % or more whose sign and half size the model gets; an inversion is a pair
    more than 3 % apart measured that the model orders the other way."""
    from pelib.predict import compare as c
    rows = [{"stage": "s/a", "defines": "", "predicted_cycles": 100, "measured_cycles": 100},
            {"stage": "s/a", "defines": "X=1", "predicted_cycles": 95, "measured_cycles": 110},    # sign wrong
            {"stage": "s/a", "defines": "Y=1", "predicted_cycles": 108, "measured_cycles": 110},   # right, in half
            {"stage": "s/a", "defines": "Z=1", "predicted_cycles": 101, "measured_cycles": 101},   # noise-level
            {"stage": "s/a", "defines": "W=1", "predicted_cycles": 100, "measured_cycles": 94},    # model blind to it
            {"stage": "s/b", "defines": "", "predicted_cycles": 90, "measured_cycles": 120}]
    e = {x["defines"]: x for x in c.define_effects(rows)}
    assert e["X=1"]["sign_right"] is False and e["Y=1"]["sign_right"] and e["Y=1"]["within_half"]
    assert e["Z=1"]["sign_right"] is None
    assert e["W=1"]["sign_right"] is False       # a define the model does not move has no sign, right or wrong
    s = c.effect_summary(list(e.values()))
    assert s == {"define_effects": 4, "effects_over_3pct": 3, "effects_sign_right": 1, "effects_within_half": 1}
    plain = [r for r in rows if not r["defines"]]
    assert c.inversions(plain, 0.03) == 1 and c.inversions(plain, 0.5) == 0


def test_the_committed_blind_predictions_are_the_models_current_answer():
    """The model reproduces a committed prediction document to the precision it printed: sm90/06, 07a, and 11a
    with a ring of four, on the H200 of the newest blind round (python -m pelib.predict --all-sm90
    --variants round6), with the file's own calibration and clock. A change meant to move no number (a
    refactor of the replay, the graph, the roles or the costs' table) must leave this passing."""
    from pelib.paths import ROOT
    doc = json.loads((ROOT / "results/2026-12-03-h200/round6/predictions-sm90-blind6.json").read_text())
    cal = str(ROOT / doc["meta"]["calibration"])
    for key, d in ((S06, {}), ("sm90/07a_comb_windows", {}), ("sm90/11a_two_groups_queued", {"NUM_STAGES": 4})):
        want = next(p for p in doc["predictions"] if p["stage"] == key and (p.get("defines") or {}) == d)
        got = model.predict(Stage(key, d), "h200", cal).to_json()
        for f in ("cycles", "ms", "cycles_per_tile", "tiles", "dram_utilisation", "tma_latency_cycles",
                  "critical_shares", "phases"):
            assert got[f] == want[f], f"{key} {f}: {got[f]} now, {want[f]} committed"


def test_every_kernel_that_prefetches_exports_how_far():
    """The timing model counts L2 hits from the prefetch depth a kernel exports (memory.demand_misses): a kernel
    file that issues an L2 prefetch of A (tma_prefetch_2d_l2) and exports no prefetch_tiles would be priced as
    if it prefetched nothing (the SOL probe of 06 was, at 100 % misses)."""
    from pelib.paths import KERNELS
    quiet = [str(p.relative_to(KERNELS)) for p in sorted(KERNELS.rglob("*.cu")) if "sim" not in p.parts
             and "tma_prefetch_2d_l2(" in p.read_text() and "PELIB_EXPORT(prefetch_tiles" not in p.read_text()]
    assert not quiet, f"kernels that prefetch A into L2 without exporting prefetch_tiles: {quiet}"


def test_traffic_is_held_to_the_counters():
    """compare.traffic: a stage file's predicted DRAM and L2 bytes against Nsight Compute's per-tile counters of
    the same build (the run labels a variant by its number and defines), scaled by the problem's tiles; a build
    without counters is left out."""
    from pelib.predict import compare
    tiles = (928256 // 64) * (768 // 256)
    ncu = {"problem": "siglip2", "tile": [64, 256], "env": {"device": "NVIDIA H200", "date": "d"},
           "ncu_per_tile": [{"entry": "06", "dram_read_B_per_tile": 1e9 / tiles, "dram_write_B_per_tile": 2e9 / tiles,
                             "l2_B_per_tile": 10e9 / tiles}]}
    pred = {"meta": {}, "predictions": [
        {"stage": "sm90/06_permuted_b", "traffic": {"dram_read": 1.05e9, "dram_write": 2.5e9, "l2": 5e9}},
        {"stage": "sm90/06_permuted_b", "defines": {"PE_WAIT_KIND": 2}, "traffic": {"dram_read": 1, "dram_write": 1, "l2": 1}},
        {"stage": "sm90/07_comb_resident", "traffic": {"dram_read": 1, "dram_write": 1, "l2": 1}}]}
    doc = compare.traffic(pred, ncu)
    assert [r["stage"] for r in doc["rows"]] == ["sm90/06_permuted_b"] and doc["rows"][0]["defines"] == ""
    ncu2 = {**ncu, "ncu_per_tile": ncu["ncu_per_tile"] + [{**ncu["ncu_per_tile"][0], "entry": "06 PE_WAIT_KIND=2"}]}
    two = compare.traffic(pred, ncu2)["rows"]
    assert [(r["stage"], r["defines"]) for r in two] == [("sm90/06_permuted_b", ""), ("sm90/06_permuted_b", "PE_WAIT_KIND=2")]
    r = doc["rows"][0]
    assert r["dram_read_error"] == pytest.approx(0.05) and r["dram_write_error"] == pytest.approx(0.25)
    assert r["l2_error"] == pytest.approx(-0.5)
    assert doc["summary"] == {"stages": 1, "dram_read_within": 1, "dram_write_within": 0, "l2_within": 0}
    assert r["l2_counter"] == compare.L2_ALL
    # where the run counted the SMs' own requests at L2, the model's SM <-> L2 bytes are held to those
    ncu["ncu_per_tile"][0]["l2_sm_B_per_tile"] = 5.2e9 / tiles
    r = compare.traffic(pred, ncu)["rows"][0]
    assert r["l2_counter"] == compare.L2_FROM_SMS and r["l2_error"] == pytest.approx(5 / 5.2 - 1, abs=1e-4)


def test_the_lsu_calibrations_are_what_build_makes_from_two_probe_files():
    """The 2026-12-07 calibrations: the chip's own probes file, then the lsu probe's file (an H100 run) adding the
    six load/store-path costs, measured on the H100 and transferred (and said so) to the H200, whose SM is the
    same GH100 SM."""
    from pelib.paths import ROOT
    from pelib.predict import measured
    lsu = "results/2026-12-07-h100/lsu/calibration-nvidia-h100-80gb-hbm3.json"
    h200 = measured.build(f"{ROOT / 'results/2026-12-02-h200/probes/calibration-nvidia-h200.json'},{ROOT / lsu}", "h200")
    assert h200.to_json() == cal_mod.load(ROOT / "results/2026-12-07-h200/predict-calibration-h200.json").to_json()
    h100 = measured.build(f"{ROOT / 'results/2026-11-27-h100/calibration-nvidia-h100-80gb-hbm3.json'},{ROOT / lsu}",
                          "h100", ROOT / "results/2026-12-07-h200/predict-calibration-h200.json")
    assert h100.to_json() == cal_mod.load(ROOT / "results/2026-12-07-h100/predict-calibration-h100.json").to_json()
    for cal, kind in ((h200, "transferred"), (h100, "measured")):
        for op in ("store", "load"):
            for w in (4, 8, 16):
                e = cal.entry(f"lsu.{op}_cycles.{w}B")
                assert e["kind"] == kind and lsu in e["source"] and 1.0 < e["value"] < 100.0
    # one file is one chip's: added constants never replace what the first file measured
    assert h200.entry("store.bytes_per_clk_sm")["kind"] == "measured" and "2026-12-02-h200" in \
        h200.entry("store.bytes_per_clk_sm")["source"]


def test_the_committed_calibrations_are_what_build_makes(tmp_path):
    """--build-calibration re-makes the committed measured calibrations from their probe files: the H200's from
    its own run, the H100's with the launch cost its probes did not take transferred from the H200 (and said so)."""
    from pelib.paths import ROOT
    from pelib.predict import measured
    h200 = measured.build(ROOT / "results/2026-12-02-h200/probes/calibration-nvidia-h200.json", "h200")
    assert h200.to_json() == cal_mod.load(ROOT / "results/2026-12-02-h200/predict-calibration-h200.json").to_json()
    h100 = measured.build(ROOT / "results/2026-11-27-h100/calibration-nvidia-h100-80gb-hbm3.json", "h100",
                          ROOT / "results/2026-12-02-h200/predict-calibration-h200.json")
    assert h100.to_json() == cal_mod.load(ROOT / "results/2026-11-27-h100/predict-calibration-h100.json").to_json()
    assert h100.entry("launch.overhead_us")["kind"] == "transferred" and not h100.provisional
    assert "transferred from NVIDIA H200" in h100.protocol and "still provisional" not in h100.protocol
    with pytest.raises(cal_mod.CalibrationError, match="no such file"):
        measured.build(tmp_path / "absent.json", "h200")


def test_the_chapters_traffic_lines_read_the_committed_comparison():
    """views.predict.traffic_line / traffic_table: every number from the round's traffic document, the L2
    counter named in the caption."""
    from pelib.views import blind_rounds as pv
    doc = pv.traffic4()
    s = doc["summary"]
    line = pv.traffic_line(doc)
    assert f"DRAM reads {s['dram_read_within']}," in line and f"DRAM writes {s['dram_write_within']}," in line
    assert f"L2 requests {s['l2_within']} (target: all {s['stages']})" in line
    t = pv.traffic_table(doc)
    assert len(t.rows) == s["stages"] and "srcunit_tex" in t.caption
    fake = {**doc, "summary": {**s, "dram_write_within": 3}}
    assert "DRAM writes 3," in pv.traffic_line(fake)
    assert "27 stage files" in line
    six = pv.traffic6()
    assert f"{six['summary']['stages']} single-define variants" in pv.traffic_line(six)
    assert any("[BLOCK_N=256]" in r["stage"] for r in pv.traffic_table(six).rows)


def test_every_builds_phases_are_compared_with_its_timing_records():
    """pelib.predict.blind records every entry's per-role phases (phases_first); the comparison puts each build's
    predicted phases beside them and gives each phase's mean absolute error over the builds."""
    names = [p.stem for p in stages.family_stages("sm90")][:2]
    pred = _pred([(f"sm90/{names[0]}", {}, 2.0e6), (f"sm90/{names[1]}", {}, 2.0e6)])
    pred["predictions"][0]["phases"] = {"kloop": {"avg": 3000.0}, "tma_wait": {"avg": 100.0}}
    pred["predictions"][1]["phases"] = {"kloop": {"avg": 5000.0}}
    meas = {"env": {"device": "NVIDIA H200", "date": "2026-12-03"}, "entries": [
        {"stage": f"sm90/{names[0]}", "defines": {}, "ok": True, "median_ms": 1.0, "cycles": 2.0e6,
         "phases_first": {"tiles": 16, "phases": {"kloop": {"avg": 4000.0}, "tma_wait": {"avg": 400.0}}}},
        {"stage": f"sm90/{names[1]}", "defines": {}, "ok": True, "median_ms": 1.0, "cycles": 2.0e6,
         "phases_first": {"tiles": 1, "phases": {"kloop": {"avg": 4000.0}}}}]}
    doc = compare.compare(pred, meas)
    b = {x["stage"]: x["phases"] for x in doc["phases"]["builds"]}
    assert b[f"sm90/{names[0]}"]["kloop"] == {"predicted": 3000.0, "measured": 4000.0, "error": -0.25}
    assert b[f"sm90/{names[0]}"]["tma_wait"]["error"] == -0.75
    assert doc["phases"]["summary"]["kloop"] == {"builds": 2, "mae": 0.25}
    assert doc["phases"]["summary"]["tma_wait"]["builds"] == 1


def test_the_blind_run_keeps_phases_for_every_entry():
    """A persistent stage's TIMING build keeps its first 16 tiles' records (its phases), a non-persistent one a
    tile slot per CTA (its one tile), 06 its own."""
    from pelib.predict import blind
    assert blind.timing_stage("sm90/00_tma_wgmma", {}).defines["PE_TIMING_TILES"] == 1
    assert blind.timing_stage("sm90/10_unrolled_kloop", {}).defines["PE_TIMING_TILES"] == 16
    assert "PE_TIMING_TILES" not in blind.timing_stage(S06, {}).defines


def test_the_chapters_rounds_and_phases_read_the_committed_comparisons():
    """views.predict: the rounds table has one row per committed blind round, each number read from that round's
    comparison (a changed document changes the row); the phase table's last row is the comparison's per-phase
    MAE; a not-blind re-make replaces only the rows it marks, and says so."""
    from pelib.views import blind_rounds as pv
    rs = pv.rounds()
    assert [n for n, _, _ in rs] == [str(i) for i in range(1, len(rs) + 1)] and len(rs) >= 6
    t = pv.rounds_table()
    assert len(t.rows) == len(rs)
    n, doc, _ = rs[-1]
    assert t.rows[-1]["MAE"] == f"{doc['summary']['mae']:.1%}"
    worst, _ = pv.worst_error(doc)
    assert t.rows[-1]["worst"].startswith(f"{worst:+.1%}")
    ph = pv.phase_errors_table(doc)
    last = ph.rows[-1]
    assert last["stage"] == "MAE, all builds"
    assert last["K loop"] == f"{doc['phases']['summary']['kloop']['mae']:.0%}"
    b = doc["phases"]["builds"][0]
    fake = {"predictions": {"label": "made after the measurement: not blind"},
            "phases": {"builds": [{**b, "phases": {"kloop": {"predicted": 1.0, "measured": 2.0, "error": -0.5}},
                                   "not_blind": True}]}}
    fixed = pv.phase_errors_table(doc, fixed=fake)
    row = next(r for r in fixed.rows if r["stage"].endswith("(not blind)"))
    assert row["K loop"] == "-50%" and "not blind" in fixed.caption
    fig = pv.round_scatter()
    assert "predicted blind against measured" in fig.axes[0].get_title()
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_a_remade_comparison_marks_what_changed_and_checks_the_cycles():
    from pelib.predict import compare as c
    blind = {"rows": [{"stage": "s/a", "defines": "", "predicted_cycles": 10}],
             "phases": {"builds": [{"stage": "s/a", "defines": "", "phases": {"kloop": {"error": -0.9}}},
                                   {"stage": "s/b", "defines": "", "phases": {"kloop": {"error": -0.1}}}]}}
    again = {"predictions": {}, "rows": [{"stage": "s/a", "defines": "", "predicted_cycles": 10}],
             "phases": {"builds": [{"stage": "s/a", "defines": "", "phases": {"kloop": {"error": -0.2}}},
                                   {"stage": "s/b", "defines": "", "phases": {"kloop": {"error": -0.1}}}]}}
    out = c.mark_remade(again, blind, "not blind")
    marks = {b["stage"]: b.get("not_blind", False) for b in out["phases"]["builds"]}
    assert marks == {"s/a": True, "s/b": False} and out["cycles_unchanged"] and out["predictions"]["label"] == "not blind"
    again["rows"][0]["predicted_cycles"] = 11
    assert c.mark_remade(again, blind, "x")["cycles_unchanged"] is False


def test_a_one_tile_ctas_phases_span_its_tile_not_a_k_step():
    """A non-persistent grid's CTA runs one tile and its consumers' outermost loop is the K loop: the predicted
    phases take the warp's whole run as its tile (as its TIMING build records it), so the K loop is most of the
    tile, not the zero a cut at each K step's back edge gave (round 6's blind predictions of 00-01)."""
    from pelib.paths import ROOT
    cal = str(ROOT / "results/2026-12-02-h200/predict-calibration-h200.json")
    p = model.predict(Stage("sm90/00a_smem_ring"), "h200", cal)
    assert p.phases["kloop"]["avg"] > 0.5 * p.phases["tile"]["avg"] > 0


def test_a_single_thread_issue_loop_is_no_k_loop_and_the_mma_k_comes_from_its_kind():
    """nvfp4/07 issues each tcgen05.cp, tcgen05.mma and TMA load from one thread picked by its index: the compiler
    wraps every such instruction in a loop of its own (ELECT, R2UR.BROADCAST, BRA.U.ANY). Those are no K loops: the
    K loops are the producer's (4 TMA loads a pass) and the MMA issuer's (4 MMAs a pass), and one MMA of
    kind::mxf4nvf4 is K = 64 (PTX ISA, tcgen05.mma shapes), not the 256 of a whole K tile, which priced every
    NVFP4 MMA at four times its tensor-pipe time."""
    from pelib.predict.sass_paths import issue_loops
    st = Stage("nvfp4/07_split_k_roles")
    s = SassPaths.of(st)
    backs = [i for i in s.instrs if i.is_branch and i.op.startswith("BRA.U.ANY") and i.target is not None
             and i.target < i.index]
    wrapped = issue_loops(s.instrs)
    assert len(wrapped) >= 12 and len(wrapped) == len(backs)   # every BRA.U.ANY loop here is one of them
    per_pass = sorted((sum(i.op.startswith("UTMALDG") for i in s.instrs[lo:hi + 1]),
                       sum(i.op.startswith("UTCOMMA") for i in s.instrs[lo:hi + 1])) for lo, hi in s.k_loops)
    assert per_pass == [(0, 4), (4, 0)]
    assert model.umma_shape(s, st.exports) == (128, 64, 64, True)
    fp8 = Stage("fp8/09_persistent_megakernel")
    assert model.umma_shape(SassPaths.of(fp8), fp8.exports)[2] == 32
    # a K loop unrolled twice holds 8 MMAs a pass: its K per MMA is still the kind's
    f28 = Stage("fp8/variants/09_f28_kloop_unroll")
    assert model.umma_shape(SassPaths.of(f28), f28.exports)[2] == 32


def test_a_one_tile_ctas_critical_path_is_its_k_loop_not_its_epilogue():
    """A CTA of one tile replays a cut K loop, then its epilogue once: the critical path is read over the K loop's
    steady state (from the last MMA's issue back), so the sentence names what bounds the K loop. 07's single MMA
    thread issues more than its MMAs take (SASS issue); 09's short issuer waits for its K tiles' bytes."""
    p7 = model.predict(Stage("nvfp4/07_split_k_roles"), gpu="b200", problem="k2048")
    p9 = model.predict(Stage("nvfp4/09_wide_split"), gpu="b200", problem="k2048")
    assert next(iter(p7.critical)) == "issue"
    assert next(iter(p9.critical)) == "memory" and p9.sentence.startswith("bound by TMA loads")


def test_a_split_k_ctas_cut_k_loop_is_k_blocks_of_its_own():
    """Where the model cuts a long K loop (one row of tiles), each CTA of a split-K cluster still walks K_BLOCKS
    K blocks: the cut K is split_k times longer. With K_BLOCKS blocks shared by 2 CTAs, a 4-stage ring never
    cycles, and the 'steady' period the extrapolation reads is the ring's fill."""
    for key in ("nvfp4/01_pipelined", "nvfp4/09_wide_split", "nvfp4/10_reduce_scatter"):
        st = Stage(key)
        prob, _ = model.sim_problem(st, problem="k16384")
        ex = st.exports
        assert prob.k // ex.block_k // int(ex.get("split_k", 1)) == model.K_BLOCKS, key


def test_b_loads_of_a_grid_of_one_row_of_tiles_always_miss_l2():
    """At M = 128 every box of B and its scales is loaded by one CTA only (the grid has one row of tiles): each
    such load is its box's first since the L2 flush, a miss whatever A's schedule (model.COLUMN_SIDE); on the
    patch-embed problem B is re-read by every row of tiles and is not."""
    su = model.prepare(Stage("nvfp4/09_wide_split"), 148, problem="k2048")
    assert set(su.compulsory) == {"b", "sfb"}
    assert model.prepare(Stage(S06), 132).compulsory == ()
    from pelib.predict import history, load_calibration
    cal = load_calibration(history.CALIBRATION)
    mem = MemoryState(0.3, 0.0, 1.5, 0.0, 148, demand_miss=0.0)
    hit, miss = mem.tma_cycles(cal, 16384, True), mem.tma_cycles(cal, 16384, True, miss=1.0)
    assert miss > hit + 300                   # a DRAM round trip more than an L2 hit
