"""Every stage file through the one host path (pelib.stage.Stage), on the CPU: its header and parent, its
parameter list and the arguments bound to it, its budgets, its launch configuration and tensor maps, one
emulated tile, and a timed run through a fake launch plan (tests/conftest.py). What only one family
needs is tested in its own file (test_fp8.py, test_nvfp4.py, test_hopper.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pelib.sim import engine as sim, host as sim_host
from pelib import stages, tma
from pelib.kinds.base import KindError
from pelib.stage import Stage, StageError, Timed, all_stages, parse_signature

ALL = all_stages()
IDS = [s.key for s in ALL]
from pelib.isa.limits import SMEM_LIMIT  # common/limits.cuh, checked against the CUDA guide in test_evidence


@pytest.fixture(scope="module", params=ALL, ids=IDS)
def stage(request):
    return request.param


def runnable(s, problem="small"):
    """The named problem, or for a stage whose K-loop is unrolled for one K (F28) the smallest one it runs."""
    p = s.problem(problem)
    ex = s.exports
    if "k_iters" in ex and p.k != ex["k_iters"] * ex.block_k:
        with pytest.raises(KindError, match="K_ITERS"):
            s.launch_config(p)
        p = s.problem("medium")
    return p


def small_inputs(s):
    p = runnable(s)
    return p, s.inputs(p, device="sim")     # CPU tensors: the inputs a launch would get, drawn on the CPU


# ---- the file --------------------------------------------------------------------------------------

def test_header_names_an_idea_and_a_parent(stage):
    h = stage.header
    assert h.idea and len(h.idea) > 10, h
    if stage.path in stages.family_stages(stage.family) and stage.path == stages.family_stages(stage.family)[0]:
        assert h.parent is None                       # the root of its family
    else:
        assert h.parent, f"{stage.key}: no parent"
        parent = Stage(h.parent)
        assert parent.family == stage.family and parent.path != stage.path
        assert parent.path.stem < stage.path.stem or "/variants/" in stage.key, "a parent comes earlier"
        d = stages.diff_stats(parent.path, stage.path)
        assert d["added"] + d["removed"] > 0, "a stage differs from its parent by one idea, not by none"


def test_families_share_one_signature(stage):
    first = Stage(stages.family_stages(stage.family)[0])
    names = [n for _, n in stage.signature]
    base = [n for _, n in first.signature]
    # a stage may add a tensor map (nvfp4 02's tmap_c, F24's tmap_out) and nothing else
    assert [n for n in names if not n.startswith("tmap_")] == [n for n in base if not n.startswith("tmap_")] or \
        stage.family == "nvfp4"
    assert all(n.startswith("tmap_") for n in names if n not in base and n not in ("out",))


def test_signature_parser():
    src = ('extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128, 1)\n'
           'k(const __grid_constant__ CUtensorMap tmap_a,  // A\n const u16* __restrict__ comb, float alpha,'
           ' /* c */ u32 M, u64* timing) {}')
    assert parse_signature(src) == ("k", [("CUtensorMap", "tmap_a"), ("u16 *", "comb"), ("float", "alpha"),
                                          ("u32", "M"), ("u64 *", "timing")])
    with pytest.raises(StageError, match="extern"):
        parse_signature("__global__ void k() {}")


# ---- compiled facts ---------------------------------------------------------------------------------

def test_budgets(stage):
    b, ex = stage.build, stage.exports
    assert b.facts.spills == 0, f"{stage.key}: {b.facts}"
    assert b.facts.registers <= min(255, 65536 // ex.num_threads)
    assert ex.smem_limit == SMEM_LIMIT
    assert ex.smem_bytes + b.facts.smem_static <= ex.smem_limit
    assert ex.num_threads <= 1024 and ex.num_threads % 32 == 0
    assert ex.pipeline_stages >= 1 and ex.epi_warps >= 1 and ex.cluster_x >= 1
    row = stage.facts_row()
    assert row["registers"] == b.facts.registers and row["smem (B)"] == ex.smem_bytes + b.facts.smem_static


def test_defines_reach_the_build_and_refusals_name_the_limit():
    s = Stage("fp8/06_stages")
    assert s.with_defines(NUM_STAGES=5).exports.pipeline_stages == 5
    why = Stage("fp8/07_smem_staged_epilogue", {"NUM_STAGES": 6}).check_compiles()
    assert why and "227 KB" in why                    # the kernel's static_assert, caught and shown
    assert Stage("fp8/07_smem_staged_epilogue").check_compiles() is None


# ---- launch -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("problem", ["small", "full"])
def test_launch_config(stage, problem):
    prob = runnable(stage, problem)
    cfg = stage.launch_config(prob)
    ex = stage.exports
    assert cfg.block == (ex.num_threads, 1, 1) and cfg.smem == ex.smem_bytes and cfg.cluster == (ex.cluster_x, 1, 1)
    assert cfg.ctas % ex.cluster_x == 0 and cfg.grid_kind == ex.grid_kind
    assert cfg.launch_cluster == ((1, 1, 1) if ex.cluster_in_kernel else cfg.cluster)
    assert cfg.tiles * ex.tile_m * ex.tile_n >= prob.m * prob.n     # every output element has a tile
    if cfg.persistent:
        assert cfg.ctas <= max(cfg.sm_count, cfg.unit) and cfg.ctas % cfg.unit == 0
        assert cfg.tiles_per_worker[1] - cfg.tiles_per_worker[0] <= 1
    else:
        assert cfg.ctas == cfg.tiles
    assert str(cfg.tiles_per_worker[0]) in cfg.describe() or not cfg.persistent


def test_occupancy_clamp_on_a_gpu(monkeypatch, h100, b200):
    """On a GPU that runs the stage, a persistent grid never asks for more clusters than are resident."""
    import pelib.stage as S
    for key, info in (("sm90/05_multicast_a", h100), ("fp8/09_persistent_megakernel", b200)):
        s = Stage(key)
        monkeypatch.setattr(S, "max_active_clusters", lambda b, kernel, cfg, device_index=0: 40)
        cfg = s.launch_config("full", info=info)
        assert cfg.active_clusters == 40 and cfg.ctas <= 40 * cfg.cluster[0] and cfg.ctas % cfg.unit == 0
        monkeypatch.setattr(S, "max_active_clusters", lambda b, kernel, cfg, device_index=0: None)
        assert s.launch_config("full", info=info).ctas == s.launch_config("full", sm_count=info.sm_count).ctas


def test_tensor_maps_from_the_exported_boxes(stage):
    prob, t = small_inputs(stage)
    specs = stage.tensor_map_specs(prob, t)
    params = [n[5:] for _, n in stage.signature if n.startswith("tmap_")]
    assert sorted(specs) == sorted(params)
    for p, spec in specs.items():
        rows, cols, sw = stage.exports.box(p)
        assert spec.swizzle == sw and spec.box[0] == cols and math.prod(spec.box[1:]) == rows, (p, spec.describe())
        assert spec.elem_bytes == stage.exports[f"tmap_{p}_elem_bytes"]
        assert spec.address != 0 and spec.problems() == []


def test_arguments_are_bound_by_name(stage):
    prob, t = small_inputs(stage)
    maps = {k: tma.TensorMap(v, cumap=("map", k)) for k, v in stage.tensor_map_specs(prob, t).items()}
    args = stage.args(prob, t, maps, timing=None)
    assert len(args) == len(stage.signature)
    for (typ, name), a in zip(stage.signature, args):
        if name.startswith("tmap_"):
            assert a is maps[name[5:]]
        elif name == "timing":
            assert a is None
        elif "*" in typ:
            assert a is t[stage.kind.TENSOR_ALIASES.get(name, name)]
        else:
            assert isinstance(a, np.generic) and a.dtype.itemsize == 4       # int, u32 or float: 4 bytes
            if name in "MNK":
                assert int(a) == getattr(prob, name.lower())
    with pytest.raises(StageError, match="tensor map"):
        stage.args(prob, t, {}, None)


def test_problem_that_does_not_tile_is_refused():
    from pelib import problems
    with pytest.raises(KindError, match="multiple"):
        Stage("fp8/02_tn256").launch_config(problems.patch_embed("tiny"))


def test_sim_device_plans_the_same_launch(stage):
    """pelib.sim.host.plan gives pelib.sim's plan with the launch shape and the arguments a GPU launch binds
    (tests/test_sim_stages.py runs them)."""
    prob, t = small_inputs(stage)
    plan = sim_host.plan(stage, prob, t, seed=3)
    ex = stage.exports
    assert isinstance(plan, sim.SimPlan) and plan.config is not None and plan.seed == 3
    assert plan.block == (ex.num_threads, 1, 1) and plan.smem == ex.smem_bytes
    assert plan.cluster == plan.config.cluster and plan.grid == plan.config.grid
    assert plan.grid[0] % ex.cluster_x == 0



def test_the_simulator_is_its_own_call():
    """Stage runs on the GPU or compiles; a simulated run, plan or TIMING run is pelib.sim.host's, and the
    refusal names it."""
    s = Stage("fp8/06_stages")
    prob, t = small_inputs(s)
    with pytest.raises(StageError, match=r"pelib\.sim\.host\.run\(stage"):
        s.run("sim", "sim")
    with pytest.raises(StageError, match=r"pelib\.sim\.host\.plan\(stage"):
        s.plan(prob, t, "sim")
    with pytest.raises(StageError, match=r"pelib\.sim\.host\.run_timing\(stage"):
        s.run_timing("sim", "sim")
    with pytest.raises(StageError, match="one of"):
        s.run("small", "tpu")

# ---- emulated -----------------------------------------------------------------------------------------

def test_one_emulated_tile(stage):
    ex = stage.exports
    r = stage.emulate_check(seed=3)          # every stage of every family replays (sm90 00-11 included)
    assert r["issues"] == [], r["issues"]
    if "epi_add_bf16x2" in ex:                        # F22 rounds twice by design: it equals its own model
        assert r["equals_bf16x2_model"]
    else:
        assert r["ok"], r


# ---- a timed run through a fake plan --------------------------------------------------------------------

def test_timed_run_through_a_fake_plan(stage, fake_gpu):
    """llm.c's order on the CPU: poison, launch, verify against the torch reference, only then time; the
    launch gets the stage's own configuration and waits through the plan's watchdog."""
    plans, state = fake_gpu
    prob = runnable(stage)
    t = stage.inputs(prob)
    ref = stage.kind.reference(prob, t)
    state["fill"] = lambda: t["out"].copy_(ref)
    res = stage.run(prob, inputs=t, ref=ref, time=Timed(iters=3, warmup=1))
    assert res["ok"] is True and res["ms"] > 0, res.get("verify")
    p = plans[-1]
    assert p.runs == 1 + 1 + 3 and p.waits >= 2
    assert p.grid == res["config"].grid and p.cluster == res["config"].launch_cluster
    assert p.smem == stage.exports.smem_bytes and p.block == (stage.exports.num_threads, 1, 1)


# ---- what is committed about it, and the command line ----------------------------------------------------

def test_stage_times_read_every_kind_of_committed_run(tmp_path):
    """results.stage_times: stage lists, pelib.measure.hopper_perf runs and sweeps, at their defaults and verified only,
    the newest run per chip, with cuBLAS's GEMM of the same run folder; Stage.table shows them per chip."""
    import json

    from pelib import results
    from pelib.stage import table
    h100 = tmp_path / "2026-01-02-h100"
    h100.mkdir()
    (h100 / "sm90-stages.json").write_text(json.dumps({"device": "H100", "date": "2026-01-02T00:00Z", "stages": [
        {"key": "06", "ok": True, "median_ms": 1.0}, {"key": "07", "ok": False, "median_ms": 2.0}]}))
    (h100 / "hopper-perf.json").write_text(json.dumps({"env": {"device": "H100", "date": "2026-01-02"}, "variants": [
        {"key": "10", "defines": {}, "ok": True, "median_ms": 0.9, "label": "10_unrolled_kloop"},
        {"key": "11", "defines": {"PE_UNBOUNDED_WAIT": 1}, "ok": True, "median_ms": 0.8, "label": "11 ..."}],
        "baselines": [{"name": "cublas_gemm", "status": "measured", "median_ms": 1.2}]}))
    h200 = tmp_path / "2026-01-03-h200"
    h200.mkdir()
    (h200 / "sweep-2026-01-03T000000-h200.json").write_text(json.dumps({"env": {"device": "H200", "date": "2026-01-03"},
        "variants": [{"stage": "sm90/06_permuted_b", "defines": {}, "ok": True, "median_ms": 0.5, "label": "06"},
                     {"stage": "sm90/06_permuted_b", "defines": {}, "ok": True, "median_ms": 0.4, "label": "06 [again]"}],
        "baselines": {"cublas_gemm": {"median_ms": 1.0}}}))
    (h200 / "broken.json").write_text("{")
    # a broken committed file is an error that names it, never skipped for an older result (pelib.results)
    with pytest.raises(results.ResultsFileError, match="broken.json"):
        results.stage_times(tmp_path)
    (h200 / "broken.json").unlink()
    t = results.stage_times(tmp_path)
    assert set(t) == {"sm90/06_permuted_b", "sm90/10_unrolled_kloop"}
    assert t["sm90/06_permuted_b"]["h100"] == {"ms": 1.0, "device": "H100", "date": "2026-01-02", "cublas_ms": 1.2,
                                               "file": "2026-01-02-h100/sm90-stages.json"}
    assert t["sm90/06_permuted_b"]["h200"]["ms"] == 0.5 and t["sm90/06_permuted_b"]["h200"]["cublas_ms"] == 1.0
    row = table([Stage("sm90/06_permuted_b"), Stage("fp8/06_stages")], measured=t).rows
    assert row[0]["H100 ms"] == "1.000 (2026-01-02)" and row[0]["H100 % of cuBLAS"] == "120%"
    assert row[0]["H200 % of cuBLAS"] == "200%" and row[1]["H100 ms"] == "" and row[1]["parent"] == "05_epi_warps"


def test_command_line_facts_sweep_and_a_refused_option(capsys):
    from pelib.stage import main
    assert main(["sm90/06_permuted_b", "--device", "compile"]) == 0
    out = capsys.readouterr().out
    assert "06_permuted_b" in out and "registers" in out and "launch on small: grid" in out
    assert main(["fp8/07_smem_staged_epilogue", "--device", "compile", "--sweep", "NUM_STAGES=4,6"]) == 1  # 6 does not fit
    out = capsys.readouterr().out
    assert "NUM_STAGES=4" in out and "NUM_STAGES=6: does not compile:" in out and "227 KB" in out


def test_stage_times_take_a_folders_newest_run_by_date_not_by_file_name(tmp_path):
    """Two runs in one folder: the one whose env records the later date wins, whatever the names' order."""
    import json

    from pelib import results
    d = tmp_path / "2026-01-02-h100"
    d.mkdir()
    (d / "hopper-sweep-2026-01-02T060000-h100.json").write_text(json.dumps({"env": {"device": "H100",
        "date": "2026-01-02T06:00:00+00:00"}, "variants": [{"stage": "sm90/06_permuted_b", "defines": {}, "ok": True,
                                                            "median_ms": 0.9, "label": "06"}]}))
    (d / "sm90-stages.json").write_text(json.dumps({"device": "H100", "date": "2026-01-02T03:00:00+00:00",
                                                    "stages": [{"key": "06", "ok": True, "median_ms": 1.1}]}))
    assert results.stage_times(tmp_path)["sm90/06_permuted_b"]["h100"]["ms"] == 0.9
