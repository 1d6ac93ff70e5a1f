"""pelib.predict's memory side against what the simulator logs: a TMA load's box, destinations and tensor
(multicast), the tile orders the kernels walk A in (a_schedule, including 07a/07b's windows), and the traffic
the replay counts from the kernel's own loads and stores. The simulations here use one K block and a comb of
20 positions (comb-residue period 5), so the orders differ within a few tiles and each run takes seconds."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest

from pelib.predict import calibration as cal_mod
from pelib.predict.graph import Graph
from pelib.predict.memory import MemoryState, a_schedule
from pelib.predict.replay import Replay
from pelib.sim import host as sim_host
from pelib.stage import Stage


@lru_cache(maxsize=None)
def _tiny(key: str, m_tiles: int = 8, grid: int | None = None):
    """(stage, problem, grid, events) of a small simulated run: M = m_tiles row tiles, one K block."""
    s = Stage(key, {"PE_NUM_PATCHES": 20})
    ex = s.exports
    prob = replace(s.problem("sim"), name="order", m=m_tiles * ex.tile_m * ex.cluster_x, n=3 * ex.tile_n,
                   k=ex.block_k, positions=20)
    plan = sim_host.plan(s, prob, s.inputs(prob, 0, "sim"), grid=grid)
    rep = plan.run()
    assert rep.ok, rep.summary()
    return s, prob, plan.config.grid[0], rep.events


def _a_rows(s, events, cta: int) -> list[int]:
    """The row tiles CTA `cta` loads A for, in the simulated order (one entry per tile)."""
    rows = []
    for e in events:
        if e["cta"] == cta and e["kind"] == "tma_load" and e["tensor"] == "a":
            t = e["coord"] // s.exports.tile_m
            if not rows or rows[-1] != t:
                rows.append(t)
    return rows


# ---- the TMA load event ------------------------------------------------------------------------------------

def test_a_multicast_load_logs_its_box_destinations_and_tensor():
    """02 multicasts B's half box to its pair (16 KiB, the size of its A box); 06a multicasts A to 3 CTAs."""
    s, _, _, ev = _tiny("sm90/02_persistent_cluster", 4)
    loads = {(e["tensor"], e["bytes"], e["dests"]) for e in ev if e["kind"] == "tma_load"}
    assert loads == {("a", 16384, 1), ("b", 16384, 2)}
    s, _, _, ev = _tiny("sm90/06a_multicast_a", 4)
    loads = {(e["tensor"], e["bytes"], e["dests"]) for e in ev if e["kind"] == "tma_load"}
    assert loads == {("a", 8192, 3), ("b", 32768, 1)}
    # every destination's landing carries the box, not box x destinations
    assert {e["bytes"] for e in ev if e["kind"] == "complete_tx"} <= {8192, 32768}


def _replay_loads(key: str, m_tiles: int = 4):
    s, _, _, ev = _tiny(key, m_tiles)
    g = Graph.build(ev)
    cal = cal_mod.load("h100")
    mem = MemoryState(0.5, 0.0, 1.6)
    seen = []
    draw = mem.tma_draw

    class Spy(MemoryState):
        def tma_draw(self, cal, nbytes, streamed, rng, miss=None):
            seen.append((nbytes, streamed))
            return draw(cal, nbytes, streamed, rng, miss)
    spy = Spy(0.5, 0.0, 1.6)
    res = Replay(g, cal, spy, ctas=set(g.ctas), streamed=("a",)).run()
    return g, res, seen


def test_streamed_is_decided_by_tensor_not_by_size():
    """02's B half box (16 KiB) is as large as its A box: only A's loads may miss L2."""
    g, res, seen = _replay_loads("sm90/02_persistent_cluster")
    issued = [n for n in g.nodes if n.kind == "tma_load" and n.warp >= 0]
    assert {(n.bytes, n.tensor == "a") for n in issued} == {(16384, True), (16384, False)}
    assert sorted(seen) == sorted((n.bytes, n.tensor == "a") for n in issued)


def test_a_multicast_box_is_charged_once_and_lands_in_each_destination():
    """06a: the issuing SM's TMA unit moves one 8 KiB box; each of the 3 CTAs receives it."""
    g, res, seen = _replay_loads("sm90/06a_multicast_a")
    a = [n for n in g.nodes if n.kind == "tma_load" and n.warp >= 0 and n.tensor == "a"]
    b = [n for n in g.nodes if n.kind == "tma_load" and n.warp >= 0 and n.tensor == "b"]
    assert a and all(n.bytes == 8192 and n.dests == 3 for n in a)
    assert all(nbytes == 8192 for nbytes, streamed in seen if streamed)
    sent = sum(v for (c, what, _), v in res.traffic.items() if what == "tma_load.a")
    assert sent == 8192 * len(a)                                  # read from L2 once per box
    landed = sum(res.load_bytes.values())
    assert landed == 8192 * 3 * len(a) + sum(n.bytes for n in b)    # landed in every destination


# ---- the tile orders ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("key,expect", [
    ("sm90/07_comb_resident", [0, 5, 1, 6, 2, 7, 3, 4]),   # 07: classes t % 5 in order
    ("sm90/07a_comb_windows", [0, 1, 2, 3, 4, 5, 6, 7]),   # 07a: window by window
])
def test_a_schedule_is_the_simulated_load_order(key, expect):
    """a_schedule restates the order each CTA loads A in: 07's comb-residue order and 07a's windows differ."""
    s, prob, grid, ev = _tiny(key)
    sched = a_schedule(s.exports, prob.m, prob.n, grid, s.kind.SIM_SM_COUNT)
    for c in range(grid):
        assert _a_rows(s, ev, c) == sched[c]
    assert sched[0] == expect


def test_a_schedule_of_two_row_groups_with_windows():
    """Two row groups (6 CTAs) over 16 row tiles: 07a's windows against the simulated loads, CTA by CTA."""
    s, prob, grid, ev = _tiny("sm90/07a_comb_windows", 16, 6)
    sched = a_schedule(s.exports, prob.m, prob.n, grid, grid)
    assert grid == 6 and len({tuple(x) for x in sched}) == 2
    for c in range(grid):
        assert _a_rows(s, ev, c) == sched[c]


# ---- resident clusters -------------------------------------------------------------------------------------

BLIND_H100 = "results/2026-11-27-h100/blind-nvidia-h100-80gb-hbm3.json"


@pytest.fixture(scope="module")
def h100_occupancy():
    import json

    from pelib.paths import ROOT
    return cal_mod.occupancy_from_launches(json.loads((ROOT / BLIND_H100).read_text()), BLIND_H100)


def test_occupancy_records_from_the_blind_run(h100_occupancy):
    """The H100 blind run's query: 39 three-CTA clusters of 225 KB CTAs, 66 pairs."""
    got = {(r["cluster"], r["threads"], r["smem"]): r["active_clusters"] for r in h100_occupancy}
    assert got[(3, 384, 230488)] == 39 and got[(2, 384, 197696)] == 66
    assert all("cuOccupancyMaxActiveClusters" in r["source"] and BLIND_H100 in r["source"] for r in h100_occupancy)
    assert cal_mod.check_occupancy(h100_occupancy) == []


def test_a_clustered_grid_launches_the_resident_clusters(h100_occupancy):
    """06a on the H100: 117 CTAs (39 clusters), not 132; without a record the number is derived and says so."""
    from pelib.predict import model
    s = Stage("sm90/06a_multicast_a")
    full = s.problem("full")
    cfg, note = model.launch(s, full, 132, h100_occupancy)
    assert cfg.grid[0] == 117 and cfg.active_clusters == 39 and "DERIVED" not in note
    cfg, note = model.launch(s, full, 132, None)
    assert cfg.grid[0] == 132 and "DERIVED" in note and "upper bound" in note
    # a ring-depth variant's shared memory still allows one CTA per SM: the record carries over
    n, how, measured = model.resident_clusters(h100_occupancy, 3, 384, 200_000, 168, 0, 132)
    assert (n, measured) == (39, True)
    n, how, measured = model.resident_clusters(h100_occupancy, 3, 384, 100_000, 80, 0, 132)
    assert not measured and "DERIVED" in how      # two CTAs per SM: a different occupancy, not transferred


def test_bad_occupancy_records_are_refused():
    cal = cal_mod.load("h100")
    for bad, word in (([{"cluster": 3, "threads": 384, "smem": 1, "active_clusters": 0, "source": "x"}], "active"),
                      ([{"cluster": 3, "threads": 384, "smem": 1, "active_clusters": 39}], "source"),
                      ({"cluster": 3}, "list")):
        with pytest.raises(cal_mod.CalibrationError, match=word):
            cal.with_occupancy(bad)


# ---- traffic from the kernel's own instructions ------------------------------------------------------------

def _tiny_traffic(key, defines=None):
    s = Stage(key, {"PE_NUM_PATCHES": 20, **(defines or {})})
    ex = s.exports
    prob = replace(s.problem("sim"), name="traffic", m=4 * ex.tile_m, n=3 * ex.tile_n, k=ex.block_k, positions=20)
    rep = sim_host.plan(s, prob, s.inputs(prob, 0, "sim")).run()
    assert rep.ok, rep.summary()
    from pelib.predict.sass_paths import SassPaths
    sass = SassPaths.of(s)
    sass.trips = prob.k // int(ex.get("a_box_k", ex.block_k))
    g = Graph.build(rep.events, sass)
    res = Replay(g, cal_mod.load("h100"), MemoryState(0.5, 0.0, 1.6), ctas=set(g.ctas), streamed=("a",)).run()
    by = {}
    for (_, what, _), v in res.traffic.items():
        by[what] = by.get(what, 0) + v
    return prob, by


def test_traffic_is_what_the_kernel_loads_and_stores():
    """06's own bytes at a small problem: every output byte stored once, A's boxes once per column block, B's
    (resident) once per CTA."""
    prob, by = _tiny_traffic("sm90/06_permuted_b")
    ex = Stage("sm90/06_permuted_b").exports
    assert by["stg"] == 2 * prob.m * prob.n
    assert by["tma_load.a"] == prob.m * prob.k * (prob.n // ex.tile_n)
    assert by["tma_load.b"] == prob.n * prob.k                 # 3 CTAs, one column block of B each


def test_traffic_scales_tiles_and_prologue_apart():
    """model.traffic: bytes inside a tile scale with the full grid's tiles, a prologue's (resident B) with its
    CTAs; DRAM reads of a tensor stop at its size, every store reaches DRAM."""
    from types import SimpleNamespace as NS

    from pelib.predict import model
    from pelib.problems import PatchEmbed
    full = PatchEmbed("t", m=64 * 100, n=768, k=768)
    su = NS(n_sim=8, ctas={0}, k_ratio=1.0, full=full, cfg=NS(grid_kind=2, tiles=300, ctas=30), stores=None)
    res = NS(traffic={(0, "tma_load.a", True): 8 * 64 * 768, (0, "tma_load.b", False): 256 * 768,
                      (0, "stg", True): 8 * 64 * 256 * 2, (1, "stg", True): 10 ** 9})     # CTA 1 is not replayed
    t = model.traffic(su, res)
    assert t["by_kind"] == {"stg": 300 * 64 * 256 * 2, "tma_load.a": 300 * 64 * 768, "tma_load.b": 30 * 256 * 768}
    assert t["dram_write"] == 2 * full.m * full.n
    assert t["dram_read"] == min(300 * 64 * 768, full.m * full.k) + min(30 * 256 * 768, full.n * full.k)
    assert t["write_share"] == pytest.approx(t["dram_write"] / t["dram"])
    su.stores = 3.0e9                                         # the simulator's count replaces the walked one
    assert model.traffic(su, res)["by_kind"]["stg"] == 3.0e9 and model.traffic(su, res)["dram_write"] == 3.0e9


def test_a_cut_k_loop_scales_every_operand_load():
    """Where the simulated K is cut (the NVFP4 shapes: M = 128, K up to 16,384), an operand's bytes grow with
    K whether its loads sit in a tile's marks or not (a one-tile CTA's carry none); the stores and what the
    epilogue reads (LDG) do not. At 128 x 7168 x 16384 DRAM then moves A, B and their scales once: the
    69.07 MB of the shape's bytes, not the cut K's eighth of them."""
    from types import SimpleNamespace as NS

    from pelib.predict import model
    from pelib.problems import nvfp4_gemm
    full = nvfp4_gemm("k16384")
    ratio = 8.0                                               # 64 K blocks of 256 simulated as 8
    cut_k = full.k / ratio
    ctas = 112
    per_cta = {"tma_load.a": 128 * cut_k / 2, "tma_load.b": 64 * cut_k / 2, "tma_load.sfa": 128 * cut_k / 16,
               "tma_load.sfb": 64 * cut_k / 16, "ldg": 1000.0}
    su = NS(n_sim=1, ctas={0}, k_ratio=ratio, full=full, cfg=NS(grid_kind=0, tiles=ctas, ctas=ctas),
            stores=2.0 * full.m * full.n)
    res = NS(traffic={(0, w, False): v for w, v in per_cta.items()})
    t = model.traffic(su, res)
    assert t["by_kind"]["tma_load.a"] == ctas * 128 * full.k / 2             # A read by every column tile
    assert t["by_kind"]["tma_load.b"] == full.n * full.k / 2                 # B once
    assert t["by_kind"]["ldg"] == ctas * 1000.0                              # not scaled with K
    sizes = model.tensor_bytes(full)
    assert t["dram_read"] == sizes["a"] + sizes["b"] + sizes["sfa"] + sizes["sfb"] + ctas * 1000.0
    assert t["dram"] == pytest.approx(69.07e6 + ctas * 1000.0, rel=1e-3)
    res.traffic = {(0, w, True): v for w, v in per_cta.items()}              # the same loads inside a tile's marks
    assert model.traffic(su, res)["by_kind"] == t["by_kind"]


@pytest.mark.parametrize("key, plain", [("sm90/03a_register_epilogue", True), ("sm90/12_tma_store", False)])
def test_the_simulator_counts_the_kernels_own_global_bytes(key, plain):
    """The engine counts every global load and store the kernel makes itself, per tensor (the report's gmem):
    a register epilogue stores each output byte once and reads comb; a TMA-store epilogue stores nothing
    itself (its boxes are events)."""
    s = Stage(key, {"PE_NUM_PATCHES": 20})
    ex = s.exports
    prob = replace(s.problem("sim"), name="gmem", m=4 * ex.tile_m * ex.cluster_x, n=3 * ex.tile_n, k=ex.block_k,
                   positions=20)
    _, _, gmem = sim_host.events(s, prob)
    assert gmem["c"]["store"] == (2 * prob.m * prob.n if plain else 0)
    assert gmem["c"]["load"] == 0 and gmem["comb"]["store"] == 0
    assert gmem["comb"]["load"] > 0
    assert gmem["c"]["prefetch"] == gmem["comb"]["prefetch"] == 0


def test_the_simulator_counts_the_l2_prefetches_boxes():
    """06 prefetches A's boxes into L2 (PREFETCH_TILES ahead); without the prefetch it asks for none. The model
    adds them to the bytes between the SMs and L2, scaled with the output."""
    from pelib.predict import model
    s = Stage("sm90/06_permuted_b", {"PE_NUM_PATCHES": 20})
    ex = s.exports
    prob = replace(s.problem("sim"), name="gmem", m=8 * ex.tile_m, n=3 * ex.tile_n, k=ex.block_k, positions=20)
    pf = sum(v["prefetch"] for v in sim_host.events(s, prob)[2].values())
    assert pf > 0 and pf % (ex.tile_m * ex.block_k) == 0 and pf <= prob.m * prob.k * (prob.n // ex.tile_n)
    none = Stage("sm90/06_permuted_b", {"PE_NUM_PATCHES": 20, "PREFETCH_TILES": 0})
    assert sum(v["prefetch"] for v in sim_host.events(none, prob)[2].values()) == 0
    su = model.prepare(Stage("sm90/06_permuted_b"), 132)
    assert 0 < su.prefetch <= su.full.m * su.full.k * (su.full.n // ex.tile_n)


def test_stores_come_from_the_simulated_run_not_the_walk():
    """A persistent stage whose epilogue stores lie outside its tile marks (03a) stores its whole output on the
    full problem (the walk had scaled them once a CTA: 0.16 of 1.43 GB)."""
    from pelib.predict import model
    su = model.prepare(Stage("sm90/03a_register_epilogue"), 132)
    assert su.stores == 2 * su.full.m * su.full.n


def test_every_load_queues_at_l2_by_the_kernels_own_traffic_and_mix():
    """The L2 queueing a load meets is the stream probe's L2 chase curves at the kernel's L2 traffic, read/write mix
    interpolated (read at 0, copy at one half, write at 1), less the unloaded chase; none without the curves or the
    traffic. It grows with the traffic and with the writes' share, and it is added to a hit's latency."""
    from pelib.paths import ROOT
    cal = cal_mod.load(str(ROOT / "results/2026-12-02-h200/predict-calibration-h200.json"))

    def q(gbps, ws=0.0):
        return MemoryState(0.3, 0.0, 1.5, 0.3, 132, 0.0, gbps, ws).l2_queue_cycles(cal)
    assert q(0.0) == 0.0                                       # no traffic: the unloaded chase, nothing added
    assert 0.0 <= q(1000.0) < q(7000.0) < q(8500.0)            # the queue grows with the load
    assert q(7000.0, 0.4) > q(7000.0, 0.0)                     # writes load L2 more than reads (the copy curve)
    read = {p["gbps"]: p["cycles"] / p["clock_ghz"] for p in cal.curve("l2.read")}
    top = max(read)                                            # at a measured point: the curve's own excess, in cycles
    assert q(top) == pytest.approx((read[top] - read[min(read)]) * 1.5, rel=1e-6)
    hit = MemoryState(0.3, 0.0, 1.5, 0.3, 132, 0.0).tma_cycles(cal, 8192, streamed=False)
    loaded = MemoryState(0.3, 0.0, 1.5, 0.3, 132, 0.0, 8000.0, 0.2)
    assert loaded.tma_cycles(cal, 8192, streamed=False) == pytest.approx(hit + loaded.l2_queue_cycles(cal))
    bare = replace(cal, curves={k: v for k, v in cal.curves.items() if not k.startswith("l2.")})
    assert MemoryState(0.3, 0.0, 1.5, 0.3, 132, 0.0, 8000.0, 0.2).l2_queue_cycles(bare) == 0.0
