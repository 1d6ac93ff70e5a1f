"""pelib.measure.nvml: the ctypes calls, their errors and the summaries, against a stand-in for libnvidia-ml."""
import ctypes

import pytest

from pelib.measure import nvml


class FakeNvml:
    """The NVML functions pelib.measure.nvml calls, each returning an nvmlReturn_t and writing through byref."""

    def __init__(self, gpus=1, fail=None):
        self.gpus, self.fail, self.energy, self.shutdowns = gpus, fail or {}, 1000, 0
        self.bus = None

    def __getattr__(self, name):
        if name.startswith("nvml"):
            raise AttributeError(name)    # a function this NVML lacks
        raise AttributeError(name)

    def _ret(self, name, out, value):
        if name in self.fail:
            return self.fail[name]
        out._obj.value = value
        return 0

    def nvmlInit_v2(self):
        return self.fail.get("nvmlInit_v2", 0)

    def nvmlShutdown(self):
        self.shutdowns += 1
        return 0

    def nvmlErrorString(self, rc):
        return {3: b"Not Supported", 999: b"Unknown Error"}.get(rc, b"?")

    def nvmlDeviceGetCount_v2(self, n):
        n._obj.value = self.gpus
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i, h):
        h._obj.value = 0x10 + i.value
        return 0

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus, h):
        self.bus = bus.value.decode()
        h._obj.value = 0x42
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, h, e):
        self.energy += 7
        return self._ret("nvmlDeviceGetTotalEnergyConsumption", e, self.energy)

    def nvmlDeviceGetPowerUsage(self, h, p):
        return self._ret("nvmlDeviceGetPowerUsage", p, 650_500)

    def nvmlDeviceGetEnforcedPowerLimit(self, h, p):
        return self._ret("nvmlDeviceGetEnforcedPowerLimit", p, 700_000)

    def nvmlDeviceGetClockInfo(self, h, which, v):
        return self._ret("nvmlDeviceGetClockInfo", v, {1: 1455, 2: 2619}[which.value])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h, r):
        return self._ret("nvmlDeviceGetCurrentClocksEventReasons", r, 0x4)

    def nvmlDeviceGetTemperature(self, h, which, t):
        return self._ret("nvmlDeviceGetTemperature", t, 61)


def test_readings_through_the_library():
    lib = FakeNvml()
    with nvml.open_device("00000000:19:00.0", lib=lib) as g:
        assert lib.bus == "00000000:19:00.0"
        assert g.energy_mj() == 1007 and g.energy_mj() == 1014
        assert g.power_w() == pytest.approx(650.5) and g.power_limit_w() == 700.0
        assert g.clock_mhz("sm") == 1455 and g.clock_mhz("mem") == 2619
        assert nvml.decode_reasons(g.reasons()) == ["sw_power_cap"]
        s = g.sample()
        assert set(s) == {"t", "energy_mj", "power_w", "sm_mhz", "mem_mhz", "reasons", "temp_c"}
    assert lib.shutdowns == 1


def test_errors_name_the_call_and_the_reason():
    with pytest.raises(nvml.NvmlError, match="nvmlDeviceGetTotalEnergyConsumption failed: Not Supported"):
        nvml.open_device(lib=FakeNvml(fail={"nvmlDeviceGetTotalEnergyConsumption": 3})).energy_mj()
    with pytest.raises(nvml.NvmlError, match="sees 2 GPUs and no PCI bus id"):
        nvml.open_device(lib=FakeNvml(gpus=2))
    with pytest.raises(nvml.NvmlError, match="clock 'core'"):
        nvml.open_device(lib=FakeNvml()).clock_mhz("core")
    with pytest.raises(nvml.NvmlError, match="cannot load"):
        nvml.load("libnvidia-ml-not-here.so.9")
    with pytest.raises(nvml.NvmlError, match="positive"):
        nvml.Sampler(nvml.open_device(lib=FakeNvml()), period_s=0)


def test_missing_function_says_the_driver_is_older():
    class Old(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None
    g = nvml.open_device(lib=Old())
    with pytest.raises(nvml.NvmlError, match="has no nvmlDeviceGetCurrentClocksEventReasons"):
        g.reasons()


def test_reasons_decode_every_bit():
    assert nvml.decode_reasons(0) == []
    assert nvml.decode_reasons(0x4 | 0x1) == ["gpu_idle", "sw_power_cap"]
    assert nvml.decode_reasons(0x4 | 0x1000) == ["sw_power_cap", "0x1000"]


def test_sampler_and_summary():
    g = nvml.open_device(lib=FakeNvml())
    s = nvml.Sampler(g, period_s=0.001).start()
    import time
    time.sleep(0.03)
    rows = s.stop()
    assert len(rows) >= 3 and s.error is None
    sm = nvml.summarize(rows)
    assert sm["sm_mhz"] == {"mean": 1455, "min": 1455, "max": 1455}
    assert sm["reasons"] == {"0x4": ["sw_power_cap"]}
    assert sm["counter_step"]["min_step_mj"] == 7


def test_counter_step_reports_resolution():
    c = nvml.counter_step([0, 0, 0, 100, 100, 100, 200], [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.13])
    assert c == {"distinct": 3, "min_step_mj": 100, "median_update_s": pytest.approx(0.1)}
    assert nvml.counter_step([5, 5])["min_step_mj"] is None


def test_ctypes_byref_is_what_the_calls_use():
    """The stand-in's writes go through the same CArgObject the real library receives."""
    v = ctypes.c_uint()
    FakeNvml().nvmlDeviceGetPowerUsage(None, ctypes.byref(v))
    assert v.value == 650_500
