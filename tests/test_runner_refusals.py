"""Front doors that cannot do what they are asked refuse in one line: the GPU runners without their GPU
(python -m pelib.predict.blind, energy, predict.probes, sweep, hopper_perf), and `make test` with a TEST_JOBS that is no
number of workers."""
import importlib
import shutil
import subprocess

import pytest

from pelib import device
from pelib.paths import ROOT

RUNNERS = [("predict.blind", []), ("measure.energy", ["limiter"]), ("predict.probes", []), ("measure.sweep", []),
           ("measure.hopper_perf", [])]


@pytest.mark.parametrize("name,argv", RUNNERS, ids=[r[0] for r in RUNNERS])
def test_a_gpu_runner_without_its_gpu_refuses_in_one_line(name, argv, monkeypatch, capsys):
    """Before (GC01, GC02, GC05-GC07, GC11, GC12): exit status 1 and a raw traceback ending in
    pelib.device.UnsupportedGPU: 'stage needs sm_90a ...: showing compiled and recorded results'."""
    monkeypatch.setenv(device.FORCE_ENV, "1")   # no GPU counts, here or on a GPU machine
    mod = importlib.import_module(f"pelib.{name}")
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"python -m pelib.{name}: measures on an sm_") and \
        "nothing run" in err, err


@pytest.mark.skipif(not shutil.which("make"), reason="no make here")
@pytest.mark.parametrize("jobs", ["-1", "", "two"])
def test_make_test_refuses_a_test_jobs_that_is_no_number(jobs):
    """Before (MT02, MT03): TEST_JOBS=-1 ran as -n 0 with exit status 0; TEST_JOBS= was pytest's 'argument
    -n/--numprocesses: expected one argument'."""
    p = subprocess.run(["make", "-s", "-C", str(ROOT), "test-jobs-checked", f"TEST_JOBS={jobs}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and f"TEST_JOBS='{jobs}' is not a number of test workers" in p.stderr, p.stderr
    ok = subprocess.run(["make", "-s", "-C", str(ROOT), "test-jobs-checked", "TEST_JOBS=2"], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr


WORKERS = [("predict.blind", ["--worker", "1"]), ("predict.probes", ["--worker", "0", "--records", "/nonexistent"]),
           ("predict.first_hour", ["--worker", "1"]), ("measure.sweep", ["--worker", "1"]),
           ("sim.proof", ["--worker", "1", "--out", "/nonexistent"])]


@pytest.mark.parametrize("name,argv", WORKERS, ids=[w[0] for w in WORKERS])
def test_the_hidden_worker_flag_refuses_what_is_no_jobs_file(name, argv, capsys):
    """Before (GC03, GC08): a raw FileNotFoundError: [Errno 2] No such file or directory: '1'."""
    mod = importlib.import_module(f"pelib.{name}")
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--worker" in err and "no such file here" in err and "run the command without it" in err, err
