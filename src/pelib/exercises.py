"""Exercises the simulator grades: the reader edits a few lines of a copy of a stage, and one call
compiles the edited stage (NVRTC), runs it on the simulator at three seeds, verifies it against torch
and says what happened.

    ex = exercises.get("fp8-ws-producer-parity")
    ex                          # the task and the lines to edit (ex.start), with their file line numbers
    ex.check(ex.start)          # the starting point: not yet, and the simulator's report
    ex.check(my_lines)          # the reader's version of those lines (or a path to a whole edited copy)

Each exercise starts from a planted mistake (pelib.sim.catalog's, or one of exercises.yaml's own in the same
form: a source patch whose find text occurs exactly once) and its solution is the stage's own lines: the
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

import yaml

from . import build as _build, evidence
from .sim import catalog as cat
from .facts import Table, evidence_label
from .sim.catalog import P, Mutation
from .stage import Stage
from .stages import line_span, resolve

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
        a, b = line_span(text.split("\n"), *region)
        if a is None:
            raise ExerciseError(f"{label}: no line contains {region[0]!r} (the stage changed? update the exercise)")
        if b is None:
            raise ExerciseError(f"{label}: no line after {region[0]!r} contains {region[1]!r}")
        return a, b

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


# ---- the data: exercises.yaml beside this module ------------------------------------------------------
# its mistakes: those only the exercises plant, in the form of pelib.sim.catalog's; its exercises in the
# book's order, each naming its mistake by id (one of those, else a pelib.sim.catalog mutation)

_DATA = yaml.safe_load(Path(__file__).with_name("exercises.yaml").read_text())
OWN = cat.mutations(_DATA["mistakes"])
_OWN = {m.id: m for m in OWN}
EXERCISES: tuple[Exercise, ...] = tuple(
    Exercise(**dict(d, mistake=_OWN.get(d["mistake"], d["mistake"]), region=tuple(d["region"])))
    for d in _DATA["exercises"])
BY_ID = cat.index(EXERCISES, ExerciseError("duplicate exercise ids"))


def get(eid: str) -> Exercise:
    """The exercise with this id (ExerciseError listing them otherwise)."""
    return cat.lookup(BY_ID, eid, "exercise", ExerciseError)


def of_chapter(chapter: str) -> list[Exercise]:
    return [e for e in EXERCISES if e.chapter == chapter]


def table(chapter: str | None = None) -> Table:
    """The exercises (of one chapter or all): id, chapter, stage, what the simulator must see."""
    rows = [{"exercise": e.id, "chapter": e.chapter, "stage": e.stage, "title": e.title,
             "goal": "make it verify" if e.goal == "correct" else "make the simulator name it"}
            for e in EXERCISES if chapter in (None, e.chapter)]
    return Table(rows, "Exercises the simulator grades (pelib.exercises)", descriptive=True)
