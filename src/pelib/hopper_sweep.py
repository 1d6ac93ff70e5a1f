"""One GPU call for the Hopper twin: build every stage and variant, verify, time, run the baselines.

    PYTHONPATH=src python3 -m pelib.hopper_sweep [--quick] [--no-compiled] [--iters N] [--out DIR]
    PYTHONPATH=src compute-sanitizer --tool memcheck python3 -m pelib.hopper_sweep --sanitize

Order: compiled facts of every variant; the device copy bandwidth; the full SigLIP2 problem's inputs
and torch reference (saved once to shared memory); then a worker process runs each variant:
verification on three small shapes (one K step; an M tail; several tiles per persistent CTA), then
on the full problem (NaN-poisoned output), then timing (CUDA events, L2 flushed). A kernel that traps
or hangs kills only its worker; the next worker resumes with the next variant. Then the cuBLAS
baselines, torch.compile(max-autotune) in a subprocess with a time limit, and a clock64 TIMING run
of the fastest verified variant. The last lines printed are the comparison table. JSON goes to
$PE_GPU_RESULTS (a directory) or bench/results/.
"""
from __future__ import annotations

import argparse
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

# (stage key, defines): the stages as committed, then the sweeps measurement asks for.
VARIANTS = [
    ("00", {}),
    ("01", {}),
    ("01", {"NUM_STAGES": 3}),
    ("02", {}),
    ("03", {}),
    ("03", {"EPI_TMA_STORE": 0}),
    ("03", {"NUM_STAGES": 2}),
    ("03", {"BLOCK_N": 192, "NUM_STAGES": 4}),
    ("03", {"BLOCK_N": 128, "WG_M": 2}),
    ("03", {"BLOCK_N": 128, "NUM_STAGES": 6}),
    ("03", {"NUM_CONSUMERS": 3, "BLOCK_N": 192, "NUM_STAGES": 3}),
]
QUICK = [("00", {}), ("01", {}), ("02", {}), ("03", {})]
CHECK_PROBLEMS = ("small", "tail", "medium")


def label(key: str, defines: dict) -> str:
    s = hopper.stage(key).name
    return s + ("" if not defines else " " + ",".join(f"{k}={v}" for k, v in sorted(defines.items())))


def check_problem(name: str):
    """The small verification shapes: pelib.problems' 'small' and 'medium', and an M tail (1000 rows)."""
    from . import problems
    if name == "tail":  # 1000 rows: not a multiple of any block_m, so the last tile is partial
        return problems.PatchEmbed(name="tail", m=1000, n=768, k=768, positions=196,
                                   tile={"m": 8, "n": 64, "k": 128})
    return problems.patch_embed(name)


# ---- worker: runs variants in its own process (a trap or hang ends only this process) ----------

def _worker(jobs_file: str, data_dir: str, start: int, iters: int) -> None:
    import torch
    from . import problems
    jobs = json.loads(Path(jobs_file).read_text())
    full = problems.patch_embed("siglip2")
    t_full = {k: torch.load(Path(data_dir) / f"{k}.pt", mmap=True).cuda()
              for k in ("a", "b", "comb", "bias", "pos")}
    t_full["out"] = torch.empty(full.m, full.n, dtype=torch.bfloat16, device="cuda")
    ref_full = torch.load(Path(data_dir) / "ref.pt", mmap=True).cuda()
    small = {}
    for name in CHECK_PROBLEMS:
        p = check_problem(name)
        t = hopper.make_tensors(p, seed=7)
        small[name] = (p, t, hopper.reference(p, t))
    for i in range(start, len(jobs)):
        job = jobs[i]
        print(f"START {i}", flush=True)
        res = {"index": i, **job}
        try:
            if job["kind"] == "variant":
                res.update(_run_variant(job, small, full, t_full, ref_full, iters))
            else:
                res.update(_run_clock(job, full, t_full))
        except Exception as e:  # a launch error or fault: report it; a fault leaves the context dead
            res.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000], trace=traceback.format_exc()[-2000:])
            print("JOB " + json.dumps(res, default=str), flush=True)
            if type(e).__name__ in ("KernelFault", "KernelHang"):
                sys.exit(3)
            continue
        print("JOB " + json.dumps(res, default=str), flush=True)


def _run_variant(job, small, full, t_full, ref_full, iters) -> dict:
    from . import verify as _verify
    key, defines = job["key"], job["defines"]
    b = hopper.build(key, defines)
    out = {"checks": {}}
    for name, (p, t, ref) in small.items():
        _verify.poison(t["out"])
        r = hopper.Runner(b, p, t)
        r()
        r.wait(20.0)
        rep = hopper.check(b, p, t, ref, label=f"{job['label']} on {name}")
        out["checks"][name] = {"ok": rep.ok, "n_bad": rep.n_bad, "n_nan": rep.n_nan, "max_abs": rep.max_abs,
                               "report": str(rep) if not rep.ok else ""}
    if not all(c["ok"] for c in out["checks"].values()):
        out["ok"] = False
        return out
    _verify.poison(t_full["out"])
    r = hopper.Runner(b, full, t_full)
    r()
    r.wait(30.0)
    rep = hopper.check(b, full, t_full, ref_full, label=f"{job['label']} on siglip2")
    out.update(ok=rep.ok, n_bad=rep.n_bad, n_nan=rep.n_nan, max_abs=rep.max_abs, max_rel=rep.max_rel,
               atol=rep.atol, rtol=rep.rtol, report=str(rep), launch={**r.cfg.as_dict(), "active_clusters": r.active_clusters})
    if rep.ok:
        out.update(hopper.time_runner(r, iters=iters))
        out["repeat_median_ms"] = hopper.time_runner(r, iters=iters)["median_ms"]  # the spread between runs
    return out


def _run_clock(job, full, t_full) -> dict:
    """A TIMING build of the variant on the full problem; per-warp phase statistics (cycles)."""
    tm = hopper.clock_breakdown(job["key"], full, job["defines"], tensors=t_full)
    summ = tm.summary()
    return {"ok": True, "unit": tm.layout.unit, "table": tm.table(),
            "summary": {ph: {"avg": row["avg"], "spread": row["spread"],
                             "warps": {str(w): s["avg"] for w, s in row["warps"].items()}}
                        for ph, row in summ.items()}}


def run_jobs(jobs: list[dict], data_dir: str, iters: int, budget_s: float, job_timeout_s: float = 150.0) -> list[dict]:
    """Run jobs in worker processes, restarting after a crash or a stuck job; one result per job."""
    import queue
    import threading
    jf = Path(data_dir) / "jobs.json"
    jf.write_text(json.dumps(jobs))
    results: dict[int, dict] = {}
    start, t0 = 0, time.time()
    while start < len(jobs) and budget_s - (time.time() - t0) > 5:
        cmd = [sys.executable, "-m", "pelib.hopper_sweep", "--worker", str(jf), "--data", data_dir,
               "--start", str(start), "--iters", str(iters)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in p.stdout] + [lines.put(None)], daemon=True).start()
        current, tail, since = None, [], time.time()
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                line = ""
            if line is None:
                break
            line = line.rstrip("\n")
            if line.startswith("START "):
                current, since = int(line.split()[1]), time.time()
            elif line.startswith("JOB "):
                r = json.loads(line[4:])
                results[r["index"]] = r
                _print_job(r)
                current = None
            elif line:
                tail = (tail + [line])[-30:]
            stuck = current is not None and time.time() - since > job_timeout_s
            if stuck or time.time() - t0 > budget_s:
                tail.append(f"killed after {time.time() - since:.0f} s" if stuck else "killed: time budget")
                p.kill()
                break
        p.wait()
        if current is None:
            done_here = [k for k in results if k >= start]
            if p.returncode == 0:
                break
            if done_here:            # a job reported its own fault and the worker exited: go on after it
                start = max(done_here) + 1
                continue
            current = start          # the worker died before it started a job (import, data): skip one
        results[current] = {"index": current, **jobs[current], "ok": False,
                            "error": f"worker exited with {p.returncode}: " + " | ".join(tail[-8:])}
        _print_job(results[current])
        start = current + 1
    return [results.get(i, {"index": i, **j, "ok": False, "error": "not run (time budget)"})
            for i, j in enumerate(jobs)]


def _print_job(r: dict) -> None:
    if r.get("kind") == "clock":
        print(f"[clock] {r['label']}: " + ("ok" if r.get("ok") else r.get("error", "failed")), flush=True)
        return
    checks = " ".join(f"{k}:{'ok' if v['ok'] else 'FAIL'}" for k, v in r.get("checks", {}).items())
    if "median_ms" in r:
        what = f"{r['median_ms']:.4f} ms (repeat {r['repeat_median_ms']:.4f})"
    else:
        what = r.get("error", "") or (r.get("report", "") or "").replace("\n", " | ")[:600]
        for v in r.get("checks", {}).values():
            if v.get("report"):
                what += " || " + v["report"].replace("\n", " | ")[:600]
    print(f"[{'PASS' if r.get('ok') else 'FAIL'}] {r['label']}  {checks}  {what}", flush=True)


def _sanitize() -> int:
    """Each committed stage once on 'small' and 'tail', verified: the body to run under
    `compute-sanitizer --tool memcheck` (no timing; the sanitizer slows kernels by orders of magnitude)."""
    bad = 0
    for st in hopper.available():
        for name in ("small", "tail"):
            p = check_problem(name)
            try:
                rep = hopper.verify(st.key, p, seed=1)
                ok, what = rep.ok, f"max abs {rep.max_abs:.3g}, bad {rep.n_bad}, NaN {rep.n_nan}"
            except Exception as e:
                ok, what = False, f"{type(e).__name__}: {e}"[:500]
            bad += not ok
            print(f"[sanitize] {st.name} on {name}: {'ok' if ok else 'FAIL'} ({what})", flush=True)
    return 1 if bad else 0


# ---- main ---------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.hopper_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the four committed stages")
    ap.add_argument("--no-compiled", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--sanitize", action="store_true",
                    help="only run each stage once on the small shapes (run under compute-sanitizer)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        _worker(a.worker, a.data, a.start, a.iters)
        return 0
    if a.sanitize:
        return _sanitize()

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
                  f"tile {f['tile']}, QGMMA {f['QGMMA']}", flush=True)
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
              "facts": facts, "variants": [], "baselines": {}, "clock": None}
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
        budget = a.budget - (time.time() - t_start) - 120  # keep time for baselines and the clock run
        results = run_jobs(jobs, data_dir, a.iters, budget)
        report["variants"] = results

        # 4. baselines (cuBLAS here; torch.compile in a subprocess)
        try:
            report["baselines"] = hopper_bench.time_baselines(full, t, ref, iters=a.iters)
        except Exception as e:
            report["baselines"] = {"error": f"{type(e).__name__}: {e}"}
        del ref, t
        torch.cuda.empty_cache()
        # 5. clock64 breakdown of the fastest verified variant
        timed = [r for r in results if r.get("ok") and "median_ms" in r]
        best = min(timed, key=lambda r: r["median_ms"]) if timed else None
        if best and a.budget - (time.time() - t_start) > 40:
            cl = run_jobs([{"kind": "clock", "key": best["key"], "defines": best["defines"],
                            "label": best["label"]}], data_dir, a.iters, 90)[0]
            report["clock"] = cl

        # 6. torch.compile(max-autotune) with what is left of the budget
        left = a.budget - (time.time() - t_start) - 15
        if not a.no_compiled and left > 60:
            limit = int(min(left, hopper_bench.COMPILE_TIMEOUT_S))
            print(f"[compile] torch.compile max-autotune (limit {limit} s)", flush=True)
            report["baselines"]["compile_fused"] = hopper_bench.time_compiled(full.name, iters=a.iters,
                                                                              timeout_s=limit, data_dir=data_dir)
        elif not a.no_compiled:
            report["baselines"]["compile_fused"] = {"error": "skipped: time budget"}
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    # 7. tables (printed last: the tail of the output is what is read)
    out_dir = Path(a.out or os.environ.get("PE_GPU_RESULTS") or hopper_bench.bench.RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = "".join(c if c.isalnum() else "-" for c in info.name).strip("-").lower()
    path = out_dir / f"hopper-sweep-{env['date'][:19].replace(':', '')}-{dev}.json"
    best = min((r for r in report["variants"] if "median_ms" in r), key=lambda r: r["median_ms"], default=None)
    if best:
        rows = hopper_bench.compare_rows({**best, "stage": best["label"]}, report["baselines"], copy["gbps"], full)
        report["comparison"] = rows
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")

    if report.get("clock") and report["clock"].get("table"):
        print("\nclock64 breakdown of " + report["clock"]["label"] + " (cycles per tile; warp 0 = producer)")
        print(report["clock"]["table"])
    print(f"\n{report['evidence']}; copy {copy['gbps']:.0f} GB/s; floor {full.min_bytes / copy['gbps'] / 1e6:.3f} ms")
    print(f"{'variant':<52}{'regs':>5}{'smem':>7}{'check':>7}{'ms':>9}{'TFLOPS':>8}{'floor':>7}")
    fact_of = {f["label"]: f for f in facts}
    for r in report["variants"]:
        f = fact_of.get(r["label"], {})
        ms = r.get("median_ms")
        d = hopper.derived(full, ms, copy["gbps"]) if ms else {}
        ms_s = f"{ms:.4f}" if ms else "-"
        tf_s = f"{d['tflops']:.0f}" if ms else "-"
        fl_s = f"{100 * d['floor_frac']:.0f}%" if ms else "-"
        ok_s = "ok" if r.get("ok") else "FAIL"
        print(f"{r['label']:<52}{f.get('registers', '-'):>5}{f.get('smem', 0) // 1024:>6}K"
              f"{ok_s:>7}{ms_s:>9}{tf_s:>8}{fl_s:>7}")
    if best:
        print()
        print(hopper_bench.format_rows(report["comparison"]))
    print(f"\nwrote {path} ({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
