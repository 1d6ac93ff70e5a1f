"""Benchmark statistics, throughput, registry and result files, without a GPU."""
import json

import pytest

from pelib import bench as B
from pelib.device import DeviceInfo


def test_stats():
    s = B.stats([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_ms"] == 3.0 and s["n"] == 5 and s["max_ms"] == 100.0
    assert s["p10_ms"] == pytest.approx(1.4) and s["p90_ms"] == pytest.approx(61.6)
    with pytest.raises(ValueError):
        B.stats([])


def test_throughput():
    t = B.throughput(2.0, flops=B.gemm_flops(1024, 1024, 1024), bytes_moved=4e9)
    assert t["tflops"] == pytest.approx(2 * 1024**3 / 2e-3 / 1e12)
    assert t["gbps"] == pytest.approx(2000.0)


def test_result_dict():
    r = B.result("x", [1.0, 1.0, 2.0], bytes_moved=1e9, params={"n": 1})
    assert r["kind"] == "measured" and r["median_ms"] == 1.0 and r["gbps"] == pytest.approx(1000)
    assert "tflops" not in r


def test_registry_and_modules(monkeypatch):
    assert "memcpy_d2d" in B.registry()

    @B.register("unit_test_bench")
    def fake(iters=3):
        return B.result("unit_test_bench", [0.5] * iters, flops=1e9)
    try:
        with pytest.raises(ValueError, match="twice"):
            B.register("unit_test_bench")(lambda iters=1: {})
        gpu = DeviceInfo(True, name="Fake GPU", cc=(9, 0), sm_count=1, l2_bytes=1 << 20)
        monkeypatch.setattr(B, "environment", lambda info=None: {"date": "2026-01-01T00:00:00+00:00",
                                                                "git": "abc1234", "device": "Fake GPU"})
        rep = B.run(["unit_test_bench"], iters=4, info=gpu)
        assert rep["results"][0]["tflops"] == pytest.approx(2.0)
    finally:
        B._REGISTRY.pop("unit_test_bench", None)


def test_run_without_gpu_skips():
    rep = B.run(["memcpy_d2d"], info=DeviceInfo(False, "no CUDA GPU here"))
    assert rep["results"] == [] and "no CUDA GPU" in rep["skipped"]["memcpy_d2d"]
    with pytest.raises(KeyError, match="unknown"):
        B.run(["nope"], info=DeviceInfo(False, "x"))


def test_arch_gated_benchmark_skipped():
    @B.register("unit_needs_b200", arch="sm_100a")
    def f(iters=1):
        raise AssertionError("must not run on sm_90")
    try:
        rep = B.run(["unit_needs_b200"], info=DeviceInfo(True, name="H", cc=(9, 0)))
        assert "needs sm_100a" in rep["skipped"]["unit_needs_b200"]
    finally:
        B._REGISTRY.pop("unit_needs_b200", None)


def test_write_json(tmp_path):
    rep = {"env": {"date": "2026-01-02T03:04:05+00:00", "git": "0123456789", "device": "NVIDIA H100 80GB"},
           "results": [B.result("m", [1.0])], "skipped": {}}
    p = B.write(rep, tmp_path)
    assert p.name == "2026-01-02T030405Z-nvidia-h100-80gb-0123456.json"
    assert json.loads(p.read_text())["results"][0]["name"] == "m"
    assert "median 1.0000 ms" in B.format_results(rep)


def test_environment_fields():
    env = B.environment(DeviceInfo(False, "none"))
    for k in ("date", "git", "device", "sm_clock_khz", "driver_cuda"):
        assert k in env


def test_main_without_gpu(capsys, monkeypatch):
    from pelib import device
    monkeypatch.setattr(device, "current", lambda: DeviceInfo(False, "no CUDA GPU here"))
    assert B.main(["memcpy_d2d"]) == 0
    assert "nothing measured" in capsys.readouterr().out


def test_git_revision_override_and_fallback(monkeypatch):
    from pelib import bench as Bm
    monkeypatch.setenv("PELIB_GIT_REV", "abc123")
    assert Bm.git_revision() == "abc123"
    monkeypatch.delenv("PELIB_GIT_REV")
    rev = Bm.git_revision()
    assert rev == "unknown" or len(rev.split("-")[0]) == 40


def test_every_stage_file_is_benchmarked():
    """make bench (pelib.sweep) enumerates the stage files of every family the GPU runs: each file once,
    at its defaults; nothing is registered at import."""
    from pelib import stages, sweep
    got = [k for k, _ in sweep.entries(["nvfp4", "fp8", "sm90"], variants=False)]
    want = [f"{f}/{p.stem}" for f in ("nvfp4", "fp8", "sm90") for p in stages.family_stages(f)]
    assert [k for k in got if "/variants/" not in k] == want
    assert "fp8/variants/09_f22_bf16x2_epilogue" in got            # the go/no-go variants too
    assert not hasattr(B, "BENCH_MODULES")
