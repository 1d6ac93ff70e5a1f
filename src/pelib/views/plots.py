"""Plots of the book (matplotlib only); every title or legend names its evidence kind."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Iterable

import textwrap

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from .. import evidence as _evidence
from .. import gonogo, problems, records, results, sol
from ..isa import limits as _limits
from ..facts import Table
from ..stage import all_stages

KINDS = _evidence.KINDS

_VERDICT_COLOR = {"REJECTED": "#c0392b", "IMPOSSIBLE": "#7f8c8d", "REPLACED": "#e67e22"}
_STATUS_COLOR = {"GO": "#27ae60", "NO-GO": "#c0392b", "ABORT": "#7f8c8d", "PENDING": "#f1c40f"}
_PHASE_COLORS = plt.get_cmap("tab10").colors


def evidence_label(kind: str, source: str | None = None) -> str:
    """'recorded (<note>.md)', 'measured (B200, 2026-03-01)', 'modelled', 'compiled' (pelib.evidence.label)."""
    return _evidence.label(kind, source)


def _notes(sources: Iterable) -> str:
    """Unique note names, in order, joined for a title."""
    seen = []
    for s in sources:
        n = getattr(s, "note", s)
        if n not in seen:
            seen.append(n)
    return "; ".join(seen)


# ---------------------------------------------------------------------------------------------
# History and experiments
# ---------------------------------------------------------------------------------------------

def waterfall(include_later: bool = True):
    """ms and TFLOPS per commit of the FP8 history, later states, and the two cuBLAS lines."""
    hist = records.history()
    later = records.later_states() if include_later else []
    refs = records.cublas()[:2]
    labels = [h.commit for h in hist] + [s.state.split(" (")[0] for s in later]
    ms = [h.ms for h in hist] + [s.ms for s in later]
    tf = [h.tflops for h in hist] + [s.tflops for s in later]
    approx = [h.approx for h in hist] + [False] * len(later)
    x = range(len(labels))

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, gridspec_kw={"hspace": 0.08})
    for i in x:
        if tf[i] is not None:
            a1.bar(i, tf[i], color="#2e86c1" if i < len(hist) else "#8e44ad", hatch="//" if approx[i] else None,
                   edgecolor="white")
            a1.text(i, tf[i], f"{'~' if approx[i] else ''}{tf[i]:g}", ha="center", va="bottom", fontsize=7)
    a1.axhline(refs[0].tflops, color="k", ls="--", lw=1)
    a1.text(len(labels) - 0.5, refs[0].tflops, f"cuBLAS GEMM only {refs[0].tflops:g}", ha="right", va="bottom", fontsize=7)
    a1.set_ylabel("TFLOPS (2·M·N·K)")
    pts = [(i, v) for i, v in zip(x, ms) if v is not None]
    a2.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="#c0392b")
    for i, v in pts:
        a2.text(i, v, f"{v:.3f}", ha="center", va="bottom", fontsize=7)
    a2.axhline(refs[0].ms, color="k", ls="--", lw=1, label=f"cuBLAS GEMM only {refs[0].ms} ms")
    a2.axhline(refs[1].ms, color="gray", ls=":", lw=1.2, label=f"cuBLAS + unfused pos_embed {refs[1].ms} ms")
    a2.set_ylabel("ms (fused, end to end)")
    a2.set_ylim(0, max(v for _, v in pts + [(0, refs[1].ms)]) * 1.15)
    a2.set_xticks(list(x))
    a2.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
    if later:
        for a in (a1, a2):
            a.axvline(len(hist) - 0.5, color="gray", lw=0.8)
    a2.legend(fontsize=7, loc="lower left")
    src = _notes([hist[0].source] + [s.source for s in later] + [r.source for r in refs])
    a1.set_title(f"FP8 patch-embed megakernel, history (hatched = '~' value; blank = not given)\n"
                 f"{evidence_label('recorded', src)}", fontsize=9)
    return fig


def failed_experiments():
    """F1-F9: change in time against each experiment's own baseline, coloured by verdict."""
    exps = records.experiments()
    fig, ax = plt.subplots(figsize=(7.8, 6.2))
    y = list(range(len(exps)))[::-1]
    for yi, e in zip(y, exps):
        key = next((k for k in _VERDICT_COLOR if e.verdict.upper().startswith(k)), None)
        color = _VERDICT_COLOR.get(key, "#27ae60")
        if e.baseline_ms and e.result_ms:
            pct = 100 * (e.result_ms / e.baseline_ms - 1)
            ax.barh(yi, pct, color=color)
            rng = f"{e.result_range[0]}-{e.result_range[1]}" if e.result_range else f"{e.result_ms:g}"
            ax.text(pct, yi, f" {e.baseline_ms:g} -> {rng} ms", va="center", fontsize=7,
                    ha="left" if pct >= 0 else "right")
        elif "baseline_tflops" in e.extra:
            ax.text(0, yi, f" ~{e.extra['baseline_tflops']} -> ~{e.extra['result_tflops']} TFLOPS (replaced)",
                    va="center", fontsize=7, color=color)
        else:
            ax.text(0, yi, " not run: " + textwrap.fill(e.reason, 48), va="center", fontsize=7, color=color)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_ylim(-0.8, len(exps) - 0.4)
    ax.set_yticks(y)
    ax.set_yticklabels([textwrap.fill(f"{e.id} {e.title}", 34) + f"\n[{e.verdict.split(' (')[0].split(';')[0]}]"
                        for e in exps], fontsize=7.5)
    ax.set_xlabel("time change vs the experiment's baseline (%), negative = faster")
    lo, hi = ax.get_xlim()
    ax.set_xlim(min(lo, -10) * 1.6, max(hi, 40) * 1.6)
    ax.set_title(f"FP8 experiments F1-F9\n{evidence_label('recorded', exps[0].source.note)}", fontsize=9)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Timing, SMEM, SOL
# ---------------------------------------------------------------------------------------------

def _as_nested(data) -> dict:
    """warp -> phase -> cycles from a dict of dicts or a DataFrame-like (warps as index)."""
    if hasattr(data, "to_dict") and not isinstance(data, Mapping):
        return {str(k): dict(v) for k, v in data.to_dict(orient="index").items()}
    if not isinstance(data, Mapping):
        raise TypeError("phase_bars needs a mapping warp -> {phase: cycles} or a DataFrame-like with .to_dict")
    return {str(k): dict(v) for k, v in data.items()}


def phase_bars(data, evidence: str, source: str | None = None, title: str = "Per-warp phase timing",
               phases: list | None = None, unit: str = "cycles", ax=None):
    """Stacked horizontal bars: one bar per warp, one segment per phase (generic; pelib.timing feeds it)."""
    label = evidence_label(evidence, source)
    nested = _as_nested(data)
    if not nested:
        raise ValueError("phase_bars: no warps to draw")
    order = phases or list(dict.fromkeys(p for v in nested.values() for p in v))
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 0.55 * len(nested) + 1.8))
    warps = list(nested)
    seen: set = set()
    for yi, w in enumerate(warps[::-1]):
        left = 0.0
        for j, p in enumerate(order):
            v = nested[w].get(p)
            if not v:
                continue
            ax.barh(yi, v, left=left, color=_PHASE_COLORS[j % len(_PHASE_COLORS)], edgecolor="white",
                    label=None if p in seen else p)
            seen.add(p)
            if v > 0.06 * max(sum(x for x in d.values() if x) for d in nested.values()):
                ax.text(left + v / 2, yi, f"{v:,.0f}", ha="center", va="center", fontsize=7, color="white")
            left += v
    ax.set_yticks(range(len(warps)))
    ax.set_yticklabels(warps[::-1])
    ax.set_xlabel(unit)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5),
              title=evidence, title_fontsize=7, frameon=False)
    ax.set_title(f"{title}\n{label}", fontsize=9)
    if fig is not None:
        fig.tight_layout()
    return fig or ax.figure


def clock64_phase_bars():
    """The lab notes' clock64 tile: W1 (TMA wait, K-loop, epilogue wait) and W3's epilogue phases."""
    rec = records.w1_reconciliation()
    data = {"W1 (MMA)": {"TMA stage-0 wait": rec["W1"]["tma0_wait"], "K-loop": rec["W1"]["kloop"],
                         "epilogue-barrier wait": rec["W1"]["epi_wait"]},
            "W3 (epilogue)": {"MMA-done wait": rec["W3"]["ml_wait"], "Phase 1": rec["W3"]["phase1"],
                              "Phase 2B": rec["W3"]["phase2b"]}}
    return phase_bars(data, "recorded", "fp8-megakernel-w1-stall-isolation.md",
                      title="clock64 per tile, 5-warp baseline")


def f25_bars():
    """F25: Phase 1 avg and p95 per epilogue warp."""
    w = records.f25_warps()
    data = {x.warp: {"Phase 1 avg": x.avg, "p95 - avg": x.p95 - x.avg} for x in w}
    return phase_bars(data, "recorded", w[0].source.note, title="F25: Phase 1 per epilogue warp (timing build)")


def smem_budget_bar(budget=None):
    """The recorded SMEM budget as one stacked bar against the per-block limit (pelib.isa.limits, the
    constant every stage is checked against); any bytes of the note's total no component explains
    are shown apart."""
    b = budget or records.smem_budget()
    limit = _limits.SMEM_LIMIT
    fig, ax = plt.subplots(figsize=(7.6, 3.0))
    left = 0
    for j, c in enumerate(b.components):
        ax.barh(0, c.bytes, left=left, color=_PHASE_COLORS[j], edgecolor="white", label=f"{c.name}: {c.bytes:,} B")
        left += c.bytes
    if b.unaccounted:
        ax.barh(0, b.unaccounted, left=left, color="none", edgecolor="red", hatch="xx",
                label=f"unaccounted in the note's total: {b.unaccounted:,} B")
    ax.axvline(b.total, color="k", lw=1)
    ax.text(b.total, 0.48, f"total {b.total:,} ", ha="right", va="bottom", fontsize=8)
    ax.axvline(limit, color="red", ls="--", lw=1)
    ax.text(limit, 0.62, f"{_limits.SMEM_LIMIT_LABEL}\nheadroom {limit - b.total:,} B ", ha="right",
            va="bottom", fontsize=8, color="red")
    ax.set_xlim(0, limit * 1.02)
    ax.set_ylim(-0.6, 1.0)
    ax.set_yticks([])
    ax.set_xlabel("bytes of shared memory per CTA")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.3), ncol=2, frameon=False)
    ax.set_title(f"SMEM budget ({b.state})\n{evidence_label('recorded', b.source.note)}; "
                 "limit: common/limits.cuh", fontsize=9)
    fig.tight_layout()
    return fig


def sol_bars(gpus=None, recorded: bool = True):
    """Speed-of-light floors (modelled) per lab problem and GPU, with the notes' best times (recorded)."""
    gpus = gpus or sol.GPUS
    probs = sol.lab_problems()
    fig, axes = plt.subplots(1, len(probs), figsize=(3.0 * len(probs), 3.6))
    best = {"siglip2": records.history()[-1].ms * 1e3}
    sweep = records.nvfp4_stage_sweep()
    best.update({k: sweep[k][5] for k in records.NVFP4_SHAPES})
    for ax, p in zip(axes, probs):
        floors = [sol.floor(p, g) for g in gpus]
        for i, f in enumerate(floors):
            if f.t_floor_s is None:
                ax.text(i, 0, "no FP4\npath", ha="center", va="bottom", fontsize=7)
                continue
            ax.bar(i, f.t_floor_s * 1e6, color="#5dade2", edgecolor="white",
                   label="floor (modelled)" if i == 0 else None)
            ax.text(i, f.t_floor_s * 1e6, f"{f.t_floor_s * 1e6:.3g}\n{f.bound[:3]}", ha="center", va="bottom", fontsize=7)
        if recorded and p.name in best:
            ax.axhline(best[p.name], color="#c0392b", ls="--", lw=1, label="best time on B200 (recorded)")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
        ax.set_xticks(range(len(gpus)))
        ax.set_xticklabels(gpus, fontsize=7)
        ax.set_title(f"{p.name}\nM,N,K={p.m},{p.n},{p.k}", fontsize=8)
        ax.set_ylabel("us")
    axes[0].legend(fontsize=6, loc="upper left", framealpha=0.9)
    src = "fp8-megakernel-experiment-log.md; nvfp4-gemm-optimization-log.md"
    fig.suptitle(f"Speed of light: {evidence_label('modelled')} floors = max(FLOPs/peak, bytes/bandwidth); "
                 f"lines {evidence_label('recorded', src)}", fontsize=8)
    fig.tight_layout()
    return fig


def roofline(gpu: str = "B200", precision: str = "fp8", points: Mapping | None = None):
    """Roofline of one GPU at one precision with the lab problems placed at their intensity (modelled)."""
    import numpy as np


    g = sol.spec(gpu)
    peak = g.peak_tflops(precision)
    if peak is None:
        raise ValueError(f"{gpu} has no {precision} Tensor Core path")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    i = np.logspace(0, 4.5, 200)
    ax.loglog(i, np.minimum(peak, i * g.hbm_tb_s), color="k", label=f"{gpu} {precision}: {peak:g} TFLOPS, {g.hbm_tb_s} TB/s")
    for p in sol.lab_problems():
        if p.precision != precision:
            continue
        f = sol.floor(p, g)
        ax.plot(f.intensity, p.flops / f.t_floor_s / 1e12, "o", label=f"{p.name} floor")
    for name, (intensity, tflops) in (points or {}).items():
        ax.plot(intensity, tflops, "s", label=name)
    ax.set_xlabel("FLOPs per byte of minimum traffic")
    ax.set_ylabel("TFLOPS")
    ax.legend(fontsize=7)
    ax.set_title(f"Roofline, {evidence_label('modelled')} (datasheet numbers)", fontsize=9)
    fig.tight_layout()
    return fig


class Position(str):
    """Where a problem sits on a GPU's roofline, in one sentence computed from pelib.sol (modelled)."""

    def _repr_html_(self) -> str:
        import html

        return f'<div class="pe-note">{html.escape(self)}</div>'


def roofline_position(problem=None, gpu: str = "B200", near: float = 2.0) -> Position:
    """The problem's intensity against the GPU's ridge (peak FLOPs over bandwidth) and its two floors: 'near
    the ridge' when the intensity is within a factor `near` of the ridge, else left (memory-bound) or right
    (compute-bound) of it. Every number is pelib.sol's (datasheet arithmetic: modelled)."""
    p = problem or problems.patch_embed("siglip2")
    f = sol.floor(p, sol.spec(gpu))
    ridge = f.peak_tflops * 1e12 / (f.bw_tb_s * 1e12)
    ratio = f.intensity / ridge
    where = ("near the ridge" if 1 / near <= ratio <= near else
             "left of the ridge (memory-bound)" if ratio < 1 else "right of the ridge (compute-bound)")
    lead = "memory" if f.t_memory_s >= f.t_compute_s else "compute"
    gap = abs(f.t_memory_s - f.t_compute_s) / min(f.t_memory_s, f.t_compute_s)
    return Position(f"{p.name} on the {gpu}: {f.intensity:,.0f} FLOP per byte of minimum traffic against a ridge "
                    f"of {ridge:,.0f} ({ratio:.2f} of it): {where}. Compute floor {f.t_compute_s * 1e6:,.0f} µs, "
                    f"memory floor {f.t_memory_s * 1e6:,.0f} µs: the {lead} floor is the larger, by {gap:.0%} "
                    f"({evidence_label('modelled')}, datasheet peak and bandwidth).")


def stage_sweep():
    """NVFP4 time vs num_ab_stage for the three shapes, with the 6-stage and adaptive points."""
    sweep = records.nvfp4_stage_sweep()
    extra = [t for t in records.nvfp4_stage_times() if t.table in ("additional", "adaptive")]
    sol_us = records.nvfp4_sol_us()
    fig, ax = plt.subplots(figsize=(7, 4))
    for j, (shape, d) in enumerate(sweep.items()):
        c = _PHASE_COLORS[j]
        st = sorted(d)
        ax.plot(st, [d[s] for s in st], "o-", color=c, label=f"{shape} (per-optimization tables)")
        for t in extra:
            if t.shape == shape:
                ax.plot(t.stages + (0.08 if t.table == "adaptive" else -0.08), t.us, "x" if t.table == "adaptive" else "^",
                        color=c, ms=6)
        ax.axhline(sol_us[shape], color=c, ls=":", lw=0.8)
    ax.plot([], [], "^", color="gray", label="'Additional Stage Testing'")
    ax.plot([], [], "x", color="gray", label="adaptive-stages attempt")
    ax.plot([], [], ":", color="gray", label="SOL (the log's task figure)")
    ax.set_xlabel("num_ab_stage")
    ax.set_ylabel("us")
    ax.set_xticks(range(1, 7))
    ax.legend(fontsize=7)
    ax.set_title(f"NVFP4 GEMM, pipeline stages\n{evidence_label('recorded', 'nvfp4-gemm-optimization-log.md')}", fontsize=9)
    fig.tight_layout()
    return fig


def epilogue_estimates():
    """The TMA-store pitch's per-tile epilogue estimates (510 vs 130 cycles), stacked."""
    est = records.tma_store_estimates()
    data: dict = {}
    for e in est:
        data.setdefault(e.variant, {})[e.operation] = e.cycles
    return phase_bars(data, "recorded", est[0].source.note, title="NVFP4 dual-GEMM epilogue, the pitch's estimates")


# ---------------------------------------------------------------------------------------------
# Go/no-go dashboard
# ---------------------------------------------------------------------------------------------

def _layout(ids: list[str], deps: Mapping[str, tuple]) -> dict[str, tuple[int, int]]:
    """(column, -row) per card: column = dependency depth; a card shares its first parent's row
    unless another card of its column already sits there."""
    depth: dict[str, int] = {}

    def d(i, seen=()):
        if i not in depth:
            ps = [p for p in deps.get(i, ()) if p in ids and p not in seen]
            depth[i] = 0 if not ps else 1 + max(d(p, seen + (i,)) for p in ps)
        return depth[i]

    for i in ids:
        d(i)
    row: dict[str, int] = {}
    taken: set[tuple[int, int]] = set()
    for i in sorted(ids, key=lambda k: (depth[k], ids.index(k))):
        parents = [p for p in deps.get(i, ()) if p in row]
        r = row[parents[0]] if parents else None
        if r is None or (depth[i], r) in taken:
            r = 1 + max((rr for _, rr in taken), default=-1)
        row[i] = r
        taken.add((depth[i], r))
    return {i: (depth[i], -row[i]) for i in ids}


def gonogo_dashboard(facts=None):
    """Cards as boxes coloured by the evaluator's status, with the note's dependency arrows."""
    pairs = gonogo.dashboard(facts)
    ids = [c.id for c, _ in pairs]
    deps = {c.id: c.depends_on for c, _ in pairs}
    pos = _layout(ids, deps)
    kinds = sorted({k for _, d in pairs if d.evidence for k in d.evidence.split("+")}, key=KINDS.index)

    rows = 1 - min(p[1] for p in pos.values())
    DX, DY = 3.4, 1.55                    # column and row pitch (data units); a card is W x H
    W, H = 2.7, 1.2
    fig, ax = plt.subplots(figsize=(7.8, 1.2 * rows + 1.3))
    for c, dcs in pairs:
        x, y = pos[c.id]
        x, y = x * DX, y * DY
        col = _STATUS_COLOR[dcs.status]
        ax.add_patch(FancyBboxPatch((x, y - H / 2), W, H, boxstyle="round,pad=0.04", fc=col, ec="k", alpha=0.85))
        ev = f" [{dcs.evidence}]" if dcs.evidence else (" [needs B200]" if dcs.needs_b200 else "")
        body = textwrap.fill(c.title + ((": " + ", ".join(dcs.labels)) if dcs.labels else ""), 42)
        rule = textwrap.fill(str(dcs.rule.label or dcs.rule.metric), 50) if dcs.rule else ""
        ax.text(x + 0.08, y + H / 2 - 0.1, f"{c.id}  {dcs.status}{ev}", fontsize=8, weight="bold", va="top")
        ax.text(x + 0.08, y + H / 2 - 0.36, body, fontsize=7, va="top", linespacing=1.1)
        ax.text(x + 0.08, y - H / 2 + 0.08, rule, fontsize=6.5, va="bottom", style="italic", linespacing=1.05)
    for e in gonogo.edges():
        (x0, y0), (x1, y1) = pos[e.src], pos[e.dst]
        style = "<->" if e.kind == "pairs_with" else "->"
        ls = ":" if e.kind in ("informs", "pairs_with") else "-"
        if x1 > x0:       # to a later column: right edge to left edge, through the gap between columns
            start, end = (x0 * DX + W + 0.05, y0 * DY), (x1 * DX - 0.05, y1 * DY)
        else:             # same column: along the left margin, outside the cards
            start, end = (x0 * DX - 0.05, y0 * DY), (x1 * DX - 0.05, y1 * DY)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=10, ls=ls, lw=1,
                                     connectionstyle="arc3,rad=0.0" if x1 > x0 else "arc3,rad=0.5"))
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2, e.kind, fontsize=6.5, ha="center",
                va="center", bbox=dict(fc="white", ec="none", pad=0.5))
    xs = [p[0] * DX for p in pos.values()]
    ys = [p[1] * DY for p in pos.values()]
    ax.set_xlim(min(xs) - 0.5, max(xs) + W + 0.2)
    ax.set_ylim(min(ys) - 0.9, max(ys) + 0.75)
    ax.axis("off")
    for s, col in _STATUS_COLOR.items():
        ax.plot([], [], "s", color=col, label=s, ms=8)
    ax.legend(fontsize=7, loc="lower right", ncol=4, frameon=False)
    note = gonogo.cards()[0].source.split(" § ")[0]
    used = [f for _, dcs in pairs for f in dcs.facts]
    labels = []
    for k in kinds:
        if k == "recorded":
            labels.append(evidence_label(k, note))
        elif k == "measured":
            labels.append(evidence_label(k, ", ".join(sorted({f.device or f.source or "device" for f in used
                                                              if f.kind == k}))))
        else:
            labels.append(evidence_label(k))
    ax.set_title("Go/no-go F21-F28: status from the cards' rules; PENDING = needs a B200 run\ndecided on "
                 + ("; ".join(labels) if labels else "no facts yet"), fontsize=8.5)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# The lines the book draws from its results: the Hopper twin stage by stage, the recorded clock64 tile
# ---------------------------------------------------------------------------------------------

def hopper_line(sweep: dict | None = None, mark: str | None = None):
    """The Hopper twin's stages 00-09 as one measured line (one committed sweep: each stage at its default
    defines), against the memory floor at that run's copy bandwidth and the cuBLAS baselines of the run."""
    rep = sweep or results.load_sweep()
    pe = problems.patch_embed("siglip2")
    floor_ms = pe.min_bytes / rep["copy"]["gbps"] / 1e6
    stages = {}
    for v in rep.get("variants", []):
        name = v.get("label", "")
        if v.get("median_ms") and v.get("ok") and not v.get("defines") and "[again]" not in name:
            stages.setdefault(name, v["median_ms"])
    names = sorted(stages)
    ms = [stages[n] for n in names]
    fig, ax = plt.subplots(figsize=(7.8, 3.6))
    ax.plot(range(len(names)), ms, "o-", color="#2e86c1", lw=1.5, label="our stage (verified, median)")
    for i, v in enumerate(ms):
        ax.text(i, v, f"{v:.3f}", ha="center", va="bottom", fontsize=7)
    hit = [i for i, n in enumerate(names) if mark and n.split("_")[0] == str(mark).split("_")[0]]
    for i in hit:       # the stage a slider has chosen
        ax.plot(i, ms[i], "o", ms=13, mfc="none", mec="k", mew=1.5, label=f"chosen: {names[i]} (default defines)")
    ax.axhline(floor_ms, color="k", ls="--", lw=1, label=f"memory floor {floor_ms:.3f} ms "
                                                          f"({rep['copy']['gbps']:.0f} GB/s copy)")
    styles = {"cublas_gemm": ("cuBLAS FP8 GEMM only", "#c0392b", ":"),
              "cublas_bias": ("cuBLAS GEMM + bias", "#e67e22", ":")}
    for key, (lab, col, ls) in styles.items():
        v = results.baseline_ms(rep.get("baselines"), key)
        if v is not None:
            ax.axhline(v, color=col, ls=ls, lw=1.2, label=f"{lab} {v:.3f} ms")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.split("_")[0] for n in names], fontsize=8)
    ax.set_xlabel("sm90 stage (src/kernels/sm90/NN_*.cu)")
    ax.set_ylabel("ms, full problem")
    ax.set_ylim(0, max(ms) * 1.12)
    ax.legend(fontsize=7.5, loc="upper right", frameon=False)
    ax.set_title(f"The Hopper twin, stage by stage — {results.sweep_evidence(rep)}\n"
                 f"{pe.name}: M={pe.m:,}, N={pe.n}, K={pe.k}; {rep.get('_file', '')}", fontsize=8.5)
    fig.tight_layout()
    return fig


def clock64_timeline(tiles: int = 3):
    """The recorded clock64 phases of the 5-warp baseline laid on one clock: W1 (MMA) and W3 (epilogue)
    per tile, aligned where W1's K-loop ends and W3's Phase 1 starts (the MMA-done handoff). The bars are
    the note's per-tile averages, not one trace; each warp's sequence repeats with its own recorded sum."""
    rec = records.w1_reconciliation()
    w1, w3 = rec["W1"], rec["W3"]
    p1 = w1["tma0_wait"] + w1["kloop"] + w1["epi_wait"]
    p3 = w3["ml_wait"] + w3["phase1"] + w3["phase2b"]
    col = {"tma0_wait": "#e67e22", "kloop": "#2980b9", "epi_wait": "#c0392b", "ml_wait": "#95a5a6",
           "phase1": "#27ae60", "phase2b": "#8e44ad"}
    name = {"tma0_wait": "W1 TMA stage-0 wait", "kloop": "W1 K-loop", "epi_wait": "W1 epilogue-barrier wait",
            "ml_wait": "W3 MMA-done wait", "phase1": "W3 Phase 1 (TMEM -> registers)",
            "phase2b": "W3 Phase 2B (stores)"}
    fig, ax = plt.subplots(figsize=(7.8, 2.7))
    seen = set()

    def bar(y, x0, w, key, text=True):
        ax.barh(y, w, left=x0, color=col[key], edgecolor="white", height=0.55,
                label=None if key in seen else f"{name[key]}: {w:,} cycles")
        seen.add(key)
        if text and w > 700:
            ax.text(x0 + w / 2, y, f"{w:,}", ha="center", va="center", fontsize=7, color="white")

    handoff0 = w1["tma0_wait"] + w1["kloop"]
    for i in range(tiles):
        t = i * p1
        bar(1, t, w1["tma0_wait"], "tma0_wait")
        bar(1, t + w1["tma0_wait"], w1["kloop"], "kloop")
        ax.text(t + w1["tma0_wait"] + w1["kloop"] / 2, 1.38, f"tile {i}", ha="center", fontsize=7)
        bar(1, t + handoff0, w1["epi_wait"], "epi_wait")
        s = handoff0 + i * p3
        bar(0, s - w3["ml_wait"], w3["ml_wait"], "ml_wait")
        bar(0, s, w3["phase1"], "phase1")
        bar(0, s + w3["phase1"], w3["phase2b"], "phase2b")
        ax.plot([t + handoff0] * 2, [-0.35, 1.35], color="k", lw=0.6, ls=":")
    ax.set_yticks([0, 1])
    ax.set_yticklabels(["W3 (epilogue)", "W1 (MMA)"])
    ax.set_xlim(0, tiles * p1 + w1["tma0_wait"])
    ax.set_ylim(-0.5, 1.6)
    ax.set_xlabel("cycles (clock64)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, frameon=False)
    src = rec.get("source") or "fp8-megakernel-w1-stall-isolation.md, Reconciliation with clock64"
    ax.set_title(f"One clock, W1 against W3: {evidence_label('recorded', src)}\nper-tile averages "
                 f"aligned at the MMA-done handoff (dotted); W1 sums to {p1:,}, W3 to {p3:,} cycles",
                 fontsize=8.5)
    fig.tight_layout()
    return fig


def fp8_line(points: list | None = None):
    """The FP8 stages 00-09 on a B200 as one recorded line (each stage's lab number: ms, or ms implied by
    its recorded TFLOPS, drawn hollow), against the speed-of-light floor (modelled, datasheet) and the
    recorded cuBLAS lines. points: [(stage name, ms, tflops, note)], default the stages' own records."""
    if points is None:   # the line's stages with a number of their own (08a/08b carry 08's, said in their headers)
        points = [(st.name, r.ms, r.tflops, r.source.note) for st in all_stages(("fp8",), variants=False)
                  if (r := st.recorded()) is not None]
    pe = problems.patch_embed("siglip2")
    floor_ms = sol.floor(pe, sol.spec("B200")).t_floor_s * 1e3
    refs = records.cublas()[:2]
    fig, ax = plt.subplots(figsize=(7.8, 3.8))
    xs, ys = [], []
    for i, (name, ms, tflops, _src) in enumerate(points):
        derived = ms is None and tflops
        v = ms if ms is not None else (pe.flops / (tflops * 1e12) * 1e3 if tflops else None)
        if v is None:
            continue
        xs.append(i)
        ys.append(v)
        ax.plot(i, v, "o", color="#2e86c1", mfc="white" if derived else "#2e86c1", ms=7, zorder=3)
        ax.text(i, v, f"{v:.3f}" + ("*" if derived else ""), ha="center", va="bottom", fontsize=7.5)
    ax.plot(xs, ys, "-", color="#2e86c1", lw=1.2)
    ax.axhline(floor_ms, color="k", ls="--", lw=1, label=f"speed-of-light floor {floor_ms:.3f} ms (modelled)")
    ax.axhline(refs[0].ms, color="#c0392b", ls=":", lw=1.3, label=f"cuBLAS FP8 GEMM only {refs[0].ms} ms (recorded)")
    ax.axhline(refs[1].ms, color="#e67e22", ls=":", lw=1.3,
               label=f"cuBLAS + unfused positional add {refs[1].ms} ms (recorded)")
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels([p[0].split("_")[0] for p in points], fontsize=8)
    ax.set_xlabel("fp8 stage (src/kernels/fp8/NN_*.cu)")
    ax.set_ylabel("ms on a B200, full problem")
    ax.set_ylim(0, max(ys + [refs[1].ms]) * 1.15)
    ax.legend(fontsize=7.5, loc="upper right", frameon=False)
    notes = sorted({p[3] for p in points if p[3]})
    ax.set_title(f"FP8 patch embedding, stage by stage — {evidence_label('recorded', '; '.join(notes))}\n"
                 "* = ms implied by the recorded TFLOPS (2·M·N·K); floor: datasheet peak and bandwidth", fontsize=8.5)
    fig.tight_layout()
    return fig


def lab_notes_table():
    """The five lab notes as sources: file, date as the note gives it, and what the book takes from it."""
    return Table([{"note": n.file, "title": n.title, "date": n.date, "what the book takes from it": n.holds}
                  for n in records.lab_notes()],
                 "The lab notes: external sources, not files of this repository", descriptive=True)
