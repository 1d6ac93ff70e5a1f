"""The tensor core's block FMA in one rule, two implementations: the simulator's C++ (src/kernels/sim/model/
blockfma.h, through the engine library) and pelib.numerics.blockfma, checked bit for bit against each other and
against the H100's own output bits on every probe vector committed in results/2026-11-27-h100
(pelib.measure.tcprobe: 2,867,200 FP32 results of wgmma.m64nNk32 E4M3 and E5M2, directed and random classes)."""
from __future__ import annotations

import numpy as np
import pytest

from pelib.numerics import blockfma as F
from pelib.sim import engine as sim
from pelib.measure import tcprobe as P
from pelib.numerics import tcvectors as V
from pelib.paths import ROOT

PROBE_DIR = ROOT / "results" / "2026-11-27-h100"


@pytest.fixture(scope="module")
def probe():
    return P.load(PROBE_DIR)


def _cls(name):
    return V.CLASSES[name.split(".")[0]]


def test_the_simulators_model_prints_the_h100s_bits_on_every_probe_output(probe):
    """Every one of the 2,867,200 committed outputs through the C++ model the simulator runs (default
    accumulation): 0 differ. The exact sum, the previous model, differs on over a million."""
    n = same = exact_differs = 0
    for name, arr in probe.items():
        c = _cls(name)
        got = sim.dot_f8_tiles(arr["a"], arr["b"], arr["d"], c.fmt, P.first_scale_d(c))
        same += int((got == arr["out"]).sum())
        n += arr["out"].size
        if name in ("random_spread", "carry_out", "e5m2_random_spread"):
            ex = sim.dot_f8_tiles(arr["a"], arr["b"], arr["d"], c.fmt, P.first_scale_d(c), model=F.EXACT_SUM)
            exact_differs += int((ex != arr["out"]).sum())
    assert n == 2_867_200 and same == n
    assert exact_differs > 400_000


def test_python_and_cxx_agree_bit_for_bit_on_a_subsample_of_every_class(probe):
    """pelib.numerics.blockfma (what pelib.emulate runs) and the C++ model on the first 4 rows of the first tile of
    every class: equal to each other and to the GPU; the exact sums of both equal too."""
    for name, arr in probe.items():
        c = _cls(name)
        a, b, d, out = arr["a"][:1, :4], arr["b"][:1], arr["d"][:1, :4], arr["out"][:1, :4]
        first = P.first_scale_d(c)
        py = P.evaluate(F.H100TC_MATLAB, a, b, d, first, c.fmt)
        cx = sim.dot_f8_tiles(a, b, d, c.fmt, first, model=F.H100TC_MATLAB)
        assert np.array_equal(py, out) and np.array_equal(cx, out), name
        assert np.array_equal(P.evaluate(F.EXACT_SUM, a, b, d, first, c.fmt),
                              sim.dot_f8_tiles(a, b, d, c.fmt, first, model=F.EXACT_SUM)), name


def test_the_cxx_defaults_are_the_python_presets():
    """model/blockfma.h's constants (WGMMA_F8_H100, UMMA_F8F6F4_B200, UMMA_MXF4NVF4_B200) are pelib.numerics.blockfma's
    tensor_core models; a launch sets the engine's from Python, the model ABI starts with the constants."""
    want = {k: F.cxx_params(m) for k, m in F.mma_models("tensor_core").items()}
    assert sim.engine_accumulation(defaults=True) == want
    assert want["wgmma_f8"] == [13, 13, -133, 32, 0, 0] and want["umma_f8f6f4"][:2] == [25, 23]
    assert want["umma_mxf4nvf4"] == [35, 23, -139, 64, 0, 16]   # MMA-Sim's G = 16, F = 35, e_zero = -139


def test_accumulation_choices_and_what_they_refuse(monkeypatch):
    assert sim.current_accumulation()[0] == "tensor_core"
    with sim.accumulation("exact") as label:
        assert label == "exact" and sim.current_accumulation()[1]["wgmma_f8"] is F.EXACT_SUM
    with sim.accumulation(umma_mxf4nvf4=F.B200_MXF4NVF4_GUESS.with_(frac_bits=37)) as label:
        assert sim.current_accumulation()[1]["umma_mxf4nvf4"].frac_bits == 37 and "umma_mxf4nvf4" in label
    with pytest.raises(sim.SimError, match="empty_group"):   # groups only as MMA-Sim's rule
        with sim.accumulation(umma_mxf4nvf4=F.B200_MXF4NVF4.with_(empty_group="sum_zero")):
            pass
    with pytest.raises(sim.SimError, match="one of .'tensor_core', 'exact'"):
        with sim.accumulation("fast"):
            pass
    with pytest.raises(sim.SimError, match="fp22_plain.*max_term"):   # the C++ twin has no knob for it
        with sim.accumulation(wgmma_f8=F.FP22_PLAIN):
            pass
    monkeypatch.setenv(sim.ACCUMULATION_ENV, "exact")
    assert sim.current_accumulation()[0] == "exact"
    monkeypatch.setenv(sim.ACCUMULATION_ENV, "bogus")
    with pytest.raises(sim.SimError, match="PELIB_SIM_ACCUMULATION='bogus'"):
        sim.current_accumulation()
    with pytest.raises(sim.SimError, match=r"A \[T, M, K\]"):
        sim.dot_f8_tiles(np.zeros((1, 4, 32), np.uint8), np.zeros((1, 8, 16), np.uint8), np.zeros((1, 4, 8), np.uint32))


# The C++ model reads each instruction's operands decoded once and sums a block in doubles where the rule's
# terms fit 31 bits (model/blockfma.h block_f8_decoded), in 64-bit shifts where they do not: both against the
# exact rational reference of tests/test_blockfma.py, on every rule the C++ side can be given, both formats,
# tiles whose rows share operands as a wgmma's do, plus rows with NaN or Inf among finite ones.
from test_blockfma import _random_vectors, reference   # noqa: E402

_CXX_RULES = [   # (frac_bits, out_bits, block, round_nearest): 13/13/32 Hopper, 25/23/32 tcgen05 f8f6f4
    (13, 13, 32, 0), (25, 23, 32, 0), (8, 23, 32, 1), (20, 17, 16, 0), (26, 23, 32, 1),
    (30, 23, 32, 0), (36, 20, 16, 1), (40, 23, 32, 0)]


def _cxx_tiles(a, b, d, fmt, rule):
    import ctypes
    frac, out, block, rn = rule
    T, M, K = a.shape
    N = b.shape[1]
    p6 = (ctypes.c_int32 * 6)(frac, out, -1000, block, rn, 0)
    res = np.zeros((T, M, N), np.uint32)
    err = ctypes.create_string_buffer(512)
    vp = ctypes.c_void_p
    rc = sim._engine().pe_sim_dot_f8_tiles(vp(a.ctypes.data), vp(b.ctypes.data), vp(d.ctypes.data), vp(res.ctypes.data),
                                           ctypes.c_int64(T), M, N, K, K, int(fmt == "e5m2"), 1, p6, err,
                                           ctypes.c_uint64(len(err)))
    assert rc == 0, err.value.decode()
    return res


@pytest.mark.parametrize("rule", _CXX_RULES, ids=[f"f{r[0]}-o{r[1]}-k{r[2]}-{'rn' if r[3] else 'rz'}" for r in _CXX_RULES])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_the_cxx_fast_paths_equal_the_exact_rational_rule(rule, fmt):
    frac, out, block, rn = rule
    rng = np.random.default_rng(frac * 131 + out * 7 + block + rn + (fmt == "e5m2"))
    a, b, d = _random_vectors(rng, 48, fmt)
    a, b, d = np.ascontiguousarray(a.reshape(4, 12, 32)), np.ascontiguousarray(b[:24].reshape(1, 24, 32)), d
    b = np.ascontiguousarray(np.repeat(b, 4, axis=0))
    dd = np.ascontiguousarray(rng.choice(d, (4, 12, 24)).astype(np.uint32))
    got = _cxx_tiles(a, b, dd, fmt, rule)
    model = F.BlockFMA("cxx", frac_bits=min(frac, 26), ref="exp_sum", d_ref="expo", d_stage="block",
                       trunc="toward_zero", out_bits=out, out_round="rn" if rn else "rz", k=32, group=32)
    import dataclasses
    model = dataclasses.replace(model, frac_bits=frac) if frac > 26 else model   # reference() reads the fields only
    bad = []
    for t in range(4):
        for i in range(12):
            for j in range(24):
                if block == 32:
                    want = reference(a[t, i], b[t, j], dd[t, i, j], model, fmt)
                else:   # two blocks of 16, D carried: the reference's 32-product vector with the other half zero
                    lo, hi = np.zeros(32, np.uint8), np.zeros(32, np.uint8)
                    lo[:16], hi[:16] = a[t, i, :16], a[t, i, 16:]
                    blo, bhi = np.zeros(32, np.uint8), np.zeros(32, np.uint8)
                    blo[:16], bhi[:16] = b[t, j, :16], b[t, j, 16:]
                    want = reference(hi, bhi, reference(lo, blo, dd[t, i, j], model, fmt), model, fmt)
                if int(got[t, i, j]) != want:
                    bad.append((t, i, j, hex(int(got[t, i, j])), hex(want)))
    assert not bad, f"{rule} {fmt}: {len(bad)} of {4 * 12 * 24} differ, e.g. {bad[:4]}"
