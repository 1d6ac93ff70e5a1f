"""Decode in-kernel clock64 records (common/timing.cuh, a TIMING build) into per-warp, per-phase cycles and
the SM clock of the launch (each warp's clock64 and globaltimer at start and exit), and write Chrome's Trace
Event Format (what Perfetto opens) of those records or of a simulator event log.

    t = Stage("sm90/06_permuted_b").run_timing("full")       # measured clock64 records
    t.launch_clock()                                          # cycles / ns per CTA and per SM: the launch's clock
    t.save("records.npz", device=..., date=..., git=...)     # load(path) reads them back
    chrome_trace(t, path="trace.json")                       # or chrome_trace(sim_events, ...)

The records become role-phase events (Timing.events) and both sources become spans by pelib.events'
one rule, so the trace, the book's pictures and the timing model read one model.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import events as _events
from .events import (HEADER, MEASURED_ORDER, PREDICTED_ORDER, SIM_ORDER, Spans, phase_id,  # noqa: F401
                     phase_notes, phases)   # (timing's API)

CLOCKS = {0: "cycles (clock64)", 1: "ns (globaltimer)"}
# The launch-clock block of common/timing.cuh (PE_TIMING_CTA): per (cta, warp), in this order.
CLOCK_FIELDS = ("clock64_begin", "globaltimer_begin", "clock64_end", "globaltimer_end", "smid_plus_1")
CLOCK_WORDS = len(CLOCK_FIELDS)


@dataclass(frozen=True)
class Layout:
    """The buffer shape a TIMING build was compiled with: [ctas][warps][tiles][phases][2] u64."""

    ctas: int
    warps: int
    tiles: int
    phases: int
    clock: int = 0     # 0 = clock64 cycles, 1 = globaltimer ns
    clock_words: int = 0   # words per (cta, warp) of the launch-clock block after the phases (0: none)

    @property
    def phase_words(self) -> int:
        return self.ctas * self.warps * self.tiles * self.phases * 2

    @property
    def words(self) -> int:
        return self.phase_words + self.ctas * self.warps * self.clock_words

    @property
    def unit(self) -> str:
        return CLOCKS.get(self.clock, "ticks")


def layout(build, ctas: int) -> Layout:
    """The layout exported by a TIMING build (timing_warps/tiles/phases/clock), for `ctas` CTAs."""
    ex = build.exports
    if "timing_phases" not in ex:
        raise ValueError(f"{build.source.name} was not built with TIMING: "
                         "build(..., defines={'TIMING': 1}) to record clock64 phases")
    if ex["timing_phases"] != len(phases()):
        raise ValueError(f"{build.source.name} has {ex['timing_phases']} phases, timing.cuh now has "
                         f"{len(phases())}: rebuild it")
    cw = ex.get("timing_clock_words", 0)
    if cw not in (0, CLOCK_WORDS):
        raise ValueError(f"{build.source.name} records {cw} launch-clock words per warp, pelib.timing reads "
                         f"{CLOCK_WORDS} ({', '.join(CLOCK_FIELDS)}): rebuild it with today's common/timing.cuh")
    return Layout(ctas, ex["timing_warps"], ex["timing_tiles"], ex["timing_phases"], ex.get("timing_clock", 0), cw)


def alloc(lay: Layout, device="cuda"):
    """A zeroed int64 torch buffer of the layout's size (zero = not recorded)."""
    import torch
    return torch.zeros(lay.words, dtype=torch.int64, device=device)


@dataclass
class Timing:
    """Decoded records: start/end per [cta, warp, tile, phase]; durations NaN where not recorded."""

    layout: Layout
    start: np.ndarray
    end: np.ndarray
    meta: dict = field(default_factory=dict)   # stage, device, date, git, clocks: where the records came from
    cta_clock: np.ndarray | None = None        # [cta, warp, CLOCK_WORDS] (layout.clock_words > 0), else None

    def launch_clock(self, min_ns: float = 0.0) -> dict:
        """The SM clock of this launch from the launch-clock block (see launch_clock())."""
        if self.cta_clock is None:
            raise ValueError("these records carry no launch clock (built before common/timing.cuh recorded "
                             "PE_TIMING_CTA, or the stage lacks the PE_TIMING_CTA(timing) line)")
        out = launch_clock(self.cta_clock, min_ns)
        if self.meta.get("clock") == SIM_ORDER:
            out["note"] = "simulated counters: an order, not a clock"
        return out

    @property
    def recorded(self) -> np.ndarray:
        return (self.start != 0) | (self.end != 0)

    @property
    def durations(self) -> np.ndarray:
        d = (self.end - self.start).astype(np.float64)
        d[~self.recorded] = np.nan
        return d

    def per_warp(self) -> dict:
        """{(warp, phase name): stats over CTAs and tiles} for every recorded (warp, phase)."""
        d = self.durations
        out = {}
        for w in range(self.layout.warps):
            for p, name in phases().items():
                if p >= self.layout.phases:
                    continue
                v = d[:, w, :, p]
                v = v[~np.isnan(v)]
                if v.size:
                    out[(w, name)] = _stats(v)
        return out

    def summary(self) -> dict:
        """{phase: {"warps": {w: stats}, "spread": max-min of the warps' averages, "avg": over warps}}."""
        out: dict = {}
        for (w, name), st in self.per_warp().items():
            out.setdefault(name, {"warps": {}})["warps"][w] = st
        for name, row in out.items():
            avgs = [s["avg"] for s in row["warps"].values()]
            row["spread"] = float(max(avgs) - min(avgs))
            row["avg"] = float(np.mean(avgs))
        return out

    def save(self, path, **meta) -> Path:
        """The raw records and the layout as a compressed .npz, with `meta` (device, date, git, stage,
        clocks) as JSON beside them; `load(path)` reads it back."""
        path = Path(path)
        m = {**self.meta, **meta}
        lay = self.layout
        extra = {} if self.cta_clock is None else {"cta_clock": self.cta_clock}
        np.savez_compressed(path, start=self.start, end=self.end,
                            layout=np.array([lay.ctas, lay.warps, lay.tiles, lay.phases, lay.clock, lay.clock_words]),
                            phases=np.array(json.dumps(phases())), meta=np.array(json.dumps(m, default=str)), **extra)
        return path

    def events(self, ctas=None, cluster: int = 1) -> list[dict]:
        """The records as role-phase events (pelib.events): a phase_begin and a phase_end per recorded
        (CTA, warp, tile slot, phase), seq = cycles since the CTA's first record (SM clocks are not one
        clock), role = warp_roles, what = the phase's name, tile = the tile slot the kernel recorded."""
        names = phases()
        roles = warp_roles(self)
        rec = self.recorded
        out = []
        for c in range(self.layout.ctas) if ctas is None else ctas:
            if not rec[c].any():
                continue
            t0 = int(self.start[c][rec[c]].min())
            where = dict(cta=c, cluster=c // cluster if cluster > 1 else None, rank=c % cluster if cluster > 1 else None)
            for w, role in roles.items():
                for i in range(self.layout.tiles):
                    for p in range(self.layout.phases):
                        if rec[c, w, i, p]:
                            for kind, t in (("phase_begin", self.start), ("phase_end", self.end)):
                                out.append({**where, "seq": int(t[c, w, i, p]) - t0, "warp": w, "lane": 0,
                                            "role": role, "kind": kind, "what": names[p], "tile": i})
        return out

    def table(self) -> str:
        """Text table: phase, warp, n, avg, p95, min, max (in the layout's unit)."""
        lines = [f"{'phase':<16}{'warp':>5}{'n':>7}{'avg':>10}{'p95':>10}{'min':>10}{'max':>10}"]
        for name, row in self.summary().items():
            for w, s in sorted(row["warps"].items()):
                lines.append(f"{name:<16}{w:>5}{s['n']:>7}{s['avg']:>10.0f}{s['p95']:>10.0f}"
                             f"{s['min']:>10.0f}{s['max']:>10.0f}")
            lines.append(f"{'':<16}{'spread of warp averages':>32} {row['spread']:.0f}")
        lines.append(f"unit: {self.layout.unit}")
        return "\n".join(lines)


def _stats(v: np.ndarray) -> dict:
    return {"n": int(v.size), "avg": float(v.mean()), "p95": float(np.percentile(v, 95)),
            "p50": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}


def decode(buf, lay: Layout) -> Timing:
    """Split a raw buffer (torch or numpy, int64/uint64 words) into start/end arrays."""
    if hasattr(buf, "detach"):
        buf = buf.detach().cpu().numpy()
    a = np.asarray(buf).astype(np.int64, copy=False).reshape(-1)
    if a.size != lay.words:
        raise ValueError(f"timing buffer has {a.size} words, the layout {lay} needs {lay.words}")
    clk = a[lay.phase_words:].reshape(lay.ctas, lay.warps, lay.clock_words).copy() if lay.clock_words else None
    a = a[:lay.phase_words].reshape(lay.ctas, lay.warps, lay.tiles, lay.phases, 2)
    return Timing(lay, a[..., 0].copy(), a[..., 1].copy(), cta_clock=clk)


def launch_clock(block, min_ns: float = 0.0) -> dict:
    """The SM clock of one launch from its launch-clock block ([cta, warp, CLOCK_WORDS] int64: each warp's
    clock64 and globaltimer at kernel start and exit, and the SM id + 1; zero = not recorded).

    Per CTA: cycles = last exit - first start on its SM's %clock64, ns = the same on %globaltimer,
    GHz = cycles / ns. Per SM: from the first start to the last exit of the CTAs it ran (%clock64 is
    one counter per multiprocessor: CUDA C++ Programming Guide, "Time Function"; %globaltimer is one
    nanosecond clock: PTX ISA, Special Registers), which spans a non-persistent grid's many short
    CTAs on one SM and so is the steadier figure. The launch clock is the median over SMs; min and
    max say how far SMs differ. span_ns: first start to last exit over the whole grid (globaltimer),
    the launch's duration as the kernel sees it. CTAs and SMs that spanned less than `min_ns` (a CTA
    that returned at once, next to the timer's step) enter no GHz figure; `short` counts them."""
    b = np.asarray(block).astype(np.int64, copy=False)
    if b.ndim != 3 or b.shape[2] != CLOCK_WORDS:
        raise ValueError(f"a launch-clock block is [cta, warp, {CLOCK_WORDS}] ({', '.join(CLOCK_FIELDS)}), "
                         f"got shape {b.shape}")
    rec = (b[..., 4] != 0) & (b[..., 2] != 0) & (b[..., 3] != 0)       # started and exited
    have = rec.any(axis=1)
    if not have.any():
        raise ValueError("no warp recorded its launch clock (an all-zero block: was the buffer passed, and "
                         "does the kernel open with PE_TIMING_CTA(timing)?)")
    big = np.iinfo(np.int64).max
    c0 = np.where(rec, b[..., 0], big).min(axis=1)[have]
    g0 = np.where(rec, b[..., 1], big).min(axis=1)[have]
    c1 = np.where(rec, b[..., 2], -1).max(axis=1)[have]
    g1 = np.where(rec, b[..., 3], -1).max(axis=1)[have]
    sm = np.where(rec, b[..., 4], 0).max(axis=1)[have] - 1
    cyc, ns = (c1 - c0).astype(np.float64), (g1 - g0).astype(np.float64)
    ok = (ns > 0) & (ns >= min_ns)
    ghz = cyc[ok] / ns[ok]
    per_sm = []
    for s in np.unique(sm):
        k = sm == s
        dc, dn = float(c1[k].max() - c0[k].min()), float(g1[k].max() - g0[k].min())
        if dn > 0 and dn >= min_ns:
            per_sm.append(dc / dn)
    per_sm = np.array(per_sm)

    def st(v):
        return ({"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max()), "n": int(v.size)}
                if v.size else {"min": None, "median": None, "max": None, "n": 0})
    return {"ghz": float(np.median(per_sm)) if per_sm.size else None,
            "per_sm_ghz": st(per_sm), "per_cta_ghz": st(ghz),
            "cta_cycles": st(cyc), "cta_ns": st(ns),
            "span_ns": float(g1.max() - g0.min()), "ctas": int(have.sum()), "sms": int(np.unique(sm).size),
            "short": int((~ok).sum()), "min_ns": float(min_ns)}


def load(path) -> Timing:
    """A Timing saved by Timing.save (its meta included). Refuses records whose phase list differs from
    common/timing.cuh's today (the ids would name other phases)."""
    with np.load(Path(path), allow_pickle=False) as z:
        lay = Layout(*[int(x) for x in z["layout"]])          # 5 numbers: saved before the launch clock
        saved = {int(k): v for k, v in json.loads(str(z["phases"])).items()}
        if saved != phases():
            raise ValueError(f"{path}: recorded with phases {saved}, common/timing.cuh now has {phases()}: "
                             "decode it with the timing.cuh of its git revision")
        clk = z["cta_clock"].copy() if "cta_clock" in z.files else None
        return Timing(lay, z["start"].copy(), z["end"].copy(), json.loads(str(z["meta"])), clk)


def plot(t: Timing, evidence: str, ax=None, phase_names=None, warp_labels=None):
    """Stacked bars: per warp, the average of each phase (the 'tile' total drawn as a marker).

    `evidence` names the kind and source, e.g. "measured, H100 SXM, 2026-05-01" or
    "recorded, fp8-megakernel-w1-stall-isolation.md"; it goes into the title.
    """
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    summ = t.summary()
    names = phase_names or [n for n in phases().values() if n in summ and n != "tile"]
    warps = sorted({w for row in summ.values() for w in row["warps"]})
    bottom = np.zeros(len(warps))
    x = np.arange(len(warps))
    for name in names:
        h = np.array([summ[name]["warps"].get(w, {"avg": 0.0})["avg"] for w in warps])
        ax.bar(x, h, bottom=bottom, label=name)
        bottom += h
    if "tile" in summ and (phase_names is None or "tile" in phase_names):
        tot = [summ["tile"]["warps"].get(w, {"avg": np.nan})["avg"] for w in warps]
        ax.plot(x, tot, "k_", markersize=20, label="tile (total)")
    ax.set_xticks(x, warp_labels or [f"W{w}" for w in warps])
    ax.set_ylabel(f"average {t.layout.unit}")
    ax.set_title(f"Per-warp phases ({evidence})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def summary_rows(summary: dict) -> list[dict]:
    """Compact rows of a clock64 summary ({phase: {avg, spread, warps}}): one row per phase, the spread
    of the per-warp averages beside the overall average."""
    rows = []
    for ph, row in summary.items():
        avgs = [float(v) if not isinstance(v, dict) else float(v["avg"]) for v in row["warps"].values()]
        ws = sorted(int(w) for w in row["warps"])
        rows.append({"phase": ph, "warps": f"{ws[0]}-{ws[-1]}" if len(ws) > 1 else str(ws[0]),
                     "avg (cycles)": round(float(row["avg"])), "min warp avg": round(min(avgs)),
                     "max warp avg": round(max(avgs))})
    return rows


# ---- the protocol's spans (pelib.events' one rule) -----------------------------------------------

def warp_roles(t: Timing) -> dict[int, str]:
    """{warp: role} from what each warp recorded: the warp that records the producer's phases is the
    producer; a warp that records the K loop is a consumer (named by its warpgroup, warp // 4);
    epilogue-only warps are the epilogue."""
    rec = t.recorded.any(axis=(0, 2))             # [warps, phases]
    names = phases()
    have = {w: {names[p] for p in range(t.layout.phases) if rec[w, p]} for w in range(t.layout.warps)}
    producers = {w // 4 for w, h in have.items() if h & {"producer_wait", "tma_issue"}}
    out = {}
    for w, h in have.items():
        if not h:
            continue
        if h & {"producer_wait", "tma_issue"}:
            out[w] = f"producer (warp {w})"
        elif "kloop" in h:    # in the producer's warpgroup: one warp issues the MMAs (sm_100); else a wgmma group
            out[w] = f"MMA issuer (warp {w})" if w // 4 in producers else f"consumer warpgroup {w // 4} (warp {w})"
        else:
            out[w] = f"epilogue (warp {w})"
    return out


def timing_spans(t: Timing, ctas=None, cluster: int = 1) -> Spans:
    """The spans of measured clock64 records: their role-phase events (Timing.events) by pelib.events' rule;
    a predicted Timing (pelib.predict, meta order PREDICTED_ORDER) draws the same way, in predicted cycles."""
    if t.meta.get("order") == PREDICTED_ORDER:
        return _events.spans(t.events(ctas, cluster), order=PREDICTED_ORDER, meta=t.meta,
                             unit="predicted cycles since the CTA's first record")
    return _events.spans(t.events(ctas, cluster), order=MEASURED_ORDER, meta=t.meta,
                         unit="ns (globaltimer)" if t.layout.clock == 1 else "clock64 cycles since the CTA's first record")


def protocol_spans(source, ctas=None, cluster: int = 1, clusters=None) -> Spans:
    """Spans of measured records (a Timing), of simulator events (a list of dicts / structured array) or
    Spans as they are."""
    if isinstance(source, Spans):
        return source
    if isinstance(source, Timing):
        return timing_spans(source, ctas, cluster)
    return _events.spans(source, ctas=ctas, clusters=clusters)


# ---- Chrome's Trace Event Format ------------------------------------------------------------------

TRACE_PH = ("X", "i", "M")


def chrome_trace(source, path=None, *, stage: str = "", device: str = "", date: str = "", git: str = "",
                 ctas=None, cluster: int = 1, clusters=None, evidence: str | None = None) -> dict:
    """Trace Event Format JSON (Perfetto: ui.perfetto.dev, 'Open trace file'; chrome://tracing) of
    measured clock64 records (a Timing) or of simulator events, written to `path` if given.

    pid = CTA (process_name "CTA c (cluster k, rank r)"), tid = warp (thread_name = its role), then the
    ring's slots and the accumulators as lanes of their own. ts: clock64 cycles since the CTA's first
    record (measured; the viewer's ruler says µs, read cycles) or the simulator's seq (an order stamp:
    the ruler is order, not time). otherData says which."""
    sp = protocol_spans(source, ctas, cluster, clusters)
    meta = {**sp.meta, **{k: v for k, v in dict(stage=stage, device=device, date=date, git=git).items() if v}}
    if evidence is None:
        evidence = SIM_ORDER if sp.order == SIM_ORDER else (
            f"{PREDICTED_ORDER} ({meta.get('label', meta.get('device', 'device unknown'))})"
            if sp.order == PREDICTED_ORDER else
            f"{MEASURED_ORDER} ({meta.get('device', 'device unknown')}, {meta.get('date', 'date unknown')})")
    ev: list[dict] = []
    for pid, name in sorted(sp.processes.items()):
        ev.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "ts": 0, "args": {"name": name}})
        ev.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": pid}})
    for (pid, tid), name in sorted(sp.threads.items()):
        ev.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}})
        ev.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": {"sort_index": tid}})
    for s in sorted(sp.spans, key=lambda s: (s.pid, s.tid, s.ts, -(s.dur or 0))):
        e = {"name": s.name, "cat": s.cat, "ph": "X" if s.dur is not None else "i", "ts": float(s.ts),
             "pid": s.pid, "tid": s.tid, "args": dict(s.args)}
        if s.dur is not None:
            e["dur"] = float(max(s.dur, 0))
        else:
            e["s"] = "t"
        ev.append(e)
    out = {"traceEvents": ev, "displayTimeUnit": "ns",
           "otherData": {"evidence": evidence, "ts_unit": sp.unit, "stage": meta.get("stage", ""),
                         "device": meta.get("device", "" if sp.order == MEASURED_ORDER else "pelib.sim (CPU model)"),
                         "date": meta.get("date", ""), "git": meta.get("git", ""),
                         **{k: str(v) for k, v in meta.items() if k not in ("stage", "device", "date", "git")}}}
    if path is not None:
        try:
            Path(path).write_text(json.dumps(out, separators=(",", ":")) + "\n")
        except OSError as e:
            raise unwritable(path, e) from None
    return out


class TraceWriteError(OSError):
    """A trace (or the records beside it) cannot be written where asked; the message names the path and the fix."""


def _cannot(path, why) -> TraceWriteError:
    return TraceWriteError(f"cannot write a trace to {path} ({why}): give a writable file path ending in .json "
                           "(e.g. ./trace.json)")


def unwritable(path, err: OSError) -> TraceWriteError:
    """The TraceWriteError of a failed write of the trace `path` (or of a file beside it: err.filename)."""
    return err if isinstance(err, TraceWriteError) else _cannot(err.filename or path, err.strerror or err)


def check_trace_path(path) -> None:
    """Refuse, before a run, a trace path that cannot be written: a folder, a file the system will not open
    for writing (/proc/version, a read-only mount), or a missing or unwritable folder. Creates nothing."""
    p = Path(path)
    why = None
    if p.is_dir():
        why = "it is a folder"
    elif p.is_file():
        try:
            with open(p, "a"):   # append without writing: the file is left as it is
                pass
        except OSError as e:
            why = e.strerror or str(e)
    elif not p.exists():     # (a device or a FIFO is the user's choice: left to the write)
        parent = p.parent
        if not parent.is_dir():
            why = f"no folder {parent}"
        elif not os.access(parent, os.W_OK):
            why = f"the folder {parent} is not writable"
    if why:
        raise _cannot(path, why)


def check_trace(trace: dict) -> list[str]:
    """What is wrong with a Trace Event Format object (empty: nothing): the keys every event needs,
    ph among X/i/M, numeric ts and dur, the metadata names Perfetto reads, and the evidence line."""
    bad = []
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["no traceEvents list"]
    for n, e in enumerate(trace["traceEvents"]):
        for k in ("name", "ph", "ts", "pid", "tid"):
            if k not in e:
                bad.append(f"event {n} lacks {k!r}")
        ph = e.get("ph")
        if ph not in TRACE_PH:
            bad.append(f"event {n} has ph {ph!r}, not one of {TRACE_PH}")
        if not isinstance(e.get("ts"), (int, float)) or isinstance(e.get("ts"), bool):
            bad.append(f"event {n}: ts {e.get('ts')!r} is not a number")
        if ph == "X" and (not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0):
            bad.append(f"event {n}: an X event needs a numeric dur >= 0, got {e.get('dur')!r}")
        if ph == "M" and e.get("name") not in ("process_name", "thread_name", "process_sort_index",
                                               "thread_sort_index", "process_labels"):
            bad.append(f"event {n}: metadata name {e.get('name')!r} is not one Perfetto reads")
        if ph == "M" and e.get("name", "").endswith("_name") and not isinstance(e.get("args", {}).get("name"), str):
            bad.append(f"event {n}: {e.get('name')} needs args.name")
        if ph != "M" and "cat" not in e:
            bad.append(f"event {n} lacks 'cat'")
    od = trace.get("otherData", {})
    if not str(od.get("evidence", "")).startswith((SIM_ORDER, MEASURED_ORDER, PREDICTED_ORDER)):
        bad.append(f"otherData.evidence {od.get('evidence')!r} names none of {SIM_ORDER!r}, {MEASURED_ORDER!r}, "
                   f"{PREDICTED_ORDER!r}")
    return bad[:50]
