"""Predicted time in the book: the blind comparison table, a stage's predicted breakdown beside its measured
one, the B200 history and the NVFP4 ring sweep against the lab's records.

    comparison_table("results/<date>-<device>/prediction-vs-measured.json")     # the chapter's error table
    predictions_table("results/<date>-<device>/predictions-sm90.json")
    history_table(rows)                                                       # pelib.predict.blackwell.history
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import evidence
from ..facts import Table
from ..predict import compare, predict, report


def _doc(source) -> dict:
    return source if isinstance(source, dict) else json.loads(Path(source).read_text())


def comparison_table(source) -> Table:
    """Per stage: predicted and measured cycles and ms, the error; the summary (mean and worst absolute
    error, the ranking) and sm90/06's per-role phases as notes."""
    doc = _doc(source)
    s = doc["summary"]
    meas = doc.get("measurement", {})
    pred = doc.get("predictions", {})
    notes = [f"mean absolute error {s['mae']:.1%}, worst {s['worst']:.1%} ({s['worst_stage']}); ranking of the "
             f"{s['ranked']} default builds {'exactly right' if s['ranking_exact'] else 'not exact'} "
             f"(Kendall tau {s['kendall_tau']:.2f})"]
    for ph, v in (doc.get("phases_06") or {}).items():
        notes.append(f"sm90/06 {ph}: predicted {v['predicted']:,.0f}, measured {v['measured']:,.0f} cycles "
                     f"({v['error']:+.1%})")
    label = evidence.predicted(pred.get("device") or "the GPU", pred.get("calibration_date"),
                               provisional=bool(pred.get("provisional")))
    caption = (f"Predicted against measured, every sm90 stage — {label}; "
               f"{evidence.measured(str(meas.get('device') or '?'), str(meas.get('date') or '?')[:10])}")
    return Table(compare.table_rows(doc), caption, notes=notes)


def predictions_table(source) -> Table:
    """One row per predicted build: cycles, ms at the named clock, the critical path."""
    doc = _doc(source)
    meta = doc.get("meta", {})
    rows = [{"stage": p["stage"].split("/")[-1] + (f" {p['defines']}" if p.get("defines") else ""),
             "cycles": f"{p['cycles']:,}", "ms": f"{p['ms']:.3f}", "critical path": p.get("critical_path", "")}
            for p in doc["predictions"]]
    label = evidence.predicted(meta.get("device") or "?", meta.get("calibration_date"),
                               provisional=bool(meta.get("provisional")))
    return Table(rows, f"Predicted time of every sm90 build — {label}", notes=[meta.get("protocol", "")])


def history_table(rows: list[dict], cal_label: str = "") -> Table:
    """The lab's FP8 history on a B200: predicted against recorded, per stage, with the step signs."""
    out = [{"stage": r["stage"].split("/")[-1], "predicted ms": f"{r['predicted_ms']:.3f}",
            "recorded ms": "—" if r["recorded_ms"] is None else f"{r['recorded_ms']:.3f}",
            "error": "—" if r["error"] is None else f"{r['error']:+.1%}",
            "step sign": {True: "right", False: "wrong", None: "—"}[r.get("sign_right")]} for r in rows]
    return Table(out, f"FP8 on a B200: the stage files predicted ({cal_label or 'predicted'}) against the lab's "
                      "recorded points (recorded, fp8-megakernel-experiment-log.md and "
                      "fp8-megakernel-future-proposals-F21-F28.md)")


def price(stage, gpu: str = "b200", seeds=(0, 1, 2), calibration=None) -> dict:
    """A reader's edit priced in one call: what the compiler made of it (compiled), the simulator's verdict
    on `seeds` (simulated: protocol, indexing, data path against torch) and its predicted time and
    breakdown on `gpu` (predicted). `stage` is a pelib.stage.Stage (an edited file or a variant)."""
    out = {"stage": stage.label, "compiled": stage.facts_row()}
    verdicts = []
    for sd in seeds:
        try:
            r = stage.run("sim", "sim", sim_seed=sd, time=False)
            verdicts.append({"seed": sd, "ok": bool(r.get("ok")), "summary": str(r.get("report").summary())})
        except Exception as e:      # a deadlock, hazard or misuse: the simulator's report is the verdict
            verdicts.append({"seed": sd, "ok": False, "summary": f"{type(e).__name__}: {str(e).splitlines()[0]}"})
    out["simulated"] = verdicts
    if all(v["ok"] for v in verdicts):
        p = predict(stage, gpu, calibration)
        out.update(predicted=report(p), ms=p.ms, cycles=p.cycles, evidence=p.evidence, seconds=p.seconds)
    else:
        out["predicted"] = "not predicted: the simulator found a problem on some seed (fix it first)"
    return out
