"""F22's precision gate: the packed-BF16 epilogue add against the FP32-add path, emulated exactly on the CPU.

The two epilogue paths of fp8-megakernel-future-proposals-F21-F28.md, F22, for out = acc + comb:
  current (FP32 add)  out = rn_bf16( rn_fp32(acc + float(comb)) )      FADD, then cvt.rn.bf16x2.f32
  F22 (BF16x2 add)    out = rn_bf16( rn_bf16(acc) + comb )             cvt.rn.bf16x2.f32, then add.rn.bf16x2
acc is the FP32 accumulator the tensor core leaves in TMEM; comb the BF16 bias + positional table.

Exactness. The FP32 path is IEEE binary32 round-to-nearest-even addition followed by RNE to BF16,
exactly what torch computes on the CPU. add.rn.bf16x2 (PTX ISA, add: ".rn mantissa LSB rounds to
nearest even") rounds the exact sum of two BF16 values once. Here it is computed as an FP32 add of the
two BF16 values and an RNE conversion: by Figueroa's double-rounding theorem ("When is double rounding
innocuous?", SIGNUM 1995) a binary op on q-bit operands rounded first to p >= 2q + 2 bits and then to q
bits equals the single rounding; BF16 has q = 8 significand bits and FP32 p = 24 >= 18. The tests
check it against an exact rational reference.

ULP distances are scale-free (both paths commute with multiplication by a power of two as long as
nothing under/overflows), so the absolute error at any output magnitude follows from the ULP
statistics; `f22_precision_gate` reports both the problem's own scale and the card's (~1,728).
All outputs are evidence kind "modelled" (an emulation, not a run).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import torch

from .. import gonogo, problems
from ..facts import Table
from ..gonogo import Fact

EVIDENCE = "modelled"
BF16 = torch.bfloat16
CARD_MAGNITUDE = 1728.0   # the card's "2 ULPs of BF16 at magnitude ~1728"
BF16_MANTISSA = 7         # explicit fraction bits


# ---------------------------------------------------------------------------------------------
# The two rounding paths and BF16 helpers
# ---------------------------------------------------------------------------------------------

def rn_bf16(x: torch.Tensor) -> torch.Tensor:
    """FP32 -> BF16, round to nearest even (cvt.rn.bf16.f32).

    torch's float -> bfloat16 conversion rounds to nearest even (c10/util/BFloat16.h,
    round_to_nearest_even); the tests check it bit for bit against `rn_bf16_bits`.
    """
    if x.dtype != torch.float32:
        raise TypeError(f"rn_bf16 takes float32, got {x.dtype}")
    return x.to(BF16)


def rn_bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """The same rounding by integer arithmetic on the FP32 bits (the reference for `rn_bf16`; finite x)."""
    if not torch.isfinite(x).all():
        raise ValueError("rn_bf16_bits: inputs must be finite")
    b = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16          # RNE on the low 16 bits
    r = torch.where(r >= 0x8000, r - 0x10000, r)       # back to a signed 16-bit pattern
    return r.to(torch.int16).view(BF16)


def fp32_add_path(acc: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """The current epilogue: FP32 add of acc and float(comb), one RNE conversion to BF16."""
    _check_operands(acc, comb)
    return rn_bf16(acc + comb.float())


def bf16x2_add_path(acc: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """F22: acc rounded to BF16 first, then a BF16 add rounded once (add.rn.bf16x2 semantics)."""
    _check_operands(acc, comb)
    a16 = rn_bf16(acc)
    return rn_bf16(a16.float() + comb.float())         # exact-sum-rounded-once (Figueroa, p=24 >= 2*8+2)


def _check_operands(acc, comb):
    if acc.dtype != torch.float32:
        raise TypeError(f"acc must be float32 (the TMEM accumulator), got {acc.dtype}")
    if comb.dtype != BF16:
        raise TypeError(f"comb must be bfloat16 (the bias + positional table), got {comb.dtype}")


def bf16_ulp(x: float) -> float:
    """Spacing of BF16 values in the binade of |x| (x normal)."""
    return 2.0 ** (math.floor(math.log2(abs(x))) - BF16_MANTISSA)


def round_bf16_exact(q: Fraction) -> float:
    """An exact rational rounded to BF16, nearest even: the slow reference the tests use."""
    if q == 0:
        return 0.0
    s = -1 if q < 0 else 1
    q = abs(q)
    e = math.floor(math.log2(q.numerator)) - math.floor(math.log2(q.denominator))
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    step = Fraction(2) ** (e - BF16_MANTISSA)
    n, rem = divmod(q, step)
    n = int(n)
    if rem * 2 > step or (rem * 2 == step and n % 2 == 1):
        n += 1
    return s * float(n * step)


# ---------------------------------------------------------------------------------------------
# Inputs: the patch-embed problem's own distribution on a row sample
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    """What the gate ran on."""
    images: int
    rows: int
    cols: int
    k: int
    positions: int
    seed: int
    recipe: str

    def __str__(self):
        return (f"{self.rows:,} rows x {self.cols} cols (K={self.k}): {self.images} images x {self.positions} "
                f"positions, every position {self.images} times; seed {self.seed}; {self.recipe}")


def sample_inputs(images: int = 64, seed: int = 0):
    """acc (FP32) and per-row comb (BF16) for `images` x 196 rows of the SigLIP2 patch-embed recipe.

    Uses pelib.problems.PatchEmbed.make_inputs (a ~ U(-1,1) and b ~ N(0,1/K) rounded to E4M3, bias and
    pos ~ N(0, 0.5) in BF16, comb = bf16(bias + pos)) with N = K = 768 and M = 196 x images, so the sample
    covers every positional row equally. acc = a @ b^T in FP32 (the tensor core's FP32 accumulation; its
    summation order does not matter here: both paths start from the same acc).
    """

    full = problems.patch_embed("siglip2")
    if images < 1:
        raise ValueError(f"images={images}: need at least one image (196 rows)")
    # A row sample, not a kernel launch: any M that is a whole number of images will do.
    p = problems.PatchEmbed(name=f"f22-sample-{images}", m=full.positions * images, n=full.n, k=full.k,
                            positions=full.positions, tile={"m": full.positions, "n": full.tile["n"], "k": full.tile["k"]})
    t = p.make_inputs(seed=seed)
    acc = t["a"].float() @ t["b"].float().t()
    rows = torch.arange(p.m) % p.positions
    comb = t["comb"][rows]
    s = Sample(images, p.m, p.n, p.k, p.positions, seed,
               "pelib.problems PatchEmbed recipe (a ~ U(-1,1), b ~ N(0,1/K) in E4M3; bias, pos ~ N(0,0.5) in BF16)")
    return acc.contiguous(), comb.contiguous(), s


# ---------------------------------------------------------------------------------------------
# The gate
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """F22 path against the FP32-add path at one scale."""
    scale: float
    max_abs_err: float
    max_abs_at: tuple          # (row, col, reference value)
    max_rel_err: float
    max_rel_at: tuple
    max_abs_out: float
    differ_fraction: float     # elements whose BF16 results differ
    max_ulp: float             # in ULPs of the reference's binade
    mean_ulp: float
    over_1ulp_fraction: float  # elements more than 1 ULP (of the reference's binade) apart
    over_2ulp_fraction: float


@dataclass(frozen=True)
class F22PrecisionResult:
    """The precision half of F22's fail-fast rule, with what it was computed on."""
    sample: Sample
    threshold: float
    threshold_source: str
    problem: Comparison            # the problem's own scale
    card: Comparison               # the same data scaled by a power of two into the card's binade
    buckets: tuple                 # per |reference| binade: counts and ULP statistics
    vs_exact: dict                 # each path's max ULP error against the exactly rounded sum
    passes_up_to: float            # largest max |out| (the data scaled by powers of two) that still passes
    seconds: float
    evidence: str = EVIDENCE
    notes: tuple = field(default_factory=tuple)

    @property
    def passes(self) -> bool:
        """The precision fail-fast does not fire at either scale."""
        return self.problem.max_abs_err <= self.threshold and self.card.max_abs_err <= self.threshold

    @property
    def decision(self) -> str:
        return ("precision gate passes (no ABORT on precision; F22 still needs B200 timing)" if self.passes
                else "ABORT on precision (max abs error > threshold), or flag for downstream accuracy review")

    def facts(self):
        """The gonogo fact the F22 card's precision rule reads (the larger, card-scale error)."""
        return [Fact("f22.max_abs_err", max(self.problem.max_abs_err, self.card.max_abs_err), EVIDENCE,
                     f"pelib.numerics.precision.f22_precision_gate: {self.sample}")]

    def card_check(self) -> dict:
        """The F22 card's precision fail-fast rule applied to this result's fact."""
        (fact,) = self.facts()
        rule = next(r for r in gonogo.card("F22").fail_fast if r.metric == fact.metric)
        return {"rule": str(rule), "value": fact.value, "evidence": fact.kind, "fires": rule.holds(fact.value)}

    def bucket_table(self):

        return Table([dict(b) for b in self.buckets],
                     f"F22 vs FP32-add path by |reference| binade ({self.evidence}: exact CPU emulation)")

    def summary_table(self):

        rows = []
        for label, c in (("problem scale", self.problem), (f"card scale (x{self.card.scale:g})", self.card)):
            rows.append({"scale": label, "max |out|": c.max_abs_out, "max abs err": f"{c.max_abs_err:.4g}",
                         "threshold": self.threshold, "passes": "yes" if c.max_abs_err <= self.threshold else "NO",
                         "max rel err": round(c.max_rel_err, 3), "differ": f"{100 * c.differ_fraction:.2f} %",
                         "> 1 ULP": f"{100 * c.over_1ulp_fraction:.2f} %", "> 2 ULP": f"{100 * c.over_2ulp_fraction:.2f} %",
                         "max ULP": round(c.max_ulp, 1), "mean ULP": round(c.mean_ulp, 3)})
        return Table(rows, f"F22 precision gate ({self.evidence}) on {self.sample.rows:,} x {self.sample.cols}")

    def __str__(self):
        return (f"F22 precision ({self.evidence}), {self.sample}\n"
                f"  problem scale: max abs err {self.problem.max_abs_err:g} (max |out| {self.problem.max_abs_out:g})\n"
                f"  card scale x{self.card.scale:g}: max abs err {self.card.max_abs_err:g} "
                f"(max |out| {self.card.max_abs_out:g}) vs threshold {self.threshold:g}\n"
                f"  differing {100 * self.problem.differ_fraction:.2f} %, max ULP {self.problem.max_ulp}, "
                f"passes while max |out| <= {self.passes_up_to:g}\n  -> {self.decision}")


def card_threshold() -> tuple[float, str]:
    """The F22 card's precision threshold (its fail-fast rule on f22.max_abs_err) and where it is stated."""
    try:

        c = gonogo.card("F22")
        for r in c.fail_fast:
            if r.metric == "f22.max_abs_err":
                return float(r.threshold), c.source
    except (ImportError, KeyError, FileNotFoundError):
        pass
    return 16.0, "fp8-megakernel-future-proposals-F21-F28.md § F22 (Fail-fast, precision)"


def ulps_of_ref(ref: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """|ref - other| in BF16 ULPs of ref's binade (magnitude-aware; sane across zero, unlike ordinals).

    ref = 0 counts in ULPs of the smallest normal BF16 binade.
    """
    r = ref.float()
    _, ex = torch.frexp(r)                                # r = m * 2^ex, 0.5 <= |m| < 1
    ex = torch.where(r == 0, torch.full_like(ex, -125), ex)
    ulp = torch.ldexp(torch.ones_like(r), (ex - 1 - BF16_MANTISSA).to(torch.int32))
    return (r - other.float()).abs() / ulp


def _compare(ref: torch.Tensor, f22: torch.Tensor, scale: float) -> Comparison:
    r, f = ref.float(), f22.float()
    d = (r - f).abs()
    ia = int(d.argmax())
    cols = ref.shape[1]
    rel = d / r.abs().clamp_min(torch.finfo(torch.float32).tiny)
    rel = torch.where(r != 0, rel, torch.zeros_like(d))
    ir = int(rel.argmax())
    u = ulps_of_ref(ref, f22)
    return Comparison(scale, float(d.view(-1)[ia]), (ia // cols, ia % cols, float(r.view(-1)[ia])),
                      float(rel.view(-1)[ir]), (ir // cols, ir % cols, float(r.view(-1)[ir])),
                      float(r.abs().max()), float((d > 0).float().mean()), float(u.max()), float(u.mean()),
                      float((u > 1).float().mean()), float((u > 2).float().mean()))


def _buckets(ref: torch.Tensor, f22: torch.Tensor, exact: torch.Tensor) -> list[dict]:
    """Per binade of |ref|: counts, how many differ, ULP histogram, worst absolute error, both paths vs exact."""
    r = ref.float().view(-1)
    _, ex = torch.frexp(r)
    b = torch.where(r == 0, torch.full_like(ex, -200), ex - 1).to(torch.int64)   # |r| in [2^b, 2^(b+1))
    u = ulps_of_ref(ref, f22).view(-1)
    d = (r - f22.float().view(-1)).abs()
    ue_ref = ulps_of_ref(exact, ref).view(-1)
    ue_f22 = ulps_of_ref(exact, f22).view(-1)
    lo = int(b.min())
    idx = b - lo
    nb = int(idx.max()) + 1

    def count(mask=None):
        return torch.bincount(idx, weights=None if mask is None else mask.double(), minlength=nb)

    def amax(v):
        return torch.zeros(nb, dtype=v.dtype).scatter_reduce(0, idx, v, "amax", include_self=True)

    n, ndiff = count(), count(d > 0)
    h1, h2, h3 = count((u > 0) & (u <= 1)), count((u > 1) & (u <= 2)), count(u > 2)
    mu, md, mr, mf = amax(u), amax(d), amax(ue_ref), amax(ue_f22)
    out = []
    for i in range(nb):
        if n[i] == 0:
            continue
        e = i + lo
        zero = e == -200
        out.append({"|ref| binade": "0" if zero else f"[2^{e}, 2^{e + 1})",
                    "elements": int(n[i]), "differ": f"{100 * float(ndiff[i]) / float(n[i]):.2f} %",
                    "<=1 ULP": int(h1[i]), "1-2 ULP": int(h2[i]), ">2 ULP": int(h3[i]),
                    "max ULP": round(float(mu[i]), 2), "max abs err": f"{float(md[i]):.3g}",
                    "FP32 path max ULP vs exact": round(float(mr[i]), 2),
                    "F22 path max ULP vs exact": round(float(mf[i]), 2)})
    return out


def f22_precision_gate(images: int = 64, seed: int = 0, acc: torch.Tensor | None = None,
                       comb: torch.Tensor | None = None) -> F22PrecisionResult:
    """Evaluate F22's precision fail-fast on `images` x 196 rows of the patch-embed problem (CPU, seconds)."""
    import time

    t0 = time.perf_counter()
    if acc is None:
        acc, comb, sample = sample_inputs(images, seed)
    else:
        sample = Sample(0, acc.shape[0], acc.shape[1], 0, 0, seed, "caller-supplied acc and comb")
    threshold, tsrc = card_threshold()

    ref = fp32_add_path(acc, comb)
    f22 = bf16x2_add_path(acc, comb)
    # The exactly rounded sum (acc and comb are exact in FP64, so is their sum): how far each path is off.
    exact = _rn_bf16_from_f64(acc.double() + comb.double())
    problem = _compare(ref, f22, 1.0)

    # Scale by 2^k so the largest |reference| lands in [1024, 2048), the binade of the card's ~1,728.
    k = 10 - math.floor(math.log2(problem.max_abs_out))
    sc = 2.0 ** k
    acc_s, comb_s = acc * sc, _scale_bf16(comb, sc)
    card = _compare(fp32_add_path(acc_s, comb_s), bf16x2_add_path(acc_s, comb_s), sc)
    del acc_s, comb_s

    buckets = _buckets(ref, f22, exact)
    vs_exact = {"FP32-add path max ULP vs exact": max(b["FP32 path max ULP vs exact"] for b in buckets),
                "F22 path max ULP vs exact": max(b["F22 path max ULP vs exact"] for b in buckets)}
    # The error pattern is scale-free: at scale 2^j every absolute error is 2^j times the problem-scale one.
    if problem.max_abs_err > 0:
        j = math.floor(math.log2(threshold / problem.max_abs_err))
        up_to = problem.max_abs_out * 2.0 ** j
    else:
        up_to = math.inf
    notes = (
        "acc and comb scale together by powers of two: ULP statistics do not change, absolute errors scale",
        "F22 path error vs the exactly rounded sum is at most ~1.5 ULP (acc rounded, then the sum); the FP32 "
        "path's is at most ~0.5 ULP plus FP32's own rounding",
    )
    return F22PrecisionResult(sample, threshold, tsrc, problem, card, tuple(buckets), vs_exact,
                              up_to, time.perf_counter() - t0, notes=notes)


def _scale_bf16(x: torch.Tensor, s: float) -> torch.Tensor:
    """BF16 times a power of two (exact)."""
    y = (x.float() * s).to(BF16)
    return y


def _rn_bf16_from_f64(x: torch.Tensor) -> torch.Tensor:
    """FP64 -> BF16 round to nearest even, without an intermediate FP32 rounding (round-to-odd trick).

    Round to FP32 toward zero and set the sticky bit if that was inexact (round-to-odd to 24 bits);
    rounding that to BF16 (RNE) then equals direct rounding, since 24 >= 8 + 2 (Boldo & Melquiond,
    "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd", 2008).
    """
    f = x.float()                                         # RNE to FP32
    back = f.double()
    # step toward zero if RNE went away from zero
    away = (back.abs() > x.abs())
    bits = f.view(torch.int32)
    bits = torch.where(away, bits - 1, bits)              # same sign: magnitude - 1 ulp (toward zero)
    tz = bits.view(torch.float32)
    inexact = tz.double() != x
    bits = torch.where(inexact, bits | 1, bits)           # sticky bit: round to odd
    return rn_bf16(bits.view(torch.float32))
