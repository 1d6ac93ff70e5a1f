"""Decode in-kernel clock64 records (common/timing.cuh, a TIMING build) into per-warp, per-phase cycles."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .paths import KERNELS

HEADER = KERNELS / "common" / "timing.cuh"
_PHASE_RE = re.compile(r"^\s*PE_PHASE_([A-Z0-9_]+)\s*=\s*(\d+)\s*,?\s*(?://\s*(.*))?$", re.M)
CLOCKS = {0: "cycles (clock64)", 1: "ns (globaltimer)"}


@lru_cache(maxsize=1)
def phases() -> dict[int, str]:
    """{id: name} of the phases, parsed from the pe_phase enum of common/timing.cuh (the one definition)."""
    out = {}
    for name, num, _ in _PHASE_RE.findall(HEADER.read_text()):
        if name != "COUNT":
            out[int(num)] = name.lower()
    if sorted(out) != list(range(len(out))):
        raise ValueError(f"{HEADER}: phase ids must run 0..n-1, got {sorted(out)}")
    return out


@lru_cache(maxsize=1)
def phase_notes() -> dict[str, str]:
    """{name: the header's comment on it}."""
    return {n.lower(): (c or "").strip() for n, _, c in _PHASE_RE.findall(HEADER.read_text()) if n != "COUNT"}


def phase_id(name: str) -> int:
    for k, v in phases().items():
        if v == name.lower():
            return k
    raise KeyError(f"no phase {name!r}; phases are {list(phases().values())}")


@dataclass(frozen=True)
class Layout:
    """The buffer shape a TIMING build was compiled with: [ctas][warps][tiles][phases][2] u64."""

    ctas: int
    warps: int
    tiles: int
    phases: int
    clock: int = 0     # 0 = clock64 cycles, 1 = globaltimer ns

    @property
    def words(self) -> int:
        return self.ctas * self.warps * self.tiles * self.phases * 2

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
    return Layout(ctas, ex["timing_warps"], ex["timing_tiles"], ex["timing_phases"], ex.get("timing_clock", 0))


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
    a = a.reshape(lay.ctas, lay.warps, lay.tiles, lay.phases, 2)
    return Timing(lay, a[..., 0].copy(), a[..., 1].copy())


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
