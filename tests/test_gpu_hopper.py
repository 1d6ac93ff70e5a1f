"""The sm90 stages on an H100/H200: each verified against pelib.reference with a NaN-poisoned output,
on the check shapes of pelib.kinds.sm90 (two K slices; one K slice with a wrapping ring; an M tail;
many tiles per persistent CTA) and on the full problem, through pelib.stage.Stage.run."""
import pytest

from pelib import device, stages
from pelib.kinds.sm90 import CHECK_PROBLEMS
from pelib.stage import Stage, Timed
from pelib.views.hopper import BEST

pytestmark = pytest.mark.gpu

STAGE_KEYS = [f"sm90/{p.stem}" for p in stages.family_stages("sm90")]


def _need_hopper():
    if not device.can_run("sm_90a"):
        pytest.skip(f"needs an sm_90 GPU: {device.current().describe()}")


def _verify(key, problem, defines=None, **kw):
    r = Stage(key, defines).run(problem, time=False, **kw)
    return r["verify"]


@pytest.fixture(scope="module")
def full_data():
    _need_hopper()
    s = Stage(BEST[0])
    p = s.problem("full")
    t = s.inputs(p, seed=11)
    return p, t, s.kind.reference(p, t)


@pytest.mark.parametrize("key", STAGE_KEYS)
@pytest.mark.parametrize("shape", CHECK_PROBLEMS)
def test_stage_small_shapes(key, shape):
    _need_hopper()
    rep = _verify(key, shape, seed=3)
    assert rep.ok, str(rep)
    assert rep.n_nan == 0


@pytest.mark.parametrize("key", STAGE_KEYS)
def test_stage_full_problem(key, full_data):
    p, t, ref = full_data
    rep = _verify(key, p, inputs=t, ref=ref)
    assert rep.ok, str(rep)


# The alternative paths of stages 06-09: B permuted in shared memory, the turn passed early, a deep ring
# without multicast, 3-CTA clusters over 6 column blocks.
NEW_VARIANTS = [("sm90/06_permuted_b", {"B_PERM_TMA": 0}), ("sm90/07_comb_resident", {"TURN_EARLY": 1}),
                ("sm90/07_comb_resident", {"BLOCK_N": 192, "NUM_STAGES": 10}), ("sm90/08_comb_init", {"B_PERM_TMA": 0}),
                ("sm90/09_multicast_pairs", {"BLOCK_N": 128, "NUM_STAGES": 16, "CLUSTER_N": 3}),
                ("sm90/09_multicast_pairs", {"B_PERM_TMA": 0})]


@pytest.mark.parametrize("key,defines", NEW_VARIANTS)
@pytest.mark.parametrize("shape", CHECK_PROBLEMS)
def test_new_stage_variants_small_shapes(key, defines, shape):
    _need_hopper()
    rep = _verify(key, shape, defines, seed=4)
    assert rep.ok, str(rep)


@pytest.mark.parametrize("key", ["sm90/07_comb_resident", "sm90/08_comb_init", "sm90/09_multicast_pairs"])
def test_new_stages_fresh_inputs(key):
    """The comb-residue order reuses comb across tiles: another draw on a shape whose row groups span
    several residue classes (medium: 784 row tiles, 16 per class)."""
    _need_hopper()
    rep = _verify(key, "medium", seed=777)
    assert rep.ok, str(rep)


def test_fresh_inputs_give_the_same_verdict():
    """Another seed on the best stage: a kernel that is right on one draw only is wrong."""
    _need_hopper()
    rep = _verify(BEST[0], "medium", BEST[1], seed=12345)
    assert rep.ok, str(rep)


def test_timed_run_is_verified_and_timed():
    """The whole path the chapters and make bench take: verify, then time, through the plan's watchdog."""
    _need_hopper()
    r = Stage(*BEST).run("medium", time=Timed(iters=5))
    assert r["ok"] and r["ms"] > 0 and r["launch"]["active_clusters"] is not None


def test_timing_build_records_producer_and_consumers():
    _need_hopper()
    tm = Stage(*BEST).run_timing("medium", seed=5)
    summ = tm.summary()
    assert 0 in summ["tma_issue"]["warps"]                       # the producer warp
    assert {4, 8} <= set(summ["kloop"]["warps"])                 # the first warp of each consumer
    assert set(summ["epi_phase1"]["warps"]) >= {4, 8}
