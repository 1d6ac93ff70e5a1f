"""The timing model's costs, one table: each cost's name, unit, whether a calibration must give it, its default,
the range a value may take, the measured constants it comes from and how, and the code that reads it.

    COSTS["tma.issue_cycles"].reads           # "replay.Replay._node (tma_load, tma_store, tmem)"
    problems("tma.l2_latency_cycles", -700)   # ["... is negative: a latency ... (cycles) is at least 0"]

pelib.predict.calibration builds its REQUIRED / OPTIONAL / FORMULA lists from this table and checks every value
against it when a calibration is loaded or changed (finite, signed as its unit demands, inside its range: no NaN
that prices a load at nothing, no 1e300 the replay's issue buckets cannot step past, no 0 SMs). A new cost term
adds one row here; CONTRIBUTING.md ("Timing model") names the other files it touches.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    name: str
    unit: str
    required: str          # "always", "formula" (where the calibration has no measured TMA curves), "optional"
    default: float | None  # what the model uses where an optional cost is absent
    lo: float              # the smallest value that means something (inclusive)
    hi: float              # the largest (inclusive): beyond it no hardware, and the replay's arithmetic breaks
    source: str            # the measured constants it comes from and how (pelib.predict.measured._derive)
    reads: str             # the code that reads it
    fallback: str | None = None   # an optional cost without a default: the cost it takes where absent


_LAT = (0.0, 1e6)          # a latency or a cycle count: never negative, at most a million cycles
COSTS = {c.name: c for c in (
    Cost("sm_count", "SMs", "always", None, 1, 1024, "env.sm_count (the device's attribute)",
         "model.predict (the grid), model.resident_clusters"),
    Cost("clock_ghz.timed", "GHz", "always", None, 0.1, 5.0, "clock.burst_ghz (clock64 over globaltimer, short "
         "launch)", "model.clock_of"),
    Cost("clock_ghz.sustained", "GHz", "always", None, 0.1, 5.0, "clock.sustained_ghz (after ~2 s of wgmma)",
         "model.clock_of"),
    Cost("clock_ghz.launch06", "GHz", "optional", None, 0.1, 5.0, "sm90/06's launch clock in a short burst (measured.build)",
         "model.clock_of"),
    Cost("tensor.flop_per_clk_sm", "FLOP/clk/SM", "always", None, 1.0, 1e6,
         "2 x 64 x 256 x 32 / wgmma.m64n256k32.sm_cycles_per_wgmma", "replay.Replay._mma"),
    Cost("tensor.fp4_flop_per_clk_sm", "FLOP/clk/SM", "optional", None, 1.0, 1e6,
         "public (B200 dense FP4 rate per SM)", "model.umma_cycles"),
    Cost("tensor.beside_epilogue", "ratio", "optional", 1.0, 1.0, 10.0,
         "wgmma.m64n256k32.cycles_beside_epilogue / sm_cycles_per_wgmma (rejected below 1: pelib.predict.measured)",
         "replay.Replay._mma"),
    Cost("wgmma.tail_cycles", "cycles", "always", None, *_LAT,
         "wgmma.m64n256k32.latency_cycles - sm_cycles_per_wgmma", "replay.Replay._mma"),
    Cost("issue.cpi", "cycles/instruction", "always", None, 0.0, 64.0,
         "epilogue.tile_cycles.no_store / epilogue.instructions_per_tile", "not read by the replay (reported)"),
    Cost("issue.slots_per_clk", "instructions/clk per sub-partition", "always", None, 0.01, 4.0,
         "public (one warp instruction per clock per scheduler)", "replay.Replay.issue"),
    Cost("mbarrier.arrive_cycles", "cycles", "always", None, *_LAT, "mbarrier.arrive_cycles",
         "replay.Replay._node (arrive, expect_tx, commit)"),
    Cost("mbarrier.wait_pass_cycles", "cycles", "always", None, *_LAT, "mbarrier.try_wait_pass_cycles",
         "replay.Replay._node (wait_end)"),
    Cost("mbarrier.wake_cycles", "cycles", "always", None, *_LAT,
         "mbarrier.local_roundtrip_cycles / 2 - arrive_cycles", "replay.Replay._wake"),
    Cost("bar_sync.cycles", "cycles", "always", None, *_LAT, "bar_sync.256_cycles", "replay.Replay._node (bar_sync)"),
    Cost("tma.issue_cycles", "cycles", "always", None, *_LAT, "tma.store.issue_cycles",
         "replay.Replay._node (tma_load, tma_store, tmem)"),
    Cost("tma.l2_latency_cycles", "cycles", "always", None, *_LAT, "tma.load.latency_cycles.l2",
         "memory.MemoryState.tma_cycles (formula path)"),
    Cost("tma.bytes_per_clk_sm", "B/clk", "always", None, 0.01, 1e4, "the TMA burst probe's bytes per clock per SM",
         "replay.Replay._node (tma_load)"),
    Cost("dram.bandwidth_gbps", "GB/s", "always", None, 1.0, 1e5, "dram.copy_gbps (bytes read + written)",
         "model.solve (utilisation, floor), memory.MemoryState.gbps"),
    Cost("l2.bandwidth_gbps", "GB/s", "optional", 1e6, 1.0, 1e6, "l2.read_gbps (the stream probe's most read "
         "bandwidth over an L2-resident footprint; absent: 1 PB/s, far above any chip's L2, so it floors nothing)",
         "model.solve (the L2 floor)"),
    Cost("l2.bytes", "B", "always", None, 1.0, 1e12, "env.l2_bytes",
         "model.demand_share (the LRU distance of memory.demand_misses)"),
    Cost("store.bytes_per_clk_sm", "B/clk", "always", None, 0.01, 1e4,
         "32 KiB / (epilogue.tile_cycles.alone_3sm - .no_store)", "replay.Replay._item (stg)"),
    Cost("store.drain_cycles", "cycles", "always", None, *_LAT, "provisional (0: no drain beyond the server)",
         "replay.Replay._item (stg), model.solve"),
    *(Cost(f"lsu.{op}_cycles.{w}B", "cycles", "optional", None, 0.0, 1e4,
           f"lsu.{op}.cycles_per_access.walk_{w}B (the lsu probe: one SM, 8 warps, {w} B a lane in the register "
           "epilogue's fragment and order; .fragment_ where a file lacks it; L2-resident; absent: stores by their "
           "bytes, loads by their issue)",
           "replay.Replay._lsu_access (stg, ldg)") for op in ("store", "load") for w in (4, 8, 16)),
    *(Cost(f"lsu.local_{op}_cycles.{w}B", "cycles", "optional", None, 0.0, 1e4,
           f"lsu.{op}.cycles_per_access.line_{w}B (the lsu probe: {w} B a lane, lane l at byte l x {w} of one row: "
           "the form of a warp's spill, whose lanes' words of one local address are consecutive; absent: a spill "
           "costs its issue only)", "replay.Replay._item (stl, ldl)") for op in ("store", "load") for w in (4, 16)),
    Cost("ldg.latency_cycles", "cycles", "always", None, *_LAT, "the stream probe's L2 chase",
         "replay.Replay._item (ldg: its scoreboard, where the calibration has sb latencies)"),
    *(Cost(f"sb.latency_cycles.{c}", "cycles", "optional", None, 0.0, 1e4,
           f"latency.{c}.cycles (the latency probe: a dependent chain, one warp, one SM; absent: no instruction "
           "waits on a scoreboard)", "replay.Replay._alu_marked, _sb_wait") for c in ("shfl", "lds")),
    Cost("shfl.cycles_sm", "cycles", "optional", None, 0.0, 1e4,
         "shfl.sm_cycles_per_instr (the latency probe: 16 warps of independent shuffles, one SM; with the sb "
         "latencies)", "replay.Replay._alu_marked (the SM's shuffle unit)"),
    Cost("launch.overhead_us", "us", "always", None, 0.0, 1e4, "launch.overhead_us (the launch probe's burst: "
         "event time less the CTAs' span)", "model.solve"),
    Cost("cta.launch_cycles", "cycles", "always", None, *_LAT, "launch.cta_gap_cycles", "model.solve (waves)"),
    Cost("umma.tail_cycles", "cycles", "optional", 0.0, *_LAT, "public / provisional (B200)", "replay.Replay._item"),
    Cost("umma.commit_cycles", "cycles", "optional", None, *_LAT, "public / provisional (B200)",
         "replay.Replay._node (commit)", fallback="mbarrier.wake_cycles"),
    Cost("tmem.ld_cycles", "cycles", "optional", 0.0, *_LAT, "public / provisional (B200)",
         "replay.Replay._item (tmem_ld)"),
    Cost("dram.latency_idle_ns", "ns", "formula", None, 0.0, 1e5,
         "(tma.load.latency_cycles.unloaded - .l2) / its clock", "memory.MemoryState.dram_ns"),
    Cost("dram.queue_factor", "1", "formula", None, 0.0, 1e3, "the loaded-latency sweep's growth",
         "memory.MemoryState.dram_ns"),
    Cost("dram.scatter_penalty_ns", "ns", "formula", None, 0.0, 1e5,
         "(tma.load.latency_cycles.scattered - .unloaded) / its clock", "memory.MemoryState.dram_ns"),
)}


def value(cal, name: str) -> float:
    """Cost `name` of calibration `cal` as the model reads it: its value where the calibration gives it, else the
    table's default, else (an optional cost) its fallback cost's. A name the table lacks is an error."""
    c = COSTS.get(name)
    if c is None:
        raise KeyError(f"{name!r} is no cost of pelib.predict.costs.COSTS: add its row (name, unit, default, "
                       "source, reader) before the model reads it")
    if name in cal.constants:
        return cal[name]
    if c.required != "optional":
        return cal[name]                      # a required cost: the calibration's error names what is missing
    if c.default is not None:
        return float(c.default)
    return value(cal, c.fallback) if c.fallback else cal[name]


def names(required: str) -> dict:
    """{name: unit} of the costs whose `required` is that."""
    return {c.name: c.unit for c in COSTS.values() if c.required == required}


def problems(name: str, value) -> list[str]:
    """What is wrong with `value` for cost `name` (empty: nothing). A cost the table lacks has no rule here."""
    c = COSTS.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [f"{name} = {value!r} is not a number"]
    if not math.isfinite(value):
        return [f"{name} = {value!r} is not finite: give a measured value in {c.unit if c else 'its unit'}"]
    if c is None:
        return []
    if value < c.lo or value > c.hi:
        why = ("is negative" if value < 0 <= c.lo else "is below its range" if value < c.lo else "is above its range")
        return [f"{name} = {value:g} {why}: a {c.unit} cost lies in [{c.lo:g}, {c.hi:g}] (pelib.predict.costs)"]
    if name == "sm_count" and value != int(value):
        return [f"sm_count = {value:g} is not a whole number of SMs"]
    return []
