"""Show what a build says (ptxas facts, SASS opcode counts) as tables labelled 'compiled'."""
from __future__ import annotations

import datetime as _dt
import html

from .build import Build, toolchain_version

# Opcodes a reader of a Blackwell/Hopper GEMM looks for first.
WATCH = ("UTCQMMA", "UTCHMMA", "UTCOMMA", "UTCBAR", "UTCCP", "LDTM", "R2UR", "SYNCS", "ELECT",
         "UBLKCP", "UTMALDG", "UTMASTG", "HGMMA", "QGMMA", "WARPGROUP", "BAR", "STG", "STS", "LDS", "LDG")


def evidence_label(build: Build | None = None) -> str:
    """'compiled (NVRTC 13.5, sm_100a, 2026-11-23)': the kind and provenance of a build's numbers."""
    arch = f", {build.arch}" if build else ""
    return f"compiled ({toolchain_version().replace('nvrtc-', 'NVRTC ')}{arch}, {_dt.date.today()})"


class Table:
    """A small table that renders as HTML in notebooks and as aligned text elsewhere."""

    def __init__(self, rows: list[dict], caption: str = "", columns: list[str] | None = None):
        self.rows = rows
        self.caption = caption
        self.columns = columns or (list(rows[0]) if rows else [])

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c, '')))}</td>" for c in self.columns)
                       + "</tr>" for r in self.rows)
        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        cells = [[str(c) for c in self.columns]] + [[_fmt(r.get(c, "")) for c in self.columns] for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
        return "\n".join(([self.caption] if self.caption else []) + lines)


def _fmt(v) -> str:
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
