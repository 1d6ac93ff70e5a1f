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
from ..paths import ROOT
from ..predict import compare, misses as _misses, predict, report
from ..stage import Stage


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


# ---- the blind comparison on both Hopper chips (the chapter "Predicted, then measured") -------------------

RUNS = {   # chip -> its results folder and the blind measurement files the comparison merged (first run first)
    "h100": ("results/2026-11-27-h100", ["results/2026-11-27-h100/blind-nvidia-h100-80gb-hbm3.json",
                                         "results/2026-11-27-h100/blind-rerun/blind-nvidia-h100-80gb-hbm3.json"]),
    "h200": ("results/2026-11-27-h200", ["results/2026-11-27-h200/blind-nvidia-h200.json"]),
}
V2 = "-v2"      # the not-blind predictions and comparison, made after the measurement: predictions-sm90<V2>.json,
V2_FILES = (f"predictions-sm90{V2}.json", f"prediction-vs-measured{V2}.json")   # prediction-vs-measured<V2>.json


def _run_doc(chip: str, name: str) -> dict | None:
    p = ROOT / RUNS[chip][0] / name
    return json.loads(p.read_text()) if p.is_file() else None


def blind_comparison(chip: str) -> dict:
    """The committed blind comparison of `chip` (prediction-vs-measured.json)."""
    return _run_doc(chip, "prediction-vs-measured.json")


def summary_line(chips=("h100", "h200")) -> str:
    """The blind summary of each chip in one line (mean and worst absolute error in cycles, the ranking)."""
    out = []
    for c in chips:
        s = blind_comparison(c)["summary"]
        out.append(f"{c.upper()}: mean absolute error {s['mae']:.1%}, worst {s['worst']:+.1%} "
                   f"({s['worst_stage'].split('/')[-1]}), Kendall tau {s['kendall_tau']:.2f} over {s['ranked']} "
                   f"default builds, ranking {'exact' if s['ranking_exact'] else 'not exact'}")
    return "; ".join(out)


def scatter(chips=("h100", "h200"), v2: bool = False):
    """Predicted against measured cycles of every build, log-log, with the y = x line and the ±10 % band; one
    marker per chip (and the not-blind v2 predictions as open markers where asked and committed)."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.6, 5.2))
    lo, hi = float("inf"), 0.0
    marks = {"h100": ("o", "#1f77b4"), "h200": ("s", "#d62728")}
    for c in chips:
        doc = blind_comparison(c)
        xs = [r["measured_cycles"] for r in doc["rows"]]
        ys = [r["predicted_cycles"] for r in doc["rows"]]
        m, col = marks.get(c, ("^", "k"))
        ax.scatter(xs, ys, marker=m, color=col, s=28, label=f"{c.upper()} blind (v1)", zorder=3)
        lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
        for r in doc["rows"]:
            if abs(r["error_cycles"]) > 0.3:
                ax.annotate(r["stage"].split("/")[-1][:3], (r["measured_cycles"], r["predicted_cycles"]),
                            fontsize=8, xytext=(4, -3), textcoords="offset points", color=col)
        d2 = _run_doc(c, V2_FILES[1]) if v2 else None
        if d2:
            ax.scatter([r["measured_cycles"] for r in d2["rows"]], [r["predicted_cycles"] for r in d2["rows"]],
                       marker=m, facecolors="none", edgecolors=col, s=44, label=f"{c.upper()} v2 (not blind)", zorder=2)
    lo, hi = lo / 1.15, hi * 1.15
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="y = x")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.85", zorder=0, label="±10 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured cycles (median of 20 flushed launches x the launch's own SM clock)")
    ax.set_ylabel("predicted cycles")
    ax.legend(fontsize=8, loc="upper left")
    meas = "; ".join(evidence.measured(blind_comparison(c)["measurement"]["device"],
                                       blind_comparison(c)["measurement"]["date"][:10]) for c in chips)
    pred = blind_comparison(chips[0])["predictions"]
    ax.set_title("Every sm90 build, predicted blind against measured\n"
                 f"{evidence.predicted('H100 / H200', pred.get('calibration_date'))}; {meas}", fontsize=8)
    fig.tight_layout()
    return fig


def phases_table(chips=("h100", "h200")) -> Table:
    """sm90/06's per-role phases (cycles per tile, consumers' averages): predicted against its TIMING run."""
    rows = []
    docs = {c: blind_comparison(c) for c in chips}
    names = list(dict.fromkeys(k for d in docs.values() for k in (d.get("phases_06") or {})))
    for ph in names:
        row = {"phase": ph}
        for c, d in docs.items():
            v = (d.get("phases_06") or {}).get(ph)
            if v:
                row[f"{c.upper()} predicted"] = f"{v['predicted']:,.0f}"
                row[f"{c.upper()} measured"] = f"{v['measured']:,.0f}"
                row[f"{c.upper()} error"] = f"{v['error']:+.1%}"
        rows.append(row)
    d0 = docs[chips[0]]
    cap = (f"sm90/06's per-role phases, cycles per tile — "
           f"{evidence.predicted('H100 / H200', d0['predictions'].get('calibration_date'))}; clock64 records of its "
           "TIMING build, " + "; ".join(evidence.measured(d['measurement']['device'], d['measurement']['date'][:10])
                                         for d in docs.values()))
    return Table(rows, cap)


def misses_table(chip: str) -> Table:
    """Every build that missed by more than 10 %: what the critical path said, what was measured instead."""
    folder, blind = RUNS[chip]
    rows = _misses.misses(blind_comparison(chip), _run_doc(chip, "predictions-sm90.json"),
                          [ROOT / b for b in blind])
    out = [{"stage": r["stage"], "error": f"{r['error']:+.0%}",
            "launch clock / 06's": "—" if r["clock_over_06"] is None else f"{r['clock_over_06']:.2f}",
            "TIMING / normal": "—" if r["timing_over_normal"] is None else f"{r['timing_over_normal']:.2f}",
            "what disagrees (measured)": r["finding"]} for r in rows]
    d = blind_comparison(chip)
    return Table(out, f"Misses beyond 10 % on the {chip.upper()}: the prediction's critical path against the blind run's "
                      f"launch clocks and per-CTA clock64 — "
                      f"{evidence.measured(d['measurement']['device'], d['measurement']['date'][:10])}; "
                      f"{evidence.predicted(d['predictions']['device'], d['predictions'].get('calibration_date'))}")


def v2_table(chips=("h100", "h200")) -> Table | None:
    """Per build, the blind (v1) error beside the error of the v2 model (made after the measurement: not blind)."""
    docs = {c: (blind_comparison(c), _run_doc(c, V2_FILES[1])) for c in chips}
    if not all(d2 for _, d2 in docs.values()):
        return None
    rows = {}
    for c, (d1, d2) in docs.items():
        e2 = {(r["stage"], r["defines"]): r for r in d2["rows"]}
        for r in d1["rows"]:
            k = (r["stage"], r["defines"])
            row = rows.setdefault(k, {"stage": r["stage"].split("/")[-1] + (f" [{r['defines']}]" if r["defines"] else "")})
            row[f"{c.upper()} v1 (blind)"] = f"{r['error_cycles']:+.1%}"
            row[f"{c.upper()} v2 (not blind)"] = f"{e2[k]['error_cycles']:+.1%}" if k in e2 else "—"
    notes = [f"{c.upper()}: v1 MAE {d1['summary']['mae']:.1%}, worst {d1['summary']['worst']:+.1%}; v2 MAE "
             f"{d2['summary']['mae']:.1%}, worst {d2['summary']['worst']:+.1%} ({d2['summary']['worst_stage'].split('/')[-1]})"
             for c, (d1, d2) in docs.items()]
    d2 = docs[chips[0]][1]
    return Table(list(rows.values()), "Error in cycles, the blind predictions (v1) beside v2, "
                 f"{d2['predictions'].get('label', 'made after the measurement: not blind')} — "
                 f"{evidence.predicted('H100 / H200', d2['predictions'].get('calibration_date'))}; measured as above",
                 notes=notes)


TARGETS = {"mae": 0.05, "worst": 0.10, "phases_06": 0.10}     # issue 30's targets for the blind predictions


def targets_table(chips=("h100", "h200")) -> Table:
    """Each target of the blind validation against what each chip's comparison reached, met or missed."""
    rows = []
    docs = {c: blind_comparison(c) for c in chips}
    for name, goal, get in (
            ("mean absolute error (cycles)", f"≤ {TARGETS['mae']:.0%}", lambda d: d["summary"]["mae"]),
            ("worst stage (cycles)", f"≤ {TARGETS['worst']:.0%}", lambda d: abs(d["summary"]["worst"])),
            ("ranking of the default builds", "exact", lambda d: d["summary"]["kendall_tau"]),
            ("sm90/06's per-role phases, worst", f"≤ {TARGETS['phases_06']:.0%}",
             lambda d: max(abs(v["error"]) for v in d["phases_06"].values()))):
        row = {"target": name, "goal": goal}
        for c, d in docs.items():
            v = get(d)
            if name.startswith("ranking"):
                row[c.upper()] = f"tau {v:.2f}: {'met' if d['summary']['ranking_exact'] else 'missed'}"
            else:
                lim = TARGETS["mae" if name.startswith("mean") else "worst" if name.startswith("worst") else "phases_06"]
                row[c.upper()] = f"{v:.1%}: {'met' if v <= lim else f'missed, {v / lim:.1f} x the target'}"
        rows.append(row)
    d0 = docs[chips[0]]
    return Table(rows, "The blind targets — " + evidence.predicted("H100 / H200", d0["predictions"].get("calibration_date"))
                 + "; " + "; ".join(evidence.measured(d["measurement"]["device"], d["measurement"]["date"][:10])
                                    for d in docs.values()))


def predict_06(chip: str = "h100"):
    """sm90/06 predicted on `chip`'s committed calibration (the blind predictions' own), at 06's launch clock."""
    cal = ROOT / RUNS[chip][0] / f"predict-calibration-{chip}.json"
    return predict(Stage("sm90/06_permuted_b"), chip, str(cal), clock="launch06")
