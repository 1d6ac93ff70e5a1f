"""pelib.numerics.precision: exact emulation of the two F22 epilogue paths and the precision gate."""
import math
from fractions import Fraction

import pytest
import torch

from pelib.numerics import precision as P


def _bf16(vals):
    return torch.tensor(vals, dtype=torch.float32).to(torch.bfloat16)


def test_rn_bf16_is_round_to_nearest_even_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200_000, generator=g) * torch.exp2(torch.randint(-30, 30, (200_000,), generator=g).float())
    # exact ties (low 16 bits = 0x8000) with even and odd kept bits, and values just around them
    ties = torch.tensor([0x3F808000, 0x3F818000, 0xBF808000, 0x3F807FFF, 0x3F808001, 0x477F8000],
                        dtype=torch.int64).to(torch.int32).view(torch.float32)
    x = torch.cat([x, ties])
    assert torch.equal(P.rn_bf16(x).view(torch.int16), P.rn_bf16_bits(x).view(torch.int16))
    t = P.rn_bf16(ties).float().tolist()
    assert t[0] == 1.0 and t[1] == 1.0 + 2 * 2 ** -7 and t[2] == -1.0   # ties go to even


def test_bf16x2_add_is_the_exact_sum_rounded_once():
    g = torch.Generator().manual_seed(1)
    n = 3000
    a = (torch.randn(n, generator=g) * torch.exp2(torch.randint(-12, 12, (n,), generator=g).float()))
    c = (torch.randn(n, generator=g) * torch.exp2(torch.randint(-12, 12, (n,), generator=g).float())).to(torch.bfloat16)
    got = P.bf16x2_add_path(a, c).float().tolist()
    a16 = P.rn_bf16(a).float().tolist()
    for x, y, z in zip(a16, c.float().tolist(), got):
        assert z == P.round_bf16_exact(Fraction(x) + Fraction(y))


def test_fp32_path_rounds_the_fp32_sum():
    g = torch.Generator().manual_seed(2)
    a = torch.randn(5000, generator=g)
    c = torch.randn(5000, generator=g).to(torch.bfloat16)
    got = P.fp32_add_path(a, c).float().tolist()
    fsum = (a + c.float()).tolist()           # IEEE binary32 RN add
    for s, z in zip(fsum, got):
        assert z == P.round_bf16_exact(Fraction(s))


def test_the_two_paths_differ_where_rounding_acc_first_loses_a_tie_breaker():
    # acc = 1 + 2^-8 is a BF16 tie (rounds to even: 1.0); comb = 2^-20 pushes the exact sum past the tie.
    acc = torch.tensor([1 + 2 ** -8], dtype=torch.float32)
    comb = _bf16([2 ** -20])
    assert P.fp32_add_path(acc, comb).float().item() == 1 + 2 ** -7
    assert P.bf16x2_add_path(acc, comb).float().item() == 1.0
    assert P.ulps_of_ref(P.fp32_add_path(acc, comb), P.bf16x2_add_path(acc, comb)).item() == 1.0


def test_fp64_to_bf16_rounds_once():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4000, generator=g, dtype=torch.float64) * 2.0 ** 5
    # doubles whose FP32 rounding would create a false BF16 tie: 1 + 2^-8 + 2^-30
    x = torch.cat([x, torch.tensor([1 + 2 ** -8 + 2 ** -30, -(1 + 2 ** -8 + 2 ** -30)], dtype=torch.float64)])
    got = P._rn_bf16_from_f64(x).float().tolist()
    for v, z in zip(x.tolist(), got):
        assert z == P.round_bf16_exact(Fraction(v))
    assert got[-2] == 1 + 2 ** -7


def test_operand_types_are_checked():
    with pytest.raises(TypeError, match="float32"):
        P.fp32_add_path(torch.zeros(2, dtype=torch.float64), _bf16([0, 0]))
    with pytest.raises(TypeError, match="bfloat16"):
        P.bf16x2_add_path(torch.zeros(2), torch.zeros(2))


def test_sample_covers_every_position():
    acc, comb, s = P.sample_inputs(images=2, seed=0)
    assert acc.shape == (2 * 196, 768) and comb.shape == acc.shape and acc.dtype == torch.float32
    assert s.rows == 392 and s.positions == 196
    assert torch.equal(comb[0], comb[196]) and not torch.equal(comb[0], comb[1])


@pytest.fixture(scope="module")
def small():
    return P.f22_precision_gate(images=4)


def test_gate_reads_the_card_threshold_and_labels_its_fact(small):
    assert small.threshold == 16.0
    assert "F22" in small.threshold_source
    (fact,) = small.facts()
    assert fact.metric == "f22.max_abs_err" and fact.kind == "modelled"
    assert small.evidence == "modelled"


def test_gate_errors_scale_with_powers_of_two(small):
    assert math.log2(small.card.scale).is_integer()
    assert 1024 <= small.card.max_abs_out < 2048                    # the card's ~1,728 binade
    assert small.card.max_abs_err == small.problem.max_abs_err * small.card.scale
    assert small.card.max_ulp == small.problem.max_ulp              # ULPs are scale-free


def test_gate_passes_on_the_problem_and_fails_when_outputs_are_large(small):
    assert small.passes and small.card.max_abs_err <= 16.0
    acc, comb, _ = P.sample_inputs(images=4)
    big = P.f22_precision_gate(acc=acc * 2.0 ** 12, comb=(comb.float() * 2.0 ** 12).to(torch.bfloat16))
    assert big.problem.max_abs_out > small.passes_up_to
    assert not big.passes and big.decision.startswith("ABORT")


def test_fp32_path_is_the_correctly_rounded_sum_and_f22_adds_at_most_a_ulp_at_the_top(small):
    assert small.vs_exact["FP32-add path max ULP vs exact"] == 0
    top = small.buckets[-3:]                       # the three largest binades
    assert all(b["max ULP"] <= 2 for b in top)


def test_default_sample_runs_and_passes():
    r = P.f22_precision_gate()
    assert r.sample.rows == 196 * 64 and r.sample.cols == 768 and r.sample.k == 768
    assert r.passes
    assert r.problem.differ_fraction > 0.05           # the paths really differ
