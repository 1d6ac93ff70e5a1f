"""Every stage file, byte for byte the source NVRTC compiles, run end to end on the CPU simulator (pelib.sim)
at its family's test size (problem 'sim': several K blocks, more tiles than the persistent grid's CTAs or
clusters), through the same host path as on a GPU (Stage.run: tensor maps, launch shape, argument binding,
pelib.verify's tolerances), with the standard schedules each (pelib.sim.engine.STANDARD_SEEDS: asynchronous operations
completing as late as allowed, as early as allowed, and a random interleaving); on exact-arithmetic inputs the
output is the reference bit for bit. A failure names the seed: --sim-seed <seed> reproduces it."""
import pytest
import torch

from pelib.sim import engine as sim, host as sim_host
from pelib import stages
from pelib.kinds.nvfp4 import max_stages_that_fit
from pelib.stage import Stage

SEEDS = sim.STANDARD_SEEDS   # lazy, eager and a random schedule
VARIANT_DEFINES = {"09_f28_kloop_unroll": {"K_ITERS": 3, "NUM_STAGES": 3}}   # unrolled for K / 128 slices


def _cases(family):
    return [(Stage(p).key, VARIANT_DEFINES.get(p.stem, {})) for p in stages.family_stages(family)]


SM90 = _cases("sm90")
FP8 = _cases("fp8")
VARIANTS = _cases("fp8/variants")
NVFP4 = _cases("nvfp4")


def run_sim(key, defines, seed, exact=False):
    s = Stage(key, defines)
    data = seed if isinstance(seed, int) else SEEDS.index(seed) + 10   # the inputs' seed: an integer
    t = s.inputs("sim", data, "sim", exact=exact) if exact else None
    r = sim_host.run(s, "sim", seed=data, sim_seed=seed, inputs=t)
    assert r["ok"], f"{s.label} seed {seed} (--sim-seed {seed}): {r['verify']}"
    assert r["sim"].ok and r["sim"].seed == seed
    return s, r, t


def _ids(cases):
    return [f"{k}{''.join(f'-{n}={v}' for n, v in d.items())}" for k, d in cases]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("key,defines", SM90, ids=_ids(SM90))
def test_sm90(key, defines, seed):
    run_sim(key, defines, seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("key,defines", FP8, ids=_ids(FP8))
def test_fp8(key, defines, seed):
    run_sim(key, defines, seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("key,defines", VARIANTS, ids=_ids(VARIANTS))
def test_fp8_variants(key, defines, seed):
    run_sim(key, defines, seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("key,defines", NVFP4, ids=_ids(NVFP4))
def test_nvfp4(key, defines, seed):
    run_sim(key, defines, seed)


# The swept defines: FP8 ring depth 4/5/6 and epilogue warps 4/5/6, NVFP4 every ring depth that fits.
def _nvfp4_rings():
    out = []
    for key in ("nvfp4/01_pipelined", "nvfp4/02_tma_store_epilogue"):
        top = max_stages_that_fit(Stage(key).exports)
        out += [(key, {"NUM_STAGES": n}) for n in range(1, top + 1) if n != Stage(key).exports["pipeline_stages"]]
    return out


SWEEPS = ([("fp8/06_stages", {"NUM_STAGES": n}) for n in (4, 5)]
          + [("fp8/05_epi_warps", {"NUM_EPI_WARPS": n}) for n in (5, 6)] + _nvfp4_rings()
          + [("nvfp4/02_tma_store_epilogue", {"STAGING_IN_RING": 0}),
             ("sm90/06_permuted_b", {"B_PERM_TMA": 0}),          # B permuted in shared memory by the consumers
             ("sm90/06_permuted_b", {"TURN_EARLY": 1}),
             ("sm90/03_staged_epilogue", {"EPI_TMA_STORE": 0}),
             ("sm90/01_warp_specialized", {"BLOCK_N": 128}),
             ("sm90/02_persistent_cluster", {"NUM_STAGES": 2})])


@pytest.mark.parametrize("key,defines", SWEEPS, ids=_ids(SWEEPS))
def test_swept_defines(key, defines):
    run_sim(key, defines, 0)


EXACT = SM90 + FP8 + VARIANTS + NVFP4


@pytest.mark.parametrize("key,defines", EXACT, ids=_ids(EXACT))
def test_exact_inputs_bit_identical(key, defines):
    """Small-integer inputs: every partial sum and the output are exact, so the simulated output equals the
    reference bit for bit (the form of the H100 proof, where the GPU's bytes equal the same reference)."""
    s, r, t = run_sim(key, defines, 1, exact=True)
    ref = s.kind.reference(s.problem("sim"), t)
    got = t["out"]
    assert got.dtype == ref.dtype
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16)), f"{s.label}: not bit-identical"


def test_command_line_runs_the_simulator_and_writes_its_trace(tmp_path, capsys):
    """python -m pelib.stage <stage> --device sim --trace out.json (pelib.sim.host's command line, which
    pelib.stage hands it to): the family's test size, verified, and the event log as a Chrome trace whose
    ruler is simulated order, not time."""
    import json

    from pelib.sim.host import main
    out = tmp_path / "trace.json"
    assert main(["sm90/06_permuted_b", "--device", "sim", "--trace", str(out)]) == 0
    text = capsys.readouterr().out
    assert "PASS sm90/06_permuted_b on sim" in text
    doc = json.loads(out.read_text())
    assert doc["otherData"]["evidence"] == "simulated order, not time"
    assert any(e["ph"] == "X" for e in doc["traceEvents"]) and any(e["ph"] == "M" for e in doc["traceEvents"])


def test_timing_build_runs_in_the_simulator():
    """The TIMING build's records, decoded by pelib.timing as on a GPU; its clock is the simulated counter
    (an order, labelled as such), never a time."""
    from pelib import timing
    tm = sim_host.run_timing(Stage("fp8/09_persistent_megakernel"), "sim")
    assert tm.recorded.any()
    assert (tm.end[tm.recorded] >= tm.start[tm.recorded]).all()
    assert tm.meta["clock"] == timing.SIM_ORDER and tm.meta["evidence"].startswith("simulated")
    # the launch-clock block: every CTA's warps stamped start and exit (PE_TIMING_CTA), decoded per CTA
    rec = (tm.cta_clock[..., 4] != 0) & (tm.cta_clock[..., 2] >= tm.cta_clock[..., 0])
    assert rec.any(axis=1).all() and tm.launch_clock()["ctas"] == tm.layout.ctas
    assert "not a clock" in tm.launch_clock()["note"]


def test_result_says_simulated():
    r = sim_host.run(Stage("nvfp4/00_single_stage"), "sim")
    assert r["ok"] and r["evidence"].startswith("simulated") and "ms" not in r
    assert r["report"].events and r["report"].stats["steps"] > 0


@pytest.mark.parametrize("key", ["sm90/06_permuted_b", "fp8/09_persistent_megakernel", "nvfp4/07_split_k_roles"])
def test_a_run_without_arithmetic_logs_the_same_events_and_bytes(key):
    """pelib.sim.host.events runs the stage with the MMAs computing nothing (the timing model wants its events
    alone): every event, field for field, and every global byte are those of the run that computes, on the same
    inputs and schedule; only the output differs (it is no GEMM)."""
    s = Stage(key)
    prob = s.problem("sim")
    out = {}
    for arith in (True, False):
        t = s.inputs(prob, 3, "sim")
        t["out"].fill_(0)
        rep = sim_host.plan(s, prob, t, seed=3, arithmetic=arith).run()
        out[arith] = (rep.events_array, rep.gmem, t["out"].clone())
    (ev1, g1, o1), (ev0, g0, o0) = out[True], out[False]
    assert len(ev1) > 1000 and ev1.tobytes() == ev0.tobytes()
    by_tensor = lambda g: g["tensor"]   # noqa: E731 (the report lists tensors in heap order)
    assert sorted(g1, key=by_tensor) == sorted(g0, key=by_tensor)
    assert not torch.equal(o1, o0)   # the check can fail: only the outputs tell the runs apart
