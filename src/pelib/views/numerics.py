"""The tensor core's arithmetic in the book: the rule, the probe that pinned it, the proofs, one block drawn.

    numerics.rule_table()          the block-FMA rule, step by step, with the probe classes that pinned each step
    numerics.probe_table()         each model's mismatches over the committed probe outputs (measured)
    numerics.random_proof_table()  each committed GPU run: random inputs and full problems, against the simulator
    numerics.stage_proof_table()   every sm90 stage on random inputs, per device: measured, and simulated beside it
    numerics.b200_prediction_table()  Blackwell's MMA arithmetic: modelled (MMA-Sim's rule), and the probe that settles it
    numerics.window_figure()       the alignment window on one real k32 block of the committed probe
    numerics.predicted_fraction()  how many outputs the rule leaves off the correctly rounded value (modelled)
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..numerics import blockfma as F
from .. import evidence, results
from ..sim import proof as sim_proof
from ..measure import tcprobe, tcprobe_sm100
from ..facts import Table
from ..paths import ROOT

PROBE_DIR = ROOT / "results" / "2026-11-27-h100"   # the H100 probe run that pinned the rule
MODEL = F.H100TC_MATLAB

# Each step of the rule, and the probe classes (pelib.numerics.tcvectors) whose directed vectors decide it: under a
# competing hypothesis those classes' outputs differ (pelib.measure.tcprobe's per-class mismatches show by how much).
STEPS = [
    ("products exact, subnormal inputs kept", "single_product, subnormal_mix, e5m2_single_product"),
    ("window R = largest exponent SUM e_a + e_b (a product in [2, 4) does not move it; a subnormal counts as "
     "emin) over the nonzero products and D", "sig_ge2, subnormal_mix, d_vs_product, two_products"),
    ("one window for all 32 products and D (no groups of 4, 8 or 16)", "grouping, cancellation, many_small"),
    ("13 fraction bits below R; each term's magnitude cut toward zero (sign and magnitude, no borrow, no "
     "sticky bit)", "two_products, many_small, cancellation, d_passthrough"),
    ("the cut terms summed exactly", "many_small, carry_out, random_spread"),
    ("the sum cut again to 13 fraction bits after its own leading bit, toward zero (FP32 keeps 24 bits, "
     "the tensor core's result 14)", "carry_out, d_passthrough"),
    ("an exact zero is +0; NaN in (or Inf - Inf) gives 0x7FFFFFFF, Inf in gives Inf", "zero_signs, specials, "
     "e5m2_specials"),
    ("only the FP32 result carries from one k32 instruction to the next", "chain2..chain8, chain4_wait_each, "
     "chain_cancel"),
]


def probe_summary(path: Path | None = None) -> dict:
    return results.load(Path(path or PROBE_DIR / tcprobe.SUMMARY), named=False)   # names a broken file


def _measured(doc: dict) -> str:
    return evidence.label("measured", f"{doc['device']}, {str(doc['date'])[:10]}")


def rule_table(path: Path | None = None) -> Table:
    doc = probe_summary(path)
    rows = []
    for step, classes in STEPS:
        names = [c.strip() for c in classes.replace("chain2..chain8", "chain2, chain4, chain8").split(",")]
        outs = sum(doc["classes"][n]["outputs"] for n in names if n in doc["classes"])
        rows.append({"step of the rule": step, "pinned by the probe classes": classes,
                     "their outputs": outs, f"{MODEL.name} mismatches": sum(
                         doc["classes"][n]["mismatch"][MODEL.name]["bits"] for n in names if n in doc["classes"])})
    return Table(rows, f"The Hopper wgmma FP8 block FMA, {_measured(doc)}: {doc['outputs']:,} probe outputs "
                       f"(results/2026-11-27-h100/tcprobe.json)")


def probe_table() -> Table:
    """Each model's mismatching outputs in every committed probe run (results/*/tcprobe.json: H100, H200)."""
    docs = [results.load(p, named=False) for p in results.files(tcprobe.SUMMARY)]   # names a broken file
    rows = []
    for name, m in docs[0]["models"].items():
        row = {"model": name, "where it comes from": getattr(F.PRESETS.get(name), "source", "") or m.get("source", "")}
        for doc in docs:
            row[f"differ, {doc['device']}"] = doc["mismatch_total"][name]["values"]
        rows.append(row)
    runs = "; ".join(f"{_measured(d)}: {d['outputs']:,} outputs" for d in docs)
    return Table(rows, f"Each model against the tensor core's own bits, {runs}; every vector class of "
                       "pelib.numerics.tcvectors (directed, 1M+ random, chains of 2-8 instructions, N = 128/192/256, E5M2)")


def proof_runs(root: Path | None = None) -> list[tuple[Path, dict]]:
    """Every committed GPU run of `python -m pelib.measure.numerics_proof` (results/*/numerics.json), oldest first."""
    from ..measure import numerics_proof   # its summary's file name (it loads the launch path)
    return [(p, results.load(p, named=False)) for p in results.files(numerics_proof.SUMMARY, root)]


def _rel(path: Path, root: Path | None) -> str:
    """The file as the repository names it (results/<run>/numerics.json)."""
    return str(path.relative_to((Path(root) if root else ROOT / "results").parent))


def _chip(path: Path) -> str:
    return results.chip(path.parent).upper()


def simulated_differ(path: Path, doc: dict, sims: dict) -> dict:
    """{job name: outputs where the simulator's bits differ from the committed GPU bits}; None for a job the
    simulator did not finish."""
    out = {}
    for name in doc["random"]["jobs"]:
        rec, bits = sims[name]
        out[name] = None if bits is None else int((bits != sim_proof.random_bits(doc, path, name).reshape(-1)).sum())
    return out


def _simulated(runs, simulate: bool, sims: dict | None = None) -> dict:
    """The simulator's (record, bits) of every job any committed run holds (cached by pelib.sim.proof); `sims`
    given: those."""
    if sims is not None:
        return sims
    if not simulate or not runs:
        return {}
    names = dict.fromkeys(n for _, d in runs for n in d["random"]["jobs"])
    todo = [{"job": n.split(":", 1)[0], "stage": n.split(":", 1)[1]} for n in names]
    return sim_proof.simulate_random_all(todo)


def _sum_or_dash(xs):
    xs = list(xs)
    return "—" if not xs or any(x is None for x in xs) else sum(xs)


def random_proof_table(root: Path | None = None, simulate: bool = True, sims: dict | None = None,
                       columns=None) -> Table:
    """One row per committed GPU run of `python -m pelib.measure.numerics_proof` (measured): its random-input jobs, how
    many outputs the simulator prints differently (simulated, every job run here), and the full outputs the
    run compared on the device with the emulation kernel of the rule."""
    runs = proof_runs(root)
    sims = _simulated(runs, simulate, sims)
    rows = []
    for p, doc in runs:
        jobs = doc["random"]["jobs"].values()
        em = doc["emulator"].values()
        row = {"evidence": _measured(doc), "file": _rel(p, root),
               "sm90 stages": sum(r["job"] == "random" for r in jobs),
               "with NaN, Inf": sum(r["job"] == "specials" for r in jobs),
               "outputs": sum(r["outcome"].get("outputs", 0) for r in jobs),
               "off the correctly rounded value": sum(r["outcome"].get("differ_from_reference", 0) for r in jobs)}
        if sims:
            row["simulated ≠ measured"] = _sum_or_dash(simulated_differ(p, doc, sims).values())
        row["full outputs compared on the device"] = sum(r["stage_vs_emulator"]["outputs"] for r in em)
        row["stage ≠ emulation kernel"] = sum(r["stage_vs_emulator"]["differ"] for r in em)
        row["emulation kernel ≠ pelib.numerics.blockfma"] = sum(r["emulator_vs_cpu_model"]["differ"] for r in em
                                                       if "emulator_vs_cpu_model" in r)
        rows.append(row)
    notes = [] if rows else [
        "no GPU run committed yet: `PYTHONPATH=src python3 -m pelib.measure.numerics_proof --out DIR` on an H100 / H200 "
        "writes DIR/numerics.json; tests/test_sim_random_proof.py then compares every stage's simulated bytes with it"]
    sim_kind = "; simulated ≠ measured: " + evidence.label("simulated", "pelib.sim, every job here") if sims else ""
    return Table(rows, "The tensor core's rule on the stages themselves: every sm90 stage on random inputs and "
                       f"full problems on the device ({', '.join(r['evidence'] for r in rows) or 'measured'}"
                       f"{sim_kind}); tests/test_sim_random_proof.py asserts the same", notes=notes,
                 columns=list(columns) if columns else None)


def stage_proof_table(root: Path | None = None, simulate: bool = True, sims: dict | None = None) -> Table:
    """Every random-input job of the committed GPU runs, one row per stage (measured: outputs, the tensor
    core's distance from the correctly rounded value, NaN and Inf written; simulated: outputs whose bits the
    simulator prints differently, per device)."""
    runs = proof_runs(root)
    sims = _simulated(runs, simulate, sims)
    diffs = {p: simulated_differ(p, d, sims) for p, d in runs} if sims else {}
    rows = {}
    for p, doc in runs:
        chip = _chip(p)
        for name, r in doc["random"]["jobs"].items():
            o = r["outcome"]
            bits = sim_proof.random_bits(doc, p, name)
            row = rows.setdefault(name, {"stage": r["stage"].split("/", 1)[1],
                                         "inputs": "random" if r["job"] == "random" else "random, NaN and Inf planted",
                                         "outputs": o.get("outputs", "—")})
            row[f"off the correctly rounded value, {chip}"] = o.get("differ_from_reference", "—")
            row[f"NaN / Inf written, {chip}"] = f"{o.get('nan_outputs', 0)} / {int(((bits & 0x7FFF) == 0x7F80).sum())}"
            if sims:
                d = diffs[p][name]
                row[f"simulated ≠ {chip}"] = "—" if d is None else d
    kinds = "; ".join(_measured(d) for _, d in runs) or "measured"
    sim_kind = f"; simulated ≠: {evidence.label('simulated', 'pelib.sim, the same inputs')}" if sims else ""
    return Table(list(rows.values()), f"Each sm90 stage on the `sim` problem with the project's random inputs, "
                                      f"seed 0 ({kinds}{sim_kind})",
                 notes=[] if rows else ["no GPU run committed yet (python -m pelib.measure.numerics_proof)"])


def b200_prediction_table(columns=None) -> Table:
    """Blackwell's tcgen05.mma arithmetic as the simulator computes it: modelled (MMA-Sim's hardware-validated
    rule, not yet run on a B200 here), each parameter of pelib.numerics.blockfma, and the models the B200 probe scores
    beside it."""
    rows = []
    for kind, model, alts in (("kind::f8f6f4 (FP8)", F.B200_F8F6F4, tcprobe_sm100.F8_MODELS),
                              ("kind::mxf4nvf4 (NVFP4)", F.B200_MXF4NVF4, tcprobe_sm100.MXF4_MODELS)):
        grouped = model.group != model.k
        rows.append({"tcgen05.mma": kind, "modelled rule": model.name,
                     "fraction bits below R": model.frac_bits2 or model.frac_bits if grouped else model.frac_bits,
                     "products per alignment": f"{model.k // model.group} exact group sums of {model.group}, and D"
                     if grouped else model.k,
                     "terms cut": model.trunc.replace("_", " "),
                     "result": f"FP32, {'toward zero' if model.out_round == 'rz' else 'to nearest'}",
                     "from": model.source,
                     "also scored by the probe": ", ".join(m.name for m in alts if m is not model)})
    return Table(rows, f"{evidence.label('modelled', 'MMA-Sim, not yet run on a B200 here')}: the rule the simulator runs for "
                       f"Blackwell's MMA; `python -m pelib.measure.tcprobe_sm100 collect --out DIR` on a B200 settles it "
                       "(tcprobe_sm100.json: mismatches per model and vector class)",
                 columns=list(columns) if columns else None)


def predicted_fraction(rows: int = 192) -> Table:
    """The share of BF16 outputs the rule leaves off the correctly rounded value on rows of the `medium` problem
    (K = 768, the project's inputs), beside the measured share of hopper-perf.json's precision column."""
    from ..measure import numerics_proof as N   # the C++ model only where a cell asks for it
    from .. import problems, reference
    import torch
    prob = problems.patch_embed("medium")
    t = prob.make_inputs(seed=0)
    idx = np.linspace(0, prob.m - 1, rows).astype(np.int64)
    ref = reference.patch_embed_reference(t["a"][torch.from_numpy(idx)], t["b"],
                                          t["comb"][torch.from_numpy(idx % prob.positions)])
    want = ref.view(torch.int16).numpy().view(np.uint16)
    out = []
    for m in (MODEL, F.EXACT_SUM):
        got = N.model_rows(t, prob, idx, False, model=m, cxx=True)
        out.append({"accumulation": m.name, "outputs": int(got.size),
                    "off the correctly rounded BF16": f"{(got != want).mean():.2%}"})
    return Table(out, f"{evidence.label('modelled', f'pelib.numerics.blockfma on {rows} rows of medium, seed 0')}: the "
                      "rule predicts the share of outputs one BF16 ulp off; the exact sum (CUTLASS 2xAcc-like) "
                      "none")


# ---- one k32 block, drawn ----------------------------------------------------------------------------------

def block_terms(cls: str = "random_spread", tile: int = 0, m: int | None = None, n: int | None = None,
                path: Path | None = None) -> dict:
    """One output of a committed probe class as its block's terms: each product's value and window exponent,
    D, R, the grid, the GPU's bits and the exact sum. m, n = None: the output of the tile whose block drops
    bits of the most terms, among those where the tensor core's bits differ from the exact sum."""
    data = tcprobe.load(path or PROBE_DIR)[cls]
    if data["a"].shape[-1] != 32:
        raise ValueError(f"{cls}: {data['a'].shape[-1] // 32} instructions per output; pick a one-block class")
    if m is None:
        m = int(np.argmax([_most_dropped(data, tile, r)[1] for r in range(data["a"].shape[1])]))
    a, b, d, out = data["a"][tile, m], data["b"][tile], data["d"][tile, m], data["out"][tile, m]
    exact = F.EXACT_SUM(a[None, :], b, d)
    if n is None:
        n = _most_dropped(data, tile, m)[0]
    pv = F.values(a) * F.values(b[n])
    pe = F.window_exponents(a, "e4m3") + F.window_exponents(b[n], "e4m3")
    dv = float(F.fp32_values(np.uint32(d[n])))
    nz = pv != 0
    R = int(max(pe[nz].max() if nz.any() else -1000, F.decode_fp32(np.uint32(d[n])).expo if dv else -1000))
    R = max(R, MODEL.min_exp)
    return {"class": cls, "tile": tile, "m": m, "n": n, "products": pv, "windows": pe, "d": dv, "R": R,
            "grid": R - MODEL.frac_bits, "gpu": float(F.fp32_values(out[n])), "exact": float(F.fp32_values(exact[n])),
            "model": float(F.fp32_values(MODEL(a[None, :], b[n:n + 1], d[n:n + 1])[0]))}


def _most_dropped(data: dict, tile: int, m: int) -> tuple[int, int]:
    """(column, terms) of row m: the output whose block drops bits of the most products (D = 0 there), among
    those where the tensor core's bits differ from the exact sum."""
    a, b, d, out = data["a"][tile, m], data["b"][tile], data["d"][tile, m], data["out"][tile, m]
    pe = F.window_exponents(a, "e4m3")[None, :] + F.window_exponents(b, "e4m3")
    ta, tb = F.decode_fp8(a), F.decode_fp8(b)
    mag = ta.mag[None, :] * tb.mag                                        # integer significand products
    live = mag != 0
    R = np.where(live, pe, -1000).max(1)
    low = ta.lsb[None, :] + tb.lsb + np.log2(np.where(live, mag & -mag, 1)).astype(np.int64)   # last set bit
    dropped = (live & (low < (R - MODEL.frac_bits)[:, None])).sum(1)
    score = np.where((F.EXACT_SUM(a[None, :], b, d) != out) & (d == 0), dropped, -1)
    n = int(np.argmax(score))
    return n, int(score[n])


def window_figure(cls: str = "random_spread", tile: int = 0, m: int | None = None, n: int | None = None,
                  path: Path | None = None):
    """Every term of one real k32 block as the bits it spans (leading bit down to its last), against the
    window [R - 13, R]: what survives (inside) and what the cut drops (below the grid)."""
    doc = probe_summary(path)
    t = block_terms(cls, tile, m, n, path)
    cut_sum = sum(np.trunc(v / 2.0 ** t["grid"]) for v in [*t["products"], t["d"]]) * 2.0 ** t["grid"]
    terms = [(f"a{k} b{k}", v) for k, v in enumerate(t["products"])] + [("D", t["d"]), ("sum", cut_sum)]
    fig, ax = plt.subplots(figsize=(7.2, 6.6))
    grid, R = t["grid"], t["R"]
    for i, (name, v) in enumerate(terms):
        if name == "sum":   # the exact sum of the cut terms, cut again after its own leading bit
            grid_i = int(np.floor(np.log2(abs(v)))) - MODEL.out_bits if v else grid
        else:
            grid_i = grid
        if v == 0:
            ax.text(R + 1.6, i, "0", va="center", fontsize=6, color="0.5")
            continue
        top = int(np.floor(np.log2(abs(v))))
        mant, e = np.frexp(abs(v))
        bits = {"D": 24, "sum": 40}.get(name, 8)
        low = top - bits + 1
        while low < top and (abs(v) / 2.0 ** low) % 2 == 0:   # the term's last set bit
            low += 1
        kept_lo = max(low, grid_i)
        color = "#55a868" if name == "sum" else "#4c72b0" if v > 0 else "#dd8452"
        if top >= grid_i:
            ax.barh(i, top - kept_lo + 1, left=kept_lo - 0.5, color=color, height=0.7)
        if low < grid_i:
            ax.barh(i, min(top, grid_i - 1) - low + 1, left=low - 0.5, color="0.8", height=0.7, hatch="///")
    ax.axvline(grid - 0.5, color="k", lw=0.8)
    ax.axvline(R + 0.5, color="k", lw=0.8, ls=":")
    ax.set_yticks(range(len(terms)), [n for n, _ in terms], fontsize=5)
    ax.invert_yaxis()
    ax.set_xlabel("bit position (power of two)", fontsize=8)
    ax.text(grid - 0.3, -1.6, f"grid 2^{grid}\n(R - 13)", fontsize=6)
    ax.text(R + 0.7, -1.6, f"R = {R}\n(largest e_a + e_b)", fontsize=6)
    ax.set_title(f"One k32 block of the probe, {_measured(doc)}\n{t['class']} tile {t['tile']}, output "
                 f"({t['m']}, {t['n']}), results/2026-11-27-h100/tcprobe-random.npz. Blue/orange: bits kept of\n"
                 f"positive/negative terms; hatched: bits the cut drops; green: their sum, cut again to 13 "
                 f"fraction bits.\nGPU {t['gpu']!r} = rule {t['model']!r}; exact sum {t['exact']!r}", fontsize=7)
    fig.tight_layout()
    return fig
