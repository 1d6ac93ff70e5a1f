"""The NVFP4 stages after the lab (03 narrow N, 04 split-K in a cluster, 05 persistent with two accumulators,
06 cache policies): what their exports say about the grid and K, the narrow tile's scale-factor shift, their
refusals, and `make bench`'s job for each on the three benchmark shapes up to the launch (a fake GPU). The
simulator runs are in test_sim_stages.py, the planted mistakes in pelib.sim.catalog."""
import pytest
import torch

from pelib import problems, reference
from pelib.sim import host as sim_host
from pelib.measure import sweep
from pelib.kinds import nvfp4 as K
from pelib.kinds.base import KindError
from pelib.stage import Stage

NEW = ("nvfp4/03_narrow_n", "nvfp4/04_split_k_cluster", "nvfp4/05_persistent_acc2", "nvfp4/06_cache_hints",
       "nvfp4/07_split_k_roles", "nvfp4/08_elected_issuers", "nvfp4/09_wide_split", "nvfp4/10_reduce_scatter",
       "nvfp4/11_ring_partials", "nvfp4/12_wide_tile")
SHAPES = ("k16384", "k7168", "k2048")
WIDE = ("nvfp4/09_wide_split", "nvfp4/10_reduce_scatter", "nvfp4/11_ring_partials")   # 128-wide N tiles


@pytest.mark.parametrize("key", NEW)
def test_parent_chain_and_tile(key):
    s = Stage(key)
    assert s.exports.tile_m == 128 and s.exports.tile_n == (256 if key == "nvfp4/12_wide_tile" else 128 if key in WIDE else 64)
    assert s.header.parent in ("nvfp4/01_pipelined", *NEW)


def test_grids_on_the_benchmark_shapes():
    """Where the SMs go, from the exports: 03 doubles 01's CTAs; 04 doubles them again with a K split per
    cluster; 05 is one CTA per tile while tiles are fewer than SMs."""
    full = {k: Stage(k).launch_config("full") for k in ("nvfp4/01_pipelined", *NEW)}
    assert full["nvfp4/01_pipelined"].ctas == 56 and full["nvfp4/03_narrow_n"].ctas == 112
    c4 = full["nvfp4/04_split_k_cluster"]
    assert c4.ctas == 224 and c4.cluster == (2, 1, 1) and c4.grid == (224, 1, 1)
    assert full["nvfp4/05_persistent_acc2"].persistent and full["nvfp4/05_persistent_acc2"].ctas == 112
    assert Stage("nvfp4/04_split_k_cluster", {"SPLIT_K": 4}).launch_config("k7168").ctas == 4 * 4096 // 64
    assert full["nvfp4/08_elected_issuers"].ctas == 224
    w = full["nvfp4/09_wide_split"]
    assert w.ctas == 112 and w.cluster == (2, 1, 1)          # the K split over 128-wide tiles: one wave


def test_the_elected_issuers_lose_the_compilers_issue_loops():
    """Compiled: 07 picks its two issuing threads by index, and the compiler wraps each TMA load, scale copy, MMA
    and commit in a loop of its own (ELECT, R2UR.BROADCAST, BRA.U.ANY); 08 elects them (elect.sync) and has none,
    so its MMA issuer's K loop is a fraction of 07's instructions."""
    from pelib.predict.sass_paths import SassPaths
    s7, s8 = (SassPaths.of(Stage(k)) for k in ("nvfp4/07_split_k_roles", "nvfp4/08_elected_issuers"))
    n7, n8 = (sum(1 for i in s.instrs if i.is_branch and i.op.startswith("BRA.U.ANY") and i.target is not None
                  and i.target < i.index) for s in (s7, s8))
    assert n7 >= 12 and n8 == 0
    from pelib.views import nvfp4 as v
    key = "MMA issuer: instructions a K tile"
    assert v.issue_loops("08_elected_issuers")[key] < 0.75 * v.issue_loops("07_split_k_roles")[key]


def test_a_split_whose_partials_leave_no_room_for_a_stage_says_so():
    """09 with SPLIT_K = 4: three 64 KiB partial tiles in rank 0 leave no room for even one ring stage; the
    refusal says to lower SPLIT_K, not to use 'at most 0 stages'."""
    s = Stage("nvfp4/09_wide_split", {"SPLIT_K": 4})
    with pytest.raises(KindError, match="227 KB.*partial tiles: lower SPLIT_K"):
        s.launch_config("k16384")


def test_split_k_refuses_a_k_it_cannot_share():
    s = Stage("nvfp4/04_split_k_cluster", {"SPLIT_K": 4})
    with pytest.raises(KindError, match="SPLIT_K"):
        s.launch_config(problems.NvFp4Gemm("odd", 128, 256, 256 * 6))   # 6 K tiles over 4 CTAs
    s.launch_config(problems.NvFp4Gemm("even", 128, 256, 256 * 8))


def test_sfb_shift_follows_the_tile_inside_its_block():
    ex = Stage("nvfp4/03_narrow_n").exports
    assert [K.sfb_shift(ex, n) for n in range(4)] == [0, 2, 0, 2]
    assert K.sfb_shift(Stage("nvfp4/01_pipelined").exports, 1) == 0     # 128-wide tiles: no shift


def test_emulated_odd_tile_needs_the_shift():
    """The emulator replays an odd 64-wide tile with the kernel's shift; without it the tile takes its even
    neighbour's B scales and misses the reference."""
    s = Stage("nvfp4/03_narrow_n")
    assert s.kind.emulate_check(s, "ring", (0, 1), 0)["ok"]
    bad = s.kind.emulate_check(s, "ring", (0, 1), 0, overrides={"sfb_shift_cols_per_32": 0})
    assert not bad["ok"] and bad["elements_off_by_more_than_1ulp"] > 0


def test_bench_enumerates_the_new_stages_and_times_three_shapes():
    keys = [k for k, _ in sweep.entries(["nvfp4"])]
    assert all(k in keys for k in NEW)
    assert ("full",) + K.Nvfp4.TIMED_PROBLEMS == ("full", "k7168", "k2048")
    assert K.Nvfp4().problem("full").name == "k16384"


def _zero_inputs(prob):
    """Inputs of the problem's shapes and dtypes, all zero (fast at full size): their reference is exactly 0."""
    kb = prob.k // reference.SF_VEC
    z = lambda *shape: torch.zeros(shape, dtype=torch.uint8)  # noqa: E731
    return {"a": z(prob.m, prob.k // 2), "b": z(prob.n, prob.k // 2),
            "sfa": z(prob.m, kb).view(reference.FP8), "sfb": z(prob.n, kb).view(reference.FP8),
            "sfa_mma": z(reference.sf_mma_size(prob.m, kb)).view(reference.FP8),
            "sfb_mma": z(reference.sf_mma_size(prob.n, kb)).view(reference.FP8),
            "gsa": torch.ones(1), "gsb": torch.ones(1),
            "out": torch.full((prob.m, prob.n), float("nan"), dtype=torch.float16)}


class _Ctx:
    """pelib.measure.jobs.Context on the CPU: each problem's zero inputs and their (zero) reference."""

    iters = 2

    def __init__(self):
        self.made = {}

    def check_problem(self, s, name):
        if name not in self.made:
            p = s.problem(name)
            self.made[name] = (p, _zero_inputs(p), torch.zeros((p.m, p.n), dtype=torch.float16))
        return self.made[name]

    @property
    def data(self):
        return self

    def full(self, s):
        return self.check_problem(s, "full")


@pytest.mark.parametrize("key", NEW)
def test_bench_job_on_the_three_shapes_up_to_the_launch(key, fake_gpu):
    """make bench's job for the stage (pelib.measure.sweep.variant): the check shapes and the three benchmark shapes,
    each with its own launch (grid, cluster, tensor maps, arguments), verified on a NaN-poisoned output, then
    timed. The fake GPU writes the reference it was given; a B200 runs the kernel."""
    plans, state = fake_gpu
    ctx = _Ctx()
    state["fill"] = lambda: [t["out"].copy_(ref) for _, t, ref in ctx.made.values()]
    res = {}
    sweep.variant({"stage": key, "defines": {}}, ctx, res)
    assert res["ok"], res
    assert set(res["checks"]) == {"small", "ring"} and "median_ms" in res
    assert set(res["shapes"]) == {"k7168", "k2048"} and all("median_ms" in v for v in res["shapes"].values())
    s = Stage(key)
    grids = {p.grid for p in plans}
    for name in SHAPES:
        assert s.launch_config(name).grid in grids
    assert res["shapes"]["k2048"]["problem"] == "128x7168x2048"


def test_simulator_catches_the_lost_sfb_shift_on_random_scales():
    """The catalog runs on exact inputs, whose block scales are all 1.0, where a wrong scale-factor column
    cannot show; on the seeded random inputs (scales 0.25..7.5) the simulator's output of 03 without its
    2-column shift misses the reference, on the odd tiles only."""
    from pelib.sim import catalog as C
    shift = C.Mutation("x-nvfp4-03-sfb-shift-lost", "nvfp4/03_narrow_n",
                       (C.Patch("mma_ktile(stage, tmem, s * TMEM_STAGE_COLS, sfb_shift_cols(n_blk), kt == 0);",
                                "mma_ktile(stage, tmem, s * TMEM_STAGE_COLS, 0, kt == 0);"),), "d", "wrong")
    with C.patched(C.stage_of(shift), shift) as s:
        prob = s.problem("sim")
        t = s.inputs(prob, 0, "sim")
        r = sim_host.run(s, prob, inputs=t, sim_seed="lazy")
    assert not r["ok"]
    ref = s.kind.reference(prob, t).double()
    bad = ~torch.isclose(t["out"].double(), ref, rtol=2e-3, atol=0.3)
    per_tile = bad.reshape(128, 4, 64).any(dim=2).any(dim=0).tolist()
    assert per_tile == [False, True, False, True]


def test_work_picture_and_table_come_from_the_exports():
    from pelib.views import nvfp4 as v
    w = v.work_split("04_split_k_cluster", "k16384")
    assert (w["ctas"], w["waves"], w["k_tiles_per_cta"], w["idle_sms"]) == (224, 2, 32, 0)
    assert v.work_split("03_narrow_n", "k7168")["idle_sms"] == 148 - 64
    d = v.work_picture("k2048")
    assert d.svg.startswith("<svg") and "04_split_k_cluster" in d.svg and "compiled" in d.caption
    assert len(v.work_split_table("k2048").rows) == len(v.BEYOND)


def test_side_by_side_table_labels_every_row():
    from pelib.views import nvfp4 as v
    doc = {"error_bar": {"mae": 0.2, "worst": 0.8, "stages": 28, "device": "H100"},
           "rows": [{"stage": "nvfp4/03_narrow_n", "shape": s, "predicted_us": x}
                    for s, x in zip(SHAPES, (30.0, 20.0, 10.0))]}
    t = v.beyond_table(doc)
    kinds = {r["entry"]: r["evidence"] for r in t.rows}
    assert kinds["speed of light"].startswith("recorded (public)") and kinds["lab: ring depth 5 (128x128 tiles)"] == "recorded"
    assert kinds["nvfp4/03_narrow_n"].startswith("predicted, ± 20%")
    assert kinds["nvfp4/04_split_k_cluster"].startswith("predicted: pending")
    row = next(r for r in t.rows if r["entry"] == "nvfp4/03_narrow_n")
    assert row["geomean"] == f"{(30.0 * 20.0 * 10.0) ** (1 / 3):.3g}"
    sol = next(r for r in t.rows if r["entry"] == "speed of light")
    assert sol["geomean"] == "3.04"


def test_predictions_go_through_pelib_predict():
    """beyond_predictions asks pelib.predict for each (stage, shape) on the B200 (a stand-in predictor here:
    the real one simulates each stage, minutes a row)."""
    from pelib.views import nvfp4 as v
    asked = []

    class P:
        ms, sentence = 0.0123, "bound by something"

    def fake(stage, gpu, cal, problem):
        asked.append((stage.key, gpu, problem))
        return P()
    rows = v.beyond_predictions(cal=object(), names=("03_narrow_n",), predict_fn=fake)
    assert asked == [("nvfp4/03_narrow_n", "b200", s) for s in SHAPES]
    assert rows[0]["predicted_us"] == 12.3 and rows[0]["shape"] == "k16384"


def test_a_stage_the_model_cannot_replay_gets_a_row_that_says_why():
    from pelib.predict import PredictError
    from pelib.views import nvfp4 as v

    def fake(stage, gpu, cal, problem):
        raise PredictError("no path to an expect_tx")
    rows = v.beyond_predictions(cal=object(), names=("04_split_k_cluster",), shapes=("k2048",), predict_fn=fake)
    assert rows == [{"stage": "nvfp4/04_split_k_cluster", "shape": "k2048", "predicted_us": None,
                     "error": "PredictError: no path to an expect_tx"}]
    t = v.beyond_table({"error_bar": None, "rows": rows})
    assert any("could not replay" in n for n in t.notes)


def test_issue_loop_and_bytes_tables_come_from_the_sass_and_exports():
    from pelib.views import nvfp4 as v
    rows = {r["stage"]: r for r in v.issue_loops_table().rows}
    assert rows["07_split_k_roles"]["issue loops"] >= 12 and rows["08_elected_issuers"]["issue loops"] == 0
    assert (rows["08_elected_issuers"]["MMA issuer: instructions a K tile"]
            < rows["07_split_k_roles"]["MMA issuer: instructions a K tile"])
    b = {r["stage"]: r for r in v.ktile_bytes_table().rows}
    assert b["08_elected_issuers"]["KiB a K tile"] == "28" and b["09_wide_split"]["KiB per 64 output columns"] == "18"
    assert (b["08_elected_issuers"]["waves"], b["09_wide_split"]["waves"]) == (2, 1)


def test_the_scattered_reduction_halves_the_partials_and_lets_split_k_4_fit():
    """10: each rank receives SPLIT_K - 1 slices of TILE_N / SPLIT_K columns (09: SPLIT_K - 1 whole tiles in rank 0),
    so SPLIT_K = 4 fits beside the 4-stage ring and fills N = 4096 with 128 CTAs (09: refused); SPLIT_K = 3 does not
    compile (a slice is whole 32-column groups)."""
    e9, e10 = Stage("nvfp4/09_wide_split").exports, Stage("nvfp4/10_reduce_scatter").exports
    assert e10["partial_bytes"] * 2 == e9["partial_bytes"] and e10["slice_n"] == 64
    s4 = Stage("nvfp4/10_reduce_scatter", {"SPLIT_K": 4})
    cfg = s4.launch_config("k7168")
    assert cfg.ctas == 128 and cfg.cluster == (4, 1, 1) and s4.exports.smem_bytes <= s4.exports.smem_limit
    assert Stage("nvfp4/10_reduce_scatter").launch_config("k7168").ctas == 64
    with pytest.raises(Exception, match="whole 32-column"):
        Stage("nvfp4/10_reduce_scatter", {"SPLIT_K": 3}).build


def _simulated_out(key: str) -> torch.Tensor:
    """The stage's simulated output on the 'sim' problem's random inputs (seed 5, the eager schedule), verified."""
    s = Stage(key)
    t = s.inputs("sim", 5, "sim")
    r = sim_host.run(s, "sim", seed=5, sim_seed="eager", inputs=t)
    assert r["ok"], r["verify"]
    return t["out"].clone()


def test_the_scattered_reduction_gives_09s_bits():
    """The slices are added in 09's order (rank 0 first), so on the same random inputs the simulated output of
    10 is 09's bit for bit, on every schedule."""
    assert torch.equal(_simulated_out("nvfp4/09_wide_split"), _simulated_out("nvfp4/10_reduce_scatter"))


@pytest.mark.parametrize("seed", ("lazy", "eager", 0))
def test_split_k_4_of_the_scattered_reduction_on_the_simulator(seed):
    """10 at SPLIT_K = 4 (its k7168 build: four ranks, three partial slices each) on the 'ring' problem (8 K tiles,
    two a rank), verified against the NVFP4 reference on the standard schedules."""
    s = Stage("nvfp4/10_reduce_scatter", {"SPLIT_K": 4})
    r = sim_host.run(s, "ring", seed=3, sim_seed=seed)
    assert r["ok"] and r["sim"].ok, r["verify"]


def test_every_nvfp4_bench_variant_builds():
    """make bench's NVFP4 variants name defines their stage files have (an unknown define is refused at build)."""
    for key, defines in sweep.VARIANTS["nvfp4"]:
        assert Stage(key, defines).build.facts.spills == 0, (key, defines)


def test_the_per_shape_split_is_the_deepest_one_wave_and_gets_its_own_row():
    """10's split per shape (compiled): the deepest of 2 and 4 whose grid is one wave of 148 SMs; the side-by-side
    table shows it as its own predicted row, beside 10 at its default."""
    from pelib.views import nvfp4 as v
    assert [v.one_wave_split("10_reduce_scatter", s) for s in SHAPES] == [2, 4, 2]
    asked = []

    class P:
        ms, sentence = 0.01, "bound by something"

    def fake(stage, gpu, cal, problem):
        asked.append((stage.key, dict(stage.defines), problem))
        return P()
    rows = v.beyond_predictions(cal=object(), names=("10_reduce_scatter",), predict_fn=fake)
    assert [d for _, d, _ in asked] == [{}] * 3 + [{"SPLIT_K": 2}, {"SPLIT_K": 4}, {"SPLIT_K": 2}]
    t = v.beyond_table({"error_bar": {"mae": 0.2, "worst": 0.8, "stages": 28, "device": "H200"}, "rows": rows})
    entries = [r["entry"] for r in t.rows]
    assert "nvfp4/10_reduce_scatter" in entries and "nvfp4/10_reduce_scatter, SPLIT_K 2/4/2 (one wave a shape)" in entries


def test_the_partials_live_in_the_ring_so_a_six_stage_ring_fits_at_either_split():
    """11: the partial slices sit at offset 0, over the ring (10: after it), so the shared memory is the larger of
    the two plus the barriers: 6 stages launch at SPLIT_K 2 and 4, where 10 at 6 stages is refused; where the ring
    is smaller than the partials (1 stage at SPLIT_K = 4) the barriers follow the partials."""
    e10, e11 = Stage("nvfp4/10_reduce_scatter").exports, Stage("nvfp4/11_ring_partials").exports
    assert e11["partial_smem_offset"] == 0 and e10["partial_smem_offset"] == e10["pipeline_stages"] * e10["stage_bytes"]
    assert e11["pipeline_stages"] == 6 and e11["partial_bytes"] == e10["partial_bytes"]
    for k in (2, 4):
        s = Stage("nvfp4/11_ring_partials", {"SPLIT_K": k})
        ten = Stage("nvfp4/10_reduce_scatter", {"SPLIT_K": k, "NUM_STAGES": 6})
        assert s.exports.smem_bytes <= s.exports.smem_limit < ten.exports.smem_bytes
        s.launch_config("k16384")                     # the host launches it; 10 at 6 stages it refuses
        with pytest.raises(KindError, match="227 KB"):
            ten.launch_config("k16384")
    one = Stage("nvfp4/11_ring_partials", {"SPLIT_K": 4, "NUM_STAGES": 1}).exports
    assert one["stage_bytes"] < 3 * one["partial_bytes"] and \
        one["smem_bytes"] - 3 * one["partial_bytes"] - 1024 < 1024   # the barriers right after the partials


@pytest.mark.parametrize("defines", ({}, {"NUM_STAGES": 2}, {"SPLIT_K": 4, "NUM_STAGES": 1}))
@pytest.mark.parametrize("seed", ("lazy", "eager", 0))
def test_the_ring_partials_on_the_simulator(defines, seed):
    """11 on the 'ring' problem (8 K tiles) on the standard schedules, verified against the NVFP4 reference: at its
    default (6 stages, never refilled), with a 2-stage ring that wraps before the peers fill it, and with one stage
    at SPLIT_K = 4, whose partials are larger than the ring."""
    s = Stage("nvfp4/11_ring_partials", defines)
    r = sim_host.run(s, "ring", seed=3, sim_seed=seed)
    assert r["ok"] and r["sim"].ok, r["verify"]


def test_the_ring_partials_give_10s_bits():
    """The reduction is 10's, so on the same random inputs the simulated output of 11 is 10's bit for bit."""
    assert torch.equal(_simulated_out("nvfp4/10_reduce_scatter"), _simulated_out("nvfp4/11_ring_partials"))


def test_the_shared_memory_table_says_where_the_partials_sit_and_what_launches():
    from pelib.views import nvfp4 as v
    rows = {(r["stage"], r["SPLIT_K"], r["NUM_STAGES"]): r for r in v.smem_fit_table().rows}
    assert rows[("10_reduce_scatter", 2, 6)]["launches"].startswith("no") and rows[("10_reduce_scatter", 4, 4)]["launches"] == "yes"
    assert all(r["launches"] == "yes" and r["partials"] == "in the ring" for (n, _, _), r in rows.items() if n == "11_ring_partials")


def test_the_wide_tile_is_two_mmas_a_k_step_with_a_third_fewer_bytes_per_output():
    """12: TILE_N = 256 as two N = 128 MMAs per K step (idesc N = 128), one 256-row B box and one SFB box per 128-row
    block; 54 KiB a K tile, 13.5 KiB per 64 output columns (11: 18); 4 stages and 480 TMEM columns; on N = 7168 a
    split of 4 is 112 CTAs in one wave."""
    from pelib.kinds import nvfp4 as kn
    from pelib.views import nvfp4 as v
    ex = Stage("nvfp4/12_wide_tile").exports
    assert (ex["tile_n"], ex["mma_n"], ex["sfb_blocks"], ex["pipeline_stages"]) == (256, 128, 2, 4)
    assert ex["stage_tx_bytes"] == 54 * 1024 and ex["smem_bytes"] <= ex["smem_limit"] and not kn.check_layout(dict(ex))
    b = {r["stage"]: r for r in v.ktile_bytes_table(("11_ring_partials", "12_wide_tile")).rows}
    assert (b["11_ring_partials"]["KiB per 64 output columns"], b["12_wide_tile"]["KiB per 64 output columns"]) == ("18", "13.5")
    assert Stage("nvfp4/12_wide_tile", {"SPLIT_K": 4}).launch_config("k16384").ctas == 112
    assert [v.one_wave_split("12_wide_tile", s) for s in SHAPES] == [4, 4, 4]
    with pytest.raises(Exception, match="512"):
        Stage("nvfp4/12_wide_tile", {"NUM_STAGES": 5}).build
    with pytest.raises(Exception, match="TILE_N"):
        Stage("nvfp4/12_wide_tile", {"TILE_N": 192}).build


@pytest.mark.parametrize("defines", ({}, {"SPLIT_K": 4}, {"SPLIT_K": 4, "NUM_STAGES": 1}, {"TILE_N": 128}))
@pytest.mark.parametrize("seed", ("lazy", "eager", 0))
def test_the_wide_tile_on_the_simulator(defines, seed):
    """12 on the 'ring' problem (one 256-wide tile, 8 K tiles) on the standard schedules, verified against the NVFP4
    reference: both halves, each with its own B rows and scale-factor block."""
    s = Stage("nvfp4/12_wide_tile", defines)
    r = sim_host.run(s, "ring", seed=3, sim_seed=seed)
    assert r["ok"] and r["sim"].ok, r["verify"]


def test_the_wide_tile_gives_11s_bits_and_its_emulation_matches():
    """Each output column sums the same MMAs in the same K order as in 11: the simulated outputs are 11's to the bit;
    the emulator replays a 256-wide tile half by half from the exports (kinds.nvfp4.mma_half)."""
    assert torch.equal(_simulated_out("nvfp4/11_ring_partials"), _simulated_out("nvfp4/12_wide_tile"))
    s = Stage("nvfp4/12_wide_tile")
    assert s.kind.emulate_check(s, "ring", (0, 0), 3)["ok"]
    bad = s.kind.emulate_check(s, "ring", (0, 0), 3, overrides={"sfb_blocks": 1})   # exports that forget a block
    assert not bad["ok"] and "parts add to" in bad["error"]
