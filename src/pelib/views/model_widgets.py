"""Figures and the ipywidgets control of the pipeline-equilibrium model (pelib.models.pipeline); all modelled.

The widget sweeps stages, epilogue warps, the Phase 1 and K-loop deltas (and the TMEM-bandwidth
assumption); the rendered book has no live kernel, so `equilibrium_widget` shows a static table and a
speed-up map first and the live controls under them.
"""
from __future__ import annotations

from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

from pelib.facts import Table
from pelib.models import pipeline as model
from pelib.views import widgets

_COL = {"epi_wait": "#c0392b", "tma0_wait": "#e67e22", "kloop": "#2980b9", "ml_wait": "#95a5a6",
        "phase1": "#27ae60", "phase2b": "#8e44ad"}
TITLE_TAG = "modelled (pelib.models.pipeline, calibrated on recorded clock64 phases)"


def timeline_figure(pred: model.Outcome | None = None, tiles: int = 4, ax=None):
    """A Gantt chart of W1 and W3 over a few steady-state tiles, with the release of each tile."""
    if pred is None or pred.trace is None:
        s = pred.scenario if pred is not None else model.scenario_of("A")
        p = pred.params if pred is not None else model.default_params()
        pred = model.simulate(s, p, trace=True)
    tr = pred.trace
    n = len(tr["kend"])
    i0 = n - tiles - 1
    t0 = tr["kend"][i0 - 1]
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.8, 3.3))
    seen = set()

    def bar(y, a, b, key, label):
        if b - a <= 0:
            return
        ax.barh(y, b - a, left=a - t0, color=_COL[key], edgecolor="white", height=0.6,
                label=None if key in seen else label)
        seen.add(key)

    p2b = pred.scenario.phase2b if pred.scenario.epi_warps == 4 else pred.phase2b
    for i in range(i0, n):
        ready = tr["kend"][i - 1]
        bar(1, ready, ready + tr["epi_wait"][i], "epi_wait", "W1 epilogue-barrier wait")
        bar(1, ready + tr["epi_wait"][i], tr["kstart"][i], "tma0_wait", "W1 TMA stage-0 wait")
        bar(1, tr["kstart"][i], tr["kend"][i], "kloop", "W1 K-loop")
        s = tr["p1start_w3"][i]
        bar(0, s - tr["ml_wait_w3"][i], s, "ml_wait", "W3 MMA-done wait")
        bar(0, s, s + tr["p1_w3"][i], "phase1", "W3 Phase 1")
        bar(0, s + tr["p1_w3"][i], s + tr["p1_w3"][i] + p2b, "phase2b", "W3 Phase 2B")
        rel = s + tr["p1_w3"][i] + tr["release"][i]
        ax.plot([rel - t0] * 2, [-0.4, 1.4], color="k", lw=0.8, ls=":")
        ax.text(rel - t0, 1.45, f"release {i - i0}", fontsize=7, ha="center")
        ax.text((tr["kstart"][i] + tr["kend"][i]) / 2 - t0, 1, f"tile {i - i0}", fontsize=7, ha="center",
                va="center", color="white")
    ax.set_yticks([0, 1])
    ax.set_yticklabels(["W3 (epilogue)", "W1 (MMA)"])
    ax.set_xlim(left=0)
    ax.set_xlabel("cycles")
    ax.set_ylim(-0.5, 1.75)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, frameon=False)
    ax.set_title(f"Steady state: tile {pred.tile:,.0f} cycles, epi_wait {pred.epi_wait:,.0f}, "
                 f"TMA0 {pred.tma0_wait:,.0f}, W3 ml_wait {pred.ml_wait:,.0f}\n{TITLE_TAG}; dotted: a tile's "
                 "accumulator released (slowest of 2 x 4 epilogue warps), reused two tiles later", fontsize=8)
    if fig is not None:
        fig.tight_layout()
    return fig or ax.figure


def calibration_figure(report: model.CalibrationReport | None = None):
    """Recorded vs modelled waits at the three recorded points (bars), with the ±10 % band."""
    report = report or model.calibration_report()
    rows = [r for r in report.rows if r.quantity != "tile"]
    fig, ax = plt.subplots(figsize=(10, 3.2))
    x = np.arange(len(rows))
    rec = [r.recorded for r in rows]
    mod = [r.modelled for r in rows]
    ax.bar(x - 0.2, rec, 0.4, label="recorded (lab notes)", color="#7f8c8d")
    ax.bar(x + 0.2, mod, 0.4, label="modelled (pelib.models.pipeline)", color="#2980b9")
    ax.errorbar(x - 0.2, rec, yerr=[0.1 * v for v in rec], fmt="none", ecolor="k", capsize=3, lw=0.8,
                label="±10 % of recorded")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{r.point}\n{r.quantity}" + ("\n(derived)" if r.kind == "derived" else "") for r in rows],
                       fontsize=7)
    ax.set_ylabel("cycles per tile")
    ax.legend(fontsize=7, frameon=False)
    ax.set_title(f"Calibration on point {report.params.calibrated_on}: recorded vs modelled waits", fontsize=9)
    fig.tight_layout()
    return fig


def speedup_map(phase1_deltas=range(-400, 201, 50), kloop_deltas=range(-400, 201, 50), params=None, **structure):
    """Modelled speed-up over (Phase 1 delta, K-loop delta), the F22/F28 points, and the linear rule's break-even."""
    base = model.outcome(params=params, **structure) if structure else model.outcome(params=params)
    ps, ks = list(phase1_deltas), list(kloop_deltas)
    grid = np.array([[base.tile / model.outcome(dk, dp, params=params, **structure).tile for dk in ks] for dp in ps])
    fig, ax = plt.subplots(figsize=(6.4, 5))
    im = ax.imshow(grid, origin="lower", cmap="RdYlGn", vmin=0.94, vmax=1.06, aspect="auto",
                   extent=[ks[0] - 25, ks[-1] + 25, ps[0] - 25, ps[-1] + 25])
    cs = ax.contour(ks, ps, grid, levels=[0.98, 1.0, 1.02, 1.04], colors="k", linewidths=0.7)
    ax.clabel(cs, fmt="%.2fx", fontsize=7)
    kk = np.array([ks[0], ks[-1]], dtype=float)
    # The rule: tile unchanged when dK + 4.1 (dP1 - dK) = 0, i.e. dP1 = dK (1 - 1/4.1).
    ax.plot(kk, kk * (1 - 1 / model.LINEAR_AMPLIFICATION), "b--", lw=1,
            label="linear rule (recorded): no change on this line,\nslower above it")
    for (dk, dp, lab) in ((0, -200, "F22 -200"), (-300, 0, "F28 -300"), (-300, -200, "F22+F28")):
        ax.plot(dk, dp, "ko", ms=4)
        ax.annotate(lab, (dk, dp), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("K-loop delta (cycles)")
    ax.set_ylabel("Phase 1 delta (cycles)")
    ax.set_xlim(ks[0] - 25, ks[-1] + 25)
    ax.set_ylim(ps[0] - 25, ps[-1] + 25)
    fig.colorbar(im, ax=ax, label="per-tile speed-up (modelled)")
    ax.legend(fontsize=6.5, loc="upper left", frameon=False)
    ax.set_title(f"Speed-up over the recorded tile — {TITLE_TAG.split(' (')[0]}", fontsize=9)
    fig.tight_layout()
    return fig


def render(stages: int = 4, epi_warps: int = 4, phase1_delta: float = 0.0, kloop_delta: float = 0.0,
           tmem_share: float = 0.5):
    """One widget state: the outcome as a table row and its timeline."""
    p = model.default_params()
    if tmem_share != p.tmem_share:
        p = replace(p, tmem_share=tmem_share)
    base = model.outcome(params=p)
    pr = model.outcome(kloop_delta, phase1_delta, stages=stages, epi_warps=epi_warps, params=p, trace=True)
    row = pr.row("this setting")
    row["speed-up"] = f"{pr.speedup(base):.3f}x"
    row["SMEM (B)"] = pr.smem_bytes
    row["SMEM fits"] = "yes" if pr.smem_fits else "NO"
    rows = [base.row("recorded structure (4 stages, 4 warps)"), row]
    rows[0]["speed-up"] = "1.000x"
    t = Table(rows, "Predicted per-tile time and waits (cycles) — modelled")
    notes = "\n".join(pr.notes)
    return t, timeline_figure(pr), notes


def static_table(params=None):
    """The widget's static fallback: a grid of structures and deltas."""
    rows = model.sweep_table(stages=(3, 4, 5), epi_warps=(4, 8), phase1_deltas=(0, -200),
                             kloop_deltas=(0, -300), params=params)
    return Table(rows, "Model sweep (static fallback of the widget) — modelled; "
                       "8 warps and 5 stages exceed the SMEM budget")


# The equilibrium widget's controls: structure (the model offers what stage 09 can be built with; its SMEM
# comes from the kernel's exports) and the deltas and assumption it projects.
CONTROLS = {"stages": [2, 3, 4, 5, 6], "epi_warps": [2, 3, 4, 5, 6, 8],
            "phase1_delta": list(range(-600, 301, 25)), "kloop_delta": list(range(-600, 301, 25)),
            "tmem_share": [round(0.1 * i, 1) for i in range(11)]}
DEFAULTS = {"stages": 4, "epi_warps": 4, "phase1_delta": 0, "kloop_delta": 0, "tmem_share": 0.5}
# The built book's offline view: stages x these epilogue warps precomputed, the rest held at DEFAULTS.
OFFLINE = {"epi_warps": [2, 4, 8]}


def equilibrium_widget(live: bool = True, static: bool = True, columns=None):
    """The model's widget: one slider per control (pelib.views.widgets.sweep_grid), the outcome's table,
    notes and timeline for the chosen values; above it, the static table. columns: the outcome table's
    columns (default: all of them).

    Each control takes only its options in CONTROLS: stages 2-6, epi_warps 2, 3, 4, 5, 6 or 8, phase1_delta
    and kloop_delta -600..300 in steps of 25, tmem_share 0.0..1.0 in steps of 0.1. Set them from code with
    w.select(stages=5, ...), which refuses any other value and lists the options; w.widgets[name] are the raw
    ipywidgets sliders, whose own TraitError ('Invalid selection: value not found') answers a value they lack."""
    def show(**v):
        table, fig, notes = render(**v)
        if columns:
            table.columns = list(columns)
        return [table, notes, fig] if notes else [table, fig]

    def fallback():   # the speed-up map has its own cell in the chapter; the table is the fallback
        return static_table()
    return widgets.sweep_grid(CONTROLS, show, static=fallback if static else None, values=DEFAULTS, live=live,
                              offline=OFFLINE)


def tmem_share_table(shares=(0.0, 0.25, 0.5, 0.75, 1.0), epi_warps=(2, 4, 8)):
    """How the TMEM-share assumption moves the warp-count outcomes (F23's fail-fast ratio is 2 - s)."""
    p0 = model.default_params()
    rows = []
    for s in shares:
        p = replace(p0, tmem_share=s)
        base = model.outcome(params=p)
        row = {"TMEM share s": s, "2-warp / 4-warp Phase 1": round(2 - s, 2),
               "F23 aborts (>= 1.8)": "yes" if 2 - s >= 1.8 else "no"}
        for e in epi_warps:
            pr = model.outcome(epi_warps=e, params=p)
            row[f"{e} warps: speed-up"] = f"{pr.speedup(base):.3f}x" + ("" if pr.feasible else " *")
        rows.append(row)
    return Table(rows, "Epilogue warps under the TMEM-share assumption (modelled; * = lanes unreachable)")


def tmem_share_sweep(live: bool = True):
    """A pelib.views.widgets sweep over the TMEM-share assumption, with tmem_share_table as its static part."""
    def one(s):
        return tmem_share_table(shares=(s,))

    return widgets.sweep([0.0, 0.25, 0.5, 0.75, 1.0], one, static=tmem_share_table,
                         description="TMEM share s", value=0.5, live=live)
