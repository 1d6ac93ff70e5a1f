"""One GPU call for the Hopper twin: build every stage and variant, verify, time, baselines, checks.

    PYTHONPATH=src python3 -m pelib.hopper_sweep [--quick] [--no-compiled] [--no-sanitize] [--no-ncu]
                                                 [--iters N] [--budget S] [--out DIR]

Order, most important first (each later step only runs while the time budget lasts):
 1. compiled facts of every variant (registers, spills, shared memory, QGMMA count, ptxas C75xx);
 2. the device copy bandwidth; the full SigLIP2 problem's inputs and torch reference (saved once);
 3. each variant in a worker process: verification on the check shapes of pelib.hopper.check_problem
    (small, k128, tail, medium), then on the full problem, each with a NaN-poisoned output, then
    timing (CUDA events, L2 flushed, twice for the spread). A kernel that traps or hangs ends only its
    worker; its output tail (device printf included) is kept with the result, and the variant is run
    again on the failing shape built with PE_WAIT_PRINTF, so the timed-out wait names its tag;
 3a. the baseline (AGAIN) timed once more after all variants, labelled " [again]": the drift of the run;
 4. the cuBLAS baselines; 5. clock64 TIMING runs of the fastest verified variant and of CLOCK_ALSO;
 6. compute-sanitizer memcheck (device memory errors only: --report-api-errors no) of every stage
    (and the fastest variant) on 'small' and 'tail', every "=========" line kept in the JSON;
 7. torch.compile(max-autotune) of the fused expression;
 8. Nsight Compute counters (DRAM and L2 bytes, throughputs; only the metrics asked for) of the fastest
    variant and of cuBLAS.
The last lines printed are the tables. JSON goes to $PE_GPU_RESULTS (a directory) or results/<date>-<device>/.
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

from . import hopper

# (stage key, defines), most informative first: the time budget may cut the tail of the list.
VARIANTS = [
    ("04", {"EPI_STREAM": 1}),          # the best of the previous sweep: the baseline of this one
    ("06", {}),
    ("07", {}),
    ("08", {}),
    ("09", {}),
    ("04", {}),
    ("05", {}),
    ("03", {}),
    ("02", {}),
    ("00", {}),
    ("01", {}),
    # 06-09: what each idea is worth, and its neighbours
    ("06", {"B_PERM_TMA": 0}),          # B permuted in shared memory instead of by the 5-D TMA view
    ("06", {"EPI_STREAM": 0}),
    ("06", {"TURN_EARLY": 1}),
    ("07", {"TURN_EARLY": 1}),
    ("07", {"PREFETCH_TILES": 1}),
    ("07", {"PREFETCH_TILES": 3}),
    ("07", {"BLOCK_N": 192, "NUM_STAGES": 10}),   # a deep A ring without the multicast
    ("07", {"B_PERM_TMA": 0}),
    ("08", {"TURN_EARLY": 1}),
    ("08", {"B_PERM_TMA": 0}),
    ("09", {"NUM_STAGES": 6}),          # the multicast with a shallow ring
    ("09", {"TURN_EARLY": 1}),
    ("09", {"PREFETCH_TILES": 0}),
    ("09", {"PREFETCH_TILES": 4}),
    ("09", {"BLOCK_N": 256, "NUM_STAGES": 4, "CLUSTER_N": 3}),   # 05's cluster with 06/07
    ("09", {"BLOCK_N": 128, "NUM_STAGES": 16, "CLUSTER_N": 2}),
    ("09", {"BLOCK_N": 128, "NUM_STAGES": 16, "CLUSTER_N": 3}),
    ("09", {"B_PERM_TMA": 0}),
    # 04: what its ideas were worth
    ("04", {"EPI_VEC": 0}),
    ("04", {"COMB_EARLY": 0}),
    ("04", {"PREFETCH_TILES": 0}),
    ("04", {"BLOCK_N": 192, "NUM_STAGES": 6}),
    ("05", {"PREFETCH_TILES": 0}),
    # 02 / 03: the multicast and the epilogue forms
    ("03", {"EPI_TMA_STORE": 0}),
    ("03", {"BLOCK_N": 192, "NUM_STAGES": 4}),
    # 01 with 1 and 3 consumer warpgroups (the chapter's widget)
    ("01", {"BLOCK_N": 128, "NUM_CONSUMERS": 1, "WG_M": 2}),
    ("01", {"BLOCK_N": 192, "NUM_CONSUMERS": 3, "NUM_STAGES": 3}),
]
# Timed again after every variant, labelled AGAIN_TAG: the drift of the GPU over the run.
AGAIN = [("04", {"EPI_STREAM": 1})]
AGAIN_TAG = " [again]"
QUICK = [("04", {"EPI_STREAM": 1}), ("06", {}), ("07", {}), ("08", {}), ("09", {}), ("04", {}), ("05", {}),
         ("03", {}), ("02", {}), ("00", {}), ("01", {})]
CHECK_PROBLEMS = hopper.CHECK_PROBLEMS
DEBUG_DEFINES = {"PE_WAIT_PRINTF": 1, "PE_WAIT_LIMIT": 1 << 20}  # a hang traps in about a second, with its tag


def label(key: str, defines: dict) -> str:
    s = hopper.stage(key).name
    return s + ("" if not defines else " " + ",".join(f"{k}={v}" for k, v in sorted(defines.items())))


def check_problem(name: str):
    """The verification shapes (pelib.hopper.check_problem)."""
    return hopper.check_problem(name)


# ---- worker: runs variants in its own process (a trap or hang ends only this process) ----------

class _Full:
    """The full problem's saved inputs and reference, loaded on first use."""

    def __init__(self, data_dir: str):
        self.data_dir, self.t, self.ref = data_dir, None, None

    def get(self):
        if self.t is None:
            import torch
            from . import problems
            self.problem = problems.patch_embed("siglip2")
            d = Path(self.data_dir)
            self.t = {k: torch.load(d / f"{k}.pt", mmap=True).cuda() for k in ("a", "b", "comb", "bias", "pos")}
            self.t["out"] = torch.empty(self.problem.m, self.problem.n, dtype=torch.bfloat16, device="cuda")
            self.ref = torch.load(d / "ref.pt", mmap=True).cuda()
        return self.problem, self.t, self.ref


def _worker(jobs_file: str, data_dir: str, start: int, iters: int) -> None:
    jobs = json.loads(Path(jobs_file).read_text())
    full = _Full(data_dir)
    small: dict = {}
    for i in range(start, len(jobs)):
        job = jobs[i]
        print(f"START {i}", flush=True)
        res = {"index": i, **job}
        try:
            if job["kind"] == "variant":
                _run_variant(job, small, full, iters, res)   # fills res as it goes: a fault keeps the checks
            elif job["kind"] == "debug":
                _run_debug(job, small, res)
            else:
                res.update(_run_clock(job, full))
        except Exception as e:  # a launch error or fault: report it; a fault leaves the context dead
            res.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000], trace=traceback.format_exc()[-2000:])
            print("JOB " + json.dumps(res, default=str), flush=True)
            if type(e).__name__ in ("KernelFault", "KernelHang"):
                sys.stdout.flush()
                sys.exit(3)
            continue
        print("JOB " + json.dumps(res, default=str), flush=True)


def _small(small: dict, name: str):
    if name not in small:
        p = check_problem(name)
        t = hopper.make_tensors(p, seed=7)
        small[name] = (p, t, hopper.reference(p, t))
    return small[name]


def _check(b, name, small, job, out) -> bool:
    from . import verify as _verify
    p, t, ref = _small(small, name)
    out["checking"] = name
    _verify.poison(t["out"])
    r = hopper.Runner(b, p, t)
    r()
    r.wait(20.0)
    rep = hopper.check(b, p, t, ref, label=f"{job['label']} on {name}")
    out["checks"][name] = {"ok": rep.ok, "n_bad": rep.n_bad, "n_nan": rep.n_nan, "max_abs": rep.max_abs,
                           "grid": r.cfg.grid, "report": str(rep) if not rep.ok else ""}
    return rep.ok


def _run_variant(job, small, full, iters, out: dict) -> dict:
    from . import verify as _verify
    key, defines = job["key"], job["defines"]
    b = hopper.build(key, defines)
    out["checks"] = {}
    for name in CHECK_PROBLEMS:
        _check(b, name, small, job, out)
    out.pop("checking", None)
    if not all(c["ok"] for c in out["checks"].values()):
        out["ok"] = False
        return out
    fp, t_full, ref_full = full.get()
    out["checking"] = "siglip2"
    _verify.poison(t_full["out"])
    r = hopper.Runner(b, fp, t_full)
    r()
    r.wait(30.0)
    rep = hopper.check(b, fp, t_full, ref_full, label=f"{job['label']} on siglip2")
    out.pop("checking", None)
    out.update(ok=rep.ok, n_bad=rep.n_bad, n_nan=rep.n_nan, max_abs=rep.max_abs, max_rel=rep.max_rel,
               atol=rep.atol, rtol=rep.rtol, report=str(rep),
               launch={**r.cfg.as_dict(), "active_clusters": r.active_clusters})
    if rep.ok:
        out.update(hopper.time_runner(r, iters=iters))
        out["repeat_median_ms"] = hopper.time_runner(r, iters=iters)["median_ms"]  # the spread between runs
    return out


def _run_debug(job, small, out: dict) -> dict:
    """The failing shape again, built with PE_WAIT_PRINTF: a timed-out wait prints its tag."""
    b = hopper.build(job["key"], {**job["defines"], **DEBUG_DEFINES})
    out["checks"] = {}
    ok = _check(b, job["shape"], small, job, out)
    out["ok"] = ok
    return out


def _run_clock(job, full) -> dict:
    """A TIMING build of the variant on the full problem; per-warp phase statistics (cycles)."""
    fp, t_full, _ = full.get()
    tm = hopper.clock_breakdown(job["key"], fp, job["defines"], tensors=t_full)
    summ = tm.summary()
    return {"ok": True, "unit": tm.layout.unit, "table": tm.table(),
            "summary": {ph: {"avg": row["avg"], "spread": row["spread"],
                             "warps": {str(w): s["avg"] for w, s in row["warps"].items()}}
                        for ph, row in summ.items()}}


def run_jobs(jobs: list[dict], data_dir: str, iters: int, budget_s: float, job_timeout_s: float = 90.0,
             module: str = "pelib.hopper_sweep") -> list[dict]:
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
        where = r.get("checking") or next((k for k in CHECK_PROBLEMS if k not in r.get("checks", {})), "?")
        return f"KernelFault on {where}: " + ("trap (bounded wait or range check)" if "trap" in err.lower()
                                              or "LAUNCH_FAILED" in err else err.split(":")[-1][:80])
    return err.replace("\n", " ")[:150]


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


# The variants whose clock64 phases the sweep records beside the fastest one's.
CLOCK_ALSO = [("04", {"EPI_STREAM": 1}), ("06", {}), ("07", {}), ("08", {}), ("09", {})]


def clock_jobs(best: dict, timed: list[dict]) -> list[dict]:
    """The clock jobs: the fastest verified variant first, then each of CLOCK_ALSO that verified."""
    out = [{"kind": "clock", "key": best["key"], "defines": best["defines"], "label": best["label"]}]
    ok = {(r["key"], json.dumps(r["defines"], sort_keys=True)) for r in timed}
    for k, d in CLOCK_ALSO:
        if (k, d) != (best["key"], best["defines"]) and (k, json.dumps(d, sort_keys=True)) in ok:
            out.append({"kind": "clock", "key": k, "defines": d, "label": label(k, d)})
    return out


# ---- memcheck and Nsight Compute (each in its own process) --------------------------------------

def _tool(name: str) -> str | None:
    for cand in (shutil.which(name), f"/usr/local/cuda/bin/{name}", f"/usr/local/cuda/compute-sanitizer/{name}"):
        if cand and Path(cand).exists():
            return cand
    return None


def _sanitize(keys: list[str] | None = None, extra: list | None = None) -> int:
    """Each stage once on 'small' and 'tail', verified: the body to run under
    `compute-sanitizer --tool memcheck` (no timing; the sanitizer slows kernels by orders of magnitude)."""
    bad = 0
    variants = [(s.key, {}) for s in hopper.available() if not keys or s.key in keys] + list(extra or [])
    for key, defines in variants:
        for name in ("small", "tail"):
            p = check_problem(name)
            try:
                rep = hopper.verify(key, p, defines, seed=1)
                ok, what = rep.ok, f"max abs {rep.max_abs:.3g}, bad {rep.n_bad}, NaN {rep.n_nan}"
            except Exception as e:
                ok, what = False, f"{type(e).__name__}: {e}"[:300]
            bad += not ok
            print(f"[sanitize] {label(key, defines)} on {name}: {'ok' if ok else 'FAIL'} ({what})", flush=True)
            if not ok and "KernelFault" in what:
                print("[sanitize] the CUDA context is dead: the remaining stages are not checked", flush=True)
                return 1
    return 1 if bad else 0


def run_memcheck(best: tuple | None, timeout_s: float) -> dict:
    """compute-sanitizer --tool memcheck over _sanitize; its per-stage lines and error summary."""
    cs = _tool("compute-sanitizer")
    if not cs:
        return {"ok": False, "error": "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"}
    # --report-api-errors no: only device memory errors count. pelib.launch polls for completion with
    # cuEventQuery, whose CUDA_ERROR_NOT_READY answers the default (explicit) mode reports as API errors
    # (the 2026-11-23 sweep: "ERROR SUMMARY: 48 errors" with every checked run correct).
    cmd = [cs, "--tool", "memcheck", "--report-api-errors", "no", "--error-exitcode", "9", sys.executable,
           "-m", "pelib.hopper_sweep", "--sanitize"]
    if best and best[1]:
        cmd += ["--extra", json.dumps([list(best)])]
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
    """Body profiled by Nsight Compute: our kernel once, then cuBLAS's fast-accumulation GEMM once."""
    import torch
    from . import hopper_bench, problems
    prob = problems.patch_embed("siglip2")
    t = hopper.make_tensors(prob, seed=0)
    r = hopper.Runner(hopper.build(key, defines), prob, t)
    r()
    r.wait(30.0)
    hopper_bench.scaled_mm_fns(prob, t)["cublas_gemm_fastacc"]()
    torch.cuda.synchronize()


def run_ncu(best: tuple, timeout_s: float) -> dict:
    """Nsight Compute counters of our best kernel and cuBLAS (clocks left as they are)."""
    ncu = _tool("ncu")
    if not ncu:
        return {"ok": False, "error": "ncu not found"}
    metrics = list(NCU_METRICS)
    try:
        q = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=60)
        have = q.stdout
        metrics += [m for m in NCU_OPTIONAL if m.split(".")[0] in have]
    except Exception:
        pass
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           "-k", "regex:patch_embed_sm90|gemm|xmma|cutlass|nvjet", "-c", "2", "--metrics", ",".join(metrics),
           sys.executable, "-m", "pelib.hopper_sweep", "--ncu-target", json.dumps([best[0], best[1]])]
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
        vals = ", ".join(f"{short[m]} {k[m]}" for m in short if m in k)
        lines.append(f"  {k['kernel'][:40]}: {vals}")
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------------

def _left(t_start: float, budget: float) -> float:
    return budget - (time.time() - t_start)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.hopper_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the committed stages")
    ap.add_argument("--no-compiled", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--no-sanitize", action="store_true", help="skip the compute-sanitizer memcheck step")
    ap.add_argument("--no-ncu", action="store_true", help="skip the Nsight Compute step")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--sanitize", action="store_true",
                    help="only run each stage once on the small shapes (run under compute-sanitizer)")
    ap.add_argument("--extra", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ncu-target", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        _worker(a.worker, a.data, a.start, a.iters)
        return 0
    if a.sanitize:
        extra = [tuple(x) for x in json.loads(a.extra)] if a.extra else None
        return _sanitize(extra=extra)
    if a.ncu_target:
        key, defines = json.loads(a.ncu_target)
        _ncu_target(key, defines)
        return 0

    t_start = time.time()
    import torch
    from . import bench, device, hopper_bench, problems
    info = device.current()
    print(device.banner_text(hopper.ARCH, info), flush=True)
    device.require(hopper.ARCH, info)
    env = bench.environment(info)
    variants = QUICK if a.quick else VARIANTS
    variants = [(k, d) for k, d in variants if (hopper.STAGES.get(k) and k in {s.key for s in hopper.available()})]

    # 1. compiled facts (this also fills the build cache the workers use)
    facts = []
    for k, d in variants:
        try:
            f = hopper.stage_facts(k, d)
            f["label"] = label(k, d)
            facts.append(f)
            print(f"[build] {f['label']}: {f['registers']} regs, {f['spills']} B spills, smem {f['smem']} B, "
                  f"tile {f['tile']}, QGMMA {f['QGMMA']}{' ' + f['ptxas_warnings'] if f['ptxas_warnings'] else ''}",
                  flush=True)
        except Exception as e:
            facts.append({"label": label(k, d), "error": f"{type(e).__name__}: {e}"[:1500]})
            print(f"[build] {label(k, d)}: FAILED {e}", flush=True)
    built = [(k, d) for (k, d), f in zip(variants, facts) if "error" not in f]

    # 2. copy bandwidth, full-problem inputs and reference (saved for the workers)
    copy = hopper_bench.copy_bandwidth_gb_s()
    print(f"[copy] device-to-device {copy['gbps']:.0f} GB/s (read + write)", flush=True)
    full = problems.patch_embed("siglip2")
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    data_dir = tempfile.mkdtemp(prefix="pelib-hopper-", dir=shm)
    report = {"env": env, "evidence": f"measured ({info.name}, {env['date'][:10]})", "copy": copy,
              "facts": facts, "variants": [], "debug": [], "baselines": {}, "clock": None,
              "memcheck": None, "ncu": None}
    try:
        t0 = time.time()
        t = hopper.make_tensors(full, seed=0)
        ref = hopper.reference(full, t)
        torch.cuda.synchronize()
        for k in ("a", "b", "comb", "bias", "pos"):
            torch.save(t[k].cpu(), Path(data_dir) / f"{k}.pt")
        torch.save(ref.cpu(), Path(data_dir) / "ref.pt")
        print(f"[data] inputs + reference in {time.time() - t0:.1f} s", flush=True)

        # 3. variants in workers (the kernels never run in this process)
        jobs = [{"kind": "variant", "key": k, "defines": d, "label": label(k, d)} for k, d in built]
        jobs += [{"kind": "variant", "key": k, "defines": d, "label": label(k, d) + AGAIN_TAG}
                 for k, d in (AGAIN if not a.quick else []) if (k, d) in built]
        results = run_jobs(jobs, data_dir, a.iters, _left(t_start, a.budget) - 150)
        report["variants"] = results
        # 3b. faulting variants again with PE_WAIT_PRINTF on the shape that failed (their wait tags)
        faulted = [r for r in results if not r.get("ok") and any(x in (r.get("error") or "")
                                                                  for x in ("KernelFault", "KernelHang"))]
        if faulted and _left(t_start, a.budget) > 150:
            dj = []
            for r in faulted[:4]:
                shape = r.get("checking") or next((n for n in CHECK_PROBLEMS if n not in r.get("checks", {})), "small")
                dj.append({"kind": "debug", "key": r["key"], "defines": r["defines"], "shape": shape,
                           "label": r["label"] + f" [PE_WAIT_PRINTF, {shape}]"})
            report["debug"] = run_jobs(dj, data_dir, a.iters, min(60.0, _left(t_start, a.budget) - 120), 30.0)

        # 4. baselines (cuBLAS here; torch.compile in a subprocess at the end)
        try:
            report["baselines"] = hopper_bench.time_baselines(full, t, ref, iters=a.iters)
        except Exception as e:
            report["baselines"] = {"error": f"{type(e).__name__}: {e}"}
        del ref, t
        torch.cuda.empty_cache()
        timed = [r for r in results if r.get("ok") and "median_ms" in r]
        best = min(timed, key=lambda r: r["median_ms"]) if timed else None
        # 5. clock64 breakdown of the fastest verified variant, then of the baseline and of each newer
        #    stage's default, for a before/after in one run (CLOCK_ALSO)
        if best and _left(t_start, a.budget) > 100:
            cj = clock_jobs(best, timed)
            rs = run_jobs(cj, data_dir, a.iters, min(25.0 * len(cj), _left(t_start, a.budget) - 90))
            report["clock"], report["clocks"] = rs[0], rs[1:]
        # 6. memcheck of every stage (and the best variant) on the small shapes
        if not a.no_sanitize and _left(t_start, a.budget) > 120:
            lim = min(120.0, _left(t_start, a.budget) - 100)
            print(f"[memcheck] compute-sanitizer (limit {lim:.0f} s)", flush=True)
            report["memcheck"] = run_memcheck((best["key"], best["defines"]) if best else None, lim)
        # 7. torch.compile(max-autotune) of the fused expression
        left = _left(t_start, a.budget) - 50
        if not a.no_compiled and left > 45:
            limit = int(min(left, hopper_bench.COMPILE_TIMEOUT_S))
            print(f"[compile] torch.compile max-autotune (limit {limit} s)", flush=True)
            report["baselines"]["compile_fused"] = hopper_bench.time_compiled(full.name, iters=a.iters,
                                                                              timeout_s=limit, data_dir=data_dir)
        elif not a.no_compiled:
            report["baselines"]["compile_fused"] = {"error": f"skipped: {max(left, 0):.0f} s of the time budget left"}
        # 8. Nsight Compute counters of the best variant and cuBLAS, with what is left
        if not a.no_ncu and best and _left(t_start, a.budget) > 45:
            lim = min(150.0, _left(t_start, a.budget) - 10)
            print(f"[ncu] Nsight Compute (limit {lim:.0f} s)", flush=True)
            report["ncu"] = run_ncu((best["key"], best["defines"]), lim)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    # 9. tables (printed last: the tail of the output is what is read)
    from . import results
    out_dir = Path(a.out or os.environ.get("PE_GPU_RESULTS") or results.run_dir(env))
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = "".join(c if c.isalnum() else "-" for c in info.name).strip("-").lower()
    path = out_dir / f"hopper-sweep-{env['date'][:19].replace(':', '')}-{dev}.json"
    best = min((r for r in report["variants"] if "median_ms" in r), key=lambda r: r["median_ms"], default=None)
    if best:
        rows = hopper_bench.compare_rows({**best, "stage": best["label"]}, report["baselines"], copy["gbps"], full)
        report["comparison"] = rows
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")

    print()
    if report.get("clock") and report["clock"].get("summary"):
        print("clock64 phases of " + report["clock"]["label"] + " (cycles per tile, averaged per warp; "
              "full per-warp table in the JSON)")
        for row in hopper.clock_summary_rows(report["clock"]["summary"]):
            print(f"  {row['phase']:<14}warps {row['warps']:<6}avg {row['avg (cycles)']:>9}  warp avgs "
                  f"{row['min warp avg']:>9} .. {row['max warp avg']:<9} {row['what']}")
    elif report.get("clock"):
        print(f"clock64: {report['clock'].get('error', 'no records')[:300]}")
    for cl in report.get("clocks") or []:
        if cl.get("summary"):
            avg = {row["phase"]: row["avg (cycles)"] for row in hopper.clock_summary_rows(cl["summary"])}
            print(f"  clock64 {cl['label'][:44]:<44} " + " ".join(f"{ph} {avg[ph]}" for ph in
                  ("tma_wait", "kloop", "epi_wait", "epi_phase1", "tile") if ph in avg))
    for r in report.get("debug", []):
        print(f"[debug] {r['label']}: " + (" / ".join(wait_tags(r)) or fail_reason(r) or "passed"))
    if report.get("ncu"):
        print(format_ncu(report["ncu"]))
    mc = report.get("memcheck")
    if mc:
        print("memcheck: " + ("clean" if mc.get("ok") else "PROBLEMS") + "; "
              + "; ".join(mc.get("summary", [])[:2] or [mc.get("error", "")]))
        for ln in (mc.get("lines", []) if not mc.get("ok") else []) + mc.get("errors", [])[:6]:
            print("  " + ln[:200])
    print(f"\n{report['evidence']}; copy {copy['gbps']:.0f} GB/s; floor {full.min_bytes / copy['gbps'] / 1e6:.3f} ms")
    print(f"{'variant':<60}{'regs':>5}{'smem':>6}{'check':>6}{'ms':>8}{'rep':>8}{'TFLOPS':>7}{'floor':>6}")
    fact_of = {f["label"]: f for f in facts}
    for r in report["variants"]:
        f = fact_of.get(r["label"].replace(AGAIN_TAG, ""), {})
        ms = r.get("median_ms")
        d = hopper.derived(full, ms, copy["gbps"]) if ms else {}
        if ms:
            print(f"{r['label'][:60]:<60}{f.get('registers', '-'):>5}{f.get('smem', 0) // 1024:>5}K{'ok':>6}"
                  f"{ms:>8.4f}{r['repeat_median_ms']:>8.4f}{d['tflops']:>7.0f}{100 * d['floor_frac']:>5.0f}%")
        else:
            print(f"{r['label'][:60]:<60}{f.get('registers', '-'):>5}{f.get('smem', 0) // 1024:>5}K{'FAIL':>6}  "
                  f"{fail_reason(r)[:90]}")
    if best:
        print()
        print(hopper_bench.format_rows(report["comparison"]))
    print(f"\nwrote {path} ({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
