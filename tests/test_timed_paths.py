"""Every family's *timed* run path, driven on the CPU through a fake launch plan (tests/conftest.py).

The GPU is replaced at its edges only: the device check, the driver's tensor-map encode, the launch
(a fake plan whose run() writes the torch reference into `out`, so verification passes and the
timing code is reached) and CUDA events. Everything between (build, exports, launch configuration,
tensor-map specs, argument binding, verify, the timing helpers and their keyword arguments) is the
code a B200 or Hopper node runs. A call with a wrong signature (a helper passed a keyword it does not
take) fails here, for every family, because every family runs through the one pelib.stage.Stage.run.
"""
from __future__ import annotations

import pytest

from pelib.stage import Stage

TIMED = ["fp8/01_cta2", "fp8/04_independent_polling", "fp8/05_epi_warps", "fp8/07_smem_staged_epilogue",
         "fp8/09_persistent_megakernel", "fp8/variants/09_f22_bf16x2_epilogue", "fp8/variants/09_f24_swizzled_staging",
         "sm90/06_permuted_b", "sm90/09_multicast_pairs", "nvfp4/01_pipelined", "nvfp4/02_tma_store_epilogue"]


def _assert_timed(res, plans):
    assert res["ok"] is True, res.get("verify")
    assert res["ms"] > 0 and res["median_ms"] == res["ms"]
    assert plans and plans[-1].runs > 1, "the timed path never launched the plan repeatedly"
    assert plans[-1].waits >= 1, "the timed path never waited through the plan's watchdog"


@pytest.mark.parametrize("key", TIMED)
def test_timed_run(fake_gpu, key):
    plans, state = fake_gpu
    s = Stage(key, {"NUM_AB_STAGE": 2} if key.startswith("nvfp4") else None)
    prob = s.problem("small")
    inputs = s.inputs(prob, seed=0)
    ref = s.kind.reference(prob, inputs)
    state["fill"] = lambda: inputs["out"].copy_(ref)
    res = s.run(prob, inputs=inputs, iters=3, warmup=1)
    _assert_timed(res, plans)
    # the launch the plan was prepared with is the stage's own configuration
    cfg = s.launch_config(prob, info=res["config"] and None)
    assert plans[-1].grid == res["config"].grid and plans[-1].block == cfg.block and plans[-1].smem == cfg.smem


def test_a_wrong_output_is_not_timed(fake_gpu):
    """llm.c's order: a launch whose output does not verify is reported, never timed."""
    plans, state = fake_gpu
    s = Stage("fp8/06_stages")
    inputs = s.inputs("small")
    state["fill"] = lambda: inputs["out"].zero_()
    res = s.run("small", inputs=inputs, iters=3)
    assert res["ok"] is False and "ms" not in res and plans[-1].runs == 1


def test_timing_run_decodes_its_buffer(fake_gpu):
    """run_timing launches the TIMING build with a buffer of the decoded layout's size, warm-up first."""
    plans, state = fake_gpu
    s = Stage("sm90/06_permuted_b")
    t = s.run_timing("small")
    assert plans[-1].runs == 2 and plans[-1].build.defines.get("TIMING") == 1
    assert plans[-1].args[-1] is not None and t.layout.ctas == plans[-1].grid[0]
