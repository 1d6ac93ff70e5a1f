"""The one stage the protocol lets the model see: fit a few constants on sm90/06's measured clock64 phases.

    cal2, rep = fit(load("h100"), "h100")        # constants of FREE refitted, kind "fitted", sources named
    python -m pelib.predict --fit --gpu h100 --calibration <file> --out <file>

Targets: the committed TIMING run of sm90/06 (unbounded waits, the production build) on that chip,
results/<date>-<chip>/hopper-perf.json `clocks` entry of key "06": a CTA's cycles per tile (its clock64
span over its tiles), and the
consumer warps' average tma_wait, kloop, epi_wait and epi_phase1 (cycles). The prediction replays the
same TIMING build (its clock64 reads and record stores included). Objective: the sum of squared log
ratios predicted / measured (the period counted twice); Nelder-Mead over the FREE constants within
their bounds. No other stage's measurement is read here (the protocol, pelib.predict).
"""
from __future__ import annotations

import math

import numpy as np

from .. import results
from . import calibration as _cal
from .model import prepare, solve

STAGE = "sm90/06_permuted_b"
DEFINES = {"PE_UNBOUNDED_WAIT": 1}
# constant -> (low, high): what the microbenchmarks leave open and sm90/06's phases pin
FREE = {"issue.cpi": (0.8, 8.0), "store.bytes_per_clk_sm": (4.0, 256.0), "l2.demand_miss": (0.0, 1.0),
        "wgmma.tail_cycles": (0.0, 600.0)}
PHASES = ("tma_wait", "kloop", "epi_wait", "epi_phase1")
# With a measured calibration only what no microbenchmark pins is fitted: the share of the A stream's demand
# loads that still wait for DRAM (after the L2 prefetch and the sibling column blocks' loads of a tile), and
# an SM's TMA unit's rate (the TMA sweep's points with more than one box in flight per SM read the same
# cycles to the cycle on an H100 and an H200, the probe's own queue: they pin no rate).
FREE_MEASURED = {"l2.demand_miss": (0.0, 1.0), "tma.bytes_per_clk_sm": (4.0, 128.0)}


class FitError(RuntimeError):
    """No committed measurement of sm90/06 to fit on, or a fit that cannot run."""


def measured_06(chip: str) -> dict:
    """sm90/06's committed TIMING record on `chip`: {'file', 'period', phase: avg cycles, 'clock_ghz'}."""
    for path in reversed(results.files("hopper-perf.json")):
        if results.chip(path.parent) != chip:
            continue
        doc = results.load(path)
        for c in doc.get("clocks", []):
            if c.get("key") == "06" and c.get("ok"):
                # a CTA's clock64 span over its tiles (its first record to its last): the period with its ramp
                out = {"file": str(path.relative_to(path.parents[2])), "period": c["cta"]["cycles_per_tile_avg"],
                       "clock_ghz": c.get("sm_clock_ghz_from_span"), "defines": c.get("defines", {})}
                out.update({ph: c["phases"][ph]["avg"] for ph in PHASES})
                return out
    raise FitError(f"no committed TIMING record of sm90/06 on {chip} (results/<date>-{chip}/hopper-perf.json): "
                   "run python -m pelib.hopper_perf on that GPU first")


def launch_clock_06(chip: str) -> tuple[float, str] | None:
    """sm90/06's own SM clock in a short burst (the regime the stages are timed in): the newest committed
    energy-limiter run's launch clock of entry 06 on `chip` (clock64 over globaltimer of those launches)."""
    for path in reversed(results.files("energy-limiter.json")):
        if results.chip(path.parent) != chip:
            continue
        for row in results.load(path).get("summary", []):
            if row.get("entry") == "06" and row.get("launch clock (GHz)"):
                return float(row["launch clock (GHz)"]), (f"{path.relative_to(path.parents[2])} summary[entry=06] "
                                                          "launch clock (GHz): sm90/06's own clock in a short burst")
    return None


def targets_of(p, cal) -> dict:
    """The fitted quantities of a prediction: a CTA's cycles per tile with its ramp (the predicted time less
    the launch and the final drain, over the CTA's tiles: what the measured span over tiles is) and its
    consumer warps' phase averages."""
    body = p.cycles - cal["launch.overhead_us"] * 1e3 * p.clock_ghz - cal["store.drain_cycles"]
    out = {"period": body / max(1, p.tiles)}
    for ph in PHASES:
        if ph in p.phases:
            out[ph] = p.phases[ph]["avg"]
    return out


def _nelder_mead(f, x0, step=0.15, iters=60, tol=1e-4):
    n = len(x0)
    pts = [np.array(x0, float)] + [np.array(x0, float) + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    k = int(np.argmin(vals))
    return pts[k], vals[k]


def fit(cal: _cal.Calibration, chip: str, stage=None, free: dict | None = None, iters: int = 60,
        tiles: int = 16) -> tuple[_cal.Calibration, dict]:
    """`cal` with the FREE constants fitted on sm90/06's committed record on `chip` (kind "fitted", the
    record and the residuals in each source), and a report {targets, predicted, residuals}."""
    free = dict(free or FREE)
    meas = measured_06(chip)
    if stage is None:
        raise FitError("pass the Stage of sm90/06 built with the record's defines (pelib.predict.__main__ does)")
    su = prepare(stage, int(cal["sm_count"]), tiles=tiles, timing_build=True)
    clock = meas["clock_ghz"] or "timed"
    names = list(free)
    lo = np.array([free[n][0] for n in names])
    hi = np.array([free[n][1] for n in names])
    x0 = np.array([(min(max(cal[n], lo[i]), hi[i]) - lo[i]) / (hi[i] - lo[i]) for i, n in enumerate(names)])

    def values(x):
        x = np.clip(x, 0.0, 1.0)
        return {n.replace(".", "__"): float(lo[i] + x[i] * (hi[i] - lo[i])) for i, n in enumerate(names)}

    def loss(x):
        pen = float(np.sum(np.clip(-x, 0, None) + np.clip(x - 1, 0, None))) * 10
        c2 = cal.with_values(**values(x))
        got = targets_of(solve(su, c2, clock), c2)
        return pen + sum((2.0 if k == "period" else 1.0) * math.log(max(got.get(k, 1.0), 1.0) / meas[k]) ** 2
                         for k in ("period",) + PHASES)

    x, best = _nelder_mead(loss, x0, iters=iters)
    vals = values(x)
    out = cal.with_values(**vals)
    got = targets_of(solve(su, out, clock), out)
    resid = {k: round(got.get(k, float("nan")) / meas[k] - 1, 4) for k in ("period",) + PHASES}
    lc = launch_clock_06(chip)
    if lc is not None:
        out.constants["clock_ghz.launch06"] = {"value": lc[0], "unit": "GHz", "kind": "measured", "source": lc[1]}
    for n in names:
        e = out.constants[n]
        e["kind"] = "fitted"
        e["source"] = (f"pelib.predict.fit on {STAGE} {DEFINES} (TIMING build), {meas['file']} clocks[key=06]: "
                       f"cycles per tile and the consumers' {', '.join(PHASES)}; fitted jointly with "
                       f"{', '.join(m for m in names if m != n)}")
    report = {"stage": STAGE, "defines": DEFINES, "record": meas["file"], "clock_ghz": clock,
              "measured": {k: meas[k] for k in ("period",) + PHASES},
              "predicted": {k: round(v, 1) for k, v in got.items()}, "residuals": resid,
              "fitted": {n: round(out[n], 4) for n in names}, "loss": round(best, 6)}
    out.notes.append(report)
    return out, report
