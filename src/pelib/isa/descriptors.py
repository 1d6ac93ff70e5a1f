"""UMMA (sm_100 tcgen05) and GMMA (sm_90 wgmma) descriptors: encoders and decoders, field by field.

Each encoder checks every field against its bit width and the values the spec allows, and raises
`DescriptorError` naming the field and the fix. Each decoder returns a dict of named fields; feeding
that dict back to the encoder gives the same integer. `src/kernels/common/descriptors.cuh` holds the
constexpr C++ twins; `cuda_static_asserts()` writes a translation unit that checks they agree.

Sources (cited per field below):
  PTX ISA 9.7.16.4.1 "Shared Memory Descriptor" (Table 40), 9.7.16.4.2 "Instruction Descriptor"
  (Tables 42, 43), 9.7.15.5.1 "Matrix Descriptor" (wgmma);
  CUTLASS include/cute/arch/mma_sm100_desc.hpp (UMMA::SmemDescriptor, InstrDescriptor,
  InstrDescriptorBlockScaled, DescriptorIterator) and include/cute/arch/mma_sm90_desc.hpp (GmmaDescriptor).
"""
from __future__ import annotations

__all__ = [
    "DescriptorError", "A_FORMATS", "C_FORMATS", "SCALE_FORMATS", "SWIZZLES",
    "umma_instr_desc", "decode_umma_instr_desc",
    "umma_instr_desc_block_scaled", "decode_umma_instr_desc_block_scaled", "umma_sf_id",
    "umma_smem_desc", "decode_umma_smem_desc", "gmma_smem_desc", "decode_gmma_smem_desc",
    "smem_desc_advance", "describe", "cuda_static_asserts",
]


class DescriptorError(ValueError):
    """A descriptor field is out of range or not allowed by the spec."""


# --- formats -------------------------------------------------------------------------------------
# a_format/b_format codes per MMA kind (PTX ISA Table 42/43; CUTLASS F16F32Format, MXF8F6F4Format,
# S8Format, MXF4Format). Packed E2M1 of kind::mxf4/mxf4nvf4 is 1; one-per-byte E2M1 of f8f6f4 is 5.
A_FORMATS = {
    "f16": {"f16": 0, "bf16": 1},
    "tf32": {"tf32": 2},
    "f8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
    "i8": {"u8": 0, "s8": 1},
    "mxf8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
    "mxf4": {"e2m1": 1},
    "mxf4nvf4": {"e2m1": 1},
}
# D format [4,6) (CUTLASS CFormat): F16 0, F32 1, S32 2.
C_FORMATS = {"f16": 0, "f32": 1, "s32": 2}
# Scale format bit 23 (CUTLASS ScaleFormat): UE4M3 0 (NVFP4), UE8M0 1 (MX).
SCALE_FORMATS = {"ue4m3": 0, "ue8m0": 1}
MAJORS = {"K": 0, "MN": 1}
# Swizzle byte span -> sm_100 layout_type [61,64) (CUTLASS UMMA::LayoutType; PTX ISA Table 40).
UMMA_LAYOUT = {0: 0, 128: 2, 64: 4, 32: 6, "128B_base32b": 1}
# Swizzle byte span -> sm_90 layout_type [62,64) (CUTLASS GMMA::LayoutType).
GMMA_LAYOUT = {0: 0, 128: 1, 64: 2, 32: 3}
SWIZZLES = (0, 32, 64, 128)
# MMA kind codes: the stages' mma_kind export and common/descriptors.cuh's UMMA_KIND_* (block-scaled 4-6).
MMA_KINDS = {0: "f16", 1: "tf32", 2: "f8f6f4", 3: "i8", 4: "mxf8f6f4", 5: "mxf4", 6: "mxf4nvf4"}
# The K of one dense tcgen05.mma of each kind: 256 bits of A's elements a row (CUTLASS
# include/cute/atom/mma_traits_sm100.hpp, "Logical shape-K is always 256bits": K = 256 / sizeof_bits(A); PTX ISA,
# tcgen05.mma, the shapes of each .kind).
MMA_K = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32, "mxf8f6f4": 32, "mxf4": 64, "mxf4nvf4": 64}


def _inv(d: dict) -> dict:
    return {v: k for k, v in d.items()}


def _field(name: str, value, bits: int, lo: int = 0) -> int:
    """Check that `value` fits an unsigned field of `bits` bits (and is >= lo)."""
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int):
        raise DescriptorError(f"{name}={value!r} must be an integer")
    if not lo <= value < (1 << bits):
        raise DescriptorError(f"{name}={value} does not fit its {bits}-bit field (allowed {lo}..{(1 << bits) - 1})")
    return value


def _code(table: dict, name: str, value, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if value not in table.values():
            raise DescriptorError(f"{what}={value} is not a valid code; codes: {table}")
        return value
    key = str(value).lower() if what != "major" else str(value).upper()
    if key not in table:
        raise DescriptorError(f"{what}={value!r} is not allowed for {name}; allowed: {sorted(table)}")
    return table[key]


def _mn(m: int, n: int, kind: str) -> tuple[int, int]:
    # M>>4 at [24,29), N>>3 at [17,23) (PTX ISA Table 42/43; CUTLASS m_dim_, n_dim_).
    if not isinstance(m, int) or m % 16 or not 1 <= m >> 4 < 32:
        raise DescriptorError(f"M={m}: the instruction descriptor stores M>>4 in 5 bits; M must be a "
                              f"multiple of 16 in 16..496 (tcgen05 uses 64, 128 or 256)")
    if not isinstance(n, int) or n % 8 or not 8 <= n <= 256:
        raise DescriptorError(f"N={n}: the instruction descriptor stores N>>3 (6 bits) and tcgen05.mma "
                              f"allows N = 8..256 in steps of 8 (PTX ISA Table 39)")
    if m not in (64, 128, 256):
        raise DescriptorError(f"M={m} is no tcgen05.mma shape for kind::{kind} (PTX ISA Table 39: "
                              f"64/128 with cta_group::1, 128/256 with cta_group::2)")
    return m >> 4, n >> 3


# --- instruction descriptors ---------------------------------------------------------------------
def umma_instr_desc(m: int, n: int, a_fmt, b_fmt, c_fmt="f32", a_major="K", b_major="K", *,
                    kind: str = "f8f6f4", a_neg: int = 0, b_neg: int = 0, saturate: int = 0,
                    max_shift: int = 0, sparse: int = 0, sparse_id2: int = 0) -> int:
    """32-bit instruction descriptor for tcgen05.mma kind::f16 / tf32 / f8f6f4 / i8 (PTX ISA Table 42)."""
    if kind not in ("f16", "tf32", "f8f6f4", "i8"):
        raise DescriptorError(f"kind={kind!r}: umma_instr_desc covers f16, tf32, f8f6f4, i8; "
                              "use umma_instr_desc_block_scaled for mxf8f6f4/mxf4/mxf4nvf4")
    mdim, ndim = _mn(m, n, kind)
    a = _code(A_FORMATS[kind], kind, a_fmt, "a_fmt")
    b = _code(A_FORMATS[kind], kind, b_fmt, "b_fmt")
    c = _code(C_FORMATS, kind, c_fmt, "c_fmt")
    am = _code(MAJORS, kind, a_major, "major")
    bm = _code(MAJORS, kind, b_major, "major")
    # CUTLASS: "Major value of 1 is only valid for E4M3, E5M2, INT8, F16, BF16 and TF32".
    if kind == "f8f6f4" and (am and a not in (0, 1) or bm and b not in (0, 1)):
        raise DescriptorError("MN-major operands are only allowed for E4M3/E5M2 in kind::f8f6f4 "
                              "(sub-byte types must be K-major)")
    return (_field("sparse_id2", sparse_id2, 2)           # [0,2)
            | _field("sparse", sparse, 1) << 2            # [2]
            | _field("saturate", saturate, 1) << 3        # [3]   (kind::i8 only)
            | c << 4                                      # [4,6) D format
            | a << 7                                      # [7,10) A format
            | b << 10                                     # [10,13) B format
            | _field("a_neg", a_neg, 1) << 13             # [13]
            | _field("b_neg", b_neg, 1) << 14             # [14]
            | am << 15                                    # [15] A major (transpose A)
            | bm << 16                                    # [16] B major
            | ndim << 17                                  # [17,23) N>>3
            | mdim << 24                                  # [24,29) M>>4
            | _field("max_shift", max_shift, 2) << 30)    # [30,32) .ws only


def decode_umma_instr_desc(v: int, kind: str = "f8f6f4") -> dict:
    """Named fields of a kind::f16/tf32/f8f6f4/i8 instruction descriptor (inverse of umma_instr_desc)."""
    _field("instruction descriptor", v, 32)
    if v & (1 << 6 | 1 << 23 | 1 << 29):
        raise DescriptorError(f"0x{v:08x} sets a reserved bit (6, 23 or 29)")
    fmts = _inv(A_FORMATS[kind])
    a, b = v >> 7 & 7, v >> 10 & 7
    return {"m": (v >> 24 & 0x1F) << 4, "n": (v >> 17 & 0x3F) << 3,
            "a_fmt": fmts.get(a, a), "b_fmt": fmts.get(b, b),
            "c_fmt": _inv(C_FORMATS).get(v >> 4 & 3, v >> 4 & 3),
            "a_major": _inv(MAJORS)[v >> 15 & 1], "b_major": _inv(MAJORS)[v >> 16 & 1],
            "kind": kind, "a_neg": v >> 13 & 1, "b_neg": v >> 14 & 1, "saturate": v >> 3 & 1,
            "max_shift": v >> 30 & 3, "sparse": v >> 2 & 1, "sparse_id2": v & 3}


# Scale-factor vector size per kind (PTX ISA, tcgen05.mma .block_scale: .scale_vec::1X = block32 for
# mxf8f6f4, 2X = block32 for mxf4/mxf4nvf4, 4X = block16, which mxf4nvf4 needs for UE4M3 scales).
_SF_IDS = {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)}   # scale_vec::NX -> allowed scale-factor data IDs


def _scale_vec(kind: str, sf: int, block: int | None) -> int:
    """The .scale_vec::NX a block-scaled descriptor is used with (1, 2 or 4)."""
    if kind == "mxf8f6f4":
        if block not in (None, 32):
            raise DescriptorError(f"kind::mxf8f6f4 scales blocks of 32 elements, not block={block}")
        return 1
    if block is None:
        block = 16 if sf == 0 else 32     # UE4M3 scales (NVFP4) come in blocks of 16
    if block not in (16, 32):
        raise DescriptorError(f"block={block}: kind::{kind} scales blocks of 16 (scale_vec::4X) or 32 (2X)")
    if block == 16 and kind == "mxf4":
        raise DescriptorError("kind::mxf4 has no block16 (scale_vec::4X): use kind::mxf4nvf4")
    if block == 32 and sf == 0:
        raise DescriptorError(f"kind::{kind} with UE4M3 scales needs block16 (scale_vec::4X)")
    return 4 if block == 16 else 2


def umma_instr_desc_block_scaled(m: int, n: int, a_fmt="e2m1", b_fmt="e2m1", scale_fmt="ue4m3",
                                 a_sf_id: int = 0, b_sf_id: int = 0, a_major="K", b_major="K", *,
                                 kind: str = "mxf4nvf4", a_neg: int = 0, b_neg: int = 0,
                                 k_size: int = 0, sparse: int = 0, sparse_id2: int = 0,
                                 block: int | None = None) -> int:
    """32-bit instruction descriptor for tcgen05.mma kind::mxf8f6f4 / mxf4 / mxf4nvf4 (PTX ISA Tables 43, 44).

    M is stored as M>>7 in bits [27,29) with [24,27) reserved, so M is 128 or 256 (no M=64 here);
    kind::mxf4/mxf4nvf4 keep B's format in [10,12) with bit 12 reserved. The scale-factor data IDs are
    0..3 for mxf8f6f4 (scale_vec::1X), 0 or 2 for block32 of mxf4/mxf4nvf4 (2X) and only 0 for block16
    (4X, which UE4M3 scales use); `block` (16 or 32) is inferred from the scale format when not given.
    """
    if kind not in ("mxf8f6f4", "mxf4", "mxf4nvf4"):
        raise DescriptorError(f"kind={kind!r}: block-scaled kinds are mxf8f6f4, mxf4, mxf4nvf4")
    mdim, ndim = _mn(m, n, kind)
    if m not in (128, 256):
        raise DescriptorError(f"M={m}: a block-scaled descriptor stores M>>7 in bits 27-28 (bits 24-26 are "
                              f"reserved), so M is 128 or 256 (PTX ISA Tables 43, 44)")
    a = _code(A_FORMATS[kind], kind, a_fmt, "a_fmt")
    b = _code(A_FORMATS[kind], kind, b_fmt, "b_fmt")
    sf = _code(SCALE_FORMATS, kind, scale_fmt, "scale_fmt")
    if kind == "mxf4" and sf != 1:
        raise DescriptorError("kind::mxf4 takes UE8M0 scales only; NVFP4 (UE4M3) needs kind::mxf4nvf4")
    if kind == "mxf8f6f4" and sf != 1:
        raise DescriptorError("kind::mxf8f6f4 takes UE8M0 scales only (PTX ISA Table 43)")
    am = _code(MAJORS, kind, a_major, "major")
    bm = _code(MAJORS, kind, b_major, "major")
    if kind in ("mxf4", "mxf4nvf4") and (am or bm):
        raise DescriptorError(f"kind::{kind} takes K-major A and B only (TN)")
    vec = _scale_vec(kind, sf, block)
    for name, v in (("a_sf_id", a_sf_id), ("b_sf_id", b_sf_id)):
        _field(name, v, 2)
        if v not in _SF_IDS[vec]:
            raise DescriptorError(f"{name}={v}: with scale_vec::{vec}X (kind::{kind}"
                                  f"{', block16' if vec == 4 else ', block32' if vec == 2 else ''}) the scale-factor "
                                  f"data ID is one of {list(_SF_IDS[vec])} (PTX ISA, tcgen05.mma scale factors)")
    if kind == "mxf8f6f4" and k_size:
        raise DescriptorError("k_size=1 (K96) exists for kind::mxf4/mxf4nvf4 only; bit 31 is reserved for mxf8f6f4")
    return (_field("sparse_id2", sparse_id2, 2)           # [0,2)
            | _field("sparse", sparse, 1) << 2            # [2]
            | b_sf_id << 4                                # [4,6) B scale-factor ID
            | a << 7                                      # [7,10) A format
            | b << 10                                     # [10,13) B format ([10,12) + reserved 12 for mxf4*)
            | _field("a_neg", a_neg, 1) << 13             # [13]
            | _field("b_neg", b_neg, 1) << 14             # [14]
            | am << 15 | bm << 16                         # [15], [16] majors
            | ndim << 17                                  # [17,23) N>>3
            | sf << 23                                    # [23] scale format
            | (m >> 7) << 27                              # [27,29) M>>7; [24,27) reserved
            | a_sf_id << 29                               # [29,31) A scale-factor ID
            | _field("k_size", k_size, 1) << 31)          # [31] K size (mxf4: 0 = K64, 1 = K96)


def decode_umma_instr_desc_block_scaled(v: int, kind: str = "mxf4nvf4") -> dict:
    """Named fields of a block-scaled instruction descriptor (inverse of umma_instr_desc_block_scaled);
    refuses the reserved bits (3, 6, 24-26; 12 for mxf4/mxf4nvf4; 31 for mxf8f6f4) and invalid M or IDs."""
    _field("instruction descriptor", v, 32)
    if kind not in ("mxf8f6f4", "mxf4", "mxf4nvf4"):
        raise DescriptorError(f"kind={kind!r}: block-scaled kinds are mxf8f6f4, mxf4, mxf4nvf4")
    reserved = [3, 6, 24, 25, 26] + ([12] if kind != "mxf8f6f4" else [31])
    hit = [bit for bit in reserved if v >> bit & 1]
    if hit:
        raise DescriptorError(f"0x{v:08x} sets reserved bit{'s' if len(hit) > 1 else ''} "
                              f"{', '.join(map(str, hit))} of a kind::{kind} descriptor (PTX ISA Tables 43, 44)")
    m = (v >> 27 & 3) << 7
    if m not in (128, 256):
        raise DescriptorError(f"0x{v:08x}: M>>7 = {v >> 27 & 3} in bits 27-28 is no block-scaled shape (128 or 256)")
    fmts = _inv(A_FORMATS[kind])
    a, b = v >> 7 & 7, v >> 10 & 7
    sf = v >> 23 & 1
    if kind != "mxf4nvf4" and sf == 0:
        raise DescriptorError(f"0x{v:08x}: kind::{kind} takes UE8M0 scales only (bit 23 must be 1)")
    # IDs: 0..3 with scale_vec::1X (mxf8f6f4), 0 or 2 with block32 (2X), only 0 with block16 (4X, UE4M3).
    allowed = (0, 1, 2, 3) if kind == "mxf8f6f4" else (0,) if sf == 0 else (0, 2)
    for name, sid in (("a_sf_id", v >> 29 & 3), ("b_sf_id", v >> 4 & 3)):
        if sid not in allowed:
            raise DescriptorError(f"0x{v:08x}: {name}={sid} is not allowed for kind::{kind} with "
                                  f"{_inv(SCALE_FORMATS)[sf]} scales (one of {list(allowed)})")
    return {"m": m, "n": (v >> 17 & 0x3F) << 3,
            "a_fmt": fmts.get(a, a), "b_fmt": fmts.get(b, b),
            "scale_fmt": _inv(SCALE_FORMATS)[sf],
            "a_sf_id": v >> 29 & 3, "b_sf_id": v >> 4 & 3,
            "a_major": _inv(MAJORS)[v >> 15 & 1], "b_major": _inv(MAJORS)[v >> 16 & 1],
            "kind": kind, "a_neg": v >> 13 & 1, "b_neg": v >> 14 & 1, "k_size": v >> 31 & 1,
            "sparse": v >> 2 & 1, "sparse_id2": v & 3}


def umma_sf_id(tmem_addr: int) -> int:
    """Scale-factor ID = bits [30,32) of the scale factors' TMEM address (CUTLASS make_runtime_instr_desc_block_scaled)."""
    return (_field("tmem_addr", tmem_addr, 32) & 0xC0000000) >> 30


# --- shared-memory descriptors -------------------------------------------------------------------
def _enc14(name: str, x: int) -> int:
    # matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4 (PTX ISA 9.7.16.4.1); refuse what it would drop.
    if not isinstance(x, int) or x < 0 or x >= 1 << 18:
        raise DescriptorError(f"{name}={x!r}: must be a byte value in 0..{(1 << 18) - 16} (14 bits of 16-B units)")
    if x % 16:
        raise DescriptorError(f"{name}={x} is not 16-byte aligned (the descriptor drops the 4 LSBs)")
    return x >> 4


def _swz(table: dict, swizzle) -> int:
    if swizzle not in table:
        raise DescriptorError(f"swizzle={swizzle!r}: allowed are {list(table)} (bytes of the swizzle span)")
    return table[swizzle]


def umma_smem_desc(addr: int, lbo: int, sbo: int, swizzle=128, base_offset: int = 0, lbo_mode: int = 0) -> int:
    """sm_100 shared-memory matrix descriptor (PTX ISA 9.7.16.4.1 Table 40; CUTLASS UMMA::SmemDescriptor).

    addr, lbo, sbo are byte values (addr in the CTA's shared window); swizzle is 0, 32, 64, 128
    (or "128B_base32b"). Bits 46..48 are the fixed 0b001 (CUTLASS `version_ = 1`).
    """
    return (_enc14("addr", addr)                          # [0,14) start address >> 4
            | _enc14("lbo", lbo) << 16                    # [16,30) leading-dimension byte offset >> 4
            | _enc14("sbo", sbo) << 32                    # [32,46) stride-dimension byte offset >> 4
            | 1 << 46                                     # [46,49) fixed 0b001 (version)
            | _field("base_offset", base_offset, 3) << 49  # [49,52) matrix base offset
            | _field("lbo_mode", lbo_mode, 1) << 52       # [52] LBO mode: 0 relative, 1 absolute
            | _swz(UMMA_LAYOUT, swizzle) << 61)           # [61,64) layout/swizzle type


def decode_umma_smem_desc(v: int) -> dict:
    """Named fields of an sm_100 shared-memory descriptor; flags a missing version bit (a Hopper copy)."""
    _field("smem descriptor", v, 64)
    if (v >> 46 & 7) != 1:
        raise DescriptorError(f"0x{v:016x}: bits 46..48 are {v >> 46 & 7:#05b}, sm_100 needs 0b001 "
                              "(a Hopper GMMA descriptor copied to Blackwell misses bit 46)")
    if v >> 53 & 0xFF or v >> 14 & 3 or v >> 30 & 3:
        raise DescriptorError(f"0x{v:016x} sets reserved bits (14-15, 30-31 or 53-60)")
    lt = v >> 61 & 7
    sw = _inv(UMMA_LAYOUT).get(lt)
    if sw is None:
        raise DescriptorError(f"0x{v:016x}: layout type {lt} is invalid (3, 5, 7 are not defined)")
    return {"addr": (v & 0x3FFF) << 4, "lbo": (v >> 16 & 0x3FFF) << 4, "sbo": (v >> 32 & 0x3FFF) << 4,
            "swizzle": sw, "base_offset": v >> 49 & 7, "lbo_mode": v >> 52 & 1}


def gmma_smem_desc(addr: int, lbo: int, sbo: int, swizzle=128, base_offset: int = 0) -> int:
    """sm_90 wgmma matrix descriptor (PTX ISA 9.7.15.5.1; CUTLASS GmmaDescriptor): no version bit."""
    return (_enc14("addr", addr)                          # [0,14) start address >> 4
            | _enc14("lbo", lbo) << 16                    # [16,30) leading byte offset >> 4
            | _enc14("sbo", sbo) << 32                    # [32,46) stride byte offset >> 4
            | _field("base_offset", base_offset, 3) << 49  # [49,52) base offset (SW128/SW64)
            | _swz(GMMA_LAYOUT, swizzle) << 62)           # [62,64) layout type


def decode_gmma_smem_desc(v: int) -> dict:
    """Named fields of an sm_90 wgmma descriptor (inverse of gmma_smem_desc)."""
    _field("smem descriptor", v, 64)
    if v >> 46 & 7 or v >> 52 & 0x3FF or v >> 14 & 3 or v >> 30 & 3:
        raise DescriptorError(f"0x{v:016x} sets bits sm_90 leaves zero (an sm_100 descriptor has bit 46 set)")
    return {"addr": (v & 0x3FFF) << 4, "lbo": (v >> 16 & 0x3FFF) << 4, "sbo": (v >> 32 & 0x3FFF) << 4,
            "swizzle": _inv(GMMA_LAYOUT)[v >> 62 & 3], "base_offset": v >> 49 & 7}


def smem_desc_advance(desc: int, nbytes: int) -> int:
    """K-advance: add nbytes>>4 to the start-address field (CUTLASS UMMA/GMMA DescriptorIterator)."""
    _field("desc", desc, 64)
    if nbytes % 16:
        raise DescriptorError(f"advance of {nbytes} B is not a multiple of 16 (descriptors count 16-B units)")
    if not 0 <= (desc & 0x3FFF) + (nbytes >> 4) < 1 << 14:
        raise DescriptorError(f"advance of {nbytes} B carries out of the 14-bit start-address field")
    return desc + (nbytes >> 4)


def describe(v: int, what: str) -> list[tuple[str, str, str, str]]:
    """Rows (bits, field, raw value, meaning) for a descriptor: what in umma_smem, gmma_smem, umma_instr,
    umma_instr_block_scaled."""
    if what == "umma_smem":
        d = decode_umma_smem_desc(v)
        rows = [("0-13", "start address >> 4", v & 0x3FFF, f"{d['addr']} B"),
                ("16-29", "LBO >> 4", v >> 16 & 0x3FFF, f"{d['lbo']} B"),
                ("32-45", "SBO >> 4", v >> 32 & 0x3FFF, f"{d['sbo']} B"),
                ("46-48", "fixed 0b001 (version)", v >> 46 & 7, "sm_100"),
                ("49-51", "base offset", d["base_offset"], "pattern start"),
                ("52", "LBO mode", d["lbo_mode"], "relative" if not d["lbo_mode"] else "absolute"),
                ("61-63", "layout type", v >> 61 & 7, f"swizzle {d['swizzle']}")]
    elif what == "gmma_smem":
        d = decode_gmma_smem_desc(v)
        rows = [("0-13", "start address >> 4", v & 0x3FFF, f"{d['addr']} B"),
                ("16-29", "LBO >> 4", v >> 16 & 0x3FFF, f"{d['lbo']} B"),
                ("32-45", "SBO >> 4", v >> 32 & 0x3FFF, f"{d['sbo']} B"),
                ("49-51", "base offset", d["base_offset"], "pattern start"),
                ("62-63", "layout type", v >> 62 & 3, f"swizzle {d['swizzle']}")]
    elif what == "umma_instr":
        d = decode_umma_instr_desc(v)
        rows = [("4-5", "D format", v >> 4 & 3, d["c_fmt"]), ("7-9", "A format", v >> 7 & 7, d["a_fmt"]),
                ("10-12", "B format", v >> 10 & 7, d["b_fmt"]),
                ("15", "A major", v >> 15 & 1, d["a_major"]), ("16", "B major", v >> 16 & 1, d["b_major"]),
                ("17-22", "N >> 3", v >> 17 & 0x3F, f"N = {d['n']}"),
                ("24-28", "M >> 4", v >> 24 & 0x1F, f"M = {d['m']}")]
    elif what == "umma_instr_block_scaled":
        d = decode_umma_instr_desc_block_scaled(v)
        rows = [("4-5", "B scale-factor ID", d["b_sf_id"], "byte of SFB TMEM word"),
                ("7-9", "A format", v >> 7 & 7, d["a_fmt"]), ("10-12", "B format", v >> 10 & 7, d["b_fmt"]),
                ("15", "A major", v >> 15 & 1, d["a_major"]), ("16", "B major", v >> 16 & 1, d["b_major"]),
                ("17-22", "N >> 3", v >> 17 & 0x3F, f"N = {d['n']}"),
                ("23", "scale format", v >> 23 & 1, d["scale_fmt"]),
                ("27-28", "M >> 7", v >> 27 & 3, f"M = {d['m']}"),
                ("29-30", "A scale-factor ID", d["a_sf_id"], "byte of SFA TMEM word"),
                ("31", "K size", d["k_size"], "dense K64" if not d["k_size"] else "K96")]
    else:
        raise ValueError(f"what={what!r}: one of umma_smem, gmma_smem, umma_instr, umma_instr_block_scaled")
    return [(b, f, str(r), m) for b, f, r, m in rows]


# --- C++ agreement -------------------------------------------------------------------------------
_CPP_SWZ = {0: 0, 32: 32, 64: 64, 128: 128}


def _fmt(kind: str, v) -> int:
    """A format given by name or code, as the C++ encoders take it (codes pass through unchecked)."""
    return v if isinstance(v, int) else A_FORMATS[kind][str(v).lower()]


def cpp_call(name: str, kw: dict) -> str:
    """The C++ call of common/descriptors.cuh for a Python encoder's kwargs (not checked here: a case the
    Python encoder refuses yields the C++ call that must refuse it too)."""
    def get(k, d):
        return kw.get(k, d)
    if name == "umma_instr_desc":
        kind = get("kind", "f8f6f4")
        args = [kw["m"], kw["n"], _fmt(kind, kw["a_fmt"]), _fmt(kind, kw["b_fmt"]), C_FORMATS[get("c_fmt", "f32")],
                MAJORS[get("a_major", "K")], MAJORS[get("b_major", "K")], get("a_neg", 0), get("b_neg", 0),
                get("saturate", 0), get("max_shift", 0)]
    elif name == "umma_instr_desc_block_scaled":
        kind = get("kind", "mxf4nvf4")
        code = {v: k for k, v in MMA_KINDS.items()}.get(kind, kind)
        sf = get("scale_fmt", "ue4m3")
        args = [kw["m"], kw["n"], _fmt(kind, get("a_fmt", "e2m1")) if kind in A_FORMATS else get("a_fmt", 1),
                _fmt(kind, get("b_fmt", "e2m1")) if kind in A_FORMATS else get("b_fmt", 1),
                sf if isinstance(sf, int) else SCALE_FORMATS[sf], get("a_sf_id", 0), get("b_sf_id", 0),
                MAJORS[get("a_major", "K")], MAJORS[get("b_major", "K")], get("a_neg", 0), get("b_neg", 0),
                get("k_size", 0), code]
    elif name in ("umma_smem_desc", "gmma_smem_desc"):
        if "advance" in kw:
            raise DescriptorError("pass advance as ('smem_desc_advance', {...})")
        args = [kw["addr"], kw["lbo"], kw["sbo"], _CPP_SWZ[get("swizzle", 128)], get("base_offset", 0)]
        if name == "umma_smem_desc":
            args.append(get("lbo_mode", 0))
    elif name == "smem_desc_advance":
        return f"smem_desc_advance({kw['desc']}ull, {kw['nbytes']})"
    else:
        raise ValueError(f"unknown encoder {name!r}")
    return f"{name}({', '.join(map(str, args))})"


_PY = {"umma_instr_desc": "umma_instr_desc", "umma_instr_desc_block_scaled": "umma_instr_desc_block_scaled",
       "umma_smem_desc": "umma_smem_desc", "gmma_smem_desc": "gmma_smem_desc", "smem_desc_advance": None}


def cuda_static_asserts(cases: list[tuple[str, dict]]) -> str:
    """A translation unit of static_asserts: C++ encoder(args) == Python encoder(args), for each case.

    cases: (encoder name, kwargs) with encoder in umma_instr_desc, umma_instr_desc_block_scaled,
    umma_smem_desc, gmma_smem_desc, smem_desc_advance; kwargs as for the Python function (format names
    resolved here).
    """
    lines = ['#include "common/descriptors.cuh"']
    for i, (name, kw) in enumerate(cases):
        if name not in _PY:
            raise ValueError(f"unknown encoder {name!r}")
        expr = cpp_call(name, kw)
        if name == "smem_desc_advance":
            val = smem_desc_advance(kw["desc"], kw["nbytes"])
        else:
            val = globals()[_PY[name]](**kw)
        cmp = f"{val}u" if name.startswith("umma_instr") else f"{val}ull"
        lines.append(f'static_assert({expr} == {cmp}, "case {i}: {name} C++ != Python ({val:#x})");')
    lines.append('extern "C" __global__ void pelib_descriptor_agreement() {}')
    return "\n".join(lines) + "\n"


def cuda_refusal(name: str, kw: dict) -> str:
    """A translation unit that compiles only if the C++ encoder accepts kw as a constant expression: for a
    case the Python encoder refuses, NVRTC must fail on it (common/descriptors.cuh's range checks)."""
    return ('#include "common/descriptors.cuh"\n'
            f'static_assert(({cpp_call(name, kw)}, true), "the C++ encoder accepted it");\n'
            'extern "C" __global__ void pelib_descriptor_refusal() {}\n')
