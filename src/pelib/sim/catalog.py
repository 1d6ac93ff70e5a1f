"""Planted bugs: protocol and indexing mistakes a kernel author really makes, as data, each with the report
it must produce.

A mutation is a source patch applied at test time (never a committed variant): an exact `find` -> `replace`
on a stage file or on a common/ building block, where `find` must occur exactly once (so the catalog
cannot silently rot when a stage changes), plus a one-line description and the expected report:

    deadlock   the simulator's deadlock lists a blocked wait at one of `tags` (the stage's wait tags, the
               third argument of mbarrier_wait_parity); on a GPU the bounded wait traps, prints its tag
               (PE_WAIT_PRINTF) and pelib.launch raises KernelFault; a deadlock no wait tag marks (a warp
               collective such as elect.sync that some lanes never reach) names `site` instead, a word of the
               simulator's deadlock report;
    hazard     a SimHazard whose kind or message names `site` (e.g. a shared-memory write while a TMA
               store still reads it);
    misuse     a SimMisuse whose kind or message names `site` (e.g. a TMEM read outside the warp's lane
               quarter, an mbarrier tx-count underflow);
    wrong      the kernel finishes and its output differs from the reference (on exact-arithmetic inputs:
               differs at all);
    clean      a benign edit: the kernel finishes with no deadlock, hazard or misuse and its output is the
               reference (the simulator must not cry wolf).

A race is a hazard on every seed, including the lazy and eager schedules (pelib.sim.engine.STANDARD_SEEDS): the
simulator orders accesses by happens-before, not by when its asynchronous operations happen to complete.

`gpu` says what an H100 shows for an sm90 mutation ("deadlock": a bounded wait traps; "wrong"; "illegal-address":
the launch faults with CUDA_ERROR_ILLEGAL_ADDRESS; "correct"), or None where the mistake is a race whose effect
on hardware is a matter of timing, or one no H100 run has shown yet (the simulator still reports it; the GPU
proof records what the H100 did, at the simulator's grid).

    with patched(Stage("sm90/01_warp_specialized"), mutation("sm90-empty-first-wait-parity0")) as s:
        s.build          # NVRTC, the patched source
        sim_host.run(s, "sim", inputs=s.inputs("sim", 0, "sim", exact=True))

The planted-bug catalog is data: sim/catalog.yaml beside this module, one entry a mutation with the report it
must produce (mutations() reads it into CATALOG).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .. import build as _build
from ..paths import KERNELS
from ..stage import Stage

KINDS = ("deadlock", "hazard", "misuse", "wrong", "clean")
GPU_SHOWS = ("deadlock", "wrong", "illegal-address", "correct")
# A hang of a mutated stage on a GPU traps in about a second and prints its wait tag (pelib.measure.sweep's
# debug build: the call-free waits of the sm90 stages become the printing ones).
GPU_DEFINES = {"PE_WAIT_PRINTF": 1, "PE_WAIT_LIMIT": 1 << 20}


class CatalogError(ValueError):
    """A mutation does not apply: its find text occurs zero or several times, or it names no file."""


@dataclass(frozen=True)
class Patch:
    """Replace the one occurrence of `find` in `file` (the stage file when None, else a path under
    src/kernels such as 'common/scheduler.cuh') by `replace`."""

    find: str
    replace: str
    file: str | None = None


@dataclass(frozen=True)
class Mutation:
    id: str
    stage: str                       # stage key, e.g. "sm90/01_warp_specialized"
    patches: tuple                   # Patch, ...
    description: str                 # one line: the mistake
    expect: str                      # one of KINDS
    tags: tuple = ()                 # deadlock: wait tags at which a blocked fiber must be reported
    site: str = ""                   # hazard / misuse (or a deadlock without tags): a word of the report
    gpu: str | None = None           # sm90: what an H100 shows (GPU_SHOWS); None: a race
    defines: dict = field(default_factory=dict)
    problem: str = "sim"
    why: str = ""                    # how the mistake becomes the expected report
    also: tuple = ()                 # other reports a schedule may give first, each as real (with `why`):
                                     # ("deadlock",) with `tags`, or another kind

    def __post_init__(self):
        if self.expect not in KINDS:
            raise CatalogError(f"{self.id}: expect={self.expect!r}, one of {KINDS}")
        if self.expect == "deadlock" and not self.tags and not self.site:
            raise CatalogError(f"{self.id}: a deadlock names the wait tags where it shows, or the site of a blocked "
                               "warp collective or barrier that no wait tag marks (elect.sync, bar.sync)")
        if self.expect in ("hazard", "misuse") and not self.site:
            raise CatalogError(f"{self.id}: a {self.expect} names the site (a word of the report)")
        if any(k not in KINDS for k in self.also):
            raise CatalogError(f"{self.id}: also={self.also!r}, each one of {KINDS}")
        if self.gpu is not None and self.gpu not in GPU_SHOWS:
            raise CatalogError(f"{self.id}: gpu={self.gpu!r}, one of {GPU_SHOWS} or None")

    @property
    def family(self) -> str:
        return self.stage.split("/")[0]

    def sources(self) -> dict[str, str]:
        """{file under src/kernels: patched text}, each find asserted to occur exactly once."""
        out: dict[str, str] = {}
        for p in self.patches:
            rel = p.file or f"{self.stage}.cu"
            text = out.get(rel)
            if text is None:
                path = KERNELS / rel
                if not path.is_file():
                    raise CatalogError(f"{self.id}: no file {rel} under src/kernels")
                text = path.read_text()
            n = text.count(p.find)
            if n != 1:
                raise CatalogError(f"{self.id}: the find text occurs {n} times in {rel} (must be once; the stage "
                                   f"changed? update the catalog): {p.find[:80]!r}")
            out[rel] = text.replace(p.find, p.replace)
        return out


def patch_hash(m: "Mutation") -> str:
    """sha256 over a mutation's patches and defines: what a recorded run of it must have used."""
    h = hashlib.sha256(repr((m.stage, [(p.file, p.find, p.replace) for p in m.patches],
                             sorted(m.defines.items()))).encode())
    return h.hexdigest()


def P(find: str, replace: str, file: str | None = None) -> Patch:
    return Patch(find, replace, file)


# ---------------------------------------------------------------------------------------------------
# The catalog: data, in catalog.yaml beside this file
# ---------------------------------------------------------------------------------------------------
def mutations(entries) -> tuple[Mutation, ...]:
    """Mutations from a YAML table's entries (this catalog's catalog.yaml; pelib.exercises' own mistakes in
    exercises.yaml): each entry the fields of a Mutation (a field left out at its default), its patches as
    mappings of find, replace and (for a common/ building block) file."""
    out = []
    for d in entries:
        d = dict(d, patches=tuple(Patch(**p) for p in d["patches"]))
        out.append(Mutation(**{k: tuple(v) if k in ("tags", "also") else v for k, v in d.items()}))
    return tuple(out)


CATALOG: tuple[Mutation, ...] = mutations(yaml.safe_load(Path(__file__).with_name("catalog.yaml").read_text()))

def index(items, duplicate: Exception) -> dict:
    """{item.id: item} of a table of entries (mutations, pelib.exercises' exercises); `duplicate` is raised
    where two entries share an id."""
    by_id = {x.id: x for x in items}
    if len(by_id) != len(items):
        raise duplicate
    return by_id


def lookup(by_id: dict, key: str, what: str, error: type = KeyError):
    """by_id[key], or `error` naming the ids there are ("no mutation 'x'; have [...]")."""
    if key not in by_id:
        raise error(f"no {what} {key!r}; have {sorted(by_id)}")
    return by_id[key]


BY_ID = index(CATALOG, CatalogError("duplicate mutation ids in the catalog"))


def mutation(mid: str) -> Mutation:
    return lookup(BY_ID, mid, "mutation")


def of_family(family: str) -> list[Mutation]:
    return [m for m in CATALOG if m.family == family]


# ---------------------------------------------------------------------------------------------------
# A stage on a patched file
# ---------------------------------------------------------------------------------------------------
class PatchedStage(Stage):
    """`base` built from a patched copy of its file in a temporary folder. The copy sits alone in that
    folder, which NVRTC searches first (pelib.build: the stage's folder, then src/kernels), so a patched
    building block (folder/common/<name>.cuh) shadows src/kernels/common/<name>.cuh and every other
    include resolves as for the original."""

    def __init__(self, base: Stage, path: Path, mutation: Mutation):
        super().__init__(base.path, base.defines)
        self.path = path
        self.base = base
        self.mutation = mutation

    def __repr__(self) -> str:
        return f"PatchedStage({self.key!r}, {self.mutation.id!r})"

    @property
    def label(self) -> str:
        return f"{super().label} [{self.mutation.id}]"

    def with_defines(self, **defines) -> "PatchedStage":
        return PatchedStage(self.base.with_defines(**defines), self.path, self.mutation)

    def without_defines(self, *names: str) -> "PatchedStage":
        if not any(n in self.defines for n in names):
            return self
        return PatchedStage(self.base.without_defines(*names), self.path, self.mutation)


MUTATIONS_DIR = Path(tempfile.gettempdir()) / "pelib-mutations"


def _write_if_changed(path: Path, text: str) -> None:
    """Write atomically (a temporary file renamed over `path`), only where the text differs."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def patched(stage: Stage | str, mut: Mutation | str):
    """A PatchedStage on a copy of `stage`'s file with `mut` applied. The copy lives in a folder named by
    the mutation and a hash of the patched text (under the system's temporary folder), so every use of one
    mutation builds the same path and the NVRTC and simulator caches find their builds again."""
    mut = mutation(mut) if isinstance(mut, str) else mut
    stage = Stage(stage, mut.defines) if isinstance(stage, str) else stage
    if stage.key != mut.stage:
        raise CatalogError(f"{mut.id} patches {mut.stage}, not {stage.key}")
    srcs = mut.sources()
    top_text = srcs.pop(f"{mut.stage}.cu", stage.path.read_text())
    for rel in srcs:
        if not rel.startswith("common/"):
            raise CatalogError(f"{mut.id}: a patched header must be a common/ building block, not {rel}")
    h = hashlib.sha256(repr((top_text, sorted(srcs.items()))).encode()).hexdigest()[:16]
    folder = MUTATIONS_DIR / f"{mut.id}-{h}"
    top = folder / stage.path.name
    _write_if_changed(top, top_text)
    for rel, text in srcs.items():
        _write_if_changed(folder / rel, text)
    yield PatchedStage(stage, top, mut)


def stage_of(mut: Mutation | str, **defines) -> Stage:
    mut = mutation(mut) if isinstance(mut, str) else mut
    return Stage(mut.stage, {**mut.defines, **defines})


def compile_check(mut: Mutation | str, **defines) -> _build.Build:
    """NVRTC-build the mutated stage for its arch (cached like every build); BuildError if it does not."""
    with patched(stage_of(mut, **defines), mut) as s:
        return s.build


# ---------------------------------------------------------------------------------------------------
# Outcomes: what a run showed, and whether it is what the catalog expects
# ---------------------------------------------------------------------------------------------------
_TAG_RE = re.compile(r"mbarrier wait timed out after \d+ tries: tag=(\d+)")
_SIM_TAG_RE = re.compile(r"\(tag (\d+)\)")


@dataclass
class Outcome:
    """What one run of a (mutated) stage showed: kind in deadlock | hazard | misuse | wrong | correct |
    fault (a GPU trap without a printed tag) | hang | error; the wait tags a deadlock blocked at; the
    report's text; the number of wrong elements and the output's sha256 where it finished."""

    kind: str
    tags: tuple = ()
    detail: str = ""
    n_bad: int | None = None
    sha256: str | None = None
    found: dict = field(default_factory=dict)   # simulator: {"deadlock"|"hazard"|"misuse": [report lines]}

    def as_dict(self) -> dict:
        d = {"kind": self.kind, "tags": list(self.tags), "detail": self.detail[:2000], "n_bad": self.n_bad,
             "sha256": self.sha256}
        if self.found:
            d["found"] = {k: v[:20] for k, v in self.found.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Outcome":
        return cls(d["kind"], tuple(d.get("tags") or ()), d.get("detail", ""), d.get("n_bad"), d.get("sha256"),
                   dict(d.get("found") or {}))


def gpu_tags(text: str) -> tuple[int, ...]:
    """The wait tags printed by bounded waits that timed out (common/mbarrier.cuh pe_wait_timeout)."""
    return tuple(sorted({int(t) for t in _TAG_RE.findall(text)}))


def sim_tags(lines) -> tuple[int, ...]:
    """The wait tags of a simulator deadlock's blocked threads ("mbarrier wait (tag N) on ...")."""
    return tuple(sorted({int(t) for x in lines for t in _SIM_TAG_RE.findall(str(x))}))


def matches(mut: Mutation, out: Outcome) -> tuple[bool, str]:
    """Whether a simulator outcome is the report the catalog expects: the earliest problem is of the expected
    kind AND names the site (a blocked wait at one of the tags; a hazard or misuse line containing the site
    word, alternatives separated by '|'), and why not."""
    kinds = {"correct" if k == "clean" else k for k in (mut.expect, *mut.also)}
    if out.kind not in kinds:
        return False, f"expected {' or '.join(sorted(kinds))}, got {out.kind}: {out.detail[:400]}"
    if out.kind == "deadlock":
        if mut.tags and not set(out.tags) & set(mut.tags):
            return False, f"deadlock at tags {sorted(out.tags)}, expected one of {list(mut.tags)}"
        if not mut.tags and not any(w.lower() in out.detail.lower() for w in mut.site.split("|")):
            return False, f"no blocked {mut.site!r} in the deadlock: {out.detail[:400]}"
    elif out.kind in ("hazard", "misuse"):
        lines = out.found.get(mut.expect) or [out.detail]
        words = [w.lower() for w in mut.site.split("|")]
        if not any(w in x.lower() for x in lines for w in words):
            return False, f"no {out.kind} line names {mut.site!r}: {out.detail[:400]}"
    return True, ""


def agrees(sim: Outcome, gpu: Outcome) -> tuple[bool, str]:
    """Whether the simulator and the GPU tell the same story about one mutation: both deadlock and every
    tag the GPU printed is a wait the simulator found blocked; or both finish with wrong outputs and the
    same bytes (exact inputs: a deterministic mistake gives one output); or both correct."""
    if gpu.kind in ("fault", "hang", "deadlock") and sim.kind == "deadlock":
        if gpu.tags and not set(gpu.tags) <= set(sim.tags):
            return False, f"GPU trapped at tags {list(gpu.tags)}, the simulator blocked at {list(sim.tags)}"
        return True, "both deadlock" + (f" (GPU tags {list(gpu.tags)} among the simulator's {list(sim.tags)})"
                                        if gpu.tags else " (GPU printed no tag)")
    if gpu.kind == sim.kind == "wrong":
        if gpu.sha256 and sim.sha256 and gpu.sha256 != sim.sha256:
            return False, "both wrong, but the wrong outputs differ"
        return True, f"both wrong, same output bytes ({gpu.n_bad} wrong elements)"
    if gpu.kind == sim.kind == "correct":
        return True, "both correct"
    if gpu.kind == "fault" and "ILLEGAL_ADDRESS" in gpu.detail and sim.kind == "misuse" and "outside" in sim.detail:
        return True, "both stop at an access outside the CTA's shared memory (GPU: CUDA_ERROR_ILLEGAL_ADDRESS)"
    if gpu.kind == "wrong" and sim.kind == "misuse" and "out-of-bounds global" in sim.detail:
        # a store past a tensor is not stopped by a GPU: it lands in whatever memory follows (another tensor)
        return True, (f"the simulator stops at the out-of-bounds global store; the GPU wrote past the tensor "
                      f"and the run came out wrong ({gpu.n_bad} elements)")
    return False, f"simulator: {sim.kind}, GPU: {gpu.kind}"


def gpu_expected(mut: Mutation, gpu: Outcome) -> bool:
    """The GPU showed what the catalog says an H100 shows (a KernelFault from a trapped wait is a deadlock)."""
    if mut.gpu == "deadlock":
        return gpu.kind in ("fault", "deadlock") and "ILLEGAL_ADDRESS" not in gpu.detail
    if mut.gpu == "illegal-address":
        return gpu.kind == "fault" and "ILLEGAL_ADDRESS" in gpu.detail
    return mut.gpu is not None and gpu.kind == mut.gpu
