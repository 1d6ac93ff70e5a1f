"""What GPU is here (if any), and which evidence mode a page runs in."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from . import clock
from .notebook import notebook_setup   # the banner opens every chapter: it sets the notebook's figures up

# Page modes, in the words the banner uses.
LIVE = "live"                  # an sm_100 GPU: the sm_100a stages run here
HOPPER_LIVE = "hopper-live"    # an sm_90 GPU: the sm_90a twin runs here
COMPILE_ONLY = "compile-only"  # anything else: compiled facts, recorded and modelled numbers

# The compute capability each build arch needs: 'a' (arch-specific) cubins run on exactly that
# major.minor, not on later GPUs (CUDA C Programming Guide, "Feature Availability").
ARCH_CC = {"sm_100a": (10, 0), "sm_90a": (9, 0)}
_MODE_OF_CC = {(10, 0): LIVE, (9, 0): HOPPER_LIVE}

# Set PELIB_FORCE_COMPILE_ONLY=1 to render a GPU machine's pages as a CPU-only reader sees them.
FORCE_ENV = "PELIB_FORCE_COMPILE_ONLY"


def forced_compile_only() -> bool:
    """PELIB_FORCE_COMPILE_ONLY is on: any value but '', 0, false, no, off (any case)."""
    return os.environ.get(FORCE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


class UnsupportedGPU(RuntimeError):
    """A stage needs another GPU than the one here; the page shows compiled and recorded results."""


@dataclass(frozen=True)
class DeviceInfo:
    """The CUDA device a page runs on, or the reason there is none."""

    present: bool
    reason: str = ""                 # why there is no usable GPU (empty when present)
    ordinal: int = 0
    name: str = ""
    cc: tuple[int, int] | None = None
    sm_count: int = 0
    l2_bytes: int = 0
    sm_clock_max_khz: int = 0        # CU_DEVICE_ATTRIBUTE_CLOCK_RATE (the boost clock)
    sm_clock_khz: int | None = None  # current SM clock from NVML, when NVML answers
    mem_clock_khz: int = 0
    smem_optin_bytes: int = 0        # max dynamic + static shared memory per block (opt-in)
    driver_version: int = 0          # cuDriverGetVersion, e.g. 13000 for CUDA 13.0
    extra: dict = field(default_factory=dict)

    @property
    def arch(self) -> str | None:
        """'sm_90', 'sm_100', ... (None without a GPU)."""
        return f"sm_{self.cc[0]}{self.cc[1]}" if self.cc else None

    @property
    def mode(self) -> str:
        """The page mode this device allows: live, hopper-live or compile-only."""
        if not self.present or forced_compile_only():
            return COMPILE_ONLY
        return _MODE_OF_CC.get(self.cc, COMPILE_ONLY)

    @property
    def driver(self) -> str:
        """The CUDA version the driver supports, as text ('13.0')."""
        v = self.driver_version
        return f"{v // 1000}.{(v % 1000) // 10}" if v else "none"

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(arch=self.arch, mode=self.mode, driver=self.driver)
        return d

    def describe(self) -> str:
        """One line: name, arch, SMs, L2, clock."""
        if not self.present:
            return f"no CUDA GPU ({self.reason})"
        clock = f"{self.sm_clock_max_khz / 1e6:.2f} GHz max"
        return (f"{self.name} ({self.arch}, {self.sm_count} SMs, {self.l2_bytes / 2**20:.0f} MiB L2, "
                f"{clock}, driver CUDA {self.driver})")


def _check(result, what: str):
    """Unpack a cuda.bindings (err, value...) tuple, raising with the call named."""
    err, *vals = result
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return vals[0] if len(vals) == 1 else vals


def _nvml_sm_clock_khz(pci_bus_id: str) -> int | None:
    """The current SM clock through NVML (cuda.bindings.nvml), matched by PCI bus id."""
    try:
        from cuda.bindings import nvml
        nvml.init_v2()
        try:
            h = nvml.device_get_handle_by_pci_bus_id_v2(pci_bus_id)
            return int(nvml.device_get_clock_info(h, nvml.ClockType.CLOCK_SM)) * 1000
        finally:
            nvml.shutdown()
    except Exception:  # NVML is optional: older bindings, containers without it
        return None


def _query(ordinal: int) -> DeviceInfo:
    try:
        from cuda.bindings import driver as drv
    except Exception as e:
        return DeviceInfo(False, f"cuda-bindings is not importable ({e})")
    try:
        _check(drv.cuInit(0), "cuInit")
    except Exception as e:  # no libcuda.so (no driver) or no device: both are a mode, not an error
        text = str(e)
        if "CUDA_ERROR_NO_DEVICE" in text:
            reason = "no CUDA GPU here"
        elif "driver library" in text or "libcuda" in text or "DynamicLib" in type(e).__name__:
            reason = "no CUDA GPU here (no NVIDIA driver)"
        else:
            reason = f"no CUDA GPU here (cuInit: {text})"
        return DeviceInfo(False, reason)
    try:
        count = _check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
        if count == 0:
            return DeviceInfo(False, "no CUDA GPU here")
        if ordinal >= count:
            return DeviceInfo(False, f"device {ordinal} requested, {count} present")
        dev = _check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        A = drv.CUdevice_attribute

        def attr(name):
            return int(_check(drv.cuDeviceGetAttribute(getattr(A, name), dev), name))

        name = _check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
        bus = _check(drv.cuDeviceGetPCIBusId(64, dev), "cuDeviceGetPCIBusId")
        bus = bus.split(b"\0", 1)[0].decode() if isinstance(bus, bytes) else str(bus)
        return DeviceInfo(
            present=True, ordinal=ordinal, name=name,
            cc=(attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")),
            sm_count=attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            l2_bytes=attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            sm_clock_max_khz=attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"),
            sm_clock_khz=_nvml_sm_clock_khz(bus),
            mem_clock_khz=attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
            smem_optin_bytes=attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            driver_version=int(_check(drv.cuDriverGetVersion(), "cuDriverGetVersion")),
            extra={"pci_bus_id": bus},
        )
    except Exception as e:
        return DeviceInfo(False, f"the CUDA driver did not answer ({e})")


@lru_cache(maxsize=None)
def detect(ordinal: int = 0) -> DeviceInfo:
    """Query device `ordinal` once per process; never raises."""
    return _query(ordinal)


def current() -> DeviceInfo:
    """The device pages use: torch's current CUDA device when torch sees one, else device 0."""
    ordinal = 0
    try:
        import torch
        if torch.cuda.is_available():
            ordinal = torch.cuda.current_device()
    except Exception:
        pass
    return detect(ordinal)


def ensure_context(device_index: int | None = None):
    """Make the device's primary context (the one torch uses) current on this thread."""
    from cuda.core import Device   # the GPU path only
    if device_index is None:
        device_index = current().ordinal
    dev = Device(device_index)
    dev.set_current()
    return dev


def mode(stage_arch: str | None = None, info: DeviceInfo | None = None) -> str:
    """The page mode: for a stage of `stage_arch`, live only where that arch runs."""
    if stage_arch is not None:
        _check_arch_name(stage_arch)   # a misspelt arch is an error on every machine, GPU or not
    info = info or current()
    m = info.mode
    if stage_arch is None or m == COMPILE_ONLY:
        return m
    return m if ARCH_CC[stage_arch] == info.cc else COMPILE_ONLY


def can_run(arch: str, info: DeviceInfo | None = None) -> bool:
    """True where a cubin built for `arch` launches on this device."""
    return mode(arch, info) != COMPILE_ONLY


def _check_arch_name(arch: str) -> None:
    if arch not in ARCH_CC:
        raise ValueError(f"unknown arch {arch!r}: the book builds for {', '.join(ARCH_CC)}")


def _found(info: DeviceInfo) -> str:
    if not info.present:
        return info.reason or "no CUDA GPU here"
    if forced_compile_only():
        return f"{info.arch} ({FORCE_ENV} is set)"
    return info.arch


def require(arch: str, info: DeviceInfo | None = None) -> DeviceInfo:
    """Return the device if a cubin for `arch` runs on it, else raise UnsupportedGPU."""
    _check_arch_name(arch)
    info = info or current()
    if not can_run(arch, info):
        raise UnsupportedGPU(f"stage needs {arch}, found {_found(info)}: "
                             "showing compiled and recorded results")
    return info


def banner_text(stage_arch: str | None = None, info: DeviceInfo | None = None) -> str:
    """The one-line evidence banner (see banner())."""
    info = info or current()
    m = mode(stage_arch, info)
    recorded = "sm_100a stages show compiled facts and recorded B200 numbers"
    if not info.present:
        return f"Evidence mode: {COMPILE_ONLY} — {info.reason or 'no CUDA GPU here'}: {recorded}"
    gpu = info.describe()
    if forced_compile_only():
        return f"Evidence mode: {COMPILE_ONLY} — {FORCE_ENV} is set on {gpu}: {recorded}"
    if m == LIVE:
        what = ("this page's stages run, are verified and timed here" if stage_arch
                else "sm_100a stages run, are verified and timed here")
        return f"Evidence mode: {LIVE} — {gpu}: {what}"
    if m == HOPPER_LIVE:
        return (f"Evidence mode: {HOPPER_LIVE} — {gpu}: the sm_90a twin runs and is measured here; "
                f"{recorded}")
    if stage_arch and info.mode != COMPILE_ONLY:
        rec = "recorded B200 numbers" if stage_arch == "sm_100a" else "recorded numbers"
        return (f"Evidence mode: {COMPILE_ONLY} — this page's stages need {stage_arch}, "
                f"this is {gpu}: compiled facts and {rec}")
    return f"Evidence mode: {COMPILE_ONLY} — {gpu} runs neither sm_100a nor sm_90a code: {recorded}"


class Banner(str):
    """The banner text; shown once, so a notebook does not echo it again as the cell's value."""

    def _ipython_display_(self):
        pass

    def html(self) -> str:
        """The banner as one line of prose (not a <pre> block): the mode, why, and when the page ran; a
        line too long for the column ends in an ellipsis and the whole text is its tooltip."""
        import html as _html

        head, _, rest = self.partition(" — ")
        when = f"executed {clock.today()}"
        full = (f"{self} ({when}; “here” is the machine that executed the page: run the book yourself to see "
                "your GPU's mode)")
        return (f'<div class="pe-banner" title="{_html.escape(full)}"><span class="pe-mode">'
                f'{_html.escape(head.removeprefix("Evidence mode: "))}</span>'
                f'{" — " + _html.escape(rest) if rest else ""} · {when}</div>')


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def banner(stage_arch: str | None = None, info: DeviceInfo | None = None) -> Banner:
    """Show and return the page's one-line evidence banner (every chapter's first cell): as wrapped
    HTML in a notebook, printed elsewhere."""
    text = Banner(banner_text(stage_arch, info))
    if _in_ipython():
        from IPython.display import publish_display_data

        notebook_setup()
        publish_display_data({"text/plain": str(text), "text/html": text.html()})
    else:
        print(text)
    return text
