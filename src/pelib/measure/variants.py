"""The go/no-go cards' kernels: variant stages of the FP8 megakernel (parent: stage 09) and their evidence.

A card's variant is a stage file of its own, src/kernels/fp8/variants/09_f<NN>_<idea>.cu, whose header
names stage 09 as its parent (F25 is stage 09 itself, built with TIMING=1). `card_evidence(card)`
compiles the variant and its parent and returns their compiled facts (ptxas registers and spills,
shared memory, SASS opcode counts, the source diff) as go/no-go facts of kind "compiled"; PENDING
when the file is not there yet. Host-side cards (F21, F26: pelib.measure.l2policy) and the card skipped by
rule (F27) have no kernel to compile and say so. Beyond ptxas, F24 adds its modelled Phase 1
bank-conflict ratio (pelib.layouts.banks) and F28 its static K-loop account (pelib.isa.sass_account).
On a B200, `run(card)` verifies and times the card's kernel through pelib.stage.Stage.run (F21 and F26
with their host change), `measure(card)` turns a parent and a variant run into the card rules'
measured facts (`gate_facts`, checked on synthetic records here).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from ..layouts import banks
from .. import build as _build, stages, timing
from . import l2policy
from ..isa import sass_account
from ..facts import Table, evidence_label
from ..gonogo import Fact
from ..paths import KERNELS
from ..stage import LaunchOptions, Stage, Timed

EVIDENCE = "compiled"
BASE = "fp8/09_persistent_megakernel.cu"
VARIANT_DIR = "fp8/variants"
COMPILED, PENDING, BUILD_FAILED, HOST_SIDE, SKIPPED = "compiled", "PENDING", "build failed", "host-side", "skipped"
# The SASS opcodes whose counts show each card's change.
WATCH = {"F22": ("HADD2", "HFMA2", "F2FP", "FADD", "PRMT", "LDTM", "STS"),
         "F23": ("LDTM", "STS", "STG", "BAR"),
         "F24": ("UTMASTG", "UBLKCP", "STS", "LDS", "STG"),
         "F25": ("CS2R", "S2UR", "STG"),
         "F28": ("UTCQMMA", "R2UR", "ELECT", "PLOP3", "IMAD", "LOP3", "SHF", "STL")}
HOST_ONLY = {
    "F21": "B's tensor map: L2 promotion NONE -> L2_256B (or L2_128B), host side built in "
           "pelib.measure.l2policy.f21_specs (a cuTensorMapEncodeTiled argument); the kernel is stage 09 unchanged, "
           "only a B200 run measures TMA0_wait",
    "F26": "a persisting L2 access-policy window over B on the launch stream, host side built in "
           "pelib.measure.l2policy (b_window, AccessPolicyWindow.stream_attr, apply: cuCtxSetLimit + "
           "cuStreamSetAttribute); the kernel is stage 09 unchanged, only a B200 run measures TMA0_wait",
}
SKIPPED_BY_RULE = {"F27": "skipped by rule: F25's Phase 1 spread (172 cycles) is below the 200-cycle threshold"}
CARDS = ("F21", "F22", "F23", "F24", "F25", "F26", "F27", "F28")


@dataclass(frozen=True)
class Variant:
    """A card's variant kernel: its file (relative to src/kernels, or absolute), defines and base."""

    card: str
    path: str
    what: str
    defines: Mapping = field(default_factory=dict)
    base: str | None = BASE
    base_defines: Mapping = field(default_factory=dict)
    watch: tuple = ()

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


def variants() -> dict[str, Variant]:
    """The cards with a kernel: each variant stage file whose parent is stage 09 (card from its name),
    and F25, stage 09 built with TIMING=1."""
    out = {"F25": Variant("F25", BASE, "per-warp TIMING build (Phase 1 start/end on every epilogue warp)",
                          defines={"TIMING": 1}, watch=WATCH["F25"])}
    for p in sorted((KERNELS / VARIANT_DIR).glob("[0-9][0-9]_f[0-9]*_*.cu")):
        s = Stage(p)
        if s.header.parent != BASE.removesuffix(".cu"):   # e.g. 05_f4: a recorded experiment on 05, not a card
            continue
        card = p.stem.split("_")[1].upper()
        out[card] = Variant(card, str(p.relative_to(KERNELS)), s.header.idea,
                            base=f"{s.header.parent}.cu" if s.header.parent else None, watch=WATCH.get(card, ()))
    return dict(sorted(out.items()))


VARIANTS = variants()


@dataclass
class CardEvidence:
    """What can be said about a card at compile time: facts (kind compiled) or why there are none."""

    card: str
    status: str                       # compiled / PENDING / build failed / host-side / skipped
    reason: str
    variant: Variant | None = None
    facts: tuple = ()                 # pelib.gonogo.Fact, kind "compiled" (F24's bank ratio: "modelled")
    summary: dict | None = None       # the variant's ptxas/SMEM summary
    base_summary: dict | None = None
    opcodes: dict = field(default_factory=dict)   # watched opcode -> (base count, variant count)
    diff: object = None               # pelib.stages.Rendered diff base -> variant, when both files differ
    evidence: str | None = None

    @property
    def pending(self) -> bool:
        return self.status != COMPILED

    def table(self) -> Table:
        """Variant against base, one row per compiled fact (labelled compiled)."""
        if self.summary is None:
            return Table([{"card": self.card, "status": self.status, "reason": self.reason}],
                         f"{self.card}: no compiled facts")
        rows = []
        for k in ("registers", "spill_stores", "spill_loads", "stack", "smem_static", "smem_dynamic"):
            b = self.base_summary.get(k) if self.base_summary else None
            v = self.summary.get(k)
            rows.append({"fact": k, "base": "" if b is None else b, "variant": v, "change": "" if b is None else v - b})
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
        from IPython.display import Markdown, display   # notebooks only
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


def _summary(b) -> dict:
    s = b.summary()
    s["spills"] = s["spill_stores"] + s["spill_loads"]
    s["sass_instructions"] = sum(b.histogram.values())
    return s


def _count(hist, op: str) -> int:
    """Occurrences of an opcode family in a SASS histogram (UTCQMMA counts UTCQMMA.2CTA and the like)."""
    return sum(n for k, n in hist.items() if k == op or k.startswith(op + "."))


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
        return CardEvidence(card_id, PENDING, f"variant not built yet: {_label(variant.file)} does not exist "
                            f"({variant.what}); compiled facts follow once it does", variant)
    try:
        vb = _build.build(variant.file, arch=arch, defines=dict(variant.defines))
    except _build.ToolchainError as e:
        return CardEvidence(card_id, PENDING, f"cannot compile here: {e}", variant)
    except _build.BuildError as e:
        first = str(e).strip().splitlines()
        return CardEvidence(card_id, BUILD_FAILED, f"{_label(variant.file)} does not compile for {arch}: "
                            + " ".join(first[:3])[:400], variant, evidence=EVIDENCE)
    summary, bb, base_summary = _summary(vb), None, None
    base = variant.base_file
    if base is not None and base.is_file():
        try:
            bb = _build.build(base, arch=arch, defines=dict(variant.base_defines))
            base_summary = _summary(bb)
        except _build.BuildError:
            bb = None
    opcodes = {op: (_count(bb.histogram, op) if bb is not None else None, _count(vb.histogram, op))
               for op in variant.watch}
    diff = (stages.diff(base, variant.file, skip_header=True)
            if with_diff and bb is not None and base.resolve() != variant.file.resolve() else None)
    defs = f" {dict(variant.defines)}" if variant.defines else ""
    src = f"{_label(variant.file)}{defs} ({arch}, NVRTC)"
    what = f"compiled {_label(variant.file)}" + (f" with {dict(variant.defines)}" if variant.defines else "")
    if base_summary is not None:
        what += f" against {_label(base)}"
    elif base is not None:
        what += f" (base {_label(base)} not built yet: no deltas)"
    c = card_id.lower()
    facts = tuple(Fact(f"{c}.{k}", summary[k], EVIDENCE, src) for k in ("registers", "spills", "stack", "smem_dynamic"))
    facts += _extra_facts(card_id, vb, bb, src)
    return CardEvidence(card_id, COMPILED, what, variant, facts, summary, base_summary, opcodes, diff, EVIDENCE)


def _extra_facts(card: str, vb, bb, source: str) -> tuple:
    """Facts a card's variant adds beyond ptxas: F24's modelled bank-conflict ratio, F28's K-loop account."""
    out = []
    if card == "F24" and bb is not None and vb.exports.get("staging_tma_store"):
        out.append(banks.f24_fact(bb.exports, vb.exports))
    if card == "F28" and bb is not None and "k_iters" in vb.exports:
        before, after = kloop_accounts(vb, bb)
        out.append(Fact("f28.kloop_instructions_per_tile", after.per_tile["total"], EVIDENCE,
                        f"{source}: pelib.isa.sass_account static fast path"))
        out.append(Fact("f28.kloop_instructions_delta", after.per_tile["total"] - before.per_tile["total"], EVIDENCE,
                        f"{source} against {BASE}: pelib.isa.sass_account static fast path"))
    return tuple(out)


def kloop_accounts(f28_build=None, base_build=None):
    """The MMA warp's static instruction account per tile: stage 09 (6 passes of its K-loop plus the
    rest of the tile loop) and F28 (one pass of the tile loop, which holds the unrolled K-loop)."""
    v = VARIANTS["F28"]
    fb = f28_build or Stage(v.file).build
    bb = base_build or Stage(v.base_file).build
    before = sass_account.account(bb.sass, fb.exports["k_iters"])
    after = sass_account.account(fb.sass, 1)
    if after.tile_loop is not None:
        raise sass_account.AccountError("F28's UTCQMMAs sit in a loop inside the tile loop: the K-loop is not unrolled")
    return before, after


def all_evidence(cards=CARDS, **kw) -> dict:
    """card_evidence for every card (what the dashboard shows about compiled facts)."""
    return {c: card_evidence(c, **kw) for c in cards}


def stage_of(card_id: str, defines: dict | None = None) -> Stage:
    """The stage a card runs: its variant file, or stage 09 for the host-side cards."""
    v = VARIANTS.get(card_id.upper())
    return Stage(v.file if v else KERNELS / BASE, {**(dict(v.defines) if v else {}), **(defines or {})})


def emulate_check(card_id: str, problem="small", seed: int = 0, tile=(1, 0), acc_buf: int = 0) -> dict:
    """One cluster tile of a card's variant replayed from its own exports (pelib.stage.Stage.emulate_check:
    the variant's epilogue arithmetic and staging); FP32-add variants must match within one BF16 ULP,
    F22 must equal pelib.numerics.precision's BF16x2 path on the same accumulators bit for bit."""
    s = stage_of(card_id)
    r = s.emulate_check(problem, tile, seed, acc_buf=acc_buf)
    return {"card": card_id.upper(), "variant": s.key, **r, "staged_ok": r.get("staged", {}).get("ok", True)}


# ---------------------------------------------------------------------------------------------
# On a B200: run a card's kernel, and turn parent-vs-variant runs into the cards' measured facts
# ---------------------------------------------------------------------------------------------

# The base each card is measured against: stage 09, except F26 (its gate is "beyond F21").
MEASURE_BASE = {"F26": "F21"}


def _host_change(card_id: str):
    """(spec_hook, hook) of a host-side card: F21's L2 promotion on B's map; F26's also a window over B."""
    c = card_id.upper()
    if c not in ("F21", "F26"):
        return None, None

    def promote(specs):
        return {**specs, "b": dataclasses.replace(specs["b"], l2_promotion=256).validate()}
    return promote, (l2policy.window_on_b if c == "F26" else None)


def run(card_id: str, problem="siglip2", *, seed: int = 0, verify: bool = True, time: bool = True,
        iters: int = 20, warmup: int = 3, defines: dict | None = None) -> dict:  # pragma: no cover - GPU
    """Verify a card's kernel against the torch reference, then time it (B200 only; measured)."""
    s = stage_of(card_id, defines)
    spec_hook, hook = _host_change(card_id)
    r = s.run(problem, seed=seed, verify=verify, time=time and Timed(iters=iters, warmup=warmup),
              launch=LaunchOptions(spec_hook=spec_hook, hook=hook))
    return {"card": card_id.upper(), **r}


def run_timing(card_id: str, problem="siglip2", *, seed: int = 0):  # pragma: no cover - GPU
    """The card's kernel built with TIMING=1, launched once after a warm-up; its decoded clock64 records."""
    s = stage_of(card_id)
    spec_hook, hook = _host_change(card_id)
    return s.run_timing(problem, seed=seed, launch=LaunchOptions(spec_hook=spec_hook, hook=hook))


def _avg(t, phase: str) -> float:
    return float(t.summary()[phase]["avg"])


def wave_span(t, first=(2, 3), second=(4, 5)) -> float:
    """F23: per (CTA, tile), the second wave's last Phase 1 end minus the first wave's first Phase 1 start; averaged."""
    p = timing.phase_id("epi_phase1")
    s = t.start[:, list(first), :, p].astype(np.float64)
    e = t.end[:, list(second), :, p].astype(np.float64)
    ok = (s != 0).all(axis=1) & (e != 0).all(axis=1)
    span = e.max(axis=1) - s.min(axis=1)
    return float(span[ok].mean())


def gate_facts(card_id: str, base: dict, variant: dict, device: str) -> list:
    """The card's measured facts from a base and a variant measurement, each {"ms": wall clock, "timing": Timing}.

    Metric names are the card rules' (book/data/fp8_proposals.yaml): wall-clock gains in % of the base,
    phase deltas in clock64 cycles (variant - base; negative = faster), F23's ratio of the two-wave
    Phase 1 span to the base's per-warp Phase 1, F24's K-loop gain in %.
    """
    c = card_id.upper()
    src = f"{c} variant vs {MEASURE_BASE.get(c, 'stage 09')}: pelib.measure.variants.measure"
    out = []

    def fact(metric, value):
        out.append(Fact(f"{c.lower()}.{metric}", float(value), "measured", src, device))

    bt, vt = base.get("timing"), variant.get("timing")
    if "ms" in base and "ms" in variant and c in ("F22", "F23", "F28"):
        fact("wall_clock_improvement_pct", 100.0 * (base["ms"] - variant["ms"]) / base["ms"])
        if c == "F28":      # the card's bar is F28 paired with F22; this variant is F28 alone
            out[-1] = Fact(out[-1].metric, out[-1].value, "measured", src + " (F28 alone, not paired with F22)", device)
    if bt is None or vt is None:
        return out
    if c == "F21":
        fact("tma0_wait_delta_cycles", _avg(vt, "tma_wait") - _avg(bt, "tma_wait"))
    elif c == "F26":
        fact("tma0_wait_delta_beyond_f21_cycles", _avg(vt, "tma_wait") - _avg(bt, "tma_wait"))
    elif c == "F22":
        fact("phase1_delta_cycles", _avg(vt, "epi_phase1") - _avg(bt, "epi_phase1"))
    elif c == "F23":
        fact("phase1_ratio_2w_over_4w", wave_span(vt) / _avg(bt, "epi_phase1"))
    elif c == "F24":
        fact("kloop_improvement_pct", 100.0 * (_avg(bt, "kloop") - _avg(vt, "kloop")) / _avg(bt, "kloop"))
        epi = ("epi_phase1", "epi_phase2")
        fact("epilogue_delta_cycles", sum(_avg(vt, p) for p in epi) - sum(_avg(bt, p) for p in epi))
    elif c == "F28":
        fact("kloop_delta_cycles", _avg(vt, "kloop") - _avg(bt, "kloop"))
    return out


def measure(card_id: str, problem="siglip2", *, iters: int = 20) -> list:  # pragma: no cover - GPU
    """Run the card's base and variant (timed, and once with TIMING=1) on a B200; return its measured facts."""
    c = card_id.upper()
    b = MEASURE_BASE.get(c)
    base = run(b, problem, iters=iters) if b else Stage(KERNELS / BASE).run(problem, time=Timed(iters=iters))
    base["timing"] = run_timing(b, problem) if b else Stage(KERNELS / BASE).run_timing(problem)
    var = run(c, problem, iters=iters)
    if var.get("ok") is False:
        raise RuntimeError(f"{c} does not verify on {var['device']}: {var.get('verify')}")
    var["timing"] = run_timing(c, problem)
    return gate_facts(c, base, var, var["device"])
