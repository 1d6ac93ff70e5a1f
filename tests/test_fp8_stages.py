"""FP8 patch-embed stages 00-04: build budgets, SASS, exports, emulated tiles, host side, diffs."""
import re

import numpy as np
import pytest

from pelib import build as B
from pelib import device, fp8, problems, stages, tma

NAMES = fp8.stage_names()
SMEM_LIMIT = 227 * 1024  # per-block opt-in limit on sm_100 (232,448 B)


@pytest.fixture(scope="module", params=NAMES)
def built(request):
    return request.param, fp8.build(request.param)


# ---- the files ----------------------------------------------------------------------------

def test_stage_files_are_numbered_in_order():
    files = [p.stem for p in stages.family_stages("fp8")]
    assert files[:len(NAMES)] == NAMES
    for prev, cur in zip(NAMES, NAMES[1:]):
        assert fp8.STAGES[cur].previous == prev


@pytest.mark.parametrize("name", NAMES)
def test_stage_opens_with_what_why_recorded(name):
    h = stages.read_header(f"fp8/{name}.cu")
    assert h.number == name[:2] and h.what and h.why
    assert "B200" in h.recorded and "fp8-megakernel-experiment-log.md" in h.recorded
    assert fp8.STAGES[name].recorded.commit in h.recorded, "the header retells the lab commit it is about"


@pytest.mark.parametrize("name", NAMES)
def test_stages_share_one_signature(name):
    src = fp8.STAGES[name].path.read_text()
    sig = re.search(r"patch_embed\((.*?)\)\s*\{", src, re.S).group(1)
    params = [re.split(r"[\s*]+", p.strip())[-1] for p in sig.split(",")]
    assert tuple(params) == fp8.SIGNATURE


# ---- compiled facts -----------------------------------------------------------------------

def test_budgets(built):
    name, b = built
    f = b.facts
    assert f.spills == 0, f"{name} spills {f.spills} B"
    assert f.registers <= 255
    assert b.exports["smem_bytes"] + f.smem_static <= SMEM_LIMIT
    assert b.exports["num_threads"] == 32 * (2 + b.exports["epi_warps"])


def test_exports_complete(built):
    name, b = built
    missing = [k for k in fp8.REQUIRED_EXPORTS if k not in b.exports]
    assert not missing


def test_mma_opcode_in_sass(built):
    """UTCQMMA = tcgen05.mma kind::f8f6f4; .2CTA = cta_group::2 (what nvdisasm prints for sm_100a)."""
    name, b = built
    h = fp8.sass_facts(b)
    cg = b.exports["cta_group"]
    assert h[fp8.MMA_OPCODE[cg]] == b.exports["block_k"] // b.exports["mma_k"], "K loop fully unrolled"
    other = fp8.MMA_OPCODE[3 - cg]
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
    assert fp8.sass_facts(b)["LDTM"] == ex["tile_n"] // ex["epi_ld_x"]


def test_independent_polling_drops_the_named_barrier():
    bars = {n: fp8.sass_facts(fp8.build(n))["BAR.SYNC"] for n in ("03_x32_loads", "04_independent_polling")}
    assert bars["03_x32_loads"] == 1 and bars["04_independent_polling"] == 0
    assert [fp8.build(n).exports["epi_poll_each"] for n in NAMES[:5]] == [0, 0, 0, 0, 1]


def test_stage_table_matches_builds():
    t = fp8.stage_table()
    assert [r["stage"] for r in t.rows] == NAMES
    for r in t.rows:
        b = fp8.build(r["stage"])
        assert r["registers"] == b.facts.registers and r["spills (B)"] == b.facts.spills
        assert r["dynamic smem (B)"] == b.exports["smem_bytes"]
    assert "compiled" in t.caption


def test_defines_reach_the_build():
    b = fp8.build("02_tn256", {"NUM_STAGES": 4})
    assert b.exports["num_stages"] == 4
    assert b.exports["smem_bytes"] < fp8.build("02_tn256").exports["smem_bytes"]


def test_too_many_stages_is_a_compile_error():
    with pytest.raises(B.BuildError, match="227 KB"):
        fp8.build("02_tn256", {"NUM_STAGES": 8})


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

@pytest.mark.parametrize("name", NAMES)
def test_emulated_tile_matches_reference(name):
    r = fp8.emulate_check(name, problem="small", seed=3, tile=(1, 0))
    assert r["report_ok"], r["issues"]
    assert r["within_1ulp"], r


def test_emulated_tile_far_from_the_origin():
    """A tile in the middle of a larger problem: comb rows wrap (m % 196) and B rows are offset."""
    r = fp8.emulate_check("04_independent_polling", problem="medium", seed=5, tile=(37, 2))
    assert r["within_1ulp"] and r["report_ok"]


def test_emulation_catches_a_wrong_k_step():
    r = fp8.emulate_check("02_tn256", overrides={"k_advance_bytes": 64})
    assert not r["within_1ulp"]


def test_emulation_catches_a_wrong_descriptor_sbo():
    ex = fp8.build("01_cta2").exports
    bad = ex["a_desc"] & ~(0x3FFF << 32) | ((512 >> 4) << 32)
    r = fp8.emulate_check("01_cta2", overrides={"a_desc": bad})
    assert not r["report_ok"] or not r["within_1ulp"]


def test_bf16_round_is_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 1.0 + 2**-9], dtype=np.float32)
    assert list(fp8.bf16_round(x)) == [1.0, 1.0, 1.0 + 2**-6, -2.5, 1.0]


# ---- host side (CPU, up to the launch) ------------------------------------------------------

SIGLIP = problems.patch_embed("siglip2")


@pytest.mark.parametrize("name, ctas, tiles, cluster, b_rows", [
    ("00_ws_cta1", 7252 * 6, 7252 * 6, (1, 1, 1), 128),
    ("01_cta2", 2 * 3626 * 6, 3626 * 6, (2, 1, 1), 64),
    ("02_tn256", 2 * 3626 * 3, 10878, (2, 1, 1), 128),   # 10,878 tiles: the experiment log's count
    ("04_independent_polling", 2 * 3626 * 3, 10878, (2, 1, 1), 128),
])
def test_launch_config_and_maps(name, ctas, tiles, cluster, b_rows):
    cfg = fp8.launch_config(name, SIGLIP)
    ex = fp8.build(name).exports
    assert cfg.grid == (ctas, 1, 1) and cfg.tiles == tiles and cfg.cluster == cluster
    assert cfg.block == (192, 1, 1) and cfg.smem_bytes == ex["smem_bytes"]
    assert cfg.grid[0] % cfg.cluster[0] == 0
    specs = fp8.tensor_map_specs(name, SIGLIP)
    a, b = specs["a"], specs["b"]
    assert a.dtype == b.dtype == "uint8" and a.swizzle == b.swizzle == 128
    assert a.dims == (768, 928256) and a.strides == (768,) and a.box == (128, 128)
    assert b.dims == (768, 768) and b.box == (128, b_rows)
    assert a.inner_box_bytes == 128, "one 128-B swizzle row of K per box"
    # the producer's expect_tx is the bytes of the two boxes (per CTA)
    assert a.box_bytes + b.box_bytes == ex["a_stage_bytes"] + ex["b_stage_bytes"]


def test_specs_carry_tensor_addresses():
    prob = problems.patch_embed("small")
    t = prob.make_inputs()
    s = fp8.tensor_map_specs("02", prob, t)
    assert s["a"].address == t["a"].data_ptr() and s["b"].address == t["b"].data_ptr()


def test_problem_that_does_not_tile_is_refused():
    prob = problems.patch_embed("tiny")
    with pytest.raises(fp8.StageError, match="multiple"):
        fp8.launch_config("00", prob)


def test_kernel_args_order_and_widths():
    prob = problems.patch_embed("small")
    t = prob.make_inputs()
    maps = fp8.tensor_map_specs("01", prob, t)   # stand-ins for encoded maps
    args = fp8.kernel_args(prob, maps, t)
    assert len(args) == len(fp8.SIGNATURE)
    assert args[0] is maps["a"] and args[1] is maps["b"] and args[2] is t["comb"] and args[3] is t["out"]
    assert [type(x) for x in args[4:7]] == [np.int32] * 3 and tuple(int(x) for x in args[4:7]) == (512, 256, 128)
    assert args[7] is None


def test_launch_plan_hands_the_stage_config_to_pelib_launch(monkeypatch):
    """Everything up to the launch call: encoded maps, grid, block, cluster, SMEM, argument order."""
    from pelib import launch

    prob = problems.patch_embed("small")
    t = prob.make_inputs()
    monkeypatch.setattr(tma, "encode", lambda spec, owner=None: tma.TensorMap(spec, ("cumap", spec.box), owner))
    seen = {}
    monkeypatch.setattr(launch, "prepare", lambda b, args, **kw: seen.update(build=b, args=args, **kw) or "plan")
    assert fp8.launch_plan("01_cta2", prob, t) == "plan"
    ex = fp8.build("01_cta2").exports
    assert seen["grid"] == (2 * (512 // 256) * (256 // 128), 1, 1)
    assert seen["cluster"] == (1, 1, 1), "__cluster_dims__ is in the cubin: no launch attribute"
    assert seen["block"] == (192, 1, 1) and seen["smem"] == ex["smem_bytes"] and seen["kernel"] == "patch_embed"
    a, b, comb, out, M, N, K, timing = seen["args"]
    assert a.spec.box == (128, 128) and b.spec.box == (128, 64)
    assert a.owner is t["a"] and b.spec.address == t["b"].data_ptr()
    assert comb is t["comb"] and out is t["out"] and (int(M), int(N), int(K)) == (512, 256, 128) and timing is None


def test_register_stage_checks_the_file_and_its_predecessor():
    rec = fp8.Recorded(None, None, "-", "-")
    with pytest.raises(fp8.StageError, match="no stage file"):
        fp8.register_stage(fp8.Stage("98_nothing", "x", rec, "04_independent_polling"))


def test_stage_lookup():
    assert fp8.stage("03").name == "03_x32_loads"
    assert fp8.stage("fp8/01_cta2.cu").name == "01_cta2"
    with pytest.raises(fp8.StageError):
        fp8.stage("99")


@pytest.mark.skipif(device.can_run("sm_100a"), reason="this machine runs sm_100a")
def test_run_refuses_other_gpus():
    with pytest.raises(device.UnsupportedGPU):
        fp8.run("00", problem="small")


def test_recorded_numbers_agree_with_pelib_records():
    from pelib import records

    hist = {str(h.commit): h for h in records.history()}
    for name, st in fp8.STAGES.items():
        h = hist[st.recorded.commit]
        assert (h.ms, h.tflops) == (st.recorded.ms, st.recorded.tflops), name
    cub = records.cublas()
    assert cub[0].ms == fp8.CUBLAS_RECORDED["gemm_only"].ms and cub[1].ms == fp8.CUBLAS_RECORDED["unfused"].ms


def test_recorded_numbers_are_labelled():
    t = fp8.recorded_table()
    assert all(r["evidence"].startswith("recorded") for r in t.rows)
    assert fp8.CUBLAS_RECORDED["gemm_only"].ms == 0.365 and fp8.CUBLAS_RECORDED["unfused"].ms == 0.835
    assert "recorded" in fp8.STAGES["03_x32_loads"].recorded.describe()


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
    r = fp8.run(name, problem="medium", time=False)
    assert r["ok"], str(r["verify"])
