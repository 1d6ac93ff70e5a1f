"""What the chapters show: tables, figures and widgets, one module per book part."""
from __future__ import annotations

from ..notebook import figure_png, figure_text, notebook_setup  # noqa: F401  (what a figure says, for the tests)
