"""pelib.views.sim: what the chapters show where no B200 is present.

The views run a stage through Stage.run(device='sim'), the stage's own host path (build, exports,
launch configuration, tensor-map specs, argument binding, poison, verify) up to pelib.sim.prepare.
Here pelib.sim is replaced at that edge by a stand-in whose plan writes the torch reference into the
output (or a wrong one, or raises a deadlock) and reports an event log in the contract's schema
(tests/sim_events.py); the picture and the tables are checked against what the stand-in planted.
The same functions on the real simulator are tested in tests/test_views_sim_real.py.
"""
from __future__ import annotations

import sys
import types

import matplotlib
import pytest

matplotlib.use("Agg")

from pelib import evidence  # noqa: E402
from pelib.stage import Stage  # noqa: E402
from pelib.views import figure_text, sim  # noqa: E402

from sim_events import persistent_log  # noqa: E402


class _Report:
    def __init__(self, events, seeds=(0,), deadlock=(), hazards=(), misuse=()):
        self.events, self.seeds = events, list(seeds)
        self.deadlock, self.hazards, self.misuse = list(deadlock), list(hazards), list(misuse)
        self.ok = not (deadlock or hazards or misuse)


@pytest.fixture
def fake_sim(monkeypatch):
    """A stand-in pelib.sim: prepare() returns a plan whose run() writes state['fill'](tensors) into the
    output and reports persistent_log(); with state['bug'] it raises SimDeadlock carrying the report."""
    mod = types.ModuleType("pelib.sim")

    class SimError(RuntimeError):
        report = None

    class SimDeadlock(SimError):
        pass

    class SimHazard(SimError):
        pass

    mod.SimError, mod.SimDeadlock, mod.SimHazard = SimError, SimDeadlock, SimHazard
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
                e = SimDeadlock(f"deadlock: CTA 0 warp 0 waits empty[0] parity 0 tag {m.tags[0]} line 99")
                e.report = _Report(persistent_log(bug="acc_empty_short"), deadlock=[f"tag {m.tags[0]}"])
                raise e
            if m is not None and m.expect in ("hazard", "misuse"):
                e = SimHazard(f"{m.expect}: {m.site} at line 123 (CTA 0 warp 2)")
                e.report = _Report(persistent_log(tiles=2), hazards=[f"{m.site} at line 123"])
                raise e
            if m is not None:
                state["fill"] = "off by one"
            if state["bug"]:
                ev = persistent_log(bug=state["bug"], seed=1)
                e = SimDeadlock("deadlock: CTA 0 warp 1 (MMA issuer) waits acc_empty[0] parity 0 tag 5 line 205")
                e.report = _Report(ev, deadlock=["CTA 0 warp 1 MMA issuer: acc_empty[0] parity 0, tag 5, line 205"])
                raise e
            ref = s.kind.reference(state["prob"], t)
            t["out"].copy_(ref.to(t["out"].dtype) if state["fill"] == "reference" else ref.to(t["out"].dtype) + 1)
            self.report = _Report(persistent_log(seed=2))
            return self

        def wait(self):
            pass

    def prepare(build, args, **kw):
        state["prepared"].append(kw)
        return Plan(kw)

    mod.prepare = prepare
    monkeypatch.setitem(sys.modules, "pelib.sim", mod)
    monkeypatch.setattr(Stage, "inputs", inputs)
    return state


def test_evidence_has_the_simulated_kind_and_its_sentence():
    assert "simulated" in evidence.KINDS
    d = evidence.DEFINITIONS["simulated"]
    assert "own source" in d and "protocol, indexing and data path" in d and "no time" in d


def test_simulate_runs_the_stage_host_path_and_reads_the_report(fake_sim):
    run = sim.simulate("fp8/00_ws_cta1", seed=1)
    assert run.ok and run.verified and run.max_abs == 0 and run.n_bad == 0 and not run.cached
    assert run.events and {e["kind"] for e in run.events} >= {"mma", "tmem_ld", "wait_begin"}
    kw = fake_sim["prepared"][-1]
    s = Stage("fp8/00_ws_cta1")
    assert kw["cluster"] == (s.exports.cluster_x, 1, 1) and kw["smem"] == s.exports.smem_bytes
    t = sim.run_table([run])
    assert "simulated" in evidence.kinds_in(t.caption)
    assert t.rows[0]["verified vs torch"] == "PASS"
    assert t.rows[0]["the simulator's report"] == "no deadlock, no hazard, no misuse"


def test_a_wrong_output_is_reported_not_passed(fake_sim):
    fake_sim["fill"] = "off by one"
    run = sim.simulate("fp8/00_ws_cta1")
    assert run.outcome == "wrong output" and run.verified is False and run.n_bad > 0
    assert sim.run_table([run]).rows[0]["verified vs torch"] == "FAIL"
    assert "Not every seed ran clean" in sim.run_table([run]).notes[0]


def test_a_deadlock_is_the_outcome_with_its_wait_site(fake_sim):
    fake_sim["bug"] = "acc_empty_short"
    run = sim.simulate("fp8/00_ws_cta1")
    assert run.outcome == "deadlock" and "acc_empty[0]" in run.stopped and run.verified is None
    assert 5 in sim.blocked_tags(run)
    row = sim.run_table([run]).rows[0]
    assert row["the simulator's report"].startswith("deadlock:") and "acc_empty[0]" in row["the simulator's report"]
    assert row["verified vs torch"] == "—"


def test_a_stand_in_back_end_is_never_cached(fake_sim, monkeypatch, tmp_path):
    monkeypatch.setenv("PELIB_CACHE", str(tmp_path))
    sim.simulate("fp8/00_ws_cta1")
    assert not list(tmp_path.glob("simrun-*"))


def test_on_b200_cell_simulates_where_no_b200_is_present(fake_sim):
    from pelib.views import fp8
    out = fp8.on_b200(["01_cta2"])
    tables = [x for x in out if hasattr(x, "rows")]
    assert len(tables[0].rows) == len(sim.SEEDS) and "simulated" in tables[0].caption
    assert any("recorded" in t.caption for t in tables[1:])   # the lab's number stays beside it
    assert "<table>" in out._repr_html_()


def test_without_the_simulator_the_cell_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pelib.sim", None)   # import pelib.sim raises ModuleNotFoundError
    ok, why = sim.available()
    assert not ok and "pelib.sim" in why
    out = sim.stage_runs("fp8/00_ws_cta1")
    assert "Not simulated here" in out[0]


# ---- the picture ---------------------------------------------------------------------------------------

def test_occupancy_follows_the_ring_and_the_accumulators():
    ev = persistent_log(tiles=5, kb=4, stages=3, seed=3)
    occ = sim.occupancy(ev)
    slots = {iv.lane for iv in occ if iv.lane.startswith("slot")}
    assert slots == {"slot 0", "slot 1", "slot 2"}
    written = sorted((iv for iv in occ if iv.what == "written"), key=lambda iv: iv.start)
    assert [iv.tile for iv in written] == list(range(5))                 # five tiles, numbered in order
    assert [iv.lane for iv in written] == ["acc 0", "acc 1", "acc 0", "acc 1", "acc 0"]
    for s in slots:   # a slot is never held twice at once
        ivs = sorted((iv for iv in occ if iv.lane == s), key=lambda iv: iv.start)
        assert all(a.end <= b.start for a, b in zip(ivs, ivs[1:]))
    assert not any(iv.open for iv in occ)


def test_the_double_buffered_accumulator_overlaps_tiles():
    """Some seed shows the epilogue of tile i beside the MMAs of tile i+1; with one accumulator none can."""
    assert any(sim.overlap(persistent_log(tiles=5, kb=4, stages=3, seed=k)) for k in range(5))
    assert not any(sim.overlap(persistent_log(tiles=4, kb=3, accs=1, seed=k)) for k in range(5))


def test_protocol_figure_names_lanes_and_its_evidence():
    fig = sim.protocol_figure(persistent_log(tiles=4), title="fake")
    text = figure_text(fig)
    assert "simulated" in evidence.kinds_in(text) and "simulated order, not time" in text
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[:2] == ["CTA 0: producer", "CTA 0: MMA issuer"]
    assert "CTA 1: epilogue warp 1" in labels and "ring slot 1" in labels and "TMEM acc 1" in labels
    assert "ms" not in text.split() and "cycles" not in text


def test_protocol_figure_shows_where_a_planted_mistake_stops():
    ev = persistent_log(tiles=5, kb=4, stages=3, bug="acc_empty_short")
    done, still = sim.wait_spans(ev)
    assert still and any("acc_empty[0]" in iv.note and "tag 5" in iv.note for iv in still)
    fig = sim.protocol_figure(ev, stopped="deadlock: acc_empty one arrival short")
    text = figure_text(fig)
    assert "stopped here" in text and "acc_empty[0], parity 0, tag 5" in text
    assert any(iv.open for iv in sim.occupancy(ev, stopped=True))


def test_bad_event_logs_are_refused():
    with pytest.raises(sim.SimViewError, match="no events"):
        sim.protocol_figure([])
    with pytest.raises(sim.SimViewError, match="seq"):
        sim.protocol_figure([{"cta": 0, "warp": 0, "kind": "mma"}])
    with pytest.raises(sim.SimViewError, match="unknown event kinds"):
        sim.protocol_figure([{"seq": 0, "cta": 0, "warp": 0, "kind": "teleport"}])


def test_on_a_b200_the_cell_measures_as_before(fake_gpu, monkeypatch):
    """The B200 path of the 'On a B200' cell, on the CPU up to the launch (fake plans, tests/conftest.py):
    verified, then timed; no simulator run."""
    from conftest import fake_info
    from pelib import device
    from pelib.views import fp8
    plans, state = fake_gpu
    monkeypatch.setattr(device, "current", lambda: fake_info("sm_100a"))
    monkeypatch.setattr(sim, "simulate", lambda *a, **k: pytest.fail("a B200 measures, it does not simulate"))
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
    out = sim.mistake_panel("fp8/00_ws_cta1", "fp8-00-empty-first-wait-parity0")
    table, fig = out
    row = table.rows[0]
    assert row["mutation"] == "fp8-00-empty-first-wait-parity0" and row["as expected"] == "yes"
    assert row["expected"].startswith("deadlock at tag") and "blocked at tag" in row["the simulator said"]
    assert "simulated" in evidence.kinds_in(table.caption) and "stopped here" in figure_text(fig)


def test_a_planted_hazard_and_a_wrong_output(fake_sim):
    (table, _fig) = sim.mistake_panel("fp8/09_persistent_megakernel")       # the catalog's first for 09
    assert table.rows[0]["expected"].startswith("hazard") and table.rows[0]["as expected"] == "yes"
    (table,) = sim.mistake_panel("fp8/00_ws_cta1", "fp8-00-dealloc-before-last-read", picture=False)
    wrong = [m for m in sim.mistakes_for("sm90/01_warp_specialized") if m.expect == "wrong"][0]
    (table,) = sim.mistake_panel("sm90/01_warp_specialized", wrong.id)
    assert table.rows[0]["the simulator said"].startswith("finished, output wrong") and table.rows[0]["as expected"] == "yes"


def test_the_catalog_table_puts_the_h100_beside_the_simulator(fake_sim, monkeypatch):
    from pelib import sim_catalog as C
    picked = [C.mutation("sm90-00-full-count-2"), C.mutation("sm90-01-comb-row-off-by-one")]
    monkeypatch.setattr(C, "CATALOG", tuple(picked))
    proof = {"name": "NVIDIA H100 80GB HBM3", "date": "2026-11-24T07:00:00+00:00", "path": "results/2026-11-24-h100/sim_proof.json",
             "mutations": {"sm90-00-full-count-2": {"outcome": {"kind": "fault", "tags": [1]}},
                           "sm90-01-comb-row-off-by-one": {"outcome": {"kind": "wrong", "n_bad": 1234}}}}
    t = sim.catalog_table(proof)
    assert [r["as expected"] for r in t.rows] == ["yes", "yes"]
    assert t.rows[0]["H100"] == "trapped in a bounded wait at tag 1" and "1,234" in t.rows[1]["H100"]
    assert evidence.kinds_in(t.caption) == ["simulated", "measured"]


def test_the_committed_proof_is_found(tmp_path):
    d = tmp_path / "results" / "2026-11-24-h100"
    d.mkdir(parents=True)
    (d / "sim_proof.json").write_text('{"name": "H100", "mutations": {}}')
    assert sim.proof_record(tmp_path / "results")["path"].endswith("sim_proof.json")
    assert sim.proof_record(tmp_path / "nothing") is None


def test_annotate_names_barriers_slots_and_roles_from_the_source():
    """Events as pelib.sim records them (barrier = shared offset, role 'warp N', no slot/acc) are named from
    the stage's own source lines: FP8 09's ring and accumulator barriers, each MMA's slot and accumulator,
    each TMEM load's accumulator, and each warp's role. An array's index counts from the lowest offset the
    log used (slot 0 and accumulator 0 are the first any run uses)."""
    s = Stage("fp8/09_persistent_megakernel")
    lines = s.source.splitlines()

    def at(text):
        (n,) = [i + 1 for i, ln in enumerate(lines) if text in ln]
        return n

    full0, empty0, accf0, acce0 = 0x1000, 0x1020, 0x1040, 0x1050     # full[4], empty[4], acc_full[2], acc_empty[2]
    seq = iter(range(1000))

    def ev(warp, kind, bar=None, line=None, lane=0):
        return {"seq": next(seq), "cta": 0, "cluster": 0, "rank": 0, "warp": warp, "lane": lane, "role": f"warp {warp}",
                "kind": kind, "barrier": bar, "slot": None, "acc": None, "parity": 0, "tag": 1, "line": line}
    log = [ev(1, "wait_end", acce0, at("&acc_empty[buf], sched.acc_phase() ^ 1, 5")),     # tile 0 took acc 0
           ev(1, "wait_begin", acce0 + 8, at("&acc_empty[buf], sched.acc_phase() ^ 1, 5")),
           ev(1, "wait_end", acce0 + 8, at("&acc_empty[buf], sched.acc_phase() ^ 1, 5")),
           ev(0, "wait_end", empty0, at("&empty[s], ring.phase ^ 1, 1")),               # slot 0 came first
           ev(0, "tma_load", full0, at("tma_load_2d_cta2(smem + SMEM_A_OFF")),
           ev(1, "commit", accf0, at("smem_u32(&acc_full[buf]), 0b11")),
           ev(0, "wait_end", empty0 + 16, at("&empty[s], ring.phase ^ 1, 1")),
           ev(0, "tma_load", full0 + 16, at("tma_load_2d_cta2(smem + SMEM_A_OFF")),
           ev(1, "wait_end", full0 + 16, at("mbarrier_wait_parity(&full[s], ring.phase, 2)")),
           ev(1, "mma"),
           ev(1, "commit", empty0 + 16, at("smem_u32(&empty[s]), 0b11")),
           ev(1, "wait_end", full0, at("mbarrier_wait_parity(&full[s], ring.phase, 2)")),
           ev(1, "commit", accf0 + 8, at("smem_u32(&acc_full[buf]), 0b11")),
           ev(3, "wait_end", accf0 + 8, at("&acc_full[buf], sched.acc_phase(), 3")),
           ev(3, "tmem_ld"), ev(3, "tmem_ld", lane=5),
           ev(3, "arrive", (1 << 24) | (acce0 + 8), at("mbarrier_arrive_remote_cta(acc_empty, 0)"))]
    out = sim.annotate(log, s)
    by = {(e["warp"], e["kind"], e["seq"]): e for e in out}
    mma = next(e for e in out if e["kind"] == "mma")
    assert (mma["slot"], mma["acc"]) == (2, 1)
    assert [e["barrier"] for e in out if e["kind"] == "commit"] == ["acc_full[0]", "empty[2]", "acc_full[1]"]
    assert all(e["acc"] == 1 for e in out if e["kind"] == "tmem_ld")
    assert next(e for e in out if e["kind"] == "arrive")["barrier"] == "acc_empty[1]"
    assert [e["slot"] for e in out if e["kind"] == "tma_load"] == [0, 2]
    roles = {e["warp"]: e["role"] for e in out}
    assert roles == {0: "warp 0: producer", 1: "warp 1: MMA issuer", 3: "warp 3: epilogue"}
    assert by and sim.occupancy(out)


def test_the_back_ends_own_failure_is_an_outcome_not_a_crash(fake_sim, monkeypatch):
    """A stage the simulator cannot build yet shows as 'error' with the reason; a bug in pelib still raises."""
    mod = sys.modules["pelib.sim"]

    class SimBuildError(RuntimeError):
        pass

    SimBuildError.__module__ = "pelib.sim"
    mod.SimBuildError = SimBuildError

    def fail(build, args, **kw):
        raise SimBuildError("the host compiler could not build 00_ws_cta1-sim\nerror: ...")
    monkeypatch.setattr(mod, "prepare", fail)
    run = sim.simulate("fp8/00_ws_cta1")
    assert run.outcome == "error" and run.stopped.startswith("SimBuildError: the host compiler could not build")
    assert sim.run_table([run]).rows[0]["the simulator's report"].startswith("error: SimBuildError")
    monkeypatch.setattr(mod, "prepare", lambda build, args, **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        sim.simulate("fp8/00_ws_cta1")
