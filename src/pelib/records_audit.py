"""The lab records checked against themselves: what the notes derive, recomputed.

checks() recomputes what the notes derive (TFLOPS from ms, sums, percentages, table agreement) and
returns one Finding per check; the failures the notes really contain are listed, with reasons, in
book/data/inconsistencies.yaml, and unexplained() returns any mismatch between the two.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import problems
from .records import (EVIDENCE, FP8_FLOPS, NVFP4_SHAPES, Source, _nv_src, _src, cublas, equilibria,
                      experiment, experiments, f25_warps, headline, history, instruction_budgets,
                      later_states, load, ncu, nvfp4_sol_us, nvfp4_split_k, nvfp4_stage_steps,
                      nvfp4_stage_sweep, phases, ruled_out, smem_budget, staging_f24, w1_reconciliation,
                      w1_stalls)


@dataclass(frozen=True)
class Finding:
    """The result of one consistency check."""

    check: str
    ok: bool
    recorded: object
    expected: object
    detail: str
    source: Source


# ---------------------------------------------------------------------------------------------
# Consistency checks
# ---------------------------------------------------------------------------------------------

def _decimals(x: float) -> int:
    s = repr(float(x))
    return 0 if float(x).is_integer() else len(s.split(".")[1])


def _half_ulp(x: float) -> float:
    """Half a unit of the last digit the value is written with (its rounding interval)."""
    return 0.5 * 10.0 ** (-_decimals(x))


def tflops_consistent(ms: float, tflops: float, flops: int = FP8_FLOPS, ms_decimals: int = 3) -> bool:
    """True when some time within ms's rounding gives a TFLOPS that rounds to the recorded one.

    The notes write times with 3 decimals (0.630 ms), which a float cannot remember: say how many.
    """
    h_ms = 0.5 * 10.0 ** -ms_decimals
    lo, hi = ms - h_ms, ms + h_ms
    t_hi, t_lo = flops / (lo * 1e-3) / 1e12, flops / (hi * 1e-3) / 1e12
    h = _half_ulp(tflops)
    return t_lo - h <= tflops <= t_hi + h


def _close(recorded: float, computed: float, tol: float) -> bool:
    return abs(recorded - computed) <= tol + 1e-9


def _pct_ok(recorded: float, computed: float) -> bool:
    """A percentage the note rounds: within half its last digit, or 1 point for whole numbers."""
    return _close(recorded, computed, max(_half_ulp(recorded), 0.5 if float(recorded).is_integer() else 0))


class _Checks:
    def __init__(self):
        self.out: list[Finding] = []

    def add(self, check, ok, recorded, expected, detail, source):
        self.out.append(Finding(check, bool(ok), recorded, expected, detail, source))


def _check_fp8(c: _Checks) -> None:
    hist = history()
    for h in hist:
        if h.ms is not None and h.tflops is not None:
            exp = FP8_FLOPS / (h.ms * 1e-3) / 1e12
            c.add(f"history.tflops.{h.commit}", tflops_consistent(h.ms, h.tflops), h.tflops, round(exp, 1),
                  f"2·M·N·K / {h.ms} ms", h.source)
    for s in later_states() + headline():
        if s.ms is not None and s.tflops is not None:
            c.add(f"state.tflops.{s.state}", tflops_consistent(s.ms, s.tflops), s.tflops,
                  round(FP8_FLOPS / (s.ms * 1e-3) / 1e12, 1), f"2·M·N·K / {s.ms} ms", s.source)
    for i, r in enumerate(cublas()):
        if r.tflops is not None:
            c.add(f"cublas.tflops.{i}", tflops_consistent(r.ms, r.tflops), r.tflops,
                  round(FP8_FLOPS / (r.ms * 1e-3) / 1e12, 1), f"2·M·N·K / {r.ms} ms", r.source)
    best = hist[-1]
    for s in headline():
        c.add("state.headline_is_last_commit", (s.ms, s.tflops, s.regs) == (best.ms, best.tflops, best.regs),
              (s.ms, s.tflops, s.regs), (best.ms, best.tflops, best.regs), "header vs last history row", s.source)

    by_ms = {h.ms: h for h in hist if h.ms is not None}
    raw_exp = {e["id"]: e for e in load("experiments")["experiments"]}
    # The baseline an experiment names must be a history time with the warps it states.
    four_warp_ms = [h.ms for h in hist if h.ms is not None and hist.index(h) < [x.commit for x in hist].index("521ad55")]
    for e in experiments():
        r = raw_exp[e.id]
        if e.id in ("F1", "F2"):
            c.add(f"fp8.{e.id}.baseline", (e.baseline_ms, e.baseline_regs) == (best.ms, best.regs),
                  (e.baseline_ms, e.baseline_regs), (best.ms, best.regs), "baseline = last commit", e.source)
            exp_pct = (e.result_ms / e.baseline_ms - 1) * 100
            c.add(f"fp8.{e.id}.change_pct", abs(exp_pct - r["change_pct"]) <= 1.0, r["change_pct"], round(exp_pct, 1),
                  "result / baseline - 1", e.source)
        if "4 epilogue warps" in str(r.get("baseline_label", "")):
            ok = e.baseline_ms in four_warp_ms
            c.add(f"fp8.{e.id}.baseline", ok, r["baseline_label"], four_warp_ms,
                  "times the history gives with 4 epilogue warps (0.722 ms is 521ad55, the 5th warp)", e.source)
    f6 = experiment("F6")
    c.add("fp8.F6.times", by_ms.get(f6.baseline_ms) is not None and by_ms.get(f6.result_ms) is not None
          and by_ms[f6.result_ms].regs == f6.result_regs, (f6.baseline_ms, f6.result_ms, f6.result_regs),
          "history rows 521ad55 and cefc59d", "6-stage and 4-stage times in the history", f6.source)
    sp = (f6.baseline_ms / f6.result_ms - 1) * 100
    c.add("fp8.F6.speedup_pct", _pct_ok(f6.extra["speedup_pct"], sp), f6.extra["speedup_pct"], round(sp, 2),
          "0.722 / 0.700 - 1", f6.source)
    for eid in ("F7", "F8"):
        e = experiment(eid)
        ok = e.baseline_ms in by_ms and e.result_ms in by_ms
        c.add(f"fp8.{eid}.times", ok, (e.baseline_ms, e.result_ms), "history times", "times in the history", e.source)
    f9 = experiment("F9")
    c.add("fp8.F9.tmem", 256 * 4 == f9.extra["tmem_cols_needed"] > f9.extra["tmem_cols_per_sm"],
          f9.extra["tmem_cols_needed"], 256 * 4, "256 columns x 4 CTAs vs 512", f9.source)
    ro = {r.proposal: r for r in ruled_out()}
    five = ro["5-stage pipeline"].numbers
    c.add("ruled_out.5stage.staging_left", five["staging_left_kb"] == 228 - five["smem_5stage_kb"],
          five["staging_left_kb"], 228 - five["smem_5stage_kb"], "228 KB - 5 x 32 KB pipeline", ro["5-stage pipeline"].source)
    two = [r for r in cublas() if r.tflops is not None]
    c.add("cublas.notes_agree", len({(r.ms, r.tflops) for r in two}) == 1, [(r.ms, r.tflops) for r in two],
          "one value", "the two notes' cuBLAS GEMM figures", two[0].source)

    # SMEM
    b = smem_budget()
    c.add("smem.sum", b.component_sum == b.total, b.total, b.component_sum,
          f"components sum to {b.component_sum}, {b.unaccounted} B short of the stated total", b.source)
    c.add("smem.headroom", abs(b.headroom / 1024 - 17) < 1, b.headroom_label, b.headroom,
          "SM limit - total", b.source)
    st = staging_f24()
    ssrc = _src(st["source"])
    for k in ("current", "proposed"):
        v = st[k]
        calc = v["row_bytes"] * v["rows"] * v["halves"]
        c.add(f"smem.f24.{k}", calc == v["bytes_per_warp"] and calc * v["warps"] == v["total"],
              (v["bytes_per_warp"], v["total"]), (calc, calc * v["warps"]), "row bytes x 32 rows x 2 halves x warps", ssrc)
    c.add("smem.f24.saves", st["current"]["total"] - st["proposed"]["total"] == st["saves"], st["saves"],
          st["current"]["total"] - st["proposed"]["total"], "current - proposed", ssrc)
    ncu_after = {m.metric: m for m in ncu() if m.table == "build"}["smem_dynamic_kb"]
    c.add("ncu.build.smem_matches_budget", abs(b.total / 1024 - ncu_after.after) < 1, ncu_after.after,
          round(b.total / 1024, 2), "SMEM_BYTES in KiB", ncu_after.source)

    # ncu deltas
    for m in ncu():
        if m.delta is None:
            continue
        if m.delta_kind == "rel_pct":
            calc = (m.after / m.baseline - 1) * 100
            # Whole-number percentages must round to the note's figure; '~' counts get 5 %.
            tol = 0.05 * abs(m.delta) if m.approx else 0.5
            ok = abs(calc - m.delta) <= tol + 1e-9
        elif m.delta_kind == "pp":
            calc = m.after - m.baseline
            ok = _close(m.delta, calc, 0.05)
        elif m.delta_kind == "ratio":
            calc = m.after / m.baseline
            ok = _close(m.delta, calc, 0.05)
        else:
            continue
        c.add(f"ncu.{m.table}.{m.metric}", ok, m.delta, round(calc, 2), m.delta_kind, m.source)
    summ = load("ncu")["summary"]
    sp = (by_ms[0.700].ms - by_ms[0.633].ms) / by_ms[0.700].ms * 100
    c.add("ncu.summary.speedup_pct", _pct_ok(summ["speedup_pct"], sp), summ["speedup_pct"], round(sp, 2),
          "(0.700 - 0.633) / 0.700", Source(load("ncu")["note"], summ["section"]))


def _check_w1(c: _Checks) -> None:
    raw = load("w1")
    for b in instruction_budgets():
        s = sum(x.count for x in b.categories)
        c.add(f"w1.budget.{b.version}.sum", s == b.total, b.total, s, "categories sum", b.source)
        for x in b.categories:
            calc = 100 * x.count / b.total
            c.add(f"w1.budget.{b.version}.pct.{x.name}", _close(x.pct, calc, 0.05), x.pct, round(calc, 2),
                  "count / total", b.source)
        if "overhead_per_mma" in b.extra and b.version.startswith("current"):
            other = b.categories[-1].count
            c.add("w1.f28.overhead_per_mma", _close(b.extra["overhead_per_mma"], other / 24, 0.05),
                  b.extra["overhead_per_mma"], round(other / 24, 2), "other / 24 MMAs", b.source)
            lo, hi = b.extra["per_k_iteration_range"]
            n = b.extra["k_iterations"]
            calc = [b.total - n * hi, b.total - n * lo]
            c.add("w1.f28.tile_overhead", calc == b.extra["tile_overhead_range"], b.extra["tile_overhead_range"], calc,
                  f"total {b.total} minus 6 x (37..47); the note subtracts from {b.extra['tile_overhead_total_used']}",
                  b.source)
            slo, shi = b.extra["expected_saving_range"]
            c.add("w1.f28.expected_after", [b.total - shi, b.total - slo] == b.extra["expected_after_range"],
                  b.extra["expected_after_range"], [b.total - shi, b.total - slo], "total - saving", b.source)
        if "per_k_iteration" in b.extra:
            p = b.extra["per_k_iteration"]
            c.add("w1.per_k_iteration", round(p["instructions"] / p["mmas"]) == p["overhead_per_mma"],
                  p["overhead_per_mma"], p["instructions"] / p["mmas"], "instructions / MMAs", b.source)
    st = raw["w1_stalls"]
    rows = w1_stalls()
    tot = sum(r.samples for r in rows)
    c.add("w1.stalls.total", tot == st["total_recorded"], st["total_recorded"], tot, "sum of the rows", rows[0].source)
    for r in rows:
        calc = r.samples / st["tiles"]
        c.add(f"w1.stalls.per_tile.{r.stall}", _close(r.per_tile, calc, _half_ulp(r.per_tile)), r.per_tile,
              round(calc, 4), "samples / 10,878 tiles", r.source)
    rate = 100 * st["total_recorded"] / st["instruction_executions"]
    c.add("w1.stalls.rate", _close(st["stall_rate_pct"], rate, 0.0005), st["stall_rate_pct"], round(rate, 4),
          "stalls / executions", rows[0].source)
    md = raw["mma_detail"]
    msrc = _src(md["source"])
    c.add("w1.mma.executions", md["executions"] == st["tiles"] * md["per_tile"] and
          md["per_tile"] == md["k_iterations"] * md["sub_mmas"], md["executions"], st["tiles"] * md["per_tile"],
          "tiles x 24", msrc)
    calc = 100 * md["stalls"] / md["executions"]
    c.add("w1.mma.stall_pct", _close(md["stall_pct"], calc, 0.0005), md["stall_pct"], round(calc, 4), "stalls / executions", msrc)
    for i, r in enumerate(raw["mbar_waits"]["rows"]):
        calc = 100 * r["stalls"] / r["exec"]
        c.add(f"w1.mbar.{i}", _close(r["stall_pct"], calc, 0.0005), r["stall_pct"], round(calc, 4), r["wait"],
              _src(raw["mbar_waits"]["source"]))
    ep = raw["epilogue_stalls"]["mainloop_mbar_retry"]
    calc = ep["total_iterations"] / ep["first_try_execs"]
    c.add("w1.retries", round(calc) == ep["avg_retries"], ep["avg_retries"], round(calc, 2), "iterations / first tries",
          _src(raw["epilogue_stalls"]["source"]))

    rec = w1_reconciliation()
    rsrc = Source("fp8-megakernel-w1-stall-isolation.md", "Reconciliation with clock64")
    for warp, keys in (("W1", ("tma0_wait", "kloop", "epi_wait")), ("W3", ("phase1", "phase2b", "ml_wait"))):
        tot = sum(rec[warp][k] for k in keys)
        for p in phases():
            if p.source == rsrc and p.warp == warp:
                calc = 100 * p.cycles / tot
                c.add(f"clock64.reconcile.{warp}.{p.phase}", _pct_ok(p.pct, calc), p.pct, round(calc, 2),
                      f"share of {tot} cycles", rsrc)

    for e in equilibria():
        if e.producer:
            pt = sum(v for k, v in e.producer.items() if k != "total")
            ct = sum(v for k, v in e.consumer.items() if k != "total")
            c.add(f"clock64.equilibrium.{e.label}.producer", pt == e.producer["total"], e.producer["total"], pt, "sum", e.source)
            c.add(f"clock64.equilibrium.{e.label}.consumer", ct == e.consumer["total"], e.consumer["total"], ct, "sum", e.source)
            c.add(f"clock64.equilibrium.{e.label}.deficit", ct - pt == e.deficit, e.deficit, ct - pt, "consumer - producer", e.source)
            km = e.extra.get("kloop_minus_300")
            if km:
                c.add(f"clock64.equilibrium.{e.label}.kloop_minus_300",
                      (pt - 300, ct - (pt - 300)) == (km["producer"], km["deficit"]), (km["producer"], km["deficit"]),
                      (pt - 300, ct - pt + 300), "K-loop - 300 cycles", e.source)
    amp = next(e.amplification for e in equilibria() if e.amplification)
    for e in equilibria():
        if e.epi_wait is not None:
            calc = e.deficit * amp
            c.add(f"clock64.equilibrium.{e.label}.amplification", abs(calc - e.epi_wait) <= 0.02 * e.epi_wait,
                  e.epi_wait, round(calc, 1), f"epi_wait ~= deficit x {amp} (the F28 linear model)", e.source)

    g = raw["tc_gap"]
    gsrc = _src(g["source"])
    tile = next(p.cycles for p in phases() if p.phase == "tile")
    for name, rec_v, calc, tol in (
            ("cycles_per_mma_slot", g["cycles_per_mma_slot"], g["kloop"] / g["mmas"], 0.5),
            ("gap", g["gap"], g["cycles_per_mma_slot"] - g["mma_exec_estimate"], 0),
            ("gap_pct", g["gap_pct"], 100 * g["gap"] / g["cycles_per_mma_slot"], 0.5),
            ("kloop_fraction_pct", g["kloop_fraction_pct"], 100 * g["kloop"] / tile, 0.05),
            ("tc_active_in_kloop_pct", g["tc_active_in_kloop_pct"], 100 * g["tc_active_pct"] / g["kloop_fraction_pct"], 0.5),
            ("gap_cycles", g["gap_cycles"], g["gap_pct"] / 100 * g["kloop"], 0.5),
            ("halved_saving", g["halved_saving"], g["gap_cycles"] / 2, 0.5)):
        c.add(f"clock64.tc_gap.{name}", _close(rec_v, calc, tol), rec_v, round(calc, 2), "F28 arithmetic", gsrc)
    r = g["registers"]
    c.add("clock64.registers.precompute_a", r["precompute_a_claim"] == 4 * 2 * 2, r["precompute_a_claim"], 4 * 2 * 2,
          "4 stages x 2 descriptors x 2 32-bit halves (the note states both 8 and 16)", gsrc)
    c.add("clock64.registers.precompute_16", r["current"] + r["precompute_16_claim"] == r["after_16_claim"] < r["fail_fast"],
          r["after_16_claim"], r["current"] + r["precompute_16_claim"], "223 + 16 < 240", gsrc)

    f = raw["f25"]
    fsrc = _src(f["source"])
    w = f25_warps()
    spread = max(x.avg for x in w) - min(x.avg for x in w)
    c.add("f25.spread_avg", spread == f["spread_of_averages"], f["spread_of_averages"], spread, "max - min avg", fsrc)
    p95 = max(x.p95 for x in w) - min(x.p95 for x in w)
    c.add("f25.spread_p95", p95 == f["p95_spread"], f["p95_spread"], p95, "max - min p95", fsrc)
    ratio = f["per_tile_spread"]["p95"] / f["per_tile_spread"]["avg"]
    c.add("f25.tile_ratio", _close(f["per_tile_spread"]["ratio"], ratio, 0.05), f["per_tile_spread"]["ratio"],
          round(ratio, 3), "p95 / avg", fsrc)
    tb = f["timing_build"]
    c.add("f25.headroom", tb["ceiling"] - tb["regs"] == tb["headroom"], tb["headroom"], tb["ceiling"] - tb["regs"],
          "255 - 252", fsrc)
    hdr = next(p for p in phases() if p.phase == "phase1" and p.source.section == "Bottleneck (header)")
    c.add("f25.header_phase1_is_W3", hdr.cycles == next(x.avg for x in w if x.warp == "W3"), hdr.cycles,
          next(x.avg for x in w if x.warp == "W3"), "header Phase 1 = F25's W3 average", hdr.source)


def _check_nvfp4(c: _Checks) -> None:
    nv = load("nvfp4")
    steps = nvfp4_stage_steps()
    sweep = nvfp4_stage_sweep()
    for s in steps:
        calc = 100 * (s.before_us - s.after_us) / s.before_us
        c.add(f"nvfp4.step.{s.from_stages}-{s.to_stages}.{s.shape}.pct", _pct_ok(s.recorded_pct, calc),
              s.recorded_pct, round(calc, 2), "(before - after) / before", s.source)
    for shape in NVFP4_SHAPES:
        chain = [s for s in steps if s.shape == shape]
        for prev, nxt in zip(chain, chain[1:]):
            c.add(f"nvfp4.chain.{shape}.{nxt.from_stages}", prev.after_us == nxt.before_us, nxt.before_us,
                  prev.after_us, "a table's 'before' = the previous table's 'after'", nxt.source)
    sm = nv["summary"]
    for shape in NVFP4_SHAPES:
        base, final, x = sm["rows"][shape]
        src = _nv_src(sm["section"])
        c.add(f"nvfp4.summary.{shape}.baseline", base == sweep[shape][1], base, sweep[shape][1], "1-stage time", src)
        c.add(f"nvfp4.summary.{shape}.final", final == sweep[shape][5], final, sweep[shape][5], "5-stage time", src)
        c.add(f"nvfp4.summary.{shape}.speedup", _close(x, base / final, _half_ulp(x)), x, round(base / final, 3),
              "baseline / final", src)
    sol = nvfp4_sol_us()
    for i, g in enumerate(nv["sol_gaps"]):
        for shape in NVFP4_SHAPES:
            calc = g["current"][shape] / sol[shape]
            c.add(f"nvfp4.sol_gap.{i}.{shape}", _close(g["gap"][shape], calc, _half_ulp(g["gap"][shape])),
                  g["gap"][shape], round(calc, 2), "current / SOL", _nv_src(g["section"]))
    cr = nv["constexpr_revision"]
    for shape in NVFP4_SHAPES:
        third, fourth, pct = cr["rows"][shape]
        src = _nv_src(cr["section"])
        c.add(f"nvfp4.constexpr.{shape}.third", third == sweep[shape][3], third, sweep[shape][3],
              "3rd revision vs the triple-buffer table", src)
        c.add(f"nvfp4.constexpr.{shape}.fourth", fourth == sweep[shape][5], fourth, sweep[shape][5],
              "4th revision vs the 5-stage table", src)
        calc = 100 * (third - fourth) / third
        c.add(f"nvfp4.constexpr.{shape}.pct", _pct_ok(pct, calc), pct, round(calc, 2), "(3rd - 4th) / 3rd", src)
    ad = nv["additional_stage_testing"]
    adaptive = {(r["shape"], r["stages"]): r for r in nv["adaptive_stages"]["rows"]}
    for r in ad["rows"]:
        for shape in NVFP4_SHAPES:
            v = r.get(shape)
            if v is None:
                continue
            if r["stages"] in sweep[shape]:
                ref, what = sweep[shape][r["stages"]], f"{r['stages']}-stage time of the per-optimization tables"
            else:
                ref, what = adaptive[(shape, r["stages"])]["us"], f"{r['stages']}-stage time of the adaptive attempt"
            c.add(f"nvfp4.additional.{r['stages']}.{shape}", v == ref, v, ref, what, _nv_src(ad["section"]))
    for r in nv["adaptive_stages"]["rows"]:
        src = _nv_src(nv["adaptive_stages"]["section"])
        shape, st = r["shape"], r["stages"]
        if st in sweep[shape]:
            c.add(f"nvfp4.adaptive.{shape}.us", r["us"] == sweep[shape][st], r["us"], sweep[shape][st],
                  f"{st}-stage time of the per-optimization tables", src)
        c.add(f"nvfp4.adaptive.{shape}.vs", r["vs_us"] == sweep[shape][5], r["vs_us"], sweep[shape][5],
              "the 5-stage time it is compared with", src)
    fin = nv["final"]
    fsrc = _nv_src(fin["section"])
    for shape in NVFP4_SHAPES:
        us, _ = fin["rows"][shape]
        c.add(f"nvfp4.final.{shape}.us", us == sweep[shape][5], us, sweep[shape][5], "5-stage time", fsrc)
    vs_base = {s: round(100 * (sweep[s][1] - fin["rows"][s][0]) / sweep[s][1], 1) for s in NVFP4_SHAPES}
    c.add("nvfp4.final.pct_label", all(_pct_ok(fin["rows"][s][1], vs_base[s]) for s in NVFP4_SHAPES),
          {s: fin["rows"][s][1] for s in NVFP4_SHAPES}, vs_base,
          "labelled 'vs baseline' but matching the 3rd -> 4th revision change", fsrc)
    sk_src = None
    for r in nvfp4_split_k():
        sk_src = r.source
        calc = 100 * (r.us / r.base_us - 1)
        c.add(f"nvfp4.split_k.{r.split}.{r.shape}.pct", _pct_ok(r.recorded_pct, calc), r.recorded_pct, round(calc, 2),
              "split-K / 5-stage - 1", r.source)
        c.add(f"nvfp4.split_k.{r.split}.{r.shape}.base", r.base_us == sweep[r.shape][5], r.base_us,
              sweep[r.shape][5], "5-stage time", r.source)
    at = nv["atomic_split_k"]["split1_overhead"]
    calc = 100 * (at["us"] / at["base_us"] - 1)
    c.add("nvfp4.atomic.pct", _pct_ok(at["pct"], calc), at["pct"], round(calc, 2), "split 1 overhead",
          _nv_src(nv["atomic_split_k"]["section"]))

    prof = nv["baseline_profile"]
    lo, hi = prof["grid_blocks"]
    psrc = _nv_src(prof["section"])
    for p in problems.nvfp4_log_shapes():
        c.add(f"nvfp4.grid.{p.name}", lo <= p.tiles <= hi, prof["grid_blocks"], p.tiles,
              "output tiles of 128 x 128 (one block each)", psrc)
    waves = (lo / prof["sms"], hi / prof["sms"])
    c.add("nvfp4.waves.profile", waves[0] - 0.005 <= prof["waves_per_sm"] <= waves[1] + 0.005, prof["waves_per_sm"],
          tuple(round(w, 2) for w in waves), "blocks / 148 SMs", psrc)
    rc = nv["root_cause"]
    rsrc = _nv_src(rc["section"])
    c.add("nvfp4.waves.root_cause", waves[0] - 0.005 <= rc["waves_per_sm"] <= waves[1] + 0.005, rc["waves_per_sm"],
          tuple(round(w, 2) for w in waves), "blocks / 148 SMs", rsrc)
    p = problems.nvfp4_gemm("k16384")
    parts = {"A": p.m * p.k / 2, "B": p.n * p.k / 2, "SFA": p.m * p.k / 16, "SFB": p.n * p.k / 16, "C": 2 * p.m * p.n}
    t = rc["traffic_k16384_mb"]
    for k, v in parts.items():
        ok = any(abs(t[k] * unit - v) <= 0.05 * v for unit in (1e6, 2 ** 20))
        c.add(f"nvfp4.traffic.{k}", ok, t[k], round(v / 1e6, 3), "bytes of the shape (MB or MiB)", rsrc)
    tot = sum(parts.values())
    c.add("nvfp4.traffic.total", abs(t["total"] * 1e6 - tot) <= 0.05 * tot, t["total"], round(tot / 1e6, 2),
          "sum (MB), note writes '~'", rsrc)
    c.add("nvfp4.traffic.time", _close(rc["theoretical_us"], t["total"] / rc["bandwidth_tb_s"], 0.05),
          rc["theoretical_us"], t["total"] / rc["bandwidth_tb_s"], "MB / (TB/s) = us", rsrc)
    c.add("nvfp4.traffic.achieved", _close(rc["achieved_tb_s"], t["total"] / rc["current_us"], 0.005),
          rc["achieved_tb_s"], round(t["total"] / rc["current_us"], 3), "MB / us", rsrc)
    c.add("nvfp4.root_cause.current_us", rc["current_us"] == sweep["k16384"][5], rc["current_us"], sweep["k16384"][5],
          "5-stage K=16384 time", rsrc)


def _check_tma_store(c: _Checks) -> None:
    raw = load("tma_store")
    tot = {}
    for e in raw["estimates"]:
        s = sum(r["cycles"] for r in e["rows"])
        tot[e["variant"]] = s
        c.add(f"tma_store.sum.{e['variant']}", s == e["total"], e["total"], s, "rows sum", Source(raw["note"], e["section"]))
    pr = raw["projection"]
    src = Source(raw["note"], pr["section"])
    x = tot["SIMT"] / tot["TMA store"]
    c.add("tma_store.speedup", _close(pr["epilogue_speedup_x"], x, 0.05), pr["epilogue_speedup_x"], round(x, 2),
          "510 / 130", src)
    gain = pr["epilogue_fraction_pct"] * (1 - tot["TMA store"] / tot["SIMT"])
    lo, hi = pr["overall_speedup_pct"]
    c.add("tma_store.overall", lo - 0.5 <= gain <= hi + 0.5, pr["overall_speedup_pct"], round(gain, 2),
          "epilogue share x (1 - 130/510)", src)
    s_lo, s_hi = pr["kernel_us"] * lo / 100, pr["kernel_us"] * hi / 100
    c.add("tma_store.saving", abs(s_lo - pr["saving_us"][0]) <= 1 and abs(s_hi - pr["saving_us"][1]) <= 1,
          pr["saving_us"], [round(s_lo, 1), round(s_hi, 1)], "373 us x 12..15 %", src)


def checks() -> list[Finding]:
    """Run every consistency check over the records."""
    c = _Checks()
    _check_fp8(c)
    _check_w1(c)
    _check_nvfp4(c)
    _check_tma_store(c)
    return c.out


@dataclass(frozen=True)
class Inconsistency:
    """A failed check that the notes really contain, with what it is."""

    check: str
    kind: str
    what: str
    finding: Finding


def flagged() -> dict[str, dict]:
    """The known inconsistencies of the notes (book/data/inconsistencies.yaml), by check id."""
    return {f["check"]: f for f in load("inconsistencies")["flagged"]}


def inconsistencies() -> list[Inconsistency]:
    """Every failed check, joined with its flag (kind 'unexplained' if the data file lacks it)."""
    fl = flagged()
    return [Inconsistency(f.check, fl.get(f.check, {}).get("kind", "unexplained"),
                          fl.get(f.check, {}).get("what", f.detail), f) for f in checks() if not f.ok]


def unexplained() -> dict[str, list[str]]:
    """Failed checks nobody flagged, and flags whose check passes or does not exist."""
    failed = {f.check for f in checks() if not f.ok}
    fl = set(flagged())
    return {"failed_not_flagged": sorted(failed - fl), "flagged_not_failed": sorted(fl - failed)}


def report() -> str:
    """A text summary: how many checks pass, and each inconsistency of the notes with its kind."""
    fs = checks()
    bad = inconsistencies()
    lines = [f"{len(fs)} consistency checks over the lab notes' records: {len(fs) - len(bad)} pass, "
             f"{len(bad)} fail (evidence: {EVIDENCE})."]
    for i in bad:
        lines.append(f"- [{i.kind}] {i.what}  ({i.finding.source.note})")
    u = unexplained()
    if u["failed_not_flagged"] or u["flagged_not_failed"]:
        lines.append(f"UNEXPLAINED: {u}")
    return "\n".join(lines)
