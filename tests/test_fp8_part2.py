"""FP8 stages 05-09: budgets, SASS, exports, emulated tiles, staging, schedule, protocol, host side, diffs."""
import re

import numpy as np
import pytest

from pelib import build as B
from pelib import device, fp8, problems, staging, stages
from pelib import fp8_persistent as P

NAMES = P.stage_names()
SMEM_LIMIT = 227 * 1024            # per-block opt-in limit on sm_100 (232,448 B)
FINAL = "09_persistent_megakernel"
SIGLIP = problems.patch_embed("siglip2")


@pytest.fixture(scope="module", params=NAMES)
def built(request):
    return request.param, P.build(request.param)


def ops(b):
    return B._sass.opcode_histogram(b.sass, modifiers=True)


# ---- the files ----------------------------------------------------------------------------

def test_stage_files_follow_part_one():
    files = [p.stem for p in stages.family_stages("fp8")]
    after = files[files.index("04_independent_polling") + 1:]
    assert [f for f in after if f in NAMES] == NAMES
    assert after[after.index("08_unroll") + 1:after.index(FINAL)] == ["08a_persistent_tiles", "08b_double_staging"]
    chain = ["04_independent_polling"] + NAMES
    for prev, cur in zip(chain, chain[1:]):
        assert P.STAGES[cur].previous == prev


@pytest.mark.parametrize("name", NAMES)
def test_stage_opens_with_what_why_recorded(name):
    h = stages.read_header(f"fp8/{name}.cu")
    assert h.number == name[:2] and h.parent and h.what and h.why and "B200" in h.recorded
    r = P.STAGES[name].recorded
    assert r.commit in h.recorded and r.source in h.recorded


@pytest.mark.parametrize("name", NAMES)
def test_stages_share_one_signature(name):
    src = P.STAGES[name].path.read_text()
    sig = re.search(r"patch_embed\((.*?)\)\s*\{", src, re.S).group(1)
    assert tuple(re.split(r"[\s*]+", p.strip())[-1] for p in sig.split(",")) == fp8.SIGNATURE


def test_lookup():
    assert P.stage("07").name == "07_smem_staged_epilogue"
    assert P.stage("fp8/09_persistent_megakernel.cu").name == FINAL
    assert P.stage("04").name == "04_independent_polling"   # part one, through pelib.fp8
    with pytest.raises(fp8.StageError):
        P.stage("42")


# ---- compiled facts -----------------------------------------------------------------------

def test_budgets(built):
    name, b = built
    f = b.facts
    assert f.spills == 0, f"{name} spills {f.spills} B"
    assert f.registers <= 255
    assert b.exports["smem_bytes"] + f.smem_static <= SMEM_LIMIT
    assert b.exports["num_threads"] == 32 * (2 + b.exports["epi_warps"])


def test_final_kernel_budget():
    b = P.build(FINAL)
    assert b.facts.registers <= 232 and b.facts.spills == 0


def test_timing_build_budget():
    b = P.build(FINAL, {"TIMING": 1})
    assert b.facts.registers <= 255 and b.facts.spills == 0
    assert b.exports["timing_phases"] == 9 and b.exports["timing_warps"] >= b.exports["num_threads"] // 32


def test_exports_complete(built):
    name, b = built
    P.layout(name)      # raises naming what is missing


def test_sass_is_the_2cta_form(built):
    name, b = built
    h = ops(b)
    assert h.get("UTCQMMA.2CTA", 0) == b.exports["block_k"] // b.exports["mma_k"]
    assert h.get("UTCQMMA", 0) == 0 and not any(op.startswith("UTCHMMA") for op in h)
    assert {"UTMALDG.2D.2CTA", "UTCBAR.2CTA.MULTICAST"} <= set(h)
    assert f"{b.exports['idesc']:#x}" in b.sass


# ---- 05: epilogue warps -------------------------------------------------------------------

@pytest.mark.parametrize("warps", P.EPI_WARP_OPTIONS)
def test_epi_warps_sweep_builds(warps):
    b = P.build("05", {"NUM_EPI_WARPS": warps})
    assert b.facts.spills == 0 and b.exports["epi_warps"] == warps
    assert P.check_epi_map(b.exports) == []
    # one unrolled copy of the loop per column range: [0,256) for 4 warps, plus [0,128) and [128,256)
    assert fp8.sass_facts(b)["LDTM"] == (8 if warps == 4 else 16)


def test_epi_map_obeys_the_lane_quarter_rule():
    ex = P.build("05", {"NUM_EPI_WARPS": 6}).exports
    cols = P.epi_columns(ex)
    assert cols == {2: (0, 128), 3: (0, 128), 4: (0, 256), 5: (0, 256), 6: (128, 256), 7: (128, 256)}
    assert P.epi_columns(P.build("05").exports)[6] == (128, 256)


def test_epi_map_check_catches_a_gap():
    ex = dict(P.build("05").exports)
    ex["epi_cols_w6"] = 128 | (192 << 16)
    assert any("never read" in i or "end at" in i for i in P.check_epi_map(ex))


def test_too_many_or_few_warps_is_a_compile_error():
    with pytest.raises(B.BuildError, match="NUM_EPI_WARPS"):
        P.build("05", {"NUM_EPI_WARPS": 3})


def test_runtime_bounds_put_an_exit_test_after_every_step():
    """F4 as this compiler shows it: run-time bounds leave a conditional exit between every two TMEM
    loads and no comb load hoisted across it; templated bounds leave straight-line code."""
    from pelib import sass_account as SA

    rt = SA.gaps(B.build("fp8/variants/05_f4_runtime_bounds.cu", "sm_100a").sass, "LDTM")
    tpl = SA.gaps(P.build("05").sass, "LDTM")
    assert len(rt) == 7 and all(g["branches"] for g in rt) and max(g["LDG"] for g in rt) == 4
    assert len(tpl) == 15 and sum(1 for g in tpl if g["branches"]) <= 2 and max(g["LDG"] for g in tpl) > 4
    assert not SA.loops_containing(P.build("05").sass, "LDTM")


# ---- 06: pipeline depth -------------------------------------------------------------------

def test_stage_sweep_changes_smem_only():
    bs = {n: P.build("06", {"NUM_STAGES": n}) for n in P.STAGE_OPTIONS}
    smem = {n: b.exports["smem_bytes"] for n, b in bs.items()}
    assert smem[5] - smem[4] == smem[6] - smem[5] == 32768 + 16    # one stage + its two mbarriers
    assert smem[4] < 132 * 1024 and smem[6] > 192 * 1024
    assert P.build("06").exports["num_stages"] == 4
    assert len({b.facts.registers for b in bs.values()}) == 1, "stage and parity come from the k-block counter"


def test_six_stages_leave_no_room_for_staging():
    with pytest.raises(B.BuildError, match="227 KB"):
        P.build("07", {"NUM_STAGES": 6})
    with pytest.raises(B.BuildError, match="227 KB"):
        P.build("07", {"NUM_EPI_WARPS": 6})


# ---- 07/08: staging -----------------------------------------------------------------------

@pytest.mark.parametrize("name, warps", [("07", 5), ("07", 4), ("08", 5), ("09", 4), ("09", 5)])
def test_every_output_written_exactly_once(name, warps):
    ex = P.build(name, {"NUM_EPI_WARPS": warps}).exports
    lay = staging.StagingLayout.from_exports(ex)
    p1, rep = staging.trace(lay)
    assert rep.ok, rep.issues
    assert rep.written_once == 128 * 256
    assert len(p1["smem"]) == 128 * 256 and len(np.unique(p1["smem"])) == len(p1["smem"])
    # each BF16 lands on the row and column of the accumulator it came from
    assert (p1["out_row"] == p1["tmem_lane"]).all() and (p1["out_col"] == p1["col"]).all()
    vals = np.random.default_rng(1).integers(0, 1 << 16, (128, 256), dtype=np.uint16)
    out, _ = staging.run(lay, vals, ex["smem_bytes"])
    assert (out == vals).all()


def test_staging_layout_rejects_impossible_pitch():
    ex = P.build("07").exports
    with pytest.raises(staging.StagingError, match="row"):
        staging.StagingLayout.from_exports(ex, pitch=272)


def test_staging_model_catches_buffers_that_overlap():
    import dataclasses

    lay = staging.StagingLayout.from_exports(P.build("07").exports)
    assert staging.trace(lay)[1].ok
    bad = dataclasses.replace(lay, warp_bytes=8192)      # buffers 8 KB apart: neighbours overwrite rows
    rep = staging.trace(bad)[1]
    assert not rep.ok and rep.smem_overlaps
    with pytest.raises(staging.StagingError, match="do not fit"):
        bad.validate()


def test_padding_removes_bank_conflicts():
    ex = P.build("07").exports
    lay = staging.StagingLayout.from_exports(ex)
    assert staging.phase1_wavefronts(lay) == 4 and staging.phase2_wavefronts(lay) == 4
    unpadded = staging.StagingLayout.from_exports(ex, pitch=512)
    assert staging.phase1_wavefronts(unpadded) == 32
    assert staging.trace(unpadded)[1].ok, "without the pad the layout is still correct, only slower"
    half = staging.StagingLayout.from_exports(P.build("09").exports)
    assert half.pitch == 272 and staging.phase1_wavefronts(half) == 4
    assert staging.phase1_wavefronts(staging.StagingLayout.from_exports(P.build("09").exports, pitch=256)) == 32


def test_staged_stores_are_coalesced_in_sass():
    b6, b7 = P.build("06"), P.build("07")
    h6, h7 = ops(b6), ops(b7)
    assert h6.get("STS.128", 0) == 0 and h7["STS.128"] == 64     # 32 chunks x 4 vectors (full + two halves)
    assert h7["LDS.128"] > 0 and h7["STG.E.128"] < h6["STG.E.128"]


def test_unroll_8_doubles_the_copy_loop_body():
    lds = {n: ops(P.build(n, {"NUM_EPI_WARPS": 4}))["LDS.128"] for n in ("07", "08")}
    assert lds == {"07": 4, "08": 8}
    assert P.build("08").exports["phase2_unroll"] == 8 and P.build("07").exports["phase2_unroll"] == 4


def test_smem_budget_from_exports():
    t = P.smem_budget("08")
    rows = {r["part"].split(":")[0]: r["bytes"] for r in t.rows}
    ex = P.build("08").exports
    assert rows["pipeline ring"] == 4 * 32768 and rows["staging"] == 5 * 16896 == 84480
    assert rows["total (smem_bytes)"] == ex["smem_bytes"]
    assert sum(r["bytes"] for r in t.rows[:4]) == ex["smem_bytes"]
    assert "compiled" in t.caption
    cmp = P.smem_budget_vs_recorded()
    assert "recorded" in cmp.caption and cmp.rows[1]["recorded"] == "84,480"


def test_final_staging_matches_the_f24_figures():
    ex = P.build("09").exports
    assert ex["staging_warp_bytes"] == 17408 and ex["staging_pitch"] == 272 and ex["staging_halves"] == 2
    assert ex["epi_warps"] * ex["staging_warp_bytes"] == 69632


# ---- emulated tiles -----------------------------------------------------------------------

@pytest.mark.parametrize("problem, tile", [("small", (1, 0)), ("medium", (37, 2))])   # medium: K=768, the ring wraps
@pytest.mark.parametrize("name", NAMES)
def test_emulated_tile_matches_reference(name, problem, tile):
    r = P.emulate_check(name, problem=problem, seed=3, tile=tile)
    assert r["report_ok"], r["issues"]
    assert r["within_1ulp"], r


@pytest.mark.parametrize("warps", [5, 6])
def test_emulated_split_warps(warps):
    r = P.emulate_check("05", defines={"NUM_EPI_WARPS": warps}, seed=2)
    assert r["within_1ulp"] and r["report_ok"]


def test_emulated_second_accumulator_far_tile():
    r = P.emulate_check(FINAL, problem="medium", seed=5, tile=(37, 2), acc_buf=1)
    assert r["within_1ulp"] and r["report_ok"] and r["staged"]["ok"]
    with pytest.raises(fp8.StageError, match="acc_buf"):
        P.emulate_check(FINAL, acc_buf=2)


def test_emulation_catches_a_wrong_accumulator_stride():
    from pelib import emulate

    with pytest.raises(emulate.EmulationError, match="TMEM columns"):
        ex = P.build(FINAL).exports
        P.emulate_check(FINAL, acc_buf=1, overrides={"tmem_acc_col": 2 * ex["tmem_acc_stride"],
                                                     "epilogue_map": P.epilogue_map(ex, 2 * ex["tmem_acc_stride"])})


def test_emulation_catches_a_wrong_column_split():
    ex = P.build("05").exports
    wrong = dict(ex)
    wrong["epi_cols_w6"] = 0 | (128 << 16)          # warp 6 redoes warp 2's half
    r = P.emulate_check("05", overrides={"epilogue_map": P.epilogue_map(wrong, 0)})
    assert not r["within_1ulp"] or not r["report_ok"]


def test_emulation_goes_through_the_staging():
    r = P.emulate_check("07", staging_overrides={"pitch": 512})      # unpadded: slower, still right
    assert r["within_1ulp"] and r["staged"]["ok"]
    with pytest.raises(staging.StagingError, match="row"):
        P.emulate_check("07", staging_overrides={"pitch": 496})    # a 512-B row does not fit


# ---- 09: schedule, launch, protocol -------------------------------------------------------

def test_persistent_launch_config():
    cfg = P.launch_config(FINAL, SIGLIP, sm_count=148)
    assert cfg.persistent and cfg.grid == (148, 1, 1) and cfg.clusters == 74 and cfg.tiles == 10878
    assert cfg.tiles_per_cluster == (147, 147) and cfg.block == (192, 1, 1) and cfg.cluster == (2, 1, 1)
    assert P.launch_config(FINAL, SIGLIP, sm_count=132).clusters == 66
    small = problems.patch_embed("small")
    assert P.launch_config(FINAL, small, sm_count=148).clusters == 2      # never more clusters than tiles
    assert P.launch_config(FINAL, small, sm_count=2).clusters == 1
    with pytest.raises(fp8.StageError, match="SMs"):
        P.launch_config(FINAL, small, sm_count=1)
    assert "74 clusters" in cfg.describe()


def test_nonpersistent_stages_launch_one_cluster_per_tile():
    cfg = P.launch_config("08", SIGLIP)
    assert cfg.grid == (2 * 10878, 1, 1) and not cfg.persistent and cfg.block == (224, 1, 1)


def test_static_schedule_covers_every_tile_once():
    cfg = P.launch_config(FINAL, problems.patch_embed("medium"), sm_count=148)
    sched = P.schedule(cfg)
    flat = sorted(t for c in sched for t in c)
    assert flat == list(range(cfg.tiles))
    assert max(map(len, sched)) - min(map(len, sched)) <= 1


def test_scheduler_header_compiles_for_hopper_too(tmp_path):
    src = tmp_path / "s.cu"
    src.write_text('#include "common/scheduler.cuh"\n'
                   'extern "C" __global__ void k(int* out, int total) {\n'
                   '  PipelineState<4> ring; int n = 0;\n'
                   '  for (PersistentTileScheduler<2> s(blockIdx.x, gridDim.x, total, 3); s.valid(); s.advance()) {\n'
                   '    const TileCoord c = s.coord(0, 128, 256, 2); ring.advance();\n'
                   '    n += c.m0 + c.n0 + s.acc_buf() + s.acc_phase() + ring.index + ring.phase; }\n'
                   '  out[threadIdx.x] = n; }\n')
    for arch in ("sm_90a", "sm_100a"):
        assert B.build(src, arch, cache=False).facts.spills == 0


def test_protocol_model_holds():
    for kw in ({}, {"stages": 2, "tiles": 9}, {"stages": 6}, {"acc_bufs": 1, "tiles": 5}, {"epi_warps": 5}):
        r = P.protocol_check(**kw)
        assert r["ok"], r


@pytest.mark.parametrize("bug", list(P.PROTOCOL_BUGS))
def test_protocol_model_catches_planted_bugs(bug):
    assert not P.protocol_check(bug=bug)["ok"]


# ---- host side ------------------------------------------------------------------------------

def test_tensor_maps_and_args():
    prob = problems.patch_embed("small")
    t = prob.make_inputs()
    specs = P.tensor_map_specs(FINAL, prob, t)
    ex = P.build(FINAL).exports
    assert specs["a"].box == (128, 128) and specs["b"].box == (128, 128)
    assert specs["a"].box_bytes + specs["b"].box_bytes == ex["a_stage_bytes"] + ex["b_stage_bytes"]
    args = P.kernel_args(prob, specs, t)
    assert len(args) == len(fp8.SIGNATURE) and args[7] is None


def test_tables_are_labelled():
    assert "compiled" in P.stage_table().caption
    assert all(r["evidence"].startswith("recorded") for r in P.recorded_table().rows)
    t = P.sweep_table("07", "NUM_STAGES", (4, 5, 6))
    assert t.rows[2]["registers"] == "—" and "227 KB" in t.rows[2]["note"]
    assert "compiled" in P.epi_map_table("05").caption


@pytest.mark.skipif(device.can_run("sm_100a"), reason="this machine runs sm_100a")
def test_run_refuses_other_gpus():
    with pytest.raises(device.UnsupportedGPU):
        P.run("07", problem="small")


# ---- diffs --------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b, added, removed", [
    ("04_independent_polling", "05_epi_warps", "drain<TN / 2, TN>(", "for (int c = 0; c < TN / TMEM_LD_COLS; ++c) {"),
    ("05_epi_warps", "06_stages", "#define NUM_STAGES 4", "#define NUM_STAGES 6"),
    ("06_stages", "07_smem_staged_epilogue", "stage_copy_out<", "fuse_store<TMEM_LD_COLS>(acc, cb, out_ptr + c);"),
    ("07_smem_staged_epilogue", "08_unroll", "PHASE2_UNROLL = 8", "PHASE2_UNROLL = 4"),
    ("08_unroll", "08a_persistent_tiles", "PersistentTileScheduler<ACC_BUFS> sched(", "mma_done, 0, 3);"),
    ("08a_persistent_tiles", "08b_double_staging", "stage_copy_some<H, COPIES_PER_LOAD>(", "#define NUM_EPI_WARPS 5"),
    ("08b_double_staging", FINAL, "u64* acc_empty) {", "PE_DEVICE u64 drain(u32 t_row, const u16* comb_ptr, u32 stage_buf"),
])
def test_diff_is_the_lesson(a, b, added, removed):
    d = stages.diff(f"fp8/{a}.cu", f"fp8/{b}.cu", skip_header=True)
    plus = [line for line in d.splitlines() if line.startswith("+") and not line.startswith("+++")]
    minus = [line for line in d.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert any(added in line for line in plus) and any(removed in line for line in minus)


def test_one_line_ideas_have_one_line_diffs():
    assert stages.diff_stats("fp8/05_epi_warps.cu", "fp8/06_stages.cu") == {"added": 1, "removed": 1}
    assert stages.diff_stats("fp8/07_smem_staged_epilogue.cu", "fp8/08_unroll.cu") == {"added": 1, "removed": 1}


# ---- on a B200 ----------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_stage_verifies_on_b200(name):
    if not device.can_run("sm_100a"):
        pytest.skip("needs an sm_100 GPU (B200)")
    r = P.run(name, problem="medium", time=False)
    assert r["ok"], str(r["verify"])


@pytest.mark.gpu
@pytest.mark.parametrize("warps", [4, 6])
def test_epi_warp_variants_verify_on_b200(warps):
    if not device.can_run("sm_100a"):
        pytest.skip("needs an sm_100 GPU (B200)")
    assert P.run("05", problem="medium", time=False, defines={"NUM_EPI_WARPS": warps})["ok"]


@pytest.mark.gpu
def test_timing_build_records_on_b200():
    if not device.can_run("sm_100a"):
        pytest.skip("needs an sm_100 GPU (B200)")
    t = P.run_timing(FINAL, problem="medium")
    s = t.summary()
    for phase in ("kloop", "tma_wait", "epi_wait", "acc_wait", "epi_phase1", "epi_phase2"):
        assert phase in s, f"no {phase} records"
    assert s["kloop"]["avg"] > 0 and s["epi_phase1"]["avg"] > 0


# ---- chapter helpers ----------------------------------------------------------------------

def test_sweep_widgets_have_a_static_fallback():
    for which, value, key in (("warps", 6, "epilogue warps"), ("stages", 5, "stages")):
        w = P.sweep_widget(which, live=False)
        assert w.static is not None and len(w.static.rows) == 3
        fig, point, delta = w.select(value)        # what the table above cannot show: the point marked,
        assert point.rows[0][key] == value         # its SMEM against the limit, the SASS it changes
        assert f"={value}" in " ".join(t.get_text() for t in fig.axes[0].texts)
        assert "compiled" in point.caption and "recorded" in point.caption
        assert all(r["change"] != 0 for r in delta.rows) and "compiled" in delta.caption
    assert P.epi_warps_row(6)["recorded ms"] == 0.747 and P.epi_warps_row(5)["recorded ms"] == 0.722
    assert P.stages_row(4)["recorded regs"] == 216 and P.stages_row(6)["recorded smem (KB)"] == 192
    with pytest.raises(ValueError):
        P.sweep_widget("tiles", live=False)


def test_f4_table_from_the_sass():
    rows = {r["epilogue"].split(" ")[0]: r for r in P.f4_table().rows}
    assert rows["templated"]["LDTM in SASS"] == 16 and rows["run-time"]["LDTM in SASS"] == 8
    assert rows["run-time"]["gaps between TMEM loads with a branch"] == 7


def test_timing_views_decode_a_synthetic_buffer():
    """The measured-timing table and plot on a hand-made buffer (layout and arithmetic only)."""
    import matplotlib
    matplotlib.use("Agg")
    from pelib import timing as T

    lay = T.Layout(ctas=2, warps=8, tiles=2, phases=len(T.phases()))
    buf = np.zeros((2, 8, 2, lay.phases, 2), dtype=np.int64)
    spans = {1: {"epi_wait": 100, "tma_wait": 50, "kloop": 400}, 3: {"acc_wait": 30, "epi_phase1": 300, "epi_phase2": 60}}
    for w, phs in spans.items():
        for name, d in phs.items():
            buf[:, w, :, T.phase_id(name)] = (1000, 1000 + d)
    t = T.decode(buf.reshape(-1), lay)
    rows = {(r["warp"], r["phase"]): r for r in P.timing_table(t).rows}
    assert rows[(1, P.LAB_NAMES["kloop"])]["avg"] == 400 and rows[(3, P.LAB_NAMES["epi_phase1"])]["n"] == 4
    fig = P.timing_bars(t, "synthetic test buffer")
    assert "measured" in fig.axes[0].get_title()


def test_recorded_timing_views():
    import matplotlib
    matplotlib.use("Agg")
    t = P.recorded_timing_table()
    assert {r["cycles"] for r in t.rows} >= {856, 4155, 1052, 1162, 4288}
    assert all("§" in r["source"] for r in t.rows)
    assert "recorded" in P.recorded_timing_bars().axes[0].get_title()
    assert P.timing_build_table().rows[1]["clock reads (CS2R SR_CLOCKLO)"] > 0


def test_schedule_and_barrier_tables():
    t = P.schedule_table(clusters_shown=2, tiles_shown=3, sm_count=148)
    assert [r["tile"] for r in t.rows] == [0, 74, 148, 1, 75, 149]
    assert [r["accumulator"] for r in t.rows[:3]] == [0, 1, 0] and t.rows[2]["parity"] == 1
    counts = {r["barrier"].split("[")[0]: r["count"] for r in P.barrier_table().rows}
    assert counts == {"full": 1, "empty": 1, "acc_full": 1, "acc_empty": 8}


@pytest.mark.skipif(device.can_run("sm_100a"), reason="this machine runs sm_100a")
def test_timing_run_refuses_other_gpus():
    with pytest.raises(device.UnsupportedGPU):
        P.run_timing(FINAL, problem="small")


def test_emulator_walks_the_ring():
    """The stages export their ring strides, so k-block t is emulated in slot t % num_stages."""
    from pelib import emulate

    ex = P.build("06").exports
    p = emulate.TileParams.from_exports(ex)
    assert p.a_stage_stride == ex["a_stage_bytes"] and p.num_stages == 4
    # descriptors that stay on slot 0 while TMA walks the ring read stale k-blocks
    bad = P.emulate_check("06", problem="medium", overrides={"a_desc_stage_stride": 0})   # K = 768: 6 k-blocks
    assert not bad["within_1ulp"]


def test_staging_header_builds_for_hopper(tmp_path):
    src = tmp_path / "st.cu"
    src.write_text('#include "common/staging.cuh"\n'
                   'extern "C" __global__ void k(u16* out) {\n'
                   '  extern __shared__ __align__(16) u8 sm[];\n'
                   '  using S = StagingRows<128>; const u32 buf = (u32)__cvta_generic_to_shared(sm);\n'
                   '  const u32 w[4] = {1, 2, 3, 4}; stage_put<S>(buf, threadIdx.x, 8, w); __syncwarp();\n'
                   '  stage_copy_out<S, 4>(buf, threadIdx.x, out, 768); stage_copy_some<S, 2>(buf, threadIdx.x, out, 768, 4); }\n')
    for arch in ("sm_90a", "sm_100a"):
        b = B.build(src, arch, cache=False)
        assert b.facts.spills == 0 and "STS.128" in B._sass.opcode_histogram(b.sass, modifiers=True)
