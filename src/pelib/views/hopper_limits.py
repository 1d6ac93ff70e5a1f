"""What limits the Hopper twin, from the committed pelib.measure.energy runs: regimes, one clock, power, energy, probes, floors."""
from __future__ import annotations

import re
import statistics

from .. import problems, results, sol, stages
from ..facts import Table
from ..kinds.sm90 import l2_traffic
from ..stage import Stage
from .hopper import chip_label, energy_run

CHIPS = ("h100", "h200")
OURS, FAST, PLAIN = "06", "cuBLAS fast-accum GEMM", "cuBLAS GEMM"
PROBE_A, PROBE_C, PROBE_NONE = ("probe 06 PROBE_NO_A", "probe 06 PROBE_NO_STORE",
                                "probe 06 PROBE_NO_A,PROBE_NO_STORE")
GPU = {"h100": "H100 SXM", "h200": "H200"}
TARGET_MS = {"h100": 0.80, "h200": 0.75}       # the goals of the limiter issue (burst regime)
TARGET_X = 1.15                                 # ... and against cuBLAS fast-accumulation in the same run
# The sub-stages the L2 line prices (the ones whose idea changes L2 traffic), with their parent.
PRICED = (("sm90/07a_comb_windows", "07a"), ("sm90/06a_multicast_a", "06a"), ("sm90/07b_multicast_a", "07b"),
          ("sm90/06b_one_prefetcher", "06b"))


class LimiterError(LookupError):
    """A committed run lacks what a limiter view reads; the message names the run and the command."""

def run(chip: str, mode: str = "limiter", root=None) -> dict:
    """The newest committed pelib.measure.energy run of `mode` on `chip` (views.hopper.energy_run), or an error that
    names the command to run."""
    rep = energy_run(chip, mode, root)
    if rep is None:
        raise LimiterError(f"no results/*-{chip}/energy-{mode}.json: run `python -m pelib.measure.energy {mode} --out DIR` "
                           f"on an {chip.upper()} and commit its output")
    return rep


def _row(rep: dict, entry: str) -> dict:
    r = next((x for x in rep.get("summary", []) if x.get("entry") == entry), None)
    if r is None:
        raise LimiterError(f"{rep.get('_file')}: no entry {entry!r} in its summary")
    return r


def launch_clock(rep: dict, entry: str, inputs: str = "random") -> float | None:
    """The median launch clock (GHz) of an entry's timed bursts on an input set: per-CTA clock64 over
    globaltimer of each launch of its TIMING build (None for a library call, which has no such build)."""
    g = [c for b in rep.get("burst", []) if b["entry"] == entry and b["inputs"] == inputs and "stamped" in b
         for c in b["stamped"]["clock_ghz"] if c]
    return statistics.median(g) if g else None


def ncu_row(rep: dict, entry: str) -> dict:
    return next((r for r in rep.get("ncu_per_tile", []) if r["entry"] == entry), {})


def clock_of(rep: dict, entry: str, inputs: str = "random") -> tuple[float | None, str]:
    """(GHz, how) of an entry's burst: its own launch clock where it has a TIMING build; for a library call on
    random inputs, Nsight Compute's cycles over time of one launch (clocks left as they are); else none."""
    c = launch_clock(rep, entry, inputs)
    if c:
        return c, "launch clock"
    n = ncu_row(rep, entry).get("sm_clock_ghz")
    if n and inputs == "random":
        return n, "Nsight Compute, one launch"
    return None, ""


def tiles_per_cta(rep: dict, prob=None) -> float:
    """64 x 256 output tiles per CTA of the 132-CTA (one per SM) grid of stage 06."""
    prob = prob or problems.patch_embed(rep.get("problem", "siglip2"))
    return (prob.m / 64) * (prob.n / 256) / int(rep["env"]["sm_count"])


def tensor_cycles_per_tile(chip: str, prob=None) -> float:
    """One 64 x 256 tile's FP8 wgmma work at the dense rate, in SM cycles (3,072 for K = 768)."""
    prob = prob or problems.patch_embed("siglip2")
    return 2 * 64 * 256 * prob.k / sol.spec(GPU[chip]).fp8_flops_per_clk_sm


def _burst(rep, entry, inputs):
    return _row(rep, entry).get(f"burst ms ({inputs})")


def regime_table(chips=CHIPS, root=None, columns=None) -> Table:
    """Per chip, ours (06, 10) and cuBLAS in both regimes: the burst (L2 flushed, median of 20) on random inputs
    and on zeros with the clock of the launch and the cycles it spent, and the sustained window (2 s of
    back-to-back launches) with NVML's joules per launch and mean power."""
    rows, src = [], []
    for chip in chips:
        rep = run(chip, root=root)
        src.append(f"{rep['_file']} ({rep['evidence']})")
        for e in (OURS, "10", FAST, PLAIN):
            s = _row(rep, e)
            for inputs in ("random", "zeros"):
                ms = s.get(f"burst ms ({inputs})")
                ghz, how = clock_of(rep, e, inputs)
                rows.append({"chip": chip_label(rep["env"]["device"]), "entry": e, "inputs": inputs,
                             "burst ms": round(ms, 3) if ms else "—",
                             "clock GHz": round(ghz, 3) if ghz else "—", "clock from": how or "—",
                             "M cycles": round(ms * ghz, 3) if ms and ghz else "—",
                             "sustained ms": _r(s.get(f"sustained ms ({inputs})"), 3),
                             "J / GEMM": _r(s.get(f"J/launch ({inputs})"), 3),
                             "W": _r(s.get("power W"), 0) if inputs == "random" else "—"})
    return Table(rows, "The twin and cuBLAS in two regimes — measured by pelib.measure.energy limiter; burst: 20 launches "
                       "after an idle gap, L2 flushed, median; its clock is our launch's own (per-CTA clock64 over "
                       "globaltimer of the TIMING build) or, for cuBLAS, Nsight Compute's of one launch; M cycles = "
                       "ms x GHz; sustained: 2 s of back-to-back launches, NVML's energy counter. Runs: " + "; ".join(src)).only(columns)


def _r(v, nd):
    return round(v, nd) if isinstance(v, (int, float)) else "—"


def clock_sources_table(chips=CHIPS, root=None) -> Table:
    """Stage 06's SM clock as each source of the limiter run reads it, per chip and regime: the launch's own
    clock (burst), the clock probe launched right after (burst, and after a sustained window), Nsight
    Compute's cycles over time of one launch, and NVML's sampled SM clock over the sustained windows."""
    rows = []
    for chip in chips:
        rep = run(chip, root=root)
        s = _row(rep, OURS)
        sus = [x.get("clock_after_ghz") for x in rep.get("sustained", []) if x["entry"] == OURS
               and x["inputs"] == "random" and x.get("clock_after_ghz")]
        for regime, how, ghz in (
                ("burst", "launch clock: per-CTA clock64 over globaltimer of each timed launch", launch_clock(rep, OURS)),
                ("burst", "clock probe launched right after each timed launch", s.get("clock after (GHz)")),
                ("one launch", "Nsight Compute: SM cycles over time (clocks left as they are)",
                 ncu_row(rep, OURS).get("sm_clock_ghz")),
                ("sustained", "NVML's SM clock sampled every 5 ms, mean", (s.get("NVML SM MHz") or 0) / 1e3 or None),
                ("sustained", "clock probe right after the window", statistics.median(sus) if sus else None)):
            rows.append({"chip": chip_label(rep["env"]["device"]), "regime": regime, "source": how, "GHz": _r(ghz, 3)})
    return Table(rows, "Stage 06's SM clock, five ways — measured by pelib.measure.energy limiter (" +
                 ", ".join(run(c, root=root)["evidence"] for c in chips) + "), random inputs; the launch clock is "
                 "the one the other tables use")


def power_table(chips=CHIPS, root=None, columns=None) -> Table:
    """Does power bind? Per chip, stage 06 on zeros against random inputs in the burst regime (time, launch
    clock, cycles) and under sustained load (power against the limit, NVML's clock-event reasons)."""
    rows = []
    for chip in chips:
        rep = run(chip, root=root)
        v = verdict(rep)
        sus = [x for x in rep.get("sustained", []) if x["entry"] == OURS and x["inputs"] == "random"]
        reasons = sorted({k for x in sus for k, names in (x.get("nvml") or {}).get("reasons", {}).items()
                          for _ in [0] if names})
        rows.append({"chip": chip_label(rep["env"]["device"]),
                     "ms random / zeros": f"{v['ms']['random']:.3f} / {v['ms']['zeros']:.3f}",
                     "launch GHz random / zeros": f"{v['ghz']['random']:.3f} / {v['ghz']['zeros']:.3f}",
                     "time zeros/random": round(v["ms"]["zeros"] / v["ms"]["random"], 3),
                     "clock zeros/random": round(v["ghz"]["zeros"] / v["ghz"]["random"], 3),
                     "cycles zeros/random": round(v["cycles_ratio"], 3),
                     "sustained W (limit)": f"{_row(rep, OURS).get('power W', 0):.0f} "
                                            f"({(rep.get('nvml') or {}).get('power_limit_w', 0):.0f})",
                     "NVML reasons": ", ".join(reasons) or "—", "what sets the time": v["binds"]})
    return Table(rows, "Does power bind? Stage 06 on zeros against random inputs — measured by pelib.measure.energy "
                       "limiter (" + ", ".join(run(c, root=root)["evidence"] for c in chips) + "); the burst's time, "
                       "its launch clock and the cycles (ms x GHz); the sustained window's mean power against the "
                       "power limit and NVML's clock-event reasons (0x4: software power cap)").only(columns)


def verdict(rep: dict, entry: str = OURS) -> dict:
    """Zeros against random inputs for one entry: times, launch clocks, the cycles ratio, and which of time
    and cycles stayed put: cycles fixed while the clock moved means the clock sets the time; time fixed
    while the clock moved means something counted in nanoseconds does (memory)."""
    ms = {k: _burst(rep, entry, k) for k in ("random", "zeros")}
    ghz = {k: launch_clock(rep, entry, k) for k in ("random", "zeros")}
    if not all(ms.values()) or not all(ghz.values()):
        raise LimiterError(f"{rep.get('_file')}: {entry} lacks a burst time or launch clock on random and zeros")
    t_ratio = ms["zeros"] / ms["random"]
    c_ratio = t_ratio * ghz["zeros"] / ghz["random"]
    binds = ("the clock (cycles stay, time follows the clock)" if abs(c_ratio - 1) < abs(t_ratio - 1)
             else "not the clock (time stays while the clock moves)")
    return {"ms": ms, "ghz": ghz, "time_ratio": t_ratio, "cycles_ratio": c_ratio, "binds": binds,
            "clock_bound": abs(c_ratio - 1) < abs(t_ratio - 1)}


def energy_table(chips=CHIPS, root=None) -> Table:
    """Energy per GEMM in the sustained regime (2 s of back-to-back launches at the power limit): ours against
    cuBLAS fast accumulation (GEMM only: ours adds the bias and position embedding too), the ratio, the time
    and power of each window, random inputs."""
    rows = []
    for chip in chips:
        rep = run(chip, root=root)
        ref = _row(rep, FAST)
        for e in (OURS, "10", FAST, PLAIN):
            s = _row(rep, e)
            rows.append({"chip": chip_label(rep["env"]["device"]), "entry": e, "J / GEMM": _r(s.get("J/launch (random)"), 3),
                         "of cuBLAS fast J": _r(s["J/launch (random)"] / ref["J/launch (random)"], 3),
                         "sustained ms": _r(s.get("sustained ms (random)"), 3), "W": _r(s.get("power W"), 0),
                         "NVML SM MHz": _r(s.get("NVML SM MHz"), 0)})
    return Table(rows, "Energy per GEMM, sustained regime, random inputs — measured by pelib.measure.energy limiter (" +
                 ", ".join(run(c, root=root)["evidence"] for c in chips) + "): NVML's total-energy counter over "
                 "2 s of back-to-back launches, three rounds interleaved with cuBLAS, median")


# ---- the probes, in cycles, and the L2 traffic each removes ---------------------------------------------------

def traffic_per_tile(stage_key: str, prob=None, sm_count: int = 132) -> dict:
    """Modelled bytes per 64 x 256 output tile that cross L2 for a stage: its L2 <-> SM transfers
    (pelib.kinds.sm90.l2_traffic: A's reads by every CTA that needs them, comb, the stores) and the problem's
    DRAM traffic through L2 (A filled once, C written back once)."""
    prob = prob or problems.patch_embed("siglip2")
    tiles = (prob.m / 64) * (prob.n / 256)
    t = l2_traffic(Stage(stage_key), prob, sm_count)
    return {"a": t["a"] / tiles, "comb": t["comb"] / tiles, "c": t["c"] / tiles,
            "a_dram": prob.m * prob.k / tiles, "c_dram": 2 * prob.m * prob.n / tiles}


def removed_by(probe: str, prob=None) -> float:
    """Modelled L2 traffic per tile a probe of 06 takes away: without A, A's reads and its DRAM fill;
    without stores, the stores and their write-back."""
    t = traffic_per_tile("sm90/06_permuted_b", prob)
    return {PROBE_A: t["a"] + t["a_dram"], PROBE_C: t["c"] + t["c_dram"],
            PROBE_NONE: t["a"] + t["a_dram"] + t["c"] + t["c_dram"], OURS: 0.0}[probe]


def probe_table(chips=CHIPS, root=None) -> Table:
    """Stage 06 and its probes (06 with A's loads, the stores, or both taken out) restated in cycles: burst
    time, launch clock, cycles per launch and per tile of a CTA, the tensor cores' share (one tile's wgmma at
    the dense FP8 rate over the tile's cycles), and the L2 and DRAM traffic each probe removes (modelled)."""
    rows = []
    prob = problems.patch_embed("siglip2")
    for chip in chips:
        rep = run(chip, root=root)
        tpc, tc = tiles_per_cta(rep, prob), tensor_cycles_per_tile(chip, prob)
        t = traffic_per_tile("sm90/06_permuted_b", prob)
        dram = {OURS: 0.0, PROBE_A: t["a_dram"], PROBE_C: t["c_dram"], PROBE_NONE: t["a_dram"] + t["c_dram"]}
        for e in (OURS, PROBE_A, PROBE_C, PROBE_NONE):
            ms, ghz = _burst(rep, e, "random"), launch_clock(rep, e)
            cyc = ms * ghz * 1e6
            rows.append({"chip": chip_label(rep["env"]["device"]), "entry": e.replace("probe 06 ", "06 without ").replace(
                "PROBE_NO_A,PROBE_NO_STORE", "A and stores").replace("PROBE_NO_A", "A").replace("PROBE_NO_STORE", "stores"),
                "burst ms": round(ms, 3), "launch GHz": round(ghz, 3), "M cycles": round(cyc / 1e6, 3),
                "cycles / tile": round(cyc / tpc), "tensor busy": f"{100 * tc / (cyc / tpc):.0f}%",
                "L2 KiB/tile removed": round(removed_by(e, prob) / 1024), "DRAM KiB/tile removed": round(dram[e] / 1024)})
    return Table(rows, "Stage 06 and its probes in cycles — burst time and launch clock measured by pelib.measure.energy "
                       "limiter (" + ", ".join(run(c, root=root)["evidence"] for c in chips) + "); cycles = ms x launch "
                       f"GHz, per tile of a CTA ({tiles_per_cta(run(chips[0], root=root), prob):.1f} tiles of 64 x 256 "
                       f"each); tensor busy = {tensor_cycles_per_tile(chips[0], prob):,.0f} cycles of wgmma a tile "
                       "(dense FP8 rate) over them; traffic removed modelled (pelib.kinds.sm90.l2_traffic and the "
                       "problem's DRAM bytes)")


def l2_line(rep: dict, prob=None) -> dict:
    """The limiter run's price of L2 traffic on one chip (modelled from measured points): the burst time falls
    from 06's to the one-stream probes' as 64 KiB a tile leave; ms per KiB a tile, and the no-memory probe's
    time and clock (the floor of the line: there the kernel runs out of traffic to remove)."""
    t06 = _burst(rep, OURS, "random")
    pa, pc = _burst(rep, PROBE_A, "random"), _burst(rep, PROBE_C, "random")
    ra, rc = removed_by(PROBE_A, prob), removed_by(PROBE_C, prob)
    slope = (2 * t06 - pa - pc) / (ra + rc)         # ms per byte a tile, through the mean of the two probes
    return {"t06": t06, "ms_per_kib": slope * 1024, "floor_ms": _burst(rep, PROBE_NONE, "random"),
            "floor_ghz": launch_clock(rep, PROBE_NONE)}


def resident_ctas(cluster: int, root=None) -> tuple[int | None, str]:
    """CTAs resident at once for a (cluster, 1, 1) cluster of the resident-B stages, from the newest committed
    stage list that launched one (cuOccupancyMaxActiveClusters x cluster), and that list's file."""
    for f in reversed(results.files("sm90-stages.json", root)):
        doc = results.load(f)
        for s in doc.get("stages", []):
            ln = s.get("launch") or {}
            if (ln.get("cluster") or [1])[0] == cluster and ln.get("persistent") and ln.get("active_clusters"):
                return ln["active_clusters"] * cluster, f"results/{f.parent.name}/{f.name}"
    return None, ""


# Each sub-stage's estimate as its header's Why section words it, per chip: the phrase, verbatim (checked against
# the header, so an edited header is caught, never silently re-read), and how the phrase reads: "ms" a range of
# the burst time; "ms vs 06" a change of 06's time; "% faster" a speed-up over 06; "% vs 06" a signed change of
# 06's time. A relative estimate is applied to 06 of the same measured run (same build, same regime).
HEADER_ESTIMATES = {
    "07a": {"h100": ("0 to 3 % faster on the H100", "% faster"), "h200": ("0 to 2 % on the H200", "% faster")},
    "06a": {"h100": ("H100 0.84 to 0.88 ms", "ms"), "h200": ("H200 0.78 to 0.84 ms", "ms")},
    "07b": {"h100": ("H100 0.78 to 0.84 ms", "ms"), "h200": ("H200 0.77 to 0.82 ms", "ms")},
    "06b": {"h100": ("H100 0 to -0.08 ms", "ms vs 06"), "h200": ("H200 0 to -0.03 ms", "ms vs 06")},
    "11a": {"h100": ("-3 to +2 % on the H100", "% vs 06"), "h200": ("0 to +3 % on the H200", "% vs 06")},
}
SUBSTAGES = PRICED + (("sm90/11a_two_groups_queued", "11a"),)
_RANGE = re.compile(r"([-+]?\d+(?:\.\d+)?) to ([-+]?\d+(?:\.\d+)?) (ms|%)")


def header_estimate(key: str, name: str, chip: str, t06: float) -> dict:
    """A sub-stage's estimate for one chip as its header states it (written before its first run): the phrase
    and the burst-time range (ms) it gives, relative phrases applied to 06's time `t06` of the same run."""
    quote, reads = HEADER_ESTIMATES[name][chip]
    why = " ".join(stages.read_header(key).why.split())
    if quote not in why:
        raise LimiterError(f"{key}: its header no longer says {quote!r}; update HEADER_ESTIMATES in "
                           "pelib.views.hopper_limits to the phrase the header now gives for the " + chip.upper())
    a, b, unit = _RANGE.search(quote).groups()
    a, b = float(a), float(b)
    ends = {"ms": (a, b), "ms vs 06": (t06 + a, t06 + b), "% faster": (t06 * (1 - a / 100), t06 * (1 - b / 100)),
            "% vs 06": (t06 * (1 + a / 100), t06 * (1 + b / 100))}[reads]
    return {"quote": quote, "reads": reads, "lo": min(ends), "hi": max(ends)}


def estimate_verdict(est: dict, ms: float, spread: tuple[float, float], t06: float,
                     spread06: tuple[float, float] | None = None) -> dict:
    """Did a header's estimate hold? `ms` the measured median, `spread` its p10 and p90, `t06` 06's median in
    the same run and `spread06` its p10 and p90. Held: the median inside the range; held within the spread:
    the range meets p10..p90. Else how far outside (ms), and the sign: whether the change against 06 went the
    way the range said (a range on both sides of 06's time says no way; a median inside 06's own p10..p90 is
    no change at all)."""
    lo, hi = est["lo"], est["hi"]
    held = lo <= ms <= hi
    near = not held and spread[0] <= hi and spread[1] >= lo
    off = 0.0 if held else (ms - hi if ms > hi else ms - lo)
    said = ("faster" if hi <= t06 and lo < t06 else "slower" if lo >= t06 and hi > t06 else None)
    still = spread06 is not None and spread06[0] <= ms <= spread06[1]
    did = None if still else "faster" if ms < t06 else "slower"
    sign = None if said is None or did is None else said == did
    change = ms / t06 - 1
    words = ("held" if held else "held within the run's spread" if near else
             f"not held: {abs(off):.3f} ms {'slower' if off > 0 else 'faster'} than its range")
    words += (f"; {100 * change:+.1f} % vs 06 against {100 * (lo / t06 - 1):+.1f} to "
              f"{100 * (hi / t06 - 1):+.1f} % estimated")
    if not held:
        if still:
            words += ", inside 06's own spread (no change)"
        elif sign is not None:
            far = (lo if said == "faster" else hi) / t06 - 1
            words += (f", the sign right, {change / far:.1f}x the largest change estimated" if sign and far
                      else ", the sign right" if sign else ", the sign wrong")
    return {"held": held or near, "off_ms": off, "sign_right": sign, "no_change": still, "change": change,
            "text": words}


def burst_spread(rep: dict, entry: str, inputs: str = "random") -> tuple[float, float] | None:
    """The p10 and p90 (ms) of an entry's timed burst (20 launches) on an input set."""
    b = next((x for x in rep.get("burst", []) if x["entry"] == entry and x["inputs"] == inputs), None)
    return (b["plain"]["p10_ms"], b["plain"]["p90_ms"]) if b and "p10_ms" in b.get("plain", {}) else None


def blind_run(chip: str, root=None) -> dict | None:
    """The newest committed pelib.predict.blind run on `chip` (every sm90 stage in the burst regime with its launch
    clock), with its path under '_file'; None when there is none."""
    files = [f for f in results.files("blind-*.json", root) if results.chip(f.parent) == chip]
    if not files:
        return None
    rep = results.load(files[-1])
    rep["_file"] = f"results/{files[-1].parent.name}/{files[-1].name}"
    return rep


def blind_ms(rep: dict | None, key: str, defines: dict | None = None) -> float | None:
    """A stage's burst median (ms) in a pelib.predict.blind run, for one set of defines (the default build: none)."""
    e = next((x for x in (rep or {}).get("entries", []) if x.get("stage") == key
              and (x.get("defines") or {}) == (defines or {}) and x.get("ok")), None)
    return e.get("median_ms") if e else None


def estimate_table(chips=CHIPS, root=None, columns=None) -> Table:
    """Each sub-stage's estimate beside its measurement, per chip: the phrase of its header (written before its
    first run) and the burst range it gives, the L2 line's price (modelled from the limiter run: 06's time less
    the line's ms per KiB times the traffic a tile the stage removes, never below the no-memory probe on the SMs
    the stage occupies), then the committed `pelib.measure.energy stages` run: burst time, launch clock, sustained joules
    per GEMM against cuBLAS fast accumulation, and the verdict (did the estimate hold, by how much, the sign);
    the last column is the same stage against 06 in the blind run (default waits), a second witness."""
    prob = problems.patch_embed("siglip2")
    base = traffic_per_tile("sm90/06_permuted_b", prob)
    rows, notes = [], []
    for chip in chips:
        rep = run(chip, root=root)
        line, sms = l2_line(rep, prob), int(rep["env"]["sm_count"])
        try:
            st = run(chip, "stages", root)
        except LimiterError:
            st = None
        bl = blind_run(chip, root)
        b06 = blind_ms(bl, "sm90/06_permuted_b")
        t06 = _row(st, OURS)["burst ms (random)"] if st else None
        fast_j = _row(st, FAST).get("J/launch (random)") if st else None
        for key, name in SUBSTAGES:
            s = Stage(key)
            row = {"chip": chip_label(rep["env"]["device"]), "stage": name}
            if (key, name) in PRICED:
                t = traffic_per_tile(key, prob, sms)
                removed = sum(base[k] - t[k] for k in ("a", "comb", "c"))
                ctas, where = (resident_ctas(s.exports.cluster_x, root) if s.exports.cluster_x > 1 else (sms, ""))
                floor = line["floor_ms"] * sms / ctas if ctas else None
                est = max(line["t06"] - line["ms_per_kib"] * removed / 1024, floor or 0)
                row.update({"L2 KiB/tile removed": round(removed / 1024, 1), "SMs": ctas or "?",
                            "L2 line ms": round(est, 3),
                            "line bound by": "no-memory probe on its SMs" if floor and est == floor else "L2 line"})
                if where and where not in " ".join(notes):
                    notes.append(f"SMs of a cluster stage: {ctas} resident CTAs in {where} (a committed launch of "
                                 f"clusters of {s.exports.cluster_x})")
                if s.exports.cluster_x > 1 and not ctas and "no committed launch" not in " ".join(notes):
                    notes.append(f"no committed launch of clusters of {s.exports.cluster_x}: the cluster stages' "
                                 "estimates have no SM floor")
            else:
                row.update({"L2 KiB/tile removed": "—", "SMs": "—", "L2 line ms": "—", "line bound by": "—"})
            m = next((r for r in (st or {}).get("summary", []) if r["entry"] == name), {})
            ms = m.get("burst ms (random)")
            if t06:
                he = header_estimate(key, name, chip, t06)
                row.update({"header says": he["quote"], "header ms": f"{he['lo']:.3f}–{he['hi']:.3f}"})
            else:
                he = None
                row.update({"header says": HEADER_ESTIMATES[name][chip][0], "header ms": "—"})
            row.update({"measured ms": _r(ms, 3), "launch GHz": _r(m.get("launch clock (GHz)"), 3),
                        "J / GEMM": _r(m.get("J/launch (random)"), 3),
                        "J / cuBLAS fast J": _r(m["J/launch (random)"] / fast_j, 3)
                        if fast_j and m.get("J/launch (random)") else "—",
                        "x cuBLAS fast": _r(m.get("x cuBLAS fast (burst)"), 3)})
            sp = burst_spread(st, name) if st else None
            row["verdict"] = (estimate_verdict(he, ms, sp or (ms, ms), t06, burst_spread(st, OURS))["text"]
                              if he and ms else "not measured yet")
            bm = blind_ms(bl, key)
            row["blind vs 06"] = f"{100 * (bm / b06 - 1):+.1f} %" if bm and b06 else "—"
            rows.append(row)
        notes.append(f"{chip.upper()} line: {line['ms_per_kib'] * 1e3:.2f} us per KiB a tile from {rep['_file']}; "
                     + (f"measured: {st['_file']} ({st['evidence']}), 06 there {t06:.3f} ms at "
                        f"{_row(st, OURS).get('launch clock (GHz)'):.3f} GHz, {_row(st, OURS)['J/launch (random)']:.3f} J"
                        f"; cuBLAS fast {_row(st, FAST)['burst ms (random)']:.3f} ms, {fast_j:.3f} J"
                        if st else "no pelib.measure.energy stages run committed yet")
                     + (f"; blind: {bl['_file']} ({bl['evidence']}, default waits)" if bl else ""))
    return Table(rows, "Each sub-stage's estimate, written before it ran, beside its measurement — header ms: "
                       "the stage header's own estimate (modelled, back of the envelope), relative ones applied to 06 "
                       "of the measured run; L2 line ms: modelled, linear in the L2 traffic a tile between stage 06 "
                       "and its one-stream probes, floored by the no-memory probe at its launch clock on the SMs the "
                       "stage occupies (pelib.measure.energy limiter); measured: pelib.measure.energy stages, burst (20 launches, L2 "
                       "flushed, median, PE_WAIT_KIND=2) with its launch clock, sustained joules per GEMM (NVML, one "
                       "2-s window), random inputs; the verdict reads the header's range against the median and its "
                       "p10–p90; blind vs 06: pelib.predict.blind, the default (bounded-wait) builds", notes=notes).only(columns)


def substage_table(chips=CHIPS, root=None, columns=None) -> Table:
    """What each idea did, against 06 in the same pelib.measure.energy stages run: the burst time, the launch clock and
    the cycles (ms x GHz) as ratios, so a time that fell through a higher clock (fewer joules a tile under the
    power limit) is told from one that fell through fewer cycles; the L2 bytes a tile the stage leaves
    (modelled) and the sustained joules per GEMM."""
    prob = problems.patch_embed("siglip2")
    base = traffic_per_tile("sm90/06_permuted_b", prob)
    rows, src = [], []
    for chip in chips:
        st = run(chip, "stages", root)
        src.append(f"{st['_file']} ({st['evidence']})")
        s06 = _row(st, OURS)
        t06, f06 = s06["burst ms (random)"], s06["launch clock (GHz)"]
        for key, name in ((("sm90/06_permuted_b", OURS),) + SUBSTAGES + (("sm90/07_comb_resident", "07"),
                                                                         ("sm90/10_unrolled_kloop", "10"))):
            m = _row(st, name)
            ms, ghz = m["burst ms (random)"], m.get("launch clock (GHz)")
            t = traffic_per_tile(key, prob, int(st["env"]["sm_count"]))
            ln = (st.get("launch") or {}).get(name, {})
            rows.append({"chip": chip_label(st["env"]["device"]), "stage": name,
                         "SMs": (ln.get("grid") or ["?"])[0], "burst ms": round(ms, 4), "time vs 06": f"{ms / t06:.3f}",
                         "launch GHz": _r(ghz, 3), "clock vs 06": f"{ghz / f06:.3f}" if ghz else "—",
                         "cycles vs 06": f"{ms * ghz / (t06 * f06):.3f}" if ghz else "—",
                         "L2 KiB/tile": round(sum(t[k] for k in ("a", "comb", "c")) / 1024, 1),
                         "of 06's": f"{sum(t[k] for k in ('a', 'comb', 'c')) / sum(base[k] for k in ('a', 'comb', 'c')):.2f}",
                         "J / GEMM": _r(m.get("J/launch (random)"), 3),
                         "J / cuBLAS fast J": _r(m.get("J / cuBLAS fast J"), 3) if name != OURS else
                         _r(s06["J/launch (random)"] / _row(st, FAST)["J/launch (random)"], 3)})
    return Table(rows, "What each idea did against 06 in the same run — measured by pelib.measure.energy stages (" +
                 "; ".join(src) + "): burst time (20 launches, L2 flushed, median, PE_WAIT_KIND=2), the launch's "
                 "own clock, cycles = ms x GHz; sustained joules per GEMM from NVML over one 2-s window; L2 bytes a "
                 "tile between L2 and the SMs modelled (pelib.kinds.sm90.l2_traffic: A, comb, the stores)").only(columns)


def best_stage(st: dict) -> str:
    """Our fastest verified entry of a pelib.measure.energy stages run in the burst regime (random inputs): stages only,
    neither a probe nor a library call."""
    ours = {e["name"] for e in st.get("entries", []) if e.get("stage") and not e.get("probe")
            and (st.get("verified", {}).get(e["name"]) or {}).get("ok")}
    rows = [r for r in st.get("summary", []) if r["entry"] in ours and r.get("burst ms (random)")]
    if not rows:
        raise LimiterError(f"{st.get('_file')}: no verified stage with a burst time")
    return min(rows, key=lambda r: r["burst ms (random)"])["entry"]


def tiles_per_cta_of(st: dict, entry: str, prob=None) -> float:
    """64 x 256 output tiles per CTA of an entry's launch in a run (its grid: 132 CTAs, or 117 for clusters
    of three), else of the 132-CTA grid."""
    g = ((st.get("launch") or {}).get(entry) or {}).get("grid")
    prob = prob or problems.patch_embed(st.get("problem", "siglip2"))
    return (prob.m / 64) * (prob.n / 256) / (g[0] if g else int(st["env"]["sm_count"]))


def gap_table(chips=CHIPS, root=None) -> Table:
    """What is left between the kernel and its floors, per chip, in one clock: 06's burst (time, launch clock,
    cycles a tile) in the limiter run and, where a pelib.measure.energy stages run is committed, its fastest stage and
    no-memory probe; the tensor floor at the fastest stage's launch clock, the memory floor at the run's copy
    bandwidth, and the goal with what it would take (the clock at the stage's cycles, the cycles at its clock)."""
    prob = problems.patch_embed("siglip2")
    rows, src = [], []
    for chip in chips:
        rep = run(chip, root=root)
        src.append(rep["evidence"])
        try:
            st = run(chip, "stages", root)
        except LimiterError:
            st = None
        dev = chip_label(rep["env"]["device"])
        tpc = tiles_per_cta(rep, prob)
        t06, f06 = _burst(rep, OURS, "random"), launch_clock(rep, OURS)
        cyc06 = t06 * f06 * 1e6
        fast = _burst(rep, FAST, "random")
        rows.append({"chip": dev, "what": "ours (06), burst, limiter run", "ms": round(t06, 3), "GHz": round(f06, 3),
                     "cycles / tile": round(cyc06 / tpc), "note": f"{fast / t06:.3f}x cuBLAS fast-accum in the same run"})
        probe_run, best, tb, fb, tpc_b, fast_b = rep, OURS, t06, f06, tpc, fast
        if st:
            src.append(f"{st['_file']}")
            best = best_stage(st)
            s = _row(st, best)
            tb, fb, tpc_b = s["burst ms (random)"], s["launch clock (GHz)"], tiles_per_cta_of(st, best, prob)
            fast_b = _row(st, FAST)["burst ms (random)"]
            probe_run = st
            rows.append({"chip": dev, "what": f"fastest stage ({best}), burst, stages run", "ms": round(tb, 3),
                         "GHz": round(fb, 3), "cycles / tile": round(tb * fb * 1e6 / tpc_b),
                         "note": f"{fast_b / tb:.3f}x cuBLAS fast-accum in the same run; "
                                 f"{tpc_b:.1f} tiles a CTA"})
        tn = _row(probe_run, PROBE_NONE)["burst ms (random)"]
        fn = launch_clock(probe_run, PROBE_NONE) or _row(probe_run, PROBE_NONE).get("launch clock (GHz)")
        tens = [f for f in sol.clocked_floors(prob, GPU[chip], clock_ghz=fb) if f.kind == "tensor"][-1]
        mem_ms = prob.min_bytes / (probe_run["copy"]["gbps"] * 1e9) * 1e3
        goal = TARGET_MS[chip]
        cycb = tb * fb * 1e6
        rows += [{"chip": dev, "what": "06 with no memory traffic (probe)" + (", stages run" if st else ""),
                  "ms": round(tn, 3), "GHz": round(fn, 3),
                  "cycles / tile": round(tn * fn * 1e6 / tpc), "note": "the structure's cycles with nothing to wait for"},
                 {"chip": dev, "what": f"tensor floor at {best}'s launch clock", "ms": round(tens.ms, 3),
                  "GHz": round(fb, 3), "cycles / tile": round(tensor_cycles_per_tile(chip, prob)),
                  "note": f"{tens.rate:,.0f} TFLOPS dense FP8"},
                 {"chip": dev, "what": "memory floor at the run's copy bandwidth", "ms": round(mem_ms, 3), "GHz": "—",
                  "cycles / tile": round(mem_ms * fb * 1e6 / tpc_b),
                  "note": f"{prob.min_bytes / 1e9:.2f} GB at {probe_run['copy']['gbps']:,.0f} GB/s "
                          f"(cycles at {best}'s clock)"},
                 {"chip": dev, "what": f"goal {goal:.2f} ms", "ms": goal, "GHz": round(cycb / goal / 1e6, 3),
                  "cycles / tile": round(goal * fb * 1e6 / tpc_b),
                  "note": f"GHz: the clock {best}'s cycles would need; cycles: what {best}'s clock allows; "
                          f"{TARGET_X:.2f}x cuBLAS fast = {fast_b / TARGET_X:.3f} ms"}]
    return Table(rows, "What is left between the kernel and its floors, in one clock — measured by pelib.measure.energy "
                       "limiter and stages (" + ", ".join(src) + "): burst times and launch clocks; floors and the "
                       "goal's clock and cycles modelled from them (cycles a tile of a CTA: "
                       f"{tiles_per_cta(run(chips[0], root=root), prob):.1f} tiles each on 132 CTAs)")


def targets_table(chips=CHIPS, root=None, columns=None) -> Table:
    """The limiter issue's targets per chip, met or missed, from the newest pelib.measure.energy stages run: the burst
    time of our fastest stage against the goal, its ratio to cuBLAS fast accumulation (GEMM only) in the same
    run, and its sustained joules per GEMM against cuBLAS's; with what is left, read from gap_table."""
    gap = gap_table(chips, root)
    rows, src = [], []
    for chip in chips:
        st = run(chip, "stages", root)
        src.append(f"{st['_file']} ({st['evidence']})")
        dev = chip_label(st["env"]["device"])
        best = best_stage(st)
        s, fast = _row(st, best), _row(st, FAST)
        ms, x = s["burst ms (random)"], fast["burst ms (random)"] / s["burst ms (random)"]
        probe = next(r for r in gap.rows if r["chip"] == dev and r["what"].startswith("06 with no memory"))
        tens = next(r for r in gap.rows if r["chip"] == dev and r["what"].startswith("tensor floor"))
        mem = next(r for r in gap.rows if r["chip"] == dev and r["what"].startswith("memory floor"))
        goal_row = next(r for r in gap.rows if r["chip"] == dev and r["what"].startswith("goal"))
        j, jf = s["J/launch (random)"], fast["J/launch (random)"]
        sp, sp06, t06 = burst_spread(st, best), burst_spread(st, OURS), _row(st, OURS)["burst ms (random)"]
        need = fast["burst ms (random)"] / TARGET_X
        low = min((r for r in st["summary"] if r["entry"] in {e["name"] for e in st["entries"]
                                                              if e.get("stage") and not e.get("probe")}
                   and r.get("J/launch (random)")), key=lambda r: r["J/launch (random)"])
        rows += [{"chip": dev, "target": f"burst time <= {TARGET_MS[chip]:.2f} ms", "best stage": best,
                  "measured": f"{ms:.3f} ms (p10–p90 {sp[0]:.3f}–{sp[1]:.3f}) at {s['launch clock (GHz)']:.3f} GHz; "
                              f"06 {t06:.3f} ms (p10–p90 {sp06[0]:.3f}–{sp06[1]:.3f})",
                  "met": "met" if ms <= TARGET_MS[chip] else "missed",
                  "what is left": f"{ms - TARGET_MS[chip]:+.3f} ms to the goal (it needs {goal_row['GHz']:.3f} GHz at "
                                  f"{best}'s cycles, or {goal_row['cycles / tile']:,} cycles a tile at its clock); "
                                  f"no-memory probe {probe['ms']:.3f} ms at {probe['GHz']:.3f} GHz; tensor floor "
                                  f"{tens['ms']:.3f} ms at {best}'s clock; memory floor {mem['ms']:.3f} ms"},
                 {"chip": dev, "target": f">= {TARGET_X:.2f}x cuBLAS fast-accum GEMM only (same run)", "best stage": best,
                  "measured": f"{x:.3f}x ({fast['burst ms (random)']:.3f} / {ms:.3f} ms)",
                  "met": "met" if x >= TARGET_X else "missed",
                  "what is left": (f"{ms - need:.3f} ms above the {need:.3f} ms it needs" if x < TARGET_X else
                                   f"{need - ms:.3f} ms under the {need:.3f} ms it needs")},
                 {"chip": dev, "target": "J per GEMM below cuBLAS fast-accum's (sustained)", "best stage": best,
                  "measured": f"{j:.3f} J against {jf:.3f} J (x{j / jf:.3f})", "met": "met" if j < jf else "missed",
                  "what is left": f"lowest of ours: {low['entry']} {low['J/launch (random)']:.3f} J "
                                  f"(x{low['J/launch (random)'] / jf:.3f}); one 2-s window each"}]
    return Table(rows, "The targets, per chip — measured by pelib.measure.energy stages (" + "; ".join(src) + "): burst "
                       "time (20 launches, L2 flushed, median, random inputs, verified) of our fastest stage with its "
                       "launch clock, cuBLAS fast accumulation (GEMM only) in the same run, sustained joules per GEMM "
                       "(NVML); what is left: the floors of the gap table (the no-memory probe measured, the tensor "
                       "and memory floors modelled from the measured clock and copy bandwidth)").only(columns)


# ---- the findings, each with its numbers and where they come from ------------------------------------------------

class Findings(list):
    """Bullet points that render as Markdown in a notebook and as text elsewhere."""

    def __init__(self, items, title: str = ""):
        super().__init__(items)
        self.title = title

    def _repr_markdown_(self) -> str:
        head = f"**{self.title}**\n\n" if self.title else ""
        return head + "\n".join(f"- {x}" for x in self)

    def __str__(self) -> str:
        return (self.title + "\n" if self.title else "") + "\n".join(f"- {x}" for x in self)


def findings(chips=CHIPS, root=None) -> Findings:
    """The limiter's statements, each computed from the committed runs and labelled with its evidence."""
    out = []
    prob = problems.patch_embed("siglip2")
    for chip in chips:
        rep = run(chip, root=root)
        ev = rep["evidence"]
        v = verdict(rep)
        tpc = tiles_per_cta(rep, prob)
        f06, t06 = v["ghz"]["random"], v["ms"]["random"]
        fast = _row(rep, FAST)
        ours = _row(rep, OURS)
        nc = ncu_row(rep, FAST).get("sm_clock_ghz")
        line = l2_line(rep, prob)
        n06 = ncu_row(rep, OURS).get("sm_clock_ghz")
        out.append(f"**{rep['env']['device']}, the clock.** In a burst, stage 06 runs at {f06:.3f} GHz (its launch "
                   f"clock), against {_row(rep, OURS)['clock after (GHz)']:.3f} GHz read by the clock probe right "
                   f"after it. Nsight Compute reads 06 at {n06:.3f} GHz ({100 * abs(n06 - f06) / f06:.1f} % from its "
                   f"launch clock) and cuBLAS fast accumulation, which records no clock of its own, at {nc:.3f} GHz: "
                   f"{t06 * f06:.3f} M cycles for 06 and {fast['burst ms (random)'] * nc:.3f} M for "
                   f"cuBLAS ({ev}).")
        out.append(f"**{rep['env']['device']}, zeros against random.** 06 runs {v['ms']['zeros']:.3f} ms on zeros "
                   f"against {t06:.3f} ms, at a launch clock of {v['ghz']['zeros']:.3f} against {f06:.3f} GHz: time "
                   f"x{v['time_ratio']:.3f}, clock x{v['ghz']['zeros'] / f06:.3f}, cycles x{v['cycles_ratio']:.3f}. "
                   f"What sets the time: {v['binds']} ({ev}).")
        out.append(f"**{rep['env']['device']}, energy per GEMM (sustained, random inputs).** Ours "
                   f"{ours['J/launch (random)']:.3f} J against cuBLAS fast accumulation's {fast['J/launch (random)']:.3f} J "
                   f"(x{ours['J/launch (random)'] / fast['J/launch (random)']:.3f}), at {ours['power W']:.0f} and "
                   f"{fast['power W']:.0f} W of a {rep['nvml']['power_limit_w']:.0f} W limit: "
                   f"{ours['sustained ms (random)']:.3f} ms against {fast['sustained ms (random)']:.3f} ms, ours doing "
                   f"the bias and position add as well ({ev}).")
        pa, pc, pn = (_burst(rep, p, "random") for p in (PROBE_A, PROBE_C, PROBE_NONE))
        tr = traffic_per_tile("sm90/06_permuted_b", prob)
        out.append(f"**{rep['env']['device']}, the probes.** Without A {pa:.3f} ms, without the stores {pc:.3f} ms "
                   f"({100 * abs(pa - pc) / pc:.1f} % apart): each takes {removed_by(PROBE_A, prob) / 1024:.0f} KiB of "
                   f"L2 traffic a tile away, while their DRAM bytes differ twofold ({tr['a_dram'] / 1024:.0f} and "
                   f"{tr['c_dram'] / 1024:.0f} KiB; modelled): {line['ms_per_kib'] * 1e3:.2f} us per KiB a tile "
                   f"between 06 and them. Without both, {pn:.3f} ms = "
                   f"{pn * line['floor_ghz']:.3f} M cycles at its launch clock of {line['floor_ghz']:.3f} GHz, "
                   f"{pn * line['floor_ghz'] * 1e6 / tpc:,.0f} cycles a tile against "
                   f"{tensor_cycles_per_tile(chip, prob):,.0f} of wgmma ({ev}).")
        try:
            st = run(chip, "stages", root)
        except LimiterError:
            continue
        out += substage_findings(st, prob)
    return Findings(out, "What the limiter runs say, chip by chip")


def _vs06(st: dict, name: str) -> str:
    s, s06 = _row(st, name), _row(st, OURS)
    t, f = s["burst ms (random)"] / s06["burst ms (random)"], s["launch clock (GHz)"] / s06["launch clock (GHz)"]
    return f"{name} {s['burst ms (random)']:.3f} ms (time x{t:.3f}, clock x{f:.3f}, cycles x{t * f:.3f})"


def substage_findings(st: dict, prob=None) -> list[str]:
    """Two statements a chip from a pelib.measure.energy stages run: what each sub-stage did against 06 (time, launch
    clock, cycles, L2 bytes a tile), and the fastest stage against cuBLAS fast accumulation and the goals."""
    prob = prob or problems.patch_embed("siglip2")
    dev, ev, chip = st["env"]["device"], st["evidence"], results.chip_slug(st["env"]["device"])
    s06, fast = _row(st, OURS), _row(st, FAST)
    sp06 = burst_spread(st, OURS)
    base = sum(traffic_per_tile("sm90/06_permuted_b", prob)[k] for k in ("a", "comb", "c"))
    share = {n: sum(traffic_per_tile(k, prob)[x] for x in ("a", "comb", "c")) / base for k, n in SUBSTAGES}
    best = best_stage(st)
    b = _row(st, best)
    sp = burst_spread(st, best)
    jb, jf = b["J/launch (random)"], fast["J/launch (random)"]
    return [
        f"**{dev}, the sub-stages against 06** ({s06['burst ms (random)']:.3f} ms, p10–p90 "
        f"{sp06[0]:.3f}–{sp06[1]:.3f}, at {s06['launch clock (GHz)']:.3f} GHz, same run). Fewer L2 bytes a tile "
        f"(modelled; 07a {share['07a']:.2f}, 06a {share['06a']:.2f}, 07b {share['07b']:.2f} of 06's): "
        + "; ".join(_vs06(st, n) for n in ("07a", "06a", "07b")) + f" (06a and 07b on "
        f"{((st.get('launch') or {}).get('06a') or {}).get('grid', ['?'])[0]} SMs). The same bytes: "
        + "; ".join(_vs06(st, n) for n in ("06b", "11a")) + f" ({ev}).",
        f"**{dev}, the fastest stage and cuBLAS.** {best}: {b['burst ms (random)']:.3f} ms (p10–p90 "
        f"{sp[0]:.3f}–{sp[1]:.3f}) at {b['launch clock (GHz)']:.3f} GHz, "
        f"x{fast['burst ms (random)'] / b['burst ms (random)']:.3f} cuBLAS fast accumulation's "
        f"{fast['burst ms (random)']:.3f} ms (goal x{TARGET_X:.2f}) and "
        f"{b['burst ms (random)'] - TARGET_MS[chip]:+.3f} ms from the {TARGET_MS[chip]:.2f} ms goal; sustained, "
        f"{jb:.3f} J a GEMM against cuBLAS's {jf:.3f} J (x{jb / jf:.3f}), one 2-s window each ({ev})."]
