"""A stage on the simulator: its launch, budget check, plan, run and TIMING run (Stage's host path on pelib.sim).

    from pelib.sim import host as sim_host
    res = sim_host.run(Stage("fp8/06_stages"), "sim", sim_seed=3)   # Stage.run's result dict; res["report"]
    tm = sim_host.run_timing(Stage("fp8/09_persistent_megakernel"))  # the TIMING build's records, in order

    python -m pelib.sim.host <stage> --device sim ...                # python -m pelib.stage's arguments

The simulator runs Stage (its build, exports, tensor maps and arguments), so this module stands above
pelib.stage and the runners that simulate import it; Stage keeps what every back end shares (inputs,
verification, the result dict's head, a TIMING launch). Its clock orders events, never a time.
"""
from __future__ import annotations

import sys
from contextlib import nullcontext

from .. import device as _device, evidence as _evidence, launch, timing as _timing, tma
from . import engine as sim, budget as sim_budget
from ..stage import LaunchConfig, Stage, main as _stage_main

EVIDENCE_SIM = _evidence.simulated()   # 'simulated (pelib.sim)'; its clock orders events, never a time
DEVICE = "pelib.sim (CPU model)"


def config(stage: Stage, problem="sim", grid: int | None = None) -> LaunchConfig:
    """The simulated launch: a persistent grid sized for the kind's few simulated SMs, so its loops wrap
    on a test-size problem."""
    return stage.launch_config(problem, info=_device.DeviceInfo(False, "simulated"), grid=grid,
                               sm_count=getattr(stage.kind, "SIM_SM_COUNT", None))


def estimate(stage: Stage, problem="sim", grid: int | None = None, *, cfg: LaunchConfig | None = None,
             verify: bool = True, inputs: bool = True) -> sim_budget.Estimate:
    """The floor of a simulated run's scheduler steps and host memory (pelib.sim.budget), from the launch
    (`cfg`, else config(stage, problem, grid))."""
    prob = stage.problem(problem)
    cfg = cfg or config(stage, prob, grid)
    return sim_budget.estimate(cfg, prob, block_k=stage.exports.block_k, tmem=stage.arch == "sm_100a",
                               verify=verify, inputs=inputs,
                               label=stage.key + (" " + stage.label.split(" ", 1)[1] if stage.defines else ""))


def check(stage: Stage, problem, cfg: LaunchConfig, *, verify: bool = True, inputs: bool = True):
    """Refuse (pelib.sim.budget.SimTooLarge) a simulated run that cannot fit, naming the smaller problem."""
    prob = stage.problem(problem)
    est = estimate(stage, prob, cfg=cfg, verify=verify, inputs=inputs)
    test = stage.problem("sim")
    fixes = (f"Simulate a test-size problem: --problem sim ({test.m} x {test.n} x {test.k}; "
             f"pelib.sim.host.run(stage, 'sim')) exercises the same protocol, indexing and data path; time the "
             f"full problem on a GPU")
    if cfg.persistent and 4 * est.engine_bytes > est.bytes:
        fixes += (f"; or give the persistent grid fewer resident CTAs (--grid, a multiple of {cfg.unit}; now "
                  f"{cfg.ctas:,})")
    return sim_budget.check(est, fixes=fixes)


def plan(stage: Stage, problem, tensors: dict, timing=None, grid: int | None = None, spec_hook=None, seed: int = 0,
         arithmetic: bool = True):
    """A checked simulated launch: pelib.sim's plan, with the launch shape and the arguments a GPU launch binds
    (Stage.plan's). `spec_hook(specs) -> specs` may change the tensor maps first; `seed` picks the simulated
    interleaving (the seed's one channel)."""
    prob = stage.problem(problem)
    prob.validate(tensors, device="cpu")   # as Stage.plan: a kernel indexes its inputs densely
    cfg = config(stage, prob, grid)
    check(stage, prob, cfg, verify=False, inputs=False)
    specs = stage.hooked_specs(prob, tensors, spec_hook)
    maps = {k: tma.TensorMap(s, cumap=None, owner=stage.kind.map_owner(k, tensors)) for k, s in specs.items()}
    defines = stage.defines if timing is None else {**stage.defines, "TIMING": 1}
    p = sim.prepare(stage.build if timing is None else stage.timing_build(),
                    stage.args(prob, tensors, maps, timing), grid=cfg.grid, block=cfg.block,
                    cluster=cfg.cluster, smem=cfg.smem, kernel=stage.build.kernel, arch=stage.arch,
                    defines=defines, seed=seed, timing=timing is not None,
                    names=tuple(name for _, name in stage.signature), arithmetic=arithmetic)
    p.config = cfg
    return p


def run(stage: Stage, problem="sim", *, seed: int = 0, verify: bool = True, inputs: dict | None = None, ref=None,
        spec_hook=None, hook=None, grid: int | None = None, sim_seed: int = 0) -> dict:
    """Stage.run on the simulator (the CPU model: protocol and data, never a time): the output poisoned, the
    plan run, verified against the torch reference. `sim_seed` picks the interleaving; the result carries
    the plan and its report (deadlock, hazards, misuse, seeds, the event log) as 'report' and 'sim'."""
    prob = stage.problem(problem)
    res = stage.result_head(prob)
    # before a tensor is made: the full problem is refused in seconds, not by the OOM killer
    check(stage, prob, config(stage, prob, grid), verify=verify, inputs=inputs is None)
    t = inputs if inputs is not None else stage.inputs(prob, seed, "sim")
    p = plan(stage, prob, t, grid=grid, spec_hook=spec_hook, seed=sim_seed)
    cfg = p.config
    res["plan"] = p
    res.update(device=DEVICE, evidence=EVIDENCE_SIM, config=cfg, launch=cfg.as_dict())

    def reported(done):
        res["sim"] = res["report"] = done.report

    with hook(t) if hook else nullcontext():
        if verify:
            stage.launch_verified(p, prob, t, ref, res, after=reported)
        res["report"] = getattr(p, "report", None)
    return res


def events(stage: Stage, problem="sim", seed: int = 0, timing: bool = False) -> tuple[list, LaunchConfig, dict]:
    """One simulated run's event log (the simulator's schema, pelib.events), its launch, and the bytes of the
    kernel's own global loads and stores per tensor, and its L2 prefetches' boxes ({name: {"load": B, "store":
    B, "prefetch": B}}; a TMA load's or store's are in the log): inputs and interleaving both seeded by `seed`; timing=True runs the TIMING build with a
    CPU record buffer, so its clock64 phase marks are logged too. No MMA computes (arithmetic=False): the events
    and bytes are those of a run that does (tests/test_sim_stages.py), at a fraction of its time. The one call the timing model
    (pelib.predict) makes into a run."""
    prob = stage.problem(problem)
    tensors = stage.inputs(prob, seed, "sim")
    buf = None
    if timing:
        buf = _timing.alloc(_timing.layout(stage.timing_build(), config(stage, prob).ctas), device="cpu")
    p = plan(stage, prob, tensors, timing=buf, seed=seed, arithmetic=False)   # the events alone: no MMA computes
    rep = p.run()
    gmem = {g["tensor"]: {"load": int(g["load"]), "store": int(g["store"]), "prefetch": int(g.get("prefetch", 0))}
            for g in rep.gmem}
    return rep.events, p.config, gmem


def run_timing(stage: Stage, problem="sim", *, seed: int = 0, inputs: dict | None = None, spec_hook=None,
               hook=None, grid: int | None = None, sim_seed: int = 0):
    """The TIMING=1 build simulated once after a warm-up; its records decoded (pelib.timing), their clock
    the simulated per-SM counter, which orders events and is never a time."""
    prob = stage.problem(problem)
    check(stage, prob, config(stage, prob, grid), verify=False, inputs=inputs is None)   # before a tensor is made
    t = inputs if inputs is not None else stage.inputs(prob, seed, "sim")
    cfg = config(stage, prob, grid)
    tm = stage.timing_launch(t, cfg, lambda buf: plan(stage, prob, t, timing=buf, grid=cfg.grid[0],
                                                      spec_hook=spec_hook, seed=sim_seed), hook)
    tm.meta.update(stage=stage.key, device=DEVICE, clock=_timing.SIM_ORDER, evidence=EVIDENCE_SIM)
    return tm


# ---- the command line: python -m pelib.stage's, with the devices that stand above Stage ---------------

def _simulate(s: Stage, a, trace) -> dict | bool:
    """--device sim: one simulated run (its report and trace printed by pelib.stage.main), or False if refused."""
    try:
        return run(s, a.problem, sim_seed=a.sim_seed or 0, grid=a.grid)
    except (sim_budget.SimTooLarge, launch.LaunchError) as e:   # a launch the simulator (or any GPU) does not take
        print(f"refused: {e}")
        return False


RUNNERS = {"sim": _simulate}


def main(argv=None) -> int:
    """python -m pelib.stage's command line, able to simulate (pelib.stage hands --device sim over here)."""
    return _stage_main(argv, runners=RUNNERS)


if __name__ == "__main__":
    sys.exit(main())
