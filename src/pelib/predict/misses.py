"""Why the blind predictions missed, as data: for every build whose cycles missed by more than a bound, what the
model's critical path said beside the measured quantities that disagree (per-CTA cycles, CTAs overlapping on an
SM, the launch clock, the TIMING build's overhead, the bandwidth against the model's DRAM floor).

    rows = misses("results/<date>-<device>/prediction-vs-measured.json", "predictions-sm90.json",
                  [<the blind run's JSON>, <a rerun's JSON>])

Every number is read from the committed comparison, predictions and blind measurement files.
"""
from __future__ import annotations

from . import compare as _compare

BOUND = 0.10               # the worst-stage target: a build missing by more is analysed


def _measured(paths) -> dict:
    """{(stage, defines key): entry}: the blind runs' entries, a later run's entry taking the place of an earlier
    one that has no launch clock (the rerun of entries whose clocks were missing)."""
    out = {}
    for p in paths:
        for e in _compare.load_json(p).get("entries", []):
            st = _compare.stage_of(e)
            key = (st, _compare._defkey(e.get("defines")))
            if st and (key not in out or not _clocked(out[key])):
                out[key] = e
    return out


def _clocked(e: dict) -> bool:
    return bool(((e.get("timing_run") or {}).get("launch_clock") or {}).get("ghz"))


def misses(comparison, predictions, measured: list, bound: float = BOUND) -> list[dict]:
    """One row per build with |error in cycles| > bound (largest first): the prediction's critical path and
    per-tile cycles, and what the blind run measured of the same build."""
    comp = _compare.load_json(comparison) if not isinstance(comparison, dict) else comparison
    pred = _compare.load_json(predictions) if not isinstance(predictions, dict) else predictions
    meas = _measured(measured)
    pmap = {(p["stage"], _compare._defkey(p.get("defines"))): p for p in pred["predictions"]}
    sms = None
    rows = []
    six = next((r for r in comp["rows"] if r["stage"].endswith("/06_permuted_b") and not r["defines"]), None)
    for r in comp["rows"]:
        if abs(r["error_cycles"]) <= bound:
            continue
        key = (r["stage"], r["defines"].replace(" ", ""))
        p, e = pmap.get(key), meas.get(key)
        if p is None or e is None:
            continue
        L = e["launch"]
        sms = int(L.get("sm_count") or 132)
        lc = (e.get("timing_run") or {}).get("launch_clock") or {}
        cta = (lc.get("cta_cycles") or {}).get("median")
        ctas = int(L["grid"][0])
        per_sm = int(L["tiles"]) / min(ctas, sms)            # tiles each SM computes
        row = {"stage": r["stage"].split("/")[-1] + (f" {r['defines']}" if r["defines"] else ""),
               "error": r["error_cycles"], "predicted_cycles": r["predicted_cycles"],
               "measured_cycles": r["measured_cycles"], "critical_path": p["critical_path"],
               "persistent": bool(L.get("persistent")), "ctas": ctas, "tiles": int(L["tiles"]),
               "predicted_tile_cycles": r["predicted_cycles"] / per_sm,
               "measured_tile_cycles": r["measured_cycles"] / per_sm,
               "measured_cta_cycles": cta, "launch_clock_ghz": lc.get("ghz"),
               "clock_over_06": (lc.get("ghz") / six["clock_ghz"]) if (six and lc.get("ghz")) else None,
               "timing_over_normal": (e.get("timing_run") or {}).get("ms_over_normal"),
               "measured_gbps": e.get("gbps"), "dram_floor_bound": p["critical_path"].startswith("bound by DRAM")}
        if not row["persistent"] and cta:
            # CTAs in flight on an SM: each SM's CTAs x their median time over the launch's cycles
            row["measured_overlap"] = (ctas / sms) * cta / r["measured_cycles"]
        row["finding"] = finding(row)
        rows.append(row)
    return sorted(rows, key=lambda x: -abs(x["error"]))


def finding(row: dict) -> str:
    """The measured quantity that disagrees with the model, in one clause."""
    ov = row.get("measured_overlap")
    if ov is not None and ov > 1.5:
        return (f"{ov:.1f} CTAs overlap on each SM (each takes {row['measured_cta_cycles']:,.0f} cycles); the model "
                "replayed one CTA per SM in ceil(CTAs / SMs) waves")
    if row["dram_floor_bound"]:
        return (f"the model stopped at its DRAM floor; measured {row['measured_gbps']:,.0f} GB/s, "
                f"{row['measured_tile_cycles']:,.0f} cycles a tile against the floor's {row['predicted_tile_cycles']:,.0f}")
    side = "fast" if row["error"] < 0 else "slow"
    return (f"per tile {row['measured_tile_cycles']:,.0f} measured against {row['predicted_tile_cycles']:,.0f} predicted "
            f"(model {side}); the critical path said: {row['critical_path'].split(',')[0]}")
