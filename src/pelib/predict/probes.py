"""Measure the timing model's costs on one H100/H200 with the probes src/kernels/probes/calib_*.cu: one JSON.

    PYTHONPATH=src python3 -m pelib.predict.probes --out DIR      (one GPU call: about 2-3 minutes on an H100)
    PYTHONPATH=src python3 -m pelib.predict.probes --occupancy --out DIR   (the resident-cluster query only: seconds)

What runs, in order (each probe family in its own worker process: a probe that faults ends only its
worker; a worker past its time limit is killed and the rest goes on):
  clock     the clock registers: read costs, the globaltimer's step, a spin on both clocks;
  wgmma     m64nNk32 e4m3 for N = 128, 192, 256 with 1 and 2 warpgroups: latency, issue, slice, K-loop rate;
  tma       A-box (64 x 128 B) loads: SMs x loads in flight x {sequential window, scattered, L2-resident},
            and cluster pairs multicasting: the loaded-latency sweep;
  store     C-box (32 x 64 BF16) TMA stores: issue, wait_group.read, wait_group over SMs x group size;
  sync      mbarrier round trips (local, remote), arrive and passing try_wait costs, bar.sync, __syncthreads;
  epilogue  sm90/06's epilogue per tile alone, without stores, beside another epilogue, beside a wgmma
            K loop; with the probe's SASS instruction count, the CPI;
  stream    DRAM and L2 bandwidth-latency curves (read, write, copy): a pointer chase timed while other
            warps stream at controlled intensity;
  latency   on one SM, a dependent chain of warp shuffles and one of shared-memory loads (their latency:
            what a scoreboard wait costs), and independent shuffles over 1 to 16 warps (the SM's shuffle rate);
  lsu       warp-wide global stores and loads (ld.global.nc) of 4, 8 and 16 B a lane, in the register
            epilogue's fragment pattern (four lanes a row, eight rows) and fully coalesced, L2-resident: the
            SM's cycles per access (one SM, and every SM);
  launch    one and several waves of one-per-SM CTAs: the launch's own overhead (event time less the CTAs'
            span) and the gap before a CTA starts on an SM its predecessor left (the non-persistent grids);
  sustained the 256-wide wgmma probe back to back for about 2 s: the clock the power cap leaves.
Every launch records its own SM clock (the launch-clock block of common/timing.cuh, per CTA): each
constant carries the clock of the launch that measured it, and its regime ("short burst": one launch
after an idle gap, L2 flushed first unless the point measures L2; "sustained"). The JSON format, its
constants and their meaning: pelib.predict.measured_format. Everything up to the launch runs on the CPU in the tests
(tests/test_calibrate.py): the probes themselves in the simulator, the suite through a fake runner.

Over 700 lines: the probe suite's plan, runner and the analyser of each probe family, which read one record
format.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .. import bench, clock, device, launch, sol, timing, tma
from ..isa import sass_account
from ..sim import engine as sim
from ..measure import jobs as _jobs
# the probe kernels' host side (file, record fields, one launch, build, arguments) is the runners' room;
# PROBES and source stay the suite's names here too
from ..measure.probe_kernels import ARCH, PROBES, Launch, bind, builds_of, fields, probe_build, source, units  # noqa: F401
from .. import stages as _stages
from ..stage import Stage, max_active_clusters
from . import measured_format as calibration   # the file format this module writes

FAMILY_TIMEOUT_S = 90.0    # a family takes seconds; a bounded wait traps; a hang is cut here
SUSTAIN_S = 2.0
LAUNCH_BURST = 20          # the launch probe's one-wave launches, as the blind run times a stage (pelib.predict.blind)
# dense FP8 per SM per clock, 8,192 on Hopper: 1,979 TFLOPS / (132 SMs x 1.83 GHz) (book/data/gpu_specs.yaml)
WGMMA_FLOP_PER_CLK_SM = sol.spec("H100 SXM").fp8_flops_per_clk_sm


# ---- what to launch -----------------------------------------------------------------------------------

@dataclass
class Scale:
    """Sizes of the suite: the GPU's (full()) or the simulator's (sim())."""

    sms: int
    m: int = 928_256                  # rows of A and C: the full SigLIP2 problem (A 713 MB, C 1.43 GB)
    k: int = 768
    n: int = 768
    chain_dram_lines: int = 1 << 21   # 128-B lines of the DRAM pointer chase: 256 MiB
    chain_l2_lines: int = 1 << 15     # 4 MiB
    stream_words: int = 1 << 26       # 16-B words of each stream buffer: 1 GiB
    stream_l2_words: int = 1 << 20    # 16 MiB
    l2_tiles: int = 128               # row tiles of the L2-resident TMA footprint: 6 MiB
    spin: int = 200_000               # cycles of the clock probe's spin
    chain: int = 256                  # K slices of the wgmma chain (1,024 wgmma)
    tma_iters: int = 384              # loads per CTA
    store_iters: int = 384
    sync_iters: int = 1000
    epi_tiles: int = 64
    stream_iters: int = 256           # 2 KiB per warp per iteration
    hops: int = 128
    tma_active: tuple = (1, 8, 33, 66, 132)
    tma_depths: tuple = (1, 2, 4, 8)
    burst_depths: tuple = (1, 2, 4, 8)
    mc_active: tuple = (2, 66, 132)
    store_active: tuple = (1, 33, 132)
    store_groups: tuple = (1, 4, 8)
    stream_loads: tuple = ((0, 0), (132, 1), (132, 2), (132, 4), (132, 8), (132, 15), (33, 15), (66, 15))
    sustain_s: float = SUSTAIN_S
    sustain_chain: int = 2048
    launch_spin: int = 50_000         # cycles each CTA of the launch probe spins (~25 us: past the clock's floor)
    launch_waves: tuple = (1, 4)
    lsu_iters: int = 1024             # warp-wide accesses per warp
    lsu_rows: int = 4096              # rows of the L2-resident footprint (x lsu_pitch: 6 MiB)
    lsu_pitch: int = 1536             # bytes a row: one 768-column BF16 row of C
    lsu_shapes: tuple = ((4, 0), (8, 0), (16, 0), (4, 1), (16, 1), (4, 2), (8, 2), (16, 2))
    #                 (bytes a lane, pattern 0 fragment / 1 line / 2 walk: calib_lsu.cu)
    lsu_loads: tuple = ((1, 8), (1, 16), (132, 8))                    # (SMs, warps each)
    lat_iters: int = 4096             # steps of each latency chain per warp
    lat_warps: tuple = (1, 4, 8, 16)  # warps on the one SM (1: the latency; more: op 2's shuffle rate)

    @classmethod
    def full(cls, sms: int) -> "Scale":
        """The GPU's suite for `sms` SMs (the SM counts of the sweeps scale with it)."""
        def at(frac):
            return max(1, round(sms * frac))
        return cls(sms=sms, tma_active=tuple(sorted({1, 8, at(0.25), at(0.5), sms})),
                   mc_active=tuple(sorted({2, 2 * at(0.25), sms - sms % 2})),
                   store_active=tuple(sorted({1, at(0.25), sms})), lsu_loads=((1, 8), (1, 16), (sms, 8)),
                   stream_loads=((0, 0), (sms, 1), (sms, 2), (sms, 4), (sms, 8), (sms, 15), (at(0.25), 15),
                                 (at(0.5), 15)))

    @classmethod
    def sim(cls) -> "Scale":
        """The simulator's: 4 SMs, a few tiles of everything (indexing, not time)."""
        return cls(sms=4, m=512, chain_dram_lines=64, chain_l2_lines=16, stream_words=1 << 10, stream_l2_words=1 << 8,
                   l2_tiles=2, spin=200, chain=3, tma_iters=8, store_iters=14, sync_iters=4, epi_tiles=2,
                   stream_iters=2, hops=6, tma_active=(1, 4), tma_depths=(1, 3), burst_depths=(1, 2), mc_active=(2, 4),
                   launch_spin=100, launch_waves=(1, 2), lsu_iters=16, lsu_rows=64, lsu_loads=((1, 2), (4, 2)),
                   lat_iters=16, lat_warps=(1, 2),
                   store_active=(1, 4), store_groups=(1, 3), stream_loads=((0, 0), (4, 2)), sustain_s=1e-3,
                   sustain_chain=3)


LSU_PATTERNS = ("fragment", "line", "walk")    # calib_lsu.cu's lane patterns, by number
LATENCY_OPS = ("shfl", "lds", "shfl_many")     # calib_latency.cu's ops, by number


def plan(sc: Scale) -> list[Launch]:
    """Every launch of the suite, in order."""
    S, out = sc.sms, []
    even, by3 = S - S % 2, S - S % 3
    out.append(Launch("clock", {}, {"spin": sc.spin, "ticks": 16}, S, label="clock"))
    for n in calibration.WGMMA_N:
        for wg in (1, 2):
            out.append(Launch("wgmma", {"BLOCK_N": n, "NUM_WG": wg}, {"chain": sc.chain, "seed": 1}, S,
                              label=f"wgmma m64n{n}k32, {wg} warpgroup{'s' if wg > 1 else ''}",
                              point={"n": n, "wg": wg}))
    m_tiles = sc.m // 64
    for pattern, name in ((0, "sequential"), (1, "scattered"), (2, "l2")):
        for active in sc.tma_active:
            for depth in sc.tma_depths:
                out.append(Launch("tma", {}, {"pattern": pattern, "depth": depth, "iters": sc.tma_iters, "active": active,
                                              "m_tiles": m_tiles, "k_slices": sc.k // 128, "footprint": sc.l2_tiles},
                                  S, label=f"tma {name}, {active} SMs x {depth} in flight", tensors={"tmap_a": "a"},
                                  prepare="warm" if pattern == 2 else "flush",
                                  point={"curve": f"tma_load.{name}", "active": active, "depth": depth}))
    # bursts of `depth` boxes on one barrier (CALIB_BURST): the SM's TMA unit's rate, from L2 and from DRAM
    for pattern, name in ((2, "l2"), (0, "sequential")):
        for active in sorted({1, S}):
            for depth in (sc.burst_depths if active == 1 and pattern == 2 else (sc.burst_depths[0], sc.burst_depths[-1])):
                out.append(Launch("tma", {"CALIB_BURST": 1}, {"pattern": pattern, "depth": depth, "iters": sc.tma_iters,
                                                             "active": active, "m_tiles": m_tiles, "k_slices": sc.k // 128,
                                                             "footprint": sc.l2_tiles},
                                  S, label=f"tma burst {name}, {active} SMs x {depth} boxes on one barrier",
                                  tensors={"tmap_a": "a"}, prepare="warm" if pattern == 2 else "flush",
                                  point={"curve": f"tma_burst.{name}", "active": active, "depth": depth}))
    for active in sc.mc_active:
        for depth in (1, 4, 8) if S > 4 else (1, 2):
            out.append(Launch("tma", {"CALIB_CLUSTER": 2}, {"pattern": 0, "depth": depth, "iters": sc.tma_iters,
                                                              "active": active, "m_tiles": m_tiles,
                                                              "k_slices": sc.k // 128, "footprint": sc.l2_tiles},
                              even, cluster=2, label=f"tma multicast, {active // 2} pairs x {depth} in flight",
                              tensors={"tmap_a": "a"}, point={"curve": "tma_load.multicast", "active": active, "depth": depth}))
    for active in sc.store_active:
        for group in sc.store_groups:
            out.append(Launch("store", {}, {"iters": sc.store_iters, "group": group, "active": active,
                                            "m_bands": sc.m // 32, "seed": 3}, S,
                              label=f"tma store, {active} SMs, groups of {group}", tensors={"tmap_c": "cout"},
                              point={"curve": "tma_store", "active": active, "group": group}))
    out.append(Launch("sync", {}, {"mode": 0, "iters": sc.sync_iters}, S, label="sync, local", point={"mode": 0}))
    out.append(Launch("sync", {}, {"mode": 1, "iters": sc.sync_iters}, even, cluster=2, label="sync, remote (cluster pairs)",
                      point={"mode": 1}))
    # (other, store, case, chain slices, grid): beside_wgmma_no_store's chain is shorter than the epilogues
    # around it, so all of it runs beside them (its rate is the tensor pipe's beside an epilogue); alone_3sms
    # is one row group's three SMs: the stores meet no other SM's traffic (one SM's store path)
    chains = sc.epi_tiles * (sc.k // 128)
    for other, store, name, chain, grid in ((0, 1, "alone", chains, by3), (0, 0, "no_store", chains, by3),
                                            (1, 1, "beside_epilogue", chains, by3), (2, 1, "beside_wgmma", chains, by3),
                                            (2, 0, "beside_wgmma_no_store", sc.epi_tiles, by3),
                                            (0, 1, "alone_3sms", chains, min(3, by3))):
        out.append(Launch("epilogue", {}, {"M": sc.m, "N": sc.n, "tiles": sc.epi_tiles, "other": other,
                                           "chain": chain, "store": store, "seed": 5}, grid,
                          label=f"epilogue, {name.replace('_', ' ')}", tensors={"c": "cout"}, point={"case": name}))
    for foot in ("dram", "l2"):
        for op, opname in ((0, "read"), (1, "write"), (2, "copy")):
            for active, warps in sc.stream_loads:
                words = sc.stream_words if foot == "dram" else sc.stream_l2_words
                if warps == 0 and op > 0:
                    continue          # the unloaded chase is one point, shared by the three curves
                out.append(Launch("stream", {}, {"op": op, "hops": sc.hops, "iters": sc.stream_iters,
                                                 "stream_warps": warps, "active": active, "words": words},
                                  S, label=f"stream {foot} {opname}, {active} SMs x {warps} warps",
                                  tensors={"chain": f"chain_{foot}"}, prepare="warm" if foot == "l2" else "flush",
                                  point={"curve": f"{foot}.{opname}", "foot": foot, "op": opname, "active": active,
                                         "warps": warps}))
    for op, opname in ((0, "store"), (1, "load")):
        for width, pattern in sc.lsu_shapes:
            for active, warps in sc.lsu_loads:
                pname = LSU_PATTERNS[pattern]
                out.append(Launch("lsu", {}, {"op": op, "width": width, "pattern": pattern, "pitch": sc.lsu_pitch,
                                              "rows": sc.lsu_rows, "iters": sc.lsu_iters, "warps": warps,
                                              "active": active}, S,
                                  label=f"lsu {opname} {width} B a lane, {pname}, {active} SMs x {warps} warps",
                                  tensors={"buf": "lsu"}, prepare="warm",
                                  point={"curve": "lsu", "op": opname, "width": width, "pattern": pname,
                                         "active": active, "warps": warps}))
    for op, opname in enumerate(LATENCY_OPS):
        # one SM: a chain alone is the latency (1 warp); op 2's independent shuffles over more warps, the rate
        for warps in (sc.lat_warps if opname == "shfl_many" else sc.lat_warps[:1]):
            out.append(Launch("latency", {}, {"op": op, "iters": sc.lat_iters, "warps": warps, "active": 1,
                                              "lane_mask": 1}, S,
                              label=f"latency {opname}, one SM x {warps} warps", prepare="none",
                              point={"curve": "latency", "op": opname, "warps": warps}))
    for waves in sc.launch_waves:
        # one wave in the regime the blind run times every stage in (a warm-up, then each launch after an L2
        # flush, their median): the launch's fixed cost the model adds to every prediction (launch.overhead_us)
        one = waves == 1
        out.append(Launch("launch", {}, {"spin": sc.launch_spin}, waves * S, label=f"launch, {waves} wave(s) of {S} CTAs"
                          + (f", {LAUNCH_BURST} launches after a warm-up, L2 flushed before each" if one else ""),
                          prepare="flush" if one else "none", point={"waves": waves}, burst=LAUNCH_BURST if one else 0))
    out.append(Launch("wgmma", {"BLOCK_N": 256, "NUM_WG": 2}, {"chain": sc.sustain_chain, "seed": 1}, S,
                      label=f"sustained: wgmma m64n256k32 x 2 back to back for {sc.sustain_s:g} s", prepare="none",
                      repeat_s=sc.sustain_s, point={"sustained": True}))
    return out


def _build_one(args):
    probe, defines = args
    t0 = time.time()
    try:
        probe_build(probe, defines)
        return probe, defines, None, time.time() - t0
    except Exception as e:  # reported and the probe's launches skipped
        return probe, defines, f"{type(e).__name__}: {e}"[:1500], time.time() - t0


def build_all(jobs, workers: int | None = None, log=print) -> dict:
    """Compile every probe build the launches need, in parallel processes (NVRTC fills the shared cache);
    {(probe, defines json): error or None}."""
    todo = builds_of(jobs)
    workers = workers or min(len(todo), max(1, (os.cpu_count() or 2) - 1), 8)
    res = {}
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        # spawn, not fork: this process may already hold a CUDA context
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
            done = list(ex.map(_build_one, todo))
    else:
        done = [_build_one(t) for t in todo]
    for probe, defines, err, s in done:
        res[(probe, json.dumps(defines, sort_keys=True))] = err
        log(f"[build] calib_{probe} {defines or ''}: {'FAILED ' + err.splitlines()[0] if err else 'ok'} ({s:.1f} s)")
    return res


# ---- buffers and binding --------------------------------------------------------------------------------

def chain_array(lines: int, seed: int) -> np.ndarray:
    """A pointer chase: u32 words, line i (32 words) holds at word 0 the word index of the next line, the
    lines in one random cycle (every line visited once per lap: no short cycle to hide in a cache)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(lines)
    nxt = np.empty(lines, np.int64)
    nxt[order] = np.roll(order, -1)
    out = np.zeros(lines * 32, np.uint32)
    out[::32] = (nxt * 32).astype(np.uint32)
    return out


def chase_end(chain: np.ndarray, start: int, hops: int) -> int:
    """Where a chase of `hops` steps from word `start` ends (the host's check of CHASE_END)."""
    i = int(start)
    for _ in range(int(hops)):
        i = int(chain[i])
    return i


BUFFERS = {"a": "A [m, 768] u8, random bytes (the TMA loads' tensor)",
           "cout": "C [m, 768] BF16 (the TMA stores' and the epilogue's output)",
           "comb": "comb [196, 768] BF16, random",
           "chain_dram": "the DRAM pointer chase", "chain_l2": "the L2 pointer chase",
           "src": "stream source, random", "dst": "stream destination",
           "lsu": "the lsu probe's footprint [rows x pitch] u8, random"}
NEEDS = {"clock": (), "wgmma": (), "tma": ("a",), "store": ("cout",), "sync": (), "epilogue": ("comb", "cout"),
         "stream": ("chain_dram", "chain_l2", "src", "dst"), "launch": (), "lsu": ("lsu",), "latency": ()}


def make_buffers(sc: Scale, names, device: str) -> dict:
    """The named buffers (BUFFERS) at scale `sc` on `device` ('cuda' or 'cpu'), drawn there from a seeded
    generator; never all zeros where they are read."""
    import torch
    g = torch.Generator(device=device).manual_seed(11)
    out = {}
    for n in names:
        if n == "a":
            out[n] = torch.randint(0, 256, (sc.m, sc.k), dtype=torch.uint8, generator=g, device=device)
        elif n == "cout":
            out[n] = torch.zeros((sc.m, sc.n), dtype=torch.bfloat16, device=device)
        elif n == "comb":
            out[n] = torch.randn((196, sc.n), generator=g, device=device).to(torch.bfloat16)
        elif n in ("chain_dram", "chain_l2"):
            lines = sc.chain_dram_lines if n == "chain_dram" else sc.chain_l2_lines
            out[n] = torch.from_numpy(chain_array(lines, 7 if n == "chain_dram" else 8).view(np.int32)).to(device)
        elif n == "src":
            out[n] = torch.randint(0, 256, (sc.stream_words * 16,), dtype=torch.uint8, generator=g, device=device)
        elif n == "dst":
            out[n] = torch.zeros(sc.stream_words * 16, dtype=torch.uint8, device=device)
        elif n == "lsu":
            out[n] = torch.randint(0, 256, (sc.lsu_rows * sc.lsu_pitch,), dtype=torch.uint8, generator=g, device=device)
        else:
            raise KeyError(f"no buffer {n!r}; the buffers are {sorted(BUFFERS)}")
    return out


# ---- running: one launch on the GPU or in the simulator --------------------------------------------------

@dataclass
class Record:
    """What one launch left: its record words [units, fields], the launch-clock block, the wall time."""

    index: int
    out: np.ndarray
    cta_clock: np.ndarray
    ms: float | None = None
    launches: int = 1
    first_clock: np.ndarray | None = None    # sustained runs: the first launch's block
    error: str | None = None


class Runner:
    """Launches through pelib.launch (device='gpu') or pelib.sim (device='sim'), same arguments."""

    def __init__(self, sc: Scale, device: str = "gpu", names=None):
        import torch
        self.sc, self.device = sc, device
        self.bufs = make_buffers(sc, names if names is not None else sorted(BUFFERS), "cuda" if device == "gpu" else "cpu")
        self.flush = bench.L2Flush() if device == "gpu" else (lambda: None)
        self.torch = torch

    def _map(self, spec, t):
        if self.device == "gpu":
            return tma.encode(spec, owner=t)
        return tma.TensorMap(spec, cumap=None, owner=t)

    def _plan(self, b, job, out, tbuf):
        args = bind(b, job, out, tbuf, self.bufs, self._map)
        kw = dict(grid=(job.grid, 1, 1), block=(int(b.exports["num_threads"]), 1, 1), cluster=(job.cluster, 1, 1),
                  smem=int(b.exports["smem_bytes"]), kernel=b.kernel)
        if self.device == "gpu":
            return launch.prepare(b, args, **kw)
        return sim.prepare(b, args, arch=ARCH, defines=job.defines, timing=True, **kw)

    def run(self, index: int, job: Launch) -> Record:
        torch = self.torch
        b = probe_build(job.probe, job.defines)
        dev = "cuda" if self.device == "gpu" else "cpu"
        out = torch.zeros(units(b, job.grid) * int(b.exports["fields"]), dtype=torch.int64, device=dev)
        lay = timing.layout(b, job.grid)
        tbuf = timing.alloc(lay, device=dev)
        plan_ = self._plan(b, job, out, tbuf)
        if job.prepare == "warm":
            plan_.run()
            plan_.wait()
        first, n = None, 1
        if job.repeat_s > 0:                     # the sustained regime: back to back, the last launch kept
            plan_.run()
            plan_.wait()
            first = tbuf.cpu().numpy()[lay.phase_words:].reshape(lay.ctas, lay.warps, lay.clock_words).copy()
            t_end, batch = time.time() + job.repeat_s, 20 if self.device == "gpu" else 1
            while time.time() < t_end:
                for _ in range(batch):
                    plan_.run()
                n += batch
                plan_.wait()
        if job.prepare == "flush":
            self.flush()
        out.zero_()
        tbuf.zero_()
        ms = None
        if self.device == "gpu":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if job.burst > 1:                    # the blind run's regime: warmed up, each launch after its prepare
                plan_.run()
                plan_.wait()
                times = []
                for _ in range(job.burst):
                    if job.prepare == "flush":
                        self.flush()
                    tbuf.zero_()
                    e0.record()
                    plan_.run()
                    e1.record()
                    plan_.wait()
                    times.append(e0.elapsed_time(e1))
                ms, n = float(np.median(times)), job.burst
            else:
                e0.record()
                plan_.run()
                e1.record()
                plan_.wait()
                ms = e0.elapsed_time(e1)
        else:
            plan_.run()
        tm = timing.decode(tbuf, lay)
        return Record(index, out.cpu().numpy().reshape(units(b, job.grid), -1), tm.cta_clock, ms, n, first)


def run_jobs(jobs: list[Launch], runner: Runner, indices=None, log=print) -> list[Record]:
    """Run launches in order on one runner; a launch error is kept in its Record (the rest goes on)
    unless the context is gone (a kernel fault), which ends the list."""
    recs = []
    for i, job in zip(indices if indices is not None else range(len(jobs)), jobs):
        t0 = time.time()
        try:
            r = runner.run(i, job)
            log(f"[run] {i:3d} {job.label}: ok ({time.time() - t0:.2f} s)")
        except Exception as e:
            r = Record(i, np.zeros((0, 0), np.int64), np.zeros((0, 0, timing.CLOCK_WORDS), np.int64),
                       error=f"{type(e).__name__}: {e}"[:1500])
            log(f"[run] {i:3d} {job.label}: FAILED {r.error.splitlines()[0]}")
            if type(e).__name__ in ("KernelFault", "KernelHang"):
                recs.append(r)
                break
        recs.append(r)
    return recs


def _save(rec: Record, path: Path) -> None:
    extra = {} if rec.first_clock is None else {"first_clock": rec.first_clock}
    np.savez(path, out=rec.out, cta_clock=rec.cta_clock,
             meta=np.array(json.dumps({"index": rec.index, "ms": rec.ms, "launches": rec.launches, "error": rec.error})),
             **extra)


def _load(path: Path) -> Record:
    with np.load(path, allow_pickle=False) as z:
        m = json.loads(str(z["meta"]))
        return Record(m["index"], z["out"].copy(), z["cta_clock"].copy(), m["ms"], m["launches"],
                      z["first_clock"].copy() if "first_clock" in z.files else None, m["error"])


def _worker(jobs_file: str, rec_dir: str) -> int:
    """Body of a worker process: its family's launches on the GPU, one .npz per launch as it finishes."""
    doc = json.loads(_jobs.jobs_path(jobs_file).read_text())
    sc, jobs, idx = Scale(**doc["scale"]), [Launch(**j) for j in doc["jobs"]], doc["indices"]
    names = sorted({n for j in jobs for n in NEEDS[j.probe]})
    runner = Runner(sc, "gpu", names)
    for r in run_jobs(jobs, runner, idx, log=lambda s: print(s, flush=True)):
        _save(r, Path(rec_dir) / f"{r.index:04d}.npz")
    return 0


def run_families(jobs: list[Launch], sc: Scale, rec_dir: Path, log=print, timeout_s: float = FAMILY_TIMEOUT_S) -> list[Record]:
    """Each probe family's launches in a worker process (in plan order), their Records read back; a launch
    a worker did not finish (fault, time limit) gets a Record with the error."""
    order = []
    for i, j in enumerate(jobs):
        key = "sustained" if j.point.get("sustained") else j.probe
        if not order or order[-1][0] != key:
            order.append((key, []))
        order[-1][1].append(i)
    for key, idx in order:
        jf = rec_dir / f"jobs-{key}.json"
        jf.write_text(json.dumps({"scale": asdict(sc), "jobs": [asdict(jobs[i]) for i in idx], "indices": idx}))
        cmd = [sys.executable, "-m", "pelib.predict.probes", "--worker", str(jf), "--records", str(rec_dir)]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
            text, why = p.stdout + p.stderr, f"worker exit {p.returncode}"
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            why = f"worker killed after {timeout_s:.0f} s"
        for ln in text.splitlines():
            if ln.startswith("[run]") or "Error" in ln:
                log(ln)
        log(f"[{key}] {len(idx)} launches in {time.time() - t0:.1f} s")
        for i in idx:
            if not (rec_dir / f"{i:04d}.npz").exists():
                _save(Record(i, np.zeros((0, 0), np.int64), np.zeros((0, 0, timing.CLOCK_WORDS), np.int64),
                             error=f"not run: {why}; " + " | ".join(text.splitlines()[-3:])[:800]),
                      rec_dir / f"{i:04d}.npz")
    return [_load(rec_dir / f"{i:04d}.npz") for i in range(len(jobs))]


# ---- analysis: records -> constants and curves -----------------------------------------------------------

def _f(rec: Record, probe: str) -> dict:
    """{field: column} of a record's words."""
    return {k: rec.out[:, v] for k, v in fields(probe).items()}


def _med(v) -> float | None:
    v = np.asarray(v, np.float64)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else None


def _clock(rec: Record, min_ns: float) -> dict:
    try:
        return timing.launch_clock(rec.cta_clock, min_ns)
    except ValueError as e:
        return {"ghz": None, "error": str(e)}


class _Acc:
    """Constants and curves as they are found, each constant with its launch's clock and regime."""

    def __init__(self, clocks: dict, fallback_ghz):
        self.constants, self.curves, self.clocks, self.fallback = {}, {}, clocks, fallback_ghz

    def const(self, name: str, value, probe: str, launch: int | None, n: int = 1, regime: str = "short burst"):
        if value is None or not np.isfinite(value):
            return
        unit, what = calibration.names()[name]
        ck = self.clocks.get(launch, {}).get("ghz") if launch is not None else None
        if ck is None and regime != "compiled":
            ck = self.fallback
        self.constants[name] = {"value": float(value), "unit": unit, "what": what, "probe": probe, "launch": launch,
                                "clock_ghz": ck, "regime": regime, "n": int(n)}

    def point(self, curve: str, x: str, y: str, p: dict):
        c = self.curves.setdefault(curve, {"what": calibration.CURVES[curve], "x": x, "y": y, "points": []})
        c["points"].append(p)


def _window_ns(rec: Record, cta: int, c: float, ghz: float) -> float:
    """clock64 value c of CTA `cta` on the globaltimer: its warp 0's (clock64, globaltimer) start pair and the
    launch clock."""
    b = rec.cta_clock[cta, 0]
    return float(b[1]) + (float(c) - float(b[0])) / ghz


def analyze(jobs: list[Launch], recs: list[Record], min_ns: float = 20_000.0, sass: dict | None = None) -> dict:
    """Constants, curves and per-launch summaries from the records (pelib.predict.measured_format's format, less env)."""
    clocks = {r.index: _clock(r, min_ns) for r in recs if r.error is None and r.cta_clock.size}
    burst = next((clocks[r.index]["ghz"] for r, j in zip(recs, jobs) if j.probe == "clock" and r.index in clocks), None)
    acc = _Acc(clocks, burst)
    summaries = {}
    for j, r in zip(jobs, recs):
        if r.error is not None or not r.out.size:
            continue
        fn = _ANALYZE["sustained" if j.point.get("sustained") else j.probe]
        try:
            summaries[r.index] = fn(j, r, acc, clocks.get(r.index, {}).get("ghz") or burst)
        except Exception as e:   # one launch's odd records must not cost the rest of the calibration
            summaries[r.index] = {"analysis_error": f"{type(e).__name__}: {e}"[:500]}
    _derived(acc, sass or {})
    launches = []
    for i, (j, r) in enumerate(zip(jobs, recs)):
        launches.append({"index": i, "probe": j.probe, "label": j.label, "defines": j.defines, "params": j.params,
                         "grid": j.grid, "cluster": j.cluster, "prepare": j.prepare, "point": j.point, "ms": r.ms,
                         "launches": r.launches, "clock": clocks.get(i), "summary": summaries.get(i),
                         **({"error": r.error} if r.error else {})})
    return {"constants": acc.constants, "curves": acc.curves, "launches": launches}


def _a_clock(j, r, acc, ghz):
    f = _f(r, "clock")
    ok = f["spin_ns"] > 0
    tick = _med(f["tick_ns"][f["tick_ns"] > 0])
    out = {"tick_ns": tick, "clock64_read": _med(f["read_clock64"] / 64.0), "globaltimer_read": _med(f["read_globaltimer"] / 64.0),
           "spin_ghz": _med(f["spin_cycles"][ok] / f["spin_ns"][ok]), "ctas": int(ok.sum())}
    acc.const("clock.burst_ghz", acc.clocks.get(r.index, {}).get("ghz"), "clock", r.index, int(ok.sum()))
    acc.const("clock.globaltimer_tick_ns", tick, "clock", r.index, int(ok.sum()))
    acc.const("clock.clock64_read_cycles", out["clock64_read"], "clock", r.index, int(ok.sum()))
    acc.const("clock.globaltimer_read_cycles", out["globaltimer_read"], "clock", r.index, int(ok.sum()))
    return out


def _a_wgmma(j, r, acc, ghz):
    f = _f(r, "wgmma")
    ok = (f["reps"] > 0) & (f["chain_wgmmas"] > 0)
    n, wg = int(j.defines["BLOCK_N"]), int(j.defines["NUM_WG"])
    reps = np.maximum(f["reps"], 1)
    per = f["chain_cycles"][ok] / f["chain_wgmmas"][ok]
    ideal = 64 * n * 32 * 2 / WGMMA_FLOP_PER_CLK_SM
    out = {"latency": _med(f["lat_sum"][ok] / reps[ok]), "latency_min": _med(f["lat_min"][ok]),
           "issue_per_slice": _med(f["issue_sum"][ok] / reps[ok]), "slice": _med(f["slice_sum"][ok] / reps[ok]),
           "cycles_per_wgmma": _med(per), "cycles_per_wgmma_max": float(per.max()) if per.size else None,
           "ideal_cycles_per_wgmma": ideal, "units": int(ok.sum())}
    base = f"wgmma.m64n{n}k32."
    if wg == 1:
        acc.const(base + "latency_cycles", out["latency"], "wgmma", r.index, int(ok.sum()))
        acc.const(base + "issue_cycles_per_slice", out["issue_per_slice"], "wgmma", r.index, int(ok.sum()))
        acc.const(base + "slice_cycles", out["slice"], "wgmma", r.index, int(ok.sum()))
        acc.const(base + "cycles_per_wgmma_1wg", out["cycles_per_wgmma"], "wgmma", r.index, int(ok.sum()))
    else:
        acc.const(base + "cycles_per_wgmma_2wg", out["cycles_per_wgmma"], "wgmma", r.index, int(ok.sum()))
        sm = out["cycles_per_wgmma"] / wg if out["cycles_per_wgmma"] else None
        acc.const(base + "sm_cycles_per_wgmma", sm, "wgmma", r.index, int(ok.sum()))
        if sm:
            acc.const(base + "pipe_efficiency", ideal / sm, "wgmma", r.index, int(ok.sum()))
    return out


def _a_tma(j, r, acc, ghz):
    f = _f(r, "tma")
    fl = fields("tma")
    ok = f["loads"] > 0
    s0 = fl["sample0"]
    n_s = min(int(j.params["iters"]), r.out.shape[1] - s0)
    lat = r.out[ok][:, s0:s0 + n_s].astype(np.float64).reshape(-1)
    lat = lat[lat > 0]
    ctas = np.nonzero(ok)[0]
    t0 = min(_window_ns(r, c, f["first"][c], ghz) for c in ctas) if ctas.size else None
    t1 = max(_window_ns(r, c, f["last"][c], ghz) for c in ctas) if ctas.size else None
    by = float(f["bytes"][ok].sum())
    gbps = by / (t1 - t0) if ctas.size and t1 > t0 else None
    out = {"ctas": int(ok.sum()), "bytes": by, "gbps": gbps,
           "lat_p50": _med(lat), "lat_p95": float(np.percentile(lat, 95)) if lat.size else None,
           "lat_mean": float(lat.mean()) if lat.size else None, "lat_min": float(lat.min()) if lat.size else None}
    out["lat_p50_ns"] = out["lat_p50"] / ghz if out["lat_p50"] and ghz else None
    p = j.point
    acc.point(p["curve"], "gbps", "lat_p50", {"active": p["active"], "depth": p["depth"], **out, "clock_ghz": ghz,
                                             "launch": r.index})
    if p["active"] == 1 and p["depth"] == 1:
        name = {"tma_load.sequential": "tma.load.latency_cycles.unloaded", "tma_load.scattered":
                "tma.load.latency_cycles.scattered", "tma_load.l2": "tma.load.latency_cycles.l2"}.get(p["curve"])
        if name:
            acc.const(name, out["lat_p50"], "tma", r.index, lat.size)
    if p["curve"] == "tma_load.multicast" and p["active"] == 2 and p["depth"] == 1:
        acc.const("tma.load.multicast.latency_cycles.unloaded", out["lat_p50"], "tma", r.index, lat.size)
    return out


def _a_store(j, r, acc, ghz):
    f = _f(r, "store")
    ok = f["stores"] > 0
    ctas = np.nonzero(ok)[0]
    st, gr = np.maximum(f["stores"][ok], 1), np.maximum(f["groups"][ok], 1)
    t0 = min(_window_ns(r, c, f["first"][c], ghz) for c in ctas) if ctas.size else None
    t1 = max(_window_ns(r, c, f["last"][c], ghz) for c in ctas) if ctas.size else None
    by = float(f["bytes"][ok].sum())
    out = {"ctas": int(ok.sum()), "issue": _med(f["issue_sum"][ok] / st), "issue_max": _med(f["issue_max"][ok]),
           "read": _med(f["read_sum"][ok] / gr), "drain": _med(f["drain_sum"][ok] / gr),
           "drain_max": _med(f["drain_max"][ok]), "bytes": by,
           "gbps": by / (t1 - t0) if ctas.size and t1 > t0 else None}
    p = j.point
    acc.point("tma_store", "gbps", "drain", {"active": p["active"], "group": p["group"], **out, "clock_ghz": ghz,
                                            "launch": r.index})
    if p["active"] == 1 and p["group"] == 1:
        acc.const("tma.store.issue_cycles", out["issue"], "store", r.index, int(st.sum()))
        acc.const("tma.store.read_cycles", out["read"], "store", r.index, int(gr.sum()))
        acc.const("tma.store.drain_cycles", out["drain"], "store", r.index, int(gr.sum()))
    return out


def _a_sync(j, r, acc, ghz):
    f = _f(r, "sync")
    ok = f["iters"] > 0
    it = np.maximum(f["iters"][ok], 1)
    if int(j.params["mode"]) == 1:
        out = {"remote_roundtrip": _med(f["pingpong"][ok] / it), "ctas": int(ok.sum())}
        acc.const("mbarrier.remote_roundtrip_cycles", out["remote_roundtrip"], "sync", r.index, int(ok.sum()))
        return out
    out = {k: _med(f[k][ok] / it) for k in ("pingpong", "arrive", "pass", "bar256", "bar128", "syncthreads")}
    out["ctas"] = int(ok.sum())
    for name, k in (("mbarrier.local_roundtrip_cycles", "pingpong"), ("mbarrier.arrive_cycles", "arrive"),
                    ("mbarrier.try_wait_pass_cycles", "pass"), ("bar_sync.256_cycles", "bar256"),
                    ("bar_sync.128_cycles", "bar128"), ("bar_sync.syncthreads_cycles", "syncthreads")):
        acc.const(name, out[k], "sync", r.index, int(ok.sum()))
    return out


def _a_epilogue(j, r, acc, ghz):
    f = _f(r, "epilogue")
    ok = f["tiles"] > 0
    t = np.maximum(f["tiles"][ok], 1)
    out = {"tile": _med(f["tile_sum"][ok] / t), "tile_min": _med(f["tile_min"][ok]), "tile_max": _med(f["tile_max"][ok]),
           "comb": _med(f["comb_sum"][ok] / t), "ctas": int(ok.sum())}
    acc.const(f"epilogue.tile_cycles.{j.point['case']}", out["tile"], "epilogue", r.index, int(t.sum()))
    if int(j.params["other"]) == 2:
        ch = (f["chain_wgmmas"] > 0) & (f["chain_cycles"] > 0)
        out["chain_cycles_per_wgmma"] = _med(f["chain_cycles"][ch] / f["chain_wgmmas"][ch])
        name = ("wgmma.m64n256k32.cycles_beside_epilogue" if int(j.params["store"]) == 0
                else "wgmma.m64n256k32.cycles_beside_store_epilogue")
        acc.const(name, out["chain_cycles_per_wgmma"], "epilogue", r.index, int(ch.sum()))
    return out


def _a_stream(j, r, acc, ghz):
    f = _f(r, "stream")
    hops = f["hops"]
    ok = hops > 0
    lat = (f["chase_t1"][ok] - f["chase_t0"][ok]) / np.maximum(hops[ok], 1)
    p = j.point
    active, warps = int(j.params["active"]), int(j.params["stream_warps"])
    gbps, cover = None, None
    if warps > 0 and active > 0:
        blk = r.cta_clock[:active, 1:1 + warps]                  # the streaming warps' start and exit
        rec = blk[..., 3] > 0
        if rec.any():
            g0, g1 = float(blk[..., 1][rec].min()), float(blk[..., 3][rec].max())
            by = float(f["bytes"][:active].sum())
            gbps = by / (g1 - g0) if g1 > g0 else None
            spans = [(_window_ns(r, c, f["chase_t0"][c], ghz), _window_ns(r, c, f["chase_t1"][c], ghz))
                     for c in np.nonzero(ok)[0] if c < active]
            if spans:
                inside = [max(0.0, min(b, g1) - max(a, g0)) / max(b - a, 1e-9) for a, b in spans]
                cover = float(np.mean(inside))
    out = {"latency_cycles": _med(lat), "latency_ns": _med(lat) / ghz if _med(lat) and ghz else None, "gbps": gbps,
           "coverage": cover, "active": active, "warps": warps, "ctas": int(ok.sum())}
    curves = [p["curve"]] if warps else [f"{p['foot']}.{op}" for op in ("read", "write", "copy")]
    for c in curves:
        acc.point(c, "gbps", "latency_cycles", {**out, "gbps": gbps or 0.0, "clock_ghz": ghz, "launch": r.index})
    if warps == 0:
        acc.const(f"{p['foot']}.latency_cycles.unloaded", out["latency_cycles"], "stream", r.index, int(ok.sum()))
    return out


def _a_launch(j, r, acc, ghz):
    """The relaunch gap (per SM, a CTA's start after the previous CTA's exit, %globaltimer) and the launch's
    overhead (event time less the CTAs' span)."""
    cc = r.cta_clock[:, 0]                       # per CTA: clock64 begin, globaltimer begin, clock64 end, globaltimer end, smid + 1
    ok = (cc[:, 4] > 0) & (cc[:, 3] > cc[:, 1])
    g0, g1, sm = cc[ok, 1].astype(np.float64), cc[ok, 3].astype(np.float64), cc[ok, 4]
    gaps = []
    for s_ in np.unique(sm):
        o = np.argsort(g0[sm == s_])
        a, b = g0[sm == s_][o], g1[sm == s_][o]
        gaps.extend((a[1:] - b[:-1]).tolist())
    gaps = np.array(gaps, np.float64)
    gaps = gaps[gaps >= 0]
    span = float(g1.max() - g0.min()) if ok.any() else None
    out = {"ctas": int(ok.sum()), "waves": j.point["waves"], "span_ns": span,
           "gap_ns": _med(gaps) if gaps.size else None, "gap_p90_ns": float(np.percentile(gaps, 90)) if gaps.size else None,
           "overhead_us": (r.ms * 1e6 - span) / 1e3 if r.ms and span else None}
    if out["gap_ns"] is not None and ghz:
        acc.const("cta.relaunch_cycles", out["gap_ns"] * ghz, "launch", r.index, int(gaps.size))
    if j.point["waves"] == 1:
        acc.const("launch.overhead_us", out["overhead_us"], "launch", r.index, int(ok.sum()))
    return out


def _units_by_cta(j, r, probe: str, count: str):
    """Per CTA that ran, its units' (t0, t1, count) columns, the units that counted nothing left out (a probe
    whose unit is a warp: MAX_WARPS records a CTA)."""
    f = _f(r, probe)
    per_cta = int(r.out.shape[0] // max(j.grid, 1))
    n = f[count].reshape(j.grid, per_cta)
    t0, t1 = f["t0"].reshape(j.grid, per_cta), f["t1"].reshape(j.grid, per_cta)
    return [(t0[c][n[c] > 0], t1[c][n[c] > 0], n[c][n[c] > 0]) for c in range(j.grid) if (n[c] > 0).any()]


# the constants of the lsu probe: one SM, 8 warps (the register epilogues' two warpgroups), per (op, width, pattern)
LSU_CONSTANTS = {(op, w, pat): f"lsu.{op}.cycles_per_access.{pat}_{w}B"
                 for op in ("store", "load") for w, pat in ((4, "fragment"), (8, "fragment"), (16, "fragment"),
                                                          (4, "line"), (16, "line"), (4, "walk"), (8, "walk"),
                                                          (16, "walk"))}


def _a_lsu(j, r, acc, ghz):
    """The SM's cycles per warp-wide access: per CTA, its warps' span (first start to last end) over the
    accesses they issued; the median over the CTAs that ran."""
    cyc = [float(t1.max() - t0.min()) / float(n.sum()) for t0, t1, n in _units_by_cta(j, r, "lsu", "accesses")]
    p = j.point
    width = int(j.params["width"])
    # 32-B sectors an access touches: the fragment's 8 rows of 4 lanes each (4 x width bytes a row), or one line
    sectors = 32 * width // 32 if p["pattern"] == "line" else 8 * -(-4 * width // 32)
    out = {"cycles_per_access": _med(cyc), "ctas": len(cyc), "bytes_per_access": 32 * width,
           "sectors_per_access": sectors, "op": p["op"], "width": width, "pattern": p["pattern"],
           "active": p["active"], "warps": p["warps"]}
    acc.point("lsu", "width", "cycles_per_access", {**out, "clock_ghz": ghz, "launch": r.index})
    name = LSU_CONSTANTS.get((p["op"], width, p["pattern"]))
    if name and p["active"] == 1 and p["warps"] == 8:
        acc.const(name, out["cycles_per_access"], "lsu", r.index, len(cyc))
    return out


# the constants of the latency probe: a chain's cycles a step with one warp; op 2's SM cycles a shuffle, 16 warps
LATENCY_CONSTANTS = {("shfl", 1): "latency.shfl.cycles", ("lds", 1): "latency.lds.cycles",
                     ("shfl_many", 16): "shfl.sm_cycles_per_instr"}


def _a_latency(j, r, acc, ghz):
    """A chain's cycles per step (its warps' median: each warp is one chain), or op 2's SM cycles per warp
    shuffle: per CTA, its warps' span (first start to last end) over the shuffles they issued."""
    p = j.point
    vals = []
    for t0, t1, n in _units_by_cta(j, r, "latency", "steps"):
        if p["op"] == "shfl_many":
            vals.append(float(t1.max() - t0.min()) / float(n.sum()))
        else:
            vals.extend(float(a - b) / float(k) for a, b, k in zip(t1, t0, n))
    out = {"cycles": _med(vals), "samples": len(vals), "op": p["op"], "warps": p["warps"]}
    acc.point("latency", "warps", "cycles", {**out, "clock_ghz": ghz, "launch": r.index})
    name = LATENCY_CONSTANTS.get((p["op"], p["warps"]))
    if name:
        acc.const(name, out["cycles"], "latency", r.index, len(vals))
    return out


def _a_sustained(j, r, acc, ghz):
    c = acc.clocks.get(r.index, {})
    first = _clock(Record(r.index, r.out, r.first_clock), 0.0) if r.first_clock is not None else {}
    out = {"launches": r.launches, "last_ghz": c.get("ghz"), "first_ghz": first.get("ghz"),
           "last_per_sm": c.get("per_sm_ghz"), "first_per_sm": first.get("per_sm_ghz")}
    acc.const("clock.sustained_ghz", c.get("ghz"), "wgmma", r.index, r.launches, regime="sustained")
    return out


_ANALYZE = {"clock": _a_clock, "wgmma": _a_wgmma, "tma": _a_tma, "store": _a_store, "sync": _a_sync,
            "epilogue": _a_epilogue, "stream": _a_stream, "launch": _a_launch, "lsu": _a_lsu, "latency": _a_latency,
            "sustained": _a_sustained}


def _derived(acc: _Acc, sass: dict) -> None:
    """Constants from the curves (maxima, the latency at the highest bandwidth) and the CPI from the SASS count."""
    def best(curve, key="gbps"):
        pts = [p for p in acc.curves.get(curve, {}).get("points", []) if p.get(key)]
        return max(pts, key=lambda p: p[key]) if pts else None

    def launch_of(p):     # the launch a curve point came from: the constant's clock
        return p.get("launch")
    for curve, name in (("tma_load.sequential", "tma.load.gbps.sequential_max"),
                        ("tma_load.scattered", "tma.load.gbps.scattered_max"), ("tma_store", "tma.store.gbps_max"),
                        ("dram.read", "dram.read_gbps"), ("dram.write", "dram.write_gbps"),
                        ("dram.copy", "dram.copy_gbps"), ("l2.read", "l2.read_gbps")):
        p = best(curve)
        if p:
            acc.const(name, p["gbps"], "tma" if curve.startswith("tma_load") else "store" if curve == "tma_store" else "stream",
                      launch_of(p), p.get("ctas", 1))
    p = best("tma_load.sequential")
    full = [q for q in acc.curves.get("tma_load.sequential", {}).get("points", []) if q["depth"] == max(
        x["depth"] for x in acc.curves["tma_load.sequential"]["points"])] if "tma_load.sequential" in acc.curves else []
    if full:
        q = max(full, key=lambda q: q["active"])
        acc.const("tma.load.latency_cycles.full_load", q["lat_p50"], "tma", launch_of(q), q.get("ctas", 1))
    p = best("dram.read")
    if p:
        acc.const("dram.latency_cycles.loaded", p["latency_cycles"], "stream", launch_of(p), p.get("ctas", 1))
    one = sorted((q for q in acc.curves.get("tma_burst.l2", {}).get("points", []) if q["active"] == 1 and q.get("lat_p50")),
                 key=lambda q: q["depth"])
    if len(one) >= 2 and one[-1]["depth"] > one[0]["depth"]:
        # least squares of a burst's cycles on its boxes: the slope is one more box's time in the SM's TMA unit
        d = np.array([q["depth"] for q in one], np.float64)
        y = np.array([q["lat_p50"] for q in one], np.float64)
        slope = float(np.polyfit(d, y, 1)[0])
        if slope > 0:
            acc.const("tma.load.box_cycles_sm", slope, "tma", launch_of(one[-1]), len(one))
            acc.const("tma.load.bytes_per_clk_sm", 8192.0 / slope, "tma", launch_of(one[-1]), len(one))
    n = sass.get("epilogue", {}).get("instructions_per_tile")
    if n:
        acc.const("epilogue.instructions_per_tile", n, "epilogue", None, 1, regime="compiled")
        for case in ("alone", "beside_wgmma"):
            c = acc.constants.get(f"epilogue.tile_cycles.{case}")
            if c:
                acc.const(f"epilogue.cpi.{case}", c["value"] / n, "epilogue", c["launch"], c["n"])


def sass_counts() -> dict:
    """The epilogue probe's tile loop in SASS (compiled): instructions on its fast path, by class."""
    b = probe_build("epilogue", {})
    instrs = sass_account.parse(b.sass)
    loops = sass_account.loops_containing(instrs, "F2FP")
    if not loops:
        return {"error": "no loop of calib_epilogue holds an F2FP (the BF16 pack): is the tile loop unrolled?"}
    path = sass_account.fast_path(instrs, loops[0])
    ops = {}
    for i in path:
        k = i.op.split(".")[0]
        ops[k] = ops.get(k, 0) + 1
    return {"instructions_per_tile": len(path), "loop": [loops[0][0], loops[0][1]],
            "by_opcode": dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


# ---- resident clusters (a host query, no timing) ----------------------------------------------------------

def occupancy(info, families=("sm90",), defines=({},), log=print) -> list[dict]:
    """cuOccupancyMaxActiveClusters for every (cluster size, shared memory, threads) the stages of `families`
    launch their full problem with on this GPU, one record each (pelib.predict.calibration's "occupancy"
    format): how many clusters of that shape are resident at once. The timing model launches a persistent
    clustered grid with it; a shape not recorded is derived from public limits, and says so. `defines`: extra
    builds to ask about (a ring depth changes the shared memory, hence the answer)."""
    out, seen = [], set()
    for fam in families:
        for path in _stages.family_stages(fam):
            for d in defines:
                st = Stage(path, dict(d))
                if not device.can_run(st.arch, info):
                    continue
                cfg = st.launch_config("full", sm_count=info.sm_count)
                key = (cfg.cluster[0], cfg.block[0], cfg.smem, int(st.build.facts.registers))
                if key in seen:
                    continue
                seen.add(key)
                n = max_active_clusters(st.build, st.build.kernel, cfg, info.ordinal)
                if n is None:
                    log(f"[occupancy] {st.label}: the query failed (no record)")
                    continue
                out.append({"cluster": key[0], "threads": key[1], "smem": key[2], "registers": key[3],
                            "active_clusters": int(n), "stage": st.label,
                            "source": f"cuOccupancyMaxActiveClusters on {info.name} ({clock.stamp()[:10]}), "
                                      f"{st.label}'s build and launch"})
                log(f"[occupancy] cluster {key[0]}, {key[1]} threads, {key[2]:,} B, {key[3]} registers: "
                    f"{n} clusters ({st.label})")
    return out


# ---- the command -----------------------------------------------------------------------------------------

def report(jobs, recs, env: dict, sass: dict, min_ns: float = 20_000.0, log_name: str = "") -> dict:
    """The calibration document (pelib.predict.measured_format's format)."""
    a = analyze(jobs, recs, min_ns, sass)
    # tie the derived constants to a launch: the curve points carry theirs
    return {"schema": calibration.SCHEMA, "evidence": f"measured ({env['device']}, {str(env['date'])[:10]})",
            "env": env, "constants": a["constants"], "curves": a["curves"], "launches": a["launches"],
            "sass": sass, "log": log_name}


def summary_lines(doc: dict) -> list[str]:
    """The constants as aligned text (printed last)."""
    lines = [f"{doc['evidence']}; git {doc['env'].get('git', '?')[:12]}"]
    for k, c in sorted(doc["constants"].items()):
        ck = f"{c['clock_ghz']:.3f} GHz" if c.get("clock_ghz") else "-"
        lines.append(f"  {k:<48} {c['value']:>12.4g} {c['unit']:<18} {c['regime']:<12} {ck}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.predict.probes", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory for calibration-<device>.json and calibrate.log")
    ap.add_argument("--only", default=None, help="comma-separated probe families (default: all, and the sustained run)")
    ap.add_argument("--occupancy", action="store_true",
                    help="only the resident-cluster query (cuOccupancyMaxActiveClusters for every sm90 stage's "
                         "launch): writes occupancy-<device>.json; a full run records it in the calibration too")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--records", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return _worker(a.worker, a.records)
    t_start = time.time()
    log = _jobs.session("python -m pelib.predict.probes", ARCH, a.out, "calibrate.log")
    info, env, out_dir, log_path = log.info, log.env, log.out_dir, log.path
    dev = "".join(c if c.isalnum() else "-" for c in info.name).strip("-").lower()
    if a.occupancy:
        recs = occupancy(info, log=log)
        path = out_dir / f"occupancy-{dev}.json"
        path.write_text(json.dumps({"schema": "pelib.calibration.occupancy/1", "env": env, "occupancy": recs},
                                   indent=1, default=str) + "\n")
        log(f"wrote {path} ({len(recs)} records, {time.time() - t_start:.0f} s; {clock.stamp()})")
        log.close()
        return 0 if recs else 1
    sc = Scale.full(info.sm_count)
    jobs = plan(sc)
    if a.only:
        keep = set(a.only.split(","))
        jobs = [j for j in jobs if ("sustained" if j.point.get("sustained") else j.probe) in keep]
    log(f"[plan] {len(jobs)} launches on {sc.sms} SMs")
    errs = build_all(jobs, log=log)
    jobs = [j for j in jobs if not errs.get((j.probe, json.dumps(j.defines, sort_keys=True)))]
    try:
        sass = {"epilogue": sass_counts()}
    except Exception as e:
        sass = {"epilogue": {"error": f"{type(e).__name__}: {e}"[:500]}}
    rec_dir = Path(tempfile.mkdtemp(prefix="pelib-calib-"))
    try:
        recs = run_families(jobs, sc, rec_dir, log)
    finally:
        shutil.rmtree(rec_dir, ignore_errors=True)
    doc = report(jobs, recs, env, sass, log_name=log_path.name)
    try:
        doc["occupancy"] = occupancy(info, log=log)
    except Exception as e:   # the query is a host call: a failure costs the records, not the calibration
        log(f"[occupancy] failed: {type(e).__name__}: {e}"[:400])
    path = out_dir / f"calibration-{dev}.json"
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    bad = calibration.problems(doc)
    log("")
    for ln in summary_lines(doc):
        log(ln)
    log(f"check: {'ok' if not bad else 'PROBLEMS: ' + '; '.join(bad)}")
    log(f"wrote {path} ({time.time() - t_start:.0f} s; {clock.stamp()})")
    log.close()
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
