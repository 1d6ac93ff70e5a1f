"""pelib.reference against slow, obviously-correct loops on small shapes, and the scale layout."""
import itertools
import random

import pytest
import torch

from pelib import problems as P
from pelib import reference as R

BF16_ULP = 2.0 ** -7   # BF16 has 8 significand bits: one ulp is 2^-7 of the leading power of two


def _bf16_ulp(x: float) -> float:
    import math
    return BF16_ULP * 2.0 ** math.floor(math.log2(abs(x))) if x else 2.0 ** -133


# ---------------------------------------------------------------------------------------------
# FP8 patch embed
# ---------------------------------------------------------------------------------------------

def _slow_patch_embed(a, b, comb):
    """Python floats: the sum over k in float64, + comb[m % P], then one rounding to BF16."""
    af, bf, cf = a.float().tolist(), b.float().tolist(), comb.float().tolist()
    m, n, pos = len(af), len(bf), len(cf)
    out = [[0.0] * n for _ in range(m)]
    for i in range(m):
        for j in range(n):
            s = 0.0
            for k in range(len(af[0])):
                s += af[i][k] * bf[j][k]
            out[i][j] = s + cf[i % pos][j]
    return torch.tensor(out, dtype=torch.float64)


def test_patch_embed_matches_slow_loop():
    p = P.patch_embed("tiny")
    x = p.make_inputs(2)
    got = R.patch_embed_reference(x["a"], x["b"], x["comb"], chunk_rows=5).float()  # chunks cross the 7 positions
    exact = _slow_patch_embed(x["a"], x["b"], x["comb"])
    for g, e in zip(got.flatten().tolist(), exact.flatten().tolist()):
        assert abs(g - e) <= _bf16_ulp(e), (g, e)   # FP32 vs float64 sums: at most one BF16 rounding apart


def test_patch_embed_exact_on_integer_data():
    # Small integers: every FP32 sum is exact, so the reference must equal the loop bit for bit.
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-4, 5, (16, 32), generator=g).float().to(P.FP8)
    b = torch.randint(-4, 5, (8, 32), generator=g).float().to(P.FP8)
    comb = torch.randint(-8, 9, (5, 8), generator=g).float().to(P.BF16)
    got = R.patch_embed_reference(a, b, comb, chunk_rows=3)
    want = _slow_patch_embed(a, b, comb).to(torch.float32).to(P.BF16)
    assert torch.equal(got, want)


def test_patch_embed_row_index_is_m_mod_positions():
    a = torch.zeros(10, 16).to(P.FP8)
    b = torch.zeros(4, 16).to(P.FP8)
    comb = torch.arange(3 * 4, dtype=torch.float32).view(3, 4).to(P.BF16)
    out = R.patch_embed_reference(a, b, comb, chunk_rows=4)
    for m in range(10):
        assert torch.equal(out[m], comb[m % 3])


def test_patch_embed_chunked_medium():
    """The chunked path on 50,176 rows: chunk edges (not multiples of 196) agree with float64 rows."""
    p = P.patch_embed("medium")
    x = p.make_inputs(4)
    got = R.patch_embed_reference(x["a"], x["b"], x["comb"], chunk_rows=20000)
    rows = [0, 195, 196, 19999, 20000, 20001, 39999, 40000, p.m - 1]
    a64 = x["a"][rows].double()
    want = a64 @ x["b"].double().t() + x["comb"].double()[torch.tensor(rows) % 196]
    err = (got[rows].double() - want).abs()
    ulp = want.abs().clamp_min(2.0 ** -20) * BF16_ULP
    assert (err <= ulp).all()
    assert not torch.isnan(got.float()).any()


def test_patch_embed_rejects_bad_inputs():
    x = P.patch_embed("tiny").make_inputs(0)
    with pytest.raises(TypeError, match="float8"):
        R.patch_embed_reference(x["a"].float(), x["b"], x["comb"])
    with pytest.raises(ValueError, match="do not chain"):
        R.patch_embed_reference(x["a"], x["b"][:, :16], x["comb"])


# ---------------------------------------------------------------------------------------------
# E2M1, packing
# ---------------------------------------------------------------------------------------------

MAGS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]   # OCP MX v1.0, E2M1


def _slow_e2m1(x: float) -> int:
    """Nearest E2M1 magnitude, ties to the even code (mantissa bit 0), saturating; sign in bit 3."""
    mag = min(abs(x), 6.0)
    best = min(range(8), key=lambda c: (abs(MAGS[c] - mag), c & 1))
    return best | (8 if (x < 0 or (x == 0 and str(x).startswith("-"))) else 0)


def test_e2m1_values_and_codes():
    assert R.E2M1_VALUES[:8].tolist() == MAGS
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(R.e2m1_encode(R.e2m1_decode(codes)), codes)


def test_e2m1_ties_to_even_and_saturation():
    cases = {0.25: 0, 0.75: 2, 1.25: 2, 1.75: 4, 2.5: 4, 3.5: 6, 5.0: 6, 7.0: 7, 1e9: 7,
             -0.25: 8, -5.0: 14, -100.0: 15, 0.26: 1, 4.9: 6, 5.1: 7}
    got = R.e2m1_encode(torch.tensor(list(cases))).tolist()
    assert got == list(cases.values())


def test_e2m1_against_slow_loop():
    rnd = random.Random(0)
    xs = [rnd.uniform(-8, 8) for _ in range(3000)] + [m + d for m in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
                                                       for d in (-1e-6, 0.0, 1e-6)]
    got = R.e2m1_encode(torch.tensor(xs, dtype=torch.float32)).tolist()
    want = [_slow_e2m1(float(torch.tensor(x, dtype=torch.float32))) for x in xs]
    assert got == want
    with pytest.raises(ValueError, match="NaN or Inf"):
        R.e2m1_encode(torch.tensor([float("nan")]))


def test_pack_lower_index_in_low_nibble():
    codes = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    packed = R.pack_fp4(codes)
    assert packed.tolist() == [[0x21, 0x0F]]             # CUTLASS float_to_e2m1_x2: a[0] | a[1] << 4
    assert torch.equal(R.unpack_fp4(packed), codes)
    g = torch.Generator().manual_seed(1)
    c = torch.randint(0, 16, (5, 64), generator=g, dtype=torch.uint8)
    assert torch.equal(R.unpack_fp4(R.pack_fp4(c)), c)
    with pytest.raises(ValueError, match="even"):
        R.pack_fp4(torch.zeros(3, dtype=torch.uint8))


# ---------------------------------------------------------------------------------------------
# NVFP4 quantize / dequantize / GEMM
# ---------------------------------------------------------------------------------------------

def _slow_quantize(x):
    """Per-block loop with Python floats, following the recipe in reference.nvfp4_quantize."""
    rows = x.tolist()
    amax = max(abs(v) for r in rows for v in r)
    enc = 448.0 * 6.0 / amax
    codes, scales = [], []
    for r in rows:
        cr, sr = [], []
        for b0 in range(0, len(r), 16):
            blk = r[b0:b0 + 16]
            s = float(torch.tensor(min(max(abs(v) for v in blk) / 6.0 * enc, 448.0)).to(P.FP8).float())
            sr.append(s)
            cr += [_slow_e2m1(float(torch.tensor(v * enc / s, dtype=torch.float32))) if s > 0 else 0 for v in blk]
        codes.append(cr)
        scales.append(sr)
    return codes, scales, 1.0 / enc


def test_quantize_matches_slow_loop_and_bounds_error():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 64, generator=g) * torch.logspace(-2, 1, 6)[:, None]   # rows of different scale
    q = R.nvfp4_quantize(x)
    codes, scales, gs = _slow_quantize(x)
    assert R.unpack_fp4(q.data).tolist() == codes
    assert q.scale.float().tolist() == scales
    assert q.global_scale == pytest.approx(gs, rel=1e-7)
    deq = R.nvfp4_dequantize(q.data, q.scale, q.global_scale)
    # the largest E2M1 gap is 2 (between 4 and 6): error <= 1 x the block's decoded scale
    bound = (q.scale.float() * q.global_scale).repeat_interleave(16, dim=1)
    assert ((deq - x).abs() <= bound * (1 + 1e-6)).all()


def test_dequantize_matches_slow_loop():
    q = P.nvfp4_gemm("tiny").make_inputs(0)
    got = R.nvfp4_dequantize(q["a"], q["sfa"], q["gsa"])
    codes = R.unpack_fp4(q["a"]).tolist()
    sf = q["sfa"].float().tolist()
    gs = float(q["gsa"])
    for i, row in enumerate(codes):
        for k, c in enumerate(row):
            assert float(got[i, k]) == pytest.approx(MAGS[c & 7] * (-1 if c & 8 else 1) * sf[i][k // 16] * gs, rel=1e-6)


def test_nvfp4_gemm_matches_slow_loop():
    q = P.nvfp4_gemm("tiny")
    x = q.make_inputs(9)
    got = R.nvfp4_gemm_reference(x["a"], x["sfa"], x["gsa"], x["b"], x["sfb"], x["gsb"], chunk=3).double()
    ca, cb = R.unpack_fp4(x["a"]).tolist(), R.unpack_fp4(x["b"]).tolist()
    sa, sb = x["sfa"].float().tolist(), x["sfb"].float().tolist()
    alpha = float(x["gsa"]) * float(x["gsb"])

    def val(c):
        return MAGS[c & 7] * (-1 if c & 8 else 1)

    for i, j in itertools.product(range(q.m), range(q.n)):
        s = sum(val(ca[i][k]) * sa[i][k // 16] * val(cb[j][k]) * sb[j][k // 16] for k in range(q.k))
        want = float(torch.tensor(s * alpha).to(torch.float16))
        assert abs(float(got[i, j]) - want) <= abs(want) * 2 ** -10 + 1e-7, (i, j, float(got[i, j]), want)


# ---------------------------------------------------------------------------------------------
# Scale-factor layout (CUTLASS Sm1xxBlockScaledBasicChunk, K-major)
# ---------------------------------------------------------------------------------------------

def _cute_offset(m: int, kb: int, kb_total: int) -> int:
    """Evaluate CUTLASS's SfKMajorAtom ((32,4),(16,4)):((16,4),(0,1)) at element (m, k=16*kb),
    with atoms tiled K-first (Step<_2,_1,_3>), 512 B each: the spec, read literally."""
    k = 16 * kb
    coord = ((m % 32, (m // 32) % 4), (k % 16, (k // 16) % 4))
    stride = ((16, 4), (0, 1))
    inner = sum(c * s for cc, ss in zip(coord, stride) for c, s in zip(cc, ss))
    atoms_k = -(-kb_total // 4)
    return ((m // 128) * atoms_k + kb // 4) * 512 + inner


def test_sf_offsets_follow_the_cutlass_atom():
    # blackwell_functionality.md: bytes M0SF0..3, M32SF0..3, M64SF0..3, M96SF0..3, then M1...
    assert [R.sf_mma_offset(r, c, 4) for r, c in [(0, 0), (0, 3), (32, 0), (64, 0), (96, 3), (1, 0), (31, 3)]] == \
        [0, 3, 4, 8, 15, 16, 31 * 16 + 3]
    assert R.sf_mma_offset(0, 4, 8) == 512                 # next atom along K
    assert R.sf_mma_offset(128, 0, 8) == 2 * 512           # next row block after both K atoms
    for m, kb in itertools.product(range(0, 300, 7), range(10)):
        assert R.sf_mma_offset(m, kb, 10) == _cute_offset(m, kb, 10)
    assert R.SF_ATOM_BYTES == 512


def test_sf_layout_round_trip_with_padding():
    g = torch.Generator().manual_seed(2)
    sf = torch.randint(1, 255, (200, 6), generator=g, dtype=torch.uint8)
    sf[sf == 0x7F] = 1                                     # keep clear of NaN codes
    sf = sf.view(P.FP8)
    flat = R.sf_to_mma_layout(sf)
    assert flat.numel() == R.sf_mma_size(200, 6) == 2 * 2 * 512
    assert torch.equal(R.sf_from_mma_layout(flat, 200, 6).view(torch.uint8), sf.view(torch.uint8))
    raw = flat.view(torch.uint8)
    for r, c in [(0, 0), (37, 5), (199, 2), (128, 4)]:
        assert raw[R.sf_mma_offset(r, c, 6)] == sf.view(torch.uint8)[r, c]
    # padding rows 200..255 and columns 6..7 stay zero (scale 0)
    used = torch.zeros_like(raw, dtype=torch.bool)
    used[R._offsets(200, 6, "cpu").reshape(-1)] = True
    assert (raw[~used] == 0).all()
    with pytest.raises(ValueError, match="bytes, expected"):
        R.sf_from_mma_layout(flat[:-1], 200, 6)


@pytest.mark.gpu
def test_references_same_on_gpu():
    p = P.patch_embed("small")
    x = p.make_inputs(1)
    xg = p.make_inputs(1, device="cuda")
    cpu = R.patch_embed_reference(x["a"], x["b"], x["comb"]).double()
    gpu = R.patch_embed_reference(xg["a"], xg["b"], xg["comb"]).cpu().double()
    # FP32 sums may run in another order on the GPU: at most one BF16 rounding apart
    assert ((cpu - gpu).abs() <= cpu.abs().clamp_min(2.0 ** -20) * BF16_ULP).all()
    sf = P.nvfp4_gemm("small").make_inputs(0)["sfa"]
    assert torch.equal(R.sf_to_mma_layout(sf).view(torch.uint8), R.sf_to_mma_layout(sf.cuda()).cpu().view(torch.uint8))
