"""Poison outputs, compare with a reference under tolerances derived from the number formats, locate bad tiles."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import torch

from .problems import ProblemError

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


def _check_nonneg_finite(name: str, v) -> float:
    """A tolerance-like number: a finite real >= 0 (NaN or Inf would make every comparison pass)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={v!r} must be a real number") from None
    if not math.isfinite(f):
        raise ValueError(f"{name}={f} is not finite: a NaN or infinite tolerance passes every element; "
                         "derive it from finite input maxima (pelib.verify.gemm_tolerance_from)")
    if f < 0:
        raise ValueError(f"{name}={f} is negative: tolerances are >= 0 (a negative one fails identical tensors)")
    return f


@dataclass(frozen=True)
class Tolerance:
    """|got - ref| <= atol + rtol * |ref|, and why. Both are finite and >= 0."""

    atol: float
    rtol: float
    why: str = ""

    def __post_init__(self):
        object.__setattr__(self, "atol", _check_nonneg_finite("atol", self.atol))
        object.__setattr__(self, "rtol", _check_nonneg_finite("rtol", self.rtol))


def finite_absmax(t: torch.Tensor, name: str = "input") -> float:
    """max |t| over the finite elements; ProblemError if t holds a NaN (a NaN maximum makes a NaN tolerance).

    FP8 tensors are read through float32 (E4M3's bytes 0x7F and 0xFF are NaN; it has no infinity).
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.numel() == 0:
        raise ProblemError(f"{name} is empty: no magnitude to derive a tolerance from")
    x = t.detach()
    x = x.float() if x.is_floating_point() else x.to(torch.float64)
    nan = torch.isnan(x)
    if bool(nan.any()):
        flat = int(torch.nonzero(nan.reshape(-1))[0, 0])
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(x.shape)))
        raise ProblemError(f"{name} holds {int(nan.sum())} NaN (first at {idx}): a GEMM of NaN inputs cannot be "
                           "verified; regenerate the input (E4M3 bytes 0x7F/0xFF are NaN)")
    fin = torch.isfinite(x)
    return float(x.abs()[fin].max()) if bool(fin.any()) else 0.0


def gemm_tolerance_from(a: torch.Tensor, b: torch.Tensor, *, K: int | None = None, out: str = "bfloat16",
                        acc_roundoff: float = TENSOR_CORE_ACC_ROUNDOFF, scale_a: float = 1.0,
                        scale_b: float = 1.0) -> Tolerance:
    """gemm_tolerance() from the inputs themselves: K from a's last dimension, max|a|, max|b| from their
    finite elements, times optional scales; refuses NaN inputs with a ProblemError. Every verification of a
    GEMM in pelib derives its tolerance here."""
    K = int(a.shape[-1]) if K is None else K
    return gemm_tolerance(K, finite_absmax(a, "a") * scale_a, finite_absmax(b, "b") * scale_b,
                          out=out, acc_roundoff=acc_roundoff)


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
    if isinstance(K, bool) or not isinstance(K, numbers.Integral) or K < 1:
        raise ValueError(f"K={K!r} must be a positive integer (the GEMM's reduction length)")
    K = int(K)
    a_absmax = _check_nonneg_finite("a_absmax", a_absmax)
    b_absmax = _check_nonneg_finite("b_absmax", b_absmax)
    acc_roundoff = _check_nonneg_finite("acc_roundoff", acc_roundoff)
    safety = _check_nonneg_finite("safety", safety)
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
    """Compare element-wise. An element is bad when |got - ref| > atol + rtol*|ref| (both finite), when
    exactly one of got/ref is finite, when one is NaN and the other not, or when both are infinite
    with different signs. NaN where the reference is NaN is accepted. Tolerances must be finite and >= 0."""
    if not isinstance(got, torch.Tensor) or not isinstance(ref, torch.Tensor):
        raise TypeError(f"compare takes torch tensors, got {type(got).__name__} and {type(ref).__name__}")
    if tuple(got.shape) != tuple(ref.shape):
        raise ValueError(f"shape mismatch: got {tuple(got.shape)}, reference {tuple(ref.shape)}")
    if got.numel() == 0:
        raise ValueError(f"nothing to compare: got and reference {tuple(got.shape)} have no elements")
    if tol is not None:
        atol, rtol, why = tol.atol, tol.rtol, tol.why
    else:
        why = ""
    atol = _check_nonneg_finite("atol", 0.0 if atol is None else atol)
    rtol = _check_nonneg_finite("rtol", 0.0 if rtol is None else rtol)
    if tile is not None:
        tile = tuple(tile)
        if not 1 <= len(tile) <= 2 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in tile):
            raise ValueError(f"tile={tile!r} must be one or two positive integers (rows, cols)")
    g = got.detach().to(torch.float64 if got.device.type == "cpu" else torch.float32)
    r = ref.detach().to(g.device, g.dtype)
    fin_g, fin_r = torch.isfinite(g), torch.isfinite(r)
    both = fin_g & fin_r
    diff = torch.where(both, (g - r).abs(), torch.zeros_like(g))
    over = both & (diff > atol + rtol * r.abs())
    nonfinite = (fin_g != fin_r) | (torch.isnan(g) != torch.isnan(r)) \
        | (torch.isinf(g) & torch.isinf(r) & (torch.sign(g) != torch.sign(r)))
    bad = over | nonfinite
    denom = r.abs().clamp_min(max(atol, 1e-30))
    max_abs = float(diff.max())
    max_rel = float((diff / denom).max())
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


def verify_gemm(got: torch.Tensor, ref: torch.Tensor, *, a: torch.Tensor | None = None,
                b: torch.Tensor | None = None, K: int | None = None, a_absmax: float | None = None,
                b_absmax: float | None = None, tile: tuple[int, int] | None = (128, 128), out: str | None = None,
                label: str = "", acc_roundoff: float = TENSOR_CORE_ACC_ROUNDOFF) -> VerifyReport:
    """compare() under the GEMM tolerance: from the inputs a and b (gemm_tolerance_from, the usual way),
    or from given finite maxima a_absmax, b_absmax with K."""
    out = out or str(got.dtype).replace("torch.", "")
    if a is not None or b is not None:
        if a is None or b is None or a_absmax is not None or b_absmax is not None:
            raise ValueError("pass both inputs a and b (or both maxima a_absmax, b_absmax with K), not a mix")
        tol = gemm_tolerance_from(a, b, K=K, out=out, acc_roundoff=acc_roundoff)
    else:
        if K is None or a_absmax is None or b_absmax is None:
            raise ValueError("verify_gemm needs the inputs a and b, or K with a_absmax and b_absmax")
        tol = gemm_tolerance(K, a_absmax, b_absmax, out=out, acc_roundoff=acc_roundoff)
    return compare(got, ref, tol=tol, tile=tile, label=label)
