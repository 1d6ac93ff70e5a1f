"""Every family's *timed* run path, driven on the CPU through a fake launch plan (tests/conftest.py).

The GPU is replaced at its edges only: the device check, the driver's tensor-map encode, the launch
(a fake plan whose run() writes the torch reference into `out`, so verification passes and the
timing code is reached) and CUDA events. Everything between (build, exports, launch configuration,
tensor-map specs, argument binding, verify, the timing helpers and their keyword arguments) is the
code a B200 or Hopper node runs. A call with a wrong signature (a helper passed a keyword it does not
take) fails here, for every family, because every family runs through the one pelib.stage.Stage.run.
"""
from __future__ import annotations

from pelib.stage import Stage, Timed

# The timed run of every stage file through a fake plan is tests/test_stages.py::test_timed_run_through_a_fake_plan.


def test_a_wrong_output_is_not_timed(fake_gpu):
    """llm.c's order: a launch whose output does not verify is reported, never timed."""
    plans, state = fake_gpu
    s = Stage("fp8/06_stages")
    inputs = s.inputs("small")
    state["fill"] = lambda: inputs["out"].zero_()
    res = s.run("small", inputs=inputs, time=Timed(iters=3))
    assert res["ok"] is False and "ms" not in res and plans[-1].runs == 1


def test_timing_run_decodes_its_buffer(fake_gpu):
    """run_timing launches the TIMING build with a buffer of the decoded layout's size, warm-up first."""
    plans, state = fake_gpu
    s = Stage("sm90/06_permuted_b")
    t = s.run_timing("small")
    assert plans[-1].runs == 2 and plans[-1].build.defines.get("TIMING") == 1
    assert plans[-1].args[-1] is not None and t.layout.ctas == plans[-1].grid[0]
