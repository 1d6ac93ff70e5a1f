"""Blackwell stages where no B200 is present: the stage's own source run on pelib.sim (the CPU model).

    run = sim.simulate("fp8/09_persistent_megakernel", seed=1)    # a SimRun (cached by content)
    sim.run_table([run, ...])          # verification against torch + the simulator's report (simulated)
    sim.protocol_figure(run)           # per-role lanes and occupancy lanes, in simulated order, not time
    sim.mistake("fp8/09_persistent_megakernel")   # one planted mistake of the catalog, what the simulator said

A simulated run verifies protocol, indexing and data path; it has no time. Its event log carries an
order stamp (`seq`), never a clock, and every picture here says so. On a B200 the chapters' cells take
the measured path instead (pelib.views.fp8.results_table and friends); these functions still work there.

Runs are cached by content (pelib.cache): the key covers every kernel file (stage, common/, sim/),
pelib's host code, the stage, defines, problem and seed, so an edited kernel or simulator runs again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import gzip
import hashlib
import importlib
import inspect
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from .. import cache as _cache, device, evidence, timing
from ..facts import Table
from ..paths import KERNELS, RESULTS
from ..stage import SimUnavailable, Stage, StageError, all_stages
from .html import to_html
from .widgets import _display, book_build

SEEDS = (0, 1, 2)              # every simulated stage is shown at three scheduler seeds
PROBLEMS = ("sim", "small")    # the first the stage's kind knows: the simulator's test size, else 'small'
PICTURE = timing.SIM_ORDER                # "simulated order, not time": one wording, pelib.timing's
EVENT_KINDS = tuple(timing.SIM_KINDS)     # the event-log schema's kinds (pelib.timing checks traces with them)
OUTCOMES = ("deadlock", "hazard", "misuse", "wrong output", "error")


class SimViewError(ValueError):
    """A simulated run or event log cannot be shown as asked; the message names what is missing."""


def _pelib_sim():
    """pelib.sim, the CPU back end, or SimUnavailable saying what to do (pelib.stage's own check)."""
    try:  # the back end may be absent from a tree (it lands stage family by stage family)
        return importlib.import_module("pelib.sim")
    except ModuleNotFoundError as e:
        if e.name != "pelib.sim":
            raise
        raise SimUnavailable("pelib.sim, the CPU model of TMA, mbarrier, TMEM and the MMAs, is not in this "
                             "tree: the stage cannot be simulated here") from None


def available() -> tuple[bool, str]:
    """(True, '') where pelib.sim can run a stage here, else (False, why): no back end or no host compiler."""
    try:
        sim = _pelib_sim()
    except SimUnavailable as e:
        return False, str(e)
    check = getattr(sim, "compiler", None) or getattr(sim, "find_compiler", None)
    if callable(check):
        try:
            check()
        except Exception as e:  # the back end's own message names what to install
            return False, str(e)
    return True, ""


# ---- one simulated run -------------------------------------------------------------------------------

@dataclass
class SimRun:
    """One stage run on pelib.sim: the verification against the torch reference and the simulator's report.

    outcome: 'ok' (ran to the end, verified), 'wrong output' (ran to the end, did not verify), or what
    stopped it: 'deadlock', 'hazard', 'misuse', 'error'. `stopped` is the simulator's message (the
    blocked wait site with its tag, barrier, parity and source line, or the hazard), `events` the log."""

    stage: str
    label: str
    problem: str
    seed: int
    outcome: str
    verified: bool | None = None
    max_abs: float | None = None
    n_bad: int | None = None
    n: int | None = None
    verify_text: str = ""
    stopped: str = ""
    deadlock: list = field(default_factory=list)
    hazards: list = field(default_factory=list)
    misuse: list = field(default_factory=list)
    seeds: list = field(default_factory=list)
    launch: str = ""
    events: list = field(default_factory=list, repr=False)
    tags: list = field(default_factory=list)   # a deadlock's blocked wait tags, as the report names them
    mutation: str = ""
    wall_s: float = 0.0        # the host's time to run the model (measured on this CPU), never the kernel's
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def summary(self) -> str:
        """One line: what ran and what the simulator said."""
        head = f"{self.stage}{' ' + self.mutation if self.mutation else ''} on {self.problem}, seed {self.seed}"
        if self.ok:
            return f"{head}: verified against torch, no deadlock, no hazard, no misuse ({evidence.simulated()})"
        return f"{head}: {self.outcome}: {self.stopped or self.verify_text} ({evidence.simulated()})"

    def to_json(self) -> dict:
        return asdict(self)


def _as_stage(stage, defines: dict | None = None) -> Stage:
    if isinstance(stage, Stage):
        return stage.with_defines(**defines) if defines else stage
    return Stage(stage, defines)


def problem_for(stage: Stage, problem=None):
    """The simulator's problem for a stage: `problem` if given (a problem or a name the kind knows), else the
    kind's 'sim' problem where it has one, else 'small'."""
    if problem is not None and not isinstance(problem, str):
        return problem
    for name in ((problem,) if problem else ()) + PROBLEMS:
        try:
            return stage.problem(name)
        except (KeyError, ValueError, StageError):
            continue
    raise SimViewError(f"{stage.key}: its kind has none of the problems {PROBLEMS}")


def fitted(s: Stage, prob):
    """The simulator's problem with the K a stage is built for, where its build fixes K (F28 unrolls its K
    loop for K_ITERS k-blocks, exported as k_iters, and its ring schedule needs that K): same M and N."""
    ex = s.exports
    if "k_iters" in ex and prob.k != ex["k_iters"] * ex.block_k and dataclasses.is_dataclass(prob):
        k = ex["k_iters"] * ex.block_k
        return dataclasses.replace(prob, name=f"{prob.name} with K={k}", k=k)
    return prob


def _entries(report, name: str) -> list:
    """A report's deadlock / hazards / misuse entries as text (pelib.sim gives dicts with their "text")."""
    got = getattr(report, name, None) if not isinstance(report, dict) else report.get(name)
    return [str(x.get("text", x)) if isinstance(x, dict) else str(x) for x in (got or [])]


def _report_tags(report) -> list:
    """The wait tags of a deadlock's blocked mbarrier waits, where the report names them (SimReport.tags)."""
    got = getattr(report, "tags", None) if not isinstance(report, dict) else report.get("tags")
    return [int(t) for t in (got or ())]


def _seeds(report, seed: int) -> list:
    """The scheduler seed(s) the report says it ran with (SimReport.seed), else the one asked for."""
    get = (lambda k: report.get(k)) if isinstance(report, dict) else (lambda k: getattr(report, k, None))
    if get("seeds"):
        return list(get("seeds"))
    return [get("seed")] if get("seed") is not None else [seed]


def _events(report) -> list[dict]:
    ev = getattr(report, "events", None) if not isinstance(report, dict) else report.get("events")
    if ev is None:
        return []
    names = getattr(getattr(ev, "dtype", None), "names", None)
    if names:   # a numpy structured array with the contract's field names
        return [{k: (r[k].item() if hasattr(r[k], "item") else r[k]) for k in names} for r in ev]
    return [dict(e) for e in ev]


@contextlib.contextmanager
def _scheduler_seed(seed: int):
    """PELIB_SIM_SEED=seed for one run: pelib.sim takes its interleaving from it (Stage.run's seed seeds the
    inputs), so seed k is one interleaving and one set of inputs, reproducible by either."""
    old = os.environ.get("PELIB_SIM_SEED")
    os.environ["PELIB_SIM_SEED"] = str(int(seed))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PELIB_SIM_SEED", None)
        else:
            os.environ["PELIB_SIM_SEED"] = old


def _kind_of_error(e: BaseException) -> str:
    for cls in type(e).__mro__:
        n = cls.__name__.lower()
        for word in ("deadlock", "hazard", "misuse"):
            if word in n:
                return word
    return "error"


def _run_key(s: Stage, prob, seed: int, mutation: str) -> str:
    """The content key of a simulated run: every kernel file, pelib's host code (of the views only this
    module), the arguments."""
    pelib = Path(__file__).resolve().parents[1]
    files = sorted(p for p in KERNELS.rglob("*") if p.is_file() and p.suffix in (".cu", ".cuh", ".h", ".hpp", ".cpp", ".c"))
    files += sorted(p for p in pelib.rglob("*.py") if "views" not in p.relative_to(pelib).parts)
    files.append(Path(__file__))   # this module annotates the events it stores
    named = [(str(p), p.read_bytes()) for p in files]
    return _cache.key(files=named, options={"stage": s.key, "defines": s.defines, "problem": prob.name,
                                            "seed": seed, "mutation": mutation}, tool="pelib.sim-run-1")


def _real_backend() -> bool:
    """True where pelib.sim is this tree's file (its content is in every run's key); a stand-in (tests)
    is never cached, so its runs cannot be shown as the simulator's."""
    try:
        f = getattr(_pelib_sim(), "__file__", None)
    except SimUnavailable:
        return False
    pelib = Path(__file__).resolve().parents[1]
    return bool(f) and Path(f).resolve().is_relative_to(pelib)


def _load(key: str) -> SimRun | None:
    try:
        e = _cache.Cache().get("simrun", key, require=("run.json.gz",))
    except _cache.CacheUnavailable:
        return None
    data = e.read("run.json.gz") if e else None
    if not data:
        return None
    try:
        return SimRun(**{**json.loads(gzip.decompress(data)), "cached": True})
    except (TypeError, ValueError, OSError):
        return None


def _store(key: str, run: SimRun) -> None:
    try:
        _cache.Cache().put("simrun", key, {"run.json.gz": gzip.compress(json.dumps(run.to_json(), default=str).encode())},
                           meta={"stage": run.stage, "seed": run.seed, "outcome": run.outcome})
    except _cache.CacheUnavailable:
        pass


def simulate(stage, defines: dict | None = None, *, seed: int = 0, problem=None, use_cache: bool = True,
             runner=None, mutation: str = "") -> SimRun:
    """Run a stage on pelib.sim at the simulator's problem (Stage.run(device='sim')): the output poisoned,
    launched through the stage's own host path, verified against the torch reference. A deadlock, hazard
    or misuse the simulator raises is the run's outcome, with its message and the events up to the stop.

    runner(stage, prob, seed) -> result dict, if given, replaces Stage.run (the catalog's mutated runs use
    it, and the tests' fake back ends); mutation names what it planted (part of the cache key)."""
    s = _as_stage(stage, defines)
    prob = fitted(s, problem_for(s, problem))
    use_cache = use_cache and runner is None and _real_backend()
    key = _run_key(s, prob, seed, mutation) if use_cache else ""
    if use_cache:
        hit = _load(key)
        if hit is not None:
            return hit
    run = SimRun(stage=s.key, label=s.label, problem=prob.name, seed=seed, outcome="error", mutation=mutation)
    t0 = time.perf_counter()
    try:
        with _scheduler_seed(seed):   # for a Stage.run without sim_seed; pelib.sim reads PELIB_SIM_SEED too
            if runner:
                res = runner(s, prob, seed)
            elif "sim_seed" in inspect.signature(s.run).parameters:
                res = s.run(prob, "sim", seed=seed, sim_seed=seed, time=False)
            else:
                res = s.run(prob, "sim", seed=seed, time=False)
    except SimUnavailable:
        raise
    except Exception as e:   # what the simulator stopped on: a SimError, or the host path's own error
        try:
            back = _pelib_sim()
        except SimUnavailable:
            back = None
        sim_error = getattr(back, "SimError", None)
        found = sim_error is not None and isinstance(e, sim_error) or getattr(e, "report", None)
        # the back end's own failure (its host build of this stage, its toolchain): the run's outcome, said
        tool = back is not None and type(e).__module__ == getattr(back, "__name__", None)
        if not (found or tool):
            raise
        run.outcome = _kind_of_error(e) if found else "error"
        run.stopped = str(e).strip() if found else f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
        use_cache = use_cache and bool(found)     # a build failure is not a result: run again next time
        rep = getattr(e, "report", None)
        if rep is not None:
            run.deadlock, run.hazards, run.misuse = (_entries(rep, k) for k in ("deadlock", "hazards", "misuse"))
            run.tags = _report_tags(rep)
            run.seeds = _seeds(rep, seed)
            run.events = annotate(_events(rep), s)
        run.seeds = run.seeds or [seed]
    else:
        rep = res.get("report") if isinstance(res, dict) else None
        v = res.get("verify") if isinstance(res, dict) else None
        run.verified = res.get("ok")
        if v is not None:
            run.max_abs, run.n_bad, run.n = float(v.max_abs), int(v.n_bad), int(v.n)
            run.verify_text = str(v).splitlines()[0]
        if rep is not None:
            run.deadlock, run.hazards, run.misuse = (_entries(rep, k) for k in ("deadlock", "hazards", "misuse"))
            run.tags = _report_tags(rep)
            run.seeds = _seeds(rep, seed)
            run.events = annotate(_events(rep), s)
        cfg = res.get("config") if isinstance(res, dict) else None
        run.launch = cfg.describe() if hasattr(cfg, "describe") else ""
        bad = run.deadlock and "deadlock" or run.hazards and "hazard" or run.misuse and "misuse"
        run.outcome = bad or ("ok" if run.verified else "wrong output")
        if bad:
            run.stopped = "; ".join((run.deadlock or run.hazards or run.misuse)[:3])
        elif not run.verified:
            run.stopped = run.verify_text
    run.wall_s = time.perf_counter() - t0
    if use_cache:
        _store(key, run)
    return run


def simulate_seeds(stage, defines: dict | None = None, seeds=SEEDS, **kw) -> list[SimRun]:
    """simulate() at each seed (default 0, 1, 2)."""
    return [simulate(stage, defines, seed=k, **kw) for k in seeds]


# ---- tables ------------------------------------------------------------------------------------------

def _site(text: str, limit: int = 140) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= limit else t[:limit - 1] + "…"


def _report_text(r: SimRun) -> str:
    """'no deadlock, no hazard, no misuse', or what stopped the run and where."""
    if r.outcome in ("ok", "wrong output") and not (r.deadlock or r.hazards or r.misuse):
        return "no deadlock, no hazard, no misuse"
    return f"{r.outcome}: {_site(first_site(r), 160)}"


def run_table(runs: list[SimRun], caption: str | None = None) -> Table:
    """One row per run: the verification against torch and what the simulator reported (simulated)."""
    if not runs:
        raise SimViewError("no simulated runs to show")
    rows = []
    for r in runs:
        rows.append({"stage": r.label, "problem": r.problem, "seed": ", ".join(str(x) for x in (r.seeds or [r.seed])),
                     "verified vs torch": "—" if r.verified is None else ("PASS" if r.verified else "FAIL"),
                     "max |err|": "—" if r.max_abs is None else f"{r.max_abs:.3g}",
                     "bad elements": "—" if r.n_bad is None else f"{r.n_bad:,} of {r.n:,}",
                     "the simulator's report": _report_text(r), "events": f"{len(r.events):,}"})
    stages = list(dict.fromkeys(r.stage for r in runs))
    seeds = sorted({k for r in runs for k in (r.seeds or [r.seed])})
    cap = caption or (f"{', '.join(stages)} on the simulator's problem ({runs[0].problem}), scheduler "
                      f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: output poisoned, verified against the "
                      f"torch reference — {evidence.simulated('pelib.sim, the stage’s own source on the CPU model')}")
    note = "Verified, no deadlock, no hazard, no misuse at every seed." if all(r.ok for r in runs) else \
        "Not every seed ran clean: see the rows."
    cached = sum(r.cached for r in runs)
    cache = "the run cache (an earlier run of the same source at the same seed)"
    where = (f" Every row from {cache}." if cached == len(runs) else
             f" {cached} of {len(runs)} rows from {cache}, the others ran now." if cached else " Every row ran now.")
    return Table(rows, cap, notes=[note + where + " Simulated runs have no time: nothing here is a duration."])


# ---- what a chapter shows ----------------------------------------------------------------------------

class Shown(list):
    """Several outputs of one cell (tables, figures, text), shown one after the other; as HTML, all of them."""

    def _ipython_display_(self):
        _display(list(self))

    def _repr_html_(self) -> str:
        return to_html(list(self))

    def __repr__(self) -> str:
        return "\n\n".join(repr(x) if not isinstance(x, str) else x for x in self)


def unavailable_note(why: str) -> str:
    return f"Not simulated here: {why}"


def stage_runs(stage, defines: dict | None = None, seeds=SEEDS) -> Shown:
    """The 'On a B200' cell where no B200 is present: the stage simulated at each seed, its table."""
    ok, why = available()
    if not ok:
        return Shown([unavailable_note(why)])
    return Shown([run_table(simulate_seeds(stage, defines, seeds))])


# ---- the protocol picture ----------------------------------------------------------------------------

_KIND_STYLE = {   # kind -> (marker, colour, legend text)
    "tma_load": ("v", "#2e86c1", "TMA load issued"),
    "tma_load_done": ("^", "#85c1e9", "TMA load landed"),
    "mma": ("s", "#c0392b", "MMA issued"),
    "commit": ("D", "#7d3c98", "tcgen05.commit"),
    "mma_done": ("d", "#d7bde2", "MMA complete"),
    "tmem_ld": ("o", "#27ae60", "tcgen05.ld (TMEM read)"),
    "tmem_cp": ("o", "#a9dfbf", "tcgen05.cp"),
    "arrive": ("|", "#34495e", "mbarrier arrive"),
    "expect_tx": ("|", "#5dade2", "arrive.expect_tx"),
    "tma_store": ("P", "#e67e22", "TMA store"),
    "bar_sync": ("_", "#7f8c8d", "bar.sync"),
    "cluster_sync": ("*", "#7f8c8d", "cluster sync"),
    "tmem_alloc": ("<", "#95a5a6", "TMEM alloc"),
    "tmem_dealloc": (">", "#95a5a6", "TMEM dealloc"),
    "exit": ("x", "#2c3e50", "exit"),
}
_TILE_COLORS = ("#2e86c1", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#d4ac0d", "#7f8c8d")
_FREE_SLOT = ("commit", "mma_done")
_PER_LANE = {"wait_begin", "wait_end", "tmem_ld", "bar_sync", "exit", "cluster_sync"}
_IDLE_KINDS = {"bar_sync", "exit", "cluster_sync", "tmem_alloc", "tmem_dealloc"}
_STARTS_SLOT = ("tma_load", "expect_tx")


def _as_events(x) -> list[dict]:
    if isinstance(x, SimRun):
        return x.events
    if hasattr(x, "events") and not isinstance(x, (list, tuple)):
        return _events(x)
    return [dict(e) for e in x]


def _role_name(e: dict) -> str:
    r = e.get("role")
    return str(r) if r not in (None, "") else f"warp {e.get('warp')}"


def check_events(events: list[dict]) -> None:
    """The contract's event fields are there (seq, cta, warp, kind) and every kind is one of EVENT_KINDS."""
    if not events:
        raise SimViewError("the run has no events: pelib.sim records them in SimReport.events")
    for need in timing.SIM_REQUIRED:
        if any(need not in e for e in events[:50]):
            raise SimViewError(f"events lack the field {need!r} (the simulator contract's event log: seq, cta, "
                               "cluster, rank, warp, lane, role, kind, ...)")
    bad = sorted({e["kind"] for e in events} - set(EVENT_KINDS))
    if bad:
        raise SimViewError(f"unknown event kinds {bad}; the contract's are {EVENT_KINDS}")


@dataclass
class Interval:
    lane: str
    start: int
    end: int
    what: str          # 'filled', 'landed', 'read', 'written', 'drained', 'wait'
    tile: int | None = None
    open: bool = False  # still held when the log ended
    note: str = ""


def occupancy(events: list[dict], cluster: int | None = 0, stopped: bool = False) -> list[Interval]:
    """The ring's slots and the TMEM accumulators as intervals of simulated order, from one cluster's events.

    Slot s is held from the first TMA load (or arrive.expect_tx) into it until the tcgen05.commit (or the
    MMA completion) that frees it; inside, 'landed' starts at the last load completion and 'read' at the
    first MMA. Accumulator a is 'written' from its tile's first MMA to the commit after its last, then
    'drained' from the first tcgen05.ld to its last event (the epilogue's arrive) before the next tile's
    first MMA on it. Tiles are numbered in the order their accumulator intervals start. With `stopped`,
    what is still held when the log ends is marked open (the run stopped there)."""
    ev = sorted((e for e in events if cluster is None or e.get("cluster", 0) == cluster), key=lambda e: e["seq"])
    end_seq = ev[-1]["seq"] if ev else 0
    out: list[Interval] = []
    for s in sorted({int(e["slot"]) for e in ev if e.get("slot") is not None}):
        cur = None
        for e in (x for x in ev if x.get("slot") is not None and int(x["slot"]) == s):
            k = e["kind"]
            if k.startswith("wait"):
                continue
            if k in _STARTS_SLOT and (cur is None or cur["freed"] is not None):
                if cur is not None:
                    out += _slot_parts(f"slot {s}", cur, cur["freed"], False)
                cur = {"start": e["seq"], "landed": None, "read": None, "freed": None}
            elif cur is None:
                continue
            elif k in ("tma_load_done", "complete_tx"):
                cur["landed"] = e["seq"]
            elif k == "mma" and cur["read"] is None:
                cur["read"] = e["seq"]
            elif _frees_slot(e) and cur["read"] is not None:
                cur["freed"] = e["seq"]      # the last release before the next fill ends the round
        if cur is not None:
            done = cur["freed"] is not None
            out += _slot_parts(f"slot {s}", cur, cur["freed"] if done else end_seq, stopped and not done)
    tiles: list[Interval] = []
    for a in sorted({int(e["acc"]) for e in ev if e.get("acc") is not None}):
        cur = None
        for e in (x for x in ev if x.get("acc") is not None and int(x["acc"]) == a):
            k = e["kind"]
            if k.startswith("wait"):
                continue
            if k == "mma" and (cur is None or cur["drain"] is not None):
                if cur is not None:
                    tiles += _acc_parts(f"acc {a}", cur, False)
                cur = {"start": e["seq"], "commit": None, "drain": None, "last": e["seq"]}
                continue
            if cur is None:
                continue
            if k in ("commit", "mma_done") and cur["drain"] is None:
                cur["commit"] = e["seq"]
            elif k == "tmem_ld" and cur["drain"] is None:
                cur["drain"] = e["seq"]
            cur["last"] = e["seq"]
        if cur is not None:
            if stopped:
                cur["last"] = end_seq
            tiles += _acc_parts(f"acc {a}", cur, stopped)
    starts = sorted({iv.tile for iv in tiles if iv.what == "written"})
    for iv in tiles:
        iv.tile = starts.index(iv.tile)
    return out + tiles


def _frees_slot(e: dict) -> bool:
    """A release of a ring slot: a tcgen05.commit or an MMA completion for it, or an arrive on its empty
    barrier (Hopper's consumers release a slot by arriving on it)."""
    if e["kind"] in _FREE_SLOT:
        return True
    return e["kind"] == "arrive" and "empty" in str(e.get("barrier") or "")


def _slot_parts(lane, cur, end, still) -> list[Interval]:
    out = [Interval(lane, cur["start"], cur["landed"] or cur["read"] or end, "filled",
                    open=still and cur["landed"] is None and cur["read"] is None)]
    if cur["landed"] is not None:
        out.append(Interval(lane, cur["landed"], cur["read"] or end, "landed", open=still and cur["read"] is None))
    if cur["read"] is not None:
        out.append(Interval(lane, cur["read"], end, "read", open=still))
    return out


def _acc_parts(lane, cur, still) -> list[Interval]:
    """An accumulator's tile: written (first MMA .. commit), drained (first tcgen05.ld .. its last event)."""
    w_end = cur["commit"] or cur["drain"] or cur["last"]
    out = [Interval(lane, cur["start"], w_end, "written", tile=cur["start"], open=still and cur["drain"] is None)]
    if cur["drain"] is not None:
        out.append(Interval(lane, cur["drain"], cur["last"], "drained", tile=cur["start"], open=still))
    return out


def wait_spans(events: list[dict]) -> tuple[list[Interval], list[Interval]]:
    """(finished, open) waits per (cta, warp): wait_begin .. wait_end of the warp's first lane that waits.
    An open wait (no wait_end before the log ends) is where that warp stood when the run stopped."""
    first_lane: dict = {}
    for e in events:
        if e["kind"] == "wait_begin":
            k = (e["cta"], e["warp"])
            first_lane[k] = min(first_lane.get(k, 99), int(e.get("lane", 0) or 0))
    pending: dict = {}
    done, still = [], []
    end_seq = max((e["seq"] for e in events), default=0)
    for e in sorted(events, key=lambda e: e["seq"]):
        k = (e["cta"], e["warp"])
        if e["kind"] not in ("wait_begin", "wait_end") or int(e.get("lane", 0) or 0) != first_lane.get(k):
            continue
        if e["kind"] == "wait_begin":
            pending[k] = e
        elif k in pending:
            b = pending.pop(k)
            done.append(Interval(f"{k[0]}:{k[1]}", b["seq"], e["seq"], "wait", note=_wait_note(b)))
    for k, b in pending.items():
        still.append(Interval(f"{k[0]}:{k[1]}", b["seq"], end_seq, "wait", open=True, note=_wait_note(b)))
    return done, still


def _wait_note(e: dict) -> str:
    parts = [str(e["barrier"]) if e.get("barrier") not in (None, "") else "mbarrier"]
    if e.get("parity") is not None:
        parts.append(f"parity {e['parity']}")
    if e.get("tag") not in (None, ""):
        parts.append(f"tag {e['tag']}")
    if e.get("line") not in (None, ""):
        parts.append(f"line {e['line']}")
    return ", ".join(parts)


def protocol_figure(run, *, title: str = "", cluster: int | None = 0, max_epi: int | None = None,
                    window: tuple[int, int] | None = None, stopped: str | None = None):
    """Per-role lanes (producer, MMA issuer, each epilogue warp; every CTA of the cluster) of waits (grey),
    issues and completions (markers), then the ring's slots and the TMEM accumulators as occupancy lanes,
    all in simulated order, not time. An accumulator's tile colour is the same on its MMAs and on the
    epilogue's TMEM loads, so the epilogue of tile i beside the K loop of tile i+1 shows as two colours at
    once. A run that stopped (a planted mistake) ends in a red line, its blocked waits hatched red.

    run: a SimRun, a SimReport, or a list of event dicts (the contract's fields)."""
    events = _as_events(run)
    check_events(events)
    if cluster is not None:
        events = [e for e in events if e.get("cluster", 0) == cluster]
        if not events:
            raise SimViewError(f"no events of cluster {cluster}")
    if window:
        lo, hi = window
        events = [e for e in events if lo <= e["seq"] <= hi]
    events = sorted(events, key=lambda e: e["seq"])
    # a warp-wide instruction is one event per lane: draw the warp's lowest lane for each such kind
    low: dict = {}
    for e in events:
        if e["kind"] in _PER_LANE and int(e["warp"]) >= 0:
            k = (e["cta"], e["warp"], e["kind"])
            low[k] = min(low.get(k, 1 << 30), int(e.get("lane") or 0))
    events = [e for e in events if e["kind"] not in _PER_LANE or int(e["warp"]) < 0
              or int(e.get("lane") or 0) == low[(e["cta"], e["warp"], e["kind"])]]
    # the axis is the order of this cluster's events (dense): other clusters' events interleave in seq
    events = [{**e, "seq": i} for i, e in enumerate(events)]
    did: dict = {}
    for e in events:
        did.setdefault((e["cta"], e["warp"]), set()).add(e["kind"])
    idle = sorted(k for k, v in did.items() if k[1] >= 0 and v <= _IDLE_KINDS)
    if stopped is None and isinstance(run, SimRun) and not run.ok and run.outcome != "wrong output":
        stopped = f"{run.outcome}: {_site(first_site(run), 140)}"
    occ = occupancy(events, None, stopped=bool(stopped))
    done, still = wait_spans(events)
    tile_of = _tile_lookup(occ)

    # lanes: per CTA, its warps in order (role names from the stage's exports where the simulator has them)
    warps: dict = {}
    for e in events:
        if int(e["warp"]) >= 0 and (e["cta"], e["warp"]) not in idle:   # warp -1: an asynchronous unit
            warps.setdefault((e["cta"], e["warp"]), _role_name(e))
    keys = sorted(warps)
    if max_epi is not None:   # keep at most max_epi warps named 'epilogue' per CTA
        kept, per = [], {}
        for k in keys:
            if "epi" in warps[k].lower():
                per[k[0]] = per.get(k[0], 0) + 1
                if per[k[0]] > max_epi:
                    continue
            kept.append(k)
        keys = kept
    occ_lanes = sorted({iv.lane for iv in occ}, key=lambda s: (s.split()[0] != "slot", int(s.split()[1])))
    lanes = [f"CTA {c}: {warps[(c, w)]}" for c, w in keys] + [f"ring {s}" if s.startswith("slot") else f"TMEM {s}"
                                                              for s in occ_lanes]
    y_of_warp = {k: i for i, k in enumerate(keys)}
    y_of_occ = {s: len(keys) + i for i, s in enumerate(occ_lanes)}
    n = len(lanes)
    lo, hi = events[0]["seq"], events[-1]["seq"]
    fig, ax = plt.subplots(figsize=(9.6, 1.2 + 0.27 * n))
    h = 0.62
    # waits
    for iv, col, hatch in [(iv, "#d5d8dc", None) for iv in done] + [(iv, "#f5b7b1", "///") for iv in still]:
        c, w = (int(x) for x in iv.lane.split(":"))
        if (c, w) not in y_of_warp:
            continue
        ax.broken_barh([(iv.start, max(iv.end - iv.start, 0.5))], (y_of_warp[(c, w)] - h / 2, h), facecolors=col,
                       edgecolors="#c0392b" if hatch else "none", hatch=hatch, lw=0.6, zorder=1)
    # issues and completions, by kind (acc-carrying ones in their tile's colour)
    seen_kinds = []
    for kind, (marker, colour, _) in _KIND_STYLE.items():
        xs, ys, cs = [], [], []
        for e in events:
            if e["kind"] != kind or (e["cta"], e["warp"]) not in y_of_warp:
                continue
            xs.append(e["seq"])
            ys.append(y_of_warp[(e["cta"], e["warp"])])
            t = tile_of(e)
            cs.append(_TILE_COLORS[t % len(_TILE_COLORS)] if t is not None and kind in ("mma", "tmem_ld", "commit")
                      else colour)
        if xs:
            ax.scatter(xs, ys, marker=marker, c=cs, s=14 if marker not in "|_" else 40, lw=0.8, zorder=3)
            seen_kinds.append(kind)
    # occupancy lanes
    shade = {"filled": 0.35, "landed": 0.6, "read": 0.95, "written": 0.95, "drained": 0.45}
    for iv in occ:
        y = y_of_occ[iv.lane]
        base = _TILE_COLORS[iv.tile % len(_TILE_COLORS)] if iv.tile is not None else "#2e86c1"
        ax.broken_barh([(iv.start, max(iv.end - iv.start, 0.5))], (y - h / 2, h), facecolors=base,
                       alpha=shade.get(iv.what, 0.6), edgecolors="#c0392b" if iv.open else "none",
                       hatch="///" if iv.open else None, lw=0.6, zorder=2)
        if iv.what in ("written",) and iv.tile is not None and iv.end - iv.start > (hi - lo) * 0.03:
            ax.text((iv.start + iv.end) / 2, y, f"tile {iv.tile}", ha="center", va="center", fontsize=7,
                    color="white", zorder=4)
    if occ_lanes:
        ax.axhline(len(keys) - 0.5, color="#7f8c8d", lw=0.6)
    ctas = sorted({c for c, _ in keys})
    for c in ctas[1:]:
        first = min(y_of_warp[k] for k in keys if k[0] == c)
        ax.axhline(first - 0.5, color="#bdc3c7", lw=0.5, ls=":")
    blocked = blocked_lines(still, warps) if stopped else []
    if stopped:
        ax.axvline(hi, color="#c0392b", lw=1.4, zorder=5)
        ax.text(hi, -0.9, "stopped here ", color="#c0392b", ha="right", va="center", fontsize=7.5)
    ax.set_yticks(range(n))
    ax.set_yticklabels(lanes, fontsize=8)
    ax.set_ylim(n - 0.4, -1.4)
    ax.set_xlim(lo - (hi - lo) * 0.01, hi + (hi - lo) * 0.01 + 1)
    ax.set_xlabel(f"order of this cluster's events in the simulated run: {PICTURE}", fontsize=8.5)
    ax.tick_params(axis="x", labelsize=7.5)
    head = title or "Pipeline protocol"
    lines = [f"{head} — {evidence.simulated('pelib.sim event log')}; {PICTURE}"]
    if stopped:
        lines.append(_site(stopped, 150))
        shown = blocked[:4] + ([f"... and {len(blocked) - 4} more"] if len(blocked) > 4 else [])
        lines += [f"blocked: {b}" for b in shown]
    ax.set_title("\n".join(lines), fontsize=9, loc="left", color="#922b21" if stopped else "black")
    handles = [Patch(facecolor="#d5d8dc", label="waiting (try_wait)")]
    if still:
        handles.append(Patch(facecolor="#f5b7b1", hatch="///", edgecolor="#c0392b", label="blocked when it stopped"))
    handles += [plt.Line2D([], [], ls="", marker=_KIND_STYLE[k][0], color=_KIND_STYLE[k][1], label=_KIND_STYLE[k][2])
                for k in seen_kinds if k not in ("exit",)]
    if occ:
        handles += [Patch(facecolor="#2e86c1", alpha=0.35, label="slot filling / landed (lighter)"),
                    Patch(facecolor="#2e86c1", alpha=0.95, label="slot read by MMA / acc written"),
                    Patch(facecolor="#2e86c1", alpha=0.45, label="acc drained by tcgen05.ld"),
                    Patch(facecolor="white", edgecolor="white", label="colour of MMA, ld, acc = its tile")]
    if idle:
        handles.append(Patch(facecolor="white", edgecolor="white", label="not drawn (only synchronised): " + ", ".join(
            f"CTA {c} warp {w}" for c, w in idle[:4]) + (" ..." if len(idle) > 4 else "")))
    ax.legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(0.0, -0.62 / (0.27 * n + 0.3)),
              ncol=3, frameon=False, handlelength=1.6, columnspacing=1.2)
    fig.tight_layout()
    return fig


def blocked_lines(still: list[Interval], roles: dict) -> list[str]:
    """'CTA 0 MMA issuer: acc_empty[0], parity 0, tag 5, line 205' per blocked warp, alike ones merged."""
    by: dict = {}
    for iv in still:
        c, w = (int(x) for x in iv.lane.split(":"))
        role = roles.get((c, w), f"warp {w}")
        what = role.split(": ", 1)[1] if role.startswith("warp ") and ": " in role else role
        key = (iv.note, what)
        by.setdefault(key, []).append(c)
    return [f"{who} (CTA {', '.join(str(c) for c in sorted(set(cs)))}{', ' + str(len(cs)) + ' warps' if len(cs) > len(set(cs)) else ''}): {note}"
            for (note, who), cs in by.items()]


def _tile_lookup(occ: list[Interval]):
    """e -> the tile of the accumulator interval that holds e's (acc, seq), or None."""
    by_acc: dict = {}
    for iv in occ:
        if iv.lane.startswith("acc") and iv.tile is not None:
            by_acc.setdefault(int(iv.lane.split()[1]), []).append(iv)

    def tile(e):
        a = e.get("acc")
        if a is None:
            return None
        for iv in by_acc.get(int(a), []):
            if iv.start <= e["seq"] <= iv.end:
                return iv.tile
        return None
    return tile


def overlap(run, cluster: int | None = 0) -> list[tuple[int, int]]:
    """(tile i, tile i+1) pairs whose accumulator intervals overlap in simulated order: tile i drained by
    the epilogue while tile i+1 is written by the MMAs (what a double-buffered accumulator is for)."""
    occ = [iv for iv in occupancy(_as_events(run), cluster) if iv.lane.startswith("acc") and iv.tile is not None]
    drained = {iv.tile: iv for iv in occ if iv.what == "drained"}
    written = {iv.tile: iv for iv in occ if iv.what == "written"}
    return [(t, t + 1) for t, d in sorted(drained.items())
            if t + 1 in written and written[t + 1].start < d.end and d.start < written[t + 1].end]


# ---- the chapters' cells -------------------------------------------------------------------------------

def picture(stage, defines: dict | None = None, *, seed: int = 0, title: str = "", **kw):
    """The protocol picture of one simulated run of a stage (protocol_figure); where there is none to draw
    (no simulator here, no event log) it prints why and returns None (a chapter's cell ends in ';')."""
    ok, why = available()
    if not ok:
        print(unavailable_note(why))
        return None
    s = _as_stage(stage, defines)
    run = simulate(s, seed=seed)
    if not run.events:
        print(f"{s.key}: the simulator's report has no event log to draw ({run.outcome}).")
        return None
    return protocol_figure(run, title=title or f"{s.label}, {run.problem}, seed {run.seed}", **kw)


def on_b200(stage_names, *, measured, stage_of, recorded=None, mistake: str | bool | None = None,
            seeds=SEEDS) -> Shown:
    """A chapter's 'On a B200' cell. On a B200 the stages run live, verified then timed: `measured()` (the
    family's measured table, as before). Elsewhere each stage runs on the simulator at `seeds` (its
    verification against torch and the simulator's report), then `recorded()` (the lab's numbers, if
    given), then, with `mistake`, one planted mistake of the catalog and what the simulator said.

    stage_of(name) -> Stage. mistake: a catalog id, or True for the stage's first catalog entry."""
    if device.can_run("sm_100a"):  # pragma: no cover - B200
        return Shown([measured()])
    names = [stage_names] if isinstance(stage_names, str) else list(stage_names)
    ok, why = available()
    out = Shown()
    if ok:
        out.append(run_table([r for n in names for r in simulate_seeds(stage_of(n), seeds=seeds)]))
    else:
        out.append(unavailable_note(why))
    if recorded is not None:
        out.append(recorded())
    if mistake and ok:
        out += mistake_panel(stage_of(names[-1]), None if mistake is True else mistake)
    return out


# ---- planted mistakes (pelib.sim_catalog) ----------------------------------------------------------------

_CATALOG_KIND = {"deadlock": "deadlock", "hazard": "hazard", "misuse": "misuse", "wrong output": "wrong",
                 "ok": "correct", "error": "error"}


def _catalog():
    """pelib.sim_catalog (the planted-bug catalog), or SimUnavailable where this tree has none."""
    try:  # the catalog lands beside the simulator; a tree without it shows a note instead
        return importlib.import_module("pelib.sim_catalog")
    except ModuleNotFoundError as e:
        if e.name != "pelib.sim_catalog":
            raise
        raise SimUnavailable("pelib.sim_catalog, the catalog of planted mistakes, is not in this tree") from None


def blocked_tags(run: SimRun) -> tuple[int, ...]:
    """The wait tags a stopped run was blocked at: the report's own (SimReport.tags), else its open waits in
    the event log and 'tag N' in its report's text."""
    if run.tags:
        return tuple(sorted(run.tags))
    tags = {int(iv.note.split("tag ")[1].split(",")[0]) for iv in wait_spans(run.events)[1] if "tag " in iv.note} \
        if run.events else set()
    for text in [run.stopped] + run.deadlock:
        tags |= {int(t) for t in re.findall(r"\btag[ =:]+(\d+)", text)}
    return tuple(sorted(tags))


def outcome(run: SimRun):
    """A SimRun as the catalog's Outcome (kind, tags, detail, n_bad)."""
    cat = _catalog()
    detail = run.stopped or "; ".join(run.deadlock + run.hazards + run.misuse) or run.verify_text
    return cat.Outcome(_CATALOG_KIND.get(run.outcome, run.outcome), blocked_tags(run) if run.outcome == "deadlock"
                       else (), detail, run.n_bad)


def simulate_mutation(mut, *, seed: int = 0, use_cache: bool = True) -> SimRun:
    """The catalog's mutation `mut` (an id or a Mutation) applied to its stage and run on the simulator."""
    cat = _catalog()
    m = cat.mutation(mut) if isinstance(mut, str) else mut
    planted = hashlib.sha256(json.dumps(m.sources(), sort_keys=True).encode()).hexdigest()[:16]
    with cat.patched(cat.stage_of(m), m) as s:
        return simulate(s, seed=seed, problem=m.problem if m.problem else None, use_cache=use_cache,
                        mutation=f"{m.id}@{planted}")


def patch_text(m, limit: int = 3) -> str:
    """The lines a mutation changes, as '- old' / '+ new' (at most `limit` of each per patch)."""
    out = []
    for p in m.patches:
        a, b = p.find.splitlines(), p.replace.splitlines()
        sm = difflib.SequenceMatcher(a=a, b=b)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                continue
            out += [f"- {x.strip()}" for x in a[i1:i2][:limit]] + [f"+ {x.strip()}" for x in b[j1:j2][:limit]]
        if p.file:
            out.append(f"(in {p.file})")
    return " ".join(out)


def _expected(m) -> str:
    if m.expect == "deadlock":
        return f"deadlock at tag {' or '.join(str(t) for t in m.tags)}"
    if m.expect in ("hazard", "misuse"):
        return f"{m.expect} naming '{m.site}'"
    return "wrong output"


_ABS_PATH = re.compile(r"(?:/[^\s:/]+)+/([^\s:/]+\.(?:cu|cuh|h|cpp))")


def clean(text: str) -> str:
    """A report's text with file paths cut to what a reader knows: fp8/01_cta2.cu:244, not a temporary copy."""
    def short(m):
        p = Path(m.group(0))
        try:
            return str(p.relative_to(KERNELS))
        except ValueError:
            return p.name
    return _ABS_PATH.sub(short, str(text))


def first_site(run: SimRun) -> str:
    """The report's most telling entry: a blocked mbarrier wait (its tag) before other waits, else the first."""
    items = run.deadlock or run.hazards or run.misuse
    if not items:
        return clean(run.stopped)
    tagged = [x for x in items if re.search(r"\btag\b", x)]
    return clean((tagged or items)[0]) + (f" (and {len(items) - 1} more)" if len(items) > 1 else "")


def _said(run: SimRun, short: bool = False) -> str:
    """What the simulator said about a run, for a table: its outcome and the telling entry (short: the
    outcome, the blocked tags and how many waits were blocked, or the entry cut to one line)."""
    if run.outcome == "deadlock":
        tags = blocked_tags(run)
        head = f"deadlock, blocked at tag {', '.join(map(str, tags))}" if tags else "deadlock"
        if short:
            return f"{head} ({len(run.deadlock)} blocked waits)" if run.deadlock else head
        return f"{head}: {_site(first_site(run), 220)}"
    if short and run.outcome in ("hazard", "misuse", "error"):
        return f"{run.outcome}: {_site(first_site(run).split(' — ')[0], 110)}"
    if run.outcome == "wrong output":
        return f"finished, output wrong: {run.n_bad:,} of {run.n:,} elements" if run.n_bad is not None else "wrong output"
    if run.outcome == "ok":
        return "finished, verified (the mistake went unseen)"
    return f"{run.outcome}: {_site(first_site(run), 220)}"


def mistakes_for(stage_key: str) -> list:
    """The catalog's mutations of one stage."""
    return [m for m in _catalog().CATALOG if m.stage == stage_key]


def mistake_panel(stage, mutation_id: str | None = None, *, seed: int = 0, picture: bool = True) -> Shown:
    """One planted mistake of the stage (the catalog's first for it, or `mutation_id`): what it changes, what
    the catalog expects, what the simulator said, and the protocol picture up to where it stopped."""
    s = _as_stage(stage)
    try:
        cat = _catalog()
        muts = mistakes_for(s.key)
    except SimUnavailable as e:
        return Shown([unavailable_note(str(e))])
    if mutation_id is not None:
        muts = [cat.mutation(mutation_id)]
    if not muts:
        return Shown([f"The catalog plants no mistake in {s.key}."])
    m = muts[0]
    run = simulate_mutation(m, seed=seed)
    ok, why = cat.matches(m, outcome(run))
    diff = patch_text(m)
    row = {"mutation": m.id, "the mistake": m.description, "patch": diff, "expected": _expected(m),
           "the simulator said": _said(run), "seed": run.seed, "as expected": "yes" if ok else f"NO: {why}"}
    out = Shown([Table([row], f"A planted mistake in {s.key} (a source patch applied for this run only, "
                              f"pelib.sim_catalog) — {evidence.simulated()}",
                       notes=[m.why] if getattr(m, "why", "") else None)])
    if picture and run.events and run.outcome not in ("ok", "wrong output"):   # where the protocol stopped
        out.append(protocol_figure(run, title=f"{s.key} with '{m.id}'"))
    return out


def catalog_table(proof: dict | None = None, *, seed: int = 0, families=None) -> Table:
    """Every mutation of the catalog run on the simulator: what it plants, what the catalog expects, what the
    simulator said (simulated); for the sm90 ones the H100's outcome from the committed proof (measured)."""
    ok, why = available()
    try:
        cat = _catalog()
    except SimUnavailable as e:
        ok, why = False, str(e)
    if not ok:
        return Table([{"catalog": "every planted mistake", "simulated": why}],
                     f"The planted-bug catalog, not run here — {evidence.simulated()} needs pelib.sim and "
                     "pelib.sim_catalog", descriptive=True)
    gpu = (proof or {}).get("mutations", {})   # pelib.sim_proof's record: {id: {"outcome": {...}, ...}}
    if isinstance(gpu, list):
        gpu = {r.get("id"): r for r in gpu}
    rows = []
    for m in cat.CATALOG:
        if families and m.family not in families:
            continue
        row = {"mutation": m.id, "the mistake": m.description, "expected": _expected(m)}
        try:
            run = simulate_mutation(m, seed=seed)
        except getattr(cat, "CatalogError", ()) as e:   # the stage changed under the patch: said, not hidden
            row.update({"the simulator said": f"not run: {e}", "as expected": "NO"})
        else:
            good, _ = cat.matches(m, outcome(run))
            row.update({"the simulator said": _said(run, short=True), "as expected": "yes" if good else "NO"})
        if proof is not None:
            g = gpu.get(m.id)
            row["H100"] = _gpu_said(g) if g else ("—" if m.family != "sm90" else "not run on the H100")
        rows.append(row)
    src = (f"; H100 column measured ({proof.get('name') or proof.get('device', '')}, {str(proof.get('date', ''))[:10]}, "
           f"{proof.get('path', 'sim_proof.json')})" if proof else "")
    return Table(rows, f"The planted-bug catalog (pelib.sim_catalog), each mutation run once at seed {seed} — "
                       f"{evidence.simulated()}{src}")


def _gpu_said(g: dict) -> str:
    o = g.get("outcome") or g.get("gpu") or {}
    kind = o.get("kind", "?")
    if kind in ("fault", "deadlock"):
        tags = o.get("tags") or []
        return "trapped in a bounded wait" + (f" at tag {', '.join(map(str, tags))}" if tags else "")
    if kind == "wrong":
        return f"finished, output wrong ({o.get('n_bad'):,} elements)" if o.get("n_bad") is not None else "wrong output"
    if kind == "hang":
        return "hung (the launch's watchdog)"
    return {"correct": "finished, output correct"}.get(kind, kind)


# ---- the whole line, and the Hopper proof ---------------------------------------------------------------

BLACKWELL = ("nvfp4", "fp8")


def blackwell_stages(variants: bool = True) -> list[Stage]:
    """Every sm_100a stage file (NVFP4, FP8 and, with `variants`, the go/no-go variants), in name order."""
    return [s for s in all_stages(BLACKWELL, variants=variants)]


def stages_table(seed: int = 0, stage_list=None) -> Table:
    """Every Blackwell stage simulated at one seed: verified against torch, the simulator's report."""
    ok, why = available()
    if not ok:
        return Table([{"stage": "every sm_100a stage", "simulated": why}],
                     f"Not simulated here — {evidence.simulated()} needs pelib.sim and a host C++ compiler",
                     descriptive=True)
    runs = [simulate(s, seed=seed) for s in (stage_list or blackwell_stages())]
    t = run_table(runs, caption=f"Every Blackwell stage on the simulator's problem, seed {seed}: output poisoned, "
                                f"verified against the torch reference — {evidence.simulated()}")
    for row, r in zip(t.rows, runs):
        row["stage"] = r.stage
        row["problem"] = r.problem
    return t


def proof_record(results_dir: Path | None = None) -> dict | None:
    """The newest committed H100 proof of the simulator (results/<date>-<device>/sim_proof.json), or None."""
    root = results_dir or RESULTS
    found = sorted(root.glob("*/sim_proof.json"))
    if not found:
        return None
    data = json.loads(found[-1].read_text())
    data.setdefault("path", str(found[-1].relative_to(root.parent)))
    return data


# ---- a sweep's position ----------------------------------------------------------------------------------

def sweep_panel(stage, defines: dict | None = None, *, seed: int = 0, picture: bool = True,
                use_cache: bool | None = None, problem=None) -> list:
    """What one position of a sweep adds (pelib.views.fp8.sweep_point): the stage at these defines run on
    the simulator at one seed (verified, its report) and its protocol picture. In JupyterLab it runs live
    for the chosen value (seconds at the small problem); the book's build takes a run from the cache where
    the same source ran at the same seed before (use_cache: default, only while the book is built)."""
    ok, why = available()
    if not ok:
        return [unavailable_note(why)]
    s = _as_stage(stage, defines)
    run = simulate(s, seed=seed, problem=problem, use_cache=book_build() if use_cache is None else use_cache)
    how = "" if not run.cached else " (from the run cache: this source, this seed)"
    out: list = [run_table([run], caption=f"{s.label} on the simulator's problem ({run.problem}), seed {seed}{how}: "
                                          f"verified against torch — {evidence.simulated()}")]
    if picture and run.events:
        out.append(protocol_figure(run, title=f"{s.label}, {run.problem}, seed {seed}"))
    return out


# ---- naming what the event log leaves as numbers -------------------------------------------------------

_BAR_ARRAY = re.compile(r"&\s*(\w+)\s*\[")                       # &empty[s]: an element of an array
_BAR_NAME = re.compile(r"\(\s*&?\s*(\w+)\s*[,)]|smem_u32\(\s*&?\s*(\w+)")   # acc_full, &mma_done
_ACC = re.compile(r"acc|mma_done|tmem")
_RING = re.compile(r"full|empty")
_OFFSET = 0xFFFFFF          # a shared::cluster address carries the CTA rank above bit 24 (sim/runtime/api.h)


def _line_text(path, line, stage: Stage, cache: dict) -> str:
    key = str(path or stage.path)
    if key not in cache:
        p = Path(path) if path else stage.path
        if not p.is_absolute():
            for base in (stage.path.parent, KERNELS):
                if (base / p).is_file():
                    p = base / p
                    break
        try:
            cache[key] = p.read_text().splitlines()
        except OSError:
            cache[key] = []
    lines = cache[key]
    return lines[line - 1] if line and 0 < line <= len(lines) else ""


def _barrier_names(events: list[dict], stage: Stage) -> dict:
    """{shared offset: (array name, index)}: the barrier expression at each event's source line (`&empty[s]`,
    `acc_full`), the index from the offset (8-byte mbarriers, index 0 the lowest offset seen)."""
    files: dict = {}
    name_of: dict = {}
    arrays: set = set()
    for e in events:
        b = e.get("barrier")
        if not isinstance(b, int) or (b & _OFFSET) in name_of:
            continue
        text = _line_text(e.get("file"), e.get("line"), stage, files).split("//")[0]
        m = (_BAR_ARRAY.search(text) or _BAR_NAME.search(text)) if text else None
        if m:
            name = next(g for g in m.groups() if g)
            if _ACC.search(name) or _RING.search(name):
                name_of[b & _OFFSET] = name
                if m.re is _BAR_ARRAY:
                    arrays.add(name)
    lowest: dict = {}
    for off, name in name_of.items():
        lowest[name] = min(lowest.get(name, off), off)
    return {off: (name, (off - lowest[name]) // 8, name in arrays) for off, name in name_of.items()}


def _role_of(kinds: set, family: str) -> str:
    parts = []
    if "tma_load" in kinds:
        parts.append("producer")
    if "mma" in kinds:
        parts.append("consumer (wgmma)" if family == "sm90" else "MMA issuer")
    if kinds & {"tmem_ld", "tma_store"} and not (family == "sm90" and "mma" in kinds):
        parts.append("epilogue")
    return " + ".join(parts)


def annotate(events: list[dict], stage) -> list[dict]:
    """The log with what its numbers mean, read from the stage: each barrier's name and index (from the
    source line of the event that used it), the ring slot and accumulator of every event (an MMA's slot is
    the one its thread last waited full for, its accumulator the one it last waited empty for; a TMEM load's
    accumulator the one its warp last waited full for), and each warp's role from what it did."""
    s = _as_stage(stage)
    if not events:
        return events
    names = _barrier_names(events, s)
    acc_family = sorted({n for n, _, _ in names.values() if _ACC.search(n)})
    ring_slot: dict = {}
    acc_mma: dict = {}
    acc_epi: dict = {}
    kinds_of: dict = {}
    out = []
    for e in sorted(events, key=lambda e: e["seq"]):
        e = dict(e)
        kinds_of.setdefault((e["cta"], e["warp"]), set()).add(e["kind"])
        b = e.get("barrier")
        if isinstance(b, int) and (b & _OFFSET) in names:
            name, idx, array = names[b & _OFFSET]
            e["barrier"] = f"{name}[{idx}]" if array else name
            if _ACC.search(name):
                e.setdefault("acc", None)
                e["acc"] = idx if e["acc"] is None else e["acc"]
            elif _RING.search(name):
                e["slot"] = idx if e.get("slot") is None else e["slot"]
        thread, warp = (e["cta"], e["warp"], e.get("lane")), (e["cta"], e["warp"])
        if e["kind"] == "wait_end" and e.get("barrier"):
            if e.get("slot") is not None and "full" in e["barrier"]:
                ring_slot[thread] = e["slot"]
            if e.get("acc") is not None:
                (acc_mma if "empty" in e["barrier"] else acc_epi)[thread if "empty" in e["barrier"] else warp] = e["acc"]
        if e["kind"] == "mma":
            if e.get("slot") is None and thread in ring_slot:
                e["slot"] = ring_slot[thread]
            if e.get("acc") is None and acc_family:
                e["acc"] = acc_mma.get(thread, 0)
        if e["kind"] == "tmem_ld" and e.get("acc") is None and acc_family:
            e["acc"] = acc_epi.get(warp, 0)
        out.append(e)
    roles = {k: _role_of(v, s.family) for k, v in kinds_of.items()}
    for e in out:
        if str(e.get("role") or "").startswith("warp ") or not e.get("role"):
            r = roles.get((e["cta"], e["warp"]))
            e["role"] = f"warp {e['warp']}: {r}" if r else f"warp {e['warp']}"
    return out
