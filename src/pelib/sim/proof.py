"""The simulator proven on Hopper: every sm90 stage on exact-arithmetic inputs, and the catalog's sm90
mutations, on an H100 and in pelib.sim, compared.

    PYTHONPATH=src python3 -m pelib.sim.proof --device gpu --out $OUT   # on an H100, into a new folder
    PYTHONPATH=src python -m pelib.sim.proof --device sim               # on a CPU, against the newest proof

--device gpu writes <out>/sim_proof.json (device, driver, date, git rev; per stage the output's sha256;
per mutation what the GPU did: KernelFault and the wait tags its trapped waits printed, KernelHang, wrong
output with its count of wrong elements and sha256, or correct) and <out>/sim_proof/<sha256[:16]>.npz,
each distinct output's BF16 bits once (stages computing the same GEMM on the same inputs share one). Every
job runs in a worker process: a trap leaves the CUDA context unusable, so the worker exits and the next job
starts a new one. --device sim runs the same jobs in the simulator and compares them with the committed
JSON (the stages bit for bit, the mutations by pelib.sim.catalog.agrees); tests/test_sim_catalog.py asserts
the same comparison.

Every job uses the problem 'sim' of the kind (several K slices, a partial last row tile, more tiles than
resident CTAs so persistent loops wrap), seed 0, and the grid the simulator launches (launch_config with
the kind's SIM_SM_COUNT), so both back ends run one launch.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import multiprocessing
import os
import queue
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .. import bench, clock, device as _device, launch, stages as _stages
from . import engine as sim, catalog as C, host as sim_host, runs as sim_runs
from .. import verify
from ..measure.jobs import output_lines
from ..paths import ROOT
from ..stage import Stage

PROBLEM = "sim"
SEED = 0
JOB_TIMEOUT_S = 90.0
# The newest committed GPU proof (results/<date>-<device>/sim_proof.json; folders sort by date).
PROOF_JSON = (sorted((ROOT / "results").glob("*/sim_proof.json")) or [ROOT / "results" / "sim_proof.json"])[-1]
# sm90 stages and catalog entries added after that proof was measured: the next --device gpu run records them
# (then empty this; tests/test_sim_catalog.py holds the two in step).
AWAITING_GPU: tuple = ("sm90/12_tma_store", "sm90/13_one_prefetcher",
                       # the fence, unconsumed-load and register-pool mutations of the catalog
                       "sm90-01-no-wgmma-fence", "sm90-01-wgmma-fence-hoisted-out-of-kloop",
                       "sm90-01-refill-past-last-ktile", "sm90-01-refill-past-last-ktile-drained",
                       "sm90-03c-consumers-ask-256-registers", "sm90-03c-producer-gives-back-more")   # entries whose GPU record is not committed yet
GPU_TIMEOUT_S = 20.0       # pelib.launch's watchdog for one launch here (KernelHang after it)


def sm90_stages() -> list[Stage]:
    return [Stage(p) for p in _stages.family_stages("sm90")]


def sm90_mutations() -> list[C.Mutation]:
    return C.of_family("sm90")


def jobs() -> list[dict]:
    return ([{"job": "stage", "stage": s.key} for s in sm90_stages()]
            + [{"job": "mutation", "id": m.id, "stage": m.stage} for m in sm90_mutations()])


def grid_of(stage: Stage, prob) -> int:
    """The simulator's grid: the kind's SIM_SM_COUNT SMs, so a persistent stage's loops wrap."""
    return stage.launch_config(prob, info=_device.DeviceInfo(False, "simulated"),
                               sm_count=stage.kind.SIM_SM_COUNT).grid[0]


def bits_of(out: torch.Tensor) -> np.ndarray:
    return out.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16)


def sha256(bits: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(bits).tobytes()).hexdigest()


def compare(bits: np.ndarray, ref: torch.Tensor) -> int:
    """Elements whose bits differ from the reference's (exact inputs: the output is one set of bits)."""
    return int((bits != bits_of(ref)).sum())


# ---- one job ---------------------------------------------------------------------------------------------

def _setup(job: dict):
    """(stage or patched-stage context, problem, defines) of a job."""
    if job["job"] == "stage" or job["job"] in RANDOM_JOBS:
        return Stage(job["stage"]), None
    m = C.mutation(job["id"])
    return C.stage_of(m), m


def run_gpu(job: dict, out_dir: Path | None) -> dict:
    """One job on this process's GPU: the outcome (kind correct / wrong / fault / hang) and the output's
    sha256; faults are returned, not raised (the caller must exit: the context is unusable)."""
    if job["job"] in RANDOM_JOBS:
        return run_random(job, "gpu", out_dir)
    base, mut = _setup(job)
    info = _device.require(base.arch)
    with (C.patched(base.with_defines(**C.GPU_DEFINES), mut) if mut else _plain(base)) as s:
        defines = dict(s.defines)
        prob = s.problem(mut.problem if mut else PROBLEM)
        t = s.inputs(prob, SEED, "gpu", info, exact=True)
        grid = grid_of(s, prob)
        plan = s.plan(prob, t, "gpu", info=info, grid=grid)
        rec = {**job, **({"patch_sha256": C.patch_hash(mut)} if mut else {}), "problem": prob.name, "shape": [prob.m, prob.n, prob.k], "grid": grid,
               "block": s.exports.num_threads, "cluster": s.exports.cluster_x, "defines": defines, "seed": SEED}
        verify.poison(t["out"])
        try:
            plan.run()
            plan.wait(timeout_s=GPU_TIMEOUT_S)
        except launch.KernelFault as e:
            _flush_device_printf()
            return {**rec, "outcome": C.Outcome("fault", detail=f"KernelFault: {e}").as_dict(), "fatal": True}
        except launch.KernelHang as e:
            return {**rec, "outcome": C.Outcome("hang", detail=f"KernelHang: {e}").as_dict(), "fatal": True}
        cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in t.items()}
        return {**rec, **_finished(s, prob, cpu, out_dir)}


def _finished(s, prob, t: dict, out_dir: Path | None, ref=None) -> dict:
    bits = bits_of(t["out"])
    ref = s.kind.reference(prob, t) if ref is None else ref
    n_bad = compare(bits, ref)
    h = sha256(bits)
    if out_dir is not None:
        f = out_dir / f"{h[:16]}.npz"
        if not f.exists():
            np.savez_compressed(f, bits=bits)
    kind = "correct" if n_bad == 0 else "wrong"
    return {"outcome": C.Outcome(kind, n_bad=n_bad, sha256=h).as_dict(), "file": f"{h[:16]}.npz"}


_EXACT: dict = {}


def exact_case(s, prob) -> tuple[dict, torch.Tensor]:
    """The exact-arithmetic inputs (seed SEED) of a problem and their reference, made once per process per
    family and shape; each run gets fresh copies (its output is poisoned and written)."""
    key = (s.family, prob.name, prob.m, prob.n, prob.k)
    if key not in _EXACT:
        t = s.inputs(prob, SEED, "sim", exact=True)
        _EXACT[key] = (t, s.kind.reference(prob, t))
    t, ref = _EXACT[key]
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in t.items()}, ref


def prepare_sim(job: dict) -> None:
    """Build what a simulated run of `job` needs (the NVRTC build for the exports, the simulator's host
    build), so a pool of threads can compile several jobs at once before the runs."""
    base, mut = _setup(job)
    with (C.patched(base, mut) if mut else _plain(base)) as s:
        sim.stage_build(s.build.source, s.build.kernel, s.defines)


def prepare_and_run_sim(job_seeds: tuple) -> list[dict]:
    """(job, seeds): the job's builds, then one simulated run per seed (a pool's unit of work)."""
    job, seeds = job_seeds
    prepare_sim(job)
    return [run_sim(job, seed) for seed in seeds]


def run_sim(job: dict, seed: int = SEED) -> dict:
    """One job in pelib.sim: the outcome (correct / wrong / deadlock / hazard / misuse) and the output's
    sha256 where the launch finished."""
    if job["job"] in RANDOM_JOBS:
        return run_random(job, "sim", None, seed)
    base, mut = _setup(job)
    with (C.patched(base, mut) if mut else _plain(base)) as s:
        prob = s.problem(mut.problem if mut else PROBLEM)
        t, ref = exact_case(s, prob)
        grid = grid_of(s, prob)
        plan = sim_host.plan(s, prob, t, grid=grid, seed=seed)
        verify.poison(t["out"])
        try:
            plan.run()
            plan.wait()
        except sim.SimError as e:
            return {**job, "seed": seed, "outcome": sim_outcome(e).as_dict()}
        rep = getattr(plan, "report", None)
        res = {**job, "seed": seed, **_finished(s, prob, t, None, ref)}
        if rep is not None and not rep.ok:
            res["outcome"] = sim_outcome(rep).as_dict()
        return res


def sim_outcome(e) -> C.Outcome:
    """A SimError (or a SimReport that is not ok) as an Outcome: the earliest problem's class as its kind,
    every list the report holds (deadlock, hazard, misuse), and the wait tags of every blocked thread."""
    rep = e if isinstance(e, sim.SimReport) else getattr(e, "report", None)
    found = {k: [str(x) for x in (getattr(rep, attr, None) or [])]
             for k, attr in (("deadlock", "deadlock"), ("hazard", "hazards"), ("misuse", "misuse"))}
    kind = ("deadlock" if isinstance(e, sim.SimDeadlock) else "misuse" if isinstance(e, sim.SimMisuse)
            else "hazard" if isinstance(e, sim.SimHazard) else next((k for k, v in found.items() if v), "error"))
    text = str(e) if isinstance(e, Exception) else rep.summary()
    return C.Outcome(kind, C.sim_tags(found["deadlock"]), text, found=found)


class _plain:
    def __init__(self, s):
        self.s = s

    def __enter__(self):
        return self.s

    def __exit__(self, *exc):
        return False


def _flush_device_printf() -> None:
    """Let the device printf buffer (a trapped wait's tag line) reach stdout: the synchronize itself fails."""
    try:
        from cuda.bindings import driver
        driver.cuCtxSynchronize()
    except Exception:
        pass
    sys.stdout.flush()


# ---- workers: one process per run of jobs, restarted after a fault -----------------------------------------

def _fake_gpu(job: dict, out_dir: Path | None) -> dict:
    """PELIB_PROOF_FAKE=1 (tests of the worker logic on a CPU; measures nothing): a stage 'computes' the
    reference; a mutation the catalog says deadlocks prints a trapped wait's line and faults."""
    if job["job"] in RANDOM_JOBS:   # the reference stands in for the GPU's output
        s = Stage(job["stage"])
        prob = s.problem(PROBLEM)
        t = s.inputs(prob, SEED, "sim")
        t = plant_specials(t) if job["job"] == "specials" else t
        t["out"] = s.kind.reference(prob, t)
        return {**job, **_random_outcome(s, prob, t, out_dir)}
    base, mut = _setup(job)
    prob = base.problem(mut.problem if mut else PROBLEM)
    t = base.inputs(prob, SEED, "sim", exact=True)
    t["out"] = base.kind.reference(prob, t)
    if mut and mut.gpu == "deadlock":
        print(f"pelib: mbarrier wait timed out after 1048576 tries: tag={mut.tags[0]} smem=0x0 parity=0 "
              "cta=(0,0,0) thread=0", flush=True)
        return {**job, "outcome": C.Outcome("fault", detail="KernelFault: (fake)").as_dict(), "fatal": True}
    if mut:
        t["out"][0, 0] += 1
    return {**job, **_finished(base, prob, t, out_dir)}


def _worker(jobs_file: Path, start: int, out_dir: Path) -> int:
    todo = json.loads(jobs_file.read_text())
    run = _fake_gpu if os.environ.get("PELIB_PROOF_FAKE") == "1" else run_gpu
    for i in range(start, len(todo)):
        print(f"@@START {i}", flush=True)
        try:
            res = run(todo[i], out_dir)
        except Exception as e:   # a build or setup error: recorded, the worker goes on
            res = {**todo[i], "outcome": C.Outcome("error", detail=f"{type(e).__name__}: {e}").as_dict()}
        print("@@RESULT " + json.dumps(res), flush=True)
        if res.get("fatal"):
            return 3
    return 0


def _prebuild(job: dict) -> str:
    base, mut = _setup(job)
    with (C.patched(base.with_defines(**C.GPU_DEFINES), mut) if mut else _plain(base)) as s:
        s.build
    return job.get("id", job["stage"])


def run_all_gpu(out_dir: Path, budget_s: float = 420.0, todo: list[dict] | None = None,
                prebuild: bool = True) -> list[dict]:
    """Every job on the GPU, in worker processes; a job whose worker died gets the tags its trap printed."""
    from concurrent.futures import ProcessPoolExecutor
    todo = jobs() if todo is None else todo
    with ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 4),   # NVRTC builds, cached; spawned:
                             mp_context=multiprocessing.get_context("spawn")) as ex:   # a fork can hang
        list(ex.map(_prebuild, todo if prebuild else []))
    out_dir.mkdir(parents=True, exist_ok=True)
    jf = out_dir / "jobs.json"
    jf.write_text(json.dumps(todo))
    results: dict[int, dict] = {}
    start, t0 = 0, time.time()
    try:
        while start < len(todo) and time.time() - t0 < budget_s:
            p = subprocess.Popen([sys.executable, "-m", "pelib.sim.proof", "--worker", str(jf), "--start", str(start),
                                  "--out", str(out_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
            lines = output_lines(p)
            cur, text, last = start, {start: []}, time.time()
            while True:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    if time.time() - last > JOB_TIMEOUT_S:
                        p.kill()
                        results.setdefault(cur, {**todo[cur], "outcome": C.Outcome(
                            "hang", detail=f"no result in {JOB_TIMEOUT_S:g} s; worker killed").as_dict()})
                        break
                    continue
                if line is None:
                    break
                last = time.time()
                if line.startswith("@@START "):
                    cur = int(line.split()[1])
                    text[cur] = []
                elif line.startswith("@@RESULT "):
                    results[cur] = json.loads(line[len("@@RESULT "):])
                else:
                    text.setdefault(cur, []).append(line)
            p.wait()
            for i, lines_i in text.items():   # the tags a trapped wait printed (they reach the pipe at exit)
                if i in results:
                    out = "".join(lines_i)
                    o = results[i]["outcome"]
                    o["tags"] = list(C.gpu_tags(out))
                    if o["kind"] == "fault":
                        said = sorted({x.strip() for x in lines_i if "timed out" in x})[:8] or \
                            [x.rstrip() for x in lines_i[-8:]]   # no tag line: what the worker said last
                        o["detail"] = (o["detail"] + "\n" + "\n".join(said))[:2500]
            if cur not in results:
                results[cur] = {**todo[cur], **job_build(todo[cur]),
                                "outcome": exited_without_result("".join(text.get(cur, [])))}
            start = max(results) + 1
    finally:
        jf.unlink(missing_ok=True)
    return [results[i] for i in sorted(results)]


def job_build(job: dict) -> dict:
    """What a mutation job is built with (its defines and patch), known before it runs: recorded for a
    worker that ended before reporting, as run_gpu records it for one that reports."""
    if job["job"] != "mutation":
        return {}
    m = C.mutation(job["id"])
    return {"defines": {**m.defines, **C.GPU_DEFINES}, "patch_sha256": C.patch_hash(m)}


def exited_without_result(said: str) -> dict:
    """The outcome of a worker that died before reporting: a fault at the waits it printed as timed out
    (a bounded wait traps, and the trap can end the process before it reports), else an error."""
    tags = list(C.gpu_tags(said))
    if tags:
        lines = sorted({x.strip() for x in said.splitlines() if "timed out" in x})[:8]
        return {**C.Outcome("fault", detail="KernelFault: the process ended after a trapped wait\n"
                            + "\n".join(lines)).as_dict(), "tags": tags}
    return C.Outcome("error", detail="the worker exited without a result: " + said[-1500:]).as_dict()


def proof_gpu(out: Path) -> dict:
    info = _device.current()
    if not _device.can_run("sm_90a", info):
        raise SystemExit(f"--device gpu needs an sm_90 GPU (H100/H200); this is {info.describe()}")
    t0 = time.time()
    res = run_all_gpu(out / "sim_proof")
    stages_out = {r["stage"]: r for r in res if r["job"] == "stage"}
    muts = {r["id"]: r for r in res if r["job"] == "mutation"}
    doc = {"what": "sm90 stages on exact-arithmetic inputs (bit for bit against the simulator) and the sm90 "
                   "mutations of pelib.sim.catalog on a GPU", "evidence": f"measured ({info.name})",
           "device": info.describe(), "name": info.name, "driver": info.driver,
           "date": clock.stamp(), "git": bench.git_revision(),
           "problem": PROBLEM, "seed": SEED, "exact_inputs": True, "wall_s": round(time.time() - t0, 1),
           "stages": stages_out, "mutations": muts}
    derive(doc)
    (out / "sim_proof.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def derive(doc: dict) -> dict:
    """The fields read off the measured outcomes and the catalog: each mutation's expected GPU behaviour and
    whether the GPU showed it, and the summary (run again after a change of the catalog's `gpu` field)."""
    for mid, r in doc["mutations"].items():
        r["expected_gpu"] = C.mutation(mid).gpu
        r["as_expected"] = C.gpu_expected(C.mutation(mid), C.Outcome.from_dict(r["outcome"]))
    doc["summary"] = {"stages_correct": sum(r["outcome"]["kind"] == "correct" for r in doc["stages"].values()),
                      "stages": len(doc["stages"]),
                      "mutations_gpu_shows": sum(r["expected_gpu"] is not None for r in doc["mutations"].values()),
                      "mutations_as_expected": sum(bool(r["as_expected"]) for r in doc["mutations"].values()),
                      "mutations": len(doc["mutations"])}
    return doc


def load_proof(path: Path = PROOF_JSON) -> dict:
    return json.loads(Path(path).read_text())


def committed_bits(doc: dict, sha: str, path: Path = PROOF_JSON) -> np.ndarray:
    return np.load(Path(path).parent / "sim_proof" / f"{sha[:16]}.npz")["bits"]


def proof_sim(path: Path = PROOF_JSON, seeds=sim.STANDARD_SEEDS) -> dict:
    """The simulator on the committed jobs: each stage's output bytes against the GPU's, each mutation's
    outcome against the GPU's (pelib.sim.catalog.agrees) and the catalog's (matches), for every seed."""
    doc = load_proof(path)
    out = {"stages": {}, "mutations": {}}
    for key, g in doc["stages"].items():
        r = run_sim({"job": "stage", "stage": key})
        out["stages"][key] = {"sim": r["outcome"], "gpu": g["outcome"],
                              "bit_identical": r["outcome"].get("sha256") == g["outcome"]["sha256"]}
    for mid, g in doc["mutations"].items():
        per = []
        for seed in seeds:
            r = run_sim({"job": "mutation", "id": mid, "stage": g["stage"]}, seed)
            so, go = C.Outcome.from_dict(r["outcome"]), C.Outcome.from_dict(g["outcome"])
            per.append({"seed": seed, "sim": r["outcome"], "matches": C.matches(C.mutation(mid), so),
                        "agrees": C.agrees(so, go)})
        out["mutations"][mid] = {"gpu": g["outcome"], "runs": per}
    return out


# ---- random inputs: the data path bit for bit (the tensor core's rounding shows) -------------------------------

RANDOM_JOBS = ("random", "specials")
SPECIAL_STAGES = ("sm90/03_staged_epilogue", "sm90/06_permuted_b", "sm90/08_comb_init")
RANDOM_FILE = "sim_proof_random.npz"
# A run of some random jobs only (pelib.measure.energy's modes with RANDOM_PROOF: the stages added since the last
# pelib.measure.numerics_proof run, their parents beside them): the same "random" section as numerics.json.
RANDOM_SUMMARY = "numerics-random.json"


def random_jobs() -> list[dict]:
    """Every sm90 stage on the problem's own random inputs (pelib.problems, seed SEED), and three epilogue
    forms (TMA store, register stores, comb in the accumulator) on the same inputs with NaN and infinities
    planted (plant_specials)."""
    return ([{"job": "random", "stage": s.key} for s in sm90_stages()]
            + [{"job": "specials", "stage": k} for k in SPECIAL_STAGES])


def plant_specials(t: dict) -> dict:
    """NaN E4M3 bytes in two rows of A (0x7F and 0xFF), and in comb a quiet NaN, a NaN with sign and payload,
    +Inf and -Inf, and an Inf beside a NaN row: which NaN bits the epilogue writes, and Inf + finite."""
    a = t["a"].view(torch.uint8)
    a[3, 5], a[70, 100] = 0x7F, 0xFF
    c = t["comb"].view(torch.int16)
    for (r, col), v in {(10, 17): 0x7FC0, (11, 18): 0x7F80, (12, 19): -128, (13, 20): -63, (3, 21): 0x7F80}.items():
        c[r, col] = v            # -128 = 0xFF80 (-Inf), -63 = 0xFFC1 (a negative NaN with a payload)
    return t


def run_random(job: dict, device: str, out_dir: Path | None, seed: int = SEED, keep: dict | None = None) -> dict:
    """One random-input job on the GPU or in pelib.sim: the output's sha256 and how many outputs differ from
    the correctly rounded reference (the tensor core's rounding); out_dir: write the bits once per sha256;
    keep: a dict that gets the output's bits under "bits"."""
    s = Stage(job["stage"])
    prob = s.problem(PROBLEM)
    info = _device.require(s.arch) if device == "gpu" else None
    t = s.inputs(prob, SEED, device, info)
    if job["job"] == "specials":
        t = plant_specials(t)
    grid = grid_of(s, prob)
    plan = (sim_host.plan(s, prob, t, grid=grid, seed=seed) if device == "sim" else
            s.plan(prob, t, device, info=info, grid=grid))
    verify.poison(t["out"])
    rec = {**job, "problem": prob.name, "shape": [prob.m, prob.n, prob.k], "grid": grid, "seed": SEED,
           "inputs": "pelib.problems (random)" + (", NaN and Inf planted" if job["job"] == "specials" else "")}
    try:
        plan.run()
        plan.wait(**({"timeout_s": GPU_TIMEOUT_S} if device == "gpu" else {}))
    except (launch.KernelFault, launch.KernelHang) as e:
        return {**rec, "outcome": C.Outcome("fault", detail=f"{type(e).__name__}: {e}").as_dict(), "fatal": True}
    except sim.SimError as e:
        return {**rec, "sim_seed": seed, "outcome": sim_outcome(e).as_dict()}
    rep = getattr(plan, "report", None)
    extra = {"sim_seed": seed, "accumulation": plan.accumulation} if device == "sim" else {}
    return {**rec, **extra, **_random_outcome(s, prob, t, out_dir, rep is not None and not rep.ok, keep)}


def _random_outcome(s, prob, t: dict, out_dir: Path | None, failed: bool = False, keep: dict | None = None) -> dict:
    cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in t.items()}
    bits = bits_of(cpu["out"])
    if keep is not None:
        keep["bits"] = bits
    ref = bits_of(s.kind.reference(prob, cpu))
    h = sha256(bits)
    if out_dir is not None:
        f = out_dir / f"{h[:16]}.npz"
        if not f.exists():
            np.savez_compressed(f, bits=bits)
    return {"outcome": {"kind": "error" if failed else "finished", "sha256": h, "outputs": int(bits.size),
                        "differ_from_reference": int((bits != ref).sum()),
                        "nan_outputs": int(((bits & 0x7FFF) > 0x7F80).sum())}}


def simulate_random(job: dict) -> tuple[dict, np.ndarray | None]:
    """(record, output bits, flat) of one random job in pelib.sim at seed SEED, through a content-addressed cache
    (pelib.sim.runs.content_key: every kernel file, pelib's host code, the job, torch's version for the
    inputs), so tests/test_sim_random_proof.py and the book run each job once between them. A run that did
    not finish is returned, not cached; its bits are None."""
    key = _random_key(job)
    store = sim_runs.run_cache()
    e = store.get("simrandom", key, require=("record.json", "bits.u16.gz"))
    if e is not None:
        return ({**json.loads(e.read("record.json")), "cached": True},
                np.frombuffer(gzip.decompress(e.read("bits.u16.gz")), np.uint16))
    keep: dict = {}
    rec = run_random(job, "sim", None, keep=keep)
    bits = keep["bits"].reshape(-1) if rec["outcome"]["kind"] == "finished" else None   # flat, as a cached one
    if bits is not None:
        store.put("simrandom", key, {"record.json": json.dumps(rec).encode(),
                                     "bits.u16.gz": gzip.compress(np.ascontiguousarray(bits).tobytes())},
                  meta={"job": job["job"], "stage": job["stage"]})
    return rec, bits


def _random_key(job: dict) -> str:
    return sim_runs.content_key({"random_job": job, "seed": SEED, "problem": PROBLEM},
                                f"pelib.sim-random-1 torch-{torch.__version__}")


def simulate_random_all(todo: list[dict] | None = None, workers: int = 2) -> dict:
    """{job name: (record, bits)} of every random job (default random_jobs()) in the simulator: the cached ones
    read here, the rest in `workers` spawned processes (pelib.sim runs one launch per process at a time)."""
    todo = random_jobs() if todo is None else todo
    out = {}
    missing = []
    for j in todo:   # a hit costs a read; a miss, a simulated launch
        if sim_runs.run_cache().get("simrandom", _random_key(j), require=("record.json", "bits.u16.gz")) is None:
            missing.append(j)
        else:
            out[job_name(j)] = simulate_random(j)
    if missing:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=min(workers, len(missing)),
                                 mp_context=multiprocessing.get_context("spawn")) as ex:
            for j, r in zip(missing, ex.map(simulate_random, missing)):
                out[job_name(j)] = r
    return {job_name(j): out[job_name(j)] for j in todo}


def job_name(job: dict) -> str:
    """A random job's name in numerics.json: '<job>:<stage>'."""
    return f"{job['job']}:{job['stage']}"


def random_proof_gpu(out: Path, budget_s: float = 240.0, todo: list[dict] | None = None) -> dict:
    """Every random job on this GPU (worker processes, as the exact proof); the distinct outputs' bits into one
    compressed file out/RANDOM_FILE keyed by sha256[:16]. Returns {"jobs": {name: record}, "file": ...}."""
    tmp = out / "sim_proof_random"
    res = run_all_gpu(tmp, budget_s=budget_s, todo=random_jobs() if todo is None else todo)
    bits = {}
    for f in sorted(tmp.glob("*.npz")):
        bits[f.stem] = np.load(f)["bits"]
        f.unlink()
    tmp.rmdir()
    np.savez_compressed(out / RANDOM_FILE, **bits)
    return {"jobs": {job_name(r): r for r in res}, "file": RANDOM_FILE}


def random_bits(doc: dict, path: Path, name: str) -> np.ndarray:
    """The committed GPU bits of one random job (numerics JSON `doc` read from `path`)."""
    sha = doc["random"]["jobs"][name]["outcome"]["sha256"]
    with np.load(Path(path).parent / doc["random"]["file"]) as z:
        return z[sha[:16]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pelib.sim.proof", description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("gpu", "sim"), default="sim")
    ap.add_argument("--out", help="gpu: the folder sim_proof.json and sim_proof/ go to (a new one, e.g. $OUT)")
    ap.add_argument("--proof", default=str(PROOF_JSON), help="sim: the committed GPU JSON to compare with")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        if not Path(a.worker).is_file():    # the hidden flag of this command's own worker processes
            ap.error(f"--worker {a.worker!r}: --worker is this command's own, followed by the jobs file it writes "
                     "for a worker process (no such file here); run the command without it")
        return _worker(Path(a.worker), a.start, Path(a.out))
    if a.device == "gpu" and not a.out:
        ap.error("--device gpu needs --out FOLDER (a new folder: the committed proofs stay as they are)")
    if a.device == "gpu":
        doc = proof_gpu(Path(a.out))
        print(json.dumps(doc["summary"]))
        for mid, r in doc["mutations"].items():
            o = r["outcome"]
            print(f"{mid:45s} {o['kind']:8s} tags={o['tags']} n_bad={o['n_bad']} expected={r['expected_gpu']} "
                  f"ok={r['as_expected']}")
        return 0
    res = proof_sim(Path(a.proof))
    same = sum(v["bit_identical"] for v in res["stages"].values())
    shown = {mid: v for mid, v in res["mutations"].items() if C.mutation(mid).gpu is not None}
    agree = sum(all(x["agrees"][0] for x in v["runs"]) for v in shown.values())
    caught = sum(all(x["matches"][0] for x in v["runs"]) for v in res["mutations"].values())
    print(f"simulated (pelib.sim, seeds {', '.join(map(str, sim.STANDARD_SEEDS))}) against {a.proof}:\n"
          f"  sm90 stages bit-identical to the H100: {same}/{len(res['stages'])}\n"
          f"  sm90 mutations the H100 shows, simulator agreeing: {agree}/{len(shown)}\n"
          f"  sm90 mutations reported as the catalog expects: {caught}/{len(res['mutations'])}")
    for mid, v in res["mutations"].items():
        x = v["runs"][0]
        if mid not in shown:
            print(f"  race {mid}: simulator {x['sim']['kind']} on every seed: "
                  f"{all(y['matches'][0] for y in v['runs'])}; the H100 ran {v['gpu']['kind']}")
        for y in v["runs"]:
            if (mid in shown and not y["agrees"][0]) or not y["matches"][0]:
                print(f"  {mid} seed {y['seed']}: {y['agrees'][1]} {y['matches'][1]}")
    ok = same == len(res["stages"]) and agree == len(shown) and caught == len(res["mutations"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
