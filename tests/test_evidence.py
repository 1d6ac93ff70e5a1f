"""One evidence vocabulary (pelib.evidence), one SMEM limit (pelib.isa.limits), and no error row shown as a
measured result."""
import re

import pytest

from pelib import evidence
from pelib.isa import limits
from pelib.facts import Table
from pelib.paths import KERNELS


def test_the_vocabulary():
    assert evidence.KINDS == ("compiled", "emulated", "simulated", "predicted", "measured", "recorded", "modelled")
    assert set(evidence.DEFINITIONS) == set(evidence.KINDS)
    assert evidence.recorded("note.md", "F6") == "recorded (note.md, F6)"
    assert evidence.measured("NVIDIA H100", "2026-11-23") == "measured (NVIDIA H100, 2026-11-23)"
    assert evidence.compiled("NVRTC 13.5", "sm_100a", "2026-11-24") == "compiled (NVRTC 13.5, sm_100a, 2026-11-24)"
    assert evidence.kinds_in("x — compiled (NVRTC); recorded (a.md)") == ["compiled", "recorded"]
    assert evidence.kind_of("calibrated") == "modelled" and evidence.kind_of("derived") == "recorded"
    assert evidence.predicted("NVIDIA H100 80GB HBM3", "2026-11-28") == (
        "predicted (the stage's event graph replayed with costs calibrated on NVIDIA H100 80GB HBM3, 2026-11-28)")
    assert "provisional" in evidence.predicted("NVIDIA H100 80GB HBM3", "", provisional=True)
    for lab in (evidence.predicted("H100", "2026-11-28"), evidence.predicted("H100", None, provisional=True)):
        assert evidence.kinds_in(lab) == ["predicted"]          # never read as a measurement


@pytest.mark.parametrize("bad", [lambda: evidence.label("derived"), lambda: evidence.label("measured"),
                                 lambda: evidence.label("recorded", ""), lambda: evidence.measured("", "2026"),
                                 lambda: evidence.kind_of("guessed"), lambda: evidence.predicted("", "2026")])
def test_bad_labels_are_refused(bad):
    with pytest.raises(evidence.EvidenceError):
        bad()


def test_the_views_speak_the_vocabulary():
    from pelib.views import plots
    assert plots.KINDS == evidence.KINDS
    assert plots.evidence_label("emulated") == "emulated"


def test_one_smem_limit():
    text = (KERNELS / "common" / "limits.cuh").read_text()
    assert re.search(r"#define PE_SMEM_LIMIT \(227 \* 1024\)", text)
    assert limits.SMEM_LIMIT == 232448
    from pelib.models import pipeline
    from pelib.stage import all_stages
    assert pipeline.SMEM_LIMIT == pipeline.smem_limit() == limits.SMEM_LIMIT
    assert {s.exports.smem_limit for s in all_stages()} == {limits.SMEM_LIMIT}   # every stage, the same constant


def test_table_columns_are_the_union_of_the_rows():
    t = Table([{"a": 1}, {"a": 2, "SMEM fits": "NO"}], "x — modelled")
    assert t.columns == ["a", "SMEM fits"] and "NO" in t._repr_html_()


def _cells(table: Table) -> list[str]:
    return [str(v) for r in table.rows for v in r.values()]


def test_a_failed_baseline_is_not_a_row():
    """A committed run whose baseline failed: the table shows no error row, and says what is missing."""
    from pelib import results
    from pelib.views import hopper
    rep = results.load_sweep()
    failed = "Traceback ...\nAttributeError: no attribute 'ATOL'"
    base = rep.get("baselines", {})
    if isinstance(base, list):   # pelib.measure.baselines rows (newer runs) or {name: row} (older runs)
        base = base + [{"name": "compile_fused", "status": "failed", "reason": failed}]
    else:
        base = {**base, "compile_fused": {"error": failed}}
    fake = {**rep, "baselines": base}
    t = hopper.recorded_comparison_table(fake)
    assert not [c for c in _cells(t) if re.search(r"FAILED|Error|Traceback", c)]
    # said under the table, without quoting the error (the results file keeps it)
    assert any("not measured" in n.lower() and "compile_fused" in n and "results file" in n for n in t.notes)
    assert not any("AttributeError" in n or "Traceback" in n for n in t.notes)


def test_committed_results_show_no_error_row():
    """Every committed sweep, as the chapters show it: no measured table carries a FAILED or error row."""
    from pelib import results
    from pelib.views import hopper
    for path in results.sweep_files():
        rep = results.load(path)
        t = hopper.recorded_comparison_table(rep)
        bad = [c for c in _cells(t) if re.search(r"\bFAILED\b|Error\b|Traceback", c)]
        assert not bad, f"{path.name}: {t.caption!r} shows {bad}"
