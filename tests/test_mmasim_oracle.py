"""The tensor core's arithmetic against the public hardware-validated model: MMA-Sim (Xie et al., arXiv 2511.10909;
PyPI mmasim 2.1.1, github.com/microsoft/MMA-Sim), bit for bit.

Per kind (wgmma FP8 E4M3 / E5M2 / mixed; tcgen05 kind::f8f6f4 the same; kind::mxf4nvf4.block16 with UE4M3
scales) and per input class (random, cancelling groups, a group whose products sum to zero, subnormals,
NaN/Inf, every scale range, C far above and below the products), a few thousand outputs each through:
pelib.numerics.blockfma (the Python model pelib.emulate and the probe scoring run) and the C++ twin the simulator runs
(src/kernels/sim/model/blockfma.h through model/abi.cpp, compiled here as tests/test_sim_models.py does), against
mmasim.nv_ptx WGMMA, TCGen05MMA and TCGen05MMABlockScale (.dpa: one output per vector). 0 mismatches wanted.
kind::mxf8f6f4 is not modelled by the project (pelib.numerics.blockfma.MMA_KINDS), so it has no row here.

mmasim reads packed E2M1 with the HIGH nibble as the lower K element (its arithmetic/helper.py
unpack_uint8_to_fp4); the PTX ISA and the project put the lower K element in the low nibble, so the bytes are
swapped before they are handed to mmasim (test_nibble_order shows the swap is needed)."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from pelib.numerics import blockfma as F
from pelib.sim import host as sim_host
from pelib.measure import tcprobe_sm100 as P
from pelib.numerics import tcvectors as V
from pelib.stage import Stage

torch = pytest.importorskip("torch")
mmasim = pytest.importorskip("mmasim", reason="mmasim==2.1.1 is in the test extra: pip install -e '.[test]'")
from mmasim.nv_ptx import TCGen05MMA, TCGen05MMABlockScale, WGMMA  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "src" / "kernels" / "sim" / "model"
CXX = shutil.which("g++") or shutil.which("clang++")
N = 2048                     # outputs per class (a specials class: N // 4)
FMT_CODE = {"e4m3": 0, "e5m2": 1}
FP32_MAX = 0x7F7FFFFF


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if CXX is None:
        pytest.skip("no host C++ compiler (g++ >= 11 or clang++ >= 14): install g++ to test the simulator's models")
    out = tmp_path_factory.mktemp("mmasim_oracle") / "pe_sim_models.so"
    cmd = [CXX, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
           f"-I{ROOT / 'src' / 'kernels' / 'sim'}", str(MODEL / "abi.cpp"), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"host build of the model ABI failed:\n{' '.join(cmd)}\n{r.stderr}"
    return ctypes.CDLL(str(out))


def _rng(*names):
    return np.random.default_rng([20261201, *(zlib.crc32(n.encode()) for n in names)])


def _call(lib, name, *args):
    err = ctypes.create_string_buffer(1024)
    rc = getattr(lib, name)(*args, err, ctypes.c_uint64(len(err)))
    if rc:
        raise RuntimeError(err.value.decode())


def _vp(x):
    return ctypes.c_void_p(x.ctypes.data)


def _exact_f32(v):
    """The exact sum (float64: the classes keep it exact) as FP32 bits."""
    return np.asarray(v, np.float64).astype(np.float32).view(np.uint32)


# ---- FP8 classes: a [n, 32], b [n, 32] bytes, c FP32 bits [n] --------------------------------------------------

def _fp8_rand(rng, fmt, shape, lo, hi, subnormal=0.0):
    return (V.rand_e4m3 if fmt == "e4m3" else V.rand_e5m2)(rng, shape, lo, hi, subnormal=subnormal)


def _finite_bytes(rng, fmt, shape):
    b = rng.integers(0, 256, shape).astype(np.uint8)
    bad = np.isnan(F.values(b, fmt)) | np.isinf(F.values(b, fmt))
    return np.where(bad, b & 0xF0, b).astype(np.uint8)   # exponent field below all ones: finite


def _fp8_class(name, fa, fb, n=N):
    rng = _rng("fp8", name, fa, fb)
    s = (n, 32)
    hi = {"e4m3": 8, "e5m2": 15}
    c = np.zeros(n, np.uint32)
    if name == "random":
        a, b = _finite_bytes(rng, fa, s), _finite_bytes(rng, fb, s)
        c = V.rand_f32(rng, n, rng.integers(-20, 20, n))
    elif name == "band":                      # products within 2 binades: the bits just below the window
        a, b = _fp8_rand(rng, fa, s, 0, 1), _fp8_rand(rng, fb, s, 0, 1)
        c = V.rand_f32(rng, n, rng.integers(0, 4, n))
    elif name == "cancel_c":                  # C = -(exact sum) +- 3 ulp: the result is a few bits of nothing
        a, b = _fp8_rand(rng, fa, s, -3, 3), _fp8_rand(rng, fb, s, -3, 3)
        ex = (F.values(a, fa) * F.values(b, fb)).sum(-1)
        c = (_exact_f32(-ex).astype(np.int64) + rng.integers(-3, 4, n)).astype(np.uint32)
    elif name == "cancel_groups":             # products cancel in pairs (half the vectors sum to exactly 0)
        a, b = _fp8_rand(rng, fa, s, 0, 6), _fp8_rand(rng, fb, s, 0, 6)
        a[:, 16:], b[:, 16:] = a[:, :16] ^ 0x80, b[:, :16]   # (-a_i) b_i cancels a_i b_i in any formats
        small = rng.random(n) < 0.5           # the other half: small terms under the cancelled ones
        a[small, 30:] = _fp8_rand(rng, fa, (int(small.sum()), 2), -6, -4)
        c = np.where(rng.random(n) < 0.5, V.rand_f32(rng, n, rng.integers(-30, 0, n)), 0).astype(np.uint32)
    elif name == "subnormals":                # mostly subnormal inputs, C subnormal or tiny
        a = _fp8_rand(rng, fa, s, -6 if fa == "e4m3" else -14, -4 if fa == "e4m3" else -12, subnormal=0.7)
        b = _fp8_rand(rng, fb, s, -6 if fb == "e4m3" else -14, -4 if fb == "e4m3" else -12, subnormal=0.7)
        c = np.where(rng.random(n) < 0.5, rng.integers(1, 1 << 23, n), V.rand_f32(rng, n, rng.integers(-126, -100, n)))
        c = (c | (rng.integers(0, 2, n) << 31)).astype(np.uint32)
    elif name == "c_above":                   # C 0-30 binades above the products
        a, b = _fp8_rand(rng, fa, s, -2, 2), _fp8_rand(rng, fb, s, -2, 2)
        c = V.rand_f32(rng, n, rng.integers(0, 31, n))
    elif name == "c_below":                   # C 0-40 binades below, sparse significands
        a, b = _fp8_rand(rng, fa, s, 0, hi[fa] // 2), _fp8_rand(rng, fb, s, 0, hi[fb] // 2)
        c = V.f32(rng.integers(0, 2, n), rng.integers(-40, 1, n), rng.integers(0, 8, n) << 20)
    elif name == "zeros":                     # 90 % zero elements, zero C a third of the time
        a, b = _fp8_rand(rng, fa, s, -4, 4), _fp8_rand(rng, fb, s, -4, 4)
        a = np.where(rng.random(s) < 0.9, 0, a).astype(np.uint8)
        c = np.where(rng.random(n) < 0.33, 0, V.rand_f32(rng, n, rng.integers(-10, 10, n))).astype(np.uint32)
    elif name == "specials":                  # NaN / Inf bytes, C +-Inf, NaN, FLT_MAX
        n = N // 4
        s = (n, 32)
        a, b = _finite_bytes(rng, fa, s), _finite_bytes(rng, fb, s)
        spec = {"e4m3": [0x7F, 0xFF], "e5m2": [0x7C, 0xFC, 0x7D, 0xFE]}
        for x, f in ((a, fa), (b, fb)):
            hit = rng.random(s) < 0.02
            x[hit] = rng.choice(spec[f], int(hit.sum()))
        c = rng.choice(np.array([0, 0x7F800000, 0xFF800000, 0x7FC00000, FP32_MAX, FP32_MAX | 1 << 31, 0x3F800000],
                                np.uint32), n)
    else:
        raise ValueError(name)
    return a.astype(np.uint8), b.astype(np.uint8), np.asarray(c, np.uint32)


FP8_CLASSES = ("random", "band", "cancel_c", "cancel_groups", "subnormals", "c_above", "c_below", "zeros", "specials")
FP8_PAIRS = (("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"))
FP8_KINDS = {"wgmma": (F.H100TC_MATLAB, lambda fa, fb: WGMMA("Hopper", f"m64n8k32.f32.{fa}.{fb}")),
             "tcgen05.f8f6f4": (F.B200_F8F6F4, lambda fa, fb: TCGen05MMA("Blackwell", f"m128n8k32.kind::f8f6f4.f32.{fa}.{fb}"))}
_TORCH_F8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def fp8_three(lib, kind, fa, fb, a, b, c):
    """(pelib.numerics.blockfma, the C++ twin, mmasim) FP32 bits [n] of one instruction per vector."""
    model, op = FP8_KINDS[kind]
    if fa == fb:
        py = model(a, b, c, fa)
    else:   # mixed formats through exact product values, as blockfma.mma and pelib.emulate take them
        with np.errstate(invalid="ignore"):   # Inf x 0 is NaN: the specials class
            pv = F.values(a, fa) * F.values(b, fb)
            py = model.from_products(pv, F.window_exponents(a, fa) + F.window_exponents(b, fb), c)
    cx = np.zeros(c.shape, np.uint32)
    p6 = (ctypes.c_int32 * 6)(*F.cxx_params(model))
    _call(lib, "pe_sim_dot_f8x_tiles", _vp(a), _vp(b), _vp(np.ascontiguousarray(c[:, None, None])), _vp(cx),
          ctypes.c_int64(len(c)), 1, 1, 32, 32, FMT_CODE[fa], FMT_CODE[fb], 1, p6)
    ta = torch.from_numpy(a.copy()).view(_TORCH_F8[fa])
    tb = torch.from_numpy(b.copy()).view(_TORCH_F8[fb])
    tc = torch.from_numpy(c.view(np.float32).copy())
    mm = op(fa, fb).dpa(ta, tb, tc).numpy().view(np.uint32)
    return py, cx, mm


# ---- kind::mxf4nvf4.block16 classes: E2M1 codes [n, 64], UE4M3 scales [n, 4] per operand, c [n] ---------------

def _scales(rng, shape, lo, hi):
    return P.ue4m3(rng.integers(lo, hi + 1, shape), rng.integers(0, 8, shape)).astype(np.uint8)


def _e2m1_values(codes):
    return np.where(codes & 8, -1.0, 1.0) * np.array([0, .5, 1, 1.5, 2, 3, 4, 6])[codes & 7]


def _mx_class(name, n=N):
    rng = _rng("mxf4", name)
    ca, cb = rng.integers(0, 16, (n, 64)), rng.integers(0, 16, (n, 64))
    sa, sb = _scales(rng, (n, 4), -4, 4), _scales(rng, (n, 4), -4, 4)
    c = np.where(rng.random(n) < 0.5, V.rand_f32(rng, n, rng.integers(-4, 12, n)), 0).astype(np.uint32)
    if name == "scale_range":                 # every UE4M3 scale byte but NaN (0x7F): 2^-9 .. 448
        sa, sb = rng.integers(0, 0x7F, (n, 4)), rng.integers(0, 0x7F, (n, 4))
    elif name == "cancel_groups":             # group 1 = -group 0 under large scales, small groups 2-3
        sa[:, 0], sb[:, 0] = _scales(rng, n, 6, 8), _scales(rng, n, 6, 8)
        sa[:, 1], sb[:, 1] = sa[:, 0], sb[:, 0]
        ca[:, 16:32], cb[:, 16:32] = ca[:, :16] ^ 8, cb[:, :16]
        sa[:, 2:], sb[:, 2:] = _scales(rng, (n, 2), -9, -3), _scales(rng, (n, 2), -9, -3)
        c = np.where(rng.random(n) < 0.5, V.rand_f32(rng, n, rng.integers(-30, -5, n)), 0).astype(np.uint32)
    elif name == "group_sums_zero":           # a group (under a large scale) whose products cancel inside it
        g = rng.integers(0, 4, n)
        rows = np.arange(n)
        for j in range(8):
            ca[rows, 16 * g + 8 + j] = ca[rows, 16 * g + j] ^ 8
            cb[rows, 16 * g + 8 + j] = cb[rows, 16 * g + j]
        sa[rows, g], sb[rows, g] = _scales(rng, n, 5, 8), _scales(rng, n, 5, 8)
        small = rng.random(n) < 0.5           # the others small, or zero
        for j in range(4):
            z = small & (g != j)
            sa[z, j] = 0
        c = np.where(rng.random(n) < 0.7, V.rand_f32(rng, n, rng.integers(-40, -5, n)), 0).astype(np.uint32)
    elif name == "cancel_c":                  # C = -(exact sum) +- 3 ulp
        pv = _e2m1_values(ca) * np.repeat(P.E.decode_values(sa, "ue4m3"), 16, -1)
        pv = (pv * _e2m1_values(cb) * np.repeat(P.E.decode_values(sb, "ue4m3"), 16, -1)).sum(-1)
        c = (_exact_f32(-pv).astype(np.int64) + rng.integers(-3, 4, n)).astype(np.uint32)
    elif name == "c_far":                     # C 2^-40 .. 2^40 times the products (12-16 binades below included)
        c = V.rand_f32(rng, n, rng.integers(-40, 41, n))
    elif name == "c_below_12_16":             # C 12-16 binades below the largest group: its last bits survive or not
        c = V.rand_f32(rng, n, rng.integers(-16, -11, n) + 8)
    elif name == "subnormal_scales":          # UE4M3 subnormals 2^-9 .. 7 * 2^-9
        sa, sb = rng.integers(1, 8, (n, 4)), rng.integers(1, 8, (n, 4))
        c = np.where(rng.random(n) < 0.5, V.rand_f32(rng, n, rng.integers(-30, -10, n)), 0).astype(np.uint32)
    elif name == "zero_scales":               # some scales zero: those groups are no term
        sa = np.where(rng.random((n, 4)) < 0.5, 0, sa)
        sb = np.where(rng.random((n, 4)) < 0.3, 0, sb)
        c = np.where(rng.random(n) < 0.7, V.rand_f32(rng, n, rng.integers(-30, 10, n)), 0).astype(np.uint32)
    elif name == "sparse":                    # 90 % zero codes
        ca = np.where(rng.random((n, 64)) < 0.9, 0, ca)
    elif name == "specials":                  # a NaN scale (0x7F), C +-Inf / NaN / FLT_MAX
        n = N // 4
        ca, cb, sa, sb = ca[:n], cb[:n], sa[:n], sb[:n]
        hit = rng.random((n, 4)) < 0.1
        sa = np.where(hit, 0x7F, sa)
        c = rng.choice(np.array([0, 0x7F800000, 0xFF800000, 0x7FC00000, FP32_MAX, 0x3F800000], np.uint32), n)
    elif name != "random":
        raise ValueError(name)
    return (P.pack_e2m1(ca), np.asarray(sa, np.uint8), P.pack_e2m1(cb), np.asarray(sb, np.uint8),
            np.asarray(c, np.uint32))


MX_CLASSES = ("random", "scale_range", "cancel_groups", "group_sums_zero", "cancel_c", "c_far", "c_below_12_16",
              "subnormal_scales", "zero_scales", "sparse", "specials")
MX_OP = "m128n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3"


def swap_nibbles(packed):
    p = np.asarray(packed, np.uint8)
    return ((p & 15) << 4 | p >> 4).astype(np.uint8)


def mx_mmasim(pa, sa, pb, sb, c):
    op = TCGen05MMABlockScale("Blackwell", MX_OP)
    e4 = torch.float8_e4m3fn
    return op.dpa(torch.from_numpy(swap_nibbles(pa)), torch.from_numpy(swap_nibbles(pb)),
                  torch.from_numpy(c.view(np.float32).copy()), torch.from_numpy(sa.copy()).view(e4),
                  torch.from_numpy(sb.copy()).view(e4)).numpy().view(np.uint32)


def mx_python(model, pa, sa, pb, sb, c):
    av, ae = P.mxf4_terms(pa, sa, model)
    bv, be = P.mxf4_terms(pb, sb, model)
    with np.errstate(invalid="ignore"):
        return model.from_products(av * bv, ae + be, c)


def mx_cxx(lib, model, pa, sa, pb, sb, c):
    n = len(c)
    out = np.zeros(n, np.uint32)
    p6 = (ctypes.c_int32 * 6)(*F.cxx_params(model))
    _call(lib, "pe_sim_dot_mxf4_tiles", _vp(pa), _vp(sa), _vp(pb), _vp(sb), _vp(np.ascontiguousarray(c)), _vp(out),
          ctypes.c_int64(n), 1, 1, 64, 0, 1, p6)
    return out


# ---- the table -------------------------------------------------------------------------------------------------

def oracle_table(lib) -> list[dict]:
    """One row per kind, formats and class: outputs compared, Python vs mmasim and C++ vs mmasim mismatches."""
    rows = []
    for kind in FP8_KINDS:
        for fa, fb in FP8_PAIRS:
            for name in FP8_CLASSES:
                a, b, c = _fp8_class(name, fa, fb)
                py, cx, mm = fp8_three(lib, kind, fa, fb, a, b, c)
                rows.append({"kind": f"{kind} {fa}.{fb}", "class": name, "outputs": len(c),
                             "python": int((py != mm).sum()), "cxx": int((cx != mm).sum()),
                             "finite": int(np.isfinite(mm.view(np.float32)).sum())})
    for name in MX_CLASSES:
        pa, sa, pb, sb, c = _mx_class(name)
        mm = mx_mmasim(pa, sa, pb, sb, c)
        py = mx_python(F.B200_MXF4NVF4, pa, sa, pb, sb, c)
        cx = mx_cxx(lib, F.B200_MXF4NVF4, pa, sa, pb, sb, c)
        rows.append({"kind": "tcgen05.mxf4nvf4.block16 ue4m3", "class": name, "outputs": len(c),
                     "python": int((py != mm).sum()), "cxx": int((cx != mm).sum()),
                     "finite": int(np.isfinite(mm.view(np.float32)).sum()),
                     "guess": int((mx_python(F.B200_MXF4NVF4_GUESS, pa, sa, pb, sb, c) != mm).sum())})
    return rows


@pytest.fixture(scope="module")
def table(lib):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # mmasim's small tensor ops: one thread is several times faster on a busy CPU
    try:
        return oracle_table(lib)
    finally:
        torch.set_num_threads(threads)


def test_every_kind_and_class_matches_mmasim_bit_for_bit(table):
    bad = [r for r in table if r["python"] or r["cxx"]]
    assert not bad, bad
    assert sum(r["outputs"] for r in table) > 100_000
    kinds = {r["kind"] for r in table}
    assert len(kinds) == 7 and len(table) == 6 * len(FP8_CLASSES) + len(MX_CLASSES)


def test_the_classes_are_not_trivial(table):
    """Each class reaches what it is for: finite results mostly (the specials class: NaN and Inf too), and the
    earlier kind::mxf4nvf4 candidate differs from mmasim where groups cancel or sum to zero, so the comparison
    can tell rules apart."""
    for r in table:
        if r["class"] == "specials":
            assert 0 < r["finite"] < r["outputs"], r
        else:
            assert r["finite"] == r["outputs"], r
    guess = {r["class"]: r["guess"] for r in table if "guess" in r}
    assert guess["cancel_groups"] > 100 and guess["group_sums_zero"] > 100, guess


def test_the_comparison_can_fail():
    """A model one bit off the rule is caught: B200_F8F6F4 with 24 fraction bits, and the mxf4nvf4 rule with the
    old sum_zero group test (its only difference a group whose products sum to zero), both differ from mmasim."""
    a, b, c = _fp8_class("band", "e4m3", "e4m3")
    mm = TCGen05MMA("Blackwell", "m128n8k32.kind::f8f6f4.f32.e4m3.e4m3").dpa(
        torch.from_numpy(a).view(torch.float8_e4m3fn), torch.from_numpy(b).view(torch.float8_e4m3fn),
        torch.from_numpy(c.view(np.float32).copy())).numpy().view(np.uint32)
    assert (F.B200_F8F6F4.with_(frac_bits=24)(a, b, c) != mm).sum() > 50
    pa, sa, pb, sb, c = _mx_class("group_sums_zero")
    mm = mx_mmasim(pa, sa, pb, sb, c)
    drop = F.B200_MXF4NVF4.with_(empty_group="sum_zero")
    assert (mx_python(drop, pa, sa, pb, sb, c) != mm).sum() > 100
    assert (mx_python(F.B200_MXF4NVF4, pa, sa, pb, sb, c) == mm).all()


def test_nibble_order():
    """mmasim's packed E2M1 puts the lower K element in the high nibble: A fed as the project's bytes unswapped
    beside B as values, its outputs differ (swapping both operands alike permutes K inside each group, which no
    sum sees); swapped, they equal mmasim's value path and the project's."""
    pa, sa, pb, sb, c = _mx_class("random", 256)
    op = TCGen05MMABlockScale("Blackwell", MX_OP)
    e4 = torch.float8_e4m3fn
    args = (torch.from_numpy(c.view(np.float32).copy()), torch.from_numpy(sa.copy()).view(e4),
            torch.from_numpy(sb.copy()).view(e4))
    bvals = torch.from_numpy(P.E.decode_values(pb, "e2m1")).half()
    raw = op.dpa(torch.from_numpy(pa), bvals, *args).numpy().view(np.uint32)
    values = op.dpa(torch.from_numpy(P.E.decode_values(pa, "e2m1")).half(), bvals, *args).numpy().view(np.uint32)
    swapped = mx_mmasim(pa, sa, pb, sb, c)
    assert np.array_equal(swapped, values) and (raw != values).sum() > 200
    assert np.array_equal(mx_python(F.B200_MXF4NVF4, pa, sa, pb, sb, c), values)


def test_the_b200_probes_inputs_give_mmasims_bits():
    """On the B200 probe's own kind::mxf4nvf4 inputs (pelib.measure.tcprobe_sm100, one-instruction classes, 8 rows of A of
    each first quick tile against all 128 rows of B), the probe's scoring of B200_MXF4NVF4 (tcprobe_sm100.evaluate)
    prints mmasim's bits: a B200 that follows MMA-Sim scores it exact."""
    n = 0
    for job in P.jobs(quick=True):
        if job.kind != "mxf4nvf4" or job.steps != 1:
            continue
        arr = P.job_inputs(job)
        rows = {k: v[:1, :8] if k in ("a", "sfa_rows", "d") else v[:1] for k, v in arr.items()}
        want = P.evaluate(F.B200_MXF4NVF4, P.Job(job.name, job.kind, job.cls, 1), rows)[0]
        got = mx_mmasim(np.repeat(rows["a"][0], 128, 0), np.repeat(rows["sfa_rows"][0], 128, 0),
                        np.tile(rows["b"][0], (8, 1)), np.tile(rows["sfb_rows"][0], (8, 1)),
                        rows["d"][0].reshape(-1)).reshape(8, 128)
        assert np.array_equal(got, want), job.name
        n += got.size
    assert n >= 6 * 1024


def test_a_simulated_nvfp4_stage_prints_mmasims_tile():
    """nvfp4/00_single_stage run end to end in the simulator (pelib.sim, its tcgen05.mma under the default
    accumulation) on the project's random inputs: its first 128 x 128 output tile equals mmasim's on the same
    bytes, bit for bit: every 64-product kind::mxf4nvf4 instruction in K order through
    TCGen05MMABlockScale.dpa, D carried in FP32 from 0, then the stage's epilogue, FP16(alpha * D) rounded to
    nearest (cvt.rn.f16.f32)."""
    s = Stage("nvfp4/00_single_stage")
    t = s.inputs("sim", 0, "sim")
    r = sim_host.run(s, "sim", seed=0, inputs=t)
    assert r["ok"], r["verify"]
    a, b = t["a"].numpy(), t["b"].numpy()
    sfa, sfb = t["sfa"].view(torch.uint8).numpy(), t["sfb"].view(torch.uint8).numpy()
    tm = tn = 128
    k = 2 * a.shape[1]
    rows, cols = np.repeat(np.arange(tm), tn), np.tile(np.arange(tn), tm)
    acc = np.zeros(tm * tn, np.uint32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for k0 in range(0, k, 64):
            kb, ks = slice(k0 // 2, k0 // 2 + 32), slice(k0 // 16, k0 // 16 + 4)
            acc = mx_mmasim(np.ascontiguousarray(a[rows, kb]), np.ascontiguousarray(sfa[rows, ks]),
                            np.ascontiguousarray(b[cols, kb]), np.ascontiguousarray(sfb[cols, ks]), acc)
    finally:
        torch.set_num_threads(threads)
    alpha = np.float32(float(t["gsa"]) * float(t["gsb"]))
    want = (alpha * acc.view(np.float32)).astype(np.float16).reshape(tm, tn)
    got = t["out"][:tm, :tn].numpy()
    assert k >= 256 and np.array_equal(got.view(np.uint16), want.view(np.uint16))
    # the exact sum (one rounding to nearest per instruction) differs on the accumulator, so the equality says
    # which rule the simulator runs; the earlier candidate rule agrees on this random tile (as on random data
    # generally: the two rules part where groups cancel), so the book's NVFP4 outputs do not move with the change
    ex, guess = np.zeros((tm, tn), np.uint32), np.zeros((tm, tn), np.uint32)
    for k0 in range(0, k, 64):
        kb, ks = slice(k0 // 2, k0 // 2 + 32), slice(k0 // 16, k0 // 16 + 4)
        av, ae = P.mxf4_terms(a[:tm, kb], sfa[:tm, ks], F.B200_MXF4NVF4_GUESS)
        bv, be = P.mxf4_terms(b[:tn, kb], sfb[:tn, ks], F.B200_MXF4NVF4_GUESS)
        guess = F.mma(F.B200_MXF4NVF4_GUESS, av, ae, bv, be, guess, k0 > 0)
        ex = F.mma(F.ExactSum(k=64), av, ae, bv, be, ex, k0 > 0)
    assert (ex != acc.reshape(tm, tn)).sum() > 100
    assert np.array_equal(guess, acc.reshape(tm, tn))


def test_the_cxx_entries_refuse_what_they_do_not_model(lib):
    z8, z32 = np.zeros(64, np.uint8), np.zeros(1, np.uint32)
    grouped = (ctypes.c_int32 * 6)(*F.cxx_params(F.B200_MXF4NVF4))
    with pytest.raises(RuntimeError, match="FP8 products have no scales"):
        _call(lib, "pe_sim_dot_f8x_tiles", _vp(z8), _vp(z8), _vp(z32), _vp(z32.copy()), ctypes.c_int64(1), 1, 1, 64,
              64, 0, 0, 1, grouped)
    with pytest.raises(RuntimeError, match="whole instructions of 64"):
        _call(lib, "pe_sim_dot_mxf4_tiles", _vp(z8), _vp(z8), _vp(z8), _vp(z8), _vp(z32), _vp(z32.copy()),
              ctypes.c_int64(1), 1, 1, 32, 0, 1, grouped)
    with pytest.raises(RuntimeError, match="scale_fmt 7"):
        _call(lib, "pe_sim_dot_mxf4_tiles", _vp(z8), _vp(z8), _vp(z8), _vp(z8), _vp(z32), _vp(z32.copy()),
              ctypes.c_int64(1), 1, 1, 64, 7, 1, grouped)
    bad = (ctypes.c_int32 * 6)(35, 23, -139, 64, 0, 24)
    with pytest.raises(RuntimeError, match="group 0 or 1..16 dividing"):
        _call(lib, "pe_sim_dot_mxf4_tiles", _vp(z8), _vp(z8), _vp(z8), _vp(z8), _vp(z32), _vp(z32.copy()),
              ctypes.c_int64(1), 1, 1, 64, 0, 1, bad)
