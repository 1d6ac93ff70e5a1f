"""How a notebook shows pelib's figures: PNG at 2x with the figure's drawn text (its evidence label) as
metadata; set up by pelib.device.banner, the first cell of every chapter."""
from __future__ import annotations

import io
import struct

SCALE = 2  # figures are rendered at 2x and shown at 1x: sharp on high-density screens and when zoomed
COLUMN_PX = 688   # the book's text column at a 1280-px window (tests/test_book.py measures the pages)
MIN_POINTS = 7.0  # the smallest text drawn: 7 pt at 100 dpi is 9.7 px, shown 1:1 in the column


def figure_text(fig) -> str:
    """The text drawn on a figure, titles first (where its evidence label is), tick labels left out."""
    from matplotlib.text import Text

    ticks = {id(t) for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())}
    titles = [fig._suptitle] if fig._suptitle is not None else []
    titles += [ax.title for ax in fig.axes] + [getattr(ax, "_left_title") for ax in fig.axes]
    rest = [t for t in fig.findobj(Text) if id(t) not in ticks]
    seen = dict.fromkeys(t.get_text().strip() for t in titles + rest if t.get_visible())
    return " | ".join(t for t in seen if t)


def min_text_px(fig) -> float:
    """The smallest visible text on a figure, in pixels of its 1x PNG (font points x dpi / 72); the
    book's tests scale it by the shown width to check that no figure text renders below 9 CSS px."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return round(min(sizes) * fig.dpi / 72, 2) if sizes else 0.0


def fit_to_column(fig) -> None:
    """Draw a figure for the column it is shown in: text below MIN_POINTS is raised to it, and a figure
    wider than the column is narrowed to its width (its fonts keep their point sizes, so they are not
    shrunk by the browser), its height kept; long titles and tick labels are wrapped, wide legends get
    fewer columns, and the layout is redone where the figure had one."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < MIN_POINTS:
            t.set_fontsize(MIN_POINTS)
    w_in, h_in = fig.get_size_inches()
    max_in = COLUMN_PX / fig.dpi * 0.97          # room for what bbox_inches="tight" adds at the edges
    if w_in > max_in:
        fig.set_size_inches(max_in, h_in)
    _relayout(fig)
    _wrap_wide_text(fig)
    _relayout(fig)


def _wrap(text: str, chars: int) -> str:
    """Each line wrapped at `chars`; a line indented by two spaces continues the one before it (a text wrapped
    earlier at another width), so the two are re-flowed together rather than broken again one by one."""
    import textwrap

    paras: list[str] = []
    for ln in text.split("\n"):
        if paras and paras[-1].strip() and ln.startswith("  ") and ln.strip():
            paras[-1] += " " + ln.strip()
        else:
            paras.append(ln)
    return "\n".join(w for p in paras for w in (textwrap.wrap(p, chars, subsequent_indent="  " if "\n" in text else "")
                                                 or [""]))


def _wrap_wide_text(fig) -> None:
    """Titles, labels and legend entries wider than the column are wrapped onto more lines; tick labels
    longer than 28 characters too; a legend wider than the column gets fewer columns."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    limit = COLUMN_PX * 0.92
    for ax in fig.axes:
        if any(len(t.get_text()) > 28 for t in ax.get_yticklabels()):
            wrapped = [_wrap(t.get_text(), 24) for t in ax.get_yticklabels()]
            size = ax.get_yticklabels()[0].get_fontsize()
            ax.set_yticks(ax.get_yticks(), wrapped, fontsize=size)
    ticks = {id(t) for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())}
    for t in fig.findobj(Text):
        text = t.get_text()
        if id(t) in ticks or not t.get_visible() or not text.strip() or t.get_rotation() not in (0, 0.0):
            continue
        ext = t.get_window_extent(renderer)
        room = min(limit, fig.bbox.width - max(ext.x0, 0.0) - 4)   # what is left to the figure's right edge
        if ext.width > room:
            t.set_text(_wrap(text, max(20, int(max(len(ln) for ln in text.split("\n")) * room / ext.width))))
    for leg in [ax.get_legend() for ax in fig.axes] + list(fig.legends):
        while leg is not None and leg._ncols > 1 and leg.get_window_extent(renderer).width > limit:
            leg.set_ncols(leg._ncols - 1)


def _relayout(fig) -> None:
    """tight_layout again after a resize (a figure with its own layout engine keeps it), warnings kept out
    of the page: a layout that cannot be improved is drawn as it is."""
    import warnings

    if (fig.get_layout_engine() if hasattr(fig, "get_layout_engine") else None) is not None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fig.tight_layout()
        except Exception:  # noqa: BLE001  (a figure whose artists refuse tight_layout keeps its own)
            pass


def figure_png(fig, scale: int = SCALE, metadata: dict | None = None) -> tuple[bytes, int, int]:
    """PNG bytes of a matplotlib figure at `scale` times its dpi, and its size in CSS pixels (1x); the
    metadata also records the smallest text's size at 1x ('pe:min-text-px')."""
    fit_to_column(fig)
    meta = {**(metadata or {}), "pe:min-text-px": str(min_text_px(fig))}
    for _ in range(4):   # what bbox_inches="tight" adds (outside legends, long labels) must fit too
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=fig.dpi * scale, bbox_inches="tight", facecolor="white",
                    metadata=meta)
        data = buf.getvalue()
        w, h = struct.unpack(">II", data[16:24])  # the IHDR chunk of a PNG
        over = w / scale - COLUMN_PX
        w_in, h_in = fig.get_size_inches()
        if over <= 1 or w_in <= 4.0:
            break
        fig.set_size_inches(max(4.0, w_in - over / fig.dpi - 0.05), h_in)
        _relayout(fig)
        _wrap_wide_text(fig)
        _relayout(fig)
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
