"""Measure every sm90 stage for the timing model's blind validation, each with the SM clock of its launch: one JSON.

    PYTHONPATH=src python3 -m pelib.predict.blind --out DIR         (one GPU call: about 4-6 minutes on an H100)

Run after the predictions are committed. For each entry of ENTRIES (every sm90 stage file at its defaults,
then the production wait builds that pelib.measure.sweep and pelib.measure.hopper_perf time), in a worker process of
pelib.measure.sweep (a trap or hang ends only that worker):
  1. verify on the family's check shapes and the full SigLIP2 problem (NaN-poisoned output, torch
     reference), then time the full problem: median of 20 launches, L2 flushed before each, twice
     (pelib.measure.sweep's variant run: Stage.run and pelib.bench.time_fn, nothing new);
  2. the launch clock, two ways (both kept; "cycles" uses the first):
     timing_run   the stage's TIMING build (same source, plus clock64 records and PE_TIMING_CTA) launched
                  in the same regime (L2 flushed, after a warm-up): each CTA's clock64 over its
                  globaltimer span (pelib.timing.launch_clock) and the TIMING build's own event time, so
                  the records' cost is visible beside the normal build's;
     clock_after  src/kernels/probes/calib_clock.cu launched right after each of 20 flushed launches of the
                  normal build (never inside the timed events): the clock the GPU has just then;
     cycles = median ms x the timing run's median per-SM clock;
  3. every entry: its TIMING run's per-role phases (phases_first: a persistent stage's first 16 tiles, a
     non-persistent stage's one tile per CTA);
     sm90/06 (both wait builds): its per-role phases over every tile (TIMING with PE_TIMING_TILES = 336,
     pelib.measure.hopper_perf.clock_stats), and the first 16 tiles' records saved as an .npz beside the JSON.
Entries run most important first while the budget lasts; one that did not run says so in the JSON.
Cycles, not milliseconds, are what a model is held to: the method of Accel-Sim's correlator (Khairy et al.,
ISCA 2020), which compares simulated and hardware cycles per kernel, with the hardware's clock here measured
per launch instead of locked (clocks are never changed on these machines).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import bench, clock, device
from ..measure import hopper_perf, jobs, probe_kernels, sweep
from .. import timing as _timing
from ..stage import Stage, all_stages

SCHEMA = "pelib.blind/1"
PRODUCTION_WAIT = {"PE_WAIT_KIND": 2}
# The wait builds timed besides the defaults (pelib.measure.sweep.PRODUCTION; pelib.measure.hopper_perf times 10 and 11 too).
WAIT_BUILDS = ("sm90/06_permuted_b", "sm90/10_unrolled_kloop", "sm90/11_a_half_slices")
PHASE_STAGE = "sm90/06_permuted_b"
PHASE_TILES = 336                      # every tile of a CTA of 06 on 132 SMs (330): pelib.measure.hopper_perf.PROFILE_TILES
CLOCK_AFTER = 20                       # flushed launches each followed by the clock probe
# The other entries' TIMING builds: a persistent stage keeps its first FIRST_TILES tiles' records (its per-role
# phases, phases_first); a non-persistent one keeps one tile slot, its CTA's one tile (00: 43,512 CTAs would
# otherwise fill 0.4 GB of records per launch).
CLOCK_ONLY = {"PE_TIMING_TILES": 1}
FIRST_TILES = {"PE_TIMING_TILES": 16}
CLOCK_SPIN = 30_000                    # cycles the clock probe spins (~20 us)
ITERS = 20


# Single-define variants of the stage files, each a define the stage exposes moved one step (ring depth, L2
# prefetch, epilogue TMA store and streaming, comb timing, B permutation, turn, tile width): a blind round
# predicts and measures them beside the stage files, so a mechanism the model does not see shows as a wrong
# define effect (variant against its stage file at its defaults). None is fitted on.
VARIANTS = [
    ("sm90/00a_smem_ring", {"NUM_STAGES": 2}), ("sm90/00b_producer_warpgroup", {"NUM_STAGES": 2}),
    ("sm90/01a_persistent", {"NUM_STAGES": 2}), ("sm90/02_persistent_cluster", {"NUM_STAGES": 3}),
    ("sm90/03_staged_epilogue", {"EPI_TMA_STORE": 0}), ("sm90/03_staged_epilogue", {"NUM_STAGES": 2}),
    ("sm90/03a_register_epilogue", {"EPI_STREAM": 1}), ("sm90/03b_resident_b", {"EPI_STREAM": 1}),
    ("sm90/03c_pingpong", {"EPI_STREAM": 1}), ("sm90/03d_comb_early", {"COMB_EARLY": 0}),
    ("sm90/04_pingpong_resident_b", {"PREFETCH_TILES": 1}), ("sm90/04_pingpong_resident_b", {"NUM_STAGES": 3}),
    ("sm90/06_permuted_b", {"PREFETCH_TILES": 4}), ("sm90/06_permuted_b", {"NUM_STAGES": 3}),
    ("sm90/06_permuted_b", {"TURN_EARLY": 1}), ("sm90/06_permuted_b", {"B_PERM_TMA": 0}),
    ("sm90/06_permuted_b", {"EPI_STREAM": 0}), ("sm90/06_permuted_b", {"BLOCK_N": 128}),
    ("sm90/07a_comb_windows", {"PREFETCH_TILES": 0}), ("sm90/07a_comb_windows", {"NUM_STAGES": 3}),
    ("sm90/09_multicast_pairs", {"NUM_STAGES": 6}), ("sm90/10_unrolled_kloop", {"NUM_STAGES": 3}),
    ("sm90/11_a_half_slices", {"NUM_STAGES": 6}),
]
# The third round's: none of them predicted or measured before (the two earlier rounds' and the 2026-12-01
# review's variants left out), chosen over the same defines before the model predicted them.
VARIANTS_ROUND3 = [
    ("sm90/00a_smem_ring", {"NUM_STAGES": 3}), ("sm90/00c_two_consumers", {"NUM_STAGES": 2}),
    ("sm90/01_warp_specialized", {"NUM_STAGES": 2}), ("sm90/01a_persistent", {"BLOCK_N": 128}),
    ("sm90/02_persistent_cluster", {"CLUSTER_M": 1}), ("sm90/03c_pingpong", {"NUM_STAGES": 3}),
    ("sm90/03d_comb_early", {"EPI_STREAM": 1}), ("sm90/04_pingpong_resident_b", {"PREFETCH_TILES": 0}),
    ("sm90/04_pingpong_resident_b", {"EPI_VEC": 0}), ("sm90/05_multicast_a", {"PREFETCH_TILES": 0}),
    ("sm90/06_permuted_b", {"PREFETCH_TILES": 1}), ("sm90/06a_multicast_a", {"PREFETCH_TILES": 0}),
    ("sm90/06b_one_prefetcher", {"NUM_STAGES": 3}), ("sm90/07_comb_resident", {"PREFETCH_TILES": 0}),
    ("sm90/07a_comb_windows", {"B_PERM_TMA": 0}), ("sm90/07b_multicast_a", {"PREFETCH_TILES": 0}),
    ("sm90/08_comb_init", {"NUM_STAGES": 3}), ("sm90/09_multicast_pairs", {"PREFETCH_TILES": 0}),
    ("sm90/11a_two_groups_queued", {"NUM_STAGES": 6}), ("sm90/12_tma_store", {"NUM_STAGES": 2}),
    ("sm90/13_one_prefetcher", {"PREFETCH_TILES": 0}),
]
# The fourth round's: again none predicted or measured before (the earlier rounds', the 2026-12-01 review's and
# the 2026-12-02 contention and headline runs' builds left out), over ring depth, prefetch depth, epilogue
# vector width and streaming, B's permutation and the turn's timing; chosen before the model predicted them.
VARIANTS_ROUND4 = [
    ("sm90/00b_producer_warpgroup", {"NUM_STAGES": 3}), ("sm90/00c_two_consumers", {"NUM_STAGES": 3}),
    ("sm90/01a_persistent", {"NUM_STAGES": 3}), ("sm90/02_persistent_cluster", {"NUM_STAGES": 2}),
    ("sm90/03a_register_epilogue", {"NUM_STAGES": 3}), ("sm90/03b_resident_b", {"EPI_VEC": 0}),
    ("sm90/03c_pingpong", {"EPI_VEC": 0}), ("sm90/03d_comb_early", {"NUM_STAGES": 3}),
    ("sm90/05_multicast_a", {"EPI_STREAM": 1}), ("sm90/06a_multicast_a", {"NUM_STAGES": 3}),
    ("sm90/06b_one_prefetcher", {"PREFETCH_TILES": 0}), ("sm90/07_comb_resident", {"EPI_STREAM": 0}),
    ("sm90/08_comb_init", {"TURN_EARLY": 1}), ("sm90/07b_multicast_a", {"NUM_STAGES": 3}),
    ("sm90/08_comb_init", {"PREFETCH_TILES": 1}), ("sm90/09_multicast_pairs", {"NUM_STAGES": 8}),
    ("sm90/10_unrolled_kloop", {"B_PERM_TMA": 0}), ("sm90/11_a_half_slices", {"PREFETCH_TILES": 0}),
    ("sm90/11a_two_groups_queued", {"EPI_STREAM": 0}), ("sm90/12_tma_store", {"PREFETCH_TILES": 0}),
    ("sm90/13_one_prefetcher", {"NUM_STAGES": 3}), ("sm90/13_one_prefetcher", {"EPI_STREAM": 0}),
]
# The fifth round's: none predicted or measured before (every earlier round's, the review's and the 2026-12-02
# runs' builds left out), over ring depth, prefetch depth, B's permutation and the turn's timing.
VARIANTS_ROUND5 = [
    ("sm90/00a_smem_ring", {"NUM_STAGES": 6}), ("sm90/00b_producer_warpgroup", {"NUM_STAGES": 6}),
    ("sm90/00c_two_consumers", {"BLOCK_N": 128}), ("sm90/01_warp_specialized", {"NUM_STAGES": 3}),
    ("sm90/11a_two_groups_queued", {"PREFETCH_TILES": 1}), ("sm90/03a_register_epilogue", {"NUM_STAGES": 2}),
    ("sm90/03c_pingpong", {"NUM_STAGES": 2}), ("sm90/03d_comb_early", {"NUM_STAGES": 2}),
    ("sm90/04_pingpong_resident_b", {"NUM_STAGES": 2}), ("sm90/05_multicast_a", {"PREFETCH_TILES": 1}),
    ("sm90/06_permuted_b", {"PREFETCH_TILES": 3}), ("sm90/06a_multicast_a", {"TURN_EARLY": 1}),
    ("sm90/06b_one_prefetcher", {"B_PERM_TMA": 0}), ("sm90/07_comb_resident", {"NUM_STAGES": 3}),
    ("sm90/07a_comb_windows", {"PREFETCH_TILES": 1}), ("sm90/07b_multicast_a", {"PREFETCH_TILES": 1}),
    ("sm90/08_comb_init", {"B_PERM_TMA": 0}), ("sm90/09_multicast_pairs", {"PREFETCH_TILES": 1}),
    ("sm90/10_unrolled_kloop", {"PREFETCH_TILES": 1}), ("sm90/11_a_half_slices", {"NUM_STAGES": 4}),
    ("sm90/12_tma_store", {"B_PERM_TMA": 0}), ("sm90/13_one_prefetcher", {"PREFETCH_TILES": 3}),
]
# The sixth round's: none predicted or measured before (every earlier round's, the review's and the 2026-12-02
# runs' builds left out), over tile width and the consumers' count, the cluster, ring depth, epilogue vector width
# and streaming, the comb's and the turn's timing and B's permutation.
VARIANTS_ROUND6 = [
    ("sm90/00_tma_wgmma", {"BLOCK_N": 256}), ("sm90/00a_smem_ring", {"NUM_STAGES": 5}),
    ("sm90/00b_producer_warpgroup", {"WG_M": 1}), ("sm90/00c_two_consumers", {"NUM_CONSUMERS": 1}),
    ("sm90/01_warp_specialized", {"BLOCK_N": 128}), ("sm90/01a_persistent", {"NUM_CONSUMERS": 1}),
    ("sm90/02_persistent_cluster", {"BLOCK_N": 128}), ("sm90/03_staged_epilogue", {"CLUSTER_M": 1}),
    ("sm90/03a_register_epilogue", {"CLUSTER_M": 1}), ("sm90/03b_resident_b", {"BLOCK_N": 128}),
    ("sm90/03c_pingpong", {"BLOCK_N": 128}), ("sm90/03d_comb_early", {"EPI_VEC": 0}),
    ("sm90/04_pingpong_resident_b", {"COMB_EARLY": 0}), ("sm90/05_multicast_a", {"NUM_STAGES": 3}),
    ("sm90/06a_multicast_a", {"B_PERM_TMA": 0}), ("sm90/06b_one_prefetcher", {"TURN_EARLY": 1}),
    ("sm90/07_comb_resident", {"TURN_EARLY": 1}), ("sm90/07b_multicast_a", {"EPI_STREAM": 0}),
    ("sm90/08_comb_init", {"EPI_STREAM": 0}), ("sm90/09_multicast_pairs", {"B_PERM_TMA": 0}),
    ("sm90/10_unrolled_kloop", {"TURN_EARLY": 1}), ("sm90/11_a_half_slices", {"B_PERM_TMA": 0}),
    ("sm90/11a_two_groups_queued", {"NUM_STAGES": 4}), ("sm90/12_tma_store", {"TURN_EARLY": 1}),
    ("sm90/13_one_prefetcher", {"B_PERM_TMA": 0}),
]
# The seventh round's: none predicted or measured before (every earlier round's, the review's, the sweep's and
# the 2026-12-02/03 runs' builds left out), chosen before the model with the load/store path (the lsu probe)
# predicted them: tile width and the consumers' count, epilogue vector width and streaming, ring depth, prefetch
# depth, staging buffers, the comb's and the turn's timing and B's permutation.
VARIANTS_ROUND7 = [
    ("sm90/00_tma_wgmma", {"BLOCK_N": 64}), ("sm90/00a_smem_ring", {"BLOCK_N": 256}),
    ("sm90/00b_producer_warpgroup", {"BLOCK_N": 64}), ("sm90/00c_two_consumers", {"BLOCK_N": 192}),
    ("sm90/01_warp_specialized", {"NUM_CONSUMERS": 1}), ("sm90/02_persistent_cluster", {"NUM_CONSUMERS": 1}),
    ("sm90/03_staged_epilogue", {"BLOCK_N": 128}), ("sm90/03a_register_epilogue", {"BLOCK_N": 128}),
    ("sm90/03b_resident_b", {"NUM_CONSUMERS": 1}), ("sm90/03c_pingpong", {"BLOCK_N": 192}),
    ("sm90/03d_comb_early", {"BLOCK_N": 128}), ("sm90/05_multicast_a", {"EPI_VEC": 0}),
    ("sm90/05_multicast_a", {"COMB_EARLY": 0}), ("sm90/06_permuted_b", {"NUM_STAGES": 2}),
    ("sm90/06a_multicast_a", {"EPI_STREAM": 0}), ("sm90/06b_one_prefetcher", {"EPI_STREAM": 0}),
    ("sm90/07_comb_resident", {"B_PERM_TMA": 0}), ("sm90/07b_multicast_a", {"TURN_EARLY": 1}),
    ("sm90/08_comb_init", {"PREFETCH_TILES": 0}), ("sm90/09_multicast_pairs", {"EPI_STREAM": 0}),
    ("sm90/10_unrolled_kloop", {"EPI_STREAM": 0}), ("sm90/11_a_half_slices", {"EPI_STREAM": 0}),
    ("sm90/11a_two_groups_queued", {"PREFETCH_TILES": 0}), ("sm90/12_tma_store", {"PREFETCH_TILES": 1}),
    ("sm90/13_one_prefetcher", {"NUM_STAGES": 2}),
]
VARIANT_SETS = {"round2": VARIANTS, "round3": VARIANTS_ROUND3, "round4": VARIANTS_ROUND4, "round5": VARIANTS_ROUND5,
                "round6": VARIANTS_ROUND6, "round7": VARIANTS_ROUND7}


def entries(variants: bool | str = False) -> list[tuple[str, dict]]:
    """(stage, defines) measured, in order: 06 first (the calibration stage), then every sm90 stage file at its
    defaults, then the PE_WAIT_KIND=2 builds of WAIT_BUILDS, then (with `variants`: True for VARIANTS, or a name
    of VARIANT_SETS) the single-define variants. The timing model predicts exactly these."""
    if variants and variants is not True and variants not in VARIANT_SETS:
        raise ValueError(f"no variant set {variants!r}: name one of {sorted(VARIANT_SETS)}")
    chosen = VARIANTS if variants is True else VARIANT_SETS.get(variants or "", [])
    keys = [s.key for s in all_stages(("sm90",)) if not s.defines]
    if PHASE_STAGE not in keys:
        raise ValueError(f"{PHASE_STAGE} is not an sm90 stage file any more: update pelib.predict.blind.PHASE_STAGE")
    order = [PHASE_STAGE] + [k for k in keys if k != PHASE_STAGE]
    out = [(k, {}) for k in order[:1]] + [(PHASE_STAGE, dict(PRODUCTION_WAIT))] + \
          [(k, {}) for k in order[1:]] + [(k, dict(PRODUCTION_WAIT)) for k in WAIT_BUILDS if k != PHASE_STAGE]
    if variants:
        missing = [k for k, _ in chosen if k not in keys]
        if missing:
            raise ValueError(f"pelib.predict.blind's variants name {missing}, no sm90 stage file any more: update them")
        out += [(k, dict(d)) for k, d in chosen]
    return out


def label(key: str, defines: dict) -> str:
    return Stage(key, defines).label


def timing_stage(key: str, defines: dict) -> Stage:
    """The stage whose TIMING build gives an entry's launch clock and its per-role phases: 06 as it is (its first
    16 tiles' records are kept), a persistent stage with FIRST_TILES, a non-persistent one with CLOCK_ONLY."""
    if key == PHASE_STAGE:
        return Stage(key, defines)
    persistent = int(Stage(key, defines).exports.get("grid_kind", 0)) != 0
    return Stage(key, {**defines, **(FIRST_TILES if persistent else CLOCK_ONLY)})


def phase_summary(tm) -> dict:
    """A TIMING run's per-role phases, compact: {phase: {"avg", "spread", "warps": {warp: avg}}} (cycles)."""
    return {p: {"avg": r["avg"], "spread": r["spread"], "warps": {str(w): st["avg"] for w, st in r["warps"].items()}}
            for p, r in tm.summary().items()}


# ---- worker ------------------------------------------------------------------------------------------

def _clock_plan(grid: int, where):
    """A launch of the clock probe on `grid` SMs, its buffers on `where`: (plan, its timing buffer, layout)."""
    return probe_kernels.clock_plan(grid, where, CLOCK_SPIN)


def _timing_run(s: Stage, prob, t, iters: int = 5) -> tuple[_timing.Timing, dict]:
    """The TIMING build on the full problem: warm-up, then `iters` flushed launches timed with events; the
    records of the last one and the launches' median ms."""
    import torch
    cfg = s.launch_config(prob, info=device.current())
    lay = _timing.layout(s.timing_build(), cfg.ctas)
    buf = _timing.alloc(lay, device=t["out"].device)       # beside the inputs
    plan = s.plan(prob, t, timing=buf, grid=cfg.grid[0])
    plan.run()
    plan.wait(30.0)
    flush = bench.L2Flush()
    ms = []
    for _ in range(iters):
        flush()
        buf.zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        plan.run()
        e1.record()
        plan.wait(30.0)
        ms.append(e0.elapsed_time(e1))
    return _timing.decode(buf, lay), {"median_ms": float(np.median(ms)), "ms": ms}


def _clock_after(s: Stage, prob, t, n: int = CLOCK_AFTER) -> dict:
    """n flushed launches of the normal build, each followed at once by the clock probe on every SM: the
    probe's launch clocks (pelib.timing.launch_clock), median over the n."""
    info = device.current()
    plan = s.plan(prob, t)
    probe, tb, lay = _clock_plan(info.sm_count, t["out"].device)
    flush = bench.L2Flush()
    plan.run()
    plan.wait(30.0)
    ghz, per_sm_min, per_sm_max = [], [], []
    for _ in range(n):
        flush()
        tb.zero_()
        plan.run()
        probe.run()
        probe.wait(30.0)
        c = _timing.decode(tb, lay).launch_clock(min_ns=CLOCK_SPIN / 4.0)
        if c.get("ghz"):
            ghz.append(c["ghz"])
            per_sm_min.append(c["per_sm_ghz"]["min"])
            per_sm_max.append(c["per_sm_ghz"]["max"])
    return {"ghz": float(np.median(ghz)) if ghz else None, "n": len(ghz),
            "ghz_min": float(min(ghz)) if ghz else None, "ghz_max": float(max(ghz)) if ghz else None,
            "per_sm_min": float(min(per_sm_min)) if per_sm_min else None,
            "per_sm_max": float(max(per_sm_max)) if per_sm_max else None}


def _run_entry(job, ctx: jobs.Context, res: dict) -> None:
    """Verify and time (pelib.measure.sweep's variant job), then the launch clock two ways; 06's phases over every tile."""
    sweep.variant(job, ctx, res)
    if not res.get("ok"):
        return
    out_dir = job["out_dir"]
    s = Stage(job["stage"], job["defines"])
    prob, t, _ = ctx.data.full(s)
    tm, tms = _timing_run(timing_stage(job["stage"], job["defines"]), prob, t)
    lc = tm.launch_clock(min_ns=50_000.0)
    res["timing_run"] = {"launch_clock": lc, **tms,
                         "ms_over_normal": tms["median_ms"] / res["median_ms"] if res.get("median_ms") else None}
    res["clock_after"] = _clock_after(s, prob, t)
    res["phases_first"] = {"phases": phase_summary(tm), "tiles": int(tm.layout.tiles)}
    ghz = lc.get("ghz")
    res["cycles"] = res["median_ms"] * 1e6 * ghz if ghz else None
    res["clock_source"] = "timing_run"
    if job["stage"] == PHASE_STAGE:
        name = f"records-sm90-06{'-wait2' if job['defines'] else ''}.npz"
        tm.meta.update(stage=s.key, defines=s.defines, evidence="measured", clock="clock64 cycles")
        tm.save(Path(out_dir) / name, device=device.current().name, date=clock.stamp(), git=bench.git_revision())
        res["records"] = name
        full = Stage(job["stage"], {**job["defines"], "PE_TIMING_TILES": PHASE_TILES})
        tall, tall_ms = _timing_run(full, prob, t, iters=3)
        res["phases"] = {"every_tile": hopper_perf.clock_stats(tall), "timing_ms": tall_ms["median_ms"],
                         "launch_clock": tall.launch_clock(min_ns=50_000.0),
                         "summary_first16": phase_summary(tm)}


KINDS = {"blind": _run_entry}    # this runner's job kind (pelib.measure.jobs' worker protocol)


# ---- the command ---------------------------------------------------------------------------------------

def table_lines(doc: dict) -> list[str]:
    lines = [f"{doc['evidence']}; copy {doc['copy']['gbps']:.0f} GB/s; clock: {doc['clock_method']}",
             f"{'entry':<44}{'check':>6}{'ms':>9}{'rep':>9}{'GHz':>7}{'after':>7}{'Mcycles':>9}{'TIMING/normal':>14}"]
    for r in doc["entries"]:
        if r.get("median_ms"):
            tr = r.get("timing_run", {})
            lines.append(f"{r['label'][:44]:<44}{'ok':>6}{r['median_ms']:>9.4f}{r.get('repeat_median_ms', 0):>9.4f}"
                         f"{(tr.get('launch_clock') or {}).get('ghz') or 0:>7.3f}{(r.get('clock_after') or {}).get('ghz') or 0:>7.3f}"
                         f"{(r.get('cycles') or 0) / 1e6:>9.3f}{tr.get('ms_over_normal') or 0:>14.3f}")
        else:
            lines.append(f"{r['label'][:44]:<44}{'FAIL':>6}  {sweep.fail_reason(r)[:80]}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.predict.blind", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory for blind-<device>.json, its log and 06's records")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run (entries run while it lasts)")
    ap.add_argument("--iters", type=int, default=ITERS)
    ap.add_argument("--variants", nargs="?", const=True, default=False, choices=[True, *VARIANT_SETS],
                    help="also single-define variants (a blind round): VARIANTS, or the named set of VARIANT_SETS")
    ap.add_argument("--stage", action="append", default=None, help="only these stage files (family/name)")
    jobs.worker_args(ap)
    a = ap.parse_args(argv)
    if a.worker:
        jobs.worker(KINDS, a.worker, a.data, a.start, a.iters)
        return 0
    t_start = time.time()
    log = jobs.session("python -m pelib.predict.blind", "sm_90a", a.out, "blind.log")
    info, env, out_dir, log_path = log.info, log.env, log.out_dir, log.path
    todo = [(k, d) for k, d in entries(a.variants) if not a.stage or k in a.stage]
    builds = builds_of(todo)
    t0 = time.time()
    errs = _build_all(builds)
    probe_kernels.probe_build("clock", {})
    for (k, d, t), e in zip(builds, errs):
        if e:
            log(f"[build] {label(k, d)}{' TIMING' if t else ''}: FAILED {e.splitlines()[0]}")
    log(f"[build] {len(builds)} builds in {time.time() - t0:.0f} s")
    copy = bench.copy_bandwidth_gb_s()
    log(f"[copy] device-to-device {copy['gbps']:.0f} GB/s (read + write)")
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    data_dir = tempfile.mkdtemp(prefix="pelib-blind-", dir=shm)
    try:
        jobs.save_full(Stage(todo[0][0]), data_dir)
        import torch
        torch.cuda.empty_cache()
        batch = [{"kind": "blind", "stage": k, "defines": d, "label": label(k, d), "out_dir": str(out_dir)}
                 for k, d in todo]
        left = a.budget - (time.time() - t_start) - 20
        res = jobs.run(batch, data_dir, a.iters, left, job_timeout_s=120.0, module="pelib.predict.blind",
                       show=sweep.show_job)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    doc = {"schema": SCHEMA, "evidence": f"measured ({info.name}, {env['date'][:10]})", "env": env, "copy": copy,
           "problem": {"name": "siglip2 (full)", "m": Stage(todo[0][0]).problem("full").m,
                       "n": Stage(todo[0][0]).problem("full").n, "k": Stage(todo[0][0]).problem("full").k},
           "regime": f"short burst: median of {a.iters} launches, L2 flushed before each, after a warm-up",
           "clock_method": "cycles = median ms x the median per-SM clock64/globaltimer of the stage's TIMING build "
                           "run in the same regime (timing_run); clock_after: the clock probe right after each of "
                           f"{CLOCK_AFTER} flushed launches of the normal build",
           "entries": res, "log": log_path.name}
    dev = "".join(c if c.isalnum() else "-" for c in info.name).strip("-").lower()
    path = out_dir / f"blind-{dev}.json"
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    log("")
    for ln in table_lines(doc):
        log(ln)
    log(f"wrote {path} ({time.time() - t_start:.0f} s; {clock.stamp()})")
    log.close()
    return 0


def builds_of(todo) -> list[tuple[str, dict, bool]]:
    """(stage, defines, TIMING?) of every build the entries need, built before the workers start so that they
    find them cached: the normal build, the clock's TIMING build (timing_stage), 06's every-tile TIMING build."""
    out = [(k, d, False) for k, d in todo]
    for k, d in todo:
        ts = timing_stage(k, d)
        out += [(ts.key, ts.defines, t) for t in (False, True) if ts.defines != d or t]
        if k == PHASE_STAGE:
            out += [(k, {**d, "PE_TIMING_TILES": PHASE_TILES}, t) for t in (False, True)]
    return out


def _build_one(item):
    k, d, t = item
    try:
        s = Stage(k, d)
        s.timing_build() if t else s.build
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:1000]


def _build_all(builds) -> list:
    """Compile the builds in parallel processes (NVRTC fills the shared cache); the errors, in order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    workers = min(len(builds), max(1, (os.cpu_count() or 2) - 1), 8)
    if workers <= 1:
        return [_build_one(b) for b in builds]
    # spawn, not fork: this process may already hold a CUDA context
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
        return list(ex.map(_build_one, builds))


if __name__ == "__main__":
    sys.exit(main())
