"""The emulator proven on Hopper: TMA loads/stores and wgmma descriptor reads, byte for byte.

Each test runs a small sm_90a kernel (tests/kernels/emu_*.cu) and compares what the hardware did with
what pelib.emulate predicts from the same parameters. Cases marked "probe" settle a modelling choice
the spec leaves implicit (the swizzle phase of a box that does not start on a 1024-B boundary; the row
pitch of a box narrower than its swizzle span). With PE_GPU_RESULTS=<dir> set, gpu_emulate.json (device,
date, one entry per case) is written there; the chapter how_we_know.md shows the newest committed results/<date>-<device>/gpu_emulate.json.
Run on an H100/H200: `PE_GPU_RESULTS=/tmp/out python -m pytest tests/test_gpu_emulate.py -q -m gpu`.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import numpy as np
import pytest

from pelib.isa import descriptors as D
from pelib import emulate as E

pytestmark = pytest.mark.gpu
KDIR = Path(__file__).parent / "kernels"
PROBE = Path(__file__).resolve().parents[1] / "src" / "kernels" / "probes" / "emu_tma_dump.cu"   # the chapter's probe too
IMAGE_BYTES = 32768
RESULTS: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def hopper():
    from pelib import device
    info = device.current()
    if not info.present or info.cc != (9, 0):
        pytest.skip(f"these kernels are sm_90a; this device is {info.describe()}")
    yield info
    out = os.environ.get("PE_GPU_RESULTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        summary = {"test": "test_gpu_emulate", "device": info.describe(),
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "evidence": "measured", "cases": RESULTS,
                   "passed": sum(r["passed"] for r in RESULTS), "failed": sum(not r["passed"] for r in RESULTS)}
        (Path(out) / "gpu_emulate.json").write_text(json.dumps(summary, indent=1))


def record(kind: str, name: str, passed: bool, **facts) -> None:
    RESULTS.append({"kind": kind, "case": name, "passed": bool(passed), **facts})


def _build(name, **defines):
    from pelib.build import build
    return build(KDIR / name, "sm_90a", defines or None)


def _torch():
    return pytest.importorskip("torch")


# --- TMA loads ------------------------------------------------------------------------------------
# (name, torch dtype name, global (rows, cols), box (rows, cols), swizzle, coords (c0=col, c1=row),
#  shared destination offset, element strides (rows, cols))
LOADS = [
    ("u8 128B swizzle", "uint8", (64, 256), (64, 128), 128, (0, 0), 0, (1, 1)),
    ("u8 128B swizzle, offset 3 KiB, interior box", "uint8", (96, 384), (64, 128), 128, (128, 8), 3072, (1, 1)),
    ("u8 64B swizzle", "uint8", (96, 256), (64, 64), 64, (64, 16), 1024, (1, 1)),
    ("u8 32B swizzle", "uint8", (96, 256), (64, 32), 32, (32, 16), 2048, (1, 1)),
    ("u8 no swizzle", "uint8", (96, 256), (64, 48), 0, (16, 8), 4096, (1, 1)),
    ("bf16 128B swizzle, out of bounds right and below", "bfloat16", (48, 200), (32, 64), 128, (160, 30), 0, (1, 1)),
    ("bf16 64B swizzle, negative coordinates", "bfloat16", (48, 96), (32, 32), 64, (-16, -8), 8192, (1, 1)),
    ("u8 element stride 2 on rows", "uint8", (128, 128), (64, 64), 0, (32, 4), 0, (2, 1)),
    ("u8 128B swizzle, element stride 3 on rows", "uint8", (200, 128), (96, 128), 128, (0, 1), 0, (3, 1)),
]
PROBES = [
    ("probe: 128B swizzle at a 256-B offset (is the phase the address's?)", "uint8", (64, 256), (16, 128), 128,
     (0, 0), 256, (1, 1)),
    ("probe: 64B swizzle at a 128-B offset", "uint8", (64, 256), (16, 64), 64, (0, 0), 128, (1, 1)),
    ("probe: 64-B rows under the 128B swizzle (row pitch?)", "uint8", (64, 256), (32, 64), 128, (0, 0), 0, (1, 1)),
]


def _tma_load_case(case):
    torch = _torch()
    from pelib import launch, tma
    name, dt, shape, box, sw, coords, dst, es = case
    g = torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda") if dt == "uint8" else \
        torch.randint(-30000, 30000, shape, dtype=torch.int16, device="cuda").view(torch.bfloat16)
    tm = tma.tensor_map(g, box, swizzle=sw, element_strides=es if es != (1, 1) else None)
    image = torch.empty(IMAGE_BYTES, dtype=torch.uint8, device="cuda")
    info = torch.zeros(4, dtype=torch.int32, device="cuda")
    b = _build(PROBE)
    launch.launch(b, (tm, image, info, np.int32(coords[0]), np.int32(coords[1]), np.uint32(dst),
                      np.uint32(tm.spec.box_bytes)), grid=1, block=128)
    eb = g.element_size()
    emu_map = E.TensorMap2D(8 * eb, (shape[1], shape[0]), (box[1], box[0]), sw, (es[1], es[0]))
    assert emu_map.box_bytes == tm.spec.box_bytes
    img = E.SmemImage(IMAGE_BYTES)
    E.tma_load_2d(emu_map, g.cpu(), coords, img, dst)
    got = image.cpu().numpy()
    bad = np.flatnonzero(got != img.data)
    return got, img, bad, int(info[0].item())


@pytest.mark.parametrize("case", LOADS, ids=[c[0] for c in LOADS])
def test_tma_load_matches_emulator(case):
    got, img, bad, base_mod = _tma_load_case(case)
    record("tma_load", case[0], bad.size == 0, mismatched_bytes=int(bad.size), smem_base_mod_1024=base_mod)
    assert base_mod == 0
    assert bad.size == 0, f"{bad.size} bytes differ, first at image offset {bad[:8].tolist()}"


# --- TMA stores ------------------------------------------------------------------------------------
# (name, dtype, global (rows, cols), box (rows, cols), swizzle, coords, shared source offset)
STORES = [
    ("u8 128B swizzle", "uint8", (64, 256), (64, 128), 128, (128, 0), 0),
    ("u8 64B swizzle, clipped below", "uint8", (40, 256), (32, 64), 64, (64, 16), 1024),
    ("u8 32B swizzle", "uint8", (64, 128), (32, 32), 32, (32, 8), 4096),
    ("bf16 128B swizzle, clipped right and below", "bfloat16", (50, 104), (32, 64), 128, (64, 40), 8192),
    ("bf16 no swizzle", "bfloat16", (64, 64), (16, 32), 0, (16, 16), 2048),
]


@pytest.mark.parametrize("case", STORES, ids=[c[0] for c in STORES])
def test_tma_store_matches_emulator(case):
    torch = _torch()
    from pelib import launch, tma
    name, dt, shape, box, sw, coords, src = case
    tdt = torch.uint8 if dt == "uint8" else torch.bfloat16
    g = torch.full(shape, 0xAB if dt == "uint8" else 0, dtype=torch.uint8 if dt == "uint8" else torch.int16,
                   device="cuda").view(tdt)
    before = g.cpu().clone()
    image = torch.randint(0, 256, (IMAGE_BYTES,), dtype=torch.uint8, device="cuda")
    tm = tma.tensor_map(g, box, swizzle=sw)
    info = torch.zeros(4, dtype=torch.int32, device="cuda")
    launch.launch(_build("emu_tma_store.cu"), (tm, image, info, np.int32(coords[0]), np.int32(coords[1]),
                                               np.uint32(src)), grid=1, block=128)
    eb = g.element_size()
    img = E.SmemImage(IMAGE_BYTES)
    img.write(np.arange(IMAGE_BYTES), image.cpu().numpy())
    want = E.tma_store_2d(E.TensorMap2D(8 * eb, (shape[1], shape[0]), (box[1], box[0]), sw), img, src, coords,
                          before)
    got = E._as_bytes2d(g.cpu())
    bad = np.argwhere(got != want)
    record("tma_store", name, bad.size == 0, mismatched_bytes=int(len(bad)))
    assert len(bad) == 0, f"{len(bad)} global bytes differ, first at (row, byte) {bad[:4].tolist()}"


# --- wgmma through gmma_smem_desc -------------------------------------------------------------------
# (name, N, LBO, SBO of A and B, K-advance bytes per step, steps, equals the true product?)
WGMMA = [
    ("K-major SW128, 4 K-steps", 64, 16, 1024, 32, 4, True),
    ("K-major SW128, N=128, 4 K-steps", 128, 16, 1024, 32, 4, True),
    ("one K-step (no advance)", 64, 16, 1024, 32, 1, True),
    ("LBO ignored by swizzled K-major (LBO = 4096)", 64, 4096, 1024, 32, 4, True),
    ("wrong SBO 512", 64, 16, 512, 32, 4, False),
    ("K-advance 16 B instead of 32 B", 64, 16, 1024, 16, 4, False),
    ("K-advance 64 B instead of 32 B", 64, 16, 1024, 64, 2, False),   # 2 steps: stay inside the tile
]


def _fp8_small(shape, seed):
    vals = np.random.default_rng(seed).choice([-4, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4], size=shape)
    return E.encode_e4m3(vals)


@pytest.mark.parametrize("case", WGMMA, ids=[c[0] for c in WGMMA])
def test_wgmma_matches_emulator(case):
    torch = _torch()
    from pelib import launch, tma
    name, n, lbo, sbo, kadv, steps, truthful = case
    a = _fp8_small((64, 128), 1)
    b = _fp8_small((n, 128), 2)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tma_a = tma.tensor_map(ta, (64, 128), swizzle=128)
    tma_b = tma.tensor_map(tb, (n, 128), swizzle=128)
    d = torch.full((64, n), float("nan"), dtype=torch.float32, device="cuda")
    descs = torch.zeros(2 * steps, dtype=torch.int64, device="cuda")
    bld = _build("emu_wgmma.cu", WG_N=n)
    launch.launch(bld, (tma_a, tma_b, d, descs, np.uint32(lbo), np.uint32(sbo), np.uint32(sbo), np.uint32(kadv),
                        np.uint32(steps)), grid=1, block=128)
    got = d.cpu().numpy().astype(np.float64)

    # The emulator: the same TMA loads into an image, the same descriptors, the operand reads, the sums.
    img = E.SmemImage(IMAGE_BYTES)
    boff = bld.exports["b_smem_offset"]
    E.tma_load_2d(E.TensorMap2D(8, (128, 64), (128, 64), 128), a, (0, 0), img, 0)
    E.tma_load_2d(E.TensorMap2D(8, (128, n), (128, n), 128), b, (0, 0), img, boff)
    want = np.zeros((64, n))
    kdescs = descs.cpu().numpy().view(np.uint64)
    for s in range(steps):
        da = D.smem_desc_advance(D.gmma_smem_desc(0, lbo, sbo, 128), s * kadv)
        db = D.smem_desc_advance(D.gmma_smem_desc(boff, lbo, sbo, 128), s * kadv)
        # the device's descriptor words have the same fields (its start address is absolute)
        for dev, ours in ((int(kdescs[2 * s]), da), (int(kdescs[2 * s + 1]), db)):
            fd, fo = D.decode_gmma_smem_desc(dev), D.decode_gmma_smem_desc(ours)
            assert {k: fd[k] for k in ("lbo", "sbo", "swizzle")} == {k: fo[k] for k in ("lbo", "sbo", "swizzle")}
            assert (fd["addr"] - fo["addr"]) % 1024 == 0
        for desc, rows in ((da, 64), (db, n)):   # every byte the MMA reads was written (no poison)
            assert img.unwritten(E.operand_addresses(desc, rows, 32, arch="sm_90a")) == 0
        av = E.decode_values(E.read_operand(img, da, 64, 32, arch="sm_90a"), "e4m3")
        bv = E.decode_values(E.read_operand(img, db, n, 32, arch="sm_90a"), "e4m3")
        want += av @ bv.T
    truth = E.decode_values(a[:, :32 * steps], "e4m3") @ E.decode_values(b[:, :32 * steps], "e4m3").T
    exact = np.array_equal(got, want)
    record("wgmma", name, exact and (np.array_equal(want, truth) == truthful),
           max_abs_diff=float(np.nanmax(np.abs(got - want))), emulator_equals_true_product=bool(np.array_equal(want, truth)))
    assert exact, f"hardware and emulator differ by up to {np.nanmax(np.abs(got - want))}"
    assert np.array_equal(want, truth) == truthful, "this case was meant to " + (
        "compute the true product" if truthful else "read the wrong bytes")


# --- probes last: if the hardware refuses a probe (a fault poisons the CUDA context), nothing else is lost
@pytest.mark.parametrize("case", PROBES, ids=[c[0] for c in PROBES])
def test_tma_swizzle_probes(case):
    got, img, bad, base_mod = _tma_load_case(case)
    record("tma_probe", case[0], bad.size == 0, mismatched_bytes=int(bad.size))
    assert bad.size == 0, (f"the emulator's model is wrong for this case: {bad.size} bytes differ "
                           f"(first at {bad[:8].tolist()}); fix pelib.emulate before trusting it here")
