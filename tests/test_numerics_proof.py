"""pelib.measure.numerics_proof: the GPU emulation kernel of the tensor core's rule (src/kernels/probes/blockfma_emulate.cu)
run end to end in the simulator against pelib.numerics.blockfma, and the one GPU command up to its launches on a CPU."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pelib.numerics import blockfma as F
from pelib.measure import numerics_proof as N
from pelib import problems
from pelib.sim import proof as sim_proof

TINY = problems.PatchEmbed(name="emu", m=128, n=128, k=128, positions=196, tile={"m": 64, "n": 64, "k": 32})


def _bits(t):
    return t.view(torch.int16).numpy().view(np.uint16)


def _wild(seed=5):
    """Every finite E4M3 byte (subnormals, the largest values, both signs), comb of any BF16 magnitude, and one
    NaN in A and one in B: rows and columns of NaN outputs."""
    rng = np.random.default_rng(seed)
    t = TINY.make_inputs(seed=seed)
    a = rng.integers(0, 256, (128, 128)).astype(np.uint8)
    b = rng.integers(0, 256, (128, 128)).astype(np.uint8)
    a[(a & 0x7F) == 0x7F], b[(b & 0x7F) == 0x7F] = 0x3F, 0x41
    a[7, 9], b[100, 3] = 0x7F, 0xFF
    c = (rng.integers(0, 2, (196, 128)) << 15 | rng.integers(0x0080, 0x7F00, (196, 128))).astype(np.uint16)
    t["a"], t["b"] = (torch.from_numpy(x).view(torch.float8_e4m3fn) for x in (a, b))
    t["comb"] = torch.from_numpy(c.view(np.int16)).view(torch.bfloat16)
    return t


@pytest.mark.parametrize("comb_init", [False, True])
@pytest.mark.parametrize("inputs", ["project", "wild"])
def test_the_emulation_kernel_in_the_simulator_equals_pelib_blockfma(inputs, comb_init):
    """The kernel's own source on the CPU (pelib.sim) prints what pelib.numerics.blockfma's H100 model and the stage's
    epilogue print, on every output: the project's random operands and wild ones (subnormals, the largest
    values, NaN). The exact-sum model differs, so the comparison can fail."""
    t = TINY.make_inputs(seed=3) if inputs == "project" else _wild()
    got = _bits(N.emulate(t, TINY, comb_init, device="sim"))
    want = N.model_rows(t, TINY, np.arange(TINY.m), comb_init)
    assert np.array_equal(got, want)
    if inputs == "wild":
        assert ((want & 0x7FFF) > 0x7F80).sum() == 255            # row 7 and column 100 are NaN: 0x7FFF
        assert set(want[(want & 0x7FFF) > 0x7F80].tolist()) == {0x7FFF}
    exact = N.model_rows(t, TINY, np.arange(TINY.m), comb_init, model=F.EXACT_SUM)
    assert (exact != want).sum() > 100


def test_the_emulator_carries_the_models_constants(monkeypatch):
    b = N.emulator_build(False)
    assert (b.exports["emu_frac_bits"], b.exports["emu_out_bits"]) == (13, 13)
    with pytest.raises(N.ProofError, match="tiles M by 64"):
        N.check_problem(problems.PatchEmbed(name="sim", m=392, n=768, k=384, positions=196,
                                            tile={"m": 8, "n": 64, "k": 128}))
    monkeypatch.setattr(N, "MODEL", F.B200_F8F6F4)
    with pytest.raises(N.ProofError, match="b200tc_f8f6f4 is .25, 23"):
        N.emulator_build(False)


def test_sample_rows_cover_both_ends():
    rows = N.sample_rows(problems.patch_embed("medium"))
    assert len(rows) == N.MODEL_ROWS and rows[0] == 0 and rows[-1] == 50175 and len(set(rows)) == len(rows)


def test_the_command_runs_up_to_every_launch(fake_gpu, tmp_path, monkeypatch):
    """On a stand-in H100: the stages and the emulation kernel are launched as on the GPU (grid, block,
    typed arguments), the random jobs go through sim_proof's worker processes (PELIB_PROOF_FAKE: the reference
    stands in for the GPU), and numerics.json carries the device, date, git revision and every count."""
    plans, state = fake_gpu
    monkeypatch.setenv("PELIB_PROOF_FAKE", "1")
    monkeypatch.setattr(sim_proof, "random_jobs", lambda: [{"job": "random", "stage": "sm90/06_permuted_b"},
                                                          {"job": "specials", "stage": "sm90/08_comb_init"}])
    monkeypatch.setattr(N, "model_rows", lambda t, prob, rows, comb_init, model=N.MODEL:
                        np.zeros((len(rows), prob.n), np.uint16))
    monkeypatch.setattr(N, "emulator_checks", _small_only(N.emulator_checks))
    doc = N.collect(tmp_path, probe=False, problems=("small",))
    saved = json.loads((tmp_path / N.SUMMARY).read_text())
    assert saved["summary"] == doc["summary"] and saved["git"] and saved["date"] and "H100" in saved["device"]
    assert saved["evidence"].startswith("measured")
    emu = [p for p in plans if p.build.source.name == "blockfma_emulate.cu"]
    assert len(emu) == 2 and emu[0].kw["grid"] == (768 // 64, 5632 // 64, 1) and emu[0].kw["block"] == (256, 1, 1)
    assert [type(x).__name__ for x in emu[0].args[4:]] == ["uint32"] * 4
    assert set(doc["emulator"]) == {"sm90/06_permuted_b:small", "sm90/08_comb_init:small"}
    assert doc["summary"]["random_jobs"] == doc["summary"]["random_jobs_finished"] == 2
    assert (tmp_path / sim_proof.RANDOM_FILE).exists() and len(list(tmp_path.iterdir())) <= 8
    r = doc["random"]["jobs"]["specials:sm90/08_comb_init"]["outcome"]
    assert r["nan_outputs"] > 0 and r["outputs"] == 392 * 768


def _small_only(fn):
    return lambda info, problems=("small",), stages=N.FULL_STAGES: fn(info, problems, stages)


def test_the_book_views_name_their_evidence():
    """pelib.views.numerics: the rule and the models from the committed H100 probe (measured, device and date),
    the window drawn from a committed block whose GPU bits the rule reproduces, the random-input proof pending
    until a GPU run is committed."""
    from pelib.views import html, numerics as V
    rule, models = V.rule_table(), V.probe_table()
    assert "measured (NVIDIA H100 80GB HBM3, 2026-11-27)" in rule.caption and len(rule.rows) == len(V.STEPS)
    assert all(r["h100tc_matlab mismatches"] == 0 for r in rule.rows)
    row = next(r for r in models.rows if r["model"] == "h100tc_matlab")
    assert row["differ, NVIDIA H100 80GB HBM3"] == 0 and row["differ, NVIDIA H200"] == 0
    assert "measured (NVIDIA H200, 2026-11-27)" in models.caption
    t = V.block_terms()
    assert t["gpu"] == t["model"] != t["exact"] and t["R"] - t["grid"] == 13
    fig = V.window_figure()
    assert "measured (NVIDIA H100 80GB HBM3, 2026-11-27)" in html.figure_text(fig)
    proof = V.random_proof_table(simulate=False)
    if not list((V.ROOT / "results").glob("*/numerics.json")):
        assert proof.notes and "pelib.measure.numerics_proof" in proof.notes[0]
    b200 = V.b200_prediction_table()
    assert b200.caption.startswith("modelled (MMA-Sim, not yet run on a B200 here)")
    assert "pelib.measure.tcprobe_sm100 collect" in b200.caption
    assert [r["fraction bits below R"] for r in b200.rows] == [F.B200_F8F6F4.frac_bits, F.B200_MXF4NVF4.frac_bits2]


def _as_simulated(path):
    """Stand-in for the simulator: every job of a committed run with that run's own bits."""
    doc = json.loads(path.read_text())
    return {n: ({"outcome": r["outcome"]}, sim_proof.random_bits(doc, path, n).reshape(-1))
            for n, r in doc["random"]["jobs"].items()}


def test_a_second_gpus_run_joins_the_tables_as_it_is_committed(tmp_path):
    """An H100 numerics.json committed beside the H200's: both proof tables gain its row and columns from the
    files alone (measured, its device and date), and an output whose bits differ from the simulator's is
    counted for that device only."""
    import shutil
    from pelib.views import numerics as V
    src = next((p for p in sorted((V.ROOT / "results").glob("*-h200/numerics.json"))), None)
    if src is None:
        pytest.skip("no H200 run of pelib.measure.numerics_proof is committed")
    root = tmp_path / "results"
    h200, h100 = root / src.parent.name, root / "2026-11-28-h100"
    for d in (h200, h100):
        d.mkdir(parents=True)
        shutil.copy(src.parent / sim_proof.RANDOM_FILE, d / sim_proof.RANDOM_FILE)
    shutil.copy(src, h200 / N.SUMMARY)
    doc = json.loads(src.read_text())
    doc["device"], doc["date"] = "NVIDIA H100 80GB HBM3", "2026-11-28T10:00:00+00:00"
    name = "random:sm90/10_unrolled_kloop"   # one output of one job flipped in the H100's copy
    bits = dict(np.load(src.parent / sim_proof.RANDOM_FILE))
    sha = doc["random"]["jobs"][name]["outcome"]["sha256"]
    flipped = bits[sha[:16]].copy()
    flipped.reshape(-1)[5] ^= 1
    bits["f" * 16] = flipped
    doc["random"]["jobs"][name]["outcome"]["sha256"] = "f" * 64
    np.savez_compressed(h100 / sim_proof.RANDOM_FILE, **bits)
    (h100 / N.SUMMARY).write_text(json.dumps(doc))
    sims = _as_simulated(src)
    runs = V.random_proof_table(root, sims=sims)
    assert [r["file"] for r in runs.rows] == [f"results/{d.name}/{N.SUMMARY}" for d in (h200, h100)]
    assert [r["simulated ≠ measured"] for r in runs.rows] == [0, 1]
    assert "measured (NVIDIA H100 80GB HBM3, 2026-11-28)" in runs.caption and "simulated" in runs.caption
    stages = V.stage_proof_table(root, sims=sims)
    row = next(r for r in stages.rows if r["stage"] == "10_unrolled_kloop")
    assert (row["simulated ≠ H200"], row["simulated ≠ H100"]) == (0, 1) and len(stages.rows) == len(doc["random"]["jobs"])
    assert all(f"off the correctly rounded value, {c}" in stages.columns for c in ("H200", "H100"))
    assert "measured (NVIDIA H100 80GB HBM3, 2026-11-28)" in stages.caption
    from pelib.views import readme   # the README's generated line per run (`make readme` after the commit)
    lines = [ln for ln in readme.numerics_lines(root) if "random inputs" in ln]
    assert len(lines) == 2 and "NVIDIA H100 80GB HBM3 (2026-11-28" in lines[1]
    assert lines[1].endswith(f"`results/{h100.name}/{N.SUMMARY}`")
