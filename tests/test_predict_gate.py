"""pelib.predict.gate: the self-consistency gate's measurements and its verdict (the gate itself runs the model:
python -m pelib.predict --gate --gpu h100; here its rules, on the committed records)."""
from __future__ import annotations

from pelib.predict import gate


def test_the_gate_reads_06_and_its_sol_probes_from_one_run():
    mp = gate.measured_probes("h100")
    assert mp and mp["file"].endswith("hopper-perf.json") and mp["06"] > 0
    for d in gate.PROBES:
        assert 0.5 < mp[tuple(sorted(d.items()))] / mp["06"] < 1.0      # every probe removes work


def test_a_row_passes_only_within_the_tolerance_and_a_missing_number_fails():
    assert gate._row("x", 1.05, 1.0, "s", 0.10)["passed"]
    assert not gate._row("x", 1.2, 1.0, "s", 0.10)["passed"]
    r = gate._row("x", None, 1.0, "s", 0.10)
    assert not r["passed"] and r["error"] is None
    g = {"chip": "h100", "calibration": "c", "tolerance": 0.1,
         "rows": [gate._row("a", 1.05, 1.0, "s", 0.1), {**r, "why": "ReplayError: stops"}], "passed": False}
    text = "\n".join(gate.lines(g))
    assert "pass a: predicted 1.05" in text and "FAIL x: ReplayError: stops" in text and "NOT PASSED: 1 of 2" in text
