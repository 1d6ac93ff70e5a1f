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

from .. import problems as _problems
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
        if isinstance(m.get("cycles"), (int, float)) and m["cycles"] > 0:     # pelib.predict.blind: ms x its launch clock
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
    out["define_effects"] = define_effects(rows)
    out["phases"] = phases_by_build(preds, measured)
    out["summary"].update(effect_summary(out["define_effects"]), inversions_over_3pct=inversions(plain, 0.03),
                          worst_signed=rows[errs.index(max(errs))]["error_cycles"])
    return out


EFFECT_MIN = 0.03   # a define's measured effect the targets hold the model to (smaller ones are noise-level)


def define_effects(rows: list[dict]) -> list[dict]:
    """Each variant row (a build with defines) against its stage file at its defaults in the same comparison:
    the measured and the predicted effect of the define in cycles, whether the sign is right, and whether the
    predicted size is within half of the measured one (|pred - meas| <= |meas| / 2)."""
    plain = {r["stage"]: r for r in rows if not r["defines"]}
    out = []
    for r in rows:
        base = plain.get(r["stage"])
        if not r["defines"] or base is None or r["defines"].startswith("PE_WAIT_KIND"):
            continue
        me = r["measured_cycles"] / base["measured_cycles"] - 1
        pe = r["predicted_cycles"] / base["predicted_cycles"] - 1
        out.append({"stage": r["stage"], "defines": r["defines"], "measured_effect": round(me, 4),
                    "predicted_effect": round(pe, 4), "sign_right": me * pe > 0 if abs(me) >= EFFECT_MIN else None,
                    "within_half": abs(pe - me) <= abs(me) / 2 if abs(me) >= EFFECT_MIN else None})
    return out


def effect_summary(effects: list[dict]) -> dict:
    """How many defines of measured effect >= EFFECT_MIN the model gets the sign and half the size of."""
    big = [e for e in effects if e["sign_right"] is not None]
    return {"define_effects": len(effects), "effects_over_3pct": len(big),
            "effects_sign_right": sum(e["sign_right"] for e in big),
            "effects_within_half": sum(e["within_half"] for e in big)}


def inversions(rows: list[dict], gap: float) -> int:
    """Pairs of builds whose measured cycles differ by more than `gap` that the model orders the other way."""
    n = 0
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            lo, hi = sorted((a["measured_cycles"], b["measured_cycles"]))
            if hi / lo - 1 > gap and (a["measured_cycles"] - b["measured_cycles"]) * (a["predicted_cycles"] - b["predicted_cycles"]) < 0:
                n += 1
    return n


def phases_06(pred: dict, meas: dict) -> dict | None:
    """sm90/06's predicted per-role phases against its measured clock64 record (both in cycles)."""
    rec = next((c.get("phases") for c in meas.get("clocks", []) if c.get("key") == "06" and c.get("ok")), None)
    if rec is None:      # pelib.predict.blind: the production build's entry carries its phases over every tile
        for e in meas.get("entries", []) if isinstance(meas.get("entries"), list) else []:
            if stage_of(e) == "sm90/06_permuted_b" and _defkey(e.get("defines")) == "PE_WAIT_KIND=2" and e.get("phases"):
                rec = e["phases"].get("every_tile", e["phases"])
                rec = rec.get("phases", rec)        # pelib.measure.hopper_perf.clock_stats: {"phases": {name: {"avg", ..}}, ..}
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


def phases_by_build(preds: list[dict], measured: dict) -> dict:
    """Every build's predicted per-role phases (the replay's steady state, `phases`) against its TIMING run's
    records (pelib.predict.blind's phases_first: a persistent stage's first tiles, a non-persistent stage's one
    tile per CTA), in cycles; and per phase, the mean absolute error over the builds that have it. Where the
    model is wrong inside a tile, this says in which role and phase."""
    builds = []
    for p in preds:
        m = measured.get((p["stage"], _defkey(p.get("defines"))))
        rec = ((m or {}).get("phases_first") or {}).get("phases")
        if not rec or not p.get("phases"):
            continue
        row = {}
        for ph, v in p["phases"].items():
            pv, mv = (v.get("avg") if isinstance(v, dict) else v), (rec.get(ph) or {}).get("avg")
            if isinstance(pv, (int, float)) and isinstance(mv, (int, float)) and mv > 0:
                row[ph] = {"predicted": round(float(pv), 1), "measured": round(float(mv), 1),
                           "error": round(float(pv) / float(mv) - 1, 4)}
        if row:
            builds.append({"stage": p["stage"], "defines": _defkey(p.get("defines")), "phases": row})
    return {"builds": builds, "summary": phase_summary(builds)}


def phase_summary(builds: list[dict]) -> dict:
    """Per phase, over the builds that have it: how many, and the mean absolute error of their phase rows."""
    per: dict = {}
    for b in builds:
        for ph, v in b["phases"].items():
            per.setdefault(ph, []).append(abs(v["error"]))
    return {ph: {"builds": len(v), "mae": round(sum(v) / len(v), 4)} for ph, v in sorted(per.items())}


def mark_remade(again: dict, blind: dict, label: str) -> dict:
    """A comparison re-made after the measurement (`again`) marked against the blind one of the same builds: its
    predictions labelled `label`, each phase row that differs from the blind one marked not_blind, and whether
    every build's cycles are the blind ones (cycles_unchanged)."""
    out = dict(again)
    out["predictions"] = {**again.get("predictions", {}), "label": label}
    old = {(b["stage"], b["defines"]): b["phases"] for b in (blind.get("phases") or {}).get("builds", [])}
    builds = [dict(b, not_blind=True) if old.get((b["stage"], b["defines"])) != b["phases"] else b
              for b in (again.get("phases") or {}).get("builds", [])]
    out["phases"] = {**(again.get("phases") or {}), "builds": builds}
    cyc = {(r["stage"], r["defines"]): r["predicted_cycles"] for r in blind["rows"]}
    out["cycles_unchanged"] = all(cyc.get((r["stage"], r["defines"])) == r["predicted_cycles"] for r in again["rows"])
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


# ---- traffic: the model's bytes against Nsight Compute's -------------------------------------------------

TRAFFIC_TOLERANCE = 0.10     # the bar: the model's DRAM and L2 bytes within 10 % of the counters


L2_FROM_SMS = "lts__t_sectors_srcunit_tex.sum x 32 B"
L2_ALL = "lts__t_bytes.sum"


def traffic(pred: dict, ncu_doc: dict) -> dict:
    """The model's DRAM read, DRAM write and L2 bytes of each build (a prediction document made with traffic,
    pelib.predict --all-sm90) against the Nsight Compute counters of the same build in a committed
    energy-headline run (its entry label: the stage's number, then its defines) (`ncu_per_tile`: dram__bytes_read/write.sum and lts__t_bytes.sum per output tile of the
    run's `tile`, times the problem's tiles). The model's l2 is the bytes between the SMs and L2: it is held to
    the SMs' own requests (lts__t_sectors_srcunit_tex, `l2_sm_B_per_tile`) where the run has them, else to
    lts__t_bytes, every request at the L2 slices, the other partition's over the fabric included (the row's
    `l2_counter` says which). A row says both and which lie within TRAFFIC_TOLERANCE."""
    t = ncu_doc.get("tile") or [64, 256]
    by_entry = {r["entry"]: r for r in ncu_doc.get("ncu_per_tile", []) if r.get("entry")}
    rows = []
    for p in pred["predictions"]:
        if not p.get("traffic"):
            continue
        defines = _defkey(p.get("defines"))
        entry = p["stage"].split("/")[-1].split("_")[0] + (f" {defines}" if defines else "")   # the run's label
        c = by_entry.get(entry)
        if c is None:
            continue
        prob = _problems.patch_embed(ncu_doc.get("problem") or "siglip2")
        tiles = (prob.m // t[0]) * (prob.n // t[1])
        sm = c.get("l2_sm_B_per_tile")
        meas = {"dram_read": c["dram_read_B_per_tile"] * tiles, "dram_write": c["dram_write_B_per_tile"] * tiles,
                "l2": (sm if sm is not None else c["l2_B_per_tile"]) * tiles}
        row = {"stage": p["stage"], "defines": defines, "l2_counter": L2_FROM_SMS if sm is not None else L2_ALL}
        for k in ("dram_read", "dram_write", "l2"):
            got, want = p["traffic"].get(k), meas[k]
            err = got / want - 1 if got is not None and want else None
            row.update({f"{k}_predicted_GB": round(got / 1e9, 3), f"{k}_measured_GB": round(want / 1e9, 3),
                        f"{k}_error": None if err is None else round(err, 4)})
        rows.append(row)
    within = {k: sum(1 for r in rows if r[f"{k}_error"] is not None and abs(r[f"{k}_error"]) <= TRAFFIC_TOLERANCE)
              for k in ("dram_read", "dram_write", "l2")}
    return {"schema": "pelib.predict.traffic/1", "tolerance": TRAFFIC_TOLERANCE, "rows": rows,
            "summary": {"stages": len(rows), **{f"{k}_within": v for k, v in within.items()}},
            "measurement": {"device": (ncu_doc.get("env") or {}).get("device"), "date": (ncu_doc.get("env") or {}).get("date"),
                            "counters": "Nsight Compute dram__bytes_read.sum, dram__bytes_write.sum, and the row's "
                                        "l2_counter"},
            "predictions": {k: pred.get("meta", {}).get(k) for k in ("calibration", "git", "model_version")}}

