"""Exercises the simulator grades: the reader edits a few lines of a copy of a stage, and one call
compiles the edited stage (NVRTC), runs it on the simulator at three seeds, verifies it against torch
and says what happened.

    ex = exercises.get("fp8-ws-producer-parity")
    ex                          # the task and the lines to edit (ex.start), with their file line numbers
    ex.check(ex.start)          # the starting point: not yet, and the simulator's report
    ex.check(my_lines)          # the reader's version of those lines (or a path to a whole edited copy)

Each exercise starts from a planted mistake (pelib.sim.catalog's, or one defined here in the same form:
a source patch whose find text occurs exactly once) and its solution is the stage's own lines: the
reader finds the mistake. An exercise with goal "report" runs the other way (start from the stage,
make the change, see the simulator name what breaks). An exercise with `exports` also asks the build
to export those values (change a parameter and keep the kernel correct). tests/test_exercises.py runs
every solution (it must pass) and every starting point (it must fail with the intended report).
"""
from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import build as _build, evidence
from .sim import catalog as cat
from .facts import Table, evidence_label
from .sim.catalog import P, Mutation
from .stage import Stage
from .stages import resolve

SEEDS = (0, 1, 2)
# correct: start from the planted mistake, make the stage verify (the solution is the stage's own lines);
# report: start from the stage, make the change, the simulator must name the mistake's report;
# build: start from the stage, make the change, it must verify and export `exports`.
GOALS = ("correct", "report", "build")


class ExerciseError(ValueError):
    """An exercise cannot be posed or checked as asked; the message names the fix."""


@dataclass(frozen=True)
class Exercise:
    id: str
    chapter: str                 # book/chapters/<chapter>.md poses it
    title: str
    task: str                    # what to do, one paragraph
    mistake: str | Mutation      # the planted mistake: a sim_catalog id or a Mutation defined below
    region: tuple                # (first line containing this, last line containing that): what the reader edits
    goal: str = "correct"        # one of GOALS
    exports: dict = field(default_factory=dict)   # values the edited build must export (a parameter change)
    hint: str = ""

    def __post_init__(self):
        if self.goal not in GOALS:
            raise ExerciseError(f"{self.id}: goal={self.goal!r}, one of {GOALS}")

    # ---- what it is built from ------------------------------------------------------------------------
    @property
    def mutation(self) -> Mutation:
        return cat.mutation(self.mistake) if isinstance(self.mistake, str) else self.mistake

    @property
    def stage(self) -> str:
        return self.mutation.stage

    @property
    def defines(self) -> dict:
        return dict(self.mutation.defines)

    def _original(self) -> str:
        return resolve(f"{self.stage}.cu").read_text()

    def _mutated(self) -> str:
        if not self.mutation.patches:
            return self._original()
        srcs = self.mutation.sources()
        if set(srcs) != {f"{self.stage}.cu"}:
            raise ExerciseError(f"{self.id}: its mistake patches {sorted(srcs)}; an exercise edits the stage file only")
        return srcs[f"{self.stage}.cu"]

    @staticmethod
    def _span(text: str, region: tuple, label: str) -> tuple[int, int]:
        lines = text.split("\n")
        a = next((i for i, ln in enumerate(lines) if region[0] in ln), None)
        if a is None:
            raise ExerciseError(f"{label}: no line contains {region[0]!r} (the stage changed? update the exercise)")
        b = next((i for i in range(a, len(lines)) if region[1] in lines[i]), None)
        if b is None:
            raise ExerciseError(f"{label}: no line after {region[0]!r} contains {region[1]!r}")
        return a, b + 1

    def _region_of(self, text: str) -> tuple[str, int]:
        a, b = self._span(text, self.region, self.id)
        return "\n".join(text.split("\n")[a:b]), a + 1

    @property
    def start(self) -> str:
        """The lines the reader edits, as the exercise starts them (the mistake planted, or the stage's own)."""
        return self._region_of(self.starting_file())[0]

    @property
    def solution(self) -> str:
        """The lines that pass: the stage's own (goal correct), or the mistake's (goal report)."""
        return self._region_of(self._original() if self.goal == "correct" else self._mutated())[0]


    @property
    def first_line(self) -> int:
        return self._region_of(self._original())[1]

    def starting_file(self) -> str:
        """The whole starting copy of the stage (what write() saves for editing in a text editor); the
        catalog's 'planted:' comments, which would give the mistake away, left out."""
        return _unmark(self._mutated()) if self.goal == "correct" else self._original()

    def write(self, path: str | Path) -> Path:
        """Save the whole starting copy to `path`; check(path) grades it after editing."""
        p = Path(path)
        p.write_text(self.starting_file())
        return p

    def compose(self, attempt: str | Path) -> str:
        """The whole stage file with the reader's attempt: a path to an edited copy (any file name), a
        whole file's text, or the region's lines (which replace the region of the starting copy). What is
        none of these (an empty answer, a path to no file, a number, a list) is refused, saying so."""
        if isinstance(attempt, (list, tuple)) and all(isinstance(x, str) for x in attempt):
            raise ExerciseTypeError(f"{self.id}: the answer is a {type(attempt).__name__} of lines; pass one "
                                    "string, e.g. '\\n'.join(lines), or a path to an edited copy")
        if not isinstance(attempt, (str, Path)):
            raise ExerciseTypeError(f"{self.id}: the answer is of type {type(attempt).__name__} ({attempt!r:.60}); pass "
                                    "the edited lines as a string (start from ex.start) or a path to an edited "
                                    "copy (ex.write(path) saves one)")
        if isinstance(attempt, Path) or _looks_like_a_path(attempt):
            p = Path(attempt).expanduser()
            if not p.is_file():
                raise ExerciseError(f"{self.id}: {str(attempt)!r} reads as a path, and there is no file there; "
                                    "ex.write(path) saves a copy to edit, or pass the edited lines themselves")
            text = p.read_text()
        else:
            text = attempt
        if not text.strip():
            raise ExerciseError(f"{self.id}: the answer is empty; pass the edited lines (start from ex.start) "
                                "or a path to an edited copy")
        added = sorted({ln.strip() for ln in text.split("\n") if _INCLUDE.match(ln)}
                       - {ln.strip() for ln in self._original().split("\n") if _INCLUDE.match(ln)})
        if added:
            raise ExerciseError(f"{self.id}: the answer adds {added[0]!r}; an answer edits the stage's own code "
                                "and includes nothing new (its headers are already included)")
        if text.lstrip().startswith("// Stage "):
            return text
        base = self.starting_file()
        a, b = self._span(base, self.region, self.id)
        lines = base.split("\n")
        return "\n".join(lines[:a] + text.rstrip("\n").split("\n") + lines[b:])

    # ---- grading ----------------------------------------------------------------------------------
    def check(self, attempt: str | Path | None = None, seeds=SEEDS, price: bool = False) -> "Grade":
        """Compile the edited stage (NVRTC), run it on the simulator at each seed (stopping at the first that
        fails), verify it against torch, and judge it against the goal (a few seconds of one core on the
        small problem); with price=True an edit that passes is also priced on the full problem
        (pelib.predict, about 5-15 s more)."""
        seeds = _seeds(self.id, seeds)
        text = self.compose(self.start if attempt is None else attempt)
        return grade(self, text, seeds, price)

    def solution_diff(self) -> str:
        """From the starting lines to the solution's, as a unified diff (what the folded solution shows)."""
        import difflib

        a, b = self.start.split("\n"), self.solution.split("\n")
        return "\n".join(difflib.unified_diff(a, b, "start", "solution", n=1, lineterm=""))

    def solution_view(self) -> "Solution":
        """What the book shows under an exercise: the hint, folded, and where the solution is (ex.reveal(),
        or for a 'correct' exercise the stage file's own lines); the solution itself is not on the page."""
        return Solution(self)

    def reveal(self) -> "Solution":
        """The solution, in a place of its own: the diff from the starting lines and its check."""
        return Solution(self, reveal=True)

    # ---- display ------------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        e = html.escape
        start = "\n".join(f'<span class="pe-ln">{self.first_line + i}</span>{e(ln)}'
                          for i, ln in enumerate(self.start.split("\n")))
        goal = {"correct": "Edit the lines so that the stage compiles, runs on the simulator at three seeds and "
                           "verifies against torch.",
                "report": "Make the change; the check passes when the simulator names what breaks.",
                "build": "Make the change; the check passes when the stage still verifies on three seeds."}[self.goal]
        if self.exports:
            goal += " The build must export " + ", ".join(f"{k} = {v}" for k, v in self.exports.items()) + "."
        return (f'<div class="pe-exercise" data-exercise="{e(self.id)}">'
                f'<div class="pe-exercise-title">Exercise: {e(self.title)}</div>'
                f'<p>{e(self.task)} {e(goal)}</p>'
                f'<div class="pe-exercise-where">src/kernels/{e(self.stage)}.cu, lines {self.first_line}–'
                f'{self.first_line + self.start.count(chr(10))} (<code>ex.start</code>; <code>ex.write(path)</code> '
                f'saves the whole copy):</div><div class="highlight"><pre>{start}</pre></div></div>')

    def __repr__(self) -> str:
        return f"Exercise {self.id}: {self.title}\n{self.task}\n\n{self.start}"


_PLANTED = re.compile(r"\s*//\s*planted:.*$")
_INCLUDE = re.compile(r"\s*#\s*include\b")
_PATHLIKE = re.compile(r"^(?:~|\.{1,2})?[\w./\\~-]*\.(?:cu|cuh|txt|c|cpp|h|md)$|^(?:/|~/|\./|\.\./)\S*$")


class ExerciseTypeError(ExerciseError, TypeError):
    """An answer of a type an exercise cannot grade (not a string or a path)."""


def _looks_like_a_path(text: str) -> bool:
    """One line, no spaces or code punctuation, shaped like a file name or a path: 'edit.cu',
    '/tmp/answer.txt', './copy'. Code never matches (it has spaces, ';' or parentheses)."""
    s = text.strip()
    return "\n" not in s and bool(s) and not re.search(r"[\s;(){}=<>]", s) and bool(_PATHLIKE.match(s))


# the simulator's seeds: integers the scheduler takes as a 64-bit value, or a named schedule
_SEED_MAX = 2 ** 63


def _seeds(eid: str, seeds) -> tuple:
    """The seeds to check at, as given, or ExerciseError naming what is wrong: none at all (a check on no
    seed would simulate nothing and pass anything), a seed that is neither a small integer nor a named
    schedule."""
    from .sim.engine import SCHEDULES   # the named schedules the simulator takes (lazy, eager)

    if isinstance(seeds, (int, str)):
        seeds = (seeds,)
    try:
        seeds = tuple(seeds)
    except TypeError:
        raise ExerciseError(f"{eid}: seeds={seeds!r}; give a tuple of seeds, e.g. seeds=(0, 1, 2)") from None
    if not seeds:
        raise ExerciseError(f"{eid}: seeds=() checks nothing (no run, so nothing could fail); give at least one "
                            f"seed, e.g. seeds={SEEDS}")
    for s in seeds:
        if isinstance(s, bool) or not (isinstance(s, int) and 0 <= s < _SEED_MAX or s in SCHEDULES):
            raise ExerciseError(f"{eid}: seed {s!r}; a seed is an integer 0 .. 2**63 - 1 or one of "
                                f"{sorted(SCHEDULES)}")
    return seeds


def _unmark(text: str) -> str:
    """A mutated source without the catalog's '// planted: ...' comments (a line that was only that comment
    goes; the code is unchanged)."""
    out = []
    for ln in text.split("\n"):
        cut = _PLANTED.sub("", ln)
        if cut != ln and not cut.strip():
            continue
        out.append(cut)
    return "\n".join(out)


class Solution:
    """An exercise's hint and solution, kept apart: by default the hint (folded) and a line saying where the
    solution is; with reveal=True the solution alone (the diff from the starting lines and its check)."""

    def __init__(self, ex: "Exercise", reveal: bool = False):
        self.ex = ex
        self.reveal = reveal

    def where(self) -> str:
        """Where the solution is, in one sentence."""
        ex = self.ex
        n = ex.solution.count("\n")
        own = (f" It is also the stage's own lines {ex.first_line}–{ex.first_line + n} of src/kernels/{ex.stage}.cu."
               if ex.goal == "correct" else "")
        return f"The solution: ex.reveal() shows it, as a diff from the starting lines, and checks it.{own}"

    def _repr_html_(self) -> str:
        e = html.escape
        if not self.reveal:
            hint = (f'<details class="pe-hint"><summary>Hint: {e(self.ex.title)}</summary><p>{e(self.ex.hint)}</p>'
                    '</details>') if self.ex.hint else ""
            return f'<div class="pe-hint-and-where">{hint}<p class="pe-solution-where">{e(self.where())}</p></div>'
        diff = "\n".join(f'<span class="{"gd" if ln.startswith("-") else "gi" if ln.startswith("+") else ""}">{e(ln)}</span>'
                         for ln in self.ex.solution_diff().split("\n")[2:])
        return (f'<div class="pe-solution"><div class="pe-solution-title">Solution: {e(self.ex.title)}</div>'
                f'<div class="highlight-diff"><div class="highlight"><pre>{diff}</pre></div></div>'
                f'{self.ex.check(self.ex.solution)._repr_html_()}</div>')

    def __repr__(self) -> str:
        if not self.reveal:
            return (f"Hint: {self.ex.hint}\n" if self.ex.hint else "") + self.where()
        return self.ex.solution_diff()


# ---- the grade ----------------------------------------------------------------------------------------

@dataclass
class Grade:
    """What one check found: whether it compiled, each seed's simulated run, the verdict and why."""

    exercise: str
    stage: str
    passed: bool
    verdict: str
    compiled: str = ""                 # "" if it compiled, else the compiler's first error line
    runs: list = field(default_factory=list)   # pelib.sim.runs.SimRun per seed run
    exports: dict = field(default_factory=dict)
    predicted: str = ""
    evidence: str = ""

    def as_row(self) -> dict:
        return {"exercise": self.exercise, "passed": "yes" if self.passed else "no", "verdict": self.verdict}

    def table(self, *, beside_verdict: bool = False) -> Table:
        """The steps, each run's words whole; beside_verdict (the page, which prints the verdict above the
        table): a run whose words the verdict already holds says so instead of repeating them."""
        rows = [{"step": "compile (NVRTC)", "result": "compiled" if not self.compiled else f"failed: {self.compiled}"}]
        for r in self.runs:
            said = _said(r)
            if beside_verdict and r.outcome != "ok" and said in self.verdict:
                said = f"{r.outcome}: in full in the verdict above"
            rows.append({"step": f"simulate, seed {r.seed}", "result": said})
        if self.exports:
            rows.append({"step": "exports", "result": ", ".join(f"{k} = {v}" for k, v in self.exports.items())})
        rows.append({"step": "predicted time", "result": self.predicted})
        return Table(rows, f"{self.exercise}: {'passed' if self.passed else 'not yet'} — {self.evidence}")

    def _repr_html_(self) -> str:
        cls = "pe-grade pe-grade-pass" if self.passed else "pe-grade pe-grade-fail"
        head = ("Passed: " if self.passed else "Not yet: ") + self.verdict
        return f'<div class="{cls}"><div class="pe-grade-verdict">{html.escape(head)}</div>{self.table(beside_verdict=True)._repr_html_()}</div>'

    def __repr__(self) -> str:
        return ("PASSED: " if self.passed else "NOT YET: ") + self.verdict + "\n" + repr(self.table())


def _said(run) -> str:
    """One line for a simulated run: what the simulator said, file paths cut to the stage's name."""
    from .views import sim  # a view's wording of a run; pelib.views imports nothing from here

    if run.outcome == "ok":
        return f"verified against torch ({run.n:,} outputs), no deadlock, hazard or misuse" if run.n else "verified"
    return sim.clean(sim._said(run, whole=True))   # a verdict is never cut


def _price(stage: Stage) -> str:
    """The edited stage's predicted time, where this tree has the timing model (pelib.predict, a
    device='predict' run of Stage); until then, a line saying so."""
    from . import stage as _stage  # the device list says whether Stage.run can predict in this tree

    if "predict" not in getattr(_stage, "DEVICES", ()):
        return "not in this tree yet (pelib.predict: pelib.predict.predict will price the edit here)"
    from .predict import model, price  # the timing model, loaded only for an edit that passed
    p = model.predict(stage, "h200" if stage.arch.startswith("sm_90") else "b200", tiles=price.TILES)
    return f"{p.ms:.4f} ms on the full problem; {p.sentence} ({p.evidence})"


_COMPILER_LINE = re.compile(r"\(\d+\): (?:catastrophic )?error")


def compiler_error(log: str, stage: str | None = None) -> str:
    """The compiler's own first error line, 'fp8/01_cta2.cu(186): error: identifier "x" is undefined', its
    file cut to the stage's name (the line number is the reader's: the edited copy keeps the file's lines),
    with how many more errors followed; where the log has no such line, its first line that says error."""
    from .views import sim  # the report's path shortening, shared with the simulator's text

    lines = [ln.strip() for ln in str(log).splitlines() if ln.strip()]
    errs = [ln for ln in lines if _COMPILER_LINE.search(ln)]
    if errs:
        more = f" (and {len(errs) - 1} more error{'s' if len(errs) > 2 else ''})" if len(errs) > 1 else ""
        said = sim.clean(errs[0])
        if stage:   # the edited copy is compiled from a temporary folder: name it as the reader knows it
            said = re.sub(rf"^(?:\S*/)?{re.escape(Path(stage).name)}\.cu\(", f"{stage}.cu(", said)
        return said + more
    first = next((ln for ln in lines if "error" in ln.lower() and "NVRTC_ERROR" not in ln), None)
    return sim.clean(first or (lines[0] if lines else "the compiler said nothing"))


def grade(ex: Exercise, text: str, seeds=SEEDS, price: bool = False) -> Grade:
    """Grade one whole edited stage file for exercise `ex` (see Exercise.check)."""
    from .sim import runs as sim_runs  # the simulator's runs, cached by content
    from .views import sim  # a view's wording of a run

    seeds = tuple(seeds)
    if not seeds:   # a grade over no run would pass having simulated nothing
        raise sim_runs.SimRunError(f"{ex.id}: seeds=() grades nothing; pass at least one seed (the default: {SEEDS})")
    original = ex._original()
    mut = ex.mutation
    if text == original:
        stage = Stage(ex.stage, ex.defines)
        cm = None
    else:
        patch = Mutation(f"exercise-{ex.id}", ex.stage, (P(original, text),), "the reader's edit", "wrong",
                         defines=ex.defines, problem=mut.problem)
        cm = cat.patched(Stage(ex.stage, ex.defines), patch)
        stage = cm.__enter__()
    ev = f"{evidence_label(Stage(ex.stage).build)}; {evidence.simulated()}"
    try:
        try:
            b = stage.build
        except _build.BuildError as e:
            said = compiler_error(str(e), ex.stage)
            return Grade(ex.id, ex.stage, False, f"it does not compile: {said}", compiled=said, evidence=ev)
        exported = {k: b.exports.get(k) for k in ex.exports}
        label = "" if cm is None else f"exercise:{ex.id}@{hashlib.sha256(text.encode()).hexdigest()[:16]}"
        runs = []
        for k in seeds:
            r = sim_runs.simulate(stage, seed=k, problem=mut.problem or None, mutation=label)
            runs.append(r)
            if r.outcome != "ok":
                break
        g = Grade(ex.id, ex.stage, False, "", runs=runs, exports=exported, evidence=ev,
                  predicted="not priced: the edited stage did not pass")
        bad = next((r for r in runs if r.outcome != "ok"), None)
        if ex.goal == "report":
            if bad is None:
                g.verdict = f"the edited stage still verifies on seeds {', '.join(map(str, seeds))}: make the change"
            else:
                ok, why = cat.matches(mut, sim_runs.outcome(bad))
                g.passed = ok
                g.verdict = (f"the simulator names it: {_said(bad)}" if ok else
                             f"a different report than the one the exercise is about: {why[:300]}")
            return g
        if bad is not None:
            g.verdict = f"seed {bad.seed}: {_said(bad)}"
            return g
        wrong = {k: v for k, v in exported.items() if v != ex.exports[k]}
        if wrong:
            g.verdict = "it verifies, but the build exports " + ", ".join(
                f"{k} = {v} (the exercise asks for {ex.exports[k]})" for k, v in wrong.items())
            return g
        g.passed = True
        g.verdict = f"compiled, verified against torch on seeds {', '.join(str(r.seed) for r in runs)}, no report"
        g.predicted = _price(stage) if price else "not asked (check(..., price=True) prices it on the full problem)"
        return g
    finally:
        if cm is not None:
            cm.__exit__(None, None, None)


# ---- the mistakes only the exercises plant (the same form as pelib.sim.catalog's) -----------------------

M = Mutation
OWN = (
    M("ex-fp8-00-comb-next-patch", "fp8/00_ws_cta1",
      (P("const u16* comb_ptr = comb + (u64)comb_row(m) * N + tile.n0;",
         "const u16* comb_ptr = comb + (u64)comb_row(m + 1) * N + tile.n0;"),),
      "the epilogue adds the next patch's comb row", "wrong"),
    M("ex-fp8-04-lane-quarter", "fp8/04_independent_polling",
      (P("const int sub = warp % 4;", "const int sub = (warp - 2) % 4;"),),
      "epilogue warp w reads TMEM lanes 32*((w-2)%4), not its own quarter 32*(w%4)", "misuse", site="quarter"),
    M("ex-fp8-05-fifth-warp-same-half", "fp8/05_epi_warps",
      (P("drain<TN / 2, TN>(t_row, comb_ptr, out_ptr);  // the 5th / 6th warp: the second half",
         "drain<0, TN / 2>(t_row, comb_ptr, out_ptr);  // the 5th / 6th warp: the second half"),),
      "the fifth warp drains the same half of its lane quarter as warp 2", "wrong"),
    M("ex-fp8-06-full-wait-parity", "fp8/06_stages",
      (P("mbarrier_wait_parity(&full[s], phase, 2);  // bytes from both CTAs",
         "mbarrier_wait_parity(&full[s], phase ^ 1, 2);  // bytes from both CTAs"),),
      "the MMA thread waits on full[s] with the producer's parity: a fresh barrier passes at once",
      "hazard", tags=(2,), site="tcgen05.mma reads", also=("deadlock",),
      why="the first wait passes before the slot's bytes land, so the MMA reads a slot that a TMA load is still "
          "writing (a hazard, found by happens-before); a schedule that lands the bytes first shows the ring's "
          "phases falling out of step instead (a blocked wait at tag 2)"),
    M("ex-fp8-07-staging-column", "fp8/07_smem_staged_epilogue",
      (P("stage_put<S>(stage_buf, lane, c - C0 + 8 * v, o);", "stage_put<S>(stage_buf, lane, c + 8 * v, o);"),),
      "Phase 1 writes a split warp's columns at their tile column, not at their place in its buffer", "wrong"),
    M("ex-fp8-09-ring-depth", "fp8/09_persistent_megakernel",
      (P("#define NUM_STAGES 4 ", "#define NUM_STAGES 2 "),), "the ring two slots deep", "wrong"),
)
_OWN = {m.id: m for m in OWN}


def _own(mid: str) -> Mutation:
    return _OWN[mid]


# ---- the exercises, in the book's order ---------------------------------------------------------------

EXERCISES: tuple[Exercise, ...] = (
    Exercise("how-dealloc-early", "how_we_know", "free TMEM only after the last read",
             "In this copy the MMA warp frees the tensor memory as soon as it has issued its last MMA and commit. "
             "Find the line the simulator objects to: the kernel already frees TMEM where no thread can still "
             "read it.",
             "fp8-00-dealloc-before-last-read", ("tcgen05_commit<CG>(smem_u32(mma_done));", "// ---- epilogue: warp w reads"),
             hint="Who still reads TMEM after the MMA warp's last commit?"),
    Exercise("nvfp4-00-full-parity", "nvfp4_single_stage", "the K loop's wait",
             "Stage 00 waits for each K tile's bytes on one mbarrier. In this copy the wait passes too early from "
             "the second K tile on. Find the line.",
             "nvfp4-00-full-wait-parity-fixed", ("// ---- K loop, one thread", "mbarrier_wait_parity(mma_done, kt & 1"),
             hint="An mbarrier's phase flips each time it completes: which parity does K tile kt wait for?"),
    Exercise("nvfp4-01-expect-tx", "nvfp4_pipelined", "the bytes a stage expects",
             "The producer announces how many bytes each ring slot will receive. This copy announces too few: the "
             "simulator reports the transaction count going below zero. Fix the count.",
             "nvfp4-01-expect-tx-sf-short", ("PE_DEVICE void load_ktile(", "tma_load_2d(stage + OFF_B"),
             hint="Which boxes does one slot's load deliver?"),
    Exercise("nvfp4-04-split-k-order", "nvfp4_beyond_lab", "the order of the split-K reduction",
             "In stage 04 the CTAs of a cluster push their partial accumulators into rank 0's shared memory and "
             "rank 0 adds them. The reduction looks as if it needs no barrier: rank 0 only reads its own shared "
             "memory. Take out the cluster barrier between the pushes and the reduction and see what the "
             "simulator says.",
             "nvfp4-04-reduce-before-partials-arrive",
             ("  cluster_wait();             // every peer has started", "if (rank == 0) store_tile_reduced("),
             goal="report",
             hint="What makes a peer's st.shared::cluster happen before rank 0's load of the same word?"),
    Exercise("fp8-problem-comb-row", "fp8_problem", "which comb row",
             "Each output row m adds the positional-embedding row of its patch position. This copy of stage 00 "
             "adds the wrong row; the output is wrong on every seed. Find it.",
             _own("ex-fp8-00-comb-next-patch"), ("const int sub = warp % 4;", "const u16* comb_ptr"),
             hint="Row m of the output is patch m of the batch: its position is m mod 196."),
    Exercise("fp8-ws-producer-parity", "fp8_warp_specialized", "the producer's first wait",
             "The producer's first wait on each empty barrier uses the wrong parity, and the kernel deadlocks. "
             "Find it.",
             "fp8-00-empty-first-wait-parity0", ("// ---- producer: one thread issues every TMA load", "mbarrier_arrive_expect_tx"),
             hint="A freshly initialised mbarrier is in phase 0: a wait for parity 1 passes at once."),
    Exercise("fp8-ws-multicast", "fp8_cta_pair", "who hears that a slot is free",
             "In the 2-CTA stage the leader's commit frees each ring slot. In this copy only the leader hears it; "
             "the peer's producer waits forever. Fix the commit.",
             "fp8-01-commit-without-multicast", ("tcgen05_mma_f8f6f4<CG>", "tcgen05_commit_multicast<CG>(smem_u32(&empty[s])"),
             hint="The mask's bit i names CTA rank i of the cluster."),
    Exercise("fp8-tmem-lane-quarter", "fp8_reading_tmem", "which lanes a warp may read",
             "Every epilogue warp of stage 04 reads its own 32 TMEM lanes. This copy computes the lane quarter from "
             "the epilogue warp's index instead of its warp number. Find why the simulator refuses it.",
             _own("ex-fp8-04-lane-quarter"), ("const int sub =", "const u32 t_row"),
             hint="A warp may access only the lanes 32 * (warp % 4) to + 31 (PTX ISA, tcgen05 access restrictions)."),
    Exercise("fp8-epi-fifth-warp", "fp8_epilogue_warps", "the fifth warp's columns",
             "With five epilogue warps, warps 2 and 6 share lane quarter 2 and split its columns. In this copy both "
             "take the same half; half of those rows are never written. Fix the split.",
             _own("ex-fp8-05-fifth-warp-same-half"), ("if (NUM_EPI_WARPS == 4 || !epi_shares(warp))", "the 5th / 6th warp"),
             hint="The exported column map says which columns warp 6 drains."),
    Exercise("fp8-stages-full-parity", "fp8_pipeline_stages", "the MMA's wait",
             "The MMA thread waits on full[s] before it reads slot s. In this copy it waits for the parity the "
             "producer's empty wait uses: its first waits pass before any byte has landed, so the MMA reads a slot "
             "the TMA is still writing, and later the ring's phases fall out of step. Find the wait.",
             _own("ex-fp8-06-full-wait-parity"), ("// ---- MMA issuer", "mbarrier_wait_parity(&full[s]"),
             hint="The consumer waits for phase `lap & 1` to complete; the producer's wait is the one that starts at 1."),
    Exercise("fp8-staged-column", "fp8_staged_epilogue", "where a half-row goes in the buffer",
             "Phase 1 writes each 8-column group into the warp's staging buffer. For a warp that drains the second "
             "half of its rows this copy writes past what Phase 2 copies out. Fix the column.",
             _own("ex-fp8-07-staging-column"), ("for (int v = 0; v < TMEM_LD_COLS / 8; ++v) {", "stage_put<S>(stage_buf"),
             hint="Phase 2 copies columns 0 .. C1 - C0 of the buffer to columns C0 .. C1 of the tile."),
    Exercise("fp8-persistent-acc-phase", "fp8_persistent", "the accumulator's phase",
             "The MMA warp waits for an accumulator buffer to be drained before it reuses it. This copy takes the "
             "phase from the tile count's parity rather than from its lap over the two buffers; the kernel "
             "deadlocks on its third tile. Fix it.",
             "fp8-08a-acc-phase-from-tile-parity", ("const u32 buf = sched.acc_buf();", "mbarrier_wait_parity(&acc_empty[buf]"),
             hint="Buffer b is used by tiles b, b + 2, b + 4, ...: its lap is the tile's turn / 2."),
    Exercise("fp8-persistent-early-release", "fp8_persistent", "release the accumulator one barrier earlier",
             "Stage 09 releases each accumulator right after the warp's last TMEM load has completed "
             "(tcgen05.wait::ld). Move the release one step earlier, before that wait, and see what the "
             "simulator says.",
             "fp8-09-acc-released-before-wait-ld", ("tcgen05_ld_32x32b_x32(t_row + c, acc);", "stage_copy_out<H, PHASE2_UNROLL>(buf1"),
             goal="report",
             hint="Which asynchronous operation may still read the TMEM the MMA warp is about to overwrite?"),
    Exercise("seeing-ring-restart", "seeing_inside", "a ring that restarts at every tile",
             "A persistent producer keeps its ring position across tiles; the MMA warp keeps its own. This copy "
             "restarts the producer's at every tile. Read the blocked waits' tags in the report, then fix it.",
             "fp8-08a-ring-restarted-per-tile", ("// ---- producer: one thread issues every TMA load", "mbarrier_wait_parity(&empty[s]"),
             hint="Where is the producer's PipelineState declared?"),
    Exercise("gonogo-ring-depth", "gonogo_model", "a two-slot ring",
             "The equilibrium model says how much the ring depth matters once the epilogue limits the tile. Make "
             "stage 09's ring two slots deep and check that the protocol still holds.",
             _own("ex-fp8-09-ring-depth"), ("#ifndef NUM_STAGES", "#endif"), goal="build",
             exports={"pipeline_stages": 2},
             hint="The depth is one define."),
    Exercise("gonogo-f24-staging", "gonogo_proposals", "F24: reuse of a staging buffer",
             "F24's epilogue stores each staging buffer with a TMA store. This copy writes buffer 0 again before "
             "the previous tile's store has read it. Restore the wait.",
             "fp8-f24-staging-reused-before-store-read", ("// Buffer 0 is written again only once", "#pragma unroll"),
             hint="A TMA store reads shared memory asynchronously: cp.async.bulk.wait_group.read waits for that read."),
    Exercise("tma-store-exit", "tma_store_epilogue", "leaving before the store has read",
             "The TMA-store epilogue hands the staging tile to one bulk store. This copy lets the CTA exit "
             "while the store may still read its shared memory. Fix the end of the kernel.",
             "nvfp4-02-exit-before-store-read", ("PE_DEVICE void store_tile(", "}  // store_tile"),
             hint="What does cp.async.bulk.wait_group.read 0 wait for?"),
    Exercise("hopper-producer-parity", "hopper_pipeline", "the Hopper producer's first wait",
             "The Hopper twin's producer waits for an empty slot before each load. In this copy the first wait "
             "uses parity 0 and the kernel deadlocks. Find it.",
             "sm90-01-empty-first-wait-parity0", ("for (int kb = 0; kb < num_kb; ++kb) {", "mbarrier_wait_parity_nocall(&empty[s]"),
             hint="The same rule as on Blackwell: a fresh barrier passes a wait for parity 1."),
    Exercise("hopper-pingpong-turn", "hopper_persistent", "whose turn",
             "In the ping-pong stage two consumer warpgroups take turns on the tensor cores. In this copy both wait "
             "for their turn with the same parity, so neither goes first. Fix the parities.",
             "sm90-03c-turn-parity-same", ("// Wait for the turn:", "mbarrier_wait_parity_nocall(&turn[wg]"),
             hint="Warpgroup 0 must pass its first turn wait at once, warpgroup 1 must wait for it."),
    Exercise("hopper-cluster-release", "hopper_pipeline", "releasing a slot in both CTAs",
             "With a cluster of two, the B tile is multicast into both CTAs, so a slot is free only when both CTAs' "
             "consumers are done with it. This copy releases a tile's last slot in the leader only. Fix it.",
             "sm90-02-last-release-leader-only", ("wgmma_wait_group<0>();", "#endif"),
             hint="Which CTAs did the multicast fill?"),
    Exercise("hopper-staging-reuse", "hopper_pipeline", "staging reused too early",
             "The staged epilogue stores each tile's staging buffer with TMA stores. This copy writes the buffer "
             "for the next tile before the previous stores have read it. Restore the wait.",
             "sm90-03-staging-reused-before-store-read", ("u8* stg = smem + SMEM_C_OFF", "named_barrier_sync(EPI_BARRIER + wg, 128);"),
             hint="cp.async.bulk.wait_group.read<0> before st.shared into the buffer."),
)
BY_ID = {e.id: e for e in EXERCISES}
if len(BY_ID) != len(EXERCISES):
    raise ExerciseError("duplicate exercise ids")


def get(eid: str) -> Exercise:
    """The exercise with this id (ExerciseError listing them otherwise)."""
    if eid not in BY_ID:
        raise ExerciseError(f"no exercise {eid!r}; have {sorted(BY_ID)}")
    return BY_ID[eid]


def of_chapter(chapter: str) -> list[Exercise]:
    return [e for e in EXERCISES if e.chapter == chapter]


def table(chapter: str | None = None) -> Table:
    """The exercises (of one chapter or all): id, chapter, stage, what the simulator must see."""
    rows = [{"exercise": e.id, "chapter": e.chapter, "stage": e.stage, "title": e.title,
             "goal": "make it verify" if e.goal == "correct" else "make the simulator name it"}
            for e in EXERCISES if chapter in (None, e.chapter)]
    return Table(rows, "Exercises the simulator grades (pelib.exercises)", descriptive=True)
