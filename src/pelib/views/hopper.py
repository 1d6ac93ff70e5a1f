"""The appendix "The same kernel on Hopper": the sm90 stages' facts, the committed sweeps, the live runs, the widget."""
from __future__ import annotations

import re

from ..measure import baselines
from .. import bench, clock, device, problems, results, sol, stages, timing
from ..facts import Table, evidence_label
from ..kinds.sm90 import (CHECK_PROBLEMS, comb_loads, l2_traffic, permuted_b_rows, permuted_b_spec,  # noqa: F401
                          resident_b_schedule, residue_schedule, window_schedule)
from ..stage import Stage, Timed, find
from . import plots, widgets


ARCH = "sm_90a"
BEST = ("sm90/06_permuted_b", {})   # fastest verified in the 2026-11-23T062323 H100 sweep: 0.932 ms


def chip_label(device: str) -> str:
    """A table's chip column: the model (H100, H200) of the device its caption names in full."""
    m = re.search(r"\b([A-Z]\d{3}[A-Z]?)\b", device or "")
    return m.group(1) if m else device


def sm90(name: str, defines: dict | None = None) -> Stage:
    """An sm90 stage by number ('04', '03a') or name, with defines."""
    return find("sm90", name, defines)


def stage_list(names=None) -> Table:
    """The sm90 stage files and the idea each adds (from their headers); names: only these stages, in this order."""
    ss = map(Stage, stages.family_stages("sm90") if names is None else [stages.resolve(n) for n in names])
    return Table([{"stage": s.name, "parent": (s.header.parent or "—").split("/")[-1], "idea": s.header.idea}
                  for s in ss], "sm90 stages (src/kernels/sm90)", descriptive=True)


def tree_order(stage_list: list[Stage]) -> list[tuple[Stage, int]]:
    """The declared tree (each header's Parent line) in reading order, with each stage's branch depth: a
    parent's child with the largest subtree (on a tie, a numbered stage before a lettered sub-stage, then
    the first in file order) continues its line (depth unchanged); its other children
    branch off one level deeper and are listed, with their subtrees, right after the parent."""
    by_key = {s.key: s for s in stage_list}
    kids: dict[str | None, list[Stage]] = {}
    for s in stage_list:
        par = s.header.parent if s.header.parent in by_key else None
        kids.setdefault(par, []).append(s)

    def size(s):
        return 1 + sum(size(c) for c in kids.get(s.key, []))
    out = []

    def walk(s, depth):
        out.append((s, depth))
        cs = kids.get(s.key, [])
        if not cs:
            return
        # the largest subtree continues the line; on a tie a numbered stage (08) before a sub-stage (07a)
        main = max(cs, key=lambda c: (size(c), c.name.split("_")[0].isdigit(), -cs.index(c)))
        for c in cs:
            if c is not main:
                walk(c, depth + 1)
        walk(main, depth)
    for root in kids.get(None, []):
        walk(root, 0)
    return out


def tree_table(chips=("h100", "h200")) -> Table:
    """The sm90 stages as their headers declare them (stage, idea, parent; a branch is indented under its
    parent), each diff's size against its parent, and the newest committed time of each stage at its
    default defines on each chip with its share of cuBLAS's GEMM in the same results folder (measured)."""
    measured = results.stage_times()
    devices: dict[str, set] = {c: set() for c in chips}
    files: set = set()
    rows = []
    for s, depth in tree_order([Stage(p) for p in stages.family_stages("sm90")]):
        d = stages.diff_stats(s.path, ignore_indent=True) if s.header.parent else None
        row = {"stage": "\u2003" * depth + ("\u21b3 " if depth else "") + s.name.split("_")[0],
               "idea": s.header.idea,
               "parent": s.header.parent.split("/")[-1].split("_")[0] if s.header.parent else "—",
               "changed lines": f"+{d['added']} / -{d['removed']}" if d else "—"}
        for c in chips:
            m = measured.get(s.key, {}).get(c)
            row[f"{c.upper()} ms"] = round(m["ms"], 3) if m else "—"
            row[f"{c.upper()} vs cuBLAS"] = f"{100 * m['cublas_ms'] / m['ms']:.0f}%" if m and m.get("cublas_ms") else "—"
            if m:
                devices[c].add(f"{m['device']}, {m['date']}")
                files.add(f"results/{m['file']}")
        rows.append(row)
    devs = "; ".join(" and ".join(sorted(v)) for v in devices.values() if v)
    return Table(rows, f"The declared tree of the sm90 stages — measured ({devs}; full problem, verified before "
                       "timing, median of 20)",
                 notes=["stage (its number; src/kernels/sm90/NN_*.cu), idea, parent: the headers; changed lines: the diff against the parent, headers "
                        "excluded, indentation ignored (descriptive)",
                        "vs cuBLAS: cuBLAS's GEMM-only time in the same results folder over the stage's time "
                        "(above 100 %: faster than cuBLAS)",
                        "from " + ", ".join(sorted(files)) + "; — : no run at the stage's default defines on that "
                        "chip in the committed results"])


def emulate_table(problem: str = "small", columns=None) -> Table:
    """One tile of every sm90 stage replayed by pelib.emulate from its exports, against the torch reference
    (columns: the ones to show, default all)."""
    rows = []
    for p in stages.family_stages("sm90"):
        s = Stage(p)
        r = s.emulate_check(problem)
        ex = s.exports
        rows.append({"stage": s.name, "tile (m0, n0)": r["tile"], "shape": f"{r['shape'][0]} x {r['shape'][1]}",
                     "A ring": f"{ex.pipeline_stages} x {ex.box('a')[0] * ex.box('a')[1] // 1024} KiB, "
                               f"SW{ex.box('a')[2]}",
                     "B rows": "permuted" if ex.get("b_perm") else "in order",
                     "max |err|": r["max_abs_err"], "issues": "; ".join(r["issues"]) or "none",
                     "within 1 BF16 ulp": "yes" if r["ok"] else "NO"})
    return Table(rows, f"One tile of each sm90 stage on '{problem}' — emulated (pelib.emulate, from each stage's "
                       "exports) against the torch reference", columns=columns)


def stage_facts(s: Stage) -> dict:
    """Compiled facts of one sm90 build: registers, spills, shared memory, tile, SASS counts, ptxas warnings."""
    b, ex = s.build, s.exports
    f, h = b.facts, b.histogram
    return {"stage": s.name, "defines": dict(s.defines), "registers": f.registers,
            "ptxas_warnings": ",".join(sorted(set(re.findall(r"C75\d\d", b.log)))),
            "spills": f.spills, "stack": f.stack, "smem": ex.smem_bytes + f.smem_static,
            "threads": ex.num_threads, "tile": f"{ex.tile_m}x{ex.tile_n}x{ex.block_k}",
            "stages": ex.pipeline_stages, "consumers": ex.epi_warps // 4, "cluster": ex.cluster_x,
            "persistent": ex.grid_kind != 0, "producer_regs": ex.get("producer_regs", "-"),
            "consumer_regs": ex.get("consumer_regs", "-"),
            **{op: h.get(op, 0) for op in ("QGMMA", "UTMALDG", "UTMASTG", "STG", "STS")}}


def stage_table(variants=None, columns=None) -> Table:
    """Compiled facts of every sm90 stage, or of (stage, defines) pairs (columns: the ones to show, default all)."""
    ss = [Stage(p) for p in stages.family_stages("sm90")] if variants is None else \
        [sm90(k, d) if not isinstance(k, Stage) else k for k, d in variants]
    return Table([stage_facts(s) for s in ss], f"sm90 stages — {evidence_label(ss[0].build)}", columns=columns)


def sass_grep(stage: str, pattern: str, defines: dict | None = None, n: int = 6) -> str:
    """The first n SASS lines of a stage that contain `pattern` (compiled evidence), addresses stripped."""
    s = sm90(stage, defines)
    out = [re.sub(r"\s*/\*[0-9a-fx]+\*/\s*", " ", ln).split(";")[0].strip() for ln in s.build.sass.splitlines()
           if pattern in ln][:n]
    return "\n".join(out) or f"(no SASS line of {s.name} contains {pattern!r})"


def opcode_table(names=("04", "06"), ops=("SHFL", "SEL", "FADD", "F2FP", "STG")) -> Table:
    """Static counts of some opcodes per stage (compiled)."""
    return Table([{"stage": sm90(k).name, **{op: sm90(k).build.histogram.get(op, 0) for op in ops}} for k in names],
                 "epilogue instructions of one tile per thread (compiled)")


def comb_reads_table(sm_count: int = 132) -> Table:
    """Most comb reads of one warpgroup on the full problem: stage 04's order against 07's comb-residue order
    and 07a's windows of it."""
    full = Stage("sm90/07_comb_resident").problem("full")
    s04 = resident_b_schedule(full.m, full.n, 256, sm_count)
    s07 = residue_schedule(full.m, full.n, 256, sm_count)
    s07a = window_schedule(full.m, full.n, 256, sm_count)
    groups = sm_count // (full.n // 256)
    return Table([{"order": f"04: row tiles g, g + {groups}, g + {2 * groups}, ...",
                   "comb reads per warpgroup (max)": max(comb_loads(s04))},
                  {"order": f"07: class by class (t mod 49), {groups} contiguous pieces",
                   "comb reads per warpgroup (max)": max(comb_loads(s07))},
                  {"order": "07a: row tiles 49i + g (class g) window by window, then the leftovers",
                   "comb reads per warpgroup (max)": max(comb_loads(s07a))}],
                 "comb reads, modelled from the kernels' schedules")


def l2_traffic_table(sm_count: int = 132, keys=None) -> Table:
    """Modelled bytes each stage moves between L2 and the SMs on the full problem (pelib.kinds.sm90.l2_traffic:
    A and B tiles, comb read by the epilogue in the stage's own tile order, C written)."""
    ss = [sm90(k) for k in keys] if keys else [Stage(p) for p in stages.family_stages("sm90")]
    p = ss[0].problem("full")
    rows = []
    for s in ss:
        ex = s.exports
        tr = l2_traffic(s, p, sm_count)
        rows.append({"stage": s.name, "tile": f"{ex.tile_m}x{ex.tile_n}", "A (GB)": round(tr["a"] / 1e9, 2),
                     "B (GB)": round(tr["b"] / 1e9, 2), "comb (GB)": round(tr["comb"] / 1e9, 3),
                     "C (GB)": round(tr["c"] / 1e9, 2), "total (GB)": round(sum(tr.values()) / 1e9, 2)})
    return Table(rows, f"L2 <-> SM traffic, modelled from the tile shapes ({sm_count} SMs); DRAM minimum "
                       f"{p.min_bytes / 1e9:.2f} GB")


# ---- the committed sweeps -------------------------------------------------------------------------

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


def clock_rows(summary: dict) -> list[dict]:
    """timing.summary_rows with what each phase means in these stages."""
    return [{**r, "what": PHASE_ROLES.get(r["phase"], "")} for r in timing.summary_rows(summary)]


def sweep_files():
    return results.sweep_files()


def load_sweep(path=None) -> dict:
    return results.load_sweep(path)


def _full():
    return Stage(BEST[0]).problem("full")


def recorded_variants_table(rep: dict) -> Table:
    """Every verified variant of a committed sweep: median ms, TFLOPS, share of the memory floor; the variants
    that did not run are one note under the table, each with its reason (never a row of blanks)."""
    full, gbps = _full(), rep["copy"]["gbps"]
    facts = {f.get("label"): f for f in rep.get("facts", [])}
    rows, failed = [], {}
    for r in rep.get("variants", []):
        f = facts.get(r["label"].replace(" [again]", ""), {})
        if not r.get("median_ms"):
            err = r.get("error") or ""
            why = ("trapped (launch failed)" if "KernelFault" in err else
                   "shape not supported" if ("ShapeError" in err or "KindError" in err) else
                   err[:60] or ("did not verify" if not r.get("ok") else "no time"))
            failed.setdefault(why, []).append(r["label"])
            continue
        d = bench.derived(full, r["median_ms"], gbps)
        rows.append({"variant": r["label"], "regs": f.get("registers", ""), "smem (KiB)": f.get("smem", 0) // 1024,
                     "verified": "yes" if r.get("ok") else "NO", "ms": round(r["median_ms"], 4),
                     "TFLOPS": round(d["tflops"]), "of floor": f"{100 * d['floor_frac']:.0f}%"})
    notes = [f"not measured ({why}): {', '.join(labels)}" for why, labels in failed.items()]
    cols = ["variant", "regs", "smem (KiB)", "verified", "ms", "TFLOPS", "of floor"]
    return Table(rows, f"sm90 sweep — {results.sweep_evidence(rep)}; floor {full.min_bytes / gbps / 1e6:.3f} ms at "
                       f"{gbps:.0f} GB/s copy ({rep['_file']})", cols, notes=notes)


def ours_against(ratio: float | None) -> str:
    """A baseline's time over ours, in words: '1.14x faster' where ours is faster, '1.69x slower' where not."""
    if not ratio:
        return ""
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def why_not_measured(note: str) -> str:
    """Why a baseline has no time in a run, without the traceback: an error raised in pelib's own code (the
    verification, the sweep) is said to be ours, not the baseline's; the full text stays in the results file."""
    text = str(note or "")
    if re.search(r"\b\w+Error\b|Traceback|Exception", text):
        where = "pelib's own code around it" if "pelib" in text else "the run"
        return f"the run failed in {where}, not a timing of the baseline; the error is kept in the results file"
    return text[:140]


def _comparison_table(rows: list[dict], caption: str) -> Table:
    out, missing = [], []
    for r in rows:
        if r["ms"] is None:   # a run that failed is not a result: said under the table, never a row
            missing.append(f"Not measured in this run: {r['name']} ({why_not_measured(r['note'])}).")
        else:
            out.append({"what": r["name"], "ms": round(r["ms"], 4), "TFLOPS": round(r["tflops"]),
                        "GB/s": round(r["gbps"]), "of floor": f"{100 * r['floor_frac']:.0f}%",
                        "ours against it": ours_against(r.get("speedup"))})
    return Table(out, caption, ["what", "ms", "TFLOPS", "GB/s", "of floor", "ours against it"], notes=missing)


def recorded_comparison_table(rep: dict) -> Table:
    """The sweep's fastest verified variant against its baselines (same run, same GPU)."""
    timed = [r for r in rep.get("variants", []) if r.get("median_ms")]
    best = min(timed, key=lambda r: r["median_ms"])
    rows = bench.compare_rows({**best, "stage": best["label"]}, rep.get("baselines", {}), rep["copy"]["gbps"], _full())
    return _comparison_table(rows, f"ours vs baselines — {results.sweep_evidence(rep)}")


def recorded_clock(rep: dict):
    """The sweep's clock64 breakdown as a compact table, or a line saying there is none."""
    cl = rep.get("clock") or {}
    if not cl.get("summary"):
        return (f"No clock64 breakdown in {rep['_file']}: that run timed "
                f"{cl.get('label', 'no variant')} without TIMING records.")
    return Table(clock_rows(cl["summary"]), f"clock64 phases of {cl['label']} — {results.sweep_evidence(rep)}")


# ---- live on an sm_90 GPU ----------------------------------------------------------------------------

def verification_table(shapes=("small", "tail")) -> Table:
    """On an sm_90 GPU: every stage verified now on the check shapes (NaN-poisoned output);
    elsewhere: the verification column of the newest committed sweep."""
    if not device.can_run(ARCH):
        return recorded_variants_table(load_sweep())
    rows = []
    when = f"measured ({device.current().name}, {clock.today()})"
    for p in stages.family_stages("sm90"):
        s = Stage(p)
        row = {"stage": s.name}
        for name in shapes:
            try:
                r = s.run(name, seed=3, time=False)
                row[name] = "ok" if r["ok"] else f"WRONG ({r['verify'].n_bad} bad, {r['verify'].n_nan} NaN)"
            except Exception as e:  # a fault kills the context: say so and stop
                row[name] = type(e).__name__
                rows.append(row)
                return Table(rows, f"verification — {when}; stopped at the first fault")
        rows.append(row)
    return Table(rows, f"verification — {when}")


def live_comparison(stage: str | None = None, defines: dict | None = None, iters: int = 20) -> Table:
    """On an sm_90 GPU: verify and time our stage on the full problem, and cuBLAS beside it (measured now)."""
    s = Stage(stage or BEST[0], defines if stage else BEST[1])
    prob = s.problem("full")
    copy = bench.copy_bandwidth_gb_s()
    t = s.inputs(prob)
    ref = s.kind.reference(prob, t)
    ours = s.run(prob, inputs=t, ref=ref, time=Timed(iters=iters))
    base = baselines.rows(prob, t, include=[n for n in baselines.names() if n != "torch_compile"], ref=ref, iters=iters)
    rows = bench.compare_rows({**ours, "stage": s.label}, base, copy["gbps"], prob)
    return _comparison_table(rows, f"measured ({device.current().name}, {clock.today()}) — "
                                   f"verified: {ours['ok']}")


def live_clock(stage: str | None = None, defines: dict | None = None) -> Table:
    """On an sm_90 GPU: the clock64 phases of a TIMING build on the 'medium' problem (measured now)."""
    s = Stage(stage or BEST[0], defines if stage else BEST[1])
    tm = s.run_timing("medium", seed=5)
    summ = {ph: {"avg": r["avg"], "spread": r["spread"], "warps": {w: st["avg"] for w, st in r["warps"].items()}}
            for ph, r in tm.summary().items()}
    return Table(clock_rows(summ), f"clock64 phases of {s.label} — measured ({device.current().name}, "
                                   f"{clock.today()}), 'medium' problem")


def comparison():
    """Ours against cuBLAS: measured now on an sm_90 GPU, else the newest committed sweep's table."""
    return live_comparison() if device.can_run(ARCH) else recorded_comparison_table(load_sweep())


def clock():
    """The clock64 breakdown of the best stage: measured now on an sm_90 GPU, else the committed one."""
    return live_clock() if device.can_run(ARCH) else recorded_clock(load_sweep())


# ---- the widget ---------------------------------------------------------------------------------------

# The options: stages, and for 01 the number of consumer warpgroups.
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


def variant_row(key: str, defines: dict, rep: dict | None = None, live_problem=None) -> dict:
    """Compiled facts of one variant, its time in the committed sweep `rep` (if it ran there), and
    with live_problem (on an sm_90 GPU) a verification and timing run now."""
    s = sm90(key, defines)
    f = stage_facts(s)
    row = {"variant": s.label, "tile": f["tile"], "consumers": f["consumers"], "threads": f["threads"],
           "regs": f["registers"], "consumer regs": f["consumer_regs"], "smem (KiB)": f["smem"] // 1024,
           "stages": f["stages"], "QGMMA": f["QGMMA"]}
    if rep:
        hit = next((r for r in rep.get("variants", []) if r["label"] == row["variant"]), None)
        if hit is not None:
            row["measured ms"] = round(hit["median_ms"], 4) if hit.get("median_ms") else "failed"
    if live_problem is not None:
        res = s.run(live_problem, time=Timed(iters=10))
        row["live ms"] = round(res["ms"], 4) if res.get("ms") else "NOT VERIFIED"
    return row


def stage_widget(live: bool | None = None, columns=None):
    """A slider over WIDGET_VARIANTS: compiled facts, the committed H100 time, and (on an sm_90 GPU) a
    verified, timed run on the 'medium' problem. The static fallback is the table of all options.
    columns: the ones to show (default all; a column a row lacks is left out)."""
    if live is None:
        live = device.can_run(ARCH)
    # the newest committed sweep that ran every option of the widget (a run at the defaults only does not)
    rep = results.latest_sweep(having=[(sm90(k, d).key, d, None) for _, (k, d) in WIDGET_VARIANTS])
    medium = "medium" if live else None
    rows = [variant_row(k, d, rep) for _, (k, d) in WIDGET_VARIANTS]
    timed = any("measured ms" in r for r in rows)   # name the column's evidence only where it is shown
    caption = (f"stages and consumer warpgroups — {evidence_label(sm90('00').build)}"
               + (f"; 'measured ms' = {results.sweep_evidence(rep)}, full problem" if rep and timed else ""))

    def render(v):
        k, d = v
        row = variant_row(k, d, rep, medium)
        cap = "compiled" + (f"; 'measured ms' = {results.sweep_evidence(rep)}" if rep and "measured ms" in row else "")
        if medium is not None:
            cap += f"; live = measured now on {device.current().name}, 'medium' problem"
        t = Table([row], cap, [c for c in columns if c in row] if columns else None)
        return t if rep is None else [plots.hopper_line(rep, mark=k), t]
    static = Table(rows, caption, [c for c in columns if any(c in r for r in rows)] if columns else None)
    return widgets.sweep(WIDGET_VARIANTS, render, static=static, description="stage", live=live)


# ---- Hopper against Blackwell ---------------------------------------------------------------------

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
     "source": "CUTLASS include/cute/arch/mma_sm90_desc.hpp, mma_sm100_desc.hpp"},
]


def contrast_table(columns=None) -> Table:
    """Hopper vs Blackwell for this GEMM, point by point (facts from the PTX ISA and CUTLASS); columns: the ones
    to show, default all."""
    return Table(CONTRAST, "The same kernel on two architectures", descriptive=True, columns=columns)


# ---- pelib.measure.hopper_perf's committed runs (results/<date>-<chip>/hopper-perf.json) ---------------------------

def perf_files() -> list:
    """The committed pelib.measure.hopper_perf runs, oldest first."""
    return results.files("hopper-perf.json")


def perf_run(chip: str) -> dict:
    """The newest committed pelib.measure.hopper_perf run on `chip` ('h100' or 'h200'), with its path under '_file'."""
    files = [f for f in perf_files() if results.chip(f.parent) == chip]
    if not files:
        raise FileNotFoundError(f"no results/*-{chip}/hopper-perf.json: run `python -m pelib.measure.hopper_perf` "
                                f"on an {chip.upper()} and commit its output")
    rep = results.load(files[-1])
    rep["_file"] = f"results/{files[-1].parent.name}/{files[-1].name}"
    return rep


def clock_floor_table(chips=("h100", "h200")) -> Table:
    """The floors of the full problem that name their clock (pelib.sol.clock_table), with each chip's committed
    measurements: the launch clock of our stage 06 in the newest pelib.measure.energy limiter run (per-CTA clock64 over
    globaltimer of each timed launch, median over its bursts on random inputs) and that run's copy bandwidth;
    without such a run, the in-kernel clock of the hopper_perf TIMING run (clock64 cycles over the run's
    elapsed time) and that run's copy bandwidth."""
    gpu = {"h100": "H100 SXM", "h200": "H200"}
    measured, src = {}, []
    for chip in chips:
        lim = energy_run(chip)
        ours = next((r for r in (lim or {}).get("summary", []) if r.get("entry") == "06"
                     and r.get("launch clock (GHz)")), None)
        if ours:
            when = f"{lim['env']['device']}, {str(lim['env']['date'])[:10]}"
            measured[gpu[chip]] = {
                "clock_ghz": ours["launch clock (GHz)"],
                "clock_what": f"our kernel's launch clock: per-CTA clock64 over globaltimer, median over its "
                              f"timed bursts (measured, {when})",
                "copy_tb_s": lim["copy"]["gbps"] / 1e3, "copy_what": f"device-to-device copy (measured, {when})"}
            src.append(lim["_file"])
            continue
        rep = perf_run(chip)
        fl = rep["floors"]
        when = f"{rep['env']['device']}, {str(rep['env']['date'])[:10]}"
        measured[gpu[chip]] = {
            "clock_ghz": fl["clock_sources_ghz"]["ours_clock64"],
            "clock_what": f"our kernel's in-kernel clock: clock64 over the TIMING run's time (measured, {when})",
            "copy_tb_s": fl["copy_gbps"] / 1e3, "copy_what": f"device-to-device copy (measured, {when})"}
        src.append(rep["_file"])
    return sol.clock_table(problems.patch_embed("siglip2"), [sol.GPUS[0]] + [gpu[c] for c in chips], measured,
                           evidence="measured inputs: " + ", ".join(src))


# ---- the limiter tests and the sub-stage bench (pelib.measure.energy) -----------------------------------------

def energy_run(chip: str, mode: str = "limiter", root=None) -> dict | None:
    """The newest committed `python -m pelib.measure.energy <mode>` run on `chip` ('h100' or 'h200'), with its path
    under '_file'; None when there is none yet."""
    files = [f for f in results.files(f"energy-{mode}.json", root) if results.chip(f.parent) == chip]
    if not files:
        return None
    rep = results.load(files[-1])
    rep["_file"] = f"results/{files[-1].parent.name}/{files[-1].name}"
    return rep


ENERGY_COLUMNS = (("burst ms (random)", "ms", 4), ("launch clock (GHz)", "launch GHz", 3),
                  ("clock after (GHz)", "GHz after", 3), ("burst ms (zeros)", "ms, zeros", 4),
                  ("sustained ms (random)", "sustained ms", 4), ("J/launch (random)", "J", 3),
                  ("J/launch (zeros)", "J, zeros", 3), ("power W", "W", 0), ("NVML SM MHz", "NVML MHz", 0))


def energy_table(chips=("h100", "h200"), mode: str = "limiter", root=None, columns=None) -> Table:
    """Per chip and entry of the newest pelib.measure.energy run (measured): the burst time (make bench's regime, random
    inputs) with the launch's own clock and the clock right after it, the same on zeros; the sustained time,
    joules per launch (NVML's energy counter), power and NVML's SM clock; per 64 x 256 tile, the L2 and DRAM
    bytes and warp instructions Nsight Compute counted and a consumer warp's compiled SASS."""
    rows, notes = [], []
    for chip in chips:
        rep = energy_run(chip, mode, root)
        if rep is None:
            notes.append(f"{chip.upper()}: not yet measured (python -m pelib.measure.energy {mode} on an {chip.upper()})")
            continue
        ncu = {r["entry"]: r for r in rep.get("ncu_per_tile", [])}
        for r in rep.get("summary", []):
            row = {"chip": chip_label(rep["env"]["device"]), "entry": r["entry"]}
            for key, col, nd in ENERGY_COLUMNS:
                v = r.get(key)
                row[col] = round(v, nd) if isinstance(v, (int, float)) else "—"
            n = ncu.get(r["entry"], {})
            row["L2 KB/tile"] = round(n["l2_B_per_tile"] / 1e3) if n.get("l2_B_per_tile") else "—"
            dram = (n.get("dram_read_B_per_tile") or 0) + (n.get("dram_write_B_per_tile") or 0)
            row["DRAM KB/tile"] = round(dram / 1e3) if dram else "—"
            row["warp inst/tile"] = round(n["warp_inst_per_tile"]) if n.get("warp_inst_per_tile") else "—"
            sass = ((rep.get("facts") or {}).get(r["entry"]) or {}).get("sass_consumer_warp_per_tile") or {}
            row["SASS/warp/tile"] = sass.get("total", "—")
            rows.append(row)
        notes.append(f"{chip.upper()}: {rep['_file']} ({rep['evidence']})")
    return Table(rows, f"Time, clock and energy per launch — measured by pelib.measure.energy {mode} (ours and cuBLAS "
                       "interleaved; bursts after an idle gap, L2 flushed, median of 20; sustained windows of "
                       "back-to-back launches); bytes and instructions per 64 x 256 tile from Nsight Compute "
                       "(measured) and the SASS of one consumer warp (compiled)", notes=notes).only(columns)


# Our stage in the tables: 06 with the unbounded wait build. Stage 10 was 0.004 ms faster on the H100
# (inside that run's spread) and 0.025 ms slower on the H200, so 06 stays the best stage.
PERF_BEST = ("06", {"PE_UNBOUNDED_WAIT": 1})


def _ours(rep: dict) -> dict:
    """Our row of a run: PERF_BEST, verified, with the unbounded wait build (what a production kernel ships)."""
    ok = [v for v in rep.get("variants", []) if v.get("median_ms") and v.get("ok") and "[again]" not in v["label"]
          and v["key"] == PERF_BEST[0] and v["defines"] == PERF_BEST[1]]
    if not ok:
        raise LookupError(f"{rep.get('_file')}: no verified timing of stage {PERF_BEST[0]} {PERF_BEST[1]}")
    return ok[0]


def chip_table(chips=("h100", "h200"), columns=None):
    """Both chips, each against its own floors: ours, every baseline (form, precision), the floors (columns: the
    ones to show, default all)."""
    rows = []
    for chip in chips:
        rep = perf_run(chip)
        fl = rep["floors"]
        ours = _ours(rep)
        name = chip_label(rep["env"]["device"])
        rows.append({"chip": name, "what": f"ours: {ours['label']}", "ms": round(ours["median_ms"], 3),
                     "of floor": f"{100 * fl['floor_ms'] / ours['median_ms']:.0f}%", "ours against it": "",
                     "max |err|": ours["precision"]["max_abs"],
                     "mismatch": f"{100 * ours['precision']['mismatch_frac']:.1f}%"})
        for b in rep.get("baselines", []):
            if b.get("status") != "measured":
                rows.append({"chip": name, "what": b["name"], "note": f"{b.get('status')}: {b.get('reason', '')}"[:90]})
                continue
            pr = b.get("precision", {})
            rows.append({"chip": name, "what": b["name"], "ms": round(b["median_ms"], 3),
                         "of floor": f"{100 * fl['floor_ms'] / b['median_ms']:.0f}%",
                         "ours against it": ours_against(b["median_ms"] / ours["median_ms"]),
                         "max |err|": pr.get("max_abs"), "mismatch": f"{100 * pr.get('mismatch_frac', 0):.1f}%",
                         "note": b["form"][:90]})
        rows.append({"chip": name, "what": "floor: memory (min bytes / copy)", "ms": round(fl["memory_ms"], 3),
                     "note": f"{fl['min_bytes'] / 1e9:.2f} GB at {fl['copy_gbps']:.0f} GB/s measured copy"})
        rows.append({"chip": name, "what": "floor: FP8 tensor at the SM clock", "ms": round(fl["tensor_ms"], 3),
                     "note": f"{fl['fp8_peak_tflops']:.0f} TFLOPS = 8192 FLOP/clk/SM x 132 x {fl['sm_clock_ghz']:.2f} GHz "
                             "(Nsight Compute, our kernel)"})
    return Table(rows, "The Hopper twin on both chips — measured (" + ", ".join(
        f"{perf_run(c)['env']['device']}, {perf_run(c)['env']['date'][:10]}" for c in chips) + "); precision: largest "
        "|out - bf16(FP64 reference)| and share of outputs not correctly rounded, on 2,048 fixed rows",
        columns or ["chip", "what", "ms", "of floor", "ours against it", "max |err|", "mismatch", "note"])


def stages_table(chips=("h100", "h200")):
    """Every variant tried in the committed runs, per chip (ms, the repeat, the wait build)."""
    reps = {c: perf_run(c) for c in chips}
    labels = [v["label"] for v in reps[chips[0]]["variants"]]
    for c in chips[1:]:
        labels += [v["label"] for v in reps[c]["variants"] if v["label"] not in labels]
    labels += [p["label"] for p in reps[chips[0]].get("probes", [])]
    rows = []
    for lab in labels:
        row = {"variant": lab}
        for c in chips:
            hit = next((v for v in reps[c].get("variants", []) + reps[c].get("probes", []) if v["label"] == lab), None)
            row[c.upper() + " ms"] = round(hit["median_ms"], 3) if hit and hit.get("median_ms") else ""
            row[c.upper() + " repeat"] = round(hit["repeat_median_ms"], 3) if hit and hit.get("repeat_median_ms") else ""
        rows.append(row)
    return Table(rows, "stages, variants and probes — measured (" + ", ".join(
        f"{reps[c]['env']['device']}, {reps[c]['env']['date'][:10]}" for c in chips) + "); the probes are "
        "06 with a part of its work removed (wrong output, timed only)")


def limiter_table(chips=("h100", "h200")):
    """The numbers behind the limiter: clocks and power, clock64 cycles per tile, stall samples."""
    rows = []
    for c in chips:
        rep = perf_run(c)
        cs = rep["floors"]["clock_sources_ghz"]
        ld = rep.get("load") or {}
        cl = next((x for x in rep.get("clocks", []) if x.get("cta")), {})
        ph = cl.get("phases", {})
        rows.append({"chip": chip_label(rep["env"]["device"]),
                     "SM GHz (timed / clock64 / sustained)": f"{cs.get('ours_ncu', 0):.2f} / {cs.get('ours_clock64', 0):.2f} / "
                                                             f"{cs.get('ours_sustained_smi', 0):.2f}",
                     "power W (of limit)": f"{ld['ours']['power_w'][0]:.0f} ({ld['ours']['power_limit_w'][0]:.0f})"
                     if (ld.get("ours") or {}).get("power_w") else "",
                     "clock-limit reason": ",".join(ld.get("ours", {}).get("limit_reasons", [])),
                     "cycles/tile per CTA": round(cl.get("cta", {}).get("cycles_per_tile_avg", 0)),
                     "tensor busy": f"{100 * cl.get('cta', {}).get('tensor_busy', 0):.0f}%",
                     "tma_wait (min)": f"{ph.get('tma_wait', {}).get('avg', 0):.0f} ({ph.get('tma_wait', {}).get('min', 0):.0f})",
                     "kloop": round(ph.get("kloop", {}).get("avg", 0)),
                     "epilogue": round(ph.get("epi_phase1", {}).get("avg", 0)),
                     "clock64 of": cl.get("label", "").replace("clock ", "")})
    return Table(rows, "what limits the twin — measured: SM clock three ways (Nsight Compute in a timed launch, "
                       "clock64 cycles over a TIMING run's time, nvidia-smi under 2 s of back-to-back launches), "
                       "power and nvidia-smi's clock-limit reason (0x4 = software power cap), clock64 cycles per "
                       "tile over the whole run (3,072 = one tile's wgmma at the FP8 rate)")
