"""Blackwell stages where no B200 is present: the stage's own source run on pelib.sim (the CPU model), drawn
and tabulated; the runs themselves (running, caching, classifying) are pelib.sim.runs'.

    sim.run_table(sim_runs.simulate_seeds("fp8/09_persistent_megakernel"))   # verification + the report
    sim.picture("fp8/09_persistent_megakernel")       # per-role lanes and occupancy lanes, in simulated order
    sim.mistake_panel("fp8/09_persistent_megakernel") # one planted mistake of the catalog, what the simulator said

A simulated run verifies protocol, indexing and data path; it has no time. Its event log carries an
order stamp (`seq`), never a clock, and every picture here says so. On a B200 the chapters' cells take
the measured path instead (pelib.views.fp8.results_table and friends); these functions still work there.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

from .. import device, evidence, results
from ..sim import catalog as sim_catalog, runs as sim_runs
from ..facts import Table
from ..paths import KERNELS, RESULTS
from ..sim.runs import SEEDS, SimRun
from ..stage import Stage, all_stages
from .html import to_html
from .protocol import protocol_picture
from .widgets import _display, book_build


# ---- tables ------------------------------------------------------------------------------------------

def _site(text: str, limit: int | None = None) -> str:
    """One line (whitespace collapsed); cut at `limit` characters only where a picture's one-line title
    asks for it: a verdict or a report is always whole."""
    t = " ".join(str(text).split())
    if limit is None or len(t) <= limit:
        return t
    cut = t.rfind(" ", 0, limit - 1)
    return t[:cut if cut > limit // 2 else limit - 1] + " …"


def barrier_names(run: SimRun) -> dict[int, str]:
    """{shared-memory offset: 'full[1]'} of every mbarrier the run's events name: the name is the stage's
    own (its mbarrier_init argument, "&full[s]" -> full), the index the barrier's place in that array."""
    out: dict[int, str] = {}
    for e in run.events or []:
        if e.get("barrier") is None or e.get("addr") is None or e["addr"] in out:
            continue
        out[e["addr"]] = e["barrier"] if e.get("index") is None else f"{e['barrier']}[{e['index']}]"
    return out


_WAIT_AT = re.compile(r"mbarrier wait \(tag (\d+)\) on the barrier at (0x[0-9a-fA-F]+)")
_BAR_AT = re.compile(r"\b(the )?(m?barrier) at (0x[0-9a-fA-F]+)")


def named(run: SimRun, text: str) -> str:
    """A report's text with each barrier named as the stage names it ('the wait on empty[0]'), not by its
    shared-memory address and wait tag; a barrier no event names keeps its offset, said as such."""
    names = barrier_names(run)

    def name(addr: str) -> str:
        return names.get(int(addr, 16), f"the mbarrier at shared offset {addr}")

    text = _WAIT_AT.sub(lambda m: f"mbarrier wait on {name(m.group(2))}", str(text))
    return _BAR_AT.sub(lambda m: (f"{m.group(1) or ''}{m.group(2)} {names[int(m.group(3), 16)]}"
                                  if int(m.group(3), 16) in names else m.group(0)), text)


def blocked_on(run: SimRun) -> list[str]:
    """The barriers a deadlocked run's blocked mbarrier waits wait on, by name, in the report's order."""
    out = []
    for x in run.deadlock or []:
        m = _WAIT_AT.search(x)
        if m:
            n = barrier_names(run).get(int(m.group(2), 16), f"the mbarrier at shared offset {m.group(2)}")
            if n not in out:
                out.append(n)
    return out


def _report_text(r: SimRun) -> str:
    """'no deadlock, no hazard, no misuse', or what stopped the run and where, for a table cell (cut at a
    word to CELL characters; the whole report is the run's own, SimRun.report)."""
    if r.outcome in ("ok", "wrong output") and not (r.deadlock or r.hazards or r.misuse):
        return "no deadlock, no hazard, no misuse"
    return f"{r.outcome}: {_site(first_site(r), CELL - len(r.outcome) - 2)}"


def _verified(r: SimRun) -> str:
    return "—" if r.verified is None else ("PASS" if r.verified else "FAIL")


def _compact_rows(runs: list[SimRun]) -> list[dict]:
    """One row per stage: its seeds, the verification at every seed, and one report (the same at every
    seed, or the first seed's that differs from clean)."""
    rows = []
    for st in dict.fromkeys(r.label for r in runs):
        rs = [r for r in runs if r.label == st]
        seeds = [x for r in rs for x in (r.seeds or [r.seed])]
        said = list(dict.fromkeys(_report_text(r) for r in rs))
        ver = list(dict.fromkeys(_verified(r) for r in rs))
        bad = [r for r in rs if _report_text(r) != "no deadlock, no hazard, no misuse"]
        rows.append({"stage": st, "seeds": ", ".join(map(str, seeds)),
                     "verified vs torch": ver[0] + (" at every seed" if len(rs) > 1 else "") if len(ver) == 1 else
                     ", ".join(f"{_verified(r)} (seed {r.seed})" for r in rs),
                     "the simulator's report": said[0] + (" at every seed" if len(rs) > 1 else "") if len(said) == 1
                     else f"seed {bad[0].seed}: {_report_text(bad[0])}"})
    return rows


def run_table(runs: list[SimRun], caption: str | None = None, compact: bool = False) -> Table:
    """One row per run: the verification against torch and what the simulator reported (simulated).
    compact=True: one row per stage, its seeds together (each run keeps its whole report)."""
    if not runs:
        raise sim_runs.SimRunError("no simulated runs to show")
    rows = []
    for r in runs:
        rows.append({"stage": r.label, "problem": r.problem, "seed": ", ".join(str(x) for x in (r.seeds or [r.seed])),
                     "verified vs torch": _verified(r),
                     "max |err|": "—" if r.max_abs is None else f"{r.max_abs:.3g}",
                     "bad elements": "—" if r.n_bad is None else f"{r.n_bad:,} of {r.n:,}",
                     "the simulator's report": _report_text(r), "events": f"{len(r.events):,}"})
    if compact:
        rows = _compact_rows(runs)
    stages = list(dict.fromkeys(r.stage for r in runs))
    seeds = list(dict.fromkeys(k for r in runs for k in (r.seeds or [r.seed])))
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
    ok, why = sim_runs.available()
    if not ok:
        return Shown([unavailable_note(why)])
    return Shown([run_table(sim_runs.simulate_seeds(stage, defines, seeds))])


# ---- the chapters' cells -------------------------------------------------------------------------------

def picture(stage, defines: dict | None = None, *, seed: int = 0, title: str = "", **kw):
    """The protocol picture of one simulated run of a stage (pelib.views.protocol.protocol_picture, one
    cluster); where there is none to draw (no simulator here, no event log) it prints why and returns None
    (a chapter's cell ends in ';')."""
    ok, why = sim_runs.available()
    if not ok:
        print(unavailable_note(why))
        return None
    s = sim_runs.as_stage(stage, defines)
    run = sim_runs.simulate(s, seed=seed)
    if not run.events:
        print(f"{s.key}: the simulator's report has no event log to draw ({run.outcome}).")
        return None
    return protocol_picture(run, title=title or f"{s.label}, {run.problem}, seed {run.seed}",
                            stopped=kw.pop("stopped", _stopped(run)), **kw)


def on_b200(stage_names, *, measured, stage_of, recorded=None, mistake: str | bool | None = None,
            seeds=SEEDS, compact: bool = False) -> Shown:
    """A chapter's 'On a B200' cell. On a B200 the stages run live, verified then timed: `measured()` (the
    family's measured table, as before). Elsewhere each stage runs on the simulator at `seeds` (its
    verification against torch and the simulator's report), then `recorded()` (the lab's numbers, if
    given), then, with `mistake`, one planted mistake of the catalog and what the simulator said.

    stage_of(name) -> Stage. mistake: a catalog id, or True for the stage's first catalog entry. compact: the
    simulated runs one row per stage (run_table)."""
    if device.can_run("sm_100a"):  # pragma: no cover - B200
        return Shown([measured()])
    names = [stage_names] if isinstance(stage_names, str) else list(stage_names)
    ok, why = sim_runs.available()
    out = Shown()
    if ok:
        out.append(run_table([r for n in names for r in sim_runs.simulate_seeds(stage_of(n), seeds=seeds)],
                             compact=compact))
    else:
        out.append(unavailable_note(why))
    if recorded is not None:
        out.append(recorded())
    if mistake and ok:
        out += mistake_panel(stage_of(names[-1]), None if mistake is True else mistake)
    return out


# ---- planted mistakes (pelib.sim.catalog) ----------------------------------------------------------------

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
        return (f"deadlock at tag {' or '.join(str(t) for t in m.tags)}" if m.tags else
                f"deadlock at the {m.site}")
    if m.expect in ("hazard", "misuse"):
        return f"{m.expect} naming '{m.site}'"
    if m.expect == "clean":
        return "runs clean and verifies (a benign edit)"
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
    """The report's most telling entry: a blocked mbarrier wait (its tag) before other waits, then a warp
    collective some lanes never reached (elect.sync: the warps at a block barrier only wait behind it), else
    the first."""
    items = run.deadlock or run.hazards or run.misuse
    if not items:
        return clean(run.stopped)
    tagged = [x for x in items if re.search(r"\btag\b", x)] or [x for x in items if "elect.sync" in x]
    return named(run, clean((tagged or items)[0])) + (f" (and {len(items) - 1} more)" if len(items) > 1 else "")


def _stopped(run: SimRun) -> str | None:
    """The line a picture of a stopped run ends on: its outcome and the report's telling entry, or None."""
    return None if run.outcome in ("ok", "wrong output") else f"{run.outcome}: {_site(first_site(run), 140)}"


# A table cell's longest report (the page holds a cell to 400 characters); the whole report is the run's own
# (SimRun.report) and an exercise's verdict is never cut.
CELL = 380


def _said(run: SimRun, short: bool = False, benign: bool = False, whole: bool = False) -> str:
    """What the simulator said about a run, for a table: its outcome and the telling entry (short: the
    outcome, the blocked tags and how many waits were blocked, or the entry cut to one line)."""
    if run.outcome == "deadlock":
        bars, tags = blocked_on(run), sim_runs.blocked_tags(run)
        # by the barriers' own names; a report not in the simulator's form (no barrier offset) by its wait tags
        head = (f"deadlock, blocked on {', '.join(bars)}" if bars else
                f"deadlock, blocked at tag {', '.join(map(str, tags))}" if tags else "deadlock")
        if short:
            return f"{head} ({len(run.deadlock)} blocked waits)" if run.deadlock else head
        return f"{head}: {_site(first_site(run), None if whole else CELL - len(head))}"
    if short and run.outcome in ("hazard", "misuse", "error"):
        return f"{run.outcome}: {_site(first_site(run).split(' — ')[0])}"
    if run.outcome == "wrong output":
        return f"finished, output wrong: {run.n_bad:,} of {run.n:,} elements" if run.n_bad is not None else "wrong output"
    if run.outcome == "ok":
        return "finished, verified" + ("" if benign else " (the mistake went unseen)")
    return f"{run.outcome}: {_site(first_site(run), None if whole else CELL)}"


def mistake_panel(stage, mutation_id: str | None = None, *, seed: int = 0, picture: bool = True) -> Shown:
    """One planted mistake of the stage (the catalog's first for it, or `mutation_id`): what it changes, what
    the catalog expects, what the simulator said, and the protocol picture up to where it stopped."""
    s = sim_runs.as_stage(stage)
    muts = [sim_catalog.mutation(mutation_id)] if mutation_id is not None else sim_runs.mistakes_for(s.key)
    if not muts:
        return Shown([f"The catalog plants no mistake in {s.key}."])
    m = muts[0]
    run = sim_runs.simulate_mutation(m, seed=seed)
    ok, why = sim_catalog.matches(m, sim_runs.outcome(run))
    diff = patch_text(m)
    row = {"mutation": m.id, "the mistake": m.description, "patch": diff, "expected": _expected(m),
           "the simulator said": _said(run, benign=m.expect == "clean"), "seed": run.seed,
           "as expected": "yes" if ok else f"NO: {why}"}
    out = Shown([Table([row], f"A planted mistake in {s.key} (a source patch applied for this run only, "
                              f"pelib.sim.catalog) — {evidence.simulated()}",
                       notes=[m.why] if getattr(m, "why", "") else None)])
    if picture and run.events and run.outcome not in ("ok", "wrong output"):   # where the protocol stopped
        out.append(protocol_picture(run, title=f"{s.key} with '{m.id}'", stopped=_stopped(run)).figure)
    return out


def catalog_table(proof: dict | None = None, *, seed: int = 0, families=None, stages=None,
                  summary: bool = False) -> Table:
    """Every mutation of the catalog (of `families`, of `stages` where given) run on the simulator: what it
    plants, what the catalog expects, what the simulator said (simulated); for the sm90 ones the H100's
    outcome from the committed proof (measured). summary=True: one row per family and expected report,
    the mistakes counted (the same runs)."""
    ok, why = sim_runs.available()
    if not ok:
        return Table([{"catalog": "every planted mistake", "simulated": why}],
                     f"The planted-bug catalog, not run here — {evidence.simulated()} needs a host C++ compiler",
                     descriptive=True)
    gpu = (proof or {}).get("mutations", {})   # pelib.sim.proof's record: {id: {"outcome": {...}, ...}}
    if isinstance(gpu, list):
        gpu = {r.get("id"): r for r in gpu}
    rows = []
    for m in sim_catalog.CATALOG:
        if families and m.family not in families or stages and m.stage not in stages:
            continue
        row = {"mutation": m.id, "the mistake": m.description, "expected": _expected(m)}
        try:
            run = sim_runs.simulate_mutation(m, seed=seed)
        except sim_catalog.CatalogError as e:   # the stage changed under the patch: said, not hidden
            row.update({"the simulator said": f"not run: {e}", "as expected": "NO"})
        else:
            good, _ = sim_catalog.matches(m, sim_runs.outcome(run))
            row.update({"the simulator said": _said(run, short=True, benign=m.expect == "clean"),
                        "as expected": "yes" if good else "NO"})
        if proof is not None:
            g = gpu.get(m.id)
            row["H100"] = _gpu_said(g) if g else ("—" if m.family != "sm90" else "not run on the H100")
        rows.append(row)
        row["_m"] = m
    if summary:
        return _catalog_summary(rows, gpu, proof, seed)
    for row in rows:
        del row["_m"]
    src = (f"; H100 column measured ({proof.get('name') or proof.get('device', '')}, {str(proof.get('date', ''))[:10]}, "
           f"{proof.get('path', 'sim_proof.json')})" if proof else "")
    return Table(rows, f"The planted-bug catalog (pelib.sim.catalog), each mutation run once at seed {seed} — "
                       f"{evidence.simulated()}{src}")


def _catalog_summary(rows: list[dict], gpu: dict, proof: dict | None, seed: int) -> Table:
    """catalog_table(summary=True): the mistakes of each family and expected report, counted."""
    groups: dict = {}
    for row in rows:
        m = row["_m"]
        g = groups.setdefault((m.family, m.expect), {"family": m.family, "the simulator must report": m.expect,
                                                     "planted mistakes": 0, "reported as expected": 0})
        g["planted mistakes"] += 1
        g["reported as expected"] += row["as expected"] == "yes"
        if proof is not None and m.family == "sm90":
            r = gpu.get(m.id)
            o = (r.get("outcome") or r.get("gpu") or {}).get("kind", "?") if r else "not run"
            said = {"fault": "trapped", "deadlock": "trapped", "wrong": "output wrong", "hang": "hung",
                    "correct": "output correct"}.get(o, o)
            c = g.setdefault("_gpu", {})
            c[said] = c.get(said, 0) + 1
    out = []
    order = list(dict.fromkeys(f for f, _ in groups))
    for g in sorted(groups.values(), key=lambda g: order.index(g["family"])):
        ran = g.pop("_gpu", None)
        if proof is not None:
            g["on the H100"] = ", ".join(f"{k} {n}" for k, n in ran.items()) if ran else "—"
        out.append(g)
    src = (f"; H100 column measured ({proof.get('name') or proof.get('device', '')}, {str(proof.get('date', ''))[:10]})"
           if proof else "")
    return Table(out, f"The planted-bug catalog (pelib.sim.catalog), {len(rows)} mistakes counted by family and "
                      f"expected report, each run once at seed {seed} — {evidence.simulated()}{src}")


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


def stages_table(seed: int = 0, stage_list=None, columns=None) -> Table:
    """Every Blackwell stage simulated at one seed: verified against torch, the simulator's report."""
    ok, why = sim_runs.available()
    if not ok:
        return Table([{"stage": "every sm_100a stage", "simulated": why}],
                     f"Not simulated here — {evidence.simulated()} needs a host C++ compiler", descriptive=True)
    runs = [sim_runs.simulate(s, seed=seed) for s in (stage_list or blackwell_stages())]
    t = run_table(runs, caption=f"Every Blackwell stage on the simulator's problem, seed {seed}: output poisoned, "
                                f"verified against the torch reference — {evidence.simulated()}")
    for row, r in zip(t.rows, runs):
        row["stage"] = r.stage
        row["problem"] = r.problem
    if columns:
        t.columns = list(columns)
    return t


def proof_record(results_dir: Path | None = None) -> dict | None:
    """The newest committed H100 proof of the simulator (results/<date>-<device>/sim_proof.json), or None."""
    root = results_dir or RESULTS
    found = sorted(root.glob("*/sim_proof.json"))
    if not found:
        return None
    data = results.load(found[-1], named=False)
    data.setdefault("path", str(found[-1].relative_to(root.parent)))
    return data


# ---- a sweep's position ----------------------------------------------------------------------------------

def sweep_panel(stage, defines: dict | None = None, *, seed: int = 0, picture: bool = True,
                use_cache: bool | None = None, problem=None, compact: bool = False) -> list:
    """What one position of a sweep adds (pelib.views.fp8.sweep_point): the stage at these defines run on
    the simulator at one seed (verified, its report) and its protocol picture. In JupyterLab it runs live
    for the chosen value (seconds at the small problem); the book's build takes a run from the cache where
    the same source ran at the same seed before (use_cache: default, only while the book is built)."""
    ok, why = sim_runs.available()
    if not ok:
        return [unavailable_note(why)]
    s = sim_runs.as_stage(stage, defines)
    run = sim_runs.simulate(s, seed=seed, problem=problem, use_cache=book_build() if use_cache is None else use_cache)
    how = "" if not run.cached else " (from the run cache: this source, this seed)"
    out: list = [run_table([run], caption=f"{s.label} on the simulator's problem ({run.problem}), seed {seed}{how}: "
                                          f"verified against torch — {evidence.simulated()}", compact=compact)]
    if picture and run.events:
        out.append(protocol_picture(run, title=f"{s.label}, {run.problem}, seed {seed}", stopped=_stopped(run)).figure)
    return out
