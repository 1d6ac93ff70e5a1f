"""The tensor core's arithmetic in the book: the rule, the probe that pinned it, the proofs, one block drawn.

    numerics.rule_table()          the block-FMA rule, step by step, with the probe classes that pinned each step
    numerics.probe_table()         each model's mismatches over the committed probe outputs (measured)
    numerics.random_proof_table()  every sm90 stage on random inputs: the committed GPU bytes against the simulator
    numerics.window_figure()       the alignment window on one real k32 block of the committed probe
    numerics.predicted_fraction()  how many outputs the rule leaves off the correctly rounded value (modelled)
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .. import blockfma as F, evidence, results, tcprobe
from ..facts import Table
from ..paths import ROOT

PROBE_DIR = ROOT / "results" / "2026-11-27-h100"   # the H100 probe run that pinned the rule
MODEL = F.H100TC_MATLAB

# Each step of the rule, and the probe classes (pelib.tcvectors) whose directed vectors decide it: under a
# competing hypothesis those classes' outputs differ (pelib.tcprobe's per-class mismatches show by how much).
STEPS = [
    ("products exact, subnormal inputs kept", "single_product, subnormal_mix, e5m2_single_product"),
    ("window R = largest exponent SUM e_a + e_b (a product in [2, 4) does not move it; a subnormal counts as "
     "emin) over the nonzero products and D", "sig_ge2, subnormal_mix, d_vs_product, two_products"),
    ("one window for all 32 products and D (no groups of 4, 8 or 16)", "grouping, d_vs_product"),
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
    return json.loads(Path(path or PROBE_DIR / tcprobe.SUMMARY).read_text())


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
    docs = [json.loads(p.read_text()) for p in results.files(tcprobe.SUMMARY)]
    rows = []
    for name, m in docs[0]["models"].items():
        row = {"model": name, "where it comes from": getattr(F.PRESETS.get(name), "source", "") or m.get("source", "")}
        for doc in docs:
            row[f"differ, {doc['device']}"] = doc["mismatch_total"][name]["values"]
        rows.append(row)
    runs = "; ".join(f"{_measured(d)}: {d['outputs']:,} outputs" for d in docs)
    return Table(rows, f"Each model against the tensor core's own bits, {runs}; every vector class of "
                       "pelib.tcvectors (directed, 1M+ random, chains of 2-8 instructions, N = 128/192/256, E5M2)")


def random_proof_table(simulate: bool = True) -> Table:
    """One row per committed GPU run of `python -m pelib.numerics_proof` (measured), and the simulator's own
    stage 06 on the same inputs against the rule on the global operands (simulated)."""
    rows, notes = [], []
    for p in results.files("numerics.json"):
        doc = json.loads(p.read_text())
        jobs = doc["random"]["jobs"]
        done = [r for r in jobs.values() if r["outcome"]["kind"] == "finished"]
        rand = [r for r in done if r["job"] == "random"]
        s = doc["summary"]
        full = {k: v for k, v in s["stage_vs_emulator"].items() if k.endswith(":siglip2")}
        rows.append({"evidence": _measured(doc), "file": str(p.relative_to(ROOT)),
                     "stages x random inputs": len(rand), "outputs": sum(r["outcome"]["outputs"] for r in rand),
                     "off the correctly rounded value": sum(r["outcome"]["differ_from_reference"] for r in rand),
                     "siglip2 outputs compared on the device": 712_900_608 * len(full),
                     "siglip2 stage != emulation kernel": sum(full.values())})
    if not rows:
        notes.append("no GPU run committed yet: `PYTHONPATH=src python3 -m pelib.numerics_proof --out DIR` on an "
                     "H100 / H200 writes DIR/numerics.json; tests/test_sim_random_proof.py then compares every "
                     "stage's simulated bytes with it")
    if simulate:
        from .. import numerics_proof as N, sim_proof as P   # the simulator only where a cell asks for it
        r = P.run_random({"job": "random", "stage": "sm90/06_permuted_b"}, "sim", None)
        s = P.Stage("sm90/06_permuted_b")
        prob = s.problem(P.PROBLEM)
        model = N.model_rows(s.inputs(prob, P.SEED, "sim"), prob, np.arange(prob.m), False, cxx=True)
        rows.append({"evidence": evidence.label("simulated", "pelib.sim, sm90/06 on the `sim` problem, seed 0"),
                     "file": "(live)", "stages x random inputs": 1, "outputs": r["outcome"]["outputs"],
                     "off the correctly rounded value": r["outcome"]["differ_from_reference"],
                     "simulated != the rule on the global operands": int(r["outcome"]["sha256"] != P.sha256(model))})
    return Table(rows, "The simulator's data path on random inputs: the committed GPU runs (measured) and the "
                       "simulator live (simulated); tests/test_sim_random_proof.py checks every sm90 stage",
                 notes=notes)


def predicted_fraction(rows: int = 192) -> Table:
    """The share of BF16 outputs the rule leaves off the correctly rounded value on rows of the `medium` problem
    (K = 768, the project's inputs), beside the measured share of hopper-perf.json's precision column."""
    from .. import numerics_proof as N, problems, reference   # the C++ model only where a cell asks for it
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
    return Table(out, f"{evidence.label('modelled', f'pelib.blockfma on {rows} rows of medium, seed 0')}: the "
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
