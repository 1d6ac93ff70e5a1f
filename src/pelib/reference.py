"""Torch references: the FP8 patch-embed GEMM and the NVFP4 format, its scale layout and its GEMM.

FP8 patch embed: FP32 accumulation of E4M3 products, then + comb[m % positions] in FP32, one
rounding to BF16, computed in row chunks so the full 928256 x 768 problem fits a CPU.

NVFP4 (sources):
- cudnn-frontend docs, "MXFP8 / NVFP4 scale factor 128x4 layout" and cuDNN "NVFP4 block-scale
  conversion": E2M1 elements, one E4M3 scale per 16 elements along K, an FP32 tensor scale; the
  encode scale multiplies before quantizing, the decode scale multiplies after the block scale.
- OCP Microscaling Formats (MX) v1.0: E2M1 = sign, 2 exponent bits (bias 1), 1 mantissa bit;
  magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}; no Inf/NaN.
- CUTLASS include/cutlass/numeric_conversion.h, e2m1_mag_f32_rne (round-to-nearest-even thresholds,
  saturating at 6) and float_to_e2m1_x2 (element 0 in bits [3:0], element 1 in bits [7:4]); PTX ISA
  cvt: for .e2m1x2 the value converted from the first source goes to the upper half of the result.
- CUTLASS include/cutlass/detail/sm100_blockscaled_layout.hpp (Sm1xxBlockScaledBasicChunk,
  SfKMajorAtom = ((32,4),(SFVec,4)):((16,4),(0,1)), tiled with Step<_2,_1,_3>: atoms K-major) and
  media/docs/cpp/blackwell_functionality.md "Scale Factor Layouts": 512-B atoms of 128 rows x 4
  scale factors, bytes M0SF0..3, M32SF0..3, M64SF0..3, M96SF0..3, then M1...; the 4 scale factors of
  one row form one 32-bit word, the TMEM word size, which tcgen05.cp copies into TMEM for the
  [scale-A-tmem]/[scale-B-tmem] operands of tcgen05.mma.block_scale (PTX ISA, tcgen05.mma).
"""
from __future__ import annotations

import math

import contextlib
from dataclasses import dataclass

import torch

# The number formats of the problems (pelib.problems takes them from here).
FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
FP16 = torch.float16
SF_VEC = 16  # NVFP4: one UE4M3 scale per 16 consecutive K elements (cudnn-frontend docs, NVFP4 table)

# ---------------------------------------------------------------------------------------------
# FP8 patch embed
# ---------------------------------------------------------------------------------------------

DEFAULT_CHUNK_ROWS = 32768  # 32768 x 768 FP32 = 96 MB per operand chunk: fits any CPU or GPU here


@contextlib.contextmanager
def _exact_fp32():
    """Keep FP32 matmuls FP32 on a GPU (no TF32), whatever the session set."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def patch_embed_reference(a: torch.Tensor, b: torch.Tensor, comb: torch.Tensor, *,
                          out: torch.Tensor | None = None, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> torch.Tensor:
    """bf16(a·bᵀ in FP32 + comb[m % positions]); a (M,K), b (N,K) E4M3, comb (positions,N) BF16."""
    if a.dtype != FP8 or b.dtype != FP8:
        raise TypeError(f"a and b must be {FP8}, got {a.dtype}, {b.dtype}")
    if comb.dtype != BF16:
        raise TypeError(f"comb must be {BF16}, got {comb.dtype}")
    for name, t in (("a", a), ("b", b), ("comb", comb)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D ({'M, K' if name == 'a' else 'N, K' if name == 'b' else 'positions, N'}), "
                             f"got shape {tuple(t.shape)}")
    m, k = a.shape
    n, kb = b.shape
    if comb.shape[0] == 0:
        raise ValueError(f"comb has 0 positions (shape {tuple(comb.shape)}): row m adds comb[m % positions], "
                         "so it needs at least one row")
    if kb != k or comb.shape[1] != n:
        raise ValueError(f"shapes do not chain: a {tuple(a.shape)}, b {tuple(b.shape)}, comb {tuple(comb.shape)}")
    if chunk_rows <= 0:
        raise ValueError("chunk_rows must be positive")
    positions = comb.shape[0]
    if out is None:
        out = torch.empty(m, n, dtype=BF16, device=a.device)
    bt = b.float().t().contiguous()
    combf = comb.float()
    with _exact_fp32():
        for r0 in range(0, m, chunk_rows):
            r1 = min(m, r0 + chunk_rows)
            acc = a[r0:r1].float() @ bt
            rows = torch.arange(r0, r1, device=a.device) % positions
            acc += combf[rows]
            out[r0:r1] = acc.to(BF16)
    return out


# ---------------------------------------------------------------------------------------------
# E2M1 and FP4 packing
# ---------------------------------------------------------------------------------------------

# Code c (sign bit 3, exponent bits [2:1], mantissa bit 0) -> value; codes 8..15 are the negatives.
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                            -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float32)
E2M1_MAX = 6.0
E4M3_MAX = 448.0


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Round FP32 to E2M1 codes (uint8 0..15): nearest, ties to even, saturating at ±6."""
    if not torch.isfinite(x).all():
        raise ValueError("e2m1_encode: input has NaN or Inf; E2M1 has neither")
    x = x.float()
    mag = x.abs()
    # Midpoints between neighbours; '>' rounds the tie down to the even code, '>=' up (CUTLASS rne).
    code = ((mag > 0.25).to(torch.uint8) + (mag >= 0.75) + (mag > 1.25) + (mag >= 1.75)
            + (mag > 2.5) + (mag >= 3.5) + (mag > 5.0))
    sign = torch.signbit(x).to(torch.uint8) << 3
    return (code.to(torch.uint8) | sign)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8 0..15) -> FP32 values."""
    return E2M1_VALUES.to(codes.device)[codes.long() & 0xF]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """(..., K) codes -> (..., K/2) bytes; the lower K index goes to the low nibble (CUTLASS)."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_fp4: the last dimension ({codes.shape[-1]}) must be even")
    c = codes.to(torch.uint8) & 0xF
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """(..., K/2) bytes -> (..., K) codes, low nibble first."""
    lo = packed & 0xF
    hi = packed >> 4
    return torch.stack([lo, hi], dim=-1).flatten(-2)


# ---------------------------------------------------------------------------------------------
# NVFP4 quantize / dequantize
# ---------------------------------------------------------------------------------------------

@dataclass
class NvFp4:
    """An NVFP4 tensor: packed E2M1 data (rows, K/2), E4M3 block scales (rows, K/16), FP32 decode scale."""

    data: torch.Tensor
    scale: torch.Tensor
    global_scale: float  # decode: x ≈ e2m1 · scale · global_scale (the reciprocal of the encode scale)

    @property
    def shape(self):
        return (self.data.shape[0], 2 * self.data.shape[1])


def nvfp4_quantize(x: torch.Tensor, global_scale: float | None = None) -> NvFp4:
    """Quantize (rows, K) FP32 to NVFP4 along K.

    Encode scale S = 448·6 / amax(x) (so the largest block scale lands at E4M3's maximum) unless a
    decode scale is given (then S = 1/global_scale). Block scale = e4m3(amax_block / 6 · S);
    element = e2m1(x · S / block_scale). Decode = e2m1 · block_scale / S.
    """
    x = x.float()
    if x.dim() != 2 or x.shape[1] % SF_VEC:
        raise ValueError(f"nvfp4_quantize: need (rows, K) with K a multiple of {SF_VEC}, got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError("nvfp4_quantize: input has NaN or Inf")
    if global_scale is None:
        amax = float(x.abs().max())
        enc = (E4M3_MAX * E2M1_MAX / amax) if amax > 0 else 1.0
        # the encode scale is an FP32 multiplier: an amax below 448·6 / FLT_MAX (~7.9e-36) would make it
        # infinite, and every element x·S with it
        tiny = E4M3_MAX * E2M1_MAX / float(torch.finfo(torch.float32).max)
        if 0 < amax < tiny:
            raise ValueError(f"nvfp4_quantize: amax(|x|) = {amax:.3g} is too small to scale into E2M1 x UE4M3: the "
                             f"encode scale 448·6/amax = {enc:.3g} overflows FP32 (amax must be >= {tiny:.3g}); "
                             "multiply x by a power of two first (x·2^k) and fold 2^-k into the decode scale, or pass "
                             f"a decode scale global_scale >= {1 / float(torch.finfo(torch.float32).max):.3g} "
                             "(1/FLT_MAX), which fixes the encode scale instead of deriving it from amax")
    else:
        gs = float(global_scale)
        enc = 1.0 / gs if gs > 0 and math.isfinite(gs) else float("nan")
        if not (math.isfinite(enc) and enc <= float(torch.finfo(torch.float32).max)):
            raise ValueError(f"nvfp4_quantize: global_scale={global_scale!r} gives no finite FP32 encode scale "
                             "1/global_scale: the decode scale must be a positive finite number above ~2.9e-39")
    rows, k = x.shape
    blocks = x.view(rows, k // SF_VEC, SF_VEC)
    bamax = blocks.abs().amax(dim=-1)
    scale = (bamax / E2M1_MAX * enc).clamp(max=E4M3_MAX).to(FP8)
    s = scale.float()
    safe = torch.where(s > 0, s, torch.ones_like(s))
    q = torch.where(s[..., None] > 0, blocks * enc / safe[..., None], torch.zeros_like(blocks))
    codes = e2m1_encode(q).view(rows, k)
    return NvFp4(pack_fp4(codes), scale, 1.0 / enc)


def nvfp4_dequantize(data: torch.Tensor, scale: torch.Tensor, global_scale=1.0) -> torch.Tensor:
    """Packed E2M1 (rows, K/2), E4M3 scales (rows, K/16), decode scale -> FP32 (rows, K)."""
    rows, half = data.shape
    k = 2 * half
    if tuple(scale.shape) != (rows, k // SF_VEC):
        raise ValueError(f"nvfp4_dequantize: scale shape {tuple(scale.shape)}, expected {(rows, k // SF_VEC)}")
    vals = e2m1_decode(unpack_fp4(data)).view(rows, k // SF_VEC, SF_VEC)
    gs = global_scale.float().to(vals.device) if isinstance(global_scale, torch.Tensor) else float(global_scale)
    return (vals * scale.float()[..., None]).view(rows, k) * gs


def nvfp4_gemm_reference(a, sfa, gsa, b, sfb, gsb, *, out_dtype=FP16, chunk: int = 1024) -> torch.Tensor:
    """D = (gsa·gsb) · dequant(A)·dequant(B)ᵀ in FP32, then out_dtype; B processed in row chunks.

    Block scaling as CUTLASS states it: D_ij = sum_k (A_ik·SFA_i,k/16)(B_jk·SFB_j,k/16), with the
    tensor decode scales applied to the FP32 result (blackwell_functionality.md).
    """
    m = a.shape[0]
    n = b.shape[0]
    deq_a = nvfp4_dequantize(a, sfa)
    alpha = (gsa.float().reshape(()) if isinstance(gsa, torch.Tensor) else torch.tensor(float(gsa))) * \
            (gsb.float().reshape(()) if isinstance(gsb, torch.Tensor) else torch.tensor(float(gsb)))
    out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    with _exact_fp32():
        for c0 in range(0, n, chunk):
            c1 = min(n, c0 + chunk)
            deq_b = nvfp4_dequantize(b[c0:c1], sfb[c0:c1])
            out[:, c0:c1] = ((deq_a @ deq_b.t()) * alpha.to(a.device)).to(out_dtype)
    return out


# ---------------------------------------------------------------------------------------------
# Scale-factor layout for the tcgen05 block-scaled MMA (CUTLASS Sm1xxBlockScaledConfig, K-major)
# ---------------------------------------------------------------------------------------------

SF_ATOM_ROWS = 128
SF_ATOM_COLS = 4
SF_ATOM_BYTES = SF_ATOM_ROWS * SF_ATOM_COLS  # 512


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def sf_mma_size(rows: int, cols: int) -> int:
    """Bytes of the tiled layout: rows padded to 128, scale columns padded to 4."""
    return _ceil(rows, SF_ATOM_ROWS) * _ceil(cols, SF_ATOM_COLS) * SF_ATOM_BYTES


def sf_mma_offset(row: int, col: int, cols: int) -> int:
    """Byte offset of scale (row, col) of a (rows, cols) scale matrix in the tiled layout."""
    atom = (row // SF_ATOM_ROWS) * _ceil(cols, SF_ATOM_COLS) + col // SF_ATOM_COLS   # atoms K-major
    r = row % SF_ATOM_ROWS
    return atom * SF_ATOM_BYTES + (r % 32) * 16 + (r // 32) * 4 + col % SF_ATOM_COLS


def _offsets(rows: int, cols: int, device) -> torch.Tensor:
    r = torch.arange(rows, device=device)[:, None]
    c = torch.arange(cols, device=device)[None, :]
    atom = (r // SF_ATOM_ROWS) * _ceil(cols, SF_ATOM_COLS) + c // SF_ATOM_COLS
    rr = r % SF_ATOM_ROWS
    return atom * SF_ATOM_BYTES + (rr % 32) * 16 + (rr // 32) * 4 + c % SF_ATOM_COLS


def sf_to_mma_layout(sf: torch.Tensor) -> torch.Tensor:
    """Row-major (rows, K/16) scales -> flat 512-B atoms; padding bytes are zero (scale 0)."""
    rows, cols = sf.shape
    flat = torch.zeros(sf_mma_size(rows, cols), dtype=torch.uint8, device=sf.device)
    flat[_offsets(rows, cols, sf.device).reshape(-1)] = sf.contiguous().view(torch.uint8).reshape(-1)
    return flat.view(sf.dtype)


def sf_from_mma_layout(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Flat 512-B atoms -> row-major (rows, cols) scales (the inverse of sf_to_mma_layout)."""
    if flat.numel() != sf_mma_size(rows, cols):
        raise ValueError(f"sf_from_mma_layout: {flat.numel()} bytes, expected {sf_mma_size(rows, cols)} "
                         f"for ({rows}, {cols})")
    raw = flat.view(torch.uint8)[_offsets(rows, cols, flat.device)]
    return raw.view(flat.dtype)
