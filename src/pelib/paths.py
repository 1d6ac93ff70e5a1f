"""Where things live: the kernels, the book's data, the measured results, the build cache."""
from pathlib import Path

SRC = Path(__file__).resolve().parents[1]
ROOT = SRC.parent
KERNELS = SRC / "kernels"
DATA = ROOT / "book" / "data"
RESULTS = ROOT / "results"   # results/<YYYY-MM-DD>-<device>/: everything measured, one folder per run


def cache_dir() -> Path:
    """The build cache: PELIB_CACHE, else $XDG_CACHE_HOME/pelib, else ~/.cache/pelib (resolved at each call)."""
    from .cache import cache_dir as _cache_dir
    return _cache_dir()


def __getattr__(name):
    # CACHE_DIR is resolved when read, so importing pelib never needs a home directory.
    if name == "CACHE_DIR":
        return cache_dir()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
