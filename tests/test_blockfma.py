"""pelib.numerics.blockfma: the block-FMA models against an exact rational reference, hand-derived vectors, the exact sum."""
import math
import struct
from fractions import Fraction

import numpy as np
import pytest

from pelib.numerics import blockfma as F
from pelib import emulate as E

# ---- an independent reference: Python integers and Fractions, one vector at a time ------------------


def _fp8_value(byte, fmt):
    """(value as Fraction, floor(log2) exponent with subnormals at emin, leading-bit exponent) or None for NaN/Inf."""
    mb, eb, bias = (3, 4, 7) if fmt == "e4m3" else (2, 5, 15)
    s, e, m = byte >> 7, (byte >> mb) & ((1 << eb) - 1), byte & ((1 << mb) - 1)
    if fmt == "e4m3" and e == 15 and m == 7 or fmt == "e5m2" and e == 31:
        return None
    sig = Fraction(m, 1 << mb) + (1 if e else 0)
    v = sig * Fraction(2) ** (max(e, 1) - bias)
    return (-v if s else v), max(e, 1) - bias


def _lead(v: Fraction) -> int:
    v = abs(v)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    while Fraction(2) ** e > v:
        e -= 1
    while Fraction(2) ** (e + 1) <= v:
        e += 1
    return e


def _cut(x: Fraction, mode: str) -> int:
    if mode == "toward_zero":
        return math.trunc(x)
    if mode == "floor":
        return math.floor(x)
    return round(x)   # Fraction.__round__: half to even


def _f32(v: Fraction, out_bits: int, rnd: str) -> int:
    if v == 0:
        return 0
    e = _lead(v)
    lsb = max(e - out_bits, -126 - out_bits, -149)
    q = abs(v) / Fraction(2) ** lsb
    n = math.trunc(q) if rnd == "rz" else round(q)
    r = n * Fraction(2) ** lsb
    return struct.unpack("<I", struct.pack("<f", float(-r if v < 0 else r)))[0]


def reference(a, b, d_bits, p: F.BlockFMA, fmt="e4m3"):
    """The block FMA of one vector, spelled out with exact rationals."""
    d = struct.unpack("<f", struct.pack("<I", int(d_bits)))[0]
    dv = Fraction(d)
    de = None
    if dv != 0:
        de = _lead(dv) if p.d_ref == "norm" else max(_lead(dv), -126)
    terms = []
    for k in range(32):
        va, ea = _fp8_value(int(a[k]), fmt)
        vb, eb = _fp8_value(int(b[k]), fmt)
        pv = va * vb
        if pv == 0:
            continue
        ref = {"exp_sum": ea + eb, "max_term": _lead(pv),
               "exp_sum_normalized": _lead(va) + _lead(vb)}[p.ref]
        terms.append((k, pv, ref))

    def level(items, frac_bits, extra=None):
        refs = [r for _, _, r in items] + ([extra[1]] if extra else [])
        if not refs:
            return Fraction(0)
        r = max(refs)
        grid = Fraction(2) ** (r - frac_bits)
        total = sum(_cut(v / grid, p.trunc) for _, v, _ in items) + (_cut(extra[0] / grid, p.trunc) if extra else 0)
        return total * grid, r

    dterm = (dv, de) if dv != 0 else None
    ng = 32 // p.group
    if ng == 1 and p.d_stage == "block":
        got = level(terms, p.frac_bits, dterm)
        value = got[0] if isinstance(got, tuple) else got
    else:
        sums = []
        for g in range(ng):
            mine = [t for t in terms if (t[0] % ng if p.interleave else t[0] // p.group) == g]
            got = level(mine, p.frac_bits, dterm if (g == 0 and p.d_stage == "block") else None)
            if isinstance(got, tuple) and got[0] != 0:
                s, r = got
                ref2 = _lead(s) if p.ref2 == "max_term" else r
                sums.append((g, s, ref2))
        got = level(sums, p.frac_bits2 or p.frac_bits, dterm if p.d_stage == "late" else None)
        value = got[0] if isinstance(got, tuple) else got
    return _f32(value, p.out_bits, p.out_round)


VARIANTS = [
    F.H100TC_MATLAB, F.H100TC_C, F.FP22_PLAIN,
    F.H100TC_MATLAB.with_(trunc="floor"), F.H100TC_MATLAB.with_(trunc="nearest_even", out_round="rn"),
    F.H100TC_MATLAB.with_(frac_bits=8), F.H100TC_MATLAB.with_(frac_bits=25, out_bits=23),
    F.H100TC_MATLAB.with_(group=16), F.H100TC_MATLAB.with_(group=8, interleave=True, ref2="group_ref"),
    F.H100TC_MATLAB.with_(group=16, d_stage="late", frac_bits2=20), F.FP22_PLAIN.with_(d_stage="late", group=4),
]


def _random_vectors(rng, n, fmt):
    spread = rng.integers(0, 14, n)[:, None]
    top = rng.integers(-4, 8, n)[:, None]
    if fmt == "e4m3":
        field = np.clip(top - rng.integers(0, 1 + spread, (n, 32)), -7, 8) + 7
        mant = rng.integers(0, 8, (n, 32))
        mant = np.where(field == 15, np.minimum(mant, 6), mant)
        a = (rng.integers(0, 2, (n, 32)) << 7 | field << 3 | mant).astype(np.uint8)
        b = rng.integers(0, 2, (n, 32)) << 7 | rng.integers(4, 10, (n, 32)) << 3 | rng.integers(0, 8, (n, 32))
    else:
        field = np.clip(top - rng.integers(0, 1 + spread, (n, 32)), -15, 15) + 15
        a = (rng.integers(0, 2, (n, 32)) << 7 | field << 2 | rng.integers(0, 4, (n, 32))).astype(np.uint8)
        b = rng.integers(0, 2, (n, 32)) << 7 | rng.integers(12, 18, (n, 32)) << 2 | rng.integers(0, 4, (n, 32))
    a = np.where(rng.random((n, 32)) < 0.2, 0, a).astype(np.uint8)
    b = b.astype(np.uint8)
    dexp = np.clip(top[:, 0] + rng.integers(-30, 12, n), -126, 127) + 127
    d = (rng.integers(0, 2, n) << 31 | dexp << 23 | rng.integers(0, 1 << 23, n)).astype(np.uint32)
    d = np.where(rng.random(n) < 0.2, 0, d).astype(np.uint32)
    d = np.where(rng.random(n) < 0.05, rng.integers(1, 1 << 23, n), d).astype(np.uint32)   # subnormal D
    return a, b, d


@pytest.mark.parametrize("model", VARIANTS, ids=[f"{m.name}-{i}" for i, m in enumerate(VARIANTS)])
def test_vectorized_models_equal_the_exact_rational_reference(model):
    rng = np.random.default_rng(hash(model) % 2**32)
    for fmt in ("e4m3", "e5m2"):
        a, b, d = _random_vectors(rng, 150, fmt)
        got = model(a, b, d, fmt)
        want = [reference(a[i], b[i], d[i], model, fmt) for i in range(len(d))]
        bad = [(i, hex(int(got[i])), hex(w)) for i, w in enumerate(want) if int(got[i]) != w]
        assert not bad, f"{model.name} ({fmt}): {len(bad)} of {len(d)} differ, e.g. {bad[:4]}"


# ---- hand-derived vectors: what each knob does --------------------------------------------------------

def _vec(pairs, d=0):
    """One vector from (a byte, b byte) pairs at k = 0, 1, ...; the rest zero."""
    a, b = np.zeros(32, np.uint8), np.zeros(32, np.uint8)
    for k, (x, y) in enumerate(pairs):
        a[k], b[k] = x, y
    return a, b, np.uint32(d)


ONE = 0x38                   # E4M3 1.0
def e4m3_pow2(e):            # 2^e, e in -9..8
    return 0x38 + (e << 3) if e >= -6 else 1 << (e + 9)


def bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def test_thirteen_bits_survive_below_the_largest_term_and_are_cut_toward_zero():
    m = F.H100TC_MATLAB
    for j, kept in ((13, True), (14, False)):
        a, b, d = _vec([(ONE, ONE), (e4m3_pow2(-(j // 2)), e4m3_pow2(-(j - j // 2)))])   # 1 + 2^-j
        assert int(m(a, b, d)) == bits(1 + 2.0 ** -j if kept else 1.0)
    # 1 - 2^-14: magnitude truncation drops the small term; a sign-filling shift borrows one unit of 2^-13
    a, b, d = _vec([(ONE, ONE), (e4m3_pow2(-7) | 0x80, e4m3_pow2(-7))])
    assert int(m(a, b, d)) == bits(1.0)
    assert int(m.with_(trunc="floor")(a, b, d)) == bits(1 - 2.0 ** -13)


def test_the_window_starts_at_the_exponent_sum_not_at_a_product_in_2_4():
    # 1.875 * 1.875 = 3.515625 (exponent sum 0, leading bit 2^1), - 1.875 and + 2^-13: the small term is
    # kept when the window is counted from the exponent sum (MATLAB-tensor-core), lost when it is counted
    # from the leading bit (max_term); the result 1.640625 + 2^-13 fits 13 fraction bits either way
    a, b, d = _vec([(0x3F, 0x3F), (0xBF, ONE), (e4m3_pow2(-6), e4m3_pow2(-7))])
    assert int(F.H100TC_MATLAB(a, b, d)) == bits(1.640625 + 2.0 ** -13)
    assert int(F.H100TC_MATLAB.with_(ref="max_term")(a, b, d)) == bits(1.640625)


def test_d_alone_keeps_13_fraction_bits_and_the_result_is_cut_again_after_a_carry():
    d = bits(1.0 + 2.0 ** -13 + 2.0 ** -20)                  # SageAttention2: the low 10 bits of D vanish
    a, b, _ = _vec([])
    assert int(F.H100TC_MATLAB(a, b, d)) == bits(1.0 + 2.0 ** -13)
    assert int(F.EXACT_SUM(a, b, d)) == d
    # 1.5 + 1.5 + 2^-12 = 3 + 2^-12: all terms on the grid 2^-13 of exponent 0, but the sum's own 13 bits
    # stop at 2^-12 after the carry into 2^1, so the MATLAB model cuts nothing here...
    a, b, d = _vec([(0x3C, ONE), (0x3C, ONE), (e4m3_pow2(-6), e4m3_pow2(-6))])
    assert int(F.H100TC_MATLAB(a, b, d)) == bits(3 + 2.0 ** -12)
    # ...while 1.5 + 1.5 + 2^-13 carries a bit the 13-bit result cannot hold (the C port keeps it)
    a, b, d = _vec([(0x3C, ONE), (0x3C, ONE), (e4m3_pow2(-6), e4m3_pow2(-7))])
    assert int(F.H100TC_MATLAB(a, b, d)) == bits(3.0)
    assert int(F.H100TC_C(a, b, d)) == bits(3 + 2.0 ** -13)


def test_zero_signs_and_specials():
    neg0 = 0x80000000
    a, b, _ = _vec([(0x80, ONE)] * 32)                         # 32 products -0, D = -0
    assert int(F.H100TC_MATLAB(a, b, np.uint32(neg0))) == 0    # the public models print +0
    assert int(F.H100TC_MATLAB.with_(zero_sign="ieee")(a, b, np.uint32(neg0))) == neg0
    assert int(F.H100TC_MATLAB.with_(zero_sign="ieee")(a, b, np.uint32(0))) == 0
    assert int(F.EXACT_SUM(a, b, np.uint32(neg0))) == neg0     # double arithmetic: -0 + -0 = -0
    a, b, _ = _vec([(0x7F, ONE)])
    assert int(F.H100TC_MATLAB(a, b, np.uint32(0))) == F.NAN_BITS
    a, b, _ = _vec([(ONE, ONE)])
    assert int(F.H100TC_MATLAB(a, b, np.uint32(0xFF800000))) == 0xFF800000
    # E5M2: Inf * 0 and Inf - Inf are NaN, Inf + finite is Inf
    inf, one5 = 0x7C, 0x3C
    for pairs, want in (([(inf, 0x00)], F.NAN_BITS), ([(inf, one5), (inf | 0x80, one5)], F.NAN_BITS),
                        ([(inf, one5), (one5, one5)], 0x7F800000)):
        a, b, _ = _vec(pairs)
        assert int(F.H100TC_MATLAB(a, b, np.uint32(0), fmt="e5m2")) == want


def test_exact_sum_is_the_simulators_double_sum():
    """gmma.h: D, then + a_k b_k in double in K order, one rounding to FP32 (nearest even)."""
    rng = np.random.default_rng(3)
    a, b, d = _random_vectors(rng, 2000, "e4m3")
    got = F.EXACT_SUM(a, b, d)
    va, vb = E.decode_values(a, "e4m3"), E.decode_values(b, "e4m3")
    for i in range(0, 2000, 97):
        s = float(np.uint32(d[i]).view(np.float32))
        for k in range(32):
            s += va[i, k] * vb[i, k]
        assert int(got[i]) == bits(np.float32(s))


def test_decoders_agree_with_emulate_and_ieee():
    x = np.arange(256, dtype=np.uint8)
    for fmt in ("e4m3", "e5m2"):
        np.testing.assert_array_equal(F.values(x, fmt), E.decode_values(x[None], fmt)[0])
    u = np.random.default_rng(0).integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    t = F.decode_fp32(u)
    v = np.ldexp(t.mag.astype(np.float64), t.lsb.astype(np.int32)) * np.where(t.sign, -1, 1)
    with np.errstate(invalid="ignore"):
        f = u.view(np.float32).astype(np.float64)
    ok = np.isfinite(f)
    np.testing.assert_array_equal(v[ok], f[ok])
    assert (t.nan == np.isnan(f)).all() and (t.inf == np.isinf(f)).all()
    assert F.ilog2(np.array([1, 2, 3, 2**53 - 1, 2**53, 2**62])).tolist() == [0, 1, 1, 52, 53, 62]


def test_chain_feeds_each_result_to_the_next_instruction():
    rng = np.random.default_rng(4)
    a, b, d = _random_vectors(rng, 64, "e4m3")
    a2, b2, _ = _random_vectors(rng, 64, "e4m3")
    m = F.H100TC_MATLAB
    got = F.chain(m, np.concatenate([a, a2], -1), np.concatenate([b, b2], -1), d)
    np.testing.assert_array_equal(got, m(a2, b2, m(a, b, d)))
    first0 = F.chain(m, np.concatenate([a, a2], -1), np.concatenate([b, b2], -1), d, first_scale_d=False)
    np.testing.assert_array_equal(first0, m(a2, b2, m(a, b, np.zeros_like(d))))


def test_operands_broadcast_like_a_probe_tile():
    rng = np.random.default_rng(5)
    A = rng.integers(0, 0x7E, (4, 32)).astype(np.uint8)
    B = rng.integers(0, 0x7E, (6, 32)).astype(np.uint8)
    D = rng.integers(0, 1 << 30, (4, 6)).astype(np.uint32)
    for m in (F.EXACT_SUM, F.H100TC_MATLAB, F.FP22_PLAIN.with_(group=8)):
        tile = m(A[:, None, :], B[None, :, :], D)
        flat = m(np.repeat(A, 6, 0), np.tile(B, (4, 1)), D.reshape(-1))
        np.testing.assert_array_equal(tile.reshape(-1), flat)


def test_bad_models_and_operands_say_what_to_change():
    with pytest.raises(F.ModelError, match="trunc='round'"):
        F.BlockFMA("x", trunc="round")
    with pytest.raises(F.ModelError, match="1..40"):
        F.BlockFMA("x", frac_bits=41)
    with pytest.raises(F.ModelError, match="power of two"):
        F.BlockFMA("x", group=12)
    with pytest.raises(F.ModelError, match="chain"):
        F.H100TC_MATLAB(np.zeros((2, 64), np.uint8), np.zeros((2, 64), np.uint8), np.zeros(2, np.uint32))
    with pytest.raises(F.ModelError, match="FP8 format"):
        F.values(np.zeros(2, np.uint8), "e3m4")


def test_mismatches_counts_nan_payloads_apart():
    got = np.array([0x7FC00000, 0x3F800000, 0x7FFFFFFF], np.uint32)
    want = np.array([0x7FFFFFFF, 0x3F800001, 0x7FFFFFFF], np.uint32)
    assert F.mismatches(got, want) == {"bits": 2, "values": 1, "nan_payload": 1}


def test_the_block_scaled_knobs_and_what_they_refuse():
    """scale_window and empty_group take their named values only; the C++ twin takes groups only as MMA-Sim's
    rule (exact group sums, windows from the scales, a group with a nonzero product kept), and names the knob."""
    with pytest.raises(F.ModelError, match="scale_window='elements'"):
        F.B200_MXF4NVF4.with_(scale_window="elements")
    with pytest.raises(F.ModelError, match="empty_group='never'"):
        F.B200_MXF4NVF4.with_(empty_group="never")
    assert F.cxx_params(F.B200_MXF4NVF4) == [35, 23, -139, 64, 0, 16]
    assert F.cxx_params(F.B200_MXF4NVF4_GUESS) == [35, 23, -133, 64, 0, 0]
    with pytest.raises(F.ModelError, match="empty_group"):
        F.cxx_params(F.B200_MXF4NVF4.with_(empty_group="sum_zero"))
    with pytest.raises(F.ModelError, match="frac_bits >= 8"):
        F.cxx_params(F.B200_MXF4NVF4.with_(frac_bits=6))
    with pytest.raises(F.ModelError, match="scale_window"):
        F.cxx_params(F.B200_MXF4NVF4_GUESS.with_(scale_window="scales_only"))
    # the windows: the scales' alone for MMA-Sim's rule, elements plus scales for the earlier candidate
    e, s = np.array([[0, 1, 2]]), np.array([[-3, -3, -3]])
    assert F.scaled_windows(F.B200_MXF4NVF4, e, s).tolist() == [[-3, -3, -3]]
    assert F.scaled_windows(F.B200_MXF4NVF4_GUESS, e, s).tolist() == [[-3, -2, -1]]


def test_a_group_that_sums_to_zero_keeps_its_window():
    """MMA-Sim's worked case: a group of products under scales 2^8 x 2^8 cancelling to exactly 0 sets the window
    (R = 16, grid 2^-19), so a D of 2^-18 + 2^-40 keeps only 2^-18; with the group dropped (sum_zero) D is exact."""
    pv = np.zeros(64)
    pv[0], pv[1] = 2.0 ** 16, -(2.0 ** 16)
    pe = np.full(64, 16)
    d = np.float32(2.0 ** -18 + 2.0 ** -40).view(np.uint32)
    assert F.fp32_values(F.B200_MXF4NVF4.from_products(pv, pe, d)) == np.float32(2.0 ** -18)
    dropped = F.B200_MXF4NVF4.with_(empty_group="sum_zero").from_products(pv, pe, d)
    assert dropped == d
