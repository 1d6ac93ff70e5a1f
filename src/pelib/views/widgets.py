"""ipywidgets that sweep one parameter of a stage, with a static fallback for the rendered book."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence


class WidgetError(ValueError):
    """A sweep was set up with options it cannot show."""


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

    def _ipython_display_(self):
        if self.static is not None:
            _display(self.static() if callable(self.static) else self.static)
        if self.box is not None:
            from IPython.display import publish_display_data
            # The widget view, with a plain-text stand-in instead of "VBox(children=...)" for renderers
            # that have no widget state (the built book).
            data = dict(self.box._repr_mimebundle_() or {})
            data["text/plain"] = self.PLACEHOLDER
            publish_display_data(data)


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
