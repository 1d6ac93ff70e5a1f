"""NVFP4 stage 02 (TMA-store epilogue): compiled facts, SMEM budget, staging layout, emulated store, host side,
and the chapter's Hopper measurement of the same idea (the committed sweeps, pelib.results)."""
import json

import numpy as np
import pytest
import torch

from pelib import emulate as E
from pelib import problems, reference, results
from pelib.isa import sass
from pelib.kinds import nvfp4 as K
from pelib.layouts import tma_staging as TS
from pelib.kinds.base import KindError
from pelib.views import gonogo as T, nvfp4

STAGE = T.TMA_STAGE
COUNTS = nvfp4.STAGE_COUNTS


def ex_of(stages, ring=1):
    return T.tma_store_stage(stages, ring).exports
from pelib.isa.limits import SMEM_LIMIT  # common/limits.cuh, checked against the CUDA guide in test_evidence
STAGE_BYTES = 2 * 128 * 128 + 2 * 2048   # one ring stage: A, B (128 rows x 128 B) and SFA, SFB (4 atoms of 512 B)
STAGING_BYTES = 128 * 128 * 2      # the FP16 output tile
STAGING_KEYS = {"stage_smem_offset", "stage_box_cols", "stage_box_rows", "stage_swizzle", "out_swizzle",
                "out_elem_bytes", "out_fmt", "staging_bytes", "staging_in_ring", "barrier_smem_offset",
                "staging_layout_hash", "tmap_c_box_rows", "tmap_c_box_cols", "tmap_c_swizzle", "tmap_c_elem_bytes"}


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


def _barrier_bytes(stages):
    return 64 * ((8 * (2 * stages + 1) + 8 + 63) // 64)


# ---- compiled facts ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("stages", COUNTS)
def test_compiles_within_budgets(stages):
    b = T.tma_store_stage(stages).build
    f = b.facts
    assert f.spills == 0, f"NUM_STAGES={stages} spills {f.spills} B"
    assert f.registers <= 96, f"NUM_STAGES={stages} uses {f.registers} registers (budget 96)"
    assert f.stack <= 32 and f.smem_static == 0
    # The staging tile lives in stage 0 of the drained ring: the shared memory is exactly stage 01's.
    assert b.exports["smem_bytes"] == 1024 + stages * STAGE_BYTES + _barrier_bytes(stages)
    assert b.exports["smem_bytes"] == nvfp4.build("01_pipelined", stages).exports["smem_bytes"]
    assert (b.exports["smem_bytes"] <= SMEM_LIMIT) == (stages <= 6)


@pytest.mark.parametrize("stages", (1, 4, 5, 6))
def test_sass_has_the_tma_store_and_the_block_scaled_mma(stages):
    """nvdisasm prints cp.async.bulk.tensor.2d.global.shared::cta as UTMASTG.2D: one per 64-column box."""
    b = T.tma_store_stage(stages).build
    h, full = b.histogram, sass.opcode_histogram(b.sass, modifiers=True)
    assert h["UTMASTG"] == 2 and full["UTMASTG.2D"] == 2, full
    assert h["STG"] == 0, "no thread stores to global any more"
    assert full["STS.128"] == 4                     # 4 x 16 B of FP16 per tcgen05.ld of 32 columns
    assert h["UTMACMDFLUSH"] == 1                   # cp.async.bulk.commit_group
    assert full["UTCOMMA.4X"] == 4 and h["UTCCP"] == 8
    assert not {"UTCQMMA", "UTCHMMA", "HGMMA", "QGMMA"} & set(h)


def test_01_stores_with_stg_and_no_tma():
    h = nvfp4.build("01_pipelined", 5).histogram
    assert h["STG"] == 4 and h.get("UTMASTG", 0) == 0


def _index(ins, pred, start=0, what=""):
    for i in range(start, len(ins)):
        if pred(ins[i][1], ins[i][2]):
            return i
    raise AssertionError(f"no {what} after instruction {start}")


def test_sass_epilogue_order():
    """STS.128 -> fence.proxy.async (MEMBAR.ALL.CTA, FENCE.VIEW.ASYNC.S) -> named barrier 1 of 128 threads ->
    2 x UTMASTG -> commit (UTMACMDFLUSH) -> wait_group.read 0 (DEPBAR.LE SB0, 0x0) -> __syncthreads -> exit."""
    ins = sass.instructions(T.tma_store_stage(5).build.sass)
    last_sts = max(i for i, (_, op, _) in enumerate(ins) if op == "STS.128")
    i_membar = _index(ins, lambda op, t: op == "MEMBAR.ALL.CTA", last_sts, "MEMBAR")
    i_fence = _index(ins, lambda op, t: op == "FENCE.VIEW.ASYNC.S", i_membar, "FENCE.VIEW.ASYNC.S")
    i_bar = _index(ins, lambda op, t: op.startswith("BAR.SYNC") and "0x1, 0x80" in t, i_fence, "bar.sync 1, 128")
    i_st = _index(ins, lambda op, t: op == "UTMASTG.2D", i_bar, "UTMASTG")
    i_st2 = _index(ins, lambda op, t: op == "UTMASTG.2D", i_st + 1, "second UTMASTG")
    i_commit = _index(ins, lambda op, t: op == "UTMACMDFLUSH", i_st2, "UTMACMDFLUSH")
    i_wait = _index(ins, lambda op, t: op.startswith("DEPBAR") and "SB0, 0x0" in t, i_commit, "DEPBAR SB0")
    _index(ins, lambda op, t: op.startswith("BAR.SYNC") and "0x0 ;" in t.replace("0x0;", "0x0 ;"), i_wait,
           "__syncthreads before the TMEM dealloc")
    assert last_sts < i_membar < i_fence < i_bar < i_st < i_st2 < i_commit < i_wait


def test_registers_beside_01():
    """The staged epilogue may cost a few registers; it must not spill or leave the 01 budget."""
    for s in COUNTS:
        f = T.tma_store_facts(s)
        assert f["spills"] == 0 and f["registers"] <= max(f["registers_01"] + 16, 96)


# ---- the shared-memory budget -------------------------------------------------------------------------------

def test_budget_per_stage_count():
    assert T.tma_store_fitting(1) == [1, 2, 3, 4, 5, 6]     # staging in the drained ring: as 01
    assert T.tma_store_fitting(0) == [1, 2, 3, 4, 5]        # its own 32 KB: 6 stages no longer fit
    for s in COUNTS:
        own, ring = ex_of(s, 0), ex_of(s, 1)
        assert own["smem_bytes"] - ring["smem_bytes"] == STAGING_BYTES
        assert own["stage_smem_offset"] == s * STAGE_BYTES and ring["stage_smem_offset"] == 0
    t = T.tma_store_budget()
    assert [r["fits (own)"] for r in t.rows] == ["yes"] * 5 + ["NO"] * 2
    assert "compiled" in t.caption


def test_own_staging_six_stages_refused():
    with pytest.raises(KindError, match="227 KB.*at most 5 stages"):
        T.tma_store_stage(6, 0).launch_config("k16384")


# ---- exports ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stages", (1, 3, 5))
def test_mainloop_exports_equal_01(stages):
    """One idea changed: every export of 01 is unchanged; 02 only adds the staging ones."""
    e1 = nvfp4.build("01_pipelined", stages).exports
    e2 = ex_of(stages)
    assert set(e2) - set(e1) == STAGING_KEYS
    assert {k: v for k, v in e2.items() if k in e1} == e1


def test_staging_exports_and_layout_checks():
    lay = ex_of(5)
    assert "stage_smem_offset" in lay and "stage_smem_offset" not in nvfp4.stage("01_pipelined", 5).exports
    assert (lay["stage_box_cols"], lay["stage_box_rows"]) == (64, 128)      # 64 FP16 = 128 B = the swizzle span
    assert lay["stage_swizzle"] == lay["out_swizzle"] == 128 and lay["out_elem_bytes"] == 2
    assert lay["staging_bytes"] == STAGING_BYTES and lay["barrier_smem_offset"] == 5 * STAGE_BYTES
    assert K.check_layout(lay) == []
    for bad, msg in ((dict(stage_smem_offset=512), "1024-B aligned"),
                     (dict(stage_smem_offset=5 * STAGE_BYTES - 1024), "ring ends"),
                     (dict(staging_in_ring=0), "overlaps the ring"),
                     (dict(staging_bytes=16384), "whole boxes")):
        assert any(msg in i for i in K.check_layout({**lay, **bad})), (bad, msg)


# ---- the staging layout and the emulated TMA store ---------------------------------------------------------

def test_staging_addresses_follow_swizzle_128b():
    """Chunk q of row r at chunk q ^ (r % 8) (PTX ISA / CUTLASS Swizzle<3,4,3> on a 1024-B aligned box)."""
    p = K.tile_params(ex_of(5), 0)
    r, c = np.meshgrid(np.arange(128), np.arange(128), indexing="ij")
    want = (c // 64) * 16384 + r * 128 + (((c % 64) // 8) ^ (r % 8)) * 16 + (c % 8) * 2
    got = TS.staging_addresses(p, r, c)
    assert np.array_equal(got[..., 0], want) and np.array_equal(got[..., 1], want + 1)
    assert len(np.unique(got)) == STAGING_BYTES            # every byte of the tile exactly once


@pytest.mark.parametrize("stages,ring", [(1, 1), (5, 1), (5, 0)])
def test_kernel_staging_code_is_the_exported_layout(stages, ring):
    """The epilogue writes through staging_offset(); its exported hash equals the one of the stage_* layout."""
    lay = ex_of(stages, ring)
    p = K.tile_params(lay, 0)
    assert TS.staging_layout_hash(p) == lay["staging_layout_hash"]
    for wrong in (dict(stage_swizzle=0), dict(stage_swizzle=64), dict(stage_box_cols=32)):
        assert TS.staging_layout_hash(p.with_(**wrong)) != lay["staging_layout_hash"], wrong


def test_staging_bank_model():
    """Swizzled, one STS.128 of a warp is conflict-free (4 wavefronts); unswizzled it is 8x slower (32)."""
    for w in range(4):
        for col in (0, 8, 56, 64, 120):
            assert T.staging_wavefronts(5, warp=w, col=col) == 4
    assert T.staging_wavefronts(5, swizzle=0) == 32


@pytest.mark.parametrize("stages,ring", [(1, 1), (2, 1), (3, 1), (5, 1), (6, 1), (5, 0)])
def test_emulated_tile_matches_reference(stages, ring, ring_inputs, ring_reference):
    tile, reps = T.tma_store_stage(stages, ring).emulate_tile(ring_inputs, 0, 128, prob=ring_problem(),
                                                               return_report=True)
    assert all(r.ok for r in reps), [r.issues for r in reps if not r.ok]
    np.testing.assert_allclose(tile, ring_reference[:, 128:256], rtol=2**-10, atol=1e-6)


def test_pelib_emulate_replays_the_exports_directly():
    """pelib.emulate.emulate_tile with 02's exports alone (one call, K = 1024, no alpha): its own staging and
    TMA-store path gives the FP16-rounded product, and a wrong staging swizzle breaks it."""
    from dataclasses import fields
    if "out_fmt" not in {f.name for f in fields(E.TileParams)}:
        pytest.skip("pelib.emulate's staged epilogue has no FP16 output (TileParams.out_fmt) yet")
    p = E.TileParams.from_exports(ex_of(4))
    assert p.out_fmt == 1 and p.stage_smem_offset == 0
    x = problems.NvFp4Gemm("k1024", 128, 128, 1024).make_inputs(seed=4)
    a, bb = x["a"].numpy(), x["b"].numpy()
    sfa, sfb = x["sfa"].view(torch.uint8).numpy(), x["sfb"].view(torch.uint8).numpy()
    out, rep = E.emulate_tile(p, a, bb, sfa=sfa, sfb=sfb, return_report=True)
    assert rep.ok, rep
    want = reference.nvfp4_gemm_reference(x["a"], x["sfa"], torch.ones(1), x["b"], x["sfb"], torch.ones(1))
    want = want.double().numpy()
    np.testing.assert_allclose(out, want, rtol=2**-10, atol=1e-6)
    bad = E.emulate_tile(p.with_(stage_swizzle=0), a, bb, sfa=sfa, sfb=sfb)
    assert not np.allclose(bad, want, rtol=2**-10, atol=1e-6)


def test_02_emulates_exactly_like_01(ring_inputs):
    """Same accumulator, same rounding: the staging and the TMA store move bytes, they change none."""
    t1 = nvfp4.stage("01_pipelined", 3).emulate_tile(ring_inputs, 0, 128, prob=ring_problem())
    t2 = T.tma_store_stage(3).emulate_tile(ring_inputs, 0, 128, prob=ring_problem())
    assert np.array_equal(t1, t2)


def test_second_row_block():
    r = nvfp4.emulate_check(STAGE, 3, problem=problems.NvFp4Gemm("tall", 256, 128, 1024), tile=(1, 0))
    assert r["ok"], r


def _acc_and_params(stages=2):
    rng = np.random.default_rng(5)
    acc = rng.normal(size=(128, 128)) * 4
    p = K.tile_params(ex_of(stages), 0)
    return acc, p


@pytest.mark.parametrize("wrong", [0, 32, 64])
def test_wrong_staging_swizzle_is_caught(wrong, ring_inputs):
    """The epilogue writes with another swizzle than the C map reads: the emulator's tile is wrong."""
    r = nvfp4.emulate_check(STAGE, 2, overrides={"stage_swizzle": wrong})
    assert not r["ok"] and r["elements_off_by_more_than_1ulp"] > 1000 and r["max_abs_err"] > 0.1
    assert any("swizzle" in i for i in r["issues"])
    # Not a lint alone: the numbers are scrambled within each 128-B row of a box, not lost.
    acc, p = _acc_and_params()
    prob = problems.NvFp4Gemm("one", 128, 128, 256)
    good = TS.emulate_staged_epilogue(p, acc, 1.0, prob)
    rep = E.TileReport()
    bad = TS.emulate_staged_epilogue(p.with_(stage_swizzle=wrong), acc, 1.0, prob, report=rep)
    assert not np.array_equal(good, bad)
    rows_good = np.sort(good.reshape(128, 2, 64), axis=-1)
    rows_bad = np.sort(bad.reshape(128, 2, 64), axis=-1)
    assert np.array_equal(rows_good, rows_bad)


def test_the_check_would_miss_nothing_the_numbers_do_not_show():
    """Without the lint line, the comparison alone still fails the wrong swizzle."""
    acc, p = _acc_and_params()
    prob = problems.NvFp4Gemm("one", 128, 128, 256)
    want = (np.float32(1.0) * acc.astype(np.float32)).astype(np.float16).astype(np.float64)
    assert np.array_equal(TS.emulate_staged_epilogue(p, acc, 1.0, prob), want)
    assert not np.array_equal(TS.emulate_staged_epilogue(p.with_(stage_swizzle=0), acc, 1.0, prob), want)


def test_consistent_unswizzled_layout_is_correct_but_conflicted():
    """Both sides unswizzled is a correct layout (the emulated store agrees) - the bank model objects; and
    exports saying so for this kernel disagree with its code (staging_offset swizzles)."""
    acc, p = _acc_and_params()
    prob = problems.NvFp4Gemm("one", 128, 128, 256)
    want = (np.float32(1.0) * acc.astype(np.float32)).astype(np.float16).astype(np.float64)
    rep = E.TileReport()
    assert np.array_equal(TS.emulate_staged_epilogue(p.with_(stage_swizzle=0, out_swizzle=0), acc, 1.0, prob,
                                                        report=rep), want)
    assert rep.ok, rep.issues
    assert T.staging_wavefronts(2, swizzle=0) == 8 * T.staging_wavefronts(2)
    r = nvfp4.emulate_check(STAGE, 2, overrides={"stage_swizzle": 0, "out_swizzle": 0})
    assert not r["ok"] and r["elements_off_by_more_than_1ulp"] == 0
    assert any("staging_layout_hash" in i for i in r["issues"])


def test_wrong_box_width_leaves_staging_bytes_unread_or_unwritten():
    r = nvfp4.emulate_check(STAGE, 2, overrides={"stage_box_cols": 32})
    assert not r["ok"] and any("no epilogue thread wrote" in i for i in r["issues"])
    r = nvfp4.emulate_check(STAGE, 2, overrides={"stage_swizzle": 64, "out_swizzle": 64})
    assert not r["ok"] and "exceeds the 64B swizzle span" in r["error"]


def test_store_coordinates(monkeypatch):
    """Box b of tile (m, n) goes to (n*128 + 64b, m*128); a wrong formula writes outside the tile."""
    assert TS.c_box_coords(1, 2, 3) == (3 * 128 + 64, 2 * 128)
    acc, p = _acc_and_params()
    prob = problems.NvFp4Gemm("wide", 256, 384, 256)
    rep = E.TileReport()
    TS.emulate_staged_epilogue(p, acc, 1.0, prob, 1, 2, rep)
    assert rep.ok, rep.issues
    monkeypatch.setattr(TS, "c_box_coords", lambda b, m, n, tm=128, tn=128, bc=64: (n * tn + 96 * b, m * tm))
    rep = E.TileReport()
    TS.emulate_staged_epilogue(p, acc, 1.0, prob, 1, 1, rep)
    assert not rep.ok and any("outside tile" in i for i in rep.issues) and rep.uncovered_outputs > 0


def test_epilogue_sass_listing():
    two = T.epilogue_sass(STAGE, 5).splitlines()
    one = T.epilogue_sass("01_pipelined", 5).splitlines()
    assert sum("STG.E.128" in l for l in one) == 4 and not any("UTMASTG" in l for l in one)
    assert sum("UTMASTG.2D" in l for l in two) == 2 and not any("STG.E" in l for l in two)
    assert "LDTM" in two[0] and "BAR.SYNC" in two[-1]


def test_replay_table_shows_good_and_wrong_layouts():
    t = T.tma_store_replay_table(counts=(2,))
    assert {r["case"]: r["kernel code = exports"] for r in t.rows}["NUM_STAGES=2"] == "yes"
    got = {r["case"]: r["matches the reference"] for r in t.rows}
    assert got["NUM_STAGES=2"] == "yes" and got["NUM_STAGES=5, STAGING_IN_RING=0"] == "yes"
    assert all(v == "NO" for k, v in got.items() if k.startswith("wrong"))
    assert "emulated" in t.caption


# ---- tensor maps and the launch boundary -------------------------------------------------------------------

@pytest.mark.parametrize("shape", nvfp4.SHAPES)
def test_tensor_map_specs_include_the_output(shape):
    prob = problems.nvfp4_gemm(shape)
    specs = T.tma_store_stage(5).tensor_map_specs(prob)
    c = specs["c"]
    assert c.dtype == "float16" and c.shape == (prob.m, prob.n) and c.box_shape == (128, 64) and c.swizzle == 128
    assert c.inner_box_bytes == 128 and c.problems() == []
    assert sum(s.box_bytes for k, s in specs.items() if k != "c") == STAGE_BYTES     # expect_tx unchanged
    assert "c" not in nvfp4.stage("01_pipelined", 5).tensor_map_specs(prob)


def test_plan_binds_the_output_map_to_out():
    prob = problems.nvfp4_gemm("k2048")
    x = prob.make_inputs(0)
    specs = T.tma_store_stage(5).tensor_map_specs(prob, x)
    assert specs["c"].address == x["out"].data_ptr() and specs["c"].dtype == "float16"
    assert specs["a"].address == x["a"].data_ptr()


@pytest.mark.parametrize("shape,grid", [("k16384", (56, 1, 1)), ("k7168", (32, 1, 1)), ("k2048", (56, 1, 1))])
def test_launch_is_prepared_up_to_the_gpu(shape, grid, b200):
    """02's fifth argument is tmap_c, bound by name: the encoded output map, by value."""
    from pelib import launch, tma
    from pelib.stage import StageError
    s = T.tma_store_stage(5)
    prob = s.problem(shape)
    cfg = s.launch_config(prob)
    maps = {k: tma.TensorMap(v, cumap=object()) for k, v in s.tensor_map_specs(prob).items()}
    t = {"gsa": torch.tensor([0.5]), "gsb": torch.tensor([1.0])}
    lp = launch.prepare(s.build, s.args(prob, t, maps), grid=cfg.grid, block=cfg.block, smem=cfg.smem, info=b200)
    assert lp.grid == grid and lp.block == (128, 1, 1) and lp.cluster == (1, 1, 1)
    assert lp.smem == s.exports["smem_bytes"] == 185472
    assert lp.kernel == "nvfp4_gemm" and len(lp.args) == 9
    assert all(lp.arg_desc[i].startswith("tmap[") for i in range(5))      # a, b, sfa, sfb, c
    assert lp.args[4] is maps["c"].cumap                                 # the encoded CUtensorMap, by value
    assert [type(v) for v in lp.args[5:]] == [np.float32, np.uint32, np.uint32, np.uint32]
    with pytest.raises(StageError, match="tmap_c"):
        s.args(prob, t, {k: v for k, v in maps.items() if k != "c"})


def test_launch_needs_sm100_here():
    from pelib import device
    if device.can_run("sm_100a"):
        pytest.skip("an sm_100 GPU is here")
    with pytest.raises(device.UnsupportedGPU):
        T.tma_store_stage(2).run("small")


# ---- the pitch's claims and the Hopper measurement --------------------------------------------------------

def test_pitch_estimates_are_labelled_as_claims():
    t = T.pitch_estimates_table()
    assert "recorded (claim of nvfp4-dual-gemm-tma-store-epilogue-pitch.md)" in t.caption
    totals = {r["epilogue"]: r["cycles (claimed)"] for r in t.rows if r["operation"] == "total"}
    assert totals == {"SIMT": 510, "TMA store": 130}
    fig = T.pitch_estimates_figure()
    assert "recorded (claim of nvfp4-dual-gemm-tma-store-epilogue-pitch.md)" in fig.axes[0].get_title()
    ctx = T.pitch_in_context(clock_ghz=(1.0, 2.0))
    assert "modelled" in ctx.caption
    row = next(r for r in ctx.rows if r["shape"] == "k16384")
    assert row["saving if the claim holds (µs)"] == "0.19–0.38"      # 380 cycles at 2 and 1 GHz


def _sweep(tmp_path, name, date, variants, facts=()):
    data = {"env": {"device": "NVIDIA H100 80GB HBM3", "date": date}, "facts": list(facts), "variants": variants}
    run = tmp_path / f"{date[:10]}-h100"
    run.mkdir(exist_ok=True)
    (run / name).write_text(json.dumps(data))


def test_hopper_results_none(tmp_path):
    assert results.latest_sweep(tmp_path) is None
    res = [results.VariantResult(k, d, w, "no sweep") for k, d, w in T.HOPPER_TMA_STORE]
    assert [r.status for r in res] == ["no sweep", "no sweep"]
    assert all(r.evidence.startswith("not yet measured") for r in res)
    assert T.hopper_tma_store_speedup(res) is None


def test_hopper_results_newest_and_labelled(tmp_path):
    old = [{"key": "03", "defines": {}, "label": "03_staged_epilogue", "ok": True, "median_ms": 9.0}]
    _sweep(tmp_path, "hopper-sweep-2026-11-01T000000-x.json", "2026-11-01T00:00:00+00:00", old)
    new = [{"key": "03", "defines": {"EPI_TMA_STORE": 1}, "label": "03_staged_epilogue", "ok": True,
            "median_ms": 0.80, "p10_ms": 0.79, "p90_ms": 0.82},
           {"stage": "sm90/03_staged_epilogue", "defines": {"EPI_TMA_STORE": 0},
            "label": "03_staged_epilogue EPI_TMA_STORE=0", "ok": True, "median_ms": 0.84}]
    _sweep(tmp_path, "hopper-sweep-2026-11-24T101010-x.json", "2026-11-24T10:10:10+00:00", new,
           facts=[{"label": "03_staged_epilogue", "UTMASTG": 4, "STG": 0}])
    sw = results.latest_sweep(tmp_path)
    tma, simt = T.hopper_tma_store_results(sw)
    assert tma.measured and tma.median_ms == 0.80 and tma.evidence == "measured (NVIDIA H100 80GB HBM3, 2026-11-24)"
    assert simt.measured and simt.median_ms == 0.84 and tma.facts["UTMASTG"] == 4
    assert T.hopper_tma_store_speedup([tma, simt]) == pytest.approx(0.84 / 0.80)
    t = T.hopper_tma_store_table(sw)
    assert t.rows[0]["time (µs)"] == "800.0" and "measured" in t.rows[1]["evidence"]
    line = T.hopper_tma_store_summary([tma, simt])
    assert "800.0 µs" in line and "840.0 µs" in line and "5.0 % faster" in line and "2026-11-24" in line
    assert "repeat" not in line                       # the sweep had no second pass
    again = [results.VariantResult(**{**r.__dict__, "repeat_ms": ms}) for r, ms in ((tma, 0.90), (simt, 0.81))]
    assert "repeat pass: 900.0 vs 810.0 µs, 10.0 % slower" in T.hopper_tma_store_summary(again)
    bad = [tma, results.VariantResult("sm90/03_staged_epilogue", {"EPI_TMA_STORE": 0}, "", "measured", median_ms=0.7,
                                      verified=False, device="H100", date="2026-11-24")]
    assert T.hopper_tma_store_speedup(bad) is None and "verification FAILED" in T.hopper_tma_store_summary(bad)


def test_hopper_results_failed_and_absent(tmp_path):
    v = [{"key": "03", "defines": {}, "label": "03_staged_epilogue", "ok": False,
          "error": "KernelFault: patch_embed_sm90 [sm_90a] grid=(4, 1, 1) CTAs, cluster=(2, 1, 1)"}]
    _sweep(tmp_path, "hopper-sweep-2026-11-23T052612-x.json", "2026-11-23T05:26:12+00:00", v)
    tma, simt = T.hopper_tma_store_results(results.latest_sweep(tmp_path))
    assert tma.status == "failed" and "KernelFault" in tma.evidence and "grid=" not in tma.evidence
    assert simt.status == "absent" and tma.evidence.startswith("not yet measured")
    assert T.hopper_tma_store_table(results.latest_sweep(tmp_path)).rows[0]["time (µs)"] == "—"


def test_the_committed_sweep_is_read_as_written():
    """The chapter's numbers are the committed sweep's: each variant the reader reports is the entry of the
    newest JSON under results/ (its median, its device), and the sentence quotes exactly those times."""
    sw = T.hopper_tma_store_sweep()
    assert sw is not None, "results/ holds the H100 sweeps the chapter quotes"
    assert results.latest_sweep(having=[("sm90/03_staged_epilogue", {"EPI_TMA_STORE": 0}, {"EPI_TMA_STORE": 1})])["_path"] == sw["_path"]
    res = T.hopper_tma_store_results()
    line = T.hopper_tma_store_summary(res)
    entries = [results.find_variant(sw, st, d, {"EPI_TMA_STORE": 1}) for st, d, _ in T.HOPPER_TMA_STORE]
    assert all(entries) and entries[0] is not entries[1], "the newest sweep ran both epilogues"
    for r, entry in zip(res, entries):
        assert r.status == "measured" and r.median_ms == entry["median_ms"] and r.device == sw["env"]["device"]
        assert f"{entry['median_ms'] * 1e3:.1f} µs" in line


def test_live_table_says_not_measured_without_b200():
    if nvfp4.live():
        pytest.skip("a B200 is here")
    t = T.tma_store_live_table()
    assert all(r["evidence"].startswith("not yet measured") for r in t.rows)


# ---- on a GPU ----------------------------------------------------------------------------------------------

needs_sm100 = pytest.mark.skipif(not nvfp4.live(), reason="needs an sm_100 GPU (B200)")


@pytest.mark.gpu
@needs_sm100
@pytest.mark.parametrize("stages", (1, 2, 3, 4, 5, 6))
def test_gpu_matches_reference_small(stages):
    r = T.tma_store_stage(stages).run(ring_problem(), time=False)
    assert r["ok"], str(r["verify"])


@pytest.mark.gpu
@needs_sm100
@pytest.mark.parametrize("shape", nvfp4.SHAPES)
def test_gpu_matches_reference_lab_shapes(shape):
    r = T.tma_store_stage(5).run(shape, time=False)
    assert r["ok"], str(r["verify"])


@pytest.mark.gpu
@needs_sm100
def test_gpu_tile_matches_emulation_and_01():
    prob = ring_problem()
    x = prob.make_inputs(seed=3, device="cuda")
    T.tma_store_stage(3).run(prob, inputs=x, time=False)
    got2 = x["out"].clone()
    nvfp4.stage("01_pipelined", 3).run(prob, inputs=x, time=False)
    assert torch.equal(got2, x["out"]), "01 and 02 differ only in how the same FP16 bytes reach memory"
    cpu = {k: v.cpu() for k, v in x.items()}
    tile = T.tma_store_stage(3).emulate_tile(cpu, 0, 128, prob=prob)
    got = got2[:, 128:256].double().cpu().numpy()
    ulp = np.abs(np.spacing(tile.astype(np.float16)).astype(np.float64))
    assert np.all(np.abs(got - tile) <= ulp)


@pytest.mark.gpu
def test_gpu_driver_accepts_the_five_tensor_maps():
    """On any CUDA GPU: cuTensorMapEncodeTiled takes 02's maps, the FP16 output map with SWIZZLE_128B included."""
    prob = problems.nvfp4_gemm("k7168")
    x = prob.make_inputs(0, device="cuda")
    from pelib import tma
    s = T.tma_store_stage(5)
    maps = {k: tma.encode(v, owner=s.kind.map_owner(k, x)) for k, v in s.tensor_map_specs(prob, x).items()}
    assert set(maps) == {"a", "b", "sfa", "sfb", "c"}
    assert maps["c"].spec.address == x["out"].data_ptr() and maps["c"].spec.dtype == "float16"
