"""The simulator's tensor map: a pelib.tma spec packed into the 128 bytes of a CUtensorMap.

On the GPU path `pelib.tma.encode` asks the driver for an opaque CUtensorMap. The CPU simulator runs the
same kernel source with a simulated TMA that cannot read the driver's bytes, so the map it is given holds
the spec itself: `PeSimTensorMap` in src/kernels/sim/model/tensormap.h (that header documents the byte
layout; `LAYOUT` below is its Python twin and tests/test_sim_models.py checks that both produce the same
128 bytes). The spec is validated first with pelib.tma's driver rules.
"""
from __future__ import annotations

import struct

from .. import tma

MAGIC = 0x4D534550          # "PESM", src/kernels/sim/model/tensormap.h PE_SIM_TMAP_MAGIC
VERSION = 1
SIZE = 128
# magic, version, rank, elem_bytes, dtype, address, dims[5], strides[4], box[5], estrides[5], swizzle,
# interleave, oob_fill, l2_promotion (offsets 0, 4, 5, 6, 7, 8, 16, 56, 88, 98, 103, 104, 105, 106)
LAYOUT = struct.Struct("<IBBBBQ5Q4Q5H5BBBBB")
DTYPE_CODES = {name: i for i, name in enumerate(tma.DTYPES)}   # the dtype byte: index in pelib.tma.DTYPES
OOB_CODES = {"zero": 0, "nan": 1}
L2_CODES = {0: 0, 64: 1, 128: 2, 256: 3}


def encode(spec: tma.TensorMapSpec) -> bytes:
    """The 128 bytes a simulated kernel receives as its CUtensorMap, from a valid spec.

    Interleaved maps and the NaN OOB fill are refused here (the simulated TMA does not model them).
    """
    spec.validate()
    if spec.interleave:
        raise tma.TensorMapError(f"interleave {spec.interleave} is not modelled by the simulator: use 0 "
                                 f"({spec.describe()})")
    if spec.oob_fill != "zero":
        raise tma.TensorMapError(f"oob_fill {spec.oob_fill!r} is not modelled by the simulator: use 'zero'")
    r = spec.rank
    pad = lambda xs, n: tuple(xs) + (0,) * (n - len(xs))  # noqa: E731
    body = LAYOUT.pack(MAGIC, VERSION, r, spec.elem_bytes, DTYPE_CODES[spec.dtype], spec.address,
                       *pad(spec.dims, 5), *pad(spec.strides, 4), *pad(spec.box, 5),
                       *pad(spec.element_strides, 5), spec.swizzle, spec.interleave,
                       OOB_CODES[spec.oob_fill], L2_CODES[spec.l2_promotion])
    return body + bytes(SIZE - len(body))


def tensor_map(spec: tma.TensorMapSpec, owner=None) -> tma.TensorMap:
    """A pelib.tma.TensorMap whose `cumap` is the simulator's 128 bytes (what pelib.sim passes by value)."""
    return tma.TensorMap(spec, encode(spec), owner)


def decode(raw: bytes) -> dict:
    """The fields of 128 simulator tensor-map bytes (for tests and error messages)."""
    if len(raw) != SIZE:
        raise tma.TensorMapError(f"a simulator tensor map is {SIZE} bytes, got {len(raw)}")
    v = LAYOUT.unpack_from(raw)
    if v[0] != MAGIC:
        raise tma.TensorMapError("not a simulator tensor map (magic word missing)")
    r = v[2]
    dims, strides, box, es = v[6:11], v[11:15], v[15:20], v[20:25]
    names = list(tma.DTYPES)
    return {"version": v[1], "rank": r, "elem_bytes": v[3], "dtype": names[v[4]] if v[4] < len(names) else v[4],
            "address": v[5], "dims": dims[:r], "strides": strides[:r - 1], "box": box[:r],
            "element_strides": es[:r], "swizzle": v[25], "interleave": v[26],
            "oob_fill": {0: "zero", 1: "nan"}[v[27]], "l2_promotion": {c: b for b, c in L2_CODES.items()}[v[28]]}
