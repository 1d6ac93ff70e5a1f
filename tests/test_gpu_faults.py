"""The GPU fault script (tests/gpu_faults.py): on a GPU (marker gpu) it runs the trap, illegal-address,
watchdog and next-launch paths for real; on a CPU its scenarios run against a scripted stand-in GPU,
which checks the script and pelib.launch's bookkeeping (nothing is measured that way)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpu_faults  # noqa: E402


@pytest.mark.parametrize("name", gpu_faults.SCENARIOS)
def test_fault_scenarios_on_a_stand_in_gpu(name):
    res = gpu_faults.run_scenario(name, fake=True, spin_s=0.4)
    assert res["ok"], json.dumps(res, indent=1, default=repr)
    from pelib import launch as L
    assert L._STATE == {"fault": None, "hang": None}     # the stand-in leaves this process as it found it


def test_fault_script_writes_its_log(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    r = subprocess.run([sys.executable, str(HERE / "gpu_faults.py"), "--fake", "--only", "trap",
                        "--out", str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "gpu_faults.json").read_text())
    assert doc["ok"] and doc["kind"].startswith("simulated") and doc["date"] and "driver" in doc
    trap = doc["scenarios"]["trap"]
    assert trap["checks"]["bounded_wait_printf_tag_42_seen"] and trap["checks"]["next_launch_says_restart"]
    assert "ALL PASS" in (tmp_path / "gpu_faults.log").read_text()


@pytest.mark.gpu
def test_fault_script_on_this_gpu(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    r = subprocess.run([sys.executable, str(HERE / "gpu_faults.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=600)
    doc = json.loads((tmp_path / "gpu_faults.json").read_text())
    assert r.returncode == 0 and doc["ok"], r.stdout[-6000:] + r.stderr[-3000:]
