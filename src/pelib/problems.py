"""The problems of the lab notes: shapes, seeded inputs on any device, validation, FLOPs and bytes."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import torch

from . import reference
from .reference import BF16, FP8, FP16, SF_VEC
ALIGN_BYTES = 16  # TMA: global address and row strides are multiples of 16 B (CUDA driver API, cuTensorMapEncodeTiled)

# Rows are generated in slices of this many so a full-size input never needs a full-size FP32 temporary;
# the slice size is fixed, so the draws (and the tensors) do not depend on the device or on memory.
_GEN_ROWS = 1 << 16


class ProblemError(ValueError):
    """An input does not fit the problem (shape, dtype, layout, alignment or device)."""


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return g


def _same_place(have: torch.device, want: torch.device) -> bool:
    """A device without an index ('cuda') matches any device of its type ('cuda:0')."""
    return have.type == want.type and (want.index is None or have.index == want.index)


def _check_tensor(name: str, t, *, shape, dtype, device=None, problem: str = "") -> None:
    """Raise ProblemError naming the tensor, what is wrong and how to fix it."""
    where = f"{problem}: {name}"
    if not isinstance(t, torch.Tensor):
        raise ProblemError(f"{where} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise ProblemError(f"{where} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if t.dtype != dtype:
        if t.element_size() == 1 and not t.is_floating_point() and dtype in _FP8_DTYPES:
            how = (f"if it holds {dtype} bits (the TMA view), reinterpret them with .view({dtype}); "
                   f".to({dtype}) would convert the integer values instead")
        else:
            how = f"convert with .to({dtype})"
        raise ProblemError(f"{where} has dtype {t.dtype}, expected {dtype} ({how})")
    if not t.is_contiguous():
        raise ProblemError(f"{where} is not contiguous (strides {t.stride()}); pass .contiguous()")
    if t.data_ptr() % ALIGN_BYTES:
        raise ProblemError(f"{where} starts at an address not {ALIGN_BYTES}-B aligned "
                           f"(0x{t.data_ptr():x}); TMA needs 16 B: allocate it fresh instead of slicing")
    if t.dim() >= 2:
        row_bytes = t.stride(-2) * t.element_size()
        if row_bytes % ALIGN_BYTES:
            raise ProblemError(f"{where} row pitch is {row_bytes} B, not a multiple of {ALIGN_BYTES} B (TMA)")
    if device is not None and not _same_place(t.device, torch.device(device)):
        raise ProblemError(f"{where} is on {t.device}, expected {device}; move it with .to('{device}')")


_FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
                    if hasattr(torch, n))


def _check_int(problem: str, name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProblemError(f"{problem}: {name}={v!r} is a {type(v).__name__}; problem dimensions are integers"
                           + (f" (int({v!r}))" if isinstance(v, (str, float)) else ""))


def _check_tile(problem: str, dims: Mapping[str, int], tile: Mapping[str, int]) -> None:
    for d, v in dims.items():
        _check_int(problem, d, v)
        if v <= 0:
            raise ProblemError(f"{problem}: {d}={v} must be positive")
        if v % tile[d]:
            raise ProblemError(f"{problem}: {d}={v} is not a multiple of the tile's {d}={tile[d]}; "
                               f"pad {d} to {math.ceil(v / tile[d]) * tile[d]} or pick another problem")


def _same_device(problem: str, tensors: Mapping[str, torch.Tensor]) -> torch.device:
    devs = {k: t.device for k, t in tensors.items() if isinstance(t, torch.Tensor)}
    if len(set(devs.values())) > 1:
        raise ProblemError(f"{problem}: tensors are on different devices {devs}; move them to one device")
    return next(iter(devs.values()))


class _Tiled:
    """What every problem derives from its M, N, K and the kernel's tile."""

    @property
    def tiles(self) -> int:
        """Output tiles of the kernel's tile shape."""
        return (self.m // self.tile["m"]) * (self.n // self.tile["n"])

    @property
    def flops(self) -> int:
        """2·M·N·K (an epilogue's M·N adds are left out, as in the lab notes' TFLOPS)."""
        return 2 * self.m * self.n * self.k


# ---------------------------------------------------------------------------------------------
# FP8 patch embed
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PatchEmbed(_Tiled):
    """out[m, n] = bf16( sum_k a[m,k] b[n,k] + comb[m % positions, n] ); a, b FP8 E4M3, comb BF16."""

    name: str
    m: int
    n: int
    k: int
    positions: int = 196
    # Tile of the sm_100a kernel: a cta_group::2 pair covers 256 rows, TN=256, 128-wide K step
    # (experiment log: 10,878 tiles = 928256/256 x 768/256; W1 note: 6 K-iterations for K=768).
    tile: Mapping[str, int] = field(default_factory=lambda: {"m": 256, "n": 256, "k": 128})

    def __post_init__(self):
        _check_tile(self.name, {"m": self.m, "n": self.n, "k": self.k}, self.tile)
        _check_int(self.name, "positions", self.positions)
        if self.positions <= 0:
            raise ProblemError(f"{self.name}: positions={self.positions} must be positive")

    # -- sizes (tiles, flops: _Tiled) ----------------------------------------------------------
    @property
    def min_bytes(self) -> int:
        """Each operand read once, the output written once: A, B (FP8), comb (BF16), out (BF16)."""
        return self.m * self.k + self.n * self.k + 2 * self.positions * self.n + 2 * self.m * self.n

    @property
    def precision(self) -> str:
        return "fp8"

    # -- inputs ------------------------------------------------------------------------------
    def make_inputs(self, seed: int = 0, device="cpu") -> dict:
        """Seeded inputs, drawn on the CPU and then moved, so every device gets the same bits.

        a ~ U(-1, 1) and b ~ N(0, 1/K) rounded to E4M3; bias, pos ~ N(0, 0.5) in BF16;
        comb = bf16(bias + pos) is the table the kernel reads; out is filled with NaN so unwritten
        elements show up.
        """
        g = _generator(seed)
        a = torch.empty(self.m, self.k, dtype=FP8)
        for r0 in range(0, self.m, _GEN_ROWS):
            r1 = min(self.m, r0 + _GEN_ROWS)
            a[r0:r1] = torch.empty(r1 - r0, self.k).uniform_(-1.0, 1.0, generator=g).to(FP8)
        b = (torch.randn(self.n, self.k, generator=g) / math.sqrt(self.k)).to(FP8)
        bias = (0.5 * torch.randn(self.n, generator=g)).to(BF16)
        pos = (0.5 * torch.randn(self.positions, self.n, generator=g)).to(BF16)
        comb = (bias.float()[None, :] + pos.float()).to(BF16)
        out = torch.full((self.m, self.n), float("nan"), dtype=BF16, device=device)
        return {"a": a.to(device), "b": b.to(device), "bias": bias.to(device), "pos": pos.to(device),
                "comb": comb.to(device), "out": out}

    # -- validation --------------------------------------------------------------------------
    def validate(self, tensors: Mapping[str, torch.Tensor], device=None) -> torch.device:
        """Check a, b, comb (and out if given): shape, dtype, contiguity, 16-B alignment, one device."""
        need = {"a": ((self.m, self.k), FP8), "b": ((self.n, self.k), FP8),
                "comb": ((self.positions, self.n), BF16)}
        optional = {"out": ((self.m, self.n), BF16), "bias": ((self.n,), BF16),
                    "pos": ((self.positions, self.n), BF16)}
        for k in need:
            if k not in tensors:
                raise ProblemError(f"{self.name}: missing input '{k}' (have {sorted(tensors)})")
        present = {k: tensors[k] for k in list(need) + list(optional) if k in tensors}
        dev = _same_device(self.name, present)
        for k, t in present.items():
            shape, dtype = (need | optional)[k]
            _check_tensor(k, t, shape=shape, dtype=dtype, device=device, problem=self.name)
        return dev


_PATCH_EMBED = {
    # SigLIP2 patch embed of the FP8 megakernel (experiment log header): 4,736 images x 196 patches.
    "siglip2": dict(m=928256, n=768, k=768, positions=196),
    # Same structure, small: 2 row pairs, one N tile, one K step; rows wrap the 196 positions twice.
    "small": dict(m=512, n=256, k=128, positions=196),
    # 256 images: exercises the row chunking and m % 196 across chunk edges in tests.
    "medium": dict(m=50176, n=768, k=768, positions=196),
    # For slow, obviously-correct loops: a toy tile so every dimension is tiny.
    "tiny": dict(m=24, n=16, k=32, positions=7, tile={"m": 8, "n": 8, "k": 16}),
}


PATCH_EMBED_NAMES = tuple(sorted(_PATCH_EMBED))


def patch_embed(name: str = "siglip2") -> PatchEmbed:
    """A named FP8 patch-embed problem: 'siglip2' (the lab notes'), 'medium', 'small', 'tiny'."""
    if name not in _PATCH_EMBED:
        raise KeyError(f"unknown patch-embed problem '{name}'; choose one of {sorted(_PATCH_EMBED)}")
    return PatchEmbed(name=name, **_PATCH_EMBED[name])


# ---------------------------------------------------------------------------------------------
# NVFP4 block-scaled GEMM
# ---------------------------------------------------------------------------------------------



@dataclass(frozen=True)
class NvFp4Gemm(_Tiled):
    """out[m, n] = fp16( gsa·gsb · sum_k (e2m1(a)·sfa)[m,k] (e2m1(b)·sfb)[n,k] ), A and B K-major."""

    name: str
    m: int
    n: int
    k: int
    # The NVFP4 log's tile: MmaMXF4NVF4Op needs M=128, the SFB TMA needs N=128, sf_vec 16 needs a
    # 256-wide K tile (NVFP4 log, "Failed Optimizations").
    tile: Mapping[str, int] = field(default_factory=lambda: {"m": 128, "n": 128, "k": 256})
    out_dtype: torch.dtype = FP16  # the log's split-K reduces into FP16 (".to(fp16)", atom.add.noftz.f16)

    def __post_init__(self):
        _check_tile(self.name, {"m": self.m, "n": self.n, "k": self.k}, self.tile)
        if self.k % (2 * SF_VEC):
            raise ProblemError(f"{self.name}: K={self.k} must be a multiple of {2 * SF_VEC}")

    @property
    def min_bytes(self) -> int:
        """A, B at 4 bits, one byte of scale per 16 elements of each, out at 2 B (FP16)."""
        el = torch.empty((), dtype=self.out_dtype).element_size()
        return (self.m + self.n) * self.k // 2 + (self.m + self.n) * (self.k // SF_VEC) + el * self.m * self.n

    @property
    def precision(self) -> str:
        return "nvfp4"

    def make_inputs(self, seed: int = 0, device="cpu") -> dict:
        """Seeded packed E2M1 codes, E4M3 block scales in [0.25, 7.5] and FP32 decode scales.

        Returns a, b (uint8, two codes a byte, lower K index in the low nibble), sfa, sfb (E4M3,
        row-major (rows, K/16)), sfa_mma, sfb_mma (the same scales re-laid out in 512-B atoms for
        the tcgen05 block-scaled MMA, see pelib.reference.sf_to_mma_layout), gsa, gsb (FP32 decode
        scales, shape (1,)) and out (NaN-filled). The global scales put out's spread near 1.
        """

        g = _generator(seed)
        a = torch.randint(0, 256, (self.m, self.k // 2), generator=g, dtype=torch.uint8)
        b = torch.randint(0, 256, (self.n, self.k // 2), generator=g, dtype=torch.uint8)

        def scales(rows):
            # E4M3 bits: exponent field 5..9 (bias 7), any mantissa: 0.25 .. 7.5, never 0 or NaN.
            e = torch.randint(5, 10, (rows, self.k // SF_VEC), generator=g, dtype=torch.uint8)
            mant = torch.randint(0, 8, (rows, self.k // SF_VEC), generator=g, dtype=torch.uint8)
            return ((e << 3) | mant).view(FP8)

        sfa, sfb = scales(self.m), scales(self.n)
        q2 = float((reference.E2M1_VALUES ** 2).mean())          # E[q^2] over uniform codes
        s2 = float((torch.tensor([2.0 ** (e - 7) * (1 + mm / 8) for e in range(5, 10) for mm in range(8)]) ** 2).mean())
        gs = 1.0 / (self.k ** 0.25 * math.sqrt(q2 * s2))
        gsa = torch.tensor([gs], dtype=torch.float32)
        gsb = torch.tensor([gs], dtype=torch.float32)
        out = torch.full((self.m, self.n), float("nan"), dtype=self.out_dtype, device=device)
        return {"a": a.to(device), "b": b.to(device), "sfa": sfa.to(device), "sfb": sfb.to(device),
                "sfa_mma": reference.sf_to_mma_layout(sfa).to(device),
                "sfb_mma": reference.sf_to_mma_layout(sfb).to(device),
                "gsa": gsa.to(device), "gsb": gsb.to(device), "out": out}

    def validate(self, tensors: Mapping[str, torch.Tensor], device=None) -> torch.device:
        """Check packed a, b, scales (row-major or MMA layout), global scales and out."""

        kb = self.k // SF_VEC
        need = {"a": ((self.m, self.k // 2), torch.uint8), "b": ((self.n, self.k // 2), torch.uint8)}
        for k in need:
            if k not in tensors:
                raise ProblemError(f"{self.name}: missing input '{k}' (have {sorted(tensors)})")
        spec = dict(need)
        spec.update({"sfa": ((self.m, kb), FP8), "sfb": ((self.n, kb), FP8),
                     "sfa_mma": ((reference.sf_mma_size(self.m, kb),), FP8),
                     "sfb_mma": ((reference.sf_mma_size(self.n, kb),), FP8),
                     "out": ((self.m, self.n), self.out_dtype)})
        if not ({"sfa", "sfa_mma"} & set(tensors)) or not ({"sfb", "sfb_mma"} & set(tensors)):
            raise ProblemError(f"{self.name}: need the scales of A and B (sfa or sfa_mma, sfb or sfb_mma)")
        present = {k: tensors[k] for k in spec if k in tensors}
        for gname in ("gsa", "gsb"):
            if gname in tensors:
                present[gname] = tensors[gname]
        dev = _same_device(self.name, present)
        for k, t in present.items():
            if k in ("gsa", "gsb"):
                if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.numel() != 1:
                    raise ProblemError(f"{self.name}: {k} must be a one-element float32 tensor")
                if device is not None and not _same_place(t.device, torch.device(device)):
                    raise ProblemError(f"{self.name}: {k} is on {t.device}, expected {device}")
                continue
            shape, dtype = spec[k]
            _check_tensor(k, t, shape=shape, dtype=dtype, device=device, problem=self.name)
        return dev


_NVFP4 = {
    # The three benchmark shapes of the NVFP4 log (M=128).
    "k16384": dict(m=128, n=7168, k=16384),
    "k7168": dict(m=128, n=4096, k=7168),
    "k2048": dict(m=128, n=7168, k=2048),
    # Same structure for tests: one M tile, two N tiles, two K tiles.
    "small": dict(m=128, n=256, k=512),
    "tiny": dict(m=8, n=8, k=64, tile={"m": 8, "n": 8, "k": 32}),
}


NVFP4_NAMES = tuple(sorted(_NVFP4))


def nvfp4_gemm(name: str = "k16384") -> NvFp4Gemm:
    """A named NVFP4 problem: 'k16384', 'k7168', 'k2048' (the log's), 'small', 'tiny'."""
    if name not in _NVFP4:
        raise KeyError(f"unknown NVFP4 problem '{name}'; choose one of {sorted(_NVFP4)}")
    return NvFp4Gemm(name=name, **_NVFP4[name])


def nvfp4_log_shapes() -> list[NvFp4Gemm]:
    """The three shapes of the NVFP4 log, in its order."""
    return [nvfp4_gemm(n) for n in ("k16384", "k7168", "k2048")]


def nvfp4_shapes() -> list[NvFp4Gemm]:
    """Alias of nvfp4_log_shapes()."""
    return nvfp4_log_shapes()
