"""Host side of the FP8 patch-embed stages: tensor maps, launch configuration, arguments, run."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import build as _build
from .paths import KERNELS

FAMILY = "fp8"
ARCH = "sm_100a"
KERNEL = "patch_embed"
# The one signature every stage shares (learn-cuda style): the order run() packs the arguments in.
SIGNATURE = ("tmap_a", "tmap_b", "comb", "out", "M", "N", "K", "timing")
# SASS opcodes of the MMA: UTCQMMA = tcgen05.mma kind::f8f6f4 (nvdisasm, sm_100a), .2CTA = cta_group::2.
MMA_OPCODE = {1: "UTCQMMA", 2: "UTCQMMA.2CTA"}
LAB_LOG = "fp8-megakernel-experiment-log.md"


@dataclass(frozen=True)
class Recorded:
    """A B200 number from the lab notes, with the note and the commit it comes from."""

    tflops: float | None
    ms: float | None
    commit: str
    change: str
    source: str = LAB_LOG
    note: str = ""
    evidence: str = "recorded"

    def describe(self) -> str:
        parts = [f"{self.ms:.3f} ms" if self.ms else None, f"{self.tflops:.0f} TFLOPS" if self.tflops else None]
        val = " / ".join(p for p in parts if p)
        return f"{val} — recorded (B200, {self.source}, {self.commit}: {self.change})"


@dataclass(frozen=True)
class Stage:
    """One numbered stage: its file, its one idea, and the lab result it retells."""

    name: str
    idea: str
    recorded: Recorded
    previous: str | None = None

    @property
    def path(self) -> Path:
        return KERNELS / FAMILY / f"{self.name}.cu"

    @property
    def rel(self) -> str:
        return f"{FAMILY}/{self.name}.cu"


# The lab's history table (fp8-megakernel-experiment-log.md, "Optimization history") for the idea
# each stage adds. The lab kernel was persistent from the start, so its numbers include the
# persistent loop that our stages add later; they are what the idea was worth there.
STAGES: dict[str, Stage] = {s.name: s for s in [
    Stage("00_ws_cta1", "warp-specialized TMA / MMA / epilogue, cta_group::1, TN=128, x16 loads",
          Recorded(1043, None, "892766c", "Replace SMEM prefetch with inline BF16 loads",
                   note="cta_group::1 baseline with inline comb loads")),
    Stage("01_cta2", "cta_group::2 on a (2,1,1) cluster: M=256 UMMA, leader CTA issues",
          Recorded(1190, None, "fca9178", "Upgrade cta_group::1 -> cta_group::2"), "00_ws_cta1"),
    Stage("02_tn256", "TN=256, one 512-column TMEM allocation",
          Recorded(1433, None, "9557e0b", "TN=128->256, single TMEM alloc of 512 cols"), "01_cta2"),
    Stage("03_x32_loads", "tcgen05.ld 32x32b.x16 -> .x32",
          Recorded(1433, 0.764, "abf04a5", "x16->x32 TMEM loads (no double-buffer)",
                   note="F8: performance-neutral (0.764 ms with both x16 and x32)"), "02_tn256"),
    Stage("04_independent_polling", "every epilogue warp polls the MMA-done mbarrier itself",
          Recorded(None, 0.743, "6319928", "Remove centralized mainloop_mbar bar.sync",
                   note="F7: 0.764 -> 0.743 ms"), "03_x32_loads"),
]}

def register_stage(st: Stage) -> Stage:
    """Add a later stage (its file must exist under src/kernels/fp8/); order is registration order."""
    if not st.path.exists():
        raise StageError(f"no stage file {st.path}: write it before registering {st.name}")
    if st.previous is not None and st.previous not in STAGES:
        raise StageError(f"{st.name}: previous stage {st.previous!r} is not registered")
    STAGES[st.name] = st
    return st


# cuBLAS baselines of the same problem (fp8-megakernel-experiment-log.md, "Reference").
CUBLAS_RECORDED = {
    "gemm_only": Recorded(3001, 0.365, "cuBLAS", "per-tensor FP8, best of 8 algos, 256 MB workspace, no fusion"),
    "unfused": Recorded(None, 0.835, "cuBLAS", "GEMM + separate bias/pos_embed add, end to end"),
}


class StageError(ValueError):
    """A stage name or a problem does not fit; the message names the fix."""


def stage(name: str) -> Stage:
    """Look a stage up by full name ('02_tn256'), number ('02') or path ('fp8/02_tn256.cu')."""
    key = Path(str(name)).stem
    if key in STAGES:
        return STAGES[key]
    hits = [s for n, s in STAGES.items() if n.split("_", 1)[0] == key]
    if len(hits) == 1:
        return hits[0]
    raise StageError(f"unknown FP8 stage {name!r}: choose one of {list(STAGES)}")


def stage_names() -> list[str]:
    return list(STAGES)


def build(name: str, defines: dict | None = None, **kw) -> _build.Build:
    """Compile a stage for sm_100a (cached)."""
    return _build.build(stage(name).rel, arch=ARCH, defines=defines, **kw)


# ---------------------------------------------------------------------------------------------
# Layout parameters: what the stage exports, read back from its cubin
# ---------------------------------------------------------------------------------------------

# Names shared with pelib.emulate.EXPORT_NAMES (TileParams.from_exports), plus the host's own.
REQUIRED_EXPORTS = ("smem_bytes", "mma_kind", "mma_arch", "cta_group", "tile_m", "tile_n", "block_k",
                    "mma_m", "mma_n", "mma_k", "num_stages", "epi_warp0", "epi_warps", "num_threads",
                    "a_swizzle", "b_swizzle", "a_box_k", "a_box_m", "b_box_k", "b_box_n",
                    "a_smem_offset", "b_smem_offset", "a_desc", "b_desc", "idesc", "k_advance_bytes",
                    "tmem_cols", "tmem_acc_col", "epi_ld_x", "epi_poll_each")


@dataclass(frozen=True)
class Layout:
    """A stage's compile-time layout, from its PELIB_EXPORTs (never from prose)."""

    exports: dict

    def __getattr__(self, k):
        ex = self.__dict__["exports"]
        if k in ex:
            return ex[k]
        raise AttributeError(f"the stage exports no {k!r} (exports: {sorted(ex)})")

    @property
    def cg(self) -> int:
        return self.exports["cta_group"]

    @property
    def cluster_rows(self) -> int:
        """Output rows of one cluster tile: CG CTAs of tile_m rows each."""
        return self.cg * self.exports["tile_m"]


def layout(name: str, defines: dict | None = None) -> Layout:
    """The exported layout of a stage build; raises if an export the host needs is missing."""
    ex = build(name, defines).exports
    missing = [k for k in REQUIRED_EXPORTS if k not in ex]
    if missing:
        raise StageError(f"stage {name} does not export {missing}: add PELIB_EXPORT lines to its .cu")
    return Layout(dict(ex))


# ---------------------------------------------------------------------------------------------
# Tensor maps, launch configuration, arguments (all CPU-checkable)
# ---------------------------------------------------------------------------------------------

def _dims(problem) -> tuple[int, int, int]:
    return int(problem.m), int(problem.n), int(problem.k)


def check_problem(lay: Layout, problem) -> None:
    """The stage covers the problem with whole tiles (no bounds checks in the kernels)."""
    M, N, K = _dims(problem)
    need = {"M": (M, lay.cluster_rows), "N": (N, lay.tile_n), "K": (K, lay.block_k)}
    bad = [f"{d}={v} is not a multiple of {t}" for d, (v, t) in need.items() if v % t]
    if bad:
        raise StageError(f"{getattr(problem, 'name', 'problem')} does not fit the stage's tiles: "
                         + "; ".join(bad) + " (pick a problem whose dimensions are multiples)")


def tensor_map_specs(name: str, problem, tensors: dict | None = None, defines: dict | None = None) -> dict:
    """pelib.tma specs for A [M,K] and B [N,K] (FP8 as uint8, 128-B swizzle, the stage's boxes).

    With `tensors` ({'a', 'b'} torch tensors) the specs carry their addresses; without, address 0.
    """
    from . import tma

    lay = layout(name, defines)
    check_problem(lay, problem)
    M, N, K = _dims(problem)
    addr = (lambda k: int(tensors[k].data_ptr())) if tensors else (lambda k: 0)
    a = tma.make_spec("float8_e4m3fn", (M, K), (lay.a_box_m, lay.a_box_k),
                      address=addr("a"), swizzle=lay.a_swizzle)
    b = tma.make_spec("float8_e4m3fn", (N, K), (lay.b_box_n, lay.b_box_k),
                      address=addr("b"), swizzle=lay.b_swizzle)
    return {"a": a.validate(), "b": b.validate()}


@dataclass(frozen=True)
class LaunchConfig:
    """Grid, block, cluster and dynamic shared memory of one launch."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem_bytes: int
    tiles: int                     # cluster tiles (one per cluster: these stages are not persistent)
    cluster_in_kernel: bool = True  # cta_group::2 stages declare __cluster_dims__ in the kernel

    def describe(self) -> str:
        return (f"grid {self.grid[0]:,} CTAs ({self.tiles:,} tiles), block {self.block[0]} threads, "
                f"cluster {self.cluster}, {self.smem_bytes:,} B dynamic SMEM")


def launch_config(name: str, problem, defines: dict | None = None) -> LaunchConfig:
    """One cluster per output tile: grid = CG x (M / (CG·tile_m)) x (N / tile_n) CTAs."""
    lay = layout(name, defines)
    check_problem(lay, problem)
    M, N, _ = _dims(problem)
    tiles = (M // lay.cluster_rows) * (N // lay.tile_n)
    cg = lay.cg
    return LaunchConfig(grid=(cg * tiles, 1, 1), block=(lay.num_threads, 1, 1), cluster=(cg, 1, 1),
                        smem_bytes=lay.smem_bytes, tiles=tiles, cluster_in_kernel=cg > 1)


def kernel_args(problem, maps: dict, tensors: dict, timing=None) -> tuple:
    """Arguments in SIGNATURE order: tmap_a, tmap_b, comb, out, M, N, K, timing.

    maps: pelib.tma.TensorMap (or CUtensorMap) for 'a' and 'b'; tensors: 'comb' and 'out' CUDA tensors;
    M, N, K as int32 (pelib.launch refuses bare Python ints); timing None is a null pointer.
    """
    import numpy as np

    M, N, K = _dims(problem)
    for k in ("comb", "out"):
        if k not in tensors:
            raise StageError(f"kernel_args needs tensors['{k}'] (have {sorted(tensors)})")
    return (maps["a"], maps["b"], tensors["comb"], tensors["out"], np.int32(M), np.int32(N), np.int32(K), timing)


# ---------------------------------------------------------------------------------------------
# Emulated: one output tile from the stage's own exports (pelib.emulate), plus the fused epilogue
# ---------------------------------------------------------------------------------------------

def bf16_round(x):
    """Round FP32 values to BF16 (nearest even), as cvt.rn.bf16x2.f32 does; returns float64."""
    import numpy as np

    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return u.view(np.float32).astype(np.float64)


def emulate_tile(name: str, inputs: dict, m0: int = 0, n0: int = 0, defines: dict | None = None,
                 return_report: bool = False, overrides: dict | None = None):
    """The BF16 output tile at (m0, n0) of one cluster, as the stage would compute it (emulated).

    pelib.emulate reproduces TMA boxes, swizzle, descriptors, K-advance, the cta_group split and the
    TMEM loads from the stage's exports; then the epilogue of common/epilogue.cuh in numpy:
    FP32 accumulator + FP32(comb[m % 196]) rounded once to BF16. `overrides` replaces exported
    parameters (TileParams fields) to show what a wrong layout would compute.
    """
    import numpy as np

    from . import emulate

    b = build(name, defines)
    params = emulate.TileParams.from_exports(b.exports, **(overrides or {}))
    acc, rep = emulate.emulate_tile(params, inputs["a"], inputs["b"], m0=m0, n0=n0, return_report=True)
    comb = inputs["comb"].float().cpu().numpy()
    rows = (m0 + np.arange(acc.shape[0])) % comb.shape[0]
    fused = acc.astype(np.float32) + comb[rows][:, n0:n0 + acc.shape[1]].astype(np.float32)
    out = bf16_round(fused)
    return (out, rep) if return_report else out


def emulate_check(name: str, problem="small", seed: int = 0, tile: tuple[int, int] = (1, 0),
                  defines: dict | None = None, overrides: dict | None = None) -> dict:
    """Emulate one cluster tile (row block, column block) of a stage and compare it with the torch
    reference (CPU); the verdict is 'every element within one BF16 ulp'."""
    import numpy as np

    from . import emulate, problems, reference

    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    lay = layout(name, defines)
    check_problem(lay, prob)
    emulate.check_tile_index(tile, (prob.m // lay.cluster_rows, prob.n // lay.tile_n))
    inputs = prob.make_inputs(seed=seed)
    m0, n0 = tile[0] * lay.cluster_rows, tile[1] * lay.tile_n
    got, rep = emulate_tile(name, inputs, m0, n0, defines, return_report=True, overrides=overrides)
    # The reference on the tile's rows alone: comb rolled so its row i is comb[(m0 + i) % positions].
    m1, n1 = m0 + lay.cluster_rows, n0 + lay.tile_n
    pos = inputs["comb"].shape[0]
    comb = inputs["comb"][(m0 + np.arange(pos)) % pos][:, n0:n1].contiguous()
    ref = reference.patch_embed_reference(inputs["a"][m0:m1], inputs["b"][n0:n1].contiguous(), comb).float().numpy()
    if got.shape != ref.shape:   # an overridden MMA shape covers part of the tile: the rest counts as unwritten
        part = got[:ref.shape[0], :ref.shape[1]]
        got = np.full(ref.shape, np.nan)
        got[:part.shape[0], :part.shape[1]] = part
    err = np.abs(got - ref)
    ulp = np.abs(ref) * 2.0 ** -7 + 2.0 ** -20      # one BF16 ulp at |ref| (8 significand bits)
    return {"stage": stage(name).name, "problem": prob.name, "tile": (m0, n0), "shape": got.shape,
            "max_abs_err": float(np.nan_to_num(err, nan=np.inf).max()), "within_1ulp": bool((err <= ulp).all()),
            "bad": int((~(err <= ulp)).sum()), "report_ok": rep.ok, "issues": list(rep.issues),
            "evidence": "emulated (pelib.emulate)"}


# ---------------------------------------------------------------------------------------------
# Run on a B200: verify, then time
# ---------------------------------------------------------------------------------------------

def run(name: str, inputs: dict | None = None, problem="siglip2", *, defines: dict | None = None,
        seed: int = 0, verify: bool = True, time: bool = True, iters: int = 20, warmup: int = 3) -> dict:
    """Verify the stage against the torch reference, then time it; B200 (sm_100) only.

    Raises pelib.device.UnsupportedGPU elsewhere. Returns the stage, problem, launch config, the
    verification report and the median time (CUDA events, L2 flushed), labelled 'measured'.
    Timing runs only when the stage verified.
    """
    from . import device, problems

    info = device.require(ARCH)
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    cfg = launch_config(name, prob, defines)
    b = build(name, defines)
    import torch

    dev = torch.device("cuda", info.ordinal)
    key = None
    if inputs is None:
        key = (prob.name, prob.m, prob.n, prob.k, seed, str(dev))
        inputs = _cached_inputs(key, prob, seed, dev)
    prob.validate(inputs, device=dev)
    return _run_live(name, b, prob, cfg, inputs, info, defines, verify=verify, time=time,
                     iters=iters, warmup=warmup, cache_key=key)


_LIVE: dict = {}   # one problem's inputs and reference, reused across stages (the full problem is 2 GB)


def _cached_inputs(key, prob, seed, dev):  # pragma: no cover - GPU
    if key not in _LIVE:
        _LIVE.clear()
        _LIVE[key] = {"inputs": prob.make_inputs(seed=seed, device=dev)}
    return _LIVE[key]["inputs"]


def _reference(inputs, key):  # pragma: no cover - GPU
    from . import reference

    if key is not None and key in _LIVE:
        if "ref" not in _LIVE[key]:
            _LIVE[key]["ref"] = reference.patch_embed_reference(inputs["a"], inputs["b"], inputs["comb"])
        return _LIVE[key]["ref"]
    return reference.patch_embed_reference(inputs["a"], inputs["b"], inputs["comb"])


def launch_plan(name: str, problem, inputs: dict, defines: dict | None = None, timing=None):
    """A checked pelib.launch plan for the stage on `problem` with CUDA `inputs` (needs the GPU)."""
    from . import launch, tma

    cfg = launch_config(name, problem, defines)
    specs = tensor_map_specs(name, problem, inputs, defines)
    maps = {k: tma.encode(s, owner=inputs[k]) for k, s in specs.items()}
    # A __cluster_dims__ kernel carries its cluster shape in the cubin: launch it without a cluster
    # attribute (as <<<>>> would); the grid still counts CTAs, a multiple of the cluster.
    cluster = (1, 1, 1) if cfg.cluster_in_kernel else cfg.cluster
    return launch.prepare(build(name, defines), kernel_args(problem, maps, inputs, timing), grid=cfg.grid,
                          block=cfg.block, cluster=cluster, smem=cfg.smem_bytes, kernel=KERNEL)


def _run_live(name, b, prob, cfg, inputs, info, defines, *, verify, time, iters, warmup,
              cache_key=None) -> dict:  # pragma: no cover - GPU
    from . import verify as _verify

    plan = launch_plan(name, prob, inputs, defines)
    result = {"stage": name, "problem": prob.name, "config": cfg, "device": info.describe(),
              "evidence": f"measured ({info.name})", "ok": None}
    if verify:
        _verify.poison(inputs["out"])
        plan.run()
        plan.wait()
        ref = _reference(inputs, cache_key)
        rep = _verify.verify_gemm(inputs["out"], ref, a=inputs["a"], b=inputs["b"],
                                  tile=(b.exports["tile_m"], b.exports["tile_n"]),
                                  label=f"fp8/{name} on {prob.name}")
        result["verify"] = rep
        result["ok"] = rep.ok
    if time and result["ok"] is not False:
        result.update(_time(plan, prob, iters=iters, warmup=warmup))
    return result


def _time(plan, prob, *, iters: int, warmup: int) -> dict:  # pragma: no cover - GPU
    """Time a launch plan (after it verified, so the watchdog already saw it finish)."""
    return time_fn(plan.run, prob, wait=plan.wait, iters=iters, warmup=warmup)


def time_fn(fn, prob, *, wait=None, iters: int = 20, warmup: int = 3) -> dict:
    """pelib.bench timing of fn() (CUDA events, L2 flushed before each run): median and spread.
    `wait` is the launch plan's watchdog wait (a hang while timing is reported, not waited on)."""
    from . import bench

    r = bench.result(getattr(prob, "name", "fp8"), bench.time_fn(fn, iters=iters, warmup=warmup, wait=wait),
                     flops=prob.flops, bytes_moved=prob.min_bytes)
    return {"ms": r["median_ms"], "p10_ms": r["p10_ms"], "p90_ms": r["p90_ms"], "iters": r["n"],
            "tflops": r["tflops"], "gb_s": r["gbps"]}


def measured_vs_recorded(name: str, result: dict) -> dict:
    """One row: the stage's measured time beside the lab's recorded number for its idea."""
    r = stage(name).recorded
    return {"stage": stage(name).name, "measured ms": round(result["ms"], 4),
            "measured TFLOPS": round(result["tflops"], 1), "evidence": result.get("evidence", "measured"),
            "recorded": r.describe()}


# ---------------------------------------------------------------------------------------------
# Compiled facts per stage
# ---------------------------------------------------------------------------------------------

def sass_facts(b: _build.Build) -> dict:
    """Opcode counts a reader of these stages looks for, with modifiers (UTCQMMA.2CTA, LDTM ...)."""
    from . import sass

    h = sass.opcode_histogram(b.sass, modifiers=True)
    pick = lambda pre: sum(c for op, c in h.items() if op == pre or op.startswith(pre + "."))  # noqa: E731
    return {"UTCQMMA": h.get("UTCQMMA", 0), "UTCQMMA.2CTA": h.get("UTCQMMA.2CTA", 0),
            "LDTM": pick("LDTM"), "UTCBAR": pick("UTCBAR"), "UTMALDG": pick("UTMALDG"),
            "BAR.SYNC": sum(c for op, c in h.items() if op.startswith("BAR.SYNC")),
            "UCGABAR": pick("UCGABAR_ARV") + pick("UCGABAR_WAIT")}


@lru_cache(maxsize=None)
def _row(name: str) -> dict:
    b = build(name)
    f, ex, sf = b.facts, b.exports, sass_facts(b)
    st = STAGES[name]
    return {"stage": name, "idea": st.idea, "registers": f.registers, "spills (B)": f.spills,
            "stack (B)": f.stack, "dynamic smem (B)": ex["smem_bytes"], "cta_group": ex["cta_group"],
            "TN": ex["tile_n"], "stages": ex["num_stages"], "TMEM cols": ex["tmem_cols"],
            "ld cols": ex["epi_ld_x"], "MMA opcode": MMA_OPCODE[ex["cta_group"]],
            "MMA instrs (SASS)": sf[MMA_OPCODE[ex["cta_group"]]], "LDTM": sf["LDTM"], "BAR.SYNC": sf["BAR.SYNC"],
            "recorded": st.recorded.describe()}


def stage_table(names=None, columns=None):
    """Registers / spills / SMEM / MMA opcode per stage, from the builds (labelled compiled)."""
    from .facts import Table, evidence_label

    names = [stage(n).name for n in (names or STAGES)]
    rows = [_row(n) for n in names]
    cols = columns or ["stage", "registers", "spills (B)", "stack (B)", "dynamic smem (B)", "cta_group", "TN",
                       "stages", "TMEM cols", "ld cols", "MMA opcode", "MMA instrs (SASS)", "LDTM", "BAR.SYNC"]
    return Table(rows, f"FP8 stages — {evidence_label(build(names[0]))}", cols)


def recorded_table(names=None, *, lookup=None, with_note=False, title=None):
    """The lab's B200 numbers for each stage's idea, labelled recorded, with the commit and the note.

    pelib.fp8_persistent passes its own stage `lookup` (stages 05-09) and shows the notes instead
    of the ideas."""
    from .facts import Table

    lookup = lookup or stage
    rows = []
    for n in (names or STAGES):
        st = lookup(n)
        r = st.recorded
        row = {"stage": st.name} if with_note else {"stage": st.name, "idea": st.idea}
        row |= {"TFLOPS": r.tflops or "—", "ms": r.ms or "—", "lab commit": f"{r.commit}: {r.change}"}
        if with_note:
            row["note"] = r.note
        rows.append(row | {"evidence": f"recorded ({r.source})"})
    return Table(rows, title or f"B200 results of each idea — recorded ({LAB_LOG}, optimization history)")


def exports_table(names=None):
    """The layout parameters each stage exports (what the emulator checks)."""
    from .facts import Table

    names = [stage(n).name for n in (names or STAGES)]
    keys = ["cta_group", "tile_m", "tile_n", "block_k", "mma_m", "mma_n", "mma_k", "a_box_m",
            "b_box_n", "a_swizzle", "num_stages", "tmem_cols", "epi_ld_x", "smem_bytes"]
    rows = []
    for n in names:
        ex = build(n).exports
        row = {"stage": n, **{k: ex.get(k, "") for k in keys}}
        row["idesc"] = f"{ex['idesc']:#010x}"
        row["a_desc"] = f"{ex['a_desc']:#018x}"
        rows.append(row)
    return Table(rows, "Exported layout parameters — compiled")


def describe_idesc(word: int) -> dict:
    """Decode a kind::f8f6f4 instruction descriptor (PTX ISA instruction-descriptor table)."""
    return {"c_format": (word >> 4) & 3, "a_format": (word >> 7) & 7, "b_format": (word >> 10) & 7,
            "a_major": (word >> 15) & 1, "b_major": (word >> 16) & 1, "N": ((word >> 17) & 0x3F) << 3,
            "M": ((word >> 24) & 0x1F) << 4}


_NUM = re.compile(r"^(\d\d)_")


def stage_number(name: str) -> int:
    m = _NUM.match(stage(name).name)
    return int(m.group(1))


# ---------------------------------------------------------------------------------------------
# What the chapters draw
# ---------------------------------------------------------------------------------------------

def descriptor_table(name: str, defines: dict | None = None, which: str = "both"):
    """The A descriptor and/or the instruction descriptor the stage issues, field by field (compiled).

    which: 'smem', 'instruction' or 'both'.
    """
    from . import descriptors as D
    from .facts import Table

    if which not in ("smem", "instruction", "both"):
        raise ValueError(f"which={which!r}: 'smem', 'instruction' or 'both'")
    ex = build(name, defines).exports
    rows = []
    if which in ("smem", "both"):
        rows += [{"descriptor": "A smem (stage 0)", "bits": b, "field": f, "raw": r, "meaning": m}
                 for b, f, r, m in D.describe(ex["a_desc"], "umma_smem")]
    if which in ("instruction", "both"):
        rows += [{"descriptor": "instruction", "bits": b, "field": f, "raw": r, "meaning": m}
                 for b, f, r, m in D.describe(ex["idesc"], "umma_instr")]
    return Table(rows, f"{stage(name).name}: a_desc = {ex['a_desc']:#018x}, idesc = {ex['idesc']:#010x} — compiled")


def smem_budget(name: str, defines: dict | None = None):
    """Where the stage's dynamic shared memory goes (from its exports; compiled)."""
    from .facts import Table

    ex = build(name, defines).exports
    ns, a, b = ex["num_stages"], ex["a_stage_bytes"], ex["b_stage_bytes"]
    ring = ns * (a + b)
    bars = (2 * ns + 1) * 8 + 8
    rows = [{"part": f"A ring: {ns} stages x {a:,} B", "bytes": ns * a},
            {"part": f"B ring: {ns} stages x {b:,} B", "bytes": ns * b},
            {"part": f"mbarriers ({2 * ns + 1}) + TMEM address slot", "bytes": bars},
            {"part": "alignment slack (1024-B aligned SW128 tiles)", "bytes": ex["smem_bytes"] - ring - bars},
            {"part": "total (smem_bytes)", "bytes": ex["smem_bytes"]},
            {"part": "per-block limit on sm_100 (227 KB)", "bytes": 227 * 1024}]
    return Table(rows, f"{stage(name).name}: dynamic shared memory — compiled")


def results_table(names=None, problem="siglip2", *, iters: int = 20):
    """Measured beside recorded where a B200 is present; recorded only (said so) elsewhere."""
    from . import device
    from .facts import Table

    names = [stage(n).name for n in (names or STAGES)]
    if not device.can_run(ARCH):
        rows = [{"stage": n, "recorded": STAGES[n].recorded.describe(),
                 "measured": "— (needs a B200: " + device.mode(ARCH) + " page)"} for n in names]
        return Table(rows, "Results — recorded (lab notes); measured only on a B200")
    rows = []
    for n in names:  # pragma: no cover - GPU
        r = run(n, problem=problem, iters=iters)
        row = {"stage": n, "verified": "PASS" if r["ok"] else "FAIL"}
        if r.get("ms") is not None:
            row.update({"measured ms": round(r["ms"], 4), "measured TFLOPS": round(r["tflops"], 1)})
        row["recorded"] = STAGES[n].recorded.describe()
        rows.append(row)
    return Table(rows, f"Results on {device.current().name}: measured (today) beside recorded (lab notes)")


def cublas_table(problem="siglip2", *, iters: int = 20):
    """cuBLAS baselines: recorded B200 numbers, plus torch._scaled_mm measured here on an FP8-capable GPU."""
    from . import device, problems
    from .facts import Table

    rows = [{"baseline": "cuBLAS FP8 GEMM only", "ms": CUBLAS_RECORDED["gemm_only"].ms,
             "TFLOPS": CUBLAS_RECORDED["gemm_only"].tflops, "evidence": f"recorded (B200, {LAB_LOG})"},
            {"baseline": "cuBLAS FP8 GEMM + separate bias/pos add", "ms": CUBLAS_RECORDED["unfused"].ms,
             "TFLOPS": "—", "evidence": f"recorded (B200, {LAB_LOG})"}]
    info = device.current()
    if info.present and info.cc and info.cc >= (8, 9) and device.mode() != device.COMPILE_ONLY:  # pragma: no cover - GPU
        prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
        for label, r in cublas_measure(prob, iters=iters).items():
            rows.append({"baseline": f"torch._scaled_mm {label} ({prob.name})", "ms": round(r["ms"], 4),
                         "TFLOPS": round(r["tflops"], 1), "evidence": f"measured ({info.name}, today)"})
    kinds = f"recorded (B200, {LAB_LOG})" + ("; measured here" if len(rows) > 2 else "")
    return Table(rows, f"cuBLAS baselines — {kinds}")


def cublas_measure(prob, *, iters: int = 20, seed: int = 0) -> dict:  # pragma: no cover - GPU
    """Time torch._scaled_mm (cuBLAS FP8, per-tensor scale 1) alone and followed by the comb add."""
    import torch

    dev = torch.device("cuda")
    t = prob.make_inputs(seed=seed, device=dev)
    one = torch.ones((), dtype=torch.float32, device=dev)
    a, bt = t["a"], t["b"].t()   # b [N,K] row-major = [K,N] column-major, what cuBLAS FP8 wants
    P = t["comb"].shape[0]
    if prob.m % P:
        raise StageError(f"M={prob.m} is not a multiple of {P} positions: the unfused add needs whole images")

    def gemm():
        return torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def unfused():
        out = gemm()
        out.view(prob.m // P, P, prob.n).add_(t["comb"])
        return out

    return {"GEMM only": time_fn(gemm, prob, iters=iters), "GEMM + comb add": time_fn(unfused, prob, iters=iters)}


def sass_lines(name: str, prefixes=("UTCQMMA", "UTCBAR", "UTMALDG"), defines: dict | None = None, limit: int = 24):
    """The SASS instructions of the stage whose opcode starts with one of `prefixes` (compiled)."""
    from . import sass
    from .stages import Rendered

    b = build(name, defines)
    keep = [f"/*{off:04x}*/  {text.split(';')[0].split('*/', 1)[-1].strip()} ;"
            for off, op, text in sass.instructions(b.sass) if op.startswith(tuple(prefixes))]
    more = f"\n... {len(keep) - limit} more" if len(keep) > limit else ""
    return Rendered("\n".join(keep[:limit]) + more, "text", f"{stage(name).name}: SASS ({', '.join(prefixes)}) — compiled")


def roles_table(name: str, defines: dict | None = None):
    """Which warp does what in the stage, and which barriers connect them (from its exports)."""
    from .facts import Table

    ex = build(name, defines).exports
    cg, w0, nw = ex["cta_group"], ex["epi_warp0"], ex["epi_warps"]
    who = "the leader CTA's" if cg == 2 else "its"
    rows = [{"warp": "0", "role": "producer (one thread)",
             "waits on": "empty[s]", "signals": "full[s]" + (" of the leader (cta_group::2 TMA)" if cg == 2 else " (TMA complete_tx)")},
            {"warp": "1", "role": f"MMA issuer (one thread{', leader CTA only' if cg == 2 else ''}); TMEM alloc/free",
             "waits on": "full[s]", "signals": "empty[s], mma_done (tcgen05.commit" + (", multicast to both CTAs)" if cg == 2 else ")")},
            {"warp": f"{w0}-{w0 + nw - 1}", "role": f"epilogue: TMEM -> +comb -> BF16 -> global (x{ex['epi_ld_x']} loads)",
             "waits on": "mma_done" + (" (each warp)" if ex.get("epi_poll_each") else f" (warp {w0}, then bar.sync)"),
             "signals": "—"}]
    return Table(rows, f"{stage(name).name}: roles ({ex['num_threads']} threads per CTA, {who} MMAs) — compiled")


def register_benchmarks(stages: dict | None = None, run_fn=None) -> None:
    """`python -m pelib.bench fp8/<stage>` for each stage (pelib.fp8_persistent passes its own)."""
    from . import bench

    stages = STAGES if stages is None else stages
    run_fn = run if run_fn is None else run_fn
    for n in stages:
        def fn(iters: int = 20, _n=n) -> dict:  # pragma: no cover - GPU
            from . import bench as b
            r = run_fn(_n, iters=iters)
            out = {"name": f"fp8/{_n}", "kind": "measured", "median_ms": r.get("ms"), "p10_ms": r.get("p10_ms"),
                   "p90_ms": r.get("p90_ms"), "tflops": r.get("tflops"), "gbps": r.get("gb_s"),
                   "verified": r.get("ok"), "params": {"problem": r["problem"], "recorded": stages[_n].recorded.describe()}}
            out["env"] = b.environment()
            return out
        fn.__doc__ = f"FP8 patch embed stage {n} on the full problem (verify, then time)"
        try:
            bench.register(f"fp8/{n}", arch=ARCH)(fn)
        except ValueError:  # already registered (module reloaded)
            pass


try:
    register_benchmarks()
except Exception:  # pragma: no cover - pelib.bench missing or changed: the stages still build and run
    pass
