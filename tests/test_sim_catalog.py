"""The catalog of planted bugs (pelib.sim.catalog), the exact-arithmetic inputs it runs on, and the simulator
against the committed H100 proof.

CPU only: every mutation applies (its find text occurs once) and NVRTC-compiles for its arch; exact inputs
give a torch reference equal to an FP64 reference bit for bit; the outcome rules on stand-in outcomes. In
pelib.sim (host C++ compiler needed): every mutation, on seeds 0-2, is reported as the catalog expects (kind
and site); every sm90 stage's simulated output equals the H100's committed bytes bit for bit; every sm90
mutation's simulated outcome agrees with what the H100 did.
"""
from __future__ import annotations

import torch
import pytest

from pelib import reference
from pelib.sim import catalog as C
from pelib.kinds import base as kbase
from pelib.stage import Stage


# ---- the catalog as data ------------------------------------------------------------------------------

def test_catalog_covers_the_families():
    fams = {f: C.of_family(f) for f in ("sm90", "fp8", "nvfp4")}
    assert len(C.CATALOG) >= 41
    assert len(fams["sm90"]) >= 8 and len(fams["fp8"]) >= 8 and len(fams["nvfp4"]) >= 3
    shown = [m for m in fams["sm90"] if m.gpu in ("deadlock", "wrong")]
    assert len(shown) >= 5 and {m.gpu for m in shown} == {"deadlock", "wrong"}
    assert {m.expect for m in C.CATALOG} == set(C.KINDS)
    assert len({m.id for m in C.CATALOG}) == len(C.CATALOG)
    for m in C.CATALOG:
        assert m.description and "\n" not in m.description
        Stage(m.stage)   # a stage that exists


@pytest.mark.parametrize("mid", [m.id for m in C.CATALOG])
def test_mutation_applies_and_compiles(mid):
    """The find text occurs exactly once, the patch changes the source, and NVRTC compiles the result for
    the stage's arch (cached like every build)."""
    m = C.mutation(mid)
    srcs = m.sources()
    for rel, text in srcs.items():
        assert text != (C.KERNELS / rel).read_text()
    b = C.compile_check(m)
    assert b.arch == Stage(m.stage).arch and b.cubin
    assert b.cubin != Stage(m.stage).build.cubin


def test_a_rotten_find_is_refused():
    m = C.mutation("sm90-01-comb-row-off-by-one")
    gone = C.Mutation("x", m.stage, (C.Patch("no such text in any stage", "y"),), "d", "wrong")
    with pytest.raises(C.CatalogError, match="occurs 0 times"):
        gone.sources()
    twice = C.Mutation("x", m.stage, (C.Patch("mbarrier_wait_parity_nocall(", "y"),), "d", "wrong")
    with pytest.raises(C.CatalogError, match="occurs [2-9] times"):
        twice.sources()
    with pytest.raises(C.CatalogError, match="names the wait tags"):
        C.Mutation("x", m.stage, m.patches, "d", "deadlock")


def test_patched_building_block_shadows_common_and_is_cleaned_up():
    m = C.mutation("sm90-02-tile-rank-offset-lost")
    with C.patched(C.stage_of(m), m) as s:
        folder = s.path.parent
        assert (folder / "common" / "tile_map.cuh").is_file()
        assert s.key == m.stage and m.id in s.label
        assert "(m_blk + rank) * BM" in (folder / "common" / "tile_map.cuh").read_text()
        from pelib.build import _include_paths, expand_sources
        files = {str(p) for _, p, _ in expand_sources(s.path, [type(s.path)(d) for d in _include_paths(folder)])}
        assert str((folder / "common" / "tile_map.cuh").resolve()) in files
        assert str((C.KERNELS / "common" / "tile_map.cuh").resolve()) not in files
        assert s.exports.tile_m == Stage(m.stage).exports.tile_m
    with C.patched(C.stage_of(m), m) as again:   # one path per mutation and text: builds are found again
        assert again.path == s.path
    with pytest.raises(C.CatalogError, match="patches"):
        with C.patched(Stage("sm90/01_warp_specialized"), m):
            pass


# ---- exact-arithmetic inputs -----------------------------------------------------------------------------

@pytest.mark.parametrize("stage,problem", [("sm90/01_warp_specialized", "tail"), ("fp8/09_persistent_megakernel", "small"),
                                           ("sm90/04_pingpong_resident_b", "small")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_patch_embed_reference_equals_fp64(stage, problem, seed):
    s = Stage(stage)
    prob = s.problem(problem)
    t = s.inputs(prob, seed, "sim", exact=True)
    for k, lim in (("a", 2), ("b", 1), ("comb", 4)):
        v = t[k].double()
        assert bool((v == v.round()).all()) and float(v.abs().max()) <= lim and float(v.abs().max()) >= 1
    ref = s.kind.reference(prob, t)
    f64 = t["a"].double() @ t["b"].double().t() + t["comb"].double()[torch.arange(prob.m) % prob.positions]
    assert torch.equal(ref.double(), f64)          # the FP32 sums and the BF16 rounding changed nothing
    assert torch.isnan(t["out"]).all() and t["out"].dtype == reference.BF16
    again = s.inputs(prob, seed, "sim", exact=True)
    assert all(torch.equal(t[k], again[k]) for k in ("a", "b", "comb"))


@pytest.mark.parametrize("problem", ["small", "ring"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_nvfp4_reference_equals_fp64(problem, seed):
    s = Stage("nvfp4/01_pipelined")
    prob = s.problem(problem)
    t = s.inputs(prob, seed, "sim", exact=True)
    va, vb = (reference.e2m1_decode(reference.unpack_fp4(t[k])).double() for k in ("a", "b"))
    assert set(va.unique().tolist()) == {-2.0, -1.0, 0.0, 1.0, 2.0} and set(vb.unique().tolist()) == {-1.0, 0.0, 1.0}
    assert (t["sfa"].float() == 1).all() and (t["sfb"].float() == 1).all() and float(t["gsa"] * t["gsb"]) == 1.0
    assert s.kind.scalars(s, prob, t)["alpha"] == 1.0
    ref = s.kind.reference(prob, t)
    assert ref.dtype == torch.float16 and torch.equal(ref.double(), va @ vb.t())


def test_exactness_is_checked():
    with pytest.raises(kbase.ExactnessError, match="beyond the 256"):
        kbase.check_exact(torch.tensor([1.0, 257.0]), "bfloat16", "x")
    with pytest.raises(kbase.ExactnessError):
        kbase.check_exact(torch.tensor([0.5]), "float16", "x")
    kbase.check_exact(torch.tensor([-256.0, 3.0]), "bfloat16", "x")


def test_default_inputs_unchanged():
    s = Stage("sm90/01_warp_specialized")
    a, b = s.inputs("tail", 0, "sim"), s.kind.problem("tail").make_inputs(seed=0)
    assert torch.equal(a["a"].view(torch.uint8), b["a"].view(torch.uint8))


# ---- outcome rules -----------------------------------------------------------------------------------------

def test_gpu_tags_parse_the_timeout_lines():
    text = ("pelib: mbarrier wait timed out after 1048576 tries: tag=2 smem=0x400 parity=0 cta=(1,0,0) thread=200\n"
            "pelib: mbarrier wait timed out after 1048576 tries: tag=1 smem=0x408 parity=0 cta=(0,0,0) thread=0\n"
            "pelib: mbarrier wait timed out after 1048576 tries: tag=2 smem=0x400 parity=0 cta=(0,0,0) thread=201\n")
    assert C.gpu_tags(text) == (1, 2)


def test_matches_needs_kind_and_site():
    dl = C.mutation("sm90-01-empty-first-wait-parity0")
    assert C.matches(dl, C.Outcome("deadlock", (1, 2)))[0]
    assert not C.matches(dl, C.Outcome("deadlock", (2,)))[0]
    assert not C.matches(dl, C.Outcome("wrong"))[0]
    hz = C.mutation("sm90-03-staging-reused-before-store-read")
    assert C.matches(hz, C.Outcome("hazard", detail="st.shared while a TMA store reads it"))[0]
    assert not C.matches(hz, C.Outcome("hazard", detail="TMEM read during an MMA"))[0]
    el = C.mutation("nvfp4-08-elect-in-one-lane")      # a deadlock no wait tag marks: its site word
    assert C.matches(el, C.Outcome("deadlock", (), detail="warp 1: elect.sync: lanes 0x00000001 of 0xffffffff"))[0]
    assert not C.matches(el, C.Outcome("deadlock", (3,), detail="warp 0: mbarrier wait at tag 3"))[0]
    with pytest.raises(C.CatalogError, match="names the wait tags"):
        C.Mutation("x", el.stage, el.patches, "d", "deadlock")


def test_agreement_rules():
    assert C.agrees(C.Outcome("deadlock", (1, 2)), C.Outcome("fault", (2,)))[0]
    assert not C.agrees(C.Outcome("deadlock", (1,)), C.Outcome("fault", (5,)))[0]
    assert C.agrees(C.Outcome("wrong", sha256="ab", n_bad=3), C.Outcome("wrong", sha256="ab", n_bad=3))[0]
    assert not C.agrees(C.Outcome("wrong", sha256="ab"), C.Outcome("wrong", sha256="cd"))[0]
    assert not C.agrees(C.Outcome("deadlock", (1,)), C.Outcome("wrong"))[0]


# ---- the committed H100 proof (results/2026-11-24-h100/sim_proof.json) --------------------------------------

def test_committed_proof_is_whole_and_its_bytes_are_the_reference():
    """The JSON covers every sm90 stage file and every sm90 mutation (or pelib.sim.proof.AWAITING_GPU names it:
    added after the proof was measured); each stored output hashes to its name; the stages' GPU output is the
    CPU torch reference of the same exact inputs, bit for bit."""
    from pelib.sim import proof as P
    doc = P.load_proof()
    assert doc["name"].startswith("NVIDIA H100") and doc["driver"] and doc["date"] and doc["git"]
    recorded = set(doc["stages"]) | set(doc["mutations"])
    jobs = {s.key for s in P.sm90_stages()} | {m.id for m in P.sm90_mutations()}
    assert recorded <= jobs, f"the proof records jobs that no longer exist: {sorted(recorded - jobs)}"
    assert jobs - recorded == set(P.AWAITING_GPU), (
        "every sm90 stage and mutation has an H100 record or is listed in pelib.sim.proof.AWAITING_GPU (emptied "
        f"once `python -m pelib.sim.proof --device gpu --out <folder>` recorded it): {sorted(jobs - recorded)}")
    s = Stage("sm90/01_warp_specialized")
    prob = s.problem(P.PROBLEM)
    t = s.inputs(prob, P.SEED, "sim", exact=True)
    want = P.sha256(P.bits_of(s.kind.reference(prob, t)))
    for key, r in doc["stages"].items():
        assert r["outcome"] == {**r["outcome"], "kind": "correct", "n_bad": 0, "sha256": want}, key
        assert r["grid"] == P.grid_of(Stage(key), prob)
    for r in list(doc["stages"].values()) + list(doc["mutations"].values()):
        if r["outcome"]["sha256"]:
            bits = P.committed_bits(doc, r["outcome"]["sha256"])
            assert P.sha256(bits) == r["outcome"]["sha256"] and bits.shape == (prob.m, prob.n)
    for mid, r in doc["mutations"].items():
        m = C.mutation(mid)
        assert r["as_expected"] == C.gpu_expected(m, C.Outcome.from_dict(r["outcome"]))
        if m.gpu is not None:
            assert r["as_expected"], (mid, r["outcome"])
            if m.gpu == "wrong" and m.site == "out-of-bounds":
                # the store past the output landed in an input tensor: the GPU's output matched the reference
                # of the inputs as they were after the run, not as they were made
                assert r["outcome"]["n_bad"] > 0
            elif m.gpu == "wrong":
                n_bad = P.compare(P.committed_bits(doc, r["outcome"]["sha256"]), s.kind.reference(prob, t))
                assert n_bad == r["outcome"]["n_bad"] > 0



def test_committed_proof_ran_todays_mutations():
    """Each mutation in the committed GPU proof was built with the catalog's defines and today's patch: a
    changed mutation needs a new GPU run (python -m pelib.sim.proof --device gpu)."""
    from pelib.sim import proof as P
    doc = P.load_proof()
    for mid, r in doc["mutations"].items():
        m = C.mutation(mid)
        assert r["defines"] == {**m.defines, **C.GPU_DEFINES}, (mid, r["defines"])
        assert r.get("patch_sha256") == C.patch_hash(m), mid


def test_gpu_proof_launches_every_sm90_job_at_the_simulators_grid(fake_gpu, monkeypatch):
    """`python -m pelib.sim.proof --device gpu`, on a CPU up to the launch: every sm90 stage and mutation builds
    (NVRTC, with the bounded waits that print their tag), binds its exact inputs and launches with the grid
    the simulator runs (launch_config at the kind's SIM_SM_COUNT: a persistent stage's loops wrap on the GPU as
    they do in the simulator), and its outcome is recorded (here the stand-in launch leaves the output
    poisoned, so it reads as wrong)."""
    from pelib.sim import proof as P
    plans, _ = fake_gpu
    monkeypatch.setattr(Stage, "inputs", lambda self, problem="small", seed=0, device="gpu", info=None, exact=False:
                        self.kind.inputs(self.problem(problem), seed, "cpu", exact=exact))
    jobs = P.jobs()
    assert {j["id"] for j in jobs if j["job"] == "mutation"} == {m.id for m in C.of_family("sm90")}
    for job in jobs:
        rec = P.run_gpu(job, None)
        base = Stage(job["stage"]) if job["job"] == "stage" else C.stage_of(job["id"])
        want = P.grid_of(base, base.problem(P.PROBLEM))
        assert rec["grid"] == want and tuple(plans[-1].grid)[0] == want, job
        assert rec["outcome"]["kind"] == "wrong", job
        if job["job"] == "mutation":   # a hang traps and prints its wait tag
            assert rec["defines"] == {**base.defines, **C.GPU_DEFINES}, job
            assert rec["patch_sha256"] == C.patch_hash(C.mutation(job["id"]))


# ---- in the simulator -----------------------------------------------------------------------------------

import multiprocessing   # noqa: E402
from concurrent.futures import ProcessPoolExecutor   # noqa: E402

from pelib.sim import engine as sim, proof as P   # noqa: E402


def _compiler_missing() -> str | None:
    try:
        sim.compiler()
    except sim.SimToolchainError as e:
        return str(e)
    return None


needs_cxx = pytest.mark.skipif(_compiler_missing() is not None, reason=f"pelib.sim: {_compiler_missing()}")
SEEDS = sim.STANDARD_SEEDS   # lazy, eager and a random schedule


def _job(m):
    return {"job": "mutation", "id": m.id, "stage": m.stage}


@pytest.fixture(scope="module")
def runs():
    """Every mutation and every sm90 stage on seeds 0-2 in the simulator, two processes at a time (CI has
    2 cores): each process builds a job (NVRTC for the exports, the simulator's host build; both cached by
    content) and runs its seeds. {(mutation id or stage key, seed): Outcome}."""
    if _compiler_missing() is not None:
        return {}
    todo = [_job(m) for m in C.CATALOG] + [{"job": "stage", "stage": s.key} for s in P.sm90_stages()]
    out = {}
    # spawn, not fork: a fork of a process whose torch and NVRTC threads hold locks can hang its children
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as ex:
        for job, res in zip(todo, ex.map(P.prepare_and_run_sim, [(j, SEEDS) for j in todo])):
            for r in res:
                out[(job.get("id") or job["stage"], r["seed"])] = C.Outcome.from_dict(r["outcome"])
    return out


@needs_cxx
@pytest.mark.parametrize("mid", [m.id for m in C.CATALOG])
def test_mutation_reported_by_the_simulator(runs, mid):
    """The planted mistake is reported as the catalog says, on every seed: the kind of the earliest problem
    AND its site (a blocked wait at the expected tag; a hazard or misuse naming the expected word; or, for
    an indexing mistake, a clean run whose output differs from the reference)."""
    m = C.mutation(mid)
    for seed in SEEDS:
        out = runs[(mid, seed)]
        ok, why = C.matches(m, out)
        assert ok, f"{mid}, simulator seed {seed} (--sim-seed {seed} reproduces it): {why}"


@needs_cxx
@pytest.mark.parametrize("key", [s.key for s in P.sm90_stages()])
def test_sm90_stage_simulated_equals_the_h100_bytes(runs, key):
    """On exact-arithmetic inputs the simulated output is the committed H100 output, bit for bit."""
    doc = P.load_proof()
    if key in P.AWAITING_GPU:   # no H100 bytes yet: the simulated output is the reference, bit for bit
        for seed in SEEDS:
            out = runs[(key, seed)]
            assert out.kind == "correct", (key, seed, out.detail[:500])
        return
    gpu = doc["stages"][key]["outcome"]
    want = P.committed_bits(doc, gpu["sha256"])
    for seed in SEEDS:
        out = runs[(key, seed)]
        assert out.kind == "correct" and out.sha256 == gpu["sha256"], (key, seed, out.detail[:500])
    assert P.sha256(want) == gpu["sha256"]


@needs_cxx
def test_sm90_mutations_agree_with_the_h100(runs):
    """Each sm90 mutation the H100 shows deterministically (deadlock, wrong output, illegal address): the
    simulator tells the same story on every seed (the same wait tags among its blocked threads, the same
    wrong output bytes, an access outside shared memory). The races the H100 happened to survive are
    reported by the simulator (test above); the GPU's outcome is recorded, not compared."""
    doc = P.load_proof()
    agreed = []
    for m in P.sm90_mutations():
        if m.gpu is None or m.id not in doc["mutations"]:
            continue
        gpu = C.Outcome.from_dict(doc["mutations"][m.id]["outcome"])
        for seed in SEEDS:
            ok, why = C.agrees(runs[(m.id, seed)], gpu)
            assert ok, f"{m.id} seed {seed}: {why}"
        agreed.append(m.id)
    assert len(agreed) >= 5
