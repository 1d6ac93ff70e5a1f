"""Show what a build says (ptxas facts, SASS opcode counts) as tables labelled 'compiled'."""
from __future__ import annotations

from . import clock, evidence
from .evidence import Table
from .build import Build, toolchain_version

# Opcodes a reader of a Blackwell/Hopper GEMM looks for first.
WATCH = ("UTCQMMA", "UTCHMMA", "UTCOMMA", "UTCBAR", "UTCCP", "LDTM", "R2UR", "SYNCS", "ELECT",
         "UBLKCP", "UTMALDG", "UTMASTG", "HGMMA", "QGMMA", "WARPGROUP", "BAR", "STG", "STS", "LDS", "LDG")


def evidence_label(build: Build | None = None, dated: bool = True) -> str:
    """'compiled (NVRTC 13.5, sm_100a, 2026-11-23)': the kind and provenance of a build's numbers; dated=False
    for committed text (the README), which names the compiler and no day."""
    return evidence.compiled(toolchain_version().replace("nvrtc-", "NVRTC "), build.arch if build else None,
                             clock.today() if dated else None)


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
