"""The NVFP4 overlap model: how many K tiles' TMA loads a ring of NUM_STAGES slots keeps in flight.

One CTA's K loop of nvfp4/01_pipelined.cu, modelled: `overlap_time` in closed form, `simulate` event by
event, `fit_overlap` fitted to the recorded 1..5-stage sweep of the NVFP4 log (evidence: modelled).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import problems, records, sol

EVIDENCE = "modelled"
SHAPES = ("k16384", "k7168", "k2048")  # the lab log's shapes (pelib.problems names)
STAGE_COUNTS = tuple(range(1, 8))      # the ring depths the pipelining chapter shows


def recorded_sweep() -> dict:
    """{shape: {stages: µs}}: the log's 1..5 sweep plus its 6-stage point (K=16384 only)."""
    out = {k: dict(v) for k, v in records.nvfp4_stage_sweep().items()}
    for t in records.nvfp4_stage_times():
        if t.table == "additional" and t.stages not in out[t.shape]:
            out[t.shape][t.stages] = t.us
    return out


@dataclass(frozen=True)
class OverlapParams:
    """One CTA's K loop: t_load (issue-to-landed of one K tile's TMA), t_mma (its cp + 4 MMAs, issue to
    commit), t_stream (the per-CTA share of DRAM bandwidth: the fastest K tiles can arrive back to
    back), t_fixed (launch, prologue latency, epilogue), all in µs."""

    t_load: float
    t_mma: float
    t_stream: float
    t_fixed: float


def overlap_time(k_tiles: int, stages: int, p: OverlapParams) -> float:
    """Modelled kernel time: t_fixed + k_tiles * max((t_load + t_mma) / stages, t_stream, t_mma).

    With S stages, S loads are in flight; a stage is refilled only after its MMAs finish (the
    single-thread loop of 01_pipelined), so one round trip (load + MMA) delivers S K tiles, unless
    bandwidth (t_stream) or the tensor core (t_mma) is the tighter limit.
    """
    if k_tiles < 1 or stages < 1:
        raise ValueError("k_tiles and stages must be >= 1")
    return p.t_fixed + k_tiles * max((p.t_load + p.t_mma) / stages, p.t_stream, p.t_mma)


def simulate(k_tiles: int, stages: int, p: OverlapParams) -> dict:
    """Event-by-event replay of 01_pipelined's loop: when each K tile's load and MMA start and end (µs).

    Load j may start once stage j % S is free (the MMAs of K tile j - S finished) and no earlier than
    t_stream after the previous load started (bandwidth); MMA j starts when load j landed and MMA j-1
    finished, and the issuing thread is not stuck waiting for an empty stage.
    """
    S = stages
    load_start = np.zeros(k_tiles)
    load_end = np.zeros(k_tiles)
    mma_start = np.zeros(k_tiles)
    mma_end = np.zeros(k_tiles)
    thread = 0.0  # the one issuing thread's clock
    for j in range(min(S, k_tiles)):  # prologue
        load_start[j] = max(thread, load_start[j - 1] + p.t_stream if j else 0.0)
        load_end[j] = load_start[j] + p.t_load
    for k in range(k_tiles):
        mma_start[k] = max(thread, load_end[k], mma_end[k - 1] if k else 0.0)
        mma_end[k] = mma_start[k] + p.t_mma
        thread = mma_start[k]
        j = k + S
        if j < k_tiles:  # wait for stage k % S to drain, then refill it
            thread = max(thread, mma_end[k])
            load_start[j] = max(thread, load_start[j - 1] + p.t_stream)
            load_end[j] = load_start[j] + p.t_load
    total = p.t_fixed + mma_end[-1]
    return {"load_start": load_start, "load_end": load_end, "mma_start": mma_start, "mma_end": mma_end,
            "total": total}


def mma_time_us(gpu: str = "B200", tile=(128, 128, 256)) -> float:
    """One K tile's MMAs on one SM at the datasheet's dense FP4 rate (pelib.sol): 2*128*128*256 FLOP."""
    g = sol.spec(gpu)
    per_sm = g.peak_tflops("nvfp4") * 1e12 / g.sms
    return 2 * tile[0] * tile[1] * tile[2] / per_sm * 1e6


def fit_overlap(times: dict, k_tiles: int, t_mma: float | None = None) -> OverlapParams:
    """Fit t_fixed, t_load and t_stream to recorded {stages: µs} of one shape (least squares).

    t_mma is not fitted: it is one K tile at the datasheet FP4 rate per SM (mma_time_us(), about
    0.14 µs on B200). With t_stream fixed the model is linear in t_fixed and t_load; t_stream is scanned.
    """
    t_mma = mma_time_us() if t_mma is None else t_mma
    S = np.array(sorted(times), dtype=float)
    y = np.array([times[int(s)] for s in S], dtype=float)
    best = None
    for t_stream in np.linspace(0.0, y.min() / k_tiles, 400):
        # t = t_fixed + k * max((t_load + t_mma)/S, t_stream): try each split point of the max
        for cut in range(len(S) + 1):
            lin = S[:cut]
            if cut == 0:
                continue
            X = np.column_stack([np.ones(cut), k_tiles / lin])
            rhs = y[:cut]
            rest = y[cut:] - k_tiles * max(t_stream, t_mma)
            X2 = np.vstack([X, np.column_stack([np.ones(len(rest)), np.zeros(len(rest))])])
            r2 = np.concatenate([rhs, rest])
            coef, *_ = np.linalg.lstsq(X2, r2, rcond=None)
            t_fixed, a = coef
            t_load = a - t_mma
            if t_load < 0 or t_fixed < 0:
                continue
            p = OverlapParams(t_load, t_mma, t_stream, t_fixed)
            err = sum((overlap_time(k_tiles, int(s), p) - t) ** 2 for s, t in zip(S, y))
            if best is None or err < best[0]:
                best = (err, p)
    if best is None:
        raise ValueError(f"no non-negative fit for {times}")
    return best[1]


def modelled_sweep(counts=STAGE_COUNTS) -> dict:
    """{shape: {"params": OverlapParams, "us": {stages: modelled µs}}}, fitted to the recorded sweep."""
    rec = recorded_sweep()
    out = {}
    for shape in SHAPES:
        prob = problems.nvfp4_gemm(shape)
        kt = prob.k // 256
        pts = {s: t for s, t in rec[shape].items() if s <= 5}
        p = fit_overlap(pts, kt)
        out[shape] = {"params": p, "k_tiles": kt, "us": {s: overlap_time(kt, s, p) for s in counts}}
    return out
