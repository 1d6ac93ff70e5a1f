"""The one stage the protocol lets the model see: fit a few constants on sm90/06's measurements.

    cal2, rep = fit(load("h100"), "h100")        # constants of FREE refitted, kind "fitted", sources named
    cal2, rep = fit_grid(measured, "h100")       # a measured calibration: FREE_MEASURED on a grid
    python -m pelib.predict --fit --gpu h100 --calibration <file> --out <file>

Targets, all of sm90/06 on that chip:
  - its committed TIMING run (unbounded waits, the production build), results/<date>-<chip>/hopper-perf.json
    `clocks` entry of key "06": a CTA's cycles per tile (its clock64 span over its tiles) and the consumer
    warps' average tma_wait, kloop, epi_wait and epi_phase1 (cycles), replayed with the same TIMING build
    (its clock64 reads and record stores included) at that run's clock;
  - with a measured calibration, its time in the regime the blind run times every stage in: the newest
    committed energy-limiter run's short bursts (median of 20, L2 flushed, PE_WAIT_KIND=2) times that
    run's launch clock, in cycles, replayed at that clock.
Objective: the sum of squared log ratios predicted / measured (the burst's cycles counted four times).
With a provisional calibration Nelder-Mead moves the FREE constants within their bounds; with a
measured one a grid over FREE_MEASURED (the replay draws its loads' latencies at random, seeded: a grid
is robust to the steps such draws give the objective). No other stage's measurement is read here (the
protocol, pelib.predict).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .. import results
from ..stage import Stage
from . import calibration as _cal
from .model import prepare, solve

STAGE = "sm90/06_permuted_b"
DEFINES = {"PE_UNBOUNDED_WAIT": 1}
# constant -> (low, high): what the microbenchmarks leave open and sm90/06's phases pin
FREE = {"issue.cpi": (0.8, 8.0), "store.bytes_per_clk_sm": (4.0, 256.0), "l2.demand_miss": (0.0, 1.0),
        "wgmma.tail_cycles": (0.0, 600.0)}
PHASES = ("tma_wait", "kloop", "epi_wait", "epi_phase1")
# With a measured calibration only what no microbenchmark pins is fitted (a constant a probe measured is never
# refitted: fit_grid drops it): the share of the A stream's loads that wait in the memory system's queue as a
# dependent DRAM load does at the kernel's traffic (the rest find their box in L2 at the L2 latency; no probe
# runs the kernel's mix of tiles); how much slower the tensor pipe serves one warpgroup's wgmma while the other
# runs its epilogue, where the epilogue probe's chain gave no rate (pelib.predict.measured.rejected); the launch's
# own overhead in the timed regime, where the launch probe timed one cold launch (the same). One SM's store rate
# is measured (the epilogue probe on one row group's 3 SMs) and no longer fitted.
FREE_MEASURED = {"l2.demand_miss": (0.0, 1.0), "tensor.beside_epilogue": (1.0, 1.5), "launch.overhead_us": (2.0, 8.0)}
GRID = {"l2.demand_miss": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), "store.bytes_per_clk_sm": (24.0, 32.0, 48.0, 64.0),
        "tensor.beside_epilogue": (1.0, 1.1, 1.2, 1.3), "launch.overhead_us": (2.0, 3.0, 4.0, 5.0, 6.0, 8.0)}
# Constants that add the same cycles to every prediction (after the fixed point): a grid over them needs no replay.
ADDITIVE = {"launch.overhead_us"}
BURST_DEFINES = {"PE_WAIT_KIND": 2}     # the build the energy-limiter run times (its entry "06")


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


def measured_burst_06(chip: str) -> dict | None:
    """sm90/06's time in the blind run's regime on `chip`: the newest committed energy-limiter run's summary
    row "06" (short bursts, random inputs): {'file', 'ms', 'clock_ghz', 'cycles'}, or None."""
    for path in reversed(results.files("energy-limiter.json")):
        if results.chip(path.parent) != chip:
            continue
        for row in results.load(path).get("summary", []):
            ms, ghz = row.get("burst ms (random)"), row.get("launch clock (GHz)")
            if row.get("entry") == "06" and ms and ghz:
                return {"file": str(path.relative_to(path.parents[2])), "ms": float(ms), "clock_ghz": float(ghz),
                        "cycles": float(ms) * float(ghz) * 1e6}
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


def fit_grid(cal: _cal.Calibration, chip: str, free: dict | None = None, grid: dict | None = None, tiles: int = 16,
             log=print) -> tuple[_cal.Calibration, dict]:
    """`cal` with the FREE_MEASURED constants a measured calibration still lacks set by a grid search on sm90/06's
    TIMING record and its burst time (module docstring); a report with every point's loss. An ADDITIVE constant
    is priced without a replay: its cycles are added to the burst's (the traffic it shifts, a few us of a
    ~1 ms launch, moves the memory server's fixed point by less than its own size)."""
    free = {k: v for k, v in (free or FREE_MEASURED).items() if cal.constants.get(k, {}).get("kind") != "measured"}
    cal = cal.with_values()
    for k in free:
        if k not in cal.constants:        # an optional constant no probe has measured yet
            cal.constants[k] = {"value": 1.0, "unit": _cal.OPTIONAL.get(k, ""), "kind": "provisional",
                                "source": "fitted on sm90/06 below"}
    grid = {k: tuple((grid or GRID)[k]) for k in free}
    meas, burst = measured_06(chip), measured_burst_06(chip)
    su_t = prepare(Stage(STAGE, DEFINES), int(cal["sm_count"]), tiles=tiles, timing_build=True)
    su_p = prepare(Stage(STAGE, BURST_DEFINES), int(cal["sm_count"]), tiles=tiles) if burst else None
    clock = meas["clock_ghz"] or "timed"
    replayed = [n for n in free if n not in ADDITIVE]
    added = [n for n in free if n in ADDITIVE]

    def evaluate(values):
        """{additive point: (loss, residuals)} at one point of the replayed constants, and the TIMING targets."""
        c2 = cal.with_values(**{k.replace(".", "__"): v for k, v in values.items()})
        got = targets_of(solve(su_t, c2, clock), c2)
        base = {k: got.get(k, float("nan")) / meas[k] - 1 for k in ("period",) + PHASES}
        burst_cycles = solve(su_p, c2, burst["clock_ghz"]).cycles if su_p is not None else None
        out = {}
        for combo in itertools.product(*(grid[n] for n in added)):
            extra = dict(zip(added, combo))
            res = dict(base)
            if burst_cycles is not None:
                shift = sum((v - c2[n]) * 1e3 * burst["clock_ghz"] for n, v in extra.items())   # us -> cycles
                res["burst"] = (burst_cycles + shift) / burst["cycles"] - 1
            loss = sum((4.0 if k == "burst" else 1.0) * math.log(max(1e-6, 1 + v)) ** 2 for k, v in res.items())
            out[tuple(sorted(extra.items()))] = (loss, res)
        return out, got
    tried = []
    for combo in itertools.product(*(grid[n] for n in replayed)):
        values = dict(zip(replayed, combo))
        got_all, _ = evaluate(values)
        for extra, (loss, res) in got_all.items():
            v = {**values, **dict(extra)}
            tried.append({"values": v, "loss": round(loss, 6), "residuals": {k: round(x, 4) for k, x in res.items()}})
        bl = min(got_all.values(), key=lambda t: t[0])
        log(f"  {values} best loss {bl[0]:.5f} " + " ".join(f"{k} {x:+.1%}" for k, x in bl[1].items()))
    best = min(tried, key=lambda t: t["loss"])
    out = cal.with_values(**{k.replace(".", "__"): v for k, v in best["values"].items()})
    got_all, got = evaluate({n: best["values"][n] for n in replayed})
    loss, res = got_all[tuple(sorted((n, best["values"][n]) for n in added))]
    lc = launch_clock_06(chip)
    if lc is not None:
        out.constants["clock_ghz.launch06"] = {"value": lc[0], "unit": "GHz", "kind": "measured", "source": lc[1]}
    names = list(free)
    for n in names:
        e = out.constants[n]
        e["kind"] = "fitted"
        e["source"] = (f"pelib.predict.fit.fit_grid on {STAGE}: {meas['file']} clocks[key=06] ({DEFINES}, TIMING "
                       f"build: cycles per tile and the consumers' {', '.join(PHASES)})"
                       + (f" and {burst['file']} summary[entry=06] (burst ms x launch clock, {BURST_DEFINES})" if burst else "")
                       + f"; grid {list(grid[n])}" + (f", jointly with {', '.join(m for m in names if m != n)}"
                                                     if len(names) > 1 else ""))
    report = {"stage": STAGE, "defines": DEFINES, "record": meas["file"], "clock_ghz": clock,
              "burst": burst, "measured": {k: meas[k] for k in ("period",) + PHASES},
              "predicted": {k: round(v, 1) for k, v in got.items()},
              "residuals": {k: round(v, 4) for k, v in res.items()},
              "fitted": {n: round(out[n], 4) for n in names}, "loss": round(loss, 6), "grid": tried}
    out.notes.append({"fit": {k: v for k, v in report.items() if k != "grid"}})
    return settle(out), report


def settle(cal: _cal.Calibration) -> _cal.Calibration:
    """After a fit: the calibration is provisional only while a constant still is, and its protocol says which."""
    left = sorted(n for n, c in cal.constants.items() if c.get("kind") == "provisional")
    cal.provisional = bool(left)
    cal.protocol = cal.protocol.split("; still provisional:")[0] + (f"; still provisional: {', '.join(left)}" if left else "")
    return cal


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
