"""What limits the Hopper twin, from the committed pelib.energy runs: regimes, one clock, power, energy, probes, floors."""
from __future__ import annotations

import statistics

from .. import problems, results, sol
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
    """The newest committed pelib.energy run of `mode` on `chip` (views.hopper.energy_run), or an error that
    names the command to run."""
    rep = energy_run(chip, mode, root)
    if rep is None:
        raise LimiterError(f"no results/*-{chip}/energy-{mode}.json: run `python -m pelib.energy {mode} --out DIR` "
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


def regime_table(chips=CHIPS, root=None) -> Table:
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
    return Table(rows, "The twin and cuBLAS in two regimes — measured by pelib.energy limiter; burst: 20 launches "
                       "after an idle gap, L2 flushed, median; its clock is our launch's own (per-CTA clock64 over "
                       "globaltimer of the TIMING build) or, for cuBLAS, Nsight Compute's of one launch; M cycles = "
                       "ms x GHz; sustained: 2 s of back-to-back launches, NVML's energy counter. Runs: " + "; ".join(src))


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
    return Table(rows, "Stage 06's SM clock, five ways — measured by pelib.energy limiter (" +
                 ", ".join(run(c, root=root)["evidence"] for c in chips) + "), random inputs; the launch clock is "
                 "the one the other tables use")


def power_table(chips=CHIPS, root=None) -> Table:
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
    return Table(rows, "Does power bind? Stage 06 on zeros against random inputs — measured by pelib.energy "
                       "limiter (" + ", ".join(run(c, root=root)["evidence"] for c in chips) + "); the burst's time, "
                       "its launch clock and the cycles (ms x GHz); the sustained window's mean power against the "
                       "power limit and NVML's clock-event reasons (0x4: software power cap)")


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
    return Table(rows, "Energy per GEMM, sustained regime, random inputs — measured by pelib.energy limiter (" +
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
    return Table(rows, "Stage 06 and its probes in cycles — burst time and launch clock measured by pelib.energy "
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


def estimate_table(chips=CHIPS, root=None) -> Table:
    """The sub-stages that change L2 traffic, priced on each chip's L2 line before they are measured
    (modelled): 06's burst time less the line's ms per KiB times the traffic a tile the stage removes, never
    below the no-memory probe's time on the SMs the stage occupies (a cluster of three leaves some idle); beside
    it the measured burst time, launch clock and ratio to cuBLAS fast accumulation (same run) where a committed
    `pelib.energy stages` run has the stage."""
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
        for key, name in PRICED:
            s = Stage(key)
            t = traffic_per_tile(key, prob, sms)
            removed = sum(base[k] - t[k] for k in ("a", "comb", "c"))
            ctas, where = (resident_ctas(s.exports.cluster_x, root) if s.exports.cluster_x > 1 else (sms, ""))
            floor = line["floor_ms"] * sms / ctas if ctas else None
            est = max(line["t06"] - line["ms_per_kib"] * removed / 1024, floor or 0)
            m = next((r for r in (st or {}).get("summary", []) if r["entry"] == name), {})
            rows.append({"chip": chip_label(rep["env"]["device"]), "stage": name, "L2 KiB/tile removed": round(removed / 1024, 1),
                         "SMs": ctas or "?", "estimate ms": round(est, 3),
                         "bound by": "the no-memory probe on its SMs" if floor and est == floor else "the L2 line",
                         "target ms": TARGET_MS[chip], "measured ms": _r(m.get("burst ms (random)"), 3),
                         "launch GHz": _r(m.get("launch clock (GHz)"), 3),
                         "x cuBLAS fast": _r(m.get("x cuBLAS fast (burst)"), 3)})
            if where and where not in " ".join(notes):
                notes.append(f"SMs of a cluster stage: {ctas} resident CTAs in {where} (a committed launch of "
                             f"clusters of {s.exports.cluster_x})")
            if s.exports.cluster_x > 1 and not ctas and "no committed launch" not in " ".join(notes):
                notes.append(f"no committed launch of clusters of {s.exports.cluster_x}: the cluster stages' "
                             "estimates have no SM floor")
        notes.append(f"{chip.upper()} line: {line['ms_per_kib'] * 1e3:.2f} us per KiB a tile from {rep['_file']}; "
                     + (f"measured: {st['_file']}" if st else "no pelib.energy stages run committed yet"))
    return Table(rows, "The L2 line's price of each sub-stage, written before it runs — modelled: linear in the "
                       "L2 traffic a tile between stage 06 and its one-stream probes, floored by the no-memory probe "
                       "at that probe's own launch clock, scaled to the SMs the stage occupies (both measured by "
                       "pelib.energy limiter; fewer busy SMs may earn a higher clock under the power limit); 06b "
                       "removes no bytes the model counts (its redundant prefetches move no data to an SM)", notes=notes)


def gap_table(chips=CHIPS, root=None) -> Table:
    """What is left between the kernel and its floors, per chip, in one clock: 06's burst (time, launch clock,
    cycles a tile), the no-memory probe, the tensor floor at 06's launch clock, the memory floor at the run's
    copy bandwidth, and the goal with what it would take (the clock at 06's cycles, the cycles at 06's clock)."""
    prob = problems.patch_embed("siglip2")
    rows = []
    for chip in chips:
        rep = run(chip, root=root)
        dev = chip_label(rep["env"]["device"])
        tpc, tc = tiles_per_cta(rep, prob), tensor_cycles_per_tile(chip, prob)
        t06, f06 = _burst(rep, OURS, "random"), launch_clock(rep, OURS)
        cyc06 = t06 * f06 * 1e6
        tn, fn = _burst(rep, PROBE_NONE, "random"), launch_clock(rep, PROBE_NONE)
        tens = [f for f in sol.clocked_floors(prob, GPU[chip], clock_ghz=f06) if f.kind == "tensor"][-1]
        mem_ms = prob.min_bytes / (rep["copy"]["gbps"] * 1e9) * 1e3
        goal = TARGET_MS[chip]
        fast = _burst(rep, FAST, "random")
        rows += [{"chip": dev, "what": "ours (06), burst", "ms": round(t06, 3), "GHz": round(f06, 3),
                  "cycles / tile": round(cyc06 / tpc), "note": f"{fast / t06:.3f}x cuBLAS fast-accum in the same run"},
                 {"chip": dev, "what": "06 with no memory traffic (probe)", "ms": round(tn, 3), "GHz": round(fn, 3),
                  "cycles / tile": round(tn * fn * 1e6 / tpc), "note": "the structure's cycles with nothing to wait for"},
                 {"chip": dev, "what": "tensor floor at 06's launch clock", "ms": round(tens.ms, 3),
                  "GHz": round(f06, 3), "cycles / tile": round(tc), "note": f"{tens.rate:,.0f} TFLOPS dense FP8"},
                 {"chip": dev, "what": "memory floor at the run's copy bandwidth", "ms": round(mem_ms, 3), "GHz": "—",
                  "cycles / tile": round(mem_ms * f06 * 1e6 / tpc),
                  "note": f"{prob.min_bytes / 1e9:.2f} GB at {rep['copy']['gbps']:,.0f} GB/s (cycles at 06's clock)"},
                 {"chip": dev, "what": f"goal {goal:.2f} ms", "ms": goal, "GHz": round(cyc06 / goal / 1e6, 3),
                  "cycles / tile": round(goal * f06 * 1e6 / tpc),
                  "note": f"GHz: the clock 06's cycles would need; cycles: what 06's clock allows; "
                          f"{TARGET_X:.2f}x cuBLAS fast = {fast / TARGET_X:.3f} ms"}]
    return Table(rows, "What is left between the kernel and its floors, in one clock — measured by pelib.energy "
                       "limiter (" + ", ".join(run(c, root=root)["evidence"] for c in chips) + "): burst times and "
                       "launch clocks; floors and the goal's clock and cycles modelled from them (cycles a tile of a "
                       f"CTA, {tiles_per_cta(run(chips[0], root=root), prob):.1f} tiles each)")


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
    return Findings(out, "What the limiter runs say, chip by chip")
