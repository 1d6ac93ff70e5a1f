"""Launch preparation (arch check, shape, arguments) up to the launch call, on the CPU."""
import ctypes
from pathlib import Path

import numpy as np
import pytest
import torch

from pelib import launch as L
from pelib.build import build
from pelib.device import DeviceInfo, UnsupportedGPU
from pelib.isa.limits import SMEM_LIMIT
from pelib.tma import TensorMap, make_spec

K = Path(__file__).parent / "kernels"
H100 = DeviceInfo(True, name="NVIDIA H100", cc=(9, 0), sm_count=132, l2_bytes=50 << 20,
                  smem_optin_bytes=SMEM_LIMIT, ordinal=0)
B200 = DeviceInfo(True, name="NVIDIA B200", cc=(10, 0), sm_count=148, l2_bytes=126 << 20,
                  smem_optin_bytes=SMEM_LIMIT, ordinal=0)


class FakeCudaTensor:
    """Stands in for a CUDA tensor (there is none here): what pack_arg reads."""

    def __init__(self, ptr=0x7F0000000000, index=0, contiguous=True, shape=(4, 4)):
        self._ptr, self.is_cuda, self._c, self.shape = ptr, True, contiguous, shape
        self.device = torch.device("cuda", index)
        self.dtype = torch.float32

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return self._c

    def stride(self):
        return (1, 4)


@pytest.fixture(scope="module")
def cluster90():
    return build(K / "rt_cluster.cu", "sm_90a")


@pytest.fixture(scope="module")
def tma90():
    return build(K / "rt_tma_load.cu", "sm_90a")


def test_prepare_cluster_plan(cluster90):
    a, b, c = FakeCudaTensor(), FakeCudaTensor(0x7F0000001000), FakeCudaTensor(0x7F0000002000)
    plan = L.prepare(cluster90, (a, b, c), grid=4, block=128, cluster=(2, 1, 1), info=H100)
    assert plan.kernel == "rt_cluster" and plan.arch == "sm_90a"
    assert plan.grid == (4, 1, 1) and plan.cluster == (2, 1, 1) and plan.block == (128, 1, 1)
    assert plan.args == (np.uint64(0x7F0000000000), np.uint64(0x7F0000001000), np.uint64(0x7F0000002000))
    assert all(type(x) is np.uint64 for x in plan.args)
    assert plan.smem == 0
    assert "cluster=(2, 1, 1)" in plan.describe() and "rt_cluster" in plan.describe()


def test_core_grid_counts_clusters(cluster90):
    plan = L.prepare(cluster90, (None, None, None), grid=(8, 2), block=64, cluster=(2, 1, 1), info=H100)
    assert plan.grid == (8, 2, 1) and plan.core_grid == (4, 2, 1)
    plain = L.prepare(cluster90, (None, None, None), grid=(8, 2), block=64, info=H100)
    assert plain.core_grid == (8, 2, 1)


def test_smem_from_exports(tma90):
    plan = L.prepare(tma90, (None, None, None, np.int32(0), np.int32(0), np.int32(0)),
                     grid=1, block=128, info=H100)
    assert plan.smem == 64 * 1024 + 1024 > L.STATIC_SMEM_LIMIT


def test_arch_mismatch_names_what_page_shows(tma90):
    with pytest.raises(UnsupportedGPU, match="stage needs sm_90a, found sm_100: showing compiled"):
        L.prepare(tma90, (), grid=1, block=128, info=B200)
    with pytest.raises(UnsupportedGPU, match="no CUDA GPU"):
        L.prepare(tma90, (), grid=1, block=128, info=DeviceInfo(False, "no CUDA GPU here"))


@pytest.mark.parametrize("arg, needle", [
    (7, "Python int"), (1.5, "Python float"), (True, "Python bool"),
    (torch.zeros(4), "on cpu"), ("x", "has type str"),
    (FakeCudaTensor(index=1), "launches on cuda:0"),
    (FakeCudaTensor(contiguous=False), "not contiguous"),
])
def test_bad_arguments(cluster90, arg, needle):
    with pytest.raises(L.LaunchError, match=needle):
        L.prepare(cluster90, (arg,), grid=2, block=64, cluster=2, info=H100)


def test_argument_widths():
    assert L.pack_arg(0, np.int32(-3), 0)[0].dtype == np.int32
    v, d = L.pack_arg(0, ctypes.c_uint16(9), 0)
    assert v.dtype == np.uint16 and v == 9
    assert L.pack_arg(0, None, 0)[0] == np.uint64(0)
    v, d = L.pack_arg(0, L.Strided(FakeCudaTensor(contiguous=False)), 0)
    assert v == np.uint64(0x7F0000000000)


def test_tensor_map_argument_by_value():
    class FakeMap:  # a CUtensorMap stand-in: pack_arg keeps it whole
        pass
    FakeMap.__name__ = "CUtensorMap"
    fm = FakeMap()
    fm.getPtr = lambda: 0x1000
    tm = TensorMap(make_spec("bfloat16", (64, 64), (64, 64), swizzle=128), fm)
    v, d = L.pack_arg(0, tm, 0)
    assert v is fm and d.startswith("tmap[")


@pytest.mark.parametrize("kw, needle", [
    (dict(grid=3, cluster=2), "not a multiple of cluster"),
    (dict(block=2048), "more than 1024"),
    (dict(block=(0,)), "positive"),
    (dict(cluster=(4, 4, 2), grid=(4, 4, 2)), "limit is 16"),
    (dict(smem=300 * 1024), "allows"),
])
def test_bad_shapes(cluster90, kw, needle):
    args = dict(grid=4, block=64, cluster=1)
    args.update(kw)
    with pytest.raises(L.LaunchError, match=needle):
        L.prepare(cluster90, (None, None, None), info=H100, **args)


def test_unknown_kernel_name(cluster90):
    with pytest.raises(L.LaunchError, match="no kernel"):
        L.prepare(cluster90, (), grid=1, block=32, kernel="nope", info=H100)


def test_fault_text_names_kernel():
    class E:
        name = "CUDA_ERROR_ILLEGAL_INSTRUCTION"
    t = L._fault_text("rt_hang [sm_90a] grid=(1, 1, 1)", E())
    assert "rt_hang" in t and "mbarrier wait timed out" in t and "restart" in t
