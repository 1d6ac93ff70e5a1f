"""Hardware limits, read from the one place the kernels define them (src/kernels/common/limits.cuh).

SMEM_LIMIT is PE_SMEM_LIMIT: the most shared memory one thread block may use on sm_90 and sm_100 after
opting in, 227 KB = 232,448 B (the SM has 228 KB; 1 KB per block is reserved). Every stage is checked
against it and exports it as `smem_limit`; pelib, the model and the book's figures use this constant.
"""
from __future__ import annotations

import re

from ..paths import KERNELS

LIMITS_HEADER = KERNELS / "common" / "limits.cuh"


class LimitsError(RuntimeError):
    """common/limits.cuh does not define a limit in the form pelib reads."""


def _define(name: str) -> int:
    text = LIMITS_HEADER.read_text()
    m = re.search(rf"^#define\s+{name}\s+\(?\s*(\d+)\s*(?:\*\s*(\d+))?\s*\)?\s*$", text, re.MULTILINE)
    if not m:
        raise LimitsError(f"{LIMITS_HEADER} has no '#define {name} <n>' or '#define {name} (<a> * <b>)'")
    return int(m.group(1)) * int(m.group(2) or 1)


SMEM_LIMIT: int = _define("PE_SMEM_LIMIT")
SMEM_LIMIT_LABEL = f"per-block limit {SMEM_LIMIT:,} B ({SMEM_LIMIT // 1024} KB)"
