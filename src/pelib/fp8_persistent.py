"""Host side of FP8 stages 05-09: their registry, launch configs (persistent grid for 09), emulation, run.

Stages 00-04 live in pelib.fp8; these continue them with the same kernel signature, so fp8's
name-free helpers (kernel_args, time_fn, bf16_round, the Stage/Recorded records) are reused. What
is new here: the epilogue's column map (a 5th/6th warp splits a TMEM lane quarter by columns), the
staged epilogue (pelib.staging), the double-buffered TMEM accumulator and the persistent grid.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import build as _build
from . import fp8
from .fp8 import ARCH, KERNEL, LAB_LOG, Recorded, Stage, StageError

PROPOSALS = "fp8-megakernel-future-proposals-F21-F28.md"
B200_SMS = 148          # B200 SM count (experiment log header: 148 SMs, 74 clusters of 2)
EPI_WARP_OPTIONS = (4, 5, 6)
STAGE_OPTIONS = (4, 5, 6)

# The lab's results for each idea (fp8-megakernel-experiment-log.md, "Optimization history" and the
# experiments named in each note; stage 09 is the later kernel state of the proposals note).
STAGES: dict[str, Stage] = {s.name: s for s in [
    Stage("05_epi_warps", "epilogue warp count 4/5/6; a 5th warp splits a lane quarter by columns (templated bounds)",
          Recorded(1517, 0.722, "521ad55", "5th epilogue warp via column-split",
                   note="F3: 6 warps 0.747 ms; F4: runtime bounds ~0.826 ms (no gain)"), "04_independent_polling"),
    Stage("06_stages", "pipeline depth 6 -> 4 (4/5/6 built)",
          Recorded(1564, 0.700, "cefc59d", "Reduce pipeline stages 6->4",
                   note="F6: 6 stages 0.722 ms / 247 regs / 192 KB; 5: 0.715 / 236; 4: 0.700 / 216 / 131 KB"),
          "05_epi_warps"),
    Stage("07_smem_staged_epilogue", "epilogue stages BF16 rows in padded SMEM, then 16-B coalesced stores",
          Recorded(1729, 0.633, "c32ab7a", "Epilogue SMEM staging -> coalesced stores", note="222 regs, 0 spills"),
          "06_stages"),
    Stage("08_unroll", "Phase 2 copy loop unroll 4 -> 8",
          Recorded(1739, 0.630, "d882aba", "Phase 2 unroll 4->8", note="222 regs; best of the experiment log"),
          "07_smem_staged_epilogue"),
    Stage("09_persistent_megakernel", "persistent static schedule, 2 x 256 TMEM accumulators, 4 epilogue warps, "
          "double-buffered staging, early accumulator release",
          Recorded(2018, 0.543, "F18", "persistent megakernel, 4 epilogue warps (F16), double-buffered SMEM (F18)",
                   source=PROPOSALS, note="F19a early mbarrier signal: 0.542 ms / 2020 TFLOPS; 223 regs, 0 spills"),
          "08_unroll"),
]}

# Exports every stage here adds to fp8.REQUIRED_EXPORTS.
REQUIRED_EXPORTS = fp8.REQUIRED_EXPORTS + tuple(f"epi_cols_w{w}" for w in range(2, 8))
STAGED_EXPORTS = ("staging_offset", "staging_warp_bytes", "staging_pitch", "staging_rows", "staging_halves",
                  "staging_vec", "phase2_unroll")
PERSISTENT_EXPORTS = ("persistent", "tmem_acc_stride", "tmem_acc_buffers")


def stage(name: str) -> Stage:
    """A stage of this part by name ('07_smem_staged_epilogue'), number ('07') or path; 00-04 via pelib.fp8."""
    key = Path(str(name)).stem
    if key in STAGES:
        return STAGES[key]
    hits = [s for n, s in STAGES.items() if n.split("_", 1)[0] == key]
    if len(hits) == 1:
        return hits[0]
    try:
        return fp8.stage(name)
    except StageError:
        raise StageError(f"unknown FP8 stage {name!r}: choose one of {fp8.stage_names() + list(STAGES)}") from None


def stage_names() -> list[str]:
    return list(STAGES)


def build(name: str, defines: dict | None = None, **kw) -> _build.Build:
    """Compile a stage for sm_100a (cached)."""
    return _build.build(stage(name).rel, arch=ARCH, defines=defines, **kw)


def layout(name: str, defines: dict | None = None) -> fp8.Layout:
    """The exported layout of a stage build; raises if an export the host or emulator needs is missing."""
    ex = build(name, defines).exports
    need = REQUIRED_EXPORTS + (STAGED_EXPORTS if "staging_offset" in ex else ()) \
        + (PERSISTENT_EXPORTS if ex.get("persistent") else ())
    missing = [k for k in need if k not in ex]
    if missing:
        raise StageError(f"stage {name} does not export {missing}: add PELIB_EXPORT lines to its .cu")
    return fp8.Layout(dict(ex))


# ---------------------------------------------------------------------------------------------
# The epilogue's row/column map, from the exports
# ---------------------------------------------------------------------------------------------

def epi_columns(ex: dict) -> dict[int, tuple[int, int]]:
    """{epilogue warp: (first column, end column)} from epi_cols_w<w> (begin | end << 16)."""
    w0, nw = ex["epi_warp0"], ex["epi_warps"]
    out = {}
    for w in range(w0, w0 + nw):
        word = ex[f"epi_cols_w{w}"]
        out[w] = (word & 0xFFFF, word >> 16)
    return out


def epilogue_map(ex: dict, acc_col: int):
    """pelib.emulate epilogue_map(warp, chunk) -> (TMEM lane base, TMEM column, output column) from the exports."""
    cols, x = epi_columns(ex), ex["epi_ld_x"]

    def f(w: int, j: int):
        b, _ = cols[w]
        return 32 * (w % 4), acc_col + b + j * x, b + j * x
    return f


def epi_map_table(name: str, defines: dict | None = None):
    """Which TMEM lanes and columns each epilogue warp drains (compiled: from the exports)."""
    from .facts import Table

    ex = build(name, defines).exports
    rows = []
    for w, (b, e) in epi_columns(ex).items():
        rows.append({"warp": w, "TMEM lanes (warp % 4)": f"{32 * (w % 4)}-{32 * (w % 4) + 31}",
                     "columns": f"[{b}, {e})", "tcgen05.ld per tile": (e - b) // ex["epi_ld_x"],
                     "shares its lanes with": ", ".join(str(o) for o in epi_columns(ex) if o != w and o % 4 == w % 4) or "—"})
    return Table(rows, f"{stage(name).name} (NUM_EPI_WARPS={ex['epi_warps']}): epilogue row/column map — compiled")


def check_epi_map(ex: dict) -> list[str]:
    """Problems with an exported epilogue map: lane quarters unread, columns read twice or never."""
    cover = {q: [] for q in range(4)}
    for w, (b, e) in epi_columns(ex).items():
        cover[w % 4].append((b, e))
    issues = []
    for q, spans in cover.items():
        cols = sorted(spans)
        if not cols:
            issues.append(f"TMEM lane quarter {q} is read by no epilogue warp")
            continue
        pos = 0
        for b, e in cols:
            if b != pos:
                issues.append(f"lane quarter {q}: columns [{pos}, {b}) " + ("read twice" if b < pos else "never read"))
            pos = max(pos, e)
        if pos != ex["tile_n"]:
            issues.append(f"lane quarter {q}: columns end at {pos}, not {ex['tile_n']}")
    return issues


# ---------------------------------------------------------------------------------------------
# Launch: one cluster per tile (05-08), or a persistent grid sized by the SM count (09)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchConfig(fp8.LaunchConfig):
    """fp8.LaunchConfig plus the persistent schedule: clusters in the grid and tiles per cluster."""

    clusters: int = 0
    persistent: bool = False
    sm_count: int = 0
    sm_count_source: str = ""

    @property
    def tiles_per_cluster(self) -> tuple[int, int]:
        """(fewest, most) tiles a cluster computes under the static round-robin schedule."""
        return self.tiles // self.clusters, -(-self.tiles // self.clusters)

    def describe(self) -> str:
        if not self.persistent:
            return super().describe()
        lo, hi = self.tiles_per_cluster
        return (f"grid {self.grid[0]} CTAs = {self.clusters} clusters of {self.cluster[0]} on {self.sm_count} SMs "
                f"({self.sm_count_source}), {self.tiles:,} tiles, {lo}-{hi} per cluster, block {self.block[0]} "
                f"threads, {self.smem_bytes:,} B dynamic SMEM")


def persistent_grid(tiles: int, sm_count: int, cg: int) -> int:
    """Clusters of a persistent launch: one CTA per SM, so sm_count // cg clusters, never more than tiles."""
    if sm_count < cg:
        raise StageError(f"{sm_count} SMs cannot hold one {cg}-CTA cluster")
    return max(1, min(tiles, sm_count // cg))


def _sm_count(sm_count: int | None) -> tuple[int, str]:
    if sm_count:
        return int(sm_count), "given"
    from . import device

    info = device.current()
    if info.present and device.can_run(ARCH, info):
        return info.sm_count, f"{info.name}, queried at launch"
    return B200_SMS, "B200's 148 SMs assumed (no B200 here)"


def launch_config(name: str, problem, defines: dict | None = None, sm_count: int | None = None) -> LaunchConfig:
    """Grid, block, cluster and SMEM of a launch; persistent stages get sm_count // CG clusters."""
    lay = layout(name, defines)
    fp8.check_problem(lay, problem)
    M, N = int(problem.m), int(problem.n)
    tiles = (M // lay.cluster_rows) * (N // lay.tile_n)
    cg = lay.cg
    common = dict(block=(lay.num_threads, 1, 1), cluster=(cg, 1, 1), smem_bytes=lay.smem_bytes, tiles=tiles,
                  cluster_in_kernel=cg > 1)
    if not lay.exports.get("persistent"):
        return LaunchConfig(grid=(cg * tiles, 1, 1), clusters=tiles, **common)
    sms, src = _sm_count(sm_count)
    clusters = persistent_grid(tiles, sms, cg)
    return LaunchConfig(grid=(cg * clusters, 1, 1), clusters=clusters, persistent=True, sm_count=sms,
                        sm_count_source=src, **common)


def schedule(cfg: LaunchConfig) -> list[list[int]]:
    """The static schedule of common/scheduler.cuh: cluster c takes tiles c, c + G, c + 2G, ... (G clusters)."""
    return [list(range(c, cfg.tiles, cfg.clusters)) for c in range(cfg.clusters)]


def tensor_map_specs(name: str, problem, tensors: dict | None = None, defines: dict | None = None) -> dict:
    """pelib.tma specs for A [M,K] and B [N,K] (FP8 as uint8, 128-B swizzle, the stage's exported boxes)."""
    from . import tma

    lay = layout(name, defines)
    fp8.check_problem(lay, problem)
    M, N, K = int(problem.m), int(problem.n), int(problem.k)
    addr = (lambda k: int(tensors[k].data_ptr())) if tensors else (lambda k: 0)
    a = tma.make_spec("float8_e4m3fn", (M, K), (lay.a_box_m, lay.a_box_k), address=addr("a"), swizzle=lay.a_swizzle)
    b = tma.make_spec("float8_e4m3fn", (N, K), (lay.b_box_n, lay.b_box_k), address=addr("b"), swizzle=lay.b_swizzle)
    return {"a": a.validate(), "b": b.validate()}


kernel_args = fp8.kernel_args


# ---------------------------------------------------------------------------------------------
# Emulated: one cluster tile from the stage's exports, through its epilogue map and staging
# ---------------------------------------------------------------------------------------------

def _bf16_bits(x):
    import numpy as np

    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16)).astype(np.uint16)


def emulate_tile(name: str, inputs: dict, m0: int = 0, n0: int = 0, defines: dict | None = None,
                 acc_buf: int = 0, return_report: bool = False, overrides: dict | None = None,
                 staging_overrides: dict | None = None):
    """The BF16 output tile at (m0, n0) of one cluster, as the stage computes it (emulated).

    pelib.emulate replays TMA, descriptors, K-advance, the 2-CTA split and the TMEM loads from the
    exports, with the exported epilogue column map and the accumulator in TMEM buffer `acc_buf`
    (columns tmem_acc_col + acc_buf * tmem_acc_stride). The fused epilogue (FP32 + comb, one BF16
    rounding) follows common/epilogue.cuh; a staging stage then sends every BF16 through
    pelib.staging (register -> staging byte -> output element), per CTA.
    """
    import numpy as np

    from . import emulate, staging

    ex = build(name, defines).exports
    nbuf = ex.get("tmem_acc_buffers", 1)
    if not 0 <= acc_buf < nbuf:
        raise StageError(f"acc_buf={acc_buf}: the stage has {nbuf} accumulator buffer(s)")
    acc_col = ex["tmem_acc_col"] + acc_buf * ex.get("tmem_acc_stride", 0)
    kw = {"tmem_acc_col": acc_col, "epilogue_map": epilogue_map(ex, acc_col)}
    kw.update(overrides or {})
    params = emulate.TileParams.from_exports(ex, **kw)
    acc, rep = emulate.emulate_tile(params, inputs["a"], inputs["b"], m0=m0, n0=n0, return_report=True)
    rep.issues.extend(check_epi_map(ex))
    comb = inputs["comb"].float().cpu().numpy()
    rows = (m0 + np.arange(acc.shape[0])) % comb.shape[0]
    fused = _bf16_bits(acc.astype(np.float32) + comb[rows][:, n0:n0 + acc.shape[1]].astype(np.float32))
    srep = None
    if "staging_offset" in ex:
        lay = staging.StagingLayout.from_exports(ex, **(staging_overrides or {}))
        cta_rows = ex["tile_m"]
        parts, srep = [], []
        for v in range(acc.shape[0] // cta_rows):
            o, r = staging.run(lay, fused[v * cta_rows:(v + 1) * cta_rows], ex["smem_bytes"])
            parts.append(o)
            srep.append(r)
            rep.issues.extend(f"CTA {v}: {i}" for i in r.issues)
        fused = np.concatenate(parts)
    out = (fused.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    out[np.isnan(acc)] = np.nan
    return (out, rep, srep) if return_report else out


def emulate_check(name: str, problem="small", seed: int = 0, tile: tuple[int, int] = (1, 0),
                  defines: dict | None = None, acc_buf: int = 0, overrides: dict | None = None,
                  staging_overrides: dict | None = None) -> dict:
    """Emulate one cluster tile of a stage and compare it with the torch reference (within one BF16 ulp)."""
    import numpy as np

    from . import problems, reference

    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    lay = layout(name, defines)
    fp8.check_problem(lay, prob)
    inputs = prob.make_inputs(seed=seed)
    m0, n0 = tile[0] * lay.cluster_rows, tile[1] * lay.tile_n
    got, rep, srep = emulate_tile(name, inputs, m0, n0, defines, acc_buf, True, overrides, staging_overrides)
    m1, n1 = m0 + lay.cluster_rows, n0 + lay.tile_n
    pos = inputs["comb"].shape[0]
    comb = inputs["comb"][(m0 + np.arange(pos)) % pos][:, n0:n1].contiguous()
    ref = reference.patch_embed_reference(inputs["a"][m0:m1], inputs["b"][n0:n1].contiguous(), comb).float().numpy()
    err = np.abs(np.nan_to_num(got, nan=np.inf) - ref)
    ulp = np.abs(ref) * 2.0 ** -7 + 2.0 ** -20
    out = {"stage": stage(name).name, "problem": prob.name, "tile": (m0, n0), "acc_buf": acc_buf, "shape": got.shape,
           "max_abs_err": float(err.max()), "within_1ulp": bool((err <= ulp).all()), "bad": int((err > ulp).sum()),
           "report_ok": rep.ok, "issues": list(rep.issues), "evidence": "emulated (pelib.emulate, pelib.staging)"}
    if srep is not None:
        out["staged"] = {"written_once": sum(r.written_once for r in srep),
                         "elements": sum(r.elements for r in srep), "ok": all(r.ok for r in srep)}
    return out


# ---------------------------------------------------------------------------------------------
# Run on a B200: the same path as pelib.fp8.run (verify, then time), with this part's launch config
# ---------------------------------------------------------------------------------------------

def launch_plan(name: str, problem, inputs: dict, defines: dict | None = None, timing=None,
                sm_count: int | None = None):  # pragma: no cover - GPU
    """A checked pelib.launch plan for the stage on `problem` with CUDA `inputs`."""
    from . import launch, tma

    cfg = launch_config(name, problem, defines, sm_count)
    specs = tensor_map_specs(name, problem, inputs, defines)
    maps = {k: tma.encode(s, owner=inputs[k]) for k, s in specs.items()}
    cluster = (1, 1, 1) if cfg.cluster_in_kernel else cfg.cluster
    return launch.prepare(build(name, defines), kernel_args(problem, maps, inputs, timing), grid=cfg.grid,
                          block=cfg.block, cluster=cluster, smem=cfg.smem_bytes, kernel=KERNEL)


_LIVE: dict = {}   # one problem's inputs (and reference) on the GPU, reused across stages: the full problem is 2 GB


def _cached_inputs(prob, seed, dev):  # pragma: no cover - GPU
    key = (prob.name, prob.m, prob.n, prob.k, seed, str(dev))
    if key not in _LIVE:
        _LIVE.clear()
        _LIVE[key] = {"inputs": prob.make_inputs(seed=seed, device=dev)}
    return key, _LIVE[key]["inputs"]


def run(name: str, inputs: dict | None = None, problem="siglip2", *, defines: dict | None = None,
        seed: int = 0, verify: bool = True, time: bool = True, iters: int = 20, warmup: int = 3) -> dict:
    """Verify the stage against the torch reference, then time it (CUDA events, L2 flushed); B200 only.

    Raises pelib.device.UnsupportedGPU elsewhere. Timing runs only when the stage verified.
    """
    from . import device, problems

    info = device.require(ARCH)
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    cfg = launch_config(name, prob, defines)
    b = build(name, defines)
    return _run_live(name, b, prob, cfg, inputs, info, defines, seed=seed, verify=verify, time=time,
                     iters=iters, warmup=warmup)


def _run_live(name, b, prob, cfg, inputs, info, defines, *, seed, verify, time, iters, warmup) -> dict:  # pragma: no cover - GPU
    import torch

    from . import reference
    from . import verify as _verify

    dev = torch.device("cuda", info.ordinal)
    key = None
    if inputs is None:
        key, inputs = _cached_inputs(prob, seed, dev)
    prob.validate(inputs, device=dev)
    plan = launch_plan(name, prob, inputs, defines)
    result = {"stage": stage(name).name, "problem": prob.name, "config": cfg, "device": info.describe(),
              "evidence": f"measured ({info.name})", "ok": None}
    if verify:
        _verify.poison(inputs["out"])
        plan.run()
        plan.wait()
        if key is not None:
            ref = _LIVE[key].setdefault("ref", None)
            if ref is None:
                ref = _LIVE[key]["ref"] = reference.patch_embed_reference(inputs["a"], inputs["b"], inputs["comb"])
        else:
            ref = reference.patch_embed_reference(inputs["a"], inputs["b"], inputs["comb"])
        rep = _verify.verify_gemm(inputs["out"], ref, a=inputs["a"], b=inputs["b"],
                                  tile=(b.exports["tile_m"], b.exports["tile_n"]), label=f"fp8/{name} on {prob.name}")
        result["verify"] = rep
        result["ok"] = rep.ok
    if time and result["ok"] is not False:
        result.update(fp8.time_fn(plan.run, prob, wait=plan.wait, iters=iters, warmup=warmup))
    return result


def run_timing(name: str = "09_persistent_megakernel", problem="siglip2", *, defines: dict | None = None,
               seed: int = 0):  # pragma: no cover - GPU
    """Launch the TIMING build (after one warm-up launch) and decode its clock64 records (pelib.timing); B200 only."""
    import torch

    from . import device, problems
    from . import timing as _timing

    info = device.require(ARCH)
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    d = {**(defines or {}), "TIMING": 1}
    cfg = launch_config(name, prob, d)
    b = build(name, d)
    lay = _timing.layout(b, cfg.grid[0])
    dev = torch.device("cuda", info.ordinal)
    buf = _timing.alloc(lay, device=dev)
    _, inputs = _cached_inputs(prob, seed, dev)
    plan = launch_plan(name, prob, inputs, d, timing=buf)
    plan.run()          # warm-up: caches, TLBs, the module load
    plan.wait()
    buf.zero_()
    plan.run()
    plan.wait()
    return _timing.decode(buf, lay)


# ---------------------------------------------------------------------------------------------
# Compiled facts and recorded numbers, as tables
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _row(name: str, defines_key: tuple = ()) -> dict:
    defines = dict(defines_key)
    b = build(name, defines or None)
    f, ex, sf = b.facts, b.exports, fp8.sass_facts(b)
    return {"stage": stage(name).name, "defines": ", ".join(f"{k}={v}" for k, v in defines_key) or "—",
            "registers": f.registers, "spills (B)": f.spills, "stack (B)": f.stack,
            "dynamic smem (B)": ex["smem_bytes"], "epi warps": ex["epi_warps"], "stages": ex["num_stages"],
            "SASS instrs": sum(b.histogram.values()), "LDTM": sf["LDTM"], "MMA (SASS)": sf[fp8.MMA_OPCODE[ex["cta_group"]]],
            "STG": sum(c for op, c in b.histogram.items() if op == "STG"),
            "STS": sum(c for op, c in b.histogram.items() if op == "STS")}


def stage_table(names=None, defines: dict | None = None, columns=None):
    """Registers / spills / SMEM / instruction counts per stage, from the builds (compiled)."""
    from .facts import Table, evidence_label

    names = [stage(n).name for n in (names or STAGES)]
    key = tuple(sorted((defines or {}).items()))
    rows = [_row(n, key) for n in names]
    cols = columns or ["stage", "defines", "registers", "spills (B)", "stack (B)", "dynamic smem (B)", "epi warps",
                       "stages", "SASS instrs", "LDTM", "STG", "STS", "MMA (SASS)"]
    return Table(rows, f"FP8 stages 05-09 — {evidence_label(build(names[0]))}", cols)


def sweep_table(name: str, define: str, values, columns=None):
    """One stage built at several values of one define (compiled); values that do not fit say why."""
    from .facts import Table, evidence_label

    rows = []
    for v in values:
        try:
            r = dict(_row(stage(name).name, ((define, v),)))
        except _build.BuildError as e:
            m = re.search(r'static assertion failed with "([^"]+)"', str(e))
            msg = f"does not compile: {m.group(1)}" if m else "does not compile"
            r = {"stage": stage(name).name, "defines": f"{define}={v}", "registers": "—", "note": msg}
        rows.append(r)
    cols = columns or ["defines", "registers", "spills (B)", "dynamic smem (B)", "SASS instrs", "LDTM", "STG", "STS"]
    if any("note" in r for r in rows):
        cols = cols + ["note"]
    return Table(rows, f"{stage(name).name}: {define} sweep — {evidence_label(build(name))}", cols)


def recorded_table(names=None):
    """The lab's B200 numbers for each stage's idea (recorded, with commit and note)."""
    return fp8.recorded_table(list(names or STAGES), lookup=stage, with_note=True,
                              title="B200 results of each idea — recorded (lab notes)")


def results_table(names=None, problem="siglip2", *, iters: int = 20, defines: dict | None = None):
    """Measured beside recorded on a B200; recorded only (said so) elsewhere."""
    from . import device
    from .facts import Table

    names = [stage(n).name for n in (names or STAGES)]
    if not device.can_run(ARCH):
        rows = [{"stage": n, "recorded": stage(n).recorded.describe(),
                 "measured": "— (needs a B200: " + device.mode(ARCH) + " page)"} for n in names]
        return Table(rows, "Results — recorded (lab notes); measured only on a B200")
    rows = []
    for n in names:  # pragma: no cover - GPU
        r = run(n, problem=problem, iters=iters, defines=defines)
        row = {"stage": n, "verified": "PASS" if r["ok"] else "FAIL"}
        if r.get("ms") is not None:
            row.update({"measured ms": round(r["ms"], 4), "measured TFLOPS": round(r["tflops"], 1)})
        row["recorded"] = stage(n).recorded.describe()
        rows.append(row)
    return Table(rows, f"Results on {device.current().name}: measured (today) beside recorded (lab notes)")


def smem_budget(name: str, defines: dict | None = None):
    """Where the stage's dynamic shared memory goes, from its exports (compiled)."""
    from .facts import Table

    ex = build(name, defines).exports
    ns, a, b = ex["num_stages"], ex["a_stage_bytes"], ex["b_stage_bytes"]
    ring = ns * (a + b)
    rows = [{"part": f"pipeline ring: {ns} stages x {a + b:,} B", "bytes": ring}]
    staged = 0
    if "staging_offset" in ex:
        staged = ex["epi_warps"] * ex["staging_warp_bytes"]
        halves = ex.get("staging_halves", 1)
        what = (f"{halves} x 32 rows x {ex['staging_pitch']} B" if halves > 1 else f"32 rows x {ex['staging_pitch']} B")
        rows.append({"part": f"staging: {ex['epi_warps']} warps x {ex['staging_warp_bytes']:,} B ({what})",
                     "bytes": staged})
    bars = ex.get("barrier_bytes")
    rest = ex["smem_bytes"] - ring - staged
    if bars is not None:
        rows.append({"part": "mbarriers + TMEM address slot", "bytes": bars})
        rows.append({"part": "alignment slack (1024-B aligned SW128 tiles)", "bytes": rest - bars})
    else:
        rows.append({"part": "mbarriers, TMEM address slot, alignment slack", "bytes": rest})
    rows += [{"part": "total (smem_bytes)", "bytes": ex["smem_bytes"]},
             {"part": "per-block limit on sm_100 (227 KB)", "bytes": 227 * 1024},
             {"part": "headroom", "bytes": 227 * 1024 - ex["smem_bytes"]}]
    return Table(rows, f"{stage(name).name}: dynamic shared memory — compiled")


def smem_budget_vs_recorded(name: str = "08_unroll", defines: dict | None = None):
    """The build's budget beside the lab's SMEM budget table (recorded, experiment log)."""
    from . import records
    from .facts import Table

    ex = build(name, defines).exports
    rec = records.smem_budget()
    ns, stage_b = ex["num_stages"], ex["a_stage_bytes"] + ex["b_stage_bytes"]
    staged = ex["epi_warps"] * ex["staging_warp_bytes"]
    comp = {c.name.split(" (")[0]: c.bytes for c in rec.components}
    rows = [{"component": "pipeline", "compiled": f"{ns} x {stage_b:,} = {ns * stage_b:,}",
             "recorded": f"{comp.get('pipeline', '—'):,}"},
            {"component": "staging", "compiled": f"{ex['epi_warps']} x {ex['staging_warp_bytes']:,} = {staged:,}",
             "recorded": f"{comp.get('staging', '—'):,}"},
            {"component": "barriers + TMEM slot + alignment", "compiled": f"{ex['smem_bytes'] - ns * stage_b - staged:,}",
             "recorded": f"{comp.get('TMEM addr + mbarriers', '—'):,}"},
            {"component": "total", "compiled": f"{ex['smem_bytes']:,}", "recorded": f"{rec.total:,}"},
            {"component": "limit used", "compiled": f"{227 * 1024:,} (227 KB, per block, opt-in)",
             "recorded": f"{rec.sm_limit:,} (228 KB, per SM)"},
            {"component": "headroom", "compiled": f"{227 * 1024 - ex['smem_bytes']:,}",
             "recorded": f"{rec.sm_limit - rec.total:,} ({rec.headroom_label})"}]
    return Table(rows, f"SMEM budget: {stage(name).name} (compiled) beside the lab's ({rec.source.label}, "
                       f"'{rec.state}')")


# ---------------------------------------------------------------------------------------------
# The barrier protocol of stage 09, modelled: every role as the kernel writes it, random timing
# ---------------------------------------------------------------------------------------------

class _Bar:
    """An mbarrier: arrivals count down to a phase flip; try_wait.parity(p) passes once the phase of parity p completed."""

    def __init__(self, count: int):
        self.count, self.pending, self.phase = count, count, 0

    def arrive(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def passed(self, parity: int) -> bool:
        return (self.phase & 1) != parity     # PTX ISA mbarrier.test_wait.parity: phase of parity p complete


PROTOCOL_BUGS = {
    "acc_empty_parity": "the MMA waits on acc_empty for the tile's own parity instead of its complement",
    "acc_empty_count": "acc_empty expects the leader's epilogue warps only (forgets the peer CTA's)",
    "release_before_read": "the epilogue releases the accumulator before reading it",
    "no_producer_wait": "the producer refills a slot without waiting on empty[s]",
}


def protocol_check(tiles: int = 11, clusters: int = 1, stages: int = 4, num_kb: int = 6, epi_warps: int = 4,
                   acc_bufs: int = 2, cg: int = 2, seed: int = 0, trials: int = 20, bug: str | None = None) -> dict:
    """Run stage 09's producer / MMA / epilogue barrier protocol (one cluster) under random timing (modelled).

    Roles follow 09_persistent_megakernel.cu: ring slots with PipelineState parities, empty[s] freed
    by a multicast commit, acc_full[b] by a multicast commit after the tile's MMAs, acc_empty[b] on
    the leader with cg * epi_warps arrivals (the early release). TMA completions and commits land
    after random delays. Checks: no deadlock; the MMA reads a slot only when it holds this tile's
    k-block; the producer refills a slot only after the MMAs that read it completed; the MMA writes
    an accumulator only after every epilogue warp released its previous tile; the epilogue reads an
    accumulator only after the MMAs of its tile completed. Returns counts and the first violation.
    `bug` (a key of PROTOCOL_BUGS) plants one mistake, to show the model catches it.
    """
    import random

    if bug is not None and bug not in PROTOCOL_BUGS:
        raise ValueError(f"bug={bug!r}: one of {list(PROTOCOL_BUGS)}")
    rng = random.Random(seed)
    my_tiles = list(range(0, tiles, clusters))
    violations: list[str] = []
    for trial in range(trials):
        full = [_Bar(1 + cg) for _ in range(stages)]                     # expect_tx arrive + one TMA per CTA
        empty = [[_Bar(1) for _ in range(stages)] for _ in range(cg)]
        acc_full = [[_Bar(1) for _ in range(acc_bufs)] for _ in range(cg)]
        acc_empty = [_Bar(epi_warps if bug == "acc_empty_count" else cg * epi_warps)
                     for _ in range(acc_bufs)]                            # the leader's
        slot = [None] * stages                  # (tile, kb) whose bytes are in the slot
        slot_busy = [False] * stages            # MMAs issued on it but not completed
        acc = [None] * acc_bufs                 # tile whose complete result is in the accumulator
        acc_writer = [None] * acc_bufs
        readers = [set() for _ in range(acc_bufs)]  # epilogue warps still reading the accumulator
        events: list = []                       # pending async completions: (time, fn)
        now = [0]

        def later(fn):
            events.append((now[0] + rng.randint(1, 6), fn))

        def producer(v):
            idx, ph = 0, 0
            for t in my_tiles:
                for kb in range(num_kb):
                    if bug != "no_producer_wait":
                        yield ("wait", empty[v][idx], ph ^ 1)
                    if slot_busy[idx]:
                        violations.append(f"trial {trial}: producer {v} refills slot {idx} before the MMAs read it")
                    if v == 0:
                        full[idx].arrive()                               # arrive.expect_tx
                    i, data = idx, (t, kb)
                    later(lambda i=i, data=data, v=v: (slot.__setitem__(i, data) if v == 0 else None, full[i].arrive()))
                    idx, ph = (idx + 1) % stages, ph ^ (idx + 1 == stages)
            for _ in range(stages):
                yield ("wait", empty[v][idx], ph ^ 1)
                idx, ph = (idx + 1) % stages, ph ^ (idx + 1 == stages)

        def mma():
            idx, ph = 0, 0
            for it, t in enumerate(my_tiles):
                b, aph = it % acc_bufs, (it // acc_bufs) & 1
                yield ("wait", acc_empty[b], aph if bug == "acc_empty_parity" else aph ^ 1)
                if readers[b]:
                    violations.append(f"trial {trial}: MMA overwrites accumulator {b} while warps {sorted(readers[b])} read it")
                acc[b], acc_writer[b] = None, t
                for kb in range(num_kb):
                    yield ("wait", full[idx], ph)
                    if slot[idx] != (t, kb):
                        violations.append(f"trial {trial}: MMA reads slot {idx} holding {slot[idx]}, wants {(t, kb)}")
                    slot_busy[idx] = True
                    i = idx
                    later(lambda i=i: (slot_busy.__setitem__(i, False), [empty[v][i].arrive() for v in range(cg)]))
                    idx, ph = (idx + 1) % stages, ph ^ (idx + 1 == stages)
                later(lambda b=b, t=t: (acc.__setitem__(b, t), [acc_full[v][b].arrive() for v in range(cg)]))

        def epilogue(v, w):
            for it, t in enumerate(my_tiles):
                b, aph = it % acc_bufs, (it // acc_bufs) & 1
                yield ("wait", acc_full[v][b], aph)
                if acc[b] != t:
                    violations.append(f"trial {trial}: epilogue ({v},{w}) reads accumulator {b} holding tile {acc[b]}, wants {t}")
                if bug == "release_before_read":
                    acc_empty[b].arrive()
                readers[b].add((v, w))
                yield ("work", None, None)
                readers[b].discard((v, w))
                if bug != "release_before_read":
                    acc_empty[b].arrive()

        roles = [producer(v) for v in range(cg)] + [mma()] + [epilogue(v, w) for v in range(cg) for w in range(epi_warps)]
        blocked = {i: None for i in range(len(roles))}
        done: set = set()
        steps = 0
        while len(done) < len(roles):
            steps += 1
            if steps > 10 ** 6:
                violations.append(f"trial {trial}: no progress (livelock)")
                break
            ready = [i for i in range(len(roles)) if i not in done
                     and (blocked[i] is None or blocked[i][0].passed(blocked[i][1]))]
            if events and (not ready or rng.random() < 0.3):
                events.sort(key=lambda e: e[0])
                tm, fn = events.pop(0)
                now[0] = max(now[0], tm)
                fn()
                continue
            if not ready:
                violations.append(f"trial {trial}: deadlock ({len(roles) - len(done)} roles blocked on barriers)")
                break
            i = rng.choice(ready)
            now[0] += 1
            try:
                op, bar, par = next(roles[i])
                blocked[i] = (bar, par) if op == "wait" else None
            except StopIteration:
                done.add(i)
        if violations:
            break
    return {"tiles per cluster": len(my_tiles), "stages": stages, "k-blocks": num_kb, "epilogue warps": epi_warps,
            "trials": trials, "ok": not violations, "first violation": violations[0] if violations else None,
            "evidence": "modelled (the barrier protocol of 09_persistent_megakernel.cu, random timing)"}


# ---------------------------------------------------------------------------------------------
# What the chapters show: sweeps (compiled beside recorded), the ncu evidence, timing views
# ---------------------------------------------------------------------------------------------

def _history_ms(commit: str):
    from . import records

    return next((h for h in records.history() if str(h.commit) == commit), None)


def recorded_epi_warps() -> dict[int, dict]:
    """The lab's times per epilogue warp count (recorded; the 4-warp figure has two sources that disagree)."""
    from . import records

    f3, f4 = records.experiment("F3"), records.experiment("F4")
    before, five = _history_ms("6319928"), _history_ms("521ad55")
    return {
        4: {"ms": before.ms, "source": f"{before.source.note}, history {before.commit} (last 4-warp commit)",
            "note": f"F4 gives ~{f4.baseline_ms} ms 'at 4 epilogue warps' (flagged in book/data/inconsistencies.yaml)"},
        5: {"ms": five.ms, "source": f"{five.source.note}, history {five.commit}",
            "note": f"F4: run-time bounds, ~{f4.result_ms} ms (no gain)"},
        6: {"ms": f3.result_ms, "source": f"{f3.source.note}, {f3.id}", "note": f3.reason or ""},
    }


def recorded_stages() -> dict[int, dict]:
    """The lab's F6 numbers per pipeline depth (recorded)."""
    from . import records

    f6 = records.experiment("F6")
    also = f6.extra.get("also", {})
    return {6: {"ms": f6.baseline_ms, "regs": f6.baseline_regs, "smem_kb": f6.extra.get("baseline_smem_kb")},
            5: {"ms": also.get("ms"), "regs": also.get("regs"), "smem_kb": None},
            4: {"ms": f6.result_ms, "regs": f6.result_regs, "smem_kb": f6.extra.get("result_smem_kb")},
            "source": f"{f6.source.note}, {f6.id}"}


def _measured(name, defines, problem="siglip2", iters=20):  # pragma: no cover - GPU
    r = run(name, problem=problem, defines=defines, iters=iters)
    return (round(r["ms"], 4) if r.get("ms") is not None else "FAIL") if r["ok"] is not False else "FAIL"


def epi_warps_row(warps: int, live: bool | None = None, problem="siglip2") -> dict:
    """Stage 05 at NUM_EPI_WARPS=warps: compiled facts, the recorded time, and a measured one on a B200."""
    from . import device

    r = dict(_row("05_epi_warps", (("NUM_EPI_WARPS", warps),)))
    rec = recorded_epi_warps()[warps]
    row = {"epilogue warps": warps, "registers": r["registers"], "spills (B)": r["spills (B)"],
           "SASS instrs": r["SASS instrs"], "LDTM": r["LDTM"], "STG": r["STG"],
           "recorded ms": rec["ms"], "recorded from": rec["source"], "note": rec["note"]}
    if live if live is not None else device.can_run(ARCH):  # pragma: no cover - GPU
        row["measured ms"] = _measured("05_epi_warps", {"NUM_EPI_WARPS": warps}, problem)
    return row


def epi_warps_table(live: bool | None = None):
    """The 4/5/6 sweep of stage 05: compiled beside recorded (and measured on a B200)."""
    from .facts import Table, evidence_label

    rows = [epi_warps_row(w, live) for w in EPI_WARP_OPTIONS]
    return Table(rows, f"Stage 05, NUM_EPI_WARPS sweep — registers/instructions {evidence_label(build('05'))}; "
                       "ms recorded (B200, lab notes)" + ("; measured here" if "measured ms" in rows[0] else ""))


def stages_row(n: int, live: bool | None = None, problem="siglip2") -> dict:
    """Stage 06 at NUM_STAGES=n: compiled registers and SMEM beside the lab's F6 numbers."""
    from . import device

    r = dict(_row("06_stages", (("NUM_STAGES", n),)))
    rec = recorded_stages()
    row = {"stages": n, "registers": r["registers"], "spills (B)": r["spills (B)"],
           "dynamic smem (B)": r["dynamic smem (B)"], "smem (KiB)": round(r["dynamic smem (B)"] / 1024, 1),
           "recorded ms": rec[n]["ms"] or "—", "recorded regs": rec[n]["regs"] or "—",
           "recorded smem (KB)": rec[n]["smem_kb"] or "—"}
    if live if live is not None else device.can_run(ARCH):  # pragma: no cover - GPU
        row["measured ms"] = _measured("06_stages", {"NUM_STAGES": n}, problem)
    return row


def stages_table(live: bool | None = None):
    """The 4/5/6 sweep of stage 06: compiled beside recorded (and measured on a B200)."""
    from .facts import Table, evidence_label

    rows = [stages_row(n, live) for n in STAGE_OPTIONS]
    return Table(rows, f"Stage 06, NUM_STAGES sweep — registers/SMEM {evidence_label(build('06'))}; recorded: "
                       f"{recorded_stages()['source']}" + ("; measured here" if "measured ms" in rows[0] else ""))


def sweep_widget(which: str, live: bool = True):
    """pelib.widgets sweep over 4/5/6 epilogue warps ('warps') or pipeline stages ('stages'), static table above."""
    from .views import widgets
    from .facts import Table

    if which == "warps":
        opts, row, table, label = EPI_WARP_OPTIONS, epi_warps_row, epi_warps_table, "NUM_EPI_WARPS"
    elif which == "stages":
        opts, row, table, label = STAGE_OPTIONS, stages_row, stages_table, "NUM_STAGES"
    else:
        raise ValueError(f"which={which!r}: 'warps' or 'stages'")
    default = 5 if which == "warps" else 4

    def render(v):
        return sweep_point(which, v, default)

    return widgets.sweep(list(opts), render, static=table(), description=label, value=default, live=live)


def sweep_point(which: str, v: int, default: int):
    """One position of a sweep, showing what the table above cannot: the recorded times with this value
    marked and its shared memory against the per-block limit (a figure), and the SASS this value changes
    against the stage's default build (compiled)."""
    import matplotlib.pyplot as plt

    from . import limits
    from .facts import Table, evidence_label
    from .views.plots import evidence_label as plot_label

    if which == "warps":
        name, define, opts, rec = "05_epi_warps", "NUM_EPI_WARPS", EPI_WARP_OPTIONS, recorded_epi_warps()
        row, src = epi_warps_row(v), f"{LAB_LOG}, history and F3"
    else:
        name, define, opts, rec = "06_stages", "NUM_STAGES", STAGE_OPTIONS, recorded_stages()
        row, src = stages_row(v), rec["source"]
    b, b0 = build(name, {define: v}), build(name, {define: default})
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(7.8, 2.8), gridspec_kw={"width_ratios": [2, 1]})
    pts = [(o, rec[o]["ms"]) for o in opts if isinstance(rec.get(o), dict) and rec[o].get("ms")]
    ax.plot([o for o, _ in pts], [m for _, m in pts], "o-", color="#2e86c1")
    for o, m in pts:
        ax.text(o, m, f" {m:g}", fontsize=8, va="bottom")
    ax.axvline(v, color="k", lw=1.5, alpha=0.6)
    ax.text(v, 0.04, f" {define}={v}", transform=ax.get_xaxis_transform(), fontsize=8)
    ax.set_xticks(list(opts))
    ax.set_xlabel(define)
    ax.set_ylabel("ms on a B200")
    ax.set_title(plot_label("recorded", src), fontsize=8)
    smem = b.exports["smem_bytes"]
    bx.bar([0], [smem], width=0.5, color="#2e86c1" if smem <= limits.SMEM_LIMIT else "#c0392b")
    bx.axhline(limits.SMEM_LIMIT, color="red", ls="--", lw=1)
    bx.text(0.55, limits.SMEM_LIMIT, f"per-block limit\n{limits.SMEM_LIMIT:,} B", fontsize=7, color="red",
            ha="center", va="bottom")
    bx.text(0, smem / 2, f"{smem:,} B", rotation=90, ha="center", va="center", color="white", fontsize=8)
    bx.set_xlim(-0.5, 0.85)
    bx.set_ylim(0, limits.SMEM_LIMIT * 1.25)
    bx.set_xticks([])
    bx.set_ylabel("dynamic shared memory (B)")
    bx.set_title("shared memory: compiled", fontsize=8)
    fig.tight_layout()
    h, h0 = b.histogram, b0.histogram
    delta = [{"SASS opcode": op, f"{define}={default}": h0.get(op, 0), f"{define}={v}": h.get(op, 0),
              "change": h.get(op, 0) - h0.get(op, 0)}
             for op in sorted(set(h) | set(h0)) if h.get(op, 0) != h0.get(op, 0)]
    label = evidence_label(b)
    point = Table([row], f"{define}={v} — registers/SMEM {label}; ms recorded ({src})")
    if not delta:
        return [fig, point, f"The SASS of {define}={v} has the same opcode counts as the default "
                            f"{define}={default} ({label})."]
    return [fig, point, Table(delta, f"SASS opcodes that change against {define}={default} — {label}")]


def ncu_tables():
    """The lab's ncu A/B around SMEM staging (recorded), one Table per section of the note."""
    from . import records
    from .facts import Table

    out = []
    by = {}
    for m in records.ncu():
        by.setdefault(m.table, []).append(m)
    titles = {"build": "Build stats (ptxas)", "stalls": "Warp stall breakdown (% of peak sustained active)",
              "memory": "Memory throughput (%)", "uncoalesced": "Uncoalesced access",
              "compare": "compare.py findings (>5% change)"}
    for t, ms in by.items():
        rows = [{"metric": m.metric, "before staging": m.baseline, "with staging": m.after,
                 "change": "" if m.delta is None else f"{m.delta:+g} {m.delta_kind or ''}".strip()} for m in ms]
        out.append(Table(rows, f"{titles.get(t, t)} — recorded ({ms[0].source.note}, ncu --set detailed, B200)"))
    return out


def kloop_account(defines: dict | None = None, k: int = 768):
    """The static SASS account of stage 09's MMA warp (compiled), beside the lab's 475 budget (recorded)."""
    from . import records, sass_account

    b = build(FINAL_STAGE, defines)
    acc = sass_account.account(b.sass, k // b.exports["block_k"])
    return acc, sass_account.account_table(acc, records.instruction_budgets()[0])


FINAL_STAGE = "09_persistent_megakernel"

# The phases the TIMING build records, per role, with the lab's name for each (w1 stall-isolation note).
TIMING_PHASES = {
    "producer (warp 0)": ["producer_wait", "tma_issue"],
    "MMA (warp 1, leader)": ["epi_wait", "tma_wait", "kloop"],
    "epilogue (warps 2-5)": ["acc_wait", "epi_phase1", "epi_phase2"],
}
LAB_NAMES = {"epi_wait": "epilogue-barrier wait (epi_wait)", "tma_wait": "TMA stage-0 wait (tma0_wait)",
             "kloop": "K-loop", "acc_wait": "MMA-done wait (ml_wait)", "epi_phase1": "Phase 1 (TMEM readback)",
             "epi_phase2": "Phase 2 (stores; 2B)", "producer_wait": "producer: first empty-slot wait",
             "tma_issue": "producer: TMA issue (with later waits)"}


def recorded_timing_table():
    """The lab's clock64 per-tile phases (recorded), each with its note and section."""
    from . import records
    from .facts import Table

    want = {"tma0_wait": "TMA stage-0 wait", "kloop": "K-loop", "epi_wait": "epilogue-barrier wait",
            "phase1": "Phase 1 (TMEM readback)", "phase2b": "Phase 2B (stores)", "ml_wait": "MMA-done wait", "tile": "tile"}
    rows = []
    for p in records.phases():
        if p.phase in want:
            rows.append({"phase": want[p.phase], "warp": p.warp, "cycles": p.cycles,
                         "share": f"{p.pct}% of {p.of}" if p.pct is not None else "—",
                         "source": f"{p.source.note} § {p.source.section}"})
    return Table(rows, "clock64 per tile — recorded (lab notes; B200, the lab's kernel)")


def timing_layout_table(problem="siglip2", sm_count: int | None = None):
    """What the TIMING build records and how big the buffer is for a launch (compiled)."""
    from . import problems, timing
    from .facts import Table

    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    b = build(FINAL_STAGE, {"TIMING": 1})
    cfg = launch_config(FINAL_STAGE, prob, {"TIMING": 1}, sm_count)
    lay = timing.layout(b, cfg.grid[0])
    rows = []
    for role, phs in TIMING_PHASES.items():
        for ph in phs:
            rows.append({"role": role, "phase id": timing.phase_id(ph), "phase": ph, "lab's name": LAB_NAMES[ph],
                         "what it brackets": timing.phase_notes()[ph]})
    cap = (f"TIMING build of {FINAL_STAGE}: records [cta][warp][tile][phase][start, end] of u64, "
           f"{lay.ctas} CTAs x {lay.warps} warps x {lay.tiles} tiles x {lay.phases} phases = "
           f"{lay.words * 8:,} B ({lay.unit}); tiles past {lay.tiles} per CTA are not recorded — compiled")
    return Table(rows, cap)


def timing_bars(t, evidence_source: str):
    """Measured per-warp phase averages of a decoded Timing, as stacked bars (pelib.plots.phase_bars)."""
    from .views import plots

    summ = t.summary()
    data = {}
    names = {0: "W0 producer", 1: "W1 MMA"}
    for role, phs in TIMING_PHASES.items():
        for ph in phs:
            for w, st in summ.get(ph, {"warps": {}})["warps"].items():
                data.setdefault(names.get(w, f"W{w} epilogue"), {})[LAB_NAMES[ph]] = st["avg"]
    return plots.phase_bars(dict(sorted(data.items())), "measured", evidence_source,
                            title=f"{FINAL_STAGE}, TIMING build: average per tile", unit=t.layout.unit,
                            phases=_PHASE_ORDER)


def timing_table(t):
    """Measured per-warp, per-phase statistics of a decoded Timing (avg / p95 / min / max, in its unit)."""
    from .facts import Table

    rows = []
    for role, phs in TIMING_PHASES.items():
        for ph in phs:
            row = t.summary().get(ph)
            if not row:
                continue
            for w, st in sorted(row["warps"].items()):
                rows.append({"role": role, "phase": LAB_NAMES[ph], "warp": w, "n": st["n"], "avg": round(st["avg"]),
                             "p95": round(st["p95"]), "min": round(st["min"]), "max": round(st["max"])})
    return Table(rows, f"TIMING build, per warp and phase ({t.layout.unit}) — measured")


def timing_build_table():
    """The TIMING build beside the normal one: what instrumentation costs (compiled)."""
    from .facts import Table, evidence_label
    from . import sass

    rows = []
    for label, d in (("normal", None), ("TIMING", {"TIMING": 1})):
        b = build(FINAL_STAGE, d)
        ins = sass.instructions(b.sass)
        rows.append({"build": label, "registers": b.facts.registers, "spills (B)": b.facts.spills,
                     "stack (B)": b.facts.stack, "SASS instrs": len(ins),
                     "clock reads (CS2R SR_CLOCKLO)": sum(1 for _, op, t in ins if "SR_CLOCKLO" in t),
                     "64-bit global stores (STG.E.64)": sum(1 for _, op, _ in ins if op == "STG.E.64"),
                     "register ceiling": 255})
    return Table(rows, f"{FINAL_STAGE}: normal and TIMING builds — {evidence_label(build(FINAL_STAGE))}")


def f4_table():
    """Stage 05's epilogue with templated vs run-time column bounds, from the SASS (compiled)."""
    from . import sass_account
    from .facts import Table, evidence_label

    rows = []
    for label, path in (("templated bounds (521ad55)", stage("05_epi_warps").rel),
                        ("run-time bounds (F4)", "fp8/variants/05_f4_runtime_bounds.cu")):
        b = _build.build(path, arch=ARCH)
        g = sass_account.gaps(b.sass, "LDTM")
        rows.append({"epilogue": label, "registers": b.facts.registers, "LDTM in SASS": len(g) + 1,
                     "gaps between TMEM loads with a branch": sum(1 for x in g if x["branches"]),
                     "most comb loads (LDG) between two TMEM loads": max(x["LDG"] for x in g),
                     "loops around a TMEM load": len(sass_account.loops_containing(b.sass, "LDTM"))})
    return Table(rows, f"Stage 05, 5 warps: templated vs run-time column bounds — {evidence_label(build('05'))}")


def staging_sample(name: str = "07_smem_staged_epilogue", defines: dict | None = None, picks=None):
    """A few BF16 traced through the staging: (warp, lane, chunk, register) -> staging byte -> (row, col)."""
    from . import staging
    from .facts import Table

    ex = build(name, defines).exports
    lay = staging.StagingLayout.from_exports(ex)
    p1, rep = staging.trace(lay)
    want = picks or [(lay.cols[0][0], 0, 0, 0), (lay.cols[0][0], 1, 0, 0), (lay.cols[0][0], 0, 0, 8),
                     (lay.cols[-1][0], 31, 3, 31), (lay.cols[1][0], 5, 7, 17)]
    rows = []
    for w, l, j, r in want:
        k = int(((p1["warp"] == w) & (p1["lane"] == l) & (p1["chunk"] == j) & (p1["reg"] == r)).nonzero()[0][0])
        rows.append({"warp": w, "lane": l, "tcgen05.ld chunk": j, "register": r,
                     "TMEM (lane, col)": (int(p1["tmem_lane"][k]), int(p1["col"][k])),
                     "staging byte": f"{int(p1['smem'][k]):,}", "output (row, col)": (int(p1["out_row"][k]), int(p1["out_col"][k]))})
    verdict = ("every one of the " f"{rep.elements:,} outputs written exactly once, from its own accumulator"
               if rep.ok else "; ".join(rep.issues))
    return Table(rows, f"{stage(name).name}: BF16 through the staging — {verdict} (emulated, pelib.staging)")


def bank_table(names=("07_smem_staged_epilogue", FINAL_STAGE)):
    """Shared-memory wavefronts per 16-B access, padded vs unpadded rows (modelled: 32 banks of 4 B)."""
    from . import staging
    from .facts import Table

    rows = []
    for n in names:
        ex = build(n).exports
        lay = staging.StagingLayout.from_exports(ex)
        data = 2 * max(e - b for _, b, e in lay.cols) // lay.halves
        for label, pitch in (("padded (as built)", lay.pitch), ("unpadded", data)):
            lp = staging.StagingLayout.from_exports(ex, pitch=pitch)
            rows.append({"stage": stage(n).name, "rows": label, "pitch (B)": pitch,
                         "Phase 1 st.shared.v4": staging.phase1_wavefronts(lp),
                         "Phase 2 ld.shared.v4": staging.phase2_wavefronts(lp), "ideal": 4})
    return Table(rows, "Wavefronts per warp-wide 16-B shared access — modelled (32 banks x 4 B; 512 B need 4)")


def recorded_timing_bars():
    """The lab's clock64 tile (recorded) in the same shape as timing_bars."""
    from . import records
    from .views import plots

    rec = records.w1_reconciliation()
    lo, hi = records.phase_range("epi_wait")
    f25 = records.f25_warps()
    data = {"W1 MMA": {LAB_NAMES["tma_wait"]: rec["W1"]["tma0_wait"], LAB_NAMES["kloop"]: rec["W1"]["kloop"],
                       LAB_NAMES["epi_wait"]: rec["W1"]["epi_wait"]}}
    for w in f25:
        data[f"{w.warp} epilogue"] = {LAB_NAMES["epi_phase1"]: w.avg}
    data["W3 epilogue (5-warp kernel)"] = {LAB_NAMES["acc_wait"]: rec["W3"]["ml_wait"],
                                           LAB_NAMES["epi_phase1"]: rec["W3"]["phase1"],
                                           LAB_NAMES["epi_phase2"]: rec["W3"]["phase2b"]}
    data = {(k if k.startswith(("W1", "W3 epilogue (")) else f"{k} (F25)"): v for k, v in data.items()}
    return plots.phase_bars(data, "recorded", f"{f25[0].source.note}; {records.phases()[0].source.note}",
                            title=f"The lab's clock64 tile (epi_wait {lo:,}-{hi:,} cycles across its notes)",
                            phases=_PHASE_ORDER)


_PHASE_ORDER = [LAB_NAMES[p] for p in ("producer_wait", "tma_issue", "tma_wait", "kloop", "epi_wait",
                                       "acc_wait", "epi_phase1", "epi_phase2")]


def unroll_table(names=("07_smem_staged_epilogue", "08_unroll"), warps=(5, 4)):
    """Phase 2's copy loop in the SASS: shared loads / global stores per build (compiled)."""
    from . import sass
    from .facts import Table, evidence_label

    rows = []
    for n in names:
        for w in warps:
            b = build(n, {"NUM_EPI_WARPS": w})
            h = sass.opcode_histogram(b.sass, modifiers=True)
            rows.append({"stage": stage(n).name, "epilogue warps": w, "PHASE2_UNROLL": b.exports["phase2_unroll"],
                         "registers": b.facts.registers, "LDS.128 in SASS": h.get("LDS.128", 0),
                         "STG.E.128 in SASS": h.get("STG.E.128", 0), "SASS instrs": sum(h.values())})
    return Table(rows, f"Phase 2 copy loop — {evidence_label(build(names[0]))}")


def schedule_table(problem="siglip2", clusters_shown: int = 4, tiles_shown: int = 5, sm_count: int | None = None):
    """The first tiles of the first clusters under the static schedule, with their CTA coordinates."""
    from . import problems
    from .facts import Table

    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    cfg = launch_config(FINAL_STAGE, prob, sm_count=sm_count)
    lay = layout(FINAL_STAGE)
    n_tiles = int(prob.n) // lay.tile_n
    rows = []
    for c, tiles in enumerate(schedule(cfg)[:clusters_shown]):
        for it, t in enumerate(tiles[:tiles_shown]):
            m_blk, n_blk = divmod(t, n_tiles)
            rows.append({"cluster": c, "iteration": it, "tile": t, "accumulator": it % 2,
                         "parity": (it // 2) & 1, "rows (CTA 0 / CTA 1)":
                         f"{m_blk * lay.cluster_rows} / {m_blk * lay.cluster_rows + lay.tile_m}",
                         "columns": f"{n_blk * lay.tile_n}-{n_blk * lay.tile_n + lay.tile_n - 1}"})
    return Table(rows, f"Static schedule (common/scheduler.cuh), {cfg.describe()} — compiled (the launch set-up "
                       f"from {FINAL_STAGE}'s exports, its tile order replayed on the host)")


def barrier_table(name: str = FINAL_STAGE, defines: dict | None = None):
    """The mbarriers of the persistent stage: count, who arrives, who waits, which parity (from its exports)."""
    from .facts import Table

    ex = build(name, defines).exports
    ns, cg, ew = ex["num_stages"], ex["cta_group"], ex["epi_warps"]
    rows = [
        {"barrier": f"full[s], s < {ns}", "count": 1, "arrivals": "leader producer's arrive.expect_tx; "
         f"{cg} x {ex['a_stage_bytes'] + ex['b_stage_bytes']:,} B of TMA transactions",
         "waits": "MMA thread (leader), parity = ring lap & 1"},
        {"barrier": f"empty[s], s < {ns}", "count": 1, "arrivals": "tcgen05.commit, multicast to both CTAs",
         "waits": "each CTA's producer, parity = (ring lap & 1) ^ 1 (a fresh barrier passes)"},
        {"barrier": f"acc_full[b], b < {ex['tmem_acc_buffers']}", "count": 1,
         "arrivals": "tcgen05.commit after the tile's last MMA, multicast to both CTAs",
         "waits": "every epilogue warp, parity = (iteration / 2) & 1"},
        {"barrier": f"acc_empty[b], b < {ex['tmem_acc_buffers']}", "count": cg * ew,
         "arrivals": f"one lane of each of the {cg} x {ew} epilogue warps, after its last tcgen05.ld of the tile "
                     "(remote arrive on the leader)", "waits": "MMA thread (leader), parity = ((iteration / 2) & 1) ^ 1"},
    ]
    return Table(rows, f"{stage(name).name}: mbarriers — from its exports and source (compiled)")


def protocol_table():
    """protocol_check for the stage as built and with each planted bug (modelled)."""
    from .facts import Table

    ex = build(FINAL_STAGE).exports
    base = dict(stages=ex["num_stages"], epi_warps=ex["epi_warps"], acc_bufs=ex["tmem_acc_buffers"], cg=ex["cta_group"])
    rows = [{"variant": "as built", **{k: v for k, v in protocol_check(**base).items() if k in ("ok", "first violation")}}]
    for bug, what in PROTOCOL_BUGS.items():
        r = protocol_check(bug=bug, **base)
        rows.append({"variant": what, "ok": r["ok"], "first violation": r["first violation"]})
    return Table(rows, "The barrier protocol under random timing (20 runs of 11 tiles each) — modelled")


try:  # `python -m pelib.bench fp8/05_epi_warps` ... `fp8/09_persistent_megakernel` on a B200
    fp8.register_benchmarks(STAGES, run)
except Exception:  # pragma: no cover - pelib.bench missing or changed: the stages still build and run
    pass
