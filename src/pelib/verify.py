"""Poison outputs, compare with a reference under tolerances derived from the number formats, locate bad tiles."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

# Unit roundoff (half an ulp at 1.0) of each storage format: 2^-(mantissa bits + 1).
UNIT_ROUNDOFF = {
    "float32": 2.0**-24,
    "tfloat32": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float16": 2.0**-11,
    "float8_e4m3fn": 2.0**-4,
    "float8_e5m2": 2.0**-3,
}
# FP8 tensor-core products are summed with fewer bits than IEEE FP32 (DeepSeek-V3 technical report,
# arXiv:2412.19437, sec. 3.3.2: about 14 bits retained on H800): use 2^-13 as the per-add roundoff of a
# tensor-core "FP32" accumulator unless the caller knows better.
TENSOR_CORE_ACC_ROUNDOFF = 2.0**-13


@dataclass(frozen=True)
class Tolerance:
    """|got - ref| <= atol + rtol * |ref|, and why."""

    atol: float
    rtol: float
    why: str = ""


def gemm_tolerance(K: int, a_absmax: float, b_absmax: float, *, out: str = "bfloat16",
                   acc_roundoff: float = TENSOR_CORE_ACC_ROUNDOFF, safety: float = 2.0) -> Tolerance:
    """Tolerance for a GEMM with exact (already quantized) inputs, a K-long accumulation and `out` storage.

    rtol = safety * u(out): the output's own rounding (u(bfloat16) = 2^-8).
    atol = safety * sqrt(K) * (sqrt(K) * max|a| * max|b|) * acc_roundoff: each of the K adds rounds
    by at most acc_roundoff times the partial sum, whose typical size for products of random sign
    is sqrt(K) * max|a||b|; the K rounding errors add up like a random walk, another sqrt(K)
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 3.1 and 3.4).
    """
    if out not in UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff for {out!r}: one of {sorted(UNIT_ROUNDOFF)}")
    scale = math.sqrt(K) * float(a_absmax) * float(b_absmax)   # typical |partial sum|
    atol = safety * math.sqrt(K) * scale * acc_roundoff
    rtol = safety * UNIT_ROUNDOFF[out]
    return Tolerance(atol, rtol, f"K={K}, max|a|={float(a_absmax):.3g}, max|b|={float(b_absmax):.3g}: "
                                 f"atol = {safety:g}*sqrt(K)*(sqrt(K)*max|a||b|)*{acc_roundoff:.3g}, "
                                 f"rtol = {safety:g}*u({out})")


def poison(t: torch.Tensor, value=None) -> torch.Tensor:
    """Fill an output with NaN (floats) or all-ones bits (integers), so unwritten elements show up."""
    if t.dtype.is_floating_point:
        if t.element_size() == 1:  # FP8 has no fill_(nan) in torch; 0xFF is NaN in both E4M3FN and E5M2
            t.view(torch.uint8).fill_(0xFF)
        else:
            t.fill_(float("nan") if value is None else value)
    else:
        t.fill_(torch.iinfo(t.dtype).max if value is None else value)
    return t


@dataclass
class VerifyReport:
    """The comparison's verdict, worst errors and first bad tile."""

    ok: bool
    label: str
    shape: tuple
    atol: float
    rtol: float
    n: int
    n_bad: int
    n_nan: int
    max_abs: float
    max_rel: float
    tile: tuple | None = None
    n_tiles: int = 0
    bad_tiles: int = 0
    nan_tiles: int = 0
    first_bad: tuple | None = None          # index of the first bad element (row-major)
    first_bad_tile: tuple | None = None     # its tile (row tile, column tile), with leading dims folded into rows
    first_bad_values: tuple | None = None   # (got, ref) there
    why: str = ""
    extra: dict = field(default_factory=dict)

    def __str__(self) -> str:
        head = f"{'PASS' if self.ok else 'FAIL'} {self.label} {list(self.shape)}".rstrip()
        lines = [head,
                 f"  max abs err {self.max_abs:.4g}, max rel err {self.max_rel:.4g} "
                 f"(atol {self.atol:.3g}, rtol {self.rtol:.3g})",
                 f"  bad elements {self.n_bad}/{self.n}, NaN/Inf {self.n_nan}"]
        if self.tile:
            lines.append(f"  tiles {self.tile}: {self.bad_tiles}/{self.n_tiles} bad, "
                         f"{self.nan_tiles} with NaN (unwritten?)")
        if self.first_bad is not None:
            g, r = self.first_bad_values
            t = f" in tile {self.first_bad_tile}" if self.first_bad_tile is not None else ""
            lines.append(f"  first bad element {self.first_bad}{t}: got {g:.6g}, expected {r:.6g}")
        if self.why:
            lines.append(f"  tolerance: {self.why}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def compare(got: torch.Tensor, ref: torch.Tensor, *, atol: float | None = None, rtol: float | None = None,
            tol: Tolerance | None = None, tile: tuple[int, int] | None = None, label: str = "") -> VerifyReport:
    """Compare element-wise; NaN/Inf in `got` where `ref` is finite always fails."""
    if tuple(got.shape) != tuple(ref.shape):
        raise ValueError(f"shape mismatch: got {tuple(got.shape)}, reference {tuple(ref.shape)}")
    if tol is not None:
        atol, rtol, why = tol.atol, tol.rtol, tol.why
    else:
        why = ""
        atol = 0.0 if atol is None else float(atol)
        rtol = 0.0 if rtol is None else float(rtol)
    g = got.detach().to(torch.float64 if got.device.type == "cpu" else torch.float32)
    r = ref.detach().to(g.device, g.dtype)
    finite_ref = torch.isfinite(r)
    nonfinite = ~torch.isfinite(g) & finite_ref
    diff = (g - r).abs()
    bad = nonfinite | (diff > atol + rtol * r.abs()) | (torch.isnan(r) & ~torch.isnan(g))
    diff_f = torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff))
    denom = r.abs().clamp_min(max(atol, 1e-30))
    max_abs = float(diff_f.max()) if diff.numel() else 0.0
    max_rel = float((diff_f / denom).max()) if diff.numel() else 0.0
    if bool(nonfinite.any()):
        max_abs = max_rel = float("inf")
    n_bad = int(bad.sum())
    rep = VerifyReport(ok=n_bad == 0, label=label, shape=tuple(got.shape), atol=atol, rtol=rtol,
                       n=got.numel(), n_bad=n_bad, n_nan=int(nonfinite.sum()), max_abs=max_abs,
                       max_rel=max_rel, why=why)
    if n_bad:
        flat = int(torch.nonzero(bad.reshape(-1))[0, 0])
        idx = tuple(int(x) for x in torch.unravel_index(torch.tensor(flat), tuple(got.shape)))
        rep.first_bad = idx
        rep.first_bad_values = (float(g.reshape(-1)[flat]), float(r.reshape(-1)[flat]))
    if tile is not None and got.dim() >= 1:
        _tiles(rep, bad, nonfinite, tile)
    return rep


def _tiles(rep: VerifyReport, bad: torch.Tensor, nan: torch.Tensor, tile) -> None:
    """Count bad and NaN tiles of a (rows, cols) tiling; leading dimensions fold into rows."""
    b2 = bad.reshape(-1, bad.shape[-1]) if bad.dim() >= 2 else bad.reshape(1, -1)
    n2 = nan.reshape(b2.shape)
    tm, tn = (1, tile[0]) if len(tile) == 1 else tile[-2:]
    R, C = b2.shape
    rt, ct = math.ceil(R / tm), math.ceil(C / tn)
    pad = (0, ct * tn - C, 0, rt * tm - R)
    bt = torch.nn.functional.pad(b2.to(torch.uint8), pad).reshape(rt, tm, ct, tn).amax(dim=(1, 3))
    nt = torch.nn.functional.pad(n2.to(torch.uint8), pad).reshape(rt, tm, ct, tn).amax(dim=(1, 3))
    rep.tile = (tm, tn)
    rep.n_tiles = rt * ct
    rep.bad_tiles = int(bt.sum())
    rep.nan_tiles = int(nt.sum())
    if rep.first_bad is not None:
        flat_row = int(torch.nonzero(b2.reshape(-1))[0, 0]) // C
        col = rep.first_bad[-1] if bad.dim() >= 2 else int(torch.nonzero(b2.reshape(-1))[0, 0])
        rep.first_bad_tile = (flat_row // tm, col // tn)


def verify_gemm(got: torch.Tensor, ref: torch.Tensor, *, K: int, a_absmax: float, b_absmax: float,
                tile: tuple[int, int] | None = (128, 128), out: str | None = None, label: str = "",
                acc_roundoff: float = TENSOR_CORE_ACC_ROUNDOFF) -> VerifyReport:
    """compare() with gemm_tolerance() from K and the inputs' magnitudes."""
    out = out or str(got.dtype).replace("torch.", "")
    tol = gemm_tolerance(K, a_absmax, b_absmax, out=out, acc_roundoff=acc_roundoff)
    return compare(got, ref, tol=tol, tile=tile, label=label)
