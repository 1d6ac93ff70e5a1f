"""The appendix "The first hour on a B200" cannot rot: every command of its shell blocks is run here up to
the launch (the Makefile targets as dry runs, the stage commands through the command line's parser and
with --device compile, the clone from this checkout), and its captured outputs and trap example read the
committed files they name."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from pelib import paths, stages
from pelib import stage as stage_mod
from pelib.views import first_hour

PAGE = paths.ROOT / "book" / "chapters" / "first_hour_b200.md"
STAGE_PREFIXES = (".venv/bin/python -m pelib.stage ", "python -m pelib.stage ", "PYTHONPATH=src python3 -m pelib.stage ")
# What each Makefile target's dry run must contain (the command it stands for).
MAKE_DOES = {"test": 'pytest -q -m "not gpu"', "book": "jupyter_book", "test-gpu": "pytest -q -m gpu",
             "bench": "-m pelib.measure.sweep"}


def page_commands() -> list[str]:
    """Every command of the page's ```sh blocks (split at &&, comments dropped)."""
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S)
    out = []
    for b in blocks:
        for line in b.splitlines():
            line = line.split(" #")[0].strip()
            out += [c.strip() for c in line.split("&&") if c.strip()]
    return out


def _make(target: str, extra: list[str]) -> str:
    p = subprocess.run(["make", "-n", target, *extra], cwd=paths.ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_page_has_the_commands_of_the_issue():
    cmds = page_commands()
    assert cmds[0].startswith("git clone ") and "make test" in cmds and "make book" in cmds
    assert "make test-gpu" in cmds and "make bench" in cmds
    assert any(c.startswith(STAGE_PREFIXES) for c in cmds)
    assert any("--trace" in c for c in cmds)


@pytest.mark.parametrize("cmd", page_commands())
def test_each_command_runs_up_to_the_launch(cmd, tmp_path, capsys):
    if cmd.startswith("git clone "):
        if not (paths.ROOT / ".git").exists():
            pytest.skip("this copy of the tree is not a git checkout")
        dest = shlex.split(cmd)[-1]
        p = subprocess.run(["git", "clone", "-q", "--shared", str(paths.ROOT), str(tmp_path / dest)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert (tmp_path / dest / "Makefile").exists() and (tmp_path / dest / "src" / "pelib" / "stage.py").exists()
        return
    if cmd.startswith("cd "):
        return
    if cmd.startswith("make "):
        words = shlex.split(cmd)
        target, extra = words[1], words[2:]
        assert target in MAKE_DOES, f"the page runs `make {target}`: add its dry run here"
        assert MAKE_DOES[target] in _make(target, extra)
        if target == "test-gpu":     # the GPU tests are there to be run
            p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "--collect-only", "-p",
                                "no:cacheprovider", "tests/test_gpu_runtime.py", "tests/test_gpu_hopper.py"],
                               cwd=paths.ROOT, capture_output=True, text=True, timeout=300)
            assert re.search(r"(\d+) tests? collected", p.stdout) or re.search(r"^(\d+)/\d+ tests collected",
                                                                               p.stdout, re.M), p.stdout[-800:]
        if target == "bench":        # its command line parses
            p = subprocess.run([sys.executable, "-m", "pelib.measure.sweep", "--help"], cwd=paths.ROOT,
                               capture_output=True, text=True, timeout=120)
            assert p.returncode == 0 and "--family" in p.stdout, p.stderr
        return
    if cmd.startswith(".venv/bin/python -m pelib.measure.tcprobe_sm100 "):   # tests/test_tcprobe_sm100.py runs it
        from pelib.measure import tcprobe_sm100                                  # end to end in the simulator
        a = tcprobe_sm100.parser().parse_args(shlex.split(cmd)[3:])
        assert a.cmd == "collect" and a.device == "gpu" and a.out
        return
    if cmd.startswith(".venv/bin/python -m pelib.predict.first_hour "):   # tests/test_predict_b200.py runs it
        from pelib.predict import first_hour                                # up to the launch with a fake device
        a = first_hour.parser().parse_args(shlex.split(cmd)[3:])
        assert a.out and not a.worker
        return
    prefix = next((p for p in STAGE_PREFIXES if cmd.startswith(p)), None)
    assert prefix, f"no dry run for the page's command {cmd!r}: add one to this test"
    args = shlex.split(cmd[len(prefix):])
    a = stage_mod.parser().parse_args(args)                  # every option of the page exists
    header = stages.read_header(stages.resolve(f"{a.stage}.cu"))
    if len(args) == 1:                                       # the stage's own run line, as its header says
        assert header.run == f"python -m pelib.stage {a.stage}"
    compile_args = [x for x in args]
    if a.trace:                                              # --trace needs a launch: everything before it
        i = compile_args.index("--trace")
        del compile_args[i:i + 2]
    assert stage_mod.main(compile_args + ["--device", "compile"]) == 0
    out = capsys.readouterr().out
    assert f"{a.stage} — compiled" in out and "launch on " in out


def test_captured_outputs_and_the_trap_example():
    """The page's outputs are committed logs, labelled measured with device, date and git."""
    r = first_hour.captured("make_test_gpu.log", folder="2026-11-24-h100/make-test-gpu-1a59b40", tail=4, git="1a59b40")
    assert re.search(r"\d+ passed", r) and "failed" not in r
    assert "measured (NVIDIA H100 80GB HBM3, 2026-11-24, git 1a59b40)" in r.title
    b = first_hour.captured("make-bench-07547c6.log", head=4, tail=36)
    assert "ours: 06_permuted_b" in b and "cublas_gemm_fastacc" in b and "wait" in b
    assert not re.search(r"^(real|user|sys)\s", b, re.M)
    t = first_hour.trap_example()
    lines = t.splitlines()
    assert lines[0].startswith("host:   KernelFault: rt_hang") and "tag=42" in lines[1]
    assert "tag 42 -> barrier bar (parity 0) -> rt_hang.cu:24:" in t
    assert first_hour.where_results_land("NVIDIA B200", "2026-12-01") == "results/2026-12-01-b200"
    rows = first_hour.wait_table().rows
    assert {r["barrier"] for r in rows} >= {"full[s]", "empty[s]", "acc_full[buf]"}
    with pytest.raises(FileNotFoundError, match="not committed"):
        first_hour.captured("no-such.log")
