"""The process-isolated sweep of stage files on one GPU (`make bench`): build, verify, time, baselines, checks.

    python -m pelib.sweep [--family sm90,fp8,nvfp4] [--stage family/name ...] [--variants] [--no-compiled]
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
 5. clock64 TIMING runs of the fastest verified entry and of CLOCK_ALSO, each with its launch clock;
 6. compute-sanitizer memcheck (device memory errors only: --report-api-errors no) of every stage on its
    first two check shapes, every "=========" line kept in the JSON;
 7. Nsight Compute counters (DRAM and L2 bytes, throughputs) of the fastest entry and of cuBLAS.
The last lines printed are the tables. JSON and log go to $PE_GPU_RESULTS or results/<date>-<device>/.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import baselines, bench, device, results, stages, timing
from .stage import Stage, all_stages

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
    "nvfp4": [("nvfp4/01_pipelined", {"NUM_AB_STAGE": n}) for n in (1, 2, 3, 5, 6)]
             + [("nvfp4/02_tma_store_epilogue", {"NUM_AB_STAGE": n}) for n in (5, 6)],
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


def label(key: str, defines: dict) -> str:
    return Stage(key, defines).label


def entries(families, keys=None, variants: bool = False) -> list[tuple[str, dict]]:
    """(stage, defines) to sweep: every stage file of the families (or the named ones) at its defaults,
    then (with variants) each family's VARIANTS."""
    out = [(s.key, {}) for s in all_stages(families) if not keys or s.key in keys]
    if variants:
        out += [v for f in families for v in VARIANTS.get(f, []) if not keys or v[0] in keys]
    return out


# ---- worker: runs entries in its own process (a trap or hang ends only this process) ---------------

class _Data:
    """Each family's full problem: saved inputs and reference, loaded on first use."""

    def __init__(self, data_dir: str):
        self.data_dir, self.cache = Path(data_dir), {}

    def full(self, s: Stage):
        import torch   # the worker runs on the GPU
        prob = s.problem("full")
        if prob.name not in self.cache:
            d = self.data_dir / prob.name
            t = {k: v.cuda() for k, v in torch.load(d / "inputs.pt", mmap=True).items()}
            out = json.loads((d / "out.json").read_text())
            t["out"] = torch.empty(out["shape"], dtype=getattr(torch, out["dtype"]), device="cuda")
            self.cache = {prob.name: (prob, t, torch.load(d / "ref.pt", mmap=True).cuda())}
        return self.cache[prob.name]


def save_full(s: Stage, data_dir: str) -> None:
    """The full problem's inputs (seed 0) and reference, saved once per problem for the workers."""
    import torch
    prob = s.problem("full")
    d = Path(data_dir) / prob.name
    if d.exists():
        return
    d.mkdir(parents=True)
    t = s.inputs(prob, seed=0)
    ref = s.kind.reference(prob, t)
    torch.cuda.synchronize()
    torch.save({k: v.cpu() for k, v in t.items() if k != "out"}, d / "inputs.pt")
    (d / "out.json").write_text(json.dumps({"shape": list(t["out"].shape),
                                            "dtype": str(t["out"].dtype).replace("torch.", "")}))
    torch.save(ref.cpu(), d / "ref.pt")


def _worker(jobs_file: str, data_dir: str, start: int, iters: int) -> None:
    jobs = json.loads(Path(jobs_file).read_text())
    data, small = _Data(data_dir), {}
    for i in range(start, len(jobs)):
        job = jobs[i]
        print(f"START {i}", flush=True)
        res = {"index": i, **job}
        try:
            if job["kind"] == "variant":
                _run_variant(job, small, data, iters, res)   # fills res as it goes: a fault keeps the checks
            elif job["kind"] == "debug":
                _run_debug(job, small, res)
            else:
                res.update(_run_clock(job, data))
        except Exception as e:  # a launch error or fault: report it; a fault leaves the context dead
            res.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000], trace=traceback.format_exc()[-2000:])
            print("JOB " + json.dumps(res, default=str), flush=True)
            if type(e).__name__ in ("KernelFault", "KernelHang"):
                sys.stdout.flush()
                sys.exit(3)
            continue
        print("JOB " + json.dumps(res, default=str), flush=True)


def _small(small: dict, s: Stage, name: str):
    key = (s.family, name)
    if key not in small:
        p = s.problem(name)
        t = s.inputs(p, seed=7)
        small[key] = (p, t, s.kind.reference(p, t))
    return small[key]


def _check(s: Stage, name: str, small: dict, out: dict) -> bool:
    p, t, ref = _small(small, s, name)
    out["checking"] = name
    r = s.run(p, inputs=t, ref=ref, time=False)
    rep = r["verify"]
    out["checks"][name] = {"ok": rep.ok, "n_bad": rep.n_bad, "n_nan": rep.n_nan, "max_abs": rep.max_abs,
                           "grid": r["launch"]["grid"], "report": str(rep) if not rep.ok else ""}
    return rep.ok


def _run_variant(job, small, data, iters, out: dict) -> dict:
    s = Stage(job["stage"], job["defines"])
    out["checks"] = {}
    for name in s.kind.CHECK_PROBLEMS:
        _check(s, name, small, out)
    out.pop("checking", None)
    if not all(c["ok"] for c in out["checks"].values()):
        out["ok"] = False
        return out
    prob, t, ref = data.full(s)
    out["checking"] = prob.name
    r = s.run(prob, inputs=t, ref=ref, iters=iters)
    rep = r["verify"]
    out.pop("checking", None)
    out.update(ok=rep.ok, n_bad=rep.n_bad, n_nan=rep.n_nan, max_abs=rep.max_abs, max_rel=rep.max_rel,
               atol=rep.atol, rtol=rep.rtol, report=str(rep), launch=r["launch"])
    out["wait_kind"] = s.build.exports.get("wait_kind")   # the wait build that was timed (common/mbarrier.cuh)
    if rep.ok:
        if s.family in ("fp8", "sm90"):   # the patch-embed function: the same precision column as the baselines
            out["precision"] = baselines.precision(t["out"], t, target="gemm+comb")
        out.update({k: r[k] for k in ("median_ms", "p10_ms", "p90_ms", "n", "tflops", "gbps") if k in r})
        out["repeat_median_ms"] = s.run(prob, inputs=t, verify=False, iters=iters)["median_ms"]  # run-to-run spread
    return out


def _run_debug(job, small, out: dict) -> dict:
    """The failing shape again, built with PE_WAIT_PRINTF: a timed-out wait prints its tag."""
    s = Stage(job["stage"], {**job["defines"], **DEBUG_DEFINES})
    out["checks"] = {}
    out["ok"] = _check(s, job["shape"], small, out)
    return out


def _run_clock(job, data) -> dict:
    """A TIMING build of the entry on its full problem; per-warp phase statistics (cycles)."""
    s = Stage(job["stage"], job["defines"])
    prob, t, _ = data.full(s)
    tm = s.run_timing(prob, inputs=t)
    return {"ok": True, "unit": tm.layout.unit, "table": tm.table(),
            "launch_clock": tm.launch_clock(min_ns=50_000.0) if tm.cta_clock is not None else None,
            "summary": {ph: {"avg": row["avg"], "spread": row["spread"],
                             "warps": {str(w): st["avg"] for w, st in row["warps"].items()}}
                        for ph, row in tm.summary().items()}}


def run_jobs(jobs: list[dict], data_dir: str, iters: int, budget_s: float, job_timeout_s: float = 90.0,
             module: str = "pelib.sweep") -> list[dict]:
    """Run jobs in worker processes (`python -m <module> --worker ...`), restarting after a crash or a
    stuck job; one result per job. A failed job keeps the worker's last output lines (device printf
    of a trapped wait included)."""
    import queue
    import threading
    jf = Path(data_dir) / f"jobs-{time.time_ns()}.json"
    jf.write_text(json.dumps(jobs))
    results: dict[int, dict] = {}
    start, t0 = 0, time.time()
    while start < len(jobs) and budget_s - (time.time() - t0) > 5:
        cmd = [sys.executable, "-m", module, "--worker", str(jf), "--data", data_dir,
               "--start", str(start), "--iters", str(iters)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in p.stdout] + [lines.put(None)], daemon=True).start()
        current, tail, since, last, exit_by = None, [], time.time(), None, None
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                line = ""
            if line is None:
                break
            line = line.rstrip("\n")
            if line.startswith("START "):
                current, since, tail = int(line.split()[1]), time.time(), []
            elif line.startswith("JOB "):
                r = json.loads(line[4:])
                results[r["index"]] = r
                last = r["index"]
                fatal = any(x in (r.get("error") or "") for x in ("KernelFault", "KernelHang"))
                if not fatal:        # a fault's device printf arrives when the worker exits: print it then
                    _print_job(r)
                    r["_printed"] = True
                else:                # a hung kernel can keep the process from exiting: give it 20 s
                    exit_by = time.time() + 20.0
                current = None
            elif line:
                tail = (tail + [line])[-40:]
            stuck = current is not None and time.time() - since > job_timeout_s
            if exit_by is not None and time.time() > exit_by:
                tail.append("killed: the worker did not exit after its kernel failed")
                p.kill()
                break
            if stuck or time.time() - t0 > budget_s:
                tail.append(f"killed after {time.time() - since:.0f} s" if stuck else "killed: time budget")
                p.kill()
                break
        p.wait()
        if last is not None and not results[last].get("ok") and "_printed" not in results[last]:
            results[last]["worker_output"] = tail[-25:]   # what the worker printed after the failure
            if True:
                _print_job(results[last])
                results[last]["_printed"] = True
        if current is None:
            done_here = [k for k in results if k >= start]
            if p.returncode == 0:
                break
            if done_here:            # a job reported its own fault and the worker exited: go on after it
                start = max(done_here) + 1
                continue
            current = start          # the worker died before it started a job (import, data): skip one
        results[current] = {"index": current, **jobs[current], "ok": False,
                            "error": f"worker exited with {p.returncode}: " + " | ".join(tail[-8:]),
                            "worker_output": tail[-25:]}
        _print_job(results[current])
        start = current + 1
    out = [results.get(i, {"index": i, **j, "ok": False, "error": "not run (time budget)"}) for i, j in enumerate(jobs)]
    for r in out:
        r.pop("_printed", None)
    return out


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


def _print_job(r: dict) -> None:
    if r.get("kind") == "clock":
        print(f"[clock] {r['label']}: " + ("ok" if r.get("ok") else r.get("error", "failed")[:300]), flush=True)
        return
    checks = " ".join(f"{k}:{'ok' if v['ok'] else 'FAIL'}" for k, v in r.get("checks", {}).items())
    tag = "[debug]" if r.get("kind") == "debug" else ("[PASS]" if r.get("ok") else "[FAIL]")
    if "median_ms" in r:
        what = f"{r['median_ms']:.4f} ms (repeat {r['repeat_median_ms']:.4f})"
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

def _tool(name: str) -> str | None:
    for cand in (shutil.which(name), f"/usr/local/cuda/bin/{name}", f"/usr/local/cuda/compute-sanitizer/{name}"):
        if cand and Path(cand).exists():
            return cand
    return None


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
    cs = _tool("compute-sanitizer")
    if not cs:
        return {"ok": False, "error": "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"}
    # --report-api-errors no: only device memory errors count. pelib.launch polls for completion with
    # cuEventQuery, whose CUDA_ERROR_NOT_READY answers the default (explicit) mode reports as API errors
    # (the 2026-11-23 sweep: "ERROR SUMMARY: 48 errors" with every checked run correct).
    cmd = [cs, "--tool", "memcheck", "--report-api-errors", "no", "--error-exitcode", "9", sys.executable,
           "-m", "pelib.sweep", "--sanitize", json.dumps([list(e) for e in entries_])]
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
    ncu = _tool("ncu")
    if not ncu:
        return {"ok": False, "error": "ncu not found"}
    metrics = list(NCU_METRICS)
    try:
        q = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=60)
        metrics += [m for m in NCU_OPTIONAL if m.split(".")[0] in q.stdout]
    except Exception:
        pass
    kernel = Stage(best[0]).build.kernel
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           "-k", f"regex:{kernel}|gemm|xmma|cutlass|nvjet", "-c", "2", "--metrics", ",".join(metrics),
           sys.executable, "-m", "pelib.sweep", "--ncu-target", json.dumps([best[0], best[1]])]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"did not finish in {timeout_s:.0f} s"}
    rows = _parse_ncu_csv(p.stdout, keep=metrics)
    if not rows:
        return {"ok": False, "error": f"exit {p.returncode}: " + " | ".join((p.stdout + p.stderr).splitlines()[-6:])[:600]}
    return {"ok": True, "kernels": rows, "wall_s": round(time.time() - t0, 1)}


def _parse_ncu_csv(text: str, keep=None) -> list[dict]:
    """--csv --page raw: a header row of metric names, a units row, then one row per kernel. With
    `keep`, only those metrics (raw pages also list every device attribute and launch setting)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 3:
        return []
    rd = list(csv.reader(io.StringIO("\n".join(lines))))
    head, units = rd[0], rd[1]
    out = []
    for row in rd[2:]:
        d = dict(zip(head, row))
        k = {"kernel": d.get("Kernel Name", "?")[:60]}
        for m, u in zip(head, units):
            if "__" in m and (keep is None or m in keep):
                k[m] = f"{d.get(m, '')} {u}".strip()
        out.append(k)
    return out


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

def _left(t_start: float, budget: float) -> float:
    return budget - (time.time() - t_start)


def _facts(s: Stage) -> dict:
    f = s.facts_row()
    warns = sorted(set(__import__("re").findall(r"C75\d\d", s.build.log)))
    return {"label": s.label, "stage": s.key, "defines": dict(s.defines), "registers": f["registers"],
            "spills": f["spills (B)"], "smem": f["smem (B)"], "tile": f["tile"], "ptxas_warnings": ",".join(warns),
            "wait_kind": s.build.exports.get("wait_kind"),
            **{k: v for k, v in f.items() if k.isupper()},
            **{op: s.build.histogram.get(op, 0) for op in ("UTMASTG", "STG", "STS")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--family", default=None, help="comma-separated families (default: every one this GPU runs)")
    ap.add_argument("--stage", action="append", default=None, help="only these stage files (family/name)")
    ap.add_argument("--variants", action="store_true", help="also each family's VARIANTS (and the AGAIN runs)")
    ap.add_argument("--no-compiled", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--no-sanitize", action="store_true", help="skip the compute-sanitizer memcheck step")
    ap.add_argument("--no-ncu", action="store_true", help="skip the Nsight Compute step")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--sanitize", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ncu-target", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        _worker(a.worker, a.data, a.start, a.iters)
        return 0
    if a.sanitize:
        return _sanitize([tuple(x) for x in json.loads(a.sanitize)])
    if a.ncu_target:
        key, defines = json.loads(a.ncu_target)
        _ncu_target(key, defines)
        return 0

    t_start = time.time()
    import torch   # the sweep runs on a GPU
    info = device.current()
    print(device.banner_text(info=info), flush=True)
    fams = [f for f in (a.family.split(",") if a.family else ("sm90", "fp8", "nvfp4"))
            if device.can_run(Stage(stages.family_stages(f)[0]).arch, info)]
    if not fams:
        device.require("sm_90a", info)   # raises UnsupportedGPU naming what is here
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
            save_full(next(Stage(k) for k, _ in built if Stage(k).family == f), data_dir)
        torch.cuda.empty_cache()
        print(f"[data] inputs + references in {time.time() - t0:.1f} s", flush=True)

        # 3. entries in workers (the kernels never run in this process)
        jobs = [{"kind": "variant", "stage": k, "defines": d, "label": label(k, d)} for k, d in built]
        jobs += [{"kind": "variant", "stage": k, "defines": d, "label": label(k, d) + AGAIN_TAG}
                 for k, d in (AGAIN if a.variants else []) if (k, d) in built]
        res = run_jobs(jobs, data_dir, a.iters, _left(t_start, a.budget) - 150)
        report["variants"] = res
        # 3b. faulting entries again with PE_WAIT_PRINTF on the shape that failed (their wait tags)
        faulted = [r for r in res if not r.get("ok") and any(x in (r.get("error") or "")
                                                              for x in ("KernelFault", "KernelHang"))]
        if faulted and _left(t_start, a.budget) > 150:
            dj = [{"kind": "debug", "stage": r["stage"], "defines": r["defines"],
                   "shape": r.get("checking") or _first_unchecked(r, "small"),
                   "label": r["label"] + " [PE_WAIT_PRINTF]"} for r in faulted[:4]]
            report["debug"] = run_jobs(dj, data_dir, a.iters, min(60.0, _left(t_start, a.budget) - 120), 30.0)

        # 4. baselines of the patch-embed problem (pelib.baselines: cuBLAS and Triton here, torch.compile
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
    print(f"\nwrote {path} ({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
