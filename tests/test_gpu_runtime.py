"""pelib's runtime on a real GPU: TMA load/store with swizzle, clusters and DSMEM, timing records, watchdog.

Run on an H100/H200 (sm_90a kernels) or a B200 (the same test kernels built for sm_100a):
    PYTHONPATH=src python3 -m pytest -m gpu tests/
Set PE_GPU_RESULTS=<dir> to get gpu_runtime.json (device, date, per-test results) and timing.png there.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

KDIR = Path(__file__).parent / "kernels"
SRC = Path(__file__).resolve().parents[1] / "src"
RESULTS: dict = {}


def record(name: str, **data):
    RESULTS[name] = data


@pytest.fixture(scope="module")
def arch():
    from pelib import device
    info = device.current()
    if info.cc == (9, 0):
        return "sm_90a"
    if info.cc == (10, 0):
        return "sm_100a"
    pytest.skip(f"runtime tests need sm_90 or sm_100, this is {info.describe()}")


@pytest.fixture(scope="module", autouse=True)
def summary_file():
    yield
    out = os.environ.get("PE_GPU_RESULTS")
    if not out:
        return
    from pelib import device
    Path(out).mkdir(parents=True, exist_ok=True)
    doc = {"device": device.current().as_dict(), "date": dt.datetime.now(dt.timezone.utc).isoformat(),
           "kind": "measured", "results": RESULTS}
    (Path(out) / "gpu_runtime.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")


def _bits(shape, seed):
    """Random 16-bit patterns as a CUDA bfloat16 tensor (TMA copies bytes; compare as int16)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    t16 = torch.randint(-2**15, 2**15 - 1, shape, dtype=torch.int16, generator=g)
    t16[(t16.view(torch.bfloat16).float().isnan())] = 0   # keep patterns non-NaN
    return t16.cuda().view(torch.bfloat16)


def _swizzled_positions(nrows: int, row_bytes: int, elem: int, swizzle: int) -> np.ndarray:
    """Byte position in shared memory of element (row, col) of a box, by the swizzle formula."""
    from pelib.tma import swizzle_byte_offset
    logical = (np.arange(nrows)[:, None] * row_bytes + np.arange(row_bytes // elem)[None, :] * elem)
    return np.vectorize(lambda o: swizzle_byte_offset(int(o), swizzle))(logical)


def _check_dump(dump, expect_rows, swizzle=128):
    """dump (uint8) holds expect_rows (int16 [rows, 64]) swizzled: compare every element."""
    rows, cols = expect_rows.shape
    pos = _swizzled_positions(rows, cols * 2, 2, swizzle)
    d = dump.cpu().numpy()
    got = d[pos].astype(np.uint16) | (d[pos + 1].astype(np.uint16) << 8)
    want = expect_rows.view(np.uint16)
    plain = d[: rows * cols * 2].view(np.uint16).reshape(rows, cols)
    return int((got != want).sum()), bool((plain != want).any())


def test_tma_load_2d_sw128(arch):
    import torch
    from pelib import launch as L, tma
    from pelib.build import build
    b = build(KDIR / "rt_tma_load.cu", arch, {"RANK": 2})
    x = _bits((128, 256), 1)
    tm = tma.tensor_map(x, (64, 64), swizzle=128)          # 64 rows x 64 bf16 = 128-B rows
    dump = torch.zeros(8192, dtype=torch.uint8, device="cuda")
    info = torch.zeros(4, dtype=torch.int32, device="cuda")
    row0, col0 = 32, 64
    plan = L.launch(b, (tm, dump, info, np.int32(col0), np.int32(row0), np.int32(0)), grid=1, block=128)
    want = x.view(torch.int16)[row0:row0 + 64, col0:col0 + 64].cpu().numpy()
    mismatches, differs_from_plain = _check_dump(dump, want)
    record("tma_load_2d_sw128", ok=mismatches == 0, mismatches=mismatches, smem_base_mod_1024=int(info[0]),
           dynamic_smem=plan.smem, swizzled=differs_from_plain, spec=tm.spec.as_dict())
    assert int(info[0]) == 0, "dynamic shared memory is not 1024-B aligned; the check assumes it is"
    assert mismatches == 0
    assert differs_from_plain, "the tile came back unswizzled"


def test_tma_load_3d_sw128(arch):
    import torch
    from pelib import launch as L, tma
    from pelib.build import build
    b = build(KDIR / "rt_tma_load.cu", arch, {"RANK": 3})
    x = _bits((4, 64, 128), 2)
    tm = tma.tensor_map(x, (2, 32, 64), swizzle=128)
    assert tm.spec.box_bytes == b.exports["box_bytes"]
    dump = torch.zeros(8192, dtype=torch.uint8, device="cuda")
    info = torch.zeros(4, dtype=torch.int32, device="cuda")
    p0, r0, c0 = 1, 16, 64
    L.launch(b, (tm, dump, info, np.int32(c0), np.int32(r0), np.int32(p0)), grid=1, block=128)
    want = x.view(torch.int16)[p0:p0 + 2, r0:r0 + 32, c0:c0 + 64].reshape(64, 64).cpu().numpy()
    mismatches, _ = _check_dump(dump, want)
    record("tma_load_3d_sw128", ok=mismatches == 0, mismatches=mismatches)
    assert mismatches == 0


def test_tma_store_2d(arch):
    import torch
    from pelib import launch as L, tma
    from pelib.build import build
    b = build(KDIR / "rt_tma_store.cu", arch)
    out = torch.full((64, 64), -1.0, dtype=torch.float32, device="cuda")
    tm = tma.tensor_map(out, (16, 32))
    r0, c0 = 16, 32
    L.launch(b, (tm, np.int32(c0), np.int32(r0)), grid=1, block=128)
    o = out.cpu()
    want = torch.arange(16)[:, None] * 1000.0 + torch.arange(32)[None, :]
    inside = torch.equal(o[r0:r0 + 16, c0:c0 + 32], want)
    o[r0:r0 + 16, c0:c0 + 32] = -1.0
    outside = bool((o == -1.0).all())
    record("tma_store_2d", ok=inside and outside, inside=inside, untouched_outside=outside)
    assert inside and outside


def test_cluster_dsmem_and_remote_arrive(arch):
    import torch
    from pelib import launch as L
    from pelib.build import build
    b = build(KDIR / "rt_cluster.cu", arch)
    ctas, threads = 4, 128
    out = torch.zeros(ctas * threads, dtype=torch.int32, device="cuda")
    ranks = torch.zeros(ctas * 3, dtype=torch.int32, device="cuda")
    elected = torch.zeros(ctas * threads // 32, dtype=torch.int32, device="cuda")
    L.launch(b, (out, ranks, elected), grid=ctas, block=threads, cluster=(2, 1, 1))
    cta = torch.arange(ctas)[:, None]
    want = ((cta ^ 1) * 1000 + torch.arange(threads)[None, :]).reshape(-1)
    dsmem_ok = torch.equal(out.cpu().long(), want)
    want_ranks = torch.tensor([[c % 2, 2, c // 2] for c in range(ctas)]).reshape(-1)
    ranks_ok = torch.equal(ranks.cpu().long(), want_ranks)
    elect_ok = bool((elected.cpu() == 1).all())
    record("cluster_2x1x1", ok=dsmem_ok and ranks_ok and elect_ok, dsmem=dsmem_ok, ranks=ranks.cpu().tolist(),
           elect_one_per_warp=elect_ok)
    assert dsmem_ok, "peer shared memory read through mapa/ld.shared::cluster is wrong"
    assert ranks_ok, f"cluster ranks/ids {ranks.cpu().tolist()}"
    assert elect_ok


def test_timing_records(arch):
    import torch
    from pelib import device, launch as L, timing as T
    from pelib.build import build
    b = build(KDIR / "rt_timing.cu", arch, {"TIMING": 1})
    ctas, warps = 2, 4
    lay = T.layout(b, ctas)
    buf = T.alloc(lay)
    sink = torch.zeros(ctas * warps, dtype=torch.int64, device="cuda")
    L.launch(b, (buf, sink), grid=ctas, block=warps * 32)
    t = T.decode(buf, lay)
    spin = b.exports["spin"]
    pw = t.per_warp()
    kl = [pw[(w, "kloop")]["avg"] for w in range(warps)]
    counts = [pw[(w, "kloop")]["n"] for w in range(warps)]
    e1 = [pw[(w, "epi_phase1")]["avg"] for w in range(warps)]
    record("timing_clock64", kloop_avg=kl, epi_phase1_avg=e1, counts=counts, table=t.table(),
           ok=all(k >= (w + 1) * spin for w, k in enumerate(kl)) and counts == [ctas * 4] * warps)
    out = os.environ.get("PE_GPU_RESULTS")
    if out:
        import matplotlib
        matplotlib.use("Agg")
        info = device.current()
        ax = T.plot(t, f"measured, {info.name}, {dt.date.today()}: rt_timing test kernel")
        Path(out).mkdir(parents=True, exist_ok=True)
        ax.figure.savefig(Path(out) / "timing.png", bbox_inches="tight")
    assert counts == [ctas * 4] * warps                    # 2 CTAs x 4 tiles per warp
    for w, k in enumerate(kl):
        assert k >= (w + 1) * spin, f"warp {w}: K-loop {k} cycles < its {(w + 1) * spin}-cycle spin"
    assert kl == sorted(kl)
    assert all(v >= spin / 2 for v in e1)
    assert not t.recorded[:, warps:].any()                  # warps beyond the block left unwritten
    # without TIMING the same kernel writes nothing
    b0 = build(KDIR / "rt_timing.cu", arch)
    buf0 = torch.zeros_like(buf)
    L.launch(b0, (buf0, sink), grid=ctas, block=warps * 32)
    assert int(buf0.abs().sum()) == 0


def test_arch_mismatch_refused(arch):
    from pelib import launch as L
    from pelib.build import build
    from pelib.device import UnsupportedGPU
    other = "sm_100a" if arch == "sm_90a" else "sm_90a"
    b = build(KDIR / "rt_cluster.cu", other)
    with pytest.raises(UnsupportedGPU, match=f"stage needs {other}, found sm_"):
        L.prepare(b, (None, None, None), grid=2, block=64, cluster=2)
    record("arch_mismatch_refused", ok=True)


def test_bench_memcpy_runs():
    from pelib import bench as B
    rep = B.run(["memcpy_d2d"], iters=10)
    r = rep["results"][0]
    record("bench_memcpy_d2d", ok=bool(r["verified"]), gbps=r["gbps"], median_ms=r["median_ms"],
           p10_ms=r["p10_ms"], p90_ms=r["p90_ms"], env=rep["env"])
    assert r["verified"] and r["gbps"] > 0


_CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np, torch
    from pelib import launch as L, device
    from pelib.build import build
    arch, mode = sys.argv[1], sys.argv[2]
    info = device.current()
    out = torch.zeros(32, dtype=torch.int32, device="cuda")
    if mode == "trap":
        b = build(sys.argv[3], arch, {"HANG": 1, "PE_WAIT_LIMIT": "(1u<<12)"})
        timeout = 120.0
    else:
        b = build(sys.argv[3], arch, {"HANG": 0, "SPIN_NS": "3000000000ull"})
        timeout = 0.5
    t0 = time.monotonic()
    try:
        L.launch(b, (out,), grid=1, block=32, timeout_s=timeout)
        print("RESULT ok", flush=True)
    except L.KernelFault as e:
        print(f"RESULT fault after {time.monotonic() - t0:.3f}s: {e}", flush=True)
        from cuda.bindings import driver
        driver.cuCtxSynchronize()          # let the device printf buffer reach stdout
    except L.KernelHang as e:
        print(f"RESULT hang after {time.monotonic() - t0:.3f}s: {e}", flush=True)
        torch.cuda.synchronize()           # the spin ends by itself; the process exits cleanly
        print("RESULT after-sync", int(out[0]), flush=True)
""")


def _child(arch, mode):
    env = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run([sys.executable, "-c", _CHILD, arch, mode, str(KDIR / "rt_hang.cu")],
                       capture_output=True, text=True, timeout=300, env=env)
    return r.stdout + r.stderr


def test_watchdog_bounded_wait_traps(arch):
    """A wait on an mbarrier nobody arrives on traps, prints its tag, and becomes KernelFault (in a child)."""
    text = _child(arch, "trap")
    line = next((ln for ln in text.splitlines() if ln.startswith("RESULT")), "")
    fault = line.startswith("RESULT fault")
    names = "rt_hang" in line and "grid=(1, 1, 1)" in line
    tag = "tag=42" in text
    record("watchdog_trap", ok=fault and names and tag, result=line[:400], printf_tag_seen=tag,
           output_tail=text[-2000:])
    assert fault, text[-3000:]
    assert names, line
    assert tag, "the bounded wait's printf (tag=42) did not reach stdout:\n" + text[-3000:]


def test_watchdog_timeout_is_kernel_hang(arch):
    """A kernel still running at the timeout becomes KernelHang naming the kernel (in a child)."""
    text = _child(arch, "hang")
    line = next((ln for ln in text.splitlines() if ln.startswith("RESULT")), "")
    hang = line.startswith("RESULT hang") and "rt_hang" in line
    finished = "RESULT after-sync 2" in text
    record("watchdog_hang", ok=hang and finished, result=line[:400], finished_after=finished)
    assert hang, text[-3000:]
    assert finished, text[-3000:]
