"""pelib.sim.runs and the protocol picture on the real simulator: a stage's own source run on pelib.sim,
its tables, its picture, its happens-before graph.

Skipped, saying why, where no host C++ compiler is present; tests/test_views_sim.py covers the same
functions on a stand-in back end."""
from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from pelib import events, evidence, timing
from pelib.sim import runs as sim_runs  # noqa: E402
from pelib.views import figure_text, protocol, sim  # noqa: E402


@pytest.fixture(scope="module")
def need_sim():
    ok, why = sim_runs.available()
    if not ok:
        pytest.skip(why)


def overlaps(sp: events.Spans) -> list[tuple]:
    """(CTA, tile i, tile i+1) where tile i is drained from one accumulator while tile i+1 is written to
    the other: what a double-buffered accumulator is for."""
    parts = [s for s in sp.spans if s.cat == "occupancy" and s.args.get("part") in ("written", "drained")]
    drained = {(s.pid, s.args["tile"]): s for s in parts if s.args["part"] == "drained"}
    written = {(s.pid, s.args["tile"]): s for s in parts if s.args["part"] == "written"}
    return [(c, t, t + 1) for (c, t), d in sorted(drained.items()) if (c, t + 1) in written
            and written[(c, t + 1)].ts < d.ts + d.dur and d.ts < written[(c, t + 1)].ts + written[(c, t + 1)].dur]


@pytest.mark.parametrize("key", ["sm90/01_warp_specialized", "fp8/09_persistent_megakernel"])
def test_a_stage_verifies_on_the_simulator_at_three_seeds(need_sim, key):
    runs = sim_runs.simulate_seeds(key, use_cache=False)
    for r in runs:
        assert r.ok, f"{key} seed {r.seed} (reproduce: --sim-seed {r.seed}): {r.summary()}"
        assert r.events and r.n_bad == 0
    t = sim.run_table(runs)
    assert "simulated" in evidence.kinds_in(t.caption) and {row["verified vs torch"] for row in t.rows} == {"PASS"}


def test_the_persistent_stage_overlaps_its_accumulators(need_sim):
    """FP8 09 at the simulator's problem: some cluster runs more than one tile, and at some seed the
    epilogue of tile i is still draining one accumulator while the MMAs of tile i+1 write the other."""
    runs = sim_runs.simulate_seeds("fp8/09_persistent_megakernel")
    sp = events.spans(runs[0].events)
    assert len({s.args["tile"] for s in sp.spans if s.args.get("part") == "written"}) >= 2, "nothing wraps"
    assert any(overlaps(events.spans(r.events)) for r in runs), "no seed shows tile i drained beside tile i+1 written"
    ax = protocol.protocol_picture(runs[0])
    text = figure_text(ax.figure)
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    assert "simulated order, not time" in text and "CTA 0: accumulator 1" in lanes and "CTA 0: ring slot 0" in lanes
    named = lambda cta, warp, role: any(x.startswith(f"CTA {cta}: ") and f"warp {warp}" in x and role in x for x in lanes)
    assert named(1, 5, "epilogue") and named(0, 0, "producer") and (named(0, 1, "MMA") or named(0, 1, "mma"))


def test_the_trace_and_the_picture_draw_the_same_spans(need_sim):
    """One rule: the Perfetto trace of a run and its picture come from the same spans (cluster 0 of FP8 09)."""
    run = sim_runs.simulate("fp8/09_persistent_megakernel", seed=1)
    tr = timing.chrome_trace(run.events, clusters=[0])
    ax = protocol.protocol_picture(run, cluster=0)
    drawn = sorted((s.pid, s.tid, s.name, s.ts, s.dur) for s in ax.protocol_spans.spans)
    traced = sorted((e["pid"], e["tid"], e["name"], e["ts"], e.get("dur")) for e in tr["traceEvents"] if e["ph"] != "M")
    assert drawn == traced and len(drawn) > 1000
    assert {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"} == set(ax.protocol_spans.threads.values())


def test_the_event_log_names_what_it_means_and_its_graph_runs_forward(need_sim):
    """FP8 09's events in the one schema: ring slots and accumulators on the events that use them, every
    async completion after its issue, every finished blocked wait after a signal on its barrier."""
    run = sim_runs.simulate("fp8/09_persistent_megakernel", seed=0)
    ev = run.events
    assert {events.bar_label(e) for e in ev if e["barrier"]} >= {"full[0]", "empty[3]", "acc_full[1]", "acc_empty[0]"}
    mma = [e for e in ev if e["kind"] == "mma"]
    assert mma and all(e["slot"] is not None and e["acc"] is not None for e in mma)
    assert all(e["acc"] is not None for e in ev if e["kind"] == "tmem_ld")
    g = events.graph(ev)
    assert all(g.events[a]["seq"] < g.events[b]["seq"] for a, b, _ in g.edges)
    into = {}
    for a, b, why in g.edges:
        into.setdefault(b, set()).add(why)
    for i, e in enumerate(ev):
        if e["kind"] in ("mma_done", "tma_load_done", "complete_tx") or (e["kind"] == "arrive" and e["warp"] < 0):
            assert "async" in into.get(i, ()), e
    blocked = [i for i, e in enumerate(ev) if e["kind"] == "wait_end" and e["barrier"] is not None]
    assert sum("barrier" in into.get(i, ()) for i in blocked) >= 0.9 * len(blocked)
    assert any(why == "commit" for _, _, why in g.edges)


def test_a_planted_mistake_is_reported_as_the_catalog_expects(need_sim):
    out = sim.mistake_panel("fp8/09_persistent_megakernel")
    table = out[0]
    assert table.rows[0]["as expected"] == "yes", table.rows[0]
    assert "simulated" in evidence.kinds_in(table.caption)


def test_the_cache_returns_the_same_run(need_sim):
    a = sim_runs.simulate("sm90/00_tma_wgmma", seed=2, use_cache=False)
    sim_runs.simulate("sm90/00_tma_wgmma", seed=2)          # stores it (or finds it from an earlier run)
    b = sim_runs.simulate("sm90/00_tma_wgmma", seed=2)
    assert b.cached and not a.cached and a.summary() == b.summary() and a.events == b.events
