"""The part "Go or no-go": the cards, their variant kernels' evidence, the dashboard overview."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..layouts import banks, staging, tma_staging
from .. import bench, device, gonogo, records, results
from ..isa import sass
from ..facts import Table, evidence_label
from ..kinds import nvfp4 as kn
from ..models import pipeline as model
from ..stage import Stage, Timed
from ..stages import Rendered
from . import nvfp4 as nv, plots, sim
from ..measure.variants import BASE, CARDS, VARIANTS, all_evidence, card_evidence, emulate_check, kloop_accounts


def card_sheet(card_id: str) -> Table:
    """A card as the chapter shows it: hypothesis, change, rules, effort, rollback, dependencies."""
    c = gonogo.card(card_id)
    h = c.max_effort_h
    rows = [{"field": "title", "value": c.title}, {"field": "hypothesis", "value": c.hypothesis},
            {"field": "change", "value": c.change}]
    rows += [{"field": "success", "value": f"{r} [{'/'.join(r.evidence)}]"} for r in c.success]
    rows += [{"field": "fail-fast", "value": f"{r} [{'/'.join(r.evidence)}]"} for r in c.fail_fast]
    rows += [{"field": "classify", "value": f"{k.label}: {k.rule}"} for k in c.classify]
    rows += [{"field": "max effort", "value": (f"{h[0]:g}-{h[1]:g} h" if len(h) == 2 and h[0] != h[1]
                                              else f"{h[0]:g} h" if h else "")},
             {"field": "rollback", "value": c.rollback},
             {"field": "depends on", "value": ", ".join(c.depends_on) or "nothing"},
             {"field": "recorded status", "value": ", ".join(f"{k}: {v}" for k, v in c.recorded.items())}]
    return Table(rows, f"Card {c.id} (recorded: {c.source})")


def status_table(evidence: Mapping | None = None) -> Table:
    """One row per card: compiled-evidence status and the reason (for the proposals chapter)."""
    evidence = evidence or all_evidence(with_diff=False)
    return Table([{"card": c, "status": e.status, "evidence": e.evidence or "", "reason": e.reason}
                  for c, e in evidence.items()], "Variant kernels: compiled evidence per card")


def overview(facts=(), evidence: Mapping | None = None) -> Table:
    """One row per card: the evaluator's status and evidence kind, compiled evidence, the model's projection."""
    evidence = evidence or all_evidence(with_diff=False)
    proj: dict = {}
    for r in model.card_projections():
        proj.setdefault(r["card"], f"{r['wall-clock gain']} ({r['change (model input)'].split(' (')[0]})")
    rows = []
    for c, d in gonogo.dashboard(list(facts)):
        e = evidence.get(c.id)
        rows.append({"card": c.id, "title": c.title, "status": d.status, "decided on": d.evidence or "",
                     "needs B200": "yes" if d.needs_b200 else "",
                     "rule": str(d.rule.label or d.rule.metric) if d.rule else "",
                     "variant kernel": e.status if e else "", "modelled projection": proj.get(c.id, "")})
    return Table(rows, "Go/no-go F21-F28: status decided on the kind in 'decided on' (recorded or measured); "
                       "variant kernels compiled; projections modelled (pelib.models.pipeline)")


def kloop_table() -> Table:
    """F28's K-loop account beside stage 09's, instructions per tile by class (compiled, static fast path)."""
    before, after = kloop_accounts()
    b, a = before.per_tile, after.per_tile
    rows = [{"class": k, "stage 09 per tile": b[k], "F28 per tile": a[k], "change": a[k] - b[k]}
            for k in ("UTCQMMA", "R2UR", "SYNCS", "UTCBAR", "other", "total")]
    return Table(rows, "MMA warp, instructions per tile (one fast-path pass: every try_wait passes at once) — "
                       f"{evidence_label()}")


def emulate_table(card_id: str, keys=("variant", "tile", "epilogue add", "max_abs_err", "equals_bf16x2_model",
                                      "staged_ok")) -> Table:
    """One cluster tile of a card's variant against the FP32-add reference (emulated)."""
    r = emulate_check(card_id)
    return Table([{k: r.get(k, "") for k in keys}],
                 f"{card_id} variant, one cluster tile against the FP32-add reference — emulated")


def f24_banks_table() -> Table:
    """Phase 1's shared-memory wavefronts of stage 09's padded staging and F24's swizzled one (modelled)."""
    return banks.compare_table(Stage(BASE).exports, Stage(VARIANTS["F24"].file).exports)


# ---- the TMA-store epilogue (NVFP4 stage 02, and its Hopper measurement) ----------------------------------

TMA_STAGE = "02_tma_store_epilogue"
PITCH_NOTE = "nvfp4-dual-gemm-tma-store-epilogue-pitch.md"
PITCH_EVIDENCE = f"recorded (claim of {PITCH_NOTE})"
# The epilogue's instructions in SASS (nvdisasm, CUDA 13, sm_100a), as read in 01's and 02's listings.
EPILOGUE_OPCODES = {
    "LDTM": "tcgen05.ld (TMEM -> registers)",
    "F2FP": "cvt.rn.f16x2.f32 (two FP32 -> packed FP16)",
    "STG": "st.global.v4 (16 B of one row to global)",
    "STS": "st.shared (STS.128: 16 B into the staging tile; also the TMEM slot / barrier init)",
    "MEMBAR": "fence.proxy.async.shared::cta emits MEMBAR.ALL.CTA ...",
    "FENCE": "... and FENCE.VIEW.ASYNC.S (also after mbarrier init)",
    "BAR": "bar.sync: __syncthreads (id 0) and the epilogue's named barrier (id 1, 128 threads)",
    "UTMASTG": "cp.async.bulk.tensor.2d.global.shared::cta (one per 64-column box)",
    "UTMACMDFLUSH": "cp.async.bulk.commit_group",
    "DEPBAR": "cp.async.bulk.wait_group.read 0 (DEPBAR.LE SB0, 0x0); the others wait for tcgen05.ld",
}
# sm90/03_staged_epilogue.cu's switch: TMA store of the staging buffer (its default) or coalesced 16-B stores.
HOPPER_TMA_STORE = (("sm90/03_staged_epilogue", {}, "TMA store of the staging buffer (EPI_TMA_STORE=1)"),
                    ("sm90/03_staged_epilogue", {"EPI_TMA_STORE": 0},
                     "coalesced 16-B stores of the same buffer (EPI_TMA_STORE=0)"))


def tma_store_stage(stages: int = 4, staging_in_ring: int = 1) -> Stage:
    """02 at NUM_STAGES = stages, the staging tile in stage 0 of the ring (1) or in its own 32 KB (0)."""
    return nv.stage(TMA_STAGE, stages, STAGING_IN_RING=int(staging_in_ring))


def tma_store_facts(stages: int, staging_in_ring: int = 1) -> dict:
    """Compiled facts of 02 beside 01 at the same NUM_STAGES: registers, spills, SMEM, epilogue opcodes."""
    s2, s1 = tma_store_stage(stages, staging_in_ring), nv.stage("01_pipelined", stages)
    b2, b1 = s2.build, s1.build
    f2, f1 = nv.facts(s2), nv.facts(s1)
    h2, h1 = b2.histogram, b1.histogram
    m2, m1 = sass.opcode_histogram(b2.sass, modifiers=True), sass.opcode_histogram(b1.sass, modifiers=True)
    return {"stages": stages, "staging_in_ring": staging_in_ring, "registers": f2["registers"],
            "registers_01": f1["registers"], "spills": f2["spills"], "stack": f2["stack"], "smem": f2["smem_total"],
            "smem_01": f1["smem_total"], "smem_limit": f2["smem_limit"], "fits": f2["fits"], "tmem_cols": f2["tmem_cols"],
            "mma": h2.get(nv.MMA_OPCODE, 0), "sf_copies": h2.get(nv.SF_COPY_OPCODE, 0),
            "STS.128": m2.get("STS.128", 0), "STS.128_01": m1.get("STS.128", 0),
            "STG.E.128": m2.get("STG.E.128", 0), "STG.E.128_01": m1.get("STG.E.128", 0),
            **{op: h2.get(op, 0) for op in EPILOGUE_OPCODES}, **{f"{op}_01": h1.get(op, 0) for op in EPILOGUE_OPCODES}}


def tma_store_budget(counts=nv.STAGE_COUNTS) -> Table:
    """Shared memory per NUM_STAGES: 01, 02 with the staging tile in the drained ring, 02 with its own (compiled)."""
    rows = []
    for n in counts:
        f1, f2, f0 = nv.facts(nv.stage("01_pipelined", n)), nv.facts(tma_store_stage(n, 1)), nv.facts(tma_store_stage(n, 0))
        rows.append({"NUM_STAGES": n, "01 smem (B)": f1["smem_total"], "02, staging in the ring (B)": f2["smem_total"],
                     "fits (in the ring)": "yes" if f2["fits"] else "NO", "02, own 32 KB staging (B)": f0["smem_total"],
                     "fits (own)": "yes" if f0["fits"] else "NO"})
    lim = tma_store_stage(counts[0]).exports.smem_limit
    return Table(rows, f"Dynamic shared memory per NUM_STAGES, limit {lim} B (227 KB) — "
                       f"{evidence_label(tma_store_stage(counts[0]).build)}")


def tma_store_fitting(staging_in_ring: int = 1, counts=nv.STAGE_COUNTS) -> list[int]:
    """The NUM_STAGES values whose 02 build fits the 227 KB per block (compiled)."""
    return [n for n in counts if nv.facts(tma_store_stage(n, staging_in_ring))["fits"]]


def tma_store_compare_table(counts=nv.STAGE_COUNTS, columns=None) -> Table:
    """01 vs 02 per NUM_STAGES: registers, spills, the epilogue's stores and the MMA (compiled). columns: the
    ones to show (a narrow column)."""
    rows = []
    for n in counts:
        f = tma_store_facts(n)
        rows.append({"NUM_STAGES": n, "regs 01": f["registers_01"], "regs 02": f["registers"], "spills 02": f["spills"],
                     "STG 01": f["STG_01"], "STG 02": f["STG"], "STS.128 02": f["STS.128"], "UTMASTG 02": f["UTMASTG"],
                     f"{nv.MMA_OPCODE} 02": f["mma"], "smem 02 (B)": f["smem"], "fits": "yes" if f["fits"] else "NO"})
    return Table(rows, "01_pipelined vs 02_tma_store_epilogue (staging in the ring), static SASS counts — "
                       f"{evidence_label(tma_store_stage(counts[0]).build)}").only(columns)


def epilogue_opcode_table(stages: int = 5) -> Table:
    """The epilogue's SASS opcodes in 01 and 02 at one NUM_STAGES, with what each is (compiled)."""
    f = tma_store_facts(stages)
    rows = [{"opcode": op, "01": f[f"{op}_01"], "02": f[op], "what": what} for op, what in EPILOGUE_OPCODES.items()]
    return Table(rows, f"NUM_STAGES={stages}: static instruction counts (the tcgen05.ld loop runs 4 times) — "
                       f"{evidence_label(tma_store_stage(stages).build)}")


def launch_description(stages: int = 5, problem="k16384") -> str:
    """02's launch on a problem, one line per part: grid, block, shared memory, and each tensor map (compiled)."""
    s = tma_store_stage(stages)
    cfg, specs = s.launch_config(problem), s.tensor_map_specs(problem)
    return (f"{s.path.name} NUM_STAGES={stages}: grid={cfg.grid} block={cfg.block} smem={cfg.smem} B; maps:\n  "
            + "\n  ".join(f"{k}: {v.describe()}" for k, v in specs.items()))


def _params(stages: int, swizzle: int | None = None):
    p = kn.tile_params(tma_store_stage(stages).exports, 0)
    return p.with_(stage_swizzle=swizzle) if swizzle is not None else p


def staging_chunk_table(stages: int = 5, rows: int = 9, swizzle: int | None = None) -> Table:
    """Which output columns each 16-B chunk slot of the first staging rows holds (from the exports)."""
    p = _params(stages, swizzle)
    out = []
    for r in range(rows):
        slots = {}
        for c in range(0, p.stage_box_cols, 8):
            a = int(tma_staging.staging_addresses(p, np.array(r), np.array(c))[0])
            slots[(a - p.stage_smem_offset - r * p.stage_box_cols * p.out_elem_bytes) // 16] = f"{c}–{c + 7}"
        out.append({"row": r, **{f"slot {q}": slots.get(q, "") for q in range(p.stage_box_cols * 2 // 16)}})
    return Table(out, f"Box 0 of the staging tile: output columns in each 16-B slot of a 128-B row, "
                      f"stage_swizzle = {p.stage_swizzle} B — compiled (derived from the exports)")


def staging_wavefronts(stages: int = 5, swizzle: int | None = None, warp: int = 0, col: int = 0) -> int:
    """Modelled bank-conflict cost of one STS.128 of the epilogue: lane l of `warp` writes columns col..col+7
    of row 32*warp + l (pelib.layouts.staging.wavefronts: the most distinct 4-B words one of 32 banks serves)."""
    p = _params(stages, swizzle)
    rows = 32 * warp + np.arange(32)[:, None] + np.zeros((1, 8), dtype=np.int64)
    cols = col + np.arange(8)[None, :] + np.zeros((32, 1), dtype=np.int64)
    return staging.wavefronts(tma_staging.staging_addresses(p, rows, cols).reshape(32, -1))


def store_traffic_table(stages: int = 5) -> Table:
    """What one warp's stores look like in 01 and 02 (modelled from the addresses the exports give)."""
    ex = tma_store_stage(stages).exports
    row_bytes = ex.tile_n * ex["out_elem_bytes"]
    rows = [{"epilogue": "01: st.global.v4, lane l -> row 32w + l", "per warp instruction": "32 rows x 16 B",
             "128-B global lines touched": 32, "shared-memory wavefronts": "—"},
            {"epilogue": "02: st.shared.v4 into the staging tile, swizzled (exported stage_swizzle)",
             "per warp instruction": "32 rows x 16 B", "128-B global lines touched": "—",
             "shared-memory wavefronts": staging_wavefronts(stages)},
            {"epilogue": "02 with stage_swizzle = 0 (not built: what the swizzle avoids)",
             "per warp instruction": "32 rows x 16 B", "128-B global lines touched": "—",
             "shared-memory wavefronts": staging_wavefronts(stages, swizzle=0)},
            {"epilogue": "02: UTMASTG, one box of 128 rows x 64 columns",
             "per warp instruction": f"{ex['stage_box_rows']} rows x {ex['stage_box_cols'] * ex['out_elem_bytes']} B",
             "128-B global lines touched": ex["stage_box_rows"] * ex["stage_box_cols"] * ex["out_elem_bytes"] // 128,
             "shared-memory wavefronts": "TMA engine"}]
    return Table(rows, f"One store instruction of the epilogue ({row_bytes}-B output rows) — modelled "
                       "(bank model: 32 banks x 4 B, 16-B accesses need at least 4 wavefronts)")


def tma_store_replay_table(counts=(1, 2, 5, 6)) -> Table:
    """The emulator's replay of 02 (K loop, staging tile, TMA store) against the reference, and wrong layouts."""
    cases = [(f"NUM_STAGES={n}", dict(stages=n)) for n in counts]
    cases += [("NUM_STAGES=5, STAGING_IN_RING=0", dict(stages=5, defines={"STAGING_IN_RING": 0})),
              ("wrong: stage_swizzle = 0 (map still 128 B)", dict(stages=5, overrides={"stage_swizzle": 0})),
              ("wrong: stage_swizzle = 64", dict(stages=5, overrides={"stage_swizzle": 64})),
              ("wrong: stage_box_cols = 32 (64-B box rows)", dict(stages=5, overrides={"stage_box_cols": 32})),
              ("wrong: staging 512 B off its 1024-B alignment", dict(stages=5, overrides={"stage_smem_offset": 512})),
              ("not wrong: stage_box_rows = 32 (8 stores, same bytes)", dict(stages=5, overrides={"stage_box_rows": 32})),
              ("wrong: both swizzles 64 B", dict(stages=5, overrides={"stage_swizzle": 64, "out_swizzle": 64}))]
    rows = []
    for name, kw in cases:
        r = nv.emulate_check(TMA_STAGE, kw["stages"], overrides=kw.get("overrides"), defines=kw.get("defines"))
        issues = r.get("issues", []) if "error" not in r else []
        code = [i for i in issues if "staging_layout_hash" in i]
        what = " ".join((r.get("error") or "; ".join(i for i in issues if i not in code) or "").split())
        rows.append({"case": name, "matches the reference": "yes" if r["ok"] else "NO",
                     "max |err|": f"{r['max_abs_err']:.3g}" if "max_abs_err" in r else "—",
                     "elements off": r.get("elements_off_by_more_than_1ulp", "—"),
                     "kernel code = exports": "—" if "error" in r else ("NO" if code else "yes"), "emulator says": what[:120]})
    return Table(rows, "02 replayed by pelib.emulate from its exports, tile (0, 1) of 128 x 256 x 2048 (8 K tiles) — emulated")


def tma_store_live_table(stages: int = 5, shapes=nv.SHAPES, *, iters: int = 30) -> Table:
    """On a B200: 01 and 02 verified (poisoned output) and timed at one NUM_STAGES per shape (measured).
    Elsewhere: one row per shape saying it is not measured yet, and why."""
    if not nv.live():
        info = device.current()
        here = info.describe() if info.present else "no CUDA GPU"
        rows = [{"shape": sh, "01 µs": "—", "02 µs": "—",
                 "evidence": f"not yet measured: needs an sm_100 GPU (B200), this machine has {here}"} for sh in shapes]
        return Table(rows, f"01 vs 02 at NUM_STAGES={stages} on a B200 — not measured on this machine")
    env, rows = bench.environment(), []     # pragma: no cover - GPU
    for sh in shapes:
        row = {"shape": sh}
        for name, tag in (("01_pipelined", "01"), (TMA_STAGE, "02")):
            r = nv.stage(name, stages).run(sh, time=Timed(iters=iters))
            row[f"{tag} µs"] = (f"{r['ms'] * 1e3:.2f}" if r.get("ms") else "—") + ("" if r["ok"] else " (FAILED verification)")
        row["evidence"] = f"measured ({env['device']}, {env['date'][:10]})"
        rows.append(row)
    return Table(rows, f"01 vs 02 at NUM_STAGES={stages}, verified then timed (L2 flushed, median of {iters})")


def tma_store_on_b200(stages: int = 5, *, mistake: str | bool | None = True, compact: bool = False) -> sim.Shown:
    """The chapter's 'On a B200' cell: on a B200, 01 and 02 verified and timed per shape (tma_store_live_table,
    measured); elsewhere both run on the simulator at three seeds (verified against torch, the simulator's
    report), the pending measurement said so, and one planted mistake of 02 (simulated)."""
    return sim.on_b200(["01_pipelined", TMA_STAGE], measured=lambda: tma_store_live_table(stages),
                       stage_of=lambda n: nv.stage(n, stages), recorded=lambda: tma_store_live_table(stages),
                       mistake=mistake, compact=compact)


def epilogue_sass(name: str = TMA_STAGE, stages: int = 5, ops=("LDTM", "STG", "STS.128", "MEMBAR", "FENCE", "BAR.SYNC",
                  "ELECT", "UTMASTG", "UTMACMDFLUSH", "DEPBAR")) -> Rendered:
    """The epilogue's SASS, from the tcgen05.ld (LDTM) to the __syncthreads before the TMEM dealloc, only
    the opcodes `ops` (compiled)."""
    ins = sass.instructions(nv.build(name, stages).sass)
    start = next(i for i, (_, op, _) in enumerate(ins) if op.startswith("LDTM"))
    end = next(i for i in range(start, len(ins)) if ins[i][1].startswith("BAR.SYNC") and "0x0 ;" in ins[i][2])
    keep = [f"/*{off:04x}*/  {text.split(';')[0].split('*/', 1)[-1].strip()} ;"
            for off, op, text in ins[start:end + 1] if op.startswith(tuple(ops))]
    return Rendered("\n".join(keep), "text", f"{nv._label(name, stages)}: the epilogue's SASS ({', '.join(ops)}) — compiled")


def pitch_estimates_table() -> Table:
    """The pitch's per-tile epilogue estimates, row by row, with their totals (the pitch's claims)."""
    rows, tot = [], {}
    for e in records.tma_store_estimates():
        rows.append({"epilogue": e.variant, "operation": e.operation, "cycles (claimed)": e.cycles,
                     "section": e.source.section})
        tot[e.variant] = tot.get(e.variant, 0) + e.cycles
    rows += [{"epilogue": v, "operation": "total", "cycles (claimed)": t, "section": ""} for v, t in tot.items()]
    return Table(rows, f"Epilogue of one dual-GEMM tile — {PITCH_EVIDENCE}; estimates, nobody measured them")


def pitch_estimates_figure():
    """Stacked bars of the pitch's estimates, labelled as the pitch's claims."""
    data: dict = {}
    for e in records.tma_store_estimates():
        data.setdefault(e.variant, {})[e.operation] = e.cycles
    return plots.phase_bars(data, "recorded", f"claim of {PITCH_NOTE}",
                            title="NVFP4 dual-GEMM epilogue per tile, the pitch's estimates")


def pitch_in_context(clock_ghz=(1.0, 2.0)) -> Table:
    """The pitch's 510 -> 130 cycles per tile against this kernel's recorded times (one tile per CTA).

    Evidence: modelled from a claim and recorded times. The B200 clock is not in its datasheet
    (book/data/gpu_specs.yaml), so the cycles are converted at both ends of `clock_ghz`."""
    tot: dict = {}
    for e in records.tma_store_estimates():
        tot[e.variant] = tot.get(e.variant, 0) + e.cycles
    simt, tma = tot["SIMT"], tot["TMA store"]
    saved, rec = simt - tma, nv.recorded_sweep()
    lo, hi = clock_ghz
    rows = []
    for shape in nv.SHAPES:
        us = rec[shape][5]
        rows.append({"shape": shape, "recorded µs (5 stages)": f"{us:.1f}",
                     "epilogue per CTA, claimed (µs)": f"{simt / (hi * 1e3):.2f}–{simt / (lo * 1e3):.2f}",
                     "saving if the claim holds (µs)": f"{saved / (hi * 1e3):.2f}–{saved / (lo * 1e3):.2f}",
                     "share of the kernel (%)": f"{100 * saved / (hi * 1e3) / us:.1f}–{100 * saved / (lo * 1e3) / us:.1f}"})
    return Table(rows, f"The claimed {simt} -> {tma} cycles at {lo}–{hi} GHz, one 128x128 tile per CTA — modelled "
                       f"(from {PITCH_EVIDENCE} and recorded ({nv.RECORD_NOTE}))")


def _variant_row(r: results.VariantResult) -> dict:
    t = f"{r.median_ms * 1e3:.1f}" if r.measured else "—"
    spread = f"{r.p10_ms * 1e3:.1f}–{r.p90_ms * 1e3:.1f}" if r.measured and r.p10_ms else ""
    ver = {True: "PASS", False: "FAIL", None: ""}[r.verified] if r.measured else "—"
    again = f"{r.repeat_ms * 1e3:.1f}" if r.measured and r.repeat_ms else ""
    return {"variant": r.label or f"{r.stage} {r.defines}", "epilogue": r.what, "time (µs)": t, "p10–p90 (µs)": spread,
            "repeat (µs)": again, "verified": ver, "UTMASTG": r.facts.get("UTMASTG", ""), "STG": r.facts.get("STG", ""),
            "evidence": r.evidence}


def hopper_tma_store_sweep() -> dict | None:
    """The newest committed sweep that ran sm90 stage 03 with both epilogues."""
    return results.latest_sweep(having=[(k, d, {"EPI_TMA_STORE": 1}) for k, d, _ in HOPPER_TMA_STORE])


def hopper_tma_store_results(sweep: dict | None = None) -> list:
    """sm90 stage 03 with EPI_TMA_STORE=1 (its default) and =0, from one committed sweep (the newest that
    ran both, unless given)."""
    sw = sweep if sweep is not None else hopper_tma_store_sweep()
    return [results.variant_result(k, d, what, sweep=sw, defaults={"EPI_TMA_STORE": 1}) if sw is not None
            else results.VariantResult(k, d, what, "no sweep") for k, d, what in HOPPER_TMA_STORE]


def hopper_tma_store_speedup(res: list) -> float | None:
    """Time with coalesced stores / time with the TMA store (> 1: the TMA store is faster); None unless both
    were measured and verified."""
    tma, simt = res
    if not (tma.measured and simt.measured and tma.verified and simt.verified):
        return None
    return simt.median_ms / tma.median_ms


def hopper_tma_store_summary(res: list | None = None) -> str:
    """One sentence for the chapter: the two times and their ratio, or why there are none yet."""
    res = res if res is not None else hopper_tma_store_results()
    tma, simt = res
    sp = hopper_tma_store_speedup(res)
    if sp is not None:
        line = (f"{tma.evidence}: TMA store {tma.median_ms * 1e3:.1f} µs, coalesced stores {simt.median_ms * 1e3:.1f} µs"
                f" — the TMA store is {abs(sp - 1) * 100:.1f} % {'faster' if sp > 1 else 'slower'} on the whole kernel")
        if tma.repeat_ms and simt.repeat_ms:
            r = simt.repeat_ms / tma.repeat_ms
            line += (f"; the repeat pass: {tma.repeat_ms * 1e3:.1f} vs {simt.repeat_ms * 1e3:.1f} µs, "
                     f"{abs(r - 1) * 100:.1f} % {'faster' if r > 1 else 'slower'}")
        return line
    parts = [f"EPI_TMA_STORE={1 if r is tma else 0}: {r.evidence}"
             + (" (verification FAILED)" if r.measured and not r.verified else "") for r in res]
    return "No comparison yet. " + "; ".join(parts)


def hopper_tma_store_table(sweep: dict | None = None, columns=None) -> Table:
    """The two variants side by side, each labelled with its evidence (measured, or not yet and why).
    columns: the ones to show (a narrow column)."""
    res = hopper_tma_store_results(sweep)
    sp = hopper_tma_store_speedup(res)
    src = next((r.path for r in res if r.path), "")
    cap = "Hopper twin, stage 03, TMA store vs coalesced stores of the staged tile"
    cap += f" — from {src.rsplit('/', 1)[-1]}" if src else " — no committed sweep"
    if sp is not None:
        cap += f"; coalesced / TMA store = {sp:.3f}"
    if any(r.facts for r in res):
        cap += "; UTMASTG and STG: compiled (recorded by the sweep)"
    return Table([_variant_row(r) for r in res], cap).only(columns)
