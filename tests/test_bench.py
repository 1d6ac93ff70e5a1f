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
    """make bench (pelib.measure.sweep) enumerates the stage files of every family the GPU runs: each file once,
    at its defaults; nothing is registered at import."""
    from pelib import stages
    from pelib.measure import sweep
    got = [k for k, _ in sweep.entries(["nvfp4", "fp8", "sm90"], variants=False)]
    want = [f"{f}/{p.stem}" for f in ("nvfp4", "fp8", "sm90") for p in stages.family_stages(f)]
    assert [k for k in got if "/variants/" not in k] == want
    assert "fp8/variants/09_f22_bf16x2_epilogue" in got            # the go/no-go variants too
    assert not hasattr(B, "BENCH_MODULES")


def test_bench_headline_candidates_and_table(monkeypatch, tmp_path):
    """make bench's headline: the fastest verified sm90 entries of the sweep (by this run's medians, each stage
    and define set once whatever its wait build), timed by `pelib.measure.energy headline` in a child process (here a
    stand-in that writes its report), and the table that leads with the fastest verified there."""
    import json
    import subprocess
    from pelib.measure import sweep
    timed = [{"stage": "sm90/06_permuted_b", "defines": {"PE_WAIT_KIND": 2}, "ok": True, "median_ms": 0.80},
             {"stage": "sm90/07a_comb_windows", "defines": {}, "ok": True, "median_ms": 0.79},
             {"stage": "sm90/06_permuted_b", "defines": {}, "ok": True, "median_ms": 0.82},
             {"stage": "sm90/12_tma_store", "defines": {}, "ok": False, "median_ms": 0.5},
             {"stage": "fp8/09_persistent_megakernel", "defines": {}, "ok": True, "median_ms": 0.3},
             {"stage": "sm90/10_unrolled_kloop", "defines": {}, "ok": True, "median_ms": 0.83},
             {"stage": "sm90/11_a_half_slices", "defines": {}, "ok": True, "median_ms": 0.99}]
    c = sweep.headline_candidates(timed)
    assert c == [["sm90/07a_comb_windows", {}], ["sm90/06_permuted_b", {}], ["sm90/10_unrolled_kloop", {}]]
    summary = [{"entry": "07a", "burst ms (random)": 0.78, "x cuBLAS fast (burst)": 1.15, "J/launch (random)": 0.64},
               {"entry": "06", "burst ms (random)": 0.77}, {"entry": "cuBLAS fast-accum GEMM", "burst ms (random)": 0.9}]
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        out = cmd[cmd.index("--out") + 1]
        with open(f"{out}/energy-headline.json", "w") as f:
            json.dump({"headline": "07a", "summary": summary, "verified": {"07a": {"ok": True}},
                       "evidence": "measured (NVIDIA H200, 2026-12-02)"}, f)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(subprocess, "run", fake_run)
    h = sweep.run_headline(c, 150.0)
    assert seen["cmd"][2:4] == ["pelib.measure.energy", "headline"] and json.loads(seen["cmd"][5]) == c
    assert h["ok"] and h["headline"] == "07a"
    lines = sweep.format_headline(h).splitlines()
    assert "07a" in lines[0] and lines[2].startswith("* 07a") and lines[-1].strip().startswith("cuBLAS")
    assert "1.1500" in lines[2] and "0.6400" in lines[2]
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 2, "", "boom"))
    bad = sweep.run_headline(c, 60.0)
    assert not bad["ok"] and "exit 2" in bad["error"] and "boom" in sweep.format_headline(bad)
