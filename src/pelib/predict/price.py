"""A reader's edit priced in one call: compiled facts, the simulator's verdict on three seeds, the predicted time.

    out = price(Stage("fp8/09_persistent_megakernel"))     # or an edited copy, or a variant file
    out["compiled"], out["simulated"], out["ms"], out["predicted"]

The budget is about 15 s on one core: the three verdicts run the simulator's small problem; the
prediction simulates TILES tiles of its representative cluster (half of what pelib.predict.history
uses; the steady period is measured over the second half of them, so a persistent stage's time moves by
about 1-2 %, the blind and history predictions keep the full count) and replays them on the stage's own
GPU's calibration (b200 for sm_100a, h100 for sm_90a).
"""
from __future__ import annotations

from ..sim import host as sim_host
from .model import predict, report

TILES = 4       # tiles the prediction simulates (model.TILES is 8)


def price(stage, gpu: str | None = None, seeds=(0, 1, 2), calibration=None, tiles: int = TILES) -> dict:
    """What the compiler made of `stage` (compiled), the simulator's verdict on `seeds` (simulated: protocol,
    indexing, data path against torch), its predicted time and per-role breakdown (predicted) when every seed
    verified."""
    gpu = gpu or ("h100" if stage.arch.startswith("sm_90") else "b200")
    out = {"stage": stage.label, "gpu": gpu, "compiled": stage.facts_row()}
    verdicts = []
    for sd in seeds:
        try:
            r = sim_host.run(stage, "sim", sim_seed=sd)
            verdicts.append({"seed": sd, "ok": bool(r.get("ok")), "summary": str(r.get("report").summary())})
        except Exception as e:      # a deadlock, hazard or misuse: the simulator's report is the verdict
            verdicts.append({"seed": sd, "ok": False, "summary": f"{type(e).__name__}: {str(e).splitlines()[0]}"})
    out["simulated"] = verdicts
    if all(v["ok"] for v in verdicts):
        p = predict(stage, gpu, calibration, tiles=tiles)
        out.update(predicted=report(p), ms=round(p.ms, 4), cycles=round(p.cycles), evidence=p.evidence,
                   critical_path=p.sentence, phases={k: round(v["avg"]) for k, v in p.phases.items()},
                   seconds=p.seconds)
    else:
        out["predicted"] = "not predicted: the simulator found a problem on some seed (fix it first)"
    return out
