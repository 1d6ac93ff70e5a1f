"""Predicted time in the book: the blind comparison table, a stage's predicted breakdown beside its measured
one, the B200 history and the NVFP4 ring sweep against the lab's records.

    comparison_table("results/<date>-<device>/prediction-vs-measured.json")     # the chapter's error table
    predictions_table("results/<date>-<device>/predictions-sm90.json")
    history_table(rows)                                                       # pelib.predict.blackwell.history
"""
from __future__ import annotations

import functools

from .. import evidence, records, results
from ..facts import Table
from ..paths import ROOT
from ..predict import compare, predict
from ..predict.blackwell import RING_SHAPE, ring_stage
from ..predict.price import price as _price
from ..stage import Stage
from . import protocol


def _doc(source) -> dict:
    return source if isinstance(source, dict) else results.load(source, named=False)


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
    d = results.load(p, named=False)
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
