"""Host-side L2 policies for B (go/no-go cards F21 and F26); the kernel is stage 09 unchanged.

F21: B's tensor map asks TMA for L2 promotion (CU_TENSOR_MAP_L2_PROMOTION_L2_256B, or L2_128B):
     `f21_specs` returns stage 09's A and B maps with only B's promotion changed (A streams 680 MB with
     no reuse, and the card warns against promoting it). CUDA driver API cuTensorMapEncodeTiled,
     l2Promotion: "the byte granularity at which L2 requests are filled from DRAM".
F26: a persisting access-policy window over B on the launch stream: `b_window` describes it
     (base pointer, num_bytes = B's N x K bytes, hitRatio, hitProp persisting, missProp streaming),
     `AccessPolicyWindow.driver()` / `.stream_attr()` / `.runtime_attr()` build the cuda.bindings
     structs (CUaccessPolicyWindow inside a CUstreamAttrValue; the runtime's cudaStreamAttrValue for
     readers of the card), and `apply` sets the persisting set-aside (cuCtxSetLimit
     CU_LIMIT_PERSISTING_L2_CACHE_SIZE) and the stream attribute (cuStreamSetAttribute
     CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, which CUstreamAttrID aliases). Rules from the CUDA C++
     Programming Guide, "Device Memory L2 Access Management", and the driver API docs of
     CUaccessPolicyWindow: num_bytes at most CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, missProp
     NORMAL or STREAMING, hitRatio in [0, 1], and hitRatio x num_bytes at most the set-aside (else
     the persisting lines thrash each other).
Building the structs needs no GPU (tests check them field by field); `apply`, `read_back` and `reset`
need a CUDA device (any with L2 persistence: sm_80 and later). The gates are measured TMA0 waits on a
B200: PENDING until one runs them.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

from .. import launch, problems, tma
from ..facts import Table
from ..stage import Stage

PROMOTIONS = (64, 128, 256)
PROPS = {"normal": "CU_ACCESS_PROPERTY_NORMAL", "streaming": "CU_ACCESS_PROPERTY_STREAMING",
         "persisting": "CU_ACCESS_PROPERTY_PERSISTING"}
RT_PROPS = {"normal": "cudaAccessPropertyNormal", "streaming": "cudaAccessPropertyStreaming",
            "persisting": "cudaAccessPropertyPersisting"}
FINAL = "fp8/09_persistent_megakernel"


class L2PolicyError(ValueError):
    """An L2 policy the driver would refuse (or that defeats itself); the message names the rule."""


# ---------------------------------------------------------------------------------------------
# F21: L2 promotion on B's tensor map
# ---------------------------------------------------------------------------------------------

def f21_specs(problem="siglip2", tensors: dict | None = None, promotion: int = 256, stage: str = FINAL) -> dict:
    """Stage 09's tensor-map specs with B's L2 promotion set to `promotion` bytes (A untouched)."""
    if promotion not in PROMOTIONS:
        raise L2PolicyError(f"L2 promotion {promotion}: one of {PROMOTIONS} bytes (CUtensorMapL2promotion)")
    specs = Stage(stage).tensor_map_specs(problem, tensors)
    return {"a": specs["a"], "b": dataclasses.replace(specs["b"], l2_promotion=promotion).validate()}


def f21_table(problem="siglip2", promotion: int = 256):
    """Stage 09's maps and F21's side by side (what changes: B's l2_promotion only)."""
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    base = Stage(FINAL).tensor_map_specs(prob)
    f21 = f21_specs(prob, promotion=promotion)
    rows = []
    for k in ("a", "b"):
        rows.append({"operand": k.upper(), "box (torch order)": base[k].box_shape, "swizzle": base[k].swizzle,
                     "stage 09 l2Promotion": tma.L2_PROMOTIONS[base[k].l2_promotion],
                     "F21 l2Promotion": tma.L2_PROMOTIONS[f21[k].l2_promotion]})
    return Table(rows, f"F21: tensor maps of the {prob.name} problem (host side, no kernel change) — compiled "
                       "(from stage 09's exported boxes)")


# ---------------------------------------------------------------------------------------------
# F26: a persisting access-policy window over B
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AccessPolicyWindow:
    """The fields of CUaccessPolicyWindow / cudaAccessPolicyWindow, checked before the driver sees them."""

    base_ptr: int
    num_bytes: int
    hit_ratio: float = 1.0
    hit_prop: str = "persisting"
    miss_prop: str = "streaming"

    def problems(self, max_window: int | None = None, set_aside: int | None = None) -> list[str]:
        out = []
        if self.num_bytes <= 0:
            out.append(f"num_bytes {self.num_bytes}: the window must cover at least one byte")
        if not 0.0 <= self.hit_ratio <= 1.0:
            out.append(f"hitRatio {self.hit_ratio} must be in [0, 1]")
        if self.hit_prop not in PROPS:
            out.append(f"hitProp {self.hit_prop!r}: one of {sorted(PROPS)}")
        if self.miss_prop not in ("normal", "streaming"):
            out.append(f"missProp {self.miss_prop!r}: NORMAL or STREAMING only (CUaccessPolicyWindow)")
        if self.base_ptr < 0:
            out.append("base_ptr must be a device address")
        if max_window is not None and self.num_bytes > max_window:
            out.append(f"num_bytes {self.num_bytes:,} exceeds the device's max access-policy window "
                       f"{max_window:,} B (CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE)")
        if set_aside is not None and self.hit_prop == "persisting" and self.hit_ratio * self.num_bytes > set_aside:
            out.append(f"hitRatio x num_bytes = {self.hit_ratio * self.num_bytes:,.0f} B exceeds the persisting "
                       f"set-aside {set_aside:,} B: the persisting lines would evict each other; lower hitRatio "
                       "or raise CU_LIMIT_PERSISTING_L2_CACHE_SIZE")
        return out

    def validate(self, **kw) -> "AccessPolicyWindow":
        p = self.problems(**kw)
        if p:
            raise L2PolicyError("access-policy window rejected:\n  - " + "\n  - ".join(p))
        return self

    def driver(self):
        """cuda.bindings.driver.CUaccessPolicyWindow with these fields."""
        from cuda.bindings import driver as drv

        self.validate()
        w = drv.CUaccessPolicyWindow()
        w.base_ptr = int(self.base_ptr)
        w.num_bytes = int(self.num_bytes)
        w.hitRatio = float(self.hit_ratio)
        w.hitProp = getattr(drv.CUaccessProperty, PROPS[self.hit_prop])
        w.missProp = getattr(drv.CUaccessProperty, PROPS[self.miss_prop])
        return w

    def stream_attr(self):
        """cuda.bindings.driver.CUstreamAttrValue carrying the window (for cuStreamSetAttribute)."""
        from cuda.bindings import driver as drv

        v = drv.CUstreamAttrValue()
        v.accessPolicyWindow = self.driver()
        return v

    def runtime_attr(self):
        """The runtime's cudaStreamAttrValue with the same window (the card's spelling)."""
        from cuda.bindings import runtime as rt

        self.validate()
        v = rt.cudaStreamAttrValue()
        w = v.accessPolicyWindow
        w.base_ptr = int(self.base_ptr)
        w.num_bytes = int(self.num_bytes)
        w.hitRatio = float(self.hit_ratio)
        w.hitProp = getattr(rt.cudaAccessProperty, RT_PROPS[self.hit_prop])
        w.missProp = getattr(rt.cudaAccessProperty, RT_PROPS[self.miss_prop])
        v.accessPolicyWindow = w
        return v

    def set_aside(self, max_persisting: int | None = None) -> int:
        """Persisting L2 bytes this window needs (hitRatio x num_bytes), capped at the device's maximum."""
        need = int(-(-self.hit_ratio * self.num_bytes // 1)) if self.hit_prop == "persisting" else 0
        return need if max_persisting is None else min(need, int(max_persisting))

    @classmethod
    def from_driver(cls, w) -> "AccessPolicyWindow":
        names = {v: k for k, v in PROPS.items()}
        return cls(int(w.base_ptr), int(w.num_bytes), float(w.hitRatio), names[w.hitProp.name], names[w.missProp.name])


def b_window(b=None, *, problem="siglip2", base_ptr: int | None = None, hit_ratio: float = 1.0) -> AccessPolicyWindow:
    """The card's window: B's bytes (N x K FP8; 768 x 768 = 576 KB for SigLIP2), persisting on hit, streaming on miss.

    b: the CUDA tensor (its data_ptr and size); without it, the problem's B size at `base_ptr` (default 0,
    a window not bound to memory yet, for inspection).
    """
    if b is not None:
        return AccessPolicyWindow(int(b.data_ptr()), int(b.numel() * b.element_size()), hit_ratio).validate()
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    return AccessPolicyWindow(int(base_ptr or 0), int(prob.n) * int(prob.k), hit_ratio).validate()


def window_table(w: AccessPolicyWindow):
    rows = [{"field": "base_ptr", "value": f"{w.base_ptr:#x}"}, {"field": "num_bytes", "value": w.num_bytes},
            {"field": "hitRatio", "value": w.hit_ratio}, {"field": "hitProp", "value": PROPS[w.hit_prop]},
            {"field": "missProp", "value": PROPS[w.miss_prop]},
            {"field": "persisting set-aside needed (B)", "value": w.set_aside()}]
    return Table(rows, "F26: the access-policy window over B (host side, no kernel change) — compiled "
                       "(the launch set-up, from the problem's B and stage 09's launch)")


# ---- on a device ------------------------------------------------------------------------------

def _drv():
    from cuda.bindings import driver as drv   # on a device only
    launch.ensure_context()
    return drv


def _check(err, what: str):
    if int(err) != 0:
        raise L2PolicyError(f"{what} failed: {err}")


def device_limits(device_index: int = 0) -> dict:
    """The device's max window and max persisting set-aside (bytes)."""
    drv = _drv()
    out = {}
    for key, attr in (("max_window", "CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE"),
                      ("max_persisting", "CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE")):
        err, v = drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, attr), device_index)
        _check(err, f"cuDeviceGetAttribute({attr})")
        out[key] = int(v)
    return out


def _stream(stream, device_index: int):
    return launch._stream_handle(stream, device_index)


def apply(window: AccessPolicyWindow, stream=None, device_index: int = 0) -> dict:
    """Set aside persisting L2 for the window and put the window on `stream` (default torch's current stream).

    Returns what was set (set-aside bytes, the device limits); undo with `reset`.
    """
    drv = _drv()
    lim = device_limits(device_index)
    set_aside = window.set_aside(lim["max_persisting"])
    window.validate(max_window=lim["max_window"], set_aside=set_aside)
    _check(drv.cuCtxSetLimit(drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, set_aside)[0],
           "cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)")
    h = _stream(stream, device_index)
    _check(drv.cuStreamSetAttribute(drv.CUstream(h), drv.CUstreamAttrID.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                                    window.stream_attr())[0], "cuStreamSetAttribute(access-policy window)")
    return {"set_aside": set_aside, **lim}


def read_back(stream=None, device_index: int = 0) -> AccessPolicyWindow:
    """The window the stream carries now (cuStreamGetAttribute)."""
    drv = _drv()
    err, v = drv.cuStreamGetAttribute(drv.CUstream(_stream(stream, device_index)),
                                      drv.CUstreamAttrID.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW)
    _check(err, "cuStreamGetAttribute(access-policy window)")
    return AccessPolicyWindow.from_driver(v.accessPolicyWindow)


def reset(stream=None, device_index: int = 0) -> None:
    """Remove the window (num_bytes 0), return persisting lines to normal, release the set-aside."""
    drv = _drv()
    v = drv.CUstreamAttrValue()
    v.accessPolicyWindow = drv.CUaccessPolicyWindow()      # all zero: no window
    _check(drv.cuStreamSetAttribute(drv.CUstream(_stream(stream, device_index)),
                                    drv.CUstreamAttrID.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, v)[0],
           "cuStreamSetAttribute(no window)")
    _check(drv.cuCtxResetPersistingL2Cache()[0], "cuCtxResetPersistingL2Cache")
    _check(drv.cuCtxSetLimit(drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)[0], "cuCtxSetLimit(0)")


@contextmanager
def applied(window: AccessPolicyWindow, stream=None, device_index: int = 0):
    """The window on the stream for the duration of a `with` block (apply, then reset)."""
    info = apply(window, stream, device_index)
    try:
        yield info
    finally:
        reset(stream, device_index)


def window_on_b(tensors: dict):
    """F26's host change for pelib.stage.Stage.run(launch=LaunchOptions(hook=...)): the window over the inputs'
    B while it runs."""
    return applied(b_window(tensors["b"]))
