"""The FP8 tensor core's block FMA on the CPU, bit for bit: the simulator's exact sum and the truncating models.

One k32 instruction computes, per output, d' = a . b + d: 32 FP8 x FP8 products and an FP32 D. Two
families of model, both vectorized with numpy over any number of such vectors:

    exact_sum(a, b, d)      what the simulator does today (src/kernels/sim/model/gmma.h gmma_e4m3): the
                            products and D summed in double, one round-to-nearest to FP32 per instruction
    BlockFMA(...)(a, b, d)  a block fused multiply-add with a narrow aligner: exact products, each term
                            aligned to a reference exponent R and truncated to `frac_bits` fraction bits
                            below it, the truncated terms summed exactly, the sum rounded to FP32; every
                            choice the public descriptions leave open is a parameter (below)

a, b: uint8 arrays [..., 32] (FP8 bytes, K order); d: uint32 [...] (FP32 bits). Every model returns the
FP32 bits [...] as uint32. chain() runs one over K = 32 * steps as the probe's chained wgmma do, with
nothing but the FP32 result carried from one instruction to the next.

Integer form: an FP8 byte is sign, integer significand M and the weight of its last bit (value =
M * 2^lsb, E4M3: M < 16, E5M2: M < 8); a product is M_a M_b * 2^(lsb_a + lsb_b), exactly; FP32 D is
M_d * 2^lsb_d with M_d < 2^24. A term aligned to R with F fraction bits is the integer
trunc(value / 2^(R - F)). The sum of 33 such terms fits an int64 for F <= 50.

Presets (PRESETS), each from a cited source:
    exact_sum      today's simulator (gmma.h)
    fp22_plain     the published outline: 32 products and D aligned to the largest term's exponent,
                   magnitudes truncated to 13 fraction bits, exact sum, round toward zero
    h100tc_matlab  north-numerical-computing/MATLAB-tensor-core models/H100TC.m (FP8 in, FP32 out),
                   through models/tools/GEMM.m and models/tools/Generic_BFMA_TC.m
    h100tc_c       the same repository's C port, models/tools/C/src/block_fma_nv.c with gemm_recur.c
                   (branch dev)
Evidence: "modelled". Which of them, if any, the GPU follows on wgmma is what pelib.tcprobe measures.
Checked outside this repository against MATLAB-tensor-core's own GPU data (model_validation/H100 and
H200, E4M3 and E5M2, 5,000 K = 32 vectors each, D = 0, not redistributed here): h100tc_matlab
reproduces every one of the 20,000 results bit for bit; h100tc_c differs on 1,415 of 5,000 (E4M3) and
841 (E5M2), fp22_plain on 1,576 and 888, exact_sum on 2,989 and 1,797. The 13-bit cut of the result
after its own leading bit is what separates the first two.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

K_BLOCK = 32                      # products per wgmma .k32 instruction (PTX ISA 9.7.15.5.2)
NAN_BITS = 0x7FFFFFFF             # NVIDIA's canonical FP32 NaN (what the models print for a NaN result)
FP32_MAX_BITS = 0x7F7FFFFF
REFS = ("exp_sum", "exp_sum_normalized", "max_term")
TRUNCS = ("toward_zero", "floor", "nearest_even")
D_STAGES = ("block", "late")
REFS2 = ("max_term", "group_ref")
ROUNDS = ("rz", "rn")
OVERFLOWS = ("inf", "satfinite")
ZERO_SIGNS = ("positive", "ieee")


class ModelError(ValueError):
    """A model or its inputs were asked for something they do not describe."""


# ---- formats ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fp8Format:
    """An OCP FP8 format (OCP 8-bit Floating Point Specification v1.0; PTX ISA "Alternate floating-point
    data formats"): E4M3 has no infinity and one NaN per sign (S.1111.111); E5M2 is IEEE-like."""

    name: str
    exp_bits: int
    mant_bits: int
    bias: int
    ieee_specials: bool          # E5M2: exponent all ones is Inf (mantissa 0) or NaN

    @property
    def emin(self) -> int:
        return 1 - self.bias


FORMATS = {"e4m3": Fp8Format("e4m3", 4, 3, 7, False), "e5m2": Fp8Format("e5m2", 5, 2, 15, True)}


def fmt_of(fmt) -> Fp8Format:
    if isinstance(fmt, Fp8Format):
        return fmt
    if fmt not in FORMATS:
        raise ModelError(f"FP8 format {fmt!r}: pelib.blockfma models {sorted(FORMATS)}")
    return FORMATS[fmt]


@dataclass(frozen=True)
class Terms:
    """Decoded numbers: value = (-1)^sign * mag * 2^lsb; `expo` is floor(log2 |value|) for a normal number
    and the format's emin for a subnormal (the exponent field read as 1: MATLAB-tensor-core's a_exp);
    `norm` is floor(log2 |value|) always (meaningless where mag == 0)."""

    sign: np.ndarray
    mag: np.ndarray
    lsb: np.ndarray
    expo: np.ndarray
    norm: np.ndarray
    nan: np.ndarray
    inf: np.ndarray


def ilog2(x) -> np.ndarray:
    """floor(log2 x) of positive int64 values, exact (float64 may round a value up to a power of two)."""
    x = np.asarray(x, dtype=np.int64)
    _, e = np.frexp(np.maximum(x, 1).astype(np.float64))
    e = e.astype(np.int64) - 1
    return e - ((np.maximum(x, 1) >> np.clip(e, 0, 62)) == 0)


def _fp8_table(f: Fp8Format) -> dict:
    v = np.arange(256, dtype=np.int64)
    s, e, m = v >> 7, (v >> f.mant_bits) & ((1 << f.exp_bits) - 1), v & ((1 << f.mant_bits) - 1)
    emax_field = (1 << f.exp_bits) - 1
    if f.ieee_specials:
        nan = (e == emax_field) & (m != 0)
        inf = (e == emax_field) & (m == 0)
    else:
        nan = (e == emax_field) & (m == (1 << f.mant_bits) - 1)
        inf = np.zeros(256, bool)
    mag = np.where(e == 0, m, m + (1 << f.mant_bits))
    mag = np.where(nan | inf, 0, mag)
    lsb = np.maximum(e, 1) - f.bias - f.mant_bits
    expo = np.maximum(e, 1) - f.bias
    return {"sign": s.astype(bool), "mag": mag, "lsb": lsb, "expo": expo,
            "norm": ilog2(mag) + lsb, "nan": nan, "inf": inf}


_TABLES = {name: _fp8_table(f) for name, f in FORMATS.items()}


def decode_fp8(x, fmt="e4m3") -> Terms:
    """FP8 bytes -> Terms (exact)."""
    t = _TABLES[fmt_of(fmt).name]
    x = np.asarray(x, dtype=np.uint8)
    return Terms(**{k: v[x] for k, v in t.items()})


def decode_fp32(bits) -> Terms:
    """FP32 bit patterns -> Terms (IEEE 754 binary32: 1 sign, 8 exponent, 23 fraction bits)."""
    u = np.asarray(bits, dtype=np.uint32).astype(np.int64)
    s, e, m = (u >> 31).astype(bool), (u >> 23) & 255, u & 0x7FFFFF
    nan, inf = (e == 255) & (m != 0), (e == 255) & (m == 0)
    mag = np.where(e == 0, m, m | (1 << 23))
    mag = np.where(e == 255, 0, mag)
    lsb = np.maximum(e, 1) - 150
    return Terms(s, mag, lsb, np.maximum(e, 1) - 127, ilog2(mag) + lsb, nan, inf)


def values(x, fmt="e4m3") -> np.ndarray:
    """FP8 bytes -> float64 values (NaN, +-Inf included)."""
    t = decode_fp8(x, fmt)
    v = np.ldexp(t.mag.astype(np.float64), t.lsb.astype(np.int32))
    v = np.where(t.inf, np.inf, np.where(t.nan, np.nan, v))
    return np.where(t.sign, -v, v)


def fp32_values(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


# ---- integer helpers ------------------------------------------------------------------------------

def _round_shift(mag, s, mode: str):
    """round(mag / 2^s) for mag >= 0 int64 and 0 <= s <= 62: toward_zero, ceil or nearest_even."""
    q = mag >> s
    if mode == "toward_zero":
        return q
    r = mag & ((np.int64(1) << s) - 1)
    if mode == "ceil":
        return q + (r != 0)
    half = np.where(s > 0, np.int64(1) << np.maximum(s - 1, 0), 0)
    return q + ((s > 0) & ((r > half) | ((r == half) & ((q & 1) == 1))))


_CUT = {"toward_zero": np.trunc, "floor": np.floor, "nearest_even": np.rint}


def _align(v, ref, frac_bits: int, trunc: str):
    """Values v (float64) on the grid 2^(ref - frac_bits), as integers held in float64, cut toward zero,
    toward -inf (two's complement, a sign-filling shift) or to nearest even. Exact: v times a power of two
    is exact, every term is below 2^(ref + 2), so the integers stay below 2^(frac_bits + 2)."""
    return _CUT[trunc](v * np.ldexp(1.0, frac_bits - ref))


def encode_fp32(sign, mag, lsb, out_bits: int = 23, rounding: str = "rz", overflow: str = "inf"):
    """(-1)^sign * mag * 2^lsb (mag >= 0 int64) -> FP32 bits, keeping `out_bits` fraction bits (23 is
    FP32 itself; fewer models an output that is itself truncated), with FP32's subnormals (grid 2^-149,
    or 2^(-126 - out_bits) for a narrower significand). mag == 0 gives +0 (the caller sets a zero's sign)."""
    mag = np.asarray(mag, dtype=np.int64)
    lsb = np.asarray(lsb, dtype=np.int64)
    nz = mag > 0
    e = np.where(nz, ilog2(np.where(nz, mag, 1)) + lsb, 0)
    keep = np.maximum(np.maximum(e - out_bits, -126 - out_bits), -149)
    mode = {"rz": "toward_zero", "rn": "nearest_even"}.get(rounding)
    if mode is None:
        raise ModelError(f"rounding {rounding!r}: one of {ROUNDS}")
    drop = np.clip(keep - lsb, 0, 62)
    kept = _round_shift(mag, drop, mode)
    v = np.ldexp(kept.astype(np.float64), (lsb + drop).astype(np.int32))
    big = v >= 2.0 ** 128
    if overflow == "inf":
        f = np.where(big, np.inf, v).astype(np.float32)
    elif overflow == "satfinite":
        f = np.where(big, np.float64(np.float32(3.4028234663852886e38)), v).astype(np.float32)
    else:
        raise ModelError(f"overflow {overflow!r}: one of {OVERFLOWS}")
    f = np.where(np.asarray(sign, bool), -f, f)
    return np.where(nz, f.view(np.uint32), np.uint32(0)).astype(np.uint32)


def _check_operands(a, b, d):
    """a, b: FP8 bytes [..., 32] that broadcast against each other (a probe tile passes A [T, 64, 1, 32]
    and B [T, 1, N, 32]); d: FP32 bits of the broadcast shape without the last axis."""
    a, b = np.asarray(a, np.uint8), np.asarray(b, np.uint8)
    d = np.asarray(d, np.uint32)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        shape = None
    if shape is None or a.shape[-1] != K_BLOCK or b.shape[-1] != K_BLOCK:
        raise ModelError(f"a {a.shape} and b {b.shape}: one k32 block is [..., {K_BLOCK}] FP8 bytes each, the "
                         "leading axes broadcasting (use chain() for K = 32 * steps)")
    if d.shape != shape[:-1]:
        try:
            d = np.broadcast_to(d, shape[:-1])
        except ValueError:
            raise ModelError(f"d {d.shape}: one FP32 per vector, shape {shape[:-1]}") from None
    return a, b, d


# ---- products, by byte pair --------------------------------------------------------------------------

LO = -(1 << 14)   # the reference exponent of a zero product: below every real one


def _pair_tables(fmt: str) -> dict:
    """What the rarer paths need about the product of FP8 bytes (x, y), indexed by x << 8 | y (65,536
    entries): its leading-bit exponent (LO for zero), NaN, the sign of an infinite product, negative zero."""
    t = decode_fp8(np.arange(256, dtype=np.uint8), fmt)
    x, y = np.arange(65536) >> 8, np.arange(65536) & 255
    mag = t.mag[x] * t.mag[y]
    neg = t.sign[x] ^ t.sign[y]
    nz = mag > 0
    special = t.nan[x] | t.nan[y] | t.inf[x] | t.inf[y]
    nan = t.nan[x] | t.nan[y] | (t.inf[x] & (t.mag[y] == 0) & ~t.inf[y]) | (t.inf[y] & (t.mag[x] == 0) & ~t.inf[x])
    inf = (t.inf[x] | t.inf[y]) & ~nan
    return {"max_term": np.where(nz, ilog2(np.maximum(mag, 1)) + t.lsb[x] + t.lsb[y], LO).astype(np.int32),
            "nan": nan, "inf": np.where(inf, np.where(neg, -1, 1), 0).astype(np.int8),
            "negzero": neg & ~nz & ~special}


_PAIRS: dict = {}


def pair_table(fmt="e4m3") -> dict:
    f = fmt_of(fmt).name
    if f not in _PAIRS:
        _PAIRS[f] = _pair_tables(f)
    return _PAIRS[f]


def _pair_index(a, b):
    return (a.astype(np.int32) << 8) | b


def _specials(a, b, td: Terms, scale_d: bool, fmt):
    """NaN and infinity outcomes (IEEE 754: NaN in, NaN out; Inf - Inf and Inf * 0 are NaN), or None when
    no operand is special."""
    t8 = _TABLES[fmt_of(fmt).name]
    any8 = t8["nan"] | t8["inf"]
    dspec = (td.nan | td.inf) if scale_d else np.zeros(td.nan.shape, bool)
    if not (any8[a].any() or any8[b].any() or dspec.any()):
        return None
    tab = pair_table(fmt)
    idx = _pair_index(a, b)
    pinf = tab["inf"][idx]
    dsign = np.where(td.inf & scale_d, np.where(td.sign, -1, 1), 0)
    pos = (pinf > 0).any(-1) | (dsign > 0)
    neg = (pinf < 0).any(-1) | (dsign < 0)
    nan = tab["nan"][idx].any(-1) | (td.nan & scale_d) | (pos & neg)
    return nan, pos | neg, neg


# ---- the simulator's arithmetic ------------------------------------------------------------------

@dataclass(frozen=True)
class ExactSum:
    """src/kernels/sim/model/gmma.h gmma_e4m3: s = D (or 0 when scale-d is 0), then s += a_k * b_k in
    double for k = 0..31 (each product is exact in double), then one round to nearest even to FP32."""

    name: str = "exact_sum"
    source: str = "src/kernels/sim/model/gmma.h gmma_e4m3 (today's simulator)"

    def __call__(self, a, b, d, fmt="e4m3", scale_d: bool = True) -> np.ndarray:
        a, b, d = _check_operands(a, b, d)
        # gmma.h decodes to float exactly, a NaN byte of either sign to +NaN (smem_operand.h e4m3_to_float)
        va, vb = (np.where(np.isnan(v), np.nan, v) for v in (values(a, fmt), values(b, fmt)))
        with np.errstate(invalid="ignore", over="ignore"):
            s = fp32_values(d).astype(np.float64) if scale_d else np.zeros(d.shape)
            for k in range(K_BLOCK):
                s = s + va[..., k] * vb[..., k]
            return s.astype(np.float32).view(np.uint32)


# ---- the block FMA -------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockFMA:
    """A block FMA with a narrow aligner; every field is one open question the probe data can settle.

    frac_bits     fraction bits kept below the reference exponent R (13: "FP22", e8m13); at most 26
                  (the aligned terms stay exact in an int64)
    ref           a product's exponent for choosing R: exp_sum = e_a + e_b with subnormal inputs at emin
                  (a significand in [2, 4) does not move it; MATLAB-tensor-core), exp_sum_normalized = the
                  same with subnormal inputs normalized (the C port), max_term = floor(log2 |a b|)
    d_ref         D's exponent for R when D is an FP32 subnormal: expo (-126) or norm (its leading bit)
    d_stage       block: D is a term of the products' alignment (of the first group); late: D joins the
                  second level with the group sums
    trunc         how a term loses its bits below the grid: toward_zero (sign-magnitude), floor (two's
                  complement, a sign-filling shift), nearest_even
    group         products per first-level alignment (32: one block; 16, 8, 4: groups whose sums are
                  aligned again at a second level); interleave: group g holds k with k % (32/group) == g
                  (otherwise contiguous k // group)
    frac_bits2    fraction bits of the second level (None: frac_bits); ref2 its reference: max_term =
                  the largest term's leading bit, group_ref = the largest group's R
    out_bits      fraction bits of the result (23: FP32; 13: the result truncated again to FP22)
    out_round     rz | rn into those bits; overflow: inf | satfinite (the largest finite FP32)
    min_exp       a floor on R (MATLAB-tensor-core min_exp_limit), None for none
    zero_sign     positive: an exact zero is +0; ieee: -0 when every term is a negative zero
    """

    name: str
    frac_bits: int = 13
    ref: str = "exp_sum"
    d_ref: str = "expo"
    d_stage: str = "block"
    trunc: str = "toward_zero"
    group: int = 32
    interleave: bool = False
    frac_bits2: int | None = None
    ref2: str = "max_term"
    out_bits: int = 23
    out_round: str = "rz"
    overflow: str = "inf"
    min_exp: int | None = None
    zero_sign: str = "positive"
    source: str = field(default="", compare=False)

    def __post_init__(self):
        checks = [(self.ref, REFS, "ref"), (self.trunc, TRUNCS, "trunc"), (self.d_stage, D_STAGES, "d_stage"),
                  (self.ref2, REFS2, "ref2"), (self.out_round, ROUNDS, "out_round"),
                  (self.overflow, OVERFLOWS, "overflow"), (self.zero_sign, ZERO_SIGNS, "zero_sign"),
                  (self.d_ref, ("expo", "norm"), "d_ref")]
        for v, allowed, what in checks:
            if v not in allowed:
                raise ModelError(f"BlockFMA {self.name}: {what}={v!r}; one of {allowed}")
        for what, v in (("frac_bits", self.frac_bits), ("frac_bits2", self.frac_bits2 or self.frac_bits)):
            if not 1 <= v <= 26:
                raise ModelError(f"BlockFMA {self.name}: {what}={v}; 1..26 (the aligned terms stay exact in int64)")
        if self.group not in (1, 2, 4, 8, 16, 32):
            raise ModelError(f"BlockFMA {self.name}: group={self.group}; a power of two dividing 32")
        if not 1 <= self.out_bits <= 23:
            raise ModelError(f"BlockFMA {self.name}: out_bits={self.out_bits}; 1..23 (FP32 has 23)")

    def with_(self, **changes) -> "BlockFMA":
        return replace(self, **changes)

    @property
    def params(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("name", "source")}

    def _level(self, v, ref, frac_bits: int, dterm=None):
        """Align terms v [..., n] (float64; ref = LO for a zero term) and an optional D term (value, ref)
        of shape [...] on the largest ref; returns (the sum as an integer-valued float64, its grid
        exponent). The sum of 33 integers below 2^(frac_bits + 2) is exact in float64."""
        r = ref.max(-1).astype(np.int64)
        if dterm is not None:
            r = np.maximum(r, dterm[1])
        if self.min_exp is not None:
            r = np.where(r > LO // 2, np.maximum(r, self.min_exp), r)
        r = np.where(r > LO // 2, r, 0)
        total = _align(v, r[..., None], frac_bits, self.trunc).sum(-1)
        if dterm is not None:
            total = total + _align(dterm[0], r, frac_bits, self.trunc)
        return total, r - frac_bits

    def _products(self, a, b, fmt):
        """Products (float64, exact: 8-bit significands) and their reference exponents [..., 32], by
        broadcasting the operands' own decodings."""
        ta, tb = decode_fp8(a, fmt), decode_fp8(b, fmt)
        va = np.where(ta.sign, -1.0, 1.0) * np.ldexp(ta.mag.astype(np.float64), ta.lsb.astype(np.int32))
        vb = np.where(tb.sign, -1.0, 1.0) * np.ldexp(tb.mag.astype(np.float64), tb.lsb.astype(np.int32))
        pv = va * vb
        if self.ref == "max_term":
            pref = np.where(pv != 0, np.frexp(pv)[1] - 1, LO)
        else:
            ea, eb = (ta.expo, tb.expo) if self.ref == "exp_sum" else (ta.norm, tb.norm)
            pref = np.where(ta.mag > 0, ea, LO).astype(np.int32) + np.where(tb.mag > 0, eb, LO).astype(np.int32)
        return pv, pref

    def __call__(self, a, b, d, fmt="e4m3", scale_d: bool = True) -> np.ndarray:
        a, b, d = _check_operands(a, b, d)
        pv, pref = self._products(a, b, fmt)
        td = decode_fp32(d)
        dmag = td.mag if scale_d else np.zeros_like(td.mag)
        dv = np.where(td.sign, -1.0, 1.0) * np.ldexp(dmag.astype(np.float64), td.lsb.astype(np.int32))
        dterm = (dv, np.where(dmag > 0, td.expo if self.d_ref == "expo" else td.norm, LO))
        ngroups = K_BLOCK // self.group
        if ngroups == 1 and self.d_stage == "block":
            s, grid = self._level(pv, pref, self.frac_bits, dterm)
        else:
            k = np.arange(K_BLOCK)
            order = np.argsort(k % ngroups if self.interleave else k // self.group, kind="stable")
            shp = pv.shape[:-1] + (ngroups, self.group)
            gv, gr = (np.broadcast_to(x, pv.shape)[..., order].reshape(shp) for x in (pv, pref))
            sums, grids = [], []
            for g in range(ngroups):
                extra = dterm if (g == 0 and self.d_stage == "block") else None
                s_g, grid_g = self._level(gv[..., g, :], gr[..., g, :], self.frac_bits, extra)
                sums.append(s_g)
                grids.append(grid_g)
            S, G = np.stack(sums, -1), np.stack(grids, -1)
            v2 = np.ldexp(S, G.astype(np.int32))
            # the second level: group sums as terms; one whose truncated terms cancelled to 0 is none
            r2 = np.frexp(v2)[1] - 1 if self.ref2 == "max_term" else G + self.frac_bits
            r2 = np.where(S != 0, r2, LO)
            s, grid = self._level(v2, r2, self.frac_bits2 or self.frac_bits,
                                  dterm if self.d_stage == "late" else None)
        s = s.astype(np.int64)
        out = encode_fp32(s < 0, np.abs(s), grid, self.out_bits, self.out_round, self.overflow)
        tab = None
        if self.zero_sign == "ieee" and (s == 0).any():
            tab = pair_table(fmt)
            pneg0 = tab["negzero"][_pair_index(a, b)].all(-1)
            dneg0 = ((td.mag == 0) & td.sign & ~td.nan & ~td.inf) if scale_d else np.ones(d.shape, bool)
            out = np.where((s == 0) & pneg0 & dneg0, np.uint32(0x80000000), out)
        sp = _specials(a, b, td, scale_d, fmt)
        if sp is not None:
            nan, inf, ineg = sp
            out = np.where(inf, np.where(ineg, np.uint32(0xFF800000), np.uint32(0x7F800000)), out)
            out = np.where(nan, np.uint32(NAN_BITS), out)
        return np.asarray(out, np.uint32)


# ---- presets --------------------------------------------------------------------------------------

EXACT_SUM = ExactSum()
FP22_PLAIN = BlockFMA(
    "fp22_plain", frac_bits=13, ref="max_term", d_stage="block", trunc="toward_zero", out_bits=23, out_round="rz",
    source="the published outline (DeepSeek-V3 report 3.5.2; SageAttention2; Khattak & Mikaitis, arXiv "
           "2512.07004): every term aligned to the largest one's exponent, 13 fraction bits, toward zero")
# MATLAB-tensor-core models/H100TC.m, FP8 inputs: fma = 32, neab = -10, frmode 'rz', global_alignment 1
# (C in the same alignment), denorm_prd 1 (a product in [2, 4) keeps the exponent sum), min_exp_limit
# -133. Generic_BFMA_TC.m: a_exp = max(floor(log2|a|), emin_input), AlignSignficand shifts every 23-bit
# significand right by 10 (neab) and by maxExp - exponent, truncating (magnitudes); the sum is exact;
# GEMM.m sets NoManBitsOut = 23 + neab = 13 when neab < 0, so the result keeps 13 fraction bits (rz: no
# rounding, the bits past 13 are dropped), and an all-zero block with C = 0 returns +0.
H100TC_MATLAB = BlockFMA(
    "h100tc_matlab", frac_bits=13, ref="exp_sum", d_ref="expo", d_stage="block", trunc="toward_zero",
    out_bits=13, out_round="rz", overflow="inf", min_exp=-133, zero_sign="positive",
    source="MATLAB-tensor-core models/H100TC.m, models/tools/GEMM.m, models/tools/Generic_BFMA_TC.m")
# MATLAB-tensor-core models/tools/C/src/block_fma_nv.c block_FMA_nv (branch dev): exponents from frexp
# (subnormal FP8 inputs normalized), the largest exponent sum picks the window, each term masked to
# accum_prec = 24 - 1 + neab = 13 bits below it (plus one for a [2, 4) leader: the same grid), an exact
# double sum; gemm_recur.c then rounds to FP32 toward zero (cpfloat CPFLOAT_RND_TZ).
H100TC_C = BlockFMA(
    "h100tc_c", frac_bits=13, ref="exp_sum_normalized", d_ref="norm", d_stage="block", trunc="toward_zero",
    out_bits=23, out_round="rz", overflow="satfinite", zero_sign="positive",
    source="MATLAB-tensor-core models/tools/C/src/block_fma_nv.c, gemm_recur.c (branch dev)")
PRESETS = {m.name: m for m in (EXACT_SUM, FP22_PLAIN, H100TC_MATLAB, H100TC_C)}


def chain(model, a, b, d, fmt="e4m3", first_scale_d: bool = True) -> np.ndarray:
    """K = 32 * steps through `model`, one k32 instruction after the other in K order, the FP32 bits of
    each result the next one's D (scale-d of the first instruction as given, then 1)."""
    a, b = np.asarray(a, np.uint8), np.asarray(b, np.uint8)
    if a.shape[-1] != b.shape[-1] or a.shape[-1] % K_BLOCK:
        raise ModelError(f"chain: a {a.shape} and b {b.shape} need one K, a multiple of {K_BLOCK}")
    out = np.asarray(d, np.uint32)
    for s in range(a.shape[-1] // K_BLOCK):
        sl = slice(K_BLOCK * s, K_BLOCK * (s + 1))
        out = model(a[..., sl], b[..., sl], out, fmt, scale_d=bool(s > 0 or first_scale_d))
    return out


def mismatches(got, want) -> dict:
    """How many FP32 results differ: `bits` (any bit), `values` (two NaNs count as equal), `nan_payload`."""
    got, want = np.asarray(got, np.uint32), np.asarray(want, np.uint32)
    differ = got != want
    both_nan = np.isnan(fp32_values(got)) & np.isnan(fp32_values(want))
    return {"bits": int(differ.sum()), "values": int((differ & ~both_nan).sum()),
            "nan_payload": int((differ & both_nan).sum())}
