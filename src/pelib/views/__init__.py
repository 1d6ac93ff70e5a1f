"""What the chapters show: tables, figures and widgets, one module per book part."""
from __future__ import annotations

from .html import figure_png, figure_text  # noqa: F401  (figure_text: what a figure says, for the tests)


def figure_png_formatter(fig):
    """IPython's image/png formatter for matplotlib figures: 2x pixels shown at 1x, and the figure's
    drawn text (which carries its evidence label) in the PNG's Description, for search and for the
    book's tests."""
    import base64

    data, w, h = figure_png(fig, metadata={"Description": figure_text(fig)[:4000]})
    return base64.b64encode(data).decode("ascii"), {"width": w, "height": h}


def _keep_png_formatter(ip) -> None:
    from matplotlib.figure import Figure

    fmt = ip.display_formatter.formatters["image/png"]
    try:
        current = fmt.lookup_by_type(Figure)
    except KeyError:
        current = None
    if current is not figure_png_formatter:
        fmt.for_type(Figure, figure_png_formatter)


def notebook_setup() -> None:
    """Figures in a notebook render at 2x with their text as metadata (figure_png_formatter). Called by
    pelib.device.banner, every chapter's first cell. The inline backend installs its own formatter
    when pyplot first loads it, so ours is put back before each cell's figures are flushed."""
    try:
        from IPython import get_ipython
    except ImportError:  # outside IPython there is nothing to set
        return
    ip = get_ipython()
    if ip is None or getattr(ip, "_pelib_notebook_setup", False):
        return
    import matplotlib
    import matplotlib.pyplot as plt

    # Resolve the backend now: loading the inline backend installs its formatters, which ours replaces.
    plt.switch_backend(matplotlib.get_backend())
    _keep_png_formatter(ip)
    ip.events.register("post_execute", lambda: _keep_png_formatter(ip))
    ip._pelib_notebook_setup = True
