"""The pipeline protocol as a picture: per-role lanes (producer, each consumer warpgroup or MMA issuer and
epilogue warp) with their waits, issues and completions, and the ring's slots (and accumulators) as
occupancy lanes, from measured clock64 records (a TIMING build) or from the simulator's event log.

    protocol_picture(timing.load("results/2026-11-24-h100/trace-sm90-06.records.npz"))   # measured
    protocol_picture(report.events, stage="fp8/09_persistent_megakernel")                  # simulated

Both go through pelib.timing.protocol_spans (the same spans the Chrome trace writes), so the picture and
the trace in Perfetto show the same thing. The title says which: measured clock64 with device and date,
or "simulated order, not time".
"""
from __future__ import annotations

import re

from .. import evidence, results, timing
from ..facts import Table

COLORS = {"wait": "#d62728", "issue": "#1f77b4", "mma": "#2ca02c", "epilogue": "#ff7f0e", "completion": "#111111",
          "occupancy": "#8c8c8c", "tile": "#dddddd", "phase": "#9467bd"}
RECORDS = "trace-sm90-06.records.npz"      # the committed TIMING run of the sm90 twin's stage 06


def committed_records(name: str = RECORDS, chip: str = "h100") -> timing.Timing | None:
    """The newest committed clock64 records of that name from a run folder of `chip` (None if none)."""
    hits = [p for p in results.files(name) if results.chip(p.parent) == chip]
    return timing.load(hits[-1]) if hits else None


def evidence_line(sp: timing.Spans) -> str:
    """'measured clock64 (H100 ..., 2026-11-24, git 07547c6)' or 'simulated order, not time'."""
    if sp.order == timing.SIM_ORDER:
        return f"{evidence.simulated('pelib.sim')}: {timing.SIM_ORDER}"
    if sp.order == timing.PREDICTED_ORDER:    # pelib.predict's replay: its label names the calibration
        return f"{sp.meta.get('label') or timing.PREDICTED_ORDER}: {timing.PREDICTED_ORDER}"
    m = sp.meta
    extra = f"git {m['git']}" if m.get("git") else None
    return evidence.measured(m.get("device", "device unknown"), str(m.get("date", "date unknown"))[:10], extra) \
        .replace("measured (", "measured clock64 (", 1)


def _role_group(name: str) -> str:
    return re.sub(r"\s*\(warp \d+\)$", "", name)


def lanes(sp: timing.Spans, cta: int, one_warp_per_role: bool = True) -> list[tuple[int, str]]:
    """[(tid, lane name)] of one CTA: the warps by role (one warp of each role group, the lowest, where
    several record the same role, as the four warps of a consumer warpgroup), then the occupancy lanes."""
    out, seen = [], set()
    for tid in sp.lanes(cta):
        name = sp.threads[(cta, tid)]
        if tid < timing.RING_TID and one_warp_per_role:
            g = _role_group(name)
            if g in seen:
                continue
            seen.add(g)
        out.append((tid, name))
    return out


def protocol_picture(source, *, cta: int = 0, window: tuple[float, float] | None = None, stage: str | None = None,
                     ax=None, one_warp_per_role: bool = True, show_tile: bool = False):
    """One CTA's protocol: a lane per role and per occupancy resource, spans coloured by what they are
    (wait, issue, MMA/K loop, epilogue, occupancy; completions and other instants as ticks). `source`:
    a pelib.timing.Timing (measured), simulator events (list of dicts / structured array) or Spans.
    `window` (start, end) in the spans' unit; measured default: the producer's recorded tiles. Summed
    waits (a tile's waits added up, as the TIMING builds record them) are hatched: their length is the
    total, not one contiguous wait. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    sp = timing.protocol_spans(source, ctas=[cta])
    if cta not in sp.processes:
        raise ValueError(f"no events or records for CTA {cta}; CTAs present: {sorted(sp.processes)[:8]}")
    ln = lanes(sp, cta, one_warp_per_role)
    if window is None and sp.order in (timing.MEASURED_ORDER, timing.PREDICTED_ORDER) and \
            any(n.startswith("producer") for _, n in ln):
        prod = [t for t, n in ln if n.startswith("producer")]
        ends = [s.ts + (s.dur or 0) for s in sp.spans if s.pid == cta and s.tid in prod]
        window = (0, max(ends)) if ends else None
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.5 * len(ln) + 1.6))
    y_of = {tid: len(ln) - 1 - i for i, (tid, _) in enumerate(ln)}
    lo, hi = window if window else (-float("inf"), float("inf"))
    for s in sp.spans:
        if s.pid != cta or s.tid not in y_of or (s.cat == "tile" and not show_tile):
            continue
        end = s.ts + (s.dur or 0)
        if end < lo or s.ts > hi:
            continue
        y = y_of[s.tid]
        if s.dur is None:
            ax.plot([s.ts, s.ts], [y - 0.35, y + 0.35], color=COLORS.get(s.cat, "k"), lw=0.8)
            continue
        summed = s.args.get("summed")
        h, off = (0.3, 0.05) if summed else (0.7, -0.35)
        ax.broken_barh([(s.ts, max(s.dur, 1e-9))], (y + off if summed else y - 0.35, h),
                       facecolors="none" if summed else COLORS.get(s.cat, "#999999"),
                       edgecolors=COLORS.get(s.cat, "#999999") if summed else "white",
                       hatch="////" if summed else None, lw=0.4, zorder=3 if summed else 2)
        if s.cat == "occupancy" and s.dur and (not window or s.dur > (hi - lo) / 40):
            ax.text(s.ts + s.dur / 2, y, s.name.replace(" held", ""), ha="center", va="center", fontsize=6,
                    color="white", clip_on=True)
    ax.set_yticks(range(len(ln)), [n for _, n in reversed(ln)], fontsize=8)
    if window:
        ax.set_xlim(*window)
    ax.set_xlabel(sp.unit)
    where = sp.processes[cta]
    ax.set_title(f"{stage or sp.meta.get('stage', '')} — {where} — {evidence_line(sp)}", fontsize=9)
    cats = sorted({s.cat for s in sp.spans if s.pid == cta and (show_tile or s.cat != "tile")})
    handles = [Patch(color=COLORS.get(c, "#999999"), label=c) for c in cats]
    if any(s.args.get("summed") for s in sp.spans if s.pid == cta):
        handles.append(Patch(facecolor="none", edgecolor=COLORS["wait"], hatch="////",
                             label="waits of a tile, summed"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.figure.tight_layout()
    return ax


def measured_twin_picture(cta: int = 0, ax=None):
    """The committed H100 TIMING run of sm90/06 (measured clock64), or None where none is committed."""
    t = committed_records()
    return None if t is None else protocol_picture(t, cta=cta, ax=ax)


def role_table(source, cta: int = 0):
    """Per lane of one CTA: how many spans of each kind and their average length (the spans' unit)."""
    sp = timing.protocol_spans(source, ctas=[cta])
    rows = []
    for tid, name in lanes(sp, cta):
        by: dict = {}
        for s in sp.spans:
            if s.pid == cta and s.tid == tid and s.dur is not None and s.cat != "tile":
                by.setdefault("held" if s.cat == "occupancy" else s.name, []).append(s.dur)
        for nm, ds in by.items():
            rows.append({"lane": name, "span": nm + (" (summed)" if nm in timing.SUMMED else ""), "n": len(ds),
                         f"avg ({sp.unit.split(' since')[0]})": round(sum(ds) / len(ds))})
    return Table(rows, f"{sp.processes[cta]}: spans per lane — {evidence_line(sp)}")
