"""The part "NVFP4 on B200": the single-stage kernel and the pipelined one, their facts, records and model.

Over 700 lines: one module per book part (CONTRIBUTING.md): the three NVFP4 chapters call it.
"""
from __future__ import annotations

import numpy as np

from .. import bench, device, paths, problems, records, results, sol
from ..isa import descriptors as D, sass
from ..facts import Table, evidence_label
from ..kinds.nvfp4 import max_stages_that_fit, sf_ktile_bytes  # noqa: F401  (the chapter shows the refusal)
from ..models.overlap import SHAPES, STAGE_COUNTS, modelled_sweep, recorded_sweep, simulate
from ..stage import Stage, Timed
from ..stages import Rendered
from . import plots, sim, widgets
from .emulate_plots import checked, checks_table as checked_table

RECORD_NOTE = "nvfp4-gemm-optimization-log.md"
# The SASS opcode of tcgen05.mma.kind::mxf4nvf4.block_scale.block16, as nvdisasm (CUDA 13) prints it:
# "UTCOMMA.4X gdesc[..], gdesc[..], tmem[..], tmem[..], idesc[..], tmem[..], UP0" (.4X = scale_vec::4X).
MMA_OPCODE = "UTCOMMA"
SF_COPY_OPCODE = "UTCCP"


def stage(name: str = "01_pipelined", stages: int | None = None, **defines) -> Stage:
    """An NVFP4 stage; 01 and 02 take NUM_STAGES (their default unless given), 02 also STAGING_IN_RING."""
    d = dict(defines)
    if stages is not None and not name.startswith("00"):
        d["NUM_STAGES"] = int(stages)
    return Stage(f"nvfp4/{name}", d)


def build(name: str = "01_pipelined", stages: int | None = None, **defines):
    return stage(name, stages, **defines).build


def depth(name: str, stages: int | None = None) -> int:
    """The ring depth a build of `name` has: 1 for 00, `stages` if given, else the stage's own default
    (its exports' pipeline_stages), never None."""
    if name.startswith("00"):
        return 1
    return int(stages) if stages is not None else int(stage(name).exports.pipeline_stages)


def _label(name: str, stages: int | None) -> str:
    return name if name.startswith("00") else f"{name} (NUM_STAGES={depth(name, stages)})"


# ---- compiled facts ------------------------------------------------------------------------------

def facts(s: Stage) -> dict:
    """What the compiler says about one build (compiled): registers, spills, shared memory against its limit."""
    b, ex = s.build, s.exports
    smem = ex.smem_bytes + b.facts.smem_static
    return {"stages": ex.pipeline_stages, "registers": b.facts.registers, "spills": b.facts.spills,
            "stack": b.facts.stack, "smem_total": smem, "smem_limit": ex.smem_limit, "fits": smem <= ex.smem_limit,
            "tmem_cols": ex["tmem_cols"], "mma_instructions": b.histogram.get(MMA_OPCODE, 0),
            "sf_copies": b.histogram.get(SF_COPY_OPCODE, 0)}


def stage_facts(stages: int) -> dict:
    """Compiled facts of 01_pipelined.cu at NUM_STAGES = stages (builds are cached on disk)."""
    return facts(stage("01_pipelined", stages))


def _facts_row(f: dict) -> dict:
    return {"NUM_STAGES": f["stages"], "registers": f["registers"], "spills (B)": f["spills"],
            "smem (KB)": f"{f['smem_total'] / 1024:.1f}",
            "limit (KB)": f["smem_limit"] // 1024, "fits 227 KB": "yes" if f["fits"] else "NO",
            "TMEM cols": f["tmem_cols"], f"{MMA_OPCODE} in SASS": f["mma_instructions"]}


def stage_table(counts=STAGE_COUNTS) -> Table:
    """Registers, spills, shared memory and the 227 KB verdict per NUM_STAGES (evidence: compiled)."""
    return Table([_facts_row(stage_facts(s)) for s in counts],
                 f"01_pipelined.cu per NUM_STAGES — {evidence_label(build('01_pipelined', counts[0]))}")


def seven_stages() -> str:
    """Why 7 stages never ran: the build fits the kernel's own checks but not the launch (compiled)."""
    s7 = stage("01_pipelined", 7)
    ex = s7.exports
    lines = [f"7 stages: {ex.smem_bytes:,} B > {ex.smem_limit:,} B; at most {max_stages_that_fit(ex)} stages fit"]
    try:  # the launch is refused before it reaches a GPU
        s7.launch_config("k16384")
    except ValueError as e:
        lines.append(f"{type(e).__name__}: {e}")
    return "\n".join(lines)


def descriptor_table(name: str = "00_single_stage", stages: int | None = None) -> Table:
    """The three descriptors the stage issues, field by field (compiled): A/B operand, SF copy, instruction."""
    ex = stage(name, stages).exports
    rows = []
    for what, word, kind in (("A operand (stage 0)", ex["a_desc"], "umma_smem"),
                             ("SFA copy source (stage 0, atom 0)", ex["sf_desc"], "umma_smem"),
                             ("instruction", ex["idesc"], "umma_instr_block_scaled")):
        rows += [{"descriptor": what, "bits": b, "field": f, "raw": r, "meaning": m} for b, f, r, m in D.describe(word, kind)]
    return Table(rows, f"{_label(name, stages)}: a_desc = {ex['a_desc']:#018x}, sf_desc = {ex['sf_desc']:#018x}, "
                       f"idesc = {ex['idesc']:#010x} — compiled")


def _pick(stages: int, name: str | None):
    name = name or ("00_single_stage" if stages == 1 else "01_pipelined")
    return name, stage(name, None if name.startswith("00") else stages)


def smem_budget(stages: int = 1, name: str | None = None) -> Table:
    """Where the dynamic shared memory goes, from the exports (compiled)."""
    name, s = _pick(stages, name)
    ex = s.exports
    n = ex.pipeline_stages
    a, b, sf = ex["b_smem_offset"] - ex["a_smem_offset"], ex["sfa_smem_offset"] - ex["b_smem_offset"], sf_ktile_bytes(ex)
    ring = n * ex["stage_bytes"]
    rows = [{"part": f"A: {n} x 128 rows x 128 B (packed E2M1, SW128)", "bytes": n * a},
            {"part": f"B: {n} x 128 rows x 128 B", "bytes": n * b},
            {"part": f"SFA + SFB: {n} x 2 x {sf} B (4 atoms of 512 B each)", "bytes": 2 * n * sf},
            {"part": "1024-B alignment slack, mbarriers, TMEM address slot", "bytes": ex.smem_bytes - ring},
            {"part": "total (smem_bytes)", "bytes": ex.smem_bytes},
            {"part": f"per-block limit on sm_100 ({ex.smem_limit // 1024} KB)", "bytes": ex.smem_limit}]
    return Table(rows, f"{_label(name, n)}: dynamic shared memory — compiled")


def tmem_table(stages: int = 1, name: str | None = None) -> Table:
    """Which TMEM columns hold what (compiled): the FP32 accumulator and each stage's scale factors."""
    name, s = _pick(stages, name)
    ex = s.exports
    mmas = ex.block_k // 64                     # MMAs per K tile (K = 64 each)
    rows = [{"columns": f"{ex['tmem_acc_col']}..{ex['tmem_acc_col'] + ex.tile_n - 1}",
             "holds": "accumulator D, FP32: lane = output row, column = output column"}]
    for st in range(ex.pipeline_stages):
        c = st * ex["tmem_stage_cols"]
        for op, col in (("SFA", ex["sfa_tmem_col"] + c), ("SFB", ex["sfb_tmem_col"] + c)):
            rows.append({"columns": f"{col}..{col + mmas * ex['sf_tmem_step_cols'] - 1}",
                         "holds": f"stage {st} {op}: MMA k reads columns {col}+4k..{col}+4k+3; lane r of each "
                                  f"32-lane quarter = rows r, r+32, r+64, r+96 (one column each)"})
    rows.append({"columns": f"(allocated {ex['tmem_cols']})", "holds": "tcgen05.alloc takes a power of two >= 32"})
    return Table(rows, f"{_label(name, ex.pipeline_stages)}: tensor memory — compiled")


def sass_lines(name: str = "00_single_stage", stages: int | None = None,
               prefixes=("UTMALDG", "UTCCP", "UTCOMMA", "UTCBAR"), limit: int = 24) -> Rendered:
    """The SASS lines of the data path (TMA loads, SF copies, block-scaled MMAs, commit), compiled."""
    keep = [f"/*{off:04x}*/  {text.split(';')[0].split('*/', 1)[-1].strip()} ;"
            for off, op, text in sass.instructions(build(name, stages).sass) if op.startswith(tuple(prefixes))]
    more = f"\n... {len(keep) - limit} more" if len(keep) > limit else ""
    return Rendered("\n".join(keep[:limit]) + more, "text", f"{_label(name, stages)}: SASS ({', '.join(prefixes)}) — compiled")


def map_lines(name: str = "00_single_stage", problem="k16384", stages: int | None = None) -> str:
    """One line per tensor map of a launch (pelib.tma specs from the exported boxes) and its bytes per box."""
    specs = stage(name, stages).tensor_map_specs(problem)
    return "\n".join(f"{k:3s} {s.describe()}  -> {s.box_bytes} B per box" for k, s in specs.items())


def data_path_table(problem="k16384") -> Table:
    """Bytes through each hop of the single-stage kernel, per K tile and per CTA (derived from the exports)."""
    s = stage("00_single_stage")
    prob, ex = s.problem(problem), s.exports
    kt = prob.k // ex.block_k
    a, b, sf = ex["b_smem_offset"] - ex["a_smem_offset"], ex["sfa_smem_offset"] - ex["b_smem_offset"], sf_ktile_bytes(ex)
    rows = [{"hop": "global -> SMEM (TMA: A, B boxes 128 B x 128 rows, SW128)", "per K tile (B)": a + b,
             "per CTA (B)": kt * (a + b)},
            {"hop": "global -> SMEM (TMA: SFA, SFB boxes 256 B x 8 rows)", "per K tile (B)": 2 * sf, "per CTA (B)": kt * 2 * sf},
            {"hop": "SMEM -> TMEM (tcgen05.cp 32x128b.warpx4, 8 per K tile)", "per K tile (B)": 2 * sf,
             "per CTA (B)": kt * 2 * sf},
            {"hop": "SMEM -> tensor core (4 x tcgen05.mma K=64 through descriptors)", "per K tile (B)": a + b,
             "per CTA (B)": kt * (a + b)},
            {"hop": "TMEM -> registers (tcgen05.ld 32x32b.x32, 4 per warp)", "per K tile (B)": "",
             "per CTA (B)": ex.tile_m * ex.tile_n * 4},
            {"hop": "registers -> global (FP16, 16-B stores)", "per K tile (B)": "", "per CTA (B)": ex.tile_m * ex.tile_n * 2}]
    return Table(rows, f"{prob.name}: {kt} K tiles per CTA, {s.launch_config(prob).ctas} CTAs — derived from the "
                       "exports (compiled)")


def emulate_check(name: str = "00_single_stage", stages: int | None = None, problem=None, tile=(0, 1), seed: int = 3,
                  overrides: dict | None = None, defines: dict | None = None) -> dict:
    """One tile emulated from the stage's exports against pelib.reference (FP16 outputs, within one ulp);
    the problem defaults to 128 x 256 x 2048 (8 K tiles: every ring wraps); overrides change exports."""
    r = stage(name, stages, **(defines or {})).emulate_check(problem, tile, seed, overrides=overrides)
    return checked({**r, "stage": _label(name, stages)})


# ---- recorded and modelled ------------------------------------------------------------------------

def sol_table() -> Table:
    """Recorded times against the floors: the log's SOL and pelib.sol's B200 floor (µs)."""
    rec, logsol = recorded_sweep(), records.nvfp4_sol_us()
    rows = []
    for prob in problems.nvfp4_log_shapes():
        f = sol.floor(prob, "B200")
        rows.append({"shape": prob.name, "CTAs (148 SMs)": (prob.n // 128) * (prob.m // 128),
                     "MB moved (min)": f"{prob.min_bytes / 1e6:.1f}", "floor (µs, pelib.sol)": f"{f.t_floor_s * 1e6:.2f}",
                     "log's SOL (µs)": logsol[prob.name], "1 stage (µs)": f"{rec[prob.name][1]:.1f}",
                     "x SOL (1 stage)": f"{rec[prob.name][1] / logsol[prob.name]:.1f}",
                     "5 stages (µs)": f"{rec[prob.name][5]:.1f}", "x SOL (5 stages)": f"{rec[prob.name][5] / logsol[prob.name]:.1f}"})
    return Table(rows, f"Speed of light vs recorded — floors: modelled (datasheet bandwidth); times: recorded ({RECORD_NOTE})")


def breakdown_table(stages: int = 1) -> Table:
    """Where the time goes at NUM_STAGES = stages, per shape (evidence: modelled, fitted to recorded)."""
    mod, rec = modelled_sweep(), recorded_sweep()
    rows = []
    for shape in SHAPES:
        p, kt = mod[shape]["params"], mod[shape]["k_tiles"]
        per = {"load round trip / S": (p.t_load + p.t_mma) / stages, "bandwidth share": p.t_stream, "tensor core": p.t_mma}
        bound = max(per, key=per.get)
        loop = kt * per[bound]
        rows.append({"shape": shape, "K tiles": kt, "fixed µs": f"{p.t_fixed:.1f}", "K loop µs": f"{loop:.1f}",
                     "bound by": bound, "tensor core busy µs": f"{kt * p.t_mma:.1f}",
                     "total µs (model)": f"{p.t_fixed + loop:.1f}",
                     "recorded µs": f"{rec[shape][stages]:.1f}" if stages in rec[shape] else ""})
    return Table(rows, f"NUM_STAGES = {stages}: modelled (t_mma from the datasheet FP4 rate; t_fixed, t_load, "
                       f"t_stream fitted to the recorded 1..5 sweep of {RECORD_NOTE})")


def model_params_table() -> Table:
    """The fitted overlap-model parameters per shape (evidence: modelled)."""
    rows = []
    for shape, v in modelled_sweep().items():
        p = v["params"]
        rows.append({"shape": shape, "K tiles": v["k_tiles"], "t_load µs": f"{p.t_load:.2f}", "t_mma µs": f"{p.t_mma:.2f}",
                     "t_stream µs": f"{p.t_stream:.2f}", "t_fixed µs": f"{p.t_fixed:.1f}",
                     "stages to hide the load": f"{(p.t_load + p.t_mma) / max(p.t_stream, p.t_mma):.1f}"})
    return Table(rows, "Overlap model per shape — modelled (fitted to the recorded sweep)")


def attempts_table() -> Table:
    """The lab log's failed attempts, with split-K numbers (evidence: recorded)."""
    return Table([{"attempt": a.name, "outcome": a.outcome, "what the log says": a.label, "section": a.source.section}
                  for a in records.nvfp4_attempts()], f"Attempts that did not help — recorded ({RECORD_NOTE})")


def split_k_table() -> Table:
    """Split-K 2 and 4 against 5 stages, µs (evidence: recorded)."""
    return Table([{"split": r.split, "shape": r.shape, "5-stage (µs)": f"{r.base_us:.1f}", "split-K (µs)": f"{r.us:.1f}",
                   "slower (%)": r.recorded_pct} for r in records.nvfp4_split_k()],
                 f"Split-K with an FP32 workspace — recorded ({RECORD_NOTE})")


# ---- the pipelining sweep: compiled, recorded, modelled (and measured on a B200) -------------------------------

def sweep_rows(measured: dict | None = None, counts=STAGE_COUNTS) -> list[dict]:
    """One row per NUM_STAGES: compiled facts, recorded µs, modelled µs (and measured µs if given)."""
    rec, mod = recorded_sweep(), modelled_sweep(counts)
    rows = []
    for s in counts:
        f = stage_facts(s)
        row = {"NUM_STAGES": s, "regs": f["registers"], "spills": f["spills"], "smem KB": f"{f['smem_total'] / 1024:.1f}",
               "fits": "yes" if f["fits"] else "NO"}
        for shape in SHAPES:
            row[f"{shape} rec"] = f"{rec[shape][s]:.1f}" if s in rec[shape] else ""
        for shape in SHAPES:
            row[f"{shape} model"] = f"{float(mod[shape]['us'][s]):.1f}" if f["fits"] else ""
        if measured:
            for shape in SHAPES:
                v = measured.get("us", {}).get(shape, {}).get(s)
                row[f"{shape} meas"] = f"{v:.1f}" if v is not None else ("no fit" if not f["fits"] else "")
        rows.append(row)
    return rows


def sweep_table(measured: dict | None = None) -> Table:
    """The static table of the pipelining chapter: compiled, recorded, modelled (and measured) per stage count."""
    kinds = f"compiled ({evidence_label().split('(', 1)[1]}; recorded ({RECORD_NOTE}); modelled (fit to the recorded 1..5)"
    if measured:
        env = measured.get("env", {})
        kinds += f"; measured ({env.get('device', '?')}, {env.get('date', '?')[:10]})"
    return Table(sweep_rows(measured), f"NVFP4 GEMM per NUM_STAGES, µs — {kinds}")


def sweep_figure(measured: dict | None = None, counts=STAGE_COUNTS):
    """Time vs NUM_STAGES per shape: recorded (solid), modelled (dashed), measured (squares) if given."""
    import matplotlib.pyplot as plt   # figures only
    rec, mod = recorded_sweep(), modelled_sweep(counts)
    fig, axes = plt.subplots(1, len(SHAPES), figsize=(11, 3.4), sharey=False)
    fits = [s for s in counts if stage_facts(s)["fits"]]
    for ax, shape in zip(axes, SHAPES):
        r = rec[shape]
        ax.plot(sorted(r), [r[s] for s in sorted(r)], "o-", color="C0", label=plots.evidence_label("recorded", RECORD_NOTE))
        ax.plot(fits, [mod[shape]["us"][s] for s in fits], "--", color="C1", label=plots.evidence_label("modelled"))
        if measured and measured.get("us", {}).get(shape):
            m, env = measured["us"][shape], measured.get("env", {})
            ax.plot(sorted(m), [m[s] for s in sorted(m)], "s-", color="C2",
                    label=plots.evidence_label("measured", f"{env.get('device', '?')}, {env.get('date', '?')[:10]}"))
        for s in counts:
            if not stage_facts(s)["fits"]:
                ax.axvspan(s - 0.5, s + 0.5, color="0.85")
                ax.text(s, 0.5, "> 227 KB of SMEM (compiled)", transform=ax.get_xaxis_transform(), ha="center",
                        va="center", rotation=90, fontsize=7)
        ax.set_title(shape, fontsize=9)
        ax.set_xlabel("NUM_STAGES")
        ax.set_xticks(list(counts))
    axes[0].set_ylabel("µs")
    axes[0].legend(fontsize=7, loc="upper center")
    fig.suptitle("NVFP4 GEMM, M=128: time per stage count", fontsize=10)
    fig.tight_layout()
    return fig


def timeline_figure(shape: str = "k16384", counts=(1, 2, 4), tiles: int = 10):
    """The modelled K loop of one CTA: each stage slot's TMA loads and the MMAs, first `tiles` K tiles."""
    import matplotlib.pyplot as plt   # figures only
    mod = modelled_sweep()[shape]
    p = mod["params"]
    heights = [s + 1 for s in counts]
    fig, axes = plt.subplots(len(counts), 1, figsize=(9, 0.45 * sum(heights) + 1.0), sharex=True,
                             gridspec_kw={"height_ratios": heights})
    for ax, s in zip(np.atleast_1d(axes), counts):
        ev = simulate(min(tiles, mod["k_tiles"]), s, p)
        for k in range(len(ev["mma_start"])):
            ax.barh(1 + k % s, ev["load_end"][k] - ev["load_start"][k], left=ev["load_start"][k], height=0.6,
                    color=f"C{k % 10}", alpha=0.7, edgecolor="k", lw=0.3)
            ax.text(ev["load_start"][k] + 0.02, 1 + k % s, str(k), va="center", fontsize=6)
            ax.barh(0, ev["mma_end"][k] - ev["mma_start"][k], left=ev["mma_start"][k], height=0.6,
                    color=f"C{k % 10}", edgecolor="k", lw=0.5)
        ax.set_yticks(range(s + 1), ["MMA"] + [f"load, slot {i}" for i in range(s)], fontsize=7)
        ax.set_ylabel(f"S={s}", rotation=0, labelpad=18)
    np.atleast_1d(axes)[-1].set_xlabel("µs from the first load (number and colour = K tile)")
    fig.suptitle(f"{shape}: first {tiles} K tiles of one CTA — {plots.evidence_label('modelled')}: t_load="
                 f"{p.t_load:.2f} µs, t_mma={p.t_mma:.2f} µs, t_stream={p.t_stream:.2f} µs", fontsize=9)
    fig.tight_layout()
    return fig


def stage_view(stages: int, measured: dict | None = None):
    """The widget's render of one NUM_STAGES: what the table above cannot show. The time-per-stage curves
    with this point marked and its shared memory against the per-block limit (one figure), the modelled
    K loop of one CTA with this many slots (a second figure), and this point's numbers (a table)."""
    f, rec, mod = stage_facts(stages), recorded_sweep(), modelled_sweep()
    rows = [{"what": "registers / thread", "value": f["registers"], "evidence": "compiled"},
            {"what": "spills (B)", "value": f["spills"], "evidence": "compiled"},
            {"what": "dynamic shared memory (B)", "value": f["smem_total"], "evidence": "compiled"},
            {"what": f"fits the {f['smem_limit'] // 1024} KB per block",
             "value": "yes" if f["fits"] else "NO: the launch is refused", "evidence": "compiled"},
            {"what": "TMEM columns allocated", "value": f["tmem_cols"], "evidence": "compiled"}]
    for shape in SHAPES:
        if measured and stages in measured.get("us", {}).get(shape, {}):
            env = measured.get("env", {})
            rows.append({"what": f"{shape} time (µs)", "value": f"{measured['us'][shape][stages]:.1f}",
                         "evidence": f"measured ({env.get('device', '?')}, {env.get('date', '?')[:10]})"})
        if stages in rec[shape]:
            rows.append({"what": f"{shape} time (µs)", "value": f"{rec[shape][stages]:.1f}", "evidence": f"recorded ({RECORD_NOTE})"})
        if f["fits"]:
            rows.append({"what": f"{shape} time (µs)", "value": f"{float(mod[shape]['us'][stages]):.1f}", "evidence": "modelled"})
    kinds = "; ".join(dict.fromkeys(r["evidence"].split(" (")[0] for r in rows))
    table = Table(rows, f"NUM_STAGES = {stages} — {kinds} (each row's kind in its column; "
                        f"{evidence_label(build('01_pipelined', stages))})")
    out = [point_figure(stages, measured), table]
    if f["fits"]:
        out.insert(1, timeline_figure("k16384", counts=(stages,), tiles=10))
    else:
        out.insert(1, f"NUM_STAGES = {stages} needs {f['smem_total']:,} B of shared memory, more than the "
                      f"{f['smem_limit']:,} B a block may have: the launch is refused, so there is no K loop to draw.")
    return out


def point_figure(stages: int, measured: dict | None = None, counts=STAGE_COUNTS):
    """One NUM_STAGES in context: time vs stage count per shape (recorded, modelled; measured if given)
    with this count marked, and this count's shared memory against the per-block limit (compiled)."""
    import matplotlib.pyplot as plt   # figures only
    rec, mod = recorded_sweep(), modelled_sweep(counts)
    fits = [s for s in counts if stage_facts(s)["fits"]]
    f = stage_facts(stages)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(7.8, 3.0), gridspec_kw={"width_ratios": [2.2, 1]})
    for j, shape in enumerate(SHAPES):
        r, m = rec[shape], mod[shape]["us"]
        base = r.get(1) or m[1]
        ax.plot(sorted(r), [r[s] / base for s in sorted(r)], "o-", color=f"C{j}", ms=3, lw=1.2, label=shape)
        ax.plot(fits, [m[s] / base for s in fits], "--", color=f"C{j}", lw=0.9)
        if measured and measured.get("us", {}).get(shape):
            mm = measured["us"][shape]
            ax.plot(sorted(mm), [mm[s] / base for s in sorted(mm)], "s", color=f"C{j}", ms=4)
    ax.axvline(stages, color="k", lw=1.5, alpha=0.6)
    ax.text(stages, 0.04, f" NUM_STAGES={stages}", transform=ax.get_xaxis_transform(), fontsize=8,
            ha="left" if stages < max(counts) else "right")
    for s in counts:
        if not stage_facts(s)["fits"]:
            ax.axvspan(s - 0.5, s + 0.5, color="0.88")
            ax.text(s, 0.5, "does not fit", transform=ax.get_xaxis_transform(), rotation=90, fontsize=7,
                    ha="center", va="center")
    ax.plot([], [], "k-", lw=1, label="recorded")
    ax.plot([], [], "k--", lw=1, label="modelled")
    ax.set_xticks(list(counts))
    ax.set_xlabel("NUM_STAGES")
    ax.set_ylabel("time / time at 1 stage")
    ax.legend(fontsize=7, ncol=2, loc="lower left", bbox_to_anchor=(0.0, 0.1), frameon=False)
    ax.set_title(f"time per stage count: {plots.evidence_label('recorded', RECORD_NOTE)}; modelled dashed", fontsize=8)
    total, limit = f["smem_total"], f["smem_limit"]
    bx.bar([0], [total], color="#2e86c1" if f["fits"] else "#c0392b", width=0.5)
    bx.axhline(limit, color="red", ls="--", lw=1)
    bx.text(0.55, limit, f"per-block limit\n{limit:,} B", fontsize=7, va="bottom", ha="center", color="red")
    bx.text(0, total / 2, f"{total:,} B", ha="center", va="center", fontsize=8, color="white", rotation=90)
    bx.set_xlim(-0.5, 0.8)
    bx.set_ylim(0, max(stage_facts(max(counts))["smem_total"], limit) * 1.18)
    bx.set_xticks([])
    bx.set_ylabel("shared memory (B)")
    bx.set_title("this count's shared memory: compiled", fontsize=8)
    fig.tight_layout()
    return fig


def stage_widget(measured: dict | None = None, counts=STAGE_COUNTS, value: int = 5):
    """The pipelining chapter's slider over NUM_STAGES (pelib.views.widgets.sweep), static table above it; each
    position draws the curves with its point marked, its SMEM against the limit and its K-loop timeline."""
    return widgets.sweep(list(counts), lambda s: stage_view(s, measured), static=lambda: sweep_table(measured),
                         description="NUM_STAGES", value=value)


# ---- on a B200 (evidence: measured) -----------------------------------------------------------------------

def live() -> bool:
    """True where the sm_100a stages run (a B200-class GPU): the pages take the measured path."""
    return device.can_run("sm_100a")


def measure_sweep(shapes=SHAPES, counts=STAGE_COUNTS, *, iters: int = 50, name: str = "01_pipelined") -> dict:  # pragma: no cover - GPU
    """Verify (poisoned output, full shape) then time every shape x stage count that fits (pelib.stage.Stage.run).
    Returns {"env", "us": {shape: {stages: µs}}, "verified": {shape: {stages: bool}}, "skipped": {stages: why}}."""
    out = {"env": bench.environment(), "us": {s: {} for s in shapes}, "verified": {s: {} for s in shapes}, "skipped": {}}
    for shape in shapes:
        x = None
        for n in counts:
            s = stage(name, n)
            f = facts(s)
            if not f["fits"]:
                out["skipped"][n] = f"needs {f['smem_total']} B of shared memory, more than {f['smem_limit']} B"
                continue
            x = x or s.inputs(shape)
            r = s.run(shape, inputs=x, time=Timed(iters=iters, warmup=5))
            out["verified"][shape][n] = r["ok"]
            if r.get("ms") is not None:
                out["us"][shape][n] = r["ms"] * 1e3
    return out


def results_table(name: str = "00_single_stage", stages: int | None = None, shapes=SHAPES, *, iters: int = 30) -> Table:
    """Measured (verified first, poisoned output) beside recorded on a B200; recorded only, said so, elsewhere."""
    rec = recorded_sweep()
    n = depth(name, stages)
    rows, env = [], None
    for shape in shapes:
        row = {"shape": shape, f"recorded µs (S={n})": f"{rec[shape][n]:.1f}" if n in rec[shape] else "not recorded"}
        if live():  # pragma: no cover - GPU
            env = env or bench.environment()
            r = stage(name, stages).run(shape, time=Timed(iters=iters))
            row.update({"verified": "PASS" if r["ok"] else "FAIL"})
            if r.get("ms") is not None:
                row.update({"measured µs": f"{r['ms'] * 1e3:.1f}",
                            "p10-p90 µs": f"{r['p10_ms'] * 1e3:.1f}-{r['p90_ms'] * 1e3:.1f}",
                            "TB/s (min bytes)": f"{r.get('gbps', 0) / 1e3:.2f}"})
        rows.append(row)
    if env:
        cap = f"{_label(name, stages)}: measured ({env['device']}, {env['date'][:10]}) beside recorded ({RECORD_NOTE})"
    else:
        cap = (f"{_label(name, stages)}: recorded ({RECORD_NOTE}); no sm_100 GPU here, so nothing is measured on "
               "this page")
    return Table(rows, cap)



def on_b200(name: str = "00_single_stage", stages: int | None = None, *, mistake: str | bool | None = None,
            compact: bool = False) -> sim.Shown:
    """A chapter's 'On a B200' cell: on a B200 the stage is verified and timed on each lab shape (results_table,
    measured); elsewhere it runs on the simulator at three seeds (verified against torch, the simulator's
    report; compact: one row for the seeds) beside the lab's recorded times, and with `mistake` one planted
    mistake of the catalog."""
    return sim.on_b200([name], measured=lambda: results_table(name, stages), stage_of=lambda n: stage(n, stages),
                       recorded=lambda: results_table(name, stages), mistake=mistake, compact=compact)


# ---- beyond the lab: 03-06 (the chapter "NVFP4 beyond the lab") ---------------------------------------------

BEYOND = ("01_pipelined", "03_narrow_n", "04_split_k_cluster", "05_persistent_acc2", "06_cache_hints",
          "07_split_k_roles", "08_elected_issuers", "09_wide_split", "10_reduce_scatter", "11_ring_partials",
          "12_wide_tile")
# A stage whose K split is chosen per shape in the side-by-side table: the deepest of its splits whose grid is one
# wave on the B200 (one_wave_split), as a competition entry picks its configuration by shape.
PER_SHAPE_SPLIT = {"10_reduce_scatter": (2, 4), "11_ring_partials": (2, 4), "12_wide_tile": (2, 4)}
BEYOND_DOC = "predictions-nvfp4-beyond.json"     # written by write_beyond_predictions, under results/<date>-b200/
B200_SMS = 148
# Public results on the same three shapes (M = 128; N, K = 7168, 16384 / 4096, 7168 / 7168, 2048), µs, as their
# authors recorded them on B200s of the GPU MODE NVFP4 GEMM competition (not this project's runs).
_ENTRIES = "github.com/arseniivanov/arseniivanov.github.io, public/blog/posts/2026-01-21-nvidiagemm.md"
PUBLIC_NVFP4 = (
    {"entry": "competition's CuTe DSL reference kernel", "us": (146.0, 80.8, 60.4), "source": _ENTRIES},
    {"entry": "Triton tl.dot_scaled entry", "us": (26.3, 14.6, 10.1), "source": _ENTRIES},
    {"entry": "CuTe DSL entry, 128x64x256 tile, (1,2) cluster (15th place)", "us": (19.0, 10.4, 6.53),
     "source": _ENTRIES},
)
TOP_ENTRY_GEOMEAN_US = 10.0     # "about 10 µs", the top entry's geometric mean as that author reports it
SOL_SOURCE = ("github.com/gpu-mode/reference-kernels, problems/nvidia/nvfp4_gemm/task.yml (max(FP4 math, DRAM) at "
              "1.5 GHz); the same figures as the NVFP4 log's SOL")


def _geomean(xs) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(xs, dtype=float)))))


def work_split(name: str, shape: str = "k16384", sms: int = B200_SMS) -> dict:
    """Where a stage puts the SMs and K on one shape, from its exports and launch configuration (compiled):
    CTAs and clusters, output tiles, K tiles per CTA, CTAs resident per SM (shared memory), waves, idle SMs."""
    s = stage(name)
    prob = s.problem(shape)
    cfg = s.launch_config(prob, sm_count=sms)
    ex = s.exports
    split = int(ex.get("split_k", 1))
    tiles = (prob.m // ex.tile_m) * (prob.n // ex.tile_n)
    from ..predict.model import resident_ctas   # the one rule for CTAs an SM holds (registers, warps, smem)
    per_sm = resident_ctas(s.build.facts.registers, ex.num_threads, ex.smem_bytes + s.build.facts.smem_static)
    slots = sms * per_sm
    waves = -(-cfg.ctas // slots)
    lo, hi = cfg.tiles_per_worker if cfg.persistent else (1, 1)
    return {"stage": name, "shape": shape, "ctas": cfg.ctas, "cluster": ex.cluster_x, "split_k": split,
            "tiles": tiles, "tile": f"{ex.tile_m}x{ex.tile_n}", "k_tiles_per_cta": prob.k // ex.block_k // split,
            "k_tiles": prob.k // ex.block_k, "per_sm": per_sm, "waves": waves,
            "last_wave_ctas": cfg.ctas - (waves - 1) * slots, "idle_sms": max(0, sms - cfg.ctas // per_sm),
            "persistent": cfg.persistent, "tiles_per_cta": (lo, hi), "sms": sms}


def issue_loops(name: str) -> dict:
    """Compiled, from the stage's SASS: the loops the compiler wraps around one single-thread uniform-datapath
    instruction (ELECT, R2UR.BROADCAST, the instruction, BRA.U.ANY: pelib.predict.sass_paths.uniform_waterfall),
    and the instructions of one pass of each K loop (the producer's holds the TMA loads, the MMA issuer's the
    tcgen05.mma)."""
    from ..predict.sass_paths import ANCHORS, SassPaths, issue_loops as wrapped   # the SASS reader, when asked
    s = SassPaths.of(stage(name))
    out = {"stage": name, "issue loops": len(wrapped(s.instrs))}
    for lo, hi in s.k_loops:
        role = "MMA issuer" if any(b.op.startswith(ANCHORS["mma"]) for b in s.instrs[lo:hi + 1]) else "producer"
        out[f"{role}: instructions a K tile"] = hi - lo + 1
    return out


def issue_loops_table(names=("07_split_k_roles", "08_elected_issuers")) -> Table:
    """issue_loops of each stage as a table (compiled: NVRTC's SASS of the stage at its defaults)."""
    return Table([issue_loops(n) for n in names], "One thread picked by its index, or elected: the compiler's issue "
                 "loops and the K loops' length — compiled (each stage's SASS)")


def ktile_bytes_table(names=("08_elected_issuers", "09_wide_split"), shape: str = "k16384") -> Table:
    """What one K tile brings into an SM (its TMA bytes: A, B and both scale factors), per 64 output columns, and
    the CTAs of the grid on `shape`, from each stage's exports and launch configuration (compiled)."""
    rows = []
    for n in names:
        ex, w = stage(n).exports, work_split(n, shape)
        kib = int(ex["stage_tx_bytes"]) / 1024
        rows.append({"stage": n, "tile": w["tile"], "KiB a K tile": f"{kib:g}",
                     "KiB per 64 output columns": f"{kib * 64 / int(ex.tile_n):g}", "CTAs": w["ctas"],
                     "waves": w["waves"]})
    return Table(rows, f"The bytes a K tile brings into an SM, and the grid on {shape} — compiled (exports)")


def smem_fit_table(names=("10_reduce_scatter", "11_ring_partials"), splits=(2, 4), depths=(4, 6)) -> Table:
    """Shared memory per CTA of each stage at each K split and ring depth, where the partial slices sit, and
    whether the host launches it (227 KB): from the builds' exports and the launch check (compiled)."""
    from ..kinds.base import KindError   # the host's refusal of a build whose shared memory does not fit
    rows = []
    for n in names:
        for k in splits:
            for d in depths:
                st = stage(n, SPLIT_K=k, NUM_STAGES=d)
                ex = st.exports
                try:
                    st.launch_config("k16384")
                    fits = "yes"
                except KindError:
                    fits = "no (over 227 KB)"
                ring = int(ex["pipeline_stages"]) * int(ex["stage_bytes"])
                rows.append({"stage": n, "SPLIT_K": k, "NUM_STAGES": d, "shared memory (KiB)": f"{ex.smem_bytes / 1024:.1f}",
                             "partials": "in the ring" if int(ex["partial_smem_offset"]) < ring else "after the ring",
                             "launches": fits})
    return Table(rows, "Shared memory per CTA by K split and ring depth — compiled (exports, the host's launch check)")


def work_split_table(shape: str = "k16384", names=BEYOND) -> Table:
    """work_split of each stage on one shape, as a table (compiled: exports and launch configuration)."""
    rows = []
    for n in names:
        w = work_split(n, shape)
        rows.append({"stage": n, "tile": w["tile"], "CTAs": w["ctas"], "cluster": w["cluster"],
                     "K tiles a CTA": f"{w['k_tiles_per_cta']} of {w['k_tiles']}", "waves": w["waves"],
                     "idle SMs (1st wave)": w["idle_sms"],
                     "tiles a CTA": "-".join(map(str, w["tiles_per_cta"])) if w["persistent"] else "1"})
    return Table(rows, f"Where the SMs and K go on {shape} ({B200_SMS} SMs) — compiled (each stage's exports and "
                       "launch configuration)")


def work_picture(shape: str = "k16384", names=BEYOND):
    """The picture of where the SMs and K go, one row per stage: the 148 SMs (filled: busy in the first wave;
    a second mark: a second wave; grey: idle) and the K tiles one CTA walks, against the whole K. Drawn from
    work_split (each stage's exports); a pelib.views.diagrams.Diagram."""
    from .diagrams import Diagram, Svg   # the SVG writer of the diagrams view (same floor)
    ws = [work_split(n, shape) for n in names]
    # the SMs in two rows, so the picture fits the column at a legible size (its text >= 9 px on the page)
    per_row = -(-B200_SMS // 2)
    cell, gap, left, kw = 5.0, 1.0, 196, 190
    width = int(left + per_row * (cell + gap) + 30 + kw + 10)
    row_h = 62
    svg = Svg(width, 40 + row_h * len(ws) + 24, label=f"SMs and K per stage on {shape}")
    svg.text(left, 18, f"{B200_SMS} SMs of a B200 (one square each)", size=12, anchor="start", weight="bold")
    svg.text(width - kw - 10, 18, "K tiles one CTA walks", size=12, anchor="start", weight="bold")
    for i, w in enumerate(ws):
        y = 34 + i * row_h
        svg.text(8, y + 12, w["stage"], size=12, anchor="start", weight="bold")
        sub = f"{w['ctas']} CTAs" + (f" ({w['ctas'] // w['cluster']} clusters of {w['cluster']})" if w["cluster"] > 1 else "")
        svg.text(8, y + 29, sub + (", persistent" if w["persistent"] else ""), size=12, anchor="start", fill="#555")
        busy1 = min(B200_SMS, -(-min(w["ctas"], B200_SMS * w["per_sm"]) // w["per_sm"]))
        second = 0 if w["waves"] < 2 else min(B200_SMS, -(-w["last_wave_ctas"] // w["per_sm"]))
        for sm in range(B200_SMS):
            x = left + (sm % per_row) * (cell + gap)
            yy = y + (sm // per_row) * 20
            svg.rect(x, yy, cell, 12, "#4c78a8" if sm < busy1 else "#d9d9d9", stroke="none", rx=1)
            if sm < second:
                svg.rect(x, yy + 13, cell, 5, "#f58518", stroke="none", rx=1)
        note = (f"{w['idle_sms']} idle" if w["idle_sms"] else "all busy") + (
            f"; 2nd wave on {second}" if second else "")
        svg.text(left, y + 52, note, size=12, anchor="start", fill="#555")
        kx = width - kw - 10
        frac = w["k_tiles_per_cta"] / w["k_tiles"]
        svg.rect(kx, y, kw, 14, "#eeeeee", stroke="#999", rx=2)
        svg.rect(kx, y, kw * frac, 14, "#54a24b", stroke="none", rx=2)
        svg.text(kx + kw, y + 27, f"{w['k_tiles_per_cta']} of {w['k_tiles']}" + (
            f" (K split {w['split_k']} ways)" if w["split_k"] > 1 else ""), size=12, anchor="end", fill="#555")
    svg.text(left, 40 + row_h * len(ws) + 12, "blue: a CTA in the first wave; orange: the SMs a second wave "
             "occupies; grey: idle", size=12, anchor="start", fill="#555")
    cap = (f"Where the SMs and K go on {shape} (M=128): each stage's grid, cluster and K range per CTA, from its "
           "exports and launch configuration (compiled); resident CTAs per SM from its shared memory")
    return Diagram("work", "nvfp4/" + "+".join(n[:2] for n in names), svg.render(), cap)


def one_wave_split(name: str, shape: str, splits=None, sms: int = B200_SMS) -> int:
    """The deepest SPLIT_K of the stage's splits (PER_SHAPE_SPLIT) whose grid on `shape` is one wave of `sms`
    SMs and which the host launches (K shared evenly, shared memory fits): compiled, from the exports and the
    launch configuration. 10 on N = 7168: 2 (112 CTAs; 4 would be 224), on N = 4096: 4 (128 CTAs)."""
    from ..kinds.base import KindError   # the host's refusal of a split it cannot launch
    best = None
    for k in splits or PER_SHAPE_SPLIT[name]:
        try:
            cfg = stage(name, SPLIT_K=k).launch_config(shape, sm_count=sms)
        except KindError:
            continue
        if cfg.ctas <= sms and (best is None or k > best):
            best = k
    if best is None:
        raise ValueError(f"{name} on {shape}: none of the splits {splits or PER_SHAPE_SPLIT[name]} launches in one wave")
    return best


def beyond_predictions(cal=None, names=BEYOND, shapes=SHAPES, predict_fn=None, log=None) -> list[dict]:
    """Each stage predicted on the B200 on each shape through pelib.predict (its own simulated event graph,
    the committed B200 calibration unless `cal`): µs and the critical-path sentence. About a minute a
    (stage, shape) on one CPU core at K = 2048, several at K = 16384."""
    from ..predict import history, load_calibration, predict   # the prediction runner, loaded when asked
    cal = cal if cal is not None else load_calibration(history.CALIBRATION)
    predict_fn = predict_fn or predict
    rows = []
    jobs = [(n, shape, {}) for n in names for shape in shapes]
    jobs += [(n, shape, {"SPLIT_K": one_wave_split(n, shape)}) for n in names if n in PER_SHAPE_SPLIT for shape in shapes]
    for n, shape, defines in jobs:
        try:
            p = predict_fn(stage(n, **defines), "b200", cal, problem=shape)
        except Exception as e:   # a stage the model cannot replay yet: its row says why, the others go on
            # the reason without this machine's paths: a committed document names files by repository path
            why = f"{type(e).__name__}: {e}".replace(str(paths.ROOT) + "/", "")[:300]
            rows.append({"stage": f"nvfp4/{n}", "shape": shape, "predicted_us": None, "error": why,
                         **({"defines": defines} if defines else {})})
            if log:
                log(f"{n:22s} {shape:7s} NOT PREDICTED: {type(e).__name__}: {str(e)[:120]}")
            continue
        rows.append({"stage": f"nvfp4/{n}", "shape": shape, "predicted_us": round(p.ms * 1e3, 2),
                     **({"defines": defines} if defines else {}),
                     "critical_path": p.sentence, "evidence": getattr(p, "evidence", "predicted")})
        if log:
            log(f"{n:22s} {shape:7s} predicted {p.ms * 1e3:8.2f} us  {p.sentence[:90]}")
    return rows


def write_beyond_predictions(out=None, cal=None, **kw):
    """beyond_predictions into a JSON document (default results/<today>-b200/BEYOND_DOC) with the model's
    blind Hopper error beside it; returns the path."""
    import json
    from pathlib import Path

    from .. import clock, paths   # where results go, and today's folder: only when a document is written
    from .predict import hopper_error_bar   # the predictions view (it loads the timing model): only here
    rows = beyond_predictions(cal, **kw)
    out = Path(out) if out else paths.ROOT / "results" / f"{clock.today().isoformat()}-b200" / BEYOND_DOC
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": "pelib.nvfp4.beyond/1", "evidence": "predicted (pelib.predict, B200 calibration)",
           "error_bar": hopper_error_bar(), "rows": rows}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return out


def beyond_doc(path=None) -> dict | None:
    """The newest committed BEYOND_DOC (results/<date>-b200/), or the one at `path`; None if there is none."""
    from .. import paths   # the repository root, only to find a committed document
    if path is None:
        found = sorted((paths.ROOT / "results").glob(f"*-b200/{BEYOND_DOC}"))
        if not found:
            return None
        path = found[-1]
    return results.load(path, named=False)


def beyond_table(doc=None, bar: dict | None = None, columns=None) -> Table:
    """The side-by-side table on the three shapes (µs) and their geometric mean, each row with its evidence
    kind: the speed of light and the public entries (recorded, public, cited), the lab's best (recorded), the
    new stages (predicted, with the model's blind Hopper error as the error bar, or pending)."""
    from .predict import hopper_error_bar   # the predictions view (it loads the timing model): only here
    doc = beyond_doc() if doc is None else doc
    bar = bar if bar is not None else (doc or {}).get("error_bar") or hopper_error_bar()
    shapes = [p.name for p in problems.nvfp4_log_shapes()]
    sol_us = records.nvfp4_sol_us()

    def row(what, us, evidence, source):
        r = {"entry": what, **{s: (f"{u:.3g}" if u is not None else "—") for s, u in zip(shapes, us)}}
        r["geomean"] = f"{_geomean(us):.3g}" if all(u is not None for u in us) else "—"
        return {**r, "evidence": evidence, "source": source}

    rows = [row("speed of light", [sol_us[s] for s in shapes], "recorded (public)", SOL_SOURCE)]
    for e in PUBLIC_NVFP4:
        rows.append(row(e["entry"], e["us"], "recorded (public)", e["source"]))
    rows.append({"entry": "top entry at that time", **{s: "—" for s in shapes}, "geomean": f"≈{TOP_ENTRY_GEOMEAN_US:g}",
                 "evidence": "recorded (public)", "source": _ENTRIES})
    rec = recorded_sweep()
    rows.append(row("lab: ring depth 5 (128x128 tiles)", [rec[s][5] for s in shapes], "recorded",
                    f"{RECORD_NOTE}, Optimization 4"))
    pred = {(r["stage"], r["shape"]): r["predicted_us"] for r in (doc or {}).get("rows", []) if not r.get("defines")}
    chosen = {(r["stage"], r["shape"]): (r["predicted_us"], r["defines"]) for r in (doc or {}).get("rows", [])
              if r.get("defines")}
    err = f"± {bar['mae']:.0%} (blind Hopper MAE, {bar['stages']} stages, {bar['device']})" if bar else "error bar pending"
    short = f"± {bar['mae']:.0%}" if bar else err    # a row's label; the note says what the error bar is
    failed = sorted({r["stage"] for r in (doc or {}).get("rows", []) if r.get("error")})
    for n in BEYOND[1:]:
        us = [pred.get((f"nvfp4/{n}", s)) for s in shapes]
        rows.append(row(f"nvfp4/{n}", us, f"predicted, {short}" if any(u is not None for u in us) else
                        "not predicted: the timing model cannot replay it (notes)" if f"nvfp4/{n}" in failed else
                        "predicted: pending (write_beyond_predictions)", "pelib.predict, this project"))
        if n in PER_SHAPE_SPLIT and all((f"nvfp4/{n}", s) in chosen for s in shapes):
            ks = "/".join(str(chosen[(f"nvfp4/{n}", s)][1]["SPLIT_K"]) for s in shapes)
            rows.append(row(f"nvfp4/{n}, SPLIT_K {ks} (one wave a shape)",
                            [chosen[(f"nvfp4/{n}", s)][0] for s in shapes], f"predicted, {short}",
                            "pelib.predict, this project"))
    notes = [f"error bar: {err}; the blind Hopper comparison's worst stage was off by {bar['worst']:.0%}" if bar else err,
             *[f"{k}: the timing model could not replay it ({next(r['error'] for r in doc['rows'] if r['stage'] == k)})"
               for k in failed],
             "the public rows were timed by their authors with the competition's harness (L2 flushed, Python call "
             "inside the CUDA events, mean of up to 200 runs); they are not this project's measurements"]
    return Table(rows, "NVFP4 GEMM on a B200, M=128, µs — recorded (public results, cited), recorded (lab), "
                       "predicted (new stages)", notes=notes, columns=list(columns) if columns else None)


def beyond_on_b200(name: str, *, mistake: str | bool | None = None, compact: bool = False) -> sim.Shown:
    """The 'On a B200' cell of a stage after the lab: on a B200 verified and timed on each shape (measured);
    elsewhere simulated at three seeds (verified against torch), and with `mistake` one planted mistake.
    No recorded row: the lab never ran these stages."""
    return sim.on_b200([name], measured=lambda: results_table(name), stage_of=lambda n: stage(n), mistake=mistake,
                       compact=compact)

# ---- the ring sweep predicted on a B200, against the lab's record -----------------------------------

def _b200_ring(doc=None) -> tuple[list[dict], str]:
    """(the committed B200 document's NVFP4 ring rows, its evidence label)."""
    if doc is None:
        from ..predict import history   # the runs floor's document reader (views.predict reads it the same way)
        doc = history.committed()
    return doc["nvfp4_ring"], doc["meta"]["evidence"]


def ring_misses(doc=None) -> str:
    """One sentence, read from the committed predictions: how far the predicted ring sweep lies from the
    lab's recorded points at each depth, and the model's blind error."""
    from . import blind_error   # the committed Hopper comparison, read when a chapter asks
    ring, _ = _b200_ring(doc)
    per = ", ".join(f"{r['error']:+.0%}".replace("%", " %") for r in ring if r.get("error") is not None)
    depths = [r["stages"] for r in ring if r.get("error") is not None]
    errs = [r for r in ring if r.get("error") is not None]
    worst = max(errs, key=lambda r: abs(r["error"]))
    close = [r["stages"] for r in errs if abs(r["error"]) <= 0.10]
    side = "slower" if all(r["error"] > 0 for r in errs) else "faster" if all(r["error"] < 0 for r in errs) \
        else "off, on both sides,"
    near = f"; it comes within 10 % only at depth{'s' if len(close) > 1 else ''} " \
           f"{', '.join(map(str, close))}" if close else "; it is nowhere within 10 %"
    return (f"The predicted times lie {per} from the recorded ones at depths {depths[0]}–{depths[-1]} "
            f"(predicted against recorded, {RECORD_NOTE}): the model is {side} than the lab's kernel, worst "
            f"at depth {worst['stages']}{near}; {blind_error.clause()}.")


def ring_figure(doc=None):
    """The ring sweep predicted on a B200 (a line) with the lab's recorded points; the legend sits under the
    axes, so it covers no point, tick or label."""
    import matplotlib.pyplot as plt   # matplotlib is loaded when a figure is drawn
    ring, label = _b200_ring(doc)
    d = [r["stages"] for r in ring]
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    ax.plot(d, [r["predicted_us"] for r in ring], "-o", color="#3b6ea8", label=label)
    ax.plot(d, [r["recorded_us"] for r in ring], "s", color="#c0392b", ms=8, mfc="none",
            label=f"recorded ({RECORD_NOTE}, pelib.records)")
    for r in ring:
        if r.get("error") is not None:
            ax.annotate(f"{r['error']:+.0%}", (r["stages"], r["predicted_us"]), textcoords="offset points",
                        xytext=(6, 4), fontsize=8, color="#3b6ea8")
    pb = stage("01_pipelined").problem(SHAPES[0])   # the lab log's first shape, the ring sweep's
    ax.set_xlabel("ring depth (NUM_STAGES; 1 = nvfp4/00)")
    ax.set_ylabel(f"µs (M={pb.m}, N={pb.n}, K={pb.k})", fontsize=8)
    ax.set_xticks(d)
    ax.set_xlim(min(d) - 0.4, max(d) + 0.5)
    ax.set_ylim(0, max(r["predicted_us"] for r in ring) * 1.18)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    ax.set_title("NVFP4 on a B200: the ring sweep, predicted against recorded", fontsize=10)
    fig.tight_layout()
    return fig


def checks_brief(checks: dict, caption: str = "") -> Table:
    """emulate_plots.checks_table narrowed to the column: per variant, whether the emulated tile is within
    one ulp of the reference, how many elements are off, and the largest error."""
    full = checked_table(checks, caption)
    keep = ["variant", "within one BF16 ulp", "elements off", "max |error|"]
    return Table(full.rows, full.caption, [c for c in keep if c in full.columns])
