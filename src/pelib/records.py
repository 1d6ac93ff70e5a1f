"""The lab notes' measurements as typed records (from book/data/*.yaml).

Every record carries its Source (lab-note file and section); its evidence kind is "recorded". The
records are checked against themselves (sums, shares, TFLOPS from ms) in pelib.records_audit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import yaml

from pelib import paths

EVIDENCE = "recorded"
FP8_FLOPS = 2 * 928256 * 768 * 768  # 2·M·N·K of the SigLIP2 patch embed
NVFP4_SHAPES = ("k16384", "k7168", "k2048")

FILES = {
    "history": "fp8_history.yaml",
    "experiments": "fp8_experiments.yaml",
    "ncu": "fp8_ncu.yaml",
    "smem": "fp8_smem.yaml",
    "w1": "fp8_w1_clock64.yaml",
    "proposals": "fp8_proposals.yaml",
    "nvfp4": "nvfp4_log.yaml",
    "tma_store": "tma_store_pitch.yaml",
    "inconsistencies": "inconsistencies.yaml",
    "notes": "lab_notes.yaml",
}


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    """The raw YAML of one data file (by short name or file name)."""
    fname = FILES.get(name, name)
    path = paths.DATA / fname
    if not path.resolve().is_relative_to(paths.DATA.resolve()):   # '../../README.md' read any YAML-ish file
        raise ValueError(f"record name {name!r} points outside {paths.DATA}: name a file there "
                         f"({', '.join(sorted(p.name for p in paths.DATA.glob('*.yaml')))}) or a short name "
                         f"({', '.join(sorted(FILES))})")
    if not path.exists():
        raise FileNotFoundError(f"no record file {path}; known: {sorted(FILES)}")
    with open(path) as f:
        return yaml.safe_load(f)


# ---------------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """Where a number comes from: a lab-note file and a section of it."""

    note: str
    section: str

    @property
    def label(self) -> str:
        """The evidence label plots and tables print: recorded (<note>)."""
        return f"{EVIDENCE} ({self.note})"

    def __str__(self) -> str:
        return f"{self.note} § {self.section}"


def _src(d: dict | None, note: str | None = None, section: str | None = None) -> Source:
    d = d or {}
    return Source(d.get("note", note), d.get("section", section))


@dataclass(frozen=True)
class HistoryEntry:
    commit: str
    change: str
    ms: float | None
    tflops: float | None
    regs: int | None
    spills: int | None
    approx: bool
    label: str | None
    source: Source


@dataclass(frozen=True)
class KernelState:
    state: str
    ms: float | None
    tflops: float | None
    regs: int | None
    spills: int | None
    label: str | None
    source: Source


@dataclass(frozen=True)
class Reference:
    label: str
    ms: float
    tflops: float | None
    source: Source


@dataclass(frozen=True)
class Experiment:
    id: str
    title: str
    verdict: str
    baseline_ms: float | None
    result_ms: float | None           # midpoint where the note gives a range
    result_range: tuple | None
    baseline_regs: int | None
    result_regs: int | None
    approx: bool
    reason: str | None
    extra: dict
    source: Source

    @property
    def rejected(self) -> bool:
        return self.verdict.upper().startswith(("REJECTED", "IMPOSSIBLE", "6 STAGES REJECTED"))


@dataclass(frozen=True)
class RuledOut:
    id: str | None
    proposal: str
    why: str
    numbers: dict
    source: Source


@dataclass(frozen=True)
class NcuMetric:
    table: str
    metric: str
    baseline: float
    after: float
    delta: float | None
    delta_kind: str | None
    approx: bool
    source: Source


@dataclass(frozen=True)
class SmemComponent:
    name: str
    bytes: int


@dataclass(frozen=True)
class SmemBudget:
    state: str
    components: tuple
    total: int
    sm_limit: int
    headroom_label: str
    source: Source

    @property
    def component_sum(self) -> int:
        return sum(c.bytes for c in self.components)

    @property
    def unaccounted(self) -> int:
        """Bytes of the stated total that no listed component explains."""
        return self.total - self.component_sum

    @property
    def headroom(self) -> int:
        return self.sm_limit - self.total


@dataclass(frozen=True)
class BudgetCategory:
    name: str
    count: int
    pct: float


@dataclass(frozen=True)
class InstructionBudget:
    version: str
    total: int
    categories: tuple
    extra: dict
    source: Source


@dataclass(frozen=True)
class StallRow:
    stall: str
    samples: int
    per_tile: float
    source: Source


@dataclass(frozen=True)
class PhaseTiming:
    phase: str
    cycles: int
    pct: float | None
    of: str
    warp: str
    source: Source


@dataclass(frozen=True)
class WarpPhase1:
    warp: str
    ew: int
    rg: int
    avg: int
    p95: int
    source: Source


@dataclass(frozen=True)
class Equilibrium:
    label: str
    deficit: float
    epi_wait: float | None
    producer: dict
    consumer: dict
    amplification: float | None
    extra: dict
    source: Source


@dataclass(frozen=True)
class StageStep:
    from_stages: int
    to_stages: int
    shape: str
    before_us: float
    after_us: float
    recorded_pct: float
    source: Source


@dataclass(frozen=True)
class StageTime:
    """One (shape, stage count) time from one table of the NVFP4 log."""

    shape: str
    stages: int
    us: float
    table: str
    source: Source


@dataclass(frozen=True)
class SplitK:
    split: int
    shape: str
    base_us: float
    us: float
    recorded_pct: float
    source: Source


@dataclass(frozen=True)
class Attempt:
    name: str
    outcome: str
    label: str
    source: Source


@dataclass(frozen=True)
class EpilogueEstimate:
    variant: str
    operation: str
    cycles: int
    source: Source


# ---------------------------------------------------------------------------------------------
# FP8 loaders
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LabNote:
    """One lab note: an external source (not a file of this repository), its date and what it holds."""

    file: str
    title: str
    date: str
    holds: str


def lab_notes() -> list[LabNote]:
    """The five lab notes the records cite, as book/data/lab_notes.yaml describes them."""
    return [LabNote(**n) for n in load("notes")["notes"]]


def history() -> list[HistoryEntry]:
    """The committed optimization history of the experiment log, in order."""
    h = load("history")["history"]
    src = _src(h["source"])
    return [HistoryEntry(r["commit"], r["change"], r.get("ms"), r.get("tflops"), r.get("regs"),
                         r.get("spills"), bool(r.get("approx", False)), r.get("label"), src) for r in h["rows"]]


def later_states() -> list[KernelState]:
    """States after the experiment log: 5-warp baseline, F18, F19a."""
    return [KernelState(r["state"], r.get("ms"), r.get("tflops"), r.get("regs"), r.get("spills"),
                        r.get("label"), _src(r["source"])) for r in load("history")["later"]]


def headline() -> list[KernelState]:
    return [KernelState(r["label"], r["ms"], r["tflops"], r.get("regs"), r.get("spills"), None, _src(r["source"]))
            for r in load("history")["headline"]]


def cublas() -> list[Reference]:
    """cuBLAS reference times: 0.365 ms GEMM only, 0.835 ms with unfused pos_embed."""
    return [Reference(r["label"], r["ms"], r.get("tflops"), _src(r["source"])) for r in load("history")["cublas"]]


_EXP_KEYS = {"id", "title", "verdict", "baseline_ms", "result_ms", "baseline_regs", "result_regs",
             "approx", "reason", "section"}


def experiments() -> list[Experiment]:
    """F1-F9 of the experiment log."""
    raw = load("experiments")
    out = []
    for r in raw["experiments"]:
        res = r.get("result_ms")
        rng = tuple(res) if isinstance(res, list) else None
        mid = (sum(rng) / 2) if rng else res
        extra = {k: v for k, v in r.items() if k not in _EXP_KEYS}
        out.append(Experiment(r["id"], r["title"], r["verdict"], r.get("baseline_ms"), mid, rng,
                              r.get("baseline_regs"), r.get("result_regs"), bool(r.get("approx", False)),
                              r.get("reason"), extra, Source(raw["note"], r["section"])))
    return out


def experiment(id_: str) -> Experiment:
    for e in experiments():
        if e.id == id_:
            return e
    raise KeyError(f"no experiment {id_}; have {[e.id for e in experiments()]}")


def ruled_out() -> list[RuledOut]:
    r = load("experiments")["ruled_out"]
    src = _src(r["source"])
    return [RuledOut(x.get("id"), x["proposal"], x["why"], x.get("numbers", {}), src) for x in r["rows"]]


def ncu() -> list[NcuMetric]:
    """The ncu A/B tables around SMEM staging (build, stalls, memory, uncoalesced, compare)."""
    raw = load("ncu")
    out = []
    for table in ("build", "stalls", "memory", "uncoalesced", "compare"):
        t = raw[table]
        src = Source(raw["note"], t["section"])
        for r in t["rows"]:
            out.append(NcuMetric(table, r["metric"], r["baseline"], r["after"], r.get("delta"),
                                 r.get("delta_kind"), bool(r.get("approx", False)), src))
    return out


def smem_budget() -> SmemBudget:
    """The SMEM budget table of the experiment log (4 stages, 5 warps, staging)."""
    b = load("smem")["budget"]
    return SmemBudget(b["state"], tuple(SmemComponent(c["name"], c["bytes"]) for c in b["components"]),
                      b["total"], b["sm_limit"], b["headroom_label"], _src(b["source"]))


def staging_f24() -> dict:
    """F24's current and proposed per-warp staging sizes (raw, with source)."""
    return dict(load("smem")["staging_f24"])


def instruction_budgets() -> list[InstructionBudget]:
    """W1's per-tile instruction budgets: the 5-warp baseline (475) and F28's current one (411)."""
    out = []
    for b in load("w1")["instruction_budgets"]:
        cats = tuple(BudgetCategory(c["name"], c["count"], c["pct"]) for c in b["categories"])
        extra = {k: v for k, v in b.items() if k not in ("version", "total", "categories", "source")}
        out.append(InstructionBudget(b["version"], b["total"], cats, extra, _src(b["source"])))
    return out


def w1_stalls() -> list[StallRow]:
    s = load("w1")["w1_stalls"]
    src = _src(s["source"])
    return [StallRow(r["stall"], r["samples"], r["per_tile"], src) for r in s["rows"]]


def phases() -> list[PhaseTiming]:
    """Every clock64 phase number of the notes, each with its own source."""
    return [PhaseTiming(r["phase"], r["cycles"], r.get("pct"), r["of"], r["warp"], _src(r["source"]))
            for r in load("w1")["phases"]]


def phase_range(phase: str) -> tuple[int, int]:
    """(min, max) cycles the notes give for one phase (e.g. 'phase1' -> (4129, 4288))."""
    v = [p.cycles for p in phases() if p.phase == phase]
    if not v:
        raise KeyError(f"no clock64 phase '{phase}'; have {sorted({p.phase for p in phases()})}")
    return min(v), max(v)


def w1_reconciliation() -> dict:
    """The W1 note's clock64 reconciliation: W1 tile phases and W3 epilogue phases (cycles)."""
    sec = "Reconciliation with clock64"
    rows = [p for p in phases() if p.source.section == sec]
    return {"W1": {p.phase: p.cycles for p in rows if p.warp == "W1"},
            "W3": {p.phase: p.cycles for p in rows if p.warp == "W3"}}


def f25_warps() -> list[WarpPhase1]:
    """F25: Phase 1 avg and p95 per epilogue warp."""
    f = load("w1")["f25"]
    src = _src(f["source"])
    return [WarpPhase1(w["warp"], w["ew"], w["rg"], w["avg"], w["p95"], src) for w in f["warps"]]


def equilibria() -> list[Equilibrium]:
    out = []
    for e in load("w1")["equilibria"]:
        extra = {k: v for k, v in e.items() if k not in
                 ("label", "source", "deficit", "epi_wait", "producer", "consumer", "amplification")}
        out.append(Equilibrium(e["label"], e["deficit"], e.get("epi_wait"), e.get("producer", {}),
                               e.get("consumer", {}), e.get("amplification"), extra, _src(e["source"])))
    return out


# ---------------------------------------------------------------------------------------------
# NVFP4 and TMA-store loaders
# ---------------------------------------------------------------------------------------------

def _nv_src(section: str) -> Source:
    return Source(load("nvfp4")["note"], section)


def nvfp4_sol_us() -> dict[str, float]:
    """The NVFP4 log's speed-of-light figures, by shape name."""
    return dict(load("nvfp4")["sol_us"]["values"])


def nvfp4_stage_steps() -> list[StageStep]:
    """The per-optimization tables (1->2, 2->3, 3->4, 4->5 stages)."""
    out = []
    for s in load("nvfp4")["stage_steps"]:
        for shape in NVFP4_SHAPES:
            b, a, pct = s["rows"][shape]
            out.append(StageStep(s["from"], s["to"], shape, b, a, pct, _nv_src(s["section"])))
    return out


def nvfp4_stage_times() -> list[StageTime]:
    """Every (shape, stages) time in the log's tables, one row per table it appears in."""
    nv = load("nvfp4")
    out = []
    for s in nvfp4_stage_steps():
        out.append(StageTime(s.shape, s.from_stages, s.before_us, f"step {s.from_stages}->{s.to_stages}", s.source))
        out.append(StageTime(s.shape, s.to_stages, s.after_us, f"step {s.from_stages}->{s.to_stages}", s.source))
    sm = nv["summary"]
    for shape in NVFP4_SHAPES:
        base, final, _ = sm["rows"][shape]
        out.append(StageTime(shape, 1, base, "summary", _nv_src(sm["section"])))
        out.append(StageTime(shape, 5, final, "summary", _nv_src(sm["section"])))
    ad = nv["additional_stage_testing"]
    for r in ad["rows"]:
        for shape in NVFP4_SHAPES:
            if r.get(shape) is not None:
                out.append(StageTime(shape, r["stages"], r[shape], "additional", _nv_src(ad["section"])))
    ap = nv["adaptive_stages"]
    for r in ap["rows"]:
        out.append(StageTime(r["shape"], r["stages"], r["us"], "adaptive", _nv_src(ap["section"])))
    fin = nv["final"]
    for shape in NVFP4_SHAPES:
        out.append(StageTime(shape, 5, fin["rows"][shape][0], "final", _nv_src(fin["section"])))
    return out


def nvfp4_stage_sweep() -> dict[str, dict[int, float]]:
    """shape -> stages -> us from the per-optimization tables (the sweep 1..5 the log builds)."""
    out: dict[str, dict[int, float]] = {s: {} for s in NVFP4_SHAPES}
    for s in nvfp4_stage_steps():
        out[s.shape].setdefault(s.from_stages, s.before_us)
        out[s.shape][s.to_stages] = s.after_us
    return out


def nvfp4_split_k() -> list[SplitK]:
    sk = load("nvfp4")["split_k"]
    out = []
    for r in sk["rows"]:
        for shape in NVFP4_SHAPES:
            base, us, pct = r[shape]
            out.append(SplitK(r["split"], shape, base, us, pct, _nv_src(sk["section"])))
    return out


def nvfp4_attempts() -> list[Attempt]:
    return [Attempt(a["name"], a["outcome"], a["label"], _nv_src(a["section"])) for a in load("nvfp4")["attempts"]]


def tma_store_estimates() -> list[EpilogueEstimate]:
    raw = load("tma_store")
    return [EpilogueEstimate(e["variant"], r["operation"], r["cycles"], Source(raw["note"], e["section"]))
            for e in raw["estimates"] for r in e["rows"]]


# ---------------------------------------------------------------------------------------------
# Facts for pelib.gonogo
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Recorded:
    """The lab's B200 number for one stage's idea: time and/or throughput, where it is written, what changed."""

    ms: float | None
    tflops: float | None
    what: str
    source: Source

    def describe(self) -> str:
        parts = [f"{self.ms:.3f} ms" if self.ms else None, f"{self.tflops:.0f} TFLOPS" if self.tflops else None]
        return f"{' / '.join(p for p in parts if p)} — recorded (B200, {self.source.note}: {self.what})"


def stage_record(stage_key: str, recorded_text: str = "", pipeline_stages: int | None = None) -> Recorded | None:
    """The record a stage's header points at: a commit of the FP8 history, a later kernel state (F18...),
    or for an NVFP4 stage the log's K=16384 time at its pipeline depth. None where the notes have none."""
    text = recorded_text or ""
    if text.lower().startswith("none"):   # "none separately: ..." / "none yet: ...": the header says it has no number
        return None
    family = stage_key.split("/")[0]
    if family == "nvfp4":
        st = pipeline_stages or 1
        hit = next((t for t in nvfp4_stage_times() if t.shape == "k16384" and t.stages == st), None)
        if hit is None:
            return None
        return Recorded(hit.us / 1e3, None, f"M=128, N=7168, K=16384, num_ab_stage {st}", hit.source)
    if family != "fp8":
        return None
    # The record the text names first: a header may name an older state to compare with ("F19a ...
    # against F18's 0.543 ms"), and that one is not its own.
    hits = []
    for h in history():
        m = re.search(rf"\b{h.commit}\b", text)
        if m:
            hits.append((m.start(), Recorded(h.ms, h.tflops, f"{h.commit}: {h.change}", h.source)))
    for st in later_states():
        m = re.search(rf"\b{re.escape(st.state.split(' ')[0])}\b", text)
        if m:
            hits.append((m.start(), Recorded(st.ms, st.tflops, st.state, st.source)))
    for e in experiments():              # "experiment F4": a variant that retells one experiment
        m = re.search(rf"\bexperiment {re.escape(e.id)}\b", text)
        if m and e.result_ms is not None:
            hits.append((m.start(), Recorded(e.result_ms, None, f"experiment {e.id}: {e.title}", e.source)))
    return min(hits, key=lambda x: x[0])[1] if hits else None
