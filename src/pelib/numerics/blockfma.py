"""The FP8 tensor core's block FMA on the CPU, bit for bit: the simulator's exact sum and the truncating models.

One k32 instruction computes, per output, d' = a . b + d: 32 FP8 x FP8 products and an FP32 D. Two
families of model, both vectorized with numpy over any number of such vectors:

    exact_sum(a, b, d)      what the simulator does today (src/kernels/sim/model/gmma.h gmma_e4m3): the
                            products and D summed in double, one round-to-nearest to FP32 per instruction
    BlockFMA(...)(a, b, d)  a block fused multiply-add with a narrow aligner: exact products, each term
                            aligned to a reference exponent R and truncated to `frac_bits` fraction bits
                            below it, the truncated terms summed exactly, the sum rounded to FP32; every
                            choice the public descriptions leave open is a parameter (below)

a, b: uint8 arrays [..., k] (FP8 bytes, K order; k = 32 for one wgmma); d: uint32 [...] (FP32 bits). Every
model returns the FP32 bits [...] as uint32. chain() runs one over K = k * steps as the probe's chained wgmma
do, with nothing but the FP32 result carried from one instruction to the next; mma() and matmul() take exact
product values and window exponents instead (block-scaled operands, a GEMM's tile).

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
    b200tc_f8f6f4, b200_mxf4nvf4_mmasim  tcgen05.mma's kinds: MMA-Sim's hardware-validated rules (arXiv
                   2511.10909), not yet run on a B200 here (pelib.measure.tcprobe_sm100 measures them)
    b200_mxf4nvf4_guess   the project's earlier kind::mxf4nvf4 candidate, kept for the probe
Evidence: "modelled". pelib.measure.tcprobe measured which one wgmma follows: h100tc_matlab, on every one of
2,867,200 probe outputs of an H100 and of an H200 (results/2026-11-27-h100 and -h200, tcprobe.json); it is
the simulator's (src/kernels/sim/model/blockfma.h, MMA_MODELS["tensor_core"]) and the emulator's.
Checked outside this repository against MATLAB-tensor-core's own GPU data (model_validation/H100 and
H200, E4M3 and E5M2, 5,000 K = 32 vectors each, D = 0, not redistributed here): h100tc_matlab
reproduces every one of the 20,000 results bit for bit; h100tc_c differs on 1,415 of 5,000 (E4M3) and
841 (E5M2), fp22_plain on 1,576 and 888, exact_sum on 2,989 and 1,797. The 13-bit cut of the result
after its own leading bit is what separates the first two. tests/test_mmasim_oracle.py checks h100tc_matlab,
b200tc_f8f6f4 and b200_mxf4nvf4_mmasim, and their C++ twins, against MMA-Sim (PyPI mmasim 2.1.1) bit for bit
on every input class.

Over 700 lines: one numeric model, bit for bit: its decoders, exact sum and truncating models share their
tables.
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
SCALE_WINDOWS = ("with_elements", "scales_only")
EMPTY_GROUPS = ("sum_zero", "no_product")
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
        raise ModelError(f"FP8 format {fmt!r}: pelib.numerics.blockfma models {sorted(FORMATS)}")
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
    is exact, every term is below 2^(ref + 4), so the integers stay below 2^(frac_bits + 4)."""
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


def _check_operands(a, b, d, k: int = K_BLOCK):
    """a, b: FP8 bytes [..., k] that broadcast against each other (a probe tile passes A [T, 64, 1, 32]
    and B [T, 1, N, 32]); d: FP32 bits of the broadcast shape without the last axis."""
    a, b = np.asarray(a, np.uint8), np.asarray(b, np.uint8)
    d = np.asarray(d, np.uint32)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        shape = None
    if shape is None or a.shape[-1] != k or b.shape[-1] != k:
        raise ModelError(f"a {a.shape} and b {b.shape}: one block is [..., {k}] FP8 bytes each, the "
                         f"leading axes broadcasting (use chain() for K = {k} * steps)")
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
    """The simulator's exact-sum option (src/kernels/sim/model/blockfma.h exact_dot, what gmma.h computed
    before the block FMA): s = D (or 0 when scale-d is 0), then s += a_k * b_k in double for k = 0..k-1
    (each product is exact in double), then one round to nearest even to FP32."""

    name: str = "exact_sum"
    source: str = "src/kernels/sim/model/blockfma.h exact_dot (the simulator's exact-sum option)"
    k: int = K_BLOCK

    def __call__(self, a, b, d, fmt="e4m3", scale_d: bool = True) -> np.ndarray:
        a, b, d = _check_operands(a, b, d, self.k)
        # gmma.h decodes to float exactly, a NaN byte of either sign to +NaN (smem_operand.h e4m3_to_float)
        va, vb = (np.where(np.isnan(v), np.nan, v) for v in (values(a, fmt), values(b, fmt)))
        with np.errstate(invalid="ignore", over="ignore"):
            s = fp32_values(d).astype(np.float64) if scale_d else np.zeros(d.shape)
            for k in range(self.k):
                s = s + va[..., k] * vb[..., k]
            return s.astype(np.float32).view(np.uint32)

    def from_products(self, pv, pref=None, d=0, scale_d: bool = True) -> np.ndarray:
        """The same sum of given exact products pv float64 [..., k] (pref unused): D first, then the
        products in K order in double, one round to nearest FP32 (model/blockfma.h exact_dot)."""
        pv = np.asarray(pv, np.float64)
        d = np.broadcast_to(np.asarray(d, np.uint32), pv.shape[:-1])
        with np.errstate(invalid="ignore", over="ignore"):
            s = fp32_values(d).astype(np.float64) if scale_d else np.zeros(d.shape)
            for k in range(pv.shape[-1]):
                s = s + pv[..., k]
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
    k             products in one block (32: a wgmma or tcgen05 f8f6f4 instruction; chain() runs K / k blocks)
    scale_window  block-scaled products (a b s_a s_b): the window exponent is the four factors' exponents summed
                  (with_elements) or the two scales' alone (scales_only, MMA-Sim); scaled_windows() applies it
    empty_group   the second level: a group is no term (its window does not count) when its truncated sum is 0
                  (sum_zero) or only when none of its products is nonzero (no_product, MMA-Sim: a group whose
                  products cancel keeps its window)
    """

    name: str
    frac_bits: int = 13
    ref: str = "exp_sum"
    d_ref: str = "expo"
    d_stage: str = "block"
    trunc: str = "toward_zero"
    group: int | None = None      # None: k (one alignment for the block)
    interleave: bool = False
    frac_bits2: int | None = None
    ref2: str = "max_term"
    out_bits: int = 23
    out_round: str = "rz"
    overflow: str = "inf"
    min_exp: int | None = None
    zero_sign: str = "positive"
    k: int = K_BLOCK
    scale_window: str = "with_elements"
    empty_group: str = "sum_zero"
    source: str = field(default="", compare=False)

    def __post_init__(self):
        checks = [(self.ref, REFS, "ref"), (self.trunc, TRUNCS, "trunc"), (self.d_stage, D_STAGES, "d_stage"),
                  (self.ref2, REFS2, "ref2"), (self.out_round, ROUNDS, "out_round"),
                  (self.overflow, OVERFLOWS, "overflow"), (self.zero_sign, ZERO_SIGNS, "zero_sign"),
                  (self.d_ref, ("expo", "norm"), "d_ref"), (self.scale_window, SCALE_WINDOWS, "scale_window"),
                  (self.empty_group, EMPTY_GROUPS, "empty_group")]
        for v, allowed, what in checks:
            if v not in allowed:
                raise ModelError(f"BlockFMA {self.name}: {what}={v!r}; one of {allowed}")
        for what, v in (("frac_bits", self.frac_bits), ("frac_bits2", self.frac_bits2 or self.frac_bits)):
            if not 1 <= v <= 40:
                raise ModelError(f"BlockFMA {self.name}: {what}={v}; 1..40 (the aligned terms and their sum stay "
                                 "exact in float64)")
        if self.group is None:
            object.__setattr__(self, "group", self.k)
        if self.k not in (1, 2, 4, 8, 16, 32, 64):
            raise ModelError(f"BlockFMA {self.name}: k={self.k}; a power of two up to 64 products per block")
        if self.group < 1 or self.k % self.group or self.group & (self.group - 1):
            raise ModelError(f"BlockFMA {self.name}: group={self.group}; a power of two dividing k={self.k}")
        if not 1 <= self.out_bits <= 23:
            raise ModelError(f"BlockFMA {self.name}: out_bits={self.out_bits}; 1..23 (FP32 has 23)")

    def with_(self, **changes) -> "BlockFMA":
        if "k" in changes and "group" not in changes and self.group == self.k:
            changes["group"] = None        # one alignment per block stays one alignment per block
        return replace(self, **changes)

    @property
    def params(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("name", "source")}

    def _level(self, v, ref, frac_bits: int, dterm=None):
        """Align terms v [..., n] (float64; ref = LO for a zero term) and an optional D term (value, ref)
        of shape [...] on the largest ref; returns (the sum as an integer-valued float64, its grid
        exponent). Every term is below 2^(frac_bits + 4) (a product of four significands below 16 times
        2^ref), so the sum of 65 of them is exact in float64 for frac_bits <= 40."""
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
        """Products (float64, exact: 8-bit significands) and their reference exponents [..., k]: each
        operand decoded by a 256-entry table before broadcasting (a probe tile's A [64, 1, k] and B [1, N, k]
        are decoded once, not per output)."""
        v, e = byte_values(fmt, self.ref)
        pv = v[a] * v[b]
        if self.ref == "max_term":
            return pv, np.where(pv != 0, np.frexp(pv)[1] - 1, LO).astype(np.int32)
        return pv, e[a] + e[b]

    def __call__(self, a, b, d, fmt="e4m3", scale_d: bool = True) -> np.ndarray:
        a, b, d = _check_operands(a, b, d, self.k)
        pv, pref = self._products(a, b, fmt)
        td = decode_fp32(d)
        s, grid = self._sum(pv, pref, td, scale_d)
        out = encode_fp32(s < 0, np.abs(s), grid, self.out_bits, self.out_round, self.overflow)
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

    def from_products(self, pv, pref, d, scale_d: bool = True) -> np.ndarray:
        """The block FMA of given exact products: pv float64 [..., k] (NaN, +-Inf allowed; 0 for a zero
        product), pref their window exponents (ignored where pv is 0 or special), d FP32 bits [...]. For
        products other than FP8 x FP8 (the block-scaled kinds: a b s_a s_b). An exact zero is +0."""
        pv = np.asarray(pv, np.float64)
        if pv.shape[-1] != self.k:
            raise ModelError(f"{self.name}: {pv.shape[-1]} products per block, the model takes k={self.k}")
        d = np.broadcast_to(np.asarray(d, np.uint32), pv.shape[:-1])
        special = ~np.isfinite(pv)
        pref = np.where((pv != 0) & ~special, pref, LO)
        td = decode_fp32(d)
        s, grid = self._sum(np.where(special, 0.0, pv), pref, td, scale_d)
        out = encode_fp32(s < 0, np.abs(s), grid, self.out_bits, self.out_round, self.overflow)
        if special.any() or (scale_d and (td.nan | td.inf).any()):
            dn = (td.nan | td.inf) & scale_d
            pos = (pv == np.inf).any(-1) | (dn & td.inf & ~td.sign)
            neg = (pv == -np.inf).any(-1) | (dn & td.inf & td.sign)
            nan = np.isnan(pv).any(-1) | (dn & td.nan) | (pos & neg)
            out = np.where(pos | neg, np.where(neg, np.uint32(0xFF800000), np.uint32(0x7F800000)), out)
            out = np.where(nan, np.uint32(NAN_BITS), out)
        return np.asarray(out, np.uint32)

    def _sum(self, pv, pref, td: Terms, scale_d: bool):
        """The aligned, truncated, exact sum (int64) and its grid exponent."""
        dmag = td.mag if scale_d else np.zeros_like(td.mag)
        dv = np.where(td.sign, -1.0, 1.0) * np.ldexp(dmag.astype(np.float64), td.lsb.astype(np.int32))
        dterm = (dv, np.where(dmag > 0, td.expo if self.d_ref == "expo" else td.norm, LO))
        ngroups = self.k // self.group
        if ngroups == 1 and self.d_stage == "block":
            s, grid = self._level(pv, pref, self.frac_bits, dterm)
        else:
            k = np.arange(self.k)
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
            # (sum_zero), or only one without a nonzero product (no_product)
            r2 = np.frexp(v2)[1] - 1 if self.ref2 == "max_term" else G + self.frac_bits
            live = (S != 0) if self.empty_group == "sum_zero" or self.ref2 == "max_term" else (gv != 0).any(-1)
            r2 = np.where(live, r2, LO)
            s, grid = self._level(v2, r2, self.frac_bits2 or self.frac_bits,
                                  dterm if self.d_stage == "late" else None)
        return s.astype(np.int64), grid


_BYTE_VALUES: dict = {}


def byte_values(fmt="e4m3", ref="exp_sum") -> tuple:
    """(value float64, window exponent int32) of each FP8 byte: the value 0 for NaN and Inf bytes (_specials
    decides those outputs), the exponent LO for zeros so that a product with a zero factor stays below
    every real one (LO + LO)."""
    key = (fmt_of(fmt).name, ref)
    if key not in _BYTE_VALUES:
        t = decode_fp8(np.arange(256, dtype=np.uint8), fmt)
        v = np.ldexp(t.mag.astype(np.float64), t.lsb.astype(np.int32))
        e = t.norm if ref == "exp_sum_normalized" else t.expo
        _BYTE_VALUES[key] = (np.where(t.sign, -v, v), np.where(t.mag > 0, e, LO).astype(np.int32))
    return _BYTE_VALUES[key]


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
# Blackwell tcgen05.mma, modelled and not yet run on a B200 here (the probe that settles it: python -m
# pelib.measure.tcprobe_sm100 collect). kind::f8f6f4, MMA-Sim's rule (github.com/microsoft/MMA-Sim
# src/mmasim/mmasim/nv_ptx/sim.py TCGen05MMA: MMA_T_FDPA with F = 25, RZ-FP32, e_zero = -133) and MATLAB-tensor-core models/B200TC.m, FP8 inputs: fma = 32, neab = +2
# (25 fraction bits), frmode 'rz', global_alignment 1, min_exp_limit -133; GEMM.m keeps NoManBitsOut = 23
# for neab >= 0 (the result in FP32, cut toward zero); DeepGEMM issue #176 measured "25 bits" on a B200
# (tcgen05.mma.cta_group::1.kind::f8f6f4). A second model of the same authors, models/B200TCRN.m (16
# products per block, round to nearest), is B200_F8F6F4.with_(k=16, out_round="rn")
# (chain it twice per k32), kept as a parameter change.
B200_F8F6F4 = BlockFMA(
    "b200tc_f8f6f4", frac_bits=25, ref="exp_sum", d_ref="expo", d_stage="block", trunc="toward_zero",
    out_bits=23, out_round="rz", overflow="inf", min_exp=-133, zero_sign="positive",
    source="MMA-Sim (arXiv 2511.10909) TCGen05MMA; MATLAB-tensor-core models/B200TC.m; DeepGEMM issue #176 (25 bits "
           "on a B200); not yet run on a B200 here")
# kind::mxf4nvf4 (.block_scale.block16, K = 64 per instruction), where the PTX ISA (9.7.16.10.7, block
# scaling) gives only (A * scale_A) * (B * scale_B) + D: MMA-Sim's rule (arXiv 2511.10909, reported there
# bit-identical with B200 hardware; github.com/microsoft/MMA-Sim src/mmasim/mmasim/arithmetic/fdpa.py
# gst_fdpa / MMA_GST_FDPA and src/mmasim/mmasim/nv_ptx/sim.py TCGen05MMABlockScale: G = 16, F = 35, RZ-FP32,
# e_zero = -139): the 16 E2M1 products of each scale group are summed exactly and times s_a s_b; the group's
# window is e(s_a) + e(s_b), the scales' exponents only, kept whenever the group has a nonzero product (a group
# whose products cancel to 0 still sets the window); the four group sums and D are aligned on the largest
# window, each cut toward zero 35 fraction bits below it, summed exactly, the sum cut toward zero to FP32.
# Here: 40 first-level fraction bits are exact (a product a b s_a s_b has at most 8 below its scales' window),
# the second level has 35, and min_exp = -139 is e_zero (a zero term's window). Not yet run on a B200 here.
B200_MXF4NVF4 = BlockFMA(
    "b200_mxf4nvf4_mmasim", frac_bits=40, ref="exp_sum", d_ref="expo", d_stage="late", trunc="toward_zero",
    group=16, ref2="group_ref", frac_bits2=35, out_bits=23, out_round="rz", overflow="inf", min_exp=-139,
    zero_sign="positive", k=64, scale_window="scales_only", empty_group="no_product",
    source="MMA-Sim (arXiv 2511.10909; github.com/microsoft/MMA-Sim src/mmasim/mmasim/arithmetic/fdpa.py gst_fdpa, "
           "nv_ptx/sim.py TCGen05MMABlockScale), not yet run on a B200 here")
# The project's earlier candidate, kept for the probe: one block of the instruction's 64 products, each
# a_k b_k s_a s_b exact with its window at the sum of the four exponents, 35 fraction bits, the result in FP32
# cut toward zero (DeepGEMM issue #176 reports "34, 35, 36, 37 bits are tested" without a conclusion).
B200_MXF4NVF4_GUESS = BlockFMA(
    "b200_mxf4nvf4_guess", frac_bits=35, ref="exp_sum", d_ref="expo", d_stage="block", trunc="toward_zero",
    out_bits=23, out_round="rz", overflow="inf", min_exp=-133, zero_sign="positive", k=64,
    source="the earlier candidate (DeepGEMM issue #176: 34-37 bits tested, unresolved): one block of 64 products, "
           "windows with the elements' exponents")
PRESETS = {m.name: m for m in (EXACT_SUM, FP22_PLAIN, H100TC_MATLAB, H100TC_C, B200_F8F6F4, B200_MXF4NVF4,
                               B200_MXF4NVF4_GUESS)}

# ---- which model an MMA runs (the simulator's model/blockfma.h accumulation() and pelib.emulate) ----------

ACCUMULATIONS = ("tensor_core", "exact")
MMA_KINDS = ("wgmma_f8", "umma_f8f6f4", "umma_mxf4nvf4")   # the MMAs with a block-FMA model
MMA_MODELS = {
    "tensor_core": {"wgmma_f8": H100TC_MATLAB, "umma_f8f6f4": B200_F8F6F4, "umma_mxf4nvf4": B200_MXF4NVF4},
    "exact": {"wgmma_f8": EXACT_SUM, "umma_f8f6f4": EXACT_SUM, "umma_mxf4nvf4": ExactSum(k=64)},
}
# What each is: the book's numbers use tensor_core (the default).
ACCUMULATION_TEXT = {
    "tensor_core": "the tensor core's block FMA: Hopper wgmma FP8 measured bit for bit on an H100 "
                   "(13 fraction bits); Blackwell tcgen05 modelled (MMA-Sim's hardware-validated rule, not yet run "
                   "on a B200 here: f8f6f4 25 bits; mxf4nvf4 exact group sums of 16, 35 bits)",
    "exact": "the exact sum of each instruction's products and D, rounded once to FP32 (what a kernel that "
             "promotes every MMA to FP32, CUTLASS 2xAcc, approaches)",
}


def mma_models(accumulation="tensor_core", **overrides) -> dict:
    """{kind: model} for an accumulation name (ACCUMULATIONS) or a dict, with models replaced by keyword
    (e.g. umma_mxf4nvf4=B200_MXF4NVF4.with_(frac_bits=37))."""
    if isinstance(accumulation, dict):
        base = dict(accumulation)
    elif accumulation in MMA_MODELS:
        base = dict(MMA_MODELS[accumulation])
    else:
        raise ModelError(f"accumulation {accumulation!r}: one of {ACCUMULATIONS} (or a dict of models by kind)")
    for k, m in overrides.items():
        if k not in MMA_KINDS:
            raise ModelError(f"{k!r}: the MMAs with a model are {MMA_KINDS}")
        base[k] = m
    missing = [k for k in MMA_KINDS if k not in base]
    if missing:
        raise ModelError(f"accumulation models for {missing} missing: give every one of {MMA_KINDS}")
    return base


def cxx_params(model) -> list[int]:
    """The model as src/kernels/sim/model/blockfma.h BlockFma {frac_bits, out_bits, min_exp, block,
    round_nearest, group} (an exact sum: frac_bits 0). group 0: one alignment per block, windows with the
    elements' exponents; group > 0: MMA-Sim's block-scaled rule (exact group sums, windows from the scales,
    empty_group no_product; frac_bits is then the second level's). The C++ model has no knobs for the
    alternatives the probe ruled out (max_term or normalized windows, other groupings, floor cuts,
    satfinite, IEEE zero signs)."""
    if isinstance(model, ExactSum):
        return [0, 23, 0, 0, 0, 0]
    if not isinstance(model, BlockFMA):
        raise ModelError(f"{model!r} is no pelib.numerics.blockfma model")
    min_exp = -1000 if model.min_exp is None else model.min_exp
    if model.group != model.k:
        grouped = dict(ref="exp_sum", d_ref="expo", d_stage="late", trunc="toward_zero", overflow="inf",
                       zero_sign="positive", ref2="group_ref", interleave=False, scale_window="scales_only",
                       empty_group="no_product")
        odd = {k: getattr(model, k) for k, v in grouped.items() if getattr(model, k) != v}
        if model.frac_bits < 8:
            odd["frac_bits"] = model.frac_bits
        if odd:
            raise ModelError(f"{model.name}: the simulator's C++ block FMA models groups (group={model.group}) only as "
                             f"{grouped} with frac_bits >= 8 (exact group sums); this model sets {odd}")
        return [model.frac_bits2 or model.frac_bits, model.out_bits, min_exp, model.k, int(model.out_round == "rn"),
                model.group]
    plain = dict(ref="exp_sum", d_ref="expo", d_stage="block", trunc="toward_zero", overflow="inf",
                 zero_sign="positive", scale_window="with_elements")
    odd = {k: getattr(model, k) for k, v in plain.items() if getattr(model, k) != v}
    if odd:
        raise ModelError(f"{model.name}: the simulator's C++ block FMA models {plain} with group = k; this model "
                         f"sets {odd}")
    return [model.frac_bits, model.out_bits, min_exp, model.k, int(model.out_round == "rn"), 0]


def scaled_windows(model, elem_expo, scale_expo) -> np.ndarray:
    """The window exponents of block-scaled operand elements under `model`: elem_expo [..., K] (window_exponents
    of the elements) plus scale_expo [..., K] (each element's scale's, the scale repeated over its block), or
    the scale's alone where model.scale_window is scales_only (MMA-Sim's kind::mxf4nvf4). A product's window
    is then the sum of its two operands' (mma)."""
    scale_expo = np.asarray(scale_expo, np.int32)
    if getattr(model, "scale_window", "with_elements") == "scales_only":
        return np.broadcast_to(scale_expo, np.shape(elem_expo)).astype(np.int32)
    return (np.asarray(elem_expo, np.int32) + scale_expo).astype(np.int32)


# Window exponents of the formats the MMAs read: a normal number's exponent, emin for a subnormal (OCP MX
# v1.0 and the PTX ISA's alternate formats: E4M3 / UE4M3 bias 7, E5M2 bias 15, E2M1 bias 1, UE8M0 2^(v-127)).
def _expo_table(exp_bits: int, mant_bits: int, bias: int, n: int) -> np.ndarray:
    e = (np.arange(n) >> mant_bits) & ((1 << exp_bits) - 1)
    return (np.maximum(e, 1) - bias).astype(np.int32)


_EXPOS = {"e4m3": _expo_table(4, 3, 7, 256), "ue4m3": _expo_table(4, 3, 7, 256), "e5m2": _expo_table(5, 2, 15, 256),
          "e2m1": _expo_table(2, 1, 1, 16), "ue8m0": (np.arange(256) - 127).astype(np.int32)}


def window_exponents(b, fmt: str) -> np.ndarray:
    """The exponent the aligner reads for every element of operand bytes b [..., kbytes], in
    pelib.emulate.decode_values' layout (e2m1: two per byte, low nibble first)."""
    b = np.asarray(b, np.uint8)
    if fmt not in _EXPOS:
        raise ModelError(f"format {fmt!r}: window exponents for {sorted(_EXPOS)}")
    if fmt == "e2m1":
        out = np.empty(b.shape[:-1] + (2 * b.shape[-1],), np.int32)
        out[..., 0::2] = _EXPOS["e2m1"][b & 15]
        out[..., 1::2] = _EXPOS["e2m1"][b >> 4]
        return out
    return _EXPOS[fmt][b]


def matmul(model, av, ae, bv, be, k_instr: int = K_BLOCK, d=None) -> np.ndarray:
    """A [M, K] . B [N, K]^T as K / k_instr MMA instructions in K order under `model` (mma), D carried in
    FP32, the first instruction reading D only when d (FP32 bits [M, N]) is given: the FP32 bits [M, N]."""
    av = np.asarray(av, np.float64)
    if av.shape[-1] % k_instr:
        raise ModelError(f"matmul: K = {av.shape[-1]} is no whole number of {k_instr}-product instructions")
    acc = np.zeros((av.shape[0], np.shape(bv)[0]), np.uint32) if d is None else np.asarray(d, np.uint32)
    for k0 in range(0, av.shape[-1], k_instr):
        ks = slice(k0, k0 + k_instr)
        acc = mma(model, av[:, ks], np.asarray(ae)[:, ks], np.asarray(bv)[:, ks], np.asarray(be)[:, ks], acc,
                  scale_d=k0 > 0 or d is not None)
    return acc


def mma(model, av, ae, bv, be, d, scale_d: bool = True, rows_per_chunk: int = 16) -> np.ndarray:
    """One MMA instruction under `model`: D'[i, j] = A[i] . B[j] + D[i, j] for operand values av [M, k],
    bv [N, k] (float64, exact, NaN/Inf kept; block-scaled: already times their scales) with window exponents
    ae, be (window_exponents; block-scaled: plus the scales'), D FP32 bits [M, N]. Returns FP32 bits [M, N]."""
    av, bv = np.asarray(av, np.float64), np.asarray(bv, np.float64)
    ae, be = np.asarray(ae, np.int32), np.asarray(be, np.int32)
    d = np.asarray(d, np.uint32)
    if av.shape[-1] != bv.shape[-1] or d.shape != (av.shape[0], bv.shape[0]):
        raise ModelError(f"mma: A {av.shape}, B {bv.shape}, D {d.shape}: A [M, k], B [N, k], D [M, N]")
    k = getattr(model, "k", av.shape[-1])
    if av.shape[-1] % k:
        raise ModelError(f"mma: {av.shape[-1]} products per instruction is no whole number of {model.name}'s "
                         f"blocks of {k}")
    out = np.empty(d.shape, np.uint32)
    with np.errstate(invalid="ignore", over="ignore"):
        for r in range(0, av.shape[0], rows_per_chunk):
            rows = slice(r, r + rows_per_chunk)
            acc, first = d[rows], scale_d
            for k0 in range(0, av.shape[-1], k):   # blocks in K order, D carried (a block smaller than the instruction)
                ks = slice(k0, k0 + k)
                pv = av[rows, None, ks] * bv[None, :, ks]
                pe = ae[rows, None, ks] + be[None, :, ks]
                acc, first = model.from_products(pv, pe, acc, first), True
            out[rows] = acc
    return out


def chain(model, a, b, d, fmt="e4m3", first_scale_d: bool = True) -> np.ndarray:
    """K = 32 * steps through `model`, one k32 instruction after the other in K order, the FP32 bits of
    each result the next one's D (scale-d of the first instruction as given, then 1)."""
    a, b = np.asarray(a, np.uint8), np.asarray(b, np.uint8)
    k = getattr(model, "k", K_BLOCK)
    if a.shape[-1] != b.shape[-1] or a.shape[-1] % k:
        raise ModelError(f"chain: a {a.shape} and b {b.shape} need one K, a multiple of {model.name}'s k = {k}")
    out = np.asarray(d, np.uint32)
    for s in range(a.shape[-1] // k):
        sl = slice(k * s, k * (s + 1))
        out = model(a[..., sl], b[..., sl], out, fmt, scale_d=bool(s > 0 or first_scale_d))
    return out


def mismatches(got, want) -> dict:
    """How many FP32 results differ: `bits` (any bit), `values` (two NaNs count as equal), `nan_payload`."""
    got, want = np.asarray(got, np.uint32), np.asarray(want, np.uint32)
    differ = got != want
    both_nan = np.isnan(fp32_values(got)) & np.isnan(fp32_values(want))
    return {"bits": int(differ.sum()), "values": int((differ & ~both_nan).sum()),
            "nan_payload": int((differ & both_nan).sum())}
