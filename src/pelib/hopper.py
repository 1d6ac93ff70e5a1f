"""The sm_90a Hopper twin: its stages, tensor maps, launch shape, verification and timing.

Every stage in src/kernels/sm90/ has one kernel signature,

    patch_embed_sm90(tmap_a, tmap_b, tmap_c, comb, c, M, N, K, timing)

and publishes its layout through PELIB_EXPORT (block_m, block_n, box_*, stages, consumers,
cluster_m, persistent, smem_bytes...). This module reads those exports, so the host side never
repeats a number the kernel was compiled with: `launch_config` gives grid, block, cluster and shared
memory; `tensor_specs` the three TMA maps (checked on any machine); `run` verifies then times a stage
on an H100/H200. `stage_table` shows the compiled facts of every stage (any machine).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

ARCH = "sm_90a"
KERNEL = "patch_embed_sm90"
H100_SMS = 132  # H100 SXM; the live path reads the device instead


@dataclass(frozen=True)
class Stage:
    """One numbered stage: its file and the idea it adds."""

    key: str
    path: str               # relative to src/kernels
    idea: str
    defaults: dict = field(default_factory=dict)  # the defines it is measured with unless told

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1].removesuffix(".cu")


STAGES: dict[str, Stage] = {s.key: s for s in (
    Stage("00", "sm90/00_tma_wgmma.cu", "TMA + wgmma m64n128k32, one warpgroup, no pipeline"),
    Stage("01", "sm90/01_warp_specialized.cu", "producer warp + 2 consumer warpgroups, mbarrier ring, setmaxnreg"),
    Stage("02", "sm90/02_persistent_cluster.cu", "persistent tile scheduler, (2,1,1) cluster, B multicast"),
    Stage("03", "sm90/03_staged_epilogue.cu", "epilogue through SMEM + TMA store, overlapped with the next tile"),
)}


def stage(key_or_name: str) -> Stage:
    """A stage by key ('01') or file stem ('01_warp_specialized')."""
    for s in STAGES.values():
        if key_or_name in (s.key, s.name, s.path):
            return s
    raise KeyError(f"unknown sm90 stage {key_or_name!r}; have {[s.name for s in STAGES.values()]}")


def available() -> list[Stage]:
    """The stages whose source file exists (the chapter and sweeps skip the rest)."""
    from .paths import KERNELS
    return [s for s in STAGES.values() if (KERNELS / s.path).exists()]


def build(key: str, defines: dict | None = None, *, timing: bool = False):
    """Compile a stage for sm_90a with its default defines, overridden by `defines`."""
    from . import build as _build
    s = stage(key)
    d = dict(s.defaults)
    d.update(defines or {})
    if timing:
        d["TIMING"] = 1
    return _build.build(s.path, ARCH, d)


# ---- launch shape -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchConfig:
    """Grid (CTAs), block, cluster and dynamic shared memory of one stage on one problem."""

    grid: int
    block: int
    cluster: tuple[int, int, int]
    smem: int
    tiles: int              # output tiles of block_m x block_n
    persistent: bool

    def as_dict(self) -> dict:
        return {"grid": self.grid, "block": self.block, "cluster": list(self.cluster), "smem": self.smem,
                "tiles": self.tiles, "persistent": self.persistent}


class ShapeError(ValueError):
    """The problem does not fit a stage's tile (N or K not a multiple of the block)."""


def launch_config(b, problem, sm_count: int = H100_SMS) -> LaunchConfig:
    """Launch shape from a build's exports: one CTA per tile, or a persistent grid of whole clusters."""
    ex = b.exports
    bm, bn, bk = ex["block_m"], ex["block_n"], ex["block_k"]
    if problem.n % bn or problem.k % bk:
        raise ShapeError(f"{problem.name}: N={problem.n}, K={problem.k} must be multiples of the stage's "
                         f"block_n={bn} and block_k={bk}; pick a stage variant with BLOCK_N dividing N")
    cl = int(ex.get("cluster_m", 1))
    m_blocks = math.ceil(problem.m / (bm * cl)) * cl   # whole clusters; TMA zero-fills rows past M
    tiles = m_blocks * (problem.n // bn)
    persistent = bool(ex.get("persistent", 0))
    if persistent:
        grid = min(tiles, (sm_count // cl) * cl)
    else:
        grid = tiles
    return LaunchConfig(grid=grid, block=int(ex["num_threads"]), cluster=(cl, 1, 1),
                        smem=int(ex["smem_bytes"]), tiles=tiles, persistent=persistent)


def tensor_specs(b, problem, addresses: dict | None = None) -> dict:
    """The TMA maps of A, B and C as pelib.tma specs, boxes and swizzles read from the build."""
    from . import tma
    ex = b.exports
    addr = addresses or {}
    kb = ex["box_k_bytes"]
    a = tma.make_spec("float8_e4m3fn", (problem.m, problem.k), (ex["box_a_rows"], kb),
                      swizzle=ex["swizzle_bytes"], address=addr.get("a", 0))
    bb = tma.make_spec("float8_e4m3fn", (problem.n, problem.k), (ex["box_b_rows"], kb),
                       swizzle=ex["swizzle_bytes"], address=addr.get("b", 0))
    c = tma.make_spec("bfloat16", (problem.m, problem.n), (ex["box_c_rows"], ex["box_c_cols"]),
                      swizzle=ex.get("swizzle_c", 128), address=addr.get("c", 0))
    return {"a": a.validate(), "b": bb.validate(), "c": c.validate()}


# ---- on the GPU -------------------------------------------------------------------------------

def _args(b, problem, t: dict, timing_buf=None) -> tuple:
    """Encoded maps and packed scalars in the order of the shared signature."""
    import numpy as np
    from . import tma
    specs = tensor_specs(b, problem, {"a": t["a"].data_ptr(), "b": t["b"].data_ptr(),
                                      "c": t["out"].data_ptr()})
    maps = {k: tma.encode(v, owner=t["out" if k == "c" else k]) for k, v in specs.items()}
    return (maps["a"], maps["b"], maps["c"], t["comb"], t["out"], np.int32(problem.m),
            np.int32(problem.n), np.int32(problem.k), timing_buf)


def max_active_clusters(b, cfg: LaunchConfig, device_index: int = 0) -> int | None:
    """cuOccupancyMaxActiveClusters: how many clusters of this shape are resident at once (None if unknown).

    A persistent grid larger than that runs a second wave that doubles the time of its tiles; an SM
    whose GPC has no free partner for a 2-CTA cluster stays idle (CUDA Programming Guide,
    "Thread Block Clusters"; cudaOccupancyMaxActiveClusters).
    """
    from cuda.bindings import driver as drv
    from . import launch
    kern = launch.load_kernel(b.cubin, KERNEL, device_index, cfg.smem, cfg.cluster)
    c = drv.CUlaunchConfig()
    c.gridDimX, c.gridDimY, c.gridDimZ = cfg.grid, 1, 1
    c.blockDimX, c.blockDimY, c.blockDimZ = cfg.block, 1, 1
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


class Runner:
    """A stage bound to one problem's tensors on the GPU: launch it, time it."""

    def __init__(self, b, problem, tensors: dict, timing_buf=None, grid: int | None = None):
        from dataclasses import replace
        from . import device, launch
        self.build, self.problem, self.t = b, problem, tensors
        info = device.current()
        cfg = launch_config(b, problem, info.sm_count or H100_SMS)
        self.active_clusters = None
        if cfg.persistent:
            self.active_clusters = max_active_clusters(b, cfg, info.ordinal)
            if self.active_clusters:  # one wave: never more clusters than can be resident
                cfg = replace(cfg, grid=min(cfg.grid, self.active_clusters * cfg.cluster[0]))
        if grid is not None:
            cfg = replace(cfg, grid=grid)
        self.cfg = cfg
        self.plan = launch.prepare(b, _args(b, problem, tensors, timing_buf), grid=self.cfg.grid,
                                   block=self.cfg.block, cluster=self.cfg.cluster, smem=self.cfg.smem)

    def __call__(self):
        self.plan.run()

    def wait(self, timeout_s: float = 30.0):
        self.plan.wait(timeout_s)


def make_tensors(problem, seed: int = 0, device: str = "cuda") -> dict:
    """Inputs drawn by pelib.problems (CPU draw, same bits everywhere), on the GPU."""
    return problem.make_inputs(seed=seed, device=device)


def reference(problem, t: dict):
    """The torch reference output for tensors t (on their device)."""
    from .reference import patch_embed_reference
    return patch_embed_reference(t["a"], t["b"], t["comb"])


def check(b, problem, t: dict, ref, label: str = ""):
    """pelib.verify's report for the output in t["out"] against ref, tiles of the stage's block."""
    from . import verify as _verify
    return _verify.verify_gemm(t["out"], ref, K=problem.k, a_absmax=float(t["a"].float().abs().max()),
                               b_absmax=float(t["b"].float().abs().max()),
                               tile=(b.exports["block_m"], b.exports["block_n"]), label=label)


def verify(key: str, problem, defines: dict | None = None, *, seed: int = 0, tensors=None, ref=None):
    """Poison the output with NaN, run the stage once, compare with the torch reference (a VerifyReport)."""
    from . import verify as _verify
    b = build(key, defines)
    t = tensors if tensors is not None else make_tensors(problem, seed)
    if ref is None:
        ref = reference(problem, t)
    _verify.poison(t["out"])
    r = Runner(b, problem, t)
    r()
    r.wait()
    return check(b, problem, t, ref, label=f"{stage(key).name} {_define_text(defines)} on {problem.name}")


def _define_text(defines) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((defines or {}).items())) or "defaults"


def time_runner(fn, *, iters: int = 20, warmup: int = 3) -> dict:
    """pelib.bench statistics of fn() (CUDA events, L2 flushed before each run)."""
    from . import bench
    return bench.stats(bench.time_fn(fn, iters=iters, warmup=warmup))


def derived(problem, ms: float, copy_gb_s: float | None = None) -> dict:
    """TFLOPS, GB/s of minimum traffic, and the fraction of the memory floor at the copy bandwidth."""
    d = {"tflops": problem.flops / (ms * 1e-3) / 1e12, "gbps": problem.min_bytes / (ms * 1e-3) / 1e9}
    if copy_gb_s:
        floor_ms = problem.min_bytes / (copy_gb_s * 1e9) * 1e3
        d.update(floor_ms=floor_ms, floor_frac=floor_ms / ms)
    return d


def run(key: str, problem, defines: dict | None = None, *, seed: int = 0, iters: int = 20,
        tensors=None, ref=None) -> dict:
    """Verify a stage on `problem`, then time it (only when it verified); 'measured' evidence."""
    from . import device
    from . import verify as _verify
    info = device.require(ARCH)
    b = build(key, defines)
    t = tensors if tensors is not None else make_tensors(problem, seed)
    if ref is None:
        ref = reference(problem, t)
    r = Runner(b, problem, t)
    _verify.poison(t["out"])
    r()
    r.wait()
    rep = check(b, problem, t, ref, label=f"{stage(key).name} {_define_text(defines)} on {problem.name}")
    res = {"stage": stage(key).name, "defines": dict(defines or {}), "problem": problem.name,
           "ok": rep.ok, "verify": str(rep), "max_abs": rep.max_abs, "n_bad": rep.n_bad,
           "device": info.name, "evidence": f"measured ({info.name})",
           "launch": {**r.cfg.as_dict(), "active_clusters": r.active_clusters}}
    if rep.ok:
        res.update(time_runner(r, iters=iters))
        res.update(derived(problem, res["median_ms"]))
    return res


def clock_breakdown(key: str, problem, defines: dict | None = None, *, seed: int = 0, tensors=None):
    """Run a TIMING build once and decode its clock64 records (pelib.timing.Timing)."""
    from . import timing as _timing
    b = build(key, defines, timing=True)
    t = tensors if tensors is not None else make_tensors(problem, seed)
    probe = Runner(b, problem, t)          # the launch shape (grid after the occupancy query)
    lay = _timing.layout(b, probe.cfg.grid)
    buf = _timing.alloc(lay)
    r = Runner(b, problem, t, timing_buf=buf, grid=probe.cfg.grid)
    r()
    r.wait()
    return _timing.decode(buf, lay)


# ---- compiled facts ---------------------------------------------------------------------------

# The SASS opcodes that say the FP8 path is the one we meant (nvdisasm names FP8 wgmma QGMMA).
SASS_WATCH = ("QGMMA", "WARPGROUP", "UTMALDG", "UTMASTG", "UBLKCP", "SYNCS", "USETMAXREG", "STS", "STG",
              "LDS", "LDG", "BAR")


def stage_facts(key: str, defines: dict | None = None) -> dict:
    """Compiled facts of one stage: registers, spills, shared memory, tile, SASS counts."""
    b = build(key, defines)
    f, ex, h = b.facts, b.exports, b.histogram
    return {"stage": stage(key).name, "defines": dict(defines or {}), "registers": f.registers,
            "spills": f.spills, "stack": f.stack, "smem": ex["smem_bytes"] + f.smem_static,
            "threads": ex["num_threads"], "tile": f"{ex['block_m']}x{ex['block_n']}x{ex['block_k']}",
            "stages": ex["stages"], "consumers": ex["consumers"], "cluster": ex.get("cluster_m", 1),
            "persistent": bool(ex.get("persistent", 0)),
            "producer_regs": ex.get("producer_regs", "-"), "consumer_regs": ex.get("consumer_regs", "-"),
            **{op: h.get(op, 0) for op in ("QGMMA", "UTMALDG", "UTMASTG", "STG", "STS")}}


def stage_table(variants=None):
    """A table (compiled evidence) of every available stage, or of (key, defines) pairs."""
    from .facts import Table, evidence_label
    variants = variants or [(s.key, None) for s in available()]
    rows = [stage_facts(k, d) for k, d in variants]
    first = build(variants[0][0], variants[0][1])
    return Table(rows, f"sm90 stages — {evidence_label(first)}")
