"""The one source of today's date and the current time for everything pelib labels or writes.

Generated text that is committed (the README's blocks, result folders' names) must not change with the
calendar; routing every read of the clock through here lets a test move the date a year ahead and check
that nothing committed moves with it (tests/test_readme.py). Elapsed-time measurements (timeouts, wall
seconds) use time.monotonic/time.time directly: they never reach committed text.
"""
from __future__ import annotations

import datetime as _dt

# A test sets this to a datetime (UTC) to stand for "now"; None means the real clock.
_fixed: _dt.datetime | None = None


def now() -> _dt.datetime:
    """The current time, timezone-aware UTC."""
    return _fixed if _fixed is not None else _dt.datetime.now(_dt.timezone.utc)


def today() -> _dt.date:
    """Today's date (UTC)."""
    return now().date()


def stamp() -> str:
    """'2026-11-27T16:20:24+00:00': now, to the second, as results record it."""
    return now().isoformat(timespec="seconds")
