"""The simulator's data-path models (src/kernels/sim/model/*.h) against pelib's proven references.

A small C ABI (src/kernels/sim/model/abi.cpp) is compiled once per session with the host C++ compiler and
called through ctypes. Each model is compared byte for byte with pelib.emulate (TMA boxes and swizzles,
operand reads through GMMA/UMMA descriptors, TMEM maps) and pelib.descriptors (descriptor decode), and the
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

from pelib import descriptors as D
from pelib import emulate as E
from pelib import sim_tensormap as ST
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
SMEM = 64 * 1024
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
    for start, lbo, sbo, adv in ((4096, 16, 8 * max(sw, 16), 0), (8192, 256, 8 * max(sw, 16), 32),
                                 (2048, 1024, 2 * 8 * max(sw, 16), 16 if sw != 32 else 0)):
        desc = D.smem_desc_advance(D.gmma_smem_desc(BASE + start, lbo, sbo, sw), adv)
        got = _operand(lib, smem, desc, 64, 32)
        want = img.read(E.operand_addresses(desc, 64, 32, "K", arch="sm_90a"))
        assert np.array_equal(got, want)


def _gmma(lib, smem, adesc, bdesc, n, scale_d, acc):
    call(lib, "pe_sim_gmma_e4m3", ptr(smem), SMEM, BASE, ctypes.c_uint64(adesc), ctypes.c_uint64(bdesc), n,
         int(scale_d), acc.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))


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
    wgmma K-steps advance the descriptors by 32 B inside the swizzle atom, scale_d = 0 on the first."""
    rng = np.random.default_rng(n)
    K = 128
    a, b = _fp8(rng, (64, K), small), _fp8(rng, (n, K), small)
    smem = _smem()
    a_off, b_off = BASE + 1024, BASE + 1024 + 64 * 128
    for g, off, rows in ((a, a_off, 64), (b, b_off, n)):
        spec = tma.make_spec("uint8", g.shape, (rows, 128), swizzle=128, address=g.ctypes.data)
        _load(lib, spec, (0, 0), off, smem)
    da, db = D.gmma_smem_desc(a_off, 16, 1024, 128), D.gmma_smem_desc(b_off, 16, 1024, 128)
    acc = np.full((128, n // 2), np.nan, dtype=np.float32)      # poisoned: scale_d = 0 must ignore it
    for s in range(K // 32):
        _gmma(lib, smem, D.smem_desc_advance(da, 32 * s), D.smem_desc_advance(db, 32 * s), n, s > 0, acc)
    av = torch.from_numpy(E.decode_values(a, "e4m3"))
    bv = torch.from_numpy(E.decode_values(b, "e4m3"))
    ref = (av @ bv.T).numpy()
    got = _frag_to_tile(acc, n)
    if small:
        assert np.array_equal(got, ref), "small-integer inputs must give exact sums"
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
