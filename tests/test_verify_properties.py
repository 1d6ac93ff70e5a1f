"""Properties of pelib.verify over many random cases (seeded, so a failure replays):

1. Garbage never passes: an output that is not the GEMM (random values, a permutation of the right
   answer, the right answer with one element moved by more than the tolerance) fails.
2. A planted NaN or Inf anywhere fails or raises: in an input (A, B, comb), the reference, the output
   or the tolerance, while the output is the one computed from the clean inputs.
3. The right answer passes, so the first two are not won by failing everything.
"""
import math
import random

import pytest
import torch

from pelib import problems as P
from pelib import reference as R
from pelib import verify as Y

CASES = 40


def _case(seed):
    rng = random.Random(seed)
    m, n, k = rng.choice([32, 64, 96]), rng.choice([16, 32, 64]), rng.choice([32, 64, 128, 256])
    g = torch.Generator().manual_seed(seed)
    a = torch.empty(m, k).uniform_(-rng.uniform(0.1, 4), rng.uniform(0.1, 4), generator=g).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=g) * rng.uniform(0.01, 1)).to(torch.float8_e4m3fn)
    comb = (0.5 * torch.randn(rng.randint(1, 9), n, generator=g)).to(torch.bfloat16)
    return rng, {"a": a, "b": b, "comb": comb}


def _verify(got, x, ref=None):
    ref = R.patch_embed_reference(x["a"], x["b"], x["comb"]) if ref is None else ref
    return Y.verify_gemm(got, ref, a=x["a"], b=x["b"], tile=(16, 16))


@pytest.mark.parametrize("seed", range(CASES))
def test_the_right_answer_passes(seed):
    _, x = _case(seed)
    assert _verify(R.patch_embed_reference(x["a"], x["b"], x["comb"]), x).ok


@pytest.mark.parametrize("seed", range(CASES))
def test_garbage_never_passes(seed):
    rng, x = _case(seed)
    ref = R.patch_embed_reference(x["a"], x["b"], x["comb"])
    g = torch.Generator().manual_seed(10_000 + seed)
    scale = float(ref.float().abs().max()) or 1.0
    tol = Y.gemm_tolerance_from(x["a"], x["b"])
    one_off = ref.clone()
    i, j = rng.randrange(ref.shape[0]), rng.randrange(ref.shape[1])
    r = float(ref[i, j])
    one_off[i, j] = r + math.copysign(2 * (tol.atol + tol.rtol * abs(r)) + 0.05 * scale, rng.choice([-1, 1]))
    garbage = {
        "uniform": (torch.rand(ref.shape, generator=g) * 2 - 1).mul(scale).to(torch.bfloat16),
        "normal": torch.randn(ref.shape, generator=g).mul(scale).to(torch.bfloat16),
        "zeros": torch.zeros_like(ref),
        "rows permuted": ref[torch.randperm(ref.shape[0], generator=g)],
        "transposed blocks": ref.flip(1),
        "one element off": one_off,
    }
    for what, got in garbage.items():
        if torch.equal(got.float(), ref.float()):
            continue   # a permutation that happens to be the identity is not garbage
        assert not _verify(got, x, ref).ok, what


PLANTS = ["a NaN", "b NaN", "comb NaN", "comb +Inf", "comb -Inf", "ref NaN", "ref +Inf", "ref -Inf",
          "out NaN", "out +Inf", "out -Inf", "atol NaN", "atol +Inf", "rtol NaN", "rtol +Inf"]


@pytest.mark.parametrize("seed", range(CASES))
def test_a_planted_nan_or_inf_fails_or_raises(seed):
    rng, clean = _case(seed)
    good = R.patch_embed_reference(clean["a"], clean["b"], clean["comb"])     # what a right kernel wrote
    for plant in PLANTS:
        x = {k: v.clone() for k, v in clean.items()}
        out, ref = good.clone(), None
        where, what = plant.split()
        val = {"NaN": float("nan"), "+Inf": float("inf"), "-Inf": float("-inf")}[what]
        if where in ("a", "b"):    # E4M3 has no Inf: its NaN is the byte 0x7F (or 0xFF)
            t = x[where].view(torch.uint8)
            t[rng.randrange(t.shape[0]), rng.randrange(t.shape[1])] = rng.choice([0x7F, 0xFF])
        elif where == "comb":
            x["comb"][rng.randrange(x["comb"].shape[0]), rng.randrange(x["comb"].shape[1])] = val
        elif where in ("ref", "out"):
            t = good.clone()
            t[rng.randrange(t.shape[0]), rng.randrange(t.shape[1])] = val
            ref, out = (t, out) if where == "ref" else (None, t)
        try:
            if where in ("atol", "rtol"):
                tol = Y.gemm_tolerance_from(x["a"], x["b"])
                rep = Y.compare(out, good, **{"atol": tol.atol, "rtol": tol.rtol, where: val})
            else:
                rep = _verify(out, x, ref)
        except (P.ProblemError, ValueError):
            continue
        assert not rep.ok, f"{plant} passed:\n{rep}"
