"""Run a stage's own CUDA source on the CPU: the simulator's host build, launch and reports.

    plan = pelib.sim.engine.prepare(build, args, grid=..., block=..., cluster=..., smem=..., kernel=..., arch=...,
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
cached builds, loading) is pelib.sim.build.

Evidence: "simulated" — the stage's own source ran on the CPU model (protocol, indexing, data path);
the simulated clock only orders events and is never a time.

Arithmetic: every wgmma and tcgen05.mma adds its products as pelib.numerics.blockfma's model of that MMA (the C++
twin is src/kernels/sim/model/blockfma.h). The default, accumulation "tensor_core", is the tensor core's
block FMA (Hopper wgmma FP8 measured bit for bit on an H100; Blackwell tcgen05 predicted); "exact" sums
each instruction exactly and rounds once. `with pelib.sim.engine.accumulation("exact"): ...` (or
PELIB_SIM_ACCUMULATION=exact) picks it for the launches prepared inside.

Over 700 lines: the engine's one ABI (its event schema, errors, settings, the launch and its report) is one
contract with the C++ side; the budget, builds, runs and host call are apart (pelib.sim).
"""
from __future__ import annotations

import ctypes
import functools
import json
import math
import operator
import os
import shutil
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..numerics import blockfma
from .. import evidence, launch, timing, tma
from ..isa import limits
from . import build as sim_build, tensormap as sim_tensormap
# the host side moved to pelib.sim.build; these names stay importable from pelib.sim
from .build import Compiler, HostBuild, SimBuildError, SimToolchainError, compiler, engine_build, stage_build

STACK_BYTES = 64 * 1024          # per simulated thread
MAX_EVENTS = 2_000_000
MAX_STEPS = 200_000_000           # scheduler steps before a run counts as not finishing (PELIB_SIM_MAX_STEPS)
MAX_SPIN = 4_000_000              # loads by one thread between two scheduling points before it is a hang
WATCHDOG_S = 20.0                 # CPU seconds one thread may run with no scheduling point or load (a hang after)
MAX_CTAS = 1 << 24                # CTAs one launch may have (runtime/state.h PE_SIM_MAX_CTAS; pe_sim_max_ctas)
SCHEDULES = {"lazy": 1, "eager": 2}   # named seeds: asynchronous operations complete as late / as early as allowed
# What every stage's test runs: the adversarial schedules and a random one.
STANDARD_SEEDS = ("lazy", "eager", 0)
SMEM_LIMIT = limits.SMEM_LIMIT   # common/limits.cuh PE_SMEM_LIMIT (the engine checks a launch against it)
EVIDENCE = evidence.simulated("pelib.sim, the stage's own source on the CPU model")
# The event vocabulary is the engine's (runtime/state.h's PE_SIM_EVENT_KINDS and PE_SIM_EVENT_FIELDS, read through
# pe_sim_event_schema): EVENT_KINDS (names in enum order) and EVENT_DTYPE (struct PeSimEvent) are built from it
# on first use (module __getattr__, event_schema).
# the keys of every event dict (SimReport.events)
EVENT_KEYS = ("seq", "cta", "cluster", "rank", "warp", "lane", "role", "kind", "barrier", "index", "addr", "bar_cta",
              "phase", "parity", "tag", "bytes", "op", "slot", "acc", "tile", "what", "file", "line", "tensor", "dests", "coord")


@dataclass(frozen=True)
class EventSchema:
    kinds: tuple          # the engine's event kinds, in enum order
    dtype: np.dtype       # struct PeSimEvent: the engine's field names, offsets and types, its size


@functools.lru_cache(maxsize=1)
def event_schema() -> EventSchema:
    """The engine's event vocabulary (pe_sim_event_schema), as numpy reads its log."""
    lib = sim_build.load_engine()
    lib.pe_sim_event_schema.restype = ctypes.c_char_p
    d = json.loads(lib.pe_sim_event_schema().decode())
    f = d["fields"]
    dt = np.dtype({"names": [x["name"] for x in f], "formats": [x["type"] for x in f],
                   "offsets": [x["offset"] for x in f], "itemsize": int(d["size"])})
    return EventSchema(tuple(d["kinds"]), dt)


# the record's fields SimReport.events reads, in the order it unpacks them
_READ = ("seq", "op", "cta", "cluster", "rank", "warp", "lane", "kind", "role", "name", "index", "addr", "bcta", "phase",
         "parity", "tag", "bytes", "slot", "acc", "tile", "what", "line", "file", "tensor", "dests", "coord")


def __getattr__(name: str):
    if name == "EVENT_KINDS":
        return event_schema().kinds
    if name == "EVENT_DTYPE":
        return event_schema().dtype
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tensor_name(range_name: str) -> str:
    """A launch range's name as an event's tensor: a tensor map's owner is named "tmap_a's tensor" where no
    pointer parameter is bound to the same tensor (SimPlan._bind); the event names the tensor "a"."""
    n = range_name[:-len("'s tensor")] if range_name.endswith("'s tensor") else range_name
    return n[len("tmap_"):] if n.startswith("tmap_") else n


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
ACCUMULATION_ENV = "PELIB_SIM_ACCUMULATION"


# ---- settings: every PELIB_SIM_* knob of a run, parsed and range-checked in one place ---------------------

@dataclass(frozen=True)
class Setting:
    env: str
    default: float
    lo: float
    hi: float
    what: str
    integer: bool = True
    off: bool = False      # 0 turns it off

    def read(self):
        raw = os.environ.get(self.env)
        if raw is None or not raw.strip():
            return int(self.default) if self.integer else float(self.default)
        text = raw.strip().replace("_", "")
        try:
            v = int(text) if self.integer else float(text)
        except ValueError:
            v = None
        if v is None or v != v or not ((self.off and v == 0) or self.lo <= v <= self.hi):
            span = f"{self._n(self.lo)} to {self._n(self.hi)}" + (" (0: no limit)" if self.off else "")
            kind = "a whole number" if self.integer else "a number"
            raise SimError(f"{self.env}={raw!r}: {self.what} must be {kind} from {span}; the default is "
                           f"{self._n(self.default)}: set it in that range or unset {self.env}")
        return v

    @staticmethod
    def _n(x) -> str:
        return f"{x:,}" if float(x).is_integer() else f"{x:g}"


SETTINGS = {
    "max_steps": Setting("PELIB_SIM_MAX_STEPS", MAX_STEPS, 1, 2**62, "the scheduler steps a run may take", off=True),
    "max_spin": Setting("PELIB_SIM_MAX_SPIN", MAX_SPIN, 1_000, 2**62,
                        "the loads one thread may make between two scheduling points before it is a hang"),
    "stack_bytes": Setting("PELIB_SIM_STACK", STACK_BYTES, 16 * 1024, 256 * 2**20,
                           "each simulated thread's stack in bytes"),
    "watchdog_s": Setting("PELIB_SIM_WATCHDOG_S", WATCHDOG_S, 0.05, 3600.0,
                          "the CPU seconds a thread may run with no scheduling point or load before it is a hang",
                          integer=False),
}


def settings() -> dict:
    """Every PELIB_SIM_* knob that changes what a run reports, read and checked now (SimError naming the
    variable and its range where one is out of range), plus the accumulation a launch prepared now runs."""
    out = {k: v.read() for k, v in SETTINGS.items()}
    out["opt"] = sim_build.opt_level()   # PELIB_SIM_OPT: the builds' optimisation level
    name, models = current_accumulation()
    out["accumulation"] = [name] + [list(blockfma.cxx_params(models[k])) for k in blockfma.MMA_KINDS]
    return out


_ACCUMULATION: list = []      # the accumulation() stack: (name, {kind: model})


# ---- the front door's budgets: every launch estimated from its shape before anything is built -------------
BUDGET_STEPS_ENV = "PELIB_SIM_BUDGET_STEPS"
BUDGET_MB_ENV = "PELIB_SIM_MAX_MB"
DEFAULT_BUDGET_STEPS = 20_000_000        # minutes of one CPU core (30-150 thousand steps a second here)
FIBER_BYTES = 1024                       # one simulated thread's Fiber with its containers (measured 1.2-1.8 KB)


class SimTooLarge(ValueError):
    """A simulated run would not fit the host's memory or the step budget; the message has the numbers and the fix."""


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip().replace("_", "")
    if not raw:
        return None
    try:
        v = int(raw)
    except ValueError:
        raise SimTooLarge(f"{name}={os.environ[name]!r} is not a whole number (0 turns the check off)") from None
    if v < 0:
        raise SimTooLarge(f"{name}={v} is negative (0 turns the check off)")
    return v


def budget_steps() -> int:
    """The most scheduler steps a run may be estimated at: PELIB_SIM_BUDGET_STEPS, else 20 million (0: none)."""
    v = _env_int(BUDGET_STEPS_ENV)
    return DEFAULT_BUDGET_STEPS if v is None else v


def budget_bytes() -> tuple[int, str] | None:
    """The host memory a run may take and where that number came from: PELIB_SIM_MAX_MB, else the kernel's
    MemAvailable (/proc/meminfo); None where neither says (0 in PELIB_SIM_MAX_MB: no check)."""
    v = _env_int(BUDGET_MB_ENV)
    if v is not None:
        return (v * 2**20, BUDGET_MB_ENV) if v else None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available now (MemAvailable)"
    except (OSError, ValueError, IndexError):
        pass
    return None


CTA_BYTES = 1024   # the engine's record of one CTA of the grid, kept until the run ends (runtime/state.h Cta)
STEPS_PER_THREAD = 1   # every simulated thread is switched to at least once


def check_launch(grid, block, cluster, *, max_events: int = MAX_EVENTS, label: str = "") -> dict:
    """Refuse (SimTooLarge, one line) a launch the engine cannot count (over MAX_CTAS CTAs) or whose floor,
    from its shape alone, exceeds the step budget or the host's memory: every thread runs at least once, and
    the engine keeps each CTA's record and each thread's fiber until the run ends. Else {ctas, threads, steps,
    bytes}. pelib.sim.engine.prepare calls it for every launch, pelib.sim.budget's estimate adds the stage's work."""
    ctas, threads = math.prod(grid), math.prod(block)
    steps = ctas * threads * STEPS_PER_THREAD
    nbytes = ctas * (CTA_BYTES + threads * FIBER_BYTES) + 2 * event_schema().dtype.itemsize * min(steps, max_events)
    what = f"{label or 'the launch'}: a grid of {ctas:,} CTAs ({' x '.join(map(str, grid))}) of {threads} threads"
    if ctas > MAX_CTAS:
        raise SimTooLarge(f"{what} is more than the simulator's engine counts ({MAX_CTAS:,} CTAs, "
                          "pelib.sim.engine.MAX_CTAS): simulate a smaller grid")
    over = []
    cap = budget_steps()
    if cap and steps > cap:
        over.append(f"~{steps:,} scheduler steps at least, over the budget of {cap:,} ({BUDGET_STEPS_ENV})")
    mem = budget_bytes()
    if mem is not None and nbytes > mem[0]:
        over.append(f"~{_gb(nbytes)} of host memory at least, over the {_gb(mem[0])} {mem[1]}")
    if over:
        raise SimTooLarge(f"{what} is too large for the simulator: " + "; ".join(over) + ". Simulate a smaller "
                          f"grid, or raise {BUDGET_STEPS_ENV} / {BUDGET_MB_ENV} (0: no check) if the host can take it")
    return {"ctas": ctas, "threads": threads, "steps": steps, "bytes": nbytes}


def current_accumulation() -> tuple[str, dict]:
    """(name, {MMA kind: pelib.numerics.blockfma model}) a launch prepared now runs: the innermost accumulation()
    block, else PELIB_SIM_ACCUMULATION, else "tensor_core"."""
    if _ACCUMULATION:
        return _ACCUMULATION[-1]
    name = os.environ.get(ACCUMULATION_ENV, "").strip() or "tensor_core"
    try:
        return name, blockfma.mma_models(name)
    except blockfma.ModelError as e:
        raise SimError(f"{ACCUMULATION_ENV}={name!r}: {e}") from None


@contextmanager
def accumulation(name="tensor_core", **models):
    """Launches prepared inside run every MMA under `name` (pelib.numerics.blockfma.ACCUMULATIONS) with models
    replaced by kind (e.g. umma_mxf4nvf4=pelib.numerics.blockfma.B200_MXF4NVF4.with_(frac_bits=37))."""
    try:
        m = blockfma.mma_models(name, **models)
        for k in blockfma.MMA_KINDS:   # a model the C++ twin cannot run is refused here, not at the launch
            blockfma.cxx_params(m[k])
    except blockfma.ModelError as e:
        raise SimError(f"accumulation({name!r}): {e}") from None
    label = name if not models else f"{name} with {', '.join(f'{k}={v.name}' for k, v in models.items())}"
    _ACCUMULATION.append((label, m))
    try:
        yield label
    finally:
        _ACCUMULATION.pop()


def _engine() -> ctypes.CDLL:
    lib = sim_build.load_engine()
    if lib.pe_sim_event_size() != event_schema().dtype.itemsize:
        raise SimBuildError("runtime/state.h's PeSimEvent and its PE_SIM_EVENT_FIELDS list differ: keep them in step")
    if lib.pe_sim_max_ctas() != MAX_CTAS:
        raise SimBuildError("runtime/state.h's PE_SIM_MAX_CTAS and pelib.sim.engine.MAX_CTAS differ: keep them in step")
    return lib


# ---- the launch ------------------------------------------------------------------------------------

class _Range(ctypes.Structure):   # struct PeSimRange of runtime/state.h
    _fields_ = [("base", ctypes.c_uint64), ("bytes", ctypes.c_uint64), ("name", ctypes.c_char_p),
                ("elem", ctypes.c_uint32), ("ndim", ctypes.c_uint32), ("shape", ctypes.c_uint64 * 4)]


class _Launch(ctypes.Structure):   # struct PeSimLaunch of runtime/state.h
    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3), ("cluster", ctypes.c_uint32 * 3),
                ("smem", ctypes.c_uint32), ("smem_limit", ctypes.c_uint32), ("seed", ctypes.c_uint64),
                ("nslots", ctypes.c_int32), ("entries", ctypes.POINTER(ctypes.c_void_p)),
                ("windows", ctypes.POINTER(ctypes.c_void_p)), ("args", ctypes.POINTER(ctypes.c_void_p)),
                ("nranges", ctypes.c_int32), ("ranges", ctypes.POINTER(_Range)),
                ("max_events", ctypes.c_int64), ("stack_bytes", ctypes.c_uint64), ("max_steps", ctypes.c_uint64),
                ("schedule", ctypes.c_int32), ("pad", ctypes.c_int32), ("max_spin", ctypes.c_uint64),
                ("watchdog_us", ctypes.c_uint64)]


@dataclass
class SimReport:
    """What one simulated run found. deadlock / hazards / misuse are lists of dicts (hazards and misuse keep the
    first stats["records_cap"] records; stats["hazards_total"] / ["misuse_total"] count them all), each with its "text" and
    the thread it names (cta, cluster, rank, warp, lane or lanes, role, file, line); a deadlock entry also has
    its wait: "wait" (mbarrier, bar.sync, barrier.cluster, a warp collective, ...) and for an mbarrier its
    "tag", "barrier" (shared offset), "parity" waited for, the barrier's "phase", "pending" arrivals of
    "count" and "tx" bytes. `events` is the event log (pelib.sim.engine.EVENT_KINDS), a list of dicts."""

    ok: bool
    seed: int | str
    deadlock: list = field(default_factory=list)
    hazards: list = field(default_factory=list)
    misuse: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    events_array: np.ndarray | None = field(default=None, repr=False)
    files: list = field(default_factory=list, repr=False)
    names: list = field(default_factory=list, repr=False)
    roles: list = field(default_factory=list, repr=False)
    gmem: list = field(default_factory=list, repr=False)   # per tensor: {"tensor", "load", "store", "prefetch"}:
                                                           # bytes of the kernel's own global loads and stores
                                                           # (not TMA's) and of its L2 prefetches' boxes

    @property
    def events(self) -> list[dict]:
        """One dict per event in simulated order, every key of EVENT_KEYS (None where it does not apply):

        seq      order stamp (never a time)
        cta, cluster, rank, warp, lane   who: warp and lane -1 for the asynchronous unit (TMA, tensor core)
                 completing an operation
        role     the warp's role from the stage's own phase marks (common/timing.cuh: "producer", "mma",
                 "epilogue", or joined by "+", e.g. sm90's consumers "mma+epilogue"); a completion carries its
                 issue's; "warp N" where the stage marks no phase for that warp
        kind     one of EVENT_KINDS; phase_begin / phase_end bracket a phase mark (`what` names it, `tile`)
        barrier  the barrier's name as the stage's mbarrier_init writes it ("&full[s]" -> "full"), index its
                 index in that array (from its address), addr its shared-memory offset, bar_cta the CTA it lives
                 in (a remote arrive's is its peer)
        phase    the barrier phase the event arrives on (arrive, expect_tx, complete_tx, tma_load: the phase its
                 bytes count in), waits for (wait_begin), or observes completed (wait_end); None: a fresh
                 barrier's parity-1 wait
        parity, tag   a wait's parity and its tag (bar_sync: the named barrier's id)
        bytes    TMA / expect_tx / complete_tx / store bytes, TMEM bytes (alloc, dealloc, ld, st), tcgen05.cp bytes;
                 a TMA load's are its box, what each destination receives (a multicast moves bytes x dests)
        tensor   tma_load / tma_store: the tensor its map addresses, by its kernel parameter ("a" for tmap_a's
                 tensor, or the pointer parameter bound to the same tensor)
        dests    tma_load: the CTAs its box lands in (1, or a multicast's destinations)
        coord    tma_load / tma_store: the box's start coordinate on its map's outermost dimension (a 2-D
                 map's row: the order a kernel walks A in)
        op       the asynchronous operation an issue (tma_load, tma_store, mma, commit, tmem_cp) and its
                 completion (tma_load_done + complete_tx, tma_store_done, mma_done, the commit's arrive) share
        slot     the ring slot (the index of a ring barrier: the ones the stage's PRODUCER_WAIT / TMA_WAIT
                 phases wait on; an MMA's: the slot its thread last waited full for)
        acc      the accumulator (the index of an EPI_WAIT / ACC_WAIT barrier; an MMA's: the one its thread last
                 waited empty for; a TMEM load's: the one its warp last waited full for)
        tile     the tile slot of the innermost phase mark open on the warp (an issue's, for a completion)
        what     phase_begin / phase_end: the phase's name (pelib.timing.phases())
        file, line   the stage source line of the call"""
        if self.events_array is None:
            return []
        phases = timing.phases()
        none = -1
        out = []
        kinds = event_schema().kinds
        tma = (kinds.index("tma_load"), kinds.index("tma_store"))
        fields = self.events_array.dtype.names
        get = operator.itemgetter(*(fields.index(k) for k in _READ))   # by the engine's field names
        for row in self.events_array.tolist():
            (seq, op, cta, cl, rank, warp, lane, kind, role, name, index, addr, bcta, phase, par, tag, nbytes, slot,
             acc, tile, what, line, fi, tensor, dests, coord) = get(row)
            out.append({
                "seq": seq, "cta": cta, "cluster": cl, "rank": rank,
                "warp": warp, "lane": lane,
                "role": (self.roles[role] if 0 <= role < len(self.roles)
                         else f"warp {warp}" if warp >= 0 else "async unit"),
                "kind": kinds[kind],
                "barrier": self.names[name] if 0 <= name < len(self.names) else None,
                "index": None if index == none else index, "addr": None if addr == none else addr,
                "bar_cta": None if bcta == none else bcta,
                "phase": None if phase == none else phase, "parity": None if par == none else par,
                "tag": None if tag == none else tag, "bytes": None if nbytes == none else nbytes,
                "op": op or None, "slot": None if slot == none else slot, "acc": None if acc == none else acc,
                "tile": None if tile == none else tile, "what": phases.get(what) if what >= 0 else None,
                "file": self.files[fi] if 0 <= fi < len(self.files) else None, "line": line,
                "tensor": tensor_name(self.names[tensor]) if 0 <= tensor < len(self.names) else None,
                "dests": None if dests == none else dests,
                "coord": None if kind not in tma else coord})
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
        warned = ""
        if self.warnings:
            warned = f"\n  warning ({len(self.warnings)}): " + "\n  ".join(d["text"] for d in self.warnings[:4])
        if self.ok:
            return (f"simulated, seed {self.seed}: no deadlock, hazard or misuse ({self.stats.get('steps', 0):,} steps)"
                    + warned)
        parts = []
        cut = bool(self.deadlock) and all(d.get("wait") == "step limit" for d in self.deadlock)
        for name, items in (("hazard", self.hazards), ("misuse", self.misuse), ("deadlock", self.deadlock)):
            if items:
                if name == "deadlock" and cut:   # runnable threads cut short: no deadlock
                    parts.append("stopped at the step limit:\n  " + "\n  ".join(d["text"] for d in items[:12]))
                    continue
                total = max(len(items), int(self.stats.get(f"{name if name == 'misuse' else name + 's'}_total") or 0))
                shown = "\n  ".join(d["text"] for d in items[:12])
                shown += f"\n  ... and {total - 12} more" if total > 12 else ""
                kept = f", the first {len(items)} kept" if total > len(items) else ""
                parts.append(f"{name} ({total}{kept}):\n  {shown}")
        return f"simulated, seed {self.seed} (python -m pelib.stage ... --sim-seed {self.seed} reproduces it):\n" + \
            "\n".join(parts) + warned


def default_seed(seed: int | str = 0) -> int | str:
    """The seed of a run, checked (its one channel is this argument: pelib.sim.host.run's sim_seed, --sim-seed): an
    integer (a random schedule) or one of SCHEDULES ('lazy': asynchronous operations complete as late as
    allowed; 'eager': as soon as issued)."""
    s = seed
    if isinstance(s, str) and not s.lstrip("-").isdigit():
        if s not in SCHEDULES:
            raise SimError(f"simulator seed {s!r}: an integer or one of {sorted(SCHEDULES)}")
        return s
    if isinstance(s, bool) or not isinstance(s, (int, str)) and not hasattr(s, "__index__"):
        raise SimError(f"simulator seed {s!r}: an integer or one of {sorted(SCHEDULES)}")
    v = int(s)
    if not 0 <= v < 2**63:   # the engine's 64-bit seed and torch's generator (the inputs' seed) both take it
        raise SimError(f"simulator seed {v}: an integer from 0 to 2**63 - 1, or one of {sorted(SCHEDULES)}")
    return v


def dot_f8_tiles(a, b, d, fmt="e4m3", first_scale_d: bool = True, model=None, k_instr: int = 32) -> np.ndarray:
    """The simulator's own C++ MMA arithmetic (model/blockfma.h dot_f8 through the engine library) on
    probe-style tiles: A uint8 [T, M, K], B uint8 [T, N, K], D FP32 bits [T, M, N] -> FP32 bits [T, M, N],
    K / k_instr instructions in K order. model: a pelib.numerics.blockfma model (default: the current
    accumulation's wgmma_f8)."""
    a, b = np.ascontiguousarray(a, np.uint8), np.ascontiguousarray(b, np.uint8)
    d = np.ascontiguousarray(d, np.uint32)
    if a.ndim != 3 or b.ndim != 3 or d.shape != (a.shape[0], a.shape[1], b.shape[1]) or a.shape[2] != b.shape[2] \
            or b.shape[0] != a.shape[0]:
        raise SimError(f"dot_f8_tiles: A {a.shape}, B {b.shape}, D {d.shape}: A [T, M, K], B [T, N, K], D [T, M, N]")
    if fmt not in ("e4m3", "e5m2"):
        raise SimError(f"dot_f8_tiles: fmt {fmt!r}: e4m3 or e5m2")
    m = current_accumulation()[1]["wgmma_f8"] if model is None else model
    try:
        p6 = (ctypes.c_int32 * 6)(*blockfma.cxx_params(m))
    except blockfma.ModelError as e:
        raise SimError(f"dot_f8_tiles: {e}") from None
    out = np.zeros(d.shape, np.uint32)
    err = ctypes.create_string_buffer(512)
    vp = ctypes.c_void_p
    rc = _engine().pe_sim_dot_f8_tiles(vp(a.ctypes.data), vp(b.ctypes.data), vp(d.ctypes.data), vp(out.ctypes.data),
                                        ctypes.c_int64(a.shape[0]), a.shape[1], b.shape[1], a.shape[2], k_instr,
                                        int(fmt == "e5m2"), int(first_scale_d), p6, err, ctypes.c_uint64(len(err)))
    if rc:
        raise SimError(f"dot_f8_tiles: {err.value.decode()}")
    return out


def engine_accumulation(defaults: bool = False) -> dict:
    """The C++ model's accumulation parameters ({kind: [frac_bits, out_bits, min_exp, block,
    round_nearest, group]}): those of the last launch (model/blockfma.h accumulation()), or the header's constants."""
    p18 = (ctypes.c_int32 * 18)()
    _engine().pe_sim_get_accumulation(p18, int(defaults))
    return {k: list(p18[6 * i:6 * i + 6]) for i, k in enumerate(blockfma.MMA_KINDS)}


def _ptr(x) -> int:
    return int(x.data_ptr()) if hasattr(x, "data_ptr") else int(x.ctypes.data)


class SimPlan:
    """A prepared simulated launch: run() executes it (synchronously), wait() is a no-op, report holds the result."""

    def __init__(self, stage_lib: HostBuild, args: tuple, grid, block, cluster, smem: int, kernel: str, arch: str,
                 defines: dict, seed: int | str, timing: bool = False, slots: int | None = None,
                 max_events: int = MAX_EVENTS, names: tuple | None = None, arithmetic: bool = True):
        self.lib = stage_lib
        self.arithmetic = bool(arithmetic)   # False: the MMAs leave D as it was (a run for its events alone)
        self.kernel, self.arch, self.defines = kernel, arch, dict(defines or {})
        self.grid, self.block, self.cluster = tuple(grid), tuple(block), tuple(cluster)
        self.smem = int(smem)
        self.seed = default_seed(seed) if isinstance(seed, str) else int(seed)
        self.timing = timing
        self.max_events = int(max_events)
        self.report: SimReport | None = None
        self.config = None
        self.accumulation, self._models = current_accumulation()
        cx = int(np.prod(self.cluster))
        ctas = int(np.prod(self.grid))
        self.slots = slots or min(ctas, max(cx, 2 * cx if cx > 1 else 4))
        self._keep = []
        names = tuple(names or ())
        self._argv, self._ranges = self._bind(args, [names[i] if i < len(names) else f"argument {i}"
                                                     for i in range(len(args))])

    def _range(self, t, name: str) -> _Range:
        """The extent of tensor `t` (its own view, not the storage under it) as the engine checks accesses."""
        r = _Range()
        r.base = int(t.data_ptr())
        r.bytes = t.numel() * t.element_size()
        b = name.encode()
        self._keep.append(b)
        r.name = b
        r.elem = t.element_size()
        shape = tuple(t.shape)[-4:] if t.dim() else (1,)
        if t.dim() > 4:   # fold the leading dimensions into the first
            shape = (int(np.prod(t.shape[:-3])),) + tuple(t.shape[-3:])
        r.ndim = len(shape)
        r.shape[:len(shape)] = [int(x) for x in shape]
        return r

    def _bind(self, args, names):
        vals, ranges = [], []
        for a, name in zip(args, names):
            if isinstance(a, tma.TensorMap):
                raw = sim_tensormap.encode(a.spec)
                buf = np.zeros(128 + 64, np.uint8)
                off = (-buf.ctypes.data) % 64
                view = buf[off:off + 128]
                view[:] = np.frombuffer(raw, np.uint8)
                self._keep.append(buf)
                vals.append(view.ctypes.data)
                if a.owner is not None and hasattr(a.owner, "data_ptr"):
                    ranges.append(self._range(a.owner, f"{name}'s tensor"))
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
                ranges.append(self._range(a, name))
            elif isinstance(a, np.generic):
                b = np.array([a], a.dtype)
                self._keep.append(b)
                vals.append(b.ctypes.data)
            else:
                raise SimError(f"device='sim': no binding for a kernel argument of type {type(a).__name__}")
        argv = (ctypes.c_void_p * max(1, len(vals)))(*vals)
        # one range per tensor, named by its pointer parameter where it has one (a tensor map's owner is often
        # the same tensor, e.g. tmap_c and c)
        own = {}
        for r in ranges:
            k = (r.base, r.bytes)
            if k not in own or own[k].name.endswith(b"'s tensor"):
                own[k] = r
        ranges = list(own.values())
        arr = (_Range * max(1, len(ranges)))(*ranges)
        self._keep.append(arr)
        return argv, (arr, len(ranges))

    def run(self, check: bool = True) -> SimReport:
        eng = _engine()
        copies = sim_build.load_copies(self.lib.path, self.slots)
        entries = (ctypes.c_void_p * self.slots)(*[ctypes.cast(c.pe_sim_kernel_entry, ctypes.c_void_p).value for c in copies])
        windows = (ctypes.c_void_p * self.slots)(*[ctypes.cast(c.pe_sim_window, ctypes.c_void_p).value for c in copies])
        arr, nr = self._ranges
        L = _Launch()
        L.grid[:] = [int(x) for x in self.grid]
        L.block[:] = [int(x) for x in self.block]
        L.cluster[:] = [int(x) for x in self.cluster]
        L.smem = self.smem
        L.smem_limit = SMEM_LIMIT
        L.seed = self.seed if isinstance(self.seed, int) else 0
        L.schedule = SCHEDULES.get(self.seed, 0) if isinstance(self.seed, str) else 0
        L.nslots = self.slots
        L.entries = ctypes.cast(entries, ctypes.POINTER(ctypes.c_void_p))
        L.windows = ctypes.cast(windows, ctypes.POINTER(ctypes.c_void_p))
        L.args = ctypes.cast(self._argv, ctypes.POINTER(ctypes.c_void_p))
        L.nranges = nr
        L.ranges = ctypes.cast(arr, ctypes.POINTER(_Range))
        L.max_events = self.max_events
        knobs = {k: v.read() for k, v in SETTINGS.items()}
        L.stack_bytes = (knobs["stack_bytes"] + 4095) // 4096 * 4096   # whole pages below the guard page
        L.max_steps = knobs["max_steps"]
        L.max_spin = knobs["max_spin"]
        L.watchdog_us = max(1, int(knobs["watchdog_s"] * 1e6))
        p18 = (ctypes.c_int32 * 18)(*[x for k in blockfma.MMA_KINDS for x in blockfma.cxx_params(self._models[k])])
        err = ctypes.create_string_buffer(512)
        with _LOCK:   # one engine per process
            if eng.pe_sim_set_accumulation(p18, err, ctypes.c_uint64(len(err))):
                raise SimError(f"the engine refused accumulation {self.accumulation!r}: {err.value.decode()}")
            eng.pe_sim_set_arithmetic(int(self.arithmetic))
            try:
                eng.pe_sim_run(ctypes.byref(L))
            finally:   # the models' own entries (pe_sim_gmma_f8, the tiles) compute unless a launch says otherwise
                eng.pe_sim_set_arithmetic(1)
            doc = json.loads(eng.pe_sim_report_json().decode())
            n = ctypes.c_int64(0)
            p = eng.pe_sim_events(ctypes.byref(n))
            dt = event_schema().dtype
            ev = (np.frombuffer((ctypes.c_char * (n.value * dt.itemsize)).from_address(p), dt).copy()
                  if n.value else np.zeros(0, dt))
        stats = {k: doc.get(k) for k in ("steps", "switches", "ops", "p_async", "p_yield", "events_truncated",
                                         "hazards_total", "misuse_total", "warnings_total", "records_cap")}
        stats.update(slots=self.slots, grid=list(self.grid), cluster=list(self.cluster), accumulation=self.accumulation,
                     arithmetic=self.arithmetic)
        for k in ("deadlock", "hazards", "misuse", "warnings"):
            resolve_lines(doc.get(k) or [], self.lib.path)
        self.report = SimReport(ok=bool(doc["ok"]), seed=self.seed, deadlock=doc["deadlock"], hazards=doc["hazards"],
                                misuse=doc["misuse"], warnings=doc.get("warnings", []), stats=stats, events_array=ev,
                                files=doc["files"], names=doc.get("names", []), roles=doc.get("roles", []),
                                gmem=doc.get("gmem", []))
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


def prepare(build, args, *, grid, block, cluster, smem, kernel, arch, defines=None, seed: int | str = 0,
            timing: bool = False, slots: int | None = None, max_events: int = MAX_EVENTS,
            names: tuple | None = None, arithmetic: bool = True) -> SimPlan:
    """A simulated launch of `build`'s source (a pelib.build.Build: its source file and kernel name) with the
    same arguments a GPU launch binds (tensor maps as pelib.tma.TensorMap, tensors on the CPU, scalars).
    `names` are the kernel's parameter names (a report about an out-of-bounds access names its tensor). The
    seed picks the interleaving: an integer, or 'lazy' / 'eager' (SCHEDULES); it has no other channel.
    arithmetic=False: the MMAs read and check their operands but compute nothing (the same protocol and events,
    outputs that are no GEMM: the timing model's runs, pelib.sim.host.events)."""
    # the launch shapes every GPU refuses (block 0 or over 1,024 threads, grid 0, shared memory over the
    # limit) are refused here too, before anything is built, with pelib.launch's messages
    g, b, c, smem = launch.check_shape(grid, block, cluster, smem, name=kernel, smem_limit=SMEM_LIMIT,
                                       where="the simulated SM (common/limits.cuh PE_SMEM_LIMIT)")
    # a launch the engine cannot count or the host cannot hold is refused from its shape, before anything is
    # built (a grid of 2**31 - 1 CTAs would otherwise end the process in std::bad_alloc)
    check_launch(g, b, c, max_events=max_events, label=f"{kernel} on the simulator")
    settings()   # every PELIB_SIM_* knob checked now, not at run()
    src = getattr(build, "source", build)
    lib = stage_build(Path(src), kernel, defines)
    return SimPlan(lib, tuple(args), g, b, c, smem, kernel, arch, defines or {}, default_seed(seed), timing, slots,
                   max_events, names, arithmetic)


_LINES: dict = {}


def resolve_lines(records: list, stage_lib: Path | None = None) -> None:
    """Records about a plain pointer access carry the library and the instruction's offset ("lib", "pc"): their
    source line from the library's line table (addr2line, binutils), written into "file" / "line" and the
    text's @@pc@@; without addr2line the text keeps the last engine call before it. A data race's other access
    ("lib2", "pc2") fills @@pc2@@ the same way. A loaded copy of the stage library (removed once loaded:
    pelib.sim.build.load_copies) is read as `stage_lib`, the file it copies."""
    for lib_key, pc_key, mark in (("lib", "pc", "@@pc@@"), ("lib2", "pc2", "@@pc2@@")):
        for r in records:
            if not (isinstance(r, dict) and r.get(pc_key) is not None and r.get(lib_key)):
                continue
            lib = r[lib_key]
            if stage_lib is not None and sim_build.SCRATCH_PREFIX in Path(lib).parent.name:
                lib = str(stage_lib)
            key = (lib, int(r[pc_key]))
            if key not in _LINES:
                _LINES[key] = _addr2line(*key)
            where = _LINES[key]
            if where:
                if pc_key == "pc":
                    r["file"], r["line"] = where
                r["text"] = r["text"].replace(mark, f"{where[0]}:{where[1]}")
            else:
                r["text"] = r["text"].replace(mark, f"an instruction at {Path(r[lib_key]).name}+{int(r[pc_key]):#x}")
        for r in records:
            if isinstance(r, dict) and mark in r.get("text", ""):
                r["text"] = r["text"].replace(mark, "an instruction")


def _addr2line(lib: str, pc: int):
    tool = shutil.which("addr2line")
    if not tool:
        return None
    try:
        # return addresses point after the call into the engine: the access is the instruction before
        out = subprocess.run([tool, "-e", lib, "-i", f"{max(pc - 1, 0):#x}"], capture_output=True, text=True,
                             timeout=30).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out:   # the innermost frame with a line (inlined building blocks first, then the stage)
        f, _, n = line.strip().rpartition(":")
        n = n.split(" ")[0]
        if f and f != "??" and n.isdigit() and int(n) > 0:
            k = f.find("src/kernels/")
            return (f[k + len("src/kernels/"):] if k >= 0 else f), int(n)
    return None
