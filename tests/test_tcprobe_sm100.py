"""pelib.measure.tcprobe_sm100: the Blackwell tcgen05 numerics probe (src/kernels/probes/tcgen05_numerics.cu) compiled for
sm_100a, run end to end in the simulator (whose tcgen05.mma computes the modelled rules, so they must agree on
every output), and up to the launch on a stand-in B200: the command "The first hour on a B200" gives a reader."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from pelib.numerics import blockfma as F
from pelib.measure import tcprobe_sm100 as P

SIM_CLASSES = ["two_products", "carry_out", "chain4", "e5m2_specials", "mxf4_spread", "mxf4_two_products",
               "mxf4_chain4"]


@pytest.fixture(scope="module")
def builds():
    return {k: P.probe_build(k) for k in P.KINDS}


def test_the_probe_compiles_to_the_instructions_it_probes(builds):
    for kind, b in builds.items():
        h = b.histogram
        assert h.get("UTCOMMA" if kind == "mxf4nvf4" else "UTCQMMA", 0) >= 1, (kind, h)
        assert b.facts.spill_stores == 0 and b.exports["probe_m"] == 128
    assert builds["mxf4nvf4"].histogram.get("UTCCP", 0) >= 2      # the scale factors' tcgen05.cp


def test_every_job_has_its_arrays():
    for job in P.jobs(quick=True):
        arr = P.job_inputs(job)
        assert arr["a"].shape == (job.tiles, 128, 32 * job.steps) and arr["b"].shape == (job.tiles, job.n, 32 * job.steps)
        assert arr["d"].shape == (job.tiles, 128, job.n) and arr["sfa"].shape == (job.tiles, P.MAX_STEPS, 512)
        if job.kind != "mxf4nvf4":
            assert np.array_equal(arr["a"][:, :64], arr["a"][:, 64:])
    names = {j.name for j in P.jobs()}
    assert "chain8" not in names and "chain4_wait_each" not in names and set(P.MXF4_CLASSES) <= names
    with pytest.raises(P.ProbeError, match="unknown classes"):
        P.jobs(classes=["nope"])


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("tcprobe_sm100")
    return out, P.collect(out, device="sim", quick=True, classes=SIM_CLASSES)


def test_the_simulated_probe_prints_the_modelled_rules(simulated):
    """The simulator's tcgen05.mma (model/umma.h under the default accumulation) equals pelib.numerics.blockfma's
    modelled rules (MMA-Sim's, not yet run on a B200 here) on every output, TMEM lanes 0-63 and 64-127 agree, and the alternatives differ (so the
    B200's run can tell them apart)."""
    out, s = simulated
    assert s["evidence"] == "simulated" and s["unwritten"] == 0 and not s["errors"]
    for name, r in s["classes"].items():
        want = F.B200_MXF4NVF4.name if r["kind"] == "mxf4nvf4" else F.B200_F8F6F4.name
        assert r["mismatch"][want]["bits"] == 0, name
        if "lanes_0_63_vs_64_127" in r:
            assert r["lanes_0_63_vs_64_127"]["bits"] == 0
    tot = s["mismatch_total"]
    assert tot["f8f6f4:h100tc_matlab"] > 1000 and tot["f8f6f4:b200_f8_24bits"] > 0
    assert tot["mxf4nvf4:exact_sum"] > 1000 and tot["mxf4nvf4:mxf4_block16"] > 0 and tot["mxf4nvf4:mxf4_34bits"] > 0
    assert P.verdict(s)[0].startswith("f8f6f4: 0 mismatches for b200tc_f8f6f4")
    doc = json.loads((out / P.SUMMARY).read_text())
    assert doc["accumulation"] == "tensor_core" and set(doc["files"]) == set(P.FILES.values())


def test_up_to_the_launch_on_a_b200(monkeypatch, tmp_path):
    """On a stand-in B200 the GPU path builds, packs (a, b, sfa, sfb, d, out, steps, flags) and launches one
    CTA of 128 threads per tile; the stand-in writes the modelled rule's bits, which score 0."""
    from conftest import fake_info
    from pelib import device, launch
    launched = []

    def fake_launch(build, args, *, grid, block, **kw):
        launched.append((build, args, grid, block))
        job = next(j for j in P.jobs(True, ["carry_out", "mxf4_random"]) if P.KINDS[j.kind] == build.exports["probe_kind"])
        arr = P.job_inputs(job)
        want = P.evaluate(F.B200_MXF4NVF4 if job.kind == "mxf4nvf4" else F.B200_F8F6F4, job, arr)
        args[5].copy_(__import__("torch").from_numpy(want.view(np.int32)))

    monkeypatch.setattr(device, "current", lambda: fake_info("sm_100a"))
    monkeypatch.setattr(device, "require", lambda arch, info=None: fake_info(arch))
    monkeypatch.setattr(launch, "launch", fake_launch)
    monkeypatch.setattr(P, "_tensor", lambda x, dev: __import__("torch").from_numpy(
        np.array(np.ascontiguousarray(x).view(np.int32) if x.dtype == np.uint32 else x, copy=True)))
    s = P.collect(tmp_path, quick=True, classes=["carry_out", "mxf4_random"])
    assert s["evidence"] == "measured" and "B200" in s["device"]
    assert [(g, b) for _, _, g, b in launched] == [((1, 1, 1), (128, 1, 1))] * 2
    assert [type(x).__name__ for x in launched[0][1][6:]] == ["uint32", "uint32"]
    assert s["mismatch_total"]["f8f6f4:b200tc_f8f6f4"] == 0 and s["mismatch_total"]["mxf4nvf4:b200_mxf4nvf4_mmasim"] == 0


def test_every_pair_of_mxf4_candidates_is_told_apart_by_a_class():
    """A reader's B200 run picks one kind::mxf4nvf4 candidate: for every pair of MXF4_MODELS some probe class has
    outputs on which the two differ (8 rows of A of each class's first quick tile: 1,024 outputs a class). The
    classes that separate MMA-Sim's rule from its neighbours: a group that sums to zero under a large scale, and
    D far below the products."""
    outs = {}
    for job in P.jobs(quick=True):
        if job.kind != "mxf4nvf4":
            continue
        arr = P.job_inputs(job)
        rows = {k: v[:1, :8] if k in ("a", "sfa_rows", "d") else v[:1] for k, v in arr.items()}
        sub = P.Job(job.name, job.kind, job.cls, 1)
        outs[job.name] = {m.name: P.evaluate(m, sub, rows) for m in P.MXF4_MODELS}
    names = [m.name for m in P.MXF4_MODELS]
    assert len(set(names)) == len(names) and names[0] == F.B200_MXF4NVF4.name
    apart = {(x, y): [c for c, o in outs.items() if (o[x] != o[y]).any()] for x, y in itertools.combinations(names, 2)}
    assert all(apart.values()), [p for p, c in apart.items() if not c]
    for other in ("mxf4_groups_zero_sum_dropped", "b200_mxf4nvf4_guess", "mxf4_groups_34bits"):
        assert "mxf4_group_sums_zero" in apart[(F.B200_MXF4NVF4.name, other)], other


def test_an_hopper_is_refused(monkeypatch, tmp_path):
    from conftest import fake_info
    from pelib import device
    monkeypatch.setattr(device, "current", lambda: fake_info("sm_90a"))
    with pytest.raises(P.ProbeError, match="B200"):
        P.collect(tmp_path, classes=["carry_out"])
