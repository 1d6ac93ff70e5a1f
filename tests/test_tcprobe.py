"""pelib.measure.tcprobe and pelib.numerics.tcvectors: the wgmma numerics probe, its vectors, and the collection command end to end
in the simulator (whose wgmma arithmetic is model/blockfma.h's block FMA: h100tc_matlab must agree on every
output, and under the exact accumulation the exact sum must)."""
import json
import re

import numpy as np
import pytest
import torch

from pelib.numerics import blockfma as F
from pelib import launch
from pelib.isa import limits
from pelib.sim import engine as sim
from pelib.measure import tcprobe as P
from pelib.numerics import tcvectors as V
from pelib.build import build

from conftest import FakeCudaTensor, fake_info


@pytest.fixture(scope="module")
def builds():
    return {key: P.probe_build(*key) for key in ((128, "e4m3"), (192, "e4m3"), (256, "e4m3"), (256, "e5m2"))}


# ---- the kernel ----------------------------------------------------------------------------------------

def test_probe_compiles_for_each_n_the_stages_issue(builds):
    for (n, fmt), b in builds.items():
        assert b.facts.spills == 0 and b.dynamic_smem + b.facts.smem_static <= limits.SMEM_LIMIT
        assert b.exports["probe_n"] == n and b.exports["num_threads"] == 128
        t = fmt.upper()
        assert b.histogram["QGMMA"] == 30 and f"QGMMA.64x{n}x32.F32.{t}.{t}" in b.sass   # 1+1+2+2+4+4+8+8
    assert P.flag_bits(builds[256, "e4m3"], [V.FIRST_ZERO, V.WAIT_EACH]) == 3


def test_chained_wgmma_are_issued_back_to_back_like_the_stages(builds):
    """The 4- and 8-long chains are QGMMA after QGMMA with one scoreboard wait at the end (no fence, no
    wait and no serializing dummy HGMMA between them), as sm90/06 issues its K slice; the wait-each chains
    wait after every one."""
    sass = builds[256, "e4m3"].sass
    ops = [m.group(1) for m in re.finditer(r"(QGMMA|HGMMA|WARPGROUP\.DEPBAR|WARPGROUP\.ARRIVE)", sass)]
    runs, cur = [], 0
    for op in ops:
        cur = cur + 1 if op == "QGMMA" else 0
        runs.append(cur)
    assert max(runs) == 8 and 4 in runs and 2 in runs
    assert "HGMMA" not in ops
    stage = build("sm90/06_permuted_b.cu", "sm_90a").sass
    assert "QGMMA.64x256x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24 ;" in stage   # the same un-waited form


def test_launch_arguments_pack_for_a_hopper(builds):
    b = builds[256, "e4m3"]
    args = (FakeCudaTensor((2, 64, 32), torch.uint8), FakeCudaTensor((2, 256, 32), torch.uint8),
            FakeCudaTensor((2, 64, 256), torch.int32), FakeCudaTensor((2, 64, 256), torch.int32),
            np.uint32(1), np.uint32(0))
    plan = launch.prepare(b, args, grid=(2, 1, 1), block=(128, 1, 1), info=fake_info("sm_90a"))
    assert plan.kernel == P.KERNEL and plan.smem == b.exports["smem_bytes"] and plan.grid == (2, 1, 1)
    with pytest.raises(Exception, match="sm_90"):
        launch.prepare(b, args, grid=(2, 1, 1), block=(128, 1, 1), info=fake_info("sm_100a"))


# ---- the vectors ------------------------------------------------------------------------------------------

def test_every_class_makes_its_tiles_deterministically(builds):
    for c in V.CLASSES.values():
        a, b, d = c.generate(0, tiles=1)
        assert a.shape == (1, 64, c.k) and b.shape == (1, c.n, c.k) and d.shape == (1, 64, c.n)
        a2, b2, d2 = c.generate(0, tiles=1)
        assert np.array_equal(a, a2) and np.array_equal(b, b2) and np.array_equal(d, d2)
        if not c.name.endswith("single_product"):   # exhaustive, no draw
            a1, _, d1 = c.generate(1, tiles=1)
            assert not (np.array_equal(a, a1) and np.array_equal(d, d1)), c.name
        P.check_steps(builds[c.n, c.fmt], c.steps)
        P.flag_bits(builds[c.n, c.fmt], c.flags)
        assert c.pins and c.group in P.FILES


def test_the_classes_hold_what_they_pin():
    a, b, d = V.CLASSES["single_product"].generate()
    pairs = {(int(a[t, m, k]), int(b[t, n, k])) for t in range(4) for k in [int(np.flatnonzero(a[t].any(0))[0])]
             for m in range(64) for n in range(256)}
    assert len(pairs) == 65536 and (d[:4] == 0).all() and (d[4:] == 0x80000000).all()
    a, b, d = V.CLASSES["zero_signs"].generate()
    assert (a[0] == 0x80).all(1).any() and (b[0] == 0x38).all(1).any()             # rows of -0, columns of +1
    a, b, _ = V.CLASSES["random_bytes"].generate()
    assert not ((a & 0x7F) == 0x7F).any() and not ((b & 0x7F) == 0x7F).any()      # no NaN there
    a, b, _ = V.CLASSES["specials"].generate()
    assert ((a & 0x7F) == 0x7F).any() and ((b & 0x7F) == 0x7F).any()
    for x, y in zip(V.inputs(V.CLASSES["chain4_wait_each"]), V.inputs(V.CLASSES["chain4"])):
        assert np.array_equal(x, y)
    a, b, d = V.CLASSES["grouping"].generate()
    assert (b[..., :32] & 0x78 == 0x38).all()                                       # right factors in [1, 2)
    random = sum(c.tiles * 64 * c.n for c in V.CLASSES.values() if c.group == "random")
    assert random >= 1_000_000


def test_the_result_files_fit_even_uncompressed():
    for group in P.FILES:
        size = 0
        for job in P.jobs():
            if job.group == group:
                k = 32 * job.steps
                size += job.tiles * (64 * k + job.n * k + 2 * 4 * 64 * job.n)
        assert size <= P.MAX_FILE_BYTES, (group, size)
    assert len(P.FILES) + 1 <= 8


# ---- the command, end to end in the simulator ---------------------------------------------------------------

@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("tcprobe")
    return out, P.collect(out, device="sim", quick=True)


def test_the_simulated_probe_equals_the_measured_rule_on_every_output(simulated):
    """The simulator's wgmma (model/blockfma.h, default accumulation) prints what h100tc_matlab computes on
    every output of every class, E5M2 included: the C++ twin and the Python model agree end to end."""
    out, s = simulated
    assert s["evidence"] == "simulated" and s["unwritten"] == 0 and not s["errors"] and not s["skipped"]
    assert set(s["classes"]) == {j.name for j in P.jobs(quick=True)}
    for name, r in s["classes"].items():
        assert r["mismatch"]["h100tc_matlab"] == {"bits": 0, "values": 0, "nan_payload": 0}, name
        if "same_as" in r:
            assert r["same_as"]["bits"] == 0, name
    # the other models differ from it, so the comparison can fail
    assert s["mismatch_total"]["exact_sum"]["values"] > 100_000
    assert s["classes"]["carry_out"]["mismatch"]["h100tc_c"]["values"] > 0
    assert s["outputs"] == sum(r["outputs"] for r in s["classes"].values()) > 400_000


def test_the_exact_accumulation_option_is_the_exact_sum(tmp_path):
    """pelib.sim.engine.accumulation("exact"): the simulator's wgmma sums each instruction exactly (the old model)."""
    with sim.accumulation("exact"):
        s = P.collect(tmp_path, device="sim", quick=True, classes=["carry_out", "chain4", "e5m2_specials"],
                      models=(F.EXACT_SUM, F.H100TC_MATLAB))
    for name, r in s["classes"].items():
        assert r["mismatch"]["exact_sum"]["bits"] == 0, name
        assert r["mismatch"]["h100tc_matlab"]["values"] > 0, name


def test_the_files_round_trip(simulated):
    out, s = simulated
    doc = json.loads((out / P.SUMMARY).read_text())
    assert doc["git"] and doc["date"] and doc["builds"]["e4m3 N=256"]["qgmma"] == 30
    assert set(doc["files"]) == set(P.FILES.values())
    assert all((out / f).stat().st_size <= P.MAX_FILE_BYTES for f in doc["files"])
    data = P.load(out)
    for job in P.jobs(quick=True):
        a, b, d = P.job_inputs(job, 0)
        got = data[job.name]
        assert np.array_equal(got["a"], a) and np.array_equal(got["b"], b) and np.array_equal(got["d"], d)
        assert got["meta"]["steps"] == job.steps and got["out"].dtype == np.uint32
    # the offline scorer recomputes what collect printed
    again = P.score_dir(out, [F.EXACT_SUM, F.H100TC_MATLAB])
    for name, r in again.items():
        assert r == {k: s["classes"][name]["mismatch"][k] for k in r}


def test_score_command_takes_changed_presets(simulated, capsys):
    out, _ = simulated
    assert P.main(["score", str(out), "exact_sum", "h100tc_matlab:out_bits=23,ref=max_term"]) == 0
    text = capsys.readouterr().out
    assert "h100tc_matlab:out_bits=23,ref=max_term" in text and "chain4_wait_each" in text
    m = P.parse_model("h100tc_matlab:out_bits=23,ref=max_term,interleave=1,group=16")
    assert (m.out_bits, m.ref, m.interleave, m.group) == (23, "max_term", True, 16)


def test_collect_runs_up_to_the_launch_on_a_hopper(fake_gpu, tmp_path):
    """The GPU path with the launch replaced: pelib.launch is called with (a, b, d, out, steps, flags) as the
    kernel declares them, one CTA per tile, and the outputs the stand-in writes are scored."""
    plans, state = fake_gpu

    def fill():
        a, b, d, out, steps, flags = plans[-1].args
        first = not (int(flags) & 1)
        fmt = "e5m2" if plans[-1].build.exports["probe_e5m2"] else "e4m3"
        got = P.evaluate(F.EXACT_SUM, a.numpy(), b.numpy(), d.numpy().view(np.uint32), first, fmt)
        out.copy_(torch.from_numpy(got.view(np.int32)))

    state["fill"] = fill
    classes = ["chain_project", "zero_signs_first0", "random_spread", "e5m2_specials"]
    s = P.collect(tmp_path, quick=True, classes=classes, backend=P.GpuBackend("cpu"))
    assert s["evidence"] == "measured" and s["device"].startswith("H100") and not s["skipped"]
    assert [p.kw["grid"] for p in plans] == [(j.tiles, 1, 1) for j in P.jobs(True, classes)]
    assert [p.build.exports["probe_e5m2"] for p in plans] == [j.fmt == "e5m2" for j in P.jobs(True, classes)]
    assert all(p.kw["block"] == (128, 1, 1) for p in plans)
    assert [int(p.args[4]) for p in plans][:2] == [4, 1] and int(plans[0].args[5]) == 1
    assert s["mismatch_total"]["exact_sum"]["bits"] == 0 and s["unwritten"] == 0


def test_bad_requests_say_what_to_do(builds, tmp_path, monkeypatch):
    with pytest.raises(P.ProbeError, match="unknown vector classes"):
        P.jobs(classes=["nope"])
    with pytest.raises(P.ProbeError, match=r"instantiates \[1, 2, 4, 8\]"):
        P.check_steps(builds[256, "e4m3"], 3)
    with pytest.raises(P.ProbeError, match="probe_flag_nope"):
        P.flag_bits(builds[256, "e4m3"], ["nope"])
    with pytest.raises(P.ProbeError, match="PRESETS"):
        P.parse_model("nope")
    with pytest.raises(P.ProbeError, match="no field"):
        P.parse_model("h100tc_matlab:colour=1")
    with pytest.raises(P.ProbeError, match="gpu or sim"):
        P.collect(tmp_path, device="tpu")
    from pelib import device
    monkeypatch.setattr(device, "current", lambda: fake_info("sm_100a"))
    with pytest.raises(P.ProbeError, match="--device sim"):
        P.collect(tmp_path, device="gpu")
    with pytest.raises(P.ProbeError, match="no tcprobe"):
        P.load(tmp_path / "empty")
    monkeypatch.setattr(P, "MAX_FILE_BYTES", 100)
    with pytest.raises(P.ProbeError, match="fewer tiles"):
        P.write_npz(tmp_path, "random", {"x.a": np.arange(1000)})


@pytest.mark.gpu
def test_the_probe_on_a_hopper(tmp_path):
    """On an H100/H200: every quick job runs, writes every output, and the repeats print the same bits
    (what the models say is data, not a pass/fail: `python -m pelib.measure.tcprobe collect` records it)."""
    from pelib import device
    if device.current().cc != (9, 0):
        pytest.skip("the probe issues sm_90a wgmma: H100 or H200 only")
    s = P.collect(tmp_path, quick=True)
    assert not s["errors"] and s["unwritten"] == 0 and not s["skipped"]
    for name, r in s["classes"].items():
        if "same_as" in r:
            assert r["same_as"]["bits"] == 0, name
