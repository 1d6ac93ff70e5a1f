"""The part "Go or no-go": the cards, their variant kernels' evidence, the dashboard overview."""
from __future__ import annotations

from typing import Mapping

from .. import banks, gonogo, model
from ..facts import Table, evidence_label
from ..stage import Stage
from ..variants import (BASE, CARDS, VARIANTS, all_evidence, card_evidence, emulate_check,  # noqa: F401
                        kloop_accounts)


def card_sheet(card_id: str) -> Table:
    """A card as the chapter shows it: hypothesis, change, rules, effort, rollback, dependencies."""
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


def status_table(evidence: Mapping | None = None) -> Table:
    """One row per card: compiled-evidence status and the reason (for the proposals chapter)."""
    evidence = evidence or all_evidence(with_diff=False)
    return Table([{"card": c, "status": e.status, "evidence": e.evidence or "", "reason": e.reason}
                  for c, e in evidence.items()], "Variant kernels: compiled evidence per card")


def overview(facts=(), evidence: Mapping | None = None) -> Table:
    """One row per card: the evaluator's status and evidence kind, compiled evidence, the model's projection."""
    evidence = evidence or all_evidence(with_diff=False)
    proj: dict = {}
    for r in model.card_projections():
        proj.setdefault(r["card"], f"{r['wall-clock gain']} ({r['change (model input)'].split(' (')[0]})")
    rows = []
    for c, d in gonogo.dashboard(list(facts)):
        e = evidence.get(c.id)
        rows.append({"card": c.id, "title": c.title, "status": d.status, "decided on": d.evidence or "",
                     "needs B200": "yes" if d.needs_b200 else "",
                     "rule": str(d.rule.label or d.rule.metric) if d.rule else "",
                     "variant kernel": e.status if e else "", "modelled projection": proj.get(c.id, "")})
    return Table(rows, "Go/no-go F21-F28: evaluator status (with its evidence kind), variant kernels, model projections")


def kloop_table() -> Table:
    """F28's K-loop account beside stage 09's, instructions per tile by class (compiled, static fast path)."""
    before, after = kloop_accounts()
    b, a = before.per_tile, after.per_tile
    rows = [{"class": k, "stage 09 per tile": b[k], "F28 per tile": a[k], "change": a[k] - b[k]}
            for k in ("UTCQMMA", "R2UR", "SYNCS", "UTCBAR", "other", "total")]
    return Table(rows, "MMA warp, instructions per tile (one fast-path pass: every try_wait passes at once) — "
                       f"{evidence_label()}")


def emulate_table(card_id: str, keys=("variant", "tile", "epilogue add", "max_abs_err", "equals_bf16x2_model",
                                      "staged_ok")) -> Table:
    """One cluster tile of a card's variant against the FP32-add reference (emulated)."""
    r = emulate_check(card_id)
    return Table([{k: r.get(k, "") for k in keys}],
                 f"{card_id} variant, one cluster tile against the FP32-add reference — emulated")


def f24_banks_table() -> Table:
    """Phase 1's shared-memory wavefronts of stage 09's padded staging and F24's swizzled one (modelled)."""
    return banks.compare_table(Stage(BASE).exports, Stage(VARIANTS["F24"].file).exports)
