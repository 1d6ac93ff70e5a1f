"""The A stream against the stores on the Hopper twin, from the committed `python -m pelib.measure.energy contention`
run: 07a, its children 12 and 13, cuBLAS fast-accum, 06 and its probes; time, clock, joules and the counters."""
from __future__ import annotations

from .. import results
from ..facts import Table
from .hopper import chip_label
from .hopper_limits import FAST, LimiterError, _r, _row, launch_clock, run

MODE = "contention"
PARENT = "07a"
# The targets for the fastest stage (burst regime, random inputs, in the same run as cuBLAS).
TARGET_MS, TARGET_X, TARGET_J = 0.72, 1.25, 0.85
# The counters the study reads, per 64 x 256 tile (Nsight Compute, pelib.measure.energy NCU_CONTENTION_METRICS):
# (column, metric, scale) where the value shown is metric x scale; sectors are 32 B.
COUNTERS = (("L2 read KB", "lts__t_sectors_op_read.sum", 32e-3), ("L2 write KB", "lts__t_sectors_op_write.sum", 32e-3),
            ("DRAM read KB", "dram__bytes_read.sum", 1e-3), ("DRAM write KB", "dram__bytes_write.sum", 1e-3),
            ("STG requests", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", 1),
            ("STG sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", 1),
            ("STS wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", 1),
            ("LSU warp inst", "sm__inst_executed_pipe_lsu.sum", 1), ("warp inst", "smsp__inst_executed.sum", 1))
RATES = (("L2 %", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
         ("L1 %", "l1tex__throughput.avg.pct_of_peak_sustained_elapsed"),
         ("DRAM %", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
         ("GHz", "sm__cycles_elapsed.avg.per_second"))

def contention_run(chip: str = "h200", root=None) -> dict:
    return run(chip, MODE, root)


def verified(rep: dict, name: str) -> bool | None:
    v = (rep.get("verified") or {}).get(name)
    return None if v is None else bool(v.get("ok"))


def fastest(rep: dict) -> dict:
    """The run's fastest stage verified on the full problem (and the check shapes where it ran them), by
    burst median: the run's own headline rule (pelib.measure.energy.headline), read back."""
    ok = [r for r in rep.get("summary", []) if verified(rep, r["entry"]) and r.get("burst ms (random)")]
    if not ok:
        raise LimiterError(f"{rep.get('_file')}: no verified stage entry with a burst time")
    return min(ok, key=lambda r: r["burst ms (random)"])


def time_table(chip: str = "h200", root=None, columns=None) -> Table:
    """Each timed entry of the run against 07a: burst time, its launch clock, cycles (ms x GHz) as a ratio,
    sustained time and joules per GEMM, against cuBLAS fast-accum of the same run; verified or not."""
    rep = contention_run(chip, root)
    p = _row(rep, PARENT)
    tp, fp = p["burst ms (random)"], launch_clock(rep, PARENT)
    rows = []
    for e in rep.get("entries", []):
        name = e["name"]
        r = _row(rep, name)
        ms, ghz = r.get("burst ms (random)"), launch_clock(rep, name)
        rows.append({"entry": name, "verified": {True: "yes", False: "NO", None: "—"}[verified(rep, name)],
                     "burst ms": _r(ms, 4), "x cuBLAS fast": _r(r.get("x cuBLAS fast (burst)"), 3),
                     "launch GHz": _r(ghz, 3),
                     "cycles vs 07a": f"{ms * ghz / (tp * fp):.3f}" if ms and ghz and fp else "—",
                     "sustained ms": _r(r.get("sustained ms (random)"), 4), "J / GEMM": _r(r.get("J/launch (random)"), 3),
                     "J / cuBLAS fast J": _r(r.get("J / cuBLAS fast J"), 3), "W": _r(r.get("power W"), 0)})
    return Table(rows, f"The A stream against the stores — measured by pelib.measure.energy contention ({rep['_file']}, "
                       f"{rep['evidence']}, {chip_label(rep['env']['device'])}): burst time (20 launches, L2 flushed "
                       "before each, median over rounds, production waits PE_WAIT_KIND=2), each launch's own clock, "
                       "sustained time and NVML joules per GEMM over a 2-s window; 06 and its probes in bursts only").only(columns)


def counter_rows(rep: dict) -> list[dict]:
    """The contention counters of each profiled entry per 64 x 256 tile (measured, Nsight Compute, one launch
    each, --clock-control none), with the three largest stall reasons (warps stalled per issued instruction)."""
    out = []
    for r in rep.get("ncu_contention_per_tile") or []:
        row = {"entry": r["entry"]}
        for col, m, scale in COUNTERS:
            v = r["per_tile"].get(m)
            row[col] = _r(v * scale, 1) if v is not None else "—"
        for col, m in RATES:
            row[col] = _r(r["rates"].get(m), 2 if col == "GHz" else 1)
        row["top stalls"] = ", ".join(f"{m.split('stalled_')[-1].split('_per')[0]} {v:.2f}"
                                      for m, v in list(r["stalls"].items())[:3]) or "—"
        out.append(row)
    return out


def counter_table(chip: str = "h200", root=None, columns=None) -> Table:
    rep = contention_run(chip, root)
    rows = counter_rows(rep)
    if not rows:
        why = (rep.get("ncu_contention") or {}).get("error", "the run has no contention counters")
        raise LimiterError(f"{rep['_file']}: {why}")
    dropped = (rep.get("ncu_contention") or {}).get("dropped_metrics") or []
    return Table(rows, f"Per 64 x 256 output tile — measured by Nsight Compute in {rep['_file']} ({rep['evidence']}; "
                       "one launch each, clocks left as they are): L2 sectors read and written (32 B each), DRAM bytes, "
                       "the global-store requests and sectors and the shared-store wavefronts of L1, LSU and all warp "
                       "instructions; the units' throughputs over the kernel; the three largest stall reasons"
                       + (f"; not collected by this ncu: {', '.join(dropped)}" if dropped else "")).only(columns)


def targets(chip: str = "h200", root=None) -> Table:
    """The issue's three targets for the run's fastest verified stage, met or missed, each number from the run."""
    rep = contention_run(chip, root)
    best = fastest(rep)
    fast = _row(rep, FAST)
    ms, x, j = best["burst ms (random)"], best.get("x cuBLAS fast (burst)"), best.get("J / cuBLAS fast J")
    rows = [{"target": f"burst <= {TARGET_MS} ms", "stage": best["entry"], "measured": f"{ms:.4f} ms",
             "met": "yes" if ms <= TARGET_MS else "no"},
            {"target": f">= {TARGET_X}x cuBLAS fast-accum (same run)", "stage": best["entry"],
             "measured": f"{x:.3f}x ({fast['burst ms (random)']:.4f} ms)" if x else "—",
             "met": "yes" if x and x >= TARGET_X else "no"},
            {"target": f"sustained J per GEMM <= {TARGET_J}x cuBLAS fast-accum's", "stage": best["entry"],
             "measured": f"{j:.3f}x ({best.get('J/launch (random)', 0):.3f} J against "
                         f"{fast.get('J/launch (random)', 0):.3f})" if j else "—",
             "met": "yes" if j and j <= TARGET_J else "no"}]
    return Table(rows, f"The targets, for the fastest verified stage of {rep['_file']} ({rep['evidence']})")


PREDICTIONS = "predictions-new-stages.json"   # committed before the contention run measured the stages


def entry_name(stage: str, defines: dict) -> str:
    """pelib.measure.energy's entry name of a stage build: '12 EPI_BOX_COLS=64,NUM_STAGES=2' (the wait kind left out)."""
    d = {k: v for k, v in (defines or {}).items() if k != "PE_WAIT_KIND"}
    return stage.split("/")[-1].split("_")[0] + ("" if not d else " " + ",".join(f"{k}={v}" for k, v in sorted(d.items())))


def predicted_table(chip: str = "h200", root=None, columns=None) -> Table:
    """Each new stage's prediction (the timing model, committed before the run; predicted, with the clock it
    assumed) beside the contention run's measurement (measured): the burst time, the error, and the time the
    prediction gives at the measured launch clock (cycles held), which separates the cycles from the clock."""
    rep = contention_run(chip, root)
    files = [f for f in results.files(PREDICTIONS, root) if results.chip(f.parent) == chip]
    if not files:
        return Table([], f"No results/*-{chip}/{PREDICTIONS} is committed yet: the timing model's predictions of the "
                         "new stages are committed before their measurement (python -m pelib.predict)")
    doc = results.load(files[-1])
    rows = []
    for p in doc.get("predictions", []):
        name = entry_name(p["stage"], p.get("defines"))
        try:
            m = _row(rep, name)
        except LimiterError:
            continue
        ms, ghz = m.get("burst ms (random)"), launch_clock(rep, name)
        at = p["ms"] * p["clock_ghz"] / ghz if ghz and p.get("clock_ghz") else None
        rows.append({"stage": name, "predicted ms": _r(p["ms"], 4), "at GHz": _r(p.get("clock_ghz"), 3),
                     "measured ms": _r(ms, 4), "measured GHz": _r(ghz, 3),
                     "error": f"{(p['ms'] - ms) / ms:+.1%}" if ms else "—",
                     "predicted at the measured clock": _r(at, 4),
                     "error there": f"{(at - ms) / ms:+.1%}" if at and ms else "—"})
    return Table(rows, f"Predicted (results/{files[-1].parent.name}/{PREDICTIONS}: the timing model, committed "
                       f"before the run) beside measured ({rep['_file']}, {rep['evidence']}); burst regime").only(columns)
