"""The sm90 stages on an H100/H200: each verified against pelib.reference with a NaN-poisoned output,
on the check shapes of pelib.hopper.check_problem (two K slices; one K slice with a wrapping ring; an
M tail; many tiles per persistent CTA) and on the full problem."""
import pytest

from pelib import hopper, problems

pytestmark = pytest.mark.gpu

STAGE_KEYS = [s.key for s in hopper.available()]


def _need_hopper():
    from pelib import device
    if not device.can_run(hopper.ARCH):
        pytest.skip(f"needs an sm_90 GPU: {device.current().describe()}")


@pytest.fixture(scope="module")
def full_data():
    _need_hopper()
    p = problems.patch_embed("siglip2")
    t = hopper.make_tensors(p, seed=11)
    return p, t, hopper.reference(p, t)


@pytest.mark.parametrize("key", STAGE_KEYS)
@pytest.mark.parametrize("shape", hopper.CHECK_PROBLEMS)
def test_stage_small_shapes(key, shape):
    _need_hopper()
    rep = hopper.verify(key, hopper.check_problem(shape), seed=3)
    assert rep.ok, str(rep)
    assert rep.n_nan == 0


@pytest.mark.parametrize("key", STAGE_KEYS)
def test_stage_full_problem(key, full_data):
    p, t, ref = full_data
    rep = hopper.verify(key, p, tensors=t, ref=ref)
    assert rep.ok, str(rep)


# The alternative paths of stages 06-09: B permuted in shared memory, the turn passed early, a deep ring
# without multicast, 3-CTA clusters over 6 column blocks.
NEW_VARIANTS = [("06", {"B_PERM_TMA": 0}), ("07", {"TURN_EARLY": 1}), ("07", {"BLOCK_N": 192, "NUM_STAGES": 10}),
                ("08", {"B_PERM_TMA": 0}), ("09", {"BLOCK_N": 128, "NUM_STAGES": 16, "CLUSTER_N": 3}),
                ("09", {"B_PERM_TMA": 0})]


@pytest.mark.parametrize("key,defines", NEW_VARIANTS)
@pytest.mark.parametrize("shape", hopper.CHECK_PROBLEMS)
def test_new_stage_variants_small_shapes(key, defines, shape):
    _need_hopper()
    rep = hopper.verify(key, hopper.check_problem(shape), defines, seed=4)
    assert rep.ok, str(rep)


@pytest.mark.parametrize("key", ["07", "08", "09"])
def test_new_stages_fresh_inputs(key):
    """The comb-residue order reuses comb across tiles: another draw on a shape whose row groups span
    several residue classes (medium: 784 row tiles, 16 per class)."""
    _need_hopper()
    rep = hopper.verify(key, problems.patch_embed("medium"), seed=777)
    assert rep.ok, str(rep)


def test_fresh_inputs_give_the_same_verdict():
    """Another seed on the best stage: a kernel that is right on one draw only is wrong."""
    _need_hopper()
    from pelib import hopper_bench
    key, defines = hopper_bench.BEST
    rep = hopper.verify(key, problems.patch_embed("medium"), defines, seed=12345)
    assert rep.ok, str(rep)


def test_timing_build_records_producer_and_consumers():
    _need_hopper()
    from pelib import hopper_bench
    key, defines = hopper_bench.BEST
    tm = hopper.clock_breakdown(key, problems.patch_embed("medium"), defines, seed=5)
    summ = tm.summary()
    assert 0 in summ["tma_issue"]["warps"]                       # the producer warp
    assert {4, 8} <= set(summ["kloop"]["warps"])                 # the first warp of each consumer
    assert set(summ["epi_phase1"]["warps"]) >= {4, 8}
