"""The model's constants from a measured calibration (pelib.predict.probes' file, schema "pelib.calibration/1").

    cal = from_measured(json.load(open("results/<date>-h100/calibration-<device>.json")), path, base=load("h100"))

Each constant of the model (pelib.predict.calibration.REQUIRED) is derived from the measured constants
and curves as MAP says (kind "measured", the measured names in its source); the three TMA latency
curves are carried over. What the probes do not measure stays as `base` has it (its kind kept: a
"provisional" one keeps the calibration provisional; nothing is fitted). `build(path, chip)` is the
whole calibration of a chip from a probes file. `missing(doc)` lists the constants a measured file leaves open.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import results
from . import calibration as _cal, costs as _costs

MEASURED_SCHEMA = "pelib.calibration/1"
A_BOX_FLOP = 2 * 64 * 256 * 32      # one wgmma m64n256k32 (FLOP)
A_BOX_BYTES = 8192                  # the probes' TMA box: one K slice of an A tile (64 rows x 128 B)


def _v(doc: dict, name: str):
    c = (doc.get("constants") or {}).get(name)
    return None if c is None else float(c["value"])


def _clk(doc: dict, name: str):
    c = (doc.get("constants") or {}).get(name)
    return None if c is None else c.get("clock_ghz")


def _launches_of(doc: dict, name: str) -> int:
    """How many launches the probe record behind a measured constant timed (0 where unknown)."""
    c = (doc.get("constants") or {}).get(name) or {}
    for r in doc.get("launches") or []:
        if r.get("index") == c.get("launch"):
            return int(r.get("launches") or 0)
    return 0


def rejected(doc: dict) -> dict:
    """{measured constant: why the model does not take it}: values no hardware rate allows, or a probe that timed
    what the model's constant is not."""
    v = lambda n: _v(doc, n)           # noqa: E731
    out = {}
    beside, alone = v("wgmma.m64n256k32.cycles_beside_epilogue"), v("wgmma.m64n256k32.sm_cycles_per_wgmma")
    if beside and alone and beside / alone < 1.0:
        out["wgmma.m64n256k32.cycles_beside_epilogue"] = (
            f"{beside:.4g} cycles per wgmma m64n256k32 beside the epilogue, {alone / beside:.3g}x faster than the pipe "
            f"alone ({alone:.4g}): no rate of the tensor pipe; tensor.beside_epilogue keeps its default (1: no slow-down modelled), not fitted")
    if v("launch.overhead_us") is not None and _launches_of(doc, "launch.overhead_us") < 2:
        out["launch.overhead_us"] = (
            f"{v('launch.overhead_us'):.4g} us from one launch, the probe module's first, with no warm-up: its events "
            "bracket the host's first-launch work, which the timed stages (warmed up, each launch queued behind an L2 "
            "flush) never see; launch.overhead_us stays provisional (not fitted): re-run the probes, whose launch family now times a burst")
    return out


def _derive(doc: dict) -> dict:
    """{model constant: (value, source)} from the measured document; absent inputs give no entry."""
    v = lambda n: _v(doc, n)           # noqa: E731
    out = {}
    env = doc.get("env") or {}
    burst = v("clock.burst_ghz")

    def put(name, value, src):
        if value is not None:
            out[name] = (float(value), src)
    put("sm_count", env.get("sm_count"), "env.sm_count")
    put("l2.bytes", env.get("l2_bytes"), "env.l2_bytes")
    put("clock_ghz.timed", burst, "clock.burst_ghz (clock64 over globaltimer of a short launch)")
    put("clock_ghz.sustained", v("clock.sustained_ghz"), "clock.sustained_ghz (after ~2 s of back-to-back wgmma)")
    sm = v("wgmma.m64n256k32.sm_cycles_per_wgmma")
    if sm:
        put("tensor.flop_per_clk_sm", A_BOX_FLOP / sm, "2 x 64 x 256 x 32 / wgmma.m64n256k32.sm_cycles_per_wgmma")
        lat = v("wgmma.m64n256k32.latency_cycles")
        if lat is not None:
            put("wgmma.tail_cycles", max(0.0, lat - sm), "wgmma.m64n256k32.latency_cycles - sm_cycles_per_wgmma "
                "(issue to complete beyond the pipe's service)")
    nost, n_instr = v("epilogue.tile_cycles.no_store"), v("epilogue.instructions_per_tile")
    if nost is not None and n_instr:
        # the stores' drain is priced on its own (store.bytes_per_clk_sm): the CPI is the epilogue without them
        put("issue.cpi", nost / n_instr, "epilogue.tile_cycles.no_store / epilogue.instructions_per_tile "
            "(sm90/06's epilogue probe with its stores predicated off: cycles per SASS instruction)")
    put("mbarrier.arrive_cycles", v("mbarrier.arrive_cycles"), "mbarrier.arrive_cycles")
    put("mbarrier.wait_pass_cycles", v("mbarrier.try_wait_pass_cycles"), "mbarrier.try_wait_pass_cycles")
    rt, arr = v("mbarrier.local_roundtrip_cycles"), v("mbarrier.arrive_cycles")
    if rt is not None and arr is not None:
        put("mbarrier.wake_cycles", max(0.0, rt / 2 - arr), "mbarrier.local_roundtrip_cycles / 2 - arrive_cycles "
            "(one hand-over: an arrive, then the waiter's wake)")
    put("bar_sync.cycles", v("bar_sync.256_cycles"), "bar_sync.256_cycles (two warpgroups)")
    put("tma.l2_latency_cycles", v("tma.load.latency_cycles.l2"), "tma.load.latency_cycles.l2 (an 8 KiB box from L2)")
    put("dram.bandwidth_gbps", v("dram.copy_gbps"), "dram.copy_gbps (bytes read + written)")
    put("l2.bandwidth_gbps", v("l2.read_gbps"), "l2.read_gbps (the most read bandwidth of the stream probe's sweep "
        "over an L2-resident footprint, every SM reading)")
    un, l2 = v("tma.load.latency_cycles.unloaded"), v("tma.load.latency_cycles.l2")
    ck = _clk(doc, "tma.load.latency_cycles.unloaded") or burst
    if un is not None and l2 is not None and ck:
        put("dram.latency_idle_ns", max(0.0, un - l2) / ck, "(tma.load.latency_cycles.unloaded - .l2) / its clock")
        sc = v("tma.load.latency_cycles.scattered")
        if sc is not None:
            put("dram.scatter_penalty_ns", max(0.0, sc - un) / ck, "(tma.load.latency_cycles.scattered - .unloaded) "
                "/ its clock, at no load (the curves give it under load)")
    # one SM's store path: the epilogue probe on one row group's 3 SMs (its stores meet no other SM's traffic);
    # the probe on every SM measures the chip's write bandwidth shared by 132 SMs instead (132 x 32 KiB per
    # 2,405 cycles at 1.98 GHz is 3.6 TB/s, dram.write_gbps), which the shared DRAM server already carries
    few, nost = v("epilogue.tile_cycles.alone_3sms"), v("epilogue.tile_cycles.no_store")
    if few is not None and nost is not None and few > nost:
        put("store.bytes_per_clk_sm", 64 * 256 * 2 / (few - nost),
            "32 KiB / (epilogue.tile_cycles.alone_3sms - .no_store): one SM's store rate, no other SM storing")
    if nost is not None:
        put("store.drain_cycles", 0.0, "no slack: the epilogue probe's stores cost (alone - no_store) in the storing "
            "warp's own time, so a warp waits for its stores' drain at its SM's store rate")
    # the pipe beside an epilogue over the pipe alone; a ratio below 1 is no rate (one m64n256k32 is 128 cycles of
    # the pipe at its dense rate, NVIDIA H100 Tensor Core GPU Architecture, FP8 table): the probe's chain then timed
    # something else, and the cost keeps its default, 1 (rejected() says why)
    beside, alone = v("wgmma.m64n256k32.cycles_beside_epilogue"), v("wgmma.m64n256k32.sm_cycles_per_wgmma")
    if beside and alone and beside / alone >= 1.0:
        put("tensor.beside_epilogue", beside / alone, "wgmma.m64n256k32.cycles_beside_epilogue / .sm_cycles_per_wgmma "
            "(the tensor pipe beside an epilogue without stores over the pipe alone)")
    put("tma.bytes_per_clk_sm", v("tma.load.bytes_per_clk_sm"), "tma.load.bytes_per_clk_sm (bursts of 8-KiB boxes on "
        "one barrier, one SM, L2-resident: 8 KiB over the slope of a burst's cycles on its boxes)")
    put("cta.launch_cycles", v("cta.relaunch_cycles"), "cta.relaunch_cycles (the launch probe: a CTA's start after "
        "the previous CTA on its SM exited)")
    if _launches_of(doc, "launch.overhead_us") >= 2:
        put("launch.overhead_us", v("launch.overhead_us"), "launch.overhead_us (the launch probe: event time less the "
            "CTAs' span, one wave)")
    put("ldg.latency_cycles", v("l2.latency_cycles.unloaded"), "l2.latency_cycles.unloaded")
    # the SM's load/store path per warp-wide access (the lsu probe: one SM, 8 warps, L2-resident), in the register
    # epilogues' own order where the file has it ("walk": four lanes a row over eight rows, successive accesses
    # along those rows), else the fragment pattern with a new group of rows each access; all six or none, the
    # replay takes them together
    for pat, how in (("walk", "successive accesses along the rows, a register epilogue's order"),
                     ("fragment", "each access a new group of rows")):
        lsu = {(op, w): v(f"lsu.{op}.cycles_per_access.{pat}_{w}B") for op in ("store", "load") for w in (4, 8, 16)}
        if all(x is not None for x in lsu.values()):
            for (op, w), x in lsu.items():
                put(f"lsu.{op}_cycles.{w}B", x, f"lsu.{op}.cycles_per_access.{pat}_{w}B (the lsu probe: one SM, "
                    f"8 warps back to back, {w} B a lane, four lanes a row over eight rows, {how}; L2-resident)")
            break
    # a spill (STL, LDL): 4 or 16 B a lane, each lane's word of one local address next to the others' (CUDA C++
    # Programming Guide, "Local Memory": consecutive 32-bit words by consecutive thread IDs, fully coalesced
    # when the lanes access the same address), so the lsu probe's coalesced "line" pattern; all four or none
    local = {(op, w): v(f"lsu.{op}.cycles_per_access.line_{w}B") for op in ("store", "load") for w in (4, 16)}
    if all(x is not None for x in local.values()):
        for (op, w), x in local.items():
            put(f"lsu.local_{op}_cycles.{w}B", x, f"lsu.{op}.cycles_per_access.line_{w}B (the lsu probe: one SM, "
                f"8 warps back to back, {w} B a lane, the warp's lanes on consecutive bytes of one row; L2-resident "
                "global memory, priced for local: its L1 residency is not modelled)")
    put("tma.issue_cycles", v("tma.store.issue_cycles"), "tma.store.issue_cycles (a TMA store's issue: the same "
        "cp.async.bulk.tensor path as a load's)")
    # what a scoreboard wait costs (the latency probe, one SM): the latencies together or none, and the SM's
    # shuffle rate with them
    lat = {c: v(f"latency.{c}.cycles") for c in ("shfl", "lds")}
    if all(x is not None for x in lat.values()) and v("shfl.sm_cycles_per_instr") is not None:
        for c, x in lat.items():
            put(f"sb.latency_cycles.{c}", x, f"latency.{c}.cycles (the latency probe: a dependent chain, one warp)")
        put("shfl.cycles_sm", v("shfl.sm_cycles_per_instr"), "shfl.sm_cycles_per_instr (the latency probe: 16 warps "
            "of independent shuffles on one SM)")
    return out


CURVE_DEPTH = 1     # the curves' points taken: one load in flight per SM (see curves())


def curves(doc: dict) -> dict:
    """The TMA latency curves in the model's form: {name: [{"gbps", "cycles", "clock_ghz"}]}, from the points
    with CURVE_DEPTH loads in flight per SM; the load axis is the number of SMs loading. Deeper points are
    left out: their latency is the depth times one load's even from L2 (the probe's loads of one SM
    complete one after another), so they measure the probe's own queue, not the memory's."""
    out = {}
    for name in ("tma_load.sequential", "tma_load.scattered", "tma_load.l2"):
        pts = ((doc.get("curves") or {}).get(name) or {}).get("points") or []
        got = [{"gbps": float(p["gbps"]), "cycles": float(p["lat_p50"]), "clock_ghz": float(p["clock_ghz"])}
               for p in pts if p.get("gbps") and p.get("lat_p50") and p.get("clock_ghz")
               and p.get("depth", CURVE_DEPTH) == CURVE_DEPTH]
        if got:
            out[name] = sorted(got, key=lambda p: p["gbps"])
    return out


# The stream probe's loaded-latency curves (a dependent chase's latency while the other warps move read, write
# or copy traffic at a controlled rate, pelib.predict.probes' stream family): what a load waits in the memory
# system at a given traffic, the traffic's mix of reads and writes included. Points whose streaming warps
# covered less than MIN_COVERAGE of the chase's window are left out (their latency is diluted by idle time).
STREAM_CURVES = ("dram.read", "dram.write", "dram.copy", "l2.read", "l2.write", "l2.copy")
MIN_COVERAGE = 0.9


def stream_curves(doc: dict) -> dict:
    """{name: [{"gbps", "cycles", "clock_ghz"}]} of the stream probe's curves (STREAM_CURVES)."""
    out = {}
    for name in STREAM_CURVES:
        pts = ((doc.get("curves") or {}).get(name) or {}).get("points") or []
        got = [{"gbps": float(p.get("gbps") or 0.0), "cycles": float(p["latency_cycles"]), "clock_ghz": float(p["clock_ghz"])}
               for p in pts if p.get("latency_cycles") and p.get("clock_ghz")
               and (p.get("coverage") is None or p["coverage"] >= MIN_COVERAGE)]
        if got:
            out[name] = sorted(got, key=lambda p: p["gbps"])
    return out


def missing(doc: dict) -> list[str]:
    """The model's constants a measured calibration leaves to the provisional ones."""
    return sorted(set(_cal.REQUIRED) - set(_derive(doc)))


def from_measured(doc: dict, path: str, base: _cal.Calibration) -> _cal.Calibration:
    """The model's calibration from a measured file: derived constants replace `base`'s (kind "measured"),
    the curves come along, the rest is `base`'s as it was."""
    if not isinstance(doc, dict) or doc.get("schema") != MEASURED_SCHEMA:
        raise _cal.CalibrationError(f"{path}: not a measured calibration (schema {MEASURED_SCHEMA!r} expected, "
                                    f"got {doc.get('schema') if isinstance(doc, dict) else type(doc).__name__!r}): "
                                    "pass the file `python -m pelib.predict.probes` wrote")
    env = doc.get("env") or {}
    # the file's own chip must be the one whose constants it replaces (its arch is what the stage is checked
    # against, and its SM count what the grid is laid out on)
    measured_chip = results.chip_slug(env.get("device") or "none")
    if measured_chip != base.chip:
        raise _cal.CalibrationError(
            f"{path} was measured on {env.get('device')!r} (chip {measured_chip!r}), but it would replace the "
            f"costs of the {base.chip} calibration: pass --gpu {measured_chip} if the model knows that chip "
            f"({sorted(_cal.CHIPS)}), or a file measured on a {base.chip}")
    # a constant the cost table no longer has (l2.demand_miss, now counted from the schedule) is not carried over
    consts = {k: dict(v) for k, v in base.constants.items() if k in _costs.COSTS}
    for name, (value, src) in _derive(doc).items():
        unit = _cal.REQUIRED.get(name, consts.get(name, {}).get("unit", ""))
        consts[name] = {"value": value, "unit": unit, "kind": "measured",
                        "source": f"{path}: {src} (measured on {env.get('device')}, {env.get('date')})"}
    cv = {**curves(doc), **stream_curves(doc)}
    if cv:                 # the measured curves replace the DRAM formula: its constants go
        for name in _cal.FORMULA:
            consts.pop(name, None)
    left = sorted(n for n, c in consts.items() if c.get("kind") == "provisional")
    out = _cal.Calibration(base.chip, str(env.get("device") or base.device), str(env.get("date") or "")[:10],
                           bool(left), "", consts, path, curves=cv,
                           occupancy=[dict(r) for r in doc.get("occupancy") or []] or list(base.occupancy))
    bad = _cal.check(out.to_json(), path)     # a NaN or a negative cost in the measured file is refused here
    if bad:
        raise _cal.CalibrationError(f"{path}: the measured calibration gives unusable costs:\n  " + "\n  ".join(bad))
    rej = rejected(doc)
    if rej:
        out.notes.append({"rejected": rej})
    out.protocol = _protocol(path, consts, base.path)
    return out


def _protocol(path: str, consts: dict, base_path: str, other: _cal.Calibration | None = None) -> str:
    """A built calibration's protocol line: where its constants come from, the ones carried over fitted from
    `base_path`, the ones transferred from `other`, the ones still provisional."""
    def kind(k):
        return sorted(n for n, c in consts.items() if c.get("kind") == k)
    fitted, moved, left = kind("fitted"), kind("transferred") if other else [], kind("provisional")
    return ("Constants from the measured calibration " + path + " (pelib.predict.probes) and public sources; "
            "none fitted on a stage's time" + (f" except {', '.join(fitted)} (carried from {base_path})" if fitted else "")
            + (f"; transferred from {other.device} ({other.path}): {', '.join(moved)}" if moved else "")
            + (f"; still provisional: {', '.join(left)}" if left else ""))


def launch_clock_06(chip: str) -> tuple[float, str] | None:
    """sm90/06's own SM clock in a short burst (the regime the stages are timed in): the newest committed
    energy-limiter run's launch clock of entry 06 on `chip` (clock64 over globaltimer of those launches)."""
    for path in reversed(results.files("energy-limiter.json")):
        if results.chip(path.parent) != chip:
            continue
        for row in results.load(path).get("summary", []):
            if row.get("entry") == "06" and row.get("launch clock (GHz)"):
                return float(row["launch clock (GHz)"]), (f"{path.relative_to(path.parents[2])} summary[entry=06] "
                                                          "launch clock (GHz): sm90/06's own clock in a short burst")
    return None


def add_probes(out: _cal.Calibration, path) -> list[str]:
    """Add to `out` (a built calibration of its chip) the constants a second probes file derives that `out` has
    not measured (a later run of one probe family, such as the lsu probe's): kind "measured" where that file was
    measured on the same chip, "transferred" (its device named) where on another; the names added. The
    calibration's date becomes that file's where it is the newer."""
    p = Path(str(path))
    doc = _cal.read_json(p, "pass the JSON python -m pelib.predict.probes wrote")
    if not isinstance(doc, dict) or doc.get("schema") != MEASURED_SCHEMA:
        raise _cal.CalibrationError(f"{p}: not a measured calibration (schema {MEASURED_SCHEMA!r} expected)")
    env = doc.get("env") or {}
    chip = results.chip_slug(env.get("device") or "none")
    added = []
    for name, (value, src) in _derive(doc).items():
        if name in out.constants and out.constants[name].get("kind") == "measured":
            continue
        kind = "measured" if chip == out.chip else "transferred"
        unit = _cal.REQUIRED.get(name, out.constants.get(name, {}).get("unit", "") or _costs.COSTS[name].unit)
        out.constants[name] = {"value": value, "unit": unit, "kind": kind,
                               "source": (f"{_cal.rel(p)}: {src} (measured on {env.get('device')}, {env.get('date')})"
                                          + ("" if kind == "measured" else f"; transferred to the {out.chip}"))}
        added.append(name)
    bad = _cal.check(out.to_json(), str(p))
    if bad:
        raise _cal.CalibrationError(f"{p}: the added constants are unusable:\n  " + "\n  ".join(bad))
    if added:
        out.protocol += f"; from {_cal.rel(p)} ({env.get('device')}, {str(env.get('date') or '')[:10]}): {', '.join(added)}"
        # the calibration is as new as its newest measured cost (the results tree files it under that date)
        out.date = max(out.date, str(env.get("date") or "")[:10])
    return added


def build(path, gpu: str, transfer_from: str | None = None) -> _cal.Calibration:
    """The model's calibration of `gpu` from pelib.predict.probes' measured file at `path`: its constants over the
    chip's provisional file (pelib/predict/calibrations), sm90/06's launch clock in the timed regime where a run of
    it is committed (clock_ghz.launch06, measured: what converts the blind run's cycles to milliseconds). No
    constant is fitted: one the probes leave unmeasured stays provisional and the calibration says so, unless
    `transfer_from` names a chip whose newest calibration measured it (kind "transferred", its source named).
    `path` may name several probes files, comma-separated: the later ones add what the first did not measure
    (add_probes)."""
    first, *more = [x for x in str(path).split(",") if x]
    p = Path(first)
    doc = _cal.read_json(p, "pass the JSON python -m pelib.predict.probes wrote")
    base = _cal.load(_cal.HERE / f"provisional-{gpu}.json")
    out = from_measured(doc, _cal.rel(p), base)
    lc = launch_clock_06(gpu)
    if lc:
        out.constants["clock_ghz.launch06"] = {"value": lc[0], "unit": "GHz", "kind": "measured", "source": lc[1]}
    if transfer_from:
        other = _cal.load(transfer_from)
        for name, c in list(out.constants.items()):
            o = other.constants.get(name)
            if c.get("kind") == "provisional" and o and o.get("kind") == "measured":
                out.constants[name] = {**o, "kind": "transferred",
                                       "source": f"transferred from {other.path} ({other.device}): {o.get('source', '')}"}
        out.provisional = any(c.get("kind") == "provisional" for c in out.constants.values())
        out.protocol = _protocol(out.path, out.constants, base.path, other)
    for extra in more:      # later probe files (comma-separated): what the first did not measure
        add_probes(out, extra)
    return out


def resolve(which, gpu: str) -> _cal.Calibration:
    """A calibration by chip name or path; a measured file (pelib.predict.probes') is turned into the model's
    constants over the chip's committed calibration (from_measured)."""
    if isinstance(which, _cal.Calibration):
        return which
    p = Path(str(which)) if which else None
    if p is not None and p.suffix == ".json" and p.is_file():
        try:
            doc = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise _cal.CalibrationError(f"{p} is not JSON ({e})") from None
        if isinstance(doc, dict) and doc.get("schema") == MEASURED_SCHEMA:
            return from_measured(doc, _cal.rel(p), _cal.load(gpu))
    return _cal.load(which or gpu)
