"""Every stage file, of every family: it compiles and exports the one vocabulary (common/export.cuh),
with values that agree with the rest of what the cubin and the source say (evidence: compiled)."""
import re
import struct

import pytest

from pelib import build as B
from pelib.paths import KERNELS

VOCABULARY = ("smem_bytes", "smem_limit", "num_threads", "cluster_x", "cluster_in_kernel", "grid_kind",
              "tile_m", "tile_n", "block_k", "pipeline_stages", "epi_warps", "barrier_bytes")
TMAP_FIELDS = ("box_rows", "box_cols", "swizzle", "elem_bytes")
SMEM_LIMIT = 227 * 1024   # CUDA C++ Programming Guide, technical specifications: 227 KB per block on sm_90 / sm_100

STAGE_FILES = sorted(KERNELS.glob("*/[0-9][0-9]*_*.cu")) + sorted(KERNELS.glob("fp8/variants/[0-9][0-9]*_*.cu"))
IDS = [str(p.relative_to(KERNELS)) for p in STAGE_FILES]


def arch_of(path) -> str:
    return "sm_90a" if path.relative_to(KERNELS).parts[0] == "sm90" else "sm_100a"


@pytest.fixture(scope="module", params=STAGE_FILES, ids=IDS)
def stage(request):
    path = request.param
    return path, B.build(path, arch_of(path))


# ---- what the cubin and the source say besides the exports ----------------------------------------

def _sections(cubin: bytes) -> dict[str, bytes]:
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = secs[shstrndx]
    out = {}
    for s in secs:
        end = cubin.index(b"\0", names[4] + s[0])
        out[cubin[names[4] + s[0]:end].decode()] = cubin[s[4]:s[4] + s[5]]
    return out


# .nv.info.<kernel> attributes (format byte, attribute byte, u16; format 4 carries u16 bytes of data).
# Codes as nvdisasm/cuobjdump name them: EIATTR_MAX_THREADS 0x05 (the __launch_bounds__ block),
# EIATTR_CTA_PER_CLUSTER 0x3d (a __cluster_dims__ shape).
EIATTR_MAX_THREADS, EIATTR_CTA_PER_CLUSTER = 0x05, 0x3D


def nv_info(cubin: bytes, kernel: str) -> dict[int, object]:
    data = _sections(cubin)[".nv.info." + kernel]
    attrs, i = {}, 0
    while i + 4 <= len(data):
        fmt, attr, x = struct.unpack_from("<BBH", data, i)
        if fmt == 4:
            attrs[attr] = struct.unpack_from(f"<{x // 4}I", data, i + 4)
            i += 4 + x
        else:
            attrs[attr] = x
            i += 4
    return attrs


def signature(path) -> list[tuple[str, str]]:
    """(type, name) of the __global__ kernel's parameters, read from the source."""
    src = re.sub(r"//[^\n]*", "", path.read_text())
    g = src.find("__global__")
    assert g >= 0, f"{path.name}: no __global__ kernel"
    for m in re.finditer(r"(\w+)\s*\(", src[g:]):       # skip __launch_bounds__(...), __cluster_dims__(...)
        if m.group(1) not in ("__launch_bounds__", "__cluster_dims__"):
            break
    start = g + m.end()
    depth, i = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(src[i], 0)
        i += 1
    params = []
    for p in src[start:i - 1].split(","):
        words = re.findall(r"[A-Za-z_]\w*", p)
        params.append((" ".join(w for w in words[:-1] if w not in ("const", "__grid_constant__", "__restrict__")),
                       words[-1]))
    return params


# ---- the tests ------------------------------------------------------------------------------------

def test_every_family_has_stages():
    fams = {p.relative_to(KERNELS).parts[0] for p in STAGE_FILES}
    assert fams == {"nvfp4", "fp8", "sm90"} and any("variants" in str(p) for p in STAGE_FILES)


def test_exports_the_whole_vocabulary(stage):
    path, b = stage
    missing = [k for k in VOCABULARY if k not in b.exports]
    assert not missing, f"{path.name} does not export {missing} (common/export.cuh lists the vocabulary)"


def test_tensor_map_parameters_have_boxes(stage):
    path, b = stage
    params = signature(path)
    maps = [n for t, n in params if t == "CUtensorMap"]
    assert maps and all(n.startswith("tmap_") for n in maps), params
    assert not [t for t, _ in params if "TensorMap" in t and t != "CUtensorMap"], "tensor maps are CUtensorMap"
    declared = {k.rsplit("_box_rows", 1)[0] for k in b.exports if k.startswith("tmap_") and k.endswith("_box_rows")}
    assert declared == set(maps), f"{path.name}: maps {maps}, exported boxes for {sorted(declared)}"
    for m in maps:
        ex = {f: b.exports[f"{m}_{f}"] for f in TMAP_FIELDS}
        inner = ex["box_cols"] * ex["elem_bytes"]
        assert ex["swizzle"] in (0, 32, 64, 128), (m, ex)
        assert 1 <= ex["box_cols"] <= 256 and ex["box_rows"] >= 1, (m, ex)   # cuTensorMapEncodeTiled: boxDim <= 256
        assert inner % 16 == 0, f"{m}: the inner box must be a multiple of 16 bytes ({inner})"
        if ex["swizzle"]:
            assert inner <= ex["swizzle"], f"{m}: inner box {inner} B exceeds the {ex['swizzle']}-B swizzle span"


def test_values_agree_with_the_cubin(stage):
    path, b = stage
    ex, info = b.exports, nv_info(b.cubin, b.kernel)
    assert ex["smem_limit"] == SMEM_LIMIT
    assert ex["smem_bytes"] + b.facts.smem_static <= ex["smem_limit"], \
        f"{path.name}: {ex['smem_bytes']} B dynamic + {b.facts.smem_static} B static exceed the limit"
    assert (ex["num_threads"], 1, 1) == info[EIATTR_MAX_THREADS], "num_threads must be the __launch_bounds__ block"
    cluster = info.get(EIATTR_CTA_PER_CLUSTER)
    assert ex["cluster_in_kernel"] == (cluster is not None)
    if cluster is not None:
        assert cluster == (ex["cluster_x"], 1, 1)
    assert ex["cluster_x"] >= 1 and ex["grid_kind"] in (0, 1, 2)
    assert 1 <= ex["epi_warps"] and 32 * ex["epi_warps"] <= ex["num_threads"]
    assert ex["pipeline_stages"] >= 1 and ex["barrier_bytes"] >= 8


def test_values_agree_with_each_other(stage):
    path, b = stage
    ex = b.exports
    # A streams through the ring in every family: its box is one tile's rows by one stage's K.
    assert ex["tmap_a_box_rows"] == ex["tile_m"]
    operand_bits = 4 if path.relative_to(KERNELS).parts[0] == "nvfp4" else 8     # E2M1 or E4M3
    assert ex["tmap_a_box_cols"] * ex["tmap_a_elem_bytes"] * 8 == ex["block_k"] * operand_bits
    a_stage = ex["tmap_a_box_rows"] * ex["tmap_a_box_cols"] * ex["tmap_a_elem_bytes"]
    assert ex["smem_bytes"] >= ex["pipeline_stages"] * a_stage + ex["barrier_bytes"], \
        "the dynamic shared memory must hold the A ring and the barriers"
