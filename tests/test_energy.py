"""pelib.measure.energy up to the launch: the entries, the clock decoders, the input sets and their exact outputs,
the regimes (bursts with the clock of each launch, sustained windows with NVML's energy) run end to end
through stand-ins for the GPU (launches, events, NVML, cuBLAS), the jobs and the per-tile tables."""
import time

import pytest
import torch

from pelib.measure import baselines, energy, nvml
from pelib import launch, problems
from pelib import timing as _timing

from conftest import FakePlan, fake_info

# 8 images of 196 patches, K = 128: whole 64-row tiles are not needed (the last one is partial)
SMALL = problems.PatchEmbed(name="energy-test", m=196 * 8, n=768, k=128, positions=196,
                            tile={"m": 8, "n": 64, "k": 128})
GHZ_AFTER, GHZ_LAUNCH = 1.62, 1.45


def test_entries_name_what_they_run_and_refuse_what_does_not_fit():
    e = energy.stage_entry("sm90/06_permuted_b")
    assert e.name == "06" and e.define_dict == {"PE_WAIT_KIND": 2} and e.stage == "sm90/06_permuted_b"
    assert energy.Entry.from_dict(e.as_dict()) == e
    assert energy.stage_entry("sm90/10_unrolled_kloop", {"PREFETCH_TILES": 1}).name == "10 PREFETCH_TILES=1"
    with pytest.raises(energy.EnergyError, match="give a stage or a baseline"):
        energy.Entry("x")
    with pytest.raises(energy.EnergyError, match="not a cuBLAS row"):
        energy.Entry("x", baseline="triton_fused")
    names = [x.name for x in energy.LIMITER]
    assert names[:4] == ["06", "10", "cuBLAS fast-accum GEMM", "cuBLAS GEMM"]
    assert all(x.probe and x.bursts_only for x in energy.PROBES)
    assert {x.stage for x in energy.STAGES if x.stage} >= set(energy.NEW_STAGES) | set(energy.PARENTS)
    # the stages run: every sub-stage beside its declared parent, 06, 10, cuBLAS and the probes of 06
    from pelib.stage import Stage
    have = {x.stage for x in energy.STAGES if x.stage}
    assert all(Stage(k).header.parent in have for k in energy.NEW_STAGES)
    assert {"sm90/06a_multicast_a", "sm90/06b_one_prefetcher", "sm90/07b_multicast_a"} <= set(energy.NEW_STAGES)
    assert [x for x in energy.STAGES if x.probe] == energy.PROBES and energy.CUBLAS[0] in energy.STAGES
    assert energy.rotate([1, 2, 3], 1) == [2, 3, 1] and energy.rotate([1, 2, 3], 4) == [2, 3, 1]


def test_energy_fit_is_the_counter_slope():
    rows = [{"t": 10 + 0.01 * i, "energy_mj": 1000 + 100 * (i // 10) * 10} for i in range(100)]   # steps of 1 J / 0.1 s
    assert energy.energy_fit(rows, 10.0, 11.0) == pytest.approx(10.0, rel=0.05)
    assert energy.energy_fit(rows, 10.0, 10.05) is None       # one counter value: no slope


def test_input_sets_and_their_exact_outputs():
    t = SMALL.make_inputs(seed=1)
    saved = {k: t[k].clone() for k in ("a", "b")}
    a_ptr = t["a"].data_ptr()
    energy.set_inputs(t, "zeros", saved)
    assert t["a"].view(torch.uint8).max() == 0 and t["a"].data_ptr() == a_ptr     # in place: the maps hold it
    out = t["comb"].repeat(8, 1)                                                      # A.B = 0: comb per row
    assert energy.exact_output_ok(out, t, "zeros", SMALL, with_comb=True)
    energy.set_inputs(t, "ones", saved)
    assert float(t["b"].float().min()) == float(t["b"].float().max()) == 1.0
    out = (128.0 + t["comb"].float()).to(torch.bfloat16).repeat(8, 1)
    assert energy.exact_output_ok(out, t, "ones", SMALL, with_comb=True)
    out[5, 7] += 1
    assert not energy.exact_output_ok(out, t, "ones", SMALL, with_comb=True)
    assert energy.exact_output_ok(torch.full((SMALL.m, SMALL.n), 128.0, dtype=torch.bfloat16), t, "ones", SMALL,
                                  with_comb=False)
    energy.set_inputs(t, "random", saved)
    assert torch.equal(t["a"].view(torch.uint8), saved["a"].view(torch.uint8))
    with pytest.raises(energy.EnergyError, match="input set 'twos'"):
        energy.set_inputs(t, "twos", saved)


class FakeDev:
    """NVML's readings of a card drawing 650 W at 1,455 MHz (the energy counter advances with host time)."""

    def __init__(self):
        self.t0 = time.perf_counter()

    def energy_mj(self):
        return int(650_000 * (time.perf_counter() - self.t0))

    def power_limit_w(self):
        return 700.0

    def sample(self):
        return {"t": time.perf_counter(), "energy_mj": self.energy_mj(), "power_w": 650.0, "sm_mhz": 1455,
                "mem_mhz": 2619, "reasons": 0x4, "temp_c": 60}


@pytest.fixture
def fake_run(fake_gpu, monkeypatch):
    """Launches that compute what the kernels would (the stage's output, the clock probe's and the TIMING
    build's records), cuBLAS as a CPU GEMM, and short regimes."""
    from pelib.kinds import sm90
    ref = sm90.Sm90().reference

    def prepare(build, args=(), **kw):
        kern = build.kernel

        def run():
            if kern == "calib_clock":     # the clock probe: its launch-clock block, every SM at GHZ_AFTER
                lay = _timing.layout(build, kw["grid"][0])
                blk = args[1][lay.phase_words:].view(-1, 5)
                blk[:, 0], blk[:, 1] = 1000, 5000
                blk[:, 2], blk[:, 3] = 1000 + int(GHZ_AFTER * 40_000), 5000 + 40_000
                blk[:, 4] = torch.arange(blk.shape[0]) + 1
                return
            t = state["t"]
            key = (int(t["a"].view(torch.uint8)[:64].sum()), int(t["b"].view(torch.uint8)[:8].sum()))
            if state.get("key") != key:     # the reference once per input set
                state["key"], state["ref"] = key, ref(SMALL, t)
            if state.get("written") != key or torch.isnan(t["out"][0, 0]):     # written, unless it still is
                t["out"].copy_(state["ref"])
                state["written"] = key
            tb = args[-1]
            if tb is not None:            # a TIMING build: the launch-clock block after no phase records
                blk = tb.view(-1, 5)
                blk[:, 0], blk[:, 1] = 10, 20
                blk[:, 2], blk[:, 3] = 10 + int(GHZ_LAUNCH * 900_000), 20 + 900_000
                blk[:, 4] = torch.arange(blk.shape[0]) // 12 + 1
        return FakePlan(build, args, kw, run)

    state = {}
    monkeypatch.setattr(launch, "prepare", prepare)
    def gemm(t):
        key = (int(t["a"].view(torch.uint8)[:64].sum()), int(t["b"].view(torch.uint8)[:8].sum()))
        if state.get("gemm_key") != key:
            state["gemm_key"], state["gemm"] = key, (t["a"].float() @ t["b"].float().T).to(torch.bfloat16)
        return state["gemm"]
    monkeypatch.setattr(baselines, "cublas_fns", lambda prob, t: {n: (lambda: gemm(t)) for n in baselines.cublas_names()})
    monkeypatch.setattr(energy, "SUSTAIN_S", 0.005)
    monkeypatch.setattr(energy, "LEAD_S", 0.005)
    monkeypatch.setattr(energy, "IDLE_S", 0.0)
    return state


def test_measure_runs_every_regime_through_stand_ins(fake_run):
    t = SMALL.make_inputs(seed=2)
    fake_run["t"] = t
    saved = {k: t[k].clone() for k in ("a", "b")}
    entries = [energy.stage_entry("sm90/06_permuted_b"), energy.CUBLAS[0], energy.PROBES[2]]
    logs = []
    res = energy.measure(entries, SMALL, t, saved, dev=FakeDev(), info=fake_info("sm_90a"), iters=3,
                         rounds={"random": 2, "zeros": 1, "ones": 1}, log=logs.append, sleep=lambda s: None)
    assert res["verify"] == {"06": {"zeros": True, "ones": True},
                             "cuBLAS fast-accum GEMM": {"zeros": True, "ones": True}}
    bursts = res["burst"]
    assert len(bursts) == 3 * 2 + 2 * 1 + 2 * 1        # the probe on random inputs only
    b06 = next(b for b in bursts if b["entry"] == "06")
    assert b06["plain"]["n"] == 3 and b06["clocked"]["clock_after_ghz"] == [pytest.approx(GHZ_AFTER)] * 3
    assert b06["stamped"]["clock_ghz"] == [pytest.approx(GHZ_LAUNCH)] * 3
    assert "stamped" not in next(b for b in bursts if b["entry"].startswith("cuBLAS"))
    assert "stamped" in next(b for b in bursts if b["entry"].startswith("probe"))
    sus = res["sustained"]
    assert {(s["entry"], s["inputs"]) for s in sus} == {(e, k) for e in ("06", "cuBLAS fast-accum GEMM")
                                                        for k in ("random", "zeros", "ones")}
    s0 = sus[0]
    assert s0["launches"] >= 2 and s0["power_w"] == pytest.approx(650, rel=0.25)
    assert s0["j_per_launch"] == pytest.approx(s0["energy_j"] / s0["launches"])
    assert s0["nvml"]["reasons"] == {"0x4": ["sw_power_cap"]} and s0["clock_after_ghz"] == pytest.approx(GHZ_AFTER)
    assert torch.equal(t["a"].view(torch.uint8), saved["a"].view(torch.uint8))      # random inputs restored
    rows = energy.summarize({"entries": [e.as_dict() for e in entries], **res})
    r06 = next(r for r in rows if r["entry"] == "06")
    assert r06["launch clock (GHz)"] == pytest.approx(GHZ_LAUNCH) and r06["clock after (GHz)"] == pytest.approx(GHZ_AFTER)
    assert r06["J/launch (random)"] > 0 and "burst ms (zeros)" in r06 and "sustained ms (ones)" in r06
    assert r06["x cuBLAS fast (burst)"] > 0 and r06["J / cuBLAS fast J"] > 0
    assert "06" in energy.format_summary(rows) and any("[sustained] 06 zeros" in x for x in logs)
    assert set(res["launch"]) == {"06", energy.PROBES[2].name} and res["launch"]["06"]["block"] == [384, 1, 1]


def test_measure_without_nvml_still_times(fake_run):
    t = SMALL.make_inputs(seed=2)
    fake_run["t"] = t
    res = energy.measure([energy.CUBLAS[1]], SMALL, t, {k: t[k].clone() for k in ("a", "b")}, dev=None,
                         info=fake_info("sm_90a"), iters=2, rounds={"random": 1}, inputs=("random",),
                         log=lambda *a: None, sleep=lambda s: None)
    assert "j_per_launch" not in res["sustained"][0] and res["sustained"][0]["ms_per_launch"] > 0
    with pytest.raises(energy.EnergyError, match="needs the burst's time"):
        energy.sustained(None, None, 0.0)


def test_jobs_tile_facts_and_ncu_per_tile():
    jobs = energy.plan_jobs(energy.LIMITER)
    assert [j["kind"] for j in jobs] == ["verify", "verify", "measure"]       # the probes are not verified
    assert len(jobs[-1]["entries"]) == len(energy.LIMITER)
    full = problems.patch_embed("siglip2")
    f = energy.tile_facts(energy.stage_entry("sm90/07a_comb_windows"), full)
    tiles = full.m / 64 * full.n / 256
    assert f["sass_consumer_warp_per_tile"]["by_opcode"]["QGMMA"] == 24
    assert f["l2_bytes_per_tile"]["c"] == pytest.approx(64 * 256 * 2 * (full.m / 64 * 64 / full.m) * 1, rel=0.01)
    assert f["l2_bytes_per_tile"]["comb"] < 0.12 * 64 * 256 * 2 and f["l2_bytes_per_tile"]["a"] * tiles == pytest.approx(
        full.m * full.k * 3)
    assert energy.tile_facts(energy.CUBLAS[0], full) == {}
    res = {"ok": True, "entries": ["06", "cuBLAS GEMM"],
           "kernels": [{"kernel": "patch_embed_sm90", "dram__bytes_read.sum": "734,220,000 byte",
                        "lts__t_bytes.sum": "8.56 Gbyte", "lts__t_sectors_srcunit_tex.sum": "150,000,000 sector",
                        "smsp__inst_executed.sum": "188,762,039 inst",
                        "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "2.5 Mrequest",
                        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "20,000,000 sector",
                        "sm__cycles_elapsed.avg.per_second": "1.52 Ghz", "gpu__time_duration.sum": "933.34 usecond"},
                       {"kernel": "nvjet_sm90_qqtst", "lts__t_bytes.sum": "6,880,000,000 byte"}]}
    rows = energy.ncu_per_tile(res, full)
    assert rows[0]["l2_B_per_tile"] == pytest.approx(8.56e9 / tiles) and rows[0]["sm_clock_ghz"] == 1.52
    assert rows[0]["ms"] == pytest.approx(0.93334) and rows[0]["warp_inst_per_tile"] == pytest.approx(188762039 / tiles)
    assert rows[0]["l2_sm_B_per_tile"] == pytest.approx(150e6 * 32 / tiles) and "l2_sm_B_per_tile" not in rows[1]
    assert rows[1]["entry"] == "cuBLAS GEMM" and "dram_read_B_per_tile" not in rows[1]
    # the LSU's side: requests (warp-wide accesses) and the sectors they touch, per tile
    assert rows[0]["stg_requests_per_tile"] == pytest.approx(2.5e6 / tiles)
    assert rows[0]["stg_sectors_per_tile"] / rows[0]["stg_requests_per_tile"] == pytest.approx(8.0)
    assert "lds_wavefronts_per_tile" not in rows[0]
    extra = {**res, "kernels": [{"kernel": "fill_kernel"}] + res["kernels"]}      # a kernel no entry launched
    assert [r["kernel"] for r in energy.ncu_per_tile(extra, full)] == ["patch_embed_sm90", "nvjet_sm90_qqtst"]
    assert energy.ncu_value("1.52 Ghz") == 1.52 and energy.ncu_value("n/a") is None
    assert energy.ncu_per_tile({"ok": False}, full) == []


def test_the_command_needs_a_mode(capsys):
    with pytest.raises(SystemExit):
        energy.main([])
    assert "name a mode" in capsys.readouterr().err


def test_worker_jobs_through_stand_ins(fake_run, monkeypatch):
    """The jobs a worker runs on the GPU: a stage verified on the problem, then the measuring job with
    NVML opened on the GPU's bus id (here a stand-in) and the entries interleaved."""
    from pelib.kinds import sm90
    t = SMALL.make_inputs(seed=4)
    fake_run["t"] = t

    class Data:
        def full(self, s):
            return SMALL, t, sm90.Sm90().reference(SMALL, t)
    opened = []
    monkeypatch.setattr(nvml, "open_device", lambda bus=None, lib=None: opened.append(bus) or FakeDev())
    monkeypatch.setattr(energy, "idle_power", lambda dev, seconds=1.0: {"power_w": 88.0})
    e06 = energy.stage_entry("sm90/06_permuted_b")
    v = energy._run_job({"kind": "verify", "entry": e06.as_dict()}, Data(), 3)
    assert v["ok"] and v["n_bad"] == 0
    m = energy._run_job({"kind": "measure", "entries": [e06.as_dict(), energy.CUBLAS[0].as_dict()],
                         "rounds": {"random": 1}, "inputs": ["random"]}, Data(), 2)
    assert m["nvml"] == {"ok": True, "error": None, "power_limit_w": 700.0, "idle": {"power_w": 88.0}}
    assert {b["entry"] for b in m["burst"]} == {"06", "cuBLAS fast-accum GEMM"} and len(m["sustained"]) == 2
    with pytest.raises(energy.EnergyError, match="unknown job kind"):
        energy._run_job({"kind": "dance"}, Data(), 1)


def test_prebuild_compiles_every_cubin_of_a_run():
    specs = energy.builds([energy.stage_entry("sm90/06_permuted_b"), energy.CUBLAS[0]])
    assert specs[0] == ("calib_clock", {}, False) and len(specs) == 4
    assert (("sm90/06_permuted_b", {"PE_WAIT_KIND": 2, "PE_TIMING_TILES": 0}, True)) in specs
    assert energy.prebuild([energy.stage_entry("sm90/06_permuted_b")], workers=2) == []
    assert "ValueError" in energy._build_one(("sm90/06_permuted_b", {"NO_SUCH_DEFINE": 1}, False))


def _report(device="NVIDIA H100 80GB HBM3", date="2026-12-01T10:00:00+00:00"):
    """A pelib.measure.energy limiter report as the command writes it, from synthetic rows."""
    entries = [energy.stage_entry("sm90/06_permuted_b"), energy.CUBLAS[0]]
    burst = [{"entry": e.name, "inputs": k, "round": 0, "plain": {"median_ms": ms},
              "clocked": {"clock_after_ghz": [1.6, 1.62]},
              **({"stamped": {"clock_ghz": [1.44, 1.46]}} if e.stage else {})}
             for e, ms0 in zip(entries, (0.84, 0.92)) for k, ms in (("random", ms0), ("zeros", ms0 * 0.9))]
    sus = [{"entry": e.name, "inputs": "random", "round": 0, "ms_per_launch": ms, "j_per_launch": j, "power_w": 700.0,
            "nvml": {"sm_mhz": {"mean": 1320.0}}} for e, ms, j in zip(entries, (0.97, 1.05), (0.71, 0.70))]
    rep = {"env": {"device": device, "date": date}, "evidence": f"measured ({device}, {date[:10]})",
           "entries": [e.as_dict() for e in entries], "burst": burst, "sustained": sus, "copy": {"gbps": 3000.0},
           "ncu_per_tile": [{"entry": "06", "l2_B_per_tile": 196_700.0, "dram_read_B_per_tile": 16_900.0,
                             "dram_write_B_per_tile": 32_400.0, "warp_inst_per_tile": 4338.0}],
           "facts": {"06": {"sass_consumer_warp_per_tile": {"total": 1248}}}}
    rep["summary"] = energy.summarize(rep)
    return rep


def test_energy_table_and_clocked_floors_read_the_committed_run(tmp_path, monkeypatch):
    import json
    from pelib.views import hopper as hv
    d = tmp_path / "2026-12-01-h100"
    d.mkdir()
    (d / "energy-limiter.json").write_text(json.dumps(_report()))
    t = hv.energy_table(root=tmp_path)
    r06 = next(r for r in t.rows if r["entry"] == "06")
    assert r06["ms"] == 0.84 and r06["launch GHz"] == 1.45 and r06["GHz after"] == 1.61 and r06["J"] == 0.71
    assert r06["L2 KB/tile"] == 197 and r06["DRAM KB/tile"] == 49 and r06["SASS/warp/tile"] == 1248
    rc = next(r for r in t.rows if r["entry"].startswith("cuBLAS"))
    assert rc["launch GHz"] == "—" and rc["L2 KB/tile"] == "—"
    assert any("H200: not yet measured" in n for n in t.notes) and "measured" in t.caption
    monkeypatch.setattr(hv, "energy_run", lambda chip, mode="limiter", root=None: hv.results.load(
        d / "energy-limiter.json") | {"_file": f"{d.name}/energy-limiter.json"} if chip == "h100" else None)
    fl = hv.clock_floor_table()
    row = next(r for r in fl.rows if r["gpu"] == "H100 SXM" and r["floor"] == "tensor" and "launch clock" in r["basis"])
    assert row["at"] == "1.450 GHz" and "energy-limiter.json" in fl.caption


def test_main_composes_the_report(tmp_path, monkeypatch, capsys):
    """The command's own steps on a stand-in GPU: the builds, the facts, the jobs (their results canned),
    Nsight Compute (canned), the JSON and the printed table."""
    import json
    from pelib import bench, device
    from pelib.measure import jobs
    info = fake_info("sm_90a")
    monkeypatch.setattr(device, "current", lambda: info)
    monkeypatch.setattr(device, "require", lambda arch, i=None: info)
    monkeypatch.setattr(bench, "copy_bandwidth_gb_s", lambda: {"gbps": 3000.0, "median_ms": 0.7, "nbytes": 1 << 30})
    monkeypatch.setattr(jobs, "save_full", lambda s, d: None)
    monkeypatch.setattr(energy, "prebuild", lambda entries: [])
    rep = _report()
    seen = {}

    def run_jobs(todo, data_dir, iters, budget, job_timeout_s=90.0, module="pelib.measure.sweep", show=None):
        seen["jobs"], seen["module"] = todo, module
        out = [{"index": i, **j, "ok": True, "n_bad": 0} for i, j in enumerate(todo) if j["kind"] == "verify"]
        return out + [{"index": len(todo) - 1, **todo[-1], "ok": True, "nvml": {"ok": True, "power_limit_w": 700.0},
                       "verify": {}, "burst": rep["burst"], "sustained": rep["sustained"]}]
    monkeypatch.setattr(jobs, "run", run_jobs)
    monkeypatch.setattr(energy, "run_ncu", lambda entries, d, t: {"ok": True, "entries": ["06"], "kernels": [
        {"kernel": "patch_embed_sm90", "lts__t_bytes.sum": "8.56 Gbyte"}]})
    assert energy.main(["limiter", "--out", str(tmp_path), "--budget", "600"]) == 0
    doc = json.loads((tmp_path / "energy-limiter.json").read_text())
    assert seen["module"] == "pelib.measure.energy" and [j["kind"] for j in seen["jobs"]] == ["verify", "verify", "measure"]
    assert doc["verified"]["06"]["ok"] and doc["nvml"]["power_limit_w"] == 700.0
    assert doc["facts"]["06"]["sass_consumer_warp_per_tile"]["by_opcode"]["QGMMA"] == 24
    assert doc["ncu_per_tile"][0]["entry"] == "06" and doc["protocol"]["rounds"] == energy.ROUNDS
    r06 = next(r for r in doc["summary"] if r["entry"] == "06")
    assert r06["launch clock (GHz)"] == pytest.approx(1.45)
    out = capsys.readouterr().out
    assert "per 64 x 256 tile" in out and "wrote" in out


def test_stages_mode_runs_its_cluster_sub_stages_through_stand_ins(fake_run):
    """The stages mode's new entries up to the launch: the cluster sub-stages (06a, 07b) and 06b planned and
    measured through the stand-in GPU like 06, each with its launch shape recorded (a cluster of three)."""
    t = SMALL.make_inputs(seed=3)
    fake_run["t"] = t
    picked = [e for e in energy.STAGES if e.stage in ("sm90/06a_multicast_a", "sm90/07b_multicast_a",
                                                      "sm90/06b_one_prefetcher")]
    assert len(picked) == 3
    res = energy.measure(picked, SMALL, t, {k: t[k].clone() for k in ("a", "b")}, dev=FakeDev(),
                         info=fake_info("sm_90a"), iters=2, rounds={"random": 1}, inputs=("random",),
                         log=lambda *a: None, sleep=lambda s: None)
    assert {b["entry"] for b in res["burst"]} == {e.name for e in picked} and len(res["sustained"]) == 3
    assert res["launch"]["06a"]["cluster"] == [3, 1, 1] and res["launch"]["06b"]["cluster"] == [1, 1, 1]
    assert res["launch"]["07b"]["grid"][0] % 3 == 0
    jobs = energy.plan_jobs(energy.STAGES, {"random": 3}, ("random",))
    assert [j["entry"]["name"] for j in jobs if j["kind"] == "verify"] == [
        e.name for e in energy.STAGES if e.stage and not e.probe]


# ---- the contention mode (07a, 12, 13, cuBLAS; 06 and its probes for the counters) ---------------------------

def test_contention_mode_entries_and_jobs():
    """07a and every new stage timed in every regime beside cuBLAS fast-accum, 06 and its three probes in
    bursts (the counters' study), unique names; the new stages, and only they, verified on the check shapes."""
    from pelib.stage import Stage
    names = [e.name for e in energy.CONTENTION]
    assert len(set(names)) == len(names) and names[0] == "07a" and energy.CUBLAS[0] in energy.CONTENTION
    new = {e.stage for e in energy.CONTENTION_NEW}
    assert new == {"sm90/12_tma_store", "sm90/13_one_prefetcher"}
    assert all(Stage(k).header.parent == "sm90/07a_comb_windows" for k in new)
    e06 = next(e for e in energy.CONTENTION if e.name == "06")
    assert e06.bursts_only and not e06.probe and all(p in energy.CONTENTION for p in energy.PROBES)
    todo = energy.plan_jobs(energy.CONTENTION, {"random": 2}, ("random",), checked=energy.CONTENTION_NEW)
    checked = {j["entry"]["name"] for j in todo if j["kind"] == "verify" and j["check_shapes"]}
    assert checked == {e.name for e in energy.CONTENTION_NEW} and "12 EPI_BOX_COLS=64,NUM_STAGES=2" in checked
    assert {j["entry"]["name"] for j in todo if j["kind"] == "verify"} == {"07a", "06"} | checked
    assert set(energy.RANDOM_PROOF["contention"]) >= new and energy.MODE_INPUTS["contention"] == ("random",)


def test_verify_job_runs_the_check_shapes_first(fake_run, monkeypatch):
    """A verify job with checks: every check shape of the kind (here canned by a stand-in for sweep.check),
    then the full problem; a wrong check shape stops it before the full problem, saying which."""
    from pelib.measure import sweep
    from pelib.kinds import sm90
    t = SMALL.make_inputs(seed=5)
    fake_run["t"] = t

    class Data:
        def full(self, s):
            return SMALL, t, sm90.Sm90().reference(SMALL, t)
    seen, bad = [], set()

    def check(s, name, ctx, res):
        seen.append((s.key, name))
        res.setdefault("checks", {})[name] = {"ok": name not in bad}
        return name not in bad
    monkeypatch.setattr(sweep, "check", check)
    e12 = energy.stage_entry("sm90/12_tma_store")
    v = energy._run_job({"kind": "verify", "entry": e12.as_dict(), "check_shapes": True}, Data(), 2)
    assert v["ok"] and v["n_bad"] == 0 and [n for _, n in seen] == list(sm90.CHECK_PROBLEMS)
    assert set(v["checks"]) == set(sm90.CHECK_PROBLEMS)
    bad.add("tail")
    v = energy._run_job({"kind": "verify", "entry": e12.as_dict(), "check_shapes": True}, Data(), 2)
    assert not v["ok"] and "['tail']" in v["report"] and v["n_bad"] is None


def test_known_metrics_and_the_contention_counters_per_tile():
    """A metric this ncu does not list is dropped (it would fail the pass); the counters are read per 64 x 256
    tile, rates as they are, the stall reasons sorted largest first, entries matched to our kernel or cuBLAS's."""
    q = "Device GH100\nlts__t_bytes   Counter  byte  # of bytes\ndram__bytes_read  Counter byte  x\n"
    kept, dropped = energy.known_metrics(["lts__t_bytes.sum", "dram__bytes_read.sum", "no_such__metric.sum"], q)
    assert kept == ["lts__t_bytes.sum", "dram__bytes_read.sum"] and dropped == ["no_such__metric.sum"]
    full = problems.patch_embed("siglip2")
    tiles = (full.m / 64) * (full.n / 256)
    res = {"ok": True, "entries": ["07a", "cuBLAS fast-accum GEMM"], "kernels": [
        {"kernel": "patch_embed_sm90", "lts__t_sectors_op_write.sum": f"{int(tiles * 1024):,} sector",
         "lts__throughput.avg.pct_of_peak_sustained_elapsed": "81.5 %", "gpu__time_duration.sum": "780.5 usecond",
         "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "0.5",
         "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": "1.25"},
        {"kernel": "nvjet_sm90_qqtst", "lts__t_sectors_op_write.sum": "10 sector"}]}
    rows = energy.ncu_contention_per_tile(res, full)
    assert [r["entry"] for r in rows] == ["07a", "cuBLAS fast-accum GEMM"]
    r = rows[0]
    assert r["per_tile"]["lts__t_sectors_op_write.sum"] == pytest.approx(1024, rel=1e-6)
    assert r["rates"]["lts__throughput.avg.pct_of_peak_sustained_elapsed"] == 81.5 and r["ms"] == pytest.approx(0.7805)
    assert list(r["stalls"]) == ["smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
                                 "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"]
    assert energy.ncu_contention_per_tile({"ok": False}, full) == []


def test_contention_main_composes_the_report(tmp_path, monkeypatch, capsys):
    """The contention command's own steps on a stand-in GPU: the jobs with the new stages' check shapes, both
    Nsight Compute passes and the random-input proof (canned), the JSON and the printed tables."""
    import json
    from pelib import bench, device
    from pelib.measure import jobs
    info = fake_info("sm_90a")
    monkeypatch.setattr(device, "current", lambda: info)
    monkeypatch.setattr(device, "require", lambda arch, i=None: info)
    monkeypatch.setattr(bench, "copy_bandwidth_gb_s", lambda: {"gbps": 3000.0, "median_ms": 0.7, "nbytes": 1 << 30})
    monkeypatch.setattr(jobs, "save_full", lambda s, d: None)
    monkeypatch.setattr(energy, "prebuild", lambda entries: [])
    seen = {}

    def run_jobs(todo, data_dir, iters, budget, job_timeout_s=90.0, module="pelib.measure.sweep", show=None):
        seen["jobs"] = todo
        out = [{"index": i, **j, "ok": True, "n_bad": 0} for i, j in enumerate(todo) if j["kind"] == "verify"]
        burst = [{"entry": e.name, "inputs": "random", "round": 0, "plain": {"median_ms": 0.8 + 0.01 * i},
                  "clocked": {"clock_after_ghz": [1.6]}} for i, e in enumerate(energy.CONTENTION)]
        return out + [{"index": len(todo) - 1, **todo[-1], "ok": True, "nvml": {"ok": True}, "verify": {},
                       "burst": burst, "sustained": []}]
    monkeypatch.setattr(jobs, "run", run_jobs)
    monkeypatch.setattr(energy, "run_ncu", lambda entries, d, t: {"ok": True, "entries": ["07a"], "kernels": [
        {"kernel": "patch_embed_sm90", "lts__t_bytes.sum": "8.56 Gbyte"}]})
    monkeypatch.setattr(energy, "run_ncu_contention", lambda entries, d, t: {"ok": True, "entries": ["07a"], "kernels": [
        {"kernel": "patch_embed_sm90", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "1,000 sector",
         "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": "1.5"}]})
    monkeypatch.setattr(energy, "random_proof", lambda keys, out, info, budget_s=0: seen.setdefault("random", keys) and {
        "seconds": 1.0, "file": "numerics-random.json", "random": {"jobs": {f"random:{k}": {"outcome": {"kind": "finished", "sha256": "ab" * 32}}
                                            for k in keys}}})
    assert energy.main(["contention", "--out", str(tmp_path), "--budget", "450"]) == 0
    doc = json.loads((tmp_path / "energy-contention.json").read_text())
    assert sum(j.get("check_shapes", False) for j in seen["jobs"]) == len(energy.CONTENTION_NEW)
    assert seen["random"] == energy.RANDOM_PROOF["contention"] and doc["random_proof"]["file"] == "numerics-random.json"
    assert doc["ncu_contention_per_tile"][0]["entry"] == "07a" and "sass_error" in doc["facts"]["12"]
    out = capsys.readouterr().out
    assert "contention counters per 64 x 256 tile" in out and "[random] 4 jobs" in out


def test_contention_entries_run_through_stand_ins(fake_run):
    """The contention mode's stage entries up to the launch (tensor maps, 12's C map of 64 x 32 and 64 x 64
    staging boxes, the launch shape) and measured through the stand-in GPU like 06; 06 in bursts only."""
    t = SMALL.make_inputs(seed=6)
    fake_run["t"] = t
    picked = [e for e in energy.CONTENTION if e.stage and not e.probe]
    res = energy.measure(picked, SMALL, t, {k: t[k].clone() for k in ("a", "b")}, dev=FakeDev(),
                         info=fake_info("sm_90a"), iters=2, rounds={"random": 1}, inputs=("random",),
                         log=lambda *a: None, sleep=lambda s: None)
    assert {b["entry"] for b in res["burst"]} == {e.name for e in picked}
    assert {x["entry"] for x in res["sustained"]} == {e.name for e in picked if not e.bursts_only}
    assert res["launch"]["12"]["grid"][0] % 3 == 0 and res["launch"]["13"]["cluster"] == [1, 1, 1]


# ---- the headline of make bench -------------------------------------------------------------------------

def test_headline_is_the_fastest_verified_entry_by_burst():
    rows = [{"entry": "07a", "burst ms (random)": 0.78}, {"entry": "12", "burst ms (random)": 0.70},
            {"entry": "13", "burst ms (random)": 0.76}, {"entry": "cuBLAS fast-accum GEMM", "burst ms (random)": 0.6}]
    rep = {"verified": {"07a": {"ok": True}, "12": {"ok": False}, "13": {"ok": True}}}
    assert energy.headline(rows, rep)["entry"] == "13"      # 12 is faster but wrong; cuBLAS is not a stage
    assert energy.headline(rows, {"verified": {}}) is None


def test_headline_entries_and_their_errors(capsys):
    es = energy.headline_entries('[["sm90/07a_comb_windows", {}], ["sm90/12_tma_store", {"PE_WAIT_KIND": 1, "NUM_STAGES": 2}]]')
    assert [e.name for e in es] == ["07a", "12 NUM_STAGES=2", "cuBLAS fast-accum GEMM"]
    assert es[1].define_dict == {"NUM_STAGES": 2, "PE_WAIT_KIND": 2}       # always the production build
    for bad, why in (("not json", "JSON list"), ("[]", "at least one"), ('[["sm90/07a_comb_windows", {}], '
                     '["sm90/07a_comb_windows", {"PE_WAIT_KIND": 1}]]', "twice"), ('[["sm90/07a_comb_windows"]]', "JSON list")):
        with pytest.raises(energy.EnergyError, match=why):
            energy.headline_entries(bad)
    with pytest.raises(SystemExit):
        energy.main(["headline"])
    assert "needs --entries" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        energy.main(["limiter", "--entries", "[]"])


def test_headline_main_leads_with_the_measured_fastest(tmp_path, monkeypatch, capsys):
    import json
    from pelib import bench, device
    from pelib.measure import jobs
    info = fake_info("sm_90a")
    monkeypatch.setattr(device, "current", lambda: info)
    monkeypatch.setattr(device, "require", lambda arch, i=None: info)
    monkeypatch.setattr(bench, "copy_bandwidth_gb_s", lambda: {"gbps": 3000.0, "median_ms": 0.7, "nbytes": 1 << 30})
    monkeypatch.setattr(jobs, "save_full", lambda s, d: None)
    monkeypatch.setattr(energy, "prebuild", lambda entries: [])
    ms = {"07a": 0.78, "13": 0.74, "cuBLAS fast-accum GEMM": 0.90}

    def run_jobs(todo, data_dir, iters, budget, job_timeout_s=90.0, module="pelib.measure.sweep", show=None):
        names = [e["name"] for e in todo[-1]["entries"]]
        out = [{"index": i, **j, "ok": True, "n_bad": 0} for i, j in enumerate(todo) if j["kind"] == "verify"]
        burst = [{"entry": n, "inputs": "random", "round": 0, "plain": {"median_ms": ms[n]},
                  "clocked": {"clock_after_ghz": [1.6]}} for n in names]
        sus = [{"entry": n, "inputs": "random", "round": 0, "ms_per_launch": ms[n] * 1.2, "j_per_launch": ms[n],
                "power_w": 690.0, "nvml": {"sm_mhz": {"mean": 1400.0}}} for n in names]
        return out + [{"index": len(todo) - 1, **todo[-1], "ok": True, "nvml": {"ok": True}, "verify": {},
                       "burst": burst, "sustained": sus}]
    monkeypatch.setattr(jobs, "run", run_jobs)
    assert energy.main(["headline", "--entries", '[["sm90/07a_comb_windows", {}], ["sm90/13_one_prefetcher", {}]]',
                        "--out", str(tmp_path), "--no-ncu"]) == 0
    doc = json.loads((tmp_path / "energy-headline.json").read_text())
    assert doc["headline"] == "13" and [e["name"] for e in doc["entries"]] == ["07a", "13", "cuBLAS fast-accum GEMM"]
    out = capsys.readouterr().out
    assert "headline (the fastest verified stage, by burst): 13 0.7400 ms burst, 1.22x cuBLAS fast-accum" in out
    assert "J per GEMM (0.82x cuBLAS fast-accum's)" in out


def test_a_finished_verify_job_prints_its_line():
    """The runner prints each finished job through pelib.measure.sweep.show_job, whose "checks" is the per-shape
    verdicts: the job's own flag must not take that name (a bool there crashed the GPU run's first line)."""
    from pelib.measure import sweep
    for job in energy.plan_jobs(energy.CONTENTION, checked=energy.CONTENTION_NEW):
        if job["kind"] == "verify":
            sweep.show_job({**job, "ok": True, "n_bad": 0, "report": "ok"})
