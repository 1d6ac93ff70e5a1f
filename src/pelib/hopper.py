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
    Stage("04", "sm90/04_pingpong_resident_b.cu",
          "B resident in SMEM, ping-pong consumer warpgroups, 16-B register epilogue, A prefetched to L2"),
    Stage("05", "sm90/05_multicast_a.cu",
          "04 + the column blocks of a row group as one (3,1,1) cluster, A multicast to all three"),
    Stage("06", "sm90/06_permuted_b.cu",
          "04 + B rows permuted (5-D TMA view): accumulators hold 8 contiguous columns, no epilogue shuffles"),
    Stage("07", "sm90/07_comb_resident.cu",
          "06 + tiles in comb-residue order: a warpgroup keeps its comb rows in registers across tiles"),
    Stage("08", "sm90/08_comb_init.cu",
          "07 + accumulators start from comb: the epilogue only converts and stores"),
    Stage("09", "sm90/09_multicast_pairs.cu",
          "07 with 192-column blocks, a 10-stage A ring, and A multicast to (2,1,1) cluster pairs"),
    Stage("10", "sm90/10_unrolled_kloop.cu",
          "06 + K loop unrolled: compile-time B descriptors, one 32-bit add for A's, nothing else per slice"),
    Stage("11", "sm90/11_a_half_slices.cu",
          "06 + A ring of 64-byte K pieces (SW64), 8 stages of 4 KiB: the consumer holds half as much"),
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
    """Launch shape from a build's exports: one CTA per tile, a persistent grid of whole clusters, or
    (resident_b) a persistent grid of whole column blocks, each CTA holding one block of B."""
    ex = b.exports
    bm, bn, bk = ex["block_m"], ex["block_n"], ex["block_k"]
    if problem.n % bn or problem.k % bk or problem.k % ex.get("box_k_bytes", bk):
        raise ShapeError(f"{problem.name}: N={problem.n}, K={problem.k} must be multiples of the stage's "
                         f"block_n={bn} and block_k={bk}; pick a stage variant with BLOCK_N dividing N")
    if "max_k" in ex and problem.k > ex["max_k"]:
        raise ShapeError(f"{problem.name}: K={problem.k} exceeds the resident B of this build "
                         f"(max_k={ex['max_k']}); build it with K_MAX={problem.k} if the shared memory allows")
    block, smem = int(ex["num_threads"]), int(ex["smem_bytes"])
    if ex.get("resident_b", 0):
        nbs = problem.n // bn
        cl = int(ex.get("cluster_n", 1))
        if cl > 1 and ex.get("cluster_split", 0) and nbs % cl:
            raise ShapeError(f"{problem.name}: this build's clusters hold CLUSTER_N={cl} column blocks, which "
                             f"does not divide the {nbs} blocks of block_n={bn} in N={problem.n}; build it with "
                             f"a CLUSTER_N dividing {nbs}")
        if cl > 1 and not ex.get("cluster_split", 0) and cl != nbs:
            raise ShapeError(f"{problem.name}: this build's cluster holds CLUSTER_N={cl} column blocks, but "
                             f"N={problem.n} has {nbs} of block_n={bn}; build it with CLUSTER_N={nbs}")
        tiles = math.ceil(problem.m / bm) * nbs
        grid = max(nbs, min(tiles, (sm_count // nbs) * nbs))
        return LaunchConfig(grid=grid, block=block, cluster=(cl, 1, 1), smem=smem, tiles=tiles, persistent=True)
    cl = int(ex.get("cluster_m", 1))
    m_blocks = math.ceil(problem.m / (bm * cl)) * cl   # whole clusters; TMA zero-fills rows past M
    tiles = m_blocks * (problem.n // bn)
    persistent = bool(ex.get("persistent", 0))
    if persistent:
        grid = min(tiles, (sm_count // cl) * cl)
    else:
        grid = tiles
    return LaunchConfig(grid=grid, block=block, cluster=(cl, 1, 1), smem=smem, tiles=tiles, persistent=persistent)


def grid_unit(b, problem) -> int:
    """CTAs a persistent grid must be a multiple of: the cluster, or the column blocks of a resident-B stage."""
    ex = b.exports
    if ex.get("resident_b", 0):
        return problem.n // ex["block_n"]
    return int(ex.get("cluster_m", 1))


def permuted_b_spec(n: int, k: int, box_rows: int, box_k: int, swizzle: int, address: int = 0):
    """B [N, K] as the 5-D view of stages 06+: torch order (g, u, q, c, k) with element strides
    (32K, 2K, 8K, K, 1), so B row 32g + 8q + 2u + c is element (g, u, q, c). A box
    (box_rows/32, 4, 4, 2, box_k) lands in shared memory with k fastest, then c, q, u, g: shared row
    c + 2q + 8u + 32g holds B row 32g + 8q + 2u + c (q and u swapped inside each 32-row group)."""
    from . import tma
    if n % 32 or box_rows % 32:
        raise ShapeError(f"the permuted B view needs N ({n}) and the box ({box_rows} rows) in 32-row groups")
    return tma.make_spec("float8_e4m3fn", (n // 32, 4, 4, 2, k), (box_rows // 32, 4, 4, 2, box_k),
                         strides=(32 * k, 2 * k, 8 * k, k, 1), swizzle=swizzle, address=address)


def permuted_b_rows(box_rows: int) -> list[int]:
    """The B row (relative to the box) that each shared-memory row of a permuted box holds."""
    return [32 * g + 8 * q + 2 * u + c for g in range(box_rows // 32) for u in range(4)
            for q in range(4) for c in range(2)]


def tensor_specs(b, problem, addresses: dict | None = None) -> dict:
    """The TMA maps of A, B and C as pelib.tma specs, boxes and swizzles read from the build."""
    from . import tma
    ex = b.exports
    addr = addresses or {}
    kb = ex["box_k_bytes"]
    a = tma.make_spec("float8_e4m3fn", (problem.m, problem.k), (ex["box_a_rows"], ex.get("box_a_k_bytes", kb)),
                      swizzle=ex.get("swizzle_a_bytes", ex["swizzle_bytes"]), address=addr.get("a", 0))
    if ex.get("b_perm_tma", 0):
        bb = permuted_b_spec(problem.n, problem.k, ex["box_b_rows"], kb, ex["swizzle_bytes"], addr.get("b", 0))
    else:
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
                unit = grid_unit(b, problem)
                resident = self.active_clusters * cfg.cluster[0]
                cfg = replace(cfg, grid=max(unit, min(cfg.grid, resident // unit * unit)))
        if grid is not None:
            cfg = replace(cfg, grid=grid)
        self.cfg = cfg
        self.plan = launch.prepare(b, _args(b, problem, tensors, timing_buf), grid=self.cfg.grid,
                                   block=self.cfg.block, cluster=self.cfg.cluster, smem=self.cfg.smem)

    def __call__(self):
        self.plan.run()

    def wait(self, timeout_s: float = 30.0):
        self.plan.wait(timeout_s)


def check_problem(name: str):
    """The verification shapes every stage runs (N = 768 suits every BLOCK_N of 128, 192 and 256; on a
    132-SM H100 a resident-B grid is 44 CTAs per column block):
    'small'  5632 x 768 x 256: two K slices; 2 row tiles per resident-B CTA, so both ping-pong
             warpgroups run (also the memcheck shape);
    'k128'   14080 x 768 x 128: one K slice (a ring position is both the first and last of its tile),
             5 row tiles per resident-B CTA: the ring wraps every tile;
    'tail'   1000 x 768 x 768: the last row tile is partial (TMA zero-fills, the epilogue skips rows);
    'medium' 50176 x 768 x 768: ~18 row tiles per resident-B CTA, many per persistent 02/03 CTA."""
    from . import problems
    shapes = {"small": (5632, 768, 256), "k128": (14080, 768, 128), "tail": (1000, 768, 768)}
    if name in shapes:
        m, n, k = shapes[name]
        return problems.PatchEmbed(name=name, m=m, n=n, k=k, positions=196, tile={"m": 8, "n": 64, "k": 128})
    return problems.patch_embed(name)


CHECK_PROBLEMS = ("small", "k128", "tail", "medium")


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
    return _verify.verify_gemm(t["out"], ref, a=t["a"], b=t["b"],
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
    """pelib.bench statistics of fn() (CUDA events, L2 flushed before each run); a Runner's watchdog
    wait bounds the synchronizations."""
    from . import bench
    return bench.stats(bench.time_fn(fn, iters=iters, warmup=warmup, wait=getattr(fn, "wait", None)))


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
    import re
    warns = sorted(set(re.findall(r"C75\d\d", b.log)))
    return {"stage": stage(key).name, "defines": dict(defines or {}), "registers": f.registers,
            "ptxas_warnings": ",".join(warns),
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


# ---- the barrier protocol of stage 04, as a model (any machine) --------------------------------

class ProtocolError(AssertionError):
    """The modelled barrier protocol deadlocked, overwrote a slot in use, or let a reader see stale data."""


def pingpong_protocol(num_kb: int, stages: int, tiles: int, *, seed: int = 0, turns: bool = True,
                      ctas: int = 1, turn_early: bool = False, max_steps: int = 2_000_000) -> dict:
    """Run the producer and the two ping-pong consumer warpgroups of stage 04 (ctas=1) or of the CTAs of
    one stage 05 cluster (ctas=3, A multicast) as interleaved actors over modelled mbarriers.

    The index formulas are the kernels' (04_pingpong_resident_b.cu, 05_multicast_a.cu): ring position
    it = i * num_kb + kb, slot it % stages, parity (it / stages) & 1. Each producer waits its empty[s]
    with parity ^ 1, posts arrive.expect_tx on its full[s]; the TMA load is issued by CTA it % ctas into
    the slot of every CTA of the cluster and lands later, at a random time, with complete_tx on each
    destination's full[s]. Warpgroup w takes tiles w, w + 2, ..., waits turn[w] with parity (n + 1) & 1
    (w = 0) or n & 1 (w = 1) before its n-th mainloop, arrives on turn[w ^ 1] after its last issue, and
    frees each slot (after the next slice's wgmma are issued; the last after wait_group 0) with one
    arrive on empty[s] of every CTA of the cluster. With ctas > 1 a producer ends by waiting for the
    release of its last `stages` positions (no CTA leaves while a peer may still arrive on it).
    A barrier's phase completes when its arrivals reach the count and its transaction count is 0;
    try_wait.parity(p) passes when the completed-phase count c has (c & 1) != p (PTX ISA mbarrier).
    A random scheduler interleaves everything; raises ProtocolError on a deadlock, on a slot written
    while a warpgroup reads it, or on a read of another position's data. turns=False drops the turn
    barriers (to show what they prevent). turn_early=True passes the turn in the last K slice before that
    slice frees the previous one (TURN_EARLY=1 of stages 06+); ctas=2 is a stage-09 pair. Returns counts
    of what ran."""
    import random
    rng = random.Random(seed)
    count = {"full": 1, "empty": ctas, "turn": 1}
    bars: dict = {}                               # (cta, name, idx) -> [completed, arrivals, tx]

    def bar(key):
        return bars.setdefault(key, [0, 0, 0])

    def settle(key):
        b = bar(key)
        if b[1] == count[key[1]] and b[2] == 0:
            b[0], b[1] = b[0] + 1, 0

    slot_tag = [[None] * stages for _ in range(ctas)]
    in_use = [[0] * stages for _ in range(ctas)]
    log = {"fills": 0, "reads": 0, "tiles": [0, 0]}
    actors: dict = {}

    def landing(dst, s, it):
        yield ("land",)
        if in_use[dst][s]:
            raise ProtocolError(f"CTA {dst}: position {it} lands in slot {s} while a warpgroup reads it")
        slot_tag[dst][s] = it
        log["fills"] += 1
        b = bar((dst, "full", s))
        b[2] -= 1                                  # complete_tx of the box's bytes (one unit)
        settle((dst, "full", s))

    def producer(c):
        it = 0
        for _ in range(tiles):
            for _ in range(num_kb):
                s, ph = it % stages, (it // stages) & 1
                yield ("wait", (c, "empty", s), ph ^ 1)
                b = bar((c, "full", s))
                b[2] += 1                          # arrive.expect_tx: one box
                b[1] += 1
                settle((c, "full", s))
                if it % ctas == c:                 # the issuer: to every CTA of the cluster
                    for dst in range(ctas):
                        actors[f"tma{c}-{it}-{dst}"] = landing(dst, s, it)
                it += 1
        if ctas > 1:
            for _ in range(stages):
                yield ("wait", (c, "empty", it % stages), ((it // stages) & 1) ^ 1)
                it += 1

    def consumer(c, wg):
        n = 0
        for i in range(wg, tiles, 2):
            if turns:
                yield ("wait", (c, "turn", wg), ((n + 1) & 1) if wg == 0 else (n & 1))
            it0 = i * num_kb
            for kb in range(num_kb):
                it = it0 + kb
                s, ph = it % stages, (it // stages) & 1
                yield ("wait", (c, "full", s), ph)
                if slot_tag[c][s] != it:
                    raise ProtocolError(f"CTA {c} warpgroup {wg} reads slot {s} for position {it} but it "
                                        f"holds {slot_tag[c][s]}")
                in_use[c][s] += 1
                log["reads"] += 1
                if turns and turn_early and kb == num_kb - 1:
                    yield ("arrive", (c, "turn", wg ^ 1))
                if kb > 0:
                    p = (it - 1) % stages
                    in_use[c][p] -= 1
                    for dst in range(ctas):
                        yield ("arrive", (dst, "empty", p))
            if turns and not turn_early:
                yield ("arrive", (c, "turn", wg ^ 1))
            last = (it0 + num_kb - 1) % stages
            in_use[c][last] -= 1
            for dst in range(ctas):
                yield ("arrive", (dst, "empty", last))
            if c == 0:
                log["tiles"][wg] += 1
            n += 1

    for c in range(ctas):
        actors[f"producer{c}"] = producer(c)
        actors[f"wg0-{c}"] = consumer(c, 0)
        actors[f"wg1-{c}"] = consumer(c, 1)
    pending: dict = {}
    for _ in range(max_steps):
        for k in list(actors):
            if k not in pending:
                try:
                    pending[k] = next(actors[k])
                except StopIteration:
                    del actors[k]
        if not actors:
            return log

        def ready(op):
            return op[0] != "wait" or (bar(op[1])[0] & 1) != op[2]
        runnable = [k for k in actors if ready(pending[k])]
        if not runnable:
            raise ProtocolError("deadlock: " + ", ".join(f"{k} waits {pending[k][1]} parity {pending[k][2]} "
                                                         f"(completed {bar(pending[k][1])[0]})" for k in actors))
        k = rng.choice(runnable)
        op = pending.pop(k)
        if op[0] == "arrive":
            b = bar(op[1])
            b[1] += 1
            settle(op[1])
        try:
            pending[k] = next(actors[k])
        except StopIteration:
            del actors[k]
    raise ProtocolError(f"no end after {max_steps} steps")


def resident_b_schedule(m: int, n: int, block_n: int, grid: int, block_m: int = 64) -> list[list[tuple[int, int]]]:
    """Stage 04's static schedule: for each CTA, the (row tile, column block) it computes, in order."""
    nbs = n // block_n
    groups = grid // nbs
    m_tiles = -(-m // block_m)
    out = []
    for cta in range(grid):
        if cta >= groups * nbs:
            out.append([])
            continue
        g, nb = divmod(cta, nbs)
        out.append([(g + i * groups, nb) for i in range(0, max(0, (m_tiles - 1 - g) // groups + 1) if g < m_tiles else 0)])
    return out


RESIDUE_PERIOD = 49   # row tiles of 64 rows whose comb rows repeat: 196 / gcd(196, 64)


def residue_tile(j: int, m_tiles: int, period: int = RESIDUE_PERIOD) -> int:
    """Stages 07+: the row tile at position j of the comb-residue order (classes t % period, then t)."""
    per, rem = divmod(m_tiles, period)
    big = rem * (per + 1)
    if j < big:
        cls, k = divmod(j, per + 1)
    else:
        cls, k = divmod(j - big, per)
        cls += rem
    return cls + period * k


def residue_schedule(m: int, n: int, block_n: int, grid: int, block_m: int = 64,
                     period: int = RESIDUE_PERIOD) -> list[list[tuple[int, int]]]:
    """Stages 07+: for each CTA, the (row tile, column block) it computes, in order. Row group g (CTAs
    g * NB .. g * NB + NB - 1, one per column block) takes the g-th of `groups` contiguous pieces of the
    comb-residue order, the first m_tiles % groups pieces one tile longer (residue_first in the kernels).
    In stage 09 a row group's clusters are its consecutive CTAs, so the order is the same."""
    nbs = n // block_n
    groups = grid // nbs
    m_tiles = -(-m // block_m)
    per, rem = divmod(m_tiles, groups)

    def first(g):
        return g * per + min(g, rem)
    out = []
    for cta in range(grid):
        if cta >= groups * nbs:
            out.append([])
            continue
        g, nb = divmod(cta, nbs)
        out.append([(residue_tile(j, m_tiles, period), nb) for j in range(first(g), first(g + 1))])
    return out


def comb_loads(schedule: list[list[tuple[int, int]]], period: int = RESIDUE_PERIOD) -> list[int]:
    """How many times each warpgroup (two per CTA, alternate tiles) reads comb under stage 07's rule:
    when the residue class of its tile differs from the one its registers hold."""
    out = []
    for tiles in schedule:
        for wg in (0, 1):
            cur, loads = None, 0
            for t, _ in tiles[wg::2]:
                if t % period != cur:
                    cur, loads = t % period, loads + 1
            out.append(loads)
    return out


# ---- for the chapter: recorded sweeps, comparison tables, the stage widget -----------------------

# What this chapter's roles call the clock64 phases of common/timing.cuh in stages 01-05.
PHASE_ROLES = {
    "producer_wait": "producer: waiting for a free ring slot",
    "tma_issue": "producer: one tile's loads, start to last issue",
    "tma_wait": "consumer: waiting for A/B data (full barriers)",
    "kloop": "consumer: the mainloop (wgmma issue + waits)",
    "epi_wait": "consumer (04-09): waiting for its turn on the tensor cores",
    "epi_phase1": "consumer: epilogue (registers -> comb add -> stores or staging)",
    "epi_phase2": "consumer (03): staging -> global (TMA store issue)",
    "tile": "consumer: one tile, start to end",
}


def clock_summary_rows(summary: dict) -> list[dict]:
    """Compact rows of a clock64 summary ({phase: {avg, spread, warps}}): one row per phase."""
    rows = []
    for ph, row in summary.items():
        avgs = [float(v) if not isinstance(v, dict) else float(v["avg"]) for v in row["warps"].values()]
        ws = sorted(int(w) for w in row["warps"])
        rows.append({"phase": ph, "warps": f"{ws[0]}-{ws[-1]}" if len(ws) > 1 else str(ws[0]),
                     "avg (cycles)": round(float(row["avg"])), "min warp avg": round(min(avgs)),
                     "max warp avg": round(max(avgs)), "what": PHASE_ROLES.get(ph, "")})
    return rows


def sweep_files() -> list:
    """The committed sweep results (results/*/hopper-sweep-*.json), oldest first."""
    from . import results
    return results.sweep_files()


def load_sweep(path=None) -> dict:
    """One committed sweep (the newest by default), with its file name under '_file'."""
    from . import results
    return results.load_sweep(path)


def sweep_evidence(rep: dict) -> str:
    """'measured (NVIDIA H100 80GB HBM3, 2026-11-23)': the label the sweep's numbers carry."""
    return rep.get("evidence") or f"measured ({rep['env']['device']}, {rep['env']['date'][:10]})"


def _problem_full():
    from . import problems
    return problems.patch_embed("siglip2")


def recorded_variants_table(rep: dict):
    """Every variant of a committed sweep: verified?, median ms, TFLOPS, share of the memory floor."""
    from .facts import Table
    full, gbps = _problem_full(), rep["copy"]["gbps"]
    facts = {f.get("label"): f for f in rep.get("facts", [])}
    rows = []
    for r in rep.get("variants", []):
        f = facts.get(r["label"].replace(" [again]", ""), {})
        row = {"variant": r["label"], "regs": f.get("registers", ""), "smem (KiB)": f.get("smem", 0) // 1024,
               "verified": "yes" if r.get("ok") else "NO"}
        if r.get("median_ms"):
            d = derived(full, r["median_ms"], gbps)
            row.update({"ms": round(r["median_ms"], 4), "TFLOPS": round(d["tflops"]),
                        "of floor": f"{100 * d['floor_frac']:.0f}%"})
        else:
            err = r.get("error") or ""
            row["note"] = ("trapped (launch failed)" if "KernelFault" in err else
                           "shape not supported" if "ShapeError" in err else err[:60])
        rows.append(row)
    cols = ["variant", "regs", "smem (KiB)", "verified", "ms", "TFLOPS", "of floor", "note"]
    return Table(rows, f"sm90 sweep — {sweep_evidence(rep)}; floor {full.min_bytes / gbps / 1e6:.3f} ms at "
                       f"{gbps:.0f} GB/s copy ({rep['_file']})", cols)


def recorded_comparison_table(rep: dict):
    """The sweep's fastest verified variant against its baselines (same run, same GPU)."""
    from . import hopper_bench
    from .facts import Table
    full, gbps = _problem_full(), rep["copy"]["gbps"]
    timed = [r for r in rep.get("variants", []) if r.get("median_ms")]
    best = min(timed, key=lambda r: r["median_ms"])
    rows = hopper_bench.compare_rows({**best, "stage": best["label"]}, rep.get("baselines", {}), gbps, full)
    out, missing = [], []
    for r in rows:
        if r["ms"] is None:   # a run that failed is not a result: said under the table, never a row
            missing.append(f"Not measured in this run: {r['name']} (the run failed: "
                           f"{hopper_bench._error_line(r['note'])[:120]}).")
        else:
            out.append({"what": r["name"], "ms": round(r["ms"], 4), "TFLOPS": round(r["tflops"]),
                        "GB/s": round(r["gbps"]), "of floor": f"{100 * r['floor_frac']:.0f}%",
                        "ours faster by": f"{r['speedup']:.2f}x" if r.get("speedup") else ""})
    return Table(out, f"ours vs baselines — {sweep_evidence(rep)}",
                 ["what", "ms", "TFLOPS", "GB/s", "of floor", "ours faster by"], notes=missing)


def recorded_clock(rep: dict):
    """The sweep's clock64 breakdown as a compact table, or a line saying there is none."""
    from .facts import Table
    cl = rep.get("clock") or {}
    if not cl.get("summary"):
        return (f"No clock64 breakdown in {rep['_file']}: that run timed "
                f"{cl.get('label', 'no variant')} without TIMING records.")
    return Table(clock_summary_rows(cl["summary"]),
                 f"clock64 phases of {cl['label']} — {sweep_evidence(rep)}")


# Hopper against Blackwell, point by point; each row names where the fact comes from.
CONTRAST = [
    {"topic": "accumulator",
     "Hopper sm_90a (this chapter)": "wgmma writes FP32 into the issuing warpgroup's registers: 128 per thread "
                                    "for 64 x 256; setmaxnreg moves registers to the consumers (232)",
     "Blackwell sm_100a (FP8 chapters)": "tcgen05.mma writes TMEM (128 lanes x 512 columns), no registers; "
                                         "two 256-column accumulators fit, so MMA and epilogue alternate buffers",
     "source": "PTX ISA 9.7.15 wgmma / 9.7.16 tcgen05; common/wgmma.cuh, common/tcgen05.cuh"},
    {"topic": "who issues",
     "Hopper sm_90a (this chapter)": "all 128 threads of a warpgroup (.sync.aligned); completion by "
                                    "wgmma.commit_group / wait_group in the same threads",
     "Blackwell sm_100a (FP8 chapters)": "one thread; completion through tcgen05.commit on an mbarrier that "
                                         "any warp can wait on",
     "source": "PTX ISA; CUTLASS mma_sm90_gmma.hpp, mma_sm100_umma.hpp"},
    {"topic": "sharing operands between SMs",
     "Hopper sm_90a (this chapter)": "cluster multicast: one TMA load lands in several CTAs' shared memory "
                                    "(02: B to a pair; 05: A to the three column blocks); every SM still "
                                    "holds the whole operand it multiplies",
     "Blackwell sm_100a (FP8 chapters)": "2-SM UMMA (cta_group::2): one MMA of 256 x N spans two SMs, each "
                                         "holding half of B, so per-SM B traffic and B storage halve",
     "source": "PTX ISA cp.async.bulk.tensor .multicast::cluster; tcgen05 cta_group::2"},
    {"topic": "epilogue pressure",
     "Hopper sm_90a (this chapter)": "the accumulator can only leave through the warpgroup that computed it, "
                                    "and it cannot start the next tile's wgmma until its registers are free: "
                                    "a second warpgroup must run the next mainloop meanwhile (ping-pong, 04)",
     "Blackwell sm_100a (FP8 chapters)": "separate epilogue warps drain TMEM with tcgen05.ld while the MMA "
                                         "thread fills the other accumulator; the limit is TMEM -> register "
                                         "bandwidth and the store path",
     "source": "stages 04 (sm90) and fp8/02-04 (sm100)"},
    {"topic": "register layout at the store",
     "Hopper sm_90a (this chapter)": "a thread holds 2 adjacent columns of 2 rows per 8-column group: 4-B "
                                    "pieces; a quad transpose (4 shuffles per 16 B) makes 16-B stores",
     "Blackwell sm_100a (FP8 chapters)": "tcgen05.ld 32x32b gives a thread consecutive columns of one row: "
                                         "16-B stores come for free",
     "source": "PTX ISA wgmma fragment layout (common/wgmma.cuh NOTES); tcgen05.ld shapes"},
    {"topic": "shared-memory descriptor",
     "Hopper sm_90a (this chapter)": "layout type in bits 62-63 (SW128 = 1), no version bit; start address "
                                    "= (addr & 0x3FFFF) >> 4, so a cluster CTA's rank bits must be masked",
     "Blackwell sm_100a (FP8 chapters)": "version bit 46 = 1, 3-bit layout type in 61-63 (SW128 = 2); the "
                                         "same 18-bit address field",
     "source": "CUTLASS mma_sm90_desc.hpp, mma_sm100_desc.hpp; READING.md trap 1"},
]


def contrast_table():
    """Hopper vs Blackwell for this GEMM, point by point (facts from the PTX ISA and CUTLASS)."""
    from .facts import Table
    return Table(CONTRAST, "The same kernel on two architectures", descriptive=True)


# The widget's options: stages, and for 01 the number of consumer warpgroups.
WIDGET_VARIANTS = [
    ("00: one warpgroup, no pipeline", ("00", {})),
    ("01: 1 consumer warpgroup (128x128)", ("01", {"BLOCK_N": 128, "NUM_CONSUMERS": 1, "WG_M": 2})),
    ("01: 2 consumer warpgroups (128x256)", ("01", {})),
    ("01: 3 consumer warpgroups (192x192)", ("01", {"BLOCK_N": 192, "NUM_CONSUMERS": 3, "NUM_STAGES": 3})),
    ("02: persistent, B multicast to a pair", ("02", {})),
    ("03: staged epilogue, TMA store", ("03", {})),
    ("04: B resident, ping-pong", ("04", {})),
    ("05: 04 + A multicast (3-CTA cluster)", ("05", {})),
    ("06: B rows permuted, no epilogue shuffles", ("06", {})),
    ("07: comb-residue order, comb stays in registers", ("07", {})),
    ("08: accumulators start from comb", ("08", {})),
    ("09: 192-wide blocks, 10-stage ring, A multicast to pairs", ("09", {})),
]


def _label(key: str, defines: dict) -> str:
    s = stage(key).name
    return s + ("" if not defines else " " + ",".join(f"{k}={v}" for k, v in sorted(defines.items())))


def variant_row(key: str, defines: dict, rep: dict | None = None, live_problem=None) -> dict:
    """Compiled facts of one variant, its time in the committed sweep `rep` (if it ran there), and
    with live_problem (on an sm_90 GPU) a verification and timing run now."""
    f = stage_facts(key, defines)
    row = {"variant": _label(key, defines), "tile": f["tile"], "consumers": f["consumers"],
           "threads": f["threads"], "regs": f["registers"], "consumer regs": f["consumer_regs"],
           "smem (KiB)": f["smem"] // 1024, "stages": f["stages"], "QGMMA": f["QGMMA"]}
    if rep:
        hit = next((r for r in rep.get("variants", []) if r["label"] == row["variant"]), None)
        if hit is not None:
            row["measured ms"] = round(hit["median_ms"], 4) if hit.get("median_ms") else "failed"
    if live_problem is not None:
        res = run(key, live_problem, defines, iters=10)
        row["live ms"] = round(res["median_ms"], 4) if res.get("median_ms") else "NOT VERIFIED"
    return row


def stage_widget(live: bool | None = None):
    """A slider over WIDGET_VARIANTS: compiled facts, the committed H100 time, and (on an sm_90 GPU) a
    verified, timed run on the 'medium' problem. The static fallback is the table of all options."""
    from . import device
    from .views import widgets
    from .facts import Table, evidence_label
    if live is None:
        live = device.can_run(ARCH)
    try:
        rep = load_sweep()
    except FileNotFoundError:
        rep = None
    medium = check_problem("medium") if live else None
    rows = [variant_row(k, d, rep) for _, (k, d) in WIDGET_VARIANTS]
    caption = (f"stages and consumer warpgroups — {evidence_label(build('00'))}"
               + (f"; 'measured ms' = {sweep_evidence(rep)}, full problem" if rep else ""))
    static = Table(rows, caption)

    def render(v):
        k, d = v
        r = variant_row(k, d, rep, medium)
        cap = "compiled" + (f"; 'measured ms' = {sweep_evidence(rep)}" if rep else "")
        if medium is not None:
            cap += f"; live = measured now on {device.current().name}, 'medium' problem"
        if rep is None:
            return Table([r], cap)
        from .views import plots
        return [plots.hopper_line(rep, mark=k), Table([r], cap)]
    return widgets.sweep(WIDGET_VARIANTS, render, static=static, description="stage", live=live)


def live_comparison(key: str | None = None, defines: dict | None = None, iters: int = 20):
    """On an sm_90 GPU: verify and time our stage on the full problem, and cuBLAS beside it (measured now)."""
    from . import hopper_bench
    from .facts import Table
    from . import device
    if key is None:
        key, defines = hopper_bench.BEST
    prob = _problem_full()
    copy = hopper_bench.copy_bandwidth_gb_s()
    t = make_tensors(prob, seed=0)
    ref = reference(prob, t)
    ours = run(key, prob, defines, tensors=t, ref=ref, iters=iters)
    base = hopper_bench.time_baselines(prob, t, ref, iters=iters)
    rows = hopper_bench.compare_rows({**ours, "stage": ours["stage"]}, base, copy["gbps"], prob)
    info = device.current()
    import datetime
    out = [{"what": r["name"], "ms": round(r["ms"], 4) if r["ms"] else None,
            "TFLOPS": round(r["tflops"]) if r["ms"] else None,
            "of floor": f"{100 * r['floor_frac']:.0f}%" if r["ms"] else "",
            "ours faster by": f"{r['speedup']:.2f}x" if r.get("speedup") else r.get("note", "")} for r in rows]
    return Table(out, f"measured ({info.name}, {datetime.date.today()}) — verified: {ours['ok']}")


def live_clock(key: str | None = None, defines: dict | None = None):
    """On an sm_90 GPU: the clock64 phases of a TIMING build on the 'medium' problem (measured now)."""
    from . import device, hopper_bench
    from .facts import Table
    import datetime
    if key is None:
        key, defines = hopper_bench.BEST
    tm = clock_breakdown(key, check_problem("medium"), defines, seed=5)
    summ = {ph: {"avg": r["avg"], "spread": r["spread"], "warps": {w: s["avg"] for w, s in r["warps"].items()}}
            for ph, r in tm.summary().items()}
    return Table(clock_summary_rows(summ),
                 f"clock64 phases of {_label(key, defines or {})} — measured ({device.current().name}, "
                 f"{datetime.date.today()}), 'medium' problem")


def l2_traffic_table(sm_count: int = H100_SMS, keys=None):
    """Modelled bytes each stage moves between L2 and the SMs on the full problem: A and B tiles (a tile
    of BM x BN re-reads A once per column block and B once per row block; multicast divides by the
    CTAs that share a load; a resident B is read once per CTA), comb read by the epilogue (once per
    tile, or with the comb-residue order of 07+ once per class change of each warpgroup), C written."""
    from .facts import Table
    p = _problem_full()
    m, n, k = p.m, p.n, p.k
    a1, b1, mn2 = m * k, n * k, 2 * m * n
    rows = []
    for key in keys or [s.key for s in available()]:
        ex = build(key).exports
        bm, bn = ex["block_m"], ex["block_n"]
        if ex.get("resident_b"):
            a = a1 * (n // bn) / ex.get("cluster_n", 1)
            b = sm_count * bn * k
        else:
            a = a1 * (n // bn)
            b = b1 * (m / bm) / ex.get("cluster_m", 1)
        if ex.get("residue_order"):
            grid = (sm_count // (n // bn)) * (n // bn)
            loads = sum(comb_loads(residue_schedule(m, n, bn, grid, bm)))
            comb = loads * bm * bn * 2                 # one warpgroup load: comb for its 64 x BN tile
        else:
            comb = mn2
        rows.append({"stage": stage(key).name, "tile": f"{bm}x{bn}", "A (GB)": round(a / 1e9, 2),
                     "B (GB)": round(b / 1e9, 2), "comb (GB)": round(comb / 1e9, 3), "C (GB)": round(mn2 / 1e9, 2),
                     "total (GB)": round((a + b + comb + mn2) / 1e9, 2)})
    return Table(rows, f"L2 <-> SM traffic, modelled from the tile shapes ({sm_count} SMs); DRAM minimum "
                       f"{p.min_bytes / 1e9:.2f} GB")


def sass_grep(key: str, pattern: str, defines: dict | None = None, n: int = 6) -> str:
    """The first n SASS lines of a stage that contain `pattern` (compiled evidence), addresses stripped."""
    import re
    b = build(key, defines)
    out = []
    for ln in b.sass.splitlines():
        if pattern in ln:
            out.append(re.sub(r"\s*/\*[0-9a-fx]+\*/\s*", " ", ln).split(";")[0].strip())
            if len(out) >= n:
                break
    return "\n".join(out) or f"(no SASS line of {stage(key).name} contains {pattern!r})"


def verification_table(shapes=("small", "tail")):
    """On an sm_90 GPU: every stage verified now on the check shapes (NaN-poisoned output);
    elsewhere: the verification column of the newest committed sweep."""
    from . import device
    from .facts import Table
    if not device.can_run(ARCH):
        return recorded_variants_table(load_sweep())
    import datetime
    rows = []
    for s in available():
        row = {"stage": s.name}
        for name in shapes:
            try:
                rep = verify(s.key, check_problem(name), seed=3)
                row[name] = "ok" if rep.ok else f"WRONG ({rep.n_bad} bad, {rep.n_nan} NaN)"
            except Exception as e:  # a fault kills the context: say so and stop
                row[name] = f"{type(e).__name__}"
                rows.append(row)
                return Table(rows, f"verification — measured ({device.current().name}, {datetime.date.today()}); "
                                   "stopped at the first fault")
        rows.append(row)
    return Table(rows, f"verification — measured ({device.current().name}, {datetime.date.today()})")


def comparison():
    """Ours against cuBLAS: measured now on an sm_90 GPU, else the newest committed sweep's table."""
    from . import device
    return live_comparison() if device.can_run(ARCH) else recorded_comparison_table(load_sweep())


def clock():
    """The clock64 breakdown of the best stage: measured now on an sm_90 GPU, else the committed one."""
    from . import device
    return live_clock() if device.can_run(ARCH) else recorded_clock(load_sweep())
