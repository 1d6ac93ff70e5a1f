"""Time kernels with CUDA events (warm-up, L2 flush, median and p10/p90) and write JSON results.

The stages are benchmarked by `python -m pelib.measure.sweep` (`make bench`), which enumerates the stage files;
`python -m pelib.bench [names...]` runs the few built-in device benchmarks registered here (the copy
bandwidth the memory floor is measured against) and writes one JSON file under results/<date>-<device>/.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import clock, device as _device
from . import results
from .paths import RESULTS, ROOT

MIN_FLUSH_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Benchmark:
    name: str
    fn: Callable[..., dict]
    arch: str | None = None     # the build arch it needs (None: any CUDA GPU)
    doc: str = ""


_REGISTRY: dict[str, Benchmark] = {}


def register(name: str, arch: str | None = None):
    """Decorator: register `fn(iters=...) -> result dict` under `name` (needs a GPU of `arch`, if given)."""
    def deco(fn):
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"benchmark {name!r} is registered twice "
                             f"({_REGISTRY[name].fn.__module__} and {fn.__module__})")
        _REGISTRY[name] = Benchmark(name, fn, arch, (fn.__doc__ or "").strip().split("\n")[0])
        return fn
    return deco


def registry() -> dict[str, Benchmark]:
    """The built-in benchmarks (the stages are enumerated from their files by pelib.measure.sweep)."""
    return dict(_REGISTRY)


# ---- statistics (pure) -------------------------------------------------------------------------

def stats(times_ms) -> dict:
    """median, p10, p90, mean, min, max, n of per-run times (ms)."""
    t = np.asarray(list(times_ms), dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timings")
    return {"median_ms": float(np.median(t)), "p10_ms": float(np.percentile(t, 10)),
            "p90_ms": float(np.percentile(t, 90)), "mean_ms": float(t.mean()),
            "min_ms": float(t.min()), "max_ms": float(t.max()), "n": int(t.size)}


def throughput(ms: float, flops: float | None = None, bytes_moved: float | None = None) -> dict:
    """TFLOPS from FLOPs and GB/s (10^9 B/s) from the problem's minimum bytes, at time `ms`."""
    s = ms * 1e-3
    out = {}
    if flops:
        out["tflops"] = flops / s / 1e12
    if bytes_moved:
        out["gbps"] = bytes_moved / s / 1e9
    return out


def gemm_flops(M: int, N: int, K: int) -> float:
    return 2.0 * M * N * K


# ---- timing on the GPU ------------------------------------------------------------------------

class L2Flush:
    """A buffer of at least twice the L2 (and 64 MiB); zeroing it evicts the timed kernel's data."""

    def __init__(self, info: _device.DeviceInfo | None = None):
        import torch
        info = info or _device.current()
        self.nbytes = max(2 * (info.l2_bytes or 0), MIN_FLUSH_BYTES)
        self.buf = torch.empty(self.nbytes, dtype=torch.uint8, device=f"cuda:{info.ordinal}")

    def __call__(self):
        self.buf.zero_()


def time_fn(fn: Callable[[], object], *, iters: int = 50, warmup: int = 5, flush: bool = True,
            stream=None, wait: Callable[[], object] | None = None) -> list[float]:
    """Per-run times (ms) of `fn` with CUDA events on torch's current stream, L2 flushed before each run.

    `wait` (a launch plan's watchdog wait) replaces the unbounded synchronize after the warm-up and
    after the timed runs, so a kernel that hangs while it is being timed is reported, not waited on.
    """
    import torch
    flusher = L2Flush() if flush else None
    for _ in range(warmup):
        fn()
    (wait or torch.cuda.synchronize)()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        if flusher:
            flusher()
        starts[i].record(stream)
        fn()
        ends[i].record(stream)
    (wait or torch.cuda.synchronize)()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def git_revision() -> str:
    """HEAD's hash, with '-dirty' when tracked files changed; 'unknown' outside a checkout.
    PELIB_GIT_REV overrides it, for a copy of the tree run where its .git is not."""
    if os.environ.get("PELIB_GIT_REV"):
        return os.environ["PELIB_GIT_REV"]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if not re.fullmatch(r"[0-9a-f]{40}", rev):  # e.g. 'HEAD' in a repository with no commits
            return "unknown"
        return rev + ("-dirty" if dirty else "")
    except Exception:
        return "unknown"


def environment(info: _device.DeviceInfo | None = None) -> dict:
    """Device, clocks, driver and CUDA versions, date and git revision for a result file."""
    info = info or _device.current()
    env = {"date": clock.stamp(),
           "git": git_revision(), "device": info.name or "none", "arch": info.arch,
           "sm_count": info.sm_count, "l2_bytes": info.l2_bytes,
           "sm_clock_khz": info.sm_clock_khz, "sm_clock_max_khz": info.sm_clock_max_khz,
           "mem_clock_khz": info.mem_clock_khz, "driver_cuda": info.driver,
           "driver_version": info.driver_version}
    try:
        import torch
        env["torch"] = torch.__version__
        env["cuda_runtime"] = torch.version.cuda
    except Exception:
        pass
    try:
        import cuda.core
        env["cuda_core"] = cuda.core.__version__
    except Exception:
        pass
    return env


def result(name: str, times_ms, *, flops: float | None = None, bytes_moved: float | None = None,
           params: dict | None = None, verified: bool | None = None) -> dict:
    """A result dict: statistics, throughput at the median, problem parameters."""
    st = stats(times_ms)
    out = {"name": name, "kind": "measured", **st, **throughput(st["median_ms"], flops, bytes_moved),
           "flops": flops, "bytes": bytes_moved, "params": params or {}}
    if verified is not None:
        out["verified"] = verified
    return out


# ---- built-in benchmarks ----------------------------------------------------------------------

@register("memcpy_d2d")
def bench_memcpy(iters: int = 50, nbytes: int = 1 << 30) -> dict:
    """Device-to-device copy bandwidth (bytes read + written), the DRAM reference line."""
    import torch
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    times = time_fn(lambda: dst.copy_(src), iters=iters, flush=True)
    ok = bool(torch.equal(dst[:4096], src[:4096]) and torch.equal(dst[-4096:], src[-4096:]))
    return result("memcpy_d2d", times, bytes_moved=2.0 * nbytes, params={"nbytes": nbytes}, verified=ok)


def copy_bandwidth_gb_s(iters: int = 20) -> dict:
    """The device-to-device copy (bytes read + written): the bandwidth of the memory floor."""
    r = bench_memcpy(iters=iters)
    return {"gbps": r["gbps"], "median_ms": r["median_ms"], "nbytes": r["params"]["nbytes"]}


# ---- ours against the baselines -------------------------------------------------------------------

def derived(problem, ms: float, copy_gb_s: float | None = None) -> dict:
    """TFLOPS, GB/s of minimum traffic, and the fraction of the memory floor at the copy bandwidth."""
    d = {"tflops": problem.flops / (ms * 1e-3) / 1e12, "gbps": problem.min_bytes / (ms * 1e-3) / 1e9}
    if copy_gb_s:
        floor_ms = problem.min_bytes / (copy_gb_s * 1e9) * 1e3
        d.update(floor_ms=floor_ms, floor_frac=floor_ms / ms)
    return d


def compare_rows(ours: dict, baselines, copy_gb_s: float, problem) -> list[dict]:
    """Rows of the comparison table: ours first, then each baseline (pelib.measure.baselines rows, or an older
    run's {name: row}) with our speed-up over it."""
    rows = []
    for r in [{"name": "ours: " + ours.get("stage", "best"), **ours, "status": "measured" if "median_ms" in ours
               else "failed"}] + results.baseline_list(baselines):
        name = r["name"]
        if r.get("status") != "measured" or "median_ms" not in r:
            why = r.get("reason") or r.get("error") or "not timed"
            rows.append({"name": name, "ms": None, "note": f"{str(r.get('status', 'failed')).upper()}: {error_line(str(why))}"})
            continue
        d = derived(problem, r["median_ms"], copy_gb_s)
        if r.get("ok") is False or r.get("verified") is False:   # timed, but its output did not verify
            name += " (WRONG OUTPUT)"
        rows.append({"name": name, "ms": r["median_ms"], "tflops": d["tflops"], "gbps": d["gbps"],
                     "floor_frac": d["floor_frac"],
                     "speedup": r["median_ms"] / ours["median_ms"] if "median_ms" in ours else None})
    return rows


def error_line(text: str) -> str:
    """The most telling line of a failure's text: the last 'SomeError: ...' line, else its end."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Interrupt")) or head in ("AssertionError", "KeyError"):
            return ln[:300]
    return " | ".join(lines[-3:])[:300]


def format_rows(rows: list[dict]) -> str:
    """A compact text table of compare_rows."""
    lines = [f"{'':<34}{'ms':>8}{'TFLOPS':>8}{'GB/s':>8}{'floor':>7}{'ours x':>8}"]
    for r in rows:
        if r["ms"] is None:
            lines.append(f"{r['name']:<34}  {r['note'][:110]}")
            continue
        sp = f"{r['speedup']:.2f}" if r.get("speedup") else "-"
        lines.append(f"{r['name']:<34}{r['ms']:>8.4f}{r['tflops']:>8.0f}{r['gbps']:>8.0f}"
                     f"{100 * r['floor_frac']:>6.0f}%{sp:>8}")
    lines.append("floor = (minimum bytes / measured copy bandwidth) / time; ours x = baseline time / our time")
    return "\n".join(lines)


# ---- running and writing ------------------------------------------------------------------------

def run(names=None, *, iters: int = 50, info: _device.DeviceInfo | None = None) -> dict:
    """Run the named (default: all) benchmarks this device can run; returns {"env", "results", "skipped"}."""
    info = info or _device.current()
    reg = registry()
    names = list(names) if names else sorted(reg)
    unknown = [n for n in names if n not in reg]
    if unknown:
        raise KeyError(f"unknown benchmark(s) {unknown}; registered: {sorted(reg)}")
    out = {"env": environment(info), "results": [], "skipped": {}}
    for n in names:
        b = reg[n]
        if not info.present:
            out["skipped"][n] = info.reason
            continue
        if b.arch and not _device.can_run(b.arch, info):
            out["skipped"][n] = f"needs {b.arch}, this is {info.arch}"
            continue
        r = b.fn(iters=iters)
        r.setdefault("name", n)
        out["results"].append(r)
    return out


def write(report: dict, out_dir=None) -> "Path":
    """Write a run's JSON as <date>-<device>-<git>.json under results/<date>-<device>/ (or `out_dir`)."""
    from pathlib import Path
    env = report["env"]
    # every part of the name checked first: a date, device or revision with a path in it writes nowhere
    results.iso_date(env.get("date"), "env['date']")
    stamp = results.label(env["date"].replace(":", "").replace("+0000", "Z"), "env['date']")
    dev = results.device_slug(env.get("device", "none"))
    git = results.label(str(env.get("git", ""))[:7], "env['git']")
    base = Path(out_dir) if out_dir else results.run_dir(env)
    path = results.inside(base / f"{stamp}-{dev}-{git}.json", base if out_dir else results.RESULTS)
    if base.exists() and not base.is_dir():
        raise results.ResultsPathError(f"out_dir={str(base)!r} is a file, not a folder: name a folder (it is made "
                                       "if missing) or leave it out for results/<date>-<device>/")
    base.mkdir(parents=True, exist_ok=True)
    return publish(path, json.dumps(report, indent=2, default=str) + "\n")


def publish(path, text: str) -> "Path":
    """Write `text` as `path`, or as `path` with -2, -3, ... before its suffix where that name is taken: the whole
    file is written under a temporary name in the same folder, then linked to its name (link(2) fails where the
    name exists, so no writer replaces another's report and no reader sees half a file); returns the name used."""
    from pathlib import Path
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        for i in range(1, 10_000):
            name = path if i == 1 else path.with_name(f"{path.stem}-{i}{path.suffix}")
            try:
                os.link(tmp, name)
                return name
            except FileExistsError:
                continue
            except OSError:   # a file system without hard links: an exclusive create of the name instead
                try:
                    with open(name, "x") as f:
                        f.write(text)
                    return name
                except FileExistsError:
                    continue
        raise results.ResultsPathError(f"{path}: 9,999 reports of this run already; write elsewhere (out_dir)")
    finally:
        os.unlink(tmp)


def runner_device(prog: str, arch: str, info=None):
    """The device a GPU runner (python -m pelib.predict.blind, energy, predict.probes, sweep, hopper_perf) measures on, or
    SystemExit(2) after one line saying what it needs and what is here: a runner without its GPU has nothing to
    show, and a traceback of pelib.device.UnsupportedGPU is not an answer."""
    info = info or _device.current()
    try:
        return _device.require(arch, info)
    except _device.UnsupportedGPU:
        here = info.describe() if info.present else (info.reason or "no CUDA GPU")
        print(f"{prog}: measures on an {arch} GPU and found {here}: nothing run, nothing written (the book shows "
              "the committed results; run this on that GPU)", file=sys.stderr)
        raise SystemExit(2) from None


def format_results(report: dict) -> str:
    lines = []
    for r in report["results"]:
        tp = " ".join(f"{r[k]:.1f} {u}" for k, u in (("tflops", "TFLOPS"), ("gbps", "GB/s")) if r.get(k))
        lines.append(f"{r['name']:<28} median {r['median_ms']:.4f} ms "
                     f"[p10 {r['p10_ms']:.4f}, p90 {r['p90_ms']:.4f}] {tp}")
    for n, why in report["skipped"].items():
        lines.append(f"{n:<28} skipped: {why}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pelib.bench", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--out", default=None, help=f"result directory (default {RESULTS}/<date>-<device>/)")
    p.add_argument("--list", action="store_true", help="list the registered benchmarks")
    a = p.parse_args(argv)
    if a.list:
        for n, b in sorted(registry().items()):
            print(f"{n:<28} {b.arch or 'any GPU':<10} {b.doc}")
        return 0
    info = _device.current()
    print(_device.banner_text(info=info))
    report = run(a.names, iters=a.iters, info=info)
    print(format_results(report))
    if not report["results"]:
        print("nothing measured: no result file written")
        return 0
    print(f"wrote {write(report, a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
