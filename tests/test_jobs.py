"""pelib.jobs: the worker protocol shared by pelib.sweep and pelib.hopper_perf, run on the CPU with job
kinds that stand in for kernels: one that passes, one whose launch faults (the worker exits 3 and a new
one takes the next job), one that hangs (killed after the job timeout), one of an unknown kind."""
from __future__ import annotations

import os
import sys
import textwrap

from pelib import hopper_perf, jobs, sweep

WORKER = '''
import sys, time
from pelib import jobs

class KernelFault(RuntimeError):
    pass

def passes(job, ctx, res):
    res["checks"] = {"small": {"ok": True}}
    return {"value": job["n"] * 2, "iters": ctx.iters}

def faults(job, ctx, res):
    res["checking"] = "small"            # what it had filled before the fault stays in the result
    print("device printf: mbarrier wait timed out", flush=True)
    raise KernelFault("CUDA_ERROR_LAUNCH_FAILED")

def hangs(job, ctx, res):
    time.sleep(60)

KINDS = {"passes": passes, "faults": faults, "hangs": hangs}

if __name__ == "__main__":
    a = sys.argv
    jobs.worker(KINDS, a[a.index("--worker") + 1], a[a.index("--data") + 1], int(a[a.index("--start") + 1]),
                int(a[a.index("--iters") + 1]))
'''


def test_a_fault_or_a_hang_ends_only_its_worker(tmp_path, monkeypatch):
    (tmp_path / "fake_runner.py").write_text(textwrap.dedent(WORKER))
    src = os.path.dirname(os.path.dirname(jobs.__file__))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), src]))
    todo = [{"kind": "passes", "n": 1}, {"kind": "faults"}, {"kind": "passes", "n": 2}, {"kind": "hangs"},
            {"kind": "passes", "n": 3}, {"kind": "teleport"}]
    shown = []
    out = jobs.run(todo, str(tmp_path), iters=4, budget_s=120, job_timeout_s=2, module="fake_runner",
                   show=shown.append)
    assert [r["index"] for r in out] == list(range(6))
    assert out[0]["ok"] and out[0]["value"] == 2 and out[0]["iters"] == 4
    assert not out[1]["ok"] and out[1]["error"].startswith("KernelFault") and out[1]["checking"] == "small"
    assert any("timed out" in ln for ln in out[1]["worker_output"])       # the printf after the fault, kept
    assert out[2]["ok"] and out[2]["value"] == 4                           # a new worker took the next job
    assert not out[3]["ok"] and "killed after" in out[3]["error"]
    assert out[4]["ok"] and out[4]["value"] == 6
    assert not out[5]["ok"] and "job kind 'teleport'" in out[5]["error"]
    assert len(shown) == 6 and all("_shown" not in r for r in out)


def test_the_runners_name_their_kinds():
    assert sweep.KINDS["variant"] is sweep.variant is hopper_perf.KINDS["variant"]
    assert set(hopper_perf.KINDS) == {"variant", "probe", "clock", "load", "baselines"}
    assert set(sweep.KINDS) == {"variant", "debug", "clock"}
    assert sys.modules["pelib.jobs"] is jobs
