"""The simulator's data-path models (src/kernels/sim/model/*.h) against pelib's proven references.

A small C ABI (src/kernels/sim/model/abi.cpp) is compiled once per session with the host C++ compiler and
called through ctypes. Each model is compared byte for byte with pelib.emulate (TMA boxes and swizzles,
operand reads through GMMA/UMMA descriptors, TMEM maps) and pelib.isa.descriptors (descriptor decode), and the
MMA results with torch matmul, on random data.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from pelib.numerics import blockfma as F
from pelib.isa import descriptors as D
from pelib import emulate as E
from pelib.sim import tensormap as ST
from pelib import tma

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "src" / "kernels" / "sim" / "model"
CXX = shutil.which("g++") or shutil.which("clang++")

pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler (g++ >= 11 or clang++ >= 14): "
                                "install g++ to test the simulator's models")

POISON = E.SmemImage.POISON
U8P = ctypes.POINTER(ctypes.c_uint8)


class ModelError(Exception):
    pass


@pytest.fixture(scope="session")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim_models") / "pe_sim_models.so"
    cmd = [CXX, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
           f"-I{ROOT / 'src' / 'kernels' / 'sim'}", str(MODEL / "abi.cpp"), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"host build of the model ABI failed:\n{' '.join(cmd)}\n{r.stderr}"
    return ctypes.CDLL(str(out))


def call(lib, name, *args):
    """Call a C ABI function with the trailing (err, err_len) pair; raise ModelError with its text."""
    err = ctypes.create_string_buffer(1024)
    rc = getattr(lib, name)(*args, err, ctypes.c_uint64(len(err)))
    if rc:
        raise ModelError(err.value.decode())


def ptr(a: np.ndarray):
    return a.ctypes.data_as(U8P)


def i32s(*xs):
    return (ctypes.c_int32 * len(xs))(*xs)


def map_bytes(spec) -> np.ndarray:
    """The simulator map, 64-B aligned like a CUtensorMap parameter."""
    buf = np.zeros(128 + 64, dtype=np.uint8)
    off = (-buf.ctypes.data) % 64
    m = buf[off:off + 128]
    m[:] = np.frombuffer(ST.encode(spec), dtype=np.uint8)
    return m


# --- tensor map -------------------------------------------------------------------------------------
def _c_encode(lib, spec):
    r = spec.rank
    out = (ctypes.c_uint8 * 128)()
    call(lib, "pe_sim_encode_tensormap", out, ST.DTYPE_CODES[spec.dtype], spec.elem_bytes, r,
         (ctypes.c_uint64 * r)(*spec.dims), (ctypes.c_uint64 * max(1, r - 1))(*spec.strides),
         (ctypes.c_uint32 * r)(*spec.box), (ctypes.c_uint32 * r)(*spec.element_strides),
         spec.swizzle, spec.interleave, ST.OOB_CODES[spec.oob_fill], spec.l2_promotion,
         ctypes.c_uint64(spec.address))
    return bytes(out)


@pytest.mark.parametrize("spec", [
    tma.make_spec("float8_e4m3fn", (256, 512), (128, 128), swizzle=128, address=1 << 20),
    tma.make_spec("bfloat16", (100, 64), (32, 64), swizzle=128, address=16, l2_promotion=256),
    tma.make_spec("float32", (7, 9, 40), (2, 3, 8), swizzle=32, element_strides=(1, 2, 1)),
    tma.make_spec("uint8", (2, 3, 4, 5, 64), (1, 2, 3, 4, 64), swizzle=64),
], ids=["fp8-sw128", "bf16-l2", "f32-3d-estride", "rank5"])
def test_encode_python_and_c_agree(lib, spec):
    py = ST.encode(spec)
    assert py == _c_encode(lib, spec)
    d = ST.decode(py)
    assert (d["dims"], d["strides"], d["box"], d["element_strides"], d["swizzle"], d["address"]) == \
        (spec.dims, spec.strides, spec.box, spec.element_strides, spec.swizzle, spec.address)
    call(lib, "pe_sim_check_tensormap", map_bytes(spec).ctypes.data_as(ctypes.c_void_p))


def test_encode_refuses_bad_maps(lib):
    bad = tma.TensorMapSpec(dtype="uint8", dims=(64, 64), strides=(64,), box=(256, 8), swizzle=128)
    with pytest.raises(ModelError, match="swizzle 128B allows at most 128"):
        _c_encode(lib, bad)
    with pytest.raises(tma.TensorMapError):
        ST.encode(bad)
    with pytest.raises(ModelError, match="multiple of 16"):
        _c_encode(lib, tma.TensorMapSpec(dtype="uint8", dims=(64, 64), strides=(72,), box=(64, 8)))
    driver_like = np.zeros(128 + 64, dtype=np.uint8)
    off = (-driver_like.ctypes.data) % 64
    with pytest.raises(ModelError, match="magic word missing"):
        call(lib, "pe_sim_check_tensormap", driver_like[off:].ctypes.data_as(ctypes.c_void_p))


# --- TMA boxes --------------------------------------------------------------------------------------
SMEM = 192 * 1024
BASE = 0x400          # shared-window address of smem[0] (1024-B aligned, not 0: addresses are not offsets)


def _smem():
    return np.full(SMEM, POISON, dtype=np.uint8)


def _load(lib, spec, coords, dst, smem):
    nbytes = ctypes.c_uint32()
    call(lib, "pe_sim_tma_load_box", map_bytes(spec).ctypes.data_as(ctypes.c_void_p), i32s(*coords), len(coords),
         ptr(smem), SMEM, BASE, dst, ctypes.byref(nbytes))
    return nbytes.value


# (torch dtype, global rows, cols, box rows, box cols, swizzle): every swizzle with full-span rows,
# narrower rows (the 64-B row under 128B), 2- and 4-byte elements, unswizzled.
TMA_CASES = [
    (torch.uint8, 200, 320, 64, 128, 128),
    (torch.uint8, 100, 192, 32, 64, 128),      # 64-B rows under SWIZZLE_128B: 128 B apart
    (torch.uint8, 90, 160, 40, 64, 64),
    (torch.uint8, 70, 96, 24, 32, 32),
    (torch.uint8, 33, 80, 16, 16, 32),         # 16-B rows under 32B
    (torch.bfloat16, 96, 136, 32, 64, 128),
    (torch.bfloat16, 50, 72, 16, 16, 64),
    (torch.float32, 40, 44, 8, 32, 128),
    (torch.uint8, 77, 112, 20, 48, 0),
    (torch.float32, 30, 28, 12, 8, 0),
]


@pytest.mark.parametrize("case", TMA_CASES, ids=lambda c: f"{str(c[0])[6:]}-{c[4]}x{c[3]}-sw{c[5]}")
def test_tma_load_and_store_match_emulate(lib, case):
    dt, rows, cols, br, bc, sw = case
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    t = torch.randint(0, 256, (rows, cols * torch.empty(0, dtype=dt).element_size()), dtype=torch.uint8,
                      generator=g).view(dt).contiguous()
    tb = t.view(torch.uint8).numpy()
    spec = tma.make_spec(dt, t.shape, (br, bc), swizzle=sw, address=tb.ctypes.data)
    eb = spec.elem_bytes
    tm = E.TensorMap2D(8 * eb, (cols, rows), (bc, br), sw)
    dst = BASE + 2048
    # inside, straddling every edge, negative coordinates, wholly outside
    coords = [(0, 0), (bc, br), (cols - bc // 2, rows - br // 3), (-bc // 2, -3), (cols - 8 // eb, 5),
              (cols + 8, 0), (3 * 16 // eb, rows - 1)]
    for c in coords:
        smem = _smem()
        ref = E.SmemImage(SMEM, BASE)
        n = _load(lib, spec, c, dst, smem)
        E.tma_load_2d(tm, tb, c, ref, dst)
        assert n == tm.box_bytes
        assert np.array_equal(smem, ref.data), f"load at {c} differs from pelib.emulate (first byte " \
            f"{np.flatnonzero(smem != ref.data)[0]})"
        # store the box back to a poisoned global copy at other coordinates, clipped at the bounds
        c2 = (c[0] + 16 // eb, c[1] - 1)
        out = np.full_like(tb, 0xA5)
        sspec = tma.make_spec(dt, t.shape, (br, bc), swizzle=sw, address=out.ctypes.data)
        nb = ctypes.c_uint32()
        call(lib, "pe_sim_tma_store_box", map_bytes(sspec).ctypes.data_as(ctypes.c_void_p), i32s(*c2), 2,
             ptr(smem), SMEM, BASE, dst, ctypes.byref(nb))
        want = E.tma_store_2d(tm, ref, dst, c2, np.full_like(tb, 0xA5))
        assert np.array_equal(out, want), f"store at {c2} differs from pelib.emulate"


def test_tma_load_3d_and_element_strides(lib):
    """Rank 3 with an element stride on dim 1 and OOB on dim 2, against a direct numpy reference."""
    g = np.random.default_rng(7)
    t = g.integers(0, 256, (5, 12, 96), dtype=np.uint8)           # (d2, d1, d0)
    spec = tma.make_spec("uint8", t.shape, (3, 4, 64), swizzle=64, address=t.ctypes.data,
                         element_strides=(1, 3, 1))
    c = (16, 1, 3)                                                # c0, c1, c2 (innermost first)
    smem = _smem()
    n = _load(lib, spec, c, BASE, smem)
    n1 = -(-4 // 3)
    box = np.zeros((3, n1, 64), dtype=np.uint8)
    for j2 in range(3):
        for j1 in range(n1):
            g2, g1 = c[2] + j2, c[1] + 3 * j1
            if g2 < 5 and g1 < 12:
                box[j2, j1] = t[g2, g1, c[0]:c[0] + 64]
    assert n == box.size
    logical = BASE + np.arange(box.size)
    phys = E.swizzle_addr(logical, 64) - BASE
    want = _smem()
    want[phys] = box.reshape(-1)
    assert np.array_equal(smem, want)


def test_tma_checks(lib):
    t = np.zeros((64, 128), dtype=np.uint8)
    sw = tma.make_spec("uint8", t.shape, (64, 128), swizzle=128, address=t.ctypes.data)
    plain = tma.make_spec("uint8", t.shape, (64, 128), swizzle=0, address=t.ctypes.data)
    with pytest.raises(ModelError, match="not 1024-byte aligned"):
        _load(lib, sw, (0, 0), BASE + 512, _smem())
    _load(lib, plain, (0, 0), BASE + 128, _smem())            # 128 B is enough without a swizzle
    with pytest.raises(ModelError, match="not 128-byte aligned"):
        _load(lib, plain, (0, 0), BASE + 64, _smem())
    with pytest.raises(ModelError, match="outside this CTA's shared memory"):
        _load(lib, sw, (0, 0), BASE + SMEM - 4096, _smem())
    with pytest.raises(ModelError, match="outside this CTA's shared memory"):
        _load(lib, sw, (0, 0), 0, _smem())
    with pytest.raises(ModelError, match="3 coordinates for a rank-2"):
        _load(lib, sw, (0, 0, 0), BASE, _smem())


# --- sm_90 wgmma ------------------------------------------------------------------------------------
def _gmma_decode(lib, desc):
    out = (ctypes.c_uint32 * 4)()
    bo = ctypes.c_uint32()
    call(lib, "pe_sim_decode_gmma_desc", ctypes.c_uint64(desc), out, ctypes.byref(bo))
    return {"addr": out[0], "lbo": out[1], "sbo": out[2], "swizzle": out[3], "base_offset": bo.value}


def test_gmma_desc_decode_round_trips(lib):
    rng = np.random.default_rng(1)
    for _ in range(200):
        f = {"addr": int(rng.integers(0, 1 << 14)) << 4, "lbo": int(rng.integers(0, 1 << 14)) << 4,
             "sbo": int(rng.integers(0, 1 << 14)) << 4, "swizzle": int(rng.choice([0, 32, 64, 128])),
             "base_offset": int(rng.integers(0, 8))}
        v = D.gmma_smem_desc(**f)
        assert _gmma_decode(lib, v) == D.decode_gmma_smem_desc(v) == f
    with pytest.raises(ModelError, match="bit 46"):
        _gmma_decode(lib, D.umma_smem_desc(1024, 16, 1024, 128))


def _operand(lib, smem, desc, rows, kbytes, fn="pe_sim_read_gmma_operand", base=BASE):
    out = np.zeros(rows * kbytes, dtype=np.uint8)
    call(lib, fn, ptr(smem), SMEM, base, ctypes.c_uint64(desc), rows, kbytes, ptr(out))
    return out.reshape(rows, kbytes)


@pytest.mark.parametrize("sw", [0, 32, 64, 128])
def test_gmma_operand_reads_match_emulate(lib, sw):
    """Every byte an m64nNk32 operand reads through a descriptor (K advance included) is the byte
    pelib.emulate.operand_addresses names, on a random shared-memory image."""
    rng = np.random.default_rng(sw)
    smem = rng.integers(0, 256, SMEM, dtype=np.uint8)
    img = E.SmemImage(SMEM, BASE)
    img.data[:] = smem
    # a K advance stays inside one swizzle row (32/64/96 B under 128B), as the stages advance
    for start, lbo, sbo, adv in ((4096, 16, 8 * max(sw, 16), 0), (8192, 256, 8 * max(sw, 16), 32 if sw != 32 else 0),
                                 (2048, 1024, 2 * 8 * max(sw, 16), 96 if sw == 128 else 16)):
        desc = D.smem_desc_advance(D.gmma_smem_desc(BASE + start, lbo, sbo, sw), adv)
        got = _operand(lib, smem, desc, 64, 32)
        want = img.read(E.operand_addresses(desc, 64, 32, "K", arch="sm_90a"))
        assert np.array_equal(got, want)


def _gmma(lib, smem, adesc, bdesc, n, scale_d, acc, model=None):
    if model is None:
        call(lib, "pe_sim_gmma_e4m3", ptr(smem), SMEM, BASE, ctypes.c_uint64(adesc), ctypes.c_uint64(bdesc), n,
             int(scale_d), acc.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    else:
        call(lib, "pe_sim_gmma_f8", ptr(smem), SMEM, BASE, ctypes.c_uint64(adesc), ctypes.c_uint64(bdesc), n, 0,
             int(scale_d), acc.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), (ctypes.c_int32 * 6)(*F.cxx_params(model)))


def _frag_to_tile(acc, n):
    amap = E.wgmma_acc_map(n)
    d = np.full((64, n), np.nan)
    d[amap[..., 0], amap[..., 1]] = acc
    return d


def _fp8(rng, shape, small):
    if small:
        return E.encode_e4m3(rng.integers(-4, 5, shape))
    return E.encode_e4m3(rng.normal(0, 2, shape).clip(-400, 400))


@pytest.mark.parametrize("n,small", [(64, True), (96, False), (128, True), (192, False), (256, False)])
def test_gmma_e4m3_k_loop_matches_torch(lib, n, small):
    """A 64 x N x 128 product as the sm90 stages issue it: TMA (SW128, 128-B K rows) loads A and B, four
    wgmma K-steps advance the descriptors by 32 B inside the swizzle atom, scale_d = 0 on the first. The
    default arithmetic is the Hopper block FMA: bit for bit pelib.numerics.blockfma's H100 model of the same bytes,
    within its truncation of torch; the exact accumulation is torch's sum rounded per instruction."""
    rng = np.random.default_rng(n)
    K = 128
    a, b = _fp8(rng, (64, K), small), _fp8(rng, (n, K), small)
    smem = _smem()
    a_off, b_off = BASE + 1024, BASE + 1024 + 64 * 128
    for g, off, rows in ((a, a_off, 64), (b, b_off, n)):
        spec = tma.make_spec("uint8", g.shape, (rows, 128), swizzle=128, address=g.ctypes.data)
        _load(lib, spec, (0, 0), off, smem)
    da, db = D.gmma_smem_desc(a_off, 16, 1024, 128), D.gmma_smem_desc(b_off, 16, 1024, 128)
    av = torch.from_numpy(E.decode_values(a, "e4m3"))
    bv = torch.from_numpy(E.decode_values(b, "e4m3"))
    ref = (av @ bv.T).numpy()
    model = F.chain(F.H100TC_MATLAB, a[:, None, :], b[None, :, :], np.zeros((64, n), np.uint32), first_scale_d=False)
    for how in (None, F.EXACT_SUM):
        acc = np.full((128, n // 2), np.nan, dtype=np.float32)      # poisoned: scale_d = 0 must ignore it
        for s in range(K // 32):
            _gmma(lib, smem, D.smem_desc_advance(da, 32 * s), D.smem_desc_advance(db, 32 * s), n, s > 0, acc, how)
        got = _frag_to_tile(acc, n)
        if small:
            assert np.array_equal(got, ref), "small-integer inputs must give exact sums"
        elif how is None:
            assert np.array_equal(got.astype(np.float32).view(np.uint32), model), "the block FMA, bit for bit"
            np.testing.assert_allclose(got, ref, rtol=0, atol=2.0 ** -8 * np.abs(ref).max())
            assert not np.array_equal(got, ref.astype(np.float32))
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())


def test_gmma_wrong_sbo_predicted_by_emulate(lib):
    """A wrong SBO (512 B instead of 8 x 128 B) reads other bytes; the model reads exactly the bytes
    pelib.emulate predicts, and the product differs from the correct one."""
    rng = np.random.default_rng(3)
    a, b = _fp8(rng, (64, 128), True), _fp8(rng, (64, 128), True)
    smem = _smem()
    for g, off in ((a, BASE + 1024), (b, BASE + 1024 + 8192)):
        spec = tma.make_spec("uint8", g.shape, (64, 128), swizzle=128, address=g.ctypes.data)
        _load(lib, spec, (0, 0), off, smem)
    img = E.SmemImage(SMEM, BASE)
    img.data[:] = smem
    da = D.gmma_smem_desc(BASE + 1024, 16, 512, 128)            # wrong: rows 8..15 read rows 4..7's bytes
    db = D.gmma_smem_desc(BASE + 1024 + 8192, 16, 1024, 128)
    acc = np.zeros((128, 32), dtype=np.float32)
    _gmma(lib, smem, da, db, 64, False, acc)
    ea = E.decode_values(E.read_operand(img, da, 64, 32, "K", arch="sm_90a"), "e4m3")
    eb = E.decode_values(E.read_operand(img, db, 64, 32, "K", arch="sm_90a"), "e4m3")
    pred = ea @ eb.T
    got = _frag_to_tile(acc, 64)
    assert np.array_equal(got, pred)
    right = E.decode_values(a[:, :32], "e4m3") @ E.decode_values(b[:, :32], "e4m3").T
    assert not np.array_equal(got, right)


def test_gmma_checks(lib):
    smem = _smem()
    acc = np.zeros((128, 32), dtype=np.float32)
    good = D.gmma_smem_desc(BASE + 1024, 16, 1024, 128)
    with pytest.raises(ModelError, match="multiple of 8"):
        _gmma(lib, smem, good, good, 60, False, acc)
    with pytest.raises(ModelError, match="base_offset"):
        _gmma(lib, smem, D.gmma_smem_desc(BASE + 1024, 16, 1024, 128, base_offset=1), good, 64, False, acc)
    with pytest.raises(ModelError, match="outside this CTA's shared memory"):
        _gmma(lib, smem, D.gmma_smem_desc(BASE + SMEM - 1024, 16, 1024, 128), good, 64, False, acc)
    with pytest.raises(ModelError, match="not on a 1024-B swizzle pattern boundary"):
        _gmma(lib, smem, D.gmma_smem_desc(BASE + 1024 + 512, 16, 1024, 128), good, 64, False, acc)


# --- sm_100 tcgen05 ---------------------------------------------------------------------------------
KIND = {"f16": 0, "f8f6f4": 2, "mxf4nvf4": 6}
IDESC_FIELDS = ("m", "n", "a_fmt", "b_fmt", "c_fmt", "a_major", "b_major", "a_neg", "b_neg", "scale_fmt",
                "a_sf_id", "b_sf_id", "k_size", "sparse", "saturate", "max_shift")
U32P = ctypes.POINTER(ctypes.c_uint32)
NAN_BITS = 0x7FC00000


def _umma_smem_decode(lib, desc):
    out = (ctypes.c_uint32 * 4)()
    bo = ctypes.c_uint32()
    call(lib, "pe_sim_decode_umma_smem_desc", ctypes.c_uint64(desc), out, ctypes.byref(bo))
    return {"addr": out[0], "lbo": out[1], "sbo": out[2], "swizzle": out[3], "base_offset": bo.value, "lbo_mode": 0}


def _idesc_decode(lib, v, kind):
    out = (ctypes.c_int32 * 16)()
    call(lib, "pe_sim_decode_umma_idesc", ctypes.c_uint32(v), KIND[kind], out)
    return dict(zip(IDESC_FIELDS, out))


def test_umma_smem_desc_decode_round_trips(lib):
    rng = np.random.default_rng(2)
    for _ in range(200):
        f = {"addr": int(rng.integers(0, 1 << 14)) << 4, "lbo": int(rng.integers(0, 1 << 14)) << 4,
             "sbo": int(rng.integers(0, 1 << 14)) << 4, "swizzle": int(rng.choice([0, 32, 64, 128])),
             "base_offset": int(rng.integers(0, 8)), "lbo_mode": 0}
        v = D.umma_smem_desc(**f)
        assert _umma_smem_decode(lib, v) == D.decode_umma_smem_desc(v) == f
    with pytest.raises(ModelError, match="misses bit 46"):
        _umma_smem_decode(lib, D.gmma_smem_desc(1024, 16, 1024, 128))
    with pytest.raises(ModelError, match="layout type 3"):
        _umma_smem_decode(lib, D.umma_smem_desc(1024, 16, 1024, 0) | 3 << 61)
    with pytest.raises(ModelError, match="reserved bits"):
        _umma_smem_decode(lib, D.umma_smem_desc(1024, 16, 1024, 128) | 1 << 55)
    with pytest.raises(ModelError, match="BASE32B is not modelled"):
        _umma_smem_decode(lib, D.umma_smem_desc(1024, 16, 1024, "128B_base32b"))


def test_umma_idesc_decode_round_trips(lib):
    rng = np.random.default_rng(4)
    for _ in range(100):
        kind = str(rng.choice(["f16", "f8f6f4"]))
        fmts = list(D.A_FORMATS[kind])
        kw = {"m": int(rng.choice([64, 128, 256])), "n": 8 * int(rng.integers(1, 33)),
              "a_fmt": str(rng.choice(fmts)), "b_fmt": str(rng.choice(fmts)), "a_neg": int(rng.integers(0, 2)),
              "b_neg": int(rng.integers(0, 2)), "a_major": "K", "b_major": str(rng.choice(["K", "MN"])), "kind": kind}
        if kind == "f8f6f4" and kw["b_fmt"] not in ("e4m3", "e5m2"):
            kw["b_major"] = "K"
        v = D.umma_instr_desc(**kw)
        ref = D.decode_umma_instr_desc(v, kind)
        got = _idesc_decode(lib, v, kind)
        for k in ("m", "n", "a_neg", "b_neg", "saturate", "max_shift", "sparse"):
            assert got[k] == ref[k], k
        assert (got["a_fmt"], got["b_fmt"]) == (D.A_FORMATS[kind][ref["a_fmt"]], D.A_FORMATS[kind][ref["b_fmt"]])
        assert (got["a_major"], got["b_major"]) == (D.MAJORS[ref["a_major"]], D.MAJORS[ref["b_major"]])
        assert got["c_fmt"] == D.C_FORMATS[ref["c_fmt"]]
    for m in (128, 256):
        for n in (64, 128, 256):
            for sf in ("ue4m3", "ue8m0"):
                v = D.umma_instr_desc_block_scaled(m, n, scale_fmt=sf, b_sf_id=0 if sf == "ue4m3" else 2)
                ref = D.decode_umma_instr_desc_block_scaled(v)
                got = _idesc_decode(lib, v, "mxf4nvf4")
                assert (got["m"], got["n"], got["a_fmt"], got["b_fmt"], got["a_sf_id"], got["b_sf_id"],
                        got["scale_fmt"]) == (ref["m"], ref["n"], 1, 1, ref["a_sf_id"], ref["b_sf_id"],
                                              D.SCALE_FORMATS[ref["scale_fmt"]])
    with pytest.raises(ModelError, match="reserved bit"):
        _idesc_decode(lib, D.umma_instr_desc(128, 128, "e4m3", "e4m3") | 1 << 23, "f8f6f4")
    with pytest.raises(ModelError, match="reserved bits"):
        _idesc_decode(lib, D.umma_instr_desc_block_scaled(128, 128) | 1 << 12, "mxf4nvf4")


@pytest.mark.parametrize("sw,major,eb", [(128, "K", 1), (64, "K", 1), (32, "K", 1), (0, "K", 1),
                                         (128, "MN", 2), (64, "MN", 1), (0, "MN", 2)])
def test_umma_operand_reads_match_emulate(lib, sw, major, eb):
    rng = np.random.default_rng(sw + eb)
    smem = rng.integers(0, 256, SMEM, dtype=np.uint8)
    img = E.SmemImage(SMEM, BASE)
    img.data[:] = smem
    W = max(sw, 16)
    desc = D.umma_smem_desc(BASE + 4096, 2048 if major == "MN" else 256, 8 * W if major == "K" else 1024, sw)
    out = np.zeros(128 * 32, dtype=np.uint8)
    call(lib, "pe_sim_read_umma_operand", ptr(smem), SMEM, BASE, ctypes.c_uint64(desc), 128, 32,
         int(major == "MN"), eb, ptr(out))
    want = img.read(E.operand_addresses(desc, 128, 32, major, arch="sm_100a", elem_bytes=eb))
    assert np.array_equal(out.reshape(128, 32), want)


class Cta:
    """One CTA for the tcgen05 model: a poisoned shared-memory image and a NaN-filled TMEM."""

    def __init__(self, alloc_col0=0, alloc_cols=512):
        self.smem = _smem()
        self.tmem = np.full((128, 512), NAN_BITS, dtype=np.uint32)
        self.alloc = (alloc_col0, alloc_cols)

    def acc(self, col, n):
        return self.tmem[:, col:col + n].copy().view(np.float32).astype(np.float64)


def _mma(lib, kind, ctas, d_tmem, adesc, bdesc, idesc, acc_in, sfa=0, sfb=0):
    n = len(ctas)
    call(lib, "pe_sim_umma_mma", KIND[kind], n, (U8P * n)(*[ptr(c.smem) for c in ctas]),
         (ctypes.c_uint32 * n)(*[SMEM] * n), (ctypes.c_uint32 * n)(*[BASE] * n),
         (U32P * n)(*[c.tmem.ctypes.data_as(U32P) for c in ctas]),
         (ctypes.c_uint32 * n)(*[c.alloc[0] for c in ctas]), (ctypes.c_uint32 * n)(*[c.alloc[1] for c in ctas]),
         d_tmem, ctypes.c_uint64(adesc), ctypes.c_uint64(bdesc), ctypes.c_uint32(idesc), int(acc_in), sfa, sfb)


def _tma_rows(lib, cta, g, row0, rows, off, box_k=128):
    """TMA-load rows [row0, row0+rows) of the byte matrix g, all of K in 128-B boxes (SW128), K boxes
    rows*128 B apart, as the stages lay a stage out."""
    spec = tma.make_spec("uint8", g.shape, (rows, box_k), swizzle=128, address=g.ctypes.data)
    for kb in range(g.shape[1] // box_k):
        _load(lib, spec, (kb * box_k, row0), off + kb * rows * box_k, cta.smem)


def _tmem_ld(lib, cta, warp, taddr, x):
    regs = np.zeros(32 * x, dtype=np.uint32)
    call(lib, "pe_sim_tmem_ld_32x32b", cta.tmem.ctypes.data_as(U32P), cta.alloc[0], cta.alloc[1], warp,
         ctypes.c_uint32(taddr), x, regs.ctypes.data_as(U32P))
    return regs.reshape(32, x)


@pytest.mark.parametrize("cta_group,n,small", [(1, 128, True), (1, 256, False), (2, 256, True), (2, 128, False)])
def test_umma_f8f6f4_matches_torch(lib, cta_group, n, small):
    """tcgen05.mma kind::f8f6f4 E4M3 over K = 256 (2 K boxes x 4 MMAs, descriptors advanced 32 B inside the
    128-B atom, enable-input-d off on the first): cta_group::1 M=128 and cta_group::2 M=256 with A and B
    halves loaded into each CTA's smem as pelib.emulate.cta_pair_split says; D read back with tcgen05.ld."""
    rng = np.random.default_rng(10 * cta_group + n)
    M, K = 128 * cta_group, 256
    a, b = _fp8(rng, (M, K), small), _fp8(rng, (n, K), small)
    ctas = [Cta(0, 512) for _ in range(cta_group)]
    a_off, b_off = BASE + 1024, BASE + 1024 + 128 * K
    split = E.cta_pair_split(M, n) if cta_group == 2 else [{"a_rows": (0, 128), "b_rows": (0, n), "d_rows": (0, 128)}]
    for c, part in zip(ctas, split):
        _tma_rows(lib, c, a, part["a_rows"][0], 128, a_off)
        _tma_rows(lib, c, b, part["b_rows"][0], part["b_rows"][1] - part["b_rows"][0], b_off)
    rows_b = n // cta_group
    idesc = D.umma_instr_desc(M, n, "e4m3", "e4m3")
    acc_col = 128 if (cta_group, n) == (1, 128) else 0     # a nonzero D column where it fits
    for s in range(K // 32):
        kb, ks = divmod(32 * s, 128)
        da = D.umma_smem_desc(a_off + kb * 128 * 128 + ks, 16, 1024, 128)
        db = D.umma_smem_desc(b_off + kb * rows_b * 128 + ks, 16, 1024, 128)
        _mma(lib, "f8f6f4", ctas, acc_col, da, db, idesc, s > 0)
    ref = (torch.from_numpy(E.decode_values(a, "e4m3")) @ torch.from_numpy(E.decode_values(b, "e4m3")).T).numpy()
    for v, c in enumerate(ctas):
        # the epilogue's view: 4 warps x 32 lanes, tcgen05.ld.32x32b.x32 per 32 columns
        got = np.zeros((128, n), dtype=np.uint32)
        for w in range(4):
            for j in range(n // 32):
                got[32 * w:32 * w + 32, 32 * j:32 * j + 32] = _tmem_ld(lib, c, w + 4, (32 * w) << 16 | acc_col + 32 * j, 32)
        bits = got.copy()
        got = got.view(np.float32).astype(np.float64)
        want = ref[128 * v:128 * v + 128]
        if not small:   # the predicted Blackwell block FMA, bit for bit pelib.numerics.blockfma's (pelib.emulate's) model
            rows = slice(128 * v, 128 * v + 128)
            model = np.zeros((128, n), np.uint32)
            for s in range(K // 32):
                ks = slice(32 * s, 32 * s + 32)
                model = F.mma(F.B200_F8F6F4, E.decode_values(a[rows, ks], "e4m3"), F.window_exponents(a[rows, ks], "e4m3"),
                              E.decode_values(b[:, ks], "e4m3"), F.window_exponents(b[:, ks], "e4m3"), model, s > 0)
            assert np.array_equal(bits, model)
        if small:
            assert np.array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(ref).max())
        # outside the accumulator TMEM is untouched
        assert (np.delete(c.tmem, np.s_[acc_col:acc_col + n], axis=1) == NAN_BITS).all()


def test_umma_f16_bf16_mn_major_b(lib):
    """kind::f16 BF16, A K-major SW128 and B MN-major SW128 (written at the addresses pelib.emulate's
    canonical MN-major layout names), one MMA of K = 16, with enable-input-d adding to D."""
    rng = np.random.default_rng(5)
    a = torch.randint(-8, 9, (128, 16)).to(torch.bfloat16)
    b = torch.randint(-8, 9, (64, 16)).to(torch.bfloat16)
    c = Cta(0, 256)
    img = E.SmemImage(SMEM, BASE)
    da = D.umma_smem_desc(BASE + 1024, 16, 1024, 128)
    db = D.umma_smem_desc(BASE + 1024 + 16384, 8192, 1024, 128)
    ab = a.view(torch.uint8).numpy().reshape(128, 32)
    bb = b.view(torch.uint8).numpy().reshape(64, 32)
    img.write(E.operand_addresses(da, 128, 32, "K"), ab)
    img.write(E.operand_addresses(db, 64, 32, "MN", elem_bytes=2), bb)
    c.smem[:] = img.data
    d0 = rng.integers(-100, 100, (128, 64)).astype(np.float32)
    c.tmem[:, 32:96] = d0.view(np.uint32)
    _mma(lib, "f16", [c], 32, da, db, D.umma_instr_desc(128, 64, "bf16", "bf16", b_major="MN", kind="f16"), True)
    want = d0 + (a.double() @ b.double().T).numpy()
    assert np.array_equal(c.acc(32, 64), want)


def test_tmem_ld_map_matches_emulate(lib):
    c = Cta(64, 128)
    rng = np.random.default_rng(6)
    c.tmem[:] = rng.integers(0, 2**32, c.tmem.shape, dtype=np.uint32)
    t = E.Tmem(512)
    t.data[:] = c.tmem
    for warp in range(8):
        for x in (1, 2, 16, 32, 64):
            col = 64 + (warp * 8) % (128 - x + 1)
            taddr = (32 * (warp % 4)) << 16 | col
            regs = _tmem_ld(lib, c, warp, taddr, x)
            assert np.array_equal(regs, E.tcgen05_ld_32x32b(t, warp, taddr, x).astype(np.uint32))
            m = E.tmem_ld_map(warp, x, col)
            assert np.array_equal(regs, c.tmem[m[..., 0], m[..., 1]])
    with pytest.raises(ModelError, match="lanes 32..63"):
        _tmem_ld(lib, c, 5, 0 << 16 | 64, 32)
    with pytest.raises(ModelError, match="outside the allocation"):
        _tmem_ld(lib, c, 0, 64 + 112, 32)
    with pytest.raises(ModelError, match="beyond the 512 columns"):
        _tmem_ld(lib, Cta(0, 512), 0, 500, 16)
    with pytest.raises(ModelError, match=".num is one of"):
        _tmem_ld(lib, c, 0, 64, 3)


def test_umma_checks(lib):
    c = Cta(0, 128)
    good = D.umma_smem_desc(BASE + 1024, 16, 1024, 128)
    idesc = D.umma_instr_desc(128, 128, "e4m3", "e4m3")
    with pytest.raises(ModelError, match="outside the allocation"):
        _mma(lib, "f8f6f4", [c], 64, good, good, idesc, False)
    with pytest.raises(ModelError, match="beyond the 512 columns"):
        _mma(lib, "f8f6f4", [Cta(0, 512)], 448, good, good, idesc, False)
    with pytest.raises(ModelError, match="misses bit 46"):
        _mma(lib, "f8f6f4", [c], 0, D.gmma_smem_desc(BASE + 1024, 16, 1024, 128), good, idesc, False)
    with pytest.raises(ModelError, match="not on a 1024-B swizzle pattern boundary"):
        _mma(lib, "f8f6f4", [c], 0, D.umma_smem_desc(BASE + 1024 + 256, 16, 1024, 128), good, idesc, False)
    with pytest.raises(ModelError, match="cta_group::1 with M = 256"):
        _mma(lib, "f8f6f4", [c], 0, good, good, D.umma_instr_desc(256, 128, "e4m3", "e4m3"), False)
    with pytest.raises(ModelError, match="no allocation"):
        _mma(lib, "f8f6f4", [Cta(0, 0)], 0, good, good, idesc, False)


def _cp(lib, cta, taddr, desc):
    call(lib, "pe_sim_tmem_cp_32x128b_warpx4", ptr(cta.smem), SMEM, BASE, cta.tmem.ctypes.data_as(U32P),
         cta.alloc[0], cta.alloc[1], ctypes.c_uint32(taddr), ctypes.c_uint64(desc))


def test_tmem_cp_warpx4_matches_emulate(lib):
    rng = np.random.default_rng(8)
    c = Cta(0, 256)
    c.smem[:] = rng.integers(0, 256, SMEM, dtype=np.uint8)
    img = E.SmemImage(SMEM, BASE)
    img.data[:] = c.smem
    t = E.Tmem(256)
    for i, (off, lbo) in enumerate(((2048, 128), (2560, 16), (8192 + 512 * 3, 128))):
        desc = D.umma_smem_desc(BASE + off, lbo, 128, 0)
        _cp(lib, c, 100 + 4 * i, desc)
        E.tcgen05_cp_32x128b_warpx4(img, desc, t, 100 + 4 * i)
    assert np.array_equal(c.tmem[:, :256][:, 100:112], t.raw[:, 100:112])
    assert (np.delete(c.tmem, np.s_[100:112], axis=1) == NAN_BITS).all()
    with pytest.raises(ModelError, match="lane field must be 0"):
        _cp(lib, c, 32 << 16 | 100, D.umma_smem_desc(BASE + 2048, 128, 128, 0))
    with pytest.raises(ModelError, match="outside the allocation"):
        _cp(lib, c, 254, D.umma_smem_desc(BASE + 2048, 128, 128, 0))


@pytest.mark.parametrize("exact", [True, False])
def test_umma_mxf4nvf4_block16_matches_torch(lib, exact):
    """An NVFP4 K tile as nvfp4/00 issues it: packed E2M1 A (128 x 256) and B (128 x 256) by TMA (SW128),
    UE4M3 scale factors in the CUTLASS blocked atoms in smem, tcgen05.cp 32x128b.warpx4 of each atom to
    TMEM (SFA at column 256 + 4k, SFB at 272 + 4k), then 4 tcgen05.mma kind::mxf4nvf4.block_scale.block16
    with K = 64 each. Against torch: sum_k A[m,k] SFA[m,k/16] B[n,k] SFB[n,k/16]."""
    rng = np.random.default_rng(11 + exact)
    M = N = 128
    K = 256
    a = rng.integers(0, 256, (M, K // 2), dtype=np.uint8)
    b = rng.integers(0, 256, (N, K // 2), dtype=np.uint8)
    if exact:
        sfa = E.encode_e4m3(rng.choice([0.5, 1.0, 2.0, 4.0], (M, K // 16)))
        sfb = E.encode_e4m3(rng.choice([0.25, 1.0, 2.0], (N, K // 16)))
    else:
        sfa = E.encode_e4m3(rng.uniform(0.01, 300, (M, K // 16)))
        sfb = E.encode_e4m3(rng.uniform(0.01, 300, (N, K // 16)))
    c = Cta(0, 512)
    off_a, off_b, off_sfa, off_sfb = BASE + 1024, BASE + 1024 + 16384, BASE + 1024 + 32768, BASE + 1024 + 34816
    _tma_rows(lib, c, a, 0, M, off_a)
    _tma_rows(lib, c, b, 0, N, off_b)
    c.smem[off_sfa - BASE:off_sfa - BASE + 2048] = E.sf_to_blocked(sfa)
    c.smem[off_sfb - BASE:off_sfb - BASE + 2048] = E.sf_to_blocked(sfb)
    tm_sfa, tm_sfb = 256, 272
    for k in range(4):
        _cp(lib, c, tm_sfa + 4 * k, D.umma_smem_desc(off_sfa + 512 * k, 128, 128, 0))
        _cp(lib, c, tm_sfb + 4 * k, D.umma_smem_desc(off_sfb + 512 * k, 128, 128, 0))
    idesc = D.umma_instr_desc_block_scaled(M, N)
    da, db = D.umma_smem_desc(off_a, 16, 1024, 128), D.umma_smem_desc(off_b, 16, 1024, 128)
    for k in range(4):
        _mma(lib, "mxf4nvf4", [c], 0, D.smem_desc_advance(da, 32 * k), D.smem_desc_advance(db, 32 * k), idesc,
             k > 0, tm_sfa + 4 * k, tm_sfb + 4 * k)
    av = E.decode_values(a, "e2m1") * np.repeat(E.decode_values(sfa, "ue4m3"), 16, axis=1)
    bv = E.decode_values(b, "e2m1") * np.repeat(E.decode_values(sfb, "ue4m3"), 16, axis=1)
    ref = (torch.from_numpy(av) @ torch.from_numpy(bv).T).numpy()
    got = c.acc(0, N)
    if exact:
        assert np.array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        # the modelled mxf4nvf4 block FMA (MMA-Sim's rule), bit for bit pelib.numerics.blockfma's
        ea = F.scaled_windows(F.B200_MXF4NVF4, F.window_exponents(a, "e2m1"),
                              np.repeat(F.window_exponents(sfa, "ue4m3"), 16, axis=1))
        eb = F.scaled_windows(F.B200_MXF4NVF4, F.window_exponents(b, "e2m1"),
                              np.repeat(F.window_exponents(sfb, "ue4m3"), 16, axis=1))
        model = np.zeros((M, N), np.uint32)
        for k in range(4):
            ks = slice(64 * k, 64 * k + 64)
            model = F.mma(F.B200_MXF4NVF4, av[:, ks], ea[:, ks], bv[:, ks], eb[:, ks], model, k > 0)
        assert np.array_equal(got.astype(np.float32).view(np.uint32), model)
    # a wrong scale column (SFB of the next K step) changes the result: the scales are really read
    _mma(lib, "mxf4nvf4", [c], 0, da, db, idesc, False, tm_sfa, tm_sfb + 4)
    one = E.decode_values(a[:, :32], "e2m1") * np.repeat(E.decode_values(sfa[:, :4], "ue4m3"), 16, axis=1)
    two = E.decode_values(b[:, :32], "e2m1") * np.repeat(E.decode_values(sfb[:, 4:8], "ue4m3"), 16, axis=1)
    np.testing.assert_allclose(c.acc(0, N), one @ two.T, rtol=1e-5, atol=1e-5 * np.abs(one @ two.T).max())
    with pytest.raises(ModelError, match="scale-factor IDs must be 0"):
        _mma(lib, "mxf4nvf4", [c], 0, da, db, idesc, False, tm_sfa | 1 << 30, tm_sfb)
    with pytest.raises(ModelError, match="packed E2M1 is code 1"):
        _mma(lib, "mxf4nvf4", [c], 0, da, db, idesc & ~(7 << 7) | 5 << 7, False, tm_sfa, tm_sfb)
    with pytest.raises(ModelError, match="outside the allocation"):
        _mma(lib, "mxf4nvf4", [Cta(0, 256)], 0, da, db, idesc, False, tm_sfa, tm_sfb)


def test_the_models_compute_after_a_launch_that_computed_nothing(lib):
    """A launch for its events alone (pelib.sim.host.events: arithmetic off) leaves the switch on when it ends:
    the models' inline state is one object for every library of the process (a static of an inline function is
    a unique symbol), so this library's wgmma tiles came out NaN in a CI worker that had run a prediction first."""
    from pelib.sim import host as sim_host
    from pelib.stage import Stage
    s = Stage("sm90/00_tma_wgmma")
    prob = s.problem("sim")
    sim_host.plan(s, prob, s.inputs(prob, 0, "sim"), seed=0, arithmetic=False).run()
    test_gmma_e4m3_k_loop_matches_torch(lib, 64, True)
