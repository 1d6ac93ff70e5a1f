"""The Hopper tensor core's arithmetic proven on a GPU in one command: probe vectors, every sm90 stage on random inputs, and full siglip2 outputs compared on the device.

    PYTHONPATH=src python3 -m pelib.measure.numerics_proof --out DIR            # on an H200 (probe included)
    PYTHONPATH=src python3 -m pelib.measure.numerics_proof --out DIR --no-probe # on an H100 (its probe is committed)

What it runs, on one H100 or H200 (about 3 to 5 minutes):
  1. (unless --no-probe) `pelib.measure.tcprobe collect`: every probe vector class through wgmma, scored against the
     models of pelib.numerics.blockfma (tcprobe.json and five npz files);
  2. pelib.sim.proof's random jobs: every sm90 stage on the `sim` problem with the project's random inputs
     (pelib.problems, seed 0; the simulator's grid), and three epilogue forms with NaN and Inf planted;
     the sha256 of each output, its bits once per distinct output in sim_proof_random.npz;
  3. the GPU emulation kernel (src/kernels/probes/blockfma_emulate.cu: the block-FMA rule in integers on
     CUDA cores) against the CPU model (pelib.numerics.blockfma) on rows of `small` and `medium`, and against the
     stages sm90/06 and sm90/08 on the whole `small`, `medium` and `siglip2` outputs, compared on the device
     (712,900,608 BF16 values each for siglip2: nothing but the counts leaves the GPU).
It writes DIR/numerics.json (device, date via pelib.clock, git revision via pelib.bench.git_revision, every
count) and the files above: at most 8 files. tests/test_numerics_proof.py runs each step up to the launch on
a CPU and the emulation kernel end to end in the simulator; tests/test_sim_random_proof.py compares the
simulator with the committed bytes. Evidence: measured (device, date).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .. import bench, build as _build, clock, device as _device, launch
from ..numerics import blockfma as F
from ..sim import engine as sim, proof as sim_proof
from . import tcprobe
from ..kinds.base import bf16_bits
from ..paths import KERNELS
from ..stage import Stage

EMULATOR = KERNELS / "probes" / "blockfma_emulate.cu"
KERNEL = "blockfma_emulate"
ARCH = "sm_90a"
SUMMARY = "numerics.json"
MODEL = F.H100TC_MATLAB                   # the rule the emulation kernel computes (its exports are checked)
FULL_STAGES = ("sm90/06_permuted_b", "sm90/08_comb_init")   # 08 starts the accumulators from comb
PROBLEMS = ("small", "medium", "siglip2")
MODEL_ROWS = 64                           # rows of small and medium checked against the CPU model
SEED = 0
STAGE_TIMEOUT_S = 60.0


class ProofError(RuntimeError):
    """The proof cannot run as asked (wrong device, a problem the emulation kernel does not tile)."""


# ---- the emulation kernel -------------------------------------------------------------------------------

def emulator_build(comb_init: bool):
    """blockfma_emulate.cu for sm_90a; its exported constants must be MODEL's (one rule, one set of numbers)."""
    b = _build.build(EMULATOR, ARCH, {"COMB_INIT": int(comb_init)})
    ex = b.exports
    got = (ex["emu_frac_bits"], ex["emu_out_bits"], -ex["emu_min_exp_neg"], ex["emu_comb_init"])
    want = (MODEL.frac_bits, MODEL.out_bits, MODEL.min_exp, int(comb_init))
    if got != want:
        raise ProofError(f"{EMULATOR.name} exports (frac_bits, out_bits, min_exp, comb_init) = {got}, but "
                         f"pelib.numerics.blockfma {MODEL.name} is {want}: change one of them")
    return b


def check_problem(prob, b=None) -> None:
    ex = (b or emulator_build(False)).exports
    if prob.m % ex["emu_bm"] or prob.n % ex["emu_bn"] or prob.k % ex["emu_bk"]:
        raise ProofError(f"{prob.name}: M={prob.m}, N={prob.n}, K={prob.k}; the emulation kernel tiles M by "
                         f"{ex['emu_bm']}, N by {ex['emu_bn']} and K by {ex['emu_bk']}")


def emulator_args(t: dict, prob) -> tuple:
    """(a, b, comb, out, M, N, K, P) as the kernel declares them; out is a fresh BF16 tensor."""
    out = torch.empty_like(t["out"])
    args = (t["a"].view(torch.uint8), t["b"].view(torch.uint8), t["comb"].view(torch.int16), out.view(torch.int16),
            np.uint32(prob.m), np.uint32(prob.n), np.uint32(prob.k), np.uint32(prob.positions))
    return out, args


def emulator_grid(prob, b=None) -> tuple:
    ex = (b or emulator_build(False)).exports
    return (prob.n // ex["emu_bn"], prob.m // ex["emu_bm"], 1)


def emulate(t: dict, prob, comb_init: bool, device: str = "gpu") -> torch.Tensor:
    """The emulation kernel's BF16 output for inputs t (on the GPU, or in pelib.sim for CPU tensors)."""
    b = emulator_build(comb_init)
    check_problem(prob, b)
    out, args = emulator_args(t, prob)
    grid = emulator_grid(prob, b)
    if device == "sim":
        sim.prepare(b, args, grid=grid, block=(b.exports["num_threads"],), cluster=(1,), smem=0, kernel=KERNEL,
                    arch=ARCH, defines=b.defines).run()
    else:
        launch.launch(b, args, grid=grid, block=(b.exports["num_threads"], 1, 1), kernel=KERNEL, timeout_s=STAGE_TIMEOUT_S)
    return out


def model_rows(t: dict, prob, rows, comb_init: bool, model=MODEL, cxx: bool = False) -> np.ndarray:
    """The BF16 bits of output rows `rows` by pelib.numerics.blockfma on the CPU: wgmma k32 instructions in K order
    under `model`, then the stage's epilogue (+ comb in FP32 and a BF16 round to nearest even; comb_init:
    the accumulator starts from comb, the epilogue only converts). cxx: the same rule through the
    simulator's C++ (pelib.sim.engine.dot_f8_tiles, tests/test_sim_numerics.py proves the two equal), faster."""
    rows = np.asarray(rows)
    a = t["a"].cpu()[torch.from_numpy(rows)].contiguous().view(torch.uint8).numpy()
    b = t["b"].cpu().contiguous().view(torch.uint8).numpy()
    comb = t["comb"].cpu().float().numpy()[rows % prob.positions].astype(np.float32)
    d = comb.view(np.uint32) if comb_init else np.zeros(comb.shape, np.uint32)
    if cxx:
        acc = sim.dot_f8_tiles(a[None], b[None], d[None], "e4m3", comb_init, model=model)[0].view(np.float32)
    else:
        acc = F.matmul(model, F.values(a), F.window_exponents(a, "e4m3"), F.values(b),
                       F.window_exponents(b, "e4m3"), d=d if comb_init else None).view(np.float32)
    return bf16_bits(acc if comb_init else acc + comb)


def sample_rows(prob, n: int = MODEL_ROWS) -> np.ndarray:
    """n rows spread over the problem: the first and last tiles' edges and a seeded draw between."""
    rng = np.random.default_rng(SEED)
    fixed = [0, 1, 63, 64, prob.m - 64, prob.m - 1]
    rest = rng.choice(prob.m, size=max(0, n - len(fixed)), replace=False)
    return np.unique(np.concatenate([fixed, rest]).clip(0, prob.m - 1))[:n]


def differ(x: torch.Tensor, y: torch.Tensor) -> dict:
    """Bitwise differences of two BF16 tensors, counted where they live (on the GPU for siglip2)."""
    d = x.view(torch.int16) != y.view(torch.int16)
    n = int(torch.count_nonzero(d))
    first = torch.nonzero(d.view(-1))[:8].view(-1).tolist() if n else []
    return {"outputs": int(x.numel()), "differ": n, "first_differing_flat_index": first}


# ---- one stage on one problem -------------------------------------------------------------------------

def run_stage(key: str, prob_name: str, info, t: dict | None = None) -> tuple:
    """(stage output, inputs) of one stage on the GPU, its own launch configuration (the real grid)."""
    s = Stage(key)
    prob = s.problem(prob_name)
    t = s.inputs(prob, SEED, "gpu", info) if t is None else t
    t["out"].fill_(float("nan"))
    plan = s.plan(prob, t, "gpu", info=info)
    plan.run()
    plan.wait(timeout_s=STAGE_TIMEOUT_S)
    return t["out"].clone(), t


def emulator_checks(info, problems=PROBLEMS, stages=FULL_STAGES) -> dict:
    """For each problem: the emulation kernel against the CPU model on sample rows (small, medium), and
    against each stage's own output on every output, compared on the device."""
    res = {}
    for name in problems:
        inputs = None
        for key in stages:
            s = Stage(key)
            prob = s.problem(name)
            t0 = time.monotonic()
            out, inputs = run_stage(key, name, info, inputs)
            t1 = time.monotonic()
            comb_init = s.exports.get("comb_init", 0) == 1
            emu = emulate(inputs, prob, comb_init)
            torch.cuda.synchronize()
            t2 = time.monotonic()
            r = {"stage": key, "problem": name, "shape": [prob.m, prob.n, prob.k], "comb_init": comb_init,
                 "stage_vs_emulator": differ(out, emu)}
            if name != "siglip2":
                rows = sample_rows(prob)
                want = model_rows(inputs, prob, rows, comb_init)
                got = emu[torch.from_numpy(rows).to(emu.device)].cpu().view(torch.int16).numpy().view(np.uint16)
                r["emulator_vs_cpu_model"] = {"rows": len(rows), "outputs": int(want.size),
                                              "differ": int((got != want).sum()), "model": MODEL.name}
            r["seconds"] = {"stage": round(t1 - t0, 2), "emulator": round(t2 - t1, 2),
                            "compare": round(time.monotonic() - t2, 2)}
            res[f"{key}:{name}"] = r
            del out, emu
        del inputs
        torch.cuda.empty_cache()
    return res


# ---- the command -----------------------------------------------------------------------------------------

def collect(out_dir, probe: bool = True, problems=PROBLEMS) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = _device.current()
    if not _device.can_run(ARCH, info):
        raise ProofError(f"the proof runs sm_90a stages and wgmma: run it on an H100 or H200 (this is "
                         f"{info.describe()})")
    t_start = time.monotonic()
    doc = {"what": "the Hopper FP8 tensor core's arithmetic against pelib.numerics.blockfma and the simulator: probe "
                   "vectors, every sm90 stage on random inputs, full outputs on the device",
           "evidence": f"measured ({info.name})", **bench.environment(info), "seed": SEED, "model": MODEL.name,
           "model_params": MODEL.params, "seconds": {}}
    if probe:
        t0 = time.monotonic()
        s = tcprobe.collect(out_dir)
        doc["probe"] = {"file": tcprobe.SUMMARY, "outputs": s["outputs"], "unwritten": s["unwritten"],
                        "errors": s["errors"], "mismatch_total": s["mismatch_total"]}
        doc["seconds"]["probe"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    doc["random"] = sim_proof.random_proof_gpu(out_dir)
    doc["seconds"]["random"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    doc["emulator"] = emulator_checks(info, problems)
    doc["seconds"]["emulator"] = round(time.monotonic() - t0, 1)
    doc["seconds"]["total"] = round(time.monotonic() - t_start, 1)
    doc["date"] = clock.stamp()
    doc["summary"] = summary(doc)
    (out_dir / SUMMARY).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def summary(doc: dict) -> dict:
    """The counts the book and the tests read."""
    out = {}
    if "probe" in doc:
        out["probe_outputs"] = doc["probe"]["outputs"]
        out["probe_mismatch"] = doc["probe"]["mismatch_total"].get(MODEL.name, {}).get("bits")
    jobs = doc["random"]["jobs"]
    done = [r for r in jobs.values() if r["outcome"]["kind"] == "finished"]
    out["random_jobs"], out["random_jobs_finished"] = len(jobs), len(done)
    out["random_outputs"] = sum(r["outcome"]["outputs"] for r in done if r["job"] == "random")
    out["random_differ_from_reference"] = sum(r["outcome"]["differ_from_reference"] for r in done
                                              if r["job"] == "random")
    em = doc["emulator"].values()
    out["stage_vs_emulator"] = {f"{r['stage']}:{r['problem']}": r["stage_vs_emulator"]["differ"] for r in em}
    out["emulator_vs_cpu_model"] = sum(r["emulator_vs_cpu_model"]["differ"] for r in em
                                       if "emulator_vs_cpu_model" in r)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.measure.numerics_proof", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for numerics.json and the files it names")
    ap.add_argument("--no-probe", action="store_true", help="skip pelib.measure.tcprobe collect (committed already)")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help="problems of the emulator check")
    a = ap.parse_args(argv)
    try:
        doc = collect(a.out, probe=not a.no_probe, problems=tuple(a.problems.split(",")))
    except ProofError as e:
        print(f"numerics_proof: {e}", file=sys.stderr)
        return 2
    print(json.dumps(doc["summary"], indent=1))
    s = doc["summary"]
    ok = (s.get("probe_mismatch") in (None, 0) and s["random_jobs_finished"] == s["random_jobs"]
          and not any(s["stage_vs_emulator"].values()) and s["emulator_vs_cpu_model"] == 0)
    print(f"wrote {a.out}/{SUMMARY} in {doc['seconds']['total']} s: {'all equal' if ok else 'DIFFERENCES (see the JSON)'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
