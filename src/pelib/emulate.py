"""A numpy model, from the spec, of the Blackwell/Hopper GEMM data path that cannot run here.

Pieces (each a plain function over byte images, so a test can poke any of them):
  * `swizzle_addr`, `SmemImage`: shared memory as a byte image at a base address; swizzle is a
    function of the address (16-byte chunk bits [4,7) XOR address bits [7,10) for 128B).
  * `TensorMap2D`, `tma_load_2d`, `tma_store_2d`: TMA tiled copies (box, element strides, swizzle,
    out-of-bounds fill zero / store clipping).
  * `operand_addresses`, `read_operand`: an MMA operand read through a UMMA (sm_100) or GMMA
    (sm_90) shared-memory descriptor, canonical K-major and MN-major layouts, per-K-step advance.
  * `Tmem`, `tcgen05_ld_32x32b`, `tmem_accumulator_map`: the TMEM accumulator for cta_group::1/::2
    and the 32x32b.xN load (which warp/lane/register holds which (row, col)).
  * `sf_blocked_offset`, `sf_to_blocked`, `tcgen05_cp_32x128b_warpx4`: NVFP4 scale factors.
  * `cta_pair_split`: which CTA of a cta_group::2 pair holds which half of A, B and D.
  * `TileParams`, `emulate_tile`: one output tile from a stage's own layout parameters.

Sources: PTX ISA 9.7.9.27 (cp.async.bulk.tensor) and the CUDA driver API "Tensor Memory Access"
(cuTensorMapEncodeTiled: boxDim, elementStrides, swizzle, OOB fill); PTX ISA 9.7.16.3 "Strides and
layouts", 9.7.16.4.1 "Shared Memory Descriptor", 9.7.16.2.3 "Data Movement Shape" (32x32b),
9.7.15.5.1 (wgmma descriptors and the m64nNk32 accumulator fragment); CUTLASS
include/cute/arch/mma_sm100_desc.hpp (make_umma_desc canonical layouts, DescriptorIterator),
include/cute/swizzle.hpp (Swizzle<3,4,3>, <2,4,3>, <1,4,3>), include/cutlass/detail/
sm100_blockscaled_layout.hpp (SfKMajorAtom), include/cute/arch/copy_sm100.hpp
(SM100_UTCCP_4x32dp128bit = tcgen05.cp.32x128b.warpx4), media/docs/pythonDSL/guides/mma/
tcgen05_programming.rst (2-CTA split); DeepGEMM sm100_fp8_fp4_gemm_1d1d.cuh (UTCCP SF layout).

What is proven on Hopper hardware (tests/test_gpu_emulate.py): TMA load/store with every swizzle,
GMMA descriptor reads with the K-advance; and the arithmetic of each wgmma, pelib.numerics.blockfma's rule (0 of
2,867,200 probe outputs differ on an H100 and an H200, results/2026-11-27-h100/tcprobe.json). TMEM,
tcgen05.ld/cp, the 2-CTA split and tcgen05.mma's arithmetic (MMA-Sim's rule, not yet run on a B200 here) are modelled from the sources above
only.

Over 700 lines: one data path from the spec, piece by piece (swizzle, TMA, descriptors, TMEM, scale factors),
each piece a function a test pokes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Callable

import numpy as np

from .numerics import blockfma as F
from .isa import descriptors as D
from .isa import limits

__all__ = [
    "EmulationError", "swizzle_addr", "swizzle_repeat", "SmemImage", "TensorMap2D", "tma_load_2d",
    "tma_store_2d", "tma_box_addresses", "operand_addresses", "read_operand", "decode_values",
    "encode_e4m3", "Tmem", "tcgen05_ld_32x32b", "tmem_ld_map", "tmem_accumulator_map",
    "wgmma_acc_map", "sf_blocked_offset", "sf_to_blocked", "tcgen05_cp_32x128b_warpx4", "cta_pair_split",
    "TileParams", "TileReport", "emulate_tile", "EXPORT_NAMES", "MMA_KINDS", "check_tile_index",
]


class EmulationError(RuntimeError):
    """The modelled hardware would reject (or we cannot model) what the parameters ask for."""


# --- swizzle -------------------------------------------------------------------------------------
_SWZ_BITS = {0: 0, 32: 1, 64: 2, 128: 3}


def swizzle_addr(addr, swizzle: int):
    """Physical byte address of a logical one under a swizzle mode (CUTLASS Swizzle<B,4,3>).

    128B: Swizzle<3,4,3>, address bits [4,7) ^= bits [7,10); 64B: Swizzle<2,4,3>, [4,6) ^= [7,9);
    32B: Swizzle<1,4,3>, bit 4 ^= bit 7. It is a function of the shared-memory address itself, which
    is why a 128B-swizzled tile must start on a 1024-byte boundary (PTX ISA Table 41).
    """
    if swizzle not in _SWZ_BITS:
        raise EmulationError(f"swizzle={swizzle!r}: one of 0, 32, 64, 128 (bytes)")
    a = np.asarray(addr, dtype=np.int64)
    b = _SWZ_BITS[swizzle]
    if b == 0:
        return a
    return a ^ (((a >> 7) & ((1 << b) - 1)) << 4)


def swizzle_repeat(swizzle: int) -> int:
    """Bytes after which the swizzle pattern repeats (PTX ISA Table 41): 1024, 512, 256 (16 for none)."""
    if swizzle not in _SWZ_BITS:
        raise EmulationError(f"swizzle={swizzle!r}: one of 0, 32, 64, 128 (bytes)")
    return {0: 16, 32: 256, 64: 512, 128: 1024}[swizzle]


class SmemImage:
    """One CTA's shared memory as bytes at shared-window address `base`; remembers what was written."""

    POISON = 0x7F  # an E4M3 NaN and a large BF16 byte: unwritten bytes read by an MMA stand out

    def __init__(self, size: int, base: int = 0):
        self.base = int(base)
        self.data = np.full(int(size), self.POISON, dtype=np.uint8)
        self.written = np.zeros(int(size), dtype=bool)

    def _idx(self, addr) -> np.ndarray:
        i = np.asarray(addr, dtype=np.int64) - self.base
        if i.size and (i.min() < 0 or i.max() >= self.data.size):
            raise EmulationError(f"shared-memory access at 0x{int(np.asarray(addr).min()):x}..0x"
                                 f"{int(np.asarray(addr).max()):x} outside the image "
                                 f"[0x{self.base:x}, 0x{self.base + self.data.size:x})")
        return i

    def write(self, addr, values) -> None:
        i = self._idx(addr)
        self.data[i] = np.asarray(values, dtype=np.uint8)
        self.written[i] = True

    def read(self, addr) -> np.ndarray:
        return self.data[self._idx(addr)]

    def unwritten(self, addr) -> int:
        """How many of these bytes nobody wrote."""
        return int((~self.written[self._idx(addr)]).sum())

    def view(self, start: int, nbytes: int) -> np.ndarray:
        return self.data[start - self.base:start - self.base + nbytes]


# --- TMA -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorMap2D:
    """The arguments of cuTensorMapEncodeTiled for a 2D tensor, innermost dimension first.

    dims/box/element_strides in elements; row_stride_bytes = globalStrides[0] (default dense).
    elem_bits is 4 for packed 4-bit types (two elements per byte).
    """

    elem_bits: int
    dims: tuple[int, int]
    box: tuple[int, int]
    swizzle: int = 0
    element_strides: tuple[int, int] = (1, 1)
    row_stride_bytes: int | None = None

    @property
    def row_stride(self) -> int:
        return self.row_stride_bytes if self.row_stride_bytes is not None else self.dims[0] * self.elem_bits // 8

    @property
    def counts(self) -> tuple[int, int]:
        """Elements TMA moves per dimension: ceil(box / elementStride) (driver API)."""
        return tuple(math.ceil(b / s) for b, s in zip(self.box, self.element_strides))

    @property
    def pitch(self) -> int:
        """Bytes of one box row in shared memory."""
        return self.counts[0] * self.elem_bits // 8

    @property
    def smem_pitch(self) -> int:
        """Bytes between box rows in shared memory: a row narrower than the swizzle span still
        takes the whole span (measured on an H100, 2026-11-23: 64-B rows under SWIZZLE_128B land
        128 B apart, chunk c of row r at 16*(c ^ r%8); tests/gpu_results/)."""
        return max(self.pitch, self.swizzle) if self.swizzle else self.pitch

    @property
    def box_bytes(self) -> int:
        """Bytes the copy moves (its complete_tx count), not its shared-memory footprint."""
        return self.pitch * self.counts[1]

    def validate(self) -> None:
        """The driver's cuTensorMapEncodeTiled rules that matter for the layout."""
        problems = []
        if any(not 1 <= b <= 256 for b in self.box):
            problems.append(f"box {self.box}: each box dimension must be 1..256")
        if any(not 1 <= s <= 8 for s in self.element_strides):
            problems.append(f"element_strides {self.element_strides}: each must be 1..8")
        inner = self.box[0] * self.elem_bits // 8
        if inner % 16:
            problems.append(f"inner box {inner} B is not a multiple of 16 B")
        if self.swizzle not in _SWZ_BITS:
            problems.append(f"swizzle {self.swizzle}: one of 0, 32, 64, 128")
        elif self.swizzle and inner > self.swizzle:
            problems.append(f"inner box {inner} B exceeds the {self.swizzle}B swizzle span")
        if self.row_stride % 16:
            problems.append(f"global row stride {self.row_stride} B is not a multiple of 16")
        if problems:
            raise EmulationError("tensor map rejected: " + "; ".join(problems))


def _as_bytes2d(g) -> np.ndarray:
    """A 2D global tensor (numpy or torch; any element type) as its row-major bytes (rows, row_bytes)."""
    try:
        import torch
        if isinstance(g, torch.Tensor):  # float8/bfloat16 have no numpy dtype: take the bytes
            g = g.detach().cpu().contiguous().view(torch.uint8).numpy()
    except ImportError:  # pragma: no cover
        pass
    g = np.ascontiguousarray(g)
    if g.ndim != 2:
        raise EmulationError(f"expected a 2D global tensor, got shape {g.shape}")
    return g.view(np.uint8).reshape(g.shape[0], -1)


def tma_box_addresses(tmap: TensorMap2D, smem_addr: int) -> np.ndarray:
    """Physical shared addresses of each box byte, shape (rows, pitch): row-major box, then swizzle."""
    n0, n1 = tmap.counts
    rows = np.arange(n1, dtype=np.int64)[:, None] * tmap.smem_pitch
    cols = np.arange(tmap.pitch, dtype=np.int64)[None, :]
    return swizzle_addr(smem_addr + rows + cols, tmap.swizzle)


def _box_global(tmap: TensorMap2D, coords):
    """Global (row, byte) of each box byte and whether it is inside the tensor."""
    if tmap.elem_bits % 8 and tmap.element_strides[0] != 1:
        raise EmulationError("element strides on the inner dimension of a packed 4-bit tensor are not modelled")
    n0, n1 = tmap.counts
    eb = tmap.elem_bits / 8
    j1 = np.arange(n1)[:, None]
    byte = np.arange(tmap.pitch)[None, :]
    if tmap.elem_bits % 8 == 0:
        j0 = byte // int(eb)
        sub = byte % int(eb)
        g0 = coords[0] + j0 * tmap.element_strides[0]
        gbyte = g0 * int(eb) + sub
    else:  # packed 4-bit: two elements per byte, coords[0] must be even
        if coords[0] % 2:
            raise EmulationError("a packed 4-bit box must start at an even inner coordinate")
        g0 = coords[0] + 2 * byte
        gbyte = coords[0] // 2 + byte
    g1 = coords[1] + j1 * tmap.element_strides[1]
    inside = (g0 >= 0) & (g0 < tmap.dims[0]) & (g1 >= 0) & (g1 < tmap.dims[1])
    return np.broadcast_to(g1, inside.shape), np.broadcast_to(gbyte, inside.shape), inside


def tma_load_2d(tmap: TensorMap2D, gmem, coords: tuple[int, int], smem: SmemImage, smem_addr: int) -> None:
    """cp.async.bulk.tensor.2d.shared.global.tile: copy one box into `smem` at `smem_addr`.

    Box element (j0, j1) is global (c0 + j0*es0, c1 + j1*es1); out-of-bounds elements read as zero
    (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE). Rows are packed at `pitch` bytes, then swizzled by address.
    """
    tmap.validate()
    if smem_addr % 128:
        raise EmulationError(f"TMA shared destination 0x{smem_addr:x} is not 128-byte aligned")
    g = _as_bytes2d(gmem)
    r, b, inside = _box_global(tmap, coords)
    vals = np.zeros(inside.shape, dtype=np.uint8)
    rr, bb = r[inside], b[inside]
    if rr.size and (rr.max() >= g.shape[0] or bb.max() >= g.shape[1]):
        raise EmulationError(f"global tensor {g.shape} smaller than the tensor map dims {tmap.dims}")
    vals[inside] = g[rr, bb]
    smem.write(tma_box_addresses(tmap, smem_addr), vals)


def tma_store_2d(tmap: TensorMap2D, smem: SmemImage, smem_addr: int, coords: tuple[int, int], gmem) -> np.ndarray:
    """cp.async.bulk.tensor.2d.global.shared::cta.tile: write one box back; out-of-bounds parts are dropped.

    Returns the updated global bytes (rows, row_bytes); `gmem` itself is not modified.
    """
    tmap.validate()
    if tmap.element_strides != (1, 1):
        raise EmulationError("TMA stores with element strides are not modelled")
    if smem_addr % 128:
        raise EmulationError(f"TMA shared source 0x{smem_addr:x} is not 128-byte aligned")
    g = _as_bytes2d(gmem).copy()
    r, b, inside = _box_global(tmap, coords)
    vals = smem.read(tma_box_addresses(tmap, smem_addr))
    g[r[inside], b[inside]] = vals[inside]
    return g


# --- operands through descriptors ------------------------------------------------------------------
def _desc_fields(desc, arch: str) -> dict:
    if isinstance(desc, dict):
        return desc
    return D.decode_umma_smem_desc(desc) if arch.startswith("sm_100") else D.decode_gmma_smem_desc(desc)


def operand_addresses(desc, rows: int, kbytes: int, major: str = "K", *, arch: str = "sm_100a",
                      elem_bytes: int = 1) -> np.ndarray:
    """Physical shared addresses of an MMA operand's bytes, shape (rows, kbytes), K-contiguous per row.

    Canonical layouts (CUTLASS make_umma_desc comments, in bytes; W = swizzle span, r = row, c = byte):
      K-major, swizzled:  start + (r//8)*SBO + (r%8)*W + c            (LBO unused; c < W)
      K-major, none:      start + (r//8)*SBO + (r%8)*16 + (c//16)*LBO + c%16
      MN-major, swizzled: start + (b//W)*LBO + b%W + (k%8)*W + (k//8)*SBO   (b = MN byte)
      MN-major, none:     start + (b//16)*SBO + b%16 + (k%8)*16 + (k//8)*LBO
    then the address-based swizzle. base_offset != 0 is refused (not modelled).
    """
    f = _desc_fields(desc, arch)
    sw = f["swizzle"]
    if sw == "128B_base32b":
        raise EmulationError("SWIZZLE_128B_BASE32B is not modelled")
    if f.get("base_offset", 0):
        raise EmulationError("base_offset != 0 is not modelled: start swizzled tiles on their pattern "
                             f"boundary ({swizzle_repeat(sw)} B) and leave base_offset 0")
    if f.get("lbo_mode", 0):
        raise EmulationError("the absolute LBO mode (bit 52, sm_103a) is not modelled")
    start, lbo, sbo = f["addr"], f["lbo"], f["sbo"]
    if major == "K":
        r = np.arange(rows, dtype=np.int64)[:, None]
        c = np.arange(kbytes, dtype=np.int64)[None, :]
        if sw:
            if kbytes > sw:
                raise EmulationError(f"a K-major operand step reads {kbytes} B of K, more than the {sw}B span")
            logical = start + (r // 8) * sbo + (r % 8) * sw + c
        else:
            logical = start + (r // 8) * sbo + (r % 8) * 16 + (c // 16) * lbo + c % 16
        return swizzle_addr(logical, sw)
    if major != "MN":
        raise EmulationError(f"major={major!r}: K or MN")
    if kbytes % elem_bytes:
        raise EmulationError("kbytes must be a whole number of elements")
    kel = kbytes // elem_bytes
    k = np.arange(kel, dtype=np.int64)[None, :, None]
    rb = (np.arange(rows, dtype=np.int64)[:, None, None] * elem_bytes + np.arange(elem_bytes)[None, None, :])
    if sw:
        logical = start + (rb // sw) * lbo + rb % sw + (k % 8) * sw + (k // 8) * sbo
    else:
        logical = start + (rb // 16) * sbo + rb % 16 + (k % 8) * 16 + (k // 8) * lbo
    return swizzle_addr(logical.reshape(rows, kbytes), sw)


def read_operand(smem: SmemImage, desc, rows: int, kbytes: int = 32, major: str = "K", *,
                 arch: str = "sm_100a", elem_bytes: int = 1) -> np.ndarray:
    """The operand bytes an MMA reads through `desc`: (rows, kbytes), K-contiguous per row."""
    return smem.read(operand_addresses(desc, rows, kbytes, major, arch=arch, elem_bytes=elem_bytes))


# --- number formats ------------------------------------------------------------------------------
def _e4m3_table() -> np.ndarray:
    v = np.arange(256)
    s, e, m = v >> 7, (v >> 3) & 15, v & 7
    mag = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))
    mag = np.where((e == 15) & (m == 7), np.nan, mag)  # E4M3FN: only S.1111.111 is NaN
    return np.where(s == 1, -mag, mag)


def _e5m2_table() -> np.ndarray:
    v = np.arange(256)
    s, e, m = v >> 7, (v >> 2) & 31, v & 3
    mag = np.where(e == 0, m / 4 * 2.0 ** -14, (1 + m / 4) * 2.0 ** (e - 15))
    mag = np.where(e == 31, np.where(m == 0, np.inf, np.nan), mag)
    return np.where(s == 1, -mag, mag)


_E4M3 = _e4m3_table()
_E5M2 = _e5m2_table()
_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
_UE4M3 = np.where(np.arange(256) < 128, _E4M3, np.nan)  # unsigned: the sign bit must be 0
_UE8M0 = np.where(np.arange(256) == 255, np.nan, 2.0 ** (np.arange(256) - 127.0))


def encode_e4m3(x) -> np.ndarray:
    """Nearest E4M3 byte for each value (ties to even code); for building test inputs."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.where(np.isnan(_E4M3), np.inf, _E4M3)
    idx = np.abs(x[..., None] - finite[None, :]).argmin(axis=-1)
    return idx.astype(np.uint8)


def decode_values(b: np.ndarray, fmt: str) -> np.ndarray:
    """Bytes (rows, kbytes) -> values (rows, k) as float64; e2m1 is packed, low nibble first."""
    b = np.asarray(b, dtype=np.uint8)
    if fmt == "e4m3":
        return _E4M3[b]
    if fmt == "e5m2":
        return _E5M2[b]
    if fmt == "ue4m3":
        return _UE4M3[b]
    if fmt == "ue8m0":
        return _UE8M0[b]
    if fmt == "e2m1":
        out = np.empty(b.shape[:-1] + (2 * b.shape[-1],))
        out[..., 0::2] = _E2M1[b & 15]
        out[..., 1::2] = _E2M1[b >> 4]
        return out
    if fmt in ("bf16", "f16"):
        u = b.reshape(b.shape[:-1] + (-1, 2))
        u16 = u[..., 0].astype(np.uint16) | u[..., 1].astype(np.uint16) << 8
        if fmt == "bf16":
            return (u16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return u16.view(np.float16).astype(np.float64)
    raise EmulationError(f"format {fmt!r} not modelled (e4m3, e5m2, e2m1, bf16, f16, ue4m3, ue8m0)")


_FMT_BITS = {"e4m3": 8, "e5m2": 8, "e2m1": 4, "bf16": 16, "f16": 16}


# --- TMEM ----------------------------------------------------------------------------------------
class Tmem:
    """One CTA's tensor memory: 128 lanes x 512 columns of 32-bit cells (values kept as float64)."""

    LANES, COLS = 128, 512

    def __init__(self, alloc_cols: int = 512):
        if alloc_cols not in (32, 64, 128, 256, 512):
            raise EmulationError(f"tcgen05.alloc of {alloc_cols} columns: must be a power of two in 32..512")
        self.alloc_cols = alloc_cols
        self.data = np.full((self.LANES, self.COLS), np.nan)
        self.raw = np.zeros((self.LANES, self.COLS), dtype=np.uint32)  # raw words (scale factors)

    def check_cols(self, c0: int, n: int, what: str) -> None:
        if c0 < 0 or c0 + n > self.alloc_cols:
            raise EmulationError(f"{what} uses TMEM columns {c0}..{c0 + n - 1}, outside the "
                                 f"{self.alloc_cols}-column allocation")


def tmem_ld_map(warp: int, x: int, col0: int = 0) -> np.ndarray:
    """tcgen05.ld.32x32b.x{x}: (lane, column) for thread t, register i -> array (32, x, 2).

    Thread t of warp w reads TMEM lane 32*(w%4) + t; register i holds column col0 + i
    (PTX ISA 9.7.16.2.3.1.1, Figure "Matrix fragment for shape .32x32b").
    """
    out = np.empty((32, x, 2), dtype=np.int64)
    out[..., 0] = 32 * (warp % 4) + np.arange(32)[:, None]
    out[..., 1] = col0 + np.arange(x)[None, :]
    return out


def tcgen05_ld_32x32b(tmem: Tmem, warp: int, taddr: int, x: int) -> np.ndarray:
    """The registers (32 threads, x) a warp gets from tcgen05.ld.32x32b.x{x} at taddr.

    taddr = lane << 16 | column. A warp may touch only lanes 32*(warp%4)..+31 (PTX ISA tcgen05
    "Access restrictions"): any other lane base is an error here, as it is on the hardware.
    """
    if x not in (1, 2, 4, 8, 16, 32, 64, 128):
        raise EmulationError(f".x{x} is not a tcgen05.ld .num")
    lane, col = taddr >> 16, taddr & 0xFFFF
    if lane != 32 * (warp % 4):
        raise EmulationError(f"warp {warp} may read TMEM lanes {32 * (warp % 4)}..{32 * (warp % 4) + 31} "
                             f"only; taddr asks for lane {lane} (use lane base 32*(warp%4))")
    tmem.check_cols(col, x, f"tcgen05.ld.32x32b.x{x}")
    return tmem.data[lane:lane + 32, col:col + x].copy()


def tmem_accumulator_map(m: int, n: int, cta_group: int = 1, acc_col: int = 0) -> np.ndarray:
    """Where D[row, col] of one MMA lives: array (m, n, 3) of (cta rank, TMEM lane, TMEM column).

    cta_group::1, M=128: row -> lane, col -> acc_col + col. cta_group::2, M=256: rows 0..127 in the
    even CTA's TMEM, rows 128..255 in the odd CTA's, lanes 0..127, all N columns in both
    (CUTLASS tcgen05_programming.rst, "each CTA owns half the M-tile"). M=64 (cta_group::1) uses
    lanes 0..15 of each 32-lane quarter is NOT modelled.
    """
    if (cta_group, m) not in ((1, 128), (2, 256)):
        raise EmulationError(f"TMEM layout for cta_group::{cta_group} M={m} is not modelled "
                             "(the book uses M=128 with ::1 and M=256 with ::2)")
    rows = np.arange(m)[:, None]
    cols = np.arange(n)[None, :]
    out = np.empty((m, n, 3), dtype=np.int64)
    out[..., 0] = rows // 128
    out[..., 1] = rows % 128
    out[..., 2] = acc_col + cols
    return out


def wgmma_acc_map(n: int) -> np.ndarray:
    """wgmma m64nNk32 .f32 fragment: (row, col) of d[reg] for thread t of the warpgroup -> (128, n//2, 2).

    d[4j + 2h + c] is row 16*(t//32) + 8h + (t%32)//4, column 8j + 2*(t%4) + c (PTX ISA 9.7.15.5.1;
    CUTLASS CLayout_64xN).
    """
    t = np.arange(128)[:, None]
    r = np.arange(n // 2)[None, :]
    j, h, c = r // 4, (r // 2) % 2, r % 2
    out = np.empty((128, n // 2, 2), dtype=np.int64)
    out[..., 0] = 16 * (t // 32) + 8 * h + (t % 32) // 4
    out[..., 1] = 8 * j + 2 * (t % 4) + c
    return out


# --- NVFP4 scale factors ---------------------------------------------------------------------------
def sf_blocked_offset(row, kblock, k_blocks_total: int):
    """Byte offset of scale factor (row, kblock) in the CUTLASS K-major blocked layout.

    SfKMajorAtom = ((32,4),(SFVec,4)):((16,4),(0,1)): 128 rows x 4 scale factors in 512 B; row m0 + 32*m1
    at 16*m0 + 4*m1, scale factor k at +k. Atoms tile K first, then rows (tile_to_shape Step<_2,_1>).
    k_blocks_total = scale factors per row (a multiple of 4).
    """
    row, kblock = np.asarray(row), np.asarray(kblock)
    atoms_k = k_blocks_total // 4
    atom = (row // 128) * atoms_k + kblock // 4
    return atom * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + kblock % 4


def sf_to_blocked(sf: np.ndarray) -> np.ndarray:
    """Scale factors (rows, K/sf_vec) bytes -> the 1D blocked layout TMA copies (rows % 128 == 0, kb % 4 == 0)."""
    sf = np.asarray(sf, dtype=np.uint8)
    rows, kb = sf.shape
    if rows % 128 or kb % 4:
        raise EmulationError(f"scale factors {sf.shape}: rows must be a multiple of 128 and scale factors "
                             "per row a multiple of 4 (pad them)")
    out = np.zeros(rows * kb, dtype=np.uint8)
    r, k = np.meshgrid(np.arange(rows), np.arange(kb), indexing="ij")
    out[sf_blocked_offset(r, k, kb)] = sf
    return out


def _pad_sf_rows(sf: np.ndarray) -> np.ndarray:
    """Scale-factor rows padded with zero rows to a multiple of 128 (the blocked atom's rows)."""
    pad = -sf.shape[0] % 128
    return sf if not pad else np.concatenate([sf, np.zeros((pad, sf.shape[1]), dtype=sf.dtype)])


def tcgen05_cp_32x128b_warpx4(smem: SmemImage, desc, tmem: Tmem, col: int, *, arch: str = "sm_100a") -> None:
    """tcgen05.cp.cta_group::1.32x128b.warpx4: 32 rows x 16 B from shared memory to TMEM columns col..col+3
    of every 32-lane quarter (broadcast to the four warps' lanes; CUTLASS SM100_UTCCP_4x32dp128bit_1cta).

    The source is a no-swizzle K-major canonical layout read through `desc` (8-row core matrices at SBO).
    Lane 32*w + r, column col + j then holds bytes 4j..4j+3 of row r, which in the blocked SF atom are the
    four scale factors of matrix row r + 32*j.
    """
    tmem.check_cols(col, 4, "tcgen05.cp.32x128b.warpx4")
    b = read_operand(smem, desc, 32, 16, "K", arch=arch)          # (32, 16)
    words = b.reshape(32, 4, 4).astype(np.uint32)
    words = words[..., 0] | words[..., 1] << 8 | words[..., 2] << 16 | words[..., 3] << 24
    for w in range(4):
        tmem.raw[32 * w:32 * w + 32, col:col + 4] = words


def _mma_scale_bytes(tmem: Tmem, col: int, rows: int, sf_id: int, n_sf: int) -> np.ndarray:
    """Scale factors the block-scaled MMA takes for matrix rows 0..rows-1: (rows, n_sf) bytes.

    Row m reads lane m, column col + m//32 (the word the warpx4 copy put there), bytes from sf_id on.
    Modelled from the CUTLASS atom + UTCCP layout; not checkable without a B200.
    """
    m = np.arange(rows)
    tmem.check_cols(col, 4, "block-scaled MMA scale read")
    words = tmem.raw[m % 128, col + (m % 128) // 32]
    by = np.stack([(words >> (8 * i)) & 0xFF for i in range(4)], axis=1).astype(np.uint8)
    return by[:, sf_id:sf_id + n_sf]


# --- cta_group::2 ---------------------------------------------------------------------------------
def cta_pair_split(m: int = 256, n: int = 256, acc_col: int = 0) -> list[dict]:
    """Which CTA of a cta_group::2 pair holds which half of A, B and the accumulator (M=256).

    Each CTA loads rows [128*v, 128*v+128) of A and rows [v*N/2, (v+1)*N/2) of B into the same
    shared-memory offsets; the MMA (issued by the even CTA) uses the same descriptors in both; CTA v's
    TMEM lanes 0..127 hold D rows [128*v, 128*v+128), all N columns.
    """
    if m != 256 or n % 32 or not 32 <= n <= 256:
        raise EmulationError(f"cta_group::2 split modelled for M=256 and N in 32..256 (multiple of 32), got {m}x{n}")
    return [{"cta": v, "a_rows": (128 * v, 128 * v + 128), "b_rows": (v * n // 2, (v + 1) * n // 2),
             "d_rows": (128 * v, 128 * v + 128), "tmem_lanes": (0, 128), "tmem_cols": (acc_col, acc_col + n)}
            for v in (0, 1)]


# --- one output tile -------------------------------------------------------------------------------
MMA_KINDS = D.MMA_KINDS   # the stages' mma_kind export codes (common/descriptors.cuh UMMA_KIND_*)

# Export name -> meaning; TileParams.from_exports reads these (PELIB_EXPORT(name, value) in the stage).
EXPORT_NAMES = {
    "mma_kind": "MMA kind code: 0 f16, 1 tf32, 2 f8f6f4, 3 i8, 4 mxf8f6f4, 5 mxf4, 6 mxf4nvf4",
    "mma_arch": "100 (tcgen05 / UMMA descriptors) or 90 (wgmma / GMMA descriptors); default 100",
    "cta_group": "1 or 2 (tcgen05 cta_group); default 1",
    "idesc": "32-bit instruction descriptor (sm_100); gives M, N, A/B formats and majors",
    "mma_m / mma_n": "instruction shape when there is no idesc (sm_90: 64 x N)",
    "block_k": "K elements per pipeline stage (one smem stage of A and B)",
    "a_box_k / a_box_m": "A tensor map box: inner (K) elements of the operand format (E2M1 is 4-bit: "
                         "256 elements = 128 B), outer (M) rows",
    "b_box_k / b_box_n": "B tensor map box: inner (K) elements, outer (N) rows",
    "a_swizzle / b_swizzle": "tensor map swizzle in bytes (0, 32, 64, 128); `swizzle_bytes` sets both",
    "a_smem_offset / b_smem_offset": "stage-0 A / B tile offset in dynamic shared memory (TMA destination)",
    "a_kbox_stride / b_kbox_stride": "smem bytes between successive K boxes of one stage (default rows*box bytes)",
    "a_desc / b_desc": "64-bit smem descriptor of the stage-0 tile, start address = its smem offset "
                       "(or a_desc_lo/a_desc_hi, b_desc_lo/b_desc_hi as 32-bit halves)",
    "k_advance_bytes": "bytes the kernel adds to the descriptor start address per MMA K-step",
    "b_block_k": "K elements of one B stage when it spans several A stages (a resident B in 128-byte slices "
                 "under an A ring of 64-byte pieces); default block_k",
    "num_stages": "pipeline stages in the shared-memory ring (K tile t uses stage t % num_stages)",
    "a_stage_stride / b_stage_stride": "smem bytes between the A / B tiles of consecutive stages (TMA side)",
    "a_desc_stage_stride / b_desc_stage_stride": "bytes the kernel adds to the descriptor per stage "
                                                 "(default: the TMA stage stride)",
    "a_wg_stride": "sm_90 only: smem bytes between the A rows of consecutive consumer warpgroups",
    "tmem_cols": "tcgen05.alloc column count",
    "tmem_acc_col": "first TMEM column of the accumulator",
    "epi_warp0 / epi_warps": "first epilogue warp id and how many warps drain TMEM",
    "epi_ld_x": "tcgen05.ld.32x32b .x count (16 or 32)",
    "sf_vec": "block-scaled: elements per scale factor (16 for NVFP4)",
    "sfa_smem_offset / sfb_smem_offset": "block-scaled: stage-0 SFA / SFB bytes in smem (blocked layout)",
    "sfa_tmem_col / sfb_tmem_col": "block-scaled: TMEM column of the SFA / SFB copy for K-step 0",
    "sf_tmem_step_cols": "block-scaled: TMEM columns between the scale copies of consecutive K-steps (4)",
    "sfb_mma_shift_cols": "block-scaled: columns the MMA's SFB address lies past the copy's (a tile narrower "
                          "than its 128-row SF block: row r of the block is in column r / 32)",
    "sfa_stage_stride / sfb_stage_stride": "block-scaled: smem bytes between the SF tiles of consecutive stages",
    "aliases": "num_ab_stage = num_stages; a_stage_bytes / b_stage_bytes = a_stage_stride / b_stage_stride; "
               "stage_bytes sets all four stage strides (A, B, SFA, SFB) at once",
    "stage_smem_offset": "staged epilogue: smem offset of the output staging tile (absent: direct stores)",
    "stage_box_cols / stage_box_rows": "staged epilogue: TMA store box (columns are the inner dimension)",
    "stage_swizzle": "staged epilogue: the XOR pattern the epilogue threads write with (bytes)",
    "out_swizzle": "staged epilogue: the TMA store tensor map's swizzle (bytes)",
    "out_elem_bytes": "staged epilogue: bytes per output element (2 = BF16, 4 = FP32)",
    "out_fmt": "staged epilogue: the 2-byte output format, 0 = BF16 (default), 1 = FP16",
}


_ARCHS = {100: "sm_100a", 90: "sm_90a"}
_IDESC_DEFAULTS = {"mma_m": 128, "mma_n": 128, "a_fmt": "e4m3", "b_fmt": "e4m3", "a_major": "K", "b_major": "K"}


def _reencode(current: dict, changes: dict) -> dict:
    """changes, plus a re-encoded idesc when they change a field the current idesc encodes."""
    touched = [k for k in _IDESC_DEFAULTS if k in changes]
    if not touched or "idesc" in changes or current.get("idesc") is None:
        return dict(changes)
    kind = changes.get("kind", current.get("kind", "f8f6f4"))
    v = int(current["idesc"])
    scaled = kind in ("mxf8f6f4", "mxf4", "mxf4nvf4")
    what = ", ".join(f"{k}={changes[k]!r}" for k in touched)
    try:
        dec = D.decode_umma_instr_desc_block_scaled(v, kind) if scaled else D.decode_umma_instr_desc(v, kind)
        names = {"mma_m": "m", "mma_n": "n", "a_fmt": "a_fmt", "b_fmt": "b_fmt", "a_major": "a_major",
                 "b_major": "b_major"}
        for k in touched:
            dec[names[k]] = changes[k]
        dec.pop("kind")
        enc = D.umma_instr_desc_block_scaled if scaled else D.umma_instr_desc
        new = enc(kind=kind, **dec)
    except D.DescriptorError as e:
        raise EmulationError(f"override {what}: no instruction descriptor encodes it ({e})") from None
    return {**changes, "idesc": new}


def _get(ex: dict, name: str, default=None):
    return ex[name] if name in ex else default


@dataclass
class TileParams:
    """The layout parameters of one stage, as the kernel is compiled with them (see EXPORT_NAMES)."""

    kind: str = "f8f6f4"
    arch: str = "sm_100a"
    cta_group: int = 1
    idesc: int | None = None
    # The next six come from idesc when there is one (None = take it from there, or the default):
    # an explicit value that disagrees with idesc is an error; from_exports()/with_() re-encode idesc.
    mma_m: int | None = None
    mma_n: int | None = None
    a_fmt: str | None = None
    b_fmt: str | None = None
    a_major: str | None = None
    b_major: str | None = None
    block_k: int = 128
    b_block_k: int | None = None       # K of one B stage, a multiple of block_k (default: block_k)
    a_box_k: int = 128
    a_box_m: int = 128
    b_box_k: int = 128
    b_box_n: int = 128
    a_swizzle: int = 128
    b_swizzle: int = 128
    a_smem_offset: int = 0
    b_smem_offset: int = 16384
    a_kbox_stride: int | None = None
    b_kbox_stride: int | None = None
    a_desc: int | None = None
    b_desc: int | None = None
    k_advance_bytes: int = 32
    num_stages: int = 1
    a_stage_stride: int = 0
    b_stage_stride: int = 0
    a_desc_stage_stride: int | None = None
    b_desc_stage_stride: int | None = None
    a_wg_stride: int | None = None
    tmem_cols: int = 512
    tmem_acc_col: int = 0
    epi_warp0: int = 0
    epi_warps: int = 4
    epi_ld_x: int = 32
    sf_vec: int = 16
    sfa_smem_offset: int | None = None
    sfb_smem_offset: int | None = None
    sfa_tmem_col: int | None = None
    sfb_tmem_col: int | None = None
    sf_tmem_step_cols: int = 4
    sfb_mma_shift_cols: int = 0
    sfa_stage_stride: int = 0
    sfb_stage_stride: int = 0
    stage_smem_offset: int | None = None
    stage_box_cols: int = 64
    stage_box_rows: int = 32
    stage_swizzle: int = 128
    out_swizzle: int = 128
    out_elem_bytes: int = 2
    out_fmt: int = 0
    smem_bytes: int | None = None
    epilogue_map: Callable | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.kind not in MMA_KINDS.values():
            raise EmulationError(f"kind={self.kind!r}: one of {sorted(MMA_KINDS.values())}")
        if self.arch not in _ARCHS.values():
            raise EmulationError(f"arch={self.arch!r}: the emulator models {sorted(_ARCHS.values())}")
        if self.cta_group not in (1, 2):
            raise EmulationError(f"cta_group={self.cta_group!r}: 1 or 2")
        for name in ("a_swizzle", "b_swizzle", "stage_swizzle", "out_swizzle"):
            v = getattr(self, name)
            if v not in _SWZ_BITS:
                raise EmulationError(f"{name}={v!r}: a swizzle is 0, 32, 64 or 128 (bytes)")
        if self.idesc is not None:
            for name, v in self._decode_idesc().items():
                mine = getattr(self, name)
                if mine is not None and mine != v:
                    raise EmulationError(
                        f"{name}={mine!r} disagrees with idesc=0x{int(self.idesc):08x}, which encodes {name}={v!r}: "
                        f"override it through TileParams.from_exports(exports, {name}=...) or params.with_({name}=...), "
                        "which re-encode idesc, or pass the idesc you mean")
                setattr(self, name, v)
        else:
            for name, v in _IDESC_DEFAULTS.items():
                if getattr(self, name) is None:
                    setattr(self, name, v)
        for name in ("a_fmt", "b_fmt"):
            if getattr(self, name) not in _FMT_BITS:
                raise EmulationError(f"{name}={getattr(self, name)!r}: the emulator reads {sorted(_FMT_BITS)}")
        for name in ("a_major", "b_major"):
            if getattr(self, name) not in ("K", "MN"):
                raise EmulationError(f"{name}={getattr(self, name)!r}: K or MN")

    def _decode_idesc(self, idesc=None) -> dict:
        v = self.idesc if idesc is None else idesc
        try:
            dec = (D.decode_umma_instr_desc_block_scaled(int(v), self.kind) if self.block_scaled
                   else D.decode_umma_instr_desc(int(v), self.kind))
        except D.DescriptorError as e:
            raise EmulationError(f"idesc: {e}") from None
        return {"mma_m": dec["m"], "mma_n": dec["n"], "a_fmt": str(dec["a_fmt"]), "b_fmt": str(dec["b_fmt"]),
                "a_major": dec["a_major"], "b_major": dec["b_major"]}

    @property
    def block_scaled(self) -> bool:
        return self.kind in ("mxf8f6f4", "mxf4", "mxf4nvf4")

    @property
    def sm100(self) -> bool:
        return self.arch.startswith("sm_100")

    @classmethod
    def from_exports(cls, exports: dict, **overrides) -> "TileParams":
        """Fill from a Build's `exports` (PELIB_EXPORT names in EXPORT_NAMES); keyword overrides win."""
        ex = dict(exports)
        kw: dict = {}
        if "mma_kind" in ex:
            if ex["mma_kind"] not in MMA_KINDS:
                raise EmulationError(f"mma_kind={ex['mma_kind']}: codes are {MMA_KINDS}")
            kw["kind"] = MMA_KINDS[ex["mma_kind"]]
        if "mma_arch" in ex:
            if ex["mma_arch"] not in _ARCHS:
                raise EmulationError(f"mma_arch={ex['mma_arch']!r}: the emulator models {sorted(_ARCHS)} "
                                     "(100 = tcgen05 / UMMA, 90 = wgmma / GMMA)")
            kw["arch"] = _ARCHS[ex["mma_arch"]]
        if "swizzle_bytes" in ex:
            kw["a_swizzle"] = kw["b_swizzle"] = ex["swizzle_bytes"]
        # Aliases the stages use: the vocabulary's ring depth and tensor-map swizzles (common/export.cuh),
        # one stage stride for A, B and scale factors, or per-operand *_stage_bytes.
        for alias, name in (("pipeline_stages", "num_stages"), ("num_ab_stage", "num_stages"),
                            ("tmap_a_swizzle", "a_swizzle"), ("tmap_b_swizzle", "b_swizzle"),
                            ("a_stage_bytes", "a_stage_stride"), ("b_stage_bytes", "b_stage_stride")):
            if alias in ex and name not in ex:
                kw[name] = ex[alias]
        if "stage_bytes" in ex:
            for name in ("a_stage_stride", "b_stage_stride", "sfa_stage_stride", "sfb_stage_stride"):
                if name not in ex and name not in kw:
                    kw[name] = ex["stage_bytes"]
        for op in ("a", "b"):
            if f"{op}_desc_lo" in ex:
                kw[f"{op}_desc"] = ex[f"{op}_desc_lo"] | _get(ex, f"{op}_desc_hi", 0) << 32
        names = {f.name for f in fields(cls)} - {"kind", "arch", "epilogue_map"}
        for name in names:
            if name in ex:
                kw[name] = ex[name]
        unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
        if unknown:
            raise EmulationError(f"unknown override {', '.join(unknown)}: TileParams fields are "
                                 f"{sorted(f.name for f in fields(cls))}")
        kw.update(_reencode(kw, overrides))
        return cls(**kw)

    def with_(self, **changes) -> "TileParams":
        """A copy with some fields changed (e.g. a deliberately wrong SBO). Changing mma_m, mma_n, a_fmt,
        b_fmt, a_major or b_major re-encodes idesc, so the what-if is what gets emulated."""
        current = {f.name: getattr(self, f.name) for f in fields(self)}
        if "idesc" in changes:   # a new idesc decides every field it encodes that is not given too
            current.update({k: None for k in _IDESC_DEFAULTS if k not in changes})
        current.update(_reencode(current, changes))
        return TileParams(**current)


@dataclass
class TileReport:
    """What emulate_tile saw besides the numbers: problems it found and facts worth showing."""

    issues: list = field(default_factory=list)
    unwritten_operand_bytes: int = 0
    uncovered_outputs: int = 0
    descriptors: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.issues and not self.unwritten_operand_bytes and not self.uncovered_outputs


def _check_operand_dtype(name: str, t, fmt: str, bits: int) -> None:
    """The operand's element size must match its format: raw bytes for 8-bit and packed 4-bit formats."""
    dt = getattr(t, "dtype", None)
    if dt is None:
        raise EmulationError(f"{name} must be a numpy array or torch tensor, got {type(t).__name__}")
    size = t.element_size() if hasattr(t, "element_size") else np.dtype(dt).itemsize
    want = 2 if bits == 16 else 1
    if size != want:
        how = ("uint8 (or torch.float8_e4m3fn / float8_e5m2)" if bits == 8 else
               "packed uint8, two E2M1 per byte" if bits == 4 else "uint16 or torch.bfloat16/float16")
        raise EmulationError(f"{name} has dtype {str(dt).replace('torch.', '')} ({size} B per element), but a "
                             f"{fmt} operand is passed as its raw bits: {how}")


def check_tile_index(tile, grid) -> None:
    """Refuse a tile index (row block, column block) outside a grid of (row blocks, column blocks)."""
    if len(tuple(tile)) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) for x in tile):
        raise EmulationError(f"tile={tile!r} must be two integers (row block, column block)")
    if not all(0 <= t < g for t, g in zip(tile, grid)):
        raise EmulationError(f"tile={tuple(tile)} is out of range: the problem has {grid[0]} x {grid[1]} tiles, "
                             f"so row blocks 0..{grid[0] - 1} and column blocks 0..{grid[1] - 1}")


def _operand_desc(p: TileParams, op: str, rows: int) -> int:
    """The stage-0 descriptor of operand `op`: the exported one, else the canonical one we would build."""
    d = getattr(p, f"{op}_desc")
    if d is not None:
        return int(d)
    off = getattr(p, f"{op}_smem_offset")
    sw = getattr(p, f"{op}_swizzle")
    sbo = 8 * sw if sw else 128
    enc = D.umma_smem_desc if p.sm100 else D.gmma_smem_desc
    return enc(off, 16, sbo, sw)


def _lint(p: TileParams, op: str, desc: int, tmap: TensorMap2D, report: TileReport) -> None:
    try:
        f = _desc_fields(desc, p.arch)
    except D.DescriptorError as e:
        report.issues.append(f"{op.upper()} descriptor: {e}")
        raise EmulationError(f"{op.upper()} descriptor: {e}") from None
    if f["addr"] != getattr(p, f"{op}_smem_offset"):
        report.issues.append(f"{op.upper()} descriptor starts at {f['addr']} but TMA writes the tile at "
                             f"{getattr(p, f'{op}_smem_offset')}")
    if f["swizzle"] != tmap.swizzle:
        report.issues.append(f"{op.upper()} descriptor swizzle {f['swizzle']} != tensor map swizzle {tmap.swizzle}")
    if tmap.swizzle and getattr(p, f"{op}_smem_offset") % swizzle_repeat(tmap.swizzle):
        report.issues.append(f"{op.upper()} tile at {getattr(p, f'{op}_smem_offset')} is not "
                             f"{swizzle_repeat(tmap.swizzle)}-B aligned: the swizzle phase of TMA and MMA differ")
    if tmap.swizzle and f["sbo"] != 8 * tmap.swizzle and getattr(p, f"{op}_major") == "K":
        report.issues.append(f"{op.upper()} SBO {f['sbo']} B: TMA packs 8 rows of {tmap.swizzle} B, "
                             f"so the 8-row groups are {8 * tmap.swizzle} B apart")


def _lint_k_advance(p: TileParams, report: TileReport) -> None:
    if p.k_advance_bytes != 32:
        report.issues.append(f"K-advance {p.k_advance_bytes} B per MMA step, but each step consumes 32 B of K "
                             "per row (UMMA_K x element size)")


def _k_step_bytes(p: TileParams, op: str) -> int:
    return 32  # every dense tcgen05/wgmma step reads 32 B of K per row (K=16 x 16b, 32 x 8b, 64 x 4b)


def emulate_tile(params: TileParams, A, B, *, sfa=None, sfb=None, m0: int = 0, n0: int = 0,
                 k_tiles: int | None = None, smem_base: int = 0, return_report: bool = False,
                 accumulation="tensor_core", acc_init=None):
    """Reproduce one output tile of a stage from its own layout parameters.

    A: (M, K) global operand, B: (N, K) (K-major "TN" GEMM), raw bytes or typed (numpy or torch):
    E4M3/E5M2 as uint8 (or torch float8), BF16 as uint16/bfloat16, NVFP4 as packed uint8 (M, K/2).
    sfa/sfb: block-scaled only, raw scale-factor bytes (rows, K/sf_vec); the emulator arranges them in the
    CUTLASS blocked layout (sf_to_blocked) and puts each K tile's atoms (512 B per 128 rows x 64 K) in K order
    at sfa/sfb_smem_offset, as a TMA of the blocked global tensor does. The tile's origin is (m0, n0).
    For each K tile: TMA loads of the boxes into each CTA's shared-memory image, the stage's
    descriptors advanced per K-step, the operand bytes read through them, the MMA into TMEM (or
    wgmma registers), then the epilogue's TMEM loads (and staging + TMA store if the stage stages).
    Each MMA instruction adds its products to the FP32 accumulator as pelib.numerics.blockfma's model of that MMA
    does (`accumulation`: "tensor_core", the block FMA the simulator runs by default: wgmma FP8 measured on
    an H100, tcgen05 f8f6f4 and mxf4nvf4 modelled (MMA-Sim's hardware-validated rules, not yet run on a B200 here); "exact": each instruction's exact sum rounded once; or
    a dict of models by pelib.numerics.blockfma.MMA_KINDS); kind::f16 sums exactly in float64. acc_init: the FP32
    accumulator before the first instruction (a stage that starts it from a bias), else the first
    instruction does not read D. Returns D (float64; NaN where the epilogue wrote nothing), and the
    TileReport if asked.
    """
    p = params
    if not isinstance(p, TileParams):
        raise EmulationError(f"params must be a TileParams (TileParams.from_exports(build.exports)), got "
                             f"{type(p).__name__}")
    report = TileReport()
    abits, bbits = _FMT_BITS[p.a_fmt], _FMT_BITS[p.b_fmt]
    _check_operand_dtype("A", A, p.a_fmt, abits)
    _check_operand_dtype("B", B, p.b_fmt, bbits)
    ga, gb = _as_bytes2d(A), _as_bytes2d(B)
    K = ga.shape[1] * 8 // abits
    if gb.shape[1] * 8 // bbits != K:
        raise EmulationError(f"A has K={K}, B has K={gb.shape[1] * 8 // bbits}")
    ncta = p.cta_group if p.sm100 else 1
    if p.sm100:
        tile_m = p.mma_m
        if p.cta_group == 2:
            cta_pair_split(p.mma_m, p.mma_n)
        elif p.mma_m != 128:
            raise EmulationError(f"cta_group::1 with M={p.mma_m} is not modelled (use 128)")
    else:
        tile_m = p.a_box_m
    tile_n = p.mma_n
    for what, v in (("m0", m0), ("n0", n0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise EmulationError(f"{what}={v!r} must be an integer row of the output")
    if not (0 <= m0 and m0 + tile_m <= ga.shape[0] and 0 <= n0 and n0 + tile_n <= gb.shape[0]):
        raise EmulationError(f"the tile at (m0, n0) = ({m0}, {n0}) of {tile_m} x {tile_n} lies outside the "
                             f"{ga.shape[0]} x {gb.shape[0]} output: m0 in 0..{ga.shape[0] - tile_m}, "
                             f"n0 in 0..{gb.shape[0] - tile_n}")
    rows_a = tile_m // ncta               # A rows in one CTA's smem
    rows_b = tile_n // ncta               # B rows in one CTA's smem (N split across the pair)
    # named by the fields the rows come from: an override of mma_m/mma_n (or of a box) is the usual cause
    for op, dim, box, rows in (("A", "mma_m", "a_box_m", rows_a), ("B", "mma_n", "b_box_n", rows_b)):
        box_rows = getattr(p, box)
        if box_rows > rows or rows % box_rows:
            step = box_rows * ncta
            fits = " or ".join(str(v) for v in range(step, 257, step)) or f"a multiple of {step}"
            raise EmulationError(f"{dim}={getattr(p, dim)} gives {rows} {op} rows per CTA"
                                 f"{' (split over the CTA pair)' if ncta > 1 else ''}, which the {box_rows}-row "
                                 f"{op} box ({box}={box_rows}) does not tile: use {dim} {fits}, or {box} a "
                                 f"divisor of {rows}")
    bk_b = p.b_block_k or p.block_k       # B's K per stage: one B stage serves bk_b / block_k A stages
    if bk_b % p.block_k:
        raise EmulationError(f"b_block_k={bk_b} must be a multiple of block_k={p.block_k}")
    a_per_b = bk_b // p.block_k
    kb_a = p.block_k * abits // 8         # K bytes per stage
    kb_b = bk_b * bbits // 8
    box_kb_a, box_kb_b = p.a_box_k * abits // 8, p.b_box_k * bbits // 8
    if kb_a % box_kb_a or kb_b % box_kb_b:
        raise EmulationError(f"block_k={p.block_k} (B: {bk_b}) is not a whole number of K boxes ({p.a_box_k}, "
                             f"{p.b_box_k})")
    n_ktiles = K // p.block_k if k_tiles is None else k_tiles
    if n_ktiles * p.block_k > K or K % bk_b:
        raise EmulationError(f"{n_ktiles} K tiles of {p.block_k} (B stages of {bk_b}) do not fit K={K}")
    tmA = TensorMap2D(abits, (K, ga.shape[0]), (p.a_box_k, p.a_box_m), p.a_swizzle)
    tmB = TensorMap2D(bbits, (K, gb.shape[0]), (p.b_box_k, p.b_box_n), p.b_swizzle)
    a_kstride = p.a_kbox_stride or rows_a * box_kb_a
    b_kstride = p.b_kbox_stride or rows_b * box_kb_b
    desc_a0, desc_b0 = _operand_desc(p, "a", rows_a), _operand_desc(p, "b", rows_b)
    _lint(p, "a", desc_a0, tmA, report)
    _lint(p, "b", desc_b0, tmB, report)
    _lint_k_advance(p, report)
    report.descriptors = {"a": desc_a0, "b": desc_b0, "idesc": p.idesc}
    size = p.smem_bytes or limits.SMEM_LIMIT
    smems = [SmemImage(size, smem_base) for _ in range(ncta)]
    tmems = [Tmem(p.tmem_cols) for _ in range(ncta)] if p.sm100 else []
    if p.sm100:
        tmems[0].check_cols(p.tmem_acc_col, tile_n, "the accumulator")
    acc = np.zeros((tile_m, tile_n))
    mma_kind = ("wgmma_f8" if not p.sm100 else {"f8f6f4": "umma_f8f6f4", "mxf4nvf4": "umma_mxf4nvf4"}.get(p.kind))
    model = F.mma_models(accumulation)[mma_kind] if mma_kind else None
    if acc_init is not None:
        acc_init = np.asarray(acc_init, np.float32)
        if acc_init.shape != (tile_m, tile_n):
            raise EmulationError(f"acc_init {acc_init.shape}: one FP32 per accumulator, ({tile_m}, {tile_n})")
        acc[:] = acc_init
    acc_bits = np.ascontiguousarray(acc.astype(np.float32)).view(np.uint32)
    steps = p.block_k * abits // 8 // _k_step_bytes(p, "a")
    kel_step = 32 * 8 // abits
    if p.block_scaled:
        if sfa is None or sfb is None:
            raise EmulationError("a block-scaled stage needs sfa and sfb")
        if ncta != 1:
            raise EmulationError("block-scaled cta_group::2 is not modelled")
        for name in ("sfa_smem_offset", "sfb_smem_offset", "sfa_tmem_col", "sfb_tmem_col"):
            if getattr(p, name) is None:
                raise EmulationError(f"a block-scaled stage must export {name}")
        # a tile narrower than 128 rows (nvfp4/03's 64-wide B) comes with its rows only: the blocked layout's
        # 128-row atom is padded with rows this tile never reads
        sfa_bl = sf_to_blocked(_pad_sf_rows(_as_bytes2d(sfa)))
        sfb_bl = sf_to_blocked(_pad_sf_rows(_as_bytes2d(sfb)))
        kbt = K // p.sf_vec
        n_sf_step = kel_step // p.sf_vec
        sf_fmt = "ue4m3" if p.kind == "mxf4nvf4" else "ue8m0"
    issued = False
    for kt in range(n_ktiles):
        stage = kt % p.num_stages
        bt, bsub = divmod(kt, a_per_b)    # B's stage and this A stage's place in it
        bstage = bt % p.num_stages
        sa, sb_ = stage * p.a_stage_stride, bstage * p.b_stage_stride
        dsa = stage * (p.a_stage_stride if p.a_desc_stage_stride is None else p.a_desc_stage_stride)
        dsb = bstage * (p.b_stage_stride if p.b_desc_stage_stride is None else p.b_desc_stage_stride)
        # Producer: TMA boxes of this K tile into each CTA's smem (its stage of the ring).
        for v, sm in enumerate(smems):
            for kbx in range(kb_a // box_kb_a):
                for mb in range(rows_a // p.a_box_m):
                    tma_load_2d(tmA, ga, (kt * p.block_k + kbx * p.a_box_k, m0 + v * rows_a + mb * p.a_box_m),
                                sm, smem_base + p.a_smem_offset + sa + kbx * a_kstride + mb * p.a_box_m * box_kb_a)
            for kbx in range(kb_b // box_kb_b if bsub == 0 else 0):   # B once per B stage
                for nb in range(rows_b // p.b_box_n):
                    tma_load_2d(tmB, gb, (bt * bk_b + kbx * p.b_box_k, n0 + v * rows_b + nb * p.b_box_n),
                                sm, smem_base + p.b_smem_offset + sb_ + kbx * b_kstride + nb * p.b_box_n * box_kb_b)
            if p.block_scaled:  # the stage's scale factors, blocked, straight after each other
                for op, bl, rows0, off in (("a", sfa_bl, m0, p.sfa_smem_offset + stage * p.sfa_stage_stride),
                                           ("b", sfb_bl, n0, p.sfb_smem_offset + stage * p.sfb_stage_stride)):
                    rows = tile_m if op == "a" else tile_n
                    # a tile narrower than 128 rows takes the atoms of the 128-row block holding it (the
                    # blocked layout has no smaller atom); the MMA's SF address then selects its rows
                    for r128 in range(-(-rows // 128)):
                        for ka in range(p.block_k // p.sf_vec // 4):
                            src = sf_blocked_offset((rows0 - rows0 % 128 + 128 * r128), kt * p.block_k // p.sf_vec + 4 * ka, kbt)
                            dst = smem_base + off + (r128 * (p.block_k // p.sf_vec // 4) + ka) * 512
                            sm.write(dst + np.arange(512), bl[src:src + 512])
        if p.block_scaled:  # MMA warp: the stage's scale factors to TMEM first (all atoms), then the MMAs
            sm, tm = smems[0], tmems[0]
            for off, col, rows in ((p.sfa_smem_offset + stage * p.sfa_stage_stride, p.sfa_tmem_col, tile_m),
                                   (p.sfb_smem_offset + stage * p.sfb_stage_stride, p.sfb_tmem_col, tile_n)):
                if rows > 128:
                    raise EmulationError("block-scaled tiles with more than 128 rows are not modelled")
                for atom in range(p.block_k // p.sf_vec // 4):
                    src = smem_base + off + atom * 512
                    tcgen05_cp_32x128b_warpx4(sm, D.umma_smem_desc(src, 16, 128, 0), tm,
                                              col + atom * p.sf_tmem_step_cols)
        # MMA issuer: one K-step at a time, descriptors advanced by the stage's own rule.
        for s in range(steps):
            kbyte = s * 32
            adv_a = (kbyte // box_kb_a) * a_kstride + (kbyte % box_kb_a) // 32 * p.k_advance_bytes
            kbyte_b = bsub * p.block_k * bbits // 8 + kbyte    # B bytes into its stage
            adv_b = (kbyte_b // box_kb_b) * b_kstride + (kbyte_b % box_kb_b) // 32 * p.k_advance_bytes
            da = D.smem_desc_advance(desc_a0, adv_a + smem_base + dsa)
            db = D.smem_desc_advance(desc_b0, adv_b + smem_base + dsb)
            a_rows, b_rows = [], []
            for sm in smems:
                if p.sm100:
                    addr_a = operand_addresses(da, rows_a, 32, p.a_major, arch=p.arch, elem_bytes=max(1, abits // 8))
                    ab = sm.read(addr_a)
                    report.unwritten_operand_bytes += sm.unwritten(addr_a)
                    a_rows.append(ab)
                else:  # wgmma: one warpgroup per 64 rows, each with its own A descriptor
                    for g in range(tile_m // 64):
                        wg = (p.a_wg_stride if p.a_wg_stride is not None else 8 * _desc_fields(da, p.arch)["sbo"])
                        addr_a = operand_addresses(D.smem_desc_advance(da, g * wg), 64, 32, p.a_major,
                                                   arch=p.arch, elem_bytes=max(1, abits // 8))
                        a_rows.append(sm.read(addr_a))
                        report.unwritten_operand_bytes += sm.unwritten(addr_a)
                addr_b = operand_addresses(db, rows_b, 32, p.b_major, arch=p.arch, elem_bytes=max(1, bbits // 8))
                b_rows.append(sm.read(addr_b))
                report.unwritten_operand_bytes += sm.unwritten(addr_b)
            a_bytes, b_bytes = np.concatenate(a_rows), np.concatenate(b_rows)
            av = decode_values(a_bytes, p.a_fmt)
            bv = decode_values(b_bytes, p.b_fmt)
            if model is not None:   # the window exponents of the block FMA (scales added below)
                ae, be = F.window_exponents(a_bytes, p.a_fmt), F.window_exponents(b_bytes, p.b_fmt)
            if p.block_scaled:
                sm, tm = smems[0], tmems[0]
                ksf = s * n_sf_step  # scale-factor index inside the stage
                atom, sf_id = divmod(ksf, 4)
                sa = decode_values(_mma_scale_bytes(tm, p.sfa_tmem_col + atom * p.sf_tmem_step_cols, tile_m,
                                                    sf_id, n_sf_step), sf_fmt)
                sb = decode_values(_mma_scale_bytes(tm, p.sfb_tmem_col + p.sfb_mma_shift_cols + atom * p.sf_tmem_step_cols, tile_n,
                                                    sf_id, n_sf_step), sf_fmt)
                av = av * np.repeat(sa, p.sf_vec, axis=1)
                bv = bv * np.repeat(sb, p.sf_vec, axis=1)
                if model is not None:
                    sfa_b = _mma_scale_bytes(tm, p.sfa_tmem_col + atom * p.sf_tmem_step_cols, tile_m, sf_id, n_sf_step)
                    sfb_b = _mma_scale_bytes(tm, p.sfb_tmem_col + p.sfb_mma_shift_cols + atom * p.sf_tmem_step_cols, tile_n, sf_id, n_sf_step)
                    # the model's windows: MMA-Sim's kind::mxf4nvf4 rule takes the scales' exponents alone
                    ae = F.scaled_windows(model, ae, np.repeat(F.window_exponents(sfa_b, sf_fmt), p.sf_vec, axis=1))
                    be = F.scaled_windows(model, be, np.repeat(F.window_exponents(sfb_b, sf_fmt), p.sf_vec, axis=1))
            if model is not None:   # per instruction, into the FP32 accumulator
                acc_bits = F.mma(model, av, ae, bv, be, acc_bits, scale_d=issued or acc_init is not None)
            else:
                with np.errstate(invalid="ignore", over="ignore"):
                    acc = acc + av @ bv.T
            issued = True
    if not issued:
        raise EmulationError("no K tile was issued")
    if model is not None:
        acc = acc_bits.view(np.float32).astype(np.float64)
    # Accumulator -> TMEM (sm_100) and the epilogue's view of it.
    out = np.full((tile_m, tile_n), np.nan)
    if not p.sm100:
        out[:] = acc
        return (out, report) if return_report else out
    amap = tmem_accumulator_map(tile_m, tile_n, p.cta_group, p.tmem_acc_col)
    for v, tm in enumerate(tmems):
        sel = amap[..., 0] == v
        tm.data[amap[..., 1][sel], amap[..., 2][sel]] = acc[sel]
    vals = _epilogue(p, tmems, tile_n, report)     # list of (cta, rows, cols, values)
    if p.stage_smem_offset is None:
        for v, r, c, x in vals:
            out[v * 128 + r, c] = x
    else:
        out = _staged_store(p, smems, vals, tile_m, tile_n, smem_base, report)
    report.uncovered_outputs = int(np.isnan(out).sum() - np.isnan(acc).sum())
    return (out, report) if return_report else out


def _epilogue(p: TileParams, tmems: list, tile_n: int, report: TileReport) -> list:
    """tcgen05.ld.32x32b.x{epi_ld_x} by each epilogue warp; default mapping: warp w drains lane quarter
    w%4; warps sharing a quarter split the N columns in warp order; register i of chunk j is column
    j*x + i of the warp's slice. `epilogue_map(warp, chunk) -> (taddr_lane, col0, out_col0)` overrides."""
    x = p.epi_ld_x
    vals = []
    warps = list(range(p.epi_warp0, p.epi_warp0 + p.epi_warps))
    quarters = {}
    for w in warps:
        quarters.setdefault(w % 4, []).append(w)
    missing = {0, 1, 2, 3} - set(quarters)
    if missing:
        report.issues.append(f"epilogue warps {warps} leave TMEM lane quarters {sorted(missing)} unread "
                             "(a warp reads only lanes 32*(warp%4)..+31)")
    for v, tm in enumerate(tmems):
        for q, ws in quarters.items():
            share = tile_n // len(ws)
            for i, w in enumerate(ws):
                for j in range(share // x):
                    if p.epilogue_map is not None:
                        lane, col0, oc0 = p.epilogue_map(w, j)
                    else:
                        lane, col0, oc0 = 32 * (w % 4), p.tmem_acc_col + i * share + j * x, i * share + j * x
                    regs = tcgen05_ld_32x32b(tm, w, lane << 16 | col0, x)
                    rows = np.repeat(lane + np.arange(32)[:, None], x, axis=1)
                    cols = np.repeat(oc0 + np.arange(x)[None, :], 32, axis=0)
                    vals.append((v, rows, cols, regs))
    return vals


def _to_out_bytes(x: np.ndarray, nbytes: int, fmt: int = 0) -> np.ndarray:
    if nbytes == 2 and fmt == 1:  # FP16, round to nearest even (cvt.rn.f16x2.f32)
        return x.astype(np.float32).astype(np.float16).view(np.uint8).reshape(x.shape + (2,))
    if nbytes == 4:
        return x.astype(np.float32).view(np.uint8).reshape(x.shape + (4,))
    if nbytes == 2:  # BF16, round to nearest even (cvt.rn.bf16x2.f32)
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        r = np.where((u & 0x7FFFFFFF) > 0x7F800000, np.uint16(0x7FFF), r).astype(np.uint16)   # NaN: 0x7FFF
        return r.view(np.uint8).reshape(x.shape + (2,))
    raise EmulationError(f"out_elem_bytes={nbytes}: 2 (BF16) or 4 (FP32)")


def _staged_store(p: TileParams, smems, vals, tile_m, tile_n, smem_base, report) -> np.ndarray:
    """Epilogue writes into a staging tile (boxes of stage_box_rows x stage_box_cols, XOR by
    stage_swizzle), then TMA stores each box with a map of swizzle out_swizzle; returns the tile."""
    eb = p.out_elem_bytes
    bc, br = p.stage_box_cols, p.stage_box_rows
    rows_per_cta = tile_m // len(smems)
    nrb, ncb = rows_per_cta // br, tile_n // bc
    pitch = bc * eb
    for v, r, c, x in vals:
        box = (c // bc) * nrb + (r // br)
        logical = smem_base + p.stage_smem_offset + box * br * pitch + (r % br) * pitch + (c % bc) * eb
        addr = swizzle_addr(logical[..., None] + np.arange(eb), p.stage_swizzle)
        smems[v].write(addr, _to_out_bytes(x, eb, p.out_fmt))
    out = np.zeros((tile_m, tile_n * eb), dtype=np.uint8)
    tmap = TensorMap2D(8 * eb, (tile_n, tile_m), (bc, br), p.out_swizzle)
    for v, sm in enumerate(smems):
        for cb in range(ncb):
            for rb in range(nrb):
                src = smem_base + p.stage_smem_offset + (cb * nrb + rb) * br * pitch
                n_unwritten = sm.unwritten(tma_box_addresses(tmap, src))
                if n_unwritten:
                    report.issues.append(f"TMA store of box ({cb}, {rb}) in CTA {v} reads {n_unwritten} staging "
                                         "bytes the epilogue never wrote")
                out = tma_store_2d(tmap, sm, src, (cb * bc, v * rows_per_cta + rb * br), out)
    if eb == 4:
        return out.view(np.float32).astype(np.float64)
    if p.out_fmt == 1:
        return out.view(np.float16).astype(np.float64)
    return (out.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
