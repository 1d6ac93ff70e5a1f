"""The calibration suite up to the launch, on the CPU: the probes' own source run by the simulator (their
indexing and records), the whole suite through a fake runner (analysis, the JSON, its loader), and the
checked data format's errors. No timing is asserted: the simulator's counters order events, never time."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from pelib.predict import probes as C
from pelib.predict import measured_format as K
from pelib import timing

SC = C.Scale.sim()


@pytest.fixture(scope="module")
def runner():
    return C.Runner(SC, "sim")


def job(probe, **kw):
    """The first launch of the simulator's plan for `probe` matching kw (params or point)."""
    for j in C.plan(SC):
        if j.probe == probe and all(j.params.get(k, j.point.get(k, j.defines.get(k))) == v for k, v in kw.items()):
            return j
    raise KeyError((probe, kw))


def rec_of(r, probe):
    return {k: r.out[:, v] for k, v in C.fields(probe).items()}


# ---- the probes' record layouts --------------------------------------------------------------------

@pytest.mark.parametrize("probe", C.PROBES)
def test_record_fields_come_from_the_probe_enum(probe):
    f = C.fields(probe)
    assert f and sorted(f.values()) == list(range(len(f)))
    text = C.source(probe).read_text()
    assert f"CALIB_{probe.upper()}_FIELDS" in text and "PE_TIMING_CTA(timing);" in text
    assert "PELIB_EXPORT(fields," in text


def test_every_probe_is_in_the_plan_and_the_needs():
    assert {j.probe for j in C.plan(C.Scale.full(132))} == set(C.PROBES)
    assert set(C.NEEDS) == set(C.PROBES)


def test_full_plan_fits_an_h100():
    """The GPU's plan: every sweep point within the SMs it has (the launch probe's waves excepted: whole
    multiples of them); one CTA per SM (the probes ask for more than half of the shared memory); clusters
    whole."""
    sc = C.Scale.full(132)
    jobs = C.plan(sc)
    assert 100 < len(jobs) < 260
    for j in jobs:
        assert (j.grid <= 132 if j.probe != "launch" else j.grid % 132 == 0) and j.grid % j.cluster == 0
        assert j.params.get("active", 0) <= j.grid
        if j.cluster == 2:
            assert j.params.get("active", 2) % 2 == 0
    assert sum(1 for j in jobs if j.point.get("sustained")) == 1
    assert {j.point["curve"] for j in jobs if "curve" in j.point} >= {"tma_load.sequential", "tma_load.scattered",
                                                                      "tma_load.l2", "tma_load.multicast", "tma_store",
                                                                      "dram.read", "dram.write", "dram.copy", "l2.read"}
    assert set(C.Scale.full(132).tma_active) == {1, 8, 33, 66, 132}


def test_chain_is_one_cycle_and_chase_end_follows_it():
    ch = C.chain_array(64, 3)
    seen, i = set(), 0
    for _ in range(64):
        seen.add(i)
        i = int(ch[i])
    assert i == 0 and len(seen) == 64 and all(x % 32 == 0 for x in seen)
    assert C.chase_end(ch, 0, 64) == 0 and C.chase_end(ch, 0, 1) == ch[0]


# ---- the probes in the simulator: indexing and records --------------------------------------------

def test_wgmma_probe_accumulates_what_it_issues():
    """With every operand byte 1.0 (CALIB_FILL_ONES) each k32 product is 32: after the chain (scale_d 0 at
    its first wgmma) accumulator 0 is 4 x 32 x chain, in every warpgroup of every CTA."""
    b_sc = C.Scale.sim()
    r = C.Runner(b_sc, "sim", names=[])
    j = C.Launch("wgmma", {"BLOCK_N": 128, "NUM_WG": 2, "CALIB_FILL_ONES": 1, "REPS": 2}, {"chain": 3, "seed": 1}, 2)
    rec = r.run(0, j)
    f = rec_of(rec, "wgmma")
    assert rec.out.shape[0] == 4                          # 2 CTAs x 2 warpgroups
    got = [struct.unpack("f", struct.pack("I", int(x) & 0xFFFFFFFF))[0] for x in f["check"]]
    assert got == [4 * 32 * 3] * 4
    assert (f["chain_wgmmas"] == 12).all() and (f["reps"] == 2).all()
    assert (f["lat_min"] > 0).all() and (f["slice_sum"] >= f["issue_sum"]).all()
    assert timing.launch_clock(rec.cta_clock)["ctas"] == 2


def test_tma_probe_waits_for_every_load(runner):
    for kw in ({"pattern": 0, "depth": 3, "active": 4}, {"pattern": 1, "depth": 1, "active": 1}):
        j = job("tma", **kw)
        r = runner.run(0, j)
        f = rec_of(r, "tma")
        s0 = C.fields("tma")["sample0"]
        on = f["loads"] > 0
        assert on.sum() == kw["active"]
        assert (r.out[on][:, s0:s0 + j.params["iters"]] > 0).all()
        assert (f["bytes"][on] == j.params["iters"] * 8192).all() and (f["last"][on] >= f["first"][on]).all()


def test_tma_multicast_probe_pairs_complete(runner):
    j = job("tma", curve="tma_load.multicast", active=4, depth=2)
    r = runner.run(0, j)
    f = rec_of(r, "tma")
    assert (f["loads"] == j.params["iters"]).all()       # both CTAs of both pairs saw every box full


def test_store_probe_writes_exactly_its_boxes():
    """C is zero before; after the probe the 32 x 64 boxes of the schedule hold the staged bytes and nothing
    else was written (band = c + (it // 12) * active, column box it % 12)."""
    import torch
    r = C.Runner(SC, "sim", names=["cout"])
    j = job("store", active=4, group=3)
    rec = r.run(0, j)
    c = r.bufs["cout"].view(torch.int16).numpy()
    want = np.zeros_like(c, dtype=bool)
    for cta in range(j.params["active"]):
        for it in range(j.params["iters"]):
            band = (cta + (it // 12) * j.params["active"]) % j.params["m_bands"]
            want[band * 32:(band + 1) * 32, (it % 12) * 64:(it % 12 + 1) * 64] = True
    assert (c[~want] == 0).all()
    assert (c[want] != 0).mean() > 0.95
    assert (rec_of(rec, "store")["stores"] == j.params["iters"]).all()


def test_epilogue_probe_writes_06s_tiles_and_nothing_without_stores():
    import torch
    r = C.Runner(SC, "sim", names=["cout", "comb"])
    j = job("epilogue", case="alone")
    r.run(0, j)
    c = r.bufs["cout"].view(torch.int16).numpy()
    nbs, grid = 3, j.grid
    groups = grid // nbs
    want = np.zeros_like(c, dtype=bool)
    for cta in range(grid):
        g, n0 = cta // nbs, (cta % nbs) * 256
        for i in range(j.params["tiles"]):
            m0 = ((g + i * groups) % (SC.m // 64)) * 64
            want[m0:m0 + 64, n0:n0 + 256] = True
    assert (c[~want] == 0).all() and (c[want] != 0).mean() > 0.99
    r.bufs["cout"].zero_()
    r.run(0, job("epilogue", case="no_store"))
    assert (r.bufs["cout"].view(torch.int16).numpy() == 0).all()


def test_stream_probe_chases_the_chain_and_moves_its_bytes(runner):
    for kw in ({"warps": 0}, {"op": 2, "foot": "dram", "warps": 2}):
        j = job("stream", **kw)
        r = runner.run(0, j)
        f = rec_of(r, "stream")
        chain = runner.bufs[j.tensors["chain"]].numpy().view(np.uint32)
        for cta in range(j.grid):
            assert f["chase_end"][cta] == C.chase_end(chain, cta * 32, j.params["hops"])
        assert (f["chase_t1"] >= f["chase_t0"]).all()
        if kw["warps"]:
            n = j.params["iters"] * j.params["stream_warps"] * 32 * 4 * 16 * 2
            assert (f["bytes"][:j.params["active"]] == n).all()
    src = runner.bufs["src"].numpy()[:SC.stream_words * 16]
    dst = runner.bufs["dst"].numpy()[:SC.stream_words * 16]
    touched = dst != 0
    assert touched.any() and (dst[touched] == src[touched]).all()     # the copy copied


def test_sync_probe_passes_every_wait(runner):
    for mode in (0, 1):
        r = runner.run(0, job("sync", mode=mode))
        f = rec_of(r, "sync")
        assert (f["iters"][::2] == SC.sync_iters).all() and (f["pingpong"][::2] > 0).all()
        if mode == 0:
            assert (f["bar256"] > 0).all() and (f["pass"] > 0).all()


def test_clock_probe_sees_its_timer_step(runner):
    r = runner.run(0, job("clock"))
    f = rec_of(r, "clock")
    assert (f["tick_ns"] > 0).all() and (f["spin_cycles"] >= SC.spin).all()


def test_tma_burst_probe_waits_for_each_burst(runner):
    """CALIB_BURST: `depth` boxes on one barrier per burst, every burst waited for and timed."""
    j = job("tma", CALIB_BURST=1, pattern=2, active=1, depth=2)
    r = runner.run(0, j)
    f = rec_of(r, "tma")
    s0 = C.fields("tma")["sample0"]
    n = j.params["iters"] // 2
    assert f["loads"][0] == n and f["bytes"][0] == n * 2 * 8192 and (f["loads"][1:] == 0).all()
    assert (r.out[0, s0:s0 + n] > 0).all() and f["last"][0] >= f["first"][0]


def test_epilogue_probe_times_the_chain_beside_it(runner):
    r = C.Runner(SC, "sim", names=["cout", "comb"])
    j = job("epilogue", case="beside_wgmma_no_store")
    f = rec_of(r.run(0, j), "epilogue")
    assert (f["chain_wgmmas"] == 4 * j.params["chain"]).all() and (f["chain_cycles"] > 0).all()
    assert job("epilogue", case="alone_3sms").grid == 3


def _lsu_offsets(j, i, w, nw):
    """The bytes lane 0..31 of warp w's access i touches (calib_lsu.cu lsu_offset), one array per lane."""
    p = j.params
    lane = np.arange(32)
    per = 512 // (4 * p["width"]) if p["pattern"] == 2 else 1      # the walk: along the rows of a 512-B tile row
    group = ((i // per) * nw + w) * 8
    row = (np.full(32, group) if p["pattern"] == 1 else group + lane // 4) & (p["rows"] - 1)
    col = lane * p["width"] if p["pattern"] == 1 else (i % per) * 4 * p["width"] + (lane % 4) * p["width"]
    return row * p["pitch"] + col


@pytest.mark.parametrize("width,pattern", [(4, 0), (8, 0), (16, 0), (16, 1), (4, 2), (16, 2)])
def test_lsu_probe_stores_exactly_its_pattern(width, pattern):
    """Each warp's stores land where the probe's address rule says, with its values, and nowhere else."""
    r = C.Runner(SC, "sim", names=["lsu"])
    j = job("lsu", op=0, width=width, pattern=pattern, active=SC.lsu_loads[-1][0])
    buf = r.bufs["lsu"].numpy().copy()
    rec = r.run(0, j)
    got = r.bufs["lsu"].numpy()
    want = buf.copy()
    warps, active = j.params["warps"], j.params["active"]
    nw = warps * active
    for i in range(j.params["iters"]):            # in program order: a later access to a byte wins
        for c in range(active):
            for wl in range(warps):
                w = wl + warps * c
                for lane, off in enumerate(_lsu_offsets(j, i, w, nw)):
                    words = {16: [i, w, lane, 0x3F803F80], 8: [i, w], 4: [i ^ w]}[width]
                    want[off:off + width] = np.array(words, np.uint32).view(np.uint8)
    assert (got == want).all()
    f = rec_of(rec, "lsu")
    ran = f["accesses"].reshape(j.grid, 16)[:active, :warps]
    assert (ran == j.params["iters"]).all() and f["accesses"].sum() == ran.sum()


def test_lsu_probe_loads_count_and_leave_the_buffer():
    r = C.Runner(SC, "sim", names=["lsu"])
    j = job("lsu", op=1, width=16, pattern=0, active=1)
    buf = r.bufs["lsu"].numpy().copy()
    f = rec_of(r.run(0, j), "lsu")
    assert (r.bufs["lsu"].numpy() == buf).all()
    n = f["accesses"].reshape(j.grid, 16)
    assert (n[0, :j.params["warps"]] >= j.params["iters"]).all() and n[1:].sum() == 0
    assert (f["t1"] >= f["t0"]).all()


@pytest.mark.parametrize("op", C.LATENCY_OPS)
def test_latency_probe_runs_its_chains_on_one_sm(op):
    """Each op's warps on CTA 0 alone record the steps they made; the shuffle chain ends where an even number
    of butterflies of lane mask 1 leaves it (lane l's value back at lane l); the chase at its start plus
    `iters` strides around the footprint."""
    r = C.Runner(SC, "sim", names=[])
    j = job("latency", op=C.LATENCY_OPS.index(op))
    f = rec_of(r.run(0, j), "latency")
    warps, iters = j.params["warps"], j.params["iters"]
    steps = f["steps"].reshape(j.grid, 16)
    per = iters * (8 if op == "shfl_many" else 1)
    assert (steps[0, :warps] == per).all() and steps[0, warps:].sum() == 0 and steps[1:].sum() == 0
    assert (f["t1"].reshape(j.grid, 16)[0, :warps] >= f["t0"].reshape(j.grid, 16)[0, :warps]).all()
    sink = f["sink"].reshape(j.grid, 16)[0, :warps].astype(np.uint64)
    if op == "shfl":          # lane 0 of warp w starts at 0 * 0x9E3779B9 + w; iters (even) butterflies of mask 1
        assert iters % 2 == 0 and [int(x) for x in sink] == list(range(warps))
    elif op == "lds":         # lane 0 starts at word 0; each load moves one word on (CHASE_STRIDE bytes)
        b = C.probe_build("latency", {})
        stride, words = b.exports["chase_stride"], b.exports["smem_bytes"] // b.exports["chase_stride"]
        assert all(int(x) == (iters % words) * stride for x in sink)


def test_launch_probe_records_every_cta_with_its_sm(runner):
    j = job("launch", waves=2)
    r = runner.run(0, j)
    assert (rec_of(r, "launch")["spin_cycles"] >= SC.launch_spin).all()
    cc = r.cta_clock[:, 0]
    assert cc.shape[0] == j.grid == 2 * SC.sms and (cc[:, 4] > 0).all() and (cc[:, 3] >= cc[:, 1]).all()


# ---- the suite through a fake runner: analysis, JSON, loader --------------------------------------

class FakeRunner:
    """Records a tiny made-up Hopper would leave: each probe's fields from a formula of its parameters, and
    a launch clock of 1.5 GHz (clock64 = 1.5 x globaltimer), so the analysis can be checked exactly."""

    GHZ = 1.5

    def __init__(self, sc):
        self.sc = sc

    def _clock_block(self, grid, warps=16, ns=200_000):
        b = np.zeros((grid, warps, timing.CLOCK_WORDS), np.int64)
        for c in range(grid):
            for w in range(warps):
                g0 = 10_000_000 + 100 * c
                b[c, w] = (7_000_000 + int(self.GHZ * g0), g0, 7_000_000 + int(self.GHZ * (g0 + ns)), g0 + ns, c + 1)
        return b

    def run(self, i, j):
        p, g = j.params, j.grid
        blk = self._clock_block(g)
        c0 = blk[:, 0, 0]
        if j.probe == "wgmma":
            n, wg = j.defines["BLOCK_N"], j.defines["NUM_WG"]
            per = 64 * n * 32 * 2 / 8192 * wg          # the ideal pipe shared by wg warpgroups
            rows = [[500, 8 * 520, 40, 8 * 44, 700, 8 * 720, 8, per * 4 * p["chain"], 4 * p["chain"], 0]] * (g * wg)
            out = np.array(rows, np.int64)
        elif j.probe == "tma" and j.defines.get("CALIB_BURST"):
            lat = 500 + 100 * p["depth"]                 # a burst: one box's latency + 100 cycles per further box
            n = p["iters"] // p["depth"]
            out = np.zeros((g, 7 + 512), np.int64)
            for c in range(min(p["active"], g)):
                out[c, :7] = (n, lat * n, lat, lat, n * p["depth"] * 8192, c0[c] + 10, c0[c] + 10 + 1.5 * 100_000)
                out[c, 7:7 + n] = lat
        elif j.probe == "launch":
            ns, gap, S = 30_000, 500, 132                # CTA c runs wave c // 132 on SM c % 132, 500 ns after the last
            blk = np.zeros((g, 1, timing.CLOCK_WORDS), np.int64)
            for c in range(g):
                g0 = 10_000_000 + 100 * (c % S) + (c // S) * (ns + gap)
                blk[c, 0] = (7_000_000 + int(self.GHZ * g0), g0, 7_000_000 + int(self.GHZ * (g0 + ns)), g0 + ns, c % S + 1)
            span = (g // S - 1) * (ns + gap) + ns + 100 * (S - 1)
            out = np.array([[p["spin"], 1]] * g, np.int64)
            return C.Record(i, out, blk, (span + 5_000) / 1e6, 1, None)
        elif j.probe == "tma":
            lat = 1000 + 50 * p["active"] * p["depth"] // 8 + (400 if p["pattern"] == 1 else 0) - (600 if p["pattern"] == 2 else 0)
            out = np.zeros((g, 7 + 512), np.int64)
            for c in range(min(p["active"], g)):
                out[c, :7] = (p["iters"], lat * p["iters"], lat, lat, p["iters"] * 8192, c0[c] + 10, c0[c] + 10 + 1.5 * 100_000)
                out[c, 7:7 + p["iters"]] = lat
        elif j.probe == "store":
            out = np.zeros((g, 10), np.int64)
            groups = -(-p["iters"] // p["group"])
            for c in range(min(p["active"], g)):
                out[c] = (p["iters"], 30 * p["iters"], 60, groups, 200 * groups, 900 * groups, 1200, p["iters"] * 4096,
                          c0[c], c0[c] + 150_000)
        elif j.probe == "sync":
            it = p["iters"]
            row = [it, 400 * it, 8 * it, 12 * it, 30 * it, 20 * it, 32 * it, p["mode"]] if p["mode"] == 0 else \
                  [it, 1500 * it, 0, 0, 0, 0, 0, 1]
            out = np.array([row] * g, np.int64)
        elif j.probe == "epilogue":
            base = {0: 1400, 1: 1800, 2: 2100}[p["other"]] - (300 if not p["store"] else 0)
            chain = [140 * 4 * p["chain"], 4 * p["chain"]] if p["other"] == 2 else [0, 0]
            out = np.array([[p["tiles"], base * p["tiles"], base - 50, base + 90, 200 * p["tiles"], p["other"], p["store"]]
                            + chain] * g, np.int64)
        elif j.probe == "stream":
            lat = 900 + 20 * p["stream_warps"] * p["active"] // 132
            out = np.zeros((g, 6), np.int64)
            for c in range(g):
                by = p["iters"] * p["stream_warps"] * 2048 * (2 if p["op"] == 2 else 1) if c < p["active"] else 0
                out[c] = (p["hops"], c0[c] + 1000, c0[c] + 1000 + lat * p["hops"], 0, by, 0)
        elif j.probe == "clock":
            out = np.array([[64 * 6, 64 * 30, 32, 48, p["spin"], int(p["spin"] / self.GHZ), 1]] * g, np.int64)
        elif j.probe == "latency":
            # a chain step takes 30 (shfl) / 33 (lds) cycles; op 2's SM takes 2 cycles a shuffle from 4 warps on
            cyc = {"shfl": 30, "lds": 33}.get(j.point["op"])
            out = np.zeros((g * 16, 4), np.int64)
            for w in range(p["warps"]):
                n = p["iters"] * (8 if cyc is None else 1)
                span = cyc * n if cyc else 2 * 8 * p["iters"] * max(p["warps"], 4)
                out[w] = (c0[0] + w, c0[0] + w + span, n, 0)
        elif j.probe == "lsu":
            # the SM serves one access every (10 store / 6 load) + width / 4 cycles; warp w starts w cycles late
            cyc = (10 if p["op"] == 0 else 6) + p["width"] // 4
            out = np.zeros((g * 16, 4), np.int64)
            for c in range(min(p["active"], g)):
                for w in range(p["warps"]):
                    out[c * 16 + w] = (c0[c] + w, c0[c] + cyc * p["warps"] * p["iters"], p["iters"], 0)
        return C.Record(i, out, blk, 1.0, 1, blk.copy() if j.point.get("sustained") else None)


@pytest.fixture
def fake_suite(monkeypatch, tmp_path):
    """main() with the GPU replaced at its edges: the device check, the builds, the worker processes."""
    from pelib import device
    from conftest import fake_info   # the shared stand-in H100 (tests/conftest.py)

    monkeypatch.setattr(device, "require", lambda arch, info=None: fake_info(arch))
    monkeypatch.setattr(C, "build_all", lambda jobs, workers=None, log=print: {})
    monkeypatch.setattr(C, "sass_counts", lambda: {"instructions_per_tile": 455, "loop": [0, 1], "by_opcode": {}})
    monkeypatch.setattr(C, "run_families", lambda jobs, sc, rec_dir, log=print, timeout_s=0:
                        [FakeRunner(sc).run(i, j) for i, j in enumerate(jobs)])
    monkeypatch.setattr(C.bench, "environment", lambda info=None: {"device": "H100 (test stand-in)",
                                                                    "date": "2026-11-28T00:00:00+00:00", "git": "abc"})
    monkeypatch.setattr(C, "occupancy", lambda info, log=print: [
        {"cluster": 3, "threads": 384, "smem": 230488, "registers": 168, "active_clusters": 39, "stage": "06a",
         "source": "cuOccupancyMaxActiveClusters (test stand-in)"}])
    assert C.main(["--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("calibration-*.json")
    return K.load(path), tmp_path


def _fake_query(monkeypatch):
    from pelib import device
    monkeypatch.setattr(device, "can_run", lambda arch, info=None: arch == "sm_90a")
    asked = []

    def query(build, kernel, cfg, ordinal=0):
        asked.append(cfg)
        return {1: 132, 2: 66, 3: 39}[cfg.cluster[0]]
    monkeypatch.setattr(C, "max_active_clusters", query)
    return asked


def test_occupancy_query_records_every_launch_shape(monkeypatch):
    """The host query asks cuOccupancyMaxActiveClusters once per (cluster, threads, shared memory, registers) the
    sm90 stages launch with, in the timing model's occupancy format."""
    from conftest import fake_info
    from pelib.predict import calibration as pcal
    asked = _fake_query(monkeypatch)
    recs = C.occupancy(fake_info("sm_90a"), log=lambda s: None)
    assert len(recs) == len(asked) and pcal.check_occupancy(recs) == []
    shapes = {(r["cluster"], r["smem"]): r["active_clusters"] for r in recs}
    assert shapes[(3, 230488)] == 39 and {c for c, _ in shapes} == {1, 2, 3}
    assert len({(r["cluster"], r["threads"], r["smem"], r["registers"]) for r in recs}) == len(recs)


def test_occupancy_flag_writes_only_the_query(monkeypatch, tmp_path):
    from pelib import device
    from conftest import fake_info
    _fake_query(monkeypatch)
    monkeypatch.setattr(device, "require", lambda arch, info=None: fake_info(arch))
    monkeypatch.setattr(C.bench, "environment", lambda info=None: {"device": "H100 (test stand-in)",
                                                                    "date": "2026-11-28T00:00:00+00:00", "git": "abc"})
    monkeypatch.setattr(C, "run_families", lambda *a, **k: pytest.fail("--occupancy runs no probe"))
    assert C.main(["--occupancy", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("occupancy-*.json")
    doc = json.loads(path.read_text())
    assert doc["occupancy"] and not list(tmp_path.glob("calibration-*.json"))


def test_suite_writes_a_checked_calibration(fake_suite):
    cal, out = fake_suite
    assert cal.evidence == "measured (H100 (test stand-in), 2026-11-28)"
    assert set(K.names()) == set(cal.doc["constants"])                  # every constant, nothing else
    assert (out / "calibrate.log").read_text().count("check: ok") == 1
    for c in cal.doc["constants"].values():
        assert c["regime"] == "compiled" or c["clock_ghz"] == pytest.approx(FakeRunner.GHZ, rel=1e-3)


def test_suite_arithmetic(fake_suite):
    cal, _ = fake_suite
    v = cal.value
    assert v("clock.burst_ghz") == pytest.approx(1.5, rel=1e-3)
    assert v("clock.sustained_ghz") == pytest.approx(1.5, rel=1e-3)
    assert v("wgmma.m64n256k32.sm_cycles_per_wgmma") == pytest.approx(128)
    assert v("wgmma.m64n256k32.pipe_efficiency") == pytest.approx(1.0)
    assert v("wgmma.m64n128k32.cycles_per_wgmma_2wg") == pytest.approx(128)
    assert v("wgmma.m64n256k32.latency_cycles") == 520 and v("wgmma.m64n256k32.issue_cycles_per_slice") == 44
    assert v("tma.load.latency_cycles.unloaded") == 1000 + 50 // 8
    assert v("tma.load.latency_cycles.scattered") == 1000 + 50 // 8 + 400
    assert v("tma.store.issue_cycles") == 30 and v("tma.store.drain_cycles") == 900
    assert v("mbarrier.local_roundtrip_cycles") == 400 and v("mbarrier.remote_roundtrip_cycles") == 1500
    assert v("mbarrier.try_wait_pass_cycles") == 12 and v("bar_sync.256_cycles") == 30
    assert v("epilogue.tile_cycles.beside_wgmma") == 2100 and v("epilogue.cpi.alone") == pytest.approx(1400 / 455)
    assert v("dram.latency_cycles.unloaded") == 900
    assert v("clock.clock64_read_cycles") == 6 and v("clock.globaltimer_tick_ns") == 32
    # TMA bandwidth: 132 CTAs x 384 x 8 KiB over 100 us of every CTA's window (+100 ns of start skew per CTA)
    full = [p for p in cal.curve("tma_load.sequential") if p["active"] == 132 and p["depth"] == 8][0]
    assert full["gbps"] == pytest.approx(132 * 384 * 8192 / (100_000 + 131 * 100), rel=1e-3)
    assert v("tma.load.gbps.sequential_max") == pytest.approx(full["gbps"])
    # the stream's bandwidth: bytes of the active CTAs over the streaming warps' span (200 us + skew)
    rd = max(cal.curve("dram.read"), key=lambda p: p["gbps"])
    assert rd["gbps"] == pytest.approx(132 * 256 * 15 * 2048 / (200_000 + 131 * 100), rel=1e-3)
    assert v("dram.copy_gbps") == pytest.approx(2 * v("dram.read_gbps"))
    # bursts on one barrier: 100 cycles per further box -> 8 KiB / 100 B/clk; the chain beside the epilogue
    assert v("tma.load.box_cycles_sm") == pytest.approx(100) and v("tma.load.bytes_per_clk_sm") == pytest.approx(81.92)
    assert v("wgmma.m64n256k32.cycles_beside_epilogue") == 140
    assert v("epilogue.tile_cycles.alone_3sms") == 1400 and v("epilogue.tile_cycles.beside_wgmma_no_store") == 1800
    # the launch probe: 500 ns between a CTA's exit and the next one's start on its SM, at 1.5 GHz; 5 us of overhead
    assert v("cta.relaunch_cycles") == pytest.approx(750) and v("launch.overhead_us") == pytest.approx(5.0)
    # the lsu probe: the SM's span over its warps' accesses
    assert v("lsu.store.cycles_per_access.fragment_4B") == pytest.approx(11)
    assert v("lsu.load.cycles_per_access.fragment_16B") == pytest.approx(10)
    assert v("lsu.store.cycles_per_access.line_16B") == pytest.approx(14)
    # the latency probe: a chain's cycles a step; the SM's cycles per shuffle over 16 warps' span
    assert v("latency.shfl.cycles") == pytest.approx(30) and v("latency.lds.cycles") == pytest.approx(33)
    assert v("shfl.sm_cycles_per_instr") == pytest.approx((2 * 8 * 4096 * 16 + 15) / (16 * 8 * 4096))
    pts = [p for p in cal.curve("lsu") if p["op"] == "load" and p["width"] == 8 and p["active"] == 132
           and p["pattern"] == "fragment"]
    assert len(pts) == 1 and pts[0]["cycles_per_access"] == pytest.approx(8) and pts[0]["sectors_per_access"] == 8


# ---- the data format's checks -----------------------------------------------------------------------

def test_loader_names_every_problem(tmp_path, fake_suite):
    cal, _ = fake_suite
    doc = json.loads(json.dumps(cal.doc))
    doc["schema"] = "something/0"
    doc["constants"]["clock.burst_ghz"]["value"] = float("nan")
    doc["constants"]["tma.store.issue_cycles"]["unit"] = "ms"
    doc["constants"]["dram.read_gbps"]["clock_ghz"] = None
    del doc["constants"]["mbarrier.local_roundtrip_cycles"]
    doc["constants"]["made.up"] = dict(doc["constants"]["clock.burst_ghz"], value=1.0)
    doc["curves"]["tma_store"]["points"] = []
    bad = K.problems(doc)
    text = "\n".join(bad)
    for needle in ("schema", "clock.burst_ghz", "not a finite number", "unit 'ms'", "carries the clock",
                   "mbarrier.local_roundtrip_cycles", "made.up", "tma_store"):
        assert needle in text, needle
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(K.CalibrationError, match="not a usable calibration"):
        K.load(p)
    with pytest.raises(K.CalibrationError, match="no such file"):
        K.load(tmp_path / "absent.json")
    p.write_text("{")
    with pytest.raises(K.CalibrationError, match="not JSON"):
        K.load(p)
    with pytest.raises(KeyError, match="no constant"):
        cal.value("wgmma.m64n512k32.latency_cycles")


def test_every_constant_has_a_unit_the_format_knows():
    for name, (unit, what) in K.names().items():
        assert unit in K.UNITS and what, name
    assert set(K.REQUIRED) <= set(K.names())


def test_build_all_compiles_in_spawned_processes():
    """The probes are compiled in parallel processes (spawned: the parent may hold a CUDA context); a build
    that fails is reported by name, the others are not held up."""
    jobs = [C.Launch("sync", {}, {}, 1), C.Launch("clock", {}, {}, 1), C.Launch("wgmma", {"BLOCK_N": 100}, {}, 1)]
    lines = []
    res = C.build_all(jobs, workers=2, log=lines.append)
    assert res[("sync", "{}")] is None and res[("clock", "{}")] is None
    assert "BLOCK_N" in res[("wgmma", '{"BLOCK_N": 100}')]
    assert any("FAILED" in ln and "calib_wgmma" in ln for ln in lines)


@pytest.mark.gpu
def test_calibrate_clock_and_sync_on_the_gpu(tmp_path):
    """On a Hopper GPU: two probe families end to end (workers, records, analysis); the file carries their
    constants with the clock of their launches (the rest of the suite is missing, which the check names)."""
    import torch
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the calibration probes are sm_90a")
    C.main(["--only", "clock,sync", "--out", str(tmp_path)])
    (path,) = tmp_path.glob("calibration-*.json")
    doc = json.loads(path.read_text())
    c = doc["constants"]
    assert 0.5 < c["clock.burst_ghz"]["value"] < 2.5
    assert c["mbarrier.local_roundtrip_cycles"]["value"] > 0 and c["mbarrier.local_roundtrip_cycles"]["clock_ghz"]
    assert any("the timing model needs" in p for p in K.problems(doc))
