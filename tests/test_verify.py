"""Verification: poisoning, format-derived tolerances, NaN and tile reporting (CPU tensors)."""
import math

import pytest
import torch

from pelib import verify as V


def test_poison_float_and_int():
    t = V.poison(torch.zeros(4, 4, dtype=torch.bfloat16))
    assert torch.isnan(t.float()).all()
    u = V.poison(torch.zeros(3, dtype=torch.int32))
    assert (u == 2**31 - 1).all()
    f8 = V.poison(torch.zeros(8, dtype=torch.float8_e4m3fn))
    assert torch.isnan(f8.float()).all()


def test_gemm_tolerance_from_formats():
    tol = V.gemm_tolerance(768, 1.0, 1.0, out="bfloat16")
    assert tol.rtol == 2 * 2.0**-8
    assert tol.atol == pytest.approx(2 * 768 * 2.0**-13)
    assert "K=768" in tol.why
    # grows with K and with the magnitudes
    assert V.gemm_tolerance(3072, 1, 1).atol > tol.atol
    assert V.gemm_tolerance(768, 2, 3).atol == pytest.approx(6 * tol.atol)
    with pytest.raises(ValueError):
        V.gemm_tolerance(8, 1, 1, out="int4")


def test_exact_match_passes():
    ref = torch.randn(256, 256)
    rep = V.compare(ref.clone(), ref, atol=0, rtol=0, tile=(128, 128), label="same")
    assert rep.ok and rep.n_bad == 0 and rep.max_abs == 0
    assert "PASS same" in str(rep)


def test_bf16_rounding_within_tolerance():
    torch.manual_seed(0)
    a = torch.randn(128, 512).to(torch.float8_e4m3fn).float()
    b = torch.randn(512, 128).to(torch.float8_e4m3fn).float()
    ref = a @ b
    got = ref.to(torch.bfloat16)
    rep = V.verify_gemm(got, ref, K=512, a_absmax=a.abs().max(), b_absmax=b.abs().max())
    assert rep.ok, str(rep)


def test_unwritten_tile_fails_and_is_located():
    ref = torch.randn(256, 384)
    got = V.poison(torch.empty_like(ref))
    got[:] = ref
    got[128:256, 256:384] = float("nan")   # tile (1, 2) never written
    rep = V.compare(got, ref, atol=1e-3, rtol=1e-3, tile=(128, 128))
    assert not rep.ok
    assert rep.first_bad == (128, 256) and rep.first_bad_tile == (1, 2)
    assert rep.bad_tiles == 1 and rep.nan_tiles == 1 and rep.n_tiles == 6
    assert rep.n_nan == 128 * 128 and math.isinf(rep.max_abs)
    s = str(rep)
    assert "FAIL" in s and "tile (1, 2)" in s and "1 with NaN" in s


def test_nan_always_fails_even_with_huge_tolerance():
    ref = torch.ones(4, 4)
    got = ref.clone()
    got[3, 1] = float("nan")
    rep = V.compare(got, ref, atol=1e9, rtol=1e9)
    assert not rep.ok and rep.first_bad == (3, 1)


def test_wrong_value_located_in_tile():
    ref = torch.zeros(64, 64)
    got = ref.clone()
    got[40, 17] = 1.0
    rep = V.compare(got, ref, atol=0.5, rtol=0, tile=(32, 16))
    assert rep.first_bad_tile == (1, 1) and rep.first_bad_values == (1.0, 0.0)
    assert rep.max_abs == 1.0 and rep.bad_tiles == 1


def test_leading_dims_fold_into_rows():
    ref = torch.zeros(2, 8, 8)
    got = ref.clone()
    got[1, 2, 5] = 3.0
    rep = V.compare(got, ref, atol=0.1, tile=(4, 4))
    assert rep.first_bad == (1, 2, 5) and rep.first_bad_tile == (2, 1)   # row 10 -> tile row 2


def test_shape_mismatch():
    with pytest.raises(ValueError, match="shape mismatch"):
        V.compare(torch.zeros(2, 3), torch.zeros(3, 2))


def test_relative_error_reported():
    ref = torch.full((2, 2), 100.0)
    got = ref * 1.01
    rep = V.compare(got, ref, atol=0, rtol=0.001)
    assert not rep.ok and rep.max_rel == pytest.approx(0.01, rel=1e-6)
