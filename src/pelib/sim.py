"""Run a stage's own CUDA source on the CPU: the simulator's host build, launch and reports.

    plan = pelib.sim.prepare(build, args, grid=..., block=..., cluster=..., smem=..., kernel=..., arch=...,
                             defines=..., seed=0)
    plan.run()          # raises SimDeadlock / SimHazard / SimMisuse (all SimError) naming thread and line
    plan.report         # SimReport: ok, seed, deadlock / hazards / misuse lists, events

The stage file is compiled unchanged by a host C++ compiler (g++ >= 11 or clang++ >= 14, found at run
time) with `-I src/kernels/sim -I src/kernels`, so `#include "common/<x>.cuh"` picks the simulated twin
of each instruction header (src/kernels/sim/common) and the real building blocks. The engine
(src/kernels/sim/runtime: fibers, scheduler, memories, asynchronous units, reports) and the data-path
models (src/kernels/sim/model) are one shared library; each stage build is another, loaded once per CTA
slot (its thread-local block is that CTA's shared memory; runtime/api.h). Both are cached like NVRTC
builds (pelib.cache: every file the compiler opened, by content, atomic writes). The host side (compiler,
cached builds, loading) is pelib.sim_build.

Evidence: "simulated" — the stage's own source ran on the CPU model (protocol, indexing, data path);
the simulated clock only orders events and is never a time.
"""
from __future__ import annotations

import ctypes
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import evidence, launch, sim_build, sim_tensormap, tma
# the host side moved to pelib.sim_build; these names stay importable from pelib.sim
from .sim_build import (Compiler, HostBuild, SimBuildError, SimToolchainError, compiler, engine_build,  # noqa: F401
                        stage_build)

STACK_BYTES = 64 * 1024          # per simulated thread
MAX_EVENTS = 2_000_000
MAX_STEPS = 200_000_000           # scheduler steps before a run counts as not finishing (PELIB_SIM_MAX_STEPS)
SMEM_LIMIT = 227 * 1024          # common/limits.cuh PE_SMEM_LIMIT (the engine checks a launch against it)
EVIDENCE = evidence.simulated("pelib.sim, the stage's own source on the CPU model")
EVENT_KINDS = ("wait_begin", "wait_end", "arrive", "expect_tx", "complete_tx", "tma_load", "tma_load_done",
               "tma_store", "tma_store_done", "mma", "mma_done", "commit", "tmem_alloc", "tmem_dealloc", "tmem_ld",
               "tmem_cp", "bar_sync", "cluster_sync", "exit")
# struct PeSimEvent of runtime/engine.cpp
EVENT_DTYPE = np.dtype([("seq", "<u8"), ("cta", "<i4"), ("cluster", "<i4"), ("rank", "<i4"), ("warp", "<i4"),
                        ("lane", "<i4"), ("kind", "<i4"), ("barrier", "<i4"), ("parity", "<i4"), ("tag", "<i4"),
                        ("line", "<i4"), ("file", "<i4"), ("pad", "<i4")])


class SimError(RuntimeError):
    """The simulated run found a problem; .report holds everything, the message names thread, line and seed."""

    def __init__(self, message: str, report: "SimReport | None" = None):
        super().__init__(message)
        self.report = report


class SimDeadlock(SimError):
    """No simulated thread can run and not all have exited: every blocked thread's wait site is listed."""


class SimHazard(SimError):
    """Shared memory or TMEM touched while an asynchronous operation still reads or writes it."""


class SimMisuse(SimError):
    """An instruction used against its rules (TMEM outside the allocation, exit with work pending, ...)."""


_LOCK = threading.Lock()


def _engine() -> ctypes.CDLL:
    lib = sim_build.load_engine()
    if lib.pe_sim_event_size() != EVENT_DTYPE.itemsize:
        raise SimBuildError("runtime/engine.cpp's PeSimEvent and pelib.sim.EVENT_DTYPE differ: keep them in step")
    return lib


# ---- the launch ------------------------------------------------------------------------------------

class _Launch(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3), ("cluster", ctypes.c_uint32 * 3),
                ("smem", ctypes.c_uint32), ("smem_limit", ctypes.c_uint32), ("seed", ctypes.c_uint64),
                ("nslots", ctypes.c_int32), ("entries", ctypes.POINTER(ctypes.c_void_p)),
                ("windows", ctypes.POINTER(ctypes.c_void_p)), ("args", ctypes.POINTER(ctypes.c_void_p)),
                ("nranges", ctypes.c_int32), ("ranges", ctypes.POINTER(ctypes.c_uint64)),
                ("max_events", ctypes.c_int64), ("stack_bytes", ctypes.c_uint64), ("max_steps", ctypes.c_uint64)]


@dataclass
class SimReport:
    """What one simulated run found. deadlock / hazards / misuse are lists of dicts, each with its "text" and
    the thread it names (cta, cluster, rank, warp, lane or lanes, role, file, line); a deadlock entry also has
    its wait: "wait" (mbarrier, bar.sync, barrier.cluster, a warp collective, ...) and for an mbarrier its
    "tag", "barrier" (shared offset), "parity" waited for, the barrier's "phase", "pending" arrivals of
    "count" and "tx" bytes. `events` is the event log (pelib.sim.EVENT_KINDS), a list of dicts."""

    ok: bool
    seed: int
    deadlock: list = field(default_factory=list)
    hazards: list = field(default_factory=list)
    misuse: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    events_array: np.ndarray | None = field(default=None, repr=False)
    files: list = field(default_factory=list, repr=False)

    @property
    def events(self) -> list[dict]:
        """One dict per event in simulated order: seq (an order stamp, never a time), cta, cluster, rank, warp,
        lane, role, kind, barrier (shared offset), parity, tag, line, file."""
        if self.events_array is None:
            return []
        a = self.events_array
        out = []
        for r in a.tolist():
            seq, cta, cl, rank, warp, lane, kind, bar, par, tag, line, fi, _ = r
            out.append({"seq": seq, "cta": cta, "cluster": cl, "rank": rank, "warp": warp, "lane": lane,
                        "role": f"warp {warp}" if warp >= 0 else "async unit", "kind": EVENT_KINDS[kind],
                        "barrier": None if bar < 0 else bar, "slot": None, "acc": None,
                        "parity": None if par < 0 else par, "tag": None if tag < 0 else tag, "line": line,
                        "file": self.files[fi] if 0 <= fi < len(self.files) else None})
        return out

    @property
    def seeds(self) -> tuple:
        """The seeds this report covers (one run: its seed)."""
        return (self.seed,)

    @property
    def tags(self) -> tuple:
        """The wait tags of the blocked mbarrier waits of a deadlock."""
        return tuple(sorted({d["tag"] for d in self.deadlock if d.get("tag") is not None}))

    def summary(self) -> str:
        if self.ok:
            return f"simulated, seed {self.seed}: no deadlock, hazard or misuse ({self.stats.get('steps', 0):,} steps)"
        parts = []
        for name, items in (("hazard", self.hazards), ("misuse", self.misuse), ("deadlock", self.deadlock)):
            if items:
                shown = "\n  ".join(d["text"] for d in items[:12])
                shown += f"\n  ... and {len(items) - 12} more" if len(items) > 12 else ""
                parts.append(f"{name} ({len(items)}):\n  {shown}")
        return f"simulated, seed {self.seed} (reproduce with PELIB_SIM_SEED={self.seed}):\n" + "\n".join(parts)


def default_seed(seed: int = 0) -> int:
    env = os.environ.get("PELIB_SIM_SEED", "")
    return int(env) if env.strip() else int(seed)


def _ptr(x) -> int:
    return int(x.data_ptr()) if hasattr(x, "data_ptr") else int(x.ctypes.data)


class SimPlan:
    """A prepared simulated launch: run() executes it (synchronously), wait() is a no-op, report holds the result."""

    def __init__(self, stage_lib: HostBuild, args: tuple, grid, block, cluster, smem: int, kernel: str, arch: str,
                 defines: dict, seed: int, timing: bool = False, slots: int | None = None,
                 max_events: int = MAX_EVENTS):
        self.lib = stage_lib
        self.kernel, self.arch, self.defines = kernel, arch, dict(defines or {})
        self.grid, self.block, self.cluster = tuple(grid), tuple(block), tuple(cluster)
        self.smem = int(smem)
        self.seed = int(seed)
        self.timing = timing
        self.max_events = int(max_events)
        self.report: SimReport | None = None
        self.config = None
        cx = int(np.prod(self.cluster))
        ctas = int(np.prod(self.grid))
        self.slots = slots or min(ctas, max(cx, 2 * cx if cx > 1 else 4))
        self._keep = []
        self._argv, self._ranges = self._bind(args)

    def _bind(self, args):
        vals, ranges = [], []
        for a in args:
            if isinstance(a, tma.TensorMap):
                raw = sim_tensormap.encode(a.spec)
                buf = np.zeros(128 + 64, np.uint8)
                off = (-buf.ctypes.data) % 64
                view = buf[off:off + 128]
                view[:] = np.frombuffer(raw, np.uint8)
                self._keep.append(buf)
                vals.append(view.ctypes.data)
                if a.owner is not None and hasattr(a.owner, "data_ptr"):
                    ranges.append((int(a.owner.data_ptr()), a.owner.numel() * a.owner.element_size()))
            elif a is None:
                b = np.zeros(1, np.uint64)
                self._keep.append(b)
                vals.append(b.ctypes.data)
            elif hasattr(a, "data_ptr"):   # a tensor: the kernel gets its address
                if a.device.type != "cpu":
                    raise SimError(f"device='sim' runs on the CPU: a tensor on {a.device} cannot be simulated")
                if not a.is_contiguous():
                    raise SimError("device='sim': pass contiguous tensors (the kernel indexes them densely)")
                b = np.array([a.data_ptr()], np.uint64)
                self._keep.append((b, a))
                vals.append(b.ctypes.data)
                ranges.append((int(a.data_ptr()), a.numel() * a.element_size()))
            elif isinstance(a, np.generic):
                b = np.array([a], a.dtype)
                self._keep.append(b)
                vals.append(b.ctypes.data)
            else:
                raise SimError(f"device='sim': no binding for a kernel argument of type {type(a).__name__}")
        argv = (ctypes.c_void_p * max(1, len(vals)))(*vals)
        flat = np.array([x for r in ranges for x in r] or [0], np.uint64)
        self._keep.append(flat)
        return argv, (flat, len(ranges))

    def run(self, check: bool = True) -> SimReport:
        eng = _engine()
        copies = sim_build.load_copies(self.lib.path, self.slots)
        entries = (ctypes.c_void_p * self.slots)(*[ctypes.cast(c.pe_sim_kernel_entry, ctypes.c_void_p).value for c in copies])
        windows = (ctypes.c_void_p * self.slots)(*[ctypes.cast(c.pe_sim_window, ctypes.c_void_p).value for c in copies])
        flat, nr = self._ranges
        L = _Launch()
        L.grid[:] = [int(x) for x in self.grid]
        L.block[:] = [int(x) for x in self.block]
        L.cluster[:] = [int(x) for x in self.cluster]
        L.smem = self.smem
        L.smem_limit = SMEM_LIMIT
        L.seed = self.seed
        L.nslots = self.slots
        L.entries = ctypes.cast(entries, ctypes.POINTER(ctypes.c_void_p))
        L.windows = ctypes.cast(windows, ctypes.POINTER(ctypes.c_void_p))
        L.args = ctypes.cast(self._argv, ctypes.POINTER(ctypes.c_void_p))
        L.nranges = nr
        L.ranges = flat.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64))
        L.max_events = self.max_events
        L.stack_bytes = STACK_BYTES
        L.max_steps = int(os.environ.get("PELIB_SIM_MAX_STEPS", MAX_STEPS))
        with _LOCK:   # one engine per process
            eng.pe_sim_run(ctypes.byref(L))
            doc = json.loads(eng.pe_sim_report_json().decode())
            n = ctypes.c_int64(0)
            p = eng.pe_sim_events(ctypes.byref(n))
            ev = (np.frombuffer((ctypes.c_char * (n.value * EVENT_DTYPE.itemsize)).from_address(p), EVENT_DTYPE).copy()
                  if n.value else np.zeros(0, EVENT_DTYPE))
        stats = {k: doc.get(k) for k in ("steps", "switches", "ops", "p_async", "p_yield", "events_truncated")}
        stats.update(slots=self.slots, grid=list(self.grid), cluster=list(self.cluster))
        self.report = SimReport(ok=bool(doc["ok"]), seed=self.seed, deadlock=doc["deadlock"], hazards=doc["hazards"],
                                misuse=doc["misuse"], stats=stats, events_array=ev, files=doc["files"])
        if check:
            self.raise_for_report()
        return self.report

    def raise_for_report(self) -> None:
        r = self.report
        if r is None or r.ok:
            return
        # the earliest problem names the class: hazards never stop a run, a misuse stops it at once, and a
        # deadlock is what is left at the end
        cls = SimHazard if r.hazards else SimMisuse if r.misuse else SimDeadlock
        raise cls(f"{self.kernel} ({self.arch}{', ' + str(self.defines) if self.defines else ''}): {r.summary()}", r)

    def wait(self) -> None:
        return None

    @property
    def events(self) -> list[dict]:
        return self.report.events if self.report else []


def prepare(build, args, *, grid, block, cluster, smem, kernel, arch, defines=None, seed: int = 0,
            timing: bool = False, slots: int | None = None, max_events: int = MAX_EVENTS) -> SimPlan:
    """A simulated launch of `build`'s source (a pelib.build.Build: its source file and kernel name) with the
    same arguments a GPU launch binds (tensor maps as pelib.tma.TensorMap, tensors on the CPU, scalars).
    The seed picks the interleaving (PELIB_SIM_SEED overrides it)."""
    # the launch shapes every GPU refuses (block 0 or over 1,024 threads, grid 0, shared memory over the
    # limit) are refused here too, before anything is built, with pelib.launch's messages
    g, b, c, smem = launch.check_shape(grid, block, cluster, smem, name=kernel, smem_limit=SMEM_LIMIT,
                                       where="the simulated SM (common/limits.cuh PE_SMEM_LIMIT)")
    src = getattr(build, "source", build)
    lib = stage_build(Path(src), kernel, defines)
    return SimPlan(lib, tuple(args), g, b, c, smem, kernel, arch, defines or {}, default_seed(seed), timing, slots,
                   max_events)
