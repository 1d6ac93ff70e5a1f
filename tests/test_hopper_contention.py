"""pelib.views.hopper_contention on a synthetic `pelib.measure.energy contention` report: the time table against 07a,
the counters per tile, the fastest verified stage and the targets, and the errors that name what is missing."""
import json

import pytest

from pelib.measure import energy
from pelib import problems
from pelib.views import hopper_contention as hc
from pelib.views.hopper_limits import LimiterError

FULL = problems.patch_embed("siglip2")
TILES = (FULL.m / 64) * (FULL.n / 256)
MS = {"07a": 0.78, "12": 0.71, "12 EPI_BOX_COLS=64,NUM_STAGES=2": 0.80, "13": 0.77, "cuBLAS fast-accum GEMM": 0.90,
      "06": 0.81, "probe 06 PROBE_NO_STORE": 0.73, "probe 06 PROBE_NO_A": 0.73, "probe 06 PROBE_NO_A,PROBE_NO_STORE": 0.69}


def _report(bad=("13",), counters=True):
    entries = energy.CONTENTION
    burst = [{"entry": e.name, "inputs": "random", "round": 0, "plain": {"median_ms": MS[e.name]},
              "clocked": {"clock_after_ghz": [1.8]}, **({"stamped": {"clock_ghz": [1.56 if e.name == "07a" else 1.60]}}
                                                         if e.stage else {})} for e in entries]
    sus = [{"entry": e.name, "inputs": "random", "round": 0, "ms_per_launch": MS[e.name] * 1.2,
            "j_per_launch": MS[e.name] * 0.8, "power_w": 690.0, "nvml": {"sm_mhz": {"mean": 1400.0}}}
           for e in entries if not e.bursts_only]
    rep = {"env": {"device": "NVIDIA H200", "date": "2026-12-02T01:50:00+00:00"}, "evidence": "measured (NVIDIA H200, 2026-12-02)",
           "entries": [e.as_dict() for e in entries], "burst": burst, "sustained": sus,
           "verified": {e.name: {"ok": e.name not in bad} for e in entries if e.stage and not e.probe}}
    if counters:
        rep["ncu_contention_per_tile"] = [{"entry": "07a", "per_tile": {"lts__t_sectors_op_write.sum": 1024.0,
                                                                        "dram__bytes_read.sum": 16400.0},
                                           "rates": {"lts__throughput.avg.pct_of_peak_sustained_elapsed": 81.0},
                                           "stalls": {"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": 1.5,
                                                      "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 0.5}}]
    rep["summary"] = energy.summarize(rep)
    return rep


def _root(tmp_path, rep):
    d = tmp_path / "2026-12-02-h200"
    d.mkdir()
    (d / "energy-contention.json").write_text(json.dumps(rep))
    return tmp_path


def test_time_table_and_fastest(tmp_path):
    root = _root(tmp_path, _report())
    t = hc.time_table(root=root)
    r12 = next(r for r in t.rows if r["entry"] == "12")
    assert r12["verified"] == "yes" and r12["burst ms"] == 0.71 and r12["cycles vs 07a"] == f"{0.71 * 1.6 / (0.78 * 1.56):.3f}"
    assert next(r for r in t.rows if r["entry"] == "13")["verified"] == "NO"
    assert next(r for r in t.rows if r["entry"].startswith("probe"))["verified"] == "—"
    assert "measured" in t.caption and "2026-12-02" in t.caption
    assert hc.fastest(hc.contention_run(root=root))["entry"] == "12"


def test_targets_met_and_missed(tmp_path):
    t = hc.targets(root=_root(tmp_path, _report()))
    assert [r["met"] for r in t.rows] == ["yes", "yes", "yes"] and all(r["stage"] == "12" for r in t.rows)
    (tmp_path / "b").mkdir()
    t = hc.targets(root=_root(tmp_path / "b", _report(bad=("12", "13"))))
    assert t.rows[0]["stage"] == "07a" and [r["met"] for r in t.rows] == ["no", "no", "no"]   # 0.867x the joules


def test_counters_per_tile_and_their_absence(tmp_path):
    t = hc.counter_table(root=_root(tmp_path, _report()))
    r = t.rows[0]
    assert r["L2 write KB"] == pytest.approx(32.8, abs=0.05) and r["DRAM read KB"] == 16.4 and r["L2 %"] == 81.0
    assert r["top stalls"] == "wait 1.50, long_scoreboard 0.50" and r["STG sectors"] == "—"
    (tmp_path / "b").mkdir()
    with pytest.raises(LimiterError, match="no contention counters"):
        hc.counter_table(root=_root(tmp_path / "b", _report(counters=False)))
    with pytest.raises(LimiterError, match="python -m pelib.measure.energy contention"):
        hc.time_table(root=tmp_path / "nothing")


def test_predicted_beside_measured(tmp_path):
    root = _root(tmp_path, _report())
    assert not hc.predicted_table(root=root).rows          # none committed: an empty table that says so
    pred = {"predictions": [{"stage": "sm90/12_tma_store", "defines": {"PE_WAIT_KIND": 2}, "ms": 0.80, "clock_ghz": 1.5},
                            {"stage": "sm90/12_tma_store", "defines": {"EPI_BOX_COLS": 64, "NUM_STAGES": 2, "PE_WAIT_KIND": 2},
                             "ms": 0.88, "clock_ghz": 1.5},
                            {"stage": "sm90/99_not_run", "defines": {}, "ms": 1.0, "clock_ghz": 1.5}]}
    (root / "2026-12-02-h200" / hc.PREDICTIONS).write_text(json.dumps(pred))
    t = hc.predicted_table(root=root)
    assert [r["stage"] for r in t.rows] == ["12", "12 EPI_BOX_COLS=64,NUM_STAGES=2"]
    r = t.rows[0]
    assert r["error"] == f"{(0.80 - 0.71) / 0.71:+.1%}" and r["predicted at the measured clock"] == round(0.80 * 1.5 / 1.6, 4)
    assert "predicted" in t.caption.lower() and "measured" in t.caption
