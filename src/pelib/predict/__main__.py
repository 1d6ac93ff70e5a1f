"""python -m pelib.predict: predict stages, every sm90 stage at once, fit on sm90/06, or compare.

    python -m pelib.predict sm90/06_permuted_b --gpu h100 [--calibration FILE] [--clock timed|sustained|GHz]
    python -m pelib.predict --all-sm90 --gpu h100 --calibration FILE --out results/<date>-<device>/predictions-sm90.json
    python -m pelib.predict --fit --gpu h100 --calibration FILE --out FILE      # the fitted constants (sm90/06 only)
      (FILE may be pelib.calibrate's measured calibration: its constants replace the committed ones first)
    python -m pelib.predict --compare PRED.json --measured MEAS.json --out results/<date>-<device>/prediction-vs-measured.json
    python -m pelib.predict --b200-calibration --calibration <Hopper file> --out FILE   # public + one fitted clock
    python -m pelib.predict --history --gpu b200 [--calibration FILE] --out FILE        # FP8 00-09, the NVFP4 ring
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .. import bench, stages
from ..stage import Stage
from . import blackwell as _bw, calibration as _cal, compare as _compare, fit as _fit, measured as _measured
from .model import PROTOCOL, PredictError, predict, report, trace

# The builds every sm90 stage is predicted in: its default (the bounded, call-free waits the sweeps time)
# and the unbounded wait build a production kernel ships (common/mbarrier.cuh PE_WAIT_KIND).
WAIT_BUILDS = ({}, {"PE_WAIT_KIND": 2})


def sm90_builds() -> list[Stage]:
    """Every sm90 stage file (00-11 with the sub-stages) in each of WAIT_BUILDS."""
    return [Stage(p, d) for p in stages.family_stages("sm90") for d in WAIT_BUILDS]


def predict_all(builds, gpu: str, calibration, clock="timed", log=print) -> dict:
    """The predictions document: one entry per build, the protocol, the calibration and its constants."""
    cal = _measured.resolve(calibration, gpu)
    out, t0 = [], time.perf_counter()
    for s in builds:
        p = predict(s, gpu, cal, clock)
        e = p.to_json()
        e["defines"] = dict(s.defines)
        out.append(e)
        log(f"{s.key:32s} {json.dumps(s.defines) if s.defines else '':22s} {p.cycles:12,.0f} cycles "
            f"{p.ms:7.4f} ms  {p.seconds:5.1f} s  {p.sentence}")
    # sm90/06's per-role phases, from its TIMING build (as its clock64 record was taken)
    six = Stage("sm90/06_permuted_b", {"PE_WAIT_KIND": 2})
    pt = predict(six, gpu, cal, clock, timing_build=True, tiles=16)
    for e in out:
        if e["stage"] == six.key and e["defines"] == six.defines:
            e["timing_phases"] = {k: v["avg"] for k, v in pt.phases.items()}
    meta = {"protocol": PROTOCOL, "gpu": gpu, "device": cal.device, "calibration": cal.path,
            "calibration_label": cal.label(), "calibration_date": cal.date, "provisional": cal.provisional,
            "clock": clock,
            "git": bench.git_revision(), "seconds": round(time.perf_counter() - t0, 1),
            "constants": cal.table()}
    return {"schema": "pelib.predict.predictions/1", "meta": meta, "predictions": out}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pelib.predict", description=__doc__.split("\n")[0])
    ap.add_argument("stages", nargs="*", help="family/name of the stages to predict")
    ap.add_argument("-D", dest="defines", action="append", metavar="K=V", help="a define (repeatable)")
    ap.add_argument("--gpu", default="h100", help="h100, h200 or b200: whose calibration prices the stages")
    ap.add_argument("--calibration", help="a calibration JSON (default: the GPU's committed one)")
    ap.add_argument("--clock", default="timed", help="a clock regime of the calibration or a launch clock in GHz")
    ap.add_argument("--all-sm90", action="store_true", help="every sm90 stage in each wait build")
    ap.add_argument("--fit", action="store_true", help="fit the free constants on sm90/06's committed record")
    ap.add_argument("--compare", metavar="PRED.json", help="compare a predictions file with --measured")
    ap.add_argument("--measured", metavar="MEAS.json", help="a measurement (sweep or hopper_perf JSON)")
    ap.add_argument("--trace", metavar="OUT.json", help="the predicted run's Chrome trace (one stage)")
    ap.add_argument("--b200-calibration", action="store_true", help="build the B200 calibration from --calibration "
                    "(a Hopper one): public constants, the clock fitted on one recorded point, the rest transferred")
    ap.add_argument("--history", action="store_true", help="the FP8 history and the NVFP4 ring sweep on a B200, "
                    "predicted against the lab's records")
    ap.add_argument("--out", help="where to write the JSON")
    return ap


def _defines(items) -> dict:
    out = {}
    for it in items or []:
        k, _, v = it.partition("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else (v or 1)
    return out


def main(argv=None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    try:
        if a.compare:
            if not a.measured:
                ap.error("--compare needs --measured MEAS.json")
            doc = _compare.compare(_compare.load_json(a.compare), _compare.load_json(a.measured))
            if a.out:
                _compare.write(doc, a.out)
            print(json.dumps(doc["summary"], indent=1))
            return 0
        if a.b200_calibration:
            out = _bw.b200_calibration(_measured.resolve(a.calibration, "h100"))
            text = json.dumps(out.to_json(), indent=1) + "\n"
            Path(a.out).write_text(text) if a.out else print(text)
            return 0
        cal = _measured.resolve(a.calibration, a.gpu)
        if a.history:
            doc = {"schema": "pelib.predict.history/1", "calibration": cal.path, "provisional": cal.provisional,
                   "protocol": cal.protocol, "fp8": _bw.history(cal, log=print), "nvfp4_ring": _bw.nvfp4_ring(cal)}
            if a.out:
                Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
            return 0
        if a.fit:
            out, rep = _fit.fit(cal, a.gpu, stage=Stage(_fit.STAGE, _fit.DEFINES),
                                free=_fit.FREE_MEASURED if cal.curves else _fit.FREE)
            print(json.dumps(rep, indent=1))
            if a.out:
                Path(a.out).write_text(json.dumps(out.to_json(), indent=1) + "\n")
            return 0
        if a.all_sm90:
            doc = predict_all(sm90_builds(), a.gpu, cal, _clock(a.clock))
            if a.out:
                Path(a.out).parent.mkdir(parents=True, exist_ok=True)
                Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
            return 0
        if not a.stages:
            ap.error("name a stage, or pass --all-sm90, --fit or --compare")
        for name in a.stages:
            p = predict(Stage(name, _defines(a.defines)), a.gpu, cal, _clock(a.clock))
            print(report(p))
            if a.trace:
                trace(p, a.trace)
            if a.out:
                Path(a.out).write_text(json.dumps(p.to_json(), indent=1) + "\n")
        return 0
    except (PredictError, _cal.CalibrationError, _compare.CompareError, _fit.FitError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _clock(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


if __name__ == "__main__":
    sys.exit(main())
