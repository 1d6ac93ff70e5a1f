"""Predicted time in the book: the blind comparison table, a stage's predicted breakdown beside its measured
one, the B200 history and the NVFP4 ring sweep against the lab's records.

    comparison_table("results/<date>-<device>/prediction-vs-measured.json")     # the chapter's error table
    predictions_table("results/<date>-<device>/predictions-sm90.json")
    history_table(rows)                                                       # pelib.predict.blackwell.history
"""
from __future__ import annotations

import functools
import html
import json
from pathlib import Path

from .. import evidence, records
from ..facts import Table
from ..paths import ROOT
from ..predict import compare, misses as _misses, predict
from ..predict.blackwell import RING_SHAPE, ring_stage
from ..predict.price import price as _price
from ..stage import Stage
from . import protocol


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


def price(stage, gpu: str | None = None, seeds=(0, 1, 2), calibration=None) -> dict:
    """A reader's edit priced in one call (pelib.predict.price)."""
    return _price(stage, gpu, seeds, calibration)


# ---- the B200 predictions document (pelib.predict.history), read from the committed JSON -------------------

def b200_doc(path=None) -> dict:
    """The committed B200 predictions document (pelib.predict.history.committed)."""
    from ..predict import history   # the runs floor's document reader, loaded when a chapter asks
    return history.committed(path)


def _label(doc) -> str:
    return doc["meta"]["evidence"]


def _short(key: str) -> str:
    return key.split("/")[-1]


def b200_history_table(doc=None, columns=None) -> Table:
    """The lab's FP8 history on a B200, every point: predicted against recorded, the error and each step's
    sign; the fitted point marked and left out of every error. columns: the ones to show (a narrow page),
    of stage, grid, predicted ms, recorded ms, error, step rec. / pred., step sign."""
    doc = doc or b200_doc()
    out = []
    for r in doc["fp8"]:
        step = ("—" if r.get("recorded_step") is None else
                f"{r['recorded_step']:+.1%} / {r['predicted_step']:+.1%}")
        sign = {True: "right", False: "WRONG", None: "(< 9 %)"}[r.get("sign_right")] if "recorded_step" in r else "—"
        out.append({"stage": _short(r["stage"]), "grid": "persistent" if "persistent" in r["grid"] else "one tile a cluster",
                    "predicted ms": f"{r['predicted_ms']:.3f}",
                    "recorded ms": "—" if r["recorded_ms"] is None else f"{r['recorded_ms']:.3f}",
                    "error": ("fitted" if r.get("fitted") else "—" if r["error"] is None else f"{r['error']:+.1%}"),
                    "step rec. / pred.": step, "step sign": sign})
    s = doc["summary"]
    notes = [f"{s['within_10pct']} of {s['validation_points']} validation points within ±10 % (mean absolute error "
             f"{s['mae']:.1%}, worst {s['worst']:.1%} at {s['worst_point']}); signs right on "
             f"{s['steps_sign_right']} of {s['steps_9pct']} recorded steps of 9 % or more",
             *[f"{_short(k)}: {v['what']}: predicted step {v['predicted_step']:+.1%} "
               f"({'under' if v['under_2pct'] else 'NOT under'} 2 %)" for k, v in s["neutral_checks"].items()],
             *[f"fitted: {f['name']} = {f['value']} {f['unit']} ({f['source']})" for f in doc["meta"]["fitted"]]]
    if columns is not None and out and set(columns) - set(out[0]):
        raise ValueError(f"b200_history_table has no column {sorted(set(columns) - set(out[0]))}: choose from "
                         f"{list(out[0])}")
    return Table(out, f"FP8 on a B200, stage by stage — {_label(doc)}; against the lab's records (recorded, "
                      "fp8-megakernel-experiment-log.md, fp8-megakernel-w1-stall-isolation.md and "
                      "fp8-megakernel-future-proposals-F21-F28.md)", columns, notes=notes)


def b200_row(stage: str, doc=None) -> dict:
    """One stage's entry of the document (by key or short name)."""
    doc = doc or b200_doc()
    for r in doc["fp8"]:
        if stage in (r["stage"], _short(r["stage"])):
            return r
    raise KeyError(f"{stage!r} is not in the B200 history: one of {[_short(r['stage']) for r in doc['fp8']]}")


# The lab's clock64 records a stage's predicted phases are set beside (pelib.records): the 5-warp baseline's
# reconciliation (stage 08a's idea) and the F18/F19a kernel's F28 section (stage 09's).
RECORDED_PHASES = {"08a_persistent_tiles": "Reconciliation with clock64",
                   "09_persistent_megakernel": "F28: K-loop restructuring — tighter MMA dispatch"}
# recorded phase (warp) -> the predicted phase of the TIMING schema that times the same span
PHASE_OF = {("W1", "tma0_wait"): "tma_wait", ("W1", "kloop"): "kloop", ("W1", "epi_wait"): "epi_wait",
            ("W1", "tile"): "tile", ("W3", "phase1"): "epi_phase1", ("W3", "phase2b"): "epi_phase2",
            ("W3", "ml_wait"): "acc_wait"}


def b200_breakdown(stage: str, doc=None) -> Table:
    """The stage's predicted per-role phases (cycles a tile, steady state), beside the lab's clock64 record of
    the same phase where one exists (recorded; the evidence kind in each column's name)."""
    doc = doc or b200_doc()
    r = b200_row(stage, doc)
    sec = RECORDED_PHASES.get(_short(r["stage"]))
    rec = {}
    if sec:
        for p in records.phases():
            if p.source.section.startswith(sec):
                rec[PHASE_OF.get((p.warp, p.phase), p.phase)] = (p.warp, p.phase, p.cycles)
    rows = []
    for ph, cyc in r["phases"].items():
        w = rec.pop(ph, None)
        rows.append({"phase": ph, "predicted cycles": f"{cyc:,}",
                     "recorded cycles (clock64)": "—" if w is None else f"{w[2]:,} ({w[0]} {w[1]})",
                     "error": "—" if w is None else f"{cyc / w[2] - 1:+.0%}"})
    for ph, w in rec.items():
        rows.append({"phase": ph, "predicted cycles": "—", "recorded cycles (clock64)": f"{w[2]:,} ({w[0]} {w[1]})",
                     "error": "—"})
    src = (f"recorded: the lab's clock64 ({'fp8-megakernel-w1-stall-isolation.md' if '08a' in r['stage'] else 'fp8-megakernel-future-proposals-F21-F28.md'}, {sec})"
           if sec else "no clock64 record of this stage's kernel")
    return Table(rows, f"{_short(r['stage'])}: per-role phases, cycles a tile — {_label(doc)}; {src}",
                 notes=[f"critical path: {r['critical_path']}",
                        (f"{r['per_tile_cycles']:,} predicted cycles a tile in the steady state, {r['tiles']} tiles "
                         f"a cluster" if r["tiles"] > 1 else "one tile a cluster, the clusters in waves; each warp's "
                         "phases span its whole run") + f"; the grid: {r['grid']}"])


def b200_summary(stage: str, doc=None) -> str:
    """One line: the stage's predicted time against its record, and its critical path in one sentence."""
    doc = doc or b200_doc()
    r = b200_row(stage, doc)
    how = "the fitted point" if r["fitted"] else "" if r["error"] is None else f"{r['error']:+.1%}"
    rec = "" if r["recorded_ms"] is None else f" against {r['recorded_ms']:.3f} ms recorded ({how})"
    return (f"{_short(r['stage'])} on a B200: {r['predicted_ms']:.3f} ms predicted{rec}; it is "
            f"{r['critical_path']}. [{_label(doc)}]")


def b200_ring_figure(doc=None):
    """The NVFP4 ring sweep: the predicted curve with the lab's recorded points on it."""
    import matplotlib.pyplot as plt
    doc = doc or b200_doc()
    ring = doc["nvfp4_ring"]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    d = [r["stages"] for r in ring]
    ax.plot(d, [r["predicted_us"] for r in ring], "-o", color="#3b6ea8", label="predicted (" + _label(doc) + ")")
    ax.plot(d, [r["recorded_us"] for r in ring], "s", color="#c0392b", ms=8, mfc="none",
            label="recorded (nvfp4 lab log, pelib.records)")
    ax.set_xlabel("ring depth (NUM_STAGES; 1 = nvfp4/00)")
    ax.set_ylabel(f"µs ({_ring_shape()})")
    ax.set_xticks(d)
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title("NVFP4 on a B200: the ring sweep", fontsize=10)
    fig.tight_layout()
    return fig


def b200_ring_table(doc=None) -> Table:
    doc = doc or b200_doc()
    rows = [{"ring depth": r["stages"], "predicted µs": f"{r['predicted_us']:.1f}",
             "recorded µs": "—" if r["recorded_us"] is None else f"{r['recorded_us']:.1f}",
             "error": "—" if r["error"] is None else f"{r['error']:+.1%}", "critical path": r["critical_path"]}
            for r in doc["nvfp4_ring"]]
    return Table(rows, f"NVFP4 ring sweep on a B200 — {_label(doc)}; recorded: the NVFP4 lab log via pelib.records")


def hopper_error_bar(path=None) -> dict | None:
    """The blind Hopper comparison's mean absolute error (cycles) as the cards' error bar: {"mae", "worst",
    "stages", "device", "date", "path"} (default: the one pelib.views.blind_error names); None where the
    comparison is not committed."""
    from . import blind_error   # the error bar's one home; blind_error reads only committed files
    path = path or next(iter(blind_error.COMPARISONS.values()))
    p = ROOT / path
    if not p.is_file():
        return None
    d = json.loads(p.read_text())
    m = d.get("measurement") or {}
    return {**{k: d["summary"][k] for k in ("mae", "worst", "stages")}, "device": m.get("device"),
            "date": str(m.get("date") or "")[:10], "path": path}


def b200_cards_table(doc=None, bar: dict | None = None) -> Table:
    """The go/no-go cards F21-F28, each with its predicted outcome beside PENDING B200, and the model's error
    bar: the blind Hopper comparison's mean absolute error (measured), where it is committed; a predicted
    gain inside it reads "within the error bar" whatever the card's rules say."""
    doc = doc or b200_doc()
    bar = bar if bar is not None else hopper_error_bar()
    rows = []
    for c in doc["cards"]:
        if c["outcome"] == "not predicted":
            rows.append({"card": c["card"], "predicted outcome": "not predicted", "why / gain": c["why"],
                         "B200": "PENDING B200"})
            continue
        outcome = c["outcome"]
        if bar and abs(c["gain"]) <= bar["mae"]:
            outcome = f"within the error bar (rules: {outcome})"
        rows.append({"card": c["card"], "predicted outcome": outcome,
                     "why / gain": f"{c['base_ms']:.4f} -> {c['predicted_ms']:.4f} ms ({c['gain']:+.1%}); " +
                                   "; ".join(f"{r['metric'].split('.', 1)[-1]} {r['predicted']:+,} "
                                             f"({'met' if r['met'] else 'not met'}: {r['op']} {r['threshold']:g})"
                                             for r in c["rules"]) + "; " +
                                   (f"error bar ±{bar['mae']:.1%}" if bar else c["error_bar"] if isinstance(c["error_bar"], str)
                                    else f"error bar ±{c['error_bar']:.0%}"),
                     "B200": c["status"]})
    notes = ([f"error bar: the timing model's blind mean absolute error in cycles on the {bar['device']} "
               f"({bar['stages']} sm90 builds, worst {bar['worst']:.0%}; measured ({bar['device']}, {bar['date']}), "
               f"{bar['path']})"] if bar else ["error bar: pending the Hopper blind comparison"])
    return Table(rows, f"The go/no-go cards predicted — {_label(doc)}; our registered claims, beside PENDING B200",
                 notes=notes)


def b200_breakdown_figure(stage: str, doc=None):
    """The breakdown table as one chart: per phase, the predicted bar (solid) and the lab's clock64 bar
    (hatched) where one exists; each legend entry names its evidence kind."""
    import matplotlib.pyplot as plt
    doc = doc or b200_doc()
    t = b200_breakdown(stage, doc)
    num = lambda s: float(s.split(" ")[0].replace(",", "")) if s and s != "—" else 0.0     # noqa: E731
    names = [r["phase"] for r in t.rows]
    pred = [num(r["predicted cycles"]) for r in t.rows]
    rec = [num(r["recorded cycles (clock64)"]) for r in t.rows]
    fig, ax = plt.subplots(figsize=(6.8, 0.42 * len(names) + 1.2))
    y = range(len(names))
    ax.barh([i - 0.2 for i in y], pred, 0.4, color="#3b6ea8", label=_label(doc))
    if any(rec):
        ax.barh([i + 0.2 for i in y], rec, 0.4, color="white", edgecolor="#c0392b", hatch="///",
                label="recorded (the lab's clock64, pelib.records)")
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlabel("cycles a tile (steady state)")
    # below the axes: inside them the legend covered the last phases' bars and their names
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.12 - 0.3 / (0.42 * len(names) + 1.2)),
              frameon=False)
    ax.set_title(f"{_short(b200_row(stage, doc)['stage'])} on a B200: per-role phases", fontsize=10)
    fig.tight_layout()
    return fig


def _ring_shape() -> str:
    """'M=128, N=7168, K=16384': the ring sweep's shape, read from the stage's problem."""
    pb = ring_stage(2).problem(RING_SHAPE)
    return f"M={pb.m}, N={pb.n}, K={pb.k}"


@functools.lru_cache(maxsize=None)
def _b200_run(key: str, defines: tuple = (), problem: str = "full"):
    from ..predict import history   # the committed B200 calibration, the one the B200 document was predicted with
    return predict(Stage(key, dict(defines)), "b200", str(history.CALIBRATION), problem=problem)


def b200_picture(stage: str, defines: dict | None = None, problem: str = "full", ax=None):
    """The stage's predicted B200 run drawn as its protocol (pelib.views.protocol, the picture of a simulated
    or measured run): the representative cluster's waits, issues and completions, one warp of each role per
    CTA, each event at its predicted cycle. `stage`: a key ("nvfp4/01_pipelined") or an FP8 short name ("06_stages")."""
    key = stage if "/" in stage else f"fp8/{stage}"
    p = _b200_run(key, tuple(sorted((defines or {}).items())), problem)
    ev = p.events()           # the replayed cluster's events, each at its predicted cycle
    if not ev:
        raise ValueError(f"{key}: the prediction kept no replayed events to draw")
    return protocol.protocol_picture(ev, cta=None, cluster=ev[0]["cluster"], one_warp_per_role=True, ax=ax)


def b200_ring_picture(depth: int, ax=None):
    """A point of the NVFP4 ring sweep drawn in predicted cycles: nvfp4/00 (depth 1) or nvfp4/01 at that
    NUM_STAGES, on the lab log's shape (pelib.predict.blackwell.nvfp4_ring's stages)."""
    s = ring_stage(depth)
    return b200_picture(s.key, dict(s.defines), problem=RING_SHAPE, ax=ax)


def b200_ring_summary(depth: int, doc=None) -> str:
    """One line for a point of the NVFP4 ring sweep: predicted against recorded, and its critical path."""
    doc = doc or b200_doc()
    r = next((r for r in doc["nvfp4_ring"] if r["stages"] == depth), None)
    if r is None:
        raise KeyError(f"ring depth {depth} is not in the B200 document: one of {[r['stages'] for r in doc['nvfp4_ring']]}")
    rec = "" if r["recorded_us"] is None else f" against {r['recorded_us']:.1f} µs recorded ({r['error']:+.1%})"
    return (f"{r['stage']} on a B200 ({_ring_shape()}): {r['predicted_us']:.1f} µs predicted{rec}; it is "
            f"{r['critical_path']}. [{_label(doc)}]")


def b200_sweep_figure(stage: str, doc=None):
    """A FP8 sweep (NUM_STAGES of 06, NUM_EPI_WARPS of 05): the predicted curve, the recorded points on it."""
    import matplotlib.pyplot as plt
    doc = doc or b200_doc()
    rows = [r for r in doc["fp8_sweeps"] if stage in (r["stage"], _short(r["stage"]))]
    if not rows:
        raise KeyError(f"{stage!r} has no sweep in the B200 document: one of "
                       f"{sorted({_short(r['stage']) for r in doc['fp8_sweeps']})}")
    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    x = [r["value"] for r in rows]
    ax.plot(x, [r["predicted_ms"] for r in rows], "-o", color="#3b6ea8", label=_label(doc))
    rx = [r["value"] for r in rows if r["recorded_ms"]]
    ax.plot(rx, [r["recorded_ms"] for r in rows if r["recorded_ms"]], "s", ms=8, mfc="none", color="#c0392b",
            label="recorded (fp8-megakernel-experiment-log.md)")
    ax.set_xticks(x)
    ax.set_xlabel(rows[0]["define"])
    ax.set_ylabel("ms (full problem)")
    ax.set_ylim(0, max(max(r["predicted_ms"] for r in rows), max(r["recorded_ms"] or 0 for r in rows)) * 1.15)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{_short(rows[0]['stage'])} on a B200: the {rows[0]['define']} sweep", fontsize=10)
    fig.tight_layout()
    return fig


def price_table(out: dict | None = None, doc=None) -> Table:
    """A priced edit (pelib.predict.price's answer; default: the committed example) as one table: compiled,
    simulated on each seed, predicted."""
    if out is None:
        doc = doc or b200_doc()
        out = doc["price_example"]
    c = out["compiled"]
    rows = [{"step": "compiled", "result": f"{c.get('registers')} registers, {c.get('spills (B)')} B spilled, "
                                            f"{c.get('smem (B)'):,} B shared memory"}]
    rows += [{"step": f"simulated, seed {v['seed']}", "result": ("verified; " if v["ok"] else "FAILED; ") + v["summary"]}
             for v in out["simulated"]]
    if out.get("ms"):
        rows.append({"step": f"predicted on {out['gpu'].upper()}", "result": f"{out['ms']:.4f} ms; {out['critical_path']}"})
        rows.append({"step": "per-role phases (cycles a tile)",
                     "result": ", ".join(f"{k} {v:,}" for k, v in out["phases"].items())})
    else:
        rows.append({"step": "predicted", "result": out["predicted"]})
    return Table(rows, f"{out['stage']} priced in one call — compiled, simulated, {out.get('evidence', 'predicted')}")


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
        doc = blind_comparison("h200") if path is None else (json.loads(path.read_text()) if path.is_file() else None)
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
    return json.loads(ROUND6_V2.read_text()) if ROUND6_V2.is_file() else None


def _fixed_rows(doc: dict, fixed: dict | None) -> dict:
    """The phase rows of `doc`, with those of the builds `fixed` (a not-blind comparison) names as re-made."""
    ph = dict(doc.get("phases") or {})
    if not fixed:
        return ph
    again = {(b["stage"], b["defines"]): b for b in (fixed.get("phases") or {}).get("builds", [])
             if b.get("not_blind")}
    builds = [again.get((b["stage"], b["defines"]), b) for b in ph.get("builds", [])]
    per = {}
    for b in builds:
        for name, v in b["phases"].items():
            per.setdefault(name, []).append(abs(v["error"]))
    return {"builds": builds, "summary": {k: {"builds": len(v), "mae": round(sum(v) / len(v), 4)}
                                          for k, v in sorted(per.items())}}


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


def round2() -> dict:
    """The second blind round's comparison document (ROUND2)."""
    return json.loads(ROUND2.read_text())


def round3() -> dict:
    """The third blind round's comparison document (ROUND3)."""
    return json.loads(ROUND3.read_text())


def round4() -> dict:
    """The fourth blind round's comparison document (ROUND4)."""
    return json.loads(ROUND4.read_text())


def round5() -> dict:
    """The fifth blind round's comparison document (ROUND5)."""
    return json.loads(ROUND5.read_text())


def traffic4() -> dict:
    """The fourth round's predicted bytes against that day's Nsight Compute counters (TRAFFIC4)."""
    return json.loads(TRAFFIC4.read_text())


def traffic_line(doc: dict | None = None) -> "Line":
    """How many stage files' predicted DRAM read, DRAM write and SM-L2 bytes lie within the tolerance of the
    counters, read from the document."""
    doc = doc or traffic4()
    s, tol = doc["summary"], doc["tolerance"]
    m = doc.get("measurement") or {}
    return Line(f"Traffic of the {s['stages']} stage files, predicted, against Nsight Compute's counters of one launch "
                f"each, {evidence.measured(str(m.get('device')), str(m.get('date'))[:10])}: within {tol * 100:.0f} % "
                f"on DRAM reads {s['dram_read_within']}, on DRAM writes {s['dram_write_within']}, on the SMs' L2 "
                f"requests {s['l2_within']} (target: all {s['stages']})")


def traffic_table(doc: dict | None = None) -> Table:
    """Per stage file, the predicted and the counted GB of DRAM reads, DRAM writes and the SMs' L2 requests."""
    doc = doc or traffic4()
    rows = [{"stage": r["stage"].split("/")[-1],
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
    """A blind round's result against the targets (default: the second), in one line, every number read from
    the document."""
    doc = doc or round2()
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
    doc = doc or round2()
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
