"""Sweeps over one parameter of a stage: a live ipywidgets slider in JupyterLab, and in the rendered
book an offline view whose every position was computed when the page was built.

The rendered book has no kernel. A sweep displayed while the book is built (PELIB_BOOK_BUILD=1, set by
book/_ext/pe_book.py) therefore also carries an HTML view: one panel per position, precomputed, and a
plain range input that only chooses which panel is shown (book/_static/pe-sweep.js). JupyterLab shows
the live widget instead (its MIME type ranks first there; the book's build drops it).
"""
from __future__ import annotations

import html
import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

BOOK_BUILD_ENV = "PELIB_BOOK_BUILD"
OFFLINE_NOTE = ("Every position below was computed when this page was built; in JupyterLab "
                "(<code>make lab</code>) the same control re-runs live.")
_ids = itertools.count()


def book_build() -> bool:
    """True while the book is being built (the pages then embed offline views of their widgets)."""
    return os.environ.get(BOOK_BUILD_ENV) == "1"


def offline_view(controls: Sequence[tuple[str, Sequence[tuple[str, Any]]]], render: Callable[..., Any],
                 initial: Sequence[int] | None = None, note: str = OFFLINE_NOTE) -> str:
    """An HTML view with one range input per control and one precomputed panel per combination.

    controls: [(name, [(label, value), ...]), ...]; render(*values) returns what a panel shows (a
    table, a figure, text, or a list of them; see pelib.views.html.to_html). initial: the index of
    each control's starting position (default: the first).
    """
    from .html import to_html

    if not controls or any(not opts for _, opts in controls):
        raise WidgetError("an offline view needs at least one control with at least one option")
    initial = list(initial) if initial is not None else [0] * len(controls)
    uid = f"pe-sweep-{os.getpid()}-{next(_ids)}"
    parts = [f'<div class="pe-sweep" id="{uid}">', f'<p class="pe-sweep-note">{note}</p>' if note else "",
             '<div class="pe-sweep-controls">']
    for k, (name, opts) in enumerate(controls):
        labels = [lab for lab, _ in opts]
        cid = f"{uid}-{k}"
        parts.append(
            f'<label class="pe-sweep-control" for="{cid}">{html.escape(name)} '
            f'<input type="range" class="pe-sweep-range" id="{cid}" min="0" max="{len(opts) - 1}" step="1" '
            f'value="{initial[k]}" data-labels="{html.escape(json.dumps(labels), quote=True)}" '
            f'aria-label="{html.escape(name, quote=True)}"/>'
            f'<output for="{cid}">{html.escape(labels[initial[k]])}</output></label>')
    parts.append("</div>")
    start = ",".join(str(i) for i in initial)
    for idx in itertools.product(*(range(len(opts)) for _, opts in controls)):
        key = ",".join(str(i) for i in idx)
        values = [controls[k][1][i][1] for k, i in enumerate(idx)]
        hidden = "" if key == start else " hidden"
        parts.append(f'<div class="pe-sweep-panel" data-key="{key}"{hidden}>{to_html(render(*values))}</div>')
    parts.append("</div>")
    return "".join(parts)


class WidgetError(ValueError):
    """A sweep was set up with options it cannot show."""


def offline_grid_html(controls: dict, render: Callable[..., Any], values: dict, max_panels: int = 40,
                      note: str = OFFLINE_NOTE) -> str:
    """The offline view of a sweep over several controls ({name: [(label, value), ...]}) rendered by
    render(**values): every combination of the leading controls whose product stays within max_panels,
    the others held at `values` (said in the note)."""
    names, n = [], 1
    for k, opts in controls.items():
        if len(opts) < 2:          # nothing to move: held, like the controls past the panel budget
            continue
        if n * len(opts) > max_panels:
            break
        names.append(k)
        n *= len(opts)
    if not names:
        raise WidgetError(f"no control fits {max_panels} offline panels")
    held = [k for k in controls if k not in names]
    if held:
        note += (" Offline, the view covers " + ", ".join(names) + "; " + ", ".join(f"{k} stays at {values[k]}"
                 for k in held) + " (it moves in JupyterLab).")
    initial = [[v for _, v in controls[k]].index(values[k]) for k in names]
    return offline_view([(k, controls[k]) for k in names],
                        lambda *vs: render(**{**values, **dict(zip(names, vs))}), initial=initial, note=note)


def _display(obj) -> None:
    """Show a table, figure, text or anything IPython can display; close figures once shown."""
    from IPython.display import display

    if obj is None:
        return
    if isinstance(obj, (list, tuple)):
        for o in obj:
            _display(o)
        return
    if isinstance(obj, str):
        print(obj)
        return
    display(obj)
    try:  # a matplotlib Figure shown by display() stays open otherwise and is drawn twice
        import matplotlib.figure
        import matplotlib.pyplot as plt
        if isinstance(obj, matplotlib.figure.Figure):
            plt.close(obj)
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        pass


def _options(options: Iterable) -> list[tuple[str, Any]]:
    """(label, value) pairs from values or from (label, value) pairs."""
    out = []
    for o in options:
        if isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str):
            out.append(o)
        else:
            out.append((str(o), o))
    if not out:
        raise WidgetError("a sweep needs at least one option")
    labels = [lab for lab, _ in out]
    if len(set(labels)) != len(labels):
        raise WidgetError(f"option labels must be distinct, got {labels}")
    return out


@dataclass
class Sweep:
    """A live sweep: a slider over the options, the render of the chosen one, and the static fallback."""

    options: list[tuple[str, Any]]
    render: Callable[[Any], Any]
    static: Any = None
    description: str = ""
    value: Any = None
    control: Any = field(default=None, repr=False)
    output: Any = field(default=None, repr=False)
    box: Any = field(default=None, repr=False)
    renders: int = 0

    def select(self, value) -> Any:
        """Choose an option (as the slider would) and return what render made of it."""
        values = [v for _, v in self.options]
        if value not in values:
            raise WidgetError(f"{value!r} is not one of the options {values}")
        if self.control is not None and self.control.value != value:
            self.control.value = value  # the observer calls _update
            return self._last
        return self._update(value)

    def _update(self, value):
        self.value = value
        self.renders += 1
        result = self.render(value)
        self._last = result
        if self.output is not None:
            with self.output:
                self.output.clear_output(wait=True)
                _display(result)
        return result

    PLACEHOLDER = "(a slider: it moves in a live Jupyter kernel; the table above covers every option)"

    def offline_html(self) -> str:
        """The offline view: every option rendered now, switched by a range input in the page."""
        values = [v for _, v in self.options]
        start = values.index(self.value) if self.value in values else 0
        return offline_view([(self.description or "option", self.options)], self.render, initial=[start])

    def mimebundle(self, offline: bool | None = None) -> dict:
        """What the sweep publishes: the live widget view (JupyterLab), the offline HTML view (the
        built book, or wherever no widget exists) and a plain-text stand-in."""
        data = dict(self.box._repr_mimebundle_() or {}) if self.box is not None else {}
        if offline is None:
            offline = book_build() or self.box is None
        if offline:
            data["text/html"] = self.offline_html()
        data["text/plain"] = self.PLACEHOLDER
        return data

    def _ipython_display_(self):
        if self.static is not None:
            _display(self.static() if callable(self.static) else self.static)
        from IPython.display import publish_display_data
        publish_display_data(self.mimebundle())


def sweep(options: Sequence, render: Callable[[Any], Any], *, static=None, description: str = "",
          value=None, live: bool = True) -> Sweep:
    """A slider over `options` whose choice `render(value)` turns into a table/plot/text.

    options: values, or (label, value) pairs. render: called with the chosen value (and once for the
    initial one). static: a table/figure (or a function making one) covering every option, shown
    above the slider: the rendered book has no live kernel, so that is what its readers see.
    live=False builds no widget (just the static part), for pages rendered without ipywidgets.
    Display the returned Sweep (last expression of a cell) to show it.
    """
    opts = _options(options)
    if not callable(render):
        raise WidgetError("render must be a function of the chosen option")
    values = [v for _, v in opts]
    if value is None:
        value = values[0]
    elif value not in values:
        raise WidgetError(f"initial value {value!r} is not one of the options {values}")
    s = Sweep(options=opts, render=render, static=static, description=description)
    if live:
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover - ipywidgets is a dependency
            live = False
        else:
            s.control = w.SelectionSlider(options=opts, value=value, description=description,
                                          continuous_update=False,
                                          style={"description_width": "initial"})
            s.output = w.Output()
            s.control.observe(lambda change: s._update(change["new"]), names="value")
            s.box = w.VBox([s.control, s.output])
    s._update(value)
    return s
