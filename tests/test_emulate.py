"""The data-path emulator: swizzle, TMA, descriptor reads, TMEM, scale factors, whole tiles (right and wrong)."""
import numpy as np
import pytest

from pelib.numerics import blockfma as F
from pelib.isa import descriptors as D
from pelib import emulate as E
from pelib.emulate import EmulationError, SmemImage, TensorMap2D, TileParams


def rng(seed=0):
    return np.random.default_rng(seed)


def fp8(shape, seed=0):
    """Random E4M3 bytes of small integers and halves, so every sum is exact in float64 and float32."""
    vals = rng(seed).choice([-4, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4], size=shape)
    return E.encode_e4m3(vals)


# --- swizzle --------------------------------------------------------------------------------------
def test_swizzle_128_by_hand():
    # Row r (128 B) chunk c (16 B) of a 1024-B aligned atom lands in chunk c ^ (r % 8).
    for r in range(16):
        for c in range(8):
            assert E.swizzle_addr(2048 + r * 128 + c * 16 + 5, 128) == 2048 + r * 128 + (c ^ (r % 8)) * 16 + 5


def test_swizzle_64_and_32_by_hand():
    # 64B: Swizzle<2,4,3>: chunk bits [4,6) ^= address bits [7,9); 32B: bit 4 ^= bit 7.
    assert E.swizzle_addr(128 + 16, 64) == 128 + 0 and E.swizzle_addr(256, 64) == 256 + 32
    assert E.swizzle_addr(384 + 48, 64) == 384 + 0
    assert E.swizzle_addr(128, 32) == 144 and E.swizzle_addr(256, 32) == 256
    assert E.swizzle_addr(1234, 0) == 1234


def test_swizzle_is_a_permutation_within_its_repeat():
    for sw in (32, 64, 128):
        a = np.arange(4096)
        assert sorted(E.swizzle_addr(a, sw).tolist()) == a.tolist()
        rep = E.swizzle_repeat(sw)
        assert (E.swizzle_addr(a, sw) // rep == a // rep).all()


# --- TMA ------------------------------------------------------------------------------------------
def test_tma_load_no_swizzle_is_a_copy_with_zero_fill():
    g = rng().integers(0, 256, size=(40, 96), dtype=np.uint8)
    tm = TensorMap2D(8, (96, 40), (32, 16))
    sm = SmemImage(4096)
    E.tma_load_2d(tm, g, (80, 30), sm, 512)          # 16 of 32 columns and 10 of 16 rows inside
    box = sm.view(512, 512).reshape(16, 32)
    assert (box[:10, :16] == g[30:40, 80:96]).all()
    assert (box[10:] == 0).all() and (box[:, 16:] == 0).all()


def test_tma_load_negative_coordinates_fill_zero():
    g = rng().integers(1, 256, size=(8, 32), dtype=np.uint8)
    sm = SmemImage(1024)
    E.tma_load_2d(TensorMap2D(8, (32, 8), (16, 4)), g, (-8, -2), sm, 0)
    box = sm.view(0, 64).reshape(4, 16)
    assert (box[:2] == 0).all() and (box[2:, :8] == 0).all() and (box[2:, 8:] == g[:2, :8]).all()


def test_tma_load_128b_swizzle_places_chunks_by_hand():
    g = rng(1).integers(0, 256, size=(64, 128), dtype=np.uint8)
    sm = SmemImage(16384)
    E.tma_load_2d(TensorMap2D(8, (128, 64), (128, 64), swizzle=128), g, (0, 0), sm, 1024)
    img = sm.view(1024, 8192).reshape(64, 8, 16)
    for r in range(64):
        for c in range(8):
            assert (img[r, c ^ (r % 8)] == g[r, 16 * c:16 * c + 16]).all()


def test_tma_element_strides_outer_dimension():
    g = np.arange(64 * 32, dtype=np.uint16).reshape(64, 32)
    tm = TensorMap2D(16, (32, 64), (8, 16), element_strides=(1, 2))
    assert tm.counts == (8, 8)
    sm = SmemImage(1024)
    E.tma_load_2d(tm, g, (8, 4), sm, 0)
    box = sm.view(0, tm.box_bytes).view(np.uint16).reshape(8, 8)
    assert (box == g[4:20:2, 8:16]).all()


def test_tma_store_round_trip_and_clipping():
    for sw in (0, 32, 64, 128):
        g = rng(sw).integers(0, 256, size=(50, 208), dtype=np.uint8)
        inner = sw or 64
        tm = TensorMap2D(8, (200, 50), (inner, 16), swizzle=sw, row_stride_bytes=208)
        sm = SmemImage(8192)
        E.tma_load_2d(tm, g, (160, 40), sm, 1024)
        out = E.tma_store_2d(tm, sm, 1024, (160, 40), np.zeros_like(g))
        expect = np.zeros_like(g)
        hi = min(200, 160 + inner)      # columns 200..207 are row padding, outside the tensor
        expect[40:50, 160:hi] = g[40:50, 160:hi]
        assert (out == expect).all(), sw


@pytest.mark.parametrize("kw, msg", [
    (dict(elem_bits=8, dims=(256, 8), box=(256, 8), swizzle=128), "exceeds the 128B"),
    (dict(elem_bits=8, dims=(256, 512), box=(64, 300)), "1..256"),
    (dict(elem_bits=16, dims=(256, 8), box=(4, 8)), "multiple of 16"),
    (dict(elem_bits=8, dims=(100, 8), box=(64, 8)), "row stride"),
])
def test_tensor_map_rules(kw, msg):
    with pytest.raises(EmulationError, match=msg):
        E.tma_load_2d(TensorMap2D(**kw), np.zeros((512, 512), np.uint8), (0, 0), SmemImage(1 << 17), 0)


# --- operand reads through descriptors -----------------------------------------------------------
@pytest.mark.parametrize("sw", [32, 64, 128])
@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_k_major_swizzled_operand_with_k_advance(sw, arch):
    g = rng(sw).integers(0, 256, size=(128, sw), dtype=np.uint8)
    sm = SmemImage(32768)
    E.tma_load_2d(TensorMap2D(8, (sw, 128), (sw, 128), swizzle=sw), g, (0, 0), sm, 2048)
    enc = D.umma_smem_desc if arch == "sm_100a" else D.gmma_smem_desc
    desc = enc(2048, 16, 8 * sw, sw)
    for s in range(sw // 32):
        got = E.read_operand(sm, D.smem_desc_advance(desc, 32 * s), 128, 32, arch=arch)
        assert (got == g[:, 32 * s:32 * s + 32]).all()


def test_k_major_interleave_operand():
    # No swizzle: core matrices of 8 rows x 16 B; TMA boxes 16 B wide, one per K chunk (LBO apart).
    g = rng(3).integers(0, 256, size=(64, 32), dtype=np.uint8)
    sm = SmemImage(8192)
    tm = TensorMap2D(8, (32, 64), (16, 64))
    for kc in range(2):
        E.tma_load_2d(tm, g, (16 * kc, 0), sm, 1024 + kc * 64 * 16)
    got = E.read_operand(sm, D.umma_smem_desc(1024, 64 * 16, 128, 0), 64, 32)
    assert (got == g).all()


def test_mn_major_sw128_bf16_operand():
    # B stored (K, N) with N contiguous; two 64-column boxes (LBO apart), 8 K rows per 1024-B atom (SBO).
    n, k = 128, 16
    bt = rng(4).integers(0, 1 << 16, size=(k, n), dtype=np.uint16)       # B^T, bf16 bits
    sm = SmemImage(16384)
    tm = TensorMap2D(16, (n, k), (64, k), swizzle=128)
    for j in range(2):
        E.tma_load_2d(tm, bt, (64 * j, 0), sm, 4096 + j * 2048)
    got = E.read_operand(sm, D.umma_smem_desc(4096, 2048, 1024, 128), n, 2 * k, "MN", elem_bytes=2)
    assert (got.view(np.uint16) == bt.T).all()


def test_wrong_sbo_reads_other_rows():
    g = rng(5).integers(0, 256, size=(128, 128), dtype=np.uint8)
    sm = SmemImage(32768)
    E.tma_load_2d(TensorMap2D(8, (128, 128), (128, 128), swizzle=128), g, (0, 0), sm, 0)
    got = E.read_operand(sm, D.umma_smem_desc(0, 16, 512, 128), 128, 32)
    assert (got[:8] == g[:8, :32]).all() and not (got[8:16] == g[8:16, :32]).all()


def test_base_offset_is_refused():
    with pytest.raises(EmulationError, match="base_offset"):
        E.operand_addresses(D.umma_smem_desc(1152, 16, 1024, 128, base_offset=1), 128, 32)


def test_unwritten_bytes_are_poison_and_counted():
    sm = SmemImage(4096)
    addr = E.operand_addresses(D.umma_smem_desc(0, 16, 1024, 128), 8, 32)
    assert sm.unwritten(addr) == 256 and np.isnan(E.decode_values(sm.read(addr), "e4m3")).all()


# --- number formats -------------------------------------------------------------------------------
def test_e4m3_table_matches_torch():
    torch = pytest.importorskip("torch")
    b = torch.arange(256, dtype=torch.uint8)
    ref = b.view(torch.float8_e4m3fn).float().double().numpy()
    ours = E.decode_values(b.numpy()[None], "e4m3")[0]
    assert np.array_equal(np.isnan(ref), np.isnan(ours))
    assert (ref[~np.isnan(ref)] == ours[~np.isnan(ours)]).all()


def test_e2m1_packing_low_nibble_first():
    assert E.decode_values(np.array([[0x21, 0xF7]], np.uint8), "e2m1").tolist() == [[0.5, 1.0, 6.0, -6.0]]


# --- TMEM -----------------------------------------------------------------------------------------
def test_tmem_maps():
    m = E.tmem_accumulator_map(256, 256, cta_group=2, acc_col=256)
    assert m[0, 0].tolist() == [0, 0, 256] and m[255, 255].tolist() == [1, 127, 511]
    assert m[128, 7].tolist() == [1, 0, 263]
    ld = E.tmem_ld_map(warp=6, x=16, col0=32)
    assert ld[5, 3].tolist() == [69, 35]


def test_tcgen05_ld_lane_quarter_rule():
    tm = E.Tmem(256)
    tm.data[:, :] = np.arange(128)[:, None] * 1000 + np.arange(512)[None, :]
    regs = E.tcgen05_ld_32x32b(tm, 5, 32 << 16 | 64, 32)
    assert regs[3, 4] == 35 * 1000 + 68
    with pytest.raises(EmulationError, match="lanes 32..63 only"):
        E.tcgen05_ld_32x32b(tm, 5, 0 << 16 | 64, 32)
    with pytest.raises(EmulationError, match="allocation"):
        E.tcgen05_ld_32x32b(tm, 4, 0 << 16 | 240, 32)
    with pytest.raises(EmulationError, match="power of two"):
        E.Tmem(96)


def test_wgmma_fragment_by_hand():
    f = E.wgmma_acc_map(64)
    assert f[0, 0].tolist() == [0, 0] and f[0, 2].tolist() == [8, 0]
    assert f[37, 5].tolist() == [16 + 1, 8 + 2 + 1]  # warp 1, lane 5: row 16+5//4, j=1 c=1


def test_cta_pair_split():
    a, b = E.cta_pair_split(256, 256)
    assert a["a_rows"] == (0, 128) and b["b_rows"] == (128, 256) and b["d_rows"] == (128, 256)


# --- scale factors ----------------------------------------------------------------------------------
def test_sf_blocked_offsets_by_hand():
    f = lambda r, k: int(E.sf_blocked_offset(r, k, 16))  # noqa: E731
    assert (f(0, 0), f(1, 0), f(32, 0), f(0, 1), f(0, 4), f(128, 0)) == (0, 16, 4, 1, 512, 4 * 512)
    assert f(127, 3) == 31 * 16 + 3 * 4 + 3


def test_sf_copy_and_mma_read_round_trip():
    sf = rng(6).integers(0, 127, size=(128, 4), dtype=np.uint8)
    sm = SmemImage(2048)
    sm.write(np.arange(512), E.sf_to_blocked(sf))
    tm = E.Tmem(128)
    E.tcgen05_cp_32x128b_warpx4(sm, D.umma_smem_desc(0, 16, 128, 0), tm, 8)
    assert (E._mma_scale_bytes(tm, 8, 128, 0, 4) == sf).all()
    assert (tm.raw[0:32, 8:12] == tm.raw[96:128, 8:12]).all()       # warpx4 broadcast


# --- whole tiles ----------------------------------------------------------------------------------
def fp8_params(**kw):
    base = dict(kind="f8f6f4", idesc=D.umma_instr_desc(128, 128, "e4m3", "e4m3"), block_k=128,
                a_box_k=128, a_box_m=128, b_box_k=128, b_box_n=128, a_smem_offset=0, b_smem_offset=16384,
                a_desc=D.umma_smem_desc(0, 16, 1024, 128), b_desc=D.umma_smem_desc(16384, 16, 1024, 128),
                k_advance_bytes=32, tmem_cols=128, epi_warp0=4, epi_warps=4, epi_ld_x=32)
    base.update(kw)
    return TileParams(**base)


def ref(A, B, m0, n0, tm, tn, k=None):
    a = E.decode_values(A[m0:m0 + tm, :k], "e4m3")
    b = E.decode_values(B[n0:n0 + tn, :k], "e4m3")
    return a @ b.T


@pytest.fixture(scope="module")
def fp8_problem():
    return fp8((384, 256), 10), fp8((512, 256), 11)


def test_fp8_128x128_cta_group1_matches_reference(fp8_problem):
    A, B = fp8_problem
    out, rep = E.emulate_tile(fp8_params(), A, B, m0=128, n0=256, return_report=True)
    assert rep.ok, rep
    assert np.array_equal(out, ref(A, B, 128, 256, 128, 128))


def test_fp8_256x256_cta_group2_matches_reference(fp8_problem):
    A, B = fp8_problem
    p = fp8_params(cta_group=2, idesc=D.umma_instr_desc(256, 256, "e4m3", "e4m3"), tmem_cols=512,
                   tmem_acc_col=256, epi_ld_x=16)
    out, rep = E.emulate_tile(p, A, B, m0=128, n0=256, return_report=True)
    assert rep.ok, rep
    assert np.array_equal(out, ref(A, B, 128, 256, 256, 256))


def test_from_exports_round_trip():
    ex = {"mma_kind": 2, "cta_group": 2, "idesc": D.umma_instr_desc(256, 256, "e4m3", "e4m3"), "block_k": 128,
          "a_box_k": 128, "a_box_m": 128, "b_box_k": 128, "b_box_n": 128, "swizzle_bytes": 128,
          "a_smem_offset": 0, "b_smem_offset": 16384, "a_desc_lo": D.umma_smem_desc(0, 16, 1024, 128) & 0xFFFFFFFF,
          "a_desc_hi": D.umma_smem_desc(0, 16, 1024, 128) >> 32, "b_desc": D.umma_smem_desc(16384, 16, 1024, 128),
          "k_advance_bytes": 32, "tmem_cols": 512, "tmem_acc_col": 0, "epi_warp0": 2, "epi_warps": 4,
          "epi_ld_x": 16, "smem_bytes": 200000}
    p = TileParams.from_exports(ex)
    assert (p.kind, p.cta_group, p.mma_m, p.mma_n, p.a_swizzle) == ("f8f6f4", 2, 256, 256, 128)
    assert p.a_desc == D.umma_smem_desc(0, 16, 1024, 128)
    A, B = fp8((256, 128), 1), fp8((256, 128), 2)
    assert np.array_equal(E.emulate_tile(p, A, B), ref(A, B, 0, 0, 256, 256))


# Deliberately wrong parameter sets: each must produce a wrong tile, a report issue, or an error.
WRONG = {
    "SBO 512 instead of 1024": dict(a_desc=D.umma_smem_desc(0, 16, 512, 128)),
    "descriptor swizzle 64B over a 128B TMA tile": dict(b_desc=D.umma_smem_desc(16384, 16, 512, 64)),
    "K-advance 16 B instead of 32 B": dict(k_advance_bytes=16),
    "K-advance 64 B instead of 32 B": dict(k_advance_bytes=64),
    "descriptor start one 16-B unit off": dict(a_desc=D.umma_smem_desc(16, 16, 1024, 128)),
    "TMEM load from the wrong column": dict(epilogue_map=lambda w, j: (32 * (w % 4), 32 * j + 1, 32 * j)),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_parameters_are_caught(fp8_problem, name):
    A, B = fp8_problem
    p = fp8_params(**WRONG[name])
    good = ref(A, B, 0, 0, 128, 128)
    try:
        out, rep = E.emulate_tile(p, A, B, return_report=True)
    except EmulationError:
        return
    assert not np.array_equal(np.nan_to_num(out, nan=1e9), good), f"{name} was not caught"


def test_hopper_descriptor_on_blackwell_is_an_error(fp8_problem):
    A, B = fp8_problem
    with pytest.raises(EmulationError, match="bit 46"):
        E.emulate_tile(fp8_params(a_desc=D.gmma_smem_desc(0, 16, 1024, 128)), A, B)


def test_three_epilogue_warps_leave_rows_uncovered(fp8_problem):
    A, B = fp8_problem
    out, rep = E.emulate_tile(fp8_params(epi_warps=3), A, B, return_report=True)
    assert rep.uncovered_outputs == 32 * 128 and any("lane quarters [3]" in i for i in rep.issues)


def test_accumulator_past_allocation_is_an_error(fp8_problem):
    A, B = fp8_problem
    with pytest.raises(EmulationError, match="allocation"):
        E.emulate_tile(fp8_params(tmem_acc_col=64), A, B)


def test_misaligned_sw128_tile_is_reported(fp8_problem):
    A, B = fp8_problem
    p = fp8_params(a_smem_offset=512, a_desc=D.umma_smem_desc(512, 16, 1024, 128))
    _, rep = E.emulate_tile(p, A, B, return_report=True)
    assert any("1024-B aligned" in i for i in rep.issues)


def test_lint_names_desc_tma_disagreements(fp8_problem):
    A, B = fp8_problem
    _, rep = E.emulate_tile(fp8_params(**WRONG["SBO 512 instead of 1024"]), A, B, return_report=True)
    assert any("SBO 512" in i for i in rep.issues)


# --- NVFP4 ----------------------------------------------------------------------------------------
def nvfp4_problem(m=128, n=128, k=512, seed=0):
    r = rng(seed)
    a = r.integers(0, 256, size=(m, k // 2), dtype=np.uint8)
    b = r.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    # UE4M3 scales 0.25..4 (exponent codes 5..9, any mantissa)
    sfa = (r.integers(5, 10, size=(m, k // 16)) << 3 | r.integers(0, 8, size=(m, k // 16))).astype(np.uint8)
    sfb = (r.integers(5, 10, size=(n, k // 16)) << 3 | r.integers(0, 8, size=(n, k // 16))).astype(np.uint8)
    return a, b, sfa, sfb


def nvfp4_ref(a, b, sfa, sfb, exact=False):
    """The global product, no layout: exact (float64), or 64-product kind::mxf4nvf4 instructions in K order
    under pelib.numerics.blockfma's model (MMA-Sim's rule; its windows by scaled_windows), as FP32 values: what the replay
    must print bit for bit."""
    av = E.decode_values(a, "e2m1") * np.repeat(E.decode_values(sfa, "ue4m3"), 16, axis=1)
    bv = E.decode_values(b, "e2m1") * np.repeat(E.decode_values(sfb, "ue4m3"), 16, axis=1)
    if exact:
        return av @ bv.T
    m = F.B200_MXF4NVF4
    ae = F.scaled_windows(m, F.window_exponents(a, "e2m1"), np.repeat(F.window_exponents(sfa, "ue4m3"), 16, axis=1))
    be = F.scaled_windows(m, F.window_exponents(b, "e2m1"), np.repeat(F.window_exponents(sfb, "ue4m3"), 16, axis=1))
    return F.matmul(m, av, ae, bv, be, 64).view(np.float32).astype(np.float64)


def nvfp4_params(**kw):
    base = dict(kind="mxf4nvf4", idesc=D.umma_instr_desc_block_scaled(128, 128), block_k=256,
                a_box_k=256, a_box_m=128, b_box_k=256, b_box_n=128, a_smem_offset=0, b_smem_offset=16384,
                a_desc=D.umma_smem_desc(0, 16, 1024, 128), b_desc=D.umma_smem_desc(16384, 16, 1024, 128),
                k_advance_bytes=32, sfa_smem_offset=32768, sfb_smem_offset=32768 + 2048,
                sfa_tmem_col=128, sfb_tmem_col=160, tmem_cols=256, epi_ld_x=16)
    base.update(kw)
    return TileParams(**base)


def test_nvfp4_128x128x256_matches_reference():
    a, b, sfa, sfb = nvfp4_problem()
    out, rep = E.emulate_tile(nvfp4_params(), a, b, sfa=sfa, sfb=sfb, return_report=True)
    assert rep.ok, rep
    assert np.array_equal(out, nvfp4_ref(a, b, sfa, sfb))
    np.testing.assert_allclose(out, nvfp4_ref(a, b, sfa, sfb, exact=True), rtol=1e-6, atol=1e-6)
    exact = E.emulate_tile(nvfp4_params(), a, b, sfa=sfa, sfb=sfb, accumulation="exact")
    np.testing.assert_allclose(exact, nvfp4_ref(a, b, sfa, sfb, exact=True), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("wrong", [dict(sf_tmem_step_cols=1), dict(sfb_smem_offset=32768),
                                   dict(k_advance_bytes=16)])
def test_nvfp4_wrong_parameters_are_caught(wrong):
    a, b, sfa, sfb = nvfp4_problem()
    try:
        out = E.emulate_tile(nvfp4_params(**wrong), a, b, sfa=sfa, sfb=sfb)
    except EmulationError:
        return
    assert not np.allclose(np.nan_to_num(out), nvfp4_ref(a, b, sfa, sfb))


# --- staged epilogue -------------------------------------------------------------------------------
def bf16_round(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def test_staged_epilogue_matches_and_swizzle_mismatch_is_caught(fp8_problem):
    A, B = fp8_problem
    good = bf16_round(ref(A, B, 0, 0, 128, 128))
    p = fp8_params(stage_smem_offset=65536, stage_box_cols=64, stage_box_rows=32, stage_swizzle=128,
                   out_swizzle=128, out_elem_bytes=2)
    out, rep = E.emulate_tile(p, A, B, return_report=True)
    assert rep.ok, rep
    assert np.array_equal(out, good)
    bad = E.emulate_tile(p.with_(stage_swizzle=0), A, B)
    assert not np.array_equal(bad, good)


# --- pipeline ring --------------------------------------------------------------------------------
def test_stage_ring_and_wrong_descriptor_stage_stride(fp8_problem):
    A, B = fp8_problem
    p = fp8_params(num_stages=3, a_stage_stride=32768, b_stage_stride=32768, b_smem_offset=16384)
    out, rep = E.emulate_tile(p, A, B, return_report=True)          # 2 K tiles use stages 0 and 1
    assert rep.ok, rep
    assert np.array_equal(out, ref(A, B, 0, 0, 128, 128))
    bad = E.emulate_tile(p.with_(a_desc_stage_stride=16384), A, B)
    assert not np.array_equal(np.nan_to_num(bad, nan=1e9), ref(A, B, 0, 0, 128, 128))


def test_k_advance_lint(fp8_problem):
    A, B = fp8_problem
    _, rep = E.emulate_tile(fp8_params(k_advance_bytes=16), A, B, return_report=True)
    assert any("K-advance 16 B" in i for i in rep.issues)


def test_nvfp4_two_stage_ring():
    a, b, sfa, sfb = nvfp4_problem()
    p = nvfp4_params(num_stages=2, a_stage_stride=40960, b_stage_stride=40960, sfa_stage_stride=40960,
                     sfb_stage_stride=40960)
    out = E.emulate_tile(p, a, b, sfa=sfa, sfb=sfb)
    assert np.array_equal(out, nvfp4_ref(a, b, sfa, sfb))


# --- the Hopper twin --------------------------------------------------------------------------------
def test_sm90_two_warpgroup_tile(fp8_problem):
    A, B = fp8_problem
    p = TileParams(kind="f8f6f4", arch="sm_90a", mma_n=128, block_k=128, a_box_k=128, a_box_m=128, b_box_k=128,
                   b_box_n=128, a_smem_offset=0, b_smem_offset=16384, a_desc=D.gmma_smem_desc(0, 16, 1024, 128),
                   b_desc=D.gmma_smem_desc(16384, 16, 1024, 128), k_advance_bytes=32)
    out, rep = E.emulate_tile(p, A, B, m0=64, n0=128, return_report=True)
    assert rep.ok, rep
    assert np.array_equal(out, ref(A, B, 64, 128, 128, 128))
    with pytest.raises(EmulationError, match="sm_100 descriptor"):
        E.emulate_tile(p.with_(a_desc=D.umma_smem_desc(0, 16, 1024, 128)), A, B)


# --- the book's own stages, as compiled -----------------------------------------------------------------
def _stages(family):
    from pelib.paths import KERNELS
    return sorted(str(p.relative_to(KERNELS)) for p in (KERNELS / family).glob("[0-9][0-9]_*.cu"))


def _build_or_skip(stage):
    from pelib.build import BuildError, ToolchainError, build
    try:
        return build(stage, "sm_100a")
    except (BuildError, ToolchainError) as e:
        pytest.skip(f"{stage} does not build here: {str(e)[:200]}")


@pytest.mark.parametrize("stage", _stages("fp8"))
def test_fp8_stage_exports_reproduce_the_reference(stage):
    """Each FP8 stage's exported layout (boxes, descriptors, K-advance, TMEM, epilogue warps) replays to the
    exact product of a 4-K-tile problem."""
    b = _build_or_skip(stage)
    p = TileParams.from_exports(b.exports)
    A, B = fp8((p.mma_m, 512), 21), fp8((p.mma_n, 512), 22)
    out, rep = E.emulate_tile(p, A, B, return_report=True)
    assert rep.ok, rep
    assert np.array_equal(out, ref(A, B, 0, 0, p.mma_m, p.mma_n))


@pytest.mark.parametrize("stage", _stages("nvfp4"))
def test_nvfp4_stage_exports_reproduce_the_reference(stage):
    from pelib.kinds.nvfp4 import mma_half
    b = _build_or_skip(stage)
    p = mma_half(TileParams.from_exports(b.exports), b.exports, 0)   # a tile of several MMAs along N: its first
    a, bb, sfa, sfb = nvfp4_problem(p.mma_m, p.mma_n, 1024, seed=3)
    out, rep = E.emulate_tile(p, a, bb, sfa=sfa, sfb=sfb, return_report=True)
    assert rep.ok, rep
    want = nvfp4_ref(a, bb, sfa, sfb)
    if p.stage_smem_offset is not None:  # a staged epilogue stores its output format (02: FP16)
        assert p.out_fmt == 1 and p.out_elem_bytes == 2
        want = want.astype(np.float32).astype(np.float16).astype(np.float64)
    assert np.array_equal(out, want)


# --- the chapter's pictures ------------------------------------------------------------------------
def test_plot_helpers_run_and_say_what_they_show():
    import matplotlib
    matplotlib.use("Agg")
    from pelib.views import emulate_plots as P
    assert P.bank_groups(0)[:, 3].tolist() == [3] * 8                 # 8-way conflict without swizzle
    assert sorted(P.bank_groups(128)[:, 3].tolist()) == list(range(8))  # conflict-free with 128B
    for fig in (P.swizzle_bank_heatmap(), P.descriptor_bits_figure(D.umma_smem_desc(1024, 16, 1024, 128)),
                P.tmem_cta_pair_figure()):
        text = (fig._suptitle.get_text() if fig._suptitle else "") + fig.axes[0].get_title()
        assert "emulated" in text
    assert "PENDING" in P.hopper_proof_table(None)
    rec = {"device": "H100", "date": "2025-01-01", "passed": 1, "failed": 0,
           "cases": [{"kind": "tma_load", "case": "x", "passed": True}]}
    assert P.hopper_proof_table(rec).startswith("measured on H100, 2025-01-01")
    assert P.hopper_proof_table(rec, cases=False) == P.hopper_proof_table(rec).splitlines()[0]


def test_narrow_rows_take_the_whole_swizzle_span():
    # Measured on an H100 (2026-11-23, tests/test_gpu_emulate.py probe): a 64-B box row under the
    # 128B swizzle occupies a full 128-B row; its 16-B chunk c lands at 16 * (c ^ (row % 8)).
    tm = E.TensorMap2D(8, (256, 64), (64, 32), 128)
    assert tm.smem_pitch == 128 and tm.box_bytes == 2048
    addr = E.tma_box_addresses(tm, 0)
    for r in range(32):
        for c in range(4):
            assert addr[r, 16 * c] == r * 128 + 16 * (c ^ (r % 8))
