"""TMA tensor maps: a plain spec checked against the driver's rules, encoded with cuTensorMapEncodeTiled.

Every rule below is from the CUDA Driver API, "Tensor Map Object Management",
cuTensorMapEncodeTiled (docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html;
the same text is the docstring of cuda.bindings.driver.cuTensorMapEncodeTiled). They are
checked here, before the driver is called, so a bad map fails on a CPU-only machine too, with
the rule and the fix named, instead of a bare CUDA_ERROR_INVALID_VALUE.

Order of dimensions: the spec stores dims, strides and box innermost first, the order of the
driver's globalDim/boxDim arrays and of the coordinates of cp.async.bulk.tensor (c0 is the
contiguous dimension). The constructors take shapes in torch order (outermost first) and
reverse them; `shape` and `box_shape` give them back in torch order.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from . import device

# name -> (CUtensorMapDataType member, bytes per element, floating point?); the name says all three: the
# member is CU_TENSOR_MAP_DATA_TYPE_<NAME>, the number in it is the element's bits, "float" the kind. The
# order is the driver enum's (pelib.sim.tensormap's dtype byte is the index here).
DTYPES = {name: (f"CU_TENSOR_MAP_DATA_TYPE_{name.upper()}", int(re.search(r"\d+", name)[0]) // 8, "float" in name)
          for name in ("uint8", "uint16", "uint32", "int32", "uint64", "int64", "float16", "float32", "float64",
                       "bfloat16", "float32_ftz", "tfloat32", "tfloat32_ftz")}

# torch dtype name -> TMA dtype. TMA has no FP8 or FP4 type: those bytes travel as UINT8
# (cutlass include/cute/arch/copy_sm90_desc.hpp, to_CUtensorMapDataType).
_TORCH_TO_TMA = {
    "uint8": "uint8", "int8": "uint8", "bool": "uint8",
    "float8_e4m3fn": "uint8", "float8_e5m2": "uint8", "float8_e4m3fnuz": "uint8",
    "float8_e5m2fnuz": "uint8", "float8_e8m0fnu": "uint8", "float4_e2m1fn_x2": "uint8",
    "int16": "uint16", "uint16": "uint16", "float16": "float16", "bfloat16": "bfloat16",
    "int32": "int32", "uint32": "uint32", "float32": "float32",
    "int64": "int64", "uint64": "uint64", "float64": "float64",
}

SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B",
            64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}
INTERLEAVES = {0: "CU_TENSOR_MAP_INTERLEAVE_NONE", 16: "CU_TENSOR_MAP_INTERLEAVE_16B",
               32: "CU_TENSOR_MAP_INTERLEAVE_32B"}
L2_PROMOTIONS = {0: "CU_TENSOR_MAP_L2_PROMOTION_NONE", 64: "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                 128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", 256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}
OOB_FILLS = {"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
             "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}

MAX_RANK = 5
MAX_DIM = 2**32        # globalDim[i] <= 2^32
MAX_STRIDE = 2**40     # globalStrides[i] < 2^40
MAX_BOX = 256          # 0 < boxDim[i] <= 256
MAX_ELEMENT_STRIDE = 8  # 0 < elementStrides[i] <= 8


class TensorMapError(ValueError):
    """A tensor map breaks a cuTensorMapEncodeTiled rule; the message names each rule and its fix."""


class DriverUnavailable(RuntimeError):
    """Encoding a tensor map needs the CUDA driver, and there is none here."""


@dataclass(frozen=True)
class TensorMapSpec:
    """Everything cuTensorMapEncodeTiled is given, innermost dimension first; no driver needed."""

    dtype: str                       # a key of DTYPES (FP8/FP4 bytes are "uint8")
    dims: tuple[int, ...]            # globalDim, elements, innermost first
    strides: tuple[int, ...]         # globalStrides, bytes, of dims[1:] (rank - 1 entries)
    box: tuple[int, ...]             # boxDim, elements, innermost first
    element_strides: tuple[int, ...] = ()   # () means all ones
    swizzle: int = 0                 # 0, 32, 64 or 128 (bytes of the swizzle span)
    interleave: int = 0              # 0, 16 or 32
    l2_promotion: int = 0            # 0, 64, 128 or 256
    oob_fill: str = "zero"           # "zero" or "nan" (NAN_REQUEST_ZERO_FMA, float types only)
    address: int = 0                 # globalAddress (0 for a spec not bound to memory yet)
    source_dtype: str = ""           # the tensor's own dtype (e.g. float8_e4m3fn), for readers

    def __post_init__(self):
        for name in ("dims", "strides", "box", "element_strides"):
            object.__setattr__(self, name, tuple(int(x) for x in getattr(self, name)))
        if not self.element_strides:
            object.__setattr__(self, "element_strides", (1,) * len(self.dims))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype][1] if self.dtype in DTYPES else 0

    @property
    def shape(self) -> tuple[int, ...]:
        """Global shape in torch order (outermost first)."""
        return self.dims[::-1]

    @property
    def box_shape(self) -> tuple[int, ...]:
        """Box in torch order (outermost first)."""
        return self.box[::-1]

    @property
    def inner_box_bytes(self) -> int:
        """boxDim[0] * element size: the row the swizzle rules constrain."""
        return self.box[0] * self.elem_bytes

    @property
    def box_elements(self) -> tuple[int, ...]:
        """Elements TMA moves per dimension: ceil(boxDim[i] / elementStrides[i])."""
        return tuple(math.ceil(b / e) for b, e in zip(self.box, self.element_strides))

    @property
    def box_bytes(self) -> int:
        """Bytes one load delivers to shared memory (the expect_tx count for one box)."""
        return math.prod(self.box_elements) * self.elem_bytes

    def problems(self) -> list[str]:
        """Every rule this spec breaks, each with its fix (empty when it is valid)."""
        out: list[str] = []
        if self.dtype not in DTYPES:
            return [f"dtype {self.dtype!r} has no TMA type: use one of {', '.join(DTYPES)} "
                    "(FP8/FP4 bytes travel as 'uint8')"]
        r = self.rank
        if not 1 <= r <= MAX_RANK:
            out.append(f"rank {r} is outside 1..{MAX_RANK}: reshape the tensor")
            return out
        if self.interleave not in INTERLEAVES:
            out.append(f"interleave {self.interleave} is not one of {sorted(INTERLEAVES)}")
        if self.swizzle not in SWIZZLES:
            out.append(f"swizzle {self.swizzle} is not one of {sorted(SWIZZLES)} (bytes)")
        if self.l2_promotion not in L2_PROMOTIONS:
            out.append(f"l2_promotion {self.l2_promotion} is not one of {sorted(L2_PROMOTIONS)}")
        if self.oob_fill not in OOB_FILLS:
            out.append(f"oob_fill {self.oob_fill!r} is not one of {sorted(OOB_FILLS)}")
        elif self.oob_fill == "nan" and not DTYPES[self.dtype][2]:
            out.append(f"oob_fill 'nan' needs a floating-point type, not {self.dtype}: use 'zero'")
        if self.interleave and r < 3:
            out.append(f"an interleaved map needs rank >= 3, this one has {r}")
        if self.interleave == 32 and self.swizzle != 32:
            out.append("interleave 32B requires swizzle 32B")
        align = 32 if self.interleave == 32 else 16
        if self.address % align:
            out.append(f"global address {self.address:#x} is not {align}-byte aligned: "
                       "allocate or slice so the tensor starts on a 16-byte boundary")
        if len(self.box) != r or len(self.element_strides) != r:
            out.append(f"box {self.box} / element_strides {self.element_strides} must have "
                       f"rank {r} entries like dims {self.dims}")
            return out
        if len(self.strides) != r - 1:
            out.append(f"strides must list the {r - 1} outer dimensions in bytes, got {self.strides}")
            return out
        for i, d in enumerate(self.dims):
            if not 0 < d <= MAX_DIM:
                out.append(f"dims[{i}] = {d} must be in 1..2^32")
        stride_mult = 32 if self.interleave == 32 else 16
        for i, s in enumerate(self.strides, start=1):
            if s % stride_mult:
                out.append(f"stride of dims[{i}] is {s} B, not a multiple of {stride_mult}: pad the "
                           f"row to a multiple of {stride_mult // self.elem_bytes} elements")
            if not 0 < s < MAX_STRIDE:
                out.append(f"stride of dims[{i}] is {s} B, must be in 1..2^40-1")
        for i, b in enumerate(self.box):
            if not 0 < b <= MAX_BOX:
                out.append(f"box[{i}] = {b} must be in 1..{MAX_BOX}: split the tile into several loads")
        for i, e in enumerate(self.element_strides):
            if not 0 < e <= MAX_ELEMENT_STRIDE:
                out.append(f"element_strides[{i}] = {e} must be in 1..{MAX_ELEMENT_STRIDE}")
        inner = self.inner_box_bytes
        if self.interleave == 0 and inner % 16:
            out.append(f"inner box is {inner} B (box[0]={self.box[0]} x {self.elem_bytes} B), not a "
                       f"multiple of 16: make box[0] a multiple of {16 // math.gcd(16, self.elem_bytes)}")
        if self.interleave == 0 and self.swizzle and inner > self.swizzle:
            out.append(f"inner box is {inner} B but swizzle {self.swizzle}B allows at most "
                       f"{self.swizzle} B: use box[0] <= {self.swizzle // self.elem_bytes} and load "
                       "the row in several boxes, or a wider swizzle")
        return out

    def validate(self) -> "TensorMapSpec":
        """Raise TensorMapError listing every broken rule; return self when valid."""
        probs = self.problems()
        if probs:
            raise TensorMapError("tensor map is invalid (cuTensorMapEncodeTiled rules):\n  - "
                                 + "\n  - ".join(probs) + f"\n  spec: {self.describe()}")
        return self

    def describe(self) -> str:
        es = "" if all(e == 1 for e in self.element_strides) else f" estrides={self.element_strides}"
        return (f"{self.source_dtype or self.dtype}->{self.dtype} shape={self.shape} "
                f"box={self.box_shape} (torch order) swizzle={self.swizzle}B "
                f"interleave={self.interleave} l2={self.l2_promotion} oob={self.oob_fill}{es} "
                f"addr={self.address:#x}")

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def tma_dtype(dtype) -> str:
    """The TMA dtype name for a torch dtype, numpy dtype or name (FP8/FP4 -> 'uint8')."""
    name = str(dtype).replace("torch.", "")
    if name in DTYPES:
        return name
    if name in _TORCH_TO_TMA:
        return _TORCH_TO_TMA[name]
    raise TensorMapError(f"dtype {dtype} has no TMA type: view the tensor as uint8 "
                         "(t.view(torch.uint8)) and describe it in bytes")


def _ints(what: str, v) -> tuple:
    """A tuple of integers (numpy and torch integers too); a float or string is refused, never truncated."""
    try:
        items = tuple(v)
    except TypeError:
        raise TensorMapError(f"{what}={v!r} must be a sequence of integers") from None
    out = []
    for i, x in enumerate(items):
        if isinstance(x, bool) or not hasattr(x, "__index__"):
            raise TensorMapError(f"{what}[{i}]={x!r} is a {type(x).__name__}, not an integer: "
                                 "TMA dimensions, boxes and strides count whole elements")
        out.append(int(x))
    return tuple(out)


def make_spec(dtype, shape, box, *, strides=None, address: int = 0, swizzle: int = 0,
              interleave: int = 0, l2_promotion: int = 0, oob_fill: str = "zero",
              element_strides=None) -> TensorMapSpec:
    """A spec from a shape and box in torch order; `strides` in elements, torch order (default contiguous)."""
    src = str(dtype).replace("torch.", "")
    tdt = tma_dtype(dtype)
    eb = DTYPES[tdt][1]
    shape = _ints("shape", shape)
    box = _ints("box", box)
    if len(box) != len(shape):
        raise TensorMapError(f"box {box} must have one entry per dimension of shape {shape}")
    if strides is None:
        strides, acc = [], 1
        for d in reversed(shape):
            strides.append(acc)
            acc *= d
        strides = tuple(reversed(strides))
    strides = _ints("strides", strides)
    if len(strides) != len(shape):
        raise TensorMapError(f"strides {strides} must have one entry per dimension of shape {shape}")
    if shape and strides[-1] != 1:
        raise TensorMapError(f"the innermost dimension must be contiguous (stride 1, got {strides[-1]}): "
                             "TMA has no stride for dimension 0; pass t.contiguous() or permute")
    es = tuple(int(e) for e in element_strides[::-1]) if element_strides else ()
    return TensorMapSpec(dtype=tdt, dims=shape[::-1], strides=tuple(s * eb for s in strides[:-1][::-1]),
                         box=box[::-1], element_strides=es, swizzle=swizzle, interleave=interleave,
                         l2_promotion=l2_promotion, oob_fill=oob_fill, address=int(address),
                         source_dtype=src if src != tdt else "")


def check_owner(spec: TensorMapSpec, owner, param: str = "") -> None:
    """Refuse a bound map that reaches past the tensor it is made over: a TMA load or store is checked
    against its map alone (on the GPU and in the simulator), so a map sized from the problem over a shorter
    tensor (an output view cut short) writes memory that is not the tensor's."""
    if owner is None or not spec.address or not hasattr(owner, "data_ptr"):
        return
    elem = spec.elem_bytes or 1
    last = spec.address + (spec.dims[0] - 1) * elem + sum((d - 1) * st for d, st in zip(spec.dims[1:], spec.strides)) + elem
    span = (sum((n - 1) * st for n, st in zip(owner.shape, owner.stride())) + 1) * owner.element_size() if owner.numel() else 0
    lo, hi = int(owner.data_ptr()), int(owner.data_ptr()) + span
    if spec.address < lo or last > hi:
        name = f"tmap_{param}" if param else "a tensor map"
        raise TensorMapError(f"{name} spans bytes [{spec.address - lo:+,}, {last - lo:+,}) of its tensor, which holds "
                             f"{span:,} B ({tuple(owner.shape)}, {owner.dtype}): its TMA boxes would reach memory "
                             "that is not the tensor's. Give the tensor the problem's full shape (Problem.validate "
                             "says which) or size the map from the tensor")


def spec_from_tensor(t, box, **kw) -> TensorMapSpec:
    """A spec for torch tensor `t` with `box` in t.shape order (outermost first)."""
    return make_spec(t.dtype, tuple(t.shape), box, strides=tuple(t.stride()), address=t.data_ptr(), **kw)


@dataclass
class TensorMap:
    """An encoded map: the spec, the driver's 128-byte CUtensorMap, and the memory it points at."""

    spec: TensorMapSpec
    cumap: object                     # cuda.bindings.driver.CUtensorMap, passed to kernels by value
    owner: object = field(default=None, repr=False)  # keeps the tensor alive while the map is used


def _driver():
    try:
        from cuda.bindings import driver as drv
    except Exception as e:  # pragma: no cover - cuda-bindings is a dependency
        raise DriverUnavailable(f"cuda-bindings is not importable ({e})") from e
    info = device.current()
    if not info.present:
        raise DriverUnavailable(f"encoding a tensor map needs the CUDA driver: {info.reason}. "
                                "The spec (TensorMapSpec) is still available for inspection")
    return drv


def encode(spec: TensorMapSpec, owner=None) -> TensorMap:
    """Check every rule, then call cuTensorMapEncodeTiled; needs a CUDA driver and a context."""
    spec.validate()
    drv = _driver()
    device.ensure_context()
    E = drv
    # Older cuda-bindings (13.3) take only the cuuintXX_t wrappers; newer ones take both.
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    err, cumap = drv.cuTensorMapEncodeTiled(
        getattr(E.CUtensorMapDataType, DTYPES[spec.dtype][0]), spec.rank, spec.address,
        [u64(x) for x in spec.dims], [u64(x) for x in spec.strides], [u32(x) for x in spec.box],
        [u32(x) for x in spec.element_strides],
        getattr(E.CUtensorMapInterleave, INTERLEAVES[spec.interleave]),
        getattr(E.CUtensorMapSwizzle, SWIZZLES[spec.swizzle]),
        getattr(E.CUtensorMapL2promotion, L2_PROMOTIONS[spec.l2_promotion]),
        getattr(E.CUtensorMapFloatOOBfill, OOB_FILLS[spec.oob_fill]))
    if int(err) != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled returned {err} for a spec that passed pelib's "
                             f"checks (a rule pelib does not know?): {spec.describe()}")
    return TensorMap(spec, cumap, owner)


def tensor_map(t, box, **kw) -> TensorMap:
    """Encode a map over CUDA tensor `t` (box in t.shape order); keeps `t` alive with the map."""
    if not getattr(t, "is_cuda", False):
        raise TensorMapError(f"tensor is on {t.device}, a tensor map needs a CUDA tensor: t.cuda()")
    return encode(spec_from_tensor(t, box, **kw), owner=t)


def swizzle_byte_offset(offset: int, swizzle: int) -> int:
    """Where logical byte `offset` of a swizzled box lands in shared memory.

    For a box whose inner row is exactly the swizzle span (e.g. 128 B with SW128), written at a
    1024-B aligned shared address (the swizzle reads the address bits, not the box offset).

    TMA's 32/64/128-B swizzles XOR the 16-byte chunk index (address bits 4..) with the row index
    within an 8 x 128-B pattern (bits 7..9): CuTe Swizzle<1,4,3>, <2,4,3>, <3,4,3>
    (cutlass include/cute/atom/mma_traits_sm90_gmma.hpp Layout_K_SW{32,64,128}_Atom,
    include/cute/atom/copy_traits_sm90_tma_swizzle.hpp: M = 4 is the 16-B swizzle base).
    """
    bits = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle]
    mask = (1 << bits) - 1
    return offset ^ (((offset >> 7) & mask) << 4)
