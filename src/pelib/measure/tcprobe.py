"""The FP8 tensor core's accumulation, collected bit for bit: every probe vector class through one wgmma per k32 step.

    PYTHONPATH=src python3 -m pelib.measure.tcprobe collect --out DIR      # on an H100 or H200 (about 1-2 minutes)
    PYTHONPATH=src python3 -m pelib.measure.tcprobe collect --out DIR --device sim --quick   # the same on the CPU
    PYTHONPATH=src python3 -m pelib.measure.tcprobe score DIR [MODEL ...]  # offline: models against collected bits

collect compiles src/kernels/probes/wgmma_numerics.cu with NVRTC for sm_90a (E4M3 with N = 256, the N of
sm90/01..11, plus 128 and 192 for the shape runs; E5M2 with N = 256), generates every class of
pelib.numerics.tcvectors on the host (seeded), launches one grid per class (a tile per CTA), reads back the FP32
bits, and evaluates the models of pelib.numerics.blockfma on the spot (MODELS: the simulator's exact sum, the plain
13-bit FP22 outline, and the two public H100 models). It writes into DIR:

    tcprobe.json            device, clocks, date (pelib.clock), git revision (pelib.bench.git_revision),
                            build facts, timings; per class: what it pins, its format, shape and flags,
                            outputs, unwritten outputs (the poison left), mismatches of each model; the
                            repeat runs (chain4_wait_each, the N = 128 / 192 shapes) compared with what
                            they repeat
    tcprobe-directed.npz, tcprobe-random.npz, tcprobe-chains.npz, tcprobe-shapes.npz, tcprobe-e5m2.npz
                            per class `<class>.a` uint8 [T, 64, K], `<class>.b` uint8 [T, N, K],
                            `<class>.d` and `<class>.out` uint32 [T, 64, N] (FP32 bits), `<class>.meta`
                            (its JSON): output (t, m, n) = sum_k a[t, m, k] b[t, n, k] + d[t, m, n]

--device sim runs the same launches in the CPU simulator (pelib.sim: the probe's own source on the model
of wgmma, src/kernels/sim/model/blockfma.h, whose default is the rule h100tc_matlab describes, so that
model must agree on every output; under pelib.sim.engine.accumulation("exact") the exact sum must), which tests
the layouts, the packing and the models end to end without a GPU. Evidence: measured (gpu) / simulated.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import bench, build as _build, clock, device as _device, launch
from ..numerics import blockfma as F, tcvectors as V
from ..sim import engine as sim
from ..paths import KERNELS

PROBE = KERNELS / "probes" / "wgmma_numerics.cu"
KERNEL = "wgmma_numerics"
ARCH = "sm_90a"
SUMMARY = "tcprobe.json"
FILES = {"directed": "tcprobe-directed.npz", "random": "tcprobe-random.npz", "chains": "tcprobe-chains.npz",
         "shapes": "tcprobe-shapes.npz", "e5m2": "tcprobe-e5m2.npz"}
MAX_FILE_BYTES = 16 << 20
POISON = 0x7FA5A5A5        # a signalling-NaN pattern no model prints: an output still holding it was not written
MODELS = (F.EXACT_SUM, F.FP22_PLAIN, F.H100TC_MATLAB, F.H100TC_C)
ROWS_PER_CHUNK = 16        # model evaluation: 16 x N outputs at a time stay in cache


class ProbeError(RuntimeError):
    """The probe could not run as asked (wrong device, a class the kernel cannot launch, files too large)."""


# ---- what runs -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    """One launch: a class's tiles through the probe of wgmma N = n (a shape job repeats `of` at another N)."""

    name: str
    cls: V.VectorClass
    n: int
    tiles: int
    group: str
    of: str | None = None

    @property
    def steps(self) -> int:
        return self.cls.steps

    @property
    def fmt(self) -> str:
        return self.cls.fmt

    @property
    def build_key(self) -> tuple:
        return (self.n, self.fmt)


def jobs(quick: bool = False, classes=None) -> list[Job]:
    """Every class (quick: cls.quick_tiles tiles each), then the repeats at N = 128 and 192."""
    names = list(V.CLASSES) if classes is None else list(classes)
    unknown = [c for c in names if c not in V.CLASSES]
    if unknown:
        raise ProbeError(f"unknown vector classes {unknown}; pelib.numerics.tcvectors.CLASSES has {sorted(V.CLASSES)}")
    out = []
    for name in names:
        c = V.CLASSES[name]
        out.append(Job(name, c, c.n, c.quick_tiles if quick else c.tiles, c.group))
    for n, of in V.SHAPES.items():
        for name in of:
            if name in names:
                c = V.CLASSES[name]
                out.append(Job(f"{name}.n{n}", c, n, min(V.SHAPE_TILES, c.quick_tiles if quick else c.tiles),
                               "shapes", of=name))
    return out


def job_inputs(job: Job, seed: int):
    """(A, B, D) of a job: the class's own (its first tiles), B and D cut to the job's N for a shape job."""
    a, b, d = V.inputs(job.cls, seed, job.tiles)
    return np.ascontiguousarray(a), np.ascontiguousarray(b[:, :job.n]), np.ascontiguousarray(d[:, :, :job.n])


def probe_build(n: int, fmt: str = "e4m3"):
    """The probe compiled for wgmma N = n and FP8 format fmt (NVRTC, sm_90a), its exports checked against
    what pelib assumes."""
    defines = {"PROBE_N": n, **({"PROBE_E5M2": 1} if fmt == "e5m2" else {})}
    b = _build.build(PROBE, ARCH, defines)
    ex = b.exports
    if ex.get("probe_n") != n or ex.get("probe_m") != V.M or ex.get("probe_e5m2") != (fmt == "e5m2"):
        raise ProbeError(f"{PROBE.name} built with {defines} exports probe_n={ex.get('probe_n')}, "
                         f"probe_m={ex.get('probe_m')}, probe_e5m2={ex.get('probe_e5m2')}")
    return b


def flag_bits(build, names) -> int:
    """The launch flags' bits, as the probe exports them (probe_flag_<name>)."""
    bits = 0
    for name in names:
        key = f"probe_flag_{name}"
        if key not in build.exports:
            raise ProbeError(f"{PROBE.name} exports no {key}: the class asks for a flag the kernel does not have")
        bits |= build.exports[key]
    return bits


def check_steps(build, steps: int) -> None:
    if not (build.exports["probe_steps_mask"] >> steps) & 1 or steps > build.exports["probe_max_steps"]:
        ok = [s for s in range(1, 17) if (build.exports["probe_steps_mask"] >> s) & 1]
        raise ProbeError(f"a chain of {steps} k32 steps: {PROBE.name} instantiates {ok} (probe_chain's switch)")


# ---- where it runs -------------------------------------------------------------------------------------

class GpuBackend:
    """torch CUDA tensors and pelib.launch (a checked launch with a watchdog). `device` is the tensors'
    device: tests set "cpu" with pelib.launch.prepare replaced by a stand-in."""

    kind = "gpu"
    evidence = "measured"

    def __init__(self, device: str = "cuda"):
        self.device = device

    def tensor(self, x: np.ndarray):
        import torch   # torch only where a launch needs it
        x = np.ascontiguousarray(x)
        t = torch.from_numpy(x.view(np.int32) if x.dtype == np.uint32 else x)
        return t.to(self.device)

    def launch(self, build, args, grid: int) -> None:
        launch.launch(build, args, grid=(grid, 1, 1), block=(128, 1, 1))

    def numpy(self, t, dtype) -> np.ndarray:
        return t.cpu().numpy().view(dtype)


class SimBackend(GpuBackend):
    """The same launch in the CPU simulator (pelib.sim): the probe's own source on the model of wgmma."""

    kind = "sim"
    evidence = "simulated"

    def __init__(self, seed: int = 0):
        super().__init__("cpu")
        self.seed = seed

    def tensor(self, x: np.ndarray):
        return super().tensor(np.array(x, copy=True))

    def launch(self, build, args, grid: int) -> None:
        sim.prepare(build, args, grid=(grid,), block=(128,), cluster=(1,), smem=build.dynamic_smem, kernel=KERNEL,
                    arch=ARCH, defines=build.defines, seed=self.seed).run()


def run_job(backend, build, job: Job, a, b, d) -> np.ndarray:
    """Launch one job; the FP32 bits of every output (the poison where the kernel wrote nothing)."""
    check_steps(build, job.steps)
    out = np.full(d.shape, POISON, np.uint32)
    ta, tb, td, to = (backend.tensor(x) for x in (a, b, d, out))
    backend.launch(build, (ta, tb, td, to, np.uint32(job.steps), np.uint32(flag_bits(build, job.cls.flags))),
                   job.tiles)
    return backend.numpy(to, np.uint32)


# ---- models ---------------------------------------------------------------------------------------------

def evaluate(model, a, b, d, first_scale_d: bool = True, fmt="e4m3") -> np.ndarray:
    """`model` on every output of tiles A [T, 64, K], B [T, N, K], D [T, 64, N]: uint32 [T, 64, N]."""
    out = np.empty(d.shape, np.uint32)
    for t in range(a.shape[0]):
        for r in range(0, a.shape[1], ROWS_PER_CHUNK):
            rows = slice(r, r + ROWS_PER_CHUNK)
            out[t, rows] = F.chain(model, a[t, rows, None, :], b[t, None, :, :], d[t, rows], fmt, first_scale_d)
    return out


def first_scale_d(cls: V.VectorClass) -> bool:
    return V.FIRST_ZERO not in cls.flags


def score(a, b, d, out, cls: V.VectorClass, models=MODELS) -> dict:
    """Mismatches of each model against the collected bits (pelib.numerics.blockfma.mismatches)."""
    return {m.name: F.mismatches(evaluate(m, a, b, d, first_scale_d(cls), cls.fmt), out) for m in models}


# ---- files ---------------------------------------------------------------------------------------------

def write_npz(out_dir: Path, group: str, arrays: dict) -> Path:
    path = Path(out_dir) / FILES[group]
    np.savez_compressed(path, **arrays)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ProbeError(f"{path.name} is {size / 2**20:.1f} MiB, over the {MAX_FILE_BYTES >> 20} MiB a result file "
                         "may have: fewer tiles in its classes (pelib.numerics.tcvectors.CLASSES)")
    return path


def load(out_dir) -> dict:
    """{job name: {"a", "b", "d", "out", "meta"}} from a collect folder's npz files."""
    data = {}
    for f in FILES.values():
        p = Path(out_dir) / f
        if not p.exists():
            continue
        with np.load(p) as z:
            for key in z.files:
                name, part = key.rsplit(".", 1)
                v = z[key]
                data.setdefault(name, {})[part] = json.loads(str(v)) if part == "meta" else v
    if not data:
        raise ProbeError(f"{out_dir}: no {', '.join(FILES.values())}; run `python -m pelib.measure.tcprobe collect --out "
                         f"{out_dir}` first")
    return data


# ---- the command -----------------------------------------------------------------------------------------

def probe_device(device: str, arch: str, error: type, issues: str):
    """The GPU's pelib.device info for device 'gpu' (`error` where it is not an `arch` GPU: the probe
    `issues` what it cannot run), None for 'sim' (the CPU simulator); shared with
    pelib.measure.tcprobe_sm100."""
    if device == "gpu":
        info = _device.current()
        try:
            _device.require(arch, info)
        except _device.UnsupportedGPU as e:
            raise error(f"the probe issues {issues} ({e}), or pass --device sim for the CPU simulator") from None
        return info
    if device != "sim":
        raise error(f"--device {device!r}: gpu or sim")
    return None


def collect(out_dir, device: str = "gpu", quick: bool = False, seed: int = 0, classes=None,
            models=MODELS, backend=None) -> dict:
    """Run every job on `device` (gpu or sim), write the npz files and tcprobe.json, return the summary."""
    t_start = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if backend is None:
        gpu = probe_device(device, ARCH, ProbeError, "sm_90a wgmma: run collect on an H100 or H200")
        backend = SimBackend(seed) if gpu is None else GpuBackend()
    env = bench.environment(_device.current()) if backend.kind == "gpu" else {
        "date": clock.stamp(), "git": bench.git_revision(), "device": "pelib.sim (CPU)"}
    todo = jobs(quick, classes)
    seconds = {"build": 0.0, "generate": 0.0, "run": 0.0, "models": 0.0, "write": 0.0}

    t0 = time.monotonic()
    skipped: dict = {}
    builds = {key: probe_build(*key) for key in sorted({j.build_key for j in todo})}
    seconds["build"] = time.monotonic() - t0

    arrays = {g: {} for g in FILES}
    results, outs = {}, {}
    for job in todo:
        t0 = time.monotonic()
        a, b, d = job_inputs(job, seed)
        seconds["generate"] += time.monotonic() - t0
        t0 = time.monotonic()
        try:
            out = run_job(backend, builds[job.build_key], job, a, b, d)
        except (launch.LaunchError, sim.SimError) as e:
            # a fault leaves the CUDA context unusable: the later jobs fail too, and each says so; what ran
            # before is still written
            results[job.name] = {"group": job.group, "n": job.n, "steps": job.steps, "tiles": job.tiles,
                                 "error": f"{type(e).__name__}: {e}"[:2000]}
            print(f"tcprobe: {job.name}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            continue
        finally:
            seconds["run"] += time.monotonic() - t0
        outs[job.name] = out
        t0 = time.monotonic()
        res = {"group": job.group, "fmt": job.fmt, "n": job.n, "steps": job.steps, "k": 32 * job.steps,
               "flags": list(job.cls.flags),
               "tiles": job.tiles, "outputs": int(out.size), "pins": job.cls.pins,
               "unwritten": int((out == POISON).sum()), "mismatch": score(a, b, d, out, job.cls, models)}
        seconds["models"] += time.monotonic() - t0
        same = job.of or V.SAME_INPUTS.get(job.name)
        if same is not None and same in outs:
            ref = outs[same][:job.tiles, :, :job.n]
            res["same_as"] = {"job": same, **F.mismatches(out, ref)}
        results[job.name] = res
        meta = {k: res[k] for k in ("fmt", "n", "steps", "flags", "tiles", "pins")}
        arrays[job.group].update({f"{job.name}.a": a, f"{job.name}.b": b, f"{job.name}.d": d,
                                  f"{job.name}.out": out, f"{job.name}.meta": np.array(json.dumps(meta))})

    t0 = time.monotonic()
    files = {}
    for g, arr in arrays.items():
        if arr:
            p = write_npz(out_dir, g, arr)
            files[p.name] = p.stat().st_size
    seconds["write"] = time.monotonic() - t0
    seconds["total"] = time.monotonic() - t_start
    ran = [r for r in results.values() if "error" not in r]
    totals = {m.name: {k: sum(r["mismatch"][m.name][k] for r in ran) for k in ("bits", "values")} for m in models}
    summary = {
        "what": "Hopper FP8 wgmma accumulation probe: FP32 bits of every vector class (pelib.measure.tcprobe)",
        "evidence": backend.evidence, "backend": backend.kind, "seed": seed, "quick": quick, **env,
        "kernel": str(PROBE.relative_to(KERNELS.parents[1])),
        "builds": {f"{fmt} N={n}": {"registers": b.facts.registers, "smem_bytes": b.dynamic_smem,
                                    "qgmma": b.histogram.get("QGMMA", 0)} for (n, fmt), b in builds.items()},
        "skipped": skipped,
        "models": {m.name: {"source": m.source, **({"params": m.params} if hasattr(m, "params") else {})}
                   for m in models},
        "outputs": sum(r["outputs"] for r in ran), "unwritten": sum(r["unwritten"] for r in ran),
        "errors": {name: r["error"] for name, r in results.items() if "error" in r},
        "mismatch_total": totals, "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "files": files, "classes": results}
    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def table(summary: dict) -> str:
    """One line per job: outputs and each model's mismatching values."""
    names = list(summary["models"])
    lines = [f"{'job':24s} {'outputs':>9s} " + " ".join(f"{n:>14s}" for n in names)]
    for job, r in summary["classes"].items():
        if "error" in r:
            lines.append(f"{job:24s} {'-':>9s} {r['error'][:100]}")
            continue
        extra = f"  same as {r['same_as']['job']}: {r['same_as']['values']} differ" if "same_as" in r else ""
        lines.append(f"{job:24s} {r['outputs']:9d} " + " ".join(f"{r['mismatch'][n]['values']:14d}" for n in names)
                     + (f"  unwritten {r['unwritten']}" if r["unwritten"] else "") + extra)
    lines.append(f"{'total':24s} {summary['outputs']:9d} "
                 + " ".join(f"{summary['mismatch_total'][n]['values']:14d}" for n in names))
    return "\n".join(lines)


def parse_model(spec: str):
    """'h100tc_matlab' or 'h100tc_matlab:out_bits=23,ref=max_term' (a preset with fields changed)."""
    name, _, changes = spec.partition(":")
    if name not in F.PRESETS:
        raise ProbeError(f"model {name!r}: pelib.numerics.blockfma.PRESETS has {sorted(F.PRESETS)}")
    m = F.PRESETS[name]
    if not changes:
        return m
    if not isinstance(m, F.BlockFMA):
        raise ProbeError(f"{name} has no parameters to change")
    kw = {}
    for item in changes.split(","):
        k, _, v = item.partition("=")
        cur = getattr(m, k, None) if hasattr(m, k) else None
        if not hasattr(m, k):
            raise ProbeError(f"{name}: no field {k!r}; BlockFMA has {sorted(m.params)}")
        kw[k] = (v.lower() in ("1", "true", "yes")) if isinstance(cur, bool) else int(v) if isinstance(cur, int) or (
            cur is None and v.lstrip("-").isdigit()) else v
    return m.with_(name=spec, **kw)


def score_dir(out_dir, models=MODELS) -> dict:
    """Mismatches of `models` on a collected folder, recomputed offline: {job: {model: mismatches}}."""
    out = {}
    for name, arr in load(out_dir).items():
        cls = V.CLASSES[name.split(".")[0]]
        out[name] = score(arr["a"], arr["b"], arr["d"], arr["out"], cls, models)
    return out


def collect_parser(sub, help: str, out: str | None = None, quick: str | None = None, classes: str | None = None):
    """The `collect` subcommand this probe and pelib.measure.tcprobe_sm100 share (--out, --device, --quick,
    --seed, --classes), with each probe's help texts."""
    c = sub.add_parser("collect", help=help)
    c.add_argument("--out", required=True, help=out)
    c.add_argument("--device", choices=("gpu", "sim"), default="gpu")
    c.add_argument("--quick", action="store_true", help=quick)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--classes", help=classes)
    return c


def command(prog: str, run, args, error: type) -> int:
    """A probe command's exit status: run(args)'s (0, or 1 where jobs failed), or 2 with `prog: message` on
    stderr where it raises `error` (the probe's ProbeError)."""
    try:
        return run(args)
    except error as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.measure.tcprobe", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    collect_parser(sub, "run every vector class through the probe and write DIR",
                   out="folder for tcprobe.json and the npz files",
                   quick="a tile or two per class (the CPU test's size)",
                   classes="comma-separated subset of pelib.numerics.tcvectors.CLASSES")
    s = sub.add_parser("score", help="evaluate models on a collected folder")
    s.add_argument("dir")
    s.add_argument("models", nargs="*", help="preset names, optionally preset:field=value,...")
    return command("tcprobe", _run, ap.parse_args(argv), ProbeError)


def _run(args) -> int:
    if args.cmd == "collect":
        summary = collect(args.out, args.device, args.quick, args.seed,
                          args.classes.split(",") if args.classes else None)
        print(table(summary))
        print(f"{summary['outputs']:,} outputs, {summary['seconds']['total']} s; wrote "
              f"{', '.join(summary['files'])} and {SUMMARY} to {args.out}")
        if summary["errors"]:
            print(f"tcprobe: {len(summary['errors'])} jobs failed: {', '.join(summary['errors'])}",
                  file=sys.stderr)
            return 1
    else:
        models = [parse_model(m) for m in args.models] or list(MODELS)
        res = score_dir(args.dir, models)
        names = [m.name for m in models]
        print(f"{'job':24s} " + " ".join(f"{n:>20s}" for n in names))
        for job, r in res.items():
            print(f"{job:24s} " + " ".join(f"{r[n]['values']:20d}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
