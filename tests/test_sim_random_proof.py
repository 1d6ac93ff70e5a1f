"""The simulator's data path on RANDOM inputs, bit for bit: every sm90 stage on the `sim` problem with the
project's random operands (pelib.sim_proof random jobs), and three epilogue forms with NaN and Inf planted.

Two witnesses: the layout-free model (pelib.blockfma's H100 rule on the global operands plus the stage's
epilogue, no shared memory, no descriptors), which needs no GPU; and the GPU's own bytes, committed by
`python -m pelib.numerics_proof` under results/<date>-<device>/ (numerics.json, sim_proof_random.npz)."""
from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import torch

from pelib import numerics_proof as N, sim, sim_proof as P
from pelib.paths import ROOT


def _compiler_missing() -> str | None:
    try:
        sim.compiler()
    except sim.SimToolchainError as e:
        return str(e)
    return None


pytestmark = pytest.mark.skipif(_compiler_missing() is not None, reason=f"pelib.sim: {_compiler_missing()}")
JOBS = P.random_jobs()


def _name(job):
    return f"{job['job']}:{job['stage']}"


@pytest.fixture(scope="module")
def runs():
    """Every random job in the simulator (seed 0), two processes at a time, with the sha256 of the layout-free
    model's output of the same inputs (the rule through the simulator's C++, pelib.sim.dot_f8_tiles, computed
    once per input set and epilogue): {job name: record}."""
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as ex:
        out = {_name(j): r for j, r in zip(JOBS, ex.map(P.run_random, JOBS, ["sim"] * len(JOBS), [None] * len(JOBS)))}
    models = {}
    for j in JOBS:
        s = P.Stage(j["stage"])
        init = s.exports.get("comb_init", 0) == 1
        if (j["job"], init) not in models:
            prob = s.problem(P.PROBLEM)
            t = s.inputs(prob, P.SEED, "sim")
            t = P.plant_specials(t) if j["job"] == "specials" else t
            models[j["job"], init] = P.sha256(N.model_rows(t, prob, np.arange(prob.m), init, cxx=True))
        out[_name(j)]["model_sha256"] = models[j["job"], init]
    return out


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
    return sorted(ROOT.glob("results/*/" + N.SUMMARY))


@pytest.mark.parametrize("path", _committed() or [None], ids=lambda p: p.parent.name if p else "none")
def test_the_simulator_prints_the_gpus_bytes(runs, path):
    """Each committed GPU run (H100, H200): every random job's simulated sha256 is the GPU's, and the committed
    bits hash to it."""
    if path is None:
        pytest.skip("no results/*/numerics.json committed yet: run `PYTHONPATH=src python3 -m pelib.numerics_proof "
                    "--out DIR` on an H100 / H200 and commit DIR")
    doc = json.loads(path.read_text())
    jobs = doc["random"]["jobs"]
    assert set(jobs) == set(runs), "the committed run has other jobs than pelib.sim_proof.random_jobs()"
    for name, g in jobs.items():
        assert g["outcome"]["kind"] == "finished", (name, g["outcome"])
        assert runs[name]["outcome"]["sha256"] == g["outcome"]["sha256"], name
        assert P.sha256(P.random_bits(doc, path, name)) == g["outcome"]["sha256"]


def test_planted_specials_are_where_they_were_put():
    t = P.plant_specials({"a": torch.zeros(80, 128, dtype=torch.float8_e4m3fn),
                          "comb": torch.zeros(196, 768, dtype=torch.bfloat16)})
    a, c = t["a"].view(torch.uint8), t["comb"].view(torch.int16)
    assert (a[3, 5], a[70, 100]) == (0x7F, 0xFF) and int((a != 0).sum()) == 2
    assert [int(c[r, k]) & 0xFFFF for r, k in ((10, 17), (11, 18), (12, 19), (13, 20))] == [0x7FC0, 0x7F80, 0xFF80, 0xFFC1]
