"""python -m pelib.predict: predict stages, every sm90 stage at once, build a calibration, or compare.

    python -m pelib.predict sm90/06_permuted_b --gpu h100 [--calibration FILE] [--clock timed|sustained|GHz]
    python -m pelib.predict --all-sm90 --gpu h100,h200 --calibration FILE1,FILE2 --out OUT1,OUT2
      (every entry of pelib.predict.blind.entries(), each simulated once for both chips; OUT: results/<date>-<device>/predictions-sm90.json)
    python -m pelib.predict --build-calibration --gpu h200 --calibration <the probes file> --out FILE
      (the model's constants from pelib.predict.probes' measured file over the chip's provisional ones; nothing
      is fitted on a stage's time)
    python -m pelib.predict --compare PRED.json --measured MEAS.json --out results/<date>-<device>/prediction-vs-measured.json
    python -m pelib.predict --b200-calibration --calibration <Hopper file> --out FILE   # public + one fitted clock
    python -m pelib.predict --history --gpu b200 [--calibration FILE] --out FILE        # FP8 00-09, the NVFP4 ring
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path

from .. import bench
from . import blind as _blind
from ..stage import Stage
from . import blackwell as _bw, calibration as _cal, compare as _compare, measured as _measured
from . import gate as _gate
from .model import PROTOCOL, TILES, PredictError, _cpu, clock_of, default_clock, predict, prepare, report, solve, trace

def sm90_builds(variants: bool | str = False) -> list[Stage]:
    """What the blind run measures (pelib.predict.blind.entries: every sm90 stage file at its defaults, 06 first,
    and the unbounded wait build a production kernel ships of 06, 10 and 11), in its order."""
    return [Stage(k, d) for k, d in _blind.entries(variants)]


def model_version() -> str:
    """The model's version: a hash of pelib.predict's source files (what a prediction was computed by, beside
    the git revision, which a dirty tree does not pin)."""
    h = hashlib.sha256()
    for f in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def files_read(cal) -> list[str]:
    """The committed files the calibration's constants were taken from (their sources name them), the
    calibration's own file first: what the model read, and nothing else of the measurements."""
    out = [cal.path] if cal.path else []
    for c in cal.constants.values():
        for f in re.findall(r"results/[\w.\-/]+?\.json", str(c.get("source", ""))):
            if f not in out:
                out.append(f)
    return out


def _one_build(job) -> list[dict]:
    """One build priced on every GPU of the job (one simulation per SM count): its entry for each GPU, or, for
    sm90/06's TIMING build, its per-role phases."""
    st, timing, gpus, cals, clocks = job
    setups, out = {}, []
    for g, cal, clk in zip(gpus, cals, clocks):
        c0 = _cpu()
        sms = int(cal["sm_count"])
        if sms not in setups:
            setups[sms] = (prepare(st, sms, tiles=16 if timing else TILES, timing_build=timing), _cpu() - c0)
        su, prep_s = setups[sms]
        p = solve(su, cal, clk, g)
        p.seconds = prep_s + (_cpu() - c0)
        if timing:
            out.append({"timing_phases": {k: round(v["avg"], 1) for k, v in p.phases.items()}})
            continue
        e = p.to_json()
        e["defines"] = dict(st.defines)
        out.append(e)
    return out


def predict_all(builds, gpus, calibrations, clock=None, log=print, jobs: int = 1) -> list[dict]:
    """One predictions document per GPU (gpus[i] priced with calibrations[i]): one entry per build, the
    protocol, the calibration, its constants and the files it read. Each build is simulated once for every
    GPU of the same SM count (the graph is the chip's only through the grid): a stage costs one simulation
    and one replay per GPU; `jobs` worker processes take the builds in turn (the results do not depend on it)."""
    cals = [_measured.resolve(c, g) for g, c in zip(gpus, calibrations)]
    clocks = [default_clock(c, clock) for c in cals]
    t0 = time.perf_counter()
    six = Stage("sm90/06_permuted_b", {"PE_WAIT_KIND": 2})
    work = [(s, False, gpus, cals, clocks) for s in builds] + [(six, True, gpus, cals, clocks)]
    if jobs > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(jobs) as pool:
            results = pool.map(_one_build, work, chunksize=1)
    else:
        results = [_one_build(j) for j in work]
    outs = [[] for _ in gpus]
    for (s, timing, *_), got in zip(work, results):
        for i, e in enumerate(got):
            if timing:
                for x in outs[i]:
                    if x["stage"] == six.key and x["defines"] == six.defines:
                        x["timing_phases"] = e["timing_phases"]
                continue
            outs[i].append(e)
            log(f"{gpus[i]} {s.key:30s} {json.dumps(s.defines) if s.defines else '':20s} {e['cycles']:12,.0f} cycles "
                f"{e['ms']:7.4f} ms  {e['seconds']:5.1f} s  {e['critical_path']}")
    docs = []
    for g, cal, clk, out in zip(gpus, cals, clocks, outs):
        ghz, name = clock_of(cal, clk)
        meta = {"protocol": PROTOCOL, "gpu": g, "device": cal.device, "calibration": cal.path,
                "calibration_label": cal.label(), "calibration_date": cal.date, "provisional": cal.provisional,
                "clock": name, "clock_ghz": ghz,
                "regime": "what pelib.predict.blind measures: each entry's median of 20 launches (L2 flushed before each, "
                          "after a warm-up), in cycles at the launch's own SM clock; ms here = cycles at clock_ghz",
                "git": bench.git_revision(), "model_version": model_version(),
                "files_read": files_read(cal),
                "files_read_note": "of a run file holding several stages (hopper-perf.json, energy-limiter.json) the "
                                   "model read sm90/06's entries only (clocks[key=06], summary[entry=06]: its clock and the gate, pelib.predict.gate)",
                "entries": "pelib.predict.blind.entries()" + _variant_set(builds),
                "seconds": round(time.perf_counter() - t0, 1), "constants": cal.table()}
        docs.append({"schema": "pelib.predict.predictions/1", "meta": meta, "predictions": out})
    return docs


NOT_BLIND = "made after the blind measurement of the same stages: not blind"


def not_blind(doc: dict, measured: list[str]) -> dict:
    """A predictions document made after its stages were measured (a model changed in the light of the blind
    comparison): its protocol says so first, and it names the measurements it follows."""
    meta = dict(doc["meta"])
    meta.update(blind=False, made_after=list(measured), label=NOT_BLIND,
                protocol=(f"NOT BLIND: {NOT_BLIND} ({', '.join(measured)}); the model was changed after reading "
                          "that comparison. What the blind protocol said of the earlier predictions: " + meta["protocol"]))
    return {**doc, "meta": meta}


def _variant_set(builds) -> str:
    """' with <the variant set>' the builds hold beyond the stage files (named as pelib.predict.blind names it)."""
    base = {(s.key, json.dumps(s.defines, sort_keys=True)) for s in sm90_builds()}
    extra = {(s.key, json.dumps(s.defines, sort_keys=True)) for s in builds} - base
    if not extra:
        return ""
    for name, vs in _blind.VARIANT_SETS.items():
        if extra == {(k, json.dumps(d, sort_keys=True)) for k, d in vs}:
            return " with VARIANTS" if vs is _blind.VARIANTS else f" with VARIANT_SETS[{name!r}]"
    return f" with {len(extra)} other builds"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pelib.predict", description=__doc__.split("\n")[0])
    ap.add_argument("stages", nargs="*", help="family/name of the stages to predict")
    ap.add_argument("-D", dest="defines", action="append", metavar="K=V", help="a define (repeatable)")
    ap.add_argument("--gpu", default="h200", help="h100, h200 or b200: whose calibration prices the stages "
                    "(--all-sm90: several, comma-separated, each with its --calibration and --out)")
    ap.add_argument("--calibration", help="a calibration JSON (default: the GPU's committed one; --all-sm90: one per "
                    "--gpu, comma-separated)")
    ap.add_argument("--clock", default=None, help="a clock regime of the calibration or a launch clock in GHz "
                    "(default: timed; --all-sm90: launch06 where the calibration has it)")
    ap.add_argument("--all-sm90", action="store_true", help="every sm90 stage in each wait build")
    ap.add_argument("--variants", nargs="?", const=True, default=False, choices=[True, *_blind.VARIANT_SETS],
                    help="--all-sm90: also pelib.predict.blind.VARIANTS, or the named set of VARIANT_SETS (a blind round)")
    ap.add_argument("--fit", action="store_true", help=argparse.SUPPRESS)      # refused: nothing is fitted on a stage
    ap.add_argument("--build-calibration", action="store_true", help="the model's calibration from --calibration "
                    "(pelib.predict.probes' measured file) over --gpu's provisional constants, written to --out")
    ap.add_argument("--transfer-from", metavar="CHIP", help="--build-calibration: a constant the probes left "
                    "provisional is taken from CHIP's newest calibration where it was measured (kind transferred)")
    ap.add_argument("--gate", action="store_true", help="the self-consistency gate: the model against its own probes "
                    "and sm90/06's per-role phases on --gpu (pelib.predict.gate); exit status 1 unless it passes")
    ap.add_argument("--compare", metavar="PRED.json", help="compare a predictions file with --measured")
    ap.add_argument("--traffic", metavar="COUNTERS", help="--compare: the predictions' DRAM and L2 bytes against the "
                    "Nsight Compute counters of a committed energy-headline run instead of the times")
    ap.add_argument("--measured", metavar="MEAS.json", help="a measurement (blind, sweep or hopper_perf JSON); "
                    "several, comma-separated: a later file's entry counts where the earlier ones have none verified")
    ap.add_argument("--trace", metavar="OUT.json", help="the predicted run's Chrome trace (one stage)")
    ap.add_argument("--b200-calibration", action="store_true", help="build the B200 calibration from --calibration "
                    "(a Hopper one): public constants, the clock fitted on one recorded point, the rest transferred")
    ap.add_argument("--history", action="store_true", help="the FP8 history and the NVFP4 ring sweep on a B200, "
                    "predicted against the lab's records")
    ap.add_argument("--after", metavar="MEAS.json", help="--all-sm90: the measurement(s) of the same stages these "
                    "predictions are made after (comma-separated): the file says it is not blind and names them")
    ap.add_argument("--out", help="where to write the JSON")
    ap.add_argument("--jobs", type=int, default=1, help="--all-sm90: worker processes (the results do not depend on it)")
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
    for o in (a.out or "").split(","):
        if o and Path(o).is_dir():
            ap.error(f"--out {o} is a folder: give the JSON file's path (e.g. {Path(o) / 'prediction-vs-measured.json'})")
    if a.fit:
        ap.error("--fit is gone: no constant of the timing model is fitted on a stage's time (the blind protocol, "
                 "pelib.predict). Measure what is missing with python -m pelib.predict.probes and build the calibration "
                 "from it: --build-calibration --gpu <chip> --calibration <probes file> --out <file>")
    try:
        if a.build_calibration:
            if not (a.calibration and a.out):
                ap.error("--build-calibration needs --calibration (pelib.predict.probes' measured file) and --out")
            out = _measured.build(a.calibration, a.gpu, a.transfer_from)
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps(out.to_json(), indent=1) + "\n")
            left = sorted(n for n, c in out.constants.items() if c.get("kind") == "provisional")
            print(f"wrote {a.out}: {out.label()}" + (f"; still provisional: {', '.join(left)}" if left else ""))
            return 0
        if a.gate:
            g = _gate.gate(a.gpu, a.calibration)
            print("\n".join(_gate.lines(g)))
            if a.out:
                Path(a.out).write_text(json.dumps(g, indent=1) + "\n")
            return 0 if g["passed"] else 1
        if a.compare and a.traffic:
            doc = _compare.traffic(_compare.load_json(a.compare), _compare.load_json(a.traffic))
            if a.out:
                _compare.write(doc, a.out)
            print(json.dumps(doc["summary"], indent=1))
            return 0
        if a.compare:
            if not a.measured:
                ap.error("--compare needs --measured MEAS.json")
            doc = _compare.compare(_compare.load_json(a.compare),
                                   _compare.merged([_compare.load_json(m) for m in a.measured.split(",")]))
            if a.out:
                _compare.write(doc, a.out)
            print(json.dumps(doc["summary"], indent=1))
            return 0
        if a.b200_calibration:
            out = _bw.b200_calibration(_measured.resolve(a.calibration, "h200"))
            text = json.dumps(out.to_json(), indent=1) + "\n"
            Path(a.out).write_text(text) if a.out else print(text)
            return 0
        if a.all_sm90:
            gpus = a.gpu.split(",")
            cals = (a.calibration or ",".join([""] * len(gpus))).split(",")
            outs = (a.out or ",".join([""] * len(gpus))).split(",")
            if not len(gpus) == len(cals) == len(outs):
                ap.error(f"--all-sm90 with {len(gpus)} GPUs needs as many --calibration and --out entries "
                         f"(comma-separated), got {len(cals)} and {len(outs)}")
            docs = predict_all(sm90_builds(a.variants), gpus, [c or None for c in cals], _clock(a.clock), jobs=a.jobs)
            if a.after:
                docs = [not_blind(d, a.after.split(",")) for d in docs]
            for doc, out in zip(docs, outs):
                if out:
                    Path(out).parent.mkdir(parents=True, exist_ok=True)
                    Path(out).write_text(json.dumps(doc, indent=1) + "\n")
            return 0
        cal = _measured.resolve(a.calibration, a.gpu)
        if a.history:
            doc = {"schema": "pelib.predict.history/1", "calibration": cal.path, "provisional": cal.provisional,
                   "protocol": cal.protocol, "fp8": _bw.history(cal, log=print), "nvfp4_ring": _bw.nvfp4_ring(cal)}
            if a.out:
                Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
            return 0
        if not a.stages:
            ap.error("name a stage, or pass --all-sm90, --build-calibration or --compare")
        for name in a.stages:
            p = predict(Stage(name, _defines(a.defines)), a.gpu, cal, _clock(a.clock))
            print(report(p))
            if a.trace:
                trace(p, a.trace)
            if a.out:
                Path(a.out).write_text(json.dumps(p.to_json(), indent=1) + "\n")
        return 0
    except (PredictError, _cal.CalibrationError, _compare.CompareError, _gate.GateError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _clock(text):
    if text is None:
        return None
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


if __name__ == "__main__":
    sys.exit(main())
