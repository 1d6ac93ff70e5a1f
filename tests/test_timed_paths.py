"""Every family's *timed* run path, driven on the CPU through a fake launch plan.

The GPU is replaced at its edges only: the device check, the driver's tensor-map encode, the launch
(a fake plan whose run() writes the torch reference into `out`, so verification passes and the
timing code is reached) and CUDA events. Everything between (build, exports, launch configuration,
tensor-map specs, argument packing, verify, the timing helpers and their keyword arguments) is the
code a B200 or Hopper node runs. A call with a wrong signature (fp8_persistent passed `wait=` to a
helper without it) fails here.
"""
from __future__ import annotations

import pytest
import torch

from pelib import bench, device, launch, problems, reference, tma


class FakePlan:
    """What pelib.launch.prepare returns, without a GPU: run() fills `out`, wait() is counted."""

    def __init__(self, build, args, kw, on_run):
        self.build, self.args, self.kw, self.on_run = build, args, kw, on_run
        self.runs = self.waits = 0
        self.grid, self.block = kw.get("grid"), kw.get("block")

    def run(self, stream=None):
        self.runs += 1
        self.on_run()
        return self

    def wait(self, timeout_s: float = 30.0, stream=None):
        self.waits += 1


class FakeEvent:
    t = 0.0

    def __init__(self, enable_timing=True):
        self.at = None

    def record(self, stream=None):
        FakeEvent.t += 0.5
        self.at = FakeEvent.t

    def elapsed_time(self, other):
        return other.at - self.at


@pytest.fixture
def fake_gpu(monkeypatch):
    """A fake device of the asked arch; launches become FakePlans; returns the list of plans made."""
    plans, state = [], {"fill": lambda: None}

    def require(arch, info=None):
        cc = device.ARCH_CC[arch]
        return device.DeviceInfo(present=True, name=f"fake {arch}", cc=cc, sm_count=148 if cc[0] == 10 else 132,
                                 l2_bytes=50 << 20, smem_optin_bytes=227 * 1024, driver_version=13000)

    def prepare(build, args=(), **kw):
        plans.append(FakePlan(build, args, kw, lambda: state["fill"]()))
        return plans[-1]

    monkeypatch.setattr(device, "require", require)
    monkeypatch.setattr(device, "current", lambda: require("sm_90a"))
    monkeypatch.setattr(launch, "prepare", prepare)
    monkeypatch.setattr(tma, "encode", lambda spec, owner=None: tma.TensorMap(spec, cumap=object()))
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(bench, "L2Flush", lambda *a, **k: (lambda: None))
    # Inputs stay on the CPU; the device checks see the device they were asked for.
    monkeypatch.setattr(problems.PatchEmbed, "validate", lambda self, t, device=None: None)
    orig = problems.PatchEmbed.make_inputs
    monkeypatch.setattr(problems.PatchEmbed, "make_inputs", lambda self, seed=0, device="cpu": orig(self, seed))
    return plans, state


def _fill_patch_embed(inputs):
    ref = reference.patch_embed_reference(inputs["a"], inputs["b"], inputs["comb"])
    return lambda: inputs["out"].copy_(ref)


def _assert_timed(res, plans, key="ms"):
    assert res[key] > 0
    assert plans and plans[-1].runs > 1, "the timed path never launched the plan repeatedly"
    assert plans[-1].waits >= 1, "the timed path never waited through the plan's watchdog"


@pytest.mark.parametrize("name", ["01_cta2", "04_independent_polling"])
def test_fp8_stages_00_04_timed_run(fake_gpu, name):
    from pelib import fp8
    plans, state = fake_gpu
    prob = problems.patch_embed("small")
    inputs = prob.make_inputs(seed=0)
    state["fill"] = _fill_patch_embed(inputs)
    res = fp8.run(name, inputs, prob, iters=3, warmup=1)
    assert res["ok"] is True
    _assert_timed(res, plans)


@pytest.mark.parametrize("name", ["05_epi_warps", "07_smem_staged_epilogue", "09_persistent_megakernel"])
def test_fp8_stages_05_09_timed_run(fake_gpu, name):
    from pelib import fp8_persistent
    plans, state = fake_gpu
    prob = problems.patch_embed("small")
    inputs = prob.make_inputs(seed=0)
    state["fill"] = _fill_patch_embed(inputs)
    res = fp8_persistent.run(name, inputs, prob, iters=3, warmup=1)
    assert res["ok"] is True
    _assert_timed(res, plans)


def test_fp8_variant_timed_run(fake_gpu):
    from pelib import variants
    plans, state = fake_gpu
    prob = problems.patch_embed("small")
    inputs = prob.make_inputs(seed=0)
    state["fill"] = _fill_patch_embed(inputs)
    orig = problems.PatchEmbed.make_inputs
    # variants.run draws its own inputs: hand it the ones whose reference the fake plan writes
    problems.PatchEmbed.make_inputs = lambda self, seed=0, device="cpu": inputs
    try:
        res = variants.run("F22", prob, iters=3, warmup=1)
    finally:
        problems.PatchEmbed.make_inputs = orig
    assert res["ok"] is True
    _assert_timed(res, plans)


def test_sm90_timed_run(fake_gpu, monkeypatch):
    from pelib import hopper
    plans, state = fake_gpu
    monkeypatch.setattr(hopper, "max_active_clusters", lambda b, cfg, device_index=0: 66)
    prob = hopper.check_problem("small")
    t = prob.make_inputs(seed=0)
    state["fill"] = _fill_patch_embed(t)
    res = hopper.run("06", prob, tensors=t, iters=3)
    assert res["ok"] is True
    _assert_timed(res, plans, key="median_ms")


def test_nvfp4_timed_run(fake_gpu, monkeypatch):
    from pelib import nvfp4
    plans, _ = fake_gpu
    prob = problems.nvfp4_gemm("small")
    x = prob.make_inputs(0)
    res = nvfp4.time_stage("small", "01_pipelined", 2, iters=3, warmup=1, inputs=x)
    assert res["median_ms"] > 0
    assert plans[-1].runs > 1 and plans[-1].waits >= 1
