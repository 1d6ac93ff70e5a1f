"""NVML through ctypes (libnvidia-ml.so.1): the GPU's total-energy counter, power, clocks, clock-event reasons.

    with nvml.open_device(pci_bus_id) as g:     # the GPU the kernels run on (pelib.device's bus id)
        e0 = g.energy_mj(); ...; e1 = g.energy_mj()
        g.sample()                              # one reading of every field (a dict)
    s = nvml.Sampler(g, period_s=0.005); s.start(); ...; rows = s.stop()

Only reads: nothing here sets a clock, a power limit or a mode. Signatures and constants are those of
nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h): nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2,
nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded; Volta and later),
nvmlDeviceGetPowerUsage (mW; averaged over 1 s on Ampere and later, except GA100),
nvmlDeviceGetClockInfo (MHz; NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2),
nvmlDeviceGetCurrentClocksEventReasons (a bit mask, REASONS), nvmlDeviceGetTemperature
(NVML_TEMPERATURE_GPU = 0), nvmlDeviceGetEnforcedPowerLimit (mW). The energy counter integrates the
board's power sensor, which on A100/H100 samples a quarter of each period (Yang et al., "Part-time
Power Measurements: nvidia-smi's Lack of Attention", arXiv 2312.02741): read it around windows of a
second or more of steady work, and `counter_step` reports how coarsely it advanced.
"""
from __future__ import annotations

import ctypes
import threading
import time

LIBRARY = "libnvidia-ml.so.1"
NVML_SUCCESS = 0
CLOCK = {"graphics": 0, "sm": 1, "mem": 2}      # nvmlClockType_t
TEMPERATURE_GPU = 0                             # nvmlTemperatureSensors_t
# nvmlClocksEventReason* bits (nvml.h): why the clocks are below their maximum.
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
           0x100: "display_clocks"}


class NvmlError(RuntimeError):
    """NVML is missing or refused a call; the message names the call and NVML's reason."""


def decode_reasons(mask: int) -> list[str]:
    """The names of the set bits of a clocks-event-reason mask (unknown bits as hex)."""
    out = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return out + ([f"0x{rest:x}"] if rest else [])


def load(path: str = LIBRARY):
    """The NVML library (ctypes.CDLL); NvmlError naming what to install when it cannot be loaded."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise NvmlError(f"cannot load {path} ({e}): NVML comes with the NVIDIA driver; on a machine without "
                        "the driver there is no energy counter to read") from None
    lib.nvmlErrorString.restype = ctypes.c_char_p     # const char*; every other call returns an int
    return lib


class Device:
    """One GPU's readings through an NVML library object (`lib`: ctypes.CDLL or a stand-in with the same
    functions, each returning an nvmlReturn_t and writing its out-parameter through ctypes.byref)."""

    def __init__(self, lib, pci_bus_id: str | None = None, index: int | None = None):
        self.lib = lib
        self._call("nvmlInit_v2")
        self._open = True
        h = ctypes.c_void_p()
        if pci_bus_id:
            self._call("nvmlDeviceGetHandleByPciBusId_v2", ctypes.c_char_p(pci_bus_id.encode()), ctypes.byref(h))
        else:
            n = ctypes.c_uint()
            self._call("nvmlDeviceGetCount_v2", ctypes.byref(n))
            if index is None and n.value != 1:
                self.close()
                raise NvmlError(f"NVML sees {n.value} GPUs and no PCI bus id was given: pass the bus id of the "
                                "GPU the kernels run on (pelib.device.current().extra['pci_bus_id'])")
            self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index or 0), ctypes.byref(h))
        self.handle = h

    def _call(self, name: str, *args) -> None:
        fn = getattr(self.lib, name, None)
        if fn is None:
            raise NvmlError(f"this NVML has no {name}: the driver is older than the call needs")
        rc = fn(*args)
        if rc != NVML_SUCCESS:
            raise NvmlError(f"{name} failed: {self.error_string(rc)} (nvmlReturn_t {rc})")

    def error_string(self, rc: int) -> str:
        fn = getattr(self.lib, "nvmlErrorString", None)
        if fn is None:
            return "unknown error"
        s = fn(rc)
        return s.decode() if isinstance(s, bytes) else str(s)

    def _uint(self, name: str, *pre, ctype=ctypes.c_uint) -> int:
        v = ctype()
        self._call(name, self.handle, *pre, ctypes.byref(v))
        return int(v.value)

    def energy_mj(self) -> int:
        """Total energy since the driver loaded, in millijoules."""
        return self._uint("nvmlDeviceGetTotalEnergyConsumption", ctype=ctypes.c_ulonglong)

    def power_w(self) -> float:
        return self._uint("nvmlDeviceGetPowerUsage") / 1e3

    def power_limit_w(self) -> float:
        return self._uint("nvmlDeviceGetEnforcedPowerLimit") / 1e3

    def clock_mhz(self, which: str = "sm") -> int:
        if which not in CLOCK:
            raise NvmlError(f"clock {which!r}: one of {sorted(CLOCK)}")
        return self._uint("nvmlDeviceGetClockInfo", ctypes.c_int(CLOCK[which]))

    def reasons(self) -> int:
        """The clocks-event-reason mask (decode_reasons names its bits)."""
        return self._uint("nvmlDeviceGetCurrentClocksEventReasons", ctype=ctypes.c_ulonglong)

    def temperature_c(self) -> int:
        return self._uint("nvmlDeviceGetTemperature", ctypes.c_int(TEMPERATURE_GPU))

    def sample(self) -> dict:
        """Every reading once, with the host time it was taken (time.perf_counter, seconds)."""
        return {"t": time.perf_counter(), "energy_mj": self.energy_mj(), "power_w": self.power_w(),
                "sm_mhz": self.clock_mhz("sm"), "mem_mhz": self.clock_mhz("mem"), "reasons": self.reasons(),
                "temp_c": self.temperature_c()}

    def close(self) -> None:
        if getattr(self, "_open", False):
            self._open = False
            self.lib.nvmlShutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open_device(pci_bus_id: str | None = None, lib=None) -> Device:
    """The GPU with this PCI bus id (or the only one), through `lib` or the driver's NVML."""
    return Device(lib if lib is not None else load(), pci_bus_id)


class Sampler:
    """Readings of a Device every `period_s` on a background thread, between start() and stop()."""

    def __init__(self, dev: Device, period_s: float = 0.005):
        if period_s <= 0:
            raise NvmlError(f"period_s={period_s}: a sampling period is a positive number of seconds")
        self.dev, self.period_s = dev, period_s
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.rows.append(self.dev.sample())
            except NvmlError as e:      # keep what was read; say why it stopped
                self.error = str(e)
                return
            self._stop.wait(self.period_s)

    def start(self) -> "Sampler":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        return self.rows


def summarize(rows: list[dict]) -> dict:
    """Mean, min and max of the sampled clocks, power and temperature; the reasons seen (named); how the
    energy counter advanced (its smallest non-zero step in mJ, and how many distinct values it took)."""
    if not rows:
        return {"samples": 0}
    out: dict = {"samples": len(rows), "span_s": rows[-1]["t"] - rows[0]["t"]}
    for k in ("sm_mhz", "mem_mhz", "power_w", "temp_c"):
        v = [r[k] for r in rows]
        out[k] = {"mean": sum(v) / len(v), "min": min(v), "max": max(v)}
    masks = sorted({r["reasons"] for r in rows})
    out["reasons"] = {f"0x{m:x}": decode_reasons(m) for m in masks}
    out["counter_step"] = counter_step([r["energy_mj"] for r in rows], [r["t"] for r in rows])
    return out


def counter_step(energy_mj: list[int], t: list[float] | None = None) -> dict:
    """How a sampled cumulative counter advanced: its distinct values, its smallest non-zero step, and
    (with times) the median seconds between changes: the resolution an energy window must exceed."""
    steps = [b - a for a, b in zip(energy_mj, energy_mj[1:]) if b != a]
    out = {"distinct": len(set(energy_mj)), "min_step_mj": min(steps) if steps else None}
    if t is not None and steps:
        ts = [t[i + 1] for i, (a, b) in enumerate(zip(energy_mj, energy_mj[1:])) if b != a]
        gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
        out["median_update_s"] = gaps[len(gaps) // 2] if gaps else None
    return out
