"""The blind comparison's misses as data, co-resident CTAs in the model, the not-blind label, the chapter's views."""
import json

import pytest

from pelib.predict import misses, model
from pelib.predict.__main__ import NOT_BLIND, not_blind
from pelib.views import blind_rounds as pv


def test_resident_ctas_takes_the_tightest_limit():
    assert model.resident_ctas(160, 128, 33808) == 3          # sm90/00: the register file (12 warps of 160 regs)
    assert model.resident_ctas(160, 128, 132128) == 1         # a 4-stage ring: shared memory
    assert model.resident_ctas(32, 1024, 0) == 2              # 64 warps
    assert model.resident_ctas(16, 32, 0) == 32               # the block limit
    with pytest.raises(model.PredictError, match="registers"):
        model.resident_ctas(0, 128, 0)


def test_misses_read_the_committed_blind_runs():
    folder, blind = pv.RUNS["h100"]
    rows = misses.misses(pv.blind_comparison("h100"), pv._run_doc("h100", "predictions-sm90.json"),
                         [pv.ROOT / b for b in blind])
    comp = pv.blind_comparison("h100")
    assert len(rows) == sum(abs(r["error_cycles"]) > misses.BOUND for r in comp["rows"])
    first = rows[0]
    assert first["stage"] == "00_tma_wgmma" and first["error"] > 0.5
    assert 2.5 < first["measured_overlap"] < 3.5 and "overlap" in first["finding"]
    assert all(r["clock_over_06"] for r in rows)                 # every miss has its launch clock (the rerun's)
    assert any("DRAM floor" in r["finding"] for r in rows)


def test_not_blind_label_is_first_and_names_the_measurement():
    doc = {"meta": {"protocol": "Blind protocol: ..."}, "predictions": []}
    out = not_blind(doc, ["results/2026-11-27-h200/blind-nvidia-h200.json"])
    assert out["meta"]["blind"] is False and out["meta"]["protocol"].startswith("NOT BLIND")
    assert NOT_BLIND in out["meta"]["protocol"] and "results/2026-11-27-h200/blind-nvidia-h200.json" in out["meta"]["protocol"]
    assert doc["meta"]["protocol"] == "Blind protocol: ..."      # the blind document is not touched


def test_chapter_views_say_predicted_and_measured():
    t = pv.targets_table()
    assert "predicted" in t.caption and "measured" in t.caption
    assert all("missed" in r["H100"] for r in t.rows)           # the committed blind run missed every target
    ph = pv.phases_table()
    assert {r["phase"] for r in ph.rows} >= {"tile", "epi_phase1"}
    assert "mean absolute error" in pv.summary_line()
    m = pv.misses_table("h200")
    assert m.rows and "measured" in m.caption
    fig = pv.scatter()
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and "predicted" in ax.get_title()


def test_a_summary_lines_sign_is_its_tables():
    """The worst build's error keeps the sign its table row prints (the summary's "worst" is a size)."""
    import re
    line = pv.summary_line()
    for chip in ("h100", "h200"):
        d = pv.blind_comparison(chip)
        m = re.search(chip.upper() + r": mean absolute error [\d.]+%, worst ([+-][\d.]+)% \(([^)]+)\)", line)
        assert m, line
        row = max(d["rows"], key=lambda r: abs(r["error_cycles"]))
        assert row["stage"].endswith(m.group(2))
        assert m.group(1) == f"{row['error_cycles'] * 100:+.1f}"           # the table's sign and digits
        assert abs(row["error_cycles"]) == pytest.approx(d["summary"]["worst"])
    v2 = pv.v2_table()
    if v2 is not None:
        for chip, note in zip(("h100", "h200"), v2.notes):
            d2 = pv._run_doc(chip, pv.V2_FILES[1])
            row = max(d2["rows"], key=lambda r: abs(r["error_cycles"]))
            m = re.search(r"v2 MAE [\d.]+%, worst ([+-][\d.]+)% \(([^)]+)\)", note)
            assert m and m.group(1) == f"{row['error_cycles'] * 100:+.1f}" and row["stage"].endswith(m.group(2))
