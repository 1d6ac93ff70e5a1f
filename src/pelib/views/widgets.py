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

from .html import to_html

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


class _Published:
    """What a sweep or a grid publishes: the live widget view (JupyterLab), the offline HTML view (the
    built book, or wherever no widget exists) and a plain-text stand-in; its static table first."""
    PLACEHOLDER = "(a slider: it moves in a live Jupyter kernel; the table above covers every option)"

    def mimebundle(self, offline: bool | None = None) -> dict:
        data = dict(self.box._repr_mimebundle_() or {}) if self.box is not None else {}
        if offline is None:
            offline = book_build() or self.box is None
        if offline:
            data["text/html"] = self.offline_html()
        data["text/plain"] = self.PLACEHOLDER
        return data

    def _show(self, result):
        """Count a render, keep its result and show it in the live output (if any)."""
        self.renders += 1
        self._last = result
        if self.output is not None:
            with self.output:
                self.output.clear_output(wait=True)
                _display(result)
        return result

    def _ipython_display_(self):
        if self.static is not None:
            _display(self.static() if callable(self.static) else self.static)
        from IPython.display import publish_display_data
        publish_display_data(self.mimebundle())


@dataclass
class Sweep(_Published):
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
        return self._show(self.render(value))


    def offline_html(self) -> str:
        """The offline view: every option rendered now, switched by a range input in the page."""
        values = [v for _, v in self.options]
        start = values.index(self.value) if self.value in values else 0
        return offline_view([(self.description or "option", self.options)], self.render, initial=[start])



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


@dataclass
class Grid(_Published):
    """A live sweep of several parameters: one slider per control, the render of the chosen values, and the
    static fallback (what the rendered book shows)."""

    controls: dict
    render: Callable[..., Any]
    static: Any = None
    values: dict = field(default_factory=dict)
    widgets: dict = field(default_factory=dict, repr=False)
    output: Any = field(default=None, repr=False)
    box: Any = field(default=None, repr=False)
    renders: int = 0

    def select(self, **values) -> Any:
        """Set some controls (as their sliders would) and return what render made of all of them."""
        for k, v in values.items():
            if k not in self.controls:
                raise WidgetError(f"no control {k!r}; the controls are {list(self.controls)}")
            if v not in [o for _, o in self.controls[k]]:
                raise WidgetError(f"{k}={v!r} is not one of the options {[o for _, o in self.controls[k]]}")
        return self._update({**self.values, **values})

    def _update(self, values: dict):
        self.values = dict(values)
        return self._show(self.render(**self.values))

    offline: dict | None = None      # options the offline view covers, per control (default: all)
    max_panels: int = 40

    def offline_html(self) -> str:
        """The offline view: every combination of the leading controls precomputed (offline_grid_html)."""
        ctl = {k: [o for o in opts if self.offline is None or k not in self.offline or o[1] in self.offline[k]]
               for k, opts in self.controls.items()}
        return offline_grid_html(ctl, self.render, self.values, max_panels=self.max_panels)



def sweep_grid(controls: dict, render: Callable[..., Any], *, static=None, values: dict | None = None,
               live: bool = True, offline: dict | None = None, max_panels: int = 40) -> Grid:
    """Sliders over several parameters: `controls` maps each name to its options (values or (label, value)
    pairs), `render(**chosen)` turns the chosen values into a table/plot/text. `values` gives initial
    values (default: each control's first option). static and live: as for sweep(). The built book shows
    the offline view: every combination of the leading controls (within max_panels; `offline` may narrow
    a control's options there), the others held at their initial values and said so."""
    opts = {k: _options(v) for k, v in controls.items()}
    if not callable(render):
        raise WidgetError("render must be a function of the chosen options")
    start = {k: o[0][1] for k, o in opts.items()}
    for k, v in (values or {}).items():
        if k not in opts or v not in [x for _, x in opts[k]]:
            raise WidgetError(f"initial {k}={v!r} is not one of its options")
        start[k] = v
    g = Grid(controls=opts, render=render, static=static, offline=offline, max_panels=max_panels)
    if live:
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover - ipywidgets is a dependency
            live = False
        else:
            for k, o in opts.items():
                g.widgets[k] = w.SelectionSlider(options=o, value=start[k], description=k, continuous_update=False,
                                                 style={"description_width": "initial"})
                g.widgets[k].observe(lambda change, k=k: g._update({**g.values, k: change["new"]}), names="value")
            g.output = w.Output()
            sliders = list(g.widgets.values())
            g.box = w.VBox([w.HBox(sliders[i:i + 3]) for i in range(0, len(sliders), 3)] + [g.output])
    g._update(start)
    return g
