"""The blind-validation measurement (pelib.predict.blind) up to the launch: what it measures, and one entry's whole path
(verify, time, the TIMING run's launch clock, the clock probe after, 06's phases) through fake launch plans."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pelib.measure import jobs, sweep
from pelib import timing
from pelib.predict import blind, probes
from pelib.stage import Stage, all_stages


def test_entries_are_every_sm90_stage_and_the_production_waits():
    e = blind.entries()
    files = {s.key for s in all_stages(("sm90",)) if not s.defines}
    assert {k for k, d in e if not d} == files
    assert e[0] == (blind.PHASE_STAGE, {}) and e[1] == (blind.PHASE_STAGE, {"PE_WAIT_KIND": 2})
    waits = [k for k, d in e if d]
    assert set(waits) == set(blind.WAIT_BUILDS) and all(d == {"PE_WAIT_KIND": 2} for k, d in e if d)
    assert len(e) == len(set((k, json.dumps(d, sort_keys=True)) for k, d in e))
    # the sweep's production build is among them
    assert all((k, d) in e for k, d in sweep.PRODUCTION)


GHZ = 1.4


def _fill_clock(buf, lay, ns=400_000):
    """A launch-clock block of a kernel that ran `ns` on every SM at GHZ, and two tiles of phase records
    (producer warp 0, consumer warps 4-11) where the layout has those warps."""
    ph = np.zeros((lay.ctas, lay.warps, lay.tiles, lay.phases, 2), np.int64)
    ids = {n: timing.phase_id(n) for n in ("producer_wait", "tma_issue", "tma_wait", "kloop", "epi_wait",
                                            "epi_phase1", "tile")}
    for i in range(min(2, lay.tiles)):
        t0 = 10_000 * (i + 1)
        if lay.warps > 11:
            for w in range(4, 12):
                for n, (a, b) in {"tma_wait": (0, 700), "kloop": (0, 4500), "epi_wait": (4500, 6700),
                                  "epi_phase1": (6700, 8200), "tile": (0, 8800)}.items():
                    ph[:, w, i, ids[n]] = (t0 + a, t0 + b)
            ph[:, 0, i, ids["producer_wait"]] = (t0, t0 + 3000)
            ph[:, 0, i, ids["tma_issue"]] = (t0, t0 + 4500)
    buf.view(-1)[:lay.phase_words] = torch.from_numpy(ph.reshape(-1))
    blk = np.zeros((lay.ctas, lay.warps, timing.CLOCK_WORDS), np.int64)
    for c in range(lay.ctas):
        g0 = 5_000_000 + 10 * c
        blk[c, :] = (1_000_000 + int(GHZ * g0), g0, 1_000_000 + int(GHZ * (g0 + ns)), g0 + ns, c + 1)
    buf.view(-1)[lay.phase_words:] = torch.from_numpy(blk.reshape(-1))


@pytest.fixture
def fake_entry(fake_gpu, monkeypatch):
    """A fake GPU whose launches write the reference into the output and a 1.4 GHz launch clock into any
    TIMING buffer; the full problem is 'small' (CPU reference), the check shapes only 'small'."""
    from pelib import launch
    from pelib.kinds import sm90
    plans, state = fake_gpu
    monkeypatch.setattr(sm90.Sm90, "CHECK_PROBLEMS", ("small",))
    made = []

    def prepare(build, args=(), **kw):
        grid = kw["grid"][0]

        class P:
            def run(self, stream=None):
                if "timing_clock_words" in build.exports:
                    lay = timing.layout(build, grid)
                    for a in args:
                        if isinstance(a, torch.Tensor) and a.dtype == torch.int64 and a.numel() == lay.words:
                            _fill_clock(a, lay)
                state["fill"]()
                return self

            def wait(self, timeout_s=30.0, stream=None):
                pass
        made.append(build.source.name)
        return P()
    monkeypatch.setattr(launch, "prepare", prepare)
    s = Stage("sm90/06_permuted_b")
    prob = s.problem("small")
    t = s.inputs(prob)
    ref = s.kind.reference(prob, t)
    state["fill"] = lambda: t["out"].copy_(ref)
    monkeypatch.setattr(jobs.Context, "check_problem", lambda ctx, st, name: (prob, t, ref))   # the check shape: the same inputs

    class Data:
        def full(self, st):
            return prob, t, ref
    return Data(), made


def test_one_entry_verifies_times_and_carries_its_clock(fake_entry, tmp_path):
    data, made = fake_entry
    job = {"kind": "blind", "stage": "sm90/06_permuted_b", "defines": {}, "label": "06_permuted_b"}
    res = {}
    job["out_dir"] = str(tmp_path)
    blind._run_entry(job, jobs.Context(data, 3, str(tmp_path)), res)
    assert res["ok"] and res["median_ms"] > 0 and res["checks"]["small"]["ok"]
    assert res["timing_run"]["launch_clock"]["ghz"] == pytest.approx(GHZ, rel=1e-3)
    assert res["clock_after"]["ghz"] == pytest.approx(GHZ, rel=1e-3) and res["clock_after"]["n"] == blind.CLOCK_AFTER
    assert res["cycles"] == pytest.approx(res["median_ms"] * 1e6 * GHZ, rel=1e-3)
    assert "calib_clock.cu" in made                       # the probe launched beside the stage
    # 06: its records saved beside the JSON and its phases over every tile
    rec = timing.load(tmp_path / res["records"])
    assert rec.cta_clock is not None and rec.meta["stage"] == "sm90/06_permuted_b"
    assert res["phases"]["launch_clock"]["ghz"] == pytest.approx(GHZ, rel=1e-3)
    assert res["phases"]["every_tile"]["phases"]["kloop"]["avg"] == 4500
    assert res["phases"]["summary_first16"]["epi_phase1"]["avg"] == 1500


def test_table_lines_show_clock_and_failures():
    doc = {"evidence": "measured (H100, 2026-11-28)", "copy": {"gbps": 3000.0}, "clock_method": "m",
           "entries": [{"label": "06_permuted_b", "median_ms": 0.92, "repeat_median_ms": 0.93, "cycles": 1.3e6,
                        "timing_run": {"launch_clock": {"ghz": 1.41}, "ms_over_normal": 1.01},
                        "clock_after": {"ghz": 1.5}},
                       {"label": "07_comb_resident", "ok": False, "error": "KernelFault: trap", "checks": {}}]}
    text = "\n".join(blind.table_lines(doc))
    assert "1.410" in text and "1.500" in text and "FAIL" in text


def test_clock_probe_binds_without_buffers(h100, monkeypatch):
    """The clock probe beside the stage needs no buffer of the suite: out, timing and two scalars."""
    b = probes.probe_build("clock", {})
    lay = timing.layout(b, 4)
    tb = torch.zeros(lay.words, dtype=torch.int64)
    out = torch.zeros(4 * int(b.exports["fields"]), dtype=torch.int64)
    args = probes.bind(b, probes.Launch("clock", {}, {"spin": 10, "ticks": 0}, 4), out, tb, {}, None)
    assert args[0] is out and args[1] is tb and int(args[2]) == 10


def test_every_build_an_entry_needs_is_built_first():
    todo = blind.entries()
    b = blind.builds_of(todo)
    assert len(b) == len(set((k, json.dumps(d, sort_keys=True), t) for k, d, t in b))
    for k, d in todo:
        assert (k, d, False) in b                                  # the timed build
        ts = blind.timing_stage(k, d)
        assert (ts.key, ts.defines, True) in b                     # the clock's TIMING build
    assert (blind.PHASE_STAGE, {"PE_TIMING_TILES": blind.PHASE_TILES}, True) in b
    assert blind.timing_stage("sm90/00_tma_wgmma", {}).defines == blind.CLOCK_ONLY
    assert blind.timing_stage(blind.PHASE_STAGE, {}).defines == {}


@pytest.mark.gpu
def test_blind_measures_06_on_the_gpu(tmp_path):
    """On a Hopper GPU: stage 06 in both wait builds, verified, timed, with its launch clock and phases."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 stages run on Hopper")
    blind.main(["--stage", blind.PHASE_STAGE, "--out", str(tmp_path), "--budget", "300"])
    (path,) = tmp_path.glob("blind-*.json")
    doc = json.loads(path.read_text())
    e = doc["entries"]
    assert len(e) == 2 and all(r["ok"] and r["median_ms"] > 0 for r in e)
    assert all(0.5 < r["timing_run"]["launch_clock"]["ghz"] < 2.5 and r["cycles"] > 0 for r in e)
    assert e[0]["phases"]["every_tile"]["phases"]["kloop"]["avg"] > 0
    assert (tmp_path / e[0]["records"]).exists()


def test_variants_move_one_define_of_a_stage_file_and_build():
    """A blind round's variants: each one define the stage file declares (an #ifndef default), moved off that
    default; listed once; after every plain entry; and each builds (its budgets asserted by NVRTC)."""
    import re
    plain, full = blind.entries(), blind.entries(variants=True)
    assert full[:len(plain)] == plain and len(full) == len(plain) + len(blind.VARIANTS)
    assert len({(k, json.dumps(d, sort_keys=True)) for k, d in blind.VARIANTS}) == len(blind.VARIANTS)
    for k, d in blind.VARIANTS:
        (name, value), = d.items()
        src = Stage(k).path.read_text()
        default = re.search(rf"#ifndef {name}\n#define {name} (\S+)", src)
        assert default, f"{k} declares no default for {name}"
        assert str(value) != default.group(1), f"{k} {name}={value} is its default"


def test_each_round_measures_variants_no_earlier_round_had():
    """A blind round's variants are new: no (stage, defines) of one set appears in another, each moves one
    define the stage file declares off its default, and the newest round's all build (NVRTC's budgets)."""
    import re
    seen = {}
    for name, chosen in blind.VARIANT_SETS.items():
        for k, d in chosen:
            key = (k, json.dumps(d, sort_keys=True))
            assert key not in seen, f"{k} {d} is in {seen.get(key)} and {name}"
            seen[key] = name
            (define, value), = d.items()
            default = re.search(rf"#ifndef {define}\n#define {define} (\S+)", Stage(k).path.read_text())
            assert default and str(value) != default.group(1), f"{name}: {k} {define}={value}"
    newest = list(blind.VARIANT_SETS)[-1]
    for k, d in blind.VARIANT_SETS[newest]:
        assert Stage(k, d).build.ptxas, (k, d)
