"""How a notebook shows pelib's figures: PNG at 2x with the figure's drawn text (its evidence label) as
metadata; set up by pelib.device.banner, the first cell of every chapter."""
from __future__ import annotations

import io
import struct

SCALE = 2  # figures are rendered at 2x and shown at 1x: sharp on high-density screens and when zoomed


def figure_text(fig) -> str:
    """The text drawn on a figure, titles first (where its evidence label is), tick labels left out."""
    from matplotlib.text import Text

    ticks = {id(t) for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())}
    titles = [fig._suptitle] if fig._suptitle is not None else []
    titles += [ax.title for ax in fig.axes] + [getattr(ax, "_left_title") for ax in fig.axes]
    rest = [t for t in fig.findobj(Text) if id(t) not in ticks]
    seen = dict.fromkeys(t.get_text().strip() for t in titles + rest if t.get_visible())
    return " | ".join(t for t in seen if t)


def figure_png(fig, scale: int = SCALE, metadata: dict | None = None) -> tuple[bytes, int, int]:
    """PNG bytes of a matplotlib figure at `scale` times its dpi, and its size in CSS pixels (1x)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi * scale, bbox_inches="tight", facecolor="white",
                metadata=metadata)
    data = buf.getvalue()
    w, h = struct.unpack(">II", data[16:24])  # the IHDR chunk of a PNG
    return data, round(w / scale), round(h / scale)


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
