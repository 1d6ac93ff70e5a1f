"""Simulated runs of a stage: run on pelib.sim through the stage's own host path, cached by content, and
classified (ok, wrong output, deadlock, hazard, misuse, error); the catalog's planted mistakes the same way.

    run = sim_runs.simulate("fp8/09_persistent_megakernel", seed=1)   # a SimRun, its events in pelib.events' schema
    runs = sim_runs.simulate_seeds(stage)                             # seeds 0, 1, 2
    run = sim_runs.simulate_mutation("fp8-09-acc-released-before-wait-ld")

A simulated run verifies protocol, indexing and data path; it has no time. Runs are cached (pelib.cache):
the key covers every kernel file (stage, common/, sim/), pelib's host code outside the views, the stage,
defines, problem and seed, so an edited kernel or simulator runs again. The seed has one channel: the
argument, passed to pelib.sim.host.run as the scheduler's (sim_seed: an integer or a named schedule, 'lazy' /
'eager') and, as an integer, the inputs' seed.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from .. import cache as _cache, events as _events, evidence
from . import engine as sim, build as sim_build, catalog as sim_catalog, host as sim_host
from ..paths import KERNELS
from ..stage import Stage, StageError

SEEDS = sim.STANDARD_SEEDS     # every simulated stage is shown at the simulator's standard schedules (lazy, eager, 0)
PROBLEMS = ("sim", "small")    # the first the stage's kind knows: the simulator's test size, else 'small'
OUTCOMES = ("ok", "wrong output", "deadlock", "hazard", "misuse", "error")
_CATALOG_KIND = {"deadlock": "deadlock", "hazard": "hazard", "misuse": "misuse", "wrong output": "wrong",
                 "ok": "correct", "error": "error"}


CACHE_DIR: Path | None = None   # tests point the run cache at a folder of their own (like pelib.sim.engine._CACHE_DIR)


class SimRunError(ValueError):
    """A simulated run cannot be made as asked; the message names what is missing."""


def available() -> tuple[bool, str]:
    """(True, '') where pelib.sim can run a stage here, else (False, why): no host C++ compiler."""
    try:
        sim_build.compiler()
    except sim_build.SimToolchainError as e:   # its message names what to install
        return False, str(e)
    return True, ""


@dataclass
class SimRun:
    """One stage run on pelib.sim: the verification against the torch reference and the simulator's report.

    outcome: 'ok' (ran to the end, verified), 'wrong output' (ran to the end, did not verify), or what
    stopped it: 'deadlock', 'hazard', 'misuse', 'error'. `stopped` is the simulator's message (the
    blocked wait site with its tag, barrier, parity and source line, or the hazard), `events` the log in
    pelib.events' schema."""

    stage: str
    label: str
    problem: str
    seed: int | str
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
        # one level: every field is JSON already (events are dicts, reports text); dataclasses.asdict's
        # deep copy of a run's events took as long as simulating it
        return {f.name: getattr(self, f.name) for f in fields(self)}


def as_stage(stage, defines: dict | None = None) -> Stage:
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
    raise SimRunError(f"{stage.key}: its kind has none of the problems {PROBLEMS}")


def fitted(s: Stage, prob):
    """The simulator's problem with the K a stage is built for, where its build fixes K (F28 unrolls its K
    loop for K_ITERS k-blocks, exported as k_iters, and its ring schedule needs that K): same M and N."""
    ex = s.exports
    if "k_iters" in ex and prob.k != ex["k_iters"] * ex.block_k and dataclasses.is_dataclass(prob):
        k = ex["k_iters"] * ex.block_k
        return dataclasses.replace(prob, name=f"{prob.name} with K={k}", k=k)
    return prob


# ---- the run cache -------------------------------------------------------------------------------------

def run_cache() -> _cache.Cache:
    """Where simulated runs are kept (CACHE_DIR, else pelib.cache's folder)."""
    return _cache.Cache(CACHE_DIR) if CACHE_DIR is not None else _cache.Cache()


_runs = run_cache


def content_key(options: dict, tool: str) -> str:
    """The content key of a simulated result: every kernel file, pelib's host code outside the views, the options."""
    pelib = Path(__file__).resolve().parents[1]      # pelib, this module being pelib/sim/runs.py
    sources = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".c")
    files = sorted(p for p in KERNELS.rglob("*") if p.is_file() and p.suffix in sources)
    files += sorted(p for p in pelib.rglob("*.py") if "views" not in p.relative_to(pelib).parts)
    named = [(str(p), p.read_bytes()) for p in files]
    return _cache.key(files=named, options=options, tool=tool)


def _run_key(s: Stage, prob, seed: int, mutation: str) -> str:
    # every knob that changes what a run reports (pelib.sim.engine.settings: the step and spin limits, the stack, the
    # watchdog, the accumulation): a deadlock stored under a small step limit is never served without it
    return content_key({"stage": s.key, "defines": s.defines, "problem": prob.name, "seed": seed,
                        "mutation": mutation, "settings": sim.settings()}, "pelib.sim-run-2")


def _load(key: str) -> SimRun | None:
    try:
        e = _runs().get("simrun", key, require=("run.json.gz",))
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
        _runs().put("simrun", key, {"run.json.gz": gzip.compress(json.dumps(run.to_json(), default=str).encode(), compresslevel=1)},
                           meta={"stage": run.stage, "seed": run.seed, "outcome": run.outcome})
    except _cache.CacheUnavailable:
        pass


# ---- running and classifying -----------------------------------------------------------------------------

def _entries(report, name: str) -> list:
    """A report's deadlock / hazards / misuse entries as text (pelib.sim gives dicts with their "text")."""
    return [str(x.get("text", x)) if isinstance(x, dict) else str(x) for x in (getattr(report, name, None) or [])]


def _take_report(run: SimRun, rep, seed: int) -> None:
    run.deadlock, run.hazards, run.misuse = (_entries(rep, k) for k in ("deadlock", "hazards", "misuse"))
    run.tags = [int(t) for t in (getattr(rep, "tags", None) or ())]
    run.seeds = list(getattr(rep, "seeds", None) or [seed])
    run.events = _events.check(getattr(rep, "events", None) or [])


def classify(e: BaseException) -> str:
    """The outcome a pelib.sim error stands for: deadlock, hazard, misuse (SimError's kinds), else error."""
    for cls, word in ((sim.SimDeadlock, "deadlock"), (sim.SimHazard, "hazard"), (sim.SimMisuse, "misuse")):
        if isinstance(e, cls):
            return word
    return "error"


def simulate(stage, defines: dict | None = None, *, seed: int = 0, problem=None, use_cache: bool = True,
             mutation: str = "") -> SimRun:
    """Run a stage on pelib.sim at the simulator's problem (pelib.sim.host.run): the output poisoned,
    launched through the stage's own host path, verified against the torch reference. A deadlock, hazard
    or misuse the simulator raises is the run's outcome, with its message and the events up to the stop;
    so is the back end's own failure to build the stage (not cached). `mutation` names a planted patch
    (part of the cache key)."""
    seed = sim.default_seed(seed)   # checked first: SimError naming the seed (2**70 was torch's raw overflow)
    s = as_stage(stage, defines)
    prob = fitted(s, problem_for(s, problem))
    key = _run_key(s, prob, seed, mutation) if use_cache else ""
    if use_cache:
        hit = _load(key)
        if hit is not None:
            return hit
    run = SimRun(stage=s.key, label=s.label, problem=prob.name, seed=seed, outcome="error", mutation=mutation)
    t0 = time.perf_counter()
    try:
        res = sim_host.run(s, prob, seed=input_seed(seed), sim_seed=seed)
    except Exception as e:   # what the simulator stopped on: a SimError, or the back end's own failure
        found = isinstance(e, sim.SimError)
        if isinstance(e, sim.SimTooLarge):   # a refusal up front, not a result: the caller's to see
            raise
        if not (found or type(e).__module__ in (sim.__name__, sim_build.__name__)):   # the back end's own
            raise
        run.outcome = classify(e)
        run.stopped = str(e).strip() if found else f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
        use_cache = use_cache and found          # a build failure is not a result: run again next time
        if getattr(e, "report", None) is not None:
            _take_report(run, e.report, seed)
        run.seeds = run.seeds or [seed]
    else:
        rep, v = res.get("report"), res.get("verify")
        run.verified = res.get("ok")
        if v is not None:
            run.max_abs, run.n_bad, run.n = float(v.max_abs), int(v.n_bad), int(v.n)
            run.verify_text = str(v).splitlines()[0]
        if rep is not None:
            _take_report(run, rep, seed)
        cfg = res.get("config")
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


def input_seed(seed: int | str) -> int:
    """The inputs' seed of a run at scheduler seed `seed`: the integer itself, a named schedule's a fixed one
    (10 + its place in sim.SCHEDULES, as tests/test_sim_stages.py draws them)."""
    return seed if isinstance(seed, int) else 10 + list(sim.SCHEDULES).index(sim.default_seed(seed))


def simulate_seeds(stage, defines: dict | None = None, seeds=SEEDS, **kw) -> list[SimRun]:
    """simulate() at each seed (default: the simulator's standard schedules, lazy, eager and 0)."""
    seeds = tuple(seeds)
    if not seeds:
        raise SimRunError("seeds=(): no seed, so nothing would be simulated; pass at least one (the default is "
                          f"pelib.sim.engine.STANDARD_SEEDS = {SEEDS})")
    return [simulate(stage, defines, seed=k, **kw) for k in seeds]


def open_waits(run_or_events) -> list:
    """The waits a run's threads never finished (pelib.events spans marked open): where it stood when it stopped."""
    ev = run_or_events.events if isinstance(run_or_events, SimRun) else run_or_events
    return [s for s in _events.spans(ev).spans if s.cat == "wait" and s.args.get("open")] if ev else []


def blocked_tags(run: SimRun) -> tuple[int, ...]:
    """The wait tags a stopped run was blocked at: the report's own (SimReport.tags), else its open waits in
    the event log and 'tag N' in its report's text."""
    if run.tags:
        return tuple(sorted(run.tags))
    tags = {int(s.args["tag"]) for s in open_waits(run) if s.args.get("tag") is not None}
    for text in [run.stopped] + run.deadlock:
        tags |= {int(t) for t in re.findall(r"\btag[ =:]+(\d+)", text)}
    return tuple(sorted(tags))


# ---- the catalog's planted mistakes (pelib.sim.catalog) ------------------------------------------------

def outcome(run: SimRun) -> sim_catalog.Outcome:
    """A SimRun as the catalog's Outcome (kind, tags, detail, n_bad)."""
    detail = run.stopped or "; ".join(run.deadlock + run.hazards + run.misuse) or run.verify_text
    return sim_catalog.Outcome(_CATALOG_KIND.get(run.outcome, run.outcome),
                               blocked_tags(run) if run.outcome == "deadlock" else (), detail, run.n_bad)


def mistakes_for(stage_key: str) -> list:
    """The catalog's mutations of one stage."""
    return [m for m in sim_catalog.CATALOG if m.stage == stage_key]


def simulate_mutation(mut, *, seed: int = 0, use_cache: bool = True) -> SimRun:
    """The catalog's mutation `mut` (an id or a Mutation) applied to its stage and run on the simulator."""
    m = sim_catalog.mutation(mut) if isinstance(mut, str) else mut
    planted = hashlib.sha256(json.dumps(m.sources(), sort_keys=True).encode()).hexdigest()[:16]
    with sim_catalog.patched(sim_catalog.stage_of(m), m) as s:
        return simulate(s, seed=seed, problem=m.problem if m.problem else None, use_cache=use_cache,
                        mutation=f"{m.id}@{planted}")
