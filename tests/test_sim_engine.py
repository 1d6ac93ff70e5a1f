"""The simulator's engine (pelib.sim, src/kernels/sim/runtime) on a small kernel: warp collectives, barriers,
one planted mistake per mode and what the report says about it; seeds, the event log, the host build and
its cache, and that the device build never sees a simulated header."""
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pelib import build as nvrtc, launch as L, tma
from pelib.sim import engine as sim, build as sim_build, host as sim_host
from pelib.isa.limits import SMEM_LIMIT
from pelib.paths import KERNELS
from pelib.stage import Stage

KERNEL = Path(__file__).parent / "kernels" / "sim_engine.cu"
T = 128          # threads per CTA
SMEM = 4096      # dynamic shared memory of the launch


def launch(mode: int, seed: int = 0, smem: int = SMEM, n: int | None = None, ctas: int = 2, defines=None,
           view: bool = False):
    out = torch.zeros(2 * T * ctas * (2 if view else 1), dtype=torch.int32)
    out = out[:2 * T * ctas] if view else out   # a view into a larger buffer: the view is the tensor
    out2 = torch.zeros(16 * ctas, 64, dtype=torch.bfloat16)
    spec = tma.spec_from_tensor(out2, (16, 64), swizzle=0)
    arg_n = np.int32(n if n is not None else out.numel())
    args = (tma.TensorMap(spec, cumap=None, owner=out2), out, out2, arg_n)
    plan = sim.prepare(KERNEL, args, grid=(ctas, 1, 1), block=(T, 1, 1), cluster=(1, 1, 1), smem=smem,
                       kernel="sim_engine", arch="host", defines={"MODE": mode, **(defines or {})}, seed=seed,
                       names=("tmap", "out", "out2", "n"))
    plan.out2 = out2
    return plan, out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_collectives_and_barriers(seed):
    plan, out = launch(0, seed)
    rep = plan.run()
    assert rep.ok and rep.seed == seed
    o = out.view(torch.int32).numpy().astype(np.uint32)[:2 * T]
    t = np.arange(T)
    lane, warp = t % 32, t // 32
    assert (o[:T] & 0xFF).tolist() == (lane ^ 1).tolist()                 # shfl.sync.bfly 1
    assert ((o[:T] >> 8) & 1).tolist() == (lane == 0).astype(int).tolist()  # elect.sync: the lowest lane
    assert (o[:T] >> 16).tolist() == warp.tolist()
    assert (o[T:2 * T] == 1 + (T << 4)).all()                             # after the mbarrier and bar.sync


def test_seed_picks_the_interleaving_and_reproduces_it():
    logs = []
    for seed in (3, 3, 4):
        plan, _ = launch(0, seed)
        rep = plan.run()
        logs.append([(e["cta"], e["warp"], e["lane"], e["kind"]) for e in rep.events])
    assert logs[0] == logs[1]
    assert logs[0] != logs[2]
    assert sorted(logs[0]) == sorted(logs[2])   # the same events, in another order


def test_event_log_fields():
    plan, _ = launch(0, 0)
    ev = plan.run().events
    kinds = {e["kind"] for e in ev}
    assert {"wait_begin", "wait_end", "arrive", "bar_sync", "exit"} <= kinds
    assert all(k in sim.EVENT_KINDS for k in kinds)
    assert [e["seq"] for e in ev] == sorted(e["seq"] for e in ev)
    w = next(e for e in ev if e["kind"] == "wait_begin")
    assert w["tag"] == 7 and w["parity"] == 0 and w["barrier"] == "bar" and w["index"] == 0 and w["role"].startswith("warp ")
    assert w["phase"] == 0 and w["addr"] == 0                      # it waits for phase 0 of the barrier at offset 0
    end = next(e for e in ev if e["kind"] == "wait_end")
    assert end["phase"] == 0 and end["barrier"] == "bar"
    assert {e["phase"] for e in ev if e["kind"] == "arrive"} == {0}
    assert w["file"].endswith("sim_engine.cu") and w["line"] > 0


def test_events_carry_their_meaning():
    """FP8 09 at the simulator's problem: every event has the schema's keys; barriers are named as the stage's
    mbarrier_init writes them; roles, tiles, ring slots and accumulators come from the stage's phase marks; an
    issue and its completion share an op id and a barrier phase."""
    from pelib import timing
    r = sim_host.run(Stage("fp8/09_persistent_megakernel"), "sim", sim_seed=0)
    ev = r["report"].events
    assert ev and all(tuple(e) == sim.EVENT_KEYS for e in ev)
    assert [e["seq"] for e in ev] == list(range(len(ev)))
    ex = Stage("fp8/09_persistent_megakernel").exports
    stages, accs = ex["pipeline_stages"], ex["tmem_acc_buffers"]
    roles = {(e["cta"], e["warp"]): e["role"] for e in ev if e["warp"] >= 0}
    assert roles[(0, 0)] == "producer" and roles[(0, 1)] == "mma" and roles[(0, 2)] == "epilogue"
    by_op: dict = {}
    for e in ev:
        if e["op"] is not None:
            by_op.setdefault(e["op"], []).append(e)
    loads = [e for e in ev if e["kind"] == "tma_load"]
    assert loads and all(e["barrier"] == "full" and e["slot"] == e["index"] < stages and e["bytes"] > 0 for e in loads)
    for e in loads:
        tx = [x for x in by_op[e["op"]] if x["kind"] == "complete_tx"]
        assert tx and all(x["barrier"] == "full" and x["slot"] == e["slot"] and x["phase"] == e["phase"] for x in tx)
        assert any(x["kind"] == "tma_load_done" for x in by_op[e["op"]])
        assert all(x["role"] == "producer" and x["tile"] == e["tile"] for x in by_op[e["op"]])
    mmas = [e for e in ev if e["kind"] == "mma"]
    assert mmas and all(0 <= e["slot"] < stages and 0 <= e["acc"] < accs for e in mmas)
    for e in mmas:
        done = [x for x in by_op[e["op"]] if x["kind"] == "mma_done"]
        assert done and done[0]["slot"] == e["slot"] and done[0]["acc"] == e["acc"] and done[0]["warp"] == -1
    commits = {e["barrier"] for e in ev if e["kind"] == "commit"}
    assert commits == {"empty", "acc_full"}
    assert all(e["acc"] is not None for e in ev if e["kind"] == "tmem_ld")
    assert {e["acc"] for e in ev if e["kind"] == "tmem_ld"} == set(range(accs))   # both accumulators drained
    for e in ev:
        if e["kind"] == "wait_end" and e["phase"] is not None:
            assert e["phase"] % 2 == e["parity"]            # a wait for parity p observes a phase of parity p
        if e["barrier"] in ("acc_full", "acc_empty"):
            assert e["acc"] == e["index"] and e["slot"] is None
    open_: dict = {}
    for e in ev:
        if e["kind"] in ("phase_begin", "phase_end"):
            assert e["what"] in timing.phases().values() and e["tile"] is not None
            k = (e["cta"], e["warp"], e["lane"], e["what"], e["tile"])
            open_[k] = open_.get(k, 0) + (1 if e["kind"] == "phase_begin" else -1)
            assert open_[k] >= 0
    assert open_ and not any(open_.values())
    assert {e["what"] for e in ev if e["kind"] == "phase_begin"} >= {"producer_wait", "tma_wait", "kloop", "acc_wait"}
    tiles = [e["tile"] for e in loads if e["cta"] == 0]
    assert tiles == sorted(tiles) and tiles[-1] >= 1                 # the producer's tiles, in order


def test_sm90_roles_and_barrier_names():
    """sm90 06: the producer warp and the consumer warpgroups (wgmma and epilogue) as the stage marks them;
    turn[0] and turn[1], initialized at two sites, are one array with indices 0 and 1."""
    ev = sim_host.run(Stage("sm90/06_permuted_b"), "sim", sim_seed=0)["report"].events
    roles = {(e["cta"], e["warp"]): e["role"] for e in ev if e["warp"] >= 0}
    assert roles[(0, 0)] == "producer" and roles[(0, 4)] == "mma+epilogue" and roles[(0, 11)] == "mma+epilogue"
    assert {e["index"] for e in ev if e["barrier"] == "turn"} == {0, 1}
    assert {e["barrier"] for e in ev if e["barrier"]} == {"full", "empty", "b_full", "turn"}
    assert all(e["slot"] == e["index"] for e in ev if e["barrier"] in ("full", "empty"))


def test_deadlock_names_the_wait():
    plan, _ = launch(1, 0)
    with pytest.raises(sim.SimDeadlock) as e:
        plan.run()
    msg = str(e.value)
    assert "tag 7" in msg and "parity 0" in msg and "pending arrivals 1 of 2" in msg
    assert "sim_engine.cu:" in msg and "--sim-seed 0" in msg
    rep = e.value.report
    assert not rep.ok and rep.tags == (7,)
    d = rep.deadlock[0]
    assert d["wait"] == "mbarrier" and d["tag"] == 7 and d["parity"] == 0 and d["phase"] == 0
    assert d["pending"] == 1 and d["count"] == 2 and d["tx"] == 0 and d["file"].endswith("sim_engine.cu")
    assert {x["cta"] for x in rep.deadlock} == {0, 1} and all(len(x["lanes"]) == 32 for x in rep.deadlock)


def test_arrival_overflow_is_misuse():
    with pytest.raises(sim.SimMisuse, match="more arrivals than its count 2"):
        launch(2, 0)[0].run()


def test_divergent_warp_collective_is_a_deadlock():
    with pytest.raises(sim.SimDeadlock, match="__syncwarp.*divergent warp"):
        launch(3, 0)[0].run()


def test_shared_store_outside_the_launch_is_misuse():
    with pytest.raises(sim.SimMisuse, match=r"outside CTA \d's shared memory"):
        launch(4, 0, n=SMEM)[0].run()
    launch(4, 0, n=SMEM - 16)[0].run()          # the last 16 B are inside


def test_global_store_outside_the_tensors_is_misuse():
    with pytest.raises(sim.SimMisuse, match="out-of-bounds global access"):
        launch(5, 0, n=2 * T * 2)[0].run()


def test_exit_with_tmem_allocated_is_misuse():
    with pytest.raises(sim.SimMisuse, match="TMEM allocation"):
        launch(6, 0)[0].run()


def test_dynamic_shared_memory_over_the_limit_is_refused_as_on_a_gpu():
    """Refused by prepare() with pelib.launch's message, before anything is built or run."""
    with pytest.raises(L.LaunchError, match=f"sim_engine needs {SMEM_LIMIT + 1024} B dynamic .* the simulated SM .* allows {SMEM_LIMIT} B"):
        launch(0, 0, smem=SMEM_LIMIT + 1024)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tma_store_from_staging(seed):
    plan, _ = launch(7, seed)
    plan.run()
    words = plan.out2.view(torch.int32).view(2, 16, 32).numpy()     # CTA, row, 4-B word
    for c in range(2):
        want = c * 1000 + np.arange(16 * 32) // 4                     # each 16-B chunk holds one value
        assert (words[c].reshape(-1) == want).all()


@pytest.mark.parametrize("seed", sim.STANDARD_SEEDS + (1, 2))
def test_staging_rewritten_before_the_store_read_it_is_a_hazard(seed):
    """Whether or not the simulated store has already copied the tile, a write to its source before
    cp.async.bulk.wait_group.read is reported (PTX ISA: the source may be read until then)."""
    plan, _ = launch(7, seed, defines={"STORE_RACE": 1})
    with pytest.raises(sim.SimHazard, match="staging buffer reused before cp.async.bulk.wait_group.read"):
        plan.run()


@pytest.mark.parametrize("raw", [False, True])
def test_store_without_proxy_fence_is_a_hazard(raw):
    """Every store form: st.shared and a plain pointer store alike reach the TMA store only through
    fence.proxy.async; with the fence both are clean."""
    defines = {"RAW_STORES": 1} if raw else {}
    plan, _ = launch(7, 0, defines={"NO_PROXY_FENCE": 1, **defines})
    with pytest.raises(sim.SimHazard, match="no fence.proxy.async after it"):
        plan.run()
    launch(7, 0, defines=defines)[0].run()


def test_raw_shared_store_outside_the_window_is_misuse_and_the_process_lives():
    """A plain store at smem_raw[4096] with 4,096 B declared, and at smem_raw[600 KiB] (past the simulator's
    whole window): a report naming the CTA's declared shared memory, never a segfault."""
    for n in (SMEM, 600 * 1024):
        with pytest.raises(sim.SimMisuse, match=r"plain store of 1 B at shared offset .* outside CTA \d's shared memory"):
            launch(8, 0, n=n)[0].run()
    launch(8, 0, n=SMEM - 1)[0].run()


def test_raw_global_store_past_a_tensor_names_it():
    """A plain pointer store one element past `out`: the report names the tensor, the element and the source
    line (the library's line table), and the run stops before the store lands."""
    plan, out = launch(9, 0, n=2 * T * 2, view=True)
    with pytest.raises(sim.SimMisuse) as e:
        plan.run()
    assert out._base[2 * T * 2] == 0   # the store never landed in the buffer behind the view
    msg = str(e.value)
    assert "out-of-bounds global access" in msg and "`out`" in msg and "element [512]" in msg, msg
    rec = e.value.report.misuse[0]
    if shutil.which("addr2line"):
        src = KERNEL.read_text().splitlines()
        assert rec["file"].endswith("sim_engine.cu") and "out[n] = 1" in src[rec["line"] - 1], rec


def test_a_store_far_from_every_tensor_names_none_of_them():
    """1 GB past `out`: the nearest tensor in memory may be another one, so the report names no element, only
    the distance to the nearest tensor; the process lives and a clean run follows."""
    with pytest.raises(sim.SimMisuse) as e:
        launch(9, 0, n=1 << 28)[0].run()
    msg = str(e.value)
    assert "out-of-bounds global access" in msg and "no tensor's element" in msg and "element [" not in msg, msg
    assert launch(0, 0)[0].run().ok


@pytest.mark.parametrize("seed", ["eager", 0])
def test_a_spin_on_global_memory_is_a_hang(seed, monkeypatch):
    """while (*flag == 0) {} that nobody sets has no scheduling point: reported as a hang with its line."""
    monkeypatch.setenv("PELIB_SIM_MAX_SPIN", "100000")
    with pytest.raises(sim.SimDeadlock, match="hang: the thread loaded memory") as e:
        launch(10, seed)[0].run()
    rec = e.value.report.deadlock[0]
    assert rec["wait"] == "spin" and rec["file"].endswith("sim_engine.cu")


def test_a_division_by_zero_is_a_report():
    with pytest.raises(sim.SimMisuse, match="arithmetic trap"):
        launch(14, 0, n=0)[0].run()
    launch(14, 0, n=7)[0].run()


def test_out_of_bounds_epilogue_is_a_report_and_the_process_lives():
    """sm90/00 with its raw-pointer epilogue guard `row >= M` mutated to `row > M` (pelib.sim.catalog): the store
    one row past the output is reported with the tensor, the element and the line, before it lands; the same
    process then simulates the unmutated stage (before: a clean report, then "double free or corruption")."""
    from pelib.sim import catalog as C
    m = C.mutation("sm90-00-row-guard-off-by-one")
    with C.patched(C.stage_of(m), m) as s:
        with pytest.raises(sim.SimMisuse) as e:
            sim_host.run(s, "sim", sim_seed="eager")
    msg = str(e.value)
    assert "out-of-bounds global access" in msg and "of `c`" in msg and "past its end" in msg, msg
    if shutil.which("addr2line"):
        rec = e.value.report.misuse[0]
        assert rec["file"].endswith("00_tma_wgmma.cu"), rec
        assert "f32x2_to_bf16x2" in s.path.read_text().splitlines()[rec["line"] - 1], rec
    assert sim_host.run(Stage("sm90/00_tma_wgmma"), "sim")["ok"]


def test_capped_lists_say_so():
    """Each race is one record per source line and kind; the report counts every instance."""
    rep = launch(7, 0, defines={"STORE_RACE": 1})[0].run(check=False)
    assert rep.stats["hazards_total"] > len(rep.hazards) == 1 and rep.stats["records_cap"] == 50
    assert f"hazard ({rep.stats['hazards_total']}, the first 1 kept)" in rep.summary()


def test_stack_overflow_is_a_report():
    with pytest.raises(sim.SimMisuse, match="stack overflowed"):
        launch(11, 0, n=10_000)[0].run()
    launch(0, 0)[0].run()   # the engine runs on


@pytest.mark.parametrize("seed", sim.STANDARD_SEEDS + (1, 2))
def test_a_read_before_the_tma_load_is_waited_for_is_a_hazard_on_every_schedule(seed):
    """Happens-before, not timing: the read is not ordered after the load's barrier phase, so it is a hazard
    whether the load has landed (eager) or not (lazy); after the wait the same read is clean and sees the data."""
    with pytest.raises(sim.SimHazard, match="before this thread knows it landed"):
        launch(12, seed, defines={"EARLY_READ": 1})[0].run()
    plan, out = launch(12, seed)
    plan.out2.view(torch.int16).copy_(torch.arange(plan.out2.numel(), dtype=torch.int16).view(plan.out2.shape))
    plan.run()
    want = plan.out2.view(torch.int32).view(2, 512)[:, :256]
    assert torch.equal(out.view(2, 256), want)


def test_a_barrier_armed_and_never_waited_on_is_a_warning():
    rep = launch(13, 0)[0].run()
    assert rep.ok and rep.warnings and "tx-count of 128 B" in rep.warnings[0]["text"]
    assert "warning" in rep.summary()


def test_named_schedules():
    assert sim.default_seed("lazy") == "lazy" and sim.default_seed(3) == 3
    with pytest.raises(sim.SimError, match="'lazy', 'eager'|one of"):
        sim.default_seed("slow")
    rep = launch(0, "lazy")[0].run()
    assert rep.seed == "lazy" and rep.stats["p_async"] == 0


def test_host_build_is_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(sim_build, "_CACHE_DIR", tmp_path)
    a = sim.stage_build(KERNEL, "sim_engine", {"MODE": 0})
    b = sim.stage_build(KERNEL, "sim_engine", {"MODE": 0})
    assert not a.cached and b.cached and a.path.read_bytes() == b.path.read_bytes()
    c = sim.stage_build(KERNEL, "sim_engine", {"MODE": 1})
    assert not c.cached


def test_missing_compiler_says_what_to_install(monkeypatch):
    monkeypatch.setattr(sim_build, "_COMPILERS", {})
    monkeypatch.setenv("PELIB_SIM_CXX", "no-such-compiler")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(sim.SimToolchainError, match="g\\+\\+ >= 11 or clang\\+\\+ >= 14.*install"):
        sim.compiler()


def test_device_build_never_opens_a_simulated_header():
    """NVRTC builds a stage for sm_100a from src/kernels only: no include path and no included file is
    under src/kernels/sim (whose twins the host build picks first)."""
    path = KERNELS / "fp8" / "09_persistent_megakernel.cu"
    b = nvrtc.build(path, "sm_100a")
    assert b.exports["smem_bytes"] > 0
    dirs = nvrtc._include_paths(path.parent)
    sim_dir = (KERNELS / "sim").resolve()
    assert not any(Path(d).resolve() == sim_dir or sim_dir in Path(d).resolve().parents for d in dirs)
    files = [p.resolve() for _, p, _ in nvrtc.expand_sources(path, [Path(d) for d in dirs])]
    assert any(p.name == "tcgen05.cuh" for p in files)
    assert not [p for p in files if sim_dir in p.parents]


def test_host_build_picks_the_twins():
    """The host build of a stage opens the simulated twin of each instruction header, never the real one."""
    s = Stage("fp8/09_persistent_megakernel")
    lib = sim.stage_build(s.path, s.build.kernel)
    assert lib.path.is_file()
    store = sim_build._store()
    import json
    meta = json.loads((lib.path.parent / "meta.json").read_text())
    deps = [Path(d) for d, _ in meta["deps"]]
    sim_dir = (KERNELS / "sim").resolve()
    for name in ("mbarrier.cuh", "tma.cuh", "tcgen05.cuh", "cluster.cuh", "memory.cuh", "convert.cuh"):
        assert sim_dir / "common" / name in deps, name
        assert (KERNELS / "common" / name).resolve() not in deps, name
    assert (KERNELS / "common" / "epilogue.cuh").resolve() in deps   # building blocks are the real ones
    del store


# ---- TMEM: tcgen05.st, .mma and .ld on the same columns (tests/kernels/sim_tmem.cu) ---------------------------
TMEM_KERNEL = Path(__file__).parent / "kernels" / "sim_tmem.cu"


def tmem_launch(seed, **defines):
    out = torch.zeros(2 * 128 * 32, dtype=torch.int32)
    plan = sim.prepare(TMEM_KERNEL, (out,), grid=(1, 1, 1), block=(128, 1, 1), cluster=(1, 1, 1), smem=1024 + 20544,
                       kernel="sim_tmem", arch="host", defines=defines, seed=seed, names=("out",))
    return plan, out


@pytest.mark.parametrize("seed", sim.STANDARD_SEEDS + (1, 2))
def test_tcgen05_st_then_wait_then_ld_and_mma_are_clean(seed):
    """tcgen05.st -> wait::st -> fence -> tcgen05.ld reads what was stored; after wait::st and a CTA barrier
    an MMA of zero operands accumulates into the stored D: D + 0 comes back (PTX ISA 9.7.16.6.4)."""
    plan, out = tmem_launch(seed)
    rep = plan.run()
    assert rep.ok and not rep.hazards
    got = out.view(torch.float32).view(2, 128, 32)
    want = torch.arange(128, dtype=torch.float32)[:, None] + 256 * torch.arange(32, dtype=torch.float32)
    assert torch.equal(got[0], want) and torch.equal(got[1], want)
    assert any(e["kind"] == "tmem_st" and e["bytes"] == 32 * 32 * 4 for e in rep.events)


@pytest.mark.parametrize("seed", sim.STANDARD_SEEDS + (1, 2))
@pytest.mark.parametrize("define,says", [
    ("ST_NO_WAIT_LD", r"tcgen05.ld reads TMEM columns 0..31 of CTA 0, which tcgen05.st issued at \S*sim_tmem.cu:\d+ "
                      r"by CTA 0 warp \d lane \d+ writes, .*needs tcgen05.wait::st of its warp"),
    ("ST_NO_WAIT_MMA", r"tcgen05.mma writes TMEM columns 0..31 of CTA 0 while tcgen05.st issued at \S*sim_tmem.cu:\d+ .*"
                       r"needs tcgen05.wait::st of its warp"),
    ("ST_DURING_MMA", r"tcgen05.st writes TMEM columns 0..31 of CTA 0 while tcgen05.mma issued at \S*sim_tmem.cu:\d+ .*"
                      r"not known complete \(needs a wait on the mbarrier phase a later tcgen05.commit"),
    ("LD_THEN_ST", r"tcgen05.st writes TMEM columns 0..31 of CTA 0 while tcgen05.ld issued at \S*sim_tmem.cu:\d+ .*"
                   r"may still read them \(needs tcgen05.wait::ld of its warp"),
])
def test_tcgen05_st_racing_the_columns_is_a_hazard_on_every_schedule(define, says, seed):
    """tcgen05.st is asynchronous, complete only at tcgen05.wait::st of its warp (PTX ISA 9.7.16.8.4-5): a read,
    or an MMA's write, of its columns before that wait races it, and so does a store into columns an MMA not
    yet known complete writes or a tcgen05.ld not yet waited for reads; on every schedule."""
    with pytest.raises(sim.SimHazard, match=says):
        tmem_launch(seed, **{define: 1})[0].run()


@pytest.mark.parametrize("seed", sim.STANDARD_SEEDS)
@pytest.mark.parametrize("define,says", [
    ("NO_BEFORE_MMA", r"tcgen05.mma writes TMEM columns 0..31 of CTA 0 while tcgen05.(ld|st) issued at \S*sim_tmem.cu:\d+ "
                      r".*its warp waited for it \(tcgen05.wait::(ld|st)\), but released the columns .*no "
                      r"tcgen05.fence::before_thread_sync"),
    ("NO_AFTER_MMA", r"tcgen05.mma writes TMEM columns 0..31 of CTA 0 while tcgen05.(ld|st) issued at .*this thread's "
                     r"wait observed it, but no tcgen05.fence::after_thread_sync since"),
    ("NO_AFTER_LD", r"tcgen05.ld reads TMEM columns 0..31 of CTA 0, which tcgen05.mma issued at \S*sim_tmem.cu:\d+ .*"
                    r"this thread's wait observed it, but no tcgen05.fence::after_thread_sync since"),
])
def test_a_missing_tcgen05_fence_is_a_hazard_on_every_schedule(define, says, seed):
    """PTX ISA 9.7.16.6.3: tcgen05 operations are ordered across a thread synchronisation only through
    tcgen05.fence::before_thread_sync in the thread before it and ::after_thread_sync in the thread after it;
    each fence left out is a hazard at the tcgen05 operation it would have ordered, naming the fence."""
    with pytest.raises(sim.SimHazard, match=says):
        tmem_launch(seed, **{define: 1})[0].run()


@pytest.mark.parametrize("seed", sim.STANDARD_SEEDS)
def test_a_tcgen05_fence_moved_but_still_ordering_is_clean(seed):
    """The fence after the bar.sync issued only by the MMA's thread, right before its MMA: still orders it."""
    plan, out = tmem_launch(seed, AFTER_IN_MMA_THREAD=1)
    rep = plan.run()
    assert rep.ok and not rep.hazards


# ---- plain accesses: a data race is a hazard (PTX ISA 8.7.1) --------------------------------------------------
@pytest.mark.parametrize("seed", sim.STANDARD_SEEDS + (1, 2))
@pytest.mark.parametrize("plain,race", [(0, None), (1, "load|store"), (2, None), (3, "load|store"), (4, None),
                                        (5, "load|store"), (6, "store"), (7, "load|store")])
def test_plain_accesses_of_shared_memory_race_unless_ordered(plain, race, seed):
    """Two threads' plain accesses of one shared word, one a store: clean when a bar.sync, a __syncwarp or an
    mbarrier arrive -> wait orders them, a data race on every schedule when nothing does (a store after the
    arrive is not ordered by it). The report names both accesses' lines."""
    plan, out = launch(15, seed, defines={"PLAIN": plain})
    if race is None:
        rep = plan.run()
        assert rep.ok and not rep.hazards
        assert out[:2].tolist() == [5, 6]   # thread 32 (or lane 1) of each CTA read thread 0's store
        return
    with pytest.raises(sim.SimHazard, match=rf"a plain (load of|store to) \[0x100, 0x104\) of CTA \d races warp \d "
                                            rf"lane \d+'s plain ({race}) at \S*sim_engine.cu:\d+ .*: a data race "
                                            rf"\(PTX ISA 8.7.1") as e:
        plan.run()
    rec = e.value.report.hazards[0]
    if shutil.which("addr2line"):
        src = KERNEL.read_text().splitlines()
        assert rec["file"].endswith("sim_engine.cu") and "*word" in src[rec["line"] - 1], rec
        other = int(rec["text"].split("sim_engine.cu:")[1].split()[0])
        assert "*word" in src[other - 1] and other != rec["line"], rec["text"]


@pytest.mark.parametrize("seed", sim.STANDARD_SEEDS + (1, 2))
def test_a_tma_load_over_bytes_still_read_plainly_is_a_hazard(seed):
    """A TMA load into bytes another thread loads plainly with nothing ordering the two: a hazard whichever comes
    first (the load issued over bytes still read, or the read of bytes not known landed); with a bar.sync
    between them the same run is clean."""
    over = r"TMA load into \[0x800, 0x1000\) of CTA \d races warp 1 lane 0's plain load at \S*sim_engine.cu:\d+ .*of the same"
    early = r"a load of \[0x840, 0x844\) of CTA \d, which TMA load issued at \S*sim_engine.cu:\d+ .* writes, before this"
    with pytest.raises(sim.SimHazard, match=f"{over}|{early}") as e:
        launch(12, seed, defines={"READ_BEFORE_LOAD": 1})[0].run()
    if seed == "eager":   # this schedule runs the read first
        assert re.search(over, str(e.value)), str(e.value)
    assert launch(12, seed, defines={"READ_BEFORE_LOAD": 2})[0].run().ok
