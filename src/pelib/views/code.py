"""A stage's code as a reader wants it: the diff from its parent and the whole kernel, syntax-highlighted,
with the book's instrumentation (PELIB_EXPORT, the TIMING build's clock records, the bounded waits'
tags) folded away behind a toggle that shows it.

    code.diff("fp8/07_smem_staged_epilogue")      # the lesson of stage 07, instrumentation folded
    code.listing("fp8/09_persistent_megakernel")  # the whole final kernel, file line numbers kept

The toggle is a checkbox and two CSS rules carried with the output, so it works in the built book (no
script) and in JupyterLab alike. Printed (a terminal, a test), the objects are plain text with every
line, instrumentation included.
"""
from __future__ import annotations

import difflib
import html
import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import stages

# A whole line that exists for the book's instruments, not for the GEMM: exports the emulator and the
# diagrams read (common/export.cuh), the TIMING build's clock64 records (common/timing.cuh).
_INSTR_LINE = re.compile(
    r"^\s*(PELIB_EXPORT\w*\s*\(|PE_TIMING_\w+\s*\(|timing_record\s*\(|#\s*include\s+\"common/(export|timing)\.cuh\""
    r"|(const\s+)?u64\s+t\d?\s*=\s*timing_now\(\)|(const\s+)?u64\s+t\d\s*=\s*timing_now\(\),\s*t\d\s*=\s*t\d;"
    r"|if\s*\(\s*\w+\s*==\s*0\s*\)\s*t\d\s*=\s*timing_now\(\);|t\d\s*=\s*timing_now\(\);)")
_WAIT_CALL = re.compile(r"\bmbarrier_wait_parity\w*\s*\(")
_ids = itertools.count()

KINDS = ("PELIB_EXPORT", "PE_TIMING_* / clock64 records", "wait tags")

_STYLE = (
    "<style>.pe-code .pe-instr{display:none}"
    ".pe-code input.pe-instr-toggle:checked~div .pe-instr{display:inline}"
    ".pe-code input.pe-instr-toggle:checked~div .pe-fold-note{display:none}"
    ".pe-code .pe-fold-note{color:#6a737d;font-style:italic}"
    ".pe-code .pe-ln{color:#8b949e;user-select:none;display:inline-block;min-width:3.2em;padding-right:.8em;"
    "text-align:right}"
    ".pe-code label{font-size:.85em;cursor:pointer;margin-left:.3em}"
    ".pe-code .pe-code-title{font-size:.9em;font-weight:600;margin:.2em 0}"
    # a whole kernel runs at its full height (no 560-px keyhole); only a line wider than the column scrolls
    ".pe-listing div.highlight pre{max-height:none;overflow-x:auto;overflow-y:visible}</style>")


def is_instrumentation(line: str) -> bool:
    """A whole source line that only feeds the book's instruments (exports, the TIMING build)."""
    return bool(_INSTR_LINE.match(line))


def tag_spans(line: str) -> list[tuple[int, int]]:
    """[start, end) character ranges of the wait tags in one line: ', 3' of mbarrier_wait_parity(b, p, 3)
    (pelib.stages.wait_sites reads the same third argument)."""
    out = []
    for m in _WAIT_CALL.finditer(line):
        depth, i, commas = 1, m.end(), []
        while i < len(line) and depth:
            depth += {"(": 1, ")": -1}.get(line[i], 0)
            if depth == 1 and line[i] == ",":
                commas.append(i)
            i += 1
        if depth == 0 and len(commas) >= 2:
            out.append((commas[1], i - 1))
    return out


def strip_tags(line: str) -> str:
    """The line with its wait tags removed (what a reader's eye sees with the instrumentation folded)."""
    for a, b in reversed(tag_spans(line)):
        line = line[:a] + line[b:]
    return line


# ---- highlighting -----------------------------------------------------------------------------------

def _token_class(tt) -> str:
    from pygments.token import STANDARD_TYPES

    while tt not in STANDARD_TYPES:
        tt = tt.parent
    return STANDARD_TYPES[tt]


def _highlight_lines(text: str, hide: dict[int, list[tuple[int, int]]]) -> list[str]:
    """Each line of `text` as HTML spans with Pygments' short classes (the book's theme styles them), the
    character ranges in hide[line index] wrapped in a .pe-instr span."""
    from pygments.lexers import CppLexer

    lines = text.split("\n")
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln) + 1)
    # character -> class, from the lexer's positions
    cls = [""] * len(text)
    for pos, tt, val in CppLexer(stripnl=False, ensurenl=False).get_tokens_unprocessed(text):
        c = _token_class(tt)
        for i in range(pos, min(pos + len(val), len(text))):
            cls[i] = c
    out = []
    for li, ln in enumerate(lines):
        base = starts[li]
        hidden = [False] * len(ln)
        for a, b in hide.get(li, []):
            for i in range(a, min(b, len(ln))):
                hidden[i] = True
        parts, i = [], 0
        while i < len(ln):
            j = i
            while j < len(ln) and cls[base + j] == cls[base + i] and hidden[j] == hidden[i]:
                j += 1
            piece = html.escape(ln[i:j])
            c = cls[base + i]
            piece = f'<span class="{c}">{piece}</span>' if c else piece
            parts.append(f'<span class="pe-instr">{piece}</span>' if hidden[i] else piece)
            i = j
        out.append("".join(parts))
    return out


def _toggle(n_lines: int, n_tags: int) -> tuple[str, str]:
    if not n_lines and not n_tags:   # nothing folded: no switch that would show nothing
        return "", ""
    uid = f"pe-instr-{os.getpid()}-{next(_ids)}"
    what = []
    if n_lines:
        what.append(f"{n_lines} line{'s' if n_lines != 1 else ''}")
    if n_tags:
        what.append(f"{n_tags} wait tag{'s' if n_tags != 1 else ''}")
    label = (f'<label for="{uid}">show the book\'s instrumentation ({", ".join(what)}: PELIB_EXPORT, '
             f'the TIMING build\'s clock records, the bounded waits\' tags)</label>')
    return f'<input type="checkbox" class="pe-instr-toggle" id="{uid}"/>', label


# ---- the whole kernel -------------------------------------------------------------------------------

@dataclass
class Listing:
    """A stage file, whole: each line with its file line number, instrumentation folded (see the module)."""

    stage: str
    text: str
    first_line: int = 1
    title: str = ""
    css_class: str = "pe-listing"

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    def counts(self) -> dict:
        """Lines of the file, lines folded as instrumentation, wait tags folded, lines shown by default."""
        lines = self.lines
        instr = [i for i, ln in enumerate(lines) if is_instrumentation(ln)]
        return {"lines": len(lines), "instrumentation lines": len(instr),
                "wait tags": sum(len(tag_spans(ln)) for ln in lines), "shown": len(lines) - len(instr)}

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"{self.title or self.stage}\n{self.text}"

    def _repr_html_(self) -> str:
        lines = self.lines
        hide = {i: [(0, len(ln))] for i, ln in enumerate(lines) if is_instrumentation(ln)}
        for i, ln in enumerate(lines):
            if i not in hide and tag_spans(ln):
                hide[i] = tag_spans(ln)
        body = _highlight_lines(self.text, hide)
        rows = []
        for i, h in enumerate(body):
            num = f'<span class="pe-ln">{self.first_line + i}</span>'
            row = f"{num}{h}\n"
            rows.append(f'<span class="pe-instr">{row}</span>' if i in hide and hide[i] == [(0, len(lines[i]))] and lines[i]
                        else row)
        c = self.counts()
        box, label = _toggle(c["instrumentation lines"], c["wait tags"])
        title = f'<div class="pe-code-title">{html.escape(self.title)}</div>' if self.title else ""
        return (f'<div class="pe-code {self.css_class}">{_STYLE}{title}{box}{label}'
                f'<div class="highlight"><pre>{"".join(rows)}</pre></div></div>')


def listing(stage: str | Path, start: str | None = None, end: str | None = None, header: bool = False) -> Listing:
    """The stage's source (whole, or the lines from the first containing `start` to the first after it
    containing `end`), highlighted, file line numbers kept, instrumentation folded. The header comment
    (what the stage page already shows as its header box) is left out unless header=True."""
    p = stages.resolve(stage)
    lines = p.read_text().rstrip("\n").split("\n")
    i0, i1 = 0, len(lines)
    if start is None and not header:
        while i0 < len(lines) and lines[i0].startswith("//"):
            i0 += 1
        while i0 < len(lines) and not lines[i0].strip():
            i0 += 1
    if start is not None:
        i0 = next((i for i, ln in enumerate(lines) if start in ln), None)
        if i0 is None:
            raise ValueError(f"{stages.name(p)} has no line containing {start!r}")
    if end is not None:
        i1 = next((i + 1 for i in range(i0, len(lines)) if end in lines[i]), None)
        if i1 is None:
            raise ValueError(f"{stages.name(p)} has no line containing {end!r} after {start!r}")
    whole = start is None and end is None
    title = (f"src/kernels/{stages.name(p)}.cu — {'the whole kernel' if whole else 'lines'} "
             f"{i0 + 1}–{i1}")
    return Listing(stages.name(p), "\n".join(lines[i0:i1]), i0 + 1, title,
                   "pe-listing" if whole else "pe-excerpt")


# ---- the diff from the parent -----------------------------------------------------------------------

@dataclass
class Diff:
    """The unified diff from a stage's parent to it (header comments left out), instrumentation folded:
    a hunk that only changes instrumentation is hidden whole; in the others instrumentation lines and
    wait tags are hidden; a line whose only change is its wait tag counts as instrumentation."""

    parent: str
    stage: str
    hunks: list = field(default_factory=list)     # [[(op, text)]], op in ' ', '-', '+', '@'
    left_out: int = 0                             # hunks of the whole diff not shown (diff(..., only=))
    left_out_lines: int = 0                       # their changed lines

    def _kinds(self):
        """Per hunk: whether it is instrumentation only; per line: whether it is instrumentation."""
        out = []
        for h in self.hunks:
            minus = [t for op, t in h if op == "-"]
            plus = [t for op, t in h if op == "+"]
            # a changed line whose only difference is its wait tag (renumbered tags): instrumentation
            tag_only = set()
            sm = difflib.SequenceMatcher(a=[strip_tags(x) for x in minus], b=[strip_tags(x) for x in plus],
                                         autojunk=False)
            for tag, i1, i2, j1, j2 in sm.get_opcodes():
                if tag == "equal":
                    tag_only |= {("-", minus[i]) for i in range(i1, i2) if tag_spans(minus[i])}
                    tag_only |= {("+", plus[j]) for j in range(j1, j2) if tag_spans(plus[j])}
            flags = [op in "-+ " and (is_instrumentation(t) or (op, t) in tag_only) for op, t in h]
            changed = [f for (op, _), f in zip(h, flags) if op in "-+"]
            out.append((bool(changed) and all(changed), flags))
        return out

    def counts(self) -> dict:
        """Changed lines (added + removed), and how many of them are instrumentation."""
        changed = instr = 0
        for h, (_, flags) in zip(self.hunks, self._kinds()):
            for (op, _), f in zip(h, flags):
                if op in "-+":
                    changed += 1
                    instr += f
        return {"changed": changed, "instrumentation": instr, "shown": changed - instr}

    def __str__(self) -> str:
        head = [f"--- {self.parent}", f"+++ {self.stage}"]
        return "\n".join(head + [("" if op == "@" else op) + t for h in self.hunks for op, t in h])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        rows, n_lines, n_tags = [], 0, 0    # n_lines: every row the toggle shows (changes and context)
        for h, (instr_hunk, flags) in zip(self.hunks, self._kinds()):
            hunk_rows = []
            if instr_hunk:
                n_lines += sum(op != "@" for op, _ in h)
            for (op, t), f in zip(h, flags):
                cls = {"-": "gd", "+": "gi", "@": "gu"}.get(op, "")
                if op == "@":
                    hunk_rows.append(f'<span class="gu">{html.escape(t)}</span>\n')
                    continue
                if f:
                    n_lines += not instr_hunk
                    hunk_rows.append(f'<span class="pe-instr"><span class="{cls}">{html.escape(op + t)}</span>\n</span>')
                    continue
                text = op + t
                spans = [(a + 1, b + 1) for a, b in tag_spans(t)]
                n_tags += len(spans) if op in "-+" else 0
                pieces, i = [], 0
                for a, b in spans:
                    pieces += [html.escape(text[i:a]), f'<span class="pe-instr">{html.escape(text[a:b])}</span>']
                    i = b
                pieces.append(html.escape(text[i:]))
                body = "".join(pieces)
                hunk_rows.append(f'<span class="{cls}">{body}</span>\n' if cls else f"{body}\n")
            if instr_hunk:
                hunk_rows = [f'<span class="pe-instr">{"".join(hunk_rows)}</span>']
            rows += hunk_rows
        c = self.counts()
        box, label = _toggle(n_lines, n_tags)
        note = ""
        if c["instrumentation"]:
            note = (f'<div class="pe-fold-note">{c["shown"]} changed lines shown; {c["instrumentation"]} more '
                    f'only feed the book\'s instruments (folded)</div>')
        if self.left_out:
            note += (f'<div class="pe-diff-part">{len(self.hunks)} of {len(self.hunks) + self.left_out} hunks shown; '
                     f'the other {self.left_out} ({self.left_out_lines} changed lines) are in the two files\' '
                     f'sources</div>')
        title = f'<div class="pe-code-title">{html.escape(self.parent)}.cu → {html.escape(self.stage)}.cu</div>'
        return (f'<div class="pe-code pe-diff">{_STYLE}{title}{box}{label}<div>{note}</div>'
                f'<div class="highlight-diff"><div class="highlight"><pre>{"".join(rows)}</pre></div></div></div>')


def diff(stage: str | Path, parent: str | Path | None = None, context: int = 1, only=None) -> Diff:
    """The diff from `parent` (default: the stage's declared parent) to the stage, header comments left out;
    one line of context around each change (git diff -U1): the change is the lesson.

    only: strings; the diff keeps the hunks whose lines contain one of them (the part the page explains)
    and says how many it leaves out; each string must match a hunk."""
    pb = stages.resolve(stage)
    pa = stages.parent_of(stage) if parent is None else stages.resolve(parent)
    la = stages._strip_header(pa.read_text().splitlines())
    lb = stages._strip_header(pb.read_text().splitlines())
    hunks: list = []
    for line in difflib.unified_diff(la, lb, n=context, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            hunks.append([("@", line)])
        elif hunks:
            hunks[-1].append((line[:1] or " ", line[1:]))
    if only is None:
        return Diff(stages.name(pa), stages.name(pb), hunks)
    wanted = [only] if isinstance(only, str) else list(only)
    keep = [h for h in hunks if any(w in t for w in wanted for op, t in h if op != "@")]
    for w in wanted:
        if not any(w in t for h in hunks for op, t in h if op != "@"):
            raise ValueError(f"no hunk of the diff {stages.name(pa)} -> {stages.name(pb)} contains {w!r}: "
                             f"give a string from a changed or context line of that diff")
    gone = [h for h in hunks if h not in keep]
    return Diff(stages.name(pa), stages.name(pb), keep, len(gone), sum(op in "-+" for h in gone for op, _ in h))


# ---- a stage's header, folded; a line of stages, each folded -------------------------------------

class Folded(str):
    """HTML shown as a closed <details> block (native: it opens in the book and in JupyterLab alike)."""

    def _repr_html_(self) -> str:
        return str(self)


def header(stage: str | Path, open_: bool = False, brief: bool = False) -> Folded:
    """The stage's one-line idea as a title, its whole header (what changes, why, recorded, run line, the
    link to its source) folded under it. brief=True: the title, its parent, the link to its source and its
    run line as one unfolded box (a page whose prose says what changes and why)."""
    p = stages.resolve(stage)
    h = stages.read_header(p)
    if brief:
        e = html.escape
        rel = f"src/kernels/{stages.name(p)}.cu"
        parent = f' · from <code>{e(h.parent)}</code>' if h.parent else ""
        return Folded(f'<div class="pe-stage-header pe-stage-brief"><div class="pe-stage-title">Stage {e(h.number)} — '
                      f'{e(h.idea)} <span class="pe-src-link">(<a class="pe-src" href="../../{e(rel)}"><code>{e(rel)}'
                      f'</code></a>{parent})</span></div><div>Run: <code>{e(h.run)}</code></div></div>')
    box = stages.header(p)._repr_html_()
    return Folded(f'<details class="pe-stage-fold"{" open" if open_ else ""}><summary><strong>Stage {html.escape(h.number)}'
                  f' — {html.escape(h.idea)}</strong> <span class="pe-fold-hint">(its header: what changes, why, what '
                  f'was recorded, how to run it)</span></summary>{box}</details>')


def steps(stage_list) -> Folded:
    """A line of stages, one folded entry each: the idea as the title, the header and the diff from the
    declared parent (instrumentation folded) inside."""
    out = []
    for st in stage_list:
        p = stages.resolve(st)
        h = stages.read_header(p)
        d = diff(p)
        c = d.counts()
        out.append(f'<details class="pe-stage-fold"><summary><strong>{html.escape(h.number)}</strong> — '
                   f'{html.escape(h.idea)} <span class="pe-fold-hint">(from {html.escape(h.parent or "")}, '
                   f'{c["shown"]} changed lines)</span></summary>{stages.header(p)._repr_html_()}'
                   f'{d._repr_html_()}</details>')
    return Folded('<div class="pe-steps">' + "".join(out) + "</div>")
