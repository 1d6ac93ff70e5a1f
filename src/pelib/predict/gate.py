"""The self-consistency gate a blind round waits for: the model must reproduce what it was built from.

    g = gate("h100")                     # {"rows": [...], "passed": bool, "tolerance": 0.10}
    python -m pelib.predict --gate --gpu h100

Rows, each predicted against its committed measurement on that chip (neither is in the blind set, so no
blind number is fitted here):
  - sm90/06's per-role phases (tma_wait, kloop, epi_wait, epi_phase1) and its cycles per tile, its TIMING build
    replayed at the clock of its committed clock64 record (measured_06);
  - the three SOL probes of 06 (src/kernels/sm90/probes/sol_probe_06.cu: no stores, no A, neither), as their
    time over 06's in the same committed run (results/<date>-<chip>/hopper-perf.json, the unbounded-wait builds):
    a ratio, so the clock the run had cancels; a probe the replay cannot finish is a failed row with its reason.
The calibration probes (calib_*.cu) have no simulator entry yet: their rows are listed as not run.
"""
from __future__ import annotations

from .. import results
from ..stage import Stage
from . import measured as _measured
from .model import PredictError, default_clock, prepare, solve
from .replay import ReplayError

TOLERANCE = 0.10
STAGE = "sm90/06_permuted_b"
DEFINES = {"PE_UNBOUNDED_WAIT": 1}
PHASES = ("tma_wait", "kloop", "epi_wait", "epi_phase1")     # the consumer warps' phases of 06's TIMING record


class GateError(RuntimeError):
    """No committed measurement of sm90/06 on the chip to hold the model to."""


PROBE = "sm90/probes/sol_probe_06"
PROBES = ({"PROBE_NO_STORE": 1}, {"PROBE_NO_A": 1}, {"PROBE_NO_A": 1, "PROBE_NO_STORE": 1})


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
    raise GateError(f"no committed TIMING record of sm90/06 on {chip} (results/<date>-{chip}/hopper-perf.json): "
                   "run python -m pelib.measure.hopper_perf on that GPU first")


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


def _row(what, predicted, measured, source, tol):
    err = None if predicted is None or not measured else predicted / measured - 1
    return {"what": what, "predicted": predicted, "measured": measured, "error": err,
            "passed": err is not None and abs(err) <= tol, "source": source}


def measured_probes(chip: str) -> dict | None:
    """The newest committed hopper-perf run of `chip` with 06's unbounded-wait build and its SOL probes:
    {'file', '06': ms, probe defines (sorted tuple): ms}."""
    for path in reversed(results.files("hopper-perf.json")):
        if results.chip(path.parent) != chip:
            continue
        doc = results.load(path)
        base = next((v["median_ms"] for v in doc.get("variants", [])
                     if v.get("key") == "06" and v.get("defines") == DEFINES and v.get("median_ms")), None)
        if base is None or not doc.get("probes"):
            continue
        out = {"file": str(path.relative_to(path.parents[2])), "06": float(base)}
        for p in doc["probes"]:
            d = {k: v for k, v in (p.get("defines") or {}).items() if k not in DEFINES}
            if p.get("median_ms"):
                out[tuple(sorted(d.items()))] = float(p["median_ms"])
        return out
    return None


def gate(chip: str, calibration=None, tol: float = TOLERANCE) -> dict:
    """The gate's rows on `chip` with `calibration` (default: the chip's newest measured one), and whether all pass."""
    cal = _measured.resolve(calibration, chip)
    sms = int(cal["sm_count"])
    rows = []
    m06 = measured_06(chip)
    su = prepare(Stage(STAGE, DEFINES), sms, timing_build=True, occupancy=cal.occupancy)
    p = solve(su, cal, m06["clock_ghz"] or default_clock(cal), chip)
    got = targets_of(p, cal)
    for ph in ("period",) + PHASES:
        rows.append(_row(f"sm90/06 {'cycles per tile' if ph == 'period' else ph}", got.get(ph), m06.get(ph),
                         m06["file"], tol))
    mp = measured_probes(chip)
    clock = default_clock(cal)
    base = solve(prepare(Stage(STAGE, DEFINES), sms, occupancy=cal.occupancy), cal, clock, chip)
    for d in PROBES:
        name = "SOL probe " + " + ".join(k.lower() for k in d)
        meas = mp.get(tuple(sorted(d.items()))) if mp else None
        ratio_m = meas / mp["06"] if meas else None
        try:
            pr = solve(prepare(Stage(PROBE, {**DEFINES, **d}), sms, occupancy=cal.occupancy), cal, clock, chip)
            rows.append(_row(f"{name} / sm90/06", pr.cycles / base.cycles, ratio_m,
                             mp["file"] if mp else "no committed hopper-perf run with probes", tol))
        except (ReplayError, PredictError) as e:
            r = _row(f"{name} / sm90/06", None, ratio_m, mp["file"] if mp else "", tol)
            r["why"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(r)
    for probe in ("calib_epilogue (858 / 1,535 / 2,394 cycles a tile)", "calib_wgmma chain", "calib_tma burst"):
        rows.append({"what": f"probe {probe}", "predicted": None, "measured": None, "error": None, "passed": False,
                     "source": "not run: the calibration probes have no simulator entry for the model yet"})
    return {"chip": chip, "calibration": cal.label(), "tolerance": tol, "rows": rows,
            "passed": all(r["passed"] for r in rows)}


def lines(g: dict) -> list[str]:
    """The gate as text, one row a line, its verdict last."""
    out = [f"self-consistency gate on {g['chip']} ({g['calibration']}), tolerance ±{g['tolerance']:.0%}:"]
    for r in g["rows"]:
        if r["error"] is None:
            val = r.get("why") or r["source"]
            out.append(f"  FAIL {r['what']}: {val}")
            continue
        out.append(f"  {'pass' if r['passed'] else 'FAIL'} {r['what']}: predicted {r['predicted']:,.4g}, measured "
                   f"{r['measured']:,.4g} ({r['error']:+.1%}; {r['source']})")
    out.append(f"  gate {'PASSED' if g['passed'] else 'NOT PASSED'}: "
               f"{sum(r['passed'] for r in g['rows'])} of {len(g['rows'])} rows within ±{g['tolerance']:.0%}")
    return out
