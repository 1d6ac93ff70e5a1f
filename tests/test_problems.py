"""pelib.problems: the lab notes' shapes, seeded inputs, validation errors, FLOPs and bytes."""
import math

import pytest
import torch

from pelib import problems as P
from pelib import reference as R


def test_siglip2_shape_and_counts():
    p = P.patch_embed("siglip2")
    assert (p.m, p.n, p.k, p.positions) == (928256, 768, 768, 196)
    assert p.m % p.positions == 0 and p.m // p.positions == 4736
    assert p.tiles == 10878                       # the W1 note's tile count
    assert p.flops == 2 * 928256 * 768 * 768
    # A + B (FP8) + comb (BF16) + out (BF16): ~2.14 GB
    assert p.min_bytes == 928256 * 768 + 768 * 768 + 196 * 768 * 2 + 928256 * 768 * 2
    assert abs(p.min_bytes / 1e9 - 2.14) < 0.005


def test_nvfp4_shapes_and_bytes():
    shapes = P.nvfp4_log_shapes()
    assert [(s.m, s.n, s.k) for s in shapes] == [(128, 7168, 16384), (128, 4096, 7168), (128, 7168, 2048)]
    s = shapes[0]
    # A and B at 4 bit, one E4M3 per 16 of each, C in FP16
    assert s.min_bytes == (128 + 7168) * 16384 // 2 + (128 + 7168) * 16384 // 16 + 2 * 128 * 7168
    assert s.flops == 2 * 128 * 7168 * 16384
    assert [x.tiles for x in shapes] == [56, 32, 56]
    assert P.nvfp4_shapes() == shapes


def test_unknown_names():
    with pytest.raises(KeyError, match="choose one of"):
        P.patch_embed("nope")
    with pytest.raises(KeyError, match="choose one of"):
        P.nvfp4_gemm("nope")


def test_tile_divisibility_is_checked():
    with pytest.raises(P.ProblemError, match="multiple of the tile's m=256"):
        P.PatchEmbed(name="bad", m=300, n=256, k=128)
    with pytest.raises(P.ProblemError, match="k=100 is not a multiple"):
        P.NvFp4Gemm(name="bad", m=128, n=128, k=100)


def test_make_inputs_deterministic_and_typed():
    p = P.patch_embed("small")
    x1, x2, x3 = p.make_inputs(7), p.make_inputs(7), p.make_inputs(8)
    for k in ("a", "b", "bias", "pos", "comb"):
        assert torch.equal(x1[k].view(torch.uint8), x2[k].view(torch.uint8)), k
    assert not torch.equal(x1["a"].view(torch.uint8), x3["a"].view(torch.uint8))
    assert x1["a"].dtype == P.FP8 and x1["b"].dtype == P.FP8
    assert x1["comb"].dtype == P.BF16 and x1["comb"].shape == (196, 256)
    assert torch.equal(x1["comb"], (x1["bias"].float()[None] + x1["pos"].float()).to(P.BF16))
    assert torch.isnan(x1["out"].float()).all()
    assert p.validate(x1) == torch.device("cpu")


def test_row_slices_do_not_change_the_draw():
    # The generator draws in fixed slices, so a problem spanning two slices still matches itself.
    p = P.PatchEmbed(name="two_slices", m=P._GEN_ROWS + 256, n=256, k=128)
    a = p.make_inputs(3)["a"]
    assert a.shape == (P._GEN_ROWS + 256, 128)
    assert torch.equal(a.view(torch.uint8), p.make_inputs(3)["a"].view(torch.uint8))


def _misaligned(shape, dtype):
    """A contiguous tensor whose first byte sits one element past a 16-B aligned address."""
    el = torch.empty((), dtype=dtype).element_size()
    n = math.prod(shape) * el
    raw = torch.zeros(n + 64, dtype=torch.uint8)
    off = (-raw.data_ptr()) % 16 + el
    return raw[off:off + n].view(dtype).view(shape)


def test_validate_errors_name_the_problem():
    p = P.patch_embed("tiny")
    good = p.make_inputs(0)
    cases = [
        ({"a": good["a"][:, :16].contiguous()}, "shape"),
        ({"b": good["b"].float()}, "dtype"),
        ({"a": good["a"].t().contiguous().t()}, "not contiguous"),
        ({"comb": _misaligned(good["comb"].shape, P.BF16)}, "16-B aligned"),
    ]
    for patch, msg in cases:
        bad = dict(good, **patch)
        with pytest.raises(P.ProblemError, match=msg):
            p.validate(bad)
    with pytest.raises(P.ProblemError, match="missing input 'comb'"):
        p.validate({"a": good["a"], "b": good["b"]})
    with pytest.raises(P.ProblemError, match="expected cuda"):
        p.validate(good, device="cuda")


def test_row_pitch_alignment():
    p = P.PatchEmbed(name="odd_n", m=8, n=12, k=16, positions=3, tile={"m": 8, "n": 4, "k": 16})
    x = p.make_inputs(0)  # comb rows are 12 x 2 = 24 B: not a TMA pitch
    with pytest.raises(P.ProblemError, match="row pitch"):
        p.validate(x)


def test_nvfp4_inputs_and_validation():
    q = P.nvfp4_gemm("small")
    x = q.make_inputs(5)
    assert x["a"].shape == (128, 256) and x["a"].dtype == torch.uint8
    assert x["sfa"].shape == (128, 32) and x["sfa"].dtype == P.FP8
    s = x["sfa"].float()
    assert (s >= 0.25).all() and (s <= 7.5).all()
    assert torch.equal(x["sfa_mma"].view(torch.uint8), R.sf_to_mma_layout(x["sfa"]).view(torch.uint8))
    assert x["sfb_mma"].numel() == R.sf_mma_size(256, 32)
    assert x["gsa"].dtype == torch.float32 and x["gsa"].numel() == 1
    assert torch.equal(x["a"], q.make_inputs(5)["a"])
    q.validate(x)
    only_mma = {k: v for k, v in x.items() if k not in ("sfa", "sfb")}
    q.validate(only_mma)
    with pytest.raises(P.ProblemError, match="scales"):
        q.validate({"a": x["a"], "b": x["b"]})
    with pytest.raises(P.ProblemError, match="dtype"):
        q.validate(dict(x, sfa=x["sfa"].float()))
    with pytest.raises(P.ProblemError, match="one-element float32"):
        q.validate(dict(x, gsa=torch.ones(2)))


def test_nvfp4_output_spread_is_moderate():
    q = P.nvfp4_gemm("small")
    x = q.make_inputs(1)
    d = R.nvfp4_gemm_reference(x["a"], x["sfa"], x["gsa"], x["b"], x["sfb"], x["gsb"]).float()
    assert torch.isfinite(d).all()
    assert 0.3 < d.std() < 3.0


@pytest.mark.gpu
def test_inputs_identical_on_gpu():
    p = P.patch_embed("small")
    cpu, gpu = p.make_inputs(11), p.make_inputs(11, device="cuda")
    for k in ("a", "b", "comb"):
        assert torch.equal(cpu[k].view(torch.uint8), gpu[k].cpu().view(torch.uint8))
    p.validate(gpu, device="cuda")


def test_unindexed_device_matches_any_index():
    # 'cuda' (the current device) must accept a tensor on 'cuda:0'; an H100 run found this.
    D = torch.device
    assert P._same_place(D("cuda", 0), D("cuda"))
    assert not P._same_place(D("cuda", 1), D("cuda", 0))
    assert not P._same_place(D("cpu"), D("cuda"))
