"""Time, SM clock and energy of launches on one GPU, in the regimes where its power limit sets the clock.

    PYTHONPATH=src python3 -m pelib.measure.energy limiter --out DIR    # what limits the Hopper twin
    PYTHONPATH=src python3 -m pelib.measure.energy stages --out DIR     # the sub-stages beside 06, 10, cuBLAS, the probes
    PYTHONPATH=src python3 -m pelib.measure.energy contention --out DIR # 07a, 12, 13, cuBLAS; the contention counters
    PYTHONPATH=src python3 -m pelib.measure.energy headline --entries '[["sm90/07a_comb_windows", {}]]' --out DIR
                                                                # make bench's headline (pelib.measure.sweep runs it)

Settings-free: nothing here sets a clock, a power limit or a mode; every test measures the card as it
is. The entries (LIMITER, STAGES: stage builds, cuBLAS calls, the probes of 06) run in one worker
process (pelib.measure.jobs), interleaved, so that each sees the thermal state the others leave:
 1. verify: each stage on the full problem (NaN-poisoned output against the torch reference), and every
    entry on the zeros and ones inputs against their exact outputs;
 2. burst, per input set (random, zeros, ones) and round, the entries in rotating order, each after
    IDLE_S of idle: the timing of `make bench` (bench.time_fn: 5 warm-ups, L2 flushed before each of
    20 launches, CUDA events, median), then the same burst with the SM clock read just before and just
    after each launch (The clock probe), and for a stage a third burst of its TIMING build, whose
    per-warp launch clock (common/timing.cuh) is the clock of that very launch;
 3. sustained, per input set and round, rotating: LEAD_S of back-to-back launches, then SUSTAIN_S more
    measured: ms per launch (CUDA events), joules per launch from NVML's total-energy counter
    (pelib.measure.nvml; the window's end points, and the slope of the counter sampled every 5 ms), mean power,
    NVML's SM clock and clock-event reasons, and the probe's clock right after the last launch;
 4. per entry, what one 64 x 256 output tile moves and executes: modelled L2 <-> SM bytes
    (pelib.kinds.sm90.l2_traffic), a consumer warp's compiled SASS (pelib.isa.sass_account.sm90_tile),
    and Nsight Compute's DRAM and L2 bytes and executed instructions (measured, one launch each, the
    probes too: what each removes from L2 is the limiter's question);
 5. each stage entry's launch shape (grid, cluster, the clusters resident), which a cluster stage's time needs.
The JSON (energy-<mode>.json) and the log go to --out; the table is printed last.

Over 700 lines: one runner whose modes (limiter, stages, headline, contention) share its entries, bursts and
counters.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import baselines, jobs, nvml, sweep
from .. import bench, clock, device, results
from ..isa import sass_account
from . import probe_kernels
from .. import timing as _timing
from ..kinds import sm90 as k90
from ..stage import Stage

WAIT2 = {"PE_WAIT_KIND": 2}           # the unbounded wait a production kernel ships (common/mbarrier.cuh)
PROBE = "sm90/probes/sol_probe_06.cu"
INPUTS = ("random", "zeros", "ones")   # ones: A = B = 1.0 in E4M3 (bits 0x38)
E4M3_ONE = 0x38
TILE = (64, 256)                       # the tile "per tile" counts refer to: one warpgroup's output tile
IDLE_S = 0.3                           # idle before each burst: each burst starts from a resting card
LEAD_S = 0.3                           # back-to-back launches before a sustained window is measured
SUSTAIN_S = 2.0                        # measured seconds of a sustained window
ROUNDS = {"random": 3, "zeros": 2, "ones": 2}
PROBE_SPIN = 60_000                    # clock64 cycles the clock probe spins (~40 us at 1.5 GHz)
CLOCK_PROBE = "calib_clock"           # prebuild's name for The clock probe
# lts__t_sectors_srcunit_tex: the L2 sectors the SMs' L1/TEX units (and their TMA) request, 32 B each; lts__t_bytes
# counts every request at the L2 slices, those from the other L2 partition over the fabric too
# (lts__t_sectors_srcunit_ltcfabric), so a byte an SM reads from the far partition is counted twice there.
# What each warp-wide global and shared access costs the SM's LSU/L1 (the timing model prices a store by its bytes;
# these say how many requests, sectors and shared wavefronts the kernel's accesses really take): metric, label.
LSU = (("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "stg_requests"),
       ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "stg_sectors"),
       ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "ldg_requests"),
       ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "ldg_sectors"),
       ("smsp__inst_executed_op_shared_st.sum", "sts_inst"),
       ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "sts_wavefronts"),
       ("smsp__inst_executed_op_shared_ld.sum", "lds_inst"),
       ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "lds_wavefronts"))
NCU_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
               "lts__t_sectors_srcunit_tex.sum", "smsp__inst_executed.sum", "sm__inst_executed_pipe_tensor_op_gmma.sum",
               "sm__cycles_elapsed.avg.per_second") + tuple(m for m, _ in LSU)
L2_SECTOR = 32
# The contention study's second Nsight Compute pass: the sections whose raw metrics hold the stall reasons
# (WarpStateStats: smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio), L1 wavefronts and
# sectors per access kind (MemoryWorkloadAnalysis_Tables) and the units' throughputs (SpeedOfLight), plus
# the counters named here; a name this ncu does not list (--query-metrics) is left out and recorded, so
# one wrong name cannot cost the pass.
NCU_CONTENTION_SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables", "WarpStateStats")
NCU_CONTENTION_METRICS = (
    "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
    "dram__bytes_read.sum", "dram__bytes_write.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_bytes.sum", "lts__t_sectors_op_read.sum", "lts__t_sectors_op_write.sum",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__inst_executed_op_global_st.sum", "smsp__inst_executed_op_shared_st.sum", "sm__inst_executed_pipe_lsu.sum",
    "smsp__inst_executed.sum", "sm__inst_executed_pipe_tensor_op_gmma.sum",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed")
# What the second pass keeps of the raw page (it lists every device attribute too): these prefixes.
NCU_CONTENTION_KEEP = ("gpu__time", "sm__cycles_elapsed", "dram__", "lts__", "l1tex__", "smsp__inst_executed",
                       "sm__inst_executed", "sm__pipe_tensor", "smsp__average_warps_issue_stalled",
                       "smsp__average_warp_latency", "smsp__warps_issue_stalled", "sm__throughput",
                       "smsp__issue_active", "smsp__average_warps_active")


class EnergyError(RuntimeError):
    """An entry or an argument does not fit; the message names the fix."""


@dataclass(frozen=True)
class Entry:
    """One thing timed: a stage file with defines, a probe of 06 (not verified: wrong by design) or a
    cuBLAS call of pelib.measure.baselines (`baseline`)."""
    name: str
    stage: str | None = None
    defines: tuple = ()
    baseline: str | None = None
    probe: bool = False
    bursts_only: bool = False      # probes: the burst regime on random inputs only

    def __post_init__(self):
        if (self.stage is None) == (self.baseline is None):
            raise EnergyError(f"entry {self.name!r}: give a stage or a baseline, not both or neither")
        if self.baseline is not None and self.baseline not in baselines.cublas_names():
            raise EnergyError(f"entry {self.name!r}: baseline {self.baseline!r} is not a cuBLAS row; "
                              f"choose from {baselines.cublas_names()}")

    @property
    def define_dict(self) -> dict:
        return dict(self.defines)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["defines"] = self.define_dict
        return d

    @staticmethod
    def from_dict(d: dict) -> "Entry":
        return Entry(**{**d, "defines": tuple(sorted(d.get("defines", {}).items()))})


def stage_entry(key: str, defines: dict | None = None, name: str | None = None) -> Entry:
    d = {**WAIT2, **(defines or {})}
    return Entry(name or key.split("/")[-1].split("_")[0] + ("" if not defines else " " + ",".join(
        f"{k}={v}" for k, v in sorted(defines.items()))), stage=key, defines=tuple(sorted(d.items())))


CUBLAS = [Entry("cuBLAS fast-accum GEMM", baseline="cublas_gemm_fastacc"),
          Entry("cuBLAS GEMM", baseline="cublas_gemm")]
OURS = [stage_entry("sm90/06_permuted_b"), stage_entry("sm90/10_unrolled_kloop")]
PROBES = [Entry("probe 06 " + ",".join(p), stage=PROBE, defines=tuple(sorted({**WAIT2, **p}.items())),
                probe=True, bursts_only=True)
          for p in ({"PROBE_NO_STORE": 1}, {"PROBE_NO_A": 1}, {"PROBE_NO_A": 1, "PROBE_NO_STORE": 1})]
LIMITER = OURS + CUBLAS + PROBES
# The sub-stages of issue "settle what limits the twin", measured beside their parents (06 is in OURS,
# 07a is 07b's), cuBLAS and the probes of 06 (the limiter's L2 line, in the same run): the ones that cut
# L2 traffic first (the limiter run's lever), then the ring experiment 11a.
NEW_STAGES = ["sm90/07a_comb_windows", "sm90/06a_multicast_a", "sm90/07b_multicast_a", "sm90/06b_one_prefetcher",
              "sm90/11a_two_groups_queued"]
PARENTS = ["sm90/07_comb_resident", "sm90/11_a_half_slices"]
STAGES = OURS + [stage_entry(k) for k in NEW_STAGES + PARENTS] + CUBLAS + PROBES
# The A stream against the stores (issue "the Hopper twin at 0.72 ms"): 07a, the fastest stage measured, its
# children 12 (TMA-store epilogue, at its default and at 2 ring stages with 64-column boxes) and 13 (one L2
# prefetcher), and cuBLAS fast-accum, timed in every regime; 06 and its probes (no stores, no A, neither) in
# bursts only, for the counters of the contention study. CONTENTION_NEW are verified on the check shapes too.
CONTENTION_NEW = [stage_entry("sm90/12_tma_store"), stage_entry("sm90/12_tma_store", {"NUM_STAGES": 2, "EPI_BOX_COLS": 64}),
                  stage_entry("sm90/13_one_prefetcher")]
CONTENTION = ([stage_entry("sm90/07a_comb_windows")] + CONTENTION_NEW + [CUBLAS[0]]
              + [Entry("06", stage="sm90/06_permuted_b", defines=tuple(sorted(WAIT2.items())), bursts_only=True)]
              + PROBES)
# The headline of `make bench` (pelib.measure.sweep): the production builds (WAIT2) of the stages given on the command
# line, the sweep's fastest verified ones, beside cuBLAS fast-accum; the fastest verified by burst leads.
HEADLINE = [CUBLAS[0]]
MODES = {"limiter": LIMITER, "stages": STAGES, "contention": CONTENTION, "headline": HEADLINE}
# Each mode's input sets and rounds: the limiter asks whether data changes power and clock; the stages
# are compared on the random inputs only.
MODE_INPUTS = {"limiter": INPUTS, "stages": ("random",), "contention": ("random",), "headline": ("random",)}
MODE_ROUNDS = {"limiter": ROUNDS, "stages": {"random": 3}, "contention": {"random": 2}, "headline": {"random": 2}}
BUDGET_S = {"limiter": 340.0, "stages": 450.0, "contention": 450.0, "headline": 150.0}
# The modes that also record the new stages' output bits on random inputs (pelib.sim.proof random jobs,
# their parents beside them) for the simulator's bit-for-bit proof, into pelib.sim.proof.RANDOM_SUMMARY.
RANDOM_PROOF = {"contention": ["sm90/06_permuted_b", "sm90/07a_comb_windows", "sm90/12_tma_store",
                               "sm90/13_one_prefetcher"]}


def rotate(items: list, r: int) -> list:
    """Round r's order: the list rotated by r, so no entry always follows the same one."""
    r %= max(len(items), 1)
    return items[r:] + items[:r]


# ---- the clock probe ---------------------------------------------------------------------------------

class ClockProbe:
    """The clock probe (src/kernels/probes/calib_clock.cu: one CTA per SM, spinning `spin`
    cycles) launched right after a launch that carries no clock of its own: its own launch clock
    (pelib.timing.launch_clock) is the SM clock the GPU has just then. One plan and launch-clock buffer
    per slot, so a burst reads them all after one synchronization."""

    def __init__(self, slots: int, info=None, spin: int = PROBE_SPIN, where=None):
        info = info or device.current()
        where = where or f"cuda:{info.ordinal}"
        grid = info.sm_count
        self.spin = spin
        made = [probe_kernels.clock_plan(grid, where, spin, info=info) for _ in range(slots)]
        self.plans = [m[0] for m in made]
        self.tbufs = [m[1] for m in made]
        self.lay = made[0][2]

    def record(self, slot: int) -> None:
        self.plans[slot].run()

    def ghz(self, slot: int) -> float | None:
        """The median SM clock (GHz) slot `slot` measured (None if no CTA wrote it)."""
        try:
            return _timing.decode(self.tbufs[slot].cpu(), self.lay).launch_clock(min_ns=self.spin / 4.0)["ghz"]
        except ValueError:
            return None

    def clear(self) -> None:
        for tb in self.tbufs:
            tb.zero_()


# ---- inputs -------------------------------------------------------------------------------------------

def set_inputs(t: dict, kind: str, saved: dict) -> None:
    """Make t's A and B the `kind` input set in place (their addresses, which the tensor maps hold, stay):
    random (the seeded inputs, restored from `saved`), zeros, or ones (1.0 in E4M3)."""
    if kind not in INPUTS:
        raise EnergyError(f"input set {kind!r}: one of {INPUTS}")
    for k in ("a", "b"):
        if kind == "random":
            t[k].copy_(saved[k])
        else:
            t[k].view(__import__("torch").uint8).fill_(0 if kind == "zeros" else E4M3_ONE)


def exact_output_ok(out, t: dict, kind: str, problem, with_comb: bool) -> bool:
    """The output of a constant input set, exactly: zeros give comb[m % P] (or 0 without comb); ones give
    bf16(K + comb[m % P]) (or K), the FP32 sum every back end forms before its one BF16 rounding."""
    import torch
    if kind not in ("zeros", "ones"):
        raise EnergyError(f"exact outputs exist for zeros and ones, not {kind!r}")
    acc = 0.0 if kind == "zeros" else float(problem.k)
    exp = (acc + t["comb"].float()).to(torch.bfloat16) if with_comb else torch.full(
        (1, problem.n), acc, dtype=torch.bfloat16, device=out.device)
    o = out.view(-1, problem.positions, problem.n) if with_comb else out
    return bool(torch.equal(o, exp.unsqueeze(0).expand_as(o) if with_comb else exp.expand_as(o)))


# ---- launchers -------------------------------------------------------------------------------------------

class Runner:
    """What runs an entry: run() launches it once on torch's current stream; `out` is where it wrote."""

    def __init__(self, e: Entry, problem, t: dict, info=None, timing: bool = False):
        self.e, self.problem, self.t = e, problem, t
        self.timing_words = None
        if e.baseline:
            fn = baselines.cublas_fns(problem, t)[e.baseline]
            self.out = None

            def run():
                self.out = fn()
            self.run = run
            return
        s = Stage(e.stage, e.define_dict)
        self.stage = s
        self.plan = s.plan(problem, t, info=info)
        self.run = self.plan.run
        self.out = t["out"]
        self.tplan = self.tbuf = None
        if timing:       # the launch clock: the TIMING build with no phase records (PE_TIMING_TILES = 0)
            ts = Stage(e.stage, {**e.define_dict, "PE_TIMING_TILES": 0})
            tb = ts.timing_build()
            cfg = self.plan.config
            self.tlay = _timing.layout(tb, cfg.ctas)
            if not self.tlay.clock_words:
                raise EnergyError(f"{s.label}: its TIMING build records no launch clock: the kernel must open "
                                  "with PE_TIMING_CTA(timing) (common/timing.cuh)")
            self.tbuf = _timing.alloc(self.tlay, device=t["out"].device)
            self.tplan = ts.plan(problem, t, timing=self.tbuf, info=info, grid=cfg.grid[0])

    def run_timing(self) -> None:
        self.tplan.run()

    def launch_clock(self) -> dict:
        """The launch clock of the TIMING build's last launch (pelib.timing.launch_clock)."""
        return _timing.decode(self.tbuf.cpu(), self.tlay).launch_clock()

    def wait(self) -> None:
        import torch
        if self.e.baseline:
            torch.cuda.synchronize()
        else:
            self.plan.wait()


# ---- the regimes --------------------------------------------------------------------------------------

def burst_clocked(r: Runner, probe: ClockProbe, iters: int = 20, warmup: int = 5, flush=None) -> dict:
    """bench.time_fn's burst with the clock probe right before (slot 2i) and after (2i + 1) each launch."""
    import torch
    flush = flush or bench.L2Flush()
    for _ in range(warmup):
        r.run()
    r.wait()
    probe.clear()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for i in range(iters):
        flush()
        probe.record(2 * i)
        ev[i][0].record()
        r.run()
        ev[i][1].record()
        probe.record(2 * i + 1)
    r.wait()
    torch.cuda.synchronize()
    ms = [a.elapsed_time(b) for a, b in ev]
    pre = [probe.ghz(2 * i) for i in range(iters)]
    post = [probe.ghz(2 * i + 1) for i in range(iters)]
    return {"times_ms": ms, "median_ms": statistics.median(ms), "clock_before_ghz": pre, "clock_after_ghz": post}


def burst_stamped(r: Runner, iters: int = 20, warmup: int = 5, flush=None) -> dict:
    """The burst of a stage's TIMING build: each launch's time and its own launch clock (per-CTA)."""
    import torch
    flush = flush or bench.L2Flush()
    for _ in range(warmup):
        r.run_timing()
    r.wait()
    out = {"times_ms": [], "clock_ghz": [], "clock_min_ghz": [], "clock_max_ghz": []}
    for _ in range(iters):
        flush()
        r.tbuf.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        r.run_timing()
        b.record()
        r.wait()
        c = r.launch_clock()
        out["times_ms"].append(a.elapsed_time(b))
        out["clock_ghz"].append(c["ghz"])
        out["clock_min_ghz"].append(c["per_sm_ghz"]["min"])
        out["clock_max_ghz"].append(c["per_sm_ghz"]["max"])
        out.setdefault("span_ms", []).append(c["span_ns"] / 1e6)
    out["median_ms"] = statistics.median(out["times_ms"])
    return out


def energy_fit(rows: list[dict], t0: float, t1: float) -> float | None:
    """Watts from the least-squares slope of the sampled energy counter between host times t0 and t1
    (None with fewer than two distinct counter values there)."""
    pts = [(r["t"], r["energy_mj"]) for r in rows if t0 <= r["t"] <= t1]
    if len({e for _, e in pts}) < 2:
        return None
    n = len(pts)
    mt, me = sum(t for t, _ in pts) / n, sum(e for _, e in pts) / n
    num = sum((t - mt) * (e - me) for t, e in pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    return num / den / 1e3 if den > 0 else None


def sustained(r: Runner, dev, est_ms: float, probe: ClockProbe | None = None, lead_s: float | None = None,
              seconds: float | None = None, period_s: float = 0.005) -> dict:
    """`lead_s` (LEAD_S) of back-to-back launches, then `seconds` (SUSTAIN_S) more measured (see the
    module doc)."""
    import torch
    lead_s = LEAD_S if lead_s is None else lead_s
    seconds = SUSTAIN_S if seconds is None else seconds
    if est_ms <= 0:
        raise EnergyError(f"est_ms={est_ms}: the sustained window needs the burst's time per launch")
    n_lead, n = max(1, int(lead_s * 1e3 / est_ms)), max(2, int(seconds * 1e3 / est_ms))
    for _ in range(n_lead):
        r.run()
    r.wait()        # the lead has run: the counter read next starts the window (a gap of microseconds)
    sampler = nvml.Sampler(dev, period_s).start() if dev is not None else None
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    h0 = time.perf_counter()
    e0 = dev.energy_mj() if dev is not None else None
    for _ in range(n):
        r.run()
    b.record()
    if probe is not None:
        probe.clear()
        probe.record(0)
    r.wait()
    torch.cuda.synchronize()
    h1 = time.perf_counter()
    e1 = dev.energy_mj() if dev is not None else None
    rows = sampler.stop() if sampler is not None else []
    if dev is not None:        # the window's own end points as samples too, however short it was
        rows = sorted(rows + [{**dev.sample(), "t": h0, "energy_mj": e0}, {**dev.sample(), "t": h1, "energy_mj": e1}],
                      key=lambda x: x["t"])
    ms = a.elapsed_time(b)
    out = {"launches": n, "ms_per_launch": ms / n, "wall_s": h1 - h0}
    if probe is not None:
        out["clock_after_ghz"] = probe.ghz(0)
    if dev is not None:
        out["energy_j"] = (e1 - e0) / 1e3
        out["j_per_launch"] = out["energy_j"] / n
        out["power_w"] = out["energy_j"] / (h1 - h0)
        fit = energy_fit(rows, h0 + 0.1 * (h1 - h0), h1 - 0.05 * (h1 - h0))
        out["power_fit_w"] = fit
        out["j_per_launch_fit"] = fit * ms / n / 1e3 if fit else None
        out["nvml"] = nvml.summarize([x for x in rows if h0 <= x["t"] <= h1])
        if sampler.error:
            out["nvml_error"] = sampler.error
    return out


def idle_power(dev, seconds: float = 1.0) -> dict:
    """The resting card: mean power from the energy counter over `seconds`, and the sampled readings."""
    s = nvml.Sampler(dev, 0.01).start()
    e0, h0 = dev.energy_mj(), time.perf_counter()
    time.sleep(seconds)
    e1, h1 = dev.energy_mj(), time.perf_counter()
    return {"power_w": (e1 - e0) / 1e3 / (h1 - h0), "nvml": nvml.summarize(s.stop())}


# ---- the measuring job --------------------------------------------------------------------------------

def measure(entries: list[Entry], problem, t: dict, saved: dict, *, dev=None, info=None, iters: int = 20,
            rounds: dict | None = None, inputs=INPUTS, log=print, sleep=time.sleep) -> dict:
    """Verification, bursts and sustained windows of every entry, interleaved (see the module doc).
    `dev` is a pelib.measure.nvml.Device (None: no energy, said in the result)."""
    import torch
    rounds = {**ROUNDS, **(rounds or {})}
    info = info or device.current()
    probe = ClockProbe(2 * iters, info, where=t["out"].device)
    flush = bench.L2Flush(info)
    runners = {e.name: Runner(e, problem, t, info, timing=bool(e.stage)) for e in entries}
    res: dict = {"verify": {}, "burst": [], "sustained": [],
                 "launch": {n: r.plan.config.as_dict() for n, r in runners.items() if not r.e.baseline}}
    for kind in inputs:        # exact outputs of the constant input sets (random: verified before this job)
        if kind == "random":
            continue
        set_inputs(t, kind, saved)
        for e in entries:
            if e.probe:
                continue
            r = runners[e.name]
            if r.out is t["out"]:
                t["out"].fill_(float("nan"))
            r.run()
            r.wait()
            ok = exact_output_ok(r.out, t, kind, problem, with_comb=e.stage is not None)
            res["verify"].setdefault(e.name, {})[kind] = ok
            log(f"[verify] {e.name} on {kind}: {'exact' if ok else 'WRONG'}")
    set_inputs(t, "random", saved)
    est = {}
    for kind in inputs:
        set_inputs(t, kind, saved)
        for rnd in range(rounds[kind]):
            for e in rotate([x for x in entries if not (x.bursts_only and kind != "random")], rnd):
                if res["verify"].get(e.name, {}).get(kind) is False:
                    continue
                r = runners[e.name]
                row = {"entry": e.name, "inputs": kind, "round": rnd}
                sleep(IDLE_S)
                row["plain"] = bench.stats(bench.time_fn(r.run, iters=iters, warmup=5, wait=r.wait))
                sleep(IDLE_S)
                row["clocked"] = burst_clocked(r, probe, iters, flush=flush)
                if getattr(r, "tplan", None) is not None:
                    sleep(IDLE_S)
                    row["stamped"] = burst_stamped(r, iters, flush=flush)
                est[(e.name, kind)] = row["plain"]["median_ms"]
                res["burst"].append(row)
                log(f"[burst] {e.name} {kind} r{rnd}: {row['plain']['median_ms']:.4f} ms, clock after "
                    f"{_fmt(statistics.median([x for x in row['clocked']['clock_after_ghz'] if x] or [0]))} GHz"
                    + (f", launch clock {_fmt(statistics.median([x for x in row['stamped']['clock_ghz'] if x] or [0]))}"
                       f" GHz ({row['stamped']['median_ms']:.4f} ms TIMING)" if "stamped" in row else ""))
    for kind in inputs:
        set_inputs(t, kind, saved)
        for rnd in range(rounds[kind]):
            for e in rotate([x for x in entries if not x.bursts_only], rnd):
                if (e.name, kind) not in est:
                    continue
                w = sustained(runners[e.name], dev, est[(e.name, kind)], probe)
                res["sustained"].append({"entry": e.name, "inputs": kind, "round": rnd, **w})
                log(f"[sustained] {e.name} {kind} r{rnd}: {w['ms_per_launch']:.4f} ms"
                    + (f", {w['j_per_launch']:.3f} J, {w['power_w']:.0f} W, NVML SM "
                       f"{w['nvml'].get('sm_mhz', {}).get('mean', 0):.0f} MHz" if "j_per_launch" in w else ""))
    set_inputs(t, "random", saved)
    torch.cuda.synchronize()
    return res


def _fmt(x) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "?"


# ---- per-tile facts (compiled, modelled) ------------------------------------------------------------------

def tile_facts(e: Entry, problem, sm_count: int = 132) -> dict:
    """For a stage entry: a consumer warp's SASS per tile (compiled) and the L2 <-> SM bytes per 64 x 256
    tile (modelled); a cuBLAS entry has only the measured counts (Nsight Compute)."""
    if e.baseline:
        return {}
    s = Stage(e.stage, e.define_dict)
    out = {}
    try:
        out["sass_consumer_warp_per_tile"] = sass_account.sm90_tile(s.build, problem.k)
    except sass_account.AccountError as err:
        out["sass_error"] = str(err)
    if not e.probe:
        tr = k90.l2_traffic(s, problem, sm_count)
        tiles = (problem.m / TILE[0]) * (problem.n / TILE[1])
        out["l2_bytes_per_tile"] = {k: v / tiles for k, v in tr.items()}
    return out


# ---- Nsight Compute ------------------------------------------------------------------------------------

def _ncu_target(spec: str, data_dir: str) -> None:
    """Body profiled by Nsight Compute: each entry once, in order (stages, then cuBLAS calls)."""
    import torch
    entries = [Entry.from_dict(d) for d in json.loads(spec)]
    data = jobs.Data(data_dir)
    prob, t, _ = data.full(Stage("sm90/06_permuted_b"))
    for e in entries:
        r = Runner(e, prob, t)
        r.run()
        r.wait()
    torch.cuda.synchronize()


def run_ncu(entries: list[Entry], data_dir: str, timeout_s: float) -> dict:
    """NCU_METRICS of one launch of each entry (clocks left as they are), per kernel in launch order."""
    res = jobs.run_ncu("pelib.measure.energy", json.dumps([e.as_dict() for e in entries]),
                       "patch_embed_sm90|gemm|xmma|cutlass|nvjet", NCU_METRICS, timeout_s, program_args=("--data", data_dir))
    return {**res, "entries": [e.name for e in entries]} if res["ok"] else res


_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "inst": 1, "kinst": 1e3, "minst": 1e6,
          "request": 1, "krequest": 1e3, "mrequest": 1e6, "sector": 1, "ksector": 1e3,
          "msector": 1e6, "gsector": 1e9, "ns": 1, "usecond": 1e3, "msecond": 1e6,
          "hz": 1e-9, "khz": 1e-6, "mhz": 1e-3, "ghz": 1}


def ncu_value(text: str) -> float | None:
    """'715,739,904 byte' -> 715739904.0; '1.52 Ghz' -> 1.52 (GHz); '933.34 usecond' -> 933340.0 (ns)."""
    parts = str(text).replace(",", "").split()
    try:
        v = float(parts[0])
    except (ValueError, IndexError):
        return None
    unit = parts[1].lower() if len(parts) > 1 else ""
    return v * _UNITS.get(unit, 1)


def ncu_per_tile(res: dict, problem) -> list[dict]:
    """Nsight Compute's counters per 64 x 256 output tile, one row per profiled entry (in launch order):
    DRAM and L2 bytes, warp instructions, wgmma instructions; the SM clock and the time as measured."""
    if not res or not res.get("ok"):
        return []
    tiles = (problem.m / TILE[0]) * (problem.n / TILE[1])
    out, kernels = [], list(res.get("kernels", []))
    for name in res.get("entries", []):
        ours = not name.startswith("cuBLAS")       # our kernel is patch_embed_sm90; a library call's is not
        while kernels and ("patch_embed_sm90" in kernels[0].get("kernel", "")) != ours:
            kernels.pop(0)                         # a kernel the profile caught that no entry launched
        if not kernels:
            break
        k = kernels.pop(0)
        v = {m: ncu_value(k.get(m, "")) for m in NCU_METRICS}
        row = {"entry": name, "kernel": k.get("kernel", "")}
        for m, label in (("dram__bytes_read.sum", "dram_read_B"), ("dram__bytes_write.sum", "dram_write_B"),
                         ("lts__t_bytes.sum", "l2_B"), ("smsp__inst_executed.sum", "warp_inst"),
                         ("sm__inst_executed_pipe_tensor_op_gmma.sum", "gmma_warp_inst"), *LSU):
            if v[m] is not None:
                row[label + "_per_tile"] = v[m] / tiles
        if v.get("lts__t_sectors_srcunit_tex.sum") is not None:
            row["l2_sm_B_per_tile"] = v["lts__t_sectors_srcunit_tex.sum"] * L2_SECTOR / tiles
        row["sm_clock_ghz"] = v["sm__cycles_elapsed.avg.per_second"]
        row["ms"] = v["gpu__time_duration.sum"] / 1e6 if v["gpu__time_duration.sum"] else None
        out.append(row)
    return out


def known_metrics(names, query_text: str) -> tuple[list[str], list[str]]:
    """(kept, dropped): the metric names whose base (the part before the first '.') `ncu --query-metrics`
    lists; a name it does not know would fail the whole profile."""
    have = {ln.split()[0] for ln in query_text.splitlines() if ln.strip() and "__" in ln.split()[0]}
    kept = [m for m in names if m.split(".")[0] in have]
    return kept, [m for m in names if m not in kept]


def run_ncu_contention(entries: list[Entry], data_dir: str, timeout_s: float) -> dict:
    """The contention study's pass: NCU_CONTENTION_SECTIONS and the known NCU_CONTENTION_METRICS of one
    launch of each entry (clocks left as they are), the raw page kept by NCU_CONTENTION_KEEP."""
    ncu = jobs.tool("ncu")
    if not ncu:
        return {"ok": False, "error": "ncu not found"}
    t0 = time.time()
    try:
        q = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=60)
        metrics, dropped = known_metrics(NCU_CONTENTION_METRICS, q.stdout)
    except (subprocess.TimeoutExpired, OSError) as e:
        return {"ok": False, "error": f"ncu --query-metrics: {type(e).__name__}: {e}"[:300]}
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           "-k", "regex:patch_embed_sm90|gemm|xmma|cutlass|nvjet"]
    for sec in NCU_CONTENTION_SECTIONS:
        cmd += ["--section", sec]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    cmd += [sys.executable, "-m", "pelib.measure.energy", "--ncu-target", json.dumps([e.as_dict() for e in entries]),
            "--data", data_dir]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10.0, timeout_s - (time.time() - t0)),
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"did not finish in {timeout_s:.0f} s", "dropped_metrics": dropped}
    rows = [{k: v for k, v in r.items() if k == "kernel" or k.startswith(NCU_CONTENTION_KEEP)}
            for r in jobs.parse_ncu_csv(p.stdout)]
    if not rows:
        return {"ok": False, "error": f"exit {p.returncode}: " + " | ".join((p.stdout + p.stderr).splitlines()[-6:])[:600],
                "dropped_metrics": dropped}
    return {"ok": True, "kernels": rows, "entries": [e.name for e in entries], "sections": list(NCU_CONTENTION_SECTIONS),
            "dropped_metrics": dropped, "wall_s": round(time.time() - t0, 1)}


def ncu_contention_per_tile(res: dict, problem) -> list[dict]:
    """The second pass per entry (launch order, matched as ncu_per_tile does): byte and instruction counts
    per 64 x 256 output tile (each *.sum counter divided by the tiles), rates and ratios as measured, and
    the stall reasons sorted, largest first (warps stalled per issue, WarpStateStats)."""
    if not res or not res.get("ok"):
        return []
    tiles = (problem.m / TILE[0]) * (problem.n / TILE[1])
    out, kernels = [], list(res.get("kernels", []))
    for name in res.get("entries", []):
        ours = not name.startswith("cuBLAS")
        while kernels and ("patch_embed_sm90" in kernels[0].get("kernel", "")) != ours:
            kernels.pop(0)
        if not kernels:
            break
        k = kernels.pop(0)
        row = {"entry": name, "kernel": k.get("kernel", ""), "per_tile": {}, "rates": {}, "stalls": {}}
        for m, text in k.items():
            v = ncu_value(text) if m != "kernel" else None
            if v is None:
                continue
            if "issue_stalled" in m:
                row["stalls"][m] = v
            elif m.endswith(".sum") and m != "gpu__time_duration.sum":
                row["per_tile"][m] = v / tiles
            else:
                row["rates"][m] = v
        row["stalls"] = dict(sorted(row["stalls"].items(), key=lambda kv: -kv[1]))
        row["ms"] = row["rates"].get("gpu__time_duration.sum", 0) / 1e6 or None
        out.append(row)
    return out


def random_proof(keys: list[str], out_dir: Path, info, budget_s: float = 120.0) -> dict:
    """The random-input jobs of `keys` (pelib.sim.proof: the 'sim' problem, seed 0, the simulator's grid) on
    this GPU, their distinct outputs' bits in out_dir/sim_proof_random.npz, and a JSON beside it
    which tests/test_sim_random_proof.py compares with the simulator bit for bit (sim_proof.RANDOM_SUMMARY)."""
    # function-local: pelib.sim.proof imports the simulator's host side, which only this step needs
    from ..sim import proof as sim_proof
    todo = [{"job": "random", "stage": k} for k in keys]
    t0 = time.time()
    doc = {"what": "the new sm90 stages' outputs on random inputs, for the simulator's bit-for-bit proof",
           "evidence": f"measured ({info.name})", **bench.environment(info), "seed": sim_proof.SEED,
           "random": sim_proof.random_proof_gpu(out_dir, budget_s=budget_s, todo=todo)}
    doc["seconds"] = round(time.time() - t0, 1)
    doc["date"] = clock.stamp()
    (out_dir / sim_proof.RANDOM_SUMMARY).write_text(json.dumps(doc, indent=1) + "\n")
    return {**doc, "file": sim_proof.RANDOM_SUMMARY}


# ---- jobs, main ---------------------------------------------------------------------------------------------

def _full(data):
    return data.full(Stage("sm90/06_permuted_b"))


def _run_job(job: dict, data, iters: int, ctx: jobs.Context | None = None) -> dict:
    import torch
    prob, t, ref = _full(data)
    if job["kind"] == "verify":       # one stage entry on the check shapes (job["check_shapes"]), then the full problem
        e = Entry.from_dict(job["entry"])
        s = Stage(e.stage, e.define_dict)
        out = {}
        if job.get("check_shapes"):
            ctx = ctx or jobs.Context(data, iters, "")
            for name in s.kind.CHECK_PROBLEMS:
                sweep.check(s, name, ctx, out)
            out.pop("checking", None)
            if not all(c["ok"] for c in out["checks"].values()):
                bad = [k for k, c in out["checks"].items() if not c["ok"]]
                return {**out, "ok": False, "n_bad": None, "n_nan": None, "max_abs": None,
                        "report": f"wrong on the check shapes {bad}: the full problem was not run"}
        r = s.run(prob, inputs=t, ref=ref, time=False)
        rep = r["verify"]
        return {**out, "ok": rep.ok, "n_bad": rep.n_bad, "n_nan": rep.n_nan, "max_abs": rep.max_abs, "report": str(rep)}
    if job["kind"] == "measure":
        entries = [Entry.from_dict(d) for d in job["entries"]]
        saved = {k: t[k].clone() for k in ("a", "b")}
        del ref
        torch.cuda.empty_cache()
        info = device.current()
        dev, why = None, None
        try:
            dev = nvml.open_device(info.extra.get("pci_bus_id"))
        except nvml.NvmlError as ex:
            why = str(ex)
        out = {"nvml": {"ok": dev is not None, "error": why}}
        if dev is not None:
            out["nvml"].update(power_limit_w=dev.power_limit_w(), idle=idle_power(dev))
        out.update(measure(entries, prob, t, saved, dev=dev, info=info, iters=iters,
                           rounds=job.get("rounds"), inputs=tuple(job.get("inputs", INPUTS))))
        return out
    raise EnergyError(f"unknown job kind {job['kind']!r}")


def _job(job: dict, ctx: jobs.Context, res: dict) -> dict:
    return _run_job(job, ctx.data, ctx.iters, ctx)


KINDS = {"verify": _job, "measure": _job}    # this runner's job kinds (pelib.measure.jobs' worker protocol)


def summarize(report: dict) -> list[dict]:
    """One row per entry: burst median (random inputs, the median over rounds of each round's median), the
    clock after its launches and its own launch clock, zeros/random time; sustained ms, J per launch,
    power and NVML SM clock (random), J per launch on zeros."""
    rows = []
    for e in report.get("entries", []):
        name = e["name"]
        row = {"entry": name}
        for kind in INPUTS:
            b = [x for x in report.get("burst", []) if x["entry"] == name and x["inputs"] == kind]
            if b:
                row[f"burst ms ({kind})"] = statistics.median(x["plain"]["median_ms"] for x in b)
            if b and kind == "random":
                aft = [g for x in b for g in x["clocked"]["clock_after_ghz"] if g]
                row["clock after (GHz)"] = statistics.median(aft) if aft else None
                st = [g for x in b if "stamped" in x for g in x["stamped"]["clock_ghz"] if g]
                row["launch clock (GHz)"] = statistics.median(st) if st else None
            s = [x for x in report.get("sustained", []) if x["entry"] == name and x["inputs"] == kind]
            if s:
                row[f"sustained ms ({kind})"] = statistics.median(x["ms_per_launch"] for x in s)
                if all("j_per_launch" in x for x in s):
                    row[f"J/launch ({kind})"] = statistics.median(x["j_per_launch"] for x in s)
                    if kind == "random":
                        row["power W"] = statistics.median(x["power_w"] for x in s)
                        row["NVML SM MHz"] = statistics.median(x["nvml"].get("sm_mhz", {}).get("mean", 0) for x in s)
        rows.append(row)
    ref = next((r for r in rows if r["entry"] == CUBLAS[0].name), {})
    for r in rows:       # against cuBLAS fast-accum GEMM-only in the same run: its time / ours, ours J / its J
        if r is not ref and ref.get("burst ms (random)") and r.get("burst ms (random)"):
            r["x cuBLAS fast (burst)"] = ref["burst ms (random)"] / r["burst ms (random)"]
        if r is not ref and ref.get("J/launch (random)") and r.get("J/launch (random)"):
            r["J / cuBLAS fast J"] = r["J/launch (random)"] / ref["J/launch (random)"]
    return rows


def headline(rows: list[dict], report: dict) -> dict | None:
    """The fastest stage entry of the run by its burst median on random inputs, among those verified on the
    full problem (report["verified"]), chosen by the measurement, not by name; None if none is."""
    ok = {n for n, v in (report.get("verified") or {}).items() if v.get("ok")}
    timed = [r for r in rows if r["entry"] in ok and r.get("burst ms (random)")]
    return min(timed, key=lambda r: r["burst ms (random)"]) if timed else None


def headline_entries(spec: str) -> list[Entry]:
    """--entries of the headline mode: a JSON list of [stage, defines]; each as its production build (WAIT2),
    then cuBLAS fast-accum."""
    try:
        items = json.loads(spec)
        out = [stage_entry(k, {x: v for x, v in d.items() if x != "PE_WAIT_KIND"} or None) for k, d in items]
    except (ValueError, TypeError, AttributeError) as e:
        raise EnergyError(f"--entries {spec[:80]!r}: give a JSON list of [stage, defines] pairs, e.g. "
                          f'\'[["sm90/07a_comb_windows", {{}}]]\' ({type(e).__name__}: {e})') from None
    if not out:
        raise EnergyError("--entries: the headline needs at least one stage")
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise EnergyError(f"--entries names a build twice: {names}")
    return out + HEADLINE


def format_summary(rows: list[dict]) -> str:
    cols = ["entry", "burst ms (random)", "x cuBLAS fast (burst)", "launch clock (GHz)", "clock after (GHz)",
            "burst ms (zeros)", "sustained ms (random)", "J/launch (random)", "J / cuBLAS fast J", "J/launch (zeros)",
            "power W", "NVML SM MHz"]
    lines = ["  ".join(f"{c:>14}" if i else f"{c:<34}" for i, c in enumerate(cols))]
    for r in rows:
        cells = []
        for i, c in enumerate(cols):
            v = r.get(c)
            s = v if isinstance(v, str) else ("-" if v is None else f"{v:.4f}" if isinstance(v, float) and v < 10 else f"{v:.0f}")
            cells.append(f"{s:<34}" if i == 0 else f"{s:>14}")
        lines.append("  ".join(cells))
    return "\n".join(lines)


def _build_one(spec: tuple) -> str:
    """One build of prebuild's list (a process pool's task): the key it built, or the error."""
    key, defines, timing = spec
    try:
        if key == CLOCK_PROBE:
            probe_kernels.probe_build("clock", defines)
        else:
            s = Stage(key, defines)
            (s.timing_build() if timing else s.build).sass
        return key
    except Exception as e:      # reported; the run then fails on this entry with the same error
        return f"{key}: {type(e).__name__}: {e}"[:300]


def builds(entries: list[Entry]) -> list[tuple]:
    """What a run compiles: each stage entry's build, the build and TIMING build with PE_TIMING_TILES = 0
    whose launch clock the stamped bursts read, and the clock probe."""
    out = [(CLOCK_PROBE, {}, False)]
    for e in entries:
        if e.stage:
            d0 = {**e.define_dict, "PE_TIMING_TILES": 0}
            out += [(e.stage, e.define_dict, False), (e.stage, d0, False), (e.stage, d0, True)]
    return out


def prebuild(entries: list[Entry], workers: int | None = None) -> list[str]:
    """Compile builds(entries) in a process pool (pelib.cache stores each entry atomically, so the
    processes share one cache); returns the errors."""
    from concurrent.futures import ProcessPoolExecutor
    specs = builds(entries)
    n = workers or min(8, os.cpu_count() or 1, len(specs))
    with ProcessPoolExecutor(max_workers=n) as ex:
        done = list(ex.map(_build_one, specs))
    errs = [d for d, (k, _, _) in zip(done, specs) if d != k]
    for err in errs:
        print(f"[build] FAILED {err}", flush=True)
    return errs


def plan_jobs(entries: list[Entry], rounds: dict | None = None, inputs=INPUTS, checked=()) -> list[dict]:
    """The worker jobs: each stage entry verified (not the probes; those in `checked` on the kind's check
    shapes first), then one measuring job of all entries."""
    out = [{"kind": "verify", "entry": e.as_dict(), "label": f"verify {e.name}",
            "check_shapes": e in checked}
           for e in entries if e.stage and not e.probe]
    out.append({"kind": "measure", "entries": [e.as_dict() for e in entries], "label": "measure",
                "rounds": rounds or ROUNDS, "inputs": list(inputs)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.measure.energy", description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", choices=sorted(MODES),
                    help="limiter: the limiter tests; stages: the sub-stages; contention: 07a, 12, 13 and the probes' counters")
    ap.add_argument("--out", default=None)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole run (default: BUDGET_S of the mode)")
    ap.add_argument("--no-ncu", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one round per input set, random and zeros only")
    ap.add_argument("--entries", default=None,
                    help='headline: the stages, a JSON list of [stage, defines] (pelib.measure.sweep passes its fastest)')
    a = jobs.parse(ap, argv, KINDS, ncu_target=lambda a: _ncu_target(a.ncu_target, a.data))
    if isinstance(a, int):
        return a
    if not a.mode:
        ap.error("name a mode: " + ", ".join(sorted(MODES)))
    a.budget = a.budget or BUDGET_S[a.mode]
    if (a.mode == "headline") != (a.entries is not None):
        ap.error("--entries goes with the headline mode, and the headline mode needs --entries")
    try:
        entries = headline_entries(a.entries) if a.mode == "headline" else MODES[a.mode]
    except EnergyError as e:
        ap.error(str(e))
    t_start = time.time()
    import torch
    info = device.current()
    print(device.banner_text("sm_90a", info), flush=True)
    bench.runner_device("python -m pelib.measure.energy", "sm_90a", info)
    env = bench.environment(info)
    out_dir = Path(a.out or os.environ.get("OUT") or results.run_dir(env))
    out_dir.mkdir(parents=True, exist_ok=True)
    rounds = {k: 1 for k in INPUTS} if a.quick else MODE_ROUNDS[a.mode]
    inputs = MODE_INPUTS[a.mode][:2] if a.quick else MODE_INPUTS[a.mode]
    full = Stage("sm90/06_permuted_b").problem("full")
    report = {"env": env, "mode": a.mode, "evidence": f"measured ({info.name}, {env['date'][:10]})",
              "problem": full.name, "tile": list(TILE), "entries": [e.as_dict() for e in entries],
              "protocol": {"idle_s": IDLE_S, "lead_s": LEAD_S, "sustain_s": SUSTAIN_S, "rounds": rounds,
                           "inputs": list(inputs), "iters": a.iters, "probe_spin_cycles": PROBE_SPIN}}
    t0 = time.time()
    prebuild(entries)          # every cubin of the run, in parallel: the workers read them from the cache
    print(f"[build] {time.time() - t0:.0f} s", flush=True)
    report["facts"] = {e.name: tile_facts(e, full, info.sm_count) for e in entries}
    report["copy"] = bench.copy_bandwidth_gb_s()
    print(f"[copy] {report['copy']['gbps']:.0f} GB/s; facts in {time.time() - t_start:.0f} s", flush=True)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    data_dir = tempfile.mkdtemp(prefix="pelib-energy-", dir=shm)
    try:
        jobs.save_full(Stage("sm90/06_permuted_b"), data_dir)
        torch.cuda.empty_cache()
        print(f"[data] saved ({time.time() - t_start:.0f} s)", flush=True)
        todo = plan_jobs(entries, rounds, inputs, checked=CONTENTION_NEW if a.mode == "contention" else ())
        extra = (0 if a.no_ncu else 40) + (60 if a.mode in RANDOM_PROOF else 0) + \
            (90 if a.mode == "contention" and not a.no_ncu else 0)
        left = a.budget - (time.time() - t_start) - extra
        res = jobs.run(todo, data_dir, a.iters, left, job_timeout_s=max(60.0, left - 10), module="pelib.measure.energy",
                       show=sweep.show_job)
        report["verified"] = {r["entry"]["name"]: {k: r.get(k) for k in ("ok", "n_bad", "n_nan", "max_abs", "error")}
                              for r in res if r["kind"] == "verify"}
        bad = [n for n, v in report["verified"].items() if not v.get("ok")]
        m = next(r for r in res if r["kind"] == "measure")
        if bad:
            print(f"[verify] FAILED: {bad}: their rows are measured but not valid", flush=True)
        report.update({k: m.get(k) for k in ("nvml", "verify", "burst", "sustained", "launch")})
        if not m.get("ok"):
            report["measure_error"] = m.get("error")
        if not a.no_ncu and time.time() - t_start < a.budget - 20:
            report["ncu"] = run_ncu(entries, data_dir,
                                    max(20.0, min(60.0, a.budget - (time.time() - t_start) - 10)))
        if a.mode in RANDOM_PROOF:
            rp = random_proof(RANDOM_PROOF[a.mode], out_dir, info,
                              budget_s=max(30.0, min(90.0, a.budget - (time.time() - t_start) - 90)))
            report["random_proof"] = {"file": rp["file"], "seconds": rp["seconds"],
                                      "jobs": {n: r["outcome"] for n, r in rp["random"]["jobs"].items()}}
            print(f"[random] {len(rp['random']['jobs'])} jobs in {rp['seconds']:.0f} s: "
                  + ", ".join(f"{n.split('/')[-1]} {r['outcome']['kind']} {r['outcome'].get('sha256', '')[:12]}"
                              for n, r in rp["random"]["jobs"].items()), flush=True)
        if a.mode == "contention" and not a.no_ncu and time.time() - t_start < a.budget - 20:
            report["ncu_contention"] = run_ncu_contention(entries, data_dir, a.budget - (time.time() - t_start) - 10)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    report["ncu_per_tile"] = ncu_per_tile(report.get("ncu"), full)
    if "ncu_contention" in report:
        report["ncu_contention_per_tile"] = ncu_contention_per_tile(report["ncu_contention"], full)
    report["summary"] = summarize(report)
    lead = headline(report["summary"], report)
    report["headline"] = lead["entry"] if lead else None
    path = out_dir / f"energy-{a.mode}.json"
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"\n{report['evidence']}; power limit {((report.get('nvml') or {}).get('power_limit_w') or 0):.0f} W; "
          f"idle {((report.get('nvml') or {}).get('idle') or {}).get('power_w', 0):.0f} W")
    print(format_summary(report["summary"]))
    if lead:
        print(f"\nheadline (the fastest verified stage, by burst): {lead['entry']} "
              f"{lead['burst ms (random)']:.4f} ms burst"
              + (f", {lead['x cuBLAS fast (burst)']:.2f}x cuBLAS fast-accum" if lead.get("x cuBLAS fast (burst)") else "")
              + (f", {lead['sustained ms (random)']:.4f} ms sustained" if lead.get("sustained ms (random)") else "")
              + (f", {lead['J/launch (random)']:.3f} J per GEMM ({lead['J / cuBLAS fast J']:.2f}x cuBLAS fast-accum's)"
                 if lead.get("J / cuBLAS fast J") else ""))
    if report["ncu_per_tile"]:
        print("\nper 64 x 256 tile (Nsight Compute, one launch each):")
        for r in report["ncu_per_tile"]:
            print(f"  {r['entry']:<34} L2 {r.get('l2_B_per_tile', 0) / 1e3:8.1f} KB  DRAM "
                  f"{(r.get('dram_read_B_per_tile', 0) + r.get('dram_write_B_per_tile', 0)) / 1e3:7.1f} KB  "
                  f"warp inst {r.get('warp_inst_per_tile', 0):8.0f}  at {r.get('sm_clock_ghz') or 0:.2f} GHz")
    elif report.get("ncu"):
        print(f"ncu: {report['ncu'].get('error')}")
    if report.get("ncu_contention_per_tile"):
        print("\ncontention counters per 64 x 256 tile (Nsight Compute, one launch each):")
        for r in report["ncu_contention_per_tile"]:
            pt, st = r["per_tile"], list(r["stalls"].items())[:3]
            print(f"  {r['entry']:<34} L2 wr {pt.get('lts__t_sectors_op_write.sum', 0) * 32 / 1e3:6.1f} KB  "
                  f"STG sectors {pt.get('l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum', 0):7.0f}  "
                  f"LSU inst {pt.get('sm__inst_executed_pipe_lsu.sum', 0):6.0f}  stalls "
                  + ", ".join(f"{m.split('stalled_')[-1].split('_per')[0]} {v:.2f}" for m, v in st))
    elif report.get("ncu_contention"):
        print(f"ncu (contention pass): {report['ncu_contention'].get('error')}")
    print(f"\nwrote {path} ({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
