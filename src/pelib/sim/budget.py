"""The simulator's front door: a simulated run's host memory and scheduler steps, estimated from the launch.

    est = sim_budget.estimate(cfg, prob, block_k=128, tmem=True, verify=True, inputs=True)
    sim_budget.check(est, fixes="...")      # SimTooLarge, with the numbers and the fix, where it cannot fit

pelib.stage calls both before it makes a tensor or builds anything, so a problem far beyond what the CPU
model can run (the full SigLIP2 problem on `--device sim`) is refused in seconds instead of growing until
the kernel's OOM killer ends the process. Every number is a floor (the fewest bytes and steps measured per
unit of work on the stages' `sim` problems, 2026-11-27): a run refused here could not have fitted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import engine as sim

# Scheduler steps (runtime/engine.cpp run_loop: one fiber switch or one asynchronous-operation completion).
# Measured on the 'sim' problems: steps / (CTA tiles x threads) = 8.6 (sm90/11), 12.4-14.8 (fp8/09), 16.5
# (fp8/00), 16.8 (nvfp4/00), 18.7 (fp8/01), 22 (sm90/00), 47 (sm90/04); each K block of a tile costs at
# least its two TMA loads, its MMA and its commit (4.7 operations per CTA K block measured on fp8/09).
STEPS_PER_THREAD_TILE = 8
STEPS_PER_KBLOCK = 4
# What the engine keeps for every CTA of the grid until the run ends (runtime/engine.cpp start_cta): the
# last writer and sequence of each 16 B of the shared window (4 + 8 B), one Fiber per thread (measured
# 1.2-1.8 KB with its containers), and on sm_100a the CTA's TMEM (128 lanes x 512 columns x 4 B) once it
# allocates. Measured: 400 KB per CTA (sm90/00), 657 KB (fp8/00).
WINDOW_BYTES = sim.SMEM_LIMIT + 1024     # runtime/api.h PE_SIM_SMEM_CAPACITY: the limit plus 1 KB of static
WINDOW_BOOKKEEPING = 12 / 16
FIBER_BYTES = sim.FIBER_BYTES
TMEM_BYTES = 128 * 512 * 4
# Verification of a CPU output (pelib.verify.compare works in float64: the reference, got and ref as
# float64, their difference, masks): 51.3 B per output element measured on fp8/09 at 50176 x 768 x 768.
VERIFY_BYTES_PER_OUTPUT = 48
# the budgets and the refusal live in pelib.sim (sim.prepare checks every launch against them); named here too
DEFAULT_BUDGET_STEPS = sim.DEFAULT_BUDGET_STEPS
BUDGET_STEPS_ENV, BUDGET_MB_ENV = sim.BUDGET_STEPS_ENV, sim.BUDGET_MB_ENV
SimTooLarge = sim.SimTooLarge
budget_steps, budget_bytes, _gb = sim.budget_steps, sim.budget_bytes, sim._gb


@dataclass(frozen=True)
class Estimate:
    """The floor of what one simulated run takes: scheduler steps and host bytes, by part."""

    label: str
    problem: str
    ctas: int
    threads: int
    tiles: int
    kblocks: int
    steps: int
    inputs_bytes: int
    verify_bytes: int
    engine_bytes: int
    events_bytes: int

    @property
    def bytes(self) -> int:
        return self.inputs_bytes + self.verify_bytes + self.engine_bytes + self.events_bytes

    def describe_steps(self) -> str:
        return (f"{self.steps:,} scheduler steps at least ({self.tiles:,} CTA tiles x ({self.threads} threads x "
                f"{STEPS_PER_THREAD_TILE} + {self.kblocks} K blocks x {STEPS_PER_KBLOCK}))")

    def describe_bytes(self) -> str:
        parts = [(self.inputs_bytes, "inputs and output"), (self.verify_bytes, "reference and verification"),
                 (self.engine_bytes, f"engine state of {self.ctas:,} CTAs"), (self.events_bytes, "event log")]
        return f"{_gb(self.bytes)} of host memory at least (" + ", ".join(f"{p} {_gb(b)}" for b, p in parts if b) + ")"


def estimate(cfg, prob, *, block_k: int, tmem: bool, verify: bool = True, inputs: bool = True,
             max_events: int = sim.MAX_EVENTS, label: str = "") -> Estimate:
    """The floor of a run's steps and bytes from its launch (cfg: grid, block, tiles) and problem (m, n, k,
    min_bytes). `inputs`: the run makes its tensors; `verify`: it compares the output with the reference."""
    ctas, threads = math.prod(cfg.grid), math.prod(cfg.block)
    kblocks = max(1, prob.k // max(1, block_k))
    steps = cfg.tiles * (threads * STEPS_PER_THREAD_TILE + kblocks * STEPS_PER_KBLOCK)
    per_cta = int(WINDOW_BYTES * WINDOW_BOOKKEEPING) + threads * FIBER_BYTES + (TMEM_BYTES if tmem else 0)
    return Estimate(label=label, problem=f"{prob.name} ({prob.m} x {prob.n} x {prob.k})", ctas=ctas,
                    threads=threads, tiles=cfg.tiles, kblocks=kblocks, steps=steps,
                    inputs_bytes=int(prob.min_bytes) if inputs else 0,
                    verify_bytes=VERIFY_BYTES_PER_OUTPUT * prob.m * prob.n if verify else 0,
                    engine_bytes=ctas * per_cta,
                    # the engine's log and numpy's copy of it (pelib.sim.engine.SimPlan.run)
                    events_bytes=2 * sim.EVENT_DTYPE.itemsize * min(steps, max_events))


def check(est: Estimate, *, fixes: str) -> Estimate:
    """Raise SimTooLarge naming each budget the estimate exceeds, the numbers and `fixes`; else return it."""
    over = []
    steps_cap = budget_steps()
    if steps_cap and est.steps > steps_cap:
        over.append(f"~{est.describe_steps()}, over the budget of {steps_cap:,} ({BUDGET_STEPS_ENV})")
    mem = budget_bytes()
    if mem is not None and est.bytes > mem[0]:
        over.append(f"~{est.describe_bytes()}, over the {_gb(mem[0])} {mem[1]}")
    if over:
        raise SimTooLarge(f"{est.label} on {est.problem} is too large for the simulator: " + "; ".join(over)
                          + f". {fixes}")
    return est
