"""Nothing a simulated kernel does harms the host process (pelib.sim, src/kernels/sim/runtime/memory.cpp): the
host calls that end a process (abort, a failing assert, exit, _Exit, quick_exit, _exit), signals raised or
faulted in a simulated thread, a trap, and loops that never reach a scheduling point (the watchdog) become a
report naming the kernel's source line, and the same process runs on. Every launch is estimated from its shape
and refused before anything is built where the engine cannot count it or the host cannot hold it; every
PELIB_SIM_* knob is range-checked, and the run cache is keyed on them."""
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from pelib.sim import engine as sim, budget as sim_budget

KERNEL = Path(__file__).parent / "kernels" / "sim_hostsafe.cu"
SOURCE = KERNEL.read_text().splitlines()


def plan(mode: int, grid=(2, 1, 1), block=(32, 1, 1)):
    out = torch.zeros(64, dtype=torch.int32)
    p = sim.prepare(KERNEL, (out, np.int32(mode)), grid=grid, block=block, cluster=(1, 1, 1), smem=0,
                    kernel="sim_hostsafe", arch="host", names=("out", "mode"))
    return p, out


def line_of(text: str) -> int:
    body = next(i for i, s in enumerate(SOURCE) if s.startswith('extern "C"'))
    return next(i + 1 for i, s in enumerate(SOURCE) if i > body and text in s)


def assert_lives():
    p, out = plan(0)
    assert p.run().ok and out.tolist() == list(range(32)) * 2


HOST_CALLS = [(1, "case 1: abort();", "abort()"), (2, "case 2: assert", "assertion `mode != 2` failed"),
              (3, "case 3: exit(0)", "exit(0)"), (4, "case 4: _Exit(3)", "_Exit(3)"),
              (5, "raise(SIGSEGV)", "raise(11"), (6, "raise(SIGFPE)", "raise(8"), (7, "raise(SIGABRT)", "raise(6"),
              (8, "raise(SIGILL)", "raise(4"), (9, "raise(SIGBUS)", "raise(7"), (10, "__trap()", "the kernel trapped"),
              (13, "quick_exit(0)", "quick_exit(0)"), (15, "case 15: _exit(0)", "_exit(0)"), (16, "std::abort()", "abort()")]


@pytest.mark.parametrize("mode,where,says", HOST_CALLS, ids=[c[2].split("(")[0] or "trap" for c in HOST_CALLS])
def test_a_host_call_or_signal_in_a_kernel_is_a_report_and_the_process_lives(mode, where, says):
    """Before: abort() and a failing assert ended Python with SIGABRT (exit status 134), exit() and _Exit() with
    no output at all."""
    rep = plan(mode)[0].run(check=False)
    assert not rep.ok and rep.misuse, rep.summary()
    rec = rep.misuse[0]
    assert says in rec["text"], rec["text"]
    if mode != 10:
        assert "would end the host process" in rec["text"] and "the host process goes on" in rec["text"]
    if shutil.which("addr2line") or mode in (2, 10):   # assert and __trap carry their own line
        assert rec["file"].endswith("sim_hostsafe.cu") and rec["line"] == line_of(where), rec
    assert (rec["cta"], rec["warp"], rec["lane"]) == (0, 0, 3)
    with pytest.raises(sim.SimMisuse, match=re.escape(says)):
        plan(mode)[0].run()
    assert_lives()


@pytest.mark.parametrize("mode,where", [(17, "case 17: memcpy"), (18, "case 18: memset")], ids=["memcpy", "memset"])
def test_a_block_copy_past_its_tensor_is_reported(mode, where):
    """Before (HB09): memcpy past the end of `out` wrote the next 64 elements of the buffer on a clean report
    (the C library's own stores are not instrumented)."""
    buf = torch.zeros(80, dtype=torch.int32)
    out = buf[:64]
    p = sim.prepare(KERNEL, (out, np.int32(mode)), grid=(2, 1, 1), block=(32, 1, 1), cluster=(1, 1, 1), smem=0,
                    kernel="sim_hostsafe", arch="host", names=("out", "mode"))
    rep = p.run(check=False)
    assert not rep.ok and rep.misuse, rep.summary()
    rec = rep.misuse[0]
    assert "of 32 B" in rec["text"] and "outside every tensor" in rec["text"] and "`out`" in rec["text"], rec["text"]
    if shutil.which("addr2line"):
        assert rec["line"] == line_of(where), rec
    assert int((buf[64:] != 0).sum()) == 0          # stopped before the copy


def test_block_copies_inside_a_tensor_stay_clean():
    rep = plan(19)[0].run()
    assert rep.ok, rep.summary()


@pytest.mark.parametrize("mode,where", [(11, ("for (unsigned x = 1;",)),
                                        (12, ("volatile int flag = 0;", "while (flag == 0)"))],
                         ids=["register-loop", "volatile-local"])
def test_a_loop_that_reaches_no_scheduling_point_is_stopped_by_the_watchdog(mode, where, monkeypatch):
    """Before: a register-only loop and a spin on a volatile local gave no report after 90-150 s (killed)."""
    monkeypatch.setenv("PELIB_SIM_WATCHDOG_S", "0.2")
    t0 = time.process_time()
    with pytest.raises(sim.SimDeadlock, match=r"hang: the thread ran .* PELIB_SIM_WATCHDOG_S=0.2") as e:
        plan(mode)[0].run()
    assert time.process_time() - t0 < 60   # ended by the watchdog, not by the test's own limit
    rec = e.value.report.deadlock[0]
    assert rec["wait"] == "watchdog" and (rec["cta"], rec["lane"]) == (0, 3), rec
    if shutil.which("addr2line"):   # the user's .cu, not the build's deleted tu.cpp (before: tu.cpp)
        # the instruction it was stopped at: one of the loop's lines (the volatile's load is the declaration's)
        assert rec["file"].endswith("sim_hostsafe.cu") and rec["line"] in [line_of(w) for w in where], rec
    assert_lives()


@pytest.mark.parametrize("grid", [(2**31 - 1, 1, 1), (10**7, 1, 1), (2**17, 2**15, 1), (2**17 + 1, 2**15, 1)],
                         ids=["2^31-1", "1e7", "2^32", "2^32+2^15"])
def test_a_grid_the_engine_cannot_count_or_the_host_cannot_hold_is_refused_before_anything_runs(grid):
    """Before: 2**31 - 1 and 10**7 CTAs ended in std::bad_alloc (10**7 at 14.5 GB), and 2**32 CTAs wrapped the
    engine's 32-bit count and was reported clean after running none."""
    t0 = time.perf_counter()
    with pytest.raises(sim_budget.SimTooLarge, match=r"CTAs") as e:
        plan(0, grid=grid)
    assert time.perf_counter() - t0 < 30
    assert str(e.value).count("\n") == 0 and f"{int(np.prod(grid)):,}" in str(e.value), str(e.value)


def test_the_engine_counts_ctas_in_64_bits():
    """The engine's own check, past pelib.sim.engine.prepare's: 2**32 CTAs is a misuse, not a clean run of none."""
    p, out = plan(0)
    p.grid = (2**17, 2**15, 1)
    rep = p.run(check=False)
    assert not rep.ok and "4,294,967,296" not in rep.summary() and "4294967296 CTAs" in rep.misuse[0]["text"], \
        rep.summary()
    assert out.abs().sum() == 0
    assert_lives()


@pytest.mark.parametrize("env,value", [("PELIB_SIM_STACK", "1"), ("PELIB_SIM_STACK", "-1"), ("PELIB_SIM_STACK", "abc"),
                                       ("PELIB_SIM_MAX_STEPS", "abc"), ("PELIB_SIM_MAX_STEPS", "-5"),
                                       ("PELIB_SIM_MAX_SPIN", "0"), ("PELIB_SIM_MAX_SPIN", "abc"),
                                       ("PELIB_SIM_WATCHDOG_S", "0"), ("PELIB_SIM_WATCHDOG_S", "nan"),
                                       ("PELIB_SIM_WATCHDOG_S", "1e9"), ("PELIB_SIM_OPT", "-O9; rm")])
def test_a_setting_out_of_range_is_refused_naming_the_variable(env, value, monkeypatch):
    """Before: PELIB_SIM_STACK=1 or -1 killed Python with SIGSEGV; 'abc' anywhere was a raw int() ValueError;
    PELIB_SIM_MAX_SPIN=0 made every load a hang."""
    monkeypatch.setenv(env, value)
    with pytest.raises((sim.SimError, sim.SimBuildError), match=rf"^{env}='{re.escape(value)}': .*unset {env}"):
        plan(0)
    with pytest.raises((sim.SimError, sim.SimBuildError), match=env):
        sim.settings()


def test_the_step_limit_is_named_not_called_a_deadlock(monkeypatch):
    """Before (N45): `deadlock: no progress after 1000 steps: ... runnable`, the variable not named."""
    monkeypatch.setenv("PELIB_SIM_MAX_STEPS", "5")
    rep = plan(0)[0].run(check=False)
    text = rep.summary()
    assert "stopped at the step limit (PELIB_SIM_MAX_STEPS=5)" in text and "deadlock" not in text, text
    assert all(d["wait"] == "step limit" for d in rep.deadlock)
    monkeypatch.setenv("PELIB_SIM_MAX_STEPS", "0")   # no limit
    assert plan(0)[0].run().ok


def test_the_run_cache_is_keyed_on_every_setting(monkeypatch):
    """Before (SC01, SC02): a deadlock stored under PELIB_SIM_MAX_STEPS=1000 was served to a run without it."""
    from pelib.sim import runs as sim_runs
    from pelib.stage import Stage
    s = Stage("sm90/00_tma_wgmma")
    prob = sim_runs.fitted(s, sim_runs.problem_for(s))
    plain = sim_runs._run_key(s, prob, 0, "")
    keys = {plain}
    for env, value in (("PELIB_SIM_MAX_STEPS", "1000"), ("PELIB_SIM_MAX_SPIN", "5000"), ("PELIB_SIM_STACK", "131072"),
                       ("PELIB_SIM_WATCHDOG_S", "3"), ("PELIB_SIM_ACCUMULATION", "exact"), ("PELIB_SIM_OPT", "-O2")):
        monkeypatch.setenv(env, value)
        keys.add(sim_runs._run_key(s, prob, 0, ""))
        monkeypatch.delenv(env)
    assert len(keys) == 7 and sim_runs._run_key(s, prob, 0, "") == plain
    with sim.accumulation("exact"):
        assert sim_runs._run_key(s, prob, 0, "") != plain


# ---- the exercise grader inherits it (pelib.exercises grades through pelib.sim.runs) ----------------------

HOSTILE = {"abort": ("#ifndef __CUDA_ARCH__\n        __builtin_abort();\n#endif\n", "abort()"),
           "exit": ("#ifndef __CUDA_ARCH__\n        _Exit(0);\n#endif\n", "_Exit(0)"),
           "spin": ("        for (unsigned x = 1; x != 0; x = x * 3u + 1u | 1u) { asm volatile(\"\" : \"+r\"(x)); }\n",
                    "hang: the thread ran")}


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_an_exercise_answer_cannot_kill_or_freeze_the_grader(what, monkeypatch):
    """Before: the solution with __builtin_abort() (host-only, NVRTC skips it) ended Python with SIGABRT (EX08),
    with _Exit(0) made it vanish with exit status 0 (EX09), and with a register-only loop gave no grade after 150 s
    (EX07). NVRTC compiles each answer; the simulator reports it; the grade says NOT YET with the line."""
    from pelib import exercises
    monkeypatch.setenv("PELIB_SIM_WATCHDOG_S", "0.3")
    ex = exercises.get("fp8-ws-producer-parity")
    line, says = HOSTILE[what]
    anchor = "mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);"
    assert anchor in ex.solution
    answer = ex.solution.replace(anchor, anchor + "\n" + line.rstrip("\n"), 1)
    g = ex.check(answer, price=False)
    assert not g.passed and says in g.verdict, g.verdict
    if what == "spin":
        assert ex.check(ex.solution, price=False).passed   # the same process grades on


def test_an_exercise_graded_on_no_seed_or_an_unusable_seed_is_refused():
    """Before: seeds=() passed having simulated nothing (EX03); seeds=(2**70,) was torch's raw 'Overflow when
    unpacking long long' (EX12)."""
    from pelib import exercises
    from pelib.sim import runs as sim_runs
    ex = exercises.get("fp8-ws-producer-parity")
    # the exercise refuses first (exercises.ExerciseError), the grade beneath it too (sim_runs.SimRunError)
    with pytest.raises((sim_runs.SimRunError, exercises.ExerciseError), match=r"seeds=\(\)"):
        ex.check(ex.start, seeds=(), price=False)
    with pytest.raises(sim_runs.SimRunError, match=r"seeds=\(\)"):
        exercises.grade(ex, ex.start, seeds=())
    with pytest.raises((sim.SimError, exercises.ExerciseError), match=r"1180591620717411303424"):
        ex.check(ex.start, seeds=(2**70,), price=False)
    with pytest.raises(sim_runs.SimRunError, match=r"seeds=\(\)"):
        sim_runs.simulate_seeds("sm90/00_tma_wgmma", seeds=())
    with pytest.raises(sim.SimError, match="simulator seed -1"):
        sim.default_seed(-1)
