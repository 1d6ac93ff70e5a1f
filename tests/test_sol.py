"""pelib.sol: the spec table, floors, and the NVFP4 log's speed-of-light figures."""
import dataclasses

import pytest

from pelib import problems, records, sol

NUMERIC = ("sms", "boost_clock_ghz", "tensor_clock_ghz", "fp8_flops_per_clk_sm", "fp4_dense_tflops", "fp8_dense_tflops",
           "bf16_dense_tflops", "hbm_tb_s", "hbm_tb_s_driver", "hbm_tb_s_achieved", "memory_gb", "l2_mb",
           "smem_per_sm_kb", "tmem_per_sm_kb")


def test_every_spec_field_has_a_source():
    s = sol.specs()
    assert list(s) == ["B200", "H100 SXM", "H200"]
    for g in s.values():
        for f in NUMERIC:
            assert f in g.sources and len(g.sources[f]) > 10, (g.name, f)


def test_spec_values():
    b, h, h2 = sol.spec("B200"), sol.spec("H100 SXM"), sol.spec("H200")
    assert (b.sms, b.fp8_dense_tflops, b.fp4_dense_tflops, b.bf16_dense_tflops, b.hbm_tb_s) == (148, 4500, 9000, 2250, 8.0)
    assert b.smem_per_sm_kb * 1024 == 233472           # the experiment log's SM limit
    assert b.tmem_per_sm_kb == 128 * 512 * 4 // 1024    # 128 lanes x 512 columns x 32 bit
    assert (h.sms, h.fp8_dense_tflops, h.hbm_tb_s, h.l2_mb) == (132, 1979, 3.35, 50)
    assert h2.hbm_tb_s == 4.8 and h2.fp8_dense_tflops == h.fp8_dense_tflops
    assert h.peak_tflops("nvfp4") is None and h.tmem_per_sm_kb == 0
    with pytest.raises(KeyError, match="unknown GPU"):
        sol.spec("A100")
    with pytest.raises(KeyError, match="unknown precision"):
        b.peak_tflops("int4")


def test_patch_embed_floor():
    pe = problems.patch_embed("siglip2")
    f = sol.floor(pe, "B200")
    assert abs(f.bytes / 1e9 - 2.14) < 0.005           # minimum traffic ~2.14 GB
    assert f.t_compute_s == pytest.approx(pe.flops / 4500e12)
    assert f.t_memory_s == pytest.approx(pe.min_bytes / 8e12)
    assert f.t_floor_s == max(f.t_compute_s, f.t_memory_s) and f.bound == "memory"
    assert f.evidence == "modelled"
    assert sol.floor(pe, "H200").bound == "compute"    # 4.8 TB/s moves the balance on Hopper


def test_nvfp4_floors_within_10pct_of_the_log():
    checks = sol.nvfp4_sol_check()
    assert [c.recorded_us for c in checks] == [8.994, 2.354, 1.333]
    for c in checks:
        assert c.within_10pct, c
        assert c.ratio == pytest.approx(0.96, abs=0.001)  # datasheet 8 TB/s: 4 % below the log


def test_nvfp4_log_assumption_reproduced():
    a = sol.lab_sol_assumption()
    assert a["hbm_tb_s"] == 7.68
    for c in sol.nvfp4_sol_check(bw_tb_s=a["hbm_tb_s"]):
        assert abs(c.ratio - 1) < 5e-4, c
    for p in problems.nvfp4_log_shapes():
        f = sol.floor(p, "B200")
        assert f.bound == "memory"                      # FP4 arithmetic never binds at M=128
        bw = sol.implied_bandwidth_tb_s(p, records.nvfp4_sol_us()[p.name] * 1e-6)
        assert bw == pytest.approx(7.68, rel=5e-4)


def test_hopper_has_no_nvfp4_floor():
    f = sol.floor(problems.nvfp4_gemm("k16384"), "H100 SXM")
    assert f.t_floor_s is None and f.bound == "n/a" and f.t_memory_s > 0


def test_table_renders_and_labels_evidence():
    t = sol.table()
    assert len(t) == 4 * 3
    assert all(dataclasses.is_dataclass(r) for r in t)
    assert "modelled" in str(t) and "modelled" in t._repr_markdown_()
    assert "siglip2" in repr(t) and "n/a" in str(t)
    t2 = sol.floor_table([problems.patch_embed("siglip2")] + problems.nvfp4_shapes())
    assert [r.problem for r in t2] == [r.problem for r in t]


def test_overrides():
    p = problems.nvfp4_gemm("k2048")
    assert sol.floor(p, "B200", bw_tb_s=4.0).t_memory_s == pytest.approx(2 * sol.floor(p, "B200").t_memory_s)
    assert sol.floor(p, "B200", peak_tflops=1.0).bound == "compute"


# ---- floors that name their clock -------------------------------------------------------------------

def test_the_fp8_rating_is_at_its_tensor_clock_not_the_boost_clock():
    """1,979 TFLOPS = 132 SMs x 8,192 FLOP/clk x 1.83 GHz; the 1.98 GHz maximum would give 2,141. B200: 4.5 PF
    = 148 x 16,384 x 1.856 GHz (a derived clock, and the source says so)."""
    for name in ("H100 SXM", "H200"):
        g = sol.spec(name)
        assert g.tensor_clock_ghz == 1.83 and g.boost_clock_ghz == 1.98 and g.fp8_flops_per_clk_sm == 8192
        assert g.fp8_tflops_at(g.tensor_clock_ghz) == pytest.approx(g.fp8_dense_tflops, rel=1e-3)
        assert round(g.fp8_tflops_at(g.boost_clock_ghz)) == 2141
    b = sol.spec("B200")
    assert b.fp8_flops_per_clk_sm == 16384 and b.fp8_tflops_at(b.tensor_clock_ghz) == pytest.approx(4500, rel=1e-3)
    assert b.sources["tensor_clock_ghz"].startswith("derived")
    assert (b.l2_mb, b.hbm_tb_s_driver, b.hbm_tb_s_achieved) == (126.5, 7.672, 6.721)
    assert "pytorch/ao" in b.sources["hbm_tb_s_driver"] and "NVIDIA/cccl" in b.sources["hbm_tb_s_achieved"]
    assert "glennklockwood.com" in sol.spec("H100 SXM").sources["tensor_clock_ghz"]
    with pytest.raises(ValueError, match="clock_ghz"):
        b.fp8_tflops_at(0)


def test_clocked_floors_of_the_patch_embedding():
    """The review's floors, each naming its clock or bandwidth (H100: 0.553 ms at 1.83 GHz, 0.511 at 1.98, 0.705
    at an in-kernel 1.436 GHz; memory 0.639 ms at 3.35 TB/s, 0.713 at a 3.0 TB/s copy)."""
    pe = problems.patch_embed("siglip2")
    fl = sol.clocked_floors(pe, "H100 SXM", clock_ghz=1.436, clock_what="in-kernel, measured (test)", copy_tb_s=3.0,
                            copy_what="copy, measured (test)")
    got = {(f.kind, f.clock_ghz or f.rate): round(f.ms, 3) for f in fl}
    assert got == {("tensor", 1.83): 0.553, ("tensor", 1.98): 0.511, ("tensor", 1.436): 0.705,
                   ("memory", 3.35): 0.639, ("memory", 3.0): 0.713}
    assert [f.basis for f in fl][2] == "in-kernel, measured (test)" and all(f.evidence == "modelled" for f in fl)
    b = {round(f.ms, 3) for f in sol.clocked_floors(pe, "B200") if f.kind == "memory"}
    assert b == {0.267, 0.279, 0.318}                   # datasheet, driver, NVIDIA's measured copy
    with pytest.raises(ValueError, match="FP8 tensor path"):
        sol.clocked_floors(problems.nvfp4_gemm("k2048"), "B200")


def test_clock_table_names_its_evidence():
    pe = problems.patch_embed("siglip2")
    t = sol.clock_table(pe, measured={"H100 SXM": {"clock_ghz": 1.4, "clock_what": "x"}}, evidence="measured (test)")
    assert "modelled" in t.caption and "measured (test)" in t.caption
    assert len(t.rows) == len(sol.clocked_floors(pe, "B200")) + len(sol.clocked_floors(pe, "H100 SXM", clock_ghz=1.4)) \
        + len(sol.clocked_floors(pe, "H200"))
