"""The first hour on a B200: the model's predictions for this node, then the measurement, then the error table.

    PYTHONPATH=src python3 -m pelib.predict.first_hour --out DIR          (a B200: about 5-8 minutes)

  1. predictions: the committed B200 document (pelib.predict.history's, under results/<date>-b200/)
     when this node has its SM count, else every entry predicted again at this node's SM count (about 10
     minutes on one core): DIR/predictions-b200.json in the schema pelib.predict.compare reads. They are
     written before any launch, so nothing measured can reach them.
  2. the measurement: every predicted entry (the FP8 history, the sweeps' other builds, the go/no-go
     variants) verified and timed on the full problem by pelib.measure.sweep's variant job, each in a worker
     process (a trap or hang ends only that worker): DIR/measured-b200.json.
  3. the comparison (pelib.predict.compare): DIR/prediction-vs-measured.json, and the error table printed,
     recorded points beside. Measured cycles use the predictions' clock (the fitted one) unless an entry
     carries its launch's own clock: a clock difference reads as a time error, and the table says so.
Everything up to the launch runs on a CPU (tests/test_predict_b200.py fakes the device and the workers).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .. import bench, clock, device
from ..measure import jobs, sweep
from ..stage import Stage
from . import blackwell as _bw
from . import compare as _compare
from . import history as _history

KINDS = {"variant": sweep.variant}      # the worker's job kind (pelib.measure.jobs' protocol)
ITERS = 20


def entries(doc: dict) -> list[dict]:
    """The predicted entries of a B200 document, one per build, in the predictions/1 schema compare reads."""
    clk = next((f["value"] for f in doc["meta"]["fitted"] if f["name"] == "clock_ghz.timed"), None)
    out = []

    def add(stage, defines, ms, crit, recorded=None):
        if any(e["stage"] == stage and e["defines"] == defines for e in out):
            return
        out.append({"stage": stage, "defines": defines, "ms": ms, "cycles": round(ms * clk * 1e6),
                    "clock_ghz": clk, "clock": "timed (fitted)", "critical_path": crit, "recorded_ms": recorded})
    for r in doc.get("fp8", []):
        add(r["stage"], {}, r["predicted_ms"], r["critical_path"], r["recorded_ms"])
    for r in doc.get("fp8_sweeps", []):
        if not r["history_row"]:
            add(r["stage"], {r["define"]: r["value"]}, r["predicted_ms"], "", r["recorded_ms"])
    for c in doc.get("cards", []):
        if c.get("variant"):
            add(c["variant"].removesuffix(".cu"), {}, c["predicted_ms"], c["critical_path"])
    return out


def predictions(doc: dict, sms: int) -> dict:
    """The predictions document for a node with `sms` SMs: the committed one's entries if it matches."""
    cal_sms = int(_bw.PUBLIC["sm_count"][0])      # the SM count every committed B200 prediction used
    if sms != cal_sms:
        raise SystemExit(f"this node has {sms} SMs, the committed B200 predictions assume {cal_sms}: run "
                         "`python -m pelib.predict.history` with a calibration whose sm_count is this node's first")
    return {"schema": "pelib.predict.predictions/1", "meta": dict(doc["meta"], calibration_date=None),
            "predictions": entries(doc)}


def error_lines(cmp: dict, pred: dict) -> list[str]:
    """The error table as text: per entry predicted, measured and recorded ms, the error in cycles."""
    rec = {(p["stage"], _compare._defkey(p["defines"])): p.get("recorded_ms") for p in pred["predictions"]}
    lines = [f"{'stage':<44}{'predicted':>10}{'measured':>10}{'recorded':>10}{'error':>9}"]
    for r in cmp["rows"]:
        name = r["stage"].split("/")[-1] + (f" [{r['defines']}]" if r["defines"] else "")
        rm = rec.get((r["stage"], r["defines"]))
        lines.append(f"{name[:44]:<44}{r['predicted_ms']:>10.4f}{r['measured_ms']:>10.4f}"
                     f"{rm if rm is not None else float('nan'):>10.4f}{r['error_cycles']:>+9.1%}")
    s = cmp["summary"]
    lines.append(f"mean absolute error {s['mae']:.1%}, worst {s['worst']:.1%} ({s['worst_stage']}); ranking "
                 f"{'exact' if s['ranking_exact'] else 'not exact'} (Kendall tau {s['kendall_tau']:.2f}); "
                 f"clock: {cmp['rows'][0]['clock']}")
    return lines


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pelib.predict.first_hour", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="directory for the three JSON files and the log")
    ap.add_argument("--predictions", default=None, help="a B200 predictions document (default: the committed one)")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the measurement")
    ap.add_argument("--iters", type=int, default=ITERS)
    jobs.worker_args(ap)
    return ap


def main(argv=None, run_jobs=None) -> int:
    a = parser().parse_args(argv)
    if a.worker:
        jobs.worker(KINDS, a.worker, a.data, a.start, a.iters)
        return 0
    info = device.require("sm_100a")
    env = bench.environment(info)
    out = Path(a.out or os.environ.get("PE_GPU_RESULTS") or ".")
    out.mkdir(parents=True, exist_ok=True)
    doc = _history.committed(a.predictions)
    pred = predictions(doc, int(info.sm_count))
    (out / "predictions-b200.json").write_text(json.dumps(pred, indent=1) + "\n")   # before any launch
    print(f"[predict] {len(pred['predictions'])} entries, {doc['meta']['evidence']}", flush=True)
    batch = [{"kind": "variant", "stage": p["stage"], "defines": p["defines"],
              "label": Stage(p["stage"], p["defines"]).label} for p in pred["predictions"]]
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    data_dir = tempfile.mkdtemp(prefix="pelib-first-hour-", dir=shm)
    t0 = time.time()
    try:
        jobs.save_full(Stage(batch[0]["stage"]), data_dir)
        res = (run_jobs or jobs.run)(batch, data_dir, a.iters, a.budget, job_timeout_s=120.0,
                                     module="pelib.predict.first_hour", show=sweep.show_job)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    meas = {"schema": "pelib.predict.first_hour/1", "evidence": f"measured ({info.name}, {env['date'][:10]})",
            "env": env, "variants": res, "seconds": round(time.time() - t0)}
    (out / "measured-b200.json").write_text(json.dumps(meas, indent=1, default=str) + "\n")
    try:
        cmp = _compare.compare(pred, meas)
    except _compare.CompareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _compare.write(cmp, out / "prediction-vs-measured.json")
    for ln in error_lines(cmp, pred):
        print(ln)
    print(f"wrote {out}/prediction-vs-measured.json ({clock.stamp()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
