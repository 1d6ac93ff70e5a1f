"""Shared fixtures: GPU tests run only where a CUDA GPU is present; on the CPU the GPU is replaced at its
edges only (device info, the driver's tensor-map encode, the launch, CUDA events) by the stand-ins here."""
import sys

import pytest
import torch

from pelib.isa.limits import SMEM_LIMIT  # common/limits.cuh, checked against the CUDA guide in test_evidence


def _gpu_arch():
    try:
        if torch.cuda.is_available():
            return torch.cuda.get_device_capability()
    except Exception:
        pass
    return None


@pytest.fixture(autouse=True)
def _close_figures():
    """A test's pyplot figures are closed after it: a worker runs many test files in one process."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def pytest_collection_modifyitems(config, items):
    if _gpu_arch() is not None:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU here (run make test-gpu on a GPU node)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class FakeCudaTensor:
    """Enough of a CUDA tensor for pelib.launch.pack_arg (no GPU here)."""

    def __init__(self, shape, dtype, ptr=0x7F0000000000):
        self.shape, self.dtype, self._ptr = shape, dtype, ptr
        self.is_cuda = True
        self.device = torch.device("cuda", 0)

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return True


def fake_info(arch: str = "sm_100a"):
    """A DeviceInfo of a B200 (sm_100a) or an H100 (sm_90a) that is not there."""
    from pelib import device
    cc = device.ARCH_CC[arch]
    return device.DeviceInfo(present=True, name=f"{'B200' if cc[0] == 10 else 'H100'} (test stand-in)", cc=cc,
                             sm_count=148 if cc[0] == 10 else 132, l2_bytes=50 << 20, smem_optin_bytes=SMEM_LIMIT,
                             driver_version=13000)


@pytest.fixture
def b200():
    return fake_info("sm_100a")


@pytest.fixture
def h100():
    return fake_info("sm_90a")


class FakePlan:
    """What pelib.launch.prepare returns, without a GPU: run() calls `on_run` (e.g. writes the reference
    into the output), wait() is counted."""

    def __init__(self, build, args, kw, on_run):
        self.build, self.args, self.kw, self.on_run = build, args, kw, on_run
        self.runs = self.waits = 0
        self.grid, self.block, self.cluster, self.smem = kw.get("grid"), kw.get("block"), kw.get("cluster"), kw.get("smem")

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
    """A fake device of the asked arch; launches become FakePlans; inputs stay on the CPU.
    Returns (plans made, state): set state["fill"] to what a launch should do to the output."""
    from pelib import bench, device, launch, problems, stage, tma
    plans, state = [], {"fill": lambda: None}

    def prepare(build, args=(), **kw):
        plans.append(FakePlan(build, args, kw, lambda: state["fill"]()))
        return plans[-1]

    monkeypatch.setattr(device, "require", lambda arch, info=None: fake_info(arch))
    monkeypatch.setattr(device, "current", lambda: fake_info("sm_90a"))
    monkeypatch.setattr(launch, "prepare", prepare)
    monkeypatch.setattr(tma, "encode", lambda spec, owner=None: tma.TensorMap(spec, cumap=object(), owner=owner))
    monkeypatch.setattr(stage, "max_active_clusters", lambda b, kernel, cfg, device_index=0: 1000)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(bench, "L2Flush", lambda *a, **k: (lambda: None))
    for cls in (problems.PatchEmbed, problems.NvFp4Gemm):
        monkeypatch.setattr(cls, "validate", lambda self, t, device=None: None)
        orig = cls.make_inputs
        monkeypatch.setattr(cls, "make_inputs", lambda self, seed=0, device="cpu", _o=orig: _o(self, seed))
    return plans, state


@pytest.fixture
def year_ahead(monkeypatch):
    """pelib's one clock (pelib.clock) moved a year ahead: whatever reads "today" through it sees 2027."""
    import datetime as dt

    from pelib import clock
    monkeypatch.setattr(clock, "_fixed", clock.now() + dt.timedelta(days=365))
    return clock.today()
