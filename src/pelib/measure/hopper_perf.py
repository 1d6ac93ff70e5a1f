"""The Hopper twin against its floors, in one GPU call: profile, stages, baselines, precision, floors.

    PYTHONPATH=src python3 -m pelib.measure.hopper_perf [--budget S] [--out DIR] [--stages 06,10,11]
                                              [--no-ncu] [--no-compile] [--quick]

One process on one H100 or H200, most important first (each later step runs while the budget lasts):
 1. device, driver, clocks, power limit; the device-to-device copy bandwidth (the memory floor's);
 2. the full problem's inputs and torch reference, saved for the worker processes;
 3. VARIANTS (stage, defines) in workers (a trap or hang ends only its worker): verified on the check
    shapes of pelib.kinds.sm90 (CHECK_PROBLEMS) and the full problem (NaN-poisoned outputs), timed twice,
    and the precision of the full output (pelib.measure.baselines.precision);
 4. the speed-of-light probes of 06 (src/kernels/sm90/probes/sol_probe_06.cu): no A, no stores, both;
 5. clock64 records of every tile (TIMING, PE_TIMING_TILES = PROFILE_TILES) of PROFILE_STAGES: phase
    averages over the whole run and over its first 16 tiles, cycles per tile of each CTA, and the SM
    clock the kernel ran at (its cycles over its measured time);
 6. SM clock, power and clock-limit reasons from nvidia-smi while our kernel and cuBLAS run in a loop;
 7. every baseline (pelib.measure.baselines.rows), with precision;
 8. Nsight Compute (--clock-control none): warp-state stall reasons, pipe utilization, memory
    throughput and per-instruction stall samples of our best stage and cuBLAS.
Timed builds use PE_UNBOUNDED_WAIT (the plain spin a production kernel ships); the default bounded
build of the best stage is timed beside it, and every row names its wait build. JSON and the logs go
to --out (default results/<date>-<device>/), the tables are printed last.
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
from pathlib import Path

from . import baselines, jobs, sweep
from .. import bench, device, problems, results
from .. import timing as _timing
from ..stage import Stage, Timed, find

UNBOUNDED = {"PE_UNBOUNDED_WAIT": 1}
# (stage, defines), most important first: the budget may cut the tail.
VARIANTS = [
    ("06", UNBOUNDED),
    ("06", {}),                                              # the default bounded-wait build
    ("10", UNBOUNDED),
    ("11", UNBOUNDED),
    ("06", {**UNBOUNDED, "PREFETCH_TILES": 3}),
    ("11", {**UNBOUNDED, "PREFETCH_TILES": 3}),
    ("06", {**UNBOUNDED, "BLOCK_N": 192, "NUM_STAGES": 10}),
    ("10", {}),
    ("10", {**UNBOUNDED, "PREFETCH_TILES": 1}),
]
AGAIN = [("06", UNBOUNDED)]
PROBE = "sm90/probes/sol_probe_06.cu"
PROBES = [{"PROBE_NO_STORE": 1}, {"PROBE_NO_A": 1}, {"PROBE_NO_A": 1, "PROBE_NO_STORE": 1}]
PROFILE_STAGES = [("06", UNBOUNDED)]
PROFILE_TILES = 336                 # >= the tiles of one CTA on 132 SMs (330): every tile recorded
WGMMA_CYCLES_PER_TILE = 64 * 256 * 768 * 2 // 8192   # 3,072: one 64 x 256 x 768 tile at the FP8 rate
FP8_FLOPS_PER_SM_CLK = 8192        # dense FP8 per SM per clock: H100 SXM5 1,979 TFLOPS at 1,830 MHz boost
                                   # on 132 SMs (NVIDIA H100 Tensor Core GPU datasheet / whitepaper)


def stage(key: str, defines: dict | None = None) -> Stage:
    """An sm90 stage by its number ('06', '03a') with defines."""
    return find("sm90", key, defines)


def label(key: str, defines: dict) -> str:
    return stage(key, defines).label


def _full(ctx: jobs.Context):
    """(problem, tensors, reference) of the full problem, saved by main() for the workers."""
    return ctx.data.full(stage("06"))


def wait_build(defines: dict) -> str:
    return "unbounded (PE_UNBOUNDED_WAIT)" if defines.get("PE_UNBOUNDED_WAIT") else "bounded, call-free (default)"


# ---- worker ----------------------------------------------------------------------------------------

def _run_probe(job, ctx: jobs.Context, res: dict) -> dict:
    """Time a probe build on the full problem (its output is not checked: it is wrong by design)."""
    fp, t, _ = _full(ctx)
    s = Stage(PROBE, job["defines"])
    st = s.run(fp, inputs=t, verify=False, time=Timed(iters=ctx.iters))
    st["repeat_median_ms"] = s.run(fp, inputs=t, verify=False, time=Timed(iters=ctx.iters))["median_ms"]
    return {k: st[k] for k in ("median_ms", "p10_ms", "p90_ms", "n", "tflops", "gbps", "repeat_median_ms") if k in st}


def clock_stats(tm, tiles_per_tile_cycles: int = WGMMA_CYCLES_PER_TILE) -> dict:
    """From a whole-run TIMING record (pelib.timing.Timing) of a ping-pong stage: per phase, the
    consumer warps' average over all tiles and over the first 16 and the rest; per CTA, the cycles
    from its first tile's start to its last tile's end over its tiles; the share of those cycles the
    tensor cores would need at the FP8 rate (WGMMA_CYCLES_PER_TILE per tile)."""
    import numpy as np
    ph = {name: p for p, name in _timing.phases().items()}
    d = tm.durations                               # [cta, warp, tile, phase]
    cons = slice(4, 12)
    out = {"phases": {}}
    for name in ("tma_wait", "kloop", "epi_wait", "epi_phase1", "tile"):
        v = d[:, cons, :, ph[name]]
        if not np.isfinite(v).any():
            continue
        first, rest = v[:, :, :16], v[:, :, 16:]
        out["phases"][name] = {"avg": float(np.nanmean(v)), "first16": float(np.nanmean(first)),
                               "after16": float(np.nanmean(rest)) if np.isfinite(rest).any() else None,
                               "p50": float(np.nanmedian(v)), "p95": float(np.nanpercentile(v, 95)),
                               "min": float(np.nanmin(v))}
    for name in ("producer_wait", "tma_issue"):
        v = d[:, 0, :, ph[name]]
        if not np.isfinite(v).any():
            continue
        out["phases"][name] = {"avg": float(np.nanmean(v)), "p50": float(np.nanmedian(v))}
    st, en = tm.start[:, cons, :, ph["tile"]], tm.end[:, cons, :, ph["tile"]]
    rec = (st != 0) & (en != 0)
    spans, per_tile = [], []
    for c in range(d.shape[0]):
        if not rec[c].any():
            continue
        s0, e1 = st[c][rec[c]].min(), en[c][rec[c]].max()
        n_tiles = int(rec[c][0].sum() + rec[c][4].sum())      # warp 4 (WG 0) and warp 8 (WG 1) tiles
        spans.append(float(e1 - s0))
        per_tile.append(float(e1 - s0) / max(n_tiles, 1))
    spans, per_tile = np.array(spans), np.array(per_tile)
    out["cta"] = {"ctas": int(spans.size), "span_max": float(spans.max()), "span_avg": float(spans.mean()),
                  "cycles_per_tile_avg": float(per_tile.mean()), "cycles_per_tile_min": float(per_tile.min()),
                  "cycles_per_tile_max": float(per_tile.max()),
                  "tensor_busy": float(tiles_per_tile_cycles / per_tile.mean())}
    return out


def _run_clock(job, ctx: jobs.Context, res: dict) -> dict:
    """A whole-run TIMING build on the full problem: clock_stats, and the SM clock it ran at."""
    import torch
    fp, t, _ = _full(ctx)
    s = stage(job["key"], {**job["defines"], "PE_TIMING_TILES": PROFILE_TILES})
    cfg = s.launch_config(fp, info=device.current())
    lay = _timing.layout(s.timing_build(), cfg.ctas)
    buf = _timing.alloc(lay)
    r = s.plan(fp, t, timing=buf, grid=cfg.grid[0])
    r.run()
    r.wait(30.0)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    buf.zero_()
    e0.record()
    r.run()
    e1.record()
    r.wait(30.0)
    ms = e0.elapsed_time(e1)
    tm = _timing.decode(buf, lay)
    cs = clock_stats(tm)
    cs["timing_build_ms"] = ms
    cs["sm_clock_ghz_from_span"] = cs["cta"]["span_max"] / (ms * 1e-3) / 1e9
    # the launch's own clock: each CTA's clock64 over its globaltimer span (common/timing.cuh PE_TIMING_CTA)
    cs["launch_clock"] = tm.launch_clock(min_ns=50_000.0) if tm.cta_clock is not None else None
    summ = tm.summary()
    cs["summary"] = {p: {"avg": row["avg"], "spread": row["spread"]} for p, row in summ.items()}
    return cs


SMI_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "power.limit", "temperature.gpu",
              "clocks_event_reasons.active")


def _smi_sample(fn, seconds: float = 2.0) -> dict:
    """Run fn in a loop for `seconds` while nvidia-smi samples clocks, power and clock-limit reasons."""
    import torch
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"error": "nvidia-smi not found"}
    fields = list(SMI_FIELDS)
    q = subprocess.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    if q.returncode != 0:                       # older drivers: clocks_throttle_reasons
        fields[-1] = "clocks_throttle_reasons.active"
    p = subprocess.Popen([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-lms", "50"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    n = 0
    while time.time() - t0 < seconds:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        n += 20
    p.terminate()
    text = p.communicate(timeout=10)[0]
    rows = []
    for ln in text.splitlines():
        parts = [x.strip() for x in ln.split(",")]
        if len(parts) == len(fields):
            rows.append(dict(zip(fields, parts)))
    rows = rows[len(rows) // 4:]                # the loop's steady state
    def num(k):
        v = [float(r[k]) for r in rows if r.get(k, "").replace(".", "", 1).isdigit()]
        return (sum(v) / len(v), min(v), max(v)) if v else None
    reasons = sorted({r[fields[-1]] for r in rows})
    return {"samples": len(rows), "launches": n, "sm_mhz": num("clocks.sm"), "mem_mhz": num("clocks.mem"),
            "power_w": num("power.draw"), "power_limit_w": num("power.limit"), "temp_c": num("temperature.gpu"),
            "limit_reasons": reasons, "fields": fields}


def _run_load(job, ctx: jobs.Context, res: dict) -> dict:
    """nvidia-smi clocks and power under our kernel and under cuBLAS (fast accumulation) in a loop."""
    fp, t, _ = _full(ctx)
    r = stage(job["key"], job["defines"]).plan(fp, t)
    out = {"ours": _smi_sample(r.run)}
    out["cublas_gemm_fastacc"] = _smi_sample(baselines.cublas_fns(fp, t)["cublas_gemm_fastacc"])
    return out


def _run_baselines(job, ctx: jobs.Context, res: dict) -> dict:
    fp, t, ref = _full(ctx)
    rows = baselines.rows(fp, t, include=job.get("include"), iters=ctx.iters, ref=ref,
                          data_dir=Path(ctx.data_dir) / fp.name,
                          compile_timeout_s=job.get("compile_timeout_s", baselines.COMPILE_TIMEOUT_S),
                          compile_modes=job.get("compile_modes", baselines.COMPILE_MODES),
                          compile_forms=job.get("compile_forms"))
    return {"rows": rows}


# The job kinds of this runner's workers (pelib.measure.jobs): a variant is the sweep's (verified, timed, precision).
KINDS = {"variant": sweep.variant, "probe": _run_probe, "clock": _run_clock, "load": _run_load,
         "baselines": _run_baselines}


# ---- Nsight Compute ---------------------------------------------------------------------------------

NCU_SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "WarpStateStats",
                "SchedulerStats", "LaunchStats", "SourceCounters")
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
               "sm__cycles_elapsed.avg.per_second", "sm__inst_executed_pipe_tensor_op_gmma.sum")


def _ncu_target(spec: str, data_dir: str) -> None:
    """Body profiled by Nsight Compute: our kernel once, then cuBLAS's fast-accumulation GEMM once."""
    import torch
    key, defines = json.loads(spec)
    fp, t, _ = jobs.Data(data_dir).full(stage("06"))
    r = stage(key, defines).plan(fp, t)
    r.run()
    r.wait(30.0)
    baselines.cublas_fns(fp, t)["cublas_gemm_fastacc"]()
    torch.cuda.synchronize()


def run_ncu(best: tuple, data_dir: str, out_dir: Path, timeout_s: float) -> dict:
    """Nsight Compute sections (stall reasons, pipes, memory) and per-instruction samples; files in out_dir."""
    ncu = jobs.tool("ncu")
    if not ncu:
        return {"ok": False, "error": "ncu not found"}
    rep = out_dir / "ncu-ours-cublas"
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "-k",
           "regex:patch_embed_sm90|gemm|xmma|cutlass|nvjet", "-c", "2", "-f", "--export", str(rep)]
    for s in NCU_SECTIONS:
        cmd += ["--section", s]
    cmd += ["--metrics", ",".join(NCU_METRICS), sys.executable, "-m", "pelib.measure.hopper_perf", "--ncu-target",
            json.dumps([best[0], best[1]]), "--data", data_dir]
    t0 = time.time()
    res = {"cmd": " ".join(cmd[:12]) + " ..."}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
        res["profile_tail"] = (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"ncu did not finish in {timeout_s:.0f} s"}
    res["wall_s"] = round(time.time() - t0, 1)
    path = rep.with_suffix(".ncu-rep")
    if not path.exists():
        return {"ok": False, "error": "no report written", **res}
    for page, extra, name in (("details", [], "ncu-details.csv"), ("raw", [], None),
                              ("source", ["--print-source", "sass"], "ncu-source-sass.csv")):
        try:
            q = subprocess.run([ncu, "--import", str(path), "--csv", "--page", page, *extra],
                               capture_output=True, text=True, timeout=120)
            if name:
                (out_dir / name).write_text(q.stdout if q.stdout.strip() else q.stderr)
            if page == "raw":
                res["raw"] = jobs.parse_ncu_csv(q.stdout, keep=list(NCU_METRICS) + [
                    "gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                    "lts__throughput.avg.pct_of_peak_sustained_elapsed"])
            if page == "details":
                res["details"] = _ncu_details(q.stdout)
        except Exception as e:
            res[f"{page}_error"] = f"{type(e).__name__}: {e}"[:300]
    try:
        q = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=60)
        res["gmma_metric_names"] = [ln.split()[0] for ln in q.stdout.splitlines() if "gmma" in ln.lower()][:40]
    except Exception:
        pass
    res["ok"] = True
    return res


def _ncu_details(text: str) -> list[dict]:
    """--page details --csv: one row per (kernel, section, metric); keep name, section, metric, value, unit."""
    import csv
    import io
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    rd = list(csv.DictReader(io.StringIO("\n".join(lines))))
    keep = []
    for r in rd:
        keep.append({"kernel": (r.get("Kernel Name") or "")[:40], "section": r.get("Section Name"),
                     "metric": r.get("Metric Name"), "unit": r.get("Metric Unit"), "value": r.get("Metric Value")})
    return keep


# ---- floors ----------------------------------------------------------------------------------------

def floors(problem, copy_gbps: float, sm_ghz: float | None, sm_count: int) -> dict:
    """The memory floor (minimum bytes over the measured copy bandwidth) and the FP8 tensor floor
    (2MNK over the dense FP8 rate at the measured SM clock); the larger one is the floor."""
    mem_ms = problem.min_bytes / (copy_gbps * 1e9) * 1e3
    out = {"min_bytes": problem.min_bytes, "copy_gbps": copy_gbps, "memory_ms": mem_ms}
    if sm_ghz:
        peak = FP8_FLOPS_PER_SM_CLK * sm_count * sm_ghz * 1e9
        out.update(sm_clock_ghz=sm_ghz, fp8_peak_tflops=peak / 1e12, tensor_ms=problem.flops / peak * 1e3)
        out["floor_ms"] = max(mem_ms, out["tensor_ms"])
    else:
        out["floor_ms"] = mem_ms
    return out


def sm_clock_sources(report: dict) -> dict:
    """The SM clock (GHz) our kernel ran at, three ways: Nsight Compute's sm__cycles_elapsed per second
    in one profiled launch (the timed runs' condition: one launch after an idle gap); clock64 cycles of a
    whole TIMING run over its measured time; nvidia-smi's average over 2 s of back-to-back launches
    (sustained load, at the power limit). cuBLAS's under the same tools where measured."""
    out = {}
    for k in (report.get("ncu") or {}).get("raw", []) or []:
        v = k.get("sm__cycles_elapsed.avg.per_second", "")
        try:
            num, unit = v.split()[0].replace(",", ""), v.split()[-1].lower()
            ghz = float(num) * {"ghz": 1.0, "mhz": 1e-3, "hz": 1e-9}.get(unit, 1e-9)
        except (ValueError, IndexError):
            continue
        out["ours_ncu" if "patch_embed" in k.get("kernel", "") else "cublas_ncu"] = ghz
    cl = [c for c in report.get("clocks", []) if c.get("sm_clock_ghz_from_span")]
    if cl:
        out["ours_clock64"] = cl[0]["sm_clock_ghz_from_span"]
    ld = report.get("load") or {}
    for k, name in (("ours", "ours_sustained_smi"), ("cublas_gemm_fastacc", "cublas_sustained_smi")):
        if (ld.get(k) or {}).get("sm_mhz"):
            out[name] = ld[k]["sm_mhz"][0] / 1e3
    return out


# ---- main --------------------------------------------------------------------------------------------

def _left(t0: float, budget: float) -> float:
    return budget - (time.time() - t0)


def _device_facts() -> dict:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    q = subprocess.run([smi, "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,"
                        "power.default_limit,clocks.applications.graphics", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return {"nvidia_smi": q.stdout.strip() or q.stderr.strip()[:300]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.measure.hopper_perf", description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=500.0, help="seconds for the whole run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--variants", default=None, help="JSON list of [key, defines] (default VARIANTS)")
    ap.add_argument("--no-ncu", action="store_true")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--compile-modes", default=None, help="comma list (default baselines.COMPILE_MODES)")
    ap.add_argument("--compile-forms", default=None, help="JSON list (default all of baselines.COMPILE_FORMS)")
    ap.add_argument("--compile-timeout", type=float, default=240.0)
    a = jobs.parse(ap, argv, KINDS, ncu_target=lambda a: _ncu_target(a.ncu_target, a.data))
    if isinstance(a, int):
        return a

    t_start = time.time()
    import torch
    info = device.current()
    arch = stage("06").arch
    print(device.banner_text(arch, info), flush=True)
    bench.runner_device("python -m pelib.measure.hopper_perf", arch, info)
    env = {**bench.environment(info), **_device_facts()}
    out_dir = Path(a.out or os.environ.get("OUT") or results.run_dir(env))
    out_dir.mkdir(parents=True, exist_ok=True)
    variants = [tuple(v) for v in json.loads(a.variants)] if a.variants else VARIANTS
    report = {"env": env, "evidence": f"measured ({info.name}, {env['date'][:10]})", "problem": "siglip2",
              "wait_builds": {"unbounded": "PE_UNBOUNDED_WAIT: the plain mbarrier spin a production kernel ships",
                              "bounded": "default: bounded call-free waits (trap after PE_WAIT_LIMIT tries)"}}

    for k, d in variants:   # compiled facts (fills the build cache for the workers)
        f = stage(k, d).facts_row()
        print(f"[build] {label(k, d)}: {f['registers']} regs, {f['spills (B)']} B spills, smem {f['smem (B)']}", flush=True)
    copy = bench.copy_bandwidth_gb_s()
    report["copy"] = copy
    print(f"[copy] {copy['gbps']:.0f} GB/s", flush=True)
    full = problems.patch_embed("siglip2")
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    data_dir = tempfile.mkdtemp(prefix="pelib-perf-", dir=shm)
    try:
        jobs.save_full(stage("06"), data_dir)              # inputs and reference, for the workers
        t = torch.load(Path(data_dir) / full.name / "inputs.pt", mmap=True)
        baselines.save_inputs(t, Path(data_dir) / full.name)   # the torch.compile subprocess's inputs
        del t
        torch.cuda.empty_cache()
        print(f"[data] saved ({time.time() - t_start:.0f} s)", flush=True)

        todo = [{"kind": "variant", "key": k, "stage": stage(k).key, "defines": d, "label": label(k, d),
                 "wait_build": wait_build(d)} for k, d in variants]
        todo += [{"kind": "variant", "key": k, "stage": stage(k).key, "defines": d, "label": label(k, d) + " [again]",
                  "wait_build": wait_build(d)} for k, d in AGAIN]
        if not a.no_probes:
            todo += [{"kind": "probe", "defines": {**UNBOUNDED, **p}, "label": "probe " + ",".join(p)} for p in PROBES]
        res = jobs.run(todo, data_dir, a.iters, min(200.0, _left(t_start, a.budget) - 200),
                       job_timeout_s=45.0, module="pelib.measure.hopper_perf", show=sweep.show_job)
        report["variants"] = [r for r in res if r["kind"] == "variant"]
        report["probes"] = [r for r in res if r["kind"] == "probe"]
        timed = [r for r in report["variants"] if r.get("median_ms") and "[again]" not in r["label"]]
        best = min(timed, key=lambda r: r["median_ms"]) if timed else None
        best_unb = min((r for r in timed if r["defines"].get("PE_UNBOUNDED_WAIT")), key=lambda r: r["median_ms"],
                       default=best)
        report["best"] = best_unb and {k: best_unb[k] for k in ("key", "defines", "label", "median_ms", "wait_build")}

        more = [{"kind": "clock", "key": k, "defines": d, "label": "clock " + label(k, d)} for k, d in PROFILE_STAGES]
        if best_unb and (best_unb["key"], best_unb["defines"]) not in PROFILE_STAGES:
            more.append({"kind": "clock", "key": best_unb["key"], "defines": best_unb["defines"],
                         "label": "clock " + best_unb["label"]})
        if best_unb:
            more.append({"kind": "load", "key": best_unb["key"], "defines": best_unb["defines"], "label": "load"})
        more.append({"kind": "baselines", "label": "baselines",
                     "compile_timeout_s": max(30.0, min(a.compile_timeout, _left(t_start, a.budget) - 150)),
                     "compile_modes": a.compile_modes.split(",") if a.compile_modes else list(baselines.COMPILE_MODES),
                     "compile_forms": json.loads(a.compile_forms) if a.compile_forms else None})
        res2 = jobs.run(more, data_dir, a.iters, max(60.0, _left(t_start, a.budget) - 70),
                        job_timeout_s=max(90.0, min(a.compile_timeout + 150, _left(t_start, a.budget) - 80)),
                        module="pelib.measure.hopper_perf", show=sweep.show_job)
        report["clocks"] = [r for r in res2 if r["kind"] == "clock"]
        report["load"] = next((r for r in res2 if r["kind"] == "load"), None)
        bl = next((r for r in res2 if r["kind"] == "baselines"), {})
        report["baselines"] = bl.get("rows") or [{"name": "baselines", "status": "failed",
                                                  "reason": bl.get("error", "not run")}]
        if not a.no_ncu and best_unb and _left(t_start, a.budget) > 40:
            lim = min(150.0, _left(t_start, a.budget) - 15)
            print(f"[ncu] limit {lim:.0f} s", flush=True)
            report["ncu"] = run_ncu((best_unb["key"], best_unb["defines"]), data_dir, out_dir, lim)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    report["floors"] = floors(full, copy["gbps"], sm_clock_sources(report).get("ours_ncu") or
                              sm_clock_sources(report).get("ours_clock64"), info.sm_count)
    report["floors"]["clock_sources_ghz"] = sm_clock_sources(report)
    path = out_dir / "hopper-perf.json"
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(summary(report, full), flush=True)
    print(f"\nwrote {path} ({time.time() - t_start:.0f} s)")
    return 0


def summary(report: dict, problem=None) -> str:
    """The printed tables: variants and probes, the clock64 profile, clocks and power, baselines, floors."""
    problem = problem or problems.patch_embed("siglip2")
    fl = report.get("floors", {})
    lines = [f"\n{report.get('evidence', '')}; copy {report.get('copy', {}).get('gbps', 0):.0f} GB/s; memory floor "
             f"{fl.get('memory_ms', 0):.3f} ms; tensor floor {fl.get('tensor_ms', float('nan')):.3f} ms at "
             f"{fl.get('sm_clock_ghz', float('nan')):.2f} GHz"]
    lines.append(f"{'variant':<58}{'check':>6}{'ms':>8}{'rep':>8}{'max ulp':>8}{'mism':>7}")
    for r in report.get("variants", []) + report.get("probes", []):
        ms = r.get("median_ms")
        pr = r.get("precision") or {}
        if ms:
            lines.append(f"{r['label'][:58]:<58}{'ok' if r.get('ok') else '--':>6}{ms:>8.4f}"
                         f"{r.get('repeat_median_ms', 0):>8.4f}{pr.get('max_ulp', float('nan')):>8.1f}"
                         f"{100 * pr.get('mismatch_frac', float('nan')):>6.1f}%")
        else:
            lines.append(f"{r['label'][:58]:<58}{'FAIL':>6}  {sweep.fail_reason(r)[:80]}")
    for c in report.get("clocks", []):
        if c.get("phases"):
            ph = c["phases"]
            lines.append(f"{c['label']}: cycles/tile per CTA {c['cta']['cycles_per_tile_avg']:.0f} (tensor busy "
                         f"{100 * c['cta']['tensor_busy']:.0f}%), SM clock {c['sm_clock_ghz_from_span']:.2f} GHz; " +
                         "; ".join(f"{k} {v['avg']:.0f} (first16 {v.get('first16') or 0:.0f}, after "
                                   f"{v.get('after16') or 0:.0f}, min {v.get('min', 0):.0f})"
                                   for k, v in ph.items() if k in ("tma_wait", "kloop", "epi_wait", "epi_phase1")))
        else:
            lines.append(f"{c['label']}: {c.get('error', '?')[:200]}")
    ld = report.get("load") or {}
    for k in ("ours", "cublas_gemm_fastacc"):
        s = ld.get(k) or {}
        if s.get("sm_mhz"):
            lines.append(f"load {k}: SM {s['sm_mhz'][0]:.0f} MHz ({s['sm_mhz'][1]:.0f}-{s['sm_mhz'][2]:.0f}), "
                         f"power {s['power_w'][0]:.0f} W of {s['power_limit_w'][0] if s.get('power_limit_w') else '?'}, "
                         f"reasons {s['limit_reasons']}")
        elif s:
            lines.append(f"load {k}: {s.get('error', s)}")
    best = report.get("best") or {}
    nc = report.get("ncu") or {}
    if nc:
        lines.append(f"ncu: {'ok' if nc.get('ok') else nc.get('error')} ({nc.get('wall_s', '?')} s)")
        for k in nc.get("raw", []) or []:
            lines.append("  " + ", ".join(f"{m.split('.')[0].split('__')[-1]} {v}" for m, v in k.items())[:300])
    lines.append("")
    lines.append(baselines.format_rows(
        [{"name": "ours " + best.get("label", "?"), "status": "measured", "median_ms": best.get("median_ms"),
          "tflops": problem.flops / (best["median_ms"] * 1e-3) / 1e12 if best.get("median_ms") else 0,
          "form": best.get("wait_build", ""),
          "precision": next((r.get("precision") for r in report.get("variants", [])
                             if r.get("label") == best.get("label")), {}) or {}}] + report.get("baselines", []),
        floor_ms=fl.get("floor_ms"), ours_ms=best.get("median_ms")) if best.get("median_ms") else
        baselines.format_rows(report.get("baselines", [])))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
