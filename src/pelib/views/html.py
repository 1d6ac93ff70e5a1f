"""What a chapter shows, as self-contained HTML: tables, figures (PNG at 2x, embedded), notes and
code. The offline sweep views (pelib.views.widgets) are built from these fragments; nothing here
loads anything from outside the page."""
from __future__ import annotations

import base64
import html

from ..notebook import COLUMN_PX, MIN_POINTS, figure_png, figure_text, fit_to_column, min_text_px  # noqa: F401


def figure_html(fig, alt: str = "") -> str:
    """A figure as an embedded PNG (2x) whose alt text is its titles (or, without titles, its drawn text)."""
    text = figure_text(fig)
    data, w, h = figure_png(fig, metadata={"Description": text[:4000]})
    titles = [fig._suptitle.get_text() if fig._suptitle else ""] + [a.get_title() for a in fig.axes]
    alt = alt or " / ".join(t for t in titles if t) or text
    src = "data:image/png;base64," + base64.b64encode(data).decode()
    return f'<img src="{src}" width="{w}" height="{h}" alt="{html.escape(alt[:300], quote=True)}"/>'


def diff_html(text: str) -> str:
    """A unified diff with removed lines red and added lines green (the classes Pygments uses)."""
    out = []
    for line in text.splitlines():
        cls = ("gh" if line.startswith(("---", "+++")) else "gd" if line.startswith("-") else
               "gi" if line.startswith("+") else "gu" if line.startswith("@@") else "")
        esc = html.escape(line)
        out.append(f'<span class="{cls}">{esc}</span>' if cls else esc)
    return '<div class="highlight-diff"><div class="highlight"><pre>' + "\n".join(out) + "</pre></div></div>"


def to_html(obj) -> str:
    """One displayable object (or a list of them) as an HTML fragment."""
    if obj is None:
        return ""
    if isinstance(obj, (list, tuple)):
        return "".join(to_html(o) for o in obj)
    try:
        import matplotlib.figure
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        matplotlib = None
    else:
        if isinstance(obj, matplotlib.figure.Figure):
            import matplotlib.pyplot as plt
            try:
                return figure_html(obj)
            finally:
                plt.close(obj)
    rep = getattr(obj, "_repr_html_", None)
    if callable(rep):
        r = rep()
        if r is not None:
            return r
    lang = getattr(obj, "lang", None)
    if isinstance(obj, str) and lang is not None:  # pelib.stages.Rendered: a code block
        title = getattr(obj, "title", "")
        head = f"<p><strong>{html.escape(title)}</strong></p>" if title else ""
        if lang == "diff":
            return head + diff_html(str(obj))
        return head + f'<div class="highlight"><pre>{html.escape(str(obj))}</pre></div>'
    if isinstance(obj, str):
        return f'<div class="pe-note">{html.escape(obj)}</div>'
    rep = getattr(obj, "_repr_markdown_", None)
    if callable(rep):
        return f'<div class="pe-note">{html.escape(rep())}</div>'
    return f'<div class="pe-note">{html.escape(repr(obj))}</div>'


class Fold:
    """Something a page shows folded under a label that says what it holds (a closed <details>, native:
    it opens in the book and in JupyterLab alike); printed, the label and the thing itself."""

    def __init__(self, obj, label: str):
        if not label or not label.strip():
            raise ValueError("a fold needs a label that says what it holds (e.g. 'the descriptors, field by field')")
        self.obj, self.label = obj, label.strip()

    def _repr_html_(self) -> str:
        return (f'<details class="pe-more"><summary>{html.escape(self.label)}</summary>{to_html(self.obj)}'
                f'</details>')

    def __repr__(self) -> str:
        return f"{self.label}\n{self.obj!r}"


def fold(obj, label: str) -> Fold:
    """`obj` (a table, a figure, code, text or a list of them) folded under `label`."""
    return Fold(obj, label)
