"""pelib.sim.runs and pelib.views.sim: running, caching and classifying simulated runs, and what the
chapters show where no B200 is present.

A run goes through Stage.run(device='sim'), the stage's own host path (build, exports, launch
configuration, tensor-map specs, argument binding, poison, verify) up to pelib.sim.engine.prepare. Here
pelib.sim.engine.prepare is replaced by a stand-in whose plan writes the torch reference into the output (or a
wrong one, or raises pelib.sim's deadlock) and reports an event log in the schema of pelib.events
(tests/sim_events.py); the tables and pictures are checked against what the stand-in planted. The same
functions on the real simulator are tested in tests/test_views_sim_real.py.
"""
from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from pelib import events, evidence
from pelib.sim import engine as sim, build as sim_build, catalog as sim_catalog, runs as sim_runs  # noqa: E402
from pelib.stage import Stage  # noqa: E402
from pelib.views import figure_text, protocol, sim as views_sim  # noqa: E402

from sim_events import persistent_log  # noqa: E402


class _Report:
    def __init__(self, events, seeds=(0,), deadlock=(), hazards=(), misuse=()):
        self.events, self.seeds = events, list(seeds)
        self.deadlock, self.hazards, self.misuse = list(deadlock), list(hazards), list(misuse)
        self.ok = not (deadlock or hazards or misuse)


@pytest.fixture
def fake_sim(monkeypatch, tmp_path):
    """pelib.sim.engine.prepare stood in for: its plan's run() writes state['fill'](tensors) into the output and
    reports persistent_log(); with state['bug'] it raises pelib.sim's SimDeadlock carrying the report. The
    run cache is a folder of this test's own."""
    state = {"bug": None, "fill": "reference", "prepared": []}
    orig_inputs = Stage.inputs

    def inputs(self, *a, **k):
        t = orig_inputs(self, *a, **k)
        state["t"], state["stage"], state["prob"] = t, self, self.problem(a[0] if a else k.get("problem", "small"))
        return t

    class Plan:
        def __init__(self, kw):
            self.kw, self.report = kw, None

        def run(self):
            t, s = state["t"], state["stage"]
            m = getattr(s, "mutation", None)   # a catalog mutation: behave as the catalog says the simulator does
            if m is not None and m.expect == "deadlock":
                raise sim.SimDeadlock(f"deadlock: CTA 0 warp 0 waits empty[0] parity 0 tag {m.tags[0]} line 99",
                                      _Report(persistent_log(bug="acc_empty_short"), deadlock=[f"tag {m.tags[0]}"]))
            if m is not None and m.expect in ("hazard", "misuse"):
                raise sim.SimHazard(f"{m.expect}: {m.site} at line 123 (CTA 0 warp 2)",
                                    _Report(persistent_log(tiles=2), hazards=[f"{m.site} at line 123"]))
            if m is not None:   # a wrong output where the catalog expects one; a benign edit ('clean') verifies
                state["fill"] = "off by one" if m.expect == "wrong" else "reference"
            if state["bug"]:
                raise sim.SimDeadlock("deadlock: CTA 0 warp 1 (MMA issuer) waits acc_empty[0] parity 0 tag 5 line 205",
                                      _Report(persistent_log(bug=state["bug"], seed=1),
                                              deadlock=["CTA 0 warp 1 MMA issuer: acc_empty[0] parity 0, tag 5, line 205"]))
            ref = s.kind.reference(state["prob"], t)
            t["out"].copy_(ref.to(t["out"].dtype) if state["fill"] == "reference" else ref.to(t["out"].dtype) + 1)
            self.report = _Report(persistent_log(seed=2))
            return self

        def wait(self):
            pass

    def prepare(build, args, **kw):
        state["prepared"].append(kw)
        return Plan(kw)

    monkeypatch.setattr(sim, "prepare", prepare)
    monkeypatch.setattr(sim_runs, "CACHE_DIR", tmp_path / "runs")
    monkeypatch.setattr(Stage, "inputs", inputs)
    return state


def test_evidence_has_the_simulated_kind_and_its_sentence():
    assert "simulated" in evidence.KINDS
    d = evidence.DEFINITIONS["simulated"]
    assert "own source" in d and "protocol, indexing and data path" in d and "no time" in d


def test_simulate_runs_the_stage_host_path_and_reads_the_report(fake_sim):
    run = sim_runs.simulate("fp8/00_ws_cta1", seed=1)
    assert run.ok and run.verified and run.max_abs == 0 and run.n_bad == 0 and not run.cached
    assert run.events and {e["kind"] for e in run.events} >= {"mma", "tmem_ld", "wait_begin"}
    assert all(set(e) == set(events.KEYS) for e in run.events)          # stored in the one schema
    kw = fake_sim["prepared"][-1]
    s = Stage("fp8/00_ws_cta1")
    assert kw["cluster"] == (s.exports.cluster_x, 1, 1) and kw["smem"] == s.exports.smem_bytes
    assert kw["seed"] == 1                                              # the seed's one channel: the argument
    t = views_sim.run_table([run])
    assert "simulated" in evidence.kinds_in(t.caption)
    assert t.rows[0]["verified vs torch"] == "PASS"
    assert t.rows[0]["the simulator's report"] == "no deadlock, no hazard, no misuse"


def test_a_wrong_output_is_reported_not_passed(fake_sim):
    fake_sim["fill"] = "off by one"
    run = sim_runs.simulate("fp8/00_ws_cta1")
    assert run.outcome == "wrong output" and run.verified is False and run.n_bad > 0
    assert views_sim.run_table([run]).rows[0]["verified vs torch"] == "FAIL"
    assert "Not every seed ran clean" in views_sim.run_table([run]).notes[0]


def test_the_compact_table_is_one_row_per_stage_and_keeps_a_bad_seed(fake_sim):
    clean = [sim_runs.simulate("fp8/00_ws_cta1", seed=k) for k in (0, 1)]
    t = views_sim.run_table(clean, compact=True)
    assert [r["stage"] for r in t.rows] == [clean[0].label]
    assert t.rows[0]["seeds"] == ", ".join(str(x) for r in clean for x in (r.seeds or [r.seed]))
    assert t.rows[0]["verified vs torch"] == "PASS at every seed"
    assert t.rows[0]["the simulator's report"] == "no deadlock, no hazard, no misuse at every seed"
    fake_sim["bug"] = "acc_empty_short"
    hung = sim_runs.simulate("fp8/00_ws_cta1", seed=2)
    row = views_sim.run_table(clean + [hung], compact=True).rows[0]
    assert row["the simulator's report"].startswith("seed 2: deadlock:")     # a bad seed is not averaged away
    assert "— (seed 2)" in row["verified vs torch"] and "PASS (seed 0)" in row["verified vs torch"]


def test_a_deadlock_is_the_outcome_with_its_wait_site(fake_sim):
    fake_sim["bug"] = "acc_empty_short"
    run = sim_runs.simulate("fp8/00_ws_cta1")
    assert run.outcome == "deadlock" and "acc_empty[0]" in run.stopped and run.verified is None
    assert 5 in sim_runs.blocked_tags(run)
    assert {s.args["tag"] for s in sim_runs.open_waits(run)} >= {5}
    row = views_sim.run_table([run]).rows[0]
    assert row["the simulator's report"].startswith("deadlock:") and "acc_empty[0]" in row["the simulator's report"]
    assert row["verified vs torch"] == "—"


def test_runs_are_cached_by_content(fake_sim):
    a = sim_runs.simulate("fp8/00_ws_cta1", seed=2)
    b = sim_runs.simulate("fp8/00_ws_cta1", seed=2)
    c = sim_runs.simulate("fp8/00_ws_cta1", seed=1)
    assert not a.cached and b.cached and not c.cached and len(fake_sim["prepared"]) == 2
    assert b.events == a.events and b.summary() == a.summary()


def test_on_b200_cell_simulates_where_no_b200_is_present(fake_sim):
    from pelib.views import fp8
    out = fp8.on_b200(["01_cta2"])
    tables = [x for x in out if hasattr(x, "rows")]
    assert len(tables[0].rows) == len(sim_runs.SEEDS) and "simulated" in tables[0].caption
    assert any("recorded" in t.caption for t in tables[1:])   # the lab's number stays beside it
    assert "<table>" in out._repr_html_()


def test_without_a_host_compiler_the_cell_says_why(monkeypatch):
    def none():
        raise sim_build.SimToolchainError("the simulator needs a host C++17 compiler: install one")
    monkeypatch.setattr(sim_build, "compiler", none)
    ok, why = sim_runs.available()
    assert not ok and "host C++17 compiler" in why
    out = views_sim.stage_runs("fp8/00_ws_cta1")
    assert "Not simulated here" in out[0]


# ---- the picture ---------------------------------------------------------------------------------------

def test_protocol_picture_names_lanes_and_its_evidence():
    ax = protocol.protocol_picture(persistent_log(tiles=4), title="fake")
    text = figure_text(ax.figure)
    assert "simulated" in evidence.kinds_in(text) and "simulated order, not time" in text
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:2] == ["CTA 0: producer (warp 0)", "CTA 0: MMA issuer (warp 1)"]
    assert "CTA 1: epilogue (warp 3)" in labels and "CTA 0: ring slot 1" in labels and "CTA 0: accumulator 1" in labels
    assert "ms" not in text.split() and "cycles" not in text


def test_protocol_picture_shows_where_a_planted_mistake_stops():
    ev = persistent_log(tiles=5, kb=4, stages=3, bug="acc_empty_short")
    still = [s for s in events.spans(ev).spans if s.cat == "wait" and s.args.get("open")]
    assert still and any(s.args.get("barrier") == "acc_empty[0]" and s.args.get("tag") == 5 for s in still)
    ax = protocol.protocol_picture(ev, stopped="deadlock: acc_empty one arrival short")
    text = figure_text(ax.figure)
    assert "stopped here" in text and "acc_empty[0], parity 0, tag 5" in text


def test_bad_event_logs_are_refused():
    with pytest.raises(ValueError, match="no events"):
        protocol.protocol_picture([])
    with pytest.raises(events.EventError, match="seq"):
        protocol.protocol_picture([{"cta": 0, "warp": 0, "kind": "mma"}])
    with pytest.raises(events.EventError, match="kind 'teleport'"):
        protocol.protocol_picture([{"seq": 0, "cta": 0, "warp": 0, "kind": "teleport"}])


def test_on_a_b200_the_cell_measures_as_before(fake_gpu, monkeypatch):
    """The B200 path of the 'On a B200' cell, on the CPU up to the launch (fake plans, tests/conftest.py):
    verified, then timed; no simulator run."""
    from conftest import fake_info
    from pelib import device
    from pelib.views import fp8
    plans, state = fake_gpu
    monkeypatch.setattr(device, "current", lambda: fake_info("sm_100a"))
    monkeypatch.setattr(sim_runs, "simulate", lambda *a, **k: pytest.fail("a B200 measures, it does not simulate"))
    got = {}
    orig = Stage.inputs

    def inputs(self, *a, **k):
        got["t"], got["s"] = orig(self, *a, **k), self
        return got["t"]

    monkeypatch.setattr(Stage, "inputs", inputs)
    state["fill"] = lambda: got["t"]["out"].copy_(got["s"].kind.reference(got["s"].problem("small"), got["t"]))
    out = fp8.on_b200(["00_ws_cta1"], problem="small", iters=2)
    (t,) = out
    assert t.rows[0]["verified"] == "PASS" and t.rows[0]["measured ms"] > 0
    assert "measured" in t.caption and plans and plans[-1].runs >= 3


# ---- planted mistakes ---------------------------------------------------------------------------------

def test_a_planted_deadlock_names_its_wait_site_and_draws_where_it_stopped(fake_sim):
    out = views_sim.mistake_panel("fp8/00_ws_cta1", "fp8-00-empty-first-wait-parity0")
    table, fig = out
    row = table.rows[0]
    assert row["mutation"] == "fp8-00-empty-first-wait-parity0" and row["as expected"] == "yes"
    assert row["expected"].startswith("deadlock at tag") and "blocked at tag" in row["the simulator said"]
    assert "simulated" in evidence.kinds_in(table.caption) and "stopped here" in figure_text(fig)


def test_a_planted_hazard_and_a_wrong_output(fake_sim):
    (table, _fig) = views_sim.mistake_panel("fp8/09_persistent_megakernel")       # the catalog's first for 09
    assert table.rows[0]["expected"].startswith("hazard") and table.rows[0]["as expected"] == "yes"
    (table,) = views_sim.mistake_panel("fp8/00_ws_cta1", "fp8-00-dealloc-before-last-read", picture=False)
    wrong = [m for m in sim_runs.mistakes_for("sm90/01_warp_specialized") if m.expect == "wrong"][0]
    (table,) = views_sim.mistake_panel("sm90/01_warp_specialized", wrong.id)
    assert table.rows[0]["the simulator said"].startswith("finished, output wrong") and table.rows[0]["as expected"] == "yes"


def test_the_catalog_table_puts_the_h100_beside_the_simulator(fake_sim, monkeypatch):
    picked = [sim_catalog.mutation("sm90-00-full-count-2"), sim_catalog.mutation("sm90-01-comb-row-off-by-one")]
    monkeypatch.setattr(sim_catalog, "CATALOG", tuple(picked))
    proof = {"name": "NVIDIA H100 80GB HBM3", "date": "2026-11-24T07:00:00+00:00", "path": "results/2026-11-24-h100/sim_proof.json",
             "mutations": {"sm90-00-full-count-2": {"outcome": {"kind": "fault", "tags": [1]}},
                           "sm90-01-comb-row-off-by-one": {"outcome": {"kind": "wrong", "n_bad": 1234}}}}
    t = views_sim.catalog_table(proof)
    assert [r["as expected"] for r in t.rows] == ["yes", "yes"]
    assert t.rows[0]["H100"] == "trapped in a bounded wait at tag 1" and "1,234" in t.rows[1]["H100"]
    assert evidence.kinds_in(t.caption) == ["simulated", "measured"]
    assert [r["mutation"] for r in views_sim.catalog_table(stages=["sm90/00_tma_wgmma"]).rows] == ["sm90-00-full-count-2"]


def test_the_committed_proof_is_found(tmp_path):
    d = tmp_path / "results" / "2026-11-24-h100"
    d.mkdir(parents=True)
    (d / "sim_proof.json").write_text('{"name": "H100", "mutations": {}}')
    assert views_sim.proof_record(tmp_path / "results")["path"].endswith("sim_proof.json")
    assert views_sim.proof_record(tmp_path / "nothing") is None


def test_the_back_ends_own_failure_is_an_outcome_not_a_crash(fake_sim, monkeypatch):
    """A stage the simulator cannot build yet shows as 'error' with the reason (not cached); a bug in pelib
    still raises."""
    def fail(build, args, **kw):
        raise sim_build.SimBuildError("the host compiler could not build 00_ws_cta1-sim\nerror: ...")
    monkeypatch.setattr(sim, "prepare", fail)
    run = sim_runs.simulate("fp8/00_ws_cta1")
    assert run.outcome == "error" and run.stopped.startswith("SimBuildError: the host compiler could not build")
    assert views_sim.run_table([run]).rows[0]["the simulator's report"].startswith("error: SimBuildError")
    assert not sim_runs.simulate("fp8/00_ws_cta1").cached
    monkeypatch.setattr(sim, "prepare", lambda build, args, **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        sim_runs.simulate("fp8/00_ws_cta1")


def test_the_persistent_chapter_checks_its_protocol_on_the_stages_own_source(fake_sim):
    """fp8.protocol_table: the catalog's mistakes planted in 08a, 08b and 09, run through the simulator (here
    its stand-in), not a second statement of the protocol."""
    from pelib.views import fp8
    t = fp8.protocol_table()
    want = [m.id for m in sim_catalog.CATALOG if m.stage.split("/")[1] in fp8.PERSISTENT]
    assert [r["mutation"] for r in t.rows] == want and len(want) >= 4
    assert {r["as expected"] for r in t.rows} == {"yes"} and evidence.kinds_in(t.caption) == ["simulated"]
    clean = [r for r in t.rows if r["expected"].startswith("runs clean")]
    assert clean and all(r["the simulator said"] == "finished, verified" for r in clean)   # benign edits stay clean


def test_a_long_report_fits_its_table_cell_and_stays_whole_in_the_run():
    # a hazard report of several hundred characters: the table cell holds it to the page's cell width at a
    # word, the run keeps it whole (the rendered page refuses a cell over 400 characters)
    entry = ("hazard: tcgen05.cp reads [0x8000, 0x8200) of CTA 1, which TMA load issued at 00_single_stage.cu:172 "
             + "by CTA 1 warp 0 lane 0 before its barrier phase completed " * 8)
    run = sim_runs.SimRun(stage="nvfp4/00_single_stage", label="", problem="sim", seed=0, outcome="hazard",
                          stopped=entry, hazards=[entry, entry, entry])
    cell = views_sim.run_table([run]).rows[0]["the simulator's report"]
    assert len(cell) <= 400 and cell.startswith("hazard: ") and cell.endswith("…")
    assert len(views_sim._said(run, whole=True)) > 400          # an exercise's verdict is never cut
