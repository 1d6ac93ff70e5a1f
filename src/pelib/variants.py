"""Compiled evidence for the go/no-go variant kernels of the FP8 megakernel (F22, F23, F24, F25, F28).

Each kernel-side card has a variant of the final megakernel (stage 09): a file of its own under
src/kernels/fp8/variants/ (kept out of fp8/ so it never counts as a stage), or the stage itself with
defines. `card_evidence(card)` compiles the variant and its base when the files exist and returns
their compiled facts (ptxas registers and spills, shared memory, SASS opcode counts, the source diff)
as go/no-go facts of kind "compiled"; when the variant file is not there yet it returns PENDING
("variant not built yet"), naming the file it looks for. Host-side cards (F21, F26) and the card
skipped by rule (F27) have no kernel to compile and say so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from .paths import KERNELS

EVIDENCE = "compiled"
BASE = "fp8/09_persistent_megakernel.cu"
VARIANT_DIR = "fp8/variants"
COMPILED, PENDING, BUILD_FAILED, HOST_SIDE, SKIPPED = "compiled", "PENDING", "build failed", "host-side", "skipped"


@dataclass(frozen=True)
class Variant:
    """A card's variant kernel: its file (relative to src/kernels, or absolute), defines and base."""

    card: str
    path: str
    what: str
    defines: Mapping = field(default_factory=dict)
    base: str | None = BASE
    base_defines: Mapping = field(default_factory=dict)
    watch: tuple = ()        # SASS opcodes whose counts show the change

    @property
    def file(self) -> Path:
        p = Path(self.path)
        return p if p.is_absolute() else KERNELS / p

    @property
    def base_file(self) -> Path | None:
        if self.base is None:
            return None
        p = Path(self.base)
        return p if p.is_absolute() else KERNELS / p


# The variants the F21-F28 cards describe (fp8-megakernel-future-proposals-F21-F28.md).
VARIANTS: dict[str, Variant] = {
    "F22": Variant("F22", f"{VARIANT_DIR}/09_f22_bf16x2_epilogue.cu",
                   "Phase 1 math in packed BF16: cvt.rn.bf16x2.f32 on accumulator pairs, add.bf16x2 with comb",
                   watch=("HADD2", "HFMA2", "F2FP", "FADD", "PRMT", "LDTM", "STS")),
    "F23": Variant("F23", f"{VARIANT_DIR}/09_f23_two_epilogue_warps.cu",
                   "option C: 2 epilogue warps, 2 row groups each, THREADS=128, drain loop fixed",
                   watch=("LDTM", "STS", "STG", "BAR")),
    "F24": Variant("F24", f"{VARIANT_DIR}/09_f24_swizzled_staging.cu",
                   "unpadded 128B-swizzled staging rows, one cp.async.bulk.tensor store per half",
                   watch=("UTMASTG", "UBLKCP", "STS", "LDS", "STG")),
    "F25": Variant("F25", BASE, "per-warp TIMING build (Phase 1 start/end on every epilogue warp)",
                   defines={"TIMING": 1}, watch=("CS2R", "S2UR", "STG")),
    "F28": Variant("F28", f"{VARIANT_DIR}/09_f28_kloop_unroll.cu",
                   "descriptors precomputed per stage before the tile loop; 6 K-iterations unrolled by hand",
                   watch=("UTCQMMA", "R2UR", "ELECT", "PLOP3", "IMAD", "LOP3", "SHF", "STL")),
}
HOST_ONLY = {
    "F21": "B's tensor map: L2 promotion NONE -> L2_128B (host-side cuTensorMapEncodeTiled argument); "
           "the kernel is unchanged, only a B200 run measures TMA0_wait",
    "F26": "a persisting L2 access-policy window on the stream (host-side cudaStreamSetAttribute); "
           "the kernel is unchanged, only a B200 run measures TMA0_wait",
}
SKIPPED_BY_RULE = {"F27": "skipped by rule: F25's Phase 1 spread (172 cycles) is below the 200-cycle threshold"}


@dataclass
class CardEvidence:
    """What can be said about a card at compile time: facts (kind compiled) or why there are none."""

    card: str
    status: str                       # compiled / PENDING / build failed / host-side / skipped
    reason: str
    variant: Variant | None = None
    facts: tuple = ()                 # pelib.gonogo.Fact, kind "compiled"
    summary: dict | None = None       # the variant's ptxas/SMEM summary
    base_summary: dict | None = None
    opcodes: dict = field(default_factory=dict)   # watched opcode -> (base count, variant count)
    diff: object = None               # pelib.stages.Rendered diff base -> variant, when both files differ
    evidence: str | None = None

    @property
    def pending(self) -> bool:
        return self.status != COMPILED

    def table(self):
        """Variant against base, one row per compiled fact (labelled compiled)."""
        from pelib.facts import Table, evidence_label

        if self.summary is None:
            return Table([{"card": self.card, "status": self.status, "reason": self.reason}],
                         f"{self.card}: no compiled facts")
        rows = []
        for k in ("registers", "spill_stores", "spill_loads", "stack", "smem_static", "smem_dynamic"):
            b = self.base_summary.get(k) if self.base_summary else None
            v = self.summary.get(k)
            rows.append({"fact": k, "base": "" if b is None else b, "variant": v,
                         "change": "" if b is None else v - b})
        for op, (b, v) in self.opcodes.items():
            rows.append({"fact": f"SASS {op}", "base": "" if b is None else b, "variant": v,
                         "change": "" if b is None else v - b})
        return Table(rows, f"{self.card} variant vs base — {evidence_label()}")

    def __str__(self) -> str:
        head = f"{self.card}: {self.status} - {self.reason}"
        if self.summary:
            head += "\n  " + ", ".join(f"{k}={v}" for k, v in self.summary.items() if k not in ("stage", "arch"))
        return head

    def _repr_markdown_(self) -> str:
        return f"**{self.card}: {self.status}** ({self.evidence or 'no compiled facts'}) — {self.reason}"

    def _ipython_display_(self):
        """Status line, then (when compiled) the facts table and the diff base -> variant."""
        from IPython.display import Markdown, display

        display(Markdown(self._repr_markdown_()))
        if self.summary is not None:
            display(self.table())
        if self.diff is not None:
            display(self.diff)


def _label(p: Path) -> str:
    try:
        return str(p.relative_to(KERNELS))
    except ValueError:
        return str(p)


def _facts(card: str, summary: dict, source: str) -> tuple:
    from pelib.gonogo import Fact

    c = card.lower()
    return tuple(Fact(f"{c}.{k}", summary[k], EVIDENCE, source)
                 for k in ("registers", "spills", "stack", "smem_dynamic") if k in summary)


def card_evidence(card_id: str, *, variant: Variant | None = None, arch: str = "sm_100a",
                  with_diff: bool = True) -> CardEvidence:
    """Compiled facts of a card's variant kernel, or PENDING with the reason (file missing, host-side...)."""
    card_id = card_id.upper()
    if variant is None:
        if card_id in HOST_ONLY:
            return CardEvidence(card_id, HOST_SIDE, HOST_ONLY[card_id])
        if card_id in SKIPPED_BY_RULE:
            return CardEvidence(card_id, SKIPPED, SKIPPED_BY_RULE[card_id])
        if card_id not in VARIANTS:
            raise KeyError(f"no variant kernel is defined for card {card_id}; cards with one: {sorted(VARIANTS)}")
        variant = VARIANTS[card_id]
    if not variant.file.is_file():
        return CardEvidence(card_id, PENDING,
                            f"variant not built yet: {_label(variant.file)} does not exist "
                            f"({variant.what}); compiled facts follow once it does", variant)
    from pelib import build as _build

    try:
        vb = _build.build(variant.file, arch=arch, defines=dict(variant.defines))
    except _build.ToolchainError as e:
        return CardEvidence(card_id, PENDING, f"cannot compile here: {e}", variant)
    except _build.BuildError as e:
        first = str(e).strip().splitlines()
        return CardEvidence(card_id, BUILD_FAILED, f"{_label(variant.file)} does not compile for {arch}: "
                            + " ".join(first[:3])[:400], variant, evidence=EVIDENCE)
    summary = _summary(vb)
    bb, base_summary = None, None
    base = variant.base_file
    if base is not None and base.is_file():
        try:
            bb = _build.build(base, arch=arch, defines=dict(variant.base_defines))
            base_summary = _summary(bb)
        except _build.BuildError:
            bb = None
    opcodes = {}
    for op in variant.watch:
        v = _count(vb.histogram, op)
        b = _count(bb.histogram, op) if bb is not None else None
        opcodes[op] = (b, v)
    diff = None
    if with_diff and bb is not None and base.resolve() != variant.file.resolve():
        from pelib import stages

        diff = stages.diff(base, variant.file, skip_header=True)
    defs = f" {dict(variant.defines)}" if variant.defines else ""
    src = f"{_label(variant.file)}{defs} ({arch}, NVRTC)"
    what = f"compiled {_label(variant.file)}" + (f" with {dict(variant.defines)}" if variant.defines else "")
    if base_summary is not None:
        what += f" against {_label(base)}"
    elif base is not None:
        what += f" (base {_label(base)} not built yet: no deltas)"
    return CardEvidence(card_id, COMPILED, what, variant, _facts(card_id, summary, src), summary, base_summary,
                        opcodes, diff, EVIDENCE)


def _summary(b) -> dict:
    s = b.summary()
    s["spills"] = s["spill_stores"] + s["spill_loads"]
    s["sass_instructions"] = sum(b.histogram.values())
    return s


def _count(hist, op: str) -> int:
    """Occurrences of an opcode family in a SASS histogram (UTCQMMA counts UTCQMMA.2CTA and the like)."""
    return sum(n for k, n in hist.items() if k == op or k.startswith(op + "."))


def card_sheet(card_id: str):
    """A card as the chapter shows it: hypothesis, change, rules, effort, rollback, dependencies."""
    from pelib import gonogo
    from pelib.facts import Table

    c = gonogo.card(card_id)
    h = c.max_effort_h
    rows = [{"field": "title", "value": c.title}, {"field": "hypothesis", "value": c.hypothesis},
            {"field": "change", "value": c.change}]
    rows += [{"field": "success", "value": f"{r} [{'/'.join(r.evidence)}]"} for r in c.success]
    rows += [{"field": "fail-fast", "value": f"{r} [{'/'.join(r.evidence)}]"} for r in c.fail_fast]
    rows += [{"field": "classify", "value": f"{k.label}: {k.rule}"} for k in c.classify]
    rows += [{"field": "max effort", "value": (f"{h[0]:g}-{h[1]:g} h" if len(h) == 2 and h[0] != h[1]
                                              else f"{h[0]:g} h" if h else "")},
             {"field": "rollback", "value": c.rollback},
             {"field": "depends on", "value": ", ".join(c.depends_on) or "nothing"},
             {"field": "recorded status", "value": ", ".join(f"{k}: {v}" for k, v in c.recorded.items())}]
    return Table(rows, f"Card {c.id} (recorded: {c.source})")


def all_evidence(cards=("F21", "F22", "F23", "F24", "F25", "F26", "F27", "F28"), **kw) -> dict:
    """card_evidence for every card (what the dashboard shows about compiled facts)."""
    return {c: card_evidence(c, **kw) for c in cards}


def overview(facts=(), evidence: Mapping | None = None):
    """One row per card: the evaluator's status and evidence kind, compiled evidence, the model's projection."""
    from pelib import gonogo, model
    from pelib.facts import Table

    evidence = evidence or all_evidence(with_diff=False)
    proj = {}
    for r in model.card_projections():
        proj.setdefault(r["card"], f"{r['wall-clock gain']} ({r['change (model input)'].split(' (')[0]})")
    rows = []
    for c, d in gonogo.dashboard(list(facts)):
        e = evidence.get(c.id)
        rows.append({"card": c.id, "title": c.title, "status": d.status, "decided on": d.evidence or "",
                     "needs B200": "yes" if d.needs_b200 else "", "rule": str(d.rule.label or d.rule.metric) if d.rule else "",
                     "variant kernel": e.status if e else "", "modelled projection": proj.get(c.id, "")})
    return Table(rows, "Go/no-go F21-F28: evaluator status (with its evidence kind), variant kernels, model projections")


def status_table(evidence: Mapping | None = None):
    """One row per card: compiled-evidence status and the reason (for the proposals chapter)."""
    from pelib.facts import Table

    evidence = evidence or all_evidence(with_diff=False)
    rows = [{"card": c, "status": e.status, "evidence": e.evidence or "", "reason": e.reason}
            for c, e in evidence.items()]
    return Table(rows, "Variant kernels: compiled evidence per card")
