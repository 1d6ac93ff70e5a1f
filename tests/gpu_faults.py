"""GPU faults on a real GPU: a trap from a bounded wait, an illegal address, a kernel past its watchdog,
and the next launch in the same process after each.

Each scenario runs in its own Python process, since a fault leaves the CUDA context unusable. A scenario
passes when the failure is raised as the right pelib.launch exception naming the kernel and its launch
shape, and the next launch in the same process either works (once a hung kernel has ended) or is refused
with a message saying the process must be restarted (after a fault). A last, fresh process shows that
the GPU itself is fine afterwards.

    PYTHONPATH=src python3 tests/gpu_faults.py --out DIR          # H100/H200 (sm_90a) or B200 (sm_100a)
    PYTHONPATH=src python3 tests/gpu_faults.py --fake --out DIR   # any machine: a scripted stand-in GPU

Writes DIR/gpu_faults.json (device, driver, date, each scenario's messages and checks) and
DIR/gpu_faults.log (the same, readable, with each child's output). The --fake mode checks this script's
own logic on a CPU (pelib.launch's driver calls answered by a stand-in); it measures nothing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KDIR = HERE / "kernels"
SRC = HERE.parent / "src"
SCENARIOS = ("trap", "illegal_address", "watchdog", "fresh_process")
CHILD_TIMEOUT_S = 60


# ---------------------------------------------------------------------------------------------
# The two rigs: a real GPU, or a scripted stand-in that answers pelib.launch's driver calls
# ---------------------------------------------------------------------------------------------
class RealRig:
    fake = False

    def __init__(self):
        from pelib import device
        self.info = device.current()
        self.arch = {(9, 0): "sm_90a", (10, 0): "sm_100a"}.get(self.info.cc)
        if self.arch is None:
            raise SystemExit(f"SKIP: needs sm_90 or sm_100, this is {self.info.describe()}")

    def build(self, name, defines=None):
        from pelib.build import build
        return build(KDIR / name, self.arch, defines or {})

    def alloc(self, n=32):
        import torch
        return torch.zeros(n, dtype=torch.int32, device="cuda")

    def read(self, t):
        return [int(x) for x in t.cpu().tolist()]

    def bad_pointer(self):
        import numpy as np
        return np.uint64(0x10)

    def close(self):
        pass

    def flush(self):
        """Let the device printf buffer reach stdout (after a trap the synchronize itself fails)."""
        from cuda.bindings import driver
        driver.cuCtxSynchronize()
        sys.stdout.flush()


class _FakeTensor:
    """What pelib.launch.pack_arg reads of a CUDA tensor."""

    def __init__(self, ptr, n):
        import torch
        self._ptr, self.shape, self.is_cuda, self.dtype = ptr, (n,), True, torch.int32
        self.device = torch.device("cuda", 0)

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return True


class FakeRig:
    """One in-order stream of a pretend GPU: kernels take time, trap, fault (sticky) or write results."""

    fake = True

    def __init__(self, spin_s):
        from contextlib import ExitStack
        from unittest import mock

        import cuda.core

        from pelib import device, launch as L
        self.info = device.DeviceInfo(True, name="stand-in GPU (--fake, CPU)", cc=(9, 0), sm_count=132,
                                      smem_optin_bytes=232448, driver_version=13000)
        self.arch, self.spin_s = "sm_90a", spin_s
        self.mem, self.kinds, self.jobs, self.end, self.next_ptr = {}, {}, [], time.monotonic(), 0x7F0000000000
        self.sticky = None
        self._patches = ExitStack()
        for obj, attr, new in (
                (device, "current", lambda: self.info),
                (L, "ensure_context", lambda *a, **k: None),
                (L, "load_kernel", lambda cubin, name, *a, **k: (hashlib.sha256(cubin).hexdigest(), name)),
                (L, "_check_signature", lambda plan, kern: None),
                (L, "_stream_handle", lambda stream, dev: 0),
                (L, "_core_stream", lambda handle: None),
                (L.LaunchPlan, "core_config", lambda plan: plan),
                (L, "_event_after", lambda what, handle: self.end),
                (L, "_event_status", self.status),
                (L, "_event_destroy", lambda ev: None),
                (cuda.core, "launch", self.launch)):
            self._patches.enter_context(mock.patch.object(obj, attr, new))
        self._patches.enter_context(mock.patch.dict(L._STATE, {"fault": None, "hang": None}))

    def close(self):
        self._patches.close()

    def build(self, name, defines=None):
        from pelib.build import build
        b = build(KDIR / name, self.arch, defines or {})
        self.kinds[hashlib.sha256(b.cubin).hexdigest()] = (name, dict(defines or {}))
        return b

    def alloc(self, n=32):
        ptr, self.next_ptr = self.next_ptr, self.next_ptr + 4096
        self.mem[ptr] = [0] * n
        return _FakeTensor(ptr, n)

    def read(self, t):
        self.status(self.end)
        if self.sticky:
            raise RuntimeError(f"CUDA error: {self.sticky} (stand-in)")
        return list(self.mem[t.data_ptr()])

    def bad_pointer(self):
        import numpy as np
        return np.uint64(0x10)

    def flush(self):
        sys.stdout.flush()

    def launch(self, stream, plan, kern, *args):
        """cuda.core.launch: queue the kernel behind the previous one."""
        name, defines = self.kinds[kern[0]]
        start = max(time.monotonic(), self.end)
        ptrs = [int(a) for a in args]
        if name == "rt_hang.cu" and int(defines.get("HANG", 1)):
            job = ("trap", 0.05, ptrs)
        elif name == "rt_hang.cu":
            job = ("write", self.spin_s, ptrs, 2)
        elif ptrs[1] not in self.mem:
            job = ("illegal", 0.01, ptrs)
        else:
            job = ("write", 0.001, ptrs, 3)
        self.end = start + job[1]
        self.jobs.append((self.end, plan.describe(), job))

    def status(self, ev):
        now = time.monotonic()
        while self.jobs and self.jobs[0][0] <= now and not self.sticky:
            _, what, job = self.jobs.pop(0)
            if job[0] == "trap":
                print("pelib: mbarrier wait timed out after 4096 tries: tag=42 smem=0x400 parity=0 "
                      "cta=(0,0,0) thread=0 (stand-in)", flush=True)
                self.sticky = "CUDA_ERROR_LAUNCH_FAILED"
            elif job[0] == "illegal":
                self.sticky = "CUDA_ERROR_ILLEGAL_ADDRESS"
            else:
                self.mem[job[2][0]][:] = [job[3]] * len(self.mem[job[2][0]])
        if self.sticky:
            return self.sticky
        return "running" if now < ev else "done"


# ---------------------------------------------------------------------------------------------
# Scenarios (each in its own process)
# ---------------------------------------------------------------------------------------------
def _outcome(fn) -> dict:
    """Call fn; the exception it raised (type and message) or what it returned."""
    t0 = time.monotonic()
    try:
        value = fn()
        return {"raised": None, "message": "", "value": value, "s": round(time.monotonic() - t0, 3)}
    except Exception as e:   # noqa: BLE001 - the point is to see which one
        return {"raised": type(e).__name__, "message": str(e), "s": round(time.monotonic() - t0, 3)}


def _names_launch(msg: str, kernel: str, grid: tuple, block: tuple) -> bool:
    return kernel in msg and f"grid={grid}" in msg and f"block={block}" in msg


def scenario_trap(rig) -> dict:
    from pelib import launch as L
    hang = rig.build("rt_hang.cu", {"HANG": 1, "PE_WAIT_LIMIT": "(1u<<12)"})
    ok = rig.build("rt_fault.cu")
    out = rig.alloc()
    first = _outcome(lambda: L.launch(hang, (out,), grid=2, block=32, timeout_s=60))
    _outcome(rig.flush)
    nxt = _outcome(lambda: L.launch(ok, (out, out), grid=1, block=32, timeout_s=10))
    checks = {
        "fault_is_KernelFault": first["raised"] == "KernelFault",
        "fault_names_kernel_and_shape": _names_launch(first["message"], "rt_hang", (2, 1, 1), (32, 1, 1)),
        "next_launch_refused_as_KernelFault": nxt["raised"] == "KernelFault",
        "next_launch_says_restart": "Restart the Python process" in nxt["message"],
        "next_launch_names_the_faulted_kernel": "rt_hang" in nxt["message"] and "grid=(2, 1, 1)" in nxt["message"],
    }
    return {"first": first, "next": nxt, "checks": checks}


def scenario_illegal_address(rig) -> dict:
    from pelib import launch as L
    k = rig.build("rt_fault.cu")
    out = rig.alloc(64)
    first = _outcome(lambda: L.launch(k, (out, rig.bad_pointer()), grid=(3,), block=64, timeout_s=30))
    nxt = _outcome(lambda: L.launch(k, (out, out), grid=1, block=32, timeout_s=10))
    torch_read = _outcome(lambda: rig.read(out))
    checks = {
        "fault_is_KernelFault": first["raised"] == "KernelFault",
        "fault_says_illegal_address": "ILLEGAL_ADDRESS" in first["message"],
        "fault_names_kernel_and_shape": _names_launch(first["message"], "rt_fault", (3, 1, 1), (64, 1, 1)),
        "next_launch_refused_as_KernelFault": nxt["raised"] == "KernelFault",
        "next_launch_says_restart": "Restart the Python process" in nxt["message"],
    }
    return {"first": first, "next": nxt, "torch_read_after": torch_read, "checks": checks}


def scenario_watchdog(rig, spin_s: float) -> dict:
    from pelib import launch as L
    spin = rig.build("rt_hang.cu", {"HANG": 0, "SPIN_NS": f"{int(spin_s * 1e9)}ull"})
    ok = rig.build("rt_fault.cu")
    out, out2 = rig.alloc(), rig.alloc()
    t0 = time.monotonic()
    first = _outcome(lambda: L.launch(spin, (out,), grid=1, block=32, timeout_s=spin_s / 4))
    early = _outcome(lambda: L.launch(ok, (out2, out2), grid=1, block=32, timeout_s=10))
    time.sleep(max(0.0, spin_s + 0.5 - (time.monotonic() - t0)))
    later = _outcome(lambda: L.launch(ok, (out2, out2), grid=1, block=32, timeout_s=10))
    values = _outcome(lambda: (rig.read(out)[0], rig.read(out2)[0]))
    checks = {
        "hang_is_KernelHang": first["raised"] == "KernelHang",
        "hang_names_kernel_and_shape": _names_launch(first["message"], "rt_hang", (1, 1, 1), (32, 1, 1)),
        "launch_while_running_refused_as_KernelHang": early["raised"] == "KernelHang"
                                                      and "still running past its watchdog" in early["message"],
        "launch_after_it_ended_works": later["raised"] is None,
        "both_kernels_wrote_their_results": values.get("value") == (2, 3),
    }
    return {"first": first, "while_running": early, "after_it_ended": later, "values": values,
            "checks": checks}


def scenario_fresh_process(rig) -> dict:
    from pelib import launch as L
    k = rig.build("rt_fault.cu")
    out = rig.alloc()
    run = _outcome(lambda: L.launch(k, (out, out), grid=1, block=32, timeout_s=10))
    values = _outcome(lambda: rig.read(out))
    checks = {"launch_works": run["raised"] is None, "result_written": values.get("value") == [3] * 32}
    return {"run": run, "values": values, "checks": checks}


def run_scenario(name: str, fake: bool, spin_s: float) -> dict:
    """One scenario in this process (a fault spoils this process's CUDA context: main() uses a child each)."""
    rig = FakeRig(spin_s) if fake else RealRig()
    try:
        fn = {"trap": scenario_trap, "illegal_address": scenario_illegal_address,
              "watchdog": lambda r: scenario_watchdog(r, spin_s), "fresh_process": scenario_fresh_process}[name]
        res = fn(rig)
    finally:
        rig.close()
    res["ok"] = all(res["checks"].values())
    return res


def child(name: str, fake: bool, spin_s: float) -> None:
    print("RESULT " + json.dumps(run_scenario(name, fake, spin_s), default=repr), flush=True)


# ---------------------------------------------------------------------------------------------
# Parent: one process per scenario, then the JSON and the log
# ---------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for gpu_faults.json and .log")
    ap.add_argument("--fake", action="store_true", help="a scripted stand-in GPU (checks this script on a CPU)")
    ap.add_argument("--spin-s", type=float, default=None, help="the watchdog scenario's kernel time (s)")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios to run")
    ap.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    spin_s = a.spin_s if a.spin_s is not None else (1.0 if a.fake else 3.0)
    if a.child:
        child(a.child, a.fake, spin_s)
        return 0

    from pelib import device
    dev = ({"name": "stand-in GPU (--fake, CPU)", "arch": "sm_90", "driver": "none (fake)"} if a.fake
           else device.current().as_dict())
    env = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               PYTHONUNBUFFERED="1")
    doc = {"what": "GPU fault and hang paths of pelib.launch (tests/gpu_faults.py)",
           "kind": "simulated (scripted stand-in GPU on a CPU; nothing measured)" if a.fake else "measured",
           "device": dev, "driver": dev.get("driver"),
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "python": sys.version.split()[0], "spin_s": spin_s, "scenarios": {}}
    log = []
    for name in [n for n in a.only.split(",") if n]:
        if name not in SCENARIOS:
            ap.error(f"--only {name}: one of {', '.join(SCENARIOS)}")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--spin-s", str(spin_s)]
        cmd += ["--fake"] if a.fake else []
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env)
            text, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            text, rc = f"{e.stdout or ''}{e.stderr or ''}\nTIMEOUT after {CHILD_TIMEOUT_S} s", None
        line = next((ln for ln in text.splitlines() if ln.startswith("RESULT ")), None)
        res = json.loads(line[len("RESULT "):]) if line else {"ok": False, "checks": {"child_reported": False}}
        if name == "trap":
            res["checks"]["bounded_wait_printf_tag_42_seen"] = "tag=42" in text
            res["ok"] = all(res["checks"].values())
        if text.startswith("SKIP") or "SKIP:" in text:
            res = {"ok": None, "skipped": text.strip()[-300:]}
        res.update(rc=rc, wall_s=round(time.monotonic() - t0, 2), output_tail=text[-3000:])
        doc["scenarios"][name] = res
        log.append(f"== {name}: {'PASS' if res.get('ok') else 'SKIP' if res.get('ok') is None else 'FAIL'} "
                   f"({res['wall_s']} s, rc {rc})")
        for k, v in res.get("checks", {}).items():
            log.append(f"   {'ok ' if v else 'NO '} {k}")
        for k in ("first", "next", "while_running", "after_it_ended", "run"):
            if k in res:
                o = res[k]
                log.append(f"   {k}: {o.get('raised') or 'no exception'}: {o.get('message', '')[:600]}")
        shown = "\n".join(ln for ln in text.splitlines() if not ln.startswith("RESULT "))[-800:]
        log.append("   child output: " + (shown.replace("\n", "\n      ") or "(none)"))
    ran = [s["ok"] for s in doc["scenarios"].values() if s.get("ok") is not None]
    doc["ok"] = bool(ran) and all(ran)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_faults.json").write_text(json.dumps(doc, indent=2, default=repr) + "\n")
    head = (f"pelib GPU faults, {doc['date']}, {dev.get('name')} ({dev.get('arch')}), driver {doc['driver']}, "
            f"kind: {doc['kind']}: {'ALL PASS' if doc['ok'] else 'FAILURES' if ran else 'NOTHING RAN'}")
    (out / "gpu_faults.log").write_text(head + "\n" + "\n".join(log) + "\n")
    print(head)
    print("\n".join(log))
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
