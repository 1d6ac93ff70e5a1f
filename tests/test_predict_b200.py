"""pelib.predict.history: the B200 predictions document (the FP8 history, the NVFP4 ring, the go/no-go
cards) built with a stand-in prediction (the mechanics: the fitted point left out, steps and signs, the
cards' outcomes), and the committed document read by the book's views (what it claims, its provenance)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pelib import evidence
from pelib.paths import ROOT
from pelib.predict import blackwell, history
from pelib.predict import calibration as cal_mod

# stand-in predicted ms per stage (a made-up line: this test checks the bookkeeping, never a time)
FAKE = {"fp8/00_ws_cta1": 1.0, "fp8/01_cta2": 0.95, "fp8/02_tn256": 0.70, "fp8/03_x32_loads": 0.705,
        "fp8/04_independent_polling": 0.69, "fp8/05_epi_warps": 0.70, "fp8/06_stages": 0.69,
        "fp8/07_smem_staged_epilogue": 0.64, "fp8/08_unroll": 0.64, "fp8/08a_persistent_tiles": 0.60,
        "fp8/08b_double_staging": 0.56, "fp8/09_persistent_megakernel": 0.56}


def fake_predict(stage, gpu, cal, **kw):
    ms = FAKE.get(stage.key, 0.5 if "variants" not in str(stage.path) else 0.49)
    return SimpleNamespace(ms=ms, cycles=ms * 1.5e6, per_tile=5000.0, tiles=147, util=0.5,
                           sentence="bound by x", critical={"x": 1.0}, phases={"kloop": {"avg": 4000.0}},
                           assumptions=["the full grid: 74 persistent clusters"], seconds=0.0)


@pytest.fixture(scope="module")
def rows():
    return history.fp8_history(None, predict_fn=fake_predict)


def test_the_fitted_point_is_marked_and_validates_nothing(rows):
    fit = [r for r in rows if r["fitted"]]
    assert [r["stage"] for r in fit] == [history.FITTED_STAGE] and fit[0]["recorded_ms"] == 0.579
    s = history.summary(rows)
    assert s["validation_points"] == len(rows) - 1          # every other stage has a recorded point
    assert history.FITTED_STAGE not in s["misses"] and history.FITTED_STAGE not in str(s["worst_point"])


def test_steps_signs_and_the_neutral_checks(rows):
    by = {r["stage"]: r for r in rows}
    two = by["fp8/02_tn256"]              # recorded 0.920 -> 0.764 (-17 %), stand-in 0.95 -> 0.70
    assert two["recorded_step"] < -0.09 and two["sign_right"] is True
    assert by["fp8/04_independent_polling"]["sign_right"] is None     # a 2.7 % step: below the 9 % bar
    assert by["fp8/03_x32_loads"]["neutral_right"] is True             # +0.7 % predicted
    assert by["fp8/09_persistent_megakernel"]["neutral_right"] is True
    s = history.summary(rows)
    assert set(s["neutral_checks"]) == set(history.NEUTRAL_STEPS) and s["steps_9pct"] >= 2


def test_every_card_is_listed_with_its_outcome_or_why():
    out = {c["card"]: c for c in history.cards(None, predict_fn=fake_predict)}
    assert sorted(out) == [f"F{n}" for n in range(21, 29)]
    for c in ("F21", "F25", "F26", "F27"):
        assert out[c]["outcome"] == "not predicted" and out[c]["why"]
    f22 = out["F22"]
    assert f22["gain"] == pytest.approx(FAKE["fp8/09_persistent_megakernel"] / 0.49 - 1, abs=1e-4)
    assert f22["error_bar"] == history.ERROR_BAR_PENDING and f22["status"] == "PENDING B200"
    rules = {r["metric"]: r for r in f22["rules"]}      # F22's own rules (fp8_proposals.yaml), both evaluated
    assert rules["f22.wall_clock_improvement_pct"]["met"] and rules["f22.wall_clock_improvement_pct"]["threshold"] == 1.0
    assert not rules["f22.phase1_delta_cycles"]["met"]   # the stand-in's Phase 1 is unchanged: not -200 cycles
    assert f22["outcome"] == "NO-GO"
    assert [r["metric"] for r in out["F24"]["rules"]] == ["f24.kloop_improvement_pct", "f24.epilogue_delta_cycles"]
    with pytest.raises(ValueError, match="mean absolute error"):
        history.cards(None, error_bar=5, predict_fn=fake_predict)
    within = {c["card"]: c for c in history.cards(None, error_bar=0.2, predict_fn=fake_predict)}
    assert within["F22"]["outcome"] == "within the error bar"      # +14 % inside a 20 % bar


def test_sweeps_take_the_default_from_the_history(rows):
    out = history.fp8_sweeps(None, rows, predict_fn=fake_predict)
    six = [r for r in out if r["stage"] == "fp8/06_stages"]
    assert [r["value"] for r in six] == [4, 5, 6]
    assert six[0]["predicted_ms"] == FAKE["fp8/06_stages"] and six[0]["recorded_ms"] == 0.7
    assert six[1]["recorded_ms"] == 0.715 and six[2]["recorded_ms"] == 0.722       # F6
    assert [r["recorded_ms"] for r in out if r["define"] == "NUM_EPI_WARPS"] == [0.722, 0.747]      # F3
    s = history.summary(rows, (), out)
    assert s["validation_points"] == len(rows) - 1 + 3       # 5 and 6 stages, 6 warps


def test_a_bad_part_is_refused(capsys):
    with pytest.raises(SystemExit):
        history.main(["--only", "fp9"])
    assert "choose from fp8, sweeps, nvfp4, cards" in capsys.readouterr().err


def test_the_b200_calibration_transfers_from_the_measured_h100():
    cal = history.calibration()
    kinds = {n: c["kind"] for n, c in cal.constants.items()}
    assert {n for n, k in kinds.items() if k == "fitted"} == {"clock_ghz.timed", "clock_ghz.sustained"}
    assert "measured" not in kinds.values() and kinds["issue.cpi"] == "transferred"
    assert history.HOPPER in cal.entry("issue.cpi")["source"]
    assert 1.5 < cal["clock_ghz.timed"] < 1.7                  # the lab's clock64 range on a B200


# ---- the committed document -------------------------------------------------------------------------------

def _committed():
    found = sorted((ROOT / "results").glob(f"*-b200/{history.DOC_NAME}"))
    assert found, "the B200 predictions document is committed (python -m pelib.predict.history)"
    return found[-1], json.loads(found[-1].read_text())


def test_the_committed_document_names_its_calibration_and_revision():
    _, doc = _committed()
    assert doc["schema"] == history.SCHEMA and doc["kind"] == "predicted"
    m = doc["meta"]
    assert (ROOT / m["calibration"]).is_file() and (ROOT / m["hopper_calibration"]).is_file()
    assert len(m["git"].split("-")[0]) == 40
    assert [f["name"] for f in m["fitted"]] == ["clock_ghz.timed"]       # ONE fitted parameter
    assert evidence.kinds_in(m["evidence"]) == ["predicted"]
    cal = cal_mod.load(ROOT / m["calibration"])
    assert cal["clock_ghz.timed"] == pytest.approx(m["fitted"][0]["value"], abs=1e-3)
    assert [r["stage"] for r in doc["fp8"]] == list(blackwell.HISTORY)
    assert [r["stages"] for r in doc["nvfp4_ring"]] == [1, 2, 3, 4, 5]
    assert sorted(c["card"] for c in doc["cards"]) == [f"F{n}" for n in range(21, 29)]
    assert doc["summary"] == history.summary(doc["fp8"], doc["nvfp4_ring"], doc["fp8_sweeps"])   # the rows'


def test_the_views_read_the_committed_document():
    from pelib.views import predict as vp
    doc = vp.b200_doc()
    t = vp.b200_history_table(doc)
    assert evidence.kinds_in(t.caption) == ["predicted", "recorded"] and len(t.rows) == len(blackwell.HISTORY)
    assert any(r["error"] == "fitted" for r in t.rows)
    b = vp.b200_breakdown("08a_persistent_tiles", doc)
    assert "clock64" in b.caption and any(r["recorded cycles (clock64)"] != "—" for r in b.rows)
    assert "predicted" in vp.b200_summary("02_tn256", doc)
    assert "PENDING B200" in repr(vp.b200_cards_table(doc))
    assert len(vp.b200_ring_table(doc).rows) == 5
    with pytest.raises(KeyError, match="not in the B200 history"):
        vp.b200_row("10_nope", doc)


def test_the_committed_document_is_the_models_current_answer():
    """A chapter draws a stage's run live beside the document's numbers: they come from the same model."""
    from pelib.views import predict as vp
    doc = vp.b200_doc()
    row = vp.b200_row("02_tn256", doc)
    p = vp._b200_run("fp8/02_tn256")
    assert round(p.ms, 4) == pytest.approx(row["predicted_ms"], abs=2e-4), \
        "the committed B200 document is stale: run `python -m pelib.predict.history` and commit its output"


def test_a_predicted_run_is_drawn_on_a_cycles_axis(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)     # a chapter runs in book/chapters: no path may be relative to the cwd
    history.calibration()
    import matplotlib
    matplotlib.use("Agg")
    from pelib.views import predict as vp
    ax = vp.b200_picture("02_tn256")
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    assert "predicted cycles" in ax.get_xlabel()
    title = " ".join(ax.get_title(loc=w) for w in ("left", "center", "right"))
    assert evidence.kinds_in(title) == ["predicted"], title
    assert any("producer" in n for n in lanes) and any("mma" in n.lower() for n in lanes) \
        and any("epilogue" in n for n in lanes), lanes
    ring = vp.b200_ring_picture(1)
    assert "predicted cycles" in ring.get_xlabel() and "nvfp4/00" in " ".join(ring.get_title(loc=w) for w in ("left", "center"))
    assert "µs predicted" in vp.b200_ring_summary(4)
    with pytest.raises(KeyError, match="ring depth 9"):
        vp.b200_ring_summary(9)
    matplotlib.pyplot.close("all")


# ---- the first hour on a B200: everything up to the launch --------------------------------------------------

def test_first_hour_runs_up_to_the_launch(monkeypatch, tmp_path, capsys):
    from pelib import bench, device
    from pelib.measure import jobs
    from pelib.predict import first_hour
    info = SimpleNamespace(name="NVIDIA B200", sm_count=148, arch="sm_100a")
    monkeypatch.setattr(device, "require", lambda arch, info_=None: info if arch == "sm_100a" else None)
    monkeypatch.setattr(bench, "environment", lambda i: {"device": i.name, "date": "2027-01-01T00:00:00"})
    monkeypatch.setattr(jobs, "save_full", lambda s, d: None)
    seen = {}

    def fake_jobs(batch, data_dir, iters, budget, **kw):
        seen["batch"], seen["module"] = batch, kw["module"]
        assert (tmp_path / "predictions-b200.json").is_file()        # the predictions exist before any launch
        return [{**j, "ok": True, "median_ms": 0.6} for j in batch]
    assert first_hour.main(["--out", str(tmp_path)], run_jobs=fake_jobs) == 0
    stages_run = [j["stage"] for j in seen["batch"]]
    assert stages_run[:len(blackwell.HISTORY)] == list(blackwell.HISTORY) and seen["module"] == "pelib.predict.first_hour"
    assert "fp8/variants/09_f22_bf16x2_epilogue" in stages_run
    assert {"NUM_STAGES": 5} in [j["defines"] for j in seen["batch"]]
    cmp = json.loads((tmp_path / "prediction-vs-measured.json").read_text())
    assert cmp["summary"]["stages"] == len(seen["batch"])
    out = capsys.readouterr().out
    assert "mean absolute error" in out and "09_persistent_megakernel" in out
    info.sm_count = 132
    with pytest.raises(SystemExit, match="132 SMs"):
        first_hour.main(["--out", str(tmp_path)], run_jobs=fake_jobs)


def test_the_committed_price_example():
    from pelib.views import predict as vp
    _, doc = _committed()
    ex = doc["price_example"]
    assert [v["seed"] for v in ex["simulated"]] == [0, 1, 2] and all(v["ok"] for v in ex["simulated"])
    assert ex["ms"] > 0 and ex["gpu"] == "b200" and "seconds" not in ex
    t = vp.price_table(doc=doc)
    assert evidence.kinds_in(t.caption) == ["compiled", "simulated", "predicted"]
    assert [r["step"] for r in t.rows][:4] == ["compiled", "simulated, seed 0", "simulated, seed 1", "simulated, seed 2"]


def test_the_predicted_picture_keeps_the_simulators_names():
    """fp8/06_stages predicted: the simulator's own events at predicted cycles, so its barriers keep their names
    (full, empty, mma_done) and its MMAs their completions; nothing is named by a source line."""
    import matplotlib
    matplotlib.use("Agg")
    from pelib.views import predict as vp
    p = vp._b200_run("fp8/06_stages")
    ev = p.events()
    assert ev and all(e["cycles"] is not None and e["label"] == p.evidence for e in ev)
    assert {"full", "empty", "mma_done"} <= {e["barrier"] for e in ev}
    assert {"mma", "mma_done", "tma_load", "complete_tx"} <= {e["kind"] for e in ev}
    assert [e["cycles"] for e in ev] == sorted(e["cycles"] for e in ev)
    ax = vp.b200_picture("06_stages")
    names = " ".join(s.name for s in ax.protocol_spans.spans)
    assert "full[" in names and "empty[" in names and "mma_done" in names and "bar@" not in names
