"""Stage files as the chapters show them: listing, source excerpts and the diff between two stages."""
from __future__ import annotations

import difflib
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
    """The numbered stage files of a family (src/kernels/<family>/NN_*.cu), in order."""
    d = KERNELS / family
    if not d.is_dir():
        raise FileNotFoundError(f"no kernel family {family!r} under {KERNELS}")
    return sorted(p for p in d.glob("[0-9][0-9]_*.cu"))


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
                                "name it as family/file.cu")
    raise FileNotFoundError(f"no stage file {stage!r} under {KERNELS}")


def _label(p: Path) -> str:
    try:
        return str(p.relative_to(KERNELS))
    except ValueError:
        return str(p)


def diff(a: str | Path, b: str | Path, context: int = 3, skip_header: bool = False) -> Rendered:
    """The unified diff from stage a to stage b, rendered as a ```diff block (the lesson of b).

    skip_header drops both files' opening comment block (their prose differs by design), so only
    the code change is shown.
    """
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


def header(stage: str | Path) -> Rendered:
    """The stage's opening comment (what it changes, why, the recorded result), without the slashes."""
    lines = []
    for line in resolve(stage).read_text().splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[3:] if line.startswith("// ") else line[2:])
    return Rendered("\n".join(lines), "text", _label(resolve(stage)))


def source(stage: str | Path, start: str | None = None, end: str | None = None) -> Rendered:
    """The stage's source, or the lines from the first containing `start` to the first after it containing `end`."""
    p = resolve(stage)
    lines = p.read_text().splitlines()
    i0, i1 = 0, len(lines)
    if start is not None:
        i0 = next((i for i, line in enumerate(lines) if start in line), None)
        if i0 is None:
            raise ValueError(f"{_label(p)} has no line containing {start!r}")
    if end is not None:
        i1 = next((i + 1 for i in range(i0, len(lines)) if end in lines[i]), None)
        if i1 is None:
            raise ValueError(f"{_label(p)} has no line containing {end!r} after {start!r}")
    return Rendered("\n".join(lines[i0:i1]), "cpp", _label(p))


def diff_stats(a: str | Path, b: str | Path) -> dict:
    """Lines added and removed from a to b, header comment excluded (how big the one idea is)."""
    la, lb = _strip_header(resolve(a).read_text().splitlines()), _strip_header(resolve(b).read_text().splitlines())
    added = removed = 0
    for line in difflib.unified_diff(la, lb, n=0, lineterm=""):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return {"added": added, "removed": removed}
