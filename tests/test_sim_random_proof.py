"""The simulator's data path on RANDOM inputs, bit for bit: every sm90 stage on the `sim` problem with the
project's random operands (pelib.sim.proof random jobs), and three epilogue forms with NaN and Inf planted.

Two witnesses: the layout-free model (pelib.numerics.blockfma's H100 rule on the global operands plus the stage's
epilogue, no shared memory, no descriptors), which needs no GPU; and the GPU's own bytes, committed by
`python -m pelib.measure.numerics_proof` under results/<date>-<device>/ (numerics.json, sim_proof_random.npz)."""
from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import torch

from pelib.measure import numerics_proof as N
from pelib.sim import engine as sim, proof as P
from pelib.kinds.base import bf16_bits
from pelib.paths import ROOT


def _compiler_missing() -> str | None:
    try:
        sim.compiler()
    except sim.SimToolchainError as e:
        return str(e)
    return None


pytestmark = pytest.mark.skipif(_compiler_missing() is not None, reason=f"pelib.sim: {_compiler_missing()}")
JOBS = P.random_jobs()


_name = P.job_name


@pytest.fixture(scope="module")
def sims():
    """Every random job in the simulator (seed 0; pelib.sim.proof.simulate_random_all: two processes at a time,
    each job once between these tests and the book): {job name: (record, bits)}."""
    return P.simulate_random_all(JOBS)


@pytest.fixture(scope="module")
def models():
    """The layout-free model's output bits of every input set and epilogue: the rule through the simulator's
    C++ (pelib.sim.engine.dot_f8_tiles) on the global operands, then the epilogue in numpy: {(job kind, comb_init): bits}."""
    out = {}
    for j in JOBS:
        s = P.Stage(j["stage"])
        init = s.exports.get("comb_init", 0) == 1
        if (j["job"], init) not in out:
            prob = s.problem(P.PROBLEM)
            t = s.inputs(prob, P.SEED, "sim")
            t = P.plant_specials(t) if j["job"] == "specials" else t
            out[j["job"], init] = N.model_rows(t, prob, np.arange(prob.m), init, cxx=True).reshape(-1)
    return out


def _model_of(models, name):
    job, stage = name.split(":", 1)
    return models[job, P.Stage(stage).exports.get("comb_init", 0) == 1]


@pytest.fixture(scope="module")
def runs(sims, models):
    """{job name: the simulated record, with the model's sha256 beside it}."""
    return {n: {**rec, "model_sha256": P.sha256(_model_of(models, n))} for n, (rec, _) in sims.items()}


@pytest.mark.parametrize("name", [_name(j) for j in JOBS])
def test_the_simulated_stage_prints_the_layout_free_model(runs, name):
    """Simulated (the stage's own source: TMA, swizzles, descriptors, fragments, the epilogue's stores) equals
    the rule applied to the global operands, bit for bit; the stages differ from the correctly rounded
    reference on thousands of outputs, so the comparison is not with a rounding-free answer."""
    r = runs[name]
    o = r["outcome"]
    assert o["kind"] == "finished" and r["accumulation"] == "tensor_core", r
    assert o["sha256"] == r["model_sha256"], name
    assert o["differ_from_reference"] > 5000
    if name.startswith("specials"):
        assert o["nan_outputs"] > 700


def test_stages_sharing_one_order_of_additions_share_one_output(runs):
    """Every stage but 08 adds comb after the last wgmma, in K order: one output; 08 starts from comb: another."""
    shas = {r["outcome"]["sha256"] for n, r in runs.items() if n.startswith("random:") and "08_comb" not in n}
    assert len(shas) == 1 and runs["random:sm90/08_comb_init"]["outcome"]["sha256"] not in shas


def _committed():
    """Every committed random-input run: pelib.measure.numerics_proof's (all jobs) and pelib.measure.energy's (the stages added
    since, P.RANDOM_SUMMARY), oldest folder first."""
    return sorted([*ROOT.glob("results/*/" + N.SUMMARY), *ROOT.glob("results/*/" + P.RANDOM_SUMMARY)],
                  key=lambda p: (p.parent.name, p.name))


@pytest.mark.parametrize("path", _committed() or [None], ids=lambda p: p.parent.name if p else "none")
def test_the_simulator_prints_the_gpus_bytes(runs, path):
    """Each committed GPU run (H100, H200): every random job's simulated sha256 is the GPU's, and the committed
    bits hash to it."""
    if path is None:
        pytest.skip("no results/*/numerics.json committed yet: run `PYTHONPATH=src python3 -m pelib.measure.numerics_proof "
                    "--out DIR` on an H100 / H200 and commit DIR")
    doc = json.loads(path.read_text())
    jobs = doc["random"]["jobs"]
    assert set(jobs) <= set(runs), "the committed run has jobs that pelib.sim.proof.random_jobs() no longer has"
    # A job a whole run (numerics.json) lacks is a stage added after it: a later committed run records it,
    # or pelib.sim.proof.AWAITING_GPU names its stage until one does. A P.RANDOM_SUMMARY run holds some jobs only.
    if path.name != P.RANDOM_SUMMARY:
        later = {n for q in _committed() if q.parent.name > path.parent.name
                 for n in json.loads(q.read_text())["random"]["jobs"]}
        missing = set(runs) - set(jobs) - later
        assert {n.split(":", 1)[1] for n in missing} <= set(P.AWAITING_GPU), sorted(missing)
    for name, g in jobs.items():
        assert g["outcome"]["kind"] == "finished", (name, g["outcome"])
        assert runs[name]["outcome"]["sha256"] == g["outcome"]["sha256"], name
        assert P.sha256(P.random_bits(doc, path, name)) == g["outcome"]["sha256"]


@pytest.mark.parametrize("path", _committed() or [None], ids=lambda p: p.parent.name if p else "none")
def test_the_gpus_epilogue_is_the_models_given_the_accumulator(models, path):
    """The epilogue bit for bit on random inputs, given the accumulator: each committed GPU output equals the
    rule's FP32 accumulator (the C++ model, no simulator) put through the stage's epilogue in numpy (+ comb in
    FP32, round to nearest even to BF16; comb_init: the accumulator starts from comb), NaN and Inf included:
    every NaN output is 0x7FFF and every planted infinity comes out as itself. The comparison can fail: the
    same accumulators rounded toward zero, or with comb added after the BF16 rounding, differ on thousands."""
    if path is None:
        pytest.skip("no results/*/numerics.json committed yet")
    doc = json.loads(path.read_text())
    seen = {}
    for name in doc["random"]["jobs"]:
        gpu = P.random_bits(doc, path, name).reshape(-1)
        want = _model_of(models, name)
        assert int((gpu != want).sum()) == 0, name
        nan, inf = (gpu & 0x7FFF) > 0x7F80, (gpu & 0x7FFF) == 0x7F80
        assert set(np.unique(gpu[nan]).tolist()) <= {0x7FFF}, name
        seen[name] = (int(nan.sum()), sorted(set(np.unique(gpu[inf]).tolist())))
    for name, (nan, inf) in seen.items():
        if name.startswith("specials:"):
            assert nan > 700 and inf == [0x7F80, 0xFF80], (name, nan, inf)   # +Inf and -Inf both planted
        else:
            assert (nan, inf) == (0, []), name
    # The same accumulators through two wrong epilogues (stage 06: comb added after the last instruction).
    s = P.Stage("sm90/06_permuted_b")
    prob = s.problem(P.PROBLEM)
    t = s.inputs(prob, P.SEED, "sim")
    a, b = (t[k].contiguous().view(torch.uint8).numpy() for k in ("a", "b"))
    zero = np.zeros((1, prob.m, prob.n), np.uint32)
    acc = sim.dot_f8_tiles(a[None], b[None], zero, "e4m3", False, model=N.MODEL)[0].view(np.float32)
    comb = t["comb"].float().numpy()[np.arange(prob.m) % prob.positions]
    gpu = P.random_bits(doc, path, "random:sm90/06_permuted_b").reshape(prob.m, prob.n)
    assert np.array_equal(bf16_bits(acc + comb), gpu)
    toward_zero = ((acc + comb).view(np.uint32) >> 16).astype(np.uint16)
    rounded_first = bf16_bits((bf16_bits(acc).astype(np.uint32) << 16).view(np.float32) + comb)
    assert (toward_zero != gpu).sum() > 10_000 and (rounded_first != gpu).sum() > 1_000


def test_planted_specials_are_where_they_were_put():
    t = P.plant_specials({"a": torch.zeros(80, 128, dtype=torch.float8_e4m3fn),
                          "comb": torch.zeros(196, 768, dtype=torch.bfloat16)})
    a, c = t["a"].view(torch.uint8), t["comb"].view(torch.int16)
    assert (a[3, 5], a[70, 100]) == (0x7F, 0xFF) and int((a != 0).sum()) == 2
    assert [int(c[r, k]) & 0xFFFF for r, k in ((10, 17), (11, 18), (12, 19), (13, 20))] == [0x7FC0, 0x7F80, 0xFF80, 0xFFC1]
