"""The calibration data format: costs measured on one GPU by pelib.predict.probes, each with its unit, regime and
the SM clock of the launch that measured it; `load(path)` checks a file and says what is wrong with it.

    cal = load("results/<date>-h100/calibration-<device>.json")
    cal.value("wgmma.m64n256k32.sm_cycles_per_wgmma")      # 128-ish cycles: the tensor pipe's rate
    cal.curve("tma_load.sequential")                         # [{active, depth, gbps, lat_p50, ...}, ...]

The file (schema SCHEMA):
    {"schema": "pelib.calibration/1",
     "evidence": "measured (<device>, <date>)",
     "env": {"device", "date", "git", "sm_count", "l2_bytes", "driver_version", ...},   (pelib.bench.environment)
     "constants": {name: {"value": number, "unit": one of UNITS, "what": text, "probe": probe name,
                          "launch": index into "launches" (or null), "clock_ghz": that launch's SM clock
                          (or null), "regime": one of REGIMES, "n": samples behind the value}},
     "curves": {name: {"what": text, "x": key, "y": key, "points": [{...}, ...]}},
     "launches": [{"index", "probe", "label", "defines", "params", "grid", "cluster", "clock": the
                   pelib.timing.launch_clock of that launch, "summary": the probe's per-launch numbers}],
     "sass": {probe: {"instructions_per_tile": n, ...}} (compiled: from the probe's own cubin),
     "log": the log file's name}
Cycles are SM clock cycles (clock64); a value in ns was converted with its launch's clock_ghz. CONSTANTS
names every constant a complete calibration holds and what it means; REQUIRED is what the timing model
cannot do without.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from .calibration import read_json   # the one reader of a calibration file
from . import calibration as _cal

SCHEMA = "pelib.calibration/1"
UNITS = ("cycles", "ns", "GHz", "GB/s", "instructions", "cycles/instruction", "ratio", "B/clk", "us")
# short burst: one launch after an idle gap (the regime of a median-of-20 timing with L2 flushes);
# sustained: the last of back-to-back launches filling about two seconds (the power cap's regime).
REGIMES = ("short burst", "sustained", "compiled")
WGMMA_N = (128, 192, 256)          # the sm90 stages' wgmma shapes m64nNk32 (BLOCK_N 128, 192, 256)

# name -> (unit, what it is). {n} stands for each of WGMMA_N.
CONSTANTS = {
    "clock.burst_ghz": ("GHz", "SM clock of a short launch (median over SMs of clock64 / globaltimer)"),
    "clock.sustained_ghz": ("GHz", "SM clock at the end of ~2 s of back-to-back wgmma launches (the power cap's regime)"),
    "clock.globaltimer_tick_ns": ("ns", "smallest step of %globaltimer: the resolution of every ns span"),
    "clock.clock64_read_cycles": ("cycles", "one read of %clock64 (the cost a TIMING record adds)"),
    "clock.globaltimer_read_cycles": ("cycles", "one read of %globaltimer"),
    "wgmma.m64n{n}k32.latency_cycles": ("cycles", "one wgmma, commit, wait_group 0: issue to complete (1 warpgroup)"),
    "wgmma.m64n{n}k32.issue_cycles_per_slice": ("cycles", "fence + 4 wgmma k32 + commit: what the issuing warpgroup pays per K slice"),
    "wgmma.m64n{n}k32.slice_cycles": ("cycles", "one K slice (4 wgmma) from fence to wait_group 0 (1 warpgroup)"),
    "wgmma.m64n{n}k32.cycles_per_wgmma_1wg": ("cycles", "steady K loop (commit, wait_group 1), one warpgroup: cycles per wgmma"),
    "wgmma.m64n{n}k32.cycles_per_wgmma_2wg": ("cycles", "the same with two warpgroups issuing at once: cycles per wgmma each sees"),
    "wgmma.m64n{n}k32.sm_cycles_per_wgmma": ("cycles", "the SM's tensor pipe: two warpgroups' wgmma per cycle, inverted (the per-SM server)"),
    "wgmma.m64n{n}k32.pipe_efficiency": ("ratio", "the dense FP8 rate (8,192 FLOP/clk/SM) over the measured per-SM rate"),
    "tma.load.latency_cycles.unloaded": ("cycles", "one 8-KiB A box from DRAM, one SM, one load in flight, sequential"),
    "tma.load.latency_cycles.scattered": ("cycles", "the same at scattered addresses (no locality)"),
    "tma.load.latency_cycles.l2": ("cycles", "the same box resident in L2"),
    "tma.load.latency_cycles.full_load": ("cycles", "median latency with every SM keeping 8 boxes in flight, sequential"),
    "tma.load.gbps.sequential_max": ("GB/s", "the most TMA load bandwidth of the sweep, sequential window"),
    "tma.load.gbps.scattered_max": ("GB/s", "the most TMA load bandwidth of the sweep, scattered"),
    "tma.load.box_cycles_sm": ("cycles", "one more 8-KiB box in a burst on one barrier, one SM, L2-resident: the slope of a burst's cycles on its boxes"),
    "tma.load.bytes_per_clk_sm": ("B/clk", "one SM's TMA load rate: 8 KiB over tma.load.box_cycles_sm"),
    "tma.load.multicast.latency_cycles.unloaded": ("cycles", "a cluster pair, each half the box multicast to both: issue to full"),
    "tma.store.issue_cycles": ("cycles", "one 4-KiB C box store + commit_group: the storing thread's cost"),
    "tma.store.read_cycles": ("cycles", "wait_group.read 0 after one store: until its staging may be reused"),
    "tma.store.drain_cycles": ("cycles", "wait_group 0 after one store (after .read): until its writes complete"),
    "tma.store.gbps_max": ("GB/s", "the most TMA store bandwidth of the sweep"),
    "mbarrier.local_roundtrip_cycles": ("cycles", "two warpgroups pass a token through two mbarriers: one round trip (two hand-overs)"),
    "mbarrier.remote_roundtrip_cycles": ("cycles", "the same between the two CTAs of a cluster (remote arrive)"),
    "mbarrier.arrive_cycles": ("cycles", "one mbarrier.arrive, back to back (issue cost)"),
    "mbarrier.try_wait_pass_cycles": ("cycles", "one try_wait.parity on a completed phase (a wait that passes at once)"),
    "bar_sync.256_cycles": ("cycles", "bar.sync over 256 threads (two warpgroups)"),
    "bar_sync.128_cycles": ("cycles", "bar.sync over 128 threads (one warpgroup)"),
    "bar_sync.syncthreads_cycles": ("cycles", "__syncthreads of 256 threads"),
    "epilogue.tile_cycles.alone": ("cycles", "sm90/06's epilogue of one 64 x 256 tile (comb loads + 16-B stores), the other warpgroup idle"),
    "epilogue.tile_cycles.no_store": ("cycles", "the same with the stores predicated off"),
    "epilogue.tile_cycles.beside_epilogue": ("cycles", "the same while the other warpgroup runs epilogues too"),
    "epilogue.tile_cycles.beside_wgmma": ("cycles", "the same while the other warpgroup runs a wgmma K loop (06's overlap)"),
    "epilogue.tile_cycles.beside_wgmma_no_store": ("cycles", "the epilogue without its stores while the other warpgroup runs a wgmma K loop: its instructions beside the tensor pipe"),
    "epilogue.tile_cycles.alone_3sms": ("cycles", "the epilogue alone on the 3 SMs of one row group: its stores meet no other SM's traffic"),
    "wgmma.m64n256k32.cycles_beside_epilogue": ("cycles", "cycles per wgmma of a K loop (4 wgmma, commit, wait_group 1) beside the epilogue without stores, all of it overlapped"),
    "wgmma.m64n256k32.cycles_beside_store_epilogue": ("cycles", "the same beside the epilogue with its stores (the chain outlasts the epilogues: partly overlapped)"),
    "epilogue.instructions_per_tile": ("instructions", "SASS instructions of one pass of the probe's tile loop (compiled)"),
    "epilogue.cpi.alone": ("cycles/instruction", "tile cycles / SASS instructions per tile, alone"),
    "epilogue.cpi.beside_wgmma": ("cycles/instruction", "the same beside a wgmma K loop"),
    "cta.relaunch_cycles": ("cycles", "a CTA's start after the previous CTA on its SM exited (one CTA per SM, 384 threads, 160 KiB): the block scheduler's hand-over"),
    "launch.overhead_us": ("us", "a launch's event time less the span from its first CTA's start to its last CTA's exit"),
    "dram.latency_cycles.unloaded": ("cycles", "dependent-load chase over a DRAM-sized footprint, nothing else running"),
    "dram.latency_cycles.loaded": ("cycles", "the same chase at the read sweep's highest bandwidth"),
    "dram.read_gbps": ("GB/s", "the most read bandwidth of the sweep (16-B loads)"),
    "dram.write_gbps": ("GB/s", "the most write bandwidth of the sweep (16-B stores)"),
    "dram.copy_gbps": ("GB/s", "the most copy bandwidth of the sweep (bytes read + written)"),
    "l2.latency_cycles.unloaded": ("cycles", "dependent-load chase over an L2-resident footprint"),
    "l2.read_gbps": ("GB/s", "the most read bandwidth of the sweep over an L2-resident footprint"),
}
# the lsu probe, one SM, 8 warps, L2-resident: cycles of the SM per warp-wide access, by op, pattern and width
for _op, _w in (("store", "st.global"), ("load", "ld.global.nc")):
    for _pat, _how in (("fragment", "four lanes a row over eight rows, each access a new group of rows"),
                       ("line", "the lanes on one line"),
                       ("walk", "four lanes a row over eight rows, successive accesses along the rows (a register "
                                "epilogue's order)")):
        for _b in ((4, 16) if _pat == "line" else (4, 8, 16)):
            CONSTANTS[f"lsu.{_op}.cycles_per_access.{_pat}_{_b}B"] = (
                "cycles", f"one warp-wide {_w} of {_b} B a lane, {_how}: the SM's cycles per access, one SM, "
                          "8 warps back to back, L2-resident")
# the latency probe, one SM: a dependent chain's cycles a step (one warp), and the SM's shuffle rate (16 warps)
CONSTANTS["latency.shfl.cycles"] = ("cycles", "shfl.sync.bfly to its result: a chain of dependent shuffles, one warp")
CONSTANTS["latency.lds.cycles"] = ("cycles", "ld.shared to its result: a pointer chase in shared memory, one warp")
CONSTANTS["shfl.sm_cycles_per_instr"] = ("cycles", "the SM's cycles per warp shuffle: 16 warps of 8 independent "
                                                  "shuffle chains each")
REQUIRED = ("clock.burst_ghz", "wgmma.m64n256k32.sm_cycles_per_wgmma", "wgmma.m64n256k32.issue_cycles_per_slice",
            "tma.load.latency_cycles.unloaded", "tma.store.issue_cycles", "mbarrier.local_roundtrip_cycles",
            "mbarrier.try_wait_pass_cycles", "epilogue.tile_cycles.beside_wgmma", "dram.read_gbps")
CURVES = {
    "tma_load.sequential": "TMA A-box loads, sequential window: latency against achieved bandwidth (SMs x depth)",
    "tma_load.scattered": "TMA A-box loads at scattered addresses",
    "tma_load.l2": "TMA A-box loads of an L2-resident footprint",
    "tma_load.multicast": "TMA loads by cluster pairs, each half the box multicast to both",
    "tma_burst.l2": "bursts of boxes on one barrier, L2-resident: a burst's cycles against its boxes (SMs x boxes)",
    "tma_burst.sequential": "the same from DRAM, sequential window",
    "tma_store": "TMA C-box stores: issue, read and drain waits against bandwidth (SMs x group)",
    "dram.read": "loaded latency (pointer chase) against read bandwidth, DRAM footprint",
    "dram.write": "loaded latency against write bandwidth, DRAM footprint",
    "dram.copy": "loaded latency against copy bandwidth (read + write), DRAM footprint",
    "l2.read": "loaded latency against read bandwidth, L2-resident footprint",
    "l2.write": "loaded latency against write bandwidth, L2-resident footprint",
    "l2.copy": "loaded latency against copy bandwidth, L2-resident footprint",
    "latency": "dependent chains (shuffle, shared load) and independent shuffles: cycles a step against the warps",
    "lsu": "warp-wide global stores and loads: the SM's cycles per access against the bytes a lane (op x pattern x SMs x warps)",
}


def names() -> dict[str, tuple[str, str]]:
    """Every constant name (the {n} forms expanded over WGMMA_N) -> (unit, what)."""
    out = {}
    for k, v in CONSTANTS.items():
        for n in (WGMMA_N if "{n}" in k else (None,)):
            out[k.format(n=n) if n else k] = v
    return out


# A calibration file that is not one, or lacks what the timing model needs: the timing model's one error for it
CalibrationError = _cal.CalibrationError


@dataclass
class Calibration:
    """A checked calibration document."""

    doc: dict
    path: str = ""

    @property
    def device(self) -> str:
        return self.doc["env"]["device"]

    @property
    def date(self) -> str:
        return self.doc["env"]["date"]

    @property
    def evidence(self) -> str:
        return self.doc["evidence"]

    def constant(self, name: str) -> dict:
        c = self.doc["constants"]
        if name not in c:
            close = [k for k in c if k.split(".")[0] == name.split(".")[0]][:8]
            raise KeyError(f"{self.path or 'the calibration'} has no constant {name!r}"
                           + (f"; its {name.split('.')[0]}.* constants are {close}" if close else "")
                           + ": rerun `python -m pelib.predict.probes` with today's probes")
        return c[name]

    def value(self, name: str) -> float:
        return float(self.constant(name)["value"])

    def curve(self, name: str) -> list[dict]:
        if name not in self.doc["curves"]:
            raise KeyError(f"{self.path or 'the calibration'} has no curve {name!r}; it has {sorted(self.doc['curves'])}")
        return list(self.doc["curves"][name]["points"])

    def table(self) -> list[dict]:
        """One row per constant: name, value, unit, regime, clock, what."""
        return [{"constant": k, "value": v["value"], "unit": v["unit"], "regime": v["regime"],
                 "clock GHz": v.get("clock_ghz"), "what": v["what"]} for k, v in sorted(self.doc["constants"].items())]


def problems(doc) -> list[str]:
    """What is wrong with a calibration document (empty: nothing), each line naming the field and the fix."""
    if not isinstance(doc, dict):
        return [f"a calibration is a JSON object, got {type(doc).__name__}"]
    out = []
    if doc.get("schema") != SCHEMA:
        out.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r} (a file of another format or "
                   "version: rerun `python -m pelib.predict.probes`)")
    env = doc.get("env")
    if not isinstance(env, dict) or not all(env.get(k) for k in ("device", "date", "git")):
        out.append("env must name the device, date and git revision it was measured with (pelib.bench.environment)")
    if not str(doc.get("evidence", "")).startswith("measured ("):
        out.append(f"evidence {doc.get('evidence')!r} must read 'measured (<device>, <date>)'")
    consts = doc.get("constants")
    if not isinstance(consts, dict) or not consts:
        return out + ["constants is missing or empty"]
    launches = doc.get("launches") if isinstance(doc.get("launches"), list) else []
    known = names()
    for k, c in consts.items():
        where = f"constant {k!r}"
        if k not in known:
            out.append(f"{where} is not one pelib.predict.measured_format.CONSTANTS defines")
        if not isinstance(c, dict):
            out.append(f"{where} is not an object")
            continue
        v = c.get("value")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            out.append(f"{where}: value {v!r} is not a finite number")
        elif v < 0:     # every constant is a time, a rate, a count or a ratio: none is below 0
            out.append(f"{where}: value {v!r} is negative: a measured {c.get('unit', 'value')} is 0 or more "
                       "(a probe whose subtraction went wrong? rerun python -m pelib.predict.probes)")
        if c.get("unit") not in UNITS:
            out.append(f"{where}: unit {c.get('unit')!r} is not one of {UNITS}")
        elif k in known and c["unit"] != known[k][0]:
            out.append(f"{where}: unit {c['unit']!r}, CONSTANTS says {known[k][0]!r}")
        if c.get("regime") not in REGIMES:
            out.append(f"{where}: regime {c.get('regime')!r} is not one of {REGIMES}")
        ck = c.get("clock_ghz")
        if ck is not None and (not isinstance(ck, (int, float)) or not 0.1 < ck < 5.0):
            out.append(f"{where}: clock_ghz {ck!r} is not a clock (0.1-5 GHz) or null")
        if c.get("regime") != "compiled" and ck is None:
            out.append(f"{where}: a measured constant carries the clock of its launch (clock_ghz)")
        li = c.get("launch")
        if li is not None and not (isinstance(li, int) and 0 <= li < len(launches)):
            out.append(f"{where}: launch {li!r} is not an index into launches ({len(launches)})")
        for f in ("what", "probe"):
            if not c.get(f):
                out.append(f"{where} lacks {f!r}")
    missing = [k for k in REQUIRED if k not in consts]
    if missing:
        out.append(f"the timing model needs {missing}: the probes that measure them failed or were cut "
                   "(see the log beside the file)")
    curves = doc.get("curves", {})
    if not isinstance(curves, dict):
        out.append("curves must be an object {name: {what, x, y, points}}")
    else:
        for k, cv in curves.items():
            pts = cv.get("points") if isinstance(cv, dict) else None
            if k not in CURVES:
                out.append(f"curve {k!r} is not one pelib.predict.measured_format.CURVES defines")
            if not isinstance(pts, list) or not pts:
                out.append(f"curve {k!r} has no points")
            elif any(not isinstance(p, dict) or cv.get("x") not in p or cv.get("y") not in p for p in pts):
                out.append(f"curve {k!r}: every point needs its x ({cv.get('x')!r}) and y ({cv.get('y')!r})")
    return out


def check(doc, path: str = "") -> Calibration:
    """A Calibration, or CalibrationError listing every problem."""
    bad = problems(doc)
    if bad:
        raise CalibrationError(f"{path or 'calibration'} is not a usable calibration:\n  " + "\n  ".join(bad))
    return Calibration(doc, str(path))


def load(path) -> Calibration:
    """Read and check a calibration JSON (CalibrationError naming each problem)."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise CalibrationError(f"calibration file {path!r}: pass the path of the JSON file "
                               "`python -m pelib.predict.probes --out DIR` writes")
    p = Path(path)
    return check(read_json(p, "the GPU command `python -m pelib.predict.probes --out DIR` writes it"), str(p))
