"""The blind rounds in the book (the chapter "Predicted, then measured"): every sm90 build predicted by the timing
model, committed, then measured on a Hopper GPU; each round's comparison read from its committed document.

    rounds_table()                     # one row per blind round: what changed, MAE, worst, tau, defines, 06
    round_scatter()                    # the newest round, predicted against measured cycles
    phase_errors_table(doc, fixed=)    # each build's per-role phases against its clock64 records
    round_line(doc), define_effects_table(doc), traffic_line(), predict_06("h200")
"""
from __future__ import annotations

import html

from .. import evidence, results
from ..facts import Table
from ..paths import ROOT
from ..predict import compare, misses as _misses, predict
from ..stage import Stage


RUNS = {   # chip -> its results folder and the blind measurement files the comparison merged (first run first)
    "h100": ("results/2026-11-27-h100", ["results/2026-11-27-h100/blind-nvidia-h100-80gb-hbm3.json",
                                         "results/2026-11-27-h100/blind-rerun/blind-nvidia-h100-80gb-hbm3.json"]),
    "h200": ("results/2026-11-27-h200", ["results/2026-11-27-h200/blind-nvidia-h200.json"]),
}
V2 = "-v2"      # the not-blind predictions and comparison, made after the measurement: predictions-sm90<V2>.json,
V2_FILES = (f"predictions-sm90{V2}.json", f"prediction-vs-measured{V2}.json")   # prediction-vs-measured<V2>.json


def _run_doc(chip: str, name: str) -> dict | None:
    p = ROOT / RUNS[chip][0] / name
    return results.load(p, named=False) if p.is_file() else None


def blind_comparison(chip: str) -> dict:
    """The committed blind comparison of `chip` (prediction-vs-measured.json)."""
    return _run_doc(chip, "prediction-vs-measured.json")


# The second blind round (H200): every sm90 build and pelib.predict.blind.VARIANTS, predicted by the model with the
# multicast, resident-cluster, window-order and traffic fixes, committed before the measurement.
ROUND2 = ROOT / "results" / "2026-12-02-h200" / "prediction-vs-measured-blind.json"


# The third (H200): the same builds and VARIANT_SETS["round3"], predicted with no constant fitted on a stage's time
# (the L2 misses counted from the schedule and the exported prefetch), committed before the measurement.
ROUND3 = ROOT / "results" / "2026-12-02-h200" / "round3" / "prediction-vs-measured-blind3.json"


# The fourth (H200): the same builds and VARIANT_SETS["round4"], the stores counted by the simulator; its
# predictions (with their DRAM and L2 bytes) committed before the measurement and the counters of the same day.
ROUND4 = ROOT / "results" / "2026-12-02-h200" / "round4" / "prediction-vs-measured-blind4.json"
TRAFFIC4 = ROOT / "results" / "2026-12-02-h200" / "round4" / "traffic-vs-ncu.json"
# Round 6's 25 new variants, their blind bytes against the same day's counters.
TRAFFIC6 = ROOT / "results" / "2026-12-03-h200" / "round6" / "traffic" / "traffic-vs-ncu.json"


# The fifth (H200): VARIANT_SETS["round5"], with the L2 prefetches counted and the L2 floor.
ROUND5 = ROOT / "results" / "2026-12-02-h200" / "round5" / "prediction-vs-measured-blind5.json"


# The sixth (H200): VARIANT_SETS["round6"], every load queueing at L2 at the kernel's own traffic, and every build's
# per-role phases recorded by the blind run.
ROUND6 = ROOT / "results" / "2026-12-03-h200" / "round6" / "prediction-vs-measured-blind6.json"

# Every blind round on the H200, in order: its comparison and what the model changed before its predictions.
ROUNDS = [
    ("1", None, "the first model, three constants fitted on sm90/06's time"),
    ("2", ROUND2, "multicast boxes read once, loads streamed by tensor, resident clusters, 07a's windows; "
                  "still three constants fitted on 06"),
    ("3", ROUND3, "nothing fitted: A's L2 misses counted on the tile schedule and the exported prefetch depth"),
    ("4", ROUND4, "the stores taken from the simulated run"),
    ("5", ROUND5, "the L2 prefetches counted; an L2 bandwidth floor from the stream probe"),
    ("6", ROUND6, "every load queues at L2 at the kernel's own L2 traffic (the stream probe's L2 chase curves)"),
]


def rounds() -> list[tuple[str, dict, str]]:
    """(round, comparison document, what changed) of every committed blind round on the H200, in order."""
    out = []
    for n, path, what in ROUNDS:
        doc = blind_comparison("h200") if path is None else (results.load(path, named=False) if path.is_file() else None)
        if doc is not None:
            out.append((n, doc, what))
    return out


def latest_round() -> tuple[str, dict, str]:
    """The newest committed blind round on the H200."""
    return rounds()[-1]


def _row06(doc: dict) -> str:
    r = next((r for r in doc["rows"] if r["stage"] == "sm90/06_permuted_b" and not r["defines"]), None)
    return "—" if r is None else f"{r['error_cycles']:+.1%}"


def rounds_table() -> Table:
    """Every blind round on the H200, one row each: what the model changed, then the errors, read from each
    round's comparison document."""
    rows = []
    for n, doc, what in rounds():
        s = doc["summary"]
        worst, stage = worst_error(doc)
        eff = (f"{s['effects_sign_right']} / {s['effects_within_half']} of {s['effects_over_3pct']}"
               if "effects_over_3pct" in s else "—")
        rows.append({"round": n, "what changed before it": what, "builds": s["stages"], "MAE": f"{s['mae']:.1%}",
                     "worst": f"{worst:+.1%} ({stage.split('/')[-1].split('_')[0]})", "tau": f"{s['kendall_tau']:.2f}",
                     "defines: sign / half": eff, "06": _row06(doc)})
    last = rounds()[-1][1]
    return Table(rows, f"The blind rounds, errors in cycles — {evidence.predicted('NVIDIA H200', last['predictions'].get('calibration_date'))}"
                       f", each committed before its measurement; measured on the H200 ({', '.join(sorted({str(d['measurement'].get('date'))[:10] for _, d, _ in rounds()}))})")


# Round 6's predictions re-made after its measurement (not blind) with the one fix that comparison found: a
# one-tile CTA's predicted phases were cut at its K loop's back edge (model.replay_timing). Cycles are unchanged.
ROUND6_V2 = ROOT / "results" / "2026-12-03-h200" / "round6" / "prediction-vs-measured-blind6-v2.json"


def round6_v2() -> dict | None:
    """Round 6's not-blind re-make (ROUND6_V2), or None before it is committed."""
    return results.load(ROUND6_V2, named=False) if ROUND6_V2.is_file() else None


def _fixed_rows(doc: dict, fixed: dict | None) -> dict:
    """The phase rows of `doc`, with those of the builds `fixed` (a not-blind comparison) names as re-made."""
    ph = dict(doc.get("phases") or {})
    if not fixed:
        return ph
    again = {(b["stage"], b["defines"]): b for b in (fixed.get("phases") or {}).get("builds", [])
             if b.get("not_blind")}
    builds = [again.get((b["stage"], b["defines"]), b) for b in ph.get("builds", [])]
    return {"builds": builds, "summary": compare.phase_summary(builds)}


def phase_errors_table(doc: dict | None = None, fixed: dict | None = None) -> Table:
    """Per stage file, the predicted per-role phases' error against its TIMING run's clock64 records (the blind
    run's phases_first), and the mean absolute error of each phase over the builds that have it. `fixed`: a
    comparison re-made after the measurement whose builds marked not_blind replace the blind rows (marked so)."""
    doc = doc or latest_round()[1]
    ph = _fixed_rows(doc, fixed)
    short = {"producer_wait": "producer waits", "tma_issue": "TMA issue", "tma_wait": "TMA waits", "kloop": "K loop",
             "tile": "tile", "epi_wait": "turn wait", "epi_phase1": "epilogue"}
    names = [p for p in short if p in (ph.get("summary") or {})]
    rows = []
    for b in ph.get("builds", []):
        if b["defines"]:
            continue
        rows.append({"stage": b["stage"].split("/")[-1].split("_")[0] + (" (not blind)" if b.get("not_blind") else ""),
                     **{short[p]: (f"{b['phases'][p]['error']:+.0%}" if p in b["phases"] else "—") for p in names}})
    rows.append({"stage": "MAE, all builds", **{short[p]: f"{ph['summary'][p]['mae']:.0%}" for p in names}})
    m = doc["measurement"]
    note = (" Rows marked not blind: re-made after the measurement, " + fixed["predictions"].get("label", "")
            if fixed else "")
    return Table(rows, "Each phase's error, predicted against the clock64 records of the stage's TIMING build (a "
                       "persistent stage's first 16 tiles, a non-persistent stage's one tile per CTA; the phases of "
                       "pelib.timing: producer_wait, tma_issue, tma_wait, kloop, tile, epi_wait, epi_phase1)." + note +
                       " — "
                       f"{evidence.predicted('NVIDIA H200', doc['predictions'].get('calibration_date'))}; "
                       f"{evidence.measured(str(m.get('device')), str(m.get('date'))[:10])}")


def _parity(ax, lo: float, hi: float, band: str, legend: int) -> None:
    """A predicted-against-measured plot's frame: log-log axes over [lo, hi], the y = x line, the ±10 % band."""
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="y = x")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color=band, zorder=0, label="±10 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured cycles (median of 20 flushed launches x the launch's own SM clock)")
    ax.set_ylabel("predicted cycles")
    ax.legend(fontsize=legend, loc="upper left")


def round_scatter(doc: dict | None = None, before: dict | None = None):
    """One blind round's predicted against measured cycles (stage files filled, variants open), the previous
    round's stage files as grey dots; log-log, the y = x line and the ±10 % band."""
    import matplotlib.pyplot as plt
    if doc is None:
        rs = rounds()
        doc, before = rs[-1][1], (rs[-2][1] if len(rs) > 1 else None)
    fig, ax = plt.subplots(figsize=(6.6, 5.0))
    pts = [(r["measured_cycles"], r["predicted_cycles"], bool(r["defines"])) for r in doc["rows"]]
    lo = min(min(x, y) for x, y, _ in pts) / 1.15
    hi = max(max(x, y) for x, y, _ in pts) * 1.15
    if before:
        ax.scatter([r["measured_cycles"] for r in before["rows"] if not r["defines"]],
                   [r["predicted_cycles"] for r in before["rows"] if not r["defines"]], s=14, color="0.6",
                   label="the round before (stage files)", zorder=2)
    ax.scatter([x for x, _, v in pts if not v], [y for _, y, v in pts if not v], s=30, color="#d62728",
               label="stage files", zorder=3)
    ax.scatter([x for x, _, v in pts if v], [y for _, y, v in pts if v], s=30, facecolors="none",
               edgecolors="#d62728", label="single-define variants", zorder=3)
    for r in doc["rows"]:
        if not r["defines"] and abs(r["error_cycles"]) > 0.25:
            ax.annotate(r["stage"].split("/")[-1].split("_")[0], (r["measured_cycles"], r["predicted_cycles"]),
                        fontsize=9, xytext=(4, -3), textcoords="offset points", color="#d62728")
        elif r["defines"] and abs(r["error_cycles"]) > 0.5:
            ax.annotate(f"{r['stage'].split('/')[-1].split('_')[0]} {r['defines']}",
                        (r["measured_cycles"], r["predicted_cycles"]), fontsize=9, xytext=(-6, 6),
                        textcoords="offset points", color="#d62728", ha="right")
    _parity(ax, lo, hi, band="0.88", legend=9)
    m = doc["measurement"]
    ax.set_title("Every sm90 build and its variants, predicted blind against measured\n"
                 f"{evidence.predicted('NVIDIA H200', doc['predictions'].get('calibration_date'))}; "
                 f"{evidence.measured(str(m.get('device')), str(m.get('date'))[:10])}", fontsize=9)
    fig.tight_layout()
    return fig


def traffic6() -> dict:
    """Round 6's variants: their predicted bytes against that day's Nsight Compute counters (TRAFFIC6)."""
    return results.load(TRAFFIC6, named=False)


def traffic4() -> dict:
    """The fourth round's predicted bytes against that day's Nsight Compute counters (TRAFFIC4)."""
    return results.load(TRAFFIC4, named=False)


def traffic_line(doc: dict | None = None) -> "Line":
    """How many stage files' predicted DRAM read, DRAM write and SM-L2 bytes lie within the tolerance of the
    counters, read from the document."""
    doc = doc or traffic4()
    s, tol = doc["summary"], doc["tolerance"]
    m = doc.get("measurement") or {}
    what = "stage files" if not any(r.get("defines") for r in doc["rows"]) else "single-define variants"
    return Line(f"Traffic of the {s['stages']} {what}, predicted, against Nsight Compute's counters of one launch "
                f"each, {evidence.measured(str(m.get('device')), str(m.get('date'))[:10])}: within {tol * 100:.0f} % "
                f"on DRAM reads {s['dram_read_within']}, on DRAM writes {s['dram_write_within']}, on the SMs' L2 "
                f"requests {s['l2_within']} (target: all {s['stages']})")


def traffic_table(doc: dict | None = None) -> Table:
    """Per stage file, the predicted and the counted GB of DRAM reads, DRAM writes and the SMs' L2 requests."""
    doc = doc or traffic4()
    rows = [{"stage": r["stage"].split("/")[-1] + (f" [{r['defines']}]" if r.get("defines") else ""),
             **{f"{k} (GB)": f"{r[k + '_predicted_GB']:.2f} / {r[k + '_measured_GB']:.2f} ({r[k + '_error']:+.0%})"
                for k in ("dram_read", "dram_write", "l2")}} for r in doc["rows"]]
    m = doc.get("measurement") or {}
    cap = (f"Bytes moved, predicted / counted (error) — {evidence.predicted('NVIDIA H200', '2026-12-02')}; "
           f"{evidence.measured(str(m.get('device')), str(m.get('date'))[:10])} by Nsight Compute "
           f"(l2: {doc['rows'][0].get('l2_counter', 'lts__t_bytes.sum') if doc['rows'] else ''})")
    return Table(rows, cap)


class Line(str):
    """A sentence a cell shows: the text itself, drawn as a wrapped paragraph on the page (not a quoted string)."""

    def _repr_html_(self) -> str:
        return f'<p class="pe-line">{html.escape(str(self))}</p>'


def round_line(doc: dict | None = None) -> str:
    """A blind round's result against the targets (default: the newest), in one line, every number read from
    the document."""
    doc = doc or latest_round()[1]
    s = doc["summary"]
    sign, stage = worst_error(doc)
    return Line(f"H200, blind, {s['stages']} builds (predicted, then measured {str(doc['measurement'].get('date'))[:10]}): "
                f"mean absolute error {s['mae']:.1%} in cycles (target 8 %), worst {sign:+.1%} ({stage.split('/')[-1]}; "
                f"target 15 %), Kendall tau {s['kendall_tau']:.2f} over the {s['ranked']} stage files (target 0.9) with "
                f"{s['inversions_over_3pct']} inversions of pairs more than 3 % apart (target 0); of the "
                f"{s['effects_over_3pct']} defines whose measured effect is 3 % or more, {s['effects_sign_right']} "
                f"predicted with the right sign and {s['effects_within_half']} within half of their size (target: all)")


def define_effects_table(doc: dict | None = None) -> Table:
    """Each variant's effect against its stage file at its defaults, measured and predicted (in cycles)."""
    doc = doc or latest_round()[1]
    yes = {True: "yes", False: "NO", None: "(under 3 %)"}
    rows = [{"variant": f"{e['stage'].split('/')[-1]} {e['defines']}", "measured": f"{e['measured_effect']:+.1%}",
             "predicted": f"{e['predicted_effect']:+.1%}", "sign right": yes[e["sign_right"]],
             "within half": yes[e["within_half"]]} for e in doc["define_effects"]]
    pred = doc.get("predictions", {})
    cap = (f"What one define does, against its stage file — {evidence.predicted(pred.get('device') or 'NVIDIA H200', pred.get('calibration_date'))}; "
           f"{evidence.measured(str(doc['measurement'].get('device')), str(doc['measurement'].get('date'))[:10])}")
    return Table(rows, cap)


def worst_error(doc: dict) -> tuple[float, str]:
    """(signed error in cycles, stage) of a comparison's worst build: the row whose absolute error is the
    summary's "worst" (the summary keeps only its size; a line printed with a sign must take the row's)."""
    r = max(doc["rows"], key=lambda r: abs(r["error_cycles"]))
    return r["error_cycles"], r["stage"]


def summary_line(chips=("h100", "h200")) -> str:
    """The blind summary of each chip in one line (mean absolute error in cycles, the worst build's signed error
    as its table row shows it, the ranking)."""
    out = []
    for c in chips:
        d = blind_comparison(c)
        s = d["summary"]
        worst, stage = worst_error(d)
        out.append(f"{c.upper()}: mean absolute error {s['mae']:.1%}, worst {worst:+.1%} "
                   f"({stage.split('/')[-1]}), Kendall tau {s['kendall_tau']:.2f} over {s['ranked']} "
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
    _parity(ax, lo, hi, band="0.85", legend=8)
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
    notes = [f"{c.upper()}: v1 MAE {d1['summary']['mae']:.1%}, worst {worst_error(d1)[0]:+.1%}; v2 MAE "
             f"{d2['summary']['mae']:.1%}, worst {worst_error(d2)[0]:+.1%} ({worst_error(d2)[1].split('/')[-1]})"
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


def predict_06(chip: str = "h200"):
    """sm90/06 predicted on `chip`'s newest measured calibration (what python -m pelib.stage ... --device predict
    uses), at 06's launch clock."""
    return predict(Stage("sm90/06_permuted_b"), chip, None, clock="launch06")
