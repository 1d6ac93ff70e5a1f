"""One stage file as the host sees it: build, exports, launch, verify-then-time, TIMING run, one emulated tile.

    s = Stage("fp8/06_stages", {"NUM_STAGES": 5})
    s.exports.pipeline_stages, s.exports.smem_bytes      # the export vocabulary of common/export.cuh
    s.launch_config(problem)                             # grid, block, cluster, shared memory
    s.run("small")                                       # poison, launch, verify, only then time
    s.run("small", time=Timed(iters=5), launch=LaunchOptions(grid=132))

The simulator runs a stage through pelib.sim.host (sim_host.run(stage, "sim")) and the timing model
through pelib.predict: both stand above Stage, so this module imports neither, and its command line hands
--device sim and --device predict to pelib.sim.host and pelib.predict.host.

Everything a launch needs comes from the stage: the kernel's parameter list (parsed from the source,
arguments bound by name), the tensor-map boxes and swizzles and the launch shape (from the cubin's
exports). What only one family needs (scale-factor maps, the epilogue column map, the permuted-B
view, its problems and reference) is in pelib.kinds. `python -m pelib.stage` is the command line.

Over 700 lines: the front door: Stage and its command line (python -m pelib.stage); the simulator's and the
timing model's hosts are apart.
"""
from __future__ import annotations

import argparse
import difflib
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from . import bench, build as _build, clock, device as _device, kinds, launch, records, results
from . import problems as _problems, sol, stages
from . import timing as _timing, tma, verify as _verify
from .facts import Table, evidence_label
from .paths import KERNELS

ARCH_OF = {"sm90": "sm_90a"}            # every other family builds for sm_100a
TARGET_GPU = {"sm_100a": "B200", "sm_90a": "H100 SXM"}   # whose SM count a launch assumes without that GPU here
GRID_KINDS = {0: "one CTA or cluster per tile", 1: "persistent: resident clusters, static schedule",
              2: "persistent by column block: a multiple of N / tile_n CTAs"}
DEVICES = ("gpu", "sim", "compile", "predict")   # the command line's; Stage.run runs 'gpu' and 'compile'
OFF_STAGE = {"sim": "pelib.sim.host.run(stage, problem='sim', *, seed, verify, inputs, ref, spec_hook, hook, grid, "
                    "sim_seed)",
             "predict": "pelib.predict.predict(stage, gpu, calibration=None, clock=None, problem='full')"}
HANDED_OVER = {"sim": "pelib.sim.host", "predict": "pelib.predict.host"}   # whose main runs the device's CLI
SIM_PLAN = "pelib.sim.host.plan(stage, problem, tensors, timing=None, grid=None, spec_hook=None, seed=0)"
SIM_TIMING = "pelib.sim.host.run_timing(stage, problem='sim', *, seed, inputs, spec_hook, hook, grid, sim_seed)"


@dataclass(frozen=True)
class Timed:
    """How Stage.run times a verified launch (bench.time_fn): `iters` timed launches after `warmup` untimed."""

    iters: int = 20
    warmup: int = 3


@dataclass(frozen=True)
class LaunchOptions:
    """What a run changes about its launch: `spec_hook(specs) -> specs` the tensor maps (Stage.plan), `hook(inputs)`
    a context entered around the launches (e.g. an L2 access-policy window over B), `grid` a persistent grid's CTAs."""

    spec_hook: object = None
    hook: object = None
    grid: int | None = None
# The export vocabulary every stage publishes (src/kernels/common/export.cuh).
VOCABULARY = ("smem_bytes", "smem_limit", "num_threads", "cluster_x", "cluster_in_kernel", "grid_kind",
              "tile_m", "tile_n", "block_k", "pipeline_stages", "epi_warps", "barrier_bytes")


class StageError(ValueError):
    """A stage, a define or a problem does not fit; the message names the fix."""


# ---- the export vocabulary ---------------------------------------------------------------------

class Exports(dict):
    """A build's PELIB_EXPORTs: the vocabulary as attributes (s.exports.tile_m), everything by key."""

    def __getattr__(self, name):
        if name in VOCABULARY:
            if name not in self:
                raise StageError(f"the stage exports no {name!r}: every stage publishes the vocabulary of "
                                 "common/export.cuh (add PELIB_EXPORT({name}, ...))")
            return self[name]
        raise AttributeError(name)

    def box(self, param: str) -> tuple[int, int, int]:
        """(rows, cols, swizzle) of the tensor map `tmap_<param>`: rows = outer dimensions' product,
        cols = the innermost dimension in elements of the map's type, swizzle in bytes."""
        keys = [f"tmap_{param}_{k}" for k in ("box_rows", "box_cols", "swizzle")]
        missing = [k for k in keys if k not in self]
        if missing:
            raise StageError(f"the stage exports no {missing}: a CUtensorMap parameter tmap_{param} needs "
                             "its box and swizzle exported (common/export.cuh)")
        return tuple(int(self[k]) for k in keys)


# ---- the kernel's parameter list ----------------------------------------------------------------

_SCALARS = {"int": np.int32, "int32_t": np.int32, "i32": np.int32, "unsigned": np.uint32, "u32": np.uint32,
            "uint32_t": np.uint32, "float": np.float32, "u64": np.uint64, "uint64_t": np.uint64,
            "double": np.float64}


def parse_signature(source: str) -> tuple[str, list[tuple[str, str]]]:
    """The extern "C" __global__ kernel's name and [(type, name)] from a stage's source text."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    m = re.search(r'extern\s+"C"\s+__global__', text)
    if m is None:
        raise StageError('no extern "C" __global__ kernel in the stage source')
    pos = m.end()
    while True:   # skip attributes with arguments (__launch_bounds__(...), __cluster_dims__(...))
        m = re.compile(r"(\w+)\s*\(").search(text, pos)
        if m is None:
            raise StageError("no parameter list after the kernel's extern \"C\" __global__")
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        if not m.group(1).startswith("__"):
            break
        pos = i
    params = []
    for p in text[m.end():i - 1].split(","):
        words = p.replace("*", " * ").split()
        if words:
            typ = " ".join(w for w in words[:-1] if w not in ("const", "__grid_constant__", "__restrict__"))
            params.append((typ, words[-1]))
    return m.group(1), params


# ---- launch configuration -----------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchConfig:
    """Grid (CTAs), block, cluster and dynamic shared memory of one launch, and where they came from."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem: int
    tiles: int                       # CTA tiles of tile_m x tile_n
    grid_kind: int
    unit: int = 1                    # a persistent grid is a multiple of this many CTAs
    cluster_in_kernel: bool = False  # __cluster_dims__: launched without a cluster attribute
    sm_count: int = 0
    sm_source: str = ""
    active_clusters: int | None = None   # cuOccupancyMaxActiveClusters, where it was asked
    tile: tuple[int, int] = (0, 0)   # (tile_m, tile_n) of one CTA

    @property
    def ctas(self) -> int:
        return math.prod(self.grid)

    @property
    def persistent(self) -> bool:
        return self.grid_kind != 0

    @property
    def launch_cluster(self) -> tuple[int, int, int]:
        """The cluster attribute of the launch: none when the kernel declares its cluster itself."""
        return (1, 1, 1) if self.cluster_in_kernel else self.cluster

    @property
    def by_cluster(self) -> bool:
        """True where a cluster shares one tile along M (its CTAs' rows stacked), so work is counted per cluster."""
        return self.cluster[0] > 1 and self.grid_kind != 2

    @property
    def work(self) -> tuple[int, int]:
        """(tiles, workers): cluster tiles and clusters where a cluster shares a tile, else CTA tiles and CTAs."""
        c = self.cluster[0] if self.by_cluster else 1
        return self.tiles // c, self.ctas // c

    @property
    def tiles_per_worker(self) -> tuple[int, int]:
        """(fewest, most) tiles one cluster (or CTA) computes under the static schedule."""
        t, w = self.work
        return t // w, -(-t // w)

    def describe(self) -> str:
        cx = self.cluster[0]
        t, w = self.work
        head = f"grid {self.ctas:,} CTAs" + (f" = {self.ctas // cx:,} clusters of {cx}" if cx > 1 else "")
        head += f" ({t:,} tiles of {self.tile[0] * (cx if self.by_cluster else 1)} x {self.tile[1]}"
        if self.persistent:
            lo, hi = self.tiles_per_worker
            head += (f", {lo}-{hi} per {'cluster' if self.by_cluster else 'CTA'}; {GRID_KINDS[self.grid_kind]}; "
                     f"{self.sm_count} SMs ({self.sm_source})")
            if self.active_clusters:
                head += f", {self.active_clusters} clusters resident"
        return f"{head}), block {self.block[0]} threads, {self.smem:,} B dynamic SMEM"

    def as_dict(self) -> dict:
        return {"grid": list(self.grid), "block": list(self.block), "cluster": list(self.cluster), "smem": self.smem,
                "tiles": self.tiles, "grid_kind": self.grid_kind, "persistent": self.persistent,
                "sm_count": self.sm_count, "active_clusters": self.active_clusters}


def max_active_clusters(build, kernel: str, cfg: LaunchConfig, device_index: int = 0) -> int | None:
    """cuOccupancyMaxActiveClusters: how many clusters of this shape are resident at once (None if unknown).

    A persistent grid larger than that runs a second wave that doubles the time of its tiles; an SM
    whose GPC has no free partner for a multi-CTA cluster stays idle (CUDA Programming Guide,
    "Thread Block Clusters"; cudaOccupancyMaxActiveClusters). A kernel with __cluster_dims__ is
    asked with the same cluster shape (the query allows a compile-time shape if it matches).
    """
    from cuda.bindings import driver as drv   # the GPU path only; CPU machines never import it
    kern = launch.load_kernel(build.cubin, kernel, device_index, cfg.smem, cfg.cluster)
    c = drv.CUlaunchConfig()
    c.gridDimX, c.gridDimY, c.gridDimZ = cfg.grid
    c.blockDimX, c.blockDimY, c.blockDimZ = cfg.block
    c.sharedMemBytes = cfg.smem
    at = drv.CUlaunchAttribute()
    at.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = cfg.cluster
    c.attrs = [at]
    c.numAttrs = 1
    try:
        err, n = drv.cuOccupancyMaxActiveClusters(drv.CUfunction(int(kern.handle)), c)
    except Exception:
        return None
    return int(n) if int(err) == 0 else None


# ---- the stage ------------------------------------------------------------------------------------

def _key(path: Path) -> str:
    """'fp8/06_stages': the path under src/kernels (its first folder is the family, which picks the kind)."""
    if not path.is_relative_to(KERNELS):
        raise StageError(f"{path} is outside src/kernels: stage files live under src/kernels/<family>/ (the family "
                         "picks the kind that builds and runs it); copy the file there to run it")
    return str(path.relative_to(KERNELS).with_suffix(""))


class Stage:
    """A stage file built with `defines`: the one host path for every family (see the module's doc)."""

    def __init__(self, path: str | Path, defines: dict | None = None):
        p = stages.resolve(path if str(path).endswith(".cu") else f"{path}.cu")
        self.path = p
        self.key = _key(p)
        parts = self.key.split("/")
        self.family, self.name = parts[0], parts[-1]
        self.arch = ARCH_OF.get(self.family, "sm_100a")
        self.kind = kinds.of(self.family)
        self.defines = {k: v for k, v in sorted((defines or {}).items())}

    def __repr__(self) -> str:
        return f"Stage({self.key!r}{', ' + repr(self.defines) if self.defines else ''})"

    @property
    def label(self) -> str:
        """'06_stages NUM_STAGES=5': the name and the defines it was built with."""
        return self.name + ("" if not self.defines else " " + ",".join(f"{k}={v}" for k, v in self.defines.items()))

    def with_defines(self, **defines) -> "Stage":
        """The same stage with some defines added or changed."""
        return Stage(self.path, {**self.defines, **defines})

    def without_defines(self, *names: str) -> "Stage":
        """The same stage without the defines `names` (those it lacks are ignored)."""
        if not any(n in self.defines for n in names):
            return self
        return Stage(self.path, {k: v for k, v in self.defines.items() if k not in names})

    # ---- what the file says ----------------------------------------------------------------------
    @cached_property
    def source(self) -> str:
        return self.path.read_text()

    @cached_property
    def header(self) -> stages.Header:
        """The parsed header (pelib.stages.read_header): idea, parent, what, why, recorded, run."""
        return stages.read_header(self.path)

    @cached_property
    def parent(self) -> "Stage | None":
        return Stage(self.header.parent) if self.header.parent else None

    @cached_property
    def signature(self) -> list[tuple[str, str]]:
        """[(C type, name)] of the kernel's parameters, in order."""
        return parse_signature(self.source)[1]

    # ---- what the compiler says ------------------------------------------------------------------
    @cached_property
    def build(self) -> _build.Build:
        return _build.build(self.path, self.arch, self.defines)

    def timing_build(self) -> _build.Build:
        """The TIMING=1 build (clock64 records; pelib.timing decodes them)."""
        return _build.build(self.path, self.arch, {**self.defines, "TIMING": 1})

    @cached_property
    def exports(self) -> Exports:
        return Exports(self.build.exports)

    def check_compiles(self) -> str | None:
        """None if the stage compiles with its defines, else the kernel's static_assert message (or the error)."""
        try:
            self.build
        except _build.BuildError as e:
            m = re.search(r'static assertion failed with "([^"]+)"', str(e))
            if m:
                return m.group(1)
            # the head line ends in a colon: the compiler's first error line says what is wrong
            err = re.search(r"^\S+\(\d+\): (?:catastrophic )?error: .*$", str(e), re.M)
            head = str(e).splitlines()[0]
            return f"{head} {err.group(0).strip()}" if err else head
        return None

    def facts_row(self) -> dict:
        """Registers, spills, shared memory and the MMA instructions in the SASS (compiled)."""
        b, ex = self.build, self.exports
        f = b.facts
        return {"stage": self.label, "registers": f.registers, "spills (B)": f.spills, "stack (B)": f.stack,
                "smem (B)": ex.smem_bytes + f.smem_static, "smem limit (B)": ex.smem_limit,
                "threads": ex.num_threads, "tile": f"{ex.tile_m}x{ex.tile_n}x{ex.block_k}",
                "pipeline stages": ex.pipeline_stages, "epilogue warps": ex.epi_warps, "cluster": ex.cluster_x,
                "grid": GRID_KINDS[ex.grid_kind].split(":")[0], **self.kind.sass_facts(b)}

    # ---- launch --------------------------------------------------------------------------------
    def problem(self, problem="small"):
        """A problem of this stage's family by name ('small', 'full', ...) or as given; an unknown name is a
        StageError listing the names the family takes."""
        try:
            return self.kind.problem(problem)
        except KeyError:
            if not isinstance(problem, str):
                raise
            raise StageError(f"unknown problem {problem!r} for the {self.family} stages: one of "
                             f"{', '.join(self.kind.problem_names())}") from None

    def launch_config(self, problem="small", info: _device.DeviceInfo | None = None,
                      grid: int | None = None, sm_count: int | None = None) -> LaunchConfig:
        """Grid, block, cluster and shared memory from the exports; persistent grids are clamped to the
        clusters cuOccupancyMaxActiveClusters says are resident (on a GPU that runs the stage). `sm_count`
        sizes a persistent grid for that many SMs instead (no occupancy query)."""
        prob = self.problem(problem)
        ex = self.exports
        self.kind.check_problem(self, prob)
        self.kind.check_launch(self, prob)
        if ex.smem_bytes > ex.smem_limit:
            raise StageError(f"{self.label} needs {ex.smem_bytes:,} B of shared memory per block, more than the "
                             f"{ex.smem_limit:,} B it was checked against: fewer stages or smaller tiles")
        cx, tm, tn = ex.cluster_x, ex.tile_m, ex.tile_n
        info = info or _device.current()
        here = info.present and _device.can_run(self.arch, info)
        if sm_count:
            sms, src, here = int(sm_count), "given", False
        elif here:
            sms, src = info.sm_count, f"{info.name}, queried"
        else:
            gpu = TARGET_GPU[self.arch]
            sms, src = sol.spec(gpu).sms, f"{gpu}'s {sol.spec(gpu).sms} SMs assumed (none here)"
        nbs = prob.n // tn
        tiles = math.ceil(prob.m / (tm * cx)) * cx * nbs if ex.grid_kind != 2 else math.ceil(prob.m / tm) * nbs
        common = dict(block=(ex.num_threads, 1, 1), cluster=(cx, 1, 1), smem=ex.smem_bytes, tiles=tiles,
                      grid_kind=ex.grid_kind, cluster_in_kernel=bool(ex.cluster_in_kernel), sm_count=sms,
                      sm_source=src, tile=(tm, tn))
        if ex.grid_kind == 0:
            cfg = LaunchConfig(grid=self.kind.grid_dims(self, prob, tiles), unit=cx, **common)
        elif ex.grid_kind == 1:
            if sms < cx:
                raise StageError(f"{sms} SMs cannot hold one {cx}-CTA cluster")
            cfg = LaunchConfig(grid=(min(tiles, sms // cx * cx), 1, 1), unit=cx, **common)
        elif ex.grid_kind == 2:
            cfg = LaunchConfig(grid=(max(nbs, min(tiles, sms // nbs * nbs)), 1, 1), unit=nbs, **common)
        else:
            raise StageError(f"grid_kind={ex.grid_kind}: the vocabulary knows {sorted(GRID_KINDS)}")
        if cfg.persistent and here:
            active = max_active_clusters(self.build, self.build.kernel, cfg, info.ordinal)
            if active:   # one wave: never more clusters than can be resident
                cfg = replace(cfg, active_clusters=active,
                              grid=(max(cfg.unit, min(cfg.grid[0], active * cx // cfg.unit * cfg.unit)), 1, 1))
        if grid is not None:
            cfg = replace(cfg, grid=(grid, 1, 1))
        return cfg

    def tensor_map_specs(self, problem="small", tensors: dict | None = None) -> dict:
        """{param: pelib.tma.TensorMapSpec} for every CUtensorMap parameter, from the exported boxes (a
        kind may give a map of its own, e.g. sm90's permuted B). With `tensors`, bound to their addresses."""
        prob = self.problem(problem)
        self.kind.check_problem(self, prob)
        specs = {}
        for typ, name in self.signature:
            if not name.startswith("tmap_"):
                continue
            p = name[len("tmap_"):]
            own = self.kind.tensor_map(self, p, prob, tensors)
            if own is None:
                rows, cols, sw = self.exports.box(p)
                dtype, shape, t = self.kind.map_operand(self, p, prob, tensors)
                own = (tma.spec_from_tensor(t, (rows, cols), swizzle=sw) if t is not None
                       else tma.make_spec(dtype, shape, (rows, cols), swizzle=sw))
            specs[p] = own.validate()
        self.kind.check_maps(self, specs)
        return specs

    def args(self, problem, tensors: dict, maps: dict, timing=None) -> tuple:
        """The kernel's arguments, bound by parameter name: tmap_<p> -> maps[p], a pointer -> the tensor of
        that name (timing -> the TIMING buffer or null), a scalar -> the problem's M, N, K or the kind's
        value (e.g. NVFP4's alpha), with the C type's width."""
        prob = self.problem(problem)
        scalars = {"M": prob.m, "N": prob.n, "K": prob.k, **self.kind.scalars(self, prob, tensors)}
        alias = self.kind.TENSOR_ALIASES
        out = []
        for typ, name in self.signature:
            if name.startswith("tmap_"):
                if name[5:] not in maps:
                    raise StageError(f"{self.label}: no tensor map for parameter {name} (have {sorted(maps)})")
                out.append(maps[name[5:]])
            elif "*" in typ:
                if name == "timing":
                    out.append(timing)
                    continue
                key = alias.get(name, name)
                if key not in tensors:
                    raise StageError(f"{self.label}: parameter {name} needs tensors[{key!r}] (have {sorted(tensors)})")
                out.append(tensors[key])
            else:
                if typ not in _SCALARS:
                    raise StageError(f"{self.label}: parameter {typ} {name} has a type pelib does not bind")
                if name not in scalars:
                    raise StageError(f"{self.label}: no value for scalar parameter {typ} {name}")
                out.append(_SCALARS[typ](scalars[name]))
        return tuple(out)

    def plan(self, problem, tensors: dict, device: str = "gpu", timing=None, info=None, grid: int | None = None,
             spec_hook=None):
        """A checked launch on the GPU: pelib.launch.LaunchPlan (the simulator's is pelib.sim.host.plan).
        `spec_hook(specs) -> specs` may change the tensor maps first (a host-side change such as F21's L2
        promotion)."""
        if device != "gpu":
            raise StageError(f"device={device!r}: Stage.plan launches on 'gpu'" + (
                f"; plan a simulated launch with {SIM_PLAN}" if device == "sim" else ""))
        prob = self.problem(problem)
        # the inputs' shapes, dtypes, device and contiguity, on every back end: a kernel indexes them
        # densely from the problem's M, N and K, so a short or strided output is written past its end
        prob.validate(tensors, device=f"cuda:{(info or _device.current()).ordinal}")
        cfg = self.launch_config(prob, info=info, grid=grid)
        specs = self.hooked_specs(prob, tensors, spec_hook)
        maps = {k: tma.encode(s, owner=self.kind.map_owner(k, tensors)) for k, s in specs.items()}
        plan = launch.prepare(self.build if timing is None else self.timing_build(),
                              self.args(prob, tensors, maps, timing), grid=cfg.grid, block=cfg.block,
                              cluster=cfg.launch_cluster, smem=cfg.smem, kernel=self.build.kernel, info=info)
        plan.config = cfg
        return plan

    def hooked_specs(self, prob, tensors: dict, spec_hook=None) -> dict:
        """The tensor maps' specs bound to `tensors`, after `spec_hook(specs) -> specs` (if given), each checked
        to lie inside the tensor it is made over (tma.check_owner): the one place both back ends take them from."""
        specs = self.tensor_map_specs(prob, tensors)
        specs = spec_hook(specs) if spec_hook else specs
        for k, s in specs.items():
            tma.check_owner(s, self.kind.map_owner(k, tensors), k)
        return specs

    # ---- run -------------------------------------------------------------------------------------
    def inputs(self, problem="small", seed: int = 0, device: str = "gpu", info=None, exact: bool = False) -> dict:
        """The problem's seeded inputs (pelib.problems), on the GPU the stage runs on or on the CPU (sim);
        exact=True: small integers whose every sum and output are exact (the kind's exact_inputs), so the
        output must equal the reference, and every back end's output, bit for bit."""
        prob = self.problem(problem)
        where = "cpu" if device == "sim" else f"cuda:{(info or _device.current()).ordinal}"
        return self.kind.inputs(prob, seed, where, exact=exact)

    def check(self, problem, tensors: dict, ref=None) -> _verify.VerifyReport:
        """The output in tensors['out'] against the torch reference (tolerance from the formats and the
        inputs' finite maxima), with the stage's tile for locating bad tiles."""
        prob = self.problem(problem)
        ref = self.kind.reference(prob, tensors) if ref is None else ref
        return _verify.verify_gemm(tensors["out"], ref, **self.kind.tolerance_inputs(prob, tensors),
                                   tile=(self.exports.tile_m, self.exports.tile_n),
                                   label=f"{self.key} {self.label.split(' ', 1)[1] if self.defines else ''} "
                                         f"on {prob.name}".replace("  ", " "))

    def run(self, problem="small", device: str = "gpu", *, seed: int = 0, verify: bool = True,
            time: bool | Timed = True, inputs: dict | None = None, ref=None, launch: LaunchOptions | None = None) -> dict:
        """llm.c's order: poison the output, launch, verify against the torch reference, and only then time.

        device='gpu' launches through pelib.launch (the stage's GPU only), 'compile' only builds and configures
        (the simulator's run is pelib.sim.host.run, the timing model's pelib.predict.predict). `time` is True
        (Timed()'s defaults), False, or a Timed; `launch` (LaunchOptions) changes the tensor maps, enters a
        context around the launches, or sizes the grid. Returns a result dict with the launch config, the
        verification report, and the timing statistics (measured)."""
        if device not in ("gpu", "compile"):
            self.refuse(device, "Stage.run runs or compiles")
        prob = self.problem(problem)
        res = self.result_head(prob)
        if device == "compile":
            cfg = self.launch_config(prob)
            return {**res, "config": cfg, "launch": cfg.as_dict(), "facts": self.facts_row(),
                    "evidence": evidence_label(self.build)}
        lo = launch or LaunchOptions()
        timed = Timed() if time is True else time or None
        info = _device.require(self.arch)
        t = inputs if inputs is not None else self.inputs(prob, seed, device, info)
        plan = self.plan(prob, t, device, info=info, spec_hook=lo.spec_hook, grid=lo.grid)
        cfg = plan.config
        res.update(device=info.describe(), evidence=f"measured ({info.name})", config=cfg, launch=cfg.as_dict())
        with lo.hook(t) if lo.hook else _nothing():
            if verify:
                self.launch_verified(plan, prob, t, ref, res)
            if timed and res["ok"] is not False:
                times = bench.time_fn(plan.run, iters=timed.iters, warmup=timed.warmup, wait=plan.wait)
                r = bench.result(f"{self.key}", times, flops=prob.flops, bytes_moved=prob.min_bytes)
                res.update({k: r[k] for k in ("median_ms", "p10_ms", "p90_ms", "n", "tflops", "gbps") if k in r})
                res["ms"] = r["median_ms"]
        return res

    def refuse(self, device: str, what: str):
        """A StageError for a device this call does not run, naming the call that does."""
        if device in OFF_STAGE:
            raise StageError(f"{self.label}: {what}; device={device!r} is its own call: {OFF_STAGE[device]}")
        raise StageError(f"device={device!r}: one of {DEVICES}")

    def result_head(self, prob) -> dict:
        """The head of every run's result dict: the stage, its defines and problem, no verdict yet."""
        return {"stage": self.key, "label": self.label, "defines": dict(self.defines), "problem": prob.name,
                "ok": None}

    def launch_verified(self, plan, prob, tensors: dict, ref, res: dict, after=None) -> None:
        """The output poisoned, the plan launched and waited for, `after(plan)` (if given), then the output
        checked (self.check) into res: ok, verify, max_abs, n_bad."""
        _verify.poison(tensors["out"])
        plan.run()
        plan.wait()
        if after:
            after(plan)
        rep = self.check(prob, tensors, ref)
        res.update(ok=rep.ok, verify=rep, max_abs=rep.max_abs, n_bad=rep.n_bad)

    def run_timing(self, problem="small", device: str = "gpu", *, seed: int = 0, inputs: dict | None = None,
                   launch: LaunchOptions | None = None):
        """The TIMING=1 build launched once after a warm-up; its clock64 records decoded (pelib.timing)
        (the simulator's is pelib.sim.host.run_timing)."""
        if device != "gpu":
            raise StageError(f"device={device!r}: Stage.run_timing launches on 'gpu'" + (
                f"; a simulated TIMING run is {SIM_TIMING}" if device == "sim" else ""))
        lo = launch or LaunchOptions()
        prob = self.problem(problem)
        info = _device.require(self.arch)
        t = inputs if inputs is not None else self.inputs(prob, seed, device, info)
        cfg = self.launch_config(prob, info=info, grid=lo.grid)
        return self.timing_launch(t, cfg, lambda buf: self.plan(prob, t, device, timing=buf, info=info,
                                                                grid=cfg.grid[0], spec_hook=lo.spec_hook), lo.hook)

    def timing_launch(self, tensors: dict, cfg: LaunchConfig, plan_of, hook=None):
        """`cfg`'s grid of the TIMING=1 build, planned by plan_of(buffer), launched once after a warm-up; its
        records decoded (pelib.timing)."""
        lay = _timing.layout(self.timing_build(), cfg.ctas)
        buf = _timing.alloc(lay, device=tensors["out"].device)   # beside the inputs (the GPU's, or the CPU's for sim)
        plan = plan_of(buf)
        with hook(tensors) if hook else _nothing():
            plan.run()          # warm-up: caches, TLBs, the module load
            plan.wait()
            buf.zero_()
            plan.run()
            plan.wait()
        return _timing.decode(buf, lay)

    # ---- emulated ------------------------------------------------------------------------------
    def emulate_tile(self, inputs: dict, m0: int = 0, n0: int = 0, **kw):
        """One output tile at (m0, n0) as the stage computes it, from its exports (pelib.emulate and the
        kind's epilogue); with return_report=True also what the emulator found."""
        return self.kind.emulate_tile(self, inputs, m0, n0, **kw)

    def emulate_check(self, problem=None, tile=None, seed: int = 0, **kw) -> dict:
        """One tile (row block, column block; the family's default) emulated and compared with the torch
        reference (the verdict: within one ulp of the output format)."""
        return self.kind.emulate_check(self, problem, tile or self.kind.EMULATED_TILE, seed, **kw)

    # ---- what is recorded and measured about it ----------------------------------------------------------
    def recorded(self):
        """The lab's B200 record of this stage's idea (pelib.records), or None."""
        return records.stage_record(self.key, self.header.recorded or "", self.exports.get("pipeline_stages"))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def find(family: str, name: str, defines: dict | None = None) -> Stage:
    """A stage of `family` by number ('06', '08a'), file stem or path, with defines."""
    n = str(name).removesuffix(".cu").split("/")[-1]
    line = stages.family_stages(family)
    hits = [p for p in line if p.stem == n or p.stem.split("_")[0] == n]
    if len(hits) != 1:
        raise KeyError(f"no single {family} stage {name!r}; have {[p.stem for p in line]}")
    return Stage(hits[0], defines)


# ---- many stages ---------------------------------------------------------------------------------------

def all_stages(families=("nvfp4", "fp8", "sm90"), variants: bool = True) -> list[Stage]:
    """Every stage file of the families, in name order (and the go/no-go variants, whose parent is 09)."""
    out = []
    for fam in families:
        out += [Stage(p) for p in stages.family_stages(fam)]
        if variants and f"{fam}/variants" in stages.FAMILIES:
            out += [Stage(p) for p in stages.family_stages(f"{fam}/variants")]
    return out


def lineage(stage_list) -> Table:
    """One row per stage: its declared parent, its idea, and the code lines its diff against that parent
    changes (pelib.stages.diff_stats, header excluded; a block only re-indented does not count)."""
    rows = []
    for s in stage_list:
        d = stages.diff_stats(s.path, ignore_indent=True) if s.header.parent else None
        rows.append({"stage": s.name, "parent": (s.header.parent or "—").split("/")[-1], "idea": s.header.idea,
                     "changed lines": f"+{d['added']} / -{d['removed']}" if d else "—"})
    return Table(rows, "Each stage and its declared parent (the headers' Parent lines); changed lines counted in "
                       "the sources, headers excluded", descriptive=True)


def table(stage_list=None, measured: dict | None = None, chips=("h100", "h200")) -> Table:
    """One row per stage: idea, parent, registers, shared memory (compiled), the lab's B200 record, the
    newest committed H100 and H200 times and their share of cuBLAS's GEMM in the same run (measured)."""
    rows = []
    measured = measured if measured is not None else results.stage_times()
    for s in stage_list or all_stages():
        f = s.build.facts
        rec = s.recorded()
        row = {"stage": s.key, "idea": s.header.idea, "parent": (s.header.parent or "—").split("/")[-1],
               "registers": f.registers, "smem (KiB)": f"{(s.exports.smem_bytes + f.smem_static) / 1024:.1f}",
               "recorded B200": rec.describe() if rec else "—"}
        for c in chips:
            m = measured.get(s.key, {}).get(c)
            row[f"{c.upper()} ms"] = f"{m['ms']:.3f} ({m['date']})" if m else ""
            row[f"{c.upper()} % of cuBLAS"] = f"{100 * m['cublas_ms'] / m['ms']:.0f}%" if m and m.get("cublas_ms") else ""
        rows.append(row)
    return Table(rows, f"Stages — registers and SMEM {evidence_label(dated=False)}; recorded B200 (lab notes); H100/H200 "
                       "measured where a committed run (results/) has the stage at its defaults, with cuBLAS's GEMM-only "
                       "time of the same run as the reference of the % column")


# ---- the command line ---------------------------------------------------------------------------------

def _defines(items) -> dict:
    """-D K=v as {K: v}; -D K alone is 1 (the compiler's -DK), -D K= with nothing after it is refused."""
    out = {}
    for it in items or []:
        k, eq, v = it.partition("=")
        if not k.strip():
            raise StageError(f"-D {it!r} names no define: give -D NAME=VALUE, e.g. -D NUM_STAGES=4")
        if eq and not v.strip():
            raise StageError(f"-D {it!r} gives {k} no value: give one (-D {k}=4) or write -D {k} for 1")
        out[k] = int(v) if re.fullmatch(r"-?\d+", v) else (v or 1)
    return out


def _sweep(spec: str | None) -> list[dict]:
    """--sweep K=a,b,c as one {K: value} per position; a spec without a define or a value is refused (an empty
    value would build the macro as nothing)."""
    if not spec:
        return [{}]
    k, _, vals = spec.partition("=")
    fix = f"give the define and its values, e.g. --sweep {k.strip() or 'NUM_STAGES'}=2,3,4"
    if not k.strip():
        raise StageError(f"--sweep {spec!r} names no define: {fix}")
    if not vals.strip():
        raise StageError(f"--sweep {spec!r} lists no values: {fix}")
    if any(not v.strip() for v in vals.split(",")):
        raise StageError(f"--sweep {spec!r} has an empty value: {fix}")
    return [{k: int(v) if re.fullmatch(r"-?\d+", v) else v} for v in vals.split(",")]


def trace_paths(path: str | None, positions: list[dict]) -> list[str | None]:
    """--trace's file for each --sweep position: the path itself for one run, else one file per position named
    by it (the position, as -NUM_STAGES=2, before the path's suffix), so no run overwrites another's trace."""
    if not path:
        return [None] * len(positions)
    if len(positions) == 1:
        return [path]
    p = Path(path)
    out = [str(p.with_name(f"{p.stem}-{','.join(f'{k}={v}' for k, v in d.items())}{p.suffix or '.json'}"))
           for d in positions]
    twice = sorted({o for o in out if out.count(o) > 1})
    if twice:
        raise StageError(f"--sweep lists a position twice, so --trace would write {twice[0]} twice: list each value "
                         "once")
    return out


def parser() -> argparse.ArgumentParser:
    """The command line's arguments (main parses them; the first-hour page's test parses its commands)."""
    ap = argparse.ArgumentParser(prog="python -m pelib.stage", description="Build, run, verify and time one stage.")
    ap.add_argument("stage", nargs="?", help="family/name, e.g. fp8/06_stages (omit with --table)")
    ap.add_argument("-D", dest="defines", action="append", metavar="K=V", help="a define (repeatable)")
    ap.add_argument("--sweep", metavar="K=a,b,c", help="build and run once per value of one define")
    ap.add_argument("--problem", default=None,
                    help="small, full, or a family problem name (default: small; sim with --device sim)")
    ap.add_argument("--device", default=None, choices=DEVICES,
                    help="gpu (measured), sim (simulated), predict (predicted time) or compile (facts only); "
                         "default: gpu where it runs")
    ap.add_argument("--gpu", default=None, help="--device predict (default: h100 for sm90, b200 for the rest): the GPU whose calibration prices the "
                    "stage (h100, h200, b200)")
    ap.add_argument("--calibration", default=None, help="--device predict: a calibration JSON file "
                    "(default: the GPU's committed one)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--sim-seed", type=lambda v: int(v) if v.lstrip("-").isdigit() else v, default=None,
                    help="the simulator's scheduler seed: an integer, or lazy / eager (--device sim; default 0)")
    ap.add_argument("--grid", type=_ctas, default=None, metavar="CTAS",
                    help="CTAs of a persistent grid (default: one wave on the GPU, the kind's few SMs on sim)")
    ap.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace (Perfetto) of a TIMING run (gpu) or of "
                    "the simulator's event log (sim); with --sweep, one file per position (-K=V before the suffix)")
    ap.add_argument("--table", action="store_true",
                    help="one row per stage file (idea, parent, facts, results) as a Markdown table")
    return ap


def _ctas(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v!r} is not a number of CTAs: give a positive integer (a persistent "
                                         "grid's resident CTAs, a multiple of its cluster)")
    return n


def _no_stage(name: str, err: FileNotFoundError) -> str:
    """Why a command-line stage name finds no stage file: a family (its files listed), else the close names."""
    fam = name.strip("/")
    if fam in stages.FAMILIES:
        files = [p.stem for p in stages.family_stages(fam)]
        return (f"{name} is a family, not a stage: name one of its stage files, e.g. {fam}/{files[0]} (it has "
                f"{', '.join(files)}); --table lists every stage")
    if "ambiguous" in str(err):   # resolve's own message lists the files it could mean
        return str(err)
    keys = [str(p.relative_to(KERNELS).with_suffix("")) for p in stages.all_stages()]
    n = name.removesuffix(".cu")
    near = difflib.get_close_matches(n, keys, n=3, cutoff=0.75)
    if not near:   # a bare file name: compared with the files' names
        stems = difflib.get_close_matches(Path(n).name, [Path(k).name for k in keys], n=3, cutoff=0.75)
        near = [k for k in keys if Path(k).name in stems]
    hint = f"; did you mean {' or '.join(near)}?" if near else "; --table lists every stage"
    return f"no stage file {name!r} under src/kernels{hint}"


def main(argv=None, runners: dict | None = None) -> int:
    """python -m pelib.stage. `runners` {device: fn(stage, args, trace) -> result dict, or a bool once it has
    printed its own} runs a device Stage does not: pelib.sim.host.main passes 'sim', pelib.predict.host.main 'predict'."""
    ap = parser()
    a = ap.parse_args(argv)

    def refuse(msg: str):   # one line and exit status 2, as ap.error but without its usage block
        ap.exit(2, f"{ap.prog}: error: {msg}\n")
    if a.table:
        given = [f for f, v in (("-D", a.defines), ("--device", a.device), ("--sweep", a.sweep)) if v]
        if given:   # the table is of the files at their defaults: a flag it does not read is refused, not dropped
            ap.error(f"--table lists every stage file at its defaults and reads no {'/'.join(given)}: drop "
                     f"{'them' if len(given) > 1 else 'it'}, or run the stage itself")
        print(table([Stage(a.stage)] if a.stage else None).to_markdown(), end="")
        return 0
    if not a.stage:
        ap.error("name a stage (family/name) or pass --table")
    try:
        base = Stage(a.stage, _defines(a.defines))
        positions = _sweep(a.sweep)
    except (FileNotFoundError, StageError) as e:
        refuse(_no_stage(a.stage, e) if isinstance(e, FileNotFoundError) else str(e))
    device = a.device or ("gpu" if _device.can_run(base.arch) else "compile")
    swept = set(positions[0]) if a.sweep else set()
    if swept & set(base.defines):
        ap.error(f"-D {', '.join(sorted(swept & set(base.defines)))} and --sweep set the same define: the sweep's "
                 "values would replace it; give it in one of them")
    if a.sim_seed is not None and device != "sim":
        ap.error(f"--sim-seed picks the simulator's interleaving: --device sim reads it, --device {device} does not")
    if a.grid is not None and device == "predict":
        ap.error("--grid sizes a run's persistent grid: --device predict launches the grid the GPU would "
                 "(its resident clusters), so it reads no --grid")
    if device != "predict" and (a.gpu or a.calibration):
        ap.error(f"--gpu / --calibration choose the costs of a prediction: --device {device} reads neither "
                 "(add --device predict)")
    if a.problem is None:   # the simulator's default is its family's test size
        a.problem = {"sim": "sim", "predict": "full"}.get(device, "small")
    try:
        base.problem(a.problem)
    except StageError as e:
        refuse(f"--problem: {e}")
    try:
        traces = trace_paths(a.trace, positions)
    except StageError as e:
        ap.error(str(e))
    for t in filter(None, traces):   # before the run: a simulation or a prediction takes a while
        try:
            _timing.check_trace_path(t)
        except _timing.TraceWriteError as e:
            refuse(f"--trace: {e}")
    if device in OFF_STAGE and device not in (runners or {}):
        # the simulator and the timing model stand above Stage (they run it), so their command line is
        # their host module's (pelib.sim.host, pelib.predict.host): the same arguments, in a process of its own
        return subprocess.call([sys.executable, "-m", HANDED_OVER[device], *(sys.argv[1:] if argv is None else argv)])
    print(_device.banner_text(base.arch))
    ok = True
    for d, trace in zip(positions, traces):
        s = base.with_defines(**d)
        why = s.check_compiles()
        if why:
            print(f"{s.label}: does not compile: {why}")
            ok = False
            continue
        print(Table([s.facts_row()], f"{s.key} — {evidence_label(s.build)}"))
        if device in OFF_STAGE:
            try:
                res = runners[device](s, a, trace)
            except _timing.TraceWriteError as e:   # a runner that writes its own trace (a prediction)
                print(f"--trace: {e}")
                ok = False
                continue
            except (kinds.KindError, _problems.ProblemError, StageError) as e:   # a problem the build does not take
                print(f"refused: {e}")
                ok = False
                continue
            if isinstance(res, bool):   # it printed its own report (a prediction) or its refusal
                ok &= res
                continue
        else:
            try:
                res = s.run(a.problem, device, time=Timed(iters=a.iters), launch=LaunchOptions(grid=a.grid))
            # a launch no GPU takes, a problem the build's tiles do not take
            except (launch.LaunchError, kinds.KindError, _problems.ProblemError, StageError) as e:
                print(f"refused: {e}")
                ok = False
                continue
        if res.get("config") is not None:
            print(f"launch on {res['problem']}: {res['config'].describe()}")
        if "verify" in res:
            print(res["verify"])
            ok &= bool(res["ok"])
        if res.get("ms") is not None:
            print(f"{res['label']}: median {res['ms']:.4f} ms [p10 {res['p10_ms']:.4f}, p90 {res['p90_ms']:.4f}], "
                  f"{res.get('tflops', 0):.1f} TFLOPS — {res['evidence']}")
        if trace:
            ok &= _write_trace(s, a.problem, device, res, trace)
    return 0 if ok else 1


def _write_trace(s: Stage, problem, device: str, res: dict, path: str) -> bool:
    """--trace: Chrome trace JSON (pelib.timing.chrome_trace) of a TIMING run's clock64 records (gpu;
    the decoded records are saved beside it as <path>.records.npz) or of the simulator's events (sim)."""
    if device == "gpu":
        if res.get("ok") is False:
            print(f"--trace: {s.label} did not verify: no TIMING run")
            return False
        env = bench.environment(_device.current())
        tm = s.run_timing(problem)
        meta = {"stage": s.key + (" " + s.label.split(" ", 1)[1] if s.defines else ""), "problem": s.problem(problem).name,
                "device": env["device"], "date": env["date"], "git": env["git"], "driver": env.get("driver_version"),
                "sm_clock_max_khz": env.get("sm_clock_max_khz"), "timing_build": "TIMING=1",
                "wait_kind": s.timing_build().exports.get("wait_kind")}
        try:
            tm.save(path + ".records.npz", **meta)
            _timing.chrome_trace(tm, path, **{k: meta[k] for k in ("stage", "device", "date", "git")})
        except OSError as e:
            print(f"--trace: {_timing.unwritable(path, e)}")
            return False
        print(f"wrote {path} (measured clock64, {tm.layout.ctas} CTAs) and {path}.records.npz")
        return True
    if device == "sim":
        events = res.get("events")
        if events is None:
            events = getattr(res.get("report"), "events", None)
        if events is None:
            print("--trace: the simulator returned no event log")
            return False
        try:
            _timing.chrome_trace(events, path, stage=s.key + (" " + s.label.split(" ", 1)[1] if s.defines else ""),
                                 device=res.get("device", "pelib.sim (CPU model)"),
                                 date=clock.today().isoformat(),
                                 git=bench.git_revision())
        except _timing.TraceWriteError as e:
            print(f"--trace: {e}")
            return False
        print(f"wrote {path} (simulated order, not time)")
        return True
    print("--trace needs --device gpu (a TIMING run's clock64 records) or --device sim (the event log)")
    return False


if __name__ == "__main__":
    sys.exit(main())
