"""Every PTX wrapper of common/{mbarrier,tma,cluster,timing}.cuh compiles for both archs."""
from pathlib import Path

import pytest

from pelib.build import build

KERNEL = Path(__file__).parent / "kernels" / "rt_wrappers.cu"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("defines", [{}, {"TIMING": 1}, {"PE_UNBOUNDED_WAIT": 1}])
def test_wrappers_compile(arch, defines):
    b = build(KERNEL, arch, defines)
    assert "rt_wrappers" in b.ptxas
    if "TIMING" in defines:
        assert b.exports["timing_phases"] > 0
    else:
        assert "timing_phases" not in b.exports


def test_cta_group_2_only_on_sm100():
    """The 2-SM TMA form appears in sm_100a SASS/PTX only (guarded by __CUDA_ARCH__ >= 1000)."""
    b100 = build(KERNEL, "sm_100a")
    b90 = build(KERNEL, "sm_90a")
    assert b100.histogram["UTMALDG"] > b90.histogram["UTMALDG"]


def test_bounded_wait_traps():
    """The bounded wait compiles a trap (BPT.TRAP in SASS); PE_UNBOUNDED_WAIT removes it."""
    bounded = build(KERNEL, "sm_90a")
    unbounded = build(KERNEL, "sm_90a", {"PE_UNBOUNDED_WAIT": 1})
    assert "BPT.TRAP" in bounded.sass
    assert "BPT.TRAP" not in unbounded.sass
