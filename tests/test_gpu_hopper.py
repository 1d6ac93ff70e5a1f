"""The sm90 stages on an H100/H200: each verified against pelib.reference with a NaN-poisoned output,
on small shapes (one K step; an M tail; several tiles per persistent CTA) and on the full problem."""
import pytest

from pelib import hopper, problems

pytestmark = pytest.mark.gpu

STAGE_KEYS = [s.key for s in hopper.available()]


def _need_hopper():
    from pelib import device
    if not device.can_run(hopper.ARCH):
        pytest.skip(f"needs an sm_90 GPU: {device.current().describe()}")


def _tail():
    return problems.PatchEmbed(name="tail", m=1000, n=768, k=768, tile={"m": 8, "n": 64, "k": 128})


@pytest.fixture(scope="module")
def full_data():
    _need_hopper()
    p = problems.patch_embed("siglip2")
    t = hopper.make_tensors(p, seed=11)
    return p, t, hopper.reference(p, t)


@pytest.mark.parametrize("key", STAGE_KEYS)
@pytest.mark.parametrize("shape", ["small", "tail", "medium"])
def test_stage_small_shapes(key, shape):
    _need_hopper()
    p = _tail() if shape == "tail" else problems.patch_embed(shape)
    rep = hopper.verify(key, p, seed=3)
    assert rep.ok, str(rep)
    assert rep.n_nan == 0


@pytest.mark.parametrize("key", STAGE_KEYS)
def test_stage_full_problem(key, full_data):
    p, t, ref = full_data
    rep = hopper.verify(key, p, tensors=t, ref=ref)
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
