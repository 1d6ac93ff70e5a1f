"""The pipeline protocol as a picture: per-role lanes (producer, MMA issuer or consumer warpgroups, epilogue
warps) with their waits, phases, issues and completions, then the ring's slots and the accumulators as
occupancy lanes; from measured clock64 records (a TIMING build) or from the simulator's event log.

    protocol_picture(timing.load("results/2026-11-24-h100/trace-sm90-06.records.npz"))   # measured
    protocol_picture(sim_runs.simulate("fp8/09_persistent_megakernel"))                  # simulated

One function draws both, from the spans of pelib.events (the ones the Chrome trace writes), so the picture
and the trace in Perfetto show the same thing. The title says which: measured clock64 with device and date,
or "simulated order, not time".
"""
from __future__ import annotations

import math
import re
import textwrap

from .. import events, evidence, results, timing
from ..facts import Table

COLORS = {"wait": "#c8ccd1", "issue": "#1f77b4", "mma": "#2ca02c", "epilogue": "#ff7f0e", "completion": "#111111",
          "occupancy": "#8c8c8c", "tile": "#dddddd", "phase": "#9467bd"}
RECORDS = "trace-sm90-06.records.npz"      # the committed TIMING run of the sm90 twin's stage 06
KIND_STYLE = {k: v.style for k, v in events.KIND_TABLE.items() if v.style}   # an instant's (marker, colour, legend)
TILE_COLORS = ("#2e86c1", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#d4ac0d", "#7f8c8d")
SHADE = {"filled": 0.35, "landed": 0.6, "read": 0.95, "written": 0.95, "committed": 0.7, "drained": 0.45}
IDLE = {"bar_sync", "exit", "cluster_sync", "tmem_alloc", "tmem_dealloc"}   # a warp that did only these is not drawn


def committed_records(name: str = RECORDS, chip: str = "h100") -> timing.Timing | None:
    """The newest committed clock64 records of that name from a run folder of `chip` (None if none)."""
    hits = [p for p in results.files(name) if results.chip(p.parent) == chip]
    return timing.load(hits[-1]) if hits else None


def evidence_line(sp: events.Spans) -> str:
    """'measured clock64 (H100 ..., 2026-11-24, git 07547c6)' or 'simulated (pelib.sim): simulated order, not time'."""
    if sp.order == events.SIM_ORDER:
        return f"{evidence.simulated('pelib.sim')}: {events.SIM_ORDER}"
    if sp.order == events.PREDICTED_ORDER:    # pelib.predict's replay: its label names the calibration
        return f"{sp.meta.get('label') or events.PREDICTED_ORDER}: {events.PREDICTED_ORDER}"
    m = sp.meta
    extra = f"git {m['git']}" if m.get("git") else None
    return evidence.measured(m.get("device", "device unknown"), str(m.get("date", "date unknown"))[:10], extra) \
        .replace("measured (", "measured clock64 (", 1)


def _role_group(name: str) -> str:
    return re.sub(r"\s*\(warp \d+\)$", "", name)


def spans_of(source, cta: int | None = None, cluster: int | None = 0) -> events.Spans:
    """The spans a picture draws: one CTA of measured records (default CTA 0), or one cluster of a simulated
    run (a SimRun, a SimReport, a list of events; cluster None: all)."""
    if isinstance(source, (timing.Timing, events.Spans)):
        return timing.protocol_spans(source, ctas=[cta or 0] if isinstance(source, timing.Timing) else None)
    ev = getattr(source, "events", source)
    ev = ev() if callable(ev) else ev
    return timing.protocol_spans(ev, ctas=[cta] if cta is not None else None,
                                 clusters=[cluster] if cluster is not None else None)


def lanes(sp: events.Spans, one_warp_per_role: bool = True, max_epi: int | None = None) -> list[tuple]:
    """[((pid, tid), lane name)]: per CTA, its warps (one warp of each role group, the lowest, where several
    record the same role; warps that only synchronised left out; at most max_epi epilogue warps), then its
    occupancy lanes. Names carry 'CTA c: ' where the spans hold several CTAs."""
    did: dict = {}
    for s in sp.spans:
        did.setdefault((s.pid, s.tid), set()).add(s.args.get("kind") if s.dur is None else s.cat)
    out = []
    for pid in sorted(sp.processes):
        seen, epi = set(), 0
        for tid in sp.lanes(pid):
            name = sp.threads[(pid, tid)]
            if tid < 0 or not did.get((pid, tid), {"x"}) - IDLE - {None}:
                continue
            if tid < events.RING_TID:
                if one_warp_per_role and _role_group(name) in seen:
                    continue
                seen.add(_role_group(name))
                epi += "epilogue" in name
                if max_epi is not None and "epilogue" in name and epi > max_epi:
                    continue
            out.append(((pid, tid), f"CTA {pid}: {name}" if len(sp.processes) > 1 else name))
    return out


def protocol_picture(source, *, cta: int | None = None, cluster: int | None = 0, window=None, title: str = "",
                     stage: str | None = None, stopped: str | None = None, one_warp_per_role: bool | None = None,
                     max_epi: int | None = None, show_tile: bool = False, ax=None):
    """The protocol of one CTA (measured) or one cluster (simulated): a lane per role and per occupancy
    resource. Waits grey, role phases coloured by what they are (summed waits hatched: their length is a
    tile's total, not one wait), issues and completions as markers (an MMA, commit or TMEM load in its
    tile's colour), ring slots filled / landed / read and accumulators written / committed / drained in
    their tile's colour; a simulated warp's role phases are a thin band under its waits. A run that stopped (`stopped`, or a SimRun that did) ends in a red line, its
    blocked waits and unreleased resources hatched red. `window` (start, end) in the spans' unit; the
    measured default is the producer's recorded tiles. Returns the Axes; ax.protocol_spans holds the spans
    it drew from (the trace's, for the same events)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    sp = spans_of(source, cta, cluster)
    if not sp.spans:
        raise ValueError(f"no events or records{'' if cta is None else f' for CTA {cta}'}; "
                         f"CTAs present: {sorted(sp.processes)[:8]}")
    measured = sp.order == events.MEASURED_ORDER or (sp.order == events.PREDICTED_ORDER and
                                                     not any(s.dur is None for s in sp.spans))  # phases only
    if stopped is None and getattr(source, "outcome", "ok") not in ("ok", "wrong output"):
        stopped = f"{source.outcome}: {' '.join(str(source.stopped).split())[:140]}"
    ln = lanes(sp, measured if one_warp_per_role is None else one_warp_per_role, max_epi)
    y_of = {k: i for i, (k, _) in enumerate(ln)}
    if window is None and sp.order != events.SIM_ORDER:
        ends = [s.ts + (s.dur or 0) for s in sp.spans if (s.pid, s.tid) in y_of and
                sp.threads[(s.pid, s.tid)].startswith("producer")]
        window = (0, max(ends)) if ends else None
    lo, hi = window or (min(s.ts for s in sp.spans), max(s.ts + (s.dur or 0) for s in sp.spans))
    own = ax is None
    if own:
        _, ax = plt.subplots(figsize=(9.6, 1.6 + 0.3 * len(ln)))
    h, kinds, cats, marks = 0.62, [], set(), {}   # marks: (marker, size, colour) -> its instants
    for s in sp.spans:
        y = y_of.get((s.pid, s.tid))
        if y is None or (s.cat == "tile" and not show_tile) or s.ts + (s.dur or 0) < lo or s.ts > hi:
            continue
        tile = s.args.get("tile")
        tile_col = TILE_COLORS[tile % len(TILE_COLORS)] if isinstance(tile, int) else None
        if s.dur is None:
            k = s.args.get("kind")
            if k not in KIND_STYLE:
                continue
            marker, col, _ = KIND_STYLE[k]
            style = (marker, 14 if marker not in "|_" else 40, tile_col if tile_col and k in ("mma", "tmem_ld", "commit") else col)
            marks.setdefault(style, []).append((s.ts, y))
            kinds.append(k)
            continue
        cats.add(s.cat)
        blocked = bool(s.args.get("open")) and bool(stopped)
        part = s.args.get("part")
        if s.cat == "occupancy" and part == "held":
            if blocked:
                ax.broken_barh([(s.ts, max(s.dur, 0.5))], (y - h / 2, h), facecolors="none", edgecolors="#c0392b",
                               hatch="///", lw=0.6, zorder=2)
            continue
        summed = s.args.get("summed")
        face = (tile_col or COLORS["issue"]) if s.cat == "occupancy" and part else COLORS.get(s.cat, "#999999")
        band = (y + 0.05, 0.3) if summed else (y - h / 2, h)
        if "summed" in s.args and not measured:   # a role phase under a simulated warp's waits and instants
            band = (y + h / 2 - 0.16, 0.16)
        ax.broken_barh([(s.ts, max(s.dur, 0.5))], band,
                       facecolors="none" if summed else ("#f5b7b1" if blocked else face),
                       alpha=SHADE.get(part, 1.0), edgecolors="#c0392b" if blocked else (face if summed else "none"),
                       hatch="////" if summed or blocked else None, lw=0.6, zorder=1 if s.cat == "wait" else 2)
        if (part == "written" or (s.cat == "occupancy" and part is None)) and s.dur > (hi - lo) / 40:
            label = f"tile {tile}" if part else s.name
            ax.text(s.ts + s.dur / 2, y, label, ha="center", va="center", fontsize=6.5, color="white", clip_on=True,
                    zorder=4)
    for (marker, size, col), pts in marks.items():   # one scatter per style: a run has thousands of instants
        ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=marker, s=size, lw=0.8, zorder=3, color=col)
    ax.set_yticks(range(len(ln)), [n for _, n in ln], fontsize=8)
    ax.set_ylim(len(ln) - 0.4, -1.0)
    ax.set_xlim(lo - (hi - lo) * 0.01, hi + (hi - lo) * 0.01 + 1)
    ax.set_xlabel(sp.unit, fontsize=8.5)
    ax.tick_params(axis="x", labelsize=7.5)
    where = sp.processes[ln[0][0][0]] if len(sp.processes) == 1 and ln else \
        f"cluster {cluster}" if cluster is not None and not measured else f"{len(sp.processes)} CTAs"
    lines = [f"{title or stage or sp.meta.get('stage', 'Pipeline protocol')} — {where} — {evidence_line(sp)}"]
    if stopped:
        ax.axvline(hi, color="#c0392b", lw=1.4, zorder=5)
        ax.text(hi, -0.7, "stopped here ", color="#c0392b", ha="right", va="center", fontsize=7.5)
        blocked = blocked_lines(sp, ln)
        lines += [" ".join(stopped.split())[:200]] + [f"blocked: {b}" for b in blocked[:4]] + (
            [f"blocked: ... and {len(blocked) - 4} more"] if len(blocked) > 4 else [])
    lines = [w for line in lines for w in textwrap.wrap(line, 95, subsequent_indent="  ")]   # the axes' width
    ax.set_title("\n".join(lines), fontsize=9, loc="left", color="#922b21" if stopped else "black")
    handles = [Patch(color=COLORS.get(c, "#999999"), label=c) for c in sorted(cats - {"occupancy"})]
    if any(s.args.get("summed") for s in sp.spans if (s.pid, s.tid) in y_of):
        handles.append(Patch(facecolor="none", edgecolor="#555555", hatch="////", label="waits of a tile, summed"))
    handles += [plt.Line2D([], [], ls="", marker=KIND_STYLE[k][0], color=KIND_STYLE[k][1], label=KIND_STYLE[k][2])
                for k in dict.fromkeys(kinds)]
    parts = {s.args.get("part") for s in sp.spans if s.cat == "occupancy"} - {None, "held"}
    handles += [Patch(facecolor=COLORS["issue"], alpha=SHADE[p], label=p) for p in SHADE if p in parts]
    if parts & {"written", "drained"}:
        handles.append(Patch(facecolor="white", edgecolor="white", label="colour of MMA, ld, acc = its tile"))
    fig = ax.figure
    if own:   # the legend under the axes, in the figure's width (a book column)
        rows = math.ceil(len(handles) / 4)
        fig.set_figheight(fig.get_figheight() + 0.18 * rows + 0.15 * (len(lines) - 1))
        fig.legend(handles=handles, fontsize=7, loc="lower left", ncol=4, frameon=False, handlelength=1.6)
        fig.tight_layout(rect=(0, (0.18 * rows + 0.1) / fig.get_figheight(), 1, 1))
    else:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.protocol_spans = sp
    return ax


def blocked_lines(sp: events.Spans, ln=None) -> list[str]:
    """'MMA issuer (CTA 0): acc_empty[0], parity 0, tag 5, line 205' per blocked wait site, alike ones merged."""
    by: dict = {}
    for s in sp.spans:
        if s.cat != "wait" or not s.args.get("open"):
            continue
        a = s.args
        note = ", ".join([a.get("barrier") or "mbarrier"] + [f"{k} {a[k]}" for k in ("parity", "tag", "line")
                                                             if a.get(k) is not None])
        who = sp.threads.get((s.pid, s.tid), f"warp {s.tid}")
        by.setdefault((note, who.split(": ", 1)[-1]), []).append(s.pid)
    return [f"{who} (CTA {', '.join(str(c) for c in sorted(set(cs)))}): {note}" for (note, who), cs in by.items()]


def measured_twin_picture(cta: int = 0, ax=None):
    """The committed H100 TIMING run of sm90/06 (measured clock64), or None where none is committed."""
    t = committed_records()
    return None if t is None else protocol_picture(t, cta=cta, ax=ax)


def role_table(source, cta: int = 0):
    """Per lane of one CTA: how many spans of each kind and their average length (the spans' unit)."""
    sp = spans_of(source, cta, None)
    rows = []
    for (pid, tid), name in lanes(sp):
        by: dict = {}
        for s in sp.spans:
            whole = s.dur is not None and s.cat != "tile" and s.args.get("part") in (None, "held")
            if s.pid == pid and s.tid == tid and whole:
                by.setdefault("held" if s.cat == "occupancy" else s.name, []).append(s.dur)
        for nm, ds in by.items():
            rows.append({"lane": name, "span": nm + (" (summed)" if nm in events.SUMMED else ""), "n": len(ds),
                         f"avg ({sp.unit.split(' since')[0]})": round(sum(ds) / len(ds))})
    return Table(rows, f"{sp.processes[cta]}: spans per lane — {evidence_line(sp)}")
