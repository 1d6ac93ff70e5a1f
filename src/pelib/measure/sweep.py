"""The process-isolated sweep of stage files on one GPU (`make bench`): build, verify, time, baselines, checks.

    python -m pelib.measure.sweep [--family sm90,fp8,nvfp4] [--stage family/name ...] [--variants] [--no-compiled]
                          [--no-sanitize] [--no-ncu] [--iters N] [--budget S] [--out DIR]

The stages are enumerated from the files (every stage of every family this GPU runs, at its defaults;
--variants adds each family's VARIANTS of interest). Order, most important first (each later step only
runs while the time budget lasts):
 1. compiled facts of every entry (registers, spills, shared memory, MMA count, ptxas C75xx);
 2. the device copy bandwidth; each family's full problem, inputs and torch reference (saved once);
 3. each entry in a worker process (pelib.stage.Stage.run): verification on the family's check shapes,
    then on the full problem, each with a NaN-poisoned output, then timing (CUDA events, L2 flushed,
    twice for the spread). A kernel that traps or hangs ends only its worker; its output tail (device
    printf included) is kept with the result, and the entry is run again on the failing shape built
    with PE_WAIT_PRINTF, so the timed-out wait names its tag;
 3a. the entries in AGAIN timed once more after all others, labelled " [again]": the drift of the run;
 4. the baselines of the patch-embed problem (cuBLAS, torch.compile at the end);
 4b. the headline: the HEADLINE_CANDIDATES fastest verified sm90 entries as production builds (PE_WAIT_KIND 2),
    timed again by `python -m pelib.measure.energy headline` beside cuBLAS fast-accum, interleaved: burst and
    sustained time and NVML joules per GEMM; the fastest verified there, by measurement, leads (printed last);
 5. clock64 TIMING runs of the fastest verified entry and of CLOCK_ALSO, each with its launch clock;
 6. compute-sanitizer memcheck (device memory errors only: --report-api-errors no) of every stage on its
    first two check shapes, every "=========" line kept in the JSON;
 7. Nsight Compute counters (DRAM and L2 bytes, throughputs) of the fastest entry and of cuBLAS.
The last lines printed are the tables. JSON and log go to $PE_GPU_RESULTS or results/<date>-<device>/.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import baselines, jobs
from .. import bench, device, results, stages, timing
from ..stage import Stage, Timed, all_stages

# (stage, defines) of interest beyond the stage files' defaults, most informative first: the time
# budget may cut the tail of the list.
VARIANTS = {
    "sm90": [
        ("sm90/04_pingpong_resident_b", {"EPI_STREAM": 1}),   # the best of an earlier sweep
        ("sm90/06_permuted_b", {"B_PERM_TMA": 0}),            # B permuted in shared memory instead of by TMA
        ("sm90/06_permuted_b", {"EPI_STREAM": 0}),
        ("sm90/06_permuted_b", {"TURN_EARLY": 1}),
        ("sm90/07_comb_resident", {"TURN_EARLY": 1}),
        ("sm90/07_comb_resident", {"PREFETCH_TILES": 1}),
        ("sm90/07_comb_resident", {"PREFETCH_TILES": 3}),
        ("sm90/07_comb_resident", {"BLOCK_N": 192, "NUM_STAGES": 10}),   # a deep A ring without the multicast
        ("sm90/08_comb_init", {"TURN_EARLY": 1}),
        ("sm90/08_comb_init", {"B_PERM_TMA": 0}),
        ("sm90/09_multicast_pairs", {"NUM_STAGES": 6}),       # the multicast with a shallow ring
        ("sm90/09_multicast_pairs", {"TURN_EARLY": 1}),
        ("sm90/09_multicast_pairs", {"PREFETCH_TILES": 0}),
        ("sm90/09_multicast_pairs", {"PREFETCH_TILES": 4}),
        ("sm90/09_multicast_pairs", {"BLOCK_N": 256, "NUM_STAGES": 4, "CLUSTER_N": 3}),   # 05's cluster with 06/07
        ("sm90/09_multicast_pairs", {"BLOCK_N": 128, "NUM_STAGES": 16, "CLUSTER_N": 2}),
        ("sm90/09_multicast_pairs", {"BLOCK_N": 128, "NUM_STAGES": 16, "CLUSTER_N": 3}),
        ("sm90/09_multicast_pairs", {"B_PERM_TMA": 0}),
        ("sm90/04_pingpong_resident_b", {"EPI_VEC": 0}),      # 04: what its ideas were worth
        ("sm90/04_pingpong_resident_b", {"COMB_EARLY": 0}),
        ("sm90/04_pingpong_resident_b", {"PREFETCH_TILES": 0}),
        ("sm90/04_pingpong_resident_b", {"BLOCK_N": 192, "NUM_STAGES": 6}),
        ("sm90/05_multicast_a", {"PREFETCH_TILES": 0}),
        ("sm90/03_staged_epilogue", {"EPI_TMA_STORE": 0}),    # 02 / 03: the multicast and the epilogue forms
        ("sm90/03_staged_epilogue", {"BLOCK_N": 192, "NUM_STAGES": 4}),
        ("sm90/01_warp_specialized", {"BLOCK_N": 128, "NUM_CONSUMERS": 1, "WG_M": 2}),   # the chapter's widget
        ("sm90/01_warp_specialized", {"BLOCK_N": 192, "NUM_CONSUMERS": 3, "NUM_STAGES": 3}),
    ],
    "fp8": [("fp8/05_epi_warps", {"NUM_EPI_WARPS": w}) for w in (4, 6)]
           + [("fp8/06_stages", {"NUM_STAGES": n}) for n in (5, 6)],
    "nvfp4": [("nvfp4/10_reduce_scatter", {"SPLIT_K": 4}),     # the deeper split that fills N = 4096 (k7168)
              ("nvfp4/11_ring_partials", {"SPLIT_K": 4}), ("nvfp4/12_wide_tile", {"SPLIT_K": 4})]
             + [("nvfp4/01_pipelined", {"NUM_STAGES": n}) for n in (2, 3, 5, 6)]   # the lab's ring sweep
             + [("nvfp4/02_tma_store_epilogue", {"NUM_STAGES": n}) for n in (5, 6)],
}
# Timed beside the stage files' default builds (bounded waits that trap, call-free: wait_kind 1) in
# every run: the unbounded wait a production kernel ships (common/mbarrier.cuh, PE_WAIT_KIND 2).
PRODUCTION = [("sm90/06_permuted_b", {"PE_WAIT_KIND": 2})]
# Timed again after every other entry, labelled AGAIN_TAG: the drift of the GPU over the run.
AGAIN = [("sm90/06_permuted_b", {})]
AGAIN_TAG = " [again]"
# Whose clock64 phases the sweep records beside the fastest entry's.
CLOCK_ALSO = [("sm90/04_pingpong_resident_b", {}), ("sm90/06_permuted_b", {}), ("sm90/07_comb_resident", {}),
              ("sm90/09_multicast_pairs", {}), ("fp8/09_persistent_megakernel", {})]
DEBUG_DEFINES = {"PE_WAIT_PRINTF": 1, "PE_WAIT_LIMIT": 1 << 20}  # a hang traps in about a second, with its tag
# The headline: the HEADLINE_CANDIDATES fastest verified sm90 entries of this run, as production builds, timed
# again beside cuBLAS fast-accum by `python -m pelib.measure.energy headline` (bursts, sustained windows, NVML joules,
# interleaved); the fastest verified there leads the tables.
HEADLINE_CANDIDATES = 3
HEADLINE_S = 150.0    # the time budget kept for it (builds cached by the sweep: data, 3 verifications, 2 rounds)


def label(key: str, defines: dict) -> str:
    return Stage(key, defines).label


def entries(families, keys=None, variants: bool = False) -> list[tuple[str, dict]]:
    """(stage, defines) to sweep: every stage file of the families (or the named ones) at its defaults,
    then (with variants) each family's VARIANTS."""
    out = [(s.key, {}) for s in all_stages(families) if not keys or s.key in keys]
    if variants:
        out += [v for f in families for v in VARIANTS.get(f, []) if not keys or v[0] in keys]
    return out


# ---- the jobs of a sweep, each in a worker process (pelib.measure.jobs) --------------------------------------

def check(s: Stage, name: str, ctx: jobs.Context, res: dict) -> bool:
    """One check shape, verified (NaN-poisoned output); its line goes into res["checks"]."""
    p, t, ref = ctx.check_problem(s, name)
    res["checking"] = name
    r = s.run(p, inputs=t, ref=ref, time=False)
    rep = r["verify"]
    res.setdefault("checks", {})[name] = {"ok": rep.ok, "n_bad": rep.n_bad, "n_nan": rep.n_nan,
                                          "max_abs": rep.max_abs, "grid": r["launch"]["grid"],
                                          "report": str(rep) if not rep.ok else ""}
    return rep.ok


def variant(job: dict, ctx: jobs.Context, res: dict) -> None:
    """job["stage"] at job["defines"]: verified on the check shapes, then on the full problem, then timed
    twice (the second median is the run-to-run spread); the patch-embed families add the precision."""
    s = Stage(job["stage"], job["defines"])
    res["checks"] = {}
    for name in s.kind.CHECK_PROBLEMS:
        check(s, name, ctx, res)
    res.pop("checking", None)
    if not all(c["ok"] for c in res["checks"].values()):
        res["ok"] = False
        return
    prob, t, ref = ctx.data.full(s)
    res["checking"] = prob.name
    r = s.run(prob, inputs=t, ref=ref, time=Timed(iters=ctx.iters))
    rep = r["verify"]
    res.pop("checking", None)
    res.update(ok=rep.ok, n_bad=rep.n_bad, n_nan=rep.n_nan, max_abs=rep.max_abs, max_rel=rep.max_rel,
               atol=rep.atol, rtol=rep.rtol, report=str(rep), launch=r["launch"])
    res["wait_kind"] = s.build.exports.get("wait_kind")   # the wait build that was timed (common/mbarrier.cuh)
    if rep.ok:
        if s.family in ("fp8", "sm90"):   # the patch-embed function: the same precision column as the baselines
            res["precision"] = baselines.precision(t["out"], t, target="gemm+comb")
        res.update({k: r[k] for k in ("median_ms", "p10_ms", "p90_ms", "n", "tflops", "gbps") if k in r})
        res["repeat_median_ms"] = s.run(prob, inputs=t, verify=False, time=Timed(iters=ctx.iters))["median_ms"]
        timed_shapes(s, ctx, res)


def timed_shapes(s: Stage, ctx: jobs.Context, res: dict) -> None:
    """The family's other benchmark shapes (the kind's TIMED_PROBLEMS, e.g. NVFP4's k7168 and k2048), each
    verified on a NaN-poisoned output, then timed, into res["shapes"] (the full problem is res itself)."""
    for name in getattr(s.kind, "TIMED_PROBLEMS", ()):
        p, t, ref = ctx.check_problem(s, name)
        r = s.run(p, inputs=t, ref=ref, time=Timed(iters=ctx.iters))
        rep = r["verify"]
        row = {"ok": rep.ok, "n_bad": rep.n_bad, "n_nan": rep.n_nan, "grid": r["launch"]["grid"],
               "problem": f"{p.m}x{p.n}x{p.k}"}
        if rep.ok:
            row.update({k: r[k] for k in ("median_ms", "p10_ms", "p90_ms", "n", "tflops", "gbps") if k in r})
        else:
            row["report"] = str(rep)
            res["ok"] = False
        res.setdefault("shapes", {})[name] = row


def _run_debug(job, ctx: jobs.Context, res: dict) -> None:
    """The failing shape again, built with PE_WAIT_PRINTF: a timed-out wait prints its tag."""
    s = Stage(job["stage"], {**job["defines"], **DEBUG_DEFINES})
    res["checks"] = {}
    res["ok"] = check(s, job["shape"], ctx, res)


def _run_clock(job, ctx: jobs.Context, res: dict) -> dict:
    """A TIMING build of the entry on its full problem; per-warp phase statistics (cycles)."""
    s = Stage(job["stage"], job["defines"])
    prob, t, _ = ctx.data.full(s)
    tm = s.run_timing(prob, inputs=t)
    return {"ok": True, "unit": tm.layout.unit, "table": tm.table(),
            "launch_clock": tm.launch_clock(min_ns=50_000.0) if tm.cta_clock is not None else None,
            "summary": {ph: {"avg": row["avg"], "spread": row["spread"],
                             "warps": {str(w): st["avg"] for w, st in row["warps"].items()}}
                        for ph, row in tm.summary().items()}}


KINDS = {"variant": variant, "debug": _run_debug, "clock": _run_clock}


def run_jobs(todo: list[dict], data_dir: str, iters: int, budget_s: float, job_timeout_s: float = 90.0) -> list[dict]:
    """The sweep's jobs in worker processes (pelib.measure.jobs.run), each printed as it finishes."""
    return jobs.run(todo, data_dir, iters, budget_s, job_timeout_s, module="pelib.measure.sweep", show=show_job)


def wait_tags(r: dict) -> list[str]:
    """The 'mbarrier wait timed out' lines a job's worker printed."""
    return [ln.strip() for ln in r.get("worker_output", []) if "timed out" in ln]


def fail_reason(r: dict) -> str:
    """One short line: why a variant failed."""
    tags = wait_tags(r)
    if tags:
        return tags[0][:150]
    bad = [f"{k}: {v.get('n_bad')} bad, {v.get('n_nan')} NaN" for k, v in r.get("checks", {}).items() if not v["ok"]]
    if bad:
        return "wrong on " + "; ".join(bad)[:150]
    err = r.get("error", "") or r.get("report", "")
    if "KernelFault" in err:
        where = r.get("checking") or _first_unchecked(r, "?")
        return f"KernelFault on {where}: " + ("trap (bounded wait or range check)" if "trap" in err.lower()
                                              or "LAUNCH_FAILED" in err else err.split(":")[-1][:80])
    return err.replace("\n", " ")[:150]


def _first_unchecked(r: dict, default: str) -> str:
    checks = Stage(r["stage"]).kind.CHECK_PROBLEMS if r.get("stage") else ()
    return next((k for k in checks if k not in r.get("checks", {})), default)


def show_job(r: dict) -> None:
    """One printed line per finished job (and the worker's last lines where it failed)."""
    if r.get("kind") == "clock":
        print(f"[clock] {r['label']}: " + ("ok" if r.get("ok") else r.get("error", "failed")[:300]), flush=True)
        return
    checks = " ".join(f"{k}:{'ok' if v['ok'] else 'FAIL'}" for k, v in r.get("checks", {}).items())
    tag = "[debug]" if r.get("kind") == "debug" else ("[PASS]" if r.get("ok") else "[FAIL]")
    if "median_ms" in r:
        what = f"{r['median_ms']:.4f} ms (repeat {r['repeat_median_ms']:.4f})"
        what += "".join(f"; {k} " + (f"{v['median_ms']:.4f} ms" if "median_ms" in v else "FAIL")
                        for k, v in r.get("shapes", {}).items())
    else:
        what = fail_reason(r)
    print(f"{tag} {r['label']}  {checks}  {what}", flush=True)
    if not r.get("ok"):
        for ln in r.get("worker_output", [])[-12:]:
            print(f"    | {ln[:200]}", flush=True)


def clock_jobs(best: dict, timed: list[dict]) -> list[dict]:
    """The clock jobs: the fastest verified entry first, then each of CLOCK_ALSO that verified."""
    out = [{"kind": "clock", "stage": best["stage"], "defines": best["defines"], "label": best["label"]}]
    ok = {(r["stage"], json.dumps(r["defines"], sort_keys=True)) for r in timed}
    for k, d in CLOCK_ALSO:
        if (k, d) != (best["stage"], best["defines"]) and (k, json.dumps(d, sort_keys=True)) in ok:
            out.append({"kind": "clock", "stage": k, "defines": d, "label": label(k, d)})
    return out


# ---- memcheck and Nsight Compute (each in its own process) --------------------------------------

def _sanitize(entries_: list) -> int:
    """Each entry once on its family's first two check shapes, verified: the body to run under
    `compute-sanitizer --tool memcheck` (no timing; the sanitizer slows kernels by orders of magnitude)."""
    bad = 0
    for key, defines in entries_:
        s = Stage(key, defines)
        for name in s.kind.CHECK_PROBLEMS[:2]:
            try:
                rep = s.run(name, seed=1, time=False)["verify"]
                ok, what = rep.ok, f"max abs {rep.max_abs:.3g}, bad {rep.n_bad}, NaN {rep.n_nan}"
            except Exception as e:
                ok, what = False, f"{type(e).__name__}: {e}"[:300]
            bad += not ok
            print(f"[sanitize] {s.label} on {name}: {'ok' if ok else 'FAIL'} ({what})", flush=True)
            if not ok and "KernelFault" in what:
                print("[sanitize] the CUDA context is dead: the remaining stages are not checked", flush=True)
                return 1
    return 1 if bad else 0


def run_memcheck(entries_: list, timeout_s: float) -> dict:
    """compute-sanitizer --tool memcheck over _sanitize; its per-stage lines and error summary."""
    cs = jobs.tool("compute-sanitizer")
    if not cs:
        return {"ok": False, "error": "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"}
    # --report-api-errors no: only device memory errors count. pelib.launch polls for completion with
    # cuEventQuery, whose CUDA_ERROR_NOT_READY answers the default (explicit) mode reports as API errors
    # (the 2026-11-23 sweep: "ERROR SUMMARY: 48 errors" with every checked run correct).
    cmd = [cs, "--tool", "memcheck", "--report-api-errors", "no", "--error-exitcode", "9", sys.executable,
           "-m", "pelib.measure.sweep", "--sanitize", json.dumps([list(e) for e in entries_])]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {"ok": False, "error": f"did not finish in {timeout_s:.0f} s",
                "lines": [ln for ln in out.splitlines() if ln.startswith("[sanitize]")]}
    out = p.stdout + p.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("[sanitize]")]
    summary = [ln.strip() for ln in out.splitlines() if "ERROR SUMMARY" in ln]
    tool = [ln.rstrip() for ln in out.splitlines() if ln.startswith("=========")]   # every sanitizer line
    errors = [ln.strip() for ln in tool if "ERROR SUMMARY" not in ln and ln.strip("= ")][:12]
    return {"ok": p.returncode == 0, "returncode": p.returncode, "lines": lines, "summary": summary,
            "errors": errors, "sanitizer_lines": tool[:400], "sanitizer_lines_total": len(tool),
            "wall_s": round(time.time() - t0, 1)}


NCU_METRICS = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "lts__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__cycles_elapsed.avg.per_second"]
NCU_OPTIONAL = ["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
                "sm__inst_executed_pipe_tensor_op_gmma.sum"]


def _ncu_target(key: str, defines: dict) -> None:
    """Body profiled by Nsight Compute: our kernel once, then (patch embed) cuBLAS's fast-accumulation GEMM once."""
    import torch   # the GPU subprocess only
    s = Stage(key, defines)
    prob = s.problem("full")
    t = s.inputs(prob)
    s.run(prob, inputs=t, verify=True, time=False)
    if s.family in ("fp8", "sm90"):
        baselines.cublas_fns(prob, t)["cublas_gemm_fastacc"]()
    torch.cuda.synchronize()


def run_ncu(best: tuple, timeout_s: float) -> dict:
    """Nsight Compute counters of our best kernel and cuBLAS (clocks left as they are)."""
    ncu = jobs.tool("ncu")
    if not ncu:
        return {"ok": False, "error": "ncu not found"}
    metrics = list(NCU_METRICS)
    try:
        q = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=60)
        metrics += [m for m in NCU_OPTIONAL if m.split(".")[0] in q.stdout]
    except Exception:
        pass
    kernel = Stage(best[0]).build.kernel
    return jobs.run_ncu("pelib.measure.sweep", json.dumps([best[0], best[1]]), f"{kernel}|gemm|xmma|cutlass|nvjet", metrics,
                        timeout_s, ncu_args=("-c", "2"))


def format_ncu(res: dict) -> str:
    if not res or not res.get("ok"):
        return f"ncu: {res.get('error') if res else 'not run'}"
    short = {"gpu__time_duration.sum": "time", "dram__bytes_read.sum": "DRAM rd", "dram__bytes_write.sum": "DRAM wr",
             "lts__t_bytes.sum": "L2 bytes", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM%",
             "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2%",
             "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM%",
             "sm__cycles_elapsed.avg.per_second": "SM clk",
             "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed": "GMMA%",
             "sm__inst_executed_pipe_tensor_op_gmma.sum": "GMMA inst"}
    lines = ["Nsight Compute (clock control none):"]
    for k in res["kernels"]:
        lines.append(f"  {k['kernel'][:40]}: " + ", ".join(f"{short[m]} {k[m]}" for m in short if m in k))
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------------

def headline_candidates(timed: list[dict], n: int = HEADLINE_CANDIDATES) -> list[list]:
    """[stage, defines] of the n fastest verified sm90 entries by this run's median (the wait kind left to the
    headline run, which builds each as a production build; an AGAIN re-run and a second wait build of one
    stage count once), fastest first."""
    out, seen = [], set()
    for r in sorted((r for r in timed if r.get("ok") and r.get("median_ms") and r["stage"].startswith("sm90/")),
                    key=lambda r: r["median_ms"]):
        d = {k: v for k, v in (r.get("defines") or {}).items() if k != "PE_WAIT_KIND"}
        key = (r["stage"], json.dumps(d, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append([r["stage"], d])
    return out[:n]


def run_headline(candidates: list[list], timeout_s: float) -> dict:
    """`python -m pelib.measure.energy headline` on the candidates in a subprocess (pelib.measure.energy builds on this module:
    a child process keeps the import graph acyclic), its report read back."""
    out = Path(tempfile.mkdtemp(prefix="pelib-headline-"))
    cmd = [sys.executable, "-m", "pelib.measure.energy", "headline", "--entries", json.dumps(candidates), "--out", str(out),
           "--budget", f"{max(60.0, timeout_s - 15):.0f}", "--no-ncu"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
        f = out / "energy-headline.json"
        if not f.exists():
            return {"ok": False, "error": f"exit {p.returncode}: " + " | ".join((p.stdout + p.stderr).splitlines()[-6:])[:600]}
        doc = json.loads(f.read_text())
        return {"ok": bool(doc.get("headline")), "candidates": candidates, "headline": doc.get("headline"),
                "summary": doc.get("summary"), "verified": doc.get("verified"), "evidence": doc.get("evidence"),
                "protocol": doc.get("protocol"), "nvml": doc.get("nvml")}
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"did not finish in {timeout_s:.0f} s", "candidates": candidates}
    finally:
        shutil.rmtree(out, ignore_errors=True)


HEADLINE_COLS = (("burst ms (random)", "burst ms"), ("x cuBLAS fast (burst)", "x cuBLAS"),
                 ("sustained ms (random)", "sustained ms"), ("J/launch (random)", "J/GEMM"),
                 ("J / cuBLAS fast J", "J ratio"), ("launch clock (GHz)", "GHz"))


def format_headline(h: dict) -> str:
    """The headline table: the fastest verified stage first, then the other candidates, then cuBLAS
    fast-accum, each with burst and sustained time and joules per GEMM from the one interleaved run."""
    if not h.get("summary"):
        return f"headline: {h.get('error', 'no stage verified')}"
    rows = sorted(h["summary"], key=lambda r: (r["entry"] != h.get("headline"), r["entry"].startswith("cuBLAS"),
                                               r.get("burst ms (random)") or 1e9))
    lines = [f"headline ({h.get('evidence', 'measured')}; production builds, interleaved with cuBLAS fast-accum): "
             f"{h.get('headline') or 'none verified'}",
             f"  {'entry':<34}" + "".join(f"{c:>14}" for _, c in HEADLINE_COLS)]
    for r in rows:
        cells = "".join(f"{r[k]:>14.4f}" if isinstance(r.get(k), (int, float)) else f"{'-':>14}" for k, _ in HEADLINE_COLS)
        lines.append(f"{'* ' if r['entry'] == h.get('headline') else '  '}{r['entry']:<34}{cells}")
    return "\n".join(lines)


def _left(t_start: float, budget: float) -> float:
    return budget - (time.time() - t_start)


def _facts(s: Stage) -> dict:
    f = s.facts_row()
    warns = sorted(set(re.findall(r"C75\d\d", s.build.log)))
    return {"label": s.label, "stage": s.key, "defines": dict(s.defines), "registers": f["registers"],
            "spills": f["spills (B)"], "smem": f["smem (B)"], "tile": f["tile"], "ptxas_warnings": ",".join(warns),
            "wait_kind": s.build.exports.get("wait_kind"),
            **{k: v for k, v in f.items() if k.isupper()},
            **{op: s.build.histogram.get(op, 0) for op in ("UTMASTG", "STG", "STS")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.measure.sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--family", default=None, help="comma-separated families (default: every one this GPU runs)")
    ap.add_argument("--stage", action="append", default=None, help="only these stage files (family/name)")
    ap.add_argument("--variants", action="store_true", help="also each family's VARIANTS (and the AGAIN runs)")
    ap.add_argument("--no-compiled", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--no-sanitize", action="store_true", help="skip the compute-sanitizer memcheck step")
    ap.add_argument("--no-ncu", action="store_true", help="skip the Nsight Compute step")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run")
    ap.add_argument("--out", default=None)
    a = jobs.parse(ap, argv, KINDS, sanitize=lambda a: _sanitize([tuple(x) for x in json.loads(a.sanitize)]),
                   ncu_target=lambda a: _ncu_target(*json.loads(a.ncu_target)))
    if isinstance(a, int):
        return a

    t_start = time.time()
    import torch   # the sweep runs on a GPU
    info = device.current()
    print(device.banner_text(info=info), flush=True)
    fams = [f for f in (a.family.split(",") if a.family else ("sm90", "fp8", "nvfp4"))
            if device.can_run(Stage(stages.family_stages(f)[0]).arch, info)]
    if not fams:
        bench.runner_device("python -m pelib.measure.sweep", "sm_90a", info)   # one line naming what is here
    env = bench.environment(info)
    todo = entries(fams, a.stage, a.variants)
    todo += [(k, d) for k, d in PRODUCTION if k.split("/")[0] in fams and (not a.stage or k in a.stage)]

    # 1. compiled facts (this also fills the build cache the workers use)
    facts, built = [], []
    for k, d in todo:
        s = Stage(k, d)
        try:
            f = _facts(s)
            built.append((k, d))
            print(f"[build] {f['label']}: {f['registers']} regs, {f['spills']} B spills, smem {f['smem']} B, "
                  f"tile {f['tile']}{' ' + f['ptxas_warnings'] if f['ptxas_warnings'] else ''}", flush=True)
        except Exception as e:
            f = {"label": s.label, "stage": k, "error": f"{type(e).__name__}: {e}"[:1500]}
            print(f"[build] {s.label}: FAILED {e}", flush=True)
        facts.append(f)

    # 2. copy bandwidth, each family's full problem (saved for the workers)
    copy = bench.copy_bandwidth_gb_s()
    print(f"[copy] device-to-device {copy['gbps']:.0f} GB/s (read + write)", flush=True)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    data_dir = tempfile.mkdtemp(prefix="pelib-sweep-", dir=shm)
    report = {"env": env, "evidence": f"measured ({info.name}, {env['date'][:10]})", "copy": copy, "facts": facts,
              "variants": [], "debug": [], "baselines": [], "clock": None, "memcheck": None, "ncu": None}
    try:
        t0 = time.time()
        for f in dict.fromkeys(Stage(k).family for k, _ in built):
            jobs.save_full(next(Stage(k) for k, _ in built if Stage(k).family == f), data_dir)
        torch.cuda.empty_cache()
        print(f"[data] inputs + references in {time.time() - t0:.1f} s", flush=True)

        # 3. entries in workers (the kernels never run in this process)
        todo_jobs = [{"kind": "variant", "stage": k, "defines": d, "label": label(k, d)} for k, d in built]
        todo_jobs += [{"kind": "variant", "stage": k, "defines": d, "label": label(k, d) + AGAIN_TAG}
                 for k, d in (AGAIN if a.variants else []) if (k, d) in built]
        res = run_jobs(todo_jobs, data_dir, a.iters,
                       _left(t_start, a.budget) - 150 - (HEADLINE_S if "sm90" in fams else 0))
        report["variants"] = res
        # 3b. faulting entries again with PE_WAIT_PRINTF on the shape that failed (their wait tags)
        faulted = [r for r in res if not r.get("ok") and any(x in (r.get("error") or "")
                                                              for x in ("KernelFault", "KernelHang"))]
        if faulted and _left(t_start, a.budget) > 150:
            dj = [{"kind": "debug", "stage": r["stage"], "defines": r["defines"],
                   "shape": r.get("checking") or _first_unchecked(r, "small"),
                   "label": r["label"] + " [PE_WAIT_PRINTF]"} for r in faulted[:4]]
            report["debug"] = run_jobs(dj, data_dir, a.iters, min(60.0, _left(t_start, a.budget) - 120), 30.0)

        # 4. baselines of the patch-embed problem (pelib.measure.baselines: cuBLAS and Triton here, torch.compile
        #    in a subprocess at the end)
        pe = next((Stage(k) for k, _ in built if Stage(k).family in ("fp8", "sm90")), None)
        if pe is not None:
            full = pe.problem("full")
            pe_dir = Path(data_dir) / full.name
            try:
                t = {k: v.cuda() for k, v in torch.load(pe_dir / "inputs.pt", mmap=True).items()}
                t["out"] = torch.empty(full.m, full.n, dtype=torch.bfloat16, device="cuda")
                ref = torch.load(pe_dir / "ref.pt", mmap=True).cuda()
                baselines.save_inputs(t, pe_dir)
                report["baselines"] = baselines.rows(full, t, include=[n for n in baselines.names()
                                                                        if n != "torch_compile"], iters=a.iters, ref=ref)
                del t, ref
            except Exception as e:
                report["baselines"] = [{"name": "baselines", "status": "failed", "reason": f"{type(e).__name__}: {e}"}]
            torch.cuda.empty_cache()
        timed = [r for r in res if r.get("ok") and "median_ms" in r]
        best = min(timed, key=lambda r: r["median_ms"]) if timed else None
        # 4b. the headline: the fastest verified sm90 entries as production builds beside cuBLAS fast-accum
        cands = headline_candidates(timed)
        if cands and _left(t_start, a.budget) > 100 + HEADLINE_S / 2:
            lim = min(HEADLINE_S, _left(t_start, a.budget) - 100)
            print(f"[headline] {', '.join(k.split('/')[-1] for k, _ in cands)} beside cuBLAS fast-accum "
                  f"(limit {lim:.0f} s)", flush=True)
            report["headline"] = run_headline(cands, lim)
        # 5. clock64 breakdown of the fastest verified entry, then of CLOCK_ALSO
        if best and _left(t_start, a.budget) > 100:
            cj = clock_jobs(best, timed)
            rs = run_jobs(cj, data_dir, a.iters, min(25.0 * len(cj), _left(t_start, a.budget) - 90))
            report["clock"], report["clocks"] = rs[0], rs[1:]
        # 6. memcheck of every stage file on its first check shapes
        if not a.no_sanitize and _left(t_start, a.budget) > 120:
            lim = min(120.0, _left(t_start, a.budget) - 100)
            print(f"[memcheck] compute-sanitizer (limit {lim:.0f} s)", flush=True)
            report["memcheck"] = run_memcheck([(k, d) for k, d in built if not d], lim)
        # 7. torch.compile(max-autotune) of the fused expression
        left = _left(t_start, a.budget) - 50
        if pe is not None and not a.no_compiled and left > 45:
            limit = int(min(left, baselines.COMPILE_TIMEOUT_S))
            print(f"[compile] torch.compile (limit {limit} s)", flush=True)
            t = {k: v.cuda() for k, v in torch.load(pe_dir / "inputs.pt", mmap=True).items()}
            report["baselines"] += baselines.rows(full, t, include=["torch_compile"], iters=a.iters, data_dir=pe_dir,
                                                  compile_timeout_s=limit)
            del t
        elif pe is not None and not a.no_compiled:
            report["baselines"].append({**baselines.skipped(baselines.BASELINES["torch_compile"],
                                                            f"{max(left, 0):.0f} s of the time budget left")})
        # 8. Nsight Compute counters of the best entry and cuBLAS, with what is left
        if not a.no_ncu and best and _left(t_start, a.budget) > 45:
            lim = min(150.0, _left(t_start, a.budget) - 10)
            print(f"[ncu] Nsight Compute (limit {lim:.0f} s)", flush=True)
            report["ncu"] = run_ncu((best["stage"], best["defines"]), lim)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    # 9. tables (printed last: the tail of the output is what is read)
    out_dir = Path(a.out or os.environ.get("PE_GPU_RESULTS") or results.run_dir(env))
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = "".join(c if c.isalnum() else "-" for c in info.name).strip("-").lower()
    path = out_dir / f"{'hopper-' if fams == ['sm90'] else ''}sweep-{env['date'][:19].replace(':', '')}-{dev}.json"
    best = min((r for r in report["variants"] if "median_ms" in r), key=lambda r: r["median_ms"], default=None)
    if best and pe is not None and Stage(best["stage"]).family in ("fp8", "sm90"):
        report["comparison"] = bench.compare_rows({**best, "stage": best["label"]}, report["baselines"], copy["gbps"],
                                                  pe.problem("full"))
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")

    print()
    if report.get("clock") and report["clock"].get("summary"):
        print("clock64 phases of " + report["clock"]["label"] + " (cycles per tile, averaged per warp; "
              "full per-warp table in the JSON)")
        for row in timing.summary_rows(report["clock"]["summary"]):
            print(f"  {row['phase']:<14}warps {row['warps']:<6}avg {row['avg (cycles)']:>9}  warp avgs "
                  f"{row['min warp avg']:>9} .. {row['max warp avg']}")
    elif report.get("clock"):
        print(f"clock64: {report['clock'].get('error', 'no records')[:300]}")
    for cl in report.get("clocks") or []:
        if cl.get("summary"):
            avg = {row["phase"]: row["avg (cycles)"] for row in timing.summary_rows(cl["summary"])}
            print(f"  clock64 {cl['label'][:44]:<44} " + " ".join(f"{ph} {avg[ph]}" for ph in
                  ("tma_wait", "kloop", "epi_wait", "epi_phase1", "tile") if ph in avg))
    for r in report.get("debug", []):
        print(f"[debug] {r['label']}: " + (" / ".join(wait_tags(r)) or fail_reason(r) or "passed"))
        for ln in stages.explain_timeout("\n".join(r.get("worker_output", [])), r["stage"])[:8]:
            print(f"    {ln}")   # tag -> barrier -> source line
    if report.get("ncu"):
        print(format_ncu(report["ncu"]))
    mc = report.get("memcheck")
    if mc:
        print("memcheck: " + ("clean" if mc.get("ok") else "PROBLEMS") + "; "
              + "; ".join(mc.get("summary", [])[:2] or [mc.get("error", "")]))
        for ln in (mc.get("lines", []) if not mc.get("ok") else []) + mc.get("errors", [])[:6]:
            print("  " + ln[:200])
    print(f"\n{report['evidence']}; copy {copy['gbps']:.0f} GB/s")
    print(f"{'entry':<60}{'regs':>5}{'smem':>6}{'check':>6}{'ms':>9}{'rep':>9}{'TFLOPS':>7}{'floor':>6}"
          f"{'wait':>5}{'ulp':>6}")
    fact_of = {f["label"]: f for f in facts}
    for r in report["variants"]:
        f = fact_of.get(r["label"].replace(AGAIN_TAG, ""), {})
        ms = r.get("median_ms")
        if ms:
            d = bench.derived(Stage(r["stage"]).problem("full"), ms, copy["gbps"])
            print(f"{r['label'][:60]:<60}{f.get('registers', '-'):>5}{f.get('smem', 0) // 1024:>5}K{'ok':>6}"
                  f"{ms:>9.4f}{r['repeat_median_ms']:>9.4f}{d['tflops']:>7.0f}{100 * d['floor_frac']:>5.0f}%"
                  f"{r.get('wait_kind', '-')!s:>5}{(r.get('precision') or {}).get('max_ulp', float('nan')):>6.1f}")
        else:
            print(f"{r['label'][:60]:<60}{f.get('registers', '-'):>5}{f.get('smem', 0) // 1024:>5}K{'FAIL':>6}  "
                  f"{fail_reason(r)[:90]}")
    if report.get("comparison"):
        print()
        print(bench.format_rows(report["comparison"]))
    if report.get("headline"):
        print()
        print(format_headline(report["headline"]))
    print(f"\nwrote {path} ({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
