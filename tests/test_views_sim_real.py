"""pelib.views.sim on the real simulator: a stage's own source run on pelib.sim, its tables and picture.

Skipped, saying why, where pelib.sim or a host C++ compiler is missing; tests/test_views_sim.py covers
the same functions on a stand-in back end."""
from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from pelib import evidence  # noqa: E402
from pelib.views import figure_text, sim  # noqa: E402


@pytest.fixture(scope="module")
def need_sim():
    ok, why = sim.available()
    if not ok:
        pytest.skip(why)


@pytest.mark.parametrize("key", ["sm90/01_warp_specialized", "fp8/09_persistent_megakernel"])
def test_a_stage_verifies_on_the_simulator_at_three_seeds(need_sim, key):
    runs = sim.simulate_seeds(key, use_cache=False)
    for r in runs:
        assert r.ok, f"{key} seed {r.seed} (reproduce: PELIB_SIM_SEED={r.seed}): {r.summary()}"
        assert r.events and r.n_bad == 0
    t = sim.run_table(runs)
    assert "simulated" in evidence.kinds_in(t.caption) and {row["verified vs torch"] for row in t.rows} == {"PASS"}


def test_the_persistent_stage_overlaps_its_accumulators(need_sim):
    """FP8 09 at the simulator's problem: some cluster runs more than one tile, and at some seed the
    epilogue of tile i is still draining one accumulator while the MMAs of tile i+1 write the other."""
    runs = sim.simulate_seeds("fp8/09_persistent_megakernel")
    occ = sim.occupancy(runs[0].events)
    assert len({iv.tile for iv in occ if iv.what == "written"}) >= 2, "one tile per cluster: nothing wraps"
    assert any(sim.overlap(r) for r in runs), "no seed shows tile i drained beside tile i+1 written"
    fig = sim.protocol_figure(runs[0])
    text = figure_text(fig)
    lanes = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "simulated order, not time" in text and "TMEM acc 1" in lanes and "CTA 1: epilogue" in lanes   # the role the stage's phase marks name


def test_a_planted_mistake_is_reported_as_the_catalog_expects(need_sim):
    pytest.importorskip("pelib.sim_catalog")
    out = sim.mistake_panel("fp8/09_persistent_megakernel")
    table = out[0]
    assert table.rows[0]["as expected"] == "yes", table.rows[0]
    assert "simulated" in evidence.kinds_in(table.caption)


def test_the_cache_returns_the_same_run(need_sim):
    a = sim.simulate("sm90/00_tma_wgmma", seed=2, use_cache=False)
    sim.simulate("sm90/00_tma_wgmma", seed=2)          # stores it (or finds it from an earlier run)
    b = sim.simulate("sm90/00_tma_wgmma", seed=2)
    assert b.cached and not a.cached and a.summary() == b.summary() and len(a.events) == len(b.events)
