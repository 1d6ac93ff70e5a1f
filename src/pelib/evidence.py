"""The one evidence vocabulary of the book: what kind every number is, and how its label is written.

Every table caption, figure title and banner names one of these kinds, with its provenance:

    compiled (NVRTC 13.5, sm_100a, 2026-11-24)
    emulated (pelib.emulate, one tile from the exports)
    simulated (pelib.sim, the stage's own source on the CPU model)
    predicted (the stage's event graph replayed with costs calibrated on NVIDIA H100 80GB HBM3, 2026-11-28)
    measured (NVIDIA H100 80GB HBM3, 2026-11-23)
    recorded (fp8-megakernel-experiment-log.md, F6)
    modelled (pelib.models.pipeline, calibrated on recorded clock64 phases)

The Preface prints `table()`; tests/test_evidence.py checks that pelib speaks no other word.
"""
from __future__ import annotations

import datetime as _dt
import html
import re
from dataclasses import dataclass

KINDS = ("compiled", "emulated", "simulated", "predicted", "measured", "recorded", "modelled")

DEFINITIONS = {
    "compiled": "what the compiler made of a stage (ptxas registers, spills, shared memory, SASS) and the "
                "launch set-up pelib derives from its exports (grid, tensor maps, schedule); produced live by "
                "NVRTC and nvdisasm on any machine",
    "emulated": "one output tile replayed by pelib.emulate from the layouts and descriptors the cubin "
                "exports, against the torch reference; no GPU",
    "simulated": "ran the stage's own source on the CPU model (pelib.sim): protocol, indexing and data path; "
                 "no time",
    "predicted": "the stage's own event graph (a simulated run) replayed by pelib.predict with costs measured on "
                 "a named GPU on a named date; a time no GPU produced, validated blind on Hopper before it is "
                 "trusted for a B200, and never shown as measured",
    "measured": "produced by pelib on a GPU, with the device and the date (and clocks where they matter)",
    "recorded": "a number from the lab notes, with the note and section; never shown as live",
    "modelled": "a prediction of a pelib model (the pipeline-equilibrium model, speed-of-light floors), "
                "including the model's calibrated parameters and assumptions",
}

# Words older captions used, and the kind each one is. 'calibrated' and 'assumption' are parts of a
# model; 'derived' is arithmetic on recorded numbers (the note's own).
ALIASES = {"calibrated": "modelled", "assumption": "modelled", "fitted": "modelled",
           "derived": "recorded", "emulator": "emulated"}


class EvidenceError(ValueError):
    """A label names no kind of the vocabulary, or lacks the provenance its kind needs."""


def _check(kind: str) -> str:
    if kind not in KINDS:
        raise EvidenceError(f"evidence kind {kind!r} is not one of {KINDS}"
                            + (f"; {kind!r} is {ALIASES[kind]!r}" if kind in ALIASES else ""))
    return kind


def label(kind: str, source: str | None = None) -> str:
    """'<kind> (<source>)', e.g. 'recorded (fp8-megakernel-experiment-log.md, F6)'.

    measured needs its device and date, recorded its note: both refuse an empty source.
    """
    _check(kind)
    if kind in ("recorded", "measured") and not source:
        raise EvidenceError(f"a {kind} label must name its source "
                            + ("(lab note and section)" if kind == "recorded" else "(device and date)"))
    return f"{kind} ({source})" if source else kind


def compiled(toolchain: str, arch: str | None = None, date: str | _dt.date | None = None) -> str:
    """'compiled (NVRTC 13.5, sm_100a, 2026-11-24)'; without a date, 'compiled (NVRTC 13.5, sm_100a)' (what
    committed text carries: the toolchain names the result, a day does not)."""
    parts = [toolchain] + ([arch] if arch else []) + ([str(date)] if date else [])
    return label("compiled", ", ".join(parts))


def emulated(what: str = "pelib.emulate") -> str:
    return label("emulated", what)


def simulated(what: str = "pelib.sim") -> str:
    return label("simulated", what)


def predicted(device: str, date: str | _dt.date | None = None, provisional: bool = False) -> str:
    """'predicted (the stage's event graph replayed with costs calibrated on <device>, <date>)'; a
    provisional calibration (not yet measured) says so instead of a date. The label never uses the word
    of the measured kind: a prediction is not shown as a measurement (kinds_in finds 'predicted' only)."""
    if not device:
        raise EvidenceError("a predicted label names the GPU whose costs replayed the graph")
    if provisional or not date:
        return label("predicted", f"the stage's event graph replayed with provisional costs for {device}, "
                                  "not yet calibrated on it")
    return label("predicted", f"the stage's event graph replayed with costs calibrated on {device}, {date}")


def measured(device: str, date: str | _dt.date, extra: str | None = None) -> str:
    """'measured (H100, 2026-11-23)'; extra adds e.g. clocks or the results file."""
    if not device or not date:
        raise EvidenceError("a measured label needs its device and its date")
    return label("measured", ", ".join([device, str(date)] + ([extra] if extra else [])))


def recorded(note: str, section: str | None = None) -> str:
    """'recorded (fp8-megakernel-experiment-log.md, F6)'."""
    if not note:
        raise EvidenceError("a recorded label needs its lab note")
    return label("recorded", f"{note}, {section}" if section else note)


def modelled(what: str | None = None) -> str:
    return label("modelled", what)


def kind_of(word: str) -> str:
    """The vocabulary's kind for a word, old aliases included ('calibrated' -> 'modelled')."""
    w = word.strip().lower()
    if w in KINDS:
        return w
    if w in ALIASES:
        return ALIASES[w]
    raise EvidenceError(f"{word!r} is not an evidence kind; use one of {KINDS}")


_WORD = re.compile(r"\b(" + "|".join(KINDS) + r")\b", re.IGNORECASE)


def kinds_in(text: str) -> list[str]:
    """The kinds a caption or title names, in order of first appearance."""
    return list(dict.fromkeys(m.group(1).lower() for m in _WORD.finditer(text or "")))


@dataclass(frozen=True)
class Kind:
    name: str
    definition: str


def vocabulary() -> list[Kind]:
    return [Kind(k, DEFINITIONS[k]) for k in KINDS]


# ---- the labelled table: how every table of numbers is shown, its caption carrying the evidence label ----

class Table:
    """A small table that renders as HTML in notebooks (and the book) and as aligned text elsewhere.

    Columns are the union of the rows' keys in order of first appearance (or `columns`), so a row that
    adds a column is never silently cut. In HTML the caption, which carries the evidence label, sits
    above a horizontally scrolling table and so always stays in view; numeric columns align right.
    """

    def __init__(self, rows: list[dict], caption: str = "", columns: list[str] | None = None,
                 descriptive: bool = False, notes: list[str] | None = None):
        self.rows = rows
        self.caption = caption
        self.columns = columns or list(dict.fromkeys(c for r in rows for c in r))
        # descriptive: prose in table form (names, ideas, where a fact lives) with no number of any
        # evidence kind; every other table's caption names its kinds (the book's tests check both).
        self.descriptive = descriptive
        # notes: lines shown under the table, e.g. what was not measured and why (never a result row)
        self.notes = list(notes or [])

    def only(self, columns=None) -> "Table":
        """The table with only `columns`, in that order (None: unchanged). The caption describes the whole table,
        so a note under it names the columns left out."""
        if columns is None:
            return self
        cols = list(columns)
        dropped = [c for c in self.columns if c not in cols]
        self.columns = cols
        if dropped:
            self.notes.append("Not shown here (the caption describes the whole table): " + ", ".join(map(str, dropped)))
        return self

    def _numeric_columns(self) -> set:
        out = set()
        for c in self.columns:
            vals = [r.get(c, "") for r in self.rows]
            vals = [v for v in vals if v not in ("", None, "—", "-")]
            if vals and all(_numeric(v) for v in vals):
                out.add(c)
        return out

    def _repr_html_(self) -> str:
        num = self._numeric_columns()

        def cell(tag, c, text):
            kind = "pe-num" if c in num else "pe-text"
            align = "right" if c in num else "left"
            return f'<{tag} class="{kind}" style="text-align:{align}">{html.escape(text)}</{tag}>'

        head = "".join(cell("th", c, str(c)) for c in self.columns)
        body = "".join("<tr>" + "".join(cell("td", c, _fmt(r.get(c, ""))) for c in self.columns) + "</tr>"
                       for r in self.rows)
        cap = f'<div class="pe-table-caption">{html.escape(self.caption)}</div>' if self.caption else ""
        cls = "pe-table pe-descriptive" if self.descriptive else "pe-table"
        notes = "".join(f'<div class="pe-table-note">{html.escape(n)}</div>' for n in self.notes)
        return (f'<div class="{cls}">{cap}<div class="pe-table-scroll"><table>'
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{notes}</div>")

    def to_markdown(self) -> str:
        """A GitHub Markdown table (numeric columns right-aligned, '|' escaped), the caption and notes
        as paragraphs below it."""
        num = self._numeric_columns()

        def esc(v) -> str:
            return _fmt(v).replace("|", "\\|").replace("\n", " ")
        lines = ["| " + " | ".join(esc(c) for c in self.columns) + " |",
                 "|" + "|".join(" ---: " if c in num else " --- " for c in self.columns) + "|"]
        lines += ["| " + " | ".join(esc(r.get(c, "")) for c in self.columns) + " |" for r in self.rows]
        tail = [self.caption] if self.caption else []
        return "\n".join(lines + [""] + tail + [""] + self.notes if tail or self.notes else lines).rstrip() + "\n"

    def __repr__(self) -> str:
        cells = [[str(c) for c in self.columns]] + [[_fmt(r.get(c, "")) for c in self.columns] for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
        return "\n".join(([self.caption] if self.caption else []) + lines + self.notes)


# A cell that reads as one number, possibly with a sign, an approximation mark, a unit or a marker:
# '1,136', '-0.4%', '~0.52', '1.02x', '0.700 ms', '3.0 TB/s', '12 *'.
_NUMBER = re.compile(r"^[~≈<>≤≥+\-−]?\s?\d[\d,]*(\.\d+)?(e[+-]?\d+)?\s?(%|x|×|[a-zA-Zµ/]{1,7})?\s?\*?$")


def _numeric(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    return bool(_NUMBER.match(str(v).strip()))


def _fmt(v) -> str:
    if v is None:            # a missing value reads as a dash, never as Python's None
        return "—"
    if isinstance(v, bool):  # a yes/no cell, never True/False
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)
