"""The tensor-core probe's test vectors: directed classes that each pin one open bit of the block FMA, and random ones.

A vector is one output of a probe tile (src/kernels/probes/wgmma_numerics.cu): row m of A . row n of B
plus D[m][n], K = 32 * steps. A class fills whole tiles, A [tiles, 64, K] and B [tiles, N, K] (E4M3
bytes) and D [tiles, 64, N] (FP32 bits), so every one of the 64 x N outputs of a tile is a vector: a
class that needs a particular pair puts its left factors in the rows and its right factors in the
columns, and every cross pair is a valid vector of the same kind. Directed classes follow the published
method (Fasi, Higham, Mikaitis & Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 7:e330,
2021; Khattak & Mikaitis, arXiv 2512.07004): each isolates one feature (how many bits survive the
alignment, which exponent sets it, truncation direction, carry-out, grouping, specials) by placing
terms whose results differ under the competing hypotheses. CLASSES lists them with what each pins.

Every class is generated on the host from its own seeded stream (numpy PCG64 seeded with [seed,
crc32(name)]), so a class is the same whatever else runs.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

M = 64                          # rows of a wgmma tile (m64)
# Launch flags by name; their bits are the probe's exports probe_flag_<name> (pelib.measure.tcprobe reads them).
FIRST_ZERO, WAIT_EACH = "first_zero", "wait_each"
E4M3_NAN = (0x7F, 0xFF)
FP32_QNAN, FP32_INF, FP32_MAX = 0x7FC00000, 0x7F800000, 0x7F7FFFFF


@dataclass(frozen=True)
class VectorClass:
    """One class of probe vectors: its tiles' shape and launch flags, and what its results decide."""

    name: str
    group: str          # the output file it goes to (directed, random, chains, shapes)
    tiles: int
    steps: int
    flags: tuple        # names of the probe's launch flags (FIRST_ZERO, WAIT_EACH)
    make: Callable      # (rng, tiles, n, steps) -> (A, B, D)
    pins: str
    n: int = 256
    quick_tiles: int = 1
    fmt: str = "e4m3"   # A's and B's FP8 format (e5m2: the probe's PROBE_E5M2 build, N = 256)

    @property
    def k(self) -> int:
        return 32 * self.steps

    def generate(self, seed: int = 0, tiles: int | None = None, n: int | None = None):
        """(A uint8 [T, 64, K], B uint8 [T, N, K], D uint32 [T, 64, N]) for T tiles (default: the class's)."""
        t = self.tiles if tiles is None else tiles
        nn = self.n if n is None else n
        rng = np.random.default_rng([seed, zlib.crc32(self.name.encode())])
        a, b, d = self.make(rng, t, nn, self.steps)
        a, b = np.ascontiguousarray(a, np.uint8), np.ascontiguousarray(b, np.uint8)
        d = np.ascontiguousarray(d, np.uint32)
        want = ((t, M, self.k), (t, nn, self.k), (t, M, nn))
        if (a.shape, b.shape, d.shape) != want:
            raise AssertionError(f"class {self.name}: made {a.shape}, {b.shape}, {d.shape}, not {want}")
        return a, b, d


# ---- building blocks -------------------------------------------------------------------------------

def e4m3(sign, exp, mant):
    """E4M3 bytes of normal numbers (-1)^sign (1 + mant/8) 2^exp, exp in -6..8 (mant <= 6 at exp 8); an exp
    below -6 gives the subnormal mant/8 * 2^-6 (mant 1..7) instead."""
    sign, exp, mant = (np.asarray(x, np.int64) for x in (sign, exp, mant))
    field = np.clip(exp + 7, 0, 15)
    mant = np.where(field == 15, np.minimum(mant, 6), mant)
    mant = np.where(field == 0, np.maximum(mant, 1), mant)
    return ((sign << 7) | (field << 3) | mant).astype(np.uint8)


def e5m2(sign, exp, mant):
    """E5M2 bytes of normal numbers (-1)^sign (1 + mant/4) 2^exp, exp in -14..15; an exp below -14 gives
    the subnormal mant/4 * 2^-14 (mant 1..3)."""
    sign, exp, mant = (np.asarray(x, np.int64) for x in (sign, exp, mant))
    field = np.clip(exp + 15, 0, 30)
    mant = np.where(field == 0, np.maximum(mant, 1), mant)
    return ((sign << 7) | (field << 2) | mant).astype(np.uint8)


def rand_e5m2(rng, shape, exp_lo, exp_hi, sign=None, subnormal=0.0):
    exp = rng.integers(exp_lo, exp_hi + 1, shape)
    if subnormal:
        exp = np.where(rng.random(shape) < subnormal, -15, exp)
    s = rng.integers(0, 2, shape) if sign is None else np.broadcast_to(sign, shape)
    return e5m2(s, exp, rng.integers(0, 4, shape))


def rand_e4m3(rng, shape, exp_lo, exp_hi, sign=None, subnormal=0.0):
    """Random E4M3 with exponent uniform in [exp_lo, exp_hi], random mantissa, random sign (or the given one);
    a fraction `subnormal` of them subnormal."""
    exp = rng.integers(exp_lo, exp_hi + 1, shape)
    if subnormal:
        exp = np.where(rng.random(shape) < subnormal, -7, exp)
    s = rng.integers(0, 2, shape) if sign is None else np.broadcast_to(sign, shape)
    return e4m3(s, exp, rng.integers(0, 8, shape))


def f32(sign, exp, frac23):
    """FP32 bits of (-1)^sign (1 + frac/2^23) 2^exp, exp in -126..127."""
    sign, exp, frac = (np.asarray(x, np.int64) for x in (sign, exp, frac23))
    return ((sign << 31) | (np.clip(exp + 127, 1, 254) << 23) | (frac & 0x7FFFFF)).astype(np.uint32)


def rand_f32(rng, shape, exp, sign=None):
    """Random FP32 with the given exponent(s), a random 23-bit fraction and a random sign (or the given one)."""
    s = rng.integers(0, 2, shape) if sign is None else np.broadcast_to(sign, shape)
    return f32(s, np.broadcast_to(exp, shape), rng.integers(0, 1 << 23, shape))


def expo(x):
    """floor(log2 |v|) of E4M3 bytes (emin -6 for subnormals), as the exponent-sum reference reads it."""
    f = (np.asarray(x, np.int64) >> 3) & 15
    return np.maximum(f, 1) - 7


def zeros(t, n, k):
    return np.zeros((t, M, k), np.uint8), np.zeros((t, n, k), np.uint8), np.zeros((t, M, n), np.uint32)


def from_values(x):
    """float values -> E4M3 bytes, nearest even, saturating (torch's float8_e4m3fn conversion)."""
    import torch   # pelib imports torch lazily (device-free modules stay light)
    return torch.from_numpy(np.asarray(x, np.float32)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def exp_sum_of(a_row, b_col):
    """[T, 64, N] exponent sums of row and column factors [T, 64] and [T, N]."""
    return expo(a_row)[:, :, None] + expo(b_col)[:, None, :]


# ---- directed classes --------------------------------------------------------------------------------

def _single_product(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    ks = [0, 7, 16, 31, 3, 12, 20, 29]
    for i in range(t):
        k = ks[i % len(ks)]
        a[i, :, k] = (np.arange(M) + M * (i % 4)) % 256
        b[i, :, k] = np.arange(n) % 256
        d[i] = 0x80000000 if (i // 4) % 2 else 0
    return a, b, d


def _d_passthrough(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    zero_bytes = [(0x00, 0x00), (0x00, 0x80), (0x80, 0x80), (0x80, 0x00)]
    for i in range(t):
        za, zb = zero_bytes[i % 4]
        a[i, :, :] = za
        b[i, :, :] = zb
        shape = (M, n)
        v = rand_f32(rng, shape, rng.integers(-126, 128, shape))
        keep = rng.integers(0, 24, shape)                       # values with exactly 1 + keep significant bits
        frac = rng.integers(0, 1 << 23, shape) & ~((np.int64(1) << (23 - keep)) - 1)
        frac = np.where(keep > 0, frac | (np.int64(1) << (23 - keep)), 0)
        v = np.where(rng.random(shape) < 0.3, f32(rng.integers(0, 2, shape), rng.integers(-30, 31, shape), frac), v)
        sub = (rng.integers(1, 1 << 23, shape) | (rng.integers(0, 2, shape) << 31)).astype(np.uint32)
        v = np.where(rng.random(shape) < 0.1, sub, v)
        specials = np.array([0, 0x80000000, FP32_INF, 0xFF800000, FP32_QNAN, 0xFFC00000, 0x7F800001, 0x7FC12345,
                             0xFFFFFFFF, FP32_MAX, 0xFF7FFFFF, 0x00800000, 0x80800000, 0x00000001, 0x807FFFFF,
                             0x3F800000, 0x3F800001, 0x3FFFFFFF], np.uint32)
        v.reshape(-1)[:len(specials)] = specials
        d[i] = v
    return a, b, d


def _d_vs_product(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        k = (5 * i + 3) % 32
        ra = rand_e4m3(rng, M, -4, 6, subnormal=0.02)
        cb = rand_e4m3(rng, n, -4, 6, subnormal=0.02)
        a[i, :, k], b[i, :, k] = ra, cb
        e = exp_sum_of(ra[None], cb[None])[0]
        delta = rng.integers(-30, 31, (M, n))
        d[i] = rand_f32(rng, (M, n), np.clip(e + delta, -126, 127))
        few = rng.random((M, n)) < 0.25                         # D with few significant bits
        d[i] = np.where(few, d[i] & ~np.uint32((1 << int(rng.integers(8, 20))) - 1), d[i])
    return a, b, d


def _two_products(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    pos = [(0, 1), (0, 16), (5, 6), (3, 28), (15, 16), (8, 9), (30, 31), (31, 0)]
    for i in range(t):
        k1, k2 = pos[i % len(pos)]
        a[i, :, k1] = rand_e4m3(rng, M, 4, 8)
        b[i, :, k1] = rand_e4m3(rng, n, 4, 8)
        a[i, :, k2] = rand_e4m3(rng, M, -6, 8, subnormal=0.05)
        b[i, :, k2] = rand_e4m3(rng, n, -6, 8, subnormal=0.05)
        d[i] = 0x80000000 if i % 4 == 3 else 0
    return a, b, d


def _many_small(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        a[i, :, 0] = rand_e4m3(rng, M, 6, 8, sign=0)
        b[i, :, 0] = rand_e4m3(rng, n, 5, 8, sign=0)
        # small terms: row exponents and column exponents such that the offset below the big product
        # runs over 8..22 across the tile
        ea = rng.integers(-2, 5, M)[:, None] + np.zeros((M, 31), np.int64)
        eb = rng.integers(-4, 3, n)[:, None] + np.zeros((n, 31), np.int64)
        sign = [np.ones((M, 31), np.int64), np.zeros((M, 31), np.int64), rng.integers(0, 2, (M, 31)),
                np.tile(np.arange(31) % 2, (M, 1))][i % 4]
        a[i, :, 1:] = e4m3(sign, ea, rng.integers(0, 8, (M, 31)))
        b[i, :, 1:] = e4m3(0, eb, rng.integers(0, 8, (n, 31)))
        d[i] = 0
    return a, b, d


def _carry_out(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        sign = [0, 0, 1, None][i % 4]
        # the top product of each row at e_a + e_b, the others up to 6 binades lower: their bits fill the
        # 13-bit window, and 32 of them carry up to 5 more bits above it
        ea, eb = rng.integers(0, 6, M), rng.integers(-2, 3, n)
        ek = ea[:, None] - rng.integers(0, 7, (M, 32))
        ek[:, 0] = ea
        a[i, :, :32] = e4m3(rng.integers(0, 2, (M, 32)) if sign is None else sign, ek, rng.integers(0, 8, (M, 32)))
        b[i, :, :32] = e4m3(0, eb[:, None], rng.integers(0, 8, (n, 32)))
        e = ea[:, None] + eb[None, :]
        dsign = 1 if sign == 1 else 0
        d[i] = [np.zeros((M, n), np.uint32), rand_f32(rng, (M, n), e, dsign), rand_f32(rng, (M, n), e + 3, dsign),
                rand_f32(rng, (M, n), e - 5)][i % 4]
    return a, b, d


def _cancellation(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        big_a = rand_e4m3(rng, M, 4, 8)
        big_b = rand_e4m3(rng, n, 4, 8, sign=0)
        small_a = rand_e4m3(rng, (M, 29), -6, 4, subnormal=0.02)
        small_b = rand_e4m3(rng, (n, 29), -4, 4)
        a[i, :, 3:] = small_a
        b[i, :, 3:] = small_b
        a[i, :, 0], b[i, :, 0] = big_a, big_b
        if i % 4 < 2:                                   # p - p inside the block
            a[i, :, 1], b[i, :, 1] = big_a ^ 0x80, big_b
            d[i] = 0 if i % 4 == 0 else rand_f32(rng, (M, n), -40)
        else:                                           # D = -p (exact in FP32), D = -p plus low bits
            pv = (_val(big_a)[:, None] * _val(big_b)[None, :]).astype(np.float32)
            d[i] = (-pv).view(np.uint32)
            if i % 4 == 3:
                d[i] = d[i] | rng.integers(0, 1 << 12, (M, n)).astype(np.uint32)
    return a, b, d


def _val(x):
    """E4M3 bytes -> float64 (the exact values), without pelib.numerics.blockfma (vectors stay independent of models)."""
    x = np.asarray(x, np.int64)
    s, f, m = x >> 7, (x >> 3) & 15, x & 7
    v = np.where(f == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (f - 7))
    v = np.where((f == 15) & (m == 7), np.nan, v)
    return np.where(s == 1, -v, v)


def _sig_ge2(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        a[i, :, 0] = e4m3(rng.integers(0, 2, M), 3, np.arange(M) % 8)
        b[i, :, 0] = e4m3(0, 3, np.arange(n) % 8)        # all 64 significand pairs: [1, 2) and [2, 4)
        # the second term 12..15 binades below e_a + e_b = 6 on average (8..18 across rows and columns)
        off = 12 + (i % 4)
        a[i, :, 1] = e4m3(rng.integers(0, 2, M), -3 + rng.integers(-2, 3, M), rng.integers(0, 8, M))
        b[i, :, 1] = e4m3(rng.integers(0, 2, n), 9 - off + rng.integers(-1, 3, n), rng.integers(0, 8, n))
        if i % 4 == 3:                                     # D one binade above the exponent sum: the tie with
            d[i] = rand_f32(rng, (M, n), 7)                # a [2, 4) product's leading bit
    return a, b, d


def _subnormal_mix(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        a[i, :, 0] = e4m3(rng.integers(0, 2, M), -7, rng.integers(1, 8, M))      # subnormal left factors
        b[i, :, 0] = rand_e4m3(rng, n, 4, 8)
        a[i, :, 1] = rand_e4m3(rng, M, -6, -3, subnormal=0.3)
        b[i, :, 1] = rand_e4m3(rng, n, -6, 6)
        if i % 2:
            a[i, :, 2:] = rand_e4m3(rng, (M, 30), -6, -2, subnormal=0.5)
            b[i, :, 2:] = rand_e4m3(rng, (n, 30), -6, 4, subnormal=0.2)
    return a, b, d


def _zero_signs(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    k = 32 * steps
    for i in range(t):
        # rows by m % 8: all +0, all -0, random +-0, +1 - 1 then -0s, +1 - 1 then +0s, -0s and one +0,
        # -1 + 1 then -0s, random +-0 and +-1; columns by n % 4: all +1, all -1, all +0, all -0
        rows = np.zeros((8, k), np.uint8)
        rows[1] = 0x80
        rows[2] = rng.choice(np.array([0x00, 0x80], np.uint8), k)
        rows[3] = 0x80
        rows[3, :2] = (0x38, 0xB8)
        rows[4, :2] = (0x38, 0xB8)
        rows[5] = 0x80
        rows[5, int(rng.integers(0, k))] = 0x00
        rows[6] = 0x80
        rows[6, :2] = (0xB8, 0x38)
        rows[7] = rng.choice(np.array([0x00, 0x80, 0x38, 0xB8], np.uint8), k)
        a[i] = rows[np.arange(M) % 8]
        b[i] = np.array([0x38, 0xB8, 0x00, 0x80], np.uint8)[np.arange(n) % 4][:, None]
        d[i] = np.where(rng.random((M, n)) < 0.5, 0, 0x80000000)
    return a, b, d


def _zero_signs_first0(rng, t, n, steps):
    a, b, d = _zero_signs(rng, t, n, steps)
    d[:] = FP32_QNAN                                               # scale-d = 0: never read
    return a, b, d


def _specials(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        a[i] = rand_e4m3(rng, (M, 32 * steps), 4, 8, sign=0)
        b[i] = rand_e4m3(rng, (n, 32 * steps), 4, 8, sign=0)
        nan_rows = rng.random(M) < 0.15
        a[i, nan_rows, rng.integers(0, 32)] = E4M3_NAN[i % 2]
        nan_cols = rng.random(n) < 0.1
        b[i, nan_cols, rng.integers(0, 32)] = E4M3_NAN[(i + 1) % 2]
        if i % 2:                                                   # negative products: -FLT_MAX - p
            a[i] |= 0x80
        opts = np.array([FP32_INF, 0xFF800000, FP32_QNAN, 0xFFC00000, 0x7F800001, 0x7FC12345, FP32_MAX,
                         0xFF7FFFFF, 0x7F7FFF00, 0xFF7FFF00, 0x7F000000, 0], np.uint32)
        d[i] = opts[rng.integers(0, len(opts), (M, n))]
    return a, b, d


def _grouping(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    k = np.arange(32)
    patterns = [k // 8 == 1, k // 8 == 3, k < 16, k >= 16, k % 2 == 0, k % 2 == 1, k % 4 == 1, k // 4 == 5]
    for i in range(t):
        small = patterns[i % len(patterns)]
        kb = int(rng.choice(np.flatnonzero(~small)))
        b[i] = e4m3(0, 0, rng.integers(0, 8, (n, 32)))             # right factors in [1, 2): offsets stay put
        off = rng.integers(6, 11, M)                                # small terms 6..10 binades below the big one
        a[i, :, kb] = e4m3(rng.integers(0, 2, M), 7, rng.integers(0, 8, M))
        sm = e4m3(rng.integers(0, 2, (M, 32)), (7 - off)[:, None], rng.integers(1, 8, (M, 32)))
        a[i][:, small] = sm[:, small]
        d[i] = 0
    return a, b, d


# ---- random classes ---------------------------------------------------------------------------------

def _project(rng, t, n, steps):
    """pelib.problems' patch-embed recipe: a ~ U(-1, 1), b ~ N(0, 1/K) (K = 768), both to E4M3."""
    k = 32 * steps
    a = from_values(rng.uniform(-1, 1, (t, M, k)))
    b = from_values(rng.normal(0, 768 ** -0.5, (t, n, k)))
    return a, b, np.zeros((t, M, n), np.uint32)


def _spread_operands(rng, t, n, k, i):
    spreads = [0, 1, 2, 3, 4, 6, 8, 12]
    s = spreads[i % len(spreads)]
    top = int(rng.integers(-3, 9))
    a = rand_e4m3(rng, (M, k), top - s, min(top, 8), subnormal=0.01)
    b = rand_e4m3(rng, (n, k), -s // 2, 0, subnormal=0.01)
    return a, b, top


def _random_spread(rng, t, n, steps, sparse=None):
    k = 32 * steps
    a, b, d = zeros(t, n, k)
    for i in range(t):
        a[i], b[i], top = _spread_operands(rng, t, n, k, i)
        if sparse is not None:
            p = sparse[i % len(sparse)]
            a[i] = np.where(rng.random((M, k)) < p, 0, a[i])
        mode = (i // 8) % 3
        if mode == 0:
            d[i] = 0
        else:
            lo, hi = (-16, 4) if mode == 1 else (-40, 40)
            d[i] = rand_f32(rng, (M, n), np.clip(top + 3 + rng.integers(lo, hi + 1, (M, n)), -126, 127))
    return a, b, d


def _random_sparse(rng, t, n, steps):
    return _random_spread(rng, t, n, steps, sparse=(0.5, 0.75, 0.9, 0.97))


def _random_bytes(rng, t, n, steps):
    k = 32 * steps
    a = rng.integers(0, 256, (t, M, k)).astype(np.uint8)
    b = rng.integers(0, 256, (t, n, k)).astype(np.uint8)
    a = np.where((a & 0x7F) == 0x7F, a ^ 0x01, a)                   # no NaN: the specials class has them
    b = np.where((b & 0x7F) == 0x7F, b ^ 0x01, b)
    d = rand_f32(rng, (t, M, n), rng.integers(-30, 20, (t, M, n)))
    d = np.where(rng.random((t, M, n)) < 0.05, rng.integers(0, 1 << 23, (t, M, n)).astype(np.uint32), d)
    return a, b, d


def _chain_cancel(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        big_a = rand_e4m3(rng, M, 5, 8)
        big_b = rand_e4m3(rng, n, 4, 8, sign=0)
        a[i, :, 0], b[i, :, 0] = big_a, big_b
        a[i, :, 1:32] = rand_e4m3(rng, (M, 31), -2, 3)             # bits beyond the first block's window
        b[i, :, 1:32] = rand_e4m3(rng, (n, 31), -3, 1)
        a[i, :, 32], b[i, :, 32] = big_a ^ 0x80, big_b             # the second block takes the big one away
    return a, b, d


def _chain_random(rng, t, n, steps):
    return _random_spread(rng, t, n, steps)


def _chain_project(rng, t, n, steps):
    return _project(rng, t, n, steps)


# ---- E5M2 classes (the PROBE_E5M2 build): the same questions over a 2^-16 .. 2^15 operand range ----------

E5M2_INF, E5M2_NAN = (0x7C, 0xFC), (0x7E, 0xFF)


def _e5m2_single_product(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        k = [2, 13, 18, 30][i % 4]
        a[i, :, k] = (np.arange(M) + M * (i % 4)) % 256
        b[i, :, k] = np.arange(n) % 256
    return a, b, d


def _e5m2_two_products(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    pos = [(0, 1), (0, 16), (7, 8), (31, 0)]
    for i in range(t):
        k1, k2 = pos[i % len(pos)]
        a[i, :, k1], b[i, :, k1] = rand_e5m2(rng, M, 8, 15), rand_e5m2(rng, n, 8, 15)
        a[i, :, k2] = rand_e5m2(rng, M, -14, 15, subnormal=0.05)
        b[i, :, k2] = rand_e5m2(rng, n, -14, 15, subnormal=0.05)
    return a, b, d


def _e5m2_d_vs_product(rng, t, n, steps):
    a, b, d = zeros(t, n, 32 * steps)
    for i in range(t):
        k = (7 * i + 5) % 32
        ra, cb = rand_e5m2(rng, M, -12, 14), rand_e5m2(rng, n, -12, 14)
        a[i, :, k], b[i, :, k] = ra, cb
        e = (np.maximum((ra >> 2) & 31, 1) - 15)[:, None] + (np.maximum((cb >> 2) & 31, 1) - 15)[None, :]
        d[i] = rand_f32(rng, (M, n), np.clip(e + rng.integers(-30, 31, (M, n)), -126, 127))
    return a, b, d


def _e5m2_random_spread(rng, t, n, steps):
    k = 32 * steps
    a, b, d = zeros(t, n, k)
    spreads = [0, 2, 4, 8, 12, 16, 20, 28]
    for i in range(t):
        s_ = spreads[i % len(spreads)]
        top = int(rng.integers(-4, 16))
        a[i] = rand_e5m2(rng, (M, k), max(top - s_, -15), top, subnormal=0.01)
        b[i] = rand_e5m2(rng, (n, k), -(s_ // 2), 0, subnormal=0.01)
        if i % 2:
            d[i] = rand_f32(rng, (M, n), np.clip(top + 3 + rng.integers(-20, 8, (M, n)), -126, 127))
    return a, b, d


def _e5m2_specials(rng, t, n, steps):
    k = 32 * steps
    a, b, d = zeros(t, n, k)
    for i in range(t):
        a[i] = rand_e5m2(rng, (M, k), -4, 4)
        b[i] = rand_e5m2(rng, (n, k), -4, 4)
        a[i, rng.random(M) < 0.3, int(rng.integers(0, k))] = E5M2_INF[i % 2]       # +-Inf rows
        b[i, rng.random(n) < 0.3, int(rng.integers(0, k))] = E5M2_INF[(i // 2) % 2]
        a[i, rng.random(M) < 0.05, int(rng.integers(0, k))] = E5M2_NAN[i % 2]
        b[i, rng.random(n) < 0.1, int(rng.integers(0, k))] = 0x00                     # zeros against Inf
        opts = np.array([0, 0x80000000, FP32_INF, 0xFF800000, FP32_QNAN, 0x3F800000], np.uint32)
        d[i] = opts[rng.integers(0, len(opts), (M, n))]
    return a, b, d


# ---- the list ----------------------------------------------------------------------------------------

CLASSES: dict[str, VectorClass] = {c.name: c for c in [
    VectorClass("single_product", "directed", 8, 1, (), _single_product, quick_tiles=1, pins=(
        "every E4M3 x E4M3 product alone in its block, with D = +0 (tiles 0-3) and D = -0 (4-7): products are "
        "exact (subnormal inputs, significands in [2, 4)), NaN in gives which NaN out, the sign of a zero")),
    VectorClass("d_passthrough", "directed", 4, 1, (), _d_passthrough, pins=(
        "D alone (all 32 products +0 or -0): how many of D's fraction bits survive and how they are cut "
        "(13 kept, toward zero, per SageAttention2), with 1..24 significant bits; D subnormal, +-0, +-Inf, "
        "NaN payloads, the largest finite")),
    VectorClass("d_vs_product", "directed", 8, 1, (), _d_vs_product, pins=(
        "one product and D from 2^-30 to 2^30 times it, both signs: whether D takes part in choosing the "
        "alignment exponent, how many of D's bits survive under a larger product and of the product's under "
        "a larger D, magnitude or two's-complement truncation when the signs differ")),
    VectorClass("two_products", "directed", 8, 1, (), _two_products, pins=(
        "a large and a small product up to 34 binades apart (either may be the larger), all significands "
        "and signs, at position pairs inside and across halves: the bit-position sweep that counts the "
        "fraction bits kept below the larger term and the direction of the cut")),
    VectorClass("many_small", "directed", 4, 1, (), _many_small, pins=(
        "one large product and 31 small ones 5..22 binades below it, all negative, all positive, mixed and "
        "alternating: whether bits beyond the window leave a borrow or carry (sticky bits, sign-filling "
        "shifts) or vanish")),
    VectorClass("carry_out", "directed", 4, 1, (), _carry_out, pins=(
        "32 products within 6 binades of the top one, of one sign or mixed, and D at, above or below them: "
        "sums that fill the 13-bit window and carry up to 5 bits past its top: whether the result is cut "
        "again to 13 fraction bits after the carry (MATLAB-tensor-core) or kept to FP32's 23 (its C port)")),
    VectorClass("cancellation", "directed", 4, 1, (), _cancellation, pins=(
        "massive cancellation: p - p inside the block, D = -p, D = -p with low bits, beside small terms: the "
        "window stays where the largest term put it; how the small terms' lost bits show once the large "
        "ones are gone")),
    VectorClass("sig_ge2", "directed", 4, 1, (), _sig_ge2, pins=(
        "a leading product with significand in [1, 2) or [2, 4) (all 64 pairs) against a term 8..18 "
        "binades below its exponent sum, and D one binade above: does the window start at e_a + e_b or at "
        "the product's leading bit")),
    VectorClass("subnormal_mix", "directed", 4, 1, (), _subnormal_mix, pins=(
        "E4M3 subnormal inputs in the leading product and beside it: is a subnormal's exponent emin (-6) "
        "or its leading bit when the window is chosen")),
    VectorClass("zero_signs", "directed", 2, 1, (), _zero_signs, pins=(
        "exact zero results with D = +0 or -0 and products +0, -0 or cancelling (+1 - 1): the sign of "
        "zero")),
    VectorClass("zero_signs_first0", "directed", 2, 1, (FIRST_ZERO,), _zero_signs_first0, pins=(
        "the same zeros with scale-d = 0 on the instruction (D holds a NaN that must not be read): "
        "D = A.B versus D = +0")),
    VectorClass("specials", "directed", 2, 1, (), _specials, pins=(
        "NaN operands (0x7F, 0xFF) in rows and columns, D = +-Inf, NaN payloads (quiet, signalling, "
        "negative), D = +-the largest finite beside products of either sign: which NaN bits come out and "
        "what Inf plus finite products gives (E4M3 products cannot overflow FP32: their sum stays below "
        "2^23)")),
    VectorClass("grouping", "directed", 8, 1, (), _grouping, pins=(
        "one large product and small ones 6..10 binades below it, placed in one group of 4, 8 or 16 "
        "(contiguous or interleaved): one alignment for all 32 products, or groups aligned apart whose "
        "sums meet again (only then the small group keeps its low bits)")),
    VectorClass("random_project", "random", 16, 1, (), _project, pins=(
        "the project's operands (pelib.problems: a ~ U(-1, 1), b ~ N(0, 1/768), E4M3) in one k32 block "
        "with D = 0: the cuBLAS K = 32 fast-accumulation experiment on one instruction")),
    VectorClass("random_spread", "random", 32, 1, (), _random_spread, quick_tiles=2, pins=(
        "random operands with exponent spreads 0..12 binades, D = 0, near the products or anywhere: the "
        "statistical test of a candidate rule")),
    VectorClass("random_sparse", "random", 8, 1, (), _random_sparse, pins=(
        "the same with 50..97 % of A zero: sums of few terms")),
    VectorClass("random_bytes", "random", 8, 1, (), _random_bytes, pins=(
        "every non-NaN E4M3 byte equally likely (subnormals, the largest values) and D of any magnitude")),
    VectorClass("chain_project", "chains", 4, 4, (FIRST_ZERO,), _chain_project, pins=(
        "one 128-wide K slice of the project's operands exactly as the stages issue it: 4 chained k32 "
        "instructions, scale-d = 0 on the first")),
    VectorClass("chain2", "chains", 4, 2, (), _chain_random, pins=(
        "2 chained instructions on random operands and D: nothing but FP32 is carried between them")),
    VectorClass("chain4", "chains", 4, 4, (), _chain_random, pins="the same with 4 chained instructions"),
    VectorClass("chain8", "chains", 4, 8, (), _chain_random, pins="the same with 8 (two 128-B swizzle atoms of K)"),
    VectorClass("chain4_wait_each", "chains", 4, 4, (WAIT_EACH,), _chain_random, pins=(
        "chain4's inputs with a commit and wait after every instruction: equal to chain4 bit for bit "
        "unless back-to-back issue carries something between instructions")),
    VectorClass("chain_cancel", "chains", 2, 2, (), _chain_cancel, pins=(
        "a large product plus small ones in the first block and its negation in the second: the small "
        "terms' bits that reappear are exactly those the FP32 result of the first instruction kept")),
    VectorClass("e5m2_single_product", "e5m2", 4, 1, (), _e5m2_single_product, fmt="e5m2", pins=(
        "every E5M2 x E5M2 product alone in its block (D = +0): exact over 2^-32 .. 2^32, subnormals, Inf x 0 "
        "= NaN, Inf x finite, NaN bytes")),
    VectorClass("e5m2_two_products", "e5m2", 4, 1, (), _e5m2_two_products, fmt="e5m2", pins=(
        "the bit-position sweep of two_products with offsets up to 60 binades: the same 13-bit window "
        "(or not) for the .e5m2 instruction")),
    VectorClass("e5m2_d_vs_product", "e5m2", 4, 1, (), _e5m2_d_vs_product, fmt="e5m2", pins=(
        "d_vs_product for .e5m2: D's part in the alignment over the wider product range")),
    VectorClass("e5m2_random_spread", "e5m2", 8, 1, (), _e5m2_random_spread, fmt="e5m2", pins=(
        "random E5M2 operands with exponent spreads 0..28 binades, D = 0 or near the products")),
    VectorClass("e5m2_specials", "e5m2", 2, 1, (), _e5m2_specials, fmt="e5m2", pins=(
        "+-Inf operands against each other (Inf - Inf), against zeros (Inf x 0) and D = +-Inf, NaN: the "
        "special cases only E5M2 inputs can make")),
]}
# chain4_wait_each repeats chain4's vectors (pelib.measure.tcprobe compares the two outputs directly)
SAME_INPUTS = {"chain4_wait_each": "chain4"}
# N other than 256: the first columns of these classes' tiles again, through m64n128k32 and m64n192k32
SHAPES = {128: ("random_spread", "two_products"), 192: ("random_spread", "two_products")}
SHAPE_TILES = 2


def inputs(cls: VectorClass, seed: int = 0, tiles: int | None = None):
    """The class's (A, B, D), drawn from the class it repeats when it repeats one (SAME_INPUTS)."""
    src = CLASSES[SAME_INPUTS.get(cls.name, cls.name)]
    return src.generate(seed, tiles)
