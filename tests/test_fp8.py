"""The FP8 patch-embed family (src/kernels/fp8): what only these stages share. The generic checks of every
stage file (header and parent, signature and binding, budgets, launch, maps, one emulated tile, a timed
run) are in test_stages.py.

Part one, stages 00-04: the MMA and TMEM path, SASS, descriptors, emulated tiles, host side, diffs."""
import numpy as np
import pytest

from pelib import build as B
from pelib import device, problems, stages
from pelib.layouts import staging
from pelib.kinds.base import KindError, bf16_bits, bf16_value
from pelib.kinds.fp8 import check_epi_map, epi_columns, epilogue_map
from pelib.stage import Stage, StageError
from pelib.views import fp8 as F

ALL = F.names()
NAMES = ALL[:5]
NAMES2 = ALL[5:]
FINAL = "09_persistent_megakernel"
SIGLIP = problems.patch_embed("siglip2")


@pytest.fixture(scope="module", params=NAMES)
def built(request):
    return request.param, F.build(request.param)


@pytest.fixture(scope="module", params=NAMES2, ids=NAMES2)
def built2(request):
    return request.param, F.build(request.param)


def ops(b):
    return B._sass.opcode_histogram(b.sass, modifiers=True)


# ---- the files ----------------------------------------------------------------------------

def test_the_line_is_a_line():
    """00-09 each name the one before as their parent: the FP8 line is a line, not a tree."""
    for prev, cur in zip(ALL, ALL[1:]):
        assert F.stage(cur).header.parent == f"fp8/{prev}"


@pytest.mark.parametrize("name", ALL)
def test_stage_header_retells_its_record(name):
    """The header names the lab record it retells; pelib.records has that record (the number lives there)."""
    s = F.stage(name)
    rec = s.recorded()
    if s.header.recorded.startswith("none"):       # a split sub-version (08a, 08b): its idea has no number of its own
        assert rec is None and len(s.name.split("_")[0]) == 3 and "fp8-megakernel" in s.header.recorded
        return
    assert rec is not None and rec.source.note.startswith("fp8-megakernel")
    assert rec.what.split(":")[0].split(" ")[0] in s.header.recorded


def test_the_split_persistent_stages_retell_their_own_states():
    """08b is F18's kernel state and 09 F19a's, though each header also names an older state to compare."""
    got = {n: F.stage(n).recorded() for n in ("08a_persistent_tiles", "08b_double_staging", "09_persistent_megakernel")}
    assert got["08a_persistent_tiles"] is None
    assert got["08b_double_staging"].what.startswith("F18") and got["08b_double_staging"].ms == 0.543
    assert got["09_persistent_megakernel"].what.startswith("F19a") and got["09_persistent_megakernel"].ms == 0.542


# ---- compiled facts -----------------------------------------------------------------------

def test_budgets(built):
    name, b = built
    f = b.facts
    assert f.spills == 0, f"{name} spills {f.spills} B"
    assert f.registers <= 255
    assert b.exports["smem_bytes"] + f.smem_static <= b.exports["smem_limit"]
    assert b.exports["num_threads"] == 32 * (2 + b.exports["epi_warps"])


def test_mma_opcode_in_sass(built):
    """UTCQMMA = tcgen05.mma kind::f8f6f4; .2CTA = cta_group::2 (what nvdisasm prints for sm_100a)."""
    name, b = built
    h = F.sass_facts(b)
    cg = b.exports["cta_group"]
    assert h[F.MMA_OPCODE[cg]] == b.exports["block_k"] // b.exports["mma_k"], "K loop fully unrolled"
    other = F.MMA_OPCODE[3 - cg]
    assert h[other] == 0, f"{name} mixes {other} into a cta_group::{cg} stage"
    ops = set(B._sass.opcode_histogram(b.sass, modifiers=True))
    if cg == 2:
        assert {"UTMALDG.2D.2CTA", "UTCBAR.2CTA.MULTICAST"} <= ops
        assert "UTCHMMA" not in ops and "UTCHMMA.2CTA" not in ops
    else:
        assert {"UTMALDG.2D", "UTCBAR"} <= ops


def test_sass_uses_exported_descriptors(built):
    """The instruction descriptor and the descriptors' upper words the kernel issues are the exported ones."""
    name, b = built
    ex = b.exports
    sass = b.sass
    assert f"{ex['idesc']:#x}" in sass, "idesc literal not in SASS"
    assert f"{ex['a_desc'] >> 32:#x}" in sass, "smem descriptor upper word not in SASS"


def test_tmem_loads_match_the_tile(built):
    name, b = built
    ex = b.exports
    if ex["epi_warps"] != 4:
        pytest.skip("column-split epilogues instantiate the loop more than once")
    assert F.sass_facts(b)["LDTM"] == ex["tile_n"] // ex["epi_ld_x"]


def test_independent_polling_drops_the_named_barrier():
    bars = {n: F.sass_facts(F.build(n))["BAR.SYNC"] for n in ("03_x32_loads", "04_independent_polling")}
    assert bars["03_x32_loads"] == 1 and bars["04_independent_polling"] == 0
    assert [F.build(n).exports["epi_poll_each"] for n in NAMES[:5]] == [0, 0, 0, 0, 1]


def test_stage_table_matches_builds():
    t = F.stage_table(NAMES)
    assert [r["stage"] for r in t.rows] == NAMES
    for r in t.rows:
        b = F.build(r["stage"])
        assert r["registers"] == b.facts.registers and r["spills (B)"] == b.facts.spills
        assert r["dynamic smem (B)"] == b.exports["smem_bytes"]
    assert "compiled" in t.caption


def test_defines_reach_the_build():
    b = F.build("02_tn256", {"NUM_STAGES": 4})
    assert b.exports["pipeline_stages"] == 4
    assert b.exports["smem_bytes"] < F.build("02_tn256").exports["smem_bytes"]


def test_too_many_stages_is_a_compile_error():
    with pytest.raises(B.BuildError, match="227 KB"):
        F.build("02_tn256", {"NUM_STAGES": 8})
    assert "227 KB" in F.stage("02_tn256", {"NUM_STAGES": 8}).check_compiles()


# ---- shared headers -----------------------------------------------------------------------

WRAPPERS = r'''
#include "common/tcgen05.cuh"
#include "common/epilogue.cuh"
#include "common/tile_map.cuh"
#include "common/cutensormap.cuh"
extern "C" __global__ void k1(u32* out, u64 a, u64 b, const u16* comb) {
  __shared__ u32 slot; __shared__ u64 bar;
  const u32 s = (u32)__cvta_generic_to_shared(&slot), m = (u32)__cvta_generic_to_shared(&bar);
  tcgen05_alloc<1>(s, 32); tcgen05_relinquish_alloc_permit<1>();
  tcgen05_fence_before_thread_sync(); __syncthreads(); tcgen05_fence_after_thread_sync();
  const u32 t = slot;
  tcgen05_mma_f8f6f4<1>(t, a, b, 0x8200010u, 0); tcgen05_mma_f16<1>(t, a, b, 0x8200090u, 1);
  tcgen05_commit<1>(m); tcgen05_commit_multicast<1>(m, 1);
  tcgen05_cp_32x128b_warpx4<1>(t, a);
  u32 r[16], q[32]; tcgen05_ld_32x32b_x16(t, r); tcgen05_ld_32x32b_x32(t, q); tcgen05_wait_ld(); tcgen05_wait_st();
  fuse_comb_store<16>(r, comb, (u16*)out); fuse_comb_store<32>(q, comb, (u16*)out + 64);
  const TileCoord c = cta_tile(blockIdx.x, 0, 6, 128, 128, 1); out[100] = c.m0 + c.n0;
  tcgen05_dealloc<1>(t, 32);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) k2(u32* out, u64 a, u64 b) {
  __shared__ u32 slot; __shared__ u64 bar;
  const u32 s = (u32)__cvta_generic_to_shared(&slot), m = (u32)__cvta_generic_to_shared(&bar);
  tcgen05_alloc<2>(s, 32); tcgen05_relinquish_alloc_permit<2>();
  const u32 t = slot;
  tcgen05_mma_f8f6f4<2>(t, a, b, 0x10200010u, 0); tcgen05_mma_f16<2>(t, a, b, 0x10200090u, 1);
  tcgen05_commit<2>(m); tcgen05_commit_multicast<2>(m, 3); tcgen05_cp_32x128b_warpx4<2>(t, a);
  tcgen05_dealloc<2>(t, 32);
}
'''


def test_tcgen05_wrappers_compile_to_their_opcodes(tmp_path):
    src = tmp_path / "wrappers.cu"
    src.write_text(WRAPPERS)
    b = B.build(src, "sm_100a", cache=False)
    ops = set(B._sass.opcode_histogram(b.sass, modifiers=True))
    for op in ("UTCQMMA", "UTCHMMA", "UTCBAR", "UTCBAR.MULTICAST", "LDTM", "UTCQMMA.2CTA", "UTCHMMA.2CTA",
               "UTCBAR.2CTA", "UTCBAR.2CTA.MULTICAST"):
        assert op in ops, op
    assert any(op.startswith("UTCCP") for op in ops)
    assert "F2FP.BF16.F32.PACK_AB" in ops, "cvt.rn.bf16x2.f32 is one packed conversion"


def test_tcgen05_header_refuses_hopper(tmp_path):
    src = tmp_path / "h.cu"
    src.write_text('#include "common/tcgen05.cuh"\nextern "C" __global__ void k() {}\n')
    with pytest.raises(B.BuildError, match="sm_100a"):
        B.build(src, "sm_90a", cache=False)


def test_epilogue_header_builds_for_hopper(tmp_path):
    src = tmp_path / "e.cu"
    src.write_text('#include "common/epilogue.cuh"\nextern "C" __global__ void k(const u16* c, u16* o) {\n'
                   '  u32 acc[16] = {}; fuse_comb_store<16>(acc, c + 8 * comb_row(threadIdx.x), o); }\n')
    assert B.build(src, "sm_90a", cache=False).facts.spills == 0


# ---- emulated tiles -----------------------------------------------------------------------

def test_emulated_tile_far_from_the_origin():
    """A tile in the middle of a larger problem: comb rows wrap (m % 196) and B rows are offset."""
    r = F.emulate_check("04_independent_polling", problem="medium", seed=5, tile=(37, 2))
    assert r["within_1ulp"] and r["report_ok"]


def test_emulation_catches_a_wrong_k_step():
    r = F.emulate_check("02_tn256", overrides={"k_advance_bytes": 64})
    assert not r["within_1ulp"]


def test_emulation_catches_a_wrong_descriptor_sbo():
    ex = F.build("01_cta2").exports
    bad = ex["a_desc"] & ~(0x3FFF << 32) | ((512 >> 4) << 32)
    r = F.emulate_check("01_cta2", overrides={"a_desc": bad})
    assert not r["report_ok"] or not r["within_1ulp"]


def test_bf16_round_is_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 1.0 + 2**-9], dtype=np.float32)
    assert list(bf16_value(bf16_bits(x))) == [1.0, 1.0, 1.0 + 2**-6, -2.5, 1.0]


# ---- host side (CPU, up to the launch) ------------------------------------------------------

@pytest.mark.parametrize("name, ctas, tiles, cluster, b_rows", [
    ("00_ws_cta1", 7252 * 6, 7252 * 6, (1, 1, 1), 128),
    ("01_cta2", 2 * 3626 * 6, 3626 * 6, (2, 1, 1), 64),
    ("02_tn256", 2 * 3626 * 3, 10878, (2, 1, 1), 128),   # 10,878 tiles: the experiment log's count
    ("04_independent_polling", 2 * 3626 * 3, 10878, (2, 1, 1), 128),
])
def test_launch_config_and_maps(name, ctas, tiles, cluster, b_rows):
    cfg = F.launch_config(name, SIGLIP)
    ex = F.build(name).exports
    assert cfg.grid == (ctas, 1, 1) and cfg.work[0] == tiles and cfg.cluster == cluster
    assert cfg.block == (192, 1, 1) and cfg.smem == ex["smem_bytes"]
    assert cfg.grid[0] % cfg.cluster[0] == 0
    specs = F.stage(name).tensor_map_specs(SIGLIP)
    a, b = specs["a"], specs["b"]
    assert a.dtype == b.dtype == "uint8" and a.swizzle == b.swizzle == 128
    assert a.dims == (768, 928256) and a.strides == (768,) and a.box == (128, 128)
    assert b.dims == (768, 768) and b.box == (128, b_rows)
    assert a.inner_box_bytes == 128, "one 128-B swizzle row of K per box"
    # the producer's expect_tx is the bytes of the two boxes (per CTA)
    assert a.box_bytes + b.box_bytes == ex["a_stage_bytes"] + ex["b_stage_bytes"]


def test_stage_lookup_and_gpu_refusal():
    assert F.stage("03").name == "03_x32_loads" and F.stage("fp8/01_cta2.cu").name == "01_cta2"
    with pytest.raises(KeyError):
        F.stage("99")
    if not device.can_run("sm_100a"):
        with pytest.raises(device.UnsupportedGPU):
            F.stage("00").run("small")


def test_recorded_numbers_are_labelled_and_come_from_records():
    from pelib import records
    t = F.recorded_table()
    assert all(r["evidence"].startswith("recorded") for r in t.rows)
    hist = {str(h.commit): h for h in records.history()}
    for r in t.rows[:9]:
        h = hist[r["lab record"].split(":")[0]]
        assert (r["ms"], r["TFLOPS"]) == (h.ms or "—", h.tflops or "—")
    cub = [c.label for c in records.cublas()]
    assert [r["baseline"] for r in F.cublas_table().rows][:len(cub)] == cub


# ---- diffs --------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b, added, removed", [
    ("00_ws_cta1", "01_cta2", "constexpr int CG = 2;", "constexpr int CG = 1;"),
    ("01_cta2", "02_tn256", "constexpr int TN = 256;", "constexpr int TN = 128;"),
    ("02_tn256", "03_x32_loads", "tcgen05_ld_32x32b_x32(", "tcgen05_ld_32x32b_x16("),
    ("03_x32_loads", "04_independent_polling", "mbarrier_wait_parity(mma_done", "named_barrier_sync("),
])
def test_diff_is_the_lesson(a, b, added, removed):
    d = stages.diff(f"fp8/{a}.cu", f"fp8/{b}.cu", skip_header=True)
    plus = [line for line in d.splitlines() if line.startswith("+") and not line.startswith("+++")]
    minus = [line for line in d.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert any(added in line for line in plus) and any(removed in line for line in minus)
    md = d._repr_markdown_()
    assert md.count("```diff") == 1 and md.rstrip().endswith("```")


def test_small_ideas_have_small_diffs():
    assert sum(stages.diff_stats("fp8/02_tn256.cu", "fp8/03_x32_loads.cu").values()) <= 4
    assert sum(stages.diff_stats("fp8/03_x32_loads.cu", "fp8/04_independent_polling.cu").values()) <= 6


def test_diff_resolves_names_and_reports_no_change():
    assert "no difference" in stages.diff("01_cta2", "fp8/01_cta2.cu")
    with pytest.raises(FileNotFoundError):
        stages.resolve("fp8/77_nothing.cu")


# ---- on a B200 ----------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_stage_verifies_on_b200(name):
    if not device.can_run("sm_100a"):
        pytest.skip("needs an sm_100 GPU (B200)")
    r = F.stage(name).run("medium", time=False)
    assert r["ok"], str(r["verify"])


# ---- part two, stages 05-09: the epilogue, the staging, the persistent megakernel -------------------

def test_budgets_of_part_two(built2):
    name, b = built2
    assert b.exports["num_threads"] == 32 * (2 + b.exports["epi_warps"])


def test_final_kernel_budget():
    b = F.build(FINAL)
    assert b.facts.registers <= 232 and b.facts.spills == 0


def test_timing_build_budget():
    b = F.build(FINAL, {"TIMING": 1})
    assert b.facts.registers <= 255 and b.facts.spills == 0
    assert b.exports["timing_phases"] == 9 and b.exports["timing_warps"] >= b.exports["num_threads"] // 32


def test_sass_is_the_2cta_form(built2):
    name, b = built2
    h = ops(b)
    assert h.get("UTCQMMA.2CTA", 0) == b.exports["block_k"] // b.exports["mma_k"]
    assert h.get("UTCQMMA", 0) == 0 and not any(op.startswith("UTCHMMA") for op in h)
    assert {"UTMALDG.2D.2CTA", "UTCBAR.2CTA.MULTICAST"} <= set(h)
    assert f"{b.exports['idesc']:#x}" in b.sass


# ---- 05: epilogue warps -------------------------------------------------------------------

def test_sweep_options_come_from_the_kernel():
    """The widget offers what the kernel's static_asserts accept, and shows the message for the rest."""
    ok, refused = F.options("warps")
    assert ok == [4, 5, 6] and all(refused.values()) and any("NUM_EPI_WARPS" in why for why in refused.values())
    ok, refused = F.options("stages")
    assert 4 in ok and all("227 KB" in why or "NUM_STAGES" in why for why in refused.values())
    for v in ok:
        assert F.stage("06", {"NUM_STAGES": v}).exports.smem_bytes <= F.stage("06").exports.smem_limit


@pytest.mark.parametrize("warps", F.options("warps")[0])
def test_epi_warps_sweep_builds(warps):
    b = F.build("05", {"NUM_EPI_WARPS": warps})
    ex = b.exports
    assert b.facts.spills == 0 and ex["epi_warps"] == warps
    assert check_epi_map(ex) == []
    # one unrolled copy of the loop per distinct column range: [0,256) for 4 warps, plus [0,128) and [128,256)
    loads = sum((e - b) // ex["epi_ld_x"] for b, e in set(epi_columns(ex).values()))
    assert F.sass_facts(b)["LDTM"] == loads


def test_epi_map_obeys_the_lane_quarter_rule():
    ex = F.build("05", {"NUM_EPI_WARPS": 6}).exports
    cols = epi_columns(ex)
    assert cols == {2: (0, 128), 3: (0, 128), 4: (0, 256), 5: (0, 256), 6: (128, 256), 7: (128, 256)}
    assert epi_columns(F.build("05").exports)[6] == (128, 256)


def test_epi_map_check_catches_a_gap():
    ex = dict(F.build("05").exports)
    ex["epi_cols_w6"] = 128 | (192 << 16)
    assert any("never read" in i or "end at" in i for i in check_epi_map(ex))


def test_too_many_or_few_warps_is_a_compile_error():
    with pytest.raises(B.BuildError, match="NUM_EPI_WARPS"):
        F.build("05", {"NUM_EPI_WARPS": 3})


def test_runtime_bounds_put_an_exit_test_after_every_step():
    """F4 as this compiler shows it: run-time bounds leave a conditional exit between every two TMEM
    loads and no comb load hoisted across it; templated bounds leave straight-line code."""
    from pelib.isa import sass_account as SA

    ex = F.build("05").exports
    per_range = ex["tile_n"] // ex["epi_ld_x"]          # TMEM loads of one pass over a lane quarter's columns
    rt = SA.gaps(Stage("fp8/variants/05_f4_runtime_bounds").build.sass, "LDTM")
    tpl = SA.gaps(F.build("05").sass, "LDTM")
    # run-time bounds: one loop body, a branch between every two loads; templated: a copy per column range
    assert len(rt) + 1 == per_range and all(g["branches"] for g in rt)
    assert len(tpl) + 1 == sum((e - b) // ex["epi_ld_x"] for b, e in set(epi_columns(ex).values()))
    assert sum(1 for g in tpl if g["branches"]) < len(tpl) // 4
    assert max(g["LDG"] for g in tpl) > max(g["LDG"] for g in rt), "templated bounds hoist comb loads"
    assert not SA.loops_containing(F.build("05").sass, "LDTM")


# ---- 06: pipeline depth -------------------------------------------------------------------

def test_stage_sweep_changes_smem_only():
    bs = {n: F.build("06", {"NUM_STAGES": n}) for n in (4, 5, 6)}
    smem = {n: b.exports["smem_bytes"] for n, b in bs.items()}
    ex = bs[4].exports
    one = ex["a_stage_bytes"] + ex["b_stage_bytes"] + 2 * 8         # one stage + its two mbarriers
    assert smem[5] - smem[4] == smem[6] - smem[5] == one
    assert bs[6].exports["barrier_bytes"] - bs[4].exports["barrier_bytes"] == 2 * 2 * 8
    assert smem[4] < 132 * 1024 and smem[6] > 192 * 1024
    assert F.build("06").exports["pipeline_stages"] == 4
    assert len({b.facts.registers for b in bs.values()}) == 1, "stage and parity come from the k-block counter"


def test_six_stages_leave_no_room_for_staging():
    with pytest.raises(B.BuildError, match="227 KB"):
        F.build("07", {"NUM_STAGES": 6})
    with pytest.raises(B.BuildError, match="227 KB"):
        F.build("07", {"NUM_EPI_WARPS": 6})


# ---- 07/08: staging -----------------------------------------------------------------------

@pytest.mark.parametrize("name, warps", [("07", 5), ("07", 4), ("08", 5), ("09", 4), ("09", 5)])
def test_every_output_written_exactly_once(name, warps):
    ex = F.build(name, {"NUM_EPI_WARPS": warps}).exports
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
    ex = F.build("07").exports
    with pytest.raises(staging.StagingError, match="row"):
        staging.StagingLayout.from_exports(ex, pitch=272)


def test_staging_model_catches_buffers_that_overlap():
    import dataclasses

    lay = staging.StagingLayout.from_exports(F.build("07").exports)
    assert staging.trace(lay)[1].ok
    bad = dataclasses.replace(lay, warp_bytes=8192)      # buffers 8 KB apart: neighbours overwrite rows
    rep = staging.trace(bad)[1]
    assert not rep.ok and rep.smem_overlaps
    with pytest.raises(staging.StagingError, match="do not fit"):
        bad.validate()


def test_padding_removes_bank_conflicts():
    ex = F.build("07").exports
    lay = staging.StagingLayout.from_exports(ex)
    assert staging.phase1_wavefronts(lay) == 4 and staging.phase2_wavefronts(lay) == 4
    unpadded = staging.StagingLayout.from_exports(ex, pitch=512)
    assert staging.phase1_wavefronts(unpadded) == 32
    assert staging.trace(unpadded)[1].ok, "without the pad the layout is still correct, only slower"
    half = staging.StagingLayout.from_exports(F.build("09").exports)
    assert half.pitch == 272 and staging.phase1_wavefronts(half) == 4
    assert staging.phase1_wavefronts(staging.StagingLayout.from_exports(F.build("09").exports, pitch=256)) == 32


def test_staged_stores_are_coalesced_in_sass():
    b6, b7 = F.build("06"), F.build("07")
    h6, h7 = ops(b6), ops(b7)
    assert h6.get("STS.128", 0) == 0 and h7["STS.128"] > 0 and h7["STS.128"] % 4 == 0   # 16-B vectors into staging
    assert h7["LDS.128"] > 0 and h7["STG.E.128"] < h6["STG.E.128"]


def test_unroll_8_doubles_the_copy_loop_body():
    for n in ("07", "08"):
        b = F.build(n, {"NUM_EPI_WARPS": 4})
        assert ops(b)["LDS.128"] == b.exports["phase2_unroll"]          # one shared load per unrolled copy
    assert F.build("08").exports["phase2_unroll"] == 2 * F.build("07").exports["phase2_unroll"]


def test_smem_budget_from_exports():
    t = F.smem_budget("08")
    rows = {r["part"].split(":")[0]: r["bytes"] for r in t.rows}
    ex = F.build("08").exports
    assert rows["A ring"] + rows["B ring"] == 4 * 32768 and rows["staging"] == 5 * 16896 == 84480
    assert rows["total (smem_bytes)"] == ex["smem_bytes"]
    assert sum(r["bytes"] for r in t.rows[:-3]) == ex["smem_bytes"]
    assert rows["mbarriers + TMEM address slot"] == ex["barrier_bytes"]
    assert rows[f"per-block limit on sm_100 ({ex['smem_limit'] // 1024} KB)"] == ex["smem_limit"]
    assert "compiled" in t.caption
    cmp = F.smem_budget_vs_recorded()
    assert "recorded" in cmp.caption and cmp.rows[1]["recorded"] == "84,480"


def test_final_staging_matches_the_f24_figures():
    ex = F.build("09").exports
    assert ex["staging_warp_bytes"] == 17408 and ex["staging_pitch"] == 272 and ex["staging_halves"] == 2
    assert ex["epi_warps"] * ex["staging_warp_bytes"] == 69632


# ---- emulated tiles -----------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES2)
def test_emulated_far_tile_matches_reference(name):
    r = F.emulate_check(name, problem="medium", seed=3, tile=(37, 2))   # medium: K=768, the ring wraps
    assert r["report_ok"], r["issues"]
    assert r["within_1ulp"], r


@pytest.mark.parametrize("warps", [5, 6])
def test_emulated_split_warps(warps):
    r = F.emulate_check("05", defines={"NUM_EPI_WARPS": warps}, seed=2)
    assert r["within_1ulp"] and r["report_ok"]


def test_emulated_second_accumulator_far_tile():
    r = F.emulate_check(FINAL, problem="medium", seed=5, tile=(37, 2), acc_buf=1)
    assert r["within_1ulp"] and r["report_ok"] and r["staged"]["ok"]
    with pytest.raises(KindError, match="acc_buf"):
        F.emulate_check(FINAL, acc_buf=2)


def test_emulation_catches_a_wrong_accumulator_stride():
    from pelib import emulate

    with pytest.raises(emulate.EmulationError, match="TMEM columns"):
        ex = F.build(FINAL).exports
        F.emulate_check(FINAL, acc_buf=1, overrides={"tmem_acc_col": 2 * ex["tmem_acc_stride"],
                                                     "epilogue_map": epilogue_map(ex, 2 * ex["tmem_acc_stride"])})


def test_emulation_catches_a_wrong_column_split():
    ex = F.build("05").exports
    wrong = dict(ex)
    wrong["epi_cols_w6"] = 0 | (128 << 16)          # warp 6 redoes warp 2's half
    r = F.emulate_check("05", overrides={"epilogue_map": epilogue_map(wrong, 0)})
    assert not r["within_1ulp"] or not r["report_ok"]


def test_emulation_goes_through_the_staging():
    r = F.emulate_check("07", staging_overrides={"pitch": 512})      # unpadded: slower, still right
    assert r["within_1ulp"] and r["staged"]["ok"]
    with pytest.raises(staging.StagingError, match="row"):
        F.emulate_check("07", staging_overrides={"pitch": 496})    # a 512-B row does not fit


# ---- 09: schedule, launch, protocol -------------------------------------------------------

def test_persistent_launch_config():
    cfg = F.launch_config(FINAL, SIGLIP, sm_count=148)
    assert cfg.persistent and cfg.grid == (148, 1, 1) and cfg.work == (10878, 74)
    assert cfg.tiles_per_worker == (147, 147) and cfg.block == (192, 1, 1) and cfg.cluster == (2, 1, 1)
    assert F.launch_config(FINAL, SIGLIP, sm_count=132).work[1] == 66
    small = problems.patch_embed("small")
    assert F.launch_config(FINAL, small, sm_count=148).work[1] == 2      # never more clusters than tiles
    assert F.launch_config(FINAL, small, sm_count=2).work[1] == 1
    with pytest.raises(StageError, match="SMs"):
        F.launch_config(FINAL, small, sm_count=1)
    assert "74 clusters" in cfg.describe()
    assert F.launch_config(FINAL, SIGLIP).sm_count == 148               # the B200's, from pelib.sol, when none is here


def test_nonpersistent_stages_launch_one_cluster_per_tile():
    cfg = F.launch_config("08", SIGLIP)
    assert cfg.grid == (2 * 10878, 1, 1) and not cfg.persistent and cfg.block == (224, 1, 1)


def test_static_schedule_covers_every_tile_once():
    cfg = F.launch_config(FINAL, problems.patch_embed("medium"), sm_count=148)
    tiles, clusters = cfg.work
    sched = [list(range(c, tiles, clusters)) for c in range(clusters)]   # common/scheduler.cuh's static order
    flat = sorted(t for c in sched for t in c)
    assert flat == list(range(tiles))
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


# ---- host side ------------------------------------------------------------------------------

def test_tables_are_labelled():
    assert "compiled" in F.stage_table(NAMES2).caption
    assert all(r["evidence"].startswith("recorded") for r in F.recorded_table(NAMES2).rows)
    t = F.sweep_table("07", "NUM_STAGES", (4, 5, 6))
    assert t.rows[2]["registers"] == "—" and "227 KB" in t.rows[2]["note"]
    assert "compiled" in F.epi_map_table("05").caption


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
    r = F.stage(name).run("medium", time=False)
    assert r["ok"], str(r["verify"])


@pytest.mark.gpu
@pytest.mark.parametrize("warps", [4, 6])
def test_epi_warp_variants_verify_on_b200(warps):
    if not device.can_run("sm_100a"):
        pytest.skip("needs an sm_100 GPU (B200)")
    assert F.stage("05", {"NUM_EPI_WARPS": warps}).run("medium", time=False)["ok"]


@pytest.mark.gpu
def test_timing_build_records_on_b200():
    if not device.can_run("sm_100a"):
        pytest.skip("needs an sm_100 GPU (B200)")
    t = F.run_timing(FINAL, problem="medium")
    s = t.summary()
    for phase in ("kloop", "tma_wait", "epi_wait", "acc_wait", "epi_phase1", "epi_phase2"):
        assert phase in s, f"no {phase} records"
    assert s["kloop"]["avg"] > 0 and s["epi_phase1"]["avg"] > 0


# ---- chapter helpers ----------------------------------------------------------------------

def test_sweep_widgets_have_a_static_fallback():
    for which, value, key in (("warps", 6, "epilogue warps"), ("stages", 5, "stages")):
        w = F.sweep_widget(which, live=False)
        ok, refused = F.options(which)
        assert w.static is not None and len(w.static.rows) == len(ok) + len(refused)
        assert any("does not compile" in r.get("note", "") for r in w.static.rows) == bool(refused)
        fig, point, delta, *simulated = w.select(value)   # what the table above cannot show: the point marked,
        assert simulated                           # and the stage at this value on the simulator (or why not)
        assert point.rows[0][key] == value         # its SMEM against the limit, the SASS it changes
        assert f"={value}" in " ".join(t.get_text() for t in fig.axes[0].texts)
        assert "compiled" in point.caption and "recorded" in point.caption
        assert all(r["change"] != 0 for r in delta.rows) and "compiled" in delta.caption
    assert F.sweep_row("warps", 6)["recorded ms"] == 0.747 and F.sweep_row("warps", 5)["recorded ms"] == 0.722
    assert F.sweep_row("stages", 4)["recorded regs"] == 216 and F.sweep_row("stages", 6)["recorded smem (KB)"] == 192
    with pytest.raises(ValueError):
        F.sweep_widget("tiles", live=False)


def test_f4_table_from_the_sass():
    rows = {r["epilogue"].split(" ")[0]: r for r in F.f4_table().rows}
    assert rows["templated"]["LDTM in SASS"] == 2 * rows["run-time"]["LDTM in SASS"]     # a copy per column range
    assert rows["run-time"]["gaps between TMEM loads with a branch"] == rows["run-time"]["LDTM in SASS"] - 1


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
    rows = {(r["warp"], r["phase"]): r for r in F.timing_table(t).rows}
    assert rows[(1, F.LAB_NAMES["kloop"])]["avg"] == 400 and rows[(3, F.LAB_NAMES["epi_phase1"])]["n"] == 4
    fig = F.timing_bars(t, "synthetic test buffer")
    assert "measured" in fig.axes[0].get_title()


def test_recorded_timing_views():
    import matplotlib
    matplotlib.use("Agg")
    t = F.recorded_timing_table()
    assert {r["cycles"] for r in t.rows} >= {856, 4155, 1052, 1162, 4288}
    assert all("§" in r["source"] for r in t.rows)
    assert "recorded" in F.recorded_timing_bars().axes[0].get_title()
    assert F.timing_build_table().rows[1]["clock reads (CS2R SR_CLOCKLO)"] > 0


def test_schedule_and_barrier_tables():
    t = F.schedule_table(clusters_shown=2, tiles_shown=3, sm_count=148)
    assert [r["tile"] for r in t.rows] == [0, 74, 148, 1, 75, 149]
    assert [r["accumulator"] for r in t.rows[:3]] == [0, 1, 0] and t.rows[2]["parity"] == 1
    counts = {r["barrier"].split("[")[0]: r["count"] for r in F.barrier_table().rows}
    assert counts == {"full": 1, "empty": 1, "acc_full": 1, "acc_empty": 8}


@pytest.mark.skipif(device.can_run("sm_100a"), reason="this machine runs sm_100a")
def test_timing_run_refuses_other_gpus():
    with pytest.raises(device.UnsupportedGPU):
        F.run_timing(FINAL, problem="small")


def test_emulator_walks_the_ring():
    """The stages export their ring strides, so k-block t is emulated in slot t % num_stages."""
    from pelib import emulate

    ex = F.build("06").exports
    p = emulate.TileParams.from_exports(ex)
    assert p.a_stage_stride == ex["a_stage_bytes"] and p.num_stages == ex["pipeline_stages"] == 4
    # descriptors that stay on slot 0 while TMA walks the ring read stale k-blocks
    bad = F.emulate_check("06", problem="medium", overrides={"a_desc_stage_stride": 0})   # K = 768: 6 k-blocks
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


def test_barrier_table_reads_the_release_point():
    """08a and 08b free an accumulator after the whole drain, 09 after the last TMEM load (F19a): the
    acc_early_release export, which the barrier table shows."""
    assert [F.stage(n).exports["acc_early_release"] for n in ("08a", "08b", "09")] == [0, 0, 1]
    early = {r["barrier"].split("[")[0]: r for r in F.barrier_table("09").rows}["acc_empty"]["arrivals"]
    late = {r["barrier"].split("[")[0]: r for r in F.barrier_table("08a").rows}["acc_empty"]["arrivals"]
    assert "F19a" in early and "whole drain" in late


def test_f4_variant_retells_its_experiment():
    """The F4 variant's header names experiment F4 before the commit it is compared with: its record is F4's."""
    from pelib.stage import Stage
    r = Stage("fp8/variants/05_f4_runtime_bounds").recorded()
    assert r.what.startswith("experiment F4") and r.ms == 0.826
