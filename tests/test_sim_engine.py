"""The simulator's engine (pelib.sim, src/kernels/sim/runtime) on a small kernel: warp collectives, barriers,
one planted mistake per mode and what the report says about it; seeds, the event log, the host build and
its cache, and that the device build never sees a simulated header."""
from pathlib import Path

import numpy as np
import pytest
import torch

from pelib import build as nvrtc, launch as L, sim, sim_build, tma
from pelib.paths import KERNELS
from pelib.stage import Stage

KERNEL = Path(__file__).parent / "kernels" / "sim_engine.cu"
T = 128          # threads per CTA
SMEM = 4096      # dynamic shared memory of the launch


def launch(mode: int, seed: int = 0, smem: int = SMEM, n: int | None = None, ctas: int = 2, defines=None):
    out = torch.zeros(2 * T * ctas, dtype=torch.int32)
    out2 = torch.zeros(16 * ctas, 64, dtype=torch.bfloat16)
    spec = tma.spec_from_tensor(out2, (16, 64), swizzle=0)
    arg_n = np.int32(n if n is not None else out.numel())
    args = (tma.TensorMap(spec, cumap=None, owner=out2), out, out2, arg_n)
    plan = sim.prepare(KERNEL, args, grid=(ctas, 1, 1), block=(T, 1, 1), cluster=(1, 1, 1), smem=smem,
                       kernel="sim_engine", arch="host", defines={"MODE": mode, **(defines or {})}, seed=seed)
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
    assert w["tag"] == 7 and w["parity"] == 0 and w["barrier"] is not None and w["role"].startswith("warp ")
    assert w["file"].endswith("sim_engine.cu") and w["line"] > 0


def test_deadlock_names_the_wait():
    plan, _ = launch(1, 0)
    with pytest.raises(sim.SimDeadlock) as e:
        plan.run()
    msg = str(e.value)
    assert "tag 7" in msg and "parity 0" in msg and "pending arrivals 1 of 2" in msg
    assert "sim_engine.cu:" in msg and "PELIB_SIM_SEED=0" in msg
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
    with pytest.raises(L.LaunchError, match="sim_engine needs 233472 B dynamic .* the simulated SM .* allows 232448 B"):
        launch(0, 0, smem=228 * 1024)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tma_store_from_staging(seed):
    plan, _ = launch(7, seed)
    plan.run()
    words = plan.out2.view(torch.int32).view(2, 16, 32).numpy()     # CTA, row, 4-B word
    for c in range(2):
        want = c * 1000 + np.arange(16 * 32) // 4                     # each 16-B chunk holds one value
        assert (words[c].reshape(-1) == want).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_staging_rewritten_before_the_store_read_it_is_a_hazard(seed):
    """Whether or not the simulated store has already copied the tile, a write to its source before
    cp.async.bulk.wait_group.read is reported (PTX ISA: the source may be read until then)."""
    plan, _ = launch(7, seed, defines={"STORE_RACE": 1})
    with pytest.raises(sim.SimHazard, match="before cp.async.bulk.wait_group.read retired the store"):
        plan.run()


def test_store_without_proxy_fence_is_a_hazard():
    plan, _ = launch(7, 0, defines={"NO_PROXY_FENCE": 1})
    with pytest.raises(sim.SimHazard, match="never ordered with fence.proxy.async"):
        plan.run()


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
