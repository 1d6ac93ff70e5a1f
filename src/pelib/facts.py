"""Show what a build says (ptxas facts, SASS opcode counts) as tables labelled 'compiled'."""
from __future__ import annotations

import html
import re

from . import clock, evidence
from .build import Build, toolchain_version

# Opcodes a reader of a Blackwell/Hopper GEMM looks for first.
WATCH = ("UTCQMMA", "UTCHMMA", "UTCOMMA", "UTCBAR", "UTCCP", "LDTM", "R2UR", "SYNCS", "ELECT",
         "UBLKCP", "UTMALDG", "UTMASTG", "HGMMA", "QGMMA", "WARPGROUP", "BAR", "STG", "STS", "LDS", "LDG")


def evidence_label(build: Build | None = None, dated: bool = True) -> str:
    """'compiled (NVRTC 13.5, sm_100a, 2026-11-23)': the kind and provenance of a build's numbers; dated=False
    for committed text (the README), which names the compiler and no day."""
    return evidence.compiled(toolchain_version().replace("nvrtc-", "NVRTC "), build.arch if build else None,
                             clock.today() if dated else None)


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


def facts_table(builds: dict[str, Build], caption: str | None = None) -> Table:
    """One row per build: registers, spills, stack, static and dynamic shared memory."""
    rows = []
    for label, b in builds.items():
        f = b.facts
        rows.append({"stage": label, "arch": b.arch, "registers": f.registers,
                     "spill stores (B)": f.spill_stores, "spill loads (B)": f.spill_loads,
                     "stack (B)": f.stack, "static smem (B)": f.smem_static,
                     "dynamic smem (B)": b.exports.get("smem_bytes", 0)})
    first = next(iter(builds.values()), None)
    return Table(rows, caption or f"ptxas facts — {evidence_label(first)}")


def histogram_table(build: Build, top: int = 12, watch=WATCH) -> Table:
    """The most frequent SASS opcodes, plus every watched opcode that occurs."""
    h = build.histogram
    names = [op for op, _ in h.most_common(top)]
    names += [op for op in watch if op in h and op not in names]
    total = sum(h.values())
    rows = [{"opcode": op, "count": h[op], "share": f"{100 * h[op] / total:.1f}%"} for op in names]
    return Table(rows, f"SASS opcode histogram of {build.source.name} ({total} instructions) — "
                       f"{evidence_label(build)}")


def evidence_table() -> Table:
    """The evidence vocabulary (pelib.evidence) as a table: the Preface shows it."""
    return Table([{"kind": k.name, "what it is": k.definition} for k in evidence.vocabulary()],
                 "The evidence kinds (pelib.evidence): every number in this book carries one", descriptive=True)
