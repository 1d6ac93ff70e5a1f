"""Where things live: the kernels, the book's data, the measured results, the build cache."""
import os
from pathlib import Path

SRC = Path(__file__).resolve().parents[1]
ROOT = SRC.parent
KERNELS = SRC / "kernels"
DATA = ROOT / "book" / "data"
RESULTS = ROOT / "results"   # results/<YYYY-MM-DD>-<device>/: everything measured, one folder per run
CACHE_DIR = Path(os.environ.get("PELIB_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pelib"))
