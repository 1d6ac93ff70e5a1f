"""The B200 side: its constants from public sources, the rest carried over from the Hopper calibration, one
clock fitted on one recorded point; the lab's history predicted against its records.

    cal = b200_calibration(load("h100"))             # the committed provisional B200 calibration is this
    rows = history(cal)                              # every FP8 stage 00-09 (08a, 08b): predicted vs recorded
    sweep = nvfp4_ring(cal)                          # nvfp4/01 over its ring depths vs the NVFP4 log

The fitted parameter (issue 31's rule: one parameter, one point; a point used for fitting validates
nothing): the SM clock under the lab's kernel, from the lab's own clock64 record of the 5-warp baseline
(W1's tile period, pelib.records, times the tiles of a cluster, over the recorded 0.579 ms).
Everything not public or fitted is "transferred" from the Hopper calibration it was built from (named
in each source): TMA, mbarrier, SASS issue and store costs; DRAM latency under load. What has no Hopper
counterpart (the TMEM load's latency) is "provisional" until a B200 measures it.
"""
from __future__ import annotations

from .. import records
from ..stage import Stage
from ..measure.variants import HOST_ONLY, SKIPPED_BY_RULE, VARIANTS
from . import calibration as _cal
from .model import predict

# B200 constants from public sources (each with its source; issue 31's list)
PUBLIC = {
    "sm_count": (148, "SMs", "148 SMs (2 dies x 74): cudaGetDeviceProperties in github.com/pytorch/ao/pull/4002; "
                 "chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut"),
    "l2.bytes": (126.5e6, "B", "126.5 MB L2 on two dies (driver-reported, github.com/pytorch/ao/pull/4002)"),
    "tensor.flop_per_clk_sm": (16384, "FLOP/clk/SM", "dense FP8 4.5 PFLOPS at 1000 W = 148 SMs x 16,384 FLOP/clk x "
                               "~1.86 GHz (glennklockwood.com/garden/processors/B200; NVIDIA HGX B200 datasheet): one "
                               "tcgen05 128x256x32 FP8 per SM every 128 cycles"),
    "tensor.fp4_flop_per_clk_sm": (32768, "FLOP/clk/SM", "dense FP4 9 PFLOPS at 1000 W: 2 x the FP8 rate per SM "
                                   "(glennklockwood.com/garden/processors/B200)"),
    "dram.bandwidth_gbps": (6720.0, "GB/s", "HBM3e 7.67 TB/s peak (7,680-bit bus x 3,996 MHz x 2, "
                            "github.com/pytorch/ao/pull/4002), about 6.72 TB/s achievable (CCCL DeviceTransform "
                            "add, github.com/NVIDIA/cccl/pull/7391)"),
}
CLOCK_POINT = "5-warp baseline"      # the recorded point the one clock is fitted on (not a validation point)


def fitted_clock() -> tuple[float, str]:
    """(GHz, source): W1's clock64 tile period of the 5-warp baseline x the tiles of one cluster / its ms."""
    w1 = records.w1_reconciliation().get("W1", {})
    period = float(sum(w1.get(k, 0) for k in ("tma0_wait", "kloop", "epi_wait")))   # W1's tile: its three phases
    states = {k.state: k for k in records.later_states()}
    ms = states[CLOCK_POINT].ms
    tiles = 10_878 // 74            # 928,256 x 768 in 256 x 256 tiles over 148 SMs = 74 clusters of 2
    if not period:
        raise _cal.CalibrationError("the W1 record has no tile period to fit the B200 clock on")
    ghz = period * tiles / (ms * 1e6)
    return ghz, (f"FITTED on one recorded point, the {CLOCK_POINT} ({ms} ms, "
                 f"{states[CLOCK_POINT].source.note}, {states[CLOCK_POINT].source.section}): W1's clock64 tile period "
                 f"{period:,.0f} cycles (tma0_wait + kloop + epi_wait, fp8-megakernel-w1-stall-isolation.md, "
                 f"Reconciliation with clock64, via pelib.records) x {tiles} tiles "
                 f"per cluster / {ms} ms; that point validates nothing")


def b200_calibration(hopper: _cal.Calibration) -> _cal.Calibration:
    """The B200's calibration: PUBLIC constants, the one fitted clock, the rest transferred from `hopper`."""
    consts = {}
    for name, c in hopper.constants.items():
        if name.startswith("clock_ghz."):      # a Hopper launch's clock is no B200 regime: the fitted one below
            continue
        if name == "l2.bandwidth_gbps":        # the L2's bandwidth is the chip's, not transferable: no B200 floor
            continue                           # until a B200 run's probe measures it
        consts[name] = {"value": c["value"], "unit": c.get("unit", ""), "kind": "transferred" if c["kind"] != "provisional"
                        else "provisional",
                        "source": f"transferred from the {hopper.chip} calibration ({hopper.path or hopper.device}): "
                                  f"{name}, {c['kind']}: {c['source']}"}
    for name, (v, unit, src) in PUBLIC.items():
        consts[name] = {"value": float(v), "unit": unit, "kind": "public", "source": src}
    ghz, src = fitted_clock()
    consts["clock_ghz.timed"] = {"value": ghz, "unit": "GHz", "kind": "fitted", "source": src}
    consts["clock_ghz.sustained"] = dict(consts["clock_ghz.timed"])
    consts["umma.tail_cycles"] = {"value": hopper["wgmma.tail_cycles"], "unit": "cycles", "kind": "transferred",
                                  "source": f"transferred from the {hopper.chip} calibration's wgmma.tail_cycles "
                                            "(an MMA's completion beyond its service)"}
    consts["umma.commit_cycles"] = {"value": hopper["mbarrier.wake_cycles"], "unit": "cycles", "kind": "transferred",
                                    "source": f"transferred from the {hopper.chip} calibration's mbarrier.wake_cycles "
                                              "(a tcgen05.commit's arrive reaching its waiter)"}
    # One SM's TMA fill rate from L2 is a property of the chip's L2 fabric, not of the SM: the H100's measured
    # rate cannot be the B200's. The lab's 5-warp kernel moved its CTA's A and half-B blocks (2 x 128 x 768 B)
    # in a 6,063-cycle tile period (fitted_clock's record), at least 32.4 B/clk, above the H100's 29.9: the
    # provisional default stays until the first hour's calibration measures it.
    consts["tma.bytes_per_clk_sm"] = {"value": 64.0, "unit": "B/clk", "kind": "provisional",
                                      "source": "one SM's TMA fill rate from L2, not transferred (an L2-fabric "
                                                "property; the H100's measured rate is below what the lab's B200 "
                                                "kernel sustained): the provisional default of pelib's Hopper "
                                                "calibration; to be measured on a B200 (pelib.predict.probes' TMA "
                                                "throughput probe, the first hour's calibration)"}
    consts["tmem.ld_cycles"] = {"value": 64.0, "unit": "cycles", "kind": "provisional",
                                "source": "a tcgen05.ld's latency to its wait::ld; no Hopper counterpart: to be measured "
                                          "on a B200 (the first hour's calibration)"}
    left = sorted(n for n, c in consts.items() if c["kind"] == "provisional")
    # the L2's loaded-latency curves are the chip's L2, like its bandwidth: not transferred (no L2 queueing on the
    # B200 until a B200 run's stream probe measures them)
    curves = {k: v for k, v in hopper.curves.items() if not k.startswith("l2.")}
    out = _cal.Calibration("b200", "NVIDIA B200", hopper.date, True, "", consts, "", curves=curves)
    out.protocol = ("B200: public constants (sourced), one clock fitted on the 5-warp baseline's recorded clock64 "
                    "tile period, everything else transferred from the Hopper calibration (" +
                    (hopper.path or hopper.device) + "); provisional: " + ", ".join(left))
    return out


HISTORY = ("fp8/00_ws_cta1", "fp8/01_cta2", "fp8/02_tn256", "fp8/03_x32_loads", "fp8/04_independent_polling",
           "fp8/05_epi_warps", "fp8/06_stages", "fp8/07_smem_staged_epilogue", "fp8/08_unroll",
           "fp8/08a_persistent_tiles", "fp8/08b_double_staging", "fp8/09_persistent_megakernel")


def recorded_ms(stage) -> float | None:
    """The lab's recorded time of a stage's idea in ms (its TFLOPS converted with the problem's FLOPs)."""
    r = stage.recorded()
    if r is None:
        return None
    if getattr(r, "ms", None):
        return float(r.ms)
    tf = getattr(r, "tflops", None)
    return stage.problem("full").flops / (float(tf) * 1e12) * 1e3 if tf else None


def history(cal, stages=HISTORY, predict_fn=None, log=None) -> list[dict]:
    """Every FP8 stage of the history: predicted (this calibration) against recorded, error and the sign of
    each step; the clock's point (the 5-warp baseline) is no stage here and validates nothing."""
    predict_fn = predict_fn or predict
    rows, prev = [], None
    for key in stages:
        s = Stage(key)
        p = predict_fn(s, "b200", cal)
        rec = recorded_ms(s)
        row = {"stage": key, "predicted_ms": round(p.ms, 4), "recorded_ms": None if rec is None else round(rec, 4),
               "error": None if rec is None else round(p.ms / rec - 1, 4), "critical_path": p.sentence}
        if prev is not None and rec is not None and prev["recorded_ms"] is not None:
            rs, ps = rec / prev["recorded_ms"] - 1, p.ms / prev["predicted_ms"] - 1
            row["recorded_step"], row["predicted_step"] = round(rs, 4), round(ps, 4)
            row["sign_right"] = (rs > 0) == (ps > 0) if abs(rs) >= 0.09 else None
        rows.append(row)
        prev = row if rec is not None else prev
        if log:
            log(f"{key:34s} predicted {p.ms:.4f} ms  recorded {rec if rec else float('nan'):.4f} ms")
    return rows


RING_SHAPE = "k16384"          # the NVFP4 log's shape of the ring sweep (M=128, N=7168, K=16384)


def ring_stage(depth: int) -> Stage:
    """The stage file of one ring depth: nvfp4/00 (one stage) at depth 1, nvfp4/01 at NUM_STAGES=depth."""
    return Stage("nvfp4/00_single_stage") if depth == 1 else Stage("nvfp4/01_pipelined", {"NUM_STAGES": depth})


def nvfp4_ring(cal, depths=(1, 2, 3, 4, 5), shape: str = RING_SHAPE, predict_fn=None) -> list[dict]:
    """The NVFP4 ring sweep: nvfp4/00 (one stage) and nvfp4/01 at NUM_STAGES 2..5 on the log's shape,
    predicted against the log's microseconds (pelib.records)."""
    predict_fn = predict_fn or predict
    rec = records.nvfp4_stage_sweep().get(shape, {})
    rows = []
    for d in depths:
        s = ring_stage(d)
        p = predict_fn(s, "b200", cal, problem=shape)
        r = rec.get(d)
        rows.append({"stages": d, "stage": s.label, "predicted_us": round(p.ms * 1e3, 2),
                     "recorded_us": r, "error": None if r is None else round(p.ms * 1e3 / r - 1, 4),
                     "critical_path": p.sentence})
    return rows


def card_predictions(cal, error_bar: float, predict_fn=None) -> list[dict]:
    """Each go/no-go card with a variant kernel (pelib.measure.variants): the variant and its base stage predicted on
    the B200, the predicted gain in wall clock, and the outcome against the model's error bar (the blind
    Hopper validation's mean absolute error): GO where the gain exceeds the bar, NO-GO where the loss does,
    otherwise "within the error bar". Host-side cards (F21, F26: tensor-map or stream attributes) and F25
    (a TIMING build) have no kernel of their own to replay and are listed with why. Committed only after
    the Hopper validation exists (its error bar is what these cite)."""
    predict_fn = predict_fn or predict
    if not 0 < error_bar < 1:
        raise ValueError(f"error_bar={error_bar}: the Hopper validation's mean absolute error, a fraction (e.g. 0.05)")
    rows, base_ms = [], {}
    for card, v in VARIANTS.items():        # F21 and F26 are host-side: no variant kernel in VARIANTS
        if card in HOST_ONLY or card in SKIPPED_BY_RULE or v.base is None or v.defines.get("TIMING"):
            rows.append({"card": card, "outcome": "not predicted",
                         "why": HOST_ONLY.get(card) or SKIPPED_BY_RULE.get(card) or "a TIMING build, no variant"})
            continue
        if v.base not in base_ms:
            base_ms[v.base] = predict_fn(Stage(v.base_file, dict(v.base_defines)), "b200", cal).ms
        p = predict_fn(Stage(v.file, dict(v.defines)), "b200", cal)
        gain = base_ms[v.base] / p.ms - 1
        outcome = "GO" if gain > error_bar else "NO-GO" if gain < -error_bar else "within the error bar"
        rows.append({"card": card, "variant": v.path, "base_ms": round(base_ms[v.base], 4), "ms": round(p.ms, 4),
                     "gain": round(gain, 4), "error_bar": error_bar, "outcome": outcome,
                     "critical_path": p.sentence, "evidence": p.evidence})
    return rows
