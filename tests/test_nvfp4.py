"""The NVFP4 family (src/kernels/nvfp4): budgets, spec-derived encodings, emulated tiles, host layouts, the
launch boundary, the overlap model. The generic checks of every stage file are in test_stages.py."""
import numpy as np
import pytest
import torch

from pelib import build as B
from pelib.isa import descriptors as D
from pelib import emulate as E
from pelib import problems, records, reference
from pelib.isa import sass
from pelib.kinds import nvfp4 as K
from pelib.kinds.base import KindError
from pelib.models import overlap
from pelib.views import nvfp4

COUNTS = nvfp4.STAGE_COUNTS
from pelib.isa.limits import SMEM_LIMIT  # common/limits.cuh, checked against the CUDA guide in test_evidence
STAGE_BYTES = 2 * 128 * 128 + 2 * 2048   # A and B: 128 rows x 128 B of packed E2M1; SFA, SFB: 4 atoms of 512 B


def ex_of(stage="01_pipelined", stages=None):
    return nvfp4.stage(stage, stages).exports


def ring_problem():
    """8 K tiles, two N tiles: every ring of 1..7 stages wraps at least once."""
    return problems.NvFp4Gemm("ring", 128, 256, 2048)


@pytest.fixture(scope="module")
def ring_inputs():
    return ring_problem().make_inputs(seed=3)


@pytest.fixture(scope="module")
def ring_reference(ring_inputs):
    x = ring_inputs
    return reference.nvfp4_gemm_reference(x["a"], x["sfa"], x["gsa"], x["b"], x["sfb"], x["gsb"]).double().numpy()


# ---- compiled facts ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("stages", COUNTS)
def test_pipelined_compiles_within_budgets(stages):
    f = nvfp4.stage_facts(stages)
    b = nvfp4.build("01_pipelined", stages)
    assert f["stages"] == stages
    assert f["spills"] == 0, f"NUM_STAGES={stages} spills {f['spills']} B"
    assert f["registers"] <= 96, f"NUM_STAGES={stages} uses {f['registers']} registers (budget 96)"
    assert f["stack"] <= 32            # only the bounded wait's printf frame
    assert b.facts.smem_static == 0   # everything lives in the exported dynamic shared memory
    # The shared memory is the ring plus a fixed part (alignment slack, barriers): derived, not read back.
    assert STAGE_BYTES == 36864 == b.exports["stage_bytes"]
    assert f["smem_total"] == 1024 + stages * STAGE_BYTES + 64 * ((8 * (2 * stages + 1) + 8 + 63) // 64)
    assert f["tmem_cols"] >= 128 + 32 * stages and f["tmem_cols"] & (f["tmem_cols"] - 1) == 0


def test_seven_stages_do_not_fit_and_six_do():
    """The lab log's 7-stage failure ('too much shared memory') falls out of the compiled numbers."""
    fits = {s: nvfp4.stage_facts(s)["fits"] for s in COUNTS}
    assert fits == {1: True, 2: True, 3: True, 4: True, 5: True, 6: True, 7: False}
    assert nvfp4.stage_facts(7)["smem_total"] > SMEM_LIMIT >= nvfp4.stage_facts(6)["smem_total"]
    assert nvfp4.stage_facts(7)["smem_limit"] == SMEM_LIMIT
    assert K.max_stages_that_fit(ex_of("01_pipelined", 7)) == 6
    rec = next(a for a in records.nvfp4_attempts() if a.name.startswith("7-stage"))
    assert rec.outcome == "timeout" and "shared memory" in rec.label


def test_single_stage_compiles_within_budgets():
    b = nvfp4.build("00_single_stage")
    assert b.facts.spills == 0 and b.facts.registers <= 96 and b.facts.smem_static == 0
    assert b.exports["smem_bytes"] == 1024 + STAGE_BYTES + 64 <= SMEM_LIMIT


@pytest.mark.parametrize("stage,stages", [("00_single_stage", None), ("01_pipelined", 1), ("01_pipelined", 5)])
def test_sass_has_the_block_scaled_mma(stage, stages):
    """nvdisasm prints tcgen05.mma.kind::mxf4nvf4.block_scale.block16 as UTCOMMA.4X; 4 per K tile, 8 UTCCP."""
    b = nvfp4.build(stage, stages)
    h = b.histogram
    full = sass.opcode_histogram(b.sass, modifiers=True)
    assert full["UTCOMMA.4X"] == 4, full            # .4X = scale_vec::4X
    assert h[nvfp4.MMA_OPCODE] == 4 and h[nvfp4.SF_COPY_OPCODE] == 8
    assert not {"UTCQMMA", "UTCHMMA", "HGMMA", "QGMMA"} & set(h), "no other MMA kind may appear"
    assert h["UTMALDG"] >= 4                      # the four TMA loads per K tile
    line = next(l for l in b.sass.splitlines() if "UTCOMMA" in l)
    assert "idesc[" in line and line.count("tmem[") == 3   # D, scale A, scale B in TMEM


def test_stage_one_of_01_is_stage_00():
    """Same exports (so the same layout and launch) for 01 at NUM_STAGES=1 and 00."""
    b0 = nvfp4.build("00_single_stage")
    b1 = nvfp4.build("01_pipelined", 1)
    assert b0.exports == b1.exports
    # the same code up to the ring bookkeeping: registers within a few (ptxas allocates them; NVRTC version
    # in the message)
    assert abs(b0.facts.registers - b1.facts.registers) <= 8, \
        f"{b0.facts.registers} vs {b1.facts.registers} registers ({B.toolchain_version()})"


def test_stage_table_lists_every_count():
    t = nvfp4.stage_table()
    assert [r["NUM_STAGES"] for r in t.rows] == list(COUNTS)
    assert t.rows[-1]["fits 227 KB"] == "NO" and "compiled" in t.caption


# ---- encodings, against values derived by hand from the spec ----------------------------------------------

def test_instruction_descriptor_bits():
    """PTX ISA Table 43 / CUTLASS InstrDescriptorBlockScaled, field by field."""
    want = (0 << 4              # b_sf_id [4,6): scale factors start at byte 0 of their TMEM words
            | 1 << 7            # a_format [7,10): E2M1 of kind::mxf4nvf4 is MXF4Format 1 (not f8f6f4's 5)
            | 1 << 10           # b_format [10,13)
            | 0 << 15 | 0 << 16  # K-major A and B
            | (128 >> 3) << 17  # N>>3 [17,23)
            | 0 << 23           # scale format [23]: 0 = UE4M3 (NVFP4); 1 would be UE8M0 (MX)
            | (128 >> 4) << 24  # M>>4 [24,29)
            | 0 << 29           # a_sf_id [29,31)
            | 0 << 31)          # k_size: dense K = 64
    assert want == 0x08200480
    for stage, s in (("00_single_stage", None), ("01_pipelined", 4)):
        assert nvfp4.build(stage, s).exports["idesc"] == want
    assert D.umma_instr_desc_block_scaled(128, 128, "e2m1", "e2m1", "ue4m3") == want


def test_operand_descriptor_bits():
    """PTX ISA 9.7.16.4.1 Table 40: SW128 K-major, SBO 1024 B, LBO 16 B (ignored), version bit 46."""
    lay = ex_of("01_pipelined", 4)
    base = (1 << 46) | (2 << 61) | ((1024 >> 4) << 32) | ((16 >> 4) << 16)
    assert lay["a_desc"] == base | (lay["a_smem_offset"] >> 4)
    assert lay["b_desc"] == base | (lay["b_smem_offset"] >> 4)
    # tcgen05.cp source: no swizzle (layout 0), SBO = 128 B (8 rows of 16 B), LBO 128 B (one column: unused)
    assert lay["sf_desc"] == (1 << 46) | ((128 >> 4) << 32) | ((128 >> 4) << 16) | (lay["sfa_smem_offset"] >> 4)
    assert lay["k_advance_bytes"] == 32        # 64 E2M1 per MMA = 32 B = +2 in the 16-B address field
    assert D.smem_desc_advance(lay["a_desc"], 32) - lay["a_desc"] == 2


def test_sf_copy_descriptor_reads_one_atom():
    """The kernel's tcgen05.cp descriptor covers exactly one contiguous 512-B atom (32 rows x 16 B)."""
    lay = ex_of("01_pipelined", 2)
    addr = E.operand_addresses(lay["sf_desc"], 32, 16, "K")
    assert np.array_equal(addr.reshape(-1), lay["sfa_smem_offset"] + np.arange(512))


def test_scale_factor_tmem_layout():
    """After tcgen05.cp 32x128b.warpx4, row m's scales sit in lane m, column col + m//32 (CUTLASS tmem_sf_frg)."""
    sf = np.random.default_rng(0).integers(0, 256, size=(128, 4), dtype=np.uint8)
    atom = E.sf_to_blocked(sf)
    sm = E.SmemImage(1024)
    sm.write(np.arange(512), atom)
    tm = E.Tmem(256)
    lay = ex_of("01_pipelined", 1)
    desc_at_0 = D.smem_desc_advance(lay["sf_desc"], 0) - (lay["sfa_smem_offset"] >> 4)   # the same descriptor at address 0
    E.tcgen05_cp_32x128b_warpx4(sm, desc_at_0, tm, lay["sfa_tmem_col"])
    for m in (0, 1, 31, 32, 77, 127):
        word = int(tm.raw[m, lay["sfa_tmem_col"] + m // 32])
        assert [(word >> (8 * j)) & 0xFF for j in range(4)] == list(sf[m])


# ---- emulated tiles ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("stage,stages", [("00_single_stage", None)] + [("01_pipelined", s) for s in (1, 2, 3, 5, 6)])
def test_emulated_tile_matches_reference(stage, stages, ring_inputs, ring_reference):
    prob = ring_problem()
    tile, reps = nvfp4.stage(stage, stages).emulate_tile(ring_inputs, 0, 128, prob=prob, return_report=True)
    assert all(r.ok for r in reps), [r for r in reps if not r.ok]
    np.testing.assert_allclose(tile, ring_reference[:, 128:256], rtol=2**-10, atol=1e-6)


def test_emulated_second_row_block():
    """M = 256: the SFA box row and A coordinates of row block 1 (the lab shapes have only block 0)."""
    r = nvfp4.emulate_check("01_pipelined", 3, problem=problems.NvFp4Gemm("tall", 256, 128, 1024), tile=(1, 0))
    assert r["ok"], r


def test_stage_one_emulates_like_stage_zero(ring_inputs):
    prob = ring_problem()
    t0 = nvfp4.stage("00_single_stage").emulate_tile(ring_inputs, 0, 0, prob=prob)
    t1 = nvfp4.stage("01_pipelined", 1).emulate_tile(ring_inputs, 0, 0, prob=prob)
    assert np.array_equal(t0, t1)


def test_ring_slots_use_their_own_offsets():
    lay = ex_of("01_pipelined", 3)
    p2 = K.tile_params(lay, 2)
    assert p2.a_smem_offset == 2 * lay["stage_bytes"] and p2.sfb_tmem_col == lay["sfb_tmem_col"] + 2 * lay["tmem_stage_cols"]
    assert D.decode_umma_smem_desc(p2.a_desc)["addr"] == p2.a_smem_offset
    with pytest.raises(KindError):
        K.tile_params(lay, 3)


@pytest.mark.parametrize("wrong", [dict(k_advance_bytes=16), dict(sf_tmem_step_cols=2),
                                   dict(sfb_tmem_col=128), dict(b_smem_offset=0)])
def test_wrong_layouts_are_caught(wrong, ring_inputs, ring_reference):
    """The emulation can fail: a wrong K-advance, scale column step or offset breaks the tile."""
    lay = ex_of("01_pipelined", 2)
    p = K.tile_params(lay, 0).with_(**wrong)
    a, bb = ring_inputs["a"].numpy(), ring_inputs["b"].numpy()
    sfa, sfb = ring_inputs["sfa"].view(torch.uint8).numpy(), ring_inputs["sfb"].view(torch.uint8).numpy()
    try:
        out = E.emulate_tile(p, a[:, :128], bb[:128, :128], sfa=sfa[:, :16], sfb=sfb[:128, :16])
    except E.EmulationError:
        return
    good = E.emulate_tile(K.tile_params(lay, 0), a[:, :128], bb[:128, :128], sfa=sfa[:, :16], sfb=sfb[:128, :16])
    assert not np.allclose(np.nan_to_num(out), good)


def test_wrong_sf_box_coordinates_are_caught(ring_inputs, monkeypatch):
    lay = ex_of("01_pipelined", 2)
    K.check_sf_loads(ring_problem(), lay, ring_inputs["sfa_mma"], ring_inputs["sfb_mma"], 0, 1)
    monkeypatch.setattr(K, "sf_box_row", lambda block, kt, k, ex: (block * (k // 64) + kt * 4) * 2 + 2)
    with pytest.raises(KindError, match="not that tile's scale factors"):
        K.check_sf_loads(ring_problem(), lay, ring_inputs["sfa_mma"], ring_inputs["sfb_mma"], 0, 1)


# ---- host-side packing and scale-factor layout -------------------------------------------------------------

def test_fp4_packing_round_trip_and_nibble_order():
    codes = torch.randint(0, 16, (4, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    packed = reference.pack_fp4(codes)
    assert torch.equal(reference.unpack_fp4(packed), codes)
    assert int(packed[0, 0]) == int(codes[0, 0]) | int(codes[0, 1]) << 4     # even K in the low nibble
    # The emulator decodes the bytes the MMA reads with the same order.
    vals = E.decode_values(packed.numpy(), "e2m1")
    assert np.array_equal(vals, reference.e2m1_decode(codes).numpy())


def test_scale_factor_layout_round_trip_and_atom_formula():
    rows, cols = 256, 64
    sf = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    flat = reference.sf_to_mma_layout(sf)
    assert torch.equal(reference.sf_from_mma_layout(flat, rows, cols), sf)
    assert np.array_equal(flat.numpy(), E.sf_to_blocked(sf.numpy()))
    # The kernel's comment: inside an atom, byte (m%32)*16 + ((m%128)/32)*4 + (k/16)%4; atoms K-major.
    for m, kb in ((0, 0), (33, 5), (127, 63), (200, 17)):
        atom = (m // 128) * (cols // 4) + kb // 4
        assert reference.sf_mma_offset(m, kb, cols) == atom * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + kb % 4


def test_sf_tensor_map_rows_hold_whole_k_tiles():
    prob = problems.nvfp4_gemm("k7168")
    lay = ex_of("01_pipelined", 4)
    # K tile kt of block b: atoms b*(K/64) + 4kt .. +3, two 256-B rows each -> 8 rows from row 2*(b*K/64 + 4kt)
    assert K.sf_box_row(3, 5, prob.k, lay) == 2 * (3 * prob.k // 64 + 4 * 5)
    assert lay["sf_box_rows"] * lay["sf_row_bytes"] == 2048 == K.sf_ktile_bytes(lay)


# ---- tensor maps and the launch boundary -------------------------------------------------------------------

@pytest.mark.parametrize("shape", nvfp4.SHAPES)
def test_tensor_map_specs_for_the_lab_shapes(shape):
    prob = problems.nvfp4_gemm(shape)
    specs = nvfp4.stage("01_pipelined", 5).tensor_map_specs(prob)
    a, b, sfa, sfb = specs["a"], specs["b"], specs["sfa"], specs["sfb"]
    assert a.dtype == "uint8" and a.shape == (prob.m, prob.k // 2) and a.box_shape == (128, 128) and a.swizzle == 128
    assert b.shape == (prob.n, prob.k // 2) and b.box_shape == (128, 128) and b.swizzle == 128
    assert sfa.shape == (reference.sf_mma_size(prob.m, prob.k // 16) // 256, 256)
    assert sfb.box_shape == (8, 256) and sfb.swizzle == 0
    assert sum(s.box_bytes for s in specs.values()) == 36864
    for s in specs.values():
        assert s.problems() == []


def test_problem_shape_limits():
    with pytest.raises(KindError, match="multiple of 256"):
        nvfp4.stage("01_pipelined", 2).launch_config(problems.NvFp4Gemm("odd", 128, 128, 384, tile={"m": 128, "n": 128, "k": 128}))


@pytest.mark.parametrize("shape,grid", [("k16384", (56, 1, 1)), ("k7168", (32, 1, 1)), ("k2048", (56, 1, 1))])
def test_launch_is_prepared_up_to_the_gpu(shape, grid, b200):
    """pelib.launch.prepare with the stage's own configuration, maps and arguments bound by name (no GPU)."""
    from pelib import launch, tma
    from conftest import FakeCudaTensor
    s = nvfp4.stage("01_pipelined", 5)
    prob = s.problem(shape)
    cfg = s.launch_config(prob)
    maps = {k: tma.TensorMap(v, cumap=object()) for k, v in s.tensor_map_specs(prob).items()}
    out = FakeCudaTensor((prob.m, prob.n), torch.float16)
    t = {"out": out, "gsa": torch.tensor([0.5]), "gsb": torch.tensor([1.0])}
    lp = launch.prepare(s.build, s.args(prob, t, maps), grid=cfg.grid, block=cfg.block, smem=cfg.smem, info=b200)
    assert lp.grid == grid and lp.block == (128, 1, 1) and lp.cluster == (1, 1, 1)
    assert lp.smem == s.exports["smem_bytes"] == 185472
    assert lp.kernel == "nvfp4_gemm" and len(lp.args) == 9
    assert [type(v) for v in lp.args[5:]] == [np.float32, np.uint32, np.uint32, np.uint32]
    assert lp.args[5] == np.float32(0.5) and tuple(int(v) for v in lp.args[6:]) == (prob.m, prob.n, prob.k)
    assert lp.arg_desc[0].startswith("tmap[") and lp.arg_desc[4].startswith("ptr[float16")


def test_seven_stage_launch_is_refused():
    with pytest.raises(KindError, match="227 KB.*at most 6 stages"):
        nvfp4.stage("01_pipelined", 7).launch_config("k16384")
    assert "at most 6 stages fit" in nvfp4.seven_stages()


def test_launch_needs_sm100_here():
    from pelib import device
    if device.can_run("sm_100a"):
        pytest.skip("an sm_100 GPU is here")
    with pytest.raises(device.UnsupportedGPU):
        nvfp4.stage("01_pipelined", 2).run("small")


# ---- the overlap model ------------------------------------------------------------------------------------

def test_overlap_model_limits():
    p = overlap.OverlapParams(t_load=1.0, t_mma=0.1, t_stream=0.25, t_fixed=5.0)
    assert overlap.overlap_time(10, 1, p) == pytest.approx(5 + 10 * 1.1)          # no overlap at all
    assert overlap.overlap_time(10, 8, p) == pytest.approx(5 + 10 * 0.25)         # bandwidth-bound
    times = [overlap.overlap_time(64, s, p) for s in range(1, 8)]
    assert all(a >= b for a, b in zip(times, times[1:]))
    # The event-level replay agrees exactly without overlap and approaches the closed form for long K.
    assert overlap.simulate(10, 1, p)["total"] == pytest.approx(overlap.overlap_time(10, 1, p))
    for s in (2, 3, 5):
        sim = overlap.simulate(400, s, p)["total"]
        assert sim == pytest.approx(overlap.overlap_time(400, s, p), rel=0.02)


def test_simulated_ring_respects_the_barriers():
    p = overlap.OverlapParams(t_load=1.0, t_mma=0.1, t_stream=0.2, t_fixed=0.0)
    s = 3
    ev = overlap.simulate(20, s, p)
    for k in range(20):
        assert ev["mma_start"][k] >= ev["load_end"][k] - 1e-12            # full[s]: data landed
        if k >= s:
            assert ev["load_start"][k] >= ev["mma_end"][k - s] - 1e-12    # empty[s]: slot drained


def test_model_fits_the_recorded_sweep():
    rec = overlap.recorded_sweep()
    mod = overlap.modelled_sweep()
    for shape in overlap.SHAPES:
        for s, t in rec[shape].items():
            assert mod[shape]["us"][s] == pytest.approx(t, rel=0.03), (shape, s)
    assert rec["k16384"] == {1: 96.8, 2: 64.9, 3: 54.4, 4: 50.1, 5: 49.3, 6: 49.4}


def test_chapter_tables_label_their_evidence():
    t = nvfp4.sweep_table()
    for kind in ("compiled", "recorded", "modelled"):
        assert kind in t.caption
    assert "measured" not in t.caption
    import matplotlib.figure
    from pelib.facts import Table
    v = nvfp4.stage_view(7)         # does not fit: the curve figure, the reason there is no timeline, the table
    t = next(o for o in v if isinstance(o, Table))
    assert any(r["value"].startswith("NO") for r in t.rows if r["what"].startswith("fits"))
    assert isinstance(v[0], matplotlib.figure.Figure) and "refused" in v[1]
    v5 = nvfp4.stage_view(5)        # fits: the slider's figures follow it (curve marked at 5, S=5 timeline)
    figs = [o for o in v5 if isinstance(o, matplotlib.figure.Figure)]
    assert len(figs) == 2 and "NUM_STAGES=5" in " ".join(t.get_text() for t in figs[0].axes[0].texts)
    assert figs[1].axes[0].get_ylabel() == "S=5"
    assert "recorded" in nvfp4.attempts_table().caption and len(nvfp4.split_k_table().rows) == 6


# ---- on a B200 ---------------------------------------------------------------------------------------------

needs_sm100 = pytest.mark.skipif(not nvfp4.live(), reason="needs an sm_100 GPU (B200)")


@pytest.mark.gpu
@needs_sm100
@pytest.mark.parametrize("stage,stages", [("00_single_stage", None)] + [("01_pipelined", s) for s in (1, 2, 3, 4, 5, 6)])
def test_gpu_matches_reference_small(stage, stages):
    r = nvfp4.stage(stage, stages).run(ring_problem(), time=False)
    assert r["ok"], str(r["verify"])


@pytest.mark.gpu
@needs_sm100
@pytest.mark.parametrize("shape", nvfp4.SHAPES)
def test_gpu_matches_reference_lab_shapes(shape):
    r = nvfp4.stage("01_pipelined", 5).run(shape, time=False)
    assert r["ok"], str(r["verify"])


@pytest.mark.gpu
@needs_sm100
def test_gpu_tile_matches_emulation():
    prob = ring_problem()
    x = prob.make_inputs(seed=3, device="cuda")
    s = nvfp4.stage("01_pipelined", 3)
    s.run(prob, inputs=x, time=False)
    cpu = {k: v.cpu() for k, v in x.items()}
    tile = s.emulate_tile(cpu, 0, 128, prob=prob)
    got = x["out"][:, 128:256].double().cpu().numpy()
    ulp = np.abs(np.spacing(tile.astype(np.float16)).astype(np.float64))
    assert np.all(np.abs(got - tile) <= ulp)      # the tensor core sums in another order: one FP16 ulp


@pytest.mark.gpu
def test_gpu_driver_accepts_the_tensor_maps():
    """On any CUDA GPU: cuTensorMapEncodeTiled takes the four maps of a lab shape (the B200 launch is not tried)."""
    from pelib import tma
    s = nvfp4.stage("01_pipelined", 5)
    prob = s.problem("k7168")
    x = prob.make_inputs(0, device="cuda")
    assert s.kind.scalars(s, prob, x)["alpha"] == pytest.approx(float(x["gsa"][0]) * float(x["gsb"][0]))
    maps = {k: tma.encode(v, owner=s.kind.map_owner(k, x)) for k, v in s.tensor_map_specs(prob, x).items()}
    assert set(maps) == {"a", "b", "sfa", "sfb"}
    assert maps["a"].spec.address == x["a"].data_ptr() and maps["sfb"].spec.address == x["sfb_mma"].data_ptr()
