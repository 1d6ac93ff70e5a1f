"""Tensor-map specs: every cuTensorMapEncodeTiled rule is caught before the driver is called."""
import pytest
import torch

from pelib import tma
from pelib.tma import TensorMapError, TensorMapSpec, make_spec


def good(**kw):
    base = dict(dtype="bfloat16", shape=(256, 512), box=(64, 64), swizzle=128, address=0x10000)
    base.update(kw)
    return make_spec(base.pop("dtype"), base.pop("shape"), base.pop("box"), **base)


def test_valid_2d_bf16_sw128():
    s = good().validate()
    assert s.dims == (512, 256)            # innermost first
    assert s.strides == (1024,)            # 512 bf16 per row
    assert s.box == (64, 64)
    assert s.inner_box_bytes == 128
    assert s.box_bytes == 64 * 64 * 2
    assert s.shape == (256, 512) and s.box_shape == (64, 64)


def test_fp8_travels_as_uint8():
    s = make_spec(torch.float8_e4m3fn, (128, 768), (128, 128), swizzle=128)
    assert s.dtype == "uint8" and s.source_dtype == "float8_e4m3fn"
    assert s.inner_box_bytes == 128
    s.validate()


def test_3d_map():
    s = make_spec("bfloat16", (4, 128, 256), (1, 64, 64), swizzle=128).validate()
    assert s.rank == 3 and s.dims == (256, 128, 4)
    assert s.strides == (512, 128 * 512)
    assert s.box_bytes == 64 * 64 * 2


def problems_of(spec):
    return "\n".join(spec.problems())


@pytest.mark.parametrize("kw, needle", [
    (dict(address=0x10008), "16-byte aligned"),
    (dict(shape=(256, 500)), "not a multiple of 16"),          # row of 1000 B
    (dict(box=(64, 300), swizzle=0), "must be in 1..256"),
    (dict(box=(0, 64)), "must be in 1..256"),
    (dict(box=(64, 4), swizzle=0), "inner box is 8 B"),       # 4 bf16 = 8 B
    (dict(box=(64, 128)), "swizzle 128B allows at most 128"),  # 256 B > 128 B span
    (dict(box=(64, 64), swizzle=64), "swizzle 64B allows at most 64"),
    (dict(box=(64, 32), swizzle=32), "swizzle 32B allows at most 32"),
    (dict(swizzle=96), "swizzle 96"),
    (dict(element_strides=(1, 9)), "element_strides"),
    (dict(oob_fill="nan", dtype="uint8", box=(64, 128)), "floating-point"),
])
def test_rule_violations(kw, needle):
    s = good(**kw)
    with pytest.raises(TensorMapError, match="invalid") as e:
        s.validate()
    assert needle in str(e.value), str(e.value)


def test_rank_and_dim_limits():
    s = TensorMapSpec("uint8", dims=(16,) * 6, strides=(16,) * 5, box=(16,) * 6)
    assert "rank 6" in problems_of(s)
    s = TensorMapSpec("uint8", dims=(16, 2**32 + 1), strides=(16,), box=(16, 1))
    assert "dims[1]" in problems_of(s)
    s = TensorMapSpec("uint8", dims=(16, 4), strides=(2**40,), box=(16, 1))
    assert "2^40" in problems_of(s)


def test_interleave_rules():
    s = TensorMapSpec("uint16", dims=(8, 4, 4), strides=(32, 128), box=(8, 4, 4), interleave=32,
                      swizzle=0, address=0x10010)
    p = problems_of(s)
    assert "32-byte aligned" in p and "requires swizzle 32B" in p
    s2 = TensorMapSpec("uint16", dims=(8, 4), strides=(16,), box=(8, 4), interleave=16)
    assert "rank >= 3" in problems_of(s2)


def test_all_problems_listed_at_once():
    s = good(address=0x10004, box=(64, 4), swizzle=0)
    p = s.problems()
    assert len(p) == 2


def test_non_contiguous_inner_dim_refused():
    t = torch.zeros(64, 64, dtype=torch.bfloat16).t()
    with pytest.raises(TensorMapError, match="contiguous"):
        tma.spec_from_tensor(t, (16, 16))


def test_spec_from_cpu_tensor_strides():
    t = torch.zeros(10, 256, dtype=torch.float32)[:, :128]   # row pitch 1024 B
    s = tma.spec_from_tensor(t, (8, 32), swizzle=128)
    assert s.dims == (128, 10) and s.strides == (1024,)
    assert s.address == t.data_ptr()


def test_unknown_dtype():
    with pytest.raises(TensorMapError, match="uint8"):
        tma.tma_dtype(torch.complex64)


def test_encode_without_driver_is_clear(monkeypatch):
    from pelib import device
    monkeypatch.setattr(device, "current", lambda: device.DeviceInfo(False, "no CUDA GPU here"))
    with pytest.raises(tma.DriverUnavailable, match="no CUDA GPU here"):
        tma.encode(good())


def test_encode_validates_first(monkeypatch):
    """A bad spec fails with the rule, even where there is no driver."""
    with pytest.raises(TensorMapError):
        tma.encode(good(address=0x10001))


def test_swizzle_128b_pattern():
    # Row r of a 128-B swizzled box: 16-B chunk c lands at chunk c ^ (r % 8) (CuTe Swizzle<3,4,3>).
    for r in range(16):
        for c in range(8):
            logical = r * 128 + c * 16
            assert tma.swizzle_byte_offset(logical, 128) == r * 128 + ((c ^ (r % 8)) * 16)
    assert tma.swizzle_byte_offset(3 * 128 + 16 + 5, 64) == 3 * 128 + ((1 ^ 3) * 16) + 5
    assert tma.swizzle_byte_offset(1 * 128 + 0, 32) == 128 + 16
    assert tma.swizzle_byte_offset(777, 0) == 777


def test_a_map_past_its_tensor_is_refused():
    """HB27: F24's output map is sized from the problem; over an output view cut 64 rows short its TMA stores
    wrote those 64 rows of memory that was not the tensor's, on a clean report (a TMA access is checked
    against its map alone). A map must lie inside the tensor it is made over."""
    import torch
    buf = torch.zeros((128, 64), dtype=torch.bfloat16)
    view = buf[:64]
    full = tma.make_spec(torch.bfloat16, (128, 64), (32, 64), address=view.data_ptr())
    with pytest.raises(tma.TensorMapError, match=r"tmap_out spans bytes \[\+0, \+16,384\) of its tensor, which holds 8,192 B"):
        tma.check_owner(full, view, "out")
    tma.check_owner(full, buf, "out")                                          # the whole buffer holds it
    tma.check_owner(tma.spec_from_tensor(view, (32, 64)), view, "out")        # a map sized from the tensor
    strided = buf[:, :32]                                                      # rows of 64, 32 used: its span
    tma.check_owner(tma.spec_from_tensor(strided, (32, 32)), strided, "out")


def test_the_simulated_f24_refuses_an_output_cut_short(monkeypatch):
    """The same through the simulator's host plan, with Problem.validate (which refuses the short view first on
    the public path) stepped around as the attempt did."""
    from pelib.sim import host as sim_host
    from pelib.stage import Stage
    s = Stage("fp8/variants/09_f24_swizzled_staging")
    prob = s.problem("sim")
    t = s.inputs(prob, 0, "sim")
    t["out"] = t["out"][: prob.m - 64]
    monkeypatch.setattr(type(prob), "validate", lambda self, tensors, device=None: None)
    with pytest.raises(tma.TensorMapError, match="tmap_out spans bytes"):
        sim_host.plan(s, prob, t)
