"""Load a Build's cubin and launch it on torch's current stream, with checked arguments and a watchdog.

`prepare()` is pure Python up to the launch: it checks the arch against the device, the launch
shape and every argument, and packs the arguments with explicit widths. `LaunchPlan.run()`
loads the cubin (cuda.core ObjectCode.from_cubin / get_kernel, cached), sets the dynamic
shared-memory attribute above 48 KB and launches. `LaunchPlan.wait()` polls an event with a
timeout, so a kernel that hangs or traps becomes KernelHang / KernelFault naming the kernel and
its launch shape. `launch()` does all three.

Grid convention: `grid` counts CTAs (what blockIdx ranges over), also with clusters; pelib
divides by the cluster shape for cuda.core, whose LaunchConfig counts clusters in `grid`
(cuda_core/cuda/core/_launch_config.pyx).

Arguments: torch tensors (CUDA, on the launch device, contiguous unless wrapped in Strided)
become 64-bit pointers; None is a null pointer; integers and floats must carry their width
(numpy.int32(x), numpy.uint32(x), numpy.uint64(x), numpy.float32(x), or ctypes): cuda.core
would pass a bare Python int as a 64-bit pointer (cuda_core/.../_kernel_arg_handler.pyx), so a
bare int is refused. Tensor maps (pelib.tma.TensorMap or a cuda.bindings CUtensorMap) are passed
by value (128 B, a `const __grid_constant__ TensorMap` parameter). cuda.core's own launch takes
only its TensorMapDescriptor as a struct argument, so a launch with CUtensorMaps goes through
cuda.bindings' cuLaunchKernelEx, which packs a struct given with type None from its getPtr()
(cuda_bindings/cuda/bindings/_lib/utils.pxi, _pack_argument).
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import time
from dataclasses import dataclass, field

import numpy as np

from . import device as _device
from .device import ensure_context
from .tma import TensorMap

DEFAULT_TIMEOUT_S = 30.0
STATIC_SMEM_LIMIT = 48 * 1024   # above this a kernel must opt in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
MAX_THREADS = 1024
# CUDA C++ Programming Guide, "Compute Capabilities", technical specifications (every cc >= 3.0): a grid
# of at most (2^31 - 1, 65535, 65535) blocks, a block of at most (1024, 1024, 64) threads and 1024 in all.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
PORTABLE_CLUSTER = 8


class LaunchError(RuntimeError):
    """A launch was refused before it started (bad shape, argument, shared memory)."""


class KernelFault(LaunchError):
    """The kernel failed on the device (a trap from a bounded wait, an illegal address...)."""


class KernelHang(LaunchError):
    """The kernel did not finish within the watchdog's timeout."""


@dataclass(frozen=True)
class Strided:
    """Wrap a tensor argument the kernel reads with its own strides (skips the contiguity check)."""

    tensor: object


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _dim3(v, what: str) -> tuple[int, int, int]:
    if _is_int(v):
        v = (v,)
    if isinstance(v, (str, bytes)) or not isinstance(v, (tuple, list)):
        raise LaunchError(f"{what}={v!r} must be an integer or a tuple of 1 to 3 integers")
    for ax, x in zip("xyz", v):
        if not _is_int(x):
            hint = " (use // for the division, or math.ceil)" if isinstance(x, float) else ""
            raise LaunchError(f"{what}.{ax}={x!r} is a {type(x).__name__}, not an integer{hint}: "
                              f"{what} counts whole CTAs/threads")
    v = tuple(int(x) for x in v)
    if not 1 <= len(v) <= 3 or any(x < 1 for x in v):
        raise LaunchError(f"{what} {v} must be 1 to 3 positive integers")
    return v + (1,) * (3 - len(v))


_CTYPES = {ctypes.c_bool: np.bool_, ctypes.c_int8: np.int8, ctypes.c_int16: np.int16,
           ctypes.c_int32: np.int32, ctypes.c_int64: np.int64, ctypes.c_uint8: np.uint8,
           ctypes.c_uint16: np.uint16, ctypes.c_uint32: np.uint32, ctypes.c_uint64: np.uint64,
           ctypes.c_float: np.float32, ctypes.c_double: np.float64}


def _is_cutensormap(a) -> bool:
    return type(a).__name__ == "CUtensorMap" and callable(getattr(a, "getPtr", None))


def pack_arg(i: int, a, device_index: int):
    """One argument as launch takes it, and a short description (for errors and plan.describe())."""
    strided = isinstance(a, Strided)
    if strided:
        a = a.tensor
    if a is None:
        return np.uint64(0), "null"
    if isinstance(a, TensorMap):
        return a.cumap, f"tmap[{a.spec.describe()}]"
    if _is_cutensormap(a):
        return a, "CUtensorMap"
    if type(a).__name__ == "TensorMapDescriptor":
        return a, "TensorMapDescriptor"
    if isinstance(a, bool):
        raise LaunchError(f"argument {i} is a Python bool: pass numpy.bool_(x) or numpy.uint8(x) "
                          "to match the kernel's parameter")
    if isinstance(a, int):
        raise LaunchError(f"argument {i} is a Python int ({a}), whose width is ambiguous (cuda.core "
                          "would pass it as a 64-bit pointer): wrap it as numpy.int32(x), "
                          "numpy.uint32(x) or numpy.uint64(x) to match the kernel's parameter")
    if isinstance(a, float):
        raise LaunchError(f"argument {i} is a Python float ({a}): pass numpy.float32(x) or "
                          "numpy.float64(x) to match the kernel's parameter")
    if isinstance(a, np.generic):
        if not isinstance(a, (np.integer, np.floating, np.bool_)):
            raise LaunchError(f"argument {i} has numpy type {type(a).__name__}, which no kernel "
                              "parameter matches")
        return a, f"{type(a).__name__}({a})"
    for ct, npt in _CTYPES.items():
        if type(a) is ct:
            v = npt(a.value)
            return v, f"{type(v).__name__}({v})"
    if hasattr(a, "data_ptr") and hasattr(a, "is_cuda"):
        dev = getattr(a, "device", "?")
        if not a.is_cuda:
            raise LaunchError(f"argument {i} is a tensor on {dev}: move it to cuda:{device_index} "
                              "(t.cuda()) before launching")
        idx = getattr(dev, "index", None)
        if idx is not None and idx != device_index:
            raise LaunchError(f"argument {i} is on {dev} but the kernel launches on cuda:{device_index}: "
                              f"t.to('cuda:{device_index}')")
        if not strided and not a.is_contiguous():
            raise LaunchError(f"argument {i} (shape {tuple(a.shape)}, strides {tuple(a.stride())}) is "
                              "not contiguous: pass t.contiguous(), or wrap it in pelib.launch.Strided "
                              "if the kernel takes strides")
        return np.uint64(a.data_ptr()), f"ptr[{str(a.dtype).replace('torch.', '')}{list(a.shape)}]"
    if type(a).__name__ == "Buffer" and hasattr(a, "handle"):
        return np.uint64(int(a.handle)), f"buffer[{getattr(a, 'size', '?')} B]"
    raise LaunchError(f"argument {i} has type {type(a).__name__}; launch takes CUDA tensors, None, "
                      "numpy/ctypes scalars and tensor maps")


@dataclass
class LaunchPlan:
    """A checked launch: kernel, shape, shared memory and packed arguments."""

    kernel: str
    arch: str
    grid: tuple[int, int, int]       # CTAs
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem: int
    args: tuple
    arg_desc: tuple[str, ...]
    device_index: int
    cubin: bytes = field(repr=False, default=b"")
    keep: tuple = field(repr=False, default=())   # objects that must outlive the launch
    _kern: object = field(repr=False, default=None, compare=False)

    @property
    def uses_cutensormap(self) -> bool:
        return any(_is_cutensormap(a) for a in self.args)

    @property
    def ctas(self) -> int:
        return math.prod(self.grid)

    def describe(self) -> str:
        cl = "" if self.cluster == (1, 1, 1) else f", cluster={self.cluster}"
        return (f"{self.kernel} [{self.arch}] grid={self.grid} CTAs{cl}, block={self.block}, "
                f"dynamic smem={self.smem} B, args=({', '.join(self.arg_desc)})")

    @property
    def core_grid(self) -> tuple[int, int, int]:
        """The grid as cuda.core's LaunchConfig counts it: clusters when a cluster is set."""
        return tuple(g // c for g, c in zip(self.grid, self.cluster))

    def core_config(self):
        """The cuda.core LaunchConfig."""
        from cuda.core import LaunchConfig
        if self.cluster == (1, 1, 1):
            return LaunchConfig(grid=self.grid, block=self.block, shmem_size=self.smem)
        return LaunchConfig(grid=self.core_grid, cluster=self.cluster, block=self.block,
                            shmem_size=self.smem)

    def run(self, stream=None) -> "LaunchPlan":
        """Launch (asynchronously) on `stream`, default torch's current stream on the plan's device.

        Refused with KernelFault when an earlier launch of this process faulted (the context is
        unusable until the process restarts), with KernelHang while one is still running past its watchdog.
        """
        check_context(self.describe(), self.device_index)
        try:
            if self._kern is None:
                kern = load_kernel(self.cubin, self.kernel, self.device_index, self.smem, self.cluster)
                _check_signature(self, kern)
                self._kern = kern
            handle = _stream_handle(stream, self.device_index)
            if self.uses_cutensormap:
                _launch_bindings(self, self._kern, handle)
            else:
                from cuda.core import launch as core_launch
                core_launch(_core_stream(handle), self.core_config(), self._kern, *self.args)
        except LaunchError:
            raise
        except Exception as e:   # a driver error at load or launch: say which launch, and whether the context is gone
            sticky = next((n for n in _STICKY if n in str(e)), None)
            if sticky:
                _STATE["fault"] = (f"an earlier kernel (found when launching {self.kernel})", sticky)
                raise KernelFault(_fault_text(self.describe(), sticky)) from e
            raise LaunchError(f"launching {self.describe()} failed: {type(e).__name__}: {e}") from e
        return self

    def wait(self, timeout_s: float = DEFAULT_TIMEOUT_S, stream=None) -> None:
        """Block until the stream's work is done; KernelHang after timeout_s, KernelFault on error."""
        sync(self.describe(), stream, self.device_index, timeout_s)


def check_shape(grid, block, cluster, smem, *, name: str = "the kernel", static: int = 0,
                smem_limit: int | None = None, where: str = "the GPU"):
    """The launch shape every GPU refuses, refused here: (grid, block, cluster, smem) as 3-tuples and bytes."""
    grid, block, cluster = _dim3(grid, "grid"), _dim3(block, "block"), _dim3(cluster, "cluster")
    if math.prod(block) > MAX_THREADS:
        raise LaunchError(f"block {block} has {math.prod(block)} threads, more than {MAX_THREADS}")
    for what, v, lim in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        for ax, x, m in zip("xyz", v, lim):
            if x > m:
                raise LaunchError(f"{what}.{ax}={x:,} is over the {m:,} every GPU allows (CUDA's "
                                  f"maximum {what} dimensions are {lim})")
    for g, c, ax in zip(grid, cluster, "xyz"):
        if g % c:
            raise LaunchError(f"grid.{ax}={g} CTAs is not a multiple of cluster.{ax}={c}: "
                              "grid counts CTAs; round it up to whole clusters")
    if math.prod(cluster) > 16:
        raise LaunchError(f"cluster {cluster} has {math.prod(cluster)} CTAs; the limit is 16 "
                          f"(8 portable)")
    if not _is_int(smem) or smem < 0:
        raise LaunchError(f"smem={smem!r}: dynamic shared memory is a whole number of bytes >= 0 "
                          "(None takes the stage's exported smem_bytes)")
    smem = int(smem)
    if smem_limit and smem + static > smem_limit:
        raise LaunchError(f"{name} needs {smem} B dynamic + {static} B static shared memory per CTA; "
                          f"{where} allows {smem_limit} B: fewer stages or smaller tiles")
    return grid, block, cluster, smem


def prepare(build, args=(), *, grid, block, cluster=(1, 1, 1), smem: int | None = None,
            kernel: str | None = None, info: _device.DeviceInfo | None = None) -> LaunchPlan:
    """Check and pack a launch of `build` (pure Python: no CUDA call)."""
    arch = build.arch
    info = info or _device.current()
    try:
        _device.require(arch, info)
    except _device.UnsupportedGPU as e:
        raise _device.UnsupportedGPU(f"cannot launch {build.source.name}: {e}") from None
    name = kernel or build.kernel
    if name not in build.ptxas:   # pelib.build gives every entry function its facts (facts_missing)
        raise LaunchError(f"{build.source.name} has no kernel {name!r}; it has {sorted(build.ptxas)}")
    smem = build.exports.get("smem_bytes", 0) if smem is None else smem
    grid, block, cluster, smem = check_shape(grid, block, cluster, smem, name=name,
                                             static=build.ptxas[name].smem_static,
                                             smem_limit=info.smem_optin_bytes, where=info.name)
    if cluster != (1, 1, 1) and info.cc and info.cc < (9, 0):
        raise LaunchError("clusters need compute capability 9.0 or later")
    packed, desc, keep = [], [], []
    for i, a in enumerate(args):
        v, d = pack_arg(i, a, info.ordinal)
        packed.append(v)
        desc.append(d)
        keep.append(a)
    kinds = {"CUtensorMap" if _is_cutensormap(v) else type(v).__name__ for v in packed}
    if "CUtensorMap" in kinds and "TensorMapDescriptor" in kinds:
        raise LaunchError("mix of cuda.bindings CUtensorMap and cuda.core TensorMapDescriptor "
                          "arguments: encode all maps with pelib.tma")
    return LaunchPlan(kernel=name, arch=arch, grid=grid, block=block, cluster=cluster, smem=smem,
                      args=tuple(packed), arg_desc=tuple(desc), device_index=info.ordinal,
                      cubin=build.cubin, keep=tuple(keep))


def launch(build, args=(), *, grid, block, cluster=(1, 1, 1), smem: int | None = None,
           kernel: str | None = None, stream=None, sync: bool = True,
           timeout_s: float = DEFAULT_TIMEOUT_S) -> LaunchPlan:
    """Prepare, launch, and (by default) wait with the watchdog; returns the plan."""
    plan = prepare(build, args, grid=grid, block=block, cluster=cluster, smem=smem, kernel=kernel)
    plan.run(stream)
    if sync:
        plan.wait(timeout_s, stream)
    return plan


# ---- GPU side ---------------------------------------------------------------------------------

_KERNELS: dict = {}


def load_kernel(cubin: bytes, name: str, device_index: int = 0, smem: int = 0,
                cluster=(1, 1, 1)):
    """cuda.core Kernel for `name` in `cubin` (cached), with its dynamic shared memory limit raised."""
    from cuda.bindings import driver as drv
    from cuda.core import ObjectCode
    ensure_context(device_index)
    key = (hashlib.sha256(cubin).hexdigest(), name, device_index)
    entry = _KERNELS.get(key)
    if entry is None:
        obj = ObjectCode.from_cubin(cubin)
        entry = _KERNELS[key] = {"obj": obj, "kernel": obj.get_kernel(name), "smem": 0, "np": False}
    kern = entry["kernel"]
    A = drv.CUfunction_attribute
    if smem > STATIC_SMEM_LIMIT and smem > entry["smem"]:
        _set_attr(kern, A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem, device_index)
        entry["smem"] = smem
    if math.prod(cluster) > PORTABLE_CLUSTER and not entry["np"]:
        _set_attr(kern, A.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, device_index)
        entry["np"] = True
    return kern


def _set_attr(kern, attr, value: int, device_index: int) -> None:
    """cuKernelSetAttribute on cuda.core's CUkernel (cuFuncSetAttribute for a CUfunction)."""
    from cuda.bindings import driver as drv
    h = kern.handle
    if type(h).__name__ == "CUfunction":
        err, = drv.cuFuncSetAttribute(h, attr, value)
    else:
        err, = drv.cuKernelSetAttribute(attr, value, h, drv.CUdevice(device_index))
    if int(err) != 0:
        raise LaunchError(f"setting {attr.name}={value} failed: {err}")


def _check_signature(plan: LaunchPlan, kern) -> None:
    """Compare argument count and sizes with the kernel's parameter list, when cuda.core reports it."""
    try:
        info = kern.arguments_info
    except Exception:  # older cuda.core / driver without cuFuncGetParamInfo
        return
    if len(info) != len(plan.args):
        raise LaunchError(f"{plan.kernel} takes {len(info)} parameters, got {len(plan.args)}: "
                          f"({', '.join(plan.arg_desc)})")
    for i, (p, a) in enumerate(zip(info, plan.args)):
        size = getattr(p, "size", None)
        if size is None and isinstance(p, tuple):
            size = p[-1]
        want = 128 if (_is_cutensormap(a) or type(a).__name__ == "TensorMapDescriptor") else a.nbytes
        if size is not None and int(size) != want:
            raise LaunchError(f"{plan.kernel} parameter {i} is {size} B but argument {i} "
                              f"({plan.arg_desc[i]}) is {want} B: fix the argument's width")


def _stream_handle(stream, device_index: int) -> int:
    """An int CUstream: `stream` (torch stream, cuda.core Stream, int) or torch's current stream."""
    if stream is None:
        import torch
        return int(torch.cuda.current_stream(device_index).cuda_stream)
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    raise LaunchError(f"unknown stream type {type(stream).__name__}")


class _StreamRef:
    """A raw CUstream handle in the __cuda_stream__ protocol cuda.core accepts."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _core_stream(handle: int):
    """cuda.core's Stream for a raw handle (0 is the legacy default stream torch uses by default)."""
    import cuda.core as cc
    if handle == 0 and hasattr(cc, "LEGACY_DEFAULT_STREAM"):
        return cc.LEGACY_DEFAULT_STREAM
    Stream = cc.Stream
    if hasattr(Stream, "from_handle"):
        return Stream.from_handle(handle)
    return _StreamRef(handle)


_NP_CTYPE = {np.dtype(v): k for k, v in _CTYPES.items()}


def _launch_bindings(plan: LaunchPlan, kern, stream: int) -> None:
    """cuLaunchKernelEx through cuda.bindings, for launches with CUtensorMap arguments."""
    from cuda.bindings import driver as drv
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = plan.grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = plan.block
    cfg.sharedMemBytes = plan.smem
    cfg.hStream = drv.CUstream(stream)
    attrs = []
    if plan.cluster != (1, 1, 1):
        at = drv.CUlaunchAttribute()
        at.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = plan.cluster
        attrs.append(at)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    values, types = [], []
    for a in plan.args:
        if _is_cutensormap(a):
            values.append(a)
            types.append(None)        # by value: the 128 bytes at a.getPtr()
        else:
            values.append(a.item())
            types.append(_NP_CTYPE[a.dtype])
    err, = drv.cuLaunchKernelEx(cfg, drv.CUfunction(int(kern.handle)), (tuple(values), tuple(types)), 0)
    if int(err) != 0:
        raise LaunchError(f"cuLaunchKernelEx refused {plan.describe()}: {err}")


# What the last failed launch of this process left behind. A device fault (trap, illegal address, ...)
# is sticky: the CUDA context stays unusable until the process ends. A hang leaves the kernel running;
# the next launch may go once it has ended.
_STATE: dict = {"fault": None, "hang": None}
# Driver errors after which the context cannot be used again (CUDA driver API, CUresult).
_STICKY = ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
           "CUDA_ERROR_ASSERT", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_HARDWARE_STACK_ERROR",
           "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_ECC_UNCORRECTABLE",
           "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_UNKNOWN")


def _event_status(ev) -> str:
    """'done', 'running' or the error's name, for an event recorded after a launch."""
    from cuda.bindings import driver as drv
    err, = drv.cuEventQuery(ev)
    if err == drv.CUresult.CUDA_SUCCESS:
        return "done"
    if err == drv.CUresult.CUDA_ERROR_NOT_READY:
        return "running"
    return getattr(err, "name", str(err))


def _event_destroy(ev) -> None:
    from cuda.bindings import driver as drv
    drv.cuEventDestroy(ev)


def _event_after(what: str, handle: int):
    """An event recorded on stream `handle` after the work queued so far (KernelFault if the context is gone)."""
    from cuda.bindings import driver as drv
    err, ev = drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    if int(err) != 0:
        _STATE["fault"] = (what, getattr(err, "name", str(err)))
        raise KernelFault(f"{what}: the CUDA context is unusable ({err}); restart the Python process")
    err, = drv.cuEventRecord(ev, drv.CUstream(handle))
    if int(err) != 0:
        drv.cuEventDestroy(ev)
        _STATE["fault"] = (what, getattr(err, "name", str(err)))
        raise KernelFault(_fault_text(what, err))
    return ev


def check_context(what: str, device_index: int = 0) -> None:
    """Raise before launching `what` if an earlier launch left the context faulted or a kernel still running."""
    fault = _STATE["fault"]
    if fault is not None:
        raise KernelFault(f"cannot launch {what}: the CUDA context has been unusable since {fault[0]} failed "
                          f"with {fault[1]}. Restart the Python process (in a notebook: restart the kernel); "
                          "no launch in this process can succeed")
    hang = _STATE["hang"]
    if hang is not None:
        prev, ev = hang
        status = _event_status(ev)
        if status == "running":
            raise KernelHang(f"cannot launch {what}: {prev} is still running past its watchdog. Wait for it "
                             "(pelib.launch.sync(timeout_s=...)), or restart the Python process to stop it")
        _STATE["hang"] = None
        _event_destroy(ev)
        if status != "done":
            _STATE["fault"] = (prev, status)
            raise KernelFault(_fault_text(prev, status) + f" (found when launching {what})")


def sync(what: str, stream=None, device_index: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Wait for `stream` by polling an event; a timeout is KernelHang, a device error KernelFault."""
    if _STATE["fault"] is not None:
        check_context(what, device_index)
    ensure_context(device_index)
    ev = _event_after(what, _stream_handle(stream, device_index))
    keep = False
    try:
        t0 = time.monotonic()
        delay = 1e-4
        while True:
            status = _event_status(ev)
            if status == "done":
                return
            if status != "running":
                _STATE["fault"] = (what, status)
                raise KernelFault(_fault_text(what, status))
            if time.monotonic() - t0 > timeout_s:
                keep = True
                if _STATE["hang"] is not None:
                    _event_destroy(_STATE["hang"][1])
                _STATE["hang"] = (what, ev)
                raise KernelHang(f"{what} did not finish in {timeout_s:g} s. Build it with the default "
                                 "bounded mbarrier waits (no PE_UNBOUNDED_WAIT) so a stuck wait traps "
                                 "and names its barrier. The kernel keeps the GPU busy until it ends: a "
                                 "launch before then is refused with KernelHang, launches after it work; "
                                 "restart the Python process to stop it")
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
    finally:
        if not keep:
            _event_destroy(ev)


def _fault_text(what: str, err) -> str:
    name = err if isinstance(err, str) else getattr(err, "name", str(err))
    hint = ""
    if name in ("CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT"):
        hint = (" A bounded mbarrier wait traps this way when it times out: the kernel printed "
                "'pelib: mbarrier wait timed out ... tag=N' naming the barrier.")
    return (f"{what} failed on the device: {name}.{hint} The CUDA context is now unusable: "
            "restart the Python process (or run the launch in a subprocess)")
