"""Stage files: their listing, their header (one grammar, parsed), source excerpts, and the diff
between a stage and its declared parent.

Every stage file opens with one comment block in this grammar (tests/test_stage_files.py checks it):

    // Stage NN — <the idea, one line>
    // Parent: <family>/<stage name>                  (absent only in a family's first stage)
    // What changes: <text, continued on the following // lines>
    // Why: <text>
    // Recorded: <lab note>, <section or commit>: <numbers>   and/or   // Measured: <results file>
    // Run: python -m pelib.stage <family>/<stage name> [-D NAME=VALUE ...]

Empty `//` lines may separate the sections; a line that does not open with a key continues the
section above it. NN is the file's number (`08a` for an inserted sub-version).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from .paths import KERNELS


class Rendered(str):
    """Text that prints as itself and renders in a notebook as a fenced Markdown code block."""

    lang = ""

    def __new__(cls, text: str, lang: str = "", title: str = ""):
        obj = super().__new__(cls, text)
        obj.lang, obj.title = lang, title
        return obj

    def _repr_markdown_(self) -> str:
        fence = "````" if "```" in self else "```"
        head = f"**{self.title}**\n\n" if self.title else ""
        return f"{head}{fence}{self.lang}\n{self}\n{fence}\n"


def family_stages(family: str) -> list[Path]:
    """The numbered stage files of a family (src/kernels/<family>/NN*_*.cu: 08, 08a, 08b, 09, ...), in
    name order. `family` may be a subfolder, e.g. "fp8/variants"."""
    d = KERNELS / family
    if not d.is_dir():
        raise FileNotFoundError(f"no kernel family {family!r} under {KERNELS}")
    return sorted(p for p in d.glob("[0-9][0-9]*_*.cu") if _NUMBER.match(p.name))


FAMILIES = ("nvfp4", "fp8", "fp8/variants", "sm90")


def all_stages() -> list[Path]:
    """Every stage file of every family, family by family."""
    return [p for f in FAMILIES for p in family_stages(f)]


def name(stage: str | Path) -> str:
    """A stage's name as headers and the CLI spell it: <family>/<file stem>, e.g. fp8/08a_persistent_tiles."""
    return str(resolve(stage).relative_to(KERNELS).with_suffix(""))


_NUMBER = re.compile(r"^(\d\d[a-z]?)_")


def resolve(stage: str | Path) -> Path:
    """A stage file from a path (absolute or relative to src/kernels) or a unique stage name."""
    p = Path(stage)
    for cand in (p, KERNELS / p, KERNELS / p.with_suffix(".cu")):
        if cand.is_file():
            return cand.resolve()
    hits = sorted(KERNELS.glob(f"*/{p.stem}.cu")) or sorted(KERNELS.glob(f"*/{p.stem}_*.cu"))
    if len(hits) == 1:
        return hits[0].resolve()
    if hits:
        raise FileNotFoundError(f"stage {stage!r} is ambiguous: {[str(h.relative_to(KERNELS)) for h in hits]}; "
                                "name it as <family>/<file>.cu")
    raise FileNotFoundError(f"no stage file {stage!r} under {KERNELS}")


def _label(p: Path) -> str:
    try:
        return str(p.relative_to(KERNELS))
    except ValueError:
        return str(p)


def diff(a: str | Path, b: str | Path | None = None, context: int = 3, skip_header: bool = False) -> Rendered:
    """The unified diff from stage a to stage b, rendered as a ```diff block (the lesson of b).

    With one stage, `diff(stage)` is the diff from its declared parent (its header's Parent line) to it.
    skip_header drops both files' opening comment block (their prose differs by design), so only
    the code change is shown.
    """
    if b is None:
        a, b = parent_of(a), a
    pa, pb = resolve(a), resolve(b)
    la, lb = pa.read_text().splitlines(), pb.read_text().splitlines()
    if skip_header:
        la, lb = _strip_header(la), _strip_header(lb)
    lines = difflib.unified_diff(la, lb, fromfile=_label(pa), tofile=_label(pb), n=context, lineterm="")
    text = "\n".join(lines)
    if not text:
        text = f"(no difference between {_label(pa)} and {_label(pb)})"
    return Rendered(text, "diff", f"{_label(pa)} → {_label(pb)}")


def _strip_header(lines: list[str]) -> list[str]:
    i = 0
    while i < len(lines) and lines[i].startswith("//"):
        i += 1
    return lines[i:]


class HeaderText(Rendered):
    """A stage's header: prints as text; in a notebook and the book, wrapped prose with a link to the file."""

    def _repr_html_(self) -> str:
        import html as _html

        e = _html.escape
        path = resolve(self.title)
        rel = f"src/kernels/{_label(path)}"
        # Relative to the chapter file (book/chapters/), as JupyterLab resolves it; the book's build
        # rewrites it for the page's location.
        link = f'<a class="pe-src" href="../../{e(rel)}"><code>{e(rel)}</code></a>'
        try:
            h = read_header(path)
        except HeaderError:
            return (f'<div class="pe-stage-header"><div class="pe-stage-title">{link}</div>'
                    f'<div class="pe-note">{e(str(self))}</div></div>')
        rows = [("Parent", h.parent and f"<code>{e(h.parent)}</code>"), ("What changes", e(h.what)),
                ("Why", e(h.why)), ("Recorded", h.recorded and e(h.recorded)),
                ("Measured", h.measured and e(h.measured)), ("Run", f"<code>{e(h.run)}</code>")]
        dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows if v)
        return (f'<div class="pe-stage-header"><div class="pe-stage-title">Stage {e(h.number)} — '
                f'{e(h.idea)} <span class="pe-src-link">({link})</span></div><dl>{dl}</dl></div>')


def header(stage: str | Path) -> HeaderText:
    """The stage's opening comment (what it changes, why, the recorded result), without the slashes."""
    lines = []
    for line in resolve(stage).read_text().splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[3:] if line.startswith("// ") else line[2:])
    return HeaderText("\n".join(lines), "text", _label(resolve(stage)))


def source(stage: str | Path, start: str | None = None, end: str | None = None) -> Rendered:
    """The stage's source, or the lines from the first containing `start` to the first after it containing `end`."""
    p = resolve(stage)
    lines = p.read_text().splitlines()
    i0, i1 = line_span(lines, start, end)
    if i0 is None:
        raise ValueError(f"{_label(p)} has no line containing {start!r}")
    if i1 is None:
        raise ValueError(f"{_label(p)} has no line containing {end!r} after {start!r}")
    return Rendered("\n".join(lines[i0:i1]), "cpp", _label(p))


def line_span(lines: list[str], start: str | None, end: str | None) -> tuple[int | None, int | None]:
    """(i0, i1): lines[i0:i1] runs from the first line containing `start` (the first line where None) to
    the first from there containing `end` (the last line where None); i0 is None where no line contains
    `start`, i1 where none from i0 on contains `end` (pelib.exercises' regions use it too)."""
    i0 = 0 if start is None else next((i for i, line in enumerate(lines) if start in line), None)
    if i0 is None:
        return None, None
    i1 = len(lines) if end is None else next((i + 1 for i in range(i0, len(lines)) if end in lines[i]), None)
    return i0, i1


def diff_stats(a: str | Path, b: str | Path | None = None, ignore_indent: bool = False) -> dict:
    """Lines added and removed from a to b (with one stage: from its declared parent), header comment
    excluded (how big the one idea is). ignore_indent compares lines without their leading and
    trailing blanks, so a block that only moved one level deeper (into a new loop or branch) does
    not count as changed code (as `git diff -w`)."""
    if b is None:
        a, b = parent_of(a), a
    return diff_stats_text(resolve(a).read_text(), resolve(b).read_text(), ignore_indent)


def diff_stats_text(a: str, b: str, ignore_indent: bool = False) -> dict:
    """diff_stats of two stage files' texts (e.g. as git holds an older version of them)."""
    la, lb = _strip_header(a.splitlines()), _strip_header(b.splitlines())
    if ignore_indent:
        la, lb = [x.strip() for x in la], [x.strip() for x in lb]
    added = removed = 0
    for line in difflib.unified_diff(la, lb, n=0, lineterm=""):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return {"added": added, "removed": removed}


# ---- the header grammar -----------------------------------------------------------------------------

class HeaderError(ValueError):
    """A stage file's opening comment does not follow the header grammar (see the module doc)."""


@dataclass(frozen=True)
class Header:
    """A stage file's parsed header."""

    number: str                 # "03", "08a": the file's number
    idea: str                   # the one-line idea
    parent: str | None          # "fp8/08b_double_staging"; None for a family's first stage
    what: str
    why: str
    recorded: str | None        # "<lab note>, <section or commit>: <numbers>"
    measured: str | None        # "<results file>: ..."
    run: str                    # "python -m pelib.stage fp8/03_x32_loads"

    @classmethod
    def parse(cls, text: str, label: str = "stage") -> "Header":
        """Parse the leading comment block of a stage file's text (raises HeaderError naming the fix)."""
        lines = []
        for line in text.splitlines():
            if not line.startswith("//"):
                break
            lines.append(line[3:] if line.startswith("// ") else line[2:])
        if not lines:
            raise HeaderError(f"{label}: no header comment; the file must open with '// Stage NN — <idea>'")
        m = re.fullmatch(r"Stage (\d\d[a-z]?) — (\S.*)", lines[0].rstrip())
        if not m:
            raise HeaderError(f"{label}: the first line must read '// Stage NN — <idea in one line>' "
                              f"(an em dash), not {lines[0]!r}")
        fields: dict[str, list[str]] = {}
        order: list[str] = []
        key = None
        for line in lines[1:]:
            km = re.match(r"(Parent|What changes|Why|Recorded|Measured|Run): ?(.*)", line)
            if km:
                key = km.group(1)
                if key in fields:
                    raise HeaderError(f"{label}: '{key}:' appears twice in the header")
                fields[key], _ = [km.group(2).strip()], order.append(key)
            elif line.strip() == "":
                continue
            elif key is None:
                raise HeaderError(f"{label}: header text before the first key: {line!r}; start it with "
                                  "'Parent:' or 'What changes:'")
            else:
                fields[key].append(line.strip())
        want = ["Parent", "What changes", "Why", "Recorded", "Measured", "Run"]
        if [k for k in want if k in order] != order:
            raise HeaderError(f"{label}: the header keys must come in the order {want} (without the absent "
                              f"ones), found {order}")
        for k in ("What changes", "Why", "Run"):
            if k not in fields or not " ".join(fields[k]).strip():
                raise HeaderError(f"{label}: the header has no '// {k}: ...' section")
        if "Recorded" not in fields and "Measured" not in fields:
            raise HeaderError(f"{label}: the header needs '// Recorded: <note>, <section or commit>' or "
                              "'// Measured: <results file>' (say 'none' and why when there is no number)")
        if len(fields["Run"]) != 1 or not fields["Run"][0].startswith("python -m pelib.stage "):
            raise HeaderError(f"{label}: the Run line must be one command, "
                              "'// Run: python -m pelib.stage <family>/<name> [-D NAME=VALUE ...]'")
        if "Parent" in fields and len(fields["Parent"]) != 1:
            raise HeaderError(f"{label}: the Parent line names one stage and nothing else")
        join = lambda k: " ".join(fields[k]).strip() if k in fields else None  # noqa: E731
        return cls(m.group(1), m.group(2).strip(), join("Parent"), join("What changes"), join("Why"),
                   join("Recorded"), join("Measured"), join("Run"))


def read_header(stage: str | Path) -> Header:
    """The parsed header of a stage file (checks that its number is the file's)."""
    p = resolve(stage)
    h = Header.parse(p.read_text(), _label(p))
    nm = _NUMBER.match(p.name)
    if nm and nm.group(1) != h.number:
        raise HeaderError(f"{_label(p)}: the header says Stage {h.number}, the file is number {nm.group(1)}")
    return h


def parent_of(stage: str | Path) -> Path:
    """The file of a stage's declared parent (error for a family's first stage, which has none)."""
    h = read_header(stage)
    if h.parent is None:
        raise HeaderError(f"{_label(resolve(stage))} declares no parent: it is its family's first stage")
    return resolve(h.parent + ".cu")


# ---- wait sites: from a timed-out wait's tag to the barrier and the source line ----------------------

@dataclass(frozen=True)
class WaitSite:
    """One bounded mbarrier wait in a source file: its tag (the wait's last argument, printed when it
    times out), the barrier expression, the parity expression, and where it is."""

    tag: int
    barrier: str
    parity: str
    file: Path
    line: int
    text: str

    def describe(self) -> str:
        return f"tag {self.tag} -> barrier {self.barrier} (parity {self.parity}) -> {self.file.name}:{self.line}: {self.text}"


_WAIT_CALL = re.compile(r"\bmbarrier_wait_parity\w*\s*\(")
_TIMEOUT = re.compile(r"mbarrier wait timed out after (\d+) tries: tag=(\d+) smem=(0x[0-9a-f]+) parity=(\d+)"
                      r"(?: cta=\(([\d,]+)\))?(?: thread=(\d+))?")


def _call_args(text: str, start: int) -> list[str] | None:
    """The top-level comma-separated arguments of the call whose '(' is at text[start - 1]."""
    depth, i, args, cur = 1, start, [], ""
    while i < len(text) and depth:
        ch = text[i]
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 1 and ch == ",":
            args.append(cur.strip())
            cur = ""
        elif depth:
            cur += ch
        i += 1
    return args + [cur.strip()] if depth == 0 else None


def wait_sites(path) -> list[WaitSite]:
    """Every mbarrier_wait_parity* call with an explicit tag in a stage (or kernel) source file."""
    p = Path(path) if Path(path).suffix == ".cu" else resolve(f"{path}.cu")
    src = p.read_text()
    out = []
    for m in _WAIT_CALL.finditer(src):
        line_start = src.rfind("\n", 0, m.start()) + 1
        if src[line_start:m.start()].lstrip().startswith("//"):
            continue
        args = _call_args(src, m.end())
        if not args or len(args) < 3 or not re.fullmatch(r"\d+", args[2]):
            continue
        line = src.count("\n", 0, m.start()) + 1
        text = src[line_start:src.find("\n", m.start())].strip()
        out.append(WaitSite(int(args[2]), args[0].lstrip("&").strip(), args[1], p, line, text))
    return out


def explain_timeout(output: str, path) -> list[str]:
    """For each distinct tag in the 'pelib: mbarrier wait timed out ...' lines of a kernel's output
    (device printf, PE_WAIT_PRINTF builds), the timeout as printed, then tag -> barrier -> source line
    of each wait in `path` with that tag (or a line saying none has it)."""
    sites = wait_sites(path)
    out, seen = [], set()
    for m in _TIMEOUT.finditer(output):
        tries, tag, smem, parity, cta, thread = m.groups()
        if tag in seen:
            continue
        seen.add(tag)
        out.append(f"timed out: tag={tag} smem={smem} parity={parity} cta=({cta}) thread={thread} after {tries} tries")
        hits = [s for s in sites if s.tag == int(tag)]
        out += [f"  {s.describe()}" for s in hits] or [f"  no wait in {Path(str(path)).name} has tag {tag}"]
    return out
