"""Go/no-go proposal cards and their evaluator: facts in, GO / NO-GO / ABORT / PENDING out.

A card's Success and Fail-fast clauses are rules (data: metric, comparator, threshold, the fact kinds
they accept). Facts are numbers with an evidence kind: compiled (ptxas, SASS), measured (a run
here), recorded (a lab note), modelled (pelib.models or a CPU emulation). The evaluator applies the
fail-fast rules first (ABORT), then the success rules: all met -> GO, one failed -> NO-GO, a fact
missing -> PENDING (and says whether a B200 is what it takes).
"""
from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from . import records

KINDS = ("compiled", "measured", "recorded", "modelled")
GO, NO_GO, ABORT, PENDING = "GO", "NO-GO", "ABORT", "PENDING"
STATUSES = (GO, NO_GO, ABORT, PENDING)

_OPS = {
    "lt": (operator.lt, "<"), "le": (operator.le, "<="), "gt": (operator.gt, ">"),
    "ge": (operator.ge, ">="), "eq": (operator.eq, "=="),
    "abs_lt": (lambda v, t: abs(v) < t, "|x| <"),
    "present": (lambda v, t: v is not None, "present"),
}


@dataclass(frozen=True)
class Rule:
    """One clause: fact `metric` compared with `threshold`, accepting facts of `evidence` kinds."""

    metric: str
    op: str
    threshold: float | None = None
    evidence: tuple = ("measured",)
    needs_b200: bool = True
    label: str = ""
    threshold_source: str = "note"

    def __post_init__(self):
        _check_metric(self.metric, "a rule")
        if self.op not in _OPS:
            raise ValueError(f"rule on {self.metric}: unknown comparator '{self.op}'; use one of {sorted(_OPS)}")
        object.__setattr__(self, "evidence", _evidence_list(self.evidence, f"rule on {self.metric}"))
        if self.op != "present" and self.threshold is None:
            raise ValueError(f"rule on {self.metric}: comparator '{self.op}' needs a threshold")
        if self.threshold is not None:
            object.__setattr__(self, "threshold", _finite_real(self.threshold, f"rule on {self.metric}: threshold"))

    def holds(self, value) -> bool:
        return bool(_OPS[self.op][0](value, self.threshold))

    def __str__(self) -> str:
        sym = _OPS[self.op][1]
        t = "" if self.op == "present" else f" {self.threshold:g}"
        return f"{self.metric} {sym}{t}" + (f" ({self.label})" if self.label else "")

    @classmethod
    def from_dict(cls, d: Mapping) -> "Rule":
        _require(d, ("metric", "op"), "a rule")
        return cls(d["metric"], d["op"], d.get("threshold"), d.get("evidence", ("measured",)),
                   bool(d.get("needs_b200", True)), d.get("label", ""), d.get("threshold_source", "note"))


@dataclass(frozen=True)
class Classifier:
    """A diagnostic outcome label that applies when its rule holds (F25's results A, B, C)."""

    label: str
    rule: Rule


@dataclass(frozen=True)
class Card:
    """A proposal card: hypothesis, change, success, fail-fast, max effort, rollback, dependencies."""

    id: str
    title: str
    hypothesis: str
    change: str
    success: tuple
    fail_fast: tuple
    max_effort_h: tuple
    rollback: str
    depends_on: tuple = ()
    kind: str = "performance"
    classify: tuple = ()
    recorded: Mapping = field(default_factory=dict)
    source: str = ""

    @classmethod
    def from_dict(cls, d: Mapping, note: str = "") -> "Card":
        _require(d, ("id", "title"), "a card")
        for part in ("success", "fail_fast", "classify"):
            if not isinstance(d.get(part, []), (list, tuple)):
                raise ValueError(f"card {d['id']}: '{part}' must be a list of rules, got {type(d[part]).__name__}")
        return cls(d["id"], d["title"], d.get("hypothesis", ""), d.get("change", ""),
                   tuple(Rule.from_dict(r) for r in d.get("success", [])),
                   tuple(Rule.from_dict(r) for r in d.get("fail_fast", [])),
                   tuple(d.get("max_effort_h", ())), d.get("rollback", ""), tuple(d.get("depends_on", [])),
                   d.get("kind", "performance"),
                   tuple(Classifier(c["label"], Rule.from_dict(c)) for c in d.get("classify", [])),
                   dict(d.get("recorded", {})), f"{note} § {d.get('section', d['id'])}")


@dataclass(frozen=True)
class Fact:
    """A number with its evidence kind and where it comes from."""

    metric: str
    value: float
    kind: str
    source: str = ""
    device: str | None = None

    def __post_init__(self):
        _check_metric(self.metric, "a fact")
        if self.kind not in KINDS:
            raise ValueError(f"fact {self.metric}: evidence kind '{self.kind}' is not one of {KINDS}")
        object.__setattr__(self, "value", _finite_real(self.value, f"fact {self.metric}"))


@dataclass(frozen=True)
class Decision:
    """The evaluator's verdict on one card."""

    card: str
    status: str
    rule: Rule | None
    evidence: str | None
    reason: str
    facts: tuple = ()
    labels: tuple = ()
    needs_b200: bool = False

    def __str__(self) -> str:
        ev = f" [{self.evidence}]" if self.evidence else ""
        lab = f" {{{', '.join(self.labels)}}}" if self.labels else ""
        return f"{self.card}: {self.status}{ev} - {self.reason}{lab}"


def _check_metric(metric, what: str) -> None:
    """A rule's or a fact's metric is a non-empty string; ValueError naming `what` ("a rule") otherwise."""
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"{what}'s metric must be a non-empty string, got {metric!r}")


def _finite_real(v, what: str):
    """v if it is a finite real number (int, float, numpy scalar); ValueError naming `what` otherwise."""
    if isinstance(v, str) or not isinstance(v, numbers.Real):
        raise ValueError(f"{what}: value {v!r} ({type(v).__name__}) is not a number; pass a finite int or float"
                         + (f" (float({v!r}))" if isinstance(v, str) else ""))
    if not math.isfinite(float(v)):
        raise ValueError(f"{what}: value {v} is not finite; a NaN or infinite measurement cannot decide a card: "
                         "measure again, or leave the fact out (the card stays PENDING)")
    return v


def _evidence_list(ev, what: str) -> tuple:
    if isinstance(ev, str) or not isinstance(ev, (list, tuple, set, frozenset)):
        raise ValueError(f"{what}: evidence must be a list of kinds such as ['measured'], got {ev!r}")
    bad = set(ev) - set(KINDS)
    if bad:
        raise ValueError(f"{what}: unknown evidence kinds {sorted(bad, key=str)}; use {KINDS}")
    return tuple(ev)


def _require(d, keys, what: str) -> None:
    if not isinstance(d, Mapping):
        raise ValueError(f"{what} must be a mapping, got {type(d).__name__}")
    missing = [k for k in keys if k not in d]
    if missing:
        ident = d.get("id") or d.get("metric") or ""
        raise ValueError(f"{what}{f' ({ident})' if ident else ''} lacks required key"
                         f"{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}; it has {sorted(d)}")


def _index(facts: Iterable[Fact] | Mapping[str, Fact]) -> dict[str, list[Fact]]:
    idx: dict[str, list[Fact]] = {}
    items = facts.values() if isinstance(facts, Mapping) else facts
    for f in items:
        if not isinstance(f, Fact):
            raise TypeError(f"facts must be pelib.gonogo.Fact(metric, value, kind) objects, got "
                            f"{type(f).__name__} {f!r}: wrap each number as Fact(metric, value, 'measured')")
        idx.setdefault(f.metric, []).append(f)
    return idx


def _pick(idx: Mapping[str, list[Fact]], rule: Rule) -> Fact | None:
    """The fact a rule uses: of an accepted kind, preferring the kinds in KINDS order (compiled/measured first)."""
    cands = [f for f in idx.get(rule.metric, []) if f.kind in rule.evidence
             # a measurement for a B200 rule counts only from a B200 (or an unnamed device)
             and not (rule.needs_b200 and f.kind == "measured" and f.device and "B200" not in f.device.upper())]
    return min(cands, key=lambda f: KINDS.index(f.kind)) if cands else None


def evaluate(card: Card, facts: Iterable[Fact] | Mapping[str, Fact]) -> Decision:
    """GO / NO-GO / ABORT / PENDING for one card from facts, with the rule that decided it."""
    idx = _index(facts)
    labels = tuple(c.label for c in card.classify if (f := _pick(idx, c.rule)) is not None and c.rule.holds(f.value))
    for r in card.fail_fast:
        f = _pick(idx, r)
        if f is not None and r.holds(f.value):
            return Decision(card.id, ABORT, r, f.kind, f"fail-fast hit: {r} with {r.metric}={f.value:g}", (f,), labels)
    used, missing = [], []
    for r in card.success:
        f = _pick(idx, r)
        if f is None:
            missing.append(r)
            continue
        used.append(f)
        if not r.holds(f.value):
            return Decision(card.id, NO_GO, r, f.kind, f"success rule not met: {r} with {r.metric}={f.value:g}",
                            tuple(used), labels)
    if missing:
        r = missing[0]
        b200 = any(m.needs_b200 for m in missing)
        where = " (needs a B200 run)" if b200 else ""
        return Decision(card.id, PENDING, r, None, f"no {'/'.join(r.evidence)} fact for {r.metric}{where}",
                        tuple(used), labels, b200)
    kinds = sorted({f.kind for f in used}, key=KINDS.index)
    return Decision(card.id, GO, card.success[0] if card.success else None, "+".join(kinds) or None,
                    "all success rules met: " + "; ".join(str(r) for r in card.success), tuple(used), labels)


def evaluate_all(cards: Iterable[Card], facts: Iterable[Fact]) -> dict[str, Decision]:
    facts = list(facts)
    return {c.id: evaluate(c, facts) for c in cards}


# ---------------------------------------------------------------------------------------------
# The F21-F28 cards
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: str


def cards() -> list[Card]:
    """The F21-F28 cards from book/data/fp8_proposals.yaml, in the note's card order."""
    raw = records.load("proposals")
    return [Card.from_dict(d, raw["note"]) for d in raw["cards"]]


def card(id_: str) -> Card:
    for c in cards():
        if c.id == id_:
            return c
    raise KeyError(f"no card {id_}; have {[c.id for c in cards()]}")


def edges() -> list[Edge]:
    """The dependency graph: F25 -> F23/F27, F21 -> F26, F22 -> F24, F22 <-> F28 (pairs_with)."""
    return [Edge(e["from"], e["to"], e["kind"]) for e in records.load("proposals")["edges"]]


def recorded_facts() -> list[Fact]:
    """The lab notes' facts the go/no-go rules can use (evidence kind 'recorded', book/data/fp8_proposals.yaml)."""
    raw = records.load("proposals")
    return [Fact(f["metric"], f["value"], records.EVIDENCE, str(records.Source(raw["note"], f["section"])))
            for f in raw["facts"]]


# How a card's recorded status reads as an evaluator outcome.
RECORDED_STATUS = {"done": GO, "skipped": ABORT}


def dashboard(facts: Iterable[Fact] | None = None) -> list[tuple[Card, Decision]]:
    """Every card with its decision from the recorded facts plus any given ones."""
    all_facts = recorded_facts() + list(facts or [])
    return [(c, evaluate(c, all_facts)) for c in cards()]


def summary(facts: Iterable[Fact] | None = None) -> str:
    """One line per card: status, evidence kind and the rule that decided it."""
    return "\n".join(str(d) for _, d in dashboard(facts))
