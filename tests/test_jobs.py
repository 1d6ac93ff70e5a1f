"""pelib.measure.jobs: the worker protocol shared by pelib.measure.sweep and pelib.measure.hopper_perf, run on the CPU with job
kinds that stand in for kernels: one that passes, one whose launch faults (the worker exits 3 and a new
one takes the next job), one that hangs (killed after the job timeout), one of an unknown kind."""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from pelib.measure import hopper_perf, jobs, sweep

WORKER = '''
import sys, time
from pelib.measure import jobs

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
    src = str(Path(jobs.__file__).parents[2])      # src/, jobs being src/pelib/measure/jobs.py
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
    assert sys.modules["pelib.measure.jobs"] is jobs


def test_run_ncu_profiles_the_runner_it_names_and_parses_its_counters(tmp_path, monkeypatch):
    """The one Nsight Compute call the runners share: the command it builds (clock control off, the kernel
    regex, the runner re-invoked with --ncu-target and its own arguments after it) and the rows it returns."""
    argv_file = tmp_path / "argv"
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n"
                    f"printf '%s\\n' \"$@\" > {argv_file}\n"
                    "echo '\"ID\",\"Kernel Name\",\"dram__bytes_read.sum\",\"lts__t_bytes.sum\"'\n"
                    "echo '\"\",\"\",\"byte\",\"byte\"'\n"
                    "echo '\"0\",\"patch_embed_sm90\",\"1,024\",\"4,096\"'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(jobs, "tool", lambda name: str(fake))
    res = jobs.run_ncu("pelib.measure.sweep", '["x", {}]', "k1|gemm", ["dram__bytes_read.sum"], 30, ncu_args=("-c", "2"),
                       program_args=("--data", "D"))
    assert res["ok"] and res["kernels"] == [{"kernel": "patch_embed_sm90", "dram__bytes_read.sum": "1,024 byte"}]
    argv = argv_file.read_text().split("\n")
    assert argv[:2] == ["--clock-control", "none"] and "regex:k1|gemm" in argv and argv[argv.index("-c") + 1] == "2"
    i = argv.index("-m")
    assert argv[i + 1:i + 6] == ["pelib.measure.sweep", "--ncu-target", '["x", {}]', "--data", "D"]
    fake.write_text("#!/bin/sh\necho 'no kernels profiled' >&2\nexit 1\n")
    bad = jobs.run_ncu("pelib.measure.sweep", "[]", "k", ["m"], 30)
    assert not bad["ok"] and "exit 1" in bad["error"] and "no kernels profiled" in bad["error"]


def test_a_runner_session_logs_to_its_folder(tmp_path, monkeypatch):
    """jobs.session: the device check, the environment, the folder (--out, else $PE_GPU_RESULTS) and a log that
    is printed and written, the banner first (what pelib.predict.blind and pelib.predict.probes start with)."""
    from pelib import bench, device
    info = type("I", (), {"name": "Fake GPU"})()
    monkeypatch.setattr(bench, "runner_device", lambda prog, arch: info)
    monkeypatch.setattr(bench, "environment", lambda i: {"device": i.name})
    monkeypatch.setattr(device, "banner_text", lambda info=None: f"Evidence mode: {info.name}")
    monkeypatch.setenv("PE_GPU_RESULTS", str(tmp_path / "env"))
    run = jobs.session("python -m x", "sm_90a", None, "x.log")
    run("one line")
    run.close()
    assert run.out_dir == tmp_path / "env" and run.env == {"device": "Fake GPU"} and run.info is info
    assert run.path.read_text() == "Evidence mode: Fake GPU\none line\n"
    assert jobs.session("python -m x", "sm_90a", str(tmp_path / "out"), "y.log").out_dir == tmp_path / "out"


def test_each_workers_lines_reach_only_its_own_queue():
    """A runner reads each worker's output through jobs.output_lines inside a loop that rebinds its process
    and queue: the first worker's lines (and its closing None, which arrives late here) stay in the first
    queue, whatever the loop's variables hold by then."""
    import subprocess
    got = {}
    for name, delay in (("one", 0.5), ("two", 0.0)):
        p = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({delay}); print('{name}')"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        q = jobs.output_lines(p)
        got[name] = (p, q)
    for name, (p, q) in got.items():
        p.wait()
        assert [q.get(timeout=10), q.get(timeout=10)] == [name + "\n", None]
        assert q.empty()
