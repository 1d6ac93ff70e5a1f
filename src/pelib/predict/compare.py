"""Predictions against a measurement: per stage the error in cycles and in ms, the mean and worst absolute
error, whether the stages rank the same, and sm90/06's per-role phases against its clock64 record.

    doc = compare(load_json("predictions-sm90.json"), load_json("hopper-perf.json"))
    write(doc, "results/<date>-<device>/prediction-vs-measured.json")

Measured cycles = measured ms x the SM clock of that launch where the measurement records one (an
entry's `clock_ghz`, `sm_clock_ghz` or `launch_clock_ghz`, %clock64 over %globaltimer of the launch),
else the clock the predictions were converted with (their `clock_ghz`), and the comparison says which.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..paths import KERNELS

CLOCK_KEYS = ("launch_clock_ghz", "clock_ghz", "sm_clock_ghz")


class CompareError(ValueError):
    """The predictions or the measurement cannot be compared (the message says what is missing)."""


def load_json(path) -> dict:
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise CompareError(f"no file {p}") from None
    except json.JSONDecodeError as e:
        raise CompareError(f"{p} is not JSON ({e})") from None


def stage_of(entry: dict) -> str | None:
    """family/name of a measured entry: its "stage", or an sm90 number key ("06") of the sweeps."""
    st = entry.get("stage")
    if st and "/" in str(st):
        return str(st)
    key = str(entry.get("key", ""))
    hits = sorted((KERNELS / "sm90").glob(f"{key}_*.cu")) if re.fullmatch(r"\d\d\w?", key) else []
    return f"sm90/{hits[0].stem}" if hits else None


def _defkey(defines) -> str:
    d = {k: str(v) for k, v in (defines or {}).items() if k not in ("TIMING",)}
    if d.get("PE_UNBOUNDED_WAIT") == "1":            # the old spelling of the unbounded build
        d.pop("PE_UNBOUNDED_WAIT")
        d["PE_WAIT_KIND"] = "2"
    return ",".join(f"{k}={v}" for k, v in sorted(d.items()))


def measured_entries(doc: dict) -> dict:
    """{(stage, defines key): entry} of the verified, timed entries of a sweep, a hopper_perf run or a
    stage list."""
    out = {}
    for k in ("variants", "stages", "entries"):
        for v in doc.get(k, []) if isinstance(doc.get(k), list) else []:
            if not isinstance(v, dict) or not v.get("median_ms") or v.get("ok") is False:
                continue
            if "[again]" in str(v.get("label", "")):
                continue
            st = stage_of(v)
            if st:
                out.setdefault((st, _defkey(v.get("defines"))), v)
    return out


def merged(docs: list[dict]) -> dict:
    """One measurement from several runs of the same chip (a rerun of entries the first run could not clock):
    the first document, with the later ones' entries after its own (measured_entries keeps the first verified
    entry of each build) and their file names in 'merged_from'."""
    if len(docs) == 1:
        return docs[0]
    out = dict(docs[0])
    out["entries"] = [e for d in docs for e in d.get("entries", [])]
    out["merged_from"] = [d.get("env", {}).get("git_rev") or d.get("schema", "?") for d in docs]
    return out


def _clock(entry: dict, doc: dict):
    for k in CLOCK_KEYS:
        if isinstance(entry.get(k), (int, float)):
            return float(entry[k]), f"the launch's own clock ({k})"
    env = doc.get("env") or {}
    for k in CLOCK_KEYS:
        if isinstance(env.get(k), (int, float)):
            return float(env[k]), f"the run's clock (env.{k})"
    return None, None


def _rank(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0] * len(values)
    for pos, i in enumerate(order):
        r[i] = pos
    return r


def kendall_tau(a: list[float], b: list[float]) -> float:
    n = len(a)
    if n < 2:
        return 1.0
    s = 0
    for i in range(n):
        for j in range(i + 1, n):
            s += (1 if (a[i] - a[j]) * (b[i] - b[j]) > 0 else -1 if (a[i] - a[j]) * (b[i] - b[j]) < 0 else 0)
    return s / (n * (n - 1) / 2)


def compare(pred: dict, meas: dict) -> dict:
    """The comparison document (see the module doc)."""
    preds = pred.get("predictions")
    if not isinstance(preds, list) or not preds:
        raise CompareError("the predictions file has no 'predictions' list (python -m pelib.predict --all-sm90 "
                           "writes one)")
    measured = measured_entries(meas)
    if not measured:
        raise CompareError("the measurement has no verified, timed stage entries ('variants' or 'stages' with "
                           "median_ms)")
    rows = []
    for p in preds:
        key = (p["stage"], _defkey(p.get("defines")))
        m = measured.get(key)
        if m is None:
            continue
        if isinstance(m.get("cycles"), (int, float)) and m["cycles"] > 0:     # pelib.blind: ms x its launch clock
            mc = float(m["cycles"])
            clk, clk_src = mc / (float(m["median_ms"]) * 1e6), f"the launch's own clock ({m.get('clock_source', 'cycles')})"
        else:
            clk, clk_src = _clock(m, meas)
            if clk is None:
                clk, clk_src = float(p["clock_ghz"]), f"the predictions' clock ({p.get('clock', '')})"
            mc = float(m["median_ms"]) * clk * 1e6
        pms = float(p["cycles"]) / (clk * 1e6)
        rows.append({"stage": p["stage"], "defines": key[1], "predicted_cycles": round(float(p["cycles"])),
                     "measured_cycles": round(mc), "error_cycles": round(float(p["cycles"]) / mc - 1, 4),
                     "predicted_ms": round(pms, 4), "measured_ms": round(float(m["median_ms"]), 4),
                     "error_ms": round(pms / float(m["median_ms"]) - 1, 4), "clock_ghz": round(clk, 4),
                     "clock": clk_src, "critical_path": p.get("critical_path", "")})
    if not rows:
        raise CompareError("no predicted stage (and build) appears in the measurement: compare the same stages "
                           "and defines")
    errs = [abs(r["error_cycles"]) for r in rows]
    plain = [r for r in rows if not r["defines"]]
    pr, mr = [r["predicted_cycles"] for r in plain], [r["measured_cycles"] for r in plain]
    out = {"schema": "pelib.predict.comparison/1", "predictions": pred.get("meta", {}),
           "measurement": {k: (meas.get("env") or {}).get(k, meas.get(k)) for k in ("device", "date", "git")},
           "rows": rows,
           "summary": {"stages": len(rows), "mae": round(sum(errs) / len(errs), 4), "worst": round(max(errs), 4),
                       "worst_stage": rows[errs.index(max(errs))]["stage"],
                       "ranking_exact": _rank(pr) == _rank(mr), "kendall_tau": round(kendall_tau(pr, mr), 4),
                       "ranked": len(plain)},
           "phases_06": phases_06(pred, meas)}
    return out


def phases_06(pred: dict, meas: dict) -> dict | None:
    """sm90/06's predicted per-role phases against its measured clock64 record (both in cycles)."""
    rec = next((c.get("phases") for c in meas.get("clocks", []) if c.get("key") == "06" and c.get("ok")), None)
    if rec is None:      # pelib.blind: the production build's entry carries its phases over every tile
        for e in meas.get("entries", []) if isinstance(meas.get("entries"), list) else []:
            if stage_of(e) == "sm90/06_permuted_b" and _defkey(e.get("defines")) == "PE_WAIT_KIND=2" and e.get("phases"):
                rec = e["phases"].get("every_tile", e["phases"])
                rec = rec.get("phases", rec)        # pelib.hopper_perf.clock_stats: {"phases": {name: {"avg", ..}}, ..}
    p = next((x for x in pred.get("predictions", []) if x["stage"] == "sm90/06_permuted_b" and x.get("timing_phases")),
             None)
    if not rec or p is None:
        return None
    out = {}
    for ph, v in p["timing_phases"].items():
        if isinstance(rec.get(ph), dict) and "avg" in rec[ph]:
            m = rec[ph]["avg"]
            out[ph] = {"predicted": round(v, 1), "measured": round(m, 1), "error": round(v / m - 1, 4)}
    return out


def table_rows(doc: dict) -> list[dict]:
    """The comparison as rows for a chapter table."""
    return [{"stage": r["stage"].split("/")[-1] + (f" [{r['defines']}]" if r["defines"] else ""),
             "predicted (cycles)": f"{r['predicted_cycles']:,}", "measured (cycles)": f"{r['measured_cycles']:,}",
             "error": f"{r['error_cycles']:+.1%}", "predicted ms": f"{r['predicted_ms']:.3f}",
             "measured ms": f"{r['measured_ms']:.3f}"} for r in doc["rows"]]


def write(doc: dict, path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1) + "\n")
    return p
