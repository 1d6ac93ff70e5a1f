"""The part "FP8 patch embedding on B200": each stage's facts, descriptors, roles, budgets, sweeps, records, runs.

Everything is read from the stages (pelib.stage.Stage: their exports, builds and headers) and from the
lab notes' records (pelib.records); nothing here restates a number the kernel was compiled with.
"""
from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt

from ..isa import descriptors as D
from ..measure import baselines
from .. import clock, device, records, stages, timing
from ..isa import sass, sass_account
from ..layouts import staging
from ..facts import Table, evidence_label
from ..kinds.fp8 import epi_columns, epilogue_map  # noqa: F401  (the chapters draw the column map)
from ..stage import Stage, Timed, find, lineage
from ..stages import Rendered
from . import plots, sim, widgets
from .emulate_plots import checked

ARCH = "sm_100a"
FINAL = "09_persistent_megakernel"
LAB_LOG = "fp8-megakernel-experiment-log.md"
# SASS opcodes of the MMA: UTCQMMA = tcgen05.mma kind::f8f6f4 (nvdisasm, sm_100a), .2CTA = cta_group::2.
MMA_OPCODE = {1: "UTCQMMA", 2: "UTCQMMA.2CTA"}


def stage(name: str, defines: dict | None = None) -> Stage:
    """An FP8 stage by file name ('06_stages'), number ('06', '08a') or path, with defines."""
    return find("fp8", name, defines)


def names() -> list[str]:
    return [p.stem for p in stages.family_stages("fp8")]


def build(name: str, defines: dict | None = None):
    return stage(name, defines).build


# ---- compiled facts ------------------------------------------------------------------------------

def sass_facts(b) -> dict:
    """Opcode counts a reader of these stages looks for, with modifiers (UTCQMMA.2CTA, LDTM ...)."""
    h = sass.opcode_histogram(b.sass, modifiers=True)

    def pick(pre):
        return sum(c for op, c in h.items() if op == pre or op.startswith(pre + "."))
    return {"UTCQMMA": h.get("UTCQMMA", 0), "UTCQMMA.2CTA": h.get("UTCQMMA.2CTA", 0), "LDTM": pick("LDTM"),
            "UTCBAR": pick("UTCBAR"), "UTMALDG": pick("UTMALDG"),
            "BAR.SYNC": sum(c for op, c in h.items() if op.startswith("BAR.SYNC")),
            "UCGABAR": pick("UCGABAR_ARV") + pick("UCGABAR_WAIT")}


def _row(s: Stage) -> dict:
    b, ex = s.build, s.exports
    f, sf = b.facts, sass_facts(b)
    mma = MMA_OPCODE[ex["cta_group"]]
    return {"stage": s.name, "idea": s.header.idea, "defines": ", ".join(f"{k}={v}" for k, v in s.defines.items()) or "—",
            "registers": f.registers, "spills (B)": f.spills, "stack (B)": f.stack,
            "dynamic smem (B)": ex.smem_bytes, "cta_group": ex["cta_group"], "TN": ex.tile_n,
            "stages": ex.pipeline_stages, "epi warps": ex.epi_warps, "TMEM cols": ex["tmem_cols"],
            "ld cols": ex["epi_ld_x"], "MMA opcode": mma, "MMA instrs (SASS)": sf[mma], "MMA (SASS)": sf[mma],
            "LDTM": sf["LDTM"], "BAR.SYNC": sf["BAR.SYNC"], "SASS instrs": sum(b.histogram.values()),
            "STG": b.histogram.get("STG", 0), "STS": b.histogram.get("STS", 0)}


COLUMNS_LINE = ["stage", "registers", "spills (B)", "stack (B)", "dynamic smem (B)", "cta_group", "TN", "stages",
                "TMEM cols", "ld cols", "MMA opcode", "MMA instrs (SASS)", "LDTM", "BAR.SYNC"]
COLUMNS_EPILOGUE = ["stage", "defines", "registers", "spills (B)", "stack (B)", "dynamic smem (B)", "epi warps",
                    "stages", "SASS instrs", "LDTM", "STG", "STS", "MMA (SASS)"]


def stage_table(stage_names=None, defines: dict | None = None, columns=None) -> Table:
    """Registers / spills / SMEM / instruction counts per stage, from the builds (compiled). The columns
    follow the stages shown: the MMA and TMEM path for 00-04, the epilogue for 05-09."""
    ss = [stage(n, defines) for n in (stage_names or names())]
    cols = columns or (COLUMNS_EPILOGUE if any("epi_cols_w2" in s.exports for s in ss) else COLUMNS_LINE)
    return Table([_row(s) for s in ss], f"FP8 stages — {evidence_label(ss[0].build)}", cols)


def sweep_table(name: str, define: str, values, columns=None) -> Table:
    """One stage built at several values of one define (compiled); a value the kernel refuses shows its
    static_assert message."""
    rows = []
    for v in values:
        s = stage(name, {define: v})
        why = s.check_compiles()
        rows.append(_row(s) if why is None else {"stage": s.name, "defines": f"{define}={v}", "registers": "—",
                                                 "note": f"does not compile: {why}"})
    cols = columns or ["defines", "registers", "spills (B)", "dynamic smem (B)", "SASS instrs", "LDTM", "STG", "STS"]
    if any("note" in r for r in rows):
        cols = cols + ["note"]
    return Table(rows, f"{stage(name).name}: {define} sweep — {evidence_label(stage(name).build)}", cols)


def lineage_table(stage_names=None) -> Table:
    """Stages with their declared parent, idea and diff size (pelib.stage.lineage)."""
    return lineage([stage(n) for n in stage_names or names()])


def exports_table(stage_names=None) -> Table:
    """The layout parameters each stage exports (what the emulator checks)."""
    keys = ["cta_group", "tile_m", "tile_n", "block_k", "mma_m", "mma_n", "mma_k", "a_box_m", "b_box_n", "a_swizzle",
            "pipeline_stages", "tmem_cols", "epi_ld_x", "smem_bytes"]
    rows = []
    for n in stage_names or names()[:5]:
        ex = stage(n).exports
        rows.append({"stage": stage(n).name, **{k: ex.get(k, "") for k in keys}, "idesc": f"{ex['idesc']:#010x}",
                     "a_desc": f"{ex['a_desc']:#018x}"})
    return Table(rows, "Exported layout parameters — compiled")


def descriptor_table(name: str, defines: dict | None = None, which: str = "both") -> Table:
    """The A descriptor and/or the instruction descriptor the stage issues, field by field (compiled).
    which: 'smem', 'instruction' or 'both'."""
    if which not in ("smem", "instruction", "both"):
        raise ValueError(f"which={which!r}: 'smem', 'instruction' or 'both'")
    s = stage(name, defines)
    ex = s.exports
    rows = []
    if which in ("smem", "both"):
        rows += [{"descriptor": "A smem (stage 0)", "bits": b, "field": f, "raw": r, "meaning": m}
                 for b, f, r, m in D.describe(ex["a_desc"], "umma_smem")]
    if which in ("instruction", "both"):
        rows += [{"descriptor": "instruction", "bits": b, "field": f, "raw": r, "meaning": m}
                 for b, f, r, m in D.describe(ex["idesc"], "umma_instr")]
    return Table(rows, f"{s.name}: a_desc = {ex['a_desc']:#018x}, idesc = {ex['idesc']:#010x} — compiled")


def sass_lines(name: str, prefixes=("UTCQMMA", "UTCBAR", "UTMALDG"), defines: dict | None = None, limit: int = 24):
    """The SASS instructions of the stage whose opcode starts with one of `prefixes` (compiled)."""
    s = stage(name, defines)
    keep = [f"/*{off:04x}*/  {text.split(';')[0].split('*/', 1)[-1].strip()} ;"
            for off, op, text in sass.instructions(s.build.sass) if op.startswith(tuple(prefixes))]
    more = f"\n... {len(keep) - limit} more" if len(keep) > limit else ""
    return Rendered("\n".join(keep[:limit]) + more, "text", f"{s.name}: SASS ({', '.join(prefixes)}) — compiled")


def roles_table(name: str, defines: dict | None = None) -> Table:
    """Which warp does what in the stage, and which barriers connect them (from its exports)."""
    s = stage(name, defines)
    ex = s.exports
    cg, w0, nw = ex["cta_group"], ex["epi_warp0"], ex.epi_warps
    lead = " of the leader (cta_group::2 TMA)" if cg == 2 else " (TMA complete_tx)"
    rows = [{"warp": "0", "role": "producer (one thread)", "waits on": "empty[s]", "signals": "full[s]" + lead},
            {"warp": "1", "role": f"MMA issuer (one thread{', leader CTA only' if cg == 2 else ''}); TMEM alloc/free",
             "waits on": "full[s]",
             "signals": "empty[s], mma_done (tcgen05.commit" + (", multicast to both CTAs)" if cg == 2 else ")")},
            {"warp": f"{w0}-{w0 + nw - 1}", "role": f"epilogue: TMEM -> +comb -> BF16 -> global (x{ex['epi_ld_x']} loads)",
             "waits on": "mma_done" + (" (each warp)" if ex.get("epi_poll_each") else f" (warp {w0}, then bar.sync)"),
             "signals": "—"}]
    who = "the leader CTA's" if cg == 2 else "its"
    return Table(rows, f"{s.name}: roles ({ex.num_threads} threads per CTA, {who} MMAs) — compiled")


def epi_map_table(name: str, defines: dict | None = None) -> Table:
    """Which TMEM lanes and columns each epilogue warp drains (compiled: from the exports)."""
    s = stage(name, defines)
    ex = s.exports
    cols = epi_columns(ex)
    rows = [{"warp": w, "TMEM lanes (warp % 4)": f"{32 * (w % 4)}-{32 * (w % 4) + 31}", "columns": f"[{b}, {e})",
             "tcgen05.ld per tile": (e - b) // ex["epi_ld_x"],
             "shares its lanes with": ", ".join(str(o) for o in cols if o != w and o % 4 == w % 4) or "—"}
            for w, (b, e) in cols.items()]
    return Table(rows, f"{s.name} (NUM_EPI_WARPS={ex.epi_warps}): epilogue row/column map — compiled")


def smem_budget(name: str, defines: dict | None = None) -> Table:
    """Where the stage's dynamic shared memory goes, from its exports (compiled)."""
    s = stage(name, defines)
    ex = s.exports
    ns, a, b = ex.pipeline_stages, ex["a_stage_bytes"], ex["b_stage_bytes"]
    rows = [{"part": f"A ring: {ns} stages x {a:,} B", "bytes": ns * a},
            {"part": f"B ring: {ns} stages x {b:,} B", "bytes": ns * b}]
    staged = 0
    if "staging_offset" in ex:
        staged = ex.epi_warps * ex["staging_warp_bytes"]
        halves = ex.get("staging_halves", 1)
        what = f"{halves} x 32 rows x {ex['staging_pitch']} B" if halves > 1 else f"32 rows x {ex['staging_pitch']} B"
        rows.append({"part": f"staging: {ex.epi_warps} warps x {ex['staging_warp_bytes']:,} B ({what})", "bytes": staged})
    rest = ex.smem_bytes - ns * (a + b) - staged
    if "barrier_bytes" in ex:
        rows += [{"part": "mbarriers + TMEM address slot", "bytes": ex.barrier_bytes},
                 {"part": "alignment slack (1024-B aligned SW128 tiles)", "bytes": rest - ex.barrier_bytes}]
    else:
        rows.append({"part": "mbarriers, TMEM address slot, alignment slack", "bytes": rest})
    rows += [{"part": "total (smem_bytes)", "bytes": ex.smem_bytes},
             {"part": f"per-block limit on sm_100 ({ex.smem_limit // 1024} KB)", "bytes": ex.smem_limit},
             {"part": "headroom", "bytes": ex.smem_limit - ex.smem_bytes}]
    return Table(rows, f"{s.name}: dynamic shared memory — compiled")


def smem_budget_vs_recorded(name: str = "08_unroll", defines: dict | None = None) -> Table:
    """The build's budget beside the lab's SMEM budget table (recorded, experiment log)."""
    ex = stage(name, defines).exports
    rec = records.smem_budget()
    ns, stage_b = ex.pipeline_stages, ex["a_stage_bytes"] + ex["b_stage_bytes"]
    staged = ex.epi_warps * ex["staging_warp_bytes"]
    comp = {c.name.split(" (")[0]: c.bytes for c in rec.components}
    rows = [{"component": "pipeline", "compiled": f"{ns} x {stage_b:,} = {ns * stage_b:,}",
             "recorded": f"{comp.get('pipeline', '—'):,}"},
            {"component": "staging", "compiled": f"{ex.epi_warps} x {ex['staging_warp_bytes']:,} = {staged:,}",
             "recorded": f"{comp.get('staging', '—'):,}"},
            {"component": "barriers + TMEM slot + alignment", "compiled": f"{ex.smem_bytes - ns * stage_b - staged:,}",
             "recorded": f"{comp.get('TMEM addr + mbarriers', '—'):,}"},
            {"component": "total", "compiled": f"{ex.smem_bytes:,}", "recorded": f"{rec.total:,}"},
            {"component": "limit used", "compiled": f"{ex.smem_limit:,} ({ex.smem_limit // 1024} KB, per block, opt-in)",
             "recorded": f"{rec.sm_limit:,} (228 KB, per SM)"},
            {"component": "headroom", "compiled": f"{ex.smem_limit - ex.smem_bytes:,}",
             "recorded": f"{rec.sm_limit - rec.total:,} ({rec.headroom_label})"}]
    return Table(rows, f"SMEM budget: {stage(name).name} (compiled) beside the lab's ({rec.source.label}, '{rec.state}')")


def launch_config(name: str, problem="siglip2", defines: dict | None = None, sm_count: int | None = None):
    """The stage's launch on a problem (pelib.stage.LaunchConfig)."""
    return stage(name, defines).launch_config(problem, sm_count=sm_count)


# ---- emulated ----------------------------------------------------------------------------------------

def emulate_check(name: str, problem="small", tile=(1, 0), defines: dict | None = None, **kw) -> dict:
    """One cluster tile emulated from the stage's exports against the torch reference (within one BF16 ulp)."""
    return checked(stage(name, defines).emulate_check(problem, tile, **kw))


def staging_sample(name: str = "07_smem_staged_epilogue", defines: dict | None = None, picks=None) -> Table:
    """A few BF16 traced through the staging: (warp, lane, chunk, register) -> staging byte -> (row, col)."""
    s = stage(name, defines)
    lay = staging.StagingLayout.from_exports(s.exports)
    p1, rep = staging.trace(lay)
    want = picks or [(lay.cols[0][0], 0, 0, 0), (lay.cols[0][0], 1, 0, 0), (lay.cols[0][0], 0, 0, 8),
                     (lay.cols[-1][0], 31, 3, 31), (lay.cols[1][0], 5, 7, 17)]
    rows = []
    for w, ln, j, r in want:
        k = int(((p1["warp"] == w) & (p1["lane"] == ln) & (p1["chunk"] == j) & (p1["reg"] == r)).nonzero()[0][0])
        rows.append({"warp": w, "lane": ln, "tcgen05.ld chunk": j, "register": r,
                     "TMEM (lane, col)": (int(p1["tmem_lane"][k]), int(p1["col"][k])),
                     "staging byte": f"{int(p1['smem'][k]):,}", "output (row, col)": (int(p1["out_row"][k]), int(p1["out_col"][k]))})
    verdict = (f"every one of the {rep.elements:,} outputs written exactly once, from its own accumulator"
               if rep.ok else "; ".join(rep.issues))
    return Table(rows, f"{s.name}: BF16 through the staging — {verdict} (emulated, pelib.layouts.staging)")


def bank_table(stage_names=("07_smem_staged_epilogue", FINAL)) -> Table:
    """Shared-memory wavefronts per 16-B access, padded vs unpadded rows (modelled: 32 banks of 4 B)."""
    rows = []
    for n in stage_names:
        ex = stage(n).exports
        lay = staging.StagingLayout.from_exports(ex)
        data = 2 * max(e - b for _, b, e in lay.cols) // lay.halves
        for label, pitch in (("padded (as built)", lay.pitch), ("unpadded", data)):
            lp = staging.StagingLayout.from_exports(ex, pitch=pitch)
            rows.append({"stage": stage(n).name, "rows": label, "pitch (B)": pitch,
                         "Phase 1 st.shared.v4": staging.phase1_wavefronts(lp),
                         "Phase 2 ld.shared.v4": staging.phase2_wavefronts(lp), "ideal": 4})
    return Table(rows, "Wavefronts per warp-wide 16-B shared access — modelled (32 banks x 4 B; 512 B need 4)")


def unroll_table(stage_names=("07_smem_staged_epilogue", "08_unroll"), warps=(5, 4), columns=None) -> Table:
    """Phase 2's copy loop in the SASS: shared loads / global stores per build (compiled); columns: those shown."""
    rows = []
    for n in stage_names:
        for w in warps:
            s = stage(n, {"NUM_EPI_WARPS": w})
            h = sass.opcode_histogram(s.build.sass, modifiers=True)
            rows.append({"stage": s.name, "epilogue warps": w, "PHASE2_UNROLL": s.exports["phase2_unroll"],
                         "registers": s.build.facts.registers, "LDS.128 in SASS": h.get("LDS.128", 0),
                         "STG.E.128 in SASS": h.get("STG.E.128", 0), "SASS instrs": sum(h.values())})
    return Table(rows, f"Phase 2 copy loop — {evidence_label(stage(stage_names[0]).build)}").only(columns)


def f4_table() -> Table:
    """Stage 05's epilogue with templated vs run-time column bounds, from the SASS (compiled)."""
    rows = []
    for label, s in (("templated bounds (521ad55)", stage("05_epi_warps")),
                     ("run-time bounds (F4)", Stage("fp8/variants/05_f4_runtime_bounds"))):
        b = s.build
        g = sass_account.gaps(b.sass, "LDTM")
        rows.append({"epilogue": label, "registers": b.facts.registers, "LDTM in SASS": len(g) + 1,
                     "gaps between TMEM loads with a branch": sum(1 for x in g if x["branches"]),
                     "most comb loads (LDG) between two TMEM loads": max(x["LDG"] for x in g),
                     "loops around a TMEM load": len(sass_account.loops_containing(b.sass, "LDTM"))})
    return Table(rows, f"Stage 05, 5 warps: templated vs run-time column bounds — {evidence_label(build('05'))}")


# ---- stage 09: schedule, barriers, protocol, K-loop account ---------------------------------------------

def schedule_table(problem="siglip2", clusters_shown: int = 4, tiles_shown: int = 5, sm_count: int | None = None) -> Table:
    """The first tiles of the first clusters under the static schedule (common/scheduler.cuh: cluster c takes
    tiles c, c + G, c + 2G, ... of G clusters), with their CTA coordinates."""
    s = stage(FINAL)
    cfg = s.launch_config(problem, sm_count=sm_count)
    ex, prob = s.exports, s.problem(problem)
    rows_c, n_tiles = ex.tile_m * ex.cluster_x, prob.n // ex.tile_n
    tiles, clusters = cfg.work
    rows = []
    for c in range(min(clusters_shown, clusters)):
        for it, t in enumerate(range(c, tiles, clusters)[:tiles_shown]):
            m_blk, n_blk = divmod(t, n_tiles)
            rows.append({"cluster": c, "iteration": it, "tile": t, "accumulator": it % 2, "parity": (it // 2) & 1,
                         "rows (CTA 0 / CTA 1)": f"{m_blk * rows_c} / {m_blk * rows_c + ex.tile_m}",
                         "columns": f"{n_blk * ex.tile_n}-{n_blk * ex.tile_n + ex.tile_n - 1}"})
    return Table(rows, f"Static schedule (common/scheduler.cuh), {cfg.describe()} — compiled (the launch set-up "
                       f"from {FINAL}'s exports, its tile order replayed on the host)")


def barrier_table(name: str = FINAL, defines: dict | None = None) -> Table:
    """The mbarriers of the persistent stage: count, who arrives, who waits, which parity (from its exports)."""
    s = stage(name, defines)
    ex = s.exports
    ns, cg, ew = ex.pipeline_stages, ex["cta_group"], ex.epi_warps
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
         "arrivals": f"one lane of each of the {cg} x {ew} epilogue warps, "
                     + ("after its last tcgen05.ld of the tile (F19a's early release)" if ex["acc_early_release"]
                        else "after its whole drain (the last stores of Phase 2)")
                     + " (remote arrive on the leader)", "waits": "MMA thread (leader), parity = ((iteration / 2) & 1) ^ 1"},
    ]
    return Table(rows, f"{s.name}: mbarriers — from its exports and source (compiled)")


PERSISTENT = ("08a_persistent_tiles", "08b_double_staging", FINAL)


def protocol_table() -> Table:
    """The catalog's planted protocol mistakes in the persistent stages (08a, 08b, 09), each a patch of
    the stage's own source run on the simulator: what the simulator said, and whether the catalog
    expected it (simulated)."""
    return sim.catalog_table(stages=[f"fp8/{n}" for n in PERSISTENT])


def kloop_account(defines: dict | None = None, k: int = 768, budget: int = 0):
    """The static SASS account of stage 09's MMA warp (compiled), beside a lab budget (recorded: 0 = the
    475 of the stall-isolation note, 1 = F28's 411); the caption names the build's wait_kind."""
    b = build(FINAL, defines)
    acc = sass_account.account_build(b, k)
    return acc, sass_account.account_table(acc, records.instruction_budgets()[budget])


# ---- recorded and measured ---------------------------------------------------------------------------

def recorded_table(stage_names=None) -> Table:
    """The lab's B200 number for each stage's idea (recorded: pelib.records, by the commit the header names)."""
    rows = []
    for n in stage_names or names():
        s = stage(n)
        r = s.recorded()
        rows.append({"stage": s.name, "idea": s.header.idea, "TFLOPS": (r.tflops or "—") if r else "—",
                     "ms": (r.ms or "—") if r else "—", "lab record": r.what if r else s.header.recorded.split(":")[0],
                     "evidence": f"recorded ({r.source.note})" if r else "recorded: no number of its own (see its header)"})
    return Table(rows, f"B200 results of each idea — recorded (lab notes, {LAB_LOG} optimization history and later states)")


def results_table(stage_names=None, problem="siglip2", *, iters: int = 20, defines: dict | None = None) -> Table:
    """Measured (verified first, poisoned output) beside recorded on a B200; recorded only (said so) elsewhere."""
    ss = [stage(n, defines) for n in (stage_names or names())]
    if not device.can_run(ARCH):
        rows = [{"stage": s.name, "recorded": s.recorded().describe() if s.recorded() else "—",
                 "measured": "— (needs a B200: " + device.mode(ARCH) + " page)"} for s in ss]
        return Table(rows, "Results — recorded (lab notes); measured only on a B200")
    rows = []
    for s in ss:  # pragma: no cover - GPU
        r = s.run(problem, time=Timed(iters=iters))
        row = {"stage": s.name, "verified": "PASS" if r["ok"] else "FAIL"}
        if r.get("ms") is not None:
            row.update({"measured ms": round(r["ms"], 4), "measured TFLOPS": round(r["tflops"], 1)})
        row["recorded"] = s.recorded().describe() if s.recorded() else "—"
        rows.append(row)
    return Table(rows, f"Results on {device.current().name}: measured (today) beside recorded (lab notes)")


def on_b200(stage_names, problem="siglip2", *, mistake: str | bool | None = None, iters: int = 20,
            compact: bool = False, recorded: bool = True) -> sim.Shown:
    """A chapter's 'On a B200' cell: on a B200 the stages run, verified then timed (results_table, measured);
    elsewhere each runs on the simulator at three seeds (verified against torch, the simulator's report),
    beside the lab's recorded number (recorded=False: a page that shows its records elsewhere), and with
    `mistake` one planted mistake of the catalog (simulated)."""
    names = [stage_names] if isinstance(stage_names, str) else list(stage_names)
    return sim.on_b200(names, measured=lambda: results_table(names, problem, iters=iters), stage_of=stage,
                       recorded=(lambda: results_table(names)) if recorded else None, mistake=mistake, compact=compact)


CUBLAS = [n for n in baselines.names() if n.startswith("cublas")]


def cublas_table(problem="siglip2", *, iters: int = 20) -> Table:
    """cuBLAS baselines: recorded B200 numbers, plus torch._scaled_mm measured here on an FP8-capable GPU."""
    rows = [{"baseline": r.label, "ms": r.ms, "TFLOPS": r.tflops or "—", "evidence": f"recorded (B200, {r.source.note})"}
            for r in records.cublas()]
    info = device.current()
    if info.present and info.cc and info.cc >= (8, 9) and device.mode() != device.COMPILE_ONLY:  # pragma: no cover - GPU
        s = stage("00")
        prob = s.problem(problem)
        t = s.inputs(prob)
        ref = s.kind.reference(prob, t)
        for r in baselines.rows(prob, t, include=CUBLAS, ref=ref, iters=iters):
            if r["status"] == "measured":
                rows.append({"baseline": r["form"], "ms": round(r["median_ms"], 4), "TFLOPS": round(r["tflops"], 1),
                             "evidence": f"measured ({info.name}, {clock.today()})"})
    kinds = f"recorded (B200, {LAB_LOG})" + ("; measured here" if len(rows) > 2 else "")
    return Table(rows, f"cuBLAS baselines — {kinds}")


def _history(commit: str):
    return next((h for h in records.history() if str(h.commit) == commit), None)


def recorded_epi_warps() -> dict[int, dict]:
    """The lab's times per epilogue warp count (recorded; the 4-warp figure has two sources that disagree)."""
    f3, f4 = records.experiment("F3"), records.experiment("F4")
    before, five = _history("6319928"), _history("521ad55")
    return {
        4: {"ms": before.ms, "source": f"{before.source.note}, history {before.commit} (last 4-warp commit)",
            "note": f"F4 gives ~{f4.baseline_ms} ms 'at 4 epilogue warps' (flagged in book/data/inconsistencies.yaml)"},
        5: {"ms": five.ms, "source": f"{five.source.note}, history {five.commit}",
            "note": f"F4: run-time bounds, ~{f4.result_ms} ms (no gain)"},
        6: {"ms": f3.result_ms, "source": f"{f3.source.note}, {f3.id}", "note": f3.reason or ""},
    }


def recorded_stages() -> dict:
    """The lab's F6 numbers per pipeline depth (recorded)."""
    f6 = records.experiment("F6")
    also = f6.extra.get("also", {})
    return {6: {"ms": f6.baseline_ms, "regs": f6.baseline_regs, "smem_kb": f6.extra.get("baseline_smem_kb")},
            5: {"ms": also.get("ms"), "regs": also.get("regs"), "smem_kb": None},
            4: {"ms": f6.result_ms, "regs": f6.result_regs, "smem_kb": f6.extra.get("result_smem_kb")},
            "source": f"{f6.source.note}, {f6.id}"}


# ---- the sweeps of stages 05 and 06 (options from the kernels' own static_asserts) ---------------------

SWEEPS = {"warps": ("05_epi_warps", "NUM_EPI_WARPS", "epi_warps", range(2, 9)),
          "stages": ("06_stages", "NUM_STAGES", "pipeline_stages", range(2, 9))}


def options(which: str) -> tuple[list[int], dict[int, str]]:
    """The values of a sweep's define that the kernel accepts, and for the others its static_assert message."""
    name, define, _, candidates = SWEEPS[which]
    ok, refused = [], {}
    for v in candidates:
        why = stage(name, {define: v}).check_compiles()
        (refused.__setitem__(v, why) if why else ok.append(v))
    return ok, refused


def _measured(s: Stage, problem="siglip2", iters=20):  # pragma: no cover - GPU
    r = s.run(problem, time=Timed(iters=iters))
    return round(r["ms"], 4) if r.get("ms") is not None and r["ok"] else "FAIL"


def sweep_row(which: str, v: int, live: bool | None = None, problem="siglip2") -> dict:
    """Stage 05 at NUM_EPI_WARPS=v ('warps') or stage 06 at NUM_STAGES=v ('stages'): compiled facts beside
    the lab's numbers, and a measured time on a B200."""
    name, define = SWEEPS[which][:2]
    s = stage(name, {define: v})
    r = _row(s)
    if which == "warps":
        rec = recorded_epi_warps().get(v, {})
        row = {"epilogue warps": v, "registers": r["registers"], "spills (B)": r["spills (B)"],
               "SASS instrs": r["SASS instrs"], "LDTM": r["LDTM"], "STG": r["STG"], "recorded ms": rec.get("ms", "—"),
               "recorded from": rec.get("source", "—"), "note": rec.get("note", "")}
    else:
        rec = recorded_stages().get(v, {})
        row = {"stages": v, "registers": r["registers"], "spills (B)": r["spills (B)"],
               "dynamic smem (B)": r["dynamic smem (B)"], "smem (KiB)": round(r["dynamic smem (B)"] / 1024, 1),
               "recorded ms": rec.get("ms") or "—", "recorded regs": rec.get("regs") or "—",
               "recorded smem (KB)": rec.get("smem_kb") or "—"}
    if live if live is not None else device.can_run(ARCH):  # pragma: no cover - GPU
        row["measured ms"] = _measured(s, problem)
    return row


def sweep_rows_table(which: str, live: bool | None = None, columns=None) -> Table:
    """The sweep of stage 05 (warps) or 06 (stages): compiled beside recorded (and measured on a B200); the
    values the kernel refuses, with its static_assert message. columns: the ones to show (a narrow column)."""
    name, define = SWEEPS[which][:2]
    ok, refused = options(which)
    rows = [sweep_row(which, v, live) for v in ok]
    key = "epilogue warps" if which == "warps" else "stages"
    rows += [{key: v, "registers": "—", "note": f"does not compile: {why}"} for v, why in refused.items()]
    src = "lab notes" if which == "warps" else recorded_stages()["source"]
    if columns is not None:
        columns = [c for c in columns if any(c in r for r in rows)] + [c for c in ("measured ms", "note")
                                                                       if c not in columns and any(c in r for r in rows)]
    return Table(rows, f"Stage {name[:2]}, {define} sweep — registers/SMEM {evidence_label(stage(name).build)}; "
                       f"recorded: {src}" + ("; measured here" if "measured ms" in rows[0] else ""), columns)


def epi_warps_table(live: bool | None = None) -> Table:
    return sweep_rows_table("warps", live)


def stages_table(live: bool | None = None) -> Table:
    return sweep_rows_table("stages", live)


def sweep_widget(which: str, live: bool = True, columns=None, compact: bool = False):
    """A slider over the values of NUM_EPI_WARPS ('warps', stage 05) or NUM_STAGES ('stages', stage 06) that
    the kernel accepts, starting at the kernel's own default; the static table (with the refused values
    and why) above it; columns: the static table's, compact: each simulated run as one row (sim.run_table)."""
    if which not in SWEEPS:
        raise ValueError(f"which={which!r}: 'warps' or 'stages'")
    name, define, export, _ = SWEEPS[which]
    ok, _ = options(which)
    default = stage(name).exports[export]

    def render(v):
        return sweep_point(which, v, default, compact=compact)
    return widgets.sweep(ok, render, static=sweep_rows_table(which, columns=columns), description=define,
                         value=default, live=live)


def sweep_problem(name: str):
    """The simulator's problem for a sweep position, at the lab's K (six k-blocks for K = 768), so a ring of
    every depth the sweep offers below that wraps within a tile, as on the full problem."""
    s = stage(name)
    p = s.problem("sim")
    return dataclasses.replace(p, name=f"{p.name} at K={s.problem('full').k}", k=s.problem("full").k)


def sweep_point(which: str, v: int, default: int, compact: bool = False):
    """One position of a sweep, showing what the table above cannot: the recorded times with this value
    marked and its shared memory against the per-block limit (a figure), and the SASS this value changes
    against the stage's default build (compiled)."""
    name, define = SWEEPS[which][:2]
    opts, _ = options(which)
    if which == "warps":
        rec, src = recorded_epi_warps(), f"{LAB_LOG}, history and F3"
    else:
        rec = recorded_stages()
        src = rec["source"]
    b, b0 = stage(name, {define: v}).build, stage(name, {define: default}).build
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(7.8, 2.8), gridspec_kw={"width_ratios": [2, 1]})
    pts = [(o, rec[o]["ms"]) for o in opts if isinstance(rec.get(o), dict) and rec[o].get("ms")]
    ax.plot([o for o, _ in pts], [m for _, m in pts], "o-", color="#2e86c1")
    for o, m in pts:
        ax.text(o, m, f" {m:g}", fontsize=9, va="bottom")
    ax.axvline(v, color="k", lw=1.5, alpha=0.6)
    ax.text(v, 0.04, f" {define}={v}", transform=ax.get_xaxis_transform(), fontsize=9)
    ax.set_xticks(list(opts))
    ax.set_xlabel(define)
    ax.set_ylabel("ms on a B200")
    if pts:   # from zero: a 3 % change must not look like a cliff
        ax.set_ylim(0, max(m for _, m in pts) * 1.25)
    ax.set_title(plots.evidence_label("recorded", src), fontsize=9)
    smem, limit = b.exports["smem_bytes"], b.exports["smem_limit"]
    bx.bar([0], [smem], width=0.5, color="#2e86c1" if smem <= limit else "#c0392b")
    bx.axhline(limit, color="red", ls="--", lw=1)
    bx.text(0.55, limit, f"per-block limit\n{limit:,} B", fontsize=9, color="red", ha="center", va="bottom")
    bx.text(0, smem / 2, f"{smem:,} B", rotation=90, ha="center", va="center", color="white", fontsize=9)
    bx.set_xlim(-0.5, 0.85)
    bx.set_ylim(0, limit * 1.25)
    bx.set_xticks([])
    bx.set_ylabel("dynamic shared memory (B)")
    bx.set_title("shared memory: compiled", fontsize=9)
    fig.tight_layout()
    h, h0 = b.histogram, b0.histogram
    delta = [{"SASS opcode": op, f"{define}={default}": h0.get(op, 0), f"{define}={v}": h.get(op, 0),
              "change": h.get(op, 0) - h0.get(op, 0)}
             for op in sorted(set(h) | set(h0)) if h.get(op, 0) != h0.get(op, 0)]
    label = evidence_label(b)
    point = Table([sweep_row(which, v)], f"{define}={v} — registers/SMEM {label}; ms recorded ({src})")
    simulated = sim.sweep_panel(stage(name, {define: v}), problem=sweep_problem(name), compact=compact)
    if not delta:
        same = ("This is the default build." if v == default else
                f"The SASS of {define}={v} has the same opcode counts as the default {define}={default} ({label}).")
        return [fig, point, same, *simulated]
    return [fig, point, Table(delta, f"SASS opcodes that change against {define}={default} — {label}"), *simulated]


def ncu_tables() -> list[Table]:
    """The lab's ncu A/B around SMEM staging (recorded), one Table per section of the note."""
    by: dict = {}
    for m in records.ncu():
        by.setdefault(m.table, []).append(m)
    titles = {"build": "Build stats (ptxas)", "stalls": "Warp stall breakdown (% of peak sustained active)",
              "memory": "Memory throughput (%)", "uncoalesced": "Uncoalesced access",
              "compare": "A/B comparison findings (>5% change)"}
    out = []
    for t, ms in by.items():
        rows = [{"metric": m.metric, "before staging": m.baseline, "with staging": m.after,
                 "change": "" if m.delta is None else f"{m.delta:+g} {m.delta_kind or ''}".strip()} for m in ms]
        if not any(r["change"] for r in rows):   # the note gives no change for this section: no empty column
            rows = [{k: v for k, v in r.items() if k != "change"} for r in rows]
        out.append(Table(rows, f"{titles.get(t, t)} — recorded ({ms[0].source.note}, ncu --set detailed, B200)"))
    return out


# ---- seeing inside: the TIMING build -------------------------------------------------------------------

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
_PHASE_ORDER = [LAB_NAMES[p] for p in ("producer_wait", "tma_issue", "tma_wait", "kloop", "epi_wait",
                                       "acc_wait", "epi_phase1", "epi_phase2")]


def run_timing(name: str = FINAL, problem="siglip2", defines: dict | None = None):  # pragma: no cover - GPU
    """The TIMING build on a B200, decoded (pelib.stage.Stage.run_timing)."""
    return stage(name, defines).run_timing(problem)


def recorded_timing_table() -> Table:
    """The lab's clock64 per-tile phases (recorded), each with its note and section."""
    want = {"tma0_wait": "TMA stage-0 wait", "kloop": "K-loop", "epi_wait": "epilogue-barrier wait",
            "phase1": "Phase 1 (TMEM readback)", "phase2b": "Phase 2B (stores)", "ml_wait": "MMA-done wait", "tile": "tile"}
    rows = [{"phase": want[p.phase], "warp": p.warp, "cycles": p.cycles,
             "share": f"{p.pct}% of {p.of}" if p.pct is not None else "—", "source": f"{p.source.note} § {p.source.section}"}
            for p in records.phases() if p.phase in want]
    return Table(rows, "clock64 per tile — recorded (lab notes; B200, the lab's kernel)")


def timing_layout_table(problem="siglip2", sm_count: int | None = None) -> Table:
    """What the TIMING build records and how big the buffer is for a launch (compiled)."""
    s = stage(FINAL)
    cfg = s.launch_config(problem, sm_count=sm_count)
    lay = timing.layout(s.timing_build(), cfg.ctas)
    rows = [{"role": role, "phase id": timing.phase_id(ph), "phase": ph, "lab's name": LAB_NAMES[ph],
             "what it brackets": timing.phase_notes()[ph]} for role, phs in TIMING_PHASES.items() for ph in phs]
    cap = (f"TIMING build of {FINAL}: records [cta][warp][tile][phase][start, end] of u64, "
           f"{lay.ctas} CTAs x {lay.warps} warps x {lay.tiles} tiles x {lay.phases} phases = "
           f"{lay.words * 8:,} B ({lay.unit}); tiles past {lay.tiles} per CTA are not recorded — compiled")
    return Table(rows, cap)


def timing_build_table() -> Table:
    """The TIMING build beside the normal one: what instrumentation costs (compiled)."""
    rows = []
    for label, b in (("normal", build(FINAL)), ("TIMING", stage(FINAL).timing_build())):
        ins = sass.instructions(b.sass)
        rows.append({"build": label, "registers": b.facts.registers, "spills (B)": b.facts.spills,
                     "stack (B)": b.facts.stack, "SASS instrs": len(ins),
                     "clock reads (CS2R SR_CLOCKLO)": sum(1 for _, op, t in ins if "SR_CLOCKLO" in t),
                     "64-bit global stores (STG.E.64)": sum(1 for _, op, _ in ins if op == "STG.E.64"),
                     "register ceiling": 255})
    return Table(rows, f"{FINAL}: normal and TIMING builds — {evidence_label(build(FINAL))}")


def timing_bars(t, evidence_source: str):
    """Measured per-warp phase averages of a decoded Timing, as stacked bars (pelib.views.plots.phase_bars)."""
    summ = t.summary()
    data: dict = {}
    who = {0: "W0 producer", 1: "W1 MMA"}
    for phs in TIMING_PHASES.values():
        for ph in phs:
            for w, st in summ.get(ph, {"warps": {}})["warps"].items():
                data.setdefault(who.get(w, f"W{w} epilogue"), {})[LAB_NAMES[ph]] = st["avg"]
    return plots.phase_bars(dict(sorted(data.items())), "measured", evidence_source,
                            title=f"{FINAL}, TIMING build: average per tile", unit=t.layout.unit, phases=_PHASE_ORDER)


def timing_table(t) -> Table:
    """Measured per-warp, per-phase statistics of a decoded Timing (avg / p95 / min / max, in its unit)."""
    rows = []
    for role, phs in TIMING_PHASES.items():
        for ph in phs:
            row = t.summary().get(ph)
            for w, st in sorted((row or {"warps": {}})["warps"].items()):
                rows.append({"role": role, "phase": LAB_NAMES[ph], "warp": w, "n": st["n"], "avg": round(st["avg"]),
                             "p95": round(st["p95"]), "min": round(st["min"]), "max": round(st["max"])})
    return Table(rows, f"TIMING build, per warp and phase ({t.layout.unit}) — measured")


def recorded_timing_bars():
    """The lab's clock64 tile (recorded) in the same shape as timing_bars."""
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

