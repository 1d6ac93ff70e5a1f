"""UMMA/GMMA descriptor encoders: hand-derived values, round trips, range errors, C++ == Python."""
import random

import pytest

from pelib.isa import descriptors as D
from pelib.isa.descriptors import DescriptorError


# --- values derived by hand from the spec tables (PTX ISA Tables 40, 42, 43; CUTLASS bitfields) ----
def test_fp8_256x256_cta_group2_instr_desc_by_hand():
    # c_format F32=1 at [4,6) -> 0x10; E4M3 = 0 at [7,10) and [10,13); K-major -> bits 15,16 = 0;
    # N>>3 = 32 at [17,23) -> 32<<17 = 0x0040_0000; M>>4 = 16 at [24,29) -> 0x1000_0000.
    assert D.umma_instr_desc(256, 256, "e4m3", "e4m3", "f32", "K", "K") == 0x10400010


def test_fp8_128x128_cta_group1_instr_desc_by_hand():
    # N>>3 = 16 -> 0x0020_0000; M>>4 = 8 -> 0x0800_0000; F32 -> 0x10.
    assert D.umma_instr_desc(128, 128, "e4m3", "e4m3") == 0x08200010


def test_bf16_f16_kind():
    # BF16 = 1 in kind::f16 at [7,10) and [10,13): 0x80 | 0x400.
    assert D.umma_instr_desc(128, 256, "bf16", "bf16", "f32", kind="f16") == 0x10 | 0x80 | 0x400 | 32 << 17 | 8 << 24


def test_nvfp4_128x128_instr_desc_by_hand():
    # kind::mxf4nvf4: packed E2M1 = 1 -> a 0x80, b 0x400; UE4M3 scale = 0 at bit 23; no D-format field.
    # N>>3 = 16 -> 0x0020_0000, M>>4 = 8 -> 0x0800_0000.
    assert D.umma_instr_desc_block_scaled(128, 128, "e2m1", "e2m1", "ue4m3", 0, 0) == 0x08200480
    # a_sf_id at [29,31), b_sf_id at [4,6); IDs 0 or 2 with UE8M0 (block32), only 0 with UE4M3 (block16).
    assert D.umma_instr_desc_block_scaled(128, 128, scale_fmt="ue8m0", a_sf_id=2, b_sf_id=2) == \
        0x08200480 | 1 << 23 | 2 << 29 | 2 << 4
    # mxf8f6f4 (scale_vec::1X) takes all four IDs.
    assert D.umma_instr_desc_block_scaled(128, 128, "e4m3", "e4m3", "ue8m0", 3, 1, kind="mxf8f6f4") >> 29 & 3 == 3


def test_e2m1_code_depends_on_kind():
    # Trap: packed E2M1 (mxf4nvf4) is 1, one-per-byte E2M1 (f8f6f4) is 5.
    assert D.decode_umma_instr_desc(D.umma_instr_desc(128, 128, "e2m1", "e2m1"))["a_fmt"] == "e2m1"
    assert D.umma_instr_desc(128, 128, "e2m1", "e2m1") >> 7 & 7 == 5
    assert D.umma_instr_desc_block_scaled(128, 128) >> 7 & 7 == 1


def test_k_major_sw128_umma_smem_desc_by_hand():
    # addr 1024 -> 0x40; LBO 16 -> 1<<16; SBO 1024 (8 rows x 128 B) -> 64<<32; bit 46 (version);
    # SWIZZLE_128B = 2 at [61,64) -> 0x4000_0000_0000_0000.
    assert D.umma_smem_desc(1024, 16, 1024, 128) == 0x4000_4040_0001_0040


def test_k_major_sw128_gmma_smem_desc_by_hand():
    # Same fields, no version bit, B128 = 1 at [62,64) -> 0x4000_0000_0000_0000.
    assert D.gmma_smem_desc(1024, 16, 1024, 128) == 0x4000_0040_0001_0040


def test_gau_nernst_form():
    # addr | (1024>>4)<<32 | 1<<46 | 2<<61 (gau-nernst.github.io, content/posts/20251221-tcgen05/index.md).
    assert D.umma_smem_desc(0x2000, 0, 1024, 128) == 0x2000 >> 4 | 64 << 32 | 1 << 46 | 2 << 61


def test_swizzle_codes_differ_between_archs():
    for sw, u, g in ((0, 0, 0), (32, 6, 3), (64, 4, 2), (128, 2, 1)):
        assert D.umma_smem_desc(0, 16, 1024, sw) >> 61 == u
        assert D.gmma_smem_desc(0, 16, 1024, sw) >> 62 == g


def test_k_advance_adds_16_byte_units_to_low_word():
    d = D.umma_smem_desc(1024, 16, 1024, 128)
    assert D.smem_desc_advance(d, 32) == d + 2
    assert D.decode_umma_smem_desc(D.smem_desc_advance(d, 96))["addr"] == 1024 + 96
    with pytest.raises(DescriptorError, match="multiple of 16"):
        D.smem_desc_advance(d, 8)
    with pytest.raises(DescriptorError, match="carries out"):
        D.smem_desc_advance(D.umma_smem_desc((1 << 18) - 16, 16, 1024, 128), 32)


# --- round trips ----------------------------------------------------------------------------------
def test_instr_desc_round_trip_random():
    rng = random.Random(0)
    for _ in range(300):
        kind = rng.choice(["f16", "f8f6f4", "i8"])
        fmts = list(D.A_FORMATS[kind])
        kw = dict(m=rng.choice([64, 128, 256]), n=8 * rng.randint(1, 32), a_fmt=rng.choice(fmts),
                  b_fmt=rng.choice(fmts), c_fmt="s32" if kind == "i8" else rng.choice(["f16", "f32"]),
                  kind=kind, a_neg=rng.randint(0, 1), b_neg=rng.randint(0, 1), max_shift=rng.randint(0, 3))
        if kind != "f8f6f4" or kw["a_fmt"] in ("e4m3", "e5m2"):
            kw["a_major"] = rng.choice("K MN".split())
        v = D.umma_instr_desc(**kw)
        back = D.decode_umma_instr_desc(v, kind)
        assert D.umma_instr_desc(**back) == v
        assert {k: back[k] for k in kw} == kw


def test_block_scaled_round_trip_random():
    rng = random.Random(1)
    for _ in range(200):
        sf = rng.choice(["ue4m3", "ue8m0"])
        ids = [0] if sf == "ue4m3" else [0, 2]
        kw = dict(m=rng.choice([128, 256]), n=8 * rng.randint(1, 32), a_sf_id=rng.choice(ids),
                  b_sf_id=rng.choice(ids), a_neg=rng.randint(0, 1), b_neg=rng.randint(0, 1),
                  scale_fmt=sf, kind="mxf4nvf4")
        v = D.umma_instr_desc_block_scaled(**kw)
        back = D.decode_umma_instr_desc_block_scaled(v)
        assert D.umma_instr_desc_block_scaled(**back) == v
        assert {k: back[k] for k in kw} == kw


def test_smem_desc_round_trip_random():
    rng = random.Random(2)
    for _ in range(300):
        kw = dict(addr=16 * rng.randrange(1 << 14), lbo=16 * rng.randrange(1 << 14),
                  sbo=16 * rng.randrange(1 << 14), swizzle=rng.choice(D.SWIZZLES), base_offset=rng.randrange(8))
        g = D.gmma_smem_desc(**kw)
        assert D.decode_gmma_smem_desc(g) == kw
        u = D.umma_smem_desc(**kw, lbo_mode=rng.randrange(2))
        assert D.umma_smem_desc(**D.decode_umma_smem_desc(u)) == u


# --- range errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, msg", [
    (dict(m=100, n=128), "multiple of 16"),
    (dict(m=512, n=128), "5 bits"),
    (dict(m=32, n=128), "no tcgen05.mma shape"),
    (dict(m=128, n=12), "steps of 8"),
    (dict(m=128, n=264), "8..256"),
])
def test_instr_shape_errors(kw, msg):
    with pytest.raises(DescriptorError, match=msg):
        D.umma_instr_desc(a_fmt="e4m3", b_fmt="e4m3", **kw)


def test_format_errors():
    with pytest.raises(DescriptorError, match="not allowed"):
        D.umma_instr_desc(128, 128, "bf16", "e4m3")           # bf16 is no f8f6f4 format
    with pytest.raises(DescriptorError, match="MN-major"):
        D.umma_instr_desc(128, 128, "e2m1", "e4m3", a_major="MN")
    with pytest.raises(DescriptorError, match="K-major"):
        D.umma_instr_desc_block_scaled(128, 128, b_major="MN")
    with pytest.raises(DescriptorError, match="UE8M0"):
        D.umma_instr_desc_block_scaled(128, 128, kind="mxf4", scale_fmt="ue4m3")
    with pytest.raises(DescriptorError, match="2-bit"):
        D.umma_instr_desc_block_scaled(128, 128, a_sf_id=4)
    with pytest.raises(DescriptorError, match="block_scaled"):
        D.umma_instr_desc(128, 128, "e2m1", "e2m1", kind="mxf4nvf4")


@pytest.mark.parametrize("kw, msg", [
    (dict(addr=1 << 18, lbo=16, sbo=1024), "addr"),
    (dict(addr=1032, lbo=16, sbo=1024), "16-byte aligned"),
    (dict(addr=0, lbo=16, sbo=1 << 18), "sbo"),
    (dict(addr=0, lbo=16, sbo=1024, swizzle=96), "swizzle"),
    (dict(addr=0, lbo=16, sbo=1024, base_offset=8), "base_offset"),
])
def test_smem_desc_errors(kw, msg):
    with pytest.raises(DescriptorError, match=msg):
        D.umma_smem_desc(**kw)
    with pytest.raises(DescriptorError, match=msg):
        D.gmma_smem_desc(**kw)


def test_hopper_descriptor_on_blackwell_is_caught():
    # Trap 1: a GMMA descriptor lacks the version bit 46 and has a 2-bit layout field.
    g = D.gmma_smem_desc(1024, 16, 1024, 128)
    with pytest.raises(DescriptorError, match="bit 46"):
        D.decode_umma_smem_desc(g)
    with pytest.raises(DescriptorError, match="sm_100 descriptor"):
        D.decode_gmma_smem_desc(D.umma_smem_desc(1024, 16, 1024, 128))


def test_sf_id_from_tmem_address():
    assert D.umma_sf_id(0x8000_0010) == 2
    assert D.umma_sf_id(0x0000_0010) == 0


def test_describe_rows():
    rows = D.describe(D.umma_smem_desc(1024, 16, 1024, 128), "umma_smem")
    assert ("61-63", "layout type", "2", "swizzle 128") in rows
    rows = D.describe(D.umma_instr_desc_block_scaled(128, 128), "umma_instr_block_scaled")
    assert ("23", "scale format", "0", "ue4m3") in rows


# --- the C++ encoders agree with these (static_assert compiled by NVRTC) ---------------------------
AGREEMENT_CASES = [
    ("umma_instr_desc", dict(m=256, n=256, a_fmt="e4m3", b_fmt="e4m3", c_fmt="f32")),
    ("umma_instr_desc", dict(m=128, n=128, a_fmt="e4m3", b_fmt="e4m3", c_fmt="f32")),
    ("umma_instr_desc", dict(m=128, n=256, a_fmt="bf16", b_fmt="bf16", c_fmt="f32", kind="f16",
                             a_major="MN", b_neg=1)),
    ("umma_instr_desc", dict(m=64, n=8, a_fmt="e5m2", b_fmt="e2m1", c_fmt="f32", max_shift=3)),
    ("umma_instr_desc_block_scaled", dict(m=128, n=128)),
    ("umma_instr_desc_block_scaled", dict(m=256, n=256, a_sf_id=2, b_sf_id=2, scale_fmt="ue8m0", a_neg=1)),
    ("umma_instr_desc_block_scaled", dict(m=128, n=64, a_fmt="e4m3", b_fmt="e5m2", a_sf_id=3, b_sf_id=1,
                                          scale_fmt="ue8m0", kind="mxf8f6f4")),
    ("umma_smem_desc", dict(addr=1024, lbo=16, sbo=1024, swizzle=128)),
    ("umma_smem_desc", dict(addr=0x3FFF0, lbo=0x3FFF0, sbo=0x3FFF0, swizzle=32, base_offset=7, lbo_mode=1)),
    ("umma_smem_desc", dict(addr=512, lbo=128, sbo=256, swizzle=0)),
    ("umma_smem_desc", dict(addr=2048, lbo=16, sbo=512, swizzle=64, base_offset=3)),
    ("gmma_smem_desc", dict(addr=1024, lbo=16, sbo=1024, swizzle=128)),
    ("gmma_smem_desc", dict(addr=0x3FFF0, lbo=0x3FFF0, sbo=0x3FFF0, swizzle=32, base_offset=7)),
    ("gmma_smem_desc", dict(addr=256, lbo=128, sbo=256, swizzle=0)),
    ("smem_desc_advance", dict(desc=D.umma_smem_desc(1024, 16, 1024, 128), nbytes=96)),
    ("smem_desc_advance", dict(desc=D.gmma_smem_desc(1024, 16, 1024, 128), nbytes=32)),
]


def _nvrtc_or_skip():
    from pelib.build import ToolchainError, toolchain_version
    try:
        toolchain_version()
    except ToolchainError as e:
        pytest.skip(str(e))


def test_cpp_encoders_agree_with_python(tmp_path):
    _nvrtc_or_skip()
    from pelib.build import build
    src = tmp_path / "descriptor_agreement.cu"
    src.write_text(D.cuda_static_asserts(AGREEMENT_CASES))
    for arch in ("sm_100a", "sm_90a"):
        b = build(src, arch=arch, cache=False)
        assert b.cubin


def test_cpp_static_assert_can_fail(tmp_path):
    # A wrong expected value must break the build, else the agreement test proves nothing.
    _nvrtc_or_skip()
    from pelib.build import BuildError, build
    text = D.cuda_static_asserts(AGREEMENT_CASES[:1]).replace("== 272629776u", "== 272629777u")
    assert "272629777u" in text
    src = tmp_path / "descriptor_disagreement.cu"
    src.write_text(text)
    with pytest.raises(BuildError, match="static assertion failed|C\\+\\+ != Python"):
        build(src, arch="sm_100a", cache=False)


def test_cpp_range_check_is_a_compile_error(tmp_path):
    _nvrtc_or_skip()
    from pelib.build import BuildError, build
    src = tmp_path / "descriptor_range.cu"
    src.write_text('#include "common/descriptors.cuh"\n'
                   'static_assert(umma_smem_desc(1032, 16, 1024, 128) != 0, "misaligned");\n'
                   'extern "C" __global__ void k() {}\n')
    with pytest.raises(BuildError, match="constant"):
        build(src, arch="sm_100a", cache=False)


# --- what the Python encoder refuses for the block-scaled form, the C++ encoder refuses too ---------------
BLOCK_SCALED_REFUSED = [
    ("M=64", dict(m=64, n=128)),
    ("N=4", dict(m=128, n=4)),
    ("N=264", dict(m=128, n=264)),
    ("f8f6f4's E2M1 code in mxf4nvf4", dict(m=128, n=128, a_fmt=5)),
    ("format code 2 in mxf8f6f4", dict(m=128, n=128, a_fmt=2, b_fmt="e4m3", scale_fmt="ue8m0", kind="mxf8f6f4")),
    ("UE4M3 scales in mxf4", dict(m=128, n=128, kind="mxf4")),
    ("UE4M3 scales in mxf8f6f4", dict(m=128, n=128, a_fmt="e4m3", b_fmt="e4m3", kind="mxf8f6f4")),
    ("MN-major A in mxf4nvf4", dict(m=128, n=128, a_major="MN")),
    ("MN-major B in mxf4", dict(m=128, n=128, scale_fmt="ue8m0", b_major="MN", kind="mxf4")),
    ("block16 scale id 2", dict(m=128, n=128, a_sf_id=2)),
    ("block32 scale id 1", dict(m=128, n=128, scale_fmt="ue8m0", b_sf_id=1)),
    ("block32 scale id 3 in mxf4", dict(m=256, n=256, scale_fmt="ue8m0", a_sf_id=3, kind="mxf4")),
    ("K96 in mxf8f6f4", dict(m=128, n=128, a_fmt="e4m3", b_fmt="e4m3", scale_fmt="ue8m0", k_size=1, kind="mxf8f6f4")),
    ("a negate of 2", dict(m=128, n=128, a_neg=2)),
]
BLOCK_SCALED_ACCEPTED = [
    dict(m=128, n=128),                                                          # the NVFP4 stages' form
    dict(m=256, n=8, k_size=1),                                                  # K96, smallest N
    dict(m=128, n=64, a_fmt="e2m3", b_fmt="e2m1", scale_fmt="ue8m0", a_sf_id=3, b_sf_id=1, kind="mxf8f6f4"),
    dict(m=256, n=256, scale_fmt="ue8m0", a_sf_id=2, b_sf_id=2, kind="mxf4"),
]


@pytest.mark.parametrize("what,kw", BLOCK_SCALED_REFUSED, ids=[w for w, _ in BLOCK_SCALED_REFUSED])
def test_cpp_block_scaled_refuses_what_python_refuses(what, kw, tmp_path):
    with pytest.raises(D.DescriptorError):
        D.umma_instr_desc_block_scaled(**kw)
    _nvrtc_or_skip()
    from pelib.build import BuildError, build
    src = tmp_path / "refusal.cu"
    src.write_text(D.cuda_refusal("umma_instr_desc_block_scaled", kw))
    with pytest.raises(BuildError, match="constant"):
        build(src, arch="sm_100a", cache=False)


def test_cpp_block_scaled_accepts_what_python_accepts(tmp_path):
    """The refusal test's control: the same construction compiles for accepted cases, and agrees in value."""
    _nvrtc_or_skip()
    from pelib.build import build
    for i, kw in enumerate(BLOCK_SCALED_ACCEPTED):
        D.umma_instr_desc_block_scaled(**kw)
        src = tmp_path / f"accepted{i}.cu"
        src.write_text(D.cuda_refusal("umma_instr_desc_block_scaled", kw))
        assert build(src, arch="sm_100a", cache=False).cubin
    src = tmp_path / "accepted_values.cu"
    src.write_text(D.cuda_static_asserts([("umma_instr_desc_block_scaled", kw) for kw in BLOCK_SCALED_ACCEPTED]))
    assert build(src, arch="sm_100a", cache=False).cubin
