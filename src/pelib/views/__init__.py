"""What the chapters show: tables, figures and widgets, one module per book part."""


def notebook_setup() -> None:
    """Figures in a notebook render at 2x (PNG 'retina': twice the pixels, shown at 1x), so their text
    stays sharp in the book and when zoomed. Called by pelib.device.banner, every chapter's first cell."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside IPython there is nothing to set
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")
