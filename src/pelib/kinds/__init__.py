"""What only one family of stages needs, beside pelib.stage's one host path: one adapter per family."""
from __future__ import annotations

from . import fp8, nvfp4, sm90
from .base import Kind, KindError

KINDS: dict[str, Kind] = {"fp8": fp8.Fp8(), "nvfp4": nvfp4.Nvfp4(), "sm90": sm90.Sm90()}


def of(family: str) -> Kind:
    """The adapter of a stage family (the folder under src/kernels)."""
    if family not in KINDS:
        raise KeyError(f"no adapter for stage family {family!r}: families are {sorted(KINDS)}")
    return KINDS[family]
