"""pelib.measure.baselines and pelib.measure.hopper_perf on the CPU: row shapes, skips, the precision metric on planted
data, the Triton kernel in the interpreter, the clock64 statistics and the floors."""
from fractions import Fraction

import numpy as np
import pytest
import torch

from pelib.measure import baselines, hopper_perf
from pelib import problems, reference
from pelib.stage import Stage
from pelib.views import hopper as hv
from pelib.problems import PatchEmbed

ROW_KEYS = {"name", "form", "target", "like_for_like", "status"}


def _inputs(m=392, n=64, k=64, positions=196, seed=3):
    p = PatchEmbed(name="t", m=m, n=n, k=k, positions=positions, tile={"m": 8, "n": 8, "k": 16})
    return p, p.make_inputs(seed=seed)


def test_every_baseline_has_a_form_a_target_and_a_like_for_like_note():
    assert {"cublas_gemm", "cublas_gemm_fastacc", "cublas_bias", "cublas_bias_pos", "triton_fused",
            "torch_compile"} <= set(baselines.names())
    for b in baselines.BASELINES.values():
        assert b.target in baselines.TARGETS and b.form and len(b.like_for_like) > 20
    for form, (what, target) in baselines.COMPILE_FORMS.items():
        assert target in baselines.TARGETS and what


def test_rows_without_a_gpu_are_skipped_with_the_reason():
    p, t = _inputs()
    rows = baselines.rows(p, t)
    assert [r["name"] for r in rows] == baselines.names()
    for r in rows:
        assert ROW_KEYS <= set(r) and r["status"] == "skipped" and "GPU" in r["reason"]
    assert [r["name"] for r in baselines.rows(p, t, include=["cublas_gemm"])] == ["cublas_gemm"]
    with pytest.raises(baselines.BaselineError, match="unknown baseline"):
        baselines.rows(p, t, include=["cublas"])


def test_triton_missing_names_the_reason(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_triton(name, *a, **k):
        if name.startswith("triton"):
            raise ImportError("No module named 'triton'")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_triton)
    assert "Triton is not installed" in baselines.triton_missing()


def test_sample_rows_are_fixed_and_include_both_ends():
    r1, r2 = baselines.sample_rows(928256), baselines.sample_rows(928256)
    assert torch.equal(r1, r2) and r1.numel() == baselines.SAMPLE_ROWS
    assert r1[0] == 0 and r1[-1] == 928255 and bool((r1[1:] > r1[:-1]).all())
    assert torch.equal(baselines.sample_rows(10), torch.arange(10))


def _rne_bf16_exact(x: float) -> float:
    """Round a double to BF16 (8 significant bits) with exact rational arithmetic, ties to even."""
    f = Fraction(x)
    if f == 0:
        return 0.0
    sign = -1 if f < 0 else 1
    f = abs(f)
    e = 0
    while f >= 2:
        f /= 2
        e += 1
    while f < 1:
        f *= 2
        e -= 1
    scaled = f * 128                      # 1.xxxxxxx -> 8-bit integer part
    lo = scaled.numerator // scaled.denominator
    rem = scaled - lo
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1):
        lo += 1
    return sign * float(Fraction(lo, 128) * Fraction(2) ** e)


def test_fp64_to_bf16_rounds_once_to_nearest_even():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4000, generator=g, dtype=torch.float64) * 37
    # planted ties and near-ties: 1 + 2^-8 (tie, rounds to even 1.0), 1 + 3 * 2^-8 (tie, rounds up),
    # and a value that float32 rounding would move onto a tie (double rounding)
    planted = [1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 2.0**-8), 1 + 2.0**-8 + 2.0**-40, 1 + 2.0**-8 - 2.0**-40]
    x = torch.cat([x, torch.tensor(planted, dtype=torch.float64)])
    got = baselines.round_fp64_to_bf16(x).double().tolist()
    want = [_rne_bf16_exact(v) for v in x.tolist()]
    assert got == want
    # torch's own double -> bfloat16 rounds through float32 and gets 1 + 2^-8 + 2^-40 wrong
    assert float(torch.tensor([planted[3]], dtype=torch.float64).to(torch.bfloat16)) != _rne_bf16_exact(planted[3])


def test_precision_of_a_correct_fused_output_is_zero_and_planted_errors_show():
    p, t = _inputs()
    out = reference.patch_embed_reference(t["a"], t["b"], t["comb"])   # FP32 sum, one rounding
    pr = baselines.precision(out, t)
    assert pr["rows"] == 392 and pr["max_ulp"] <= 1 and pr["within_tolerance"] and pr["nan"] == 0
    ref16 = baselines.round_fp64_to_bf16(baselines.reference_rows(t, torch.arange(392))).to(torch.bfloat16)
    exact = ref16.clone()
    assert baselines.precision(exact, t)["max_abs"] == 0.0
    # plant one 3-ulp error and one NaN
    bad = exact.clone()
    v = float(bad[17, 5])
    ulp = float(baselines.bf16_ulp(torch.tensor([v], dtype=torch.float64)))
    bad[17, 5] = torch.tensor(v + 3 * ulp).to(torch.bfloat16)
    pr = baselines.precision(bad, t)
    assert pr["max_ulp"] == pytest.approx(3.0) and pr["max_abs"] == pytest.approx(3 * ulp)
    assert pr["mismatch_frac"] == pytest.approx(1 / (392 * 64))
    bad[100, 0] = float("nan")
    pr = baselines.precision(bad, t)
    assert pr["nan"] == 1 and pr["max_abs"] == float("inf") and not pr["within_tolerance"]


def test_precision_targets_follow_the_function():
    p, t = _inputs()
    rows = torch.arange(392)
    g = baselines.reference_rows(t, rows, "gemm")
    assert torch.allclose(baselines.reference_rows(t, rows, "gemm+bias") - g, t["bias"].double().expand(392, -1))
    pos = t["pos"].double()[rows % 196]
    assert torch.allclose(baselines.reference_rows(t, rows, "gemm+bias+pos") - g,
                          t["bias"].double()[None] + pos)
    with pytest.raises(baselines.BaselineError, match="unknown target"):
        baselines.reference_rows(t, rows, "gemm+everything")


def test_compile_expressions_compute_their_targets_on_the_cpu():
    """The two torch.compile forms, run eagerly with an FP32 stand-in for _scaled_mm (CPU)."""
    p, t = _inputs()
    one = torch.ones(())

    def fake_scaled_mm(a, bt, scale_a, scale_b, bias=None, out_dtype=torch.float32, **kw):
        y = a.float() @ bt.float()
        if bias is not None:
            y = y + bias.float()
        return y.to(out_dtype)
    real = torch._scaled_mm
    torch._scaled_mm = fake_scaled_mm
    try:
        for form, (_, target) in baselines.COMPILE_FORMS.items():
            y = baselines.compile_expression(form, 196)(t["a"], t["b"].t(), t["bias"], t["pos"], t["comb"], one)
            assert y.shape == (392, 64) and y.dtype == torch.bfloat16
            assert baselines.precision(y, t, target=target)["within_tolerance"], form
    finally:
        torch._scaled_mm = real
    with pytest.raises(baselines.BaselineError, match="unknown torch.compile form"):
        baselines.compile_expression("eager", 196)


INTERPRETER_SCRIPT = r"""
import numpy as np, torch
import triton.runtime.interpreter as interp
# Triton 3.6's interpreter converts a 1-element array with int(), which NumPy >= 2.4 refuses (the loop
# bounds of a persistent kernel are such arrays): take the element instead.
_orig = interp._patch_lang_tensor
def _patched(tensor, scope):
    _orig(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))
interp._patch_lang_tensor = _patched
from pelib.measure import baselines
from pelib.problems import PatchEmbed
p = PatchEmbed(name="t", m=320, n=64, k=64, positions=7, tile={"m": 8, "n": 8, "k": 16})
t = p.make_inputs(seed=3)
out = baselines.triton_launcher(p, t, (32, 32, 32, 2, 4, False), num_progs=3)()
acc = t["a"].float() @ t["b"].float().t() + t["comb"].float()[torch.arange(320) % 7]
trunc = (acc.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)   # exact: low bits zero
assert torch.equal(out, trunc), (out.float() - trunc.float()).abs().max()
pr = baselines.precision(out, t)
assert pr["max_ulp"] <= 1 and pr["nan"] == 0, pr
print("INTERPRETER OK", pr["mismatch_frac"])
"""


def test_triton_kernel_in_the_interpreter():
    """The persistent kernel with its TMA descriptors, run by TRITON_INTERPRET=1 (set before Triton is
    imported, so in a subprocess) on a tiny problem: 3 programs over 10 x 2 tiles, comb by m % 7. The
    interpreter converts FP32 to BF16 by truncation (its cast takes no rounding mode) where the GPU
    rounds to nearest even, so the check is bit-exact against FP32 accumulation + comb, truncated."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys
    from pelib.paths import ROOT
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", INTERPRETER_SCRIPT], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0 and "INTERPRETER OK" in p.stdout, (p.stdout + p.stderr)[-3000:]


def test_triton_launcher_refuses_a_tile_that_does_not_divide():
    pytest.importorskip("triton")
    p, t = _inputs(m=320, n=48, k=64, positions=7)
    with pytest.raises(baselines.BaselineError, match="multiples"):
        baselines.triton_launcher(p, t, (32, 32, 32, 2, 4, False), num_progs=1)


def test_format_rows_shows_measured_and_skipped():
    rows = [{"name": "x", "status": "measured", "median_ms": 1.0, "tflops": 1095.0, "form": "f",
             "precision": {"max_ulp": 1.0, "mismatch_frac": 0.01}},
            {"name": "y", "status": "skipped", "reason": "no GPU"}]
    txt = baselines.format_rows(rows, floor_ms=0.5, ours_ms=0.9)
    assert "50%" in txt and "1.11" in txt and "SKIPPED: no GPU" in txt


# ---- pelib.measure.hopper_perf ---------------------------------------------------------------------------

def test_floors_take_the_larger_of_memory_and_tensor():
    full = problems.patch_embed("siglip2")
    f = hopper_perf.floors(full, 3000.0, 1.5, 132)
    assert f["memory_ms"] == pytest.approx(full.min_bytes / 3e12 * 1e3)
    assert f["fp8_peak_tflops"] == pytest.approx(8192 * 132 * 1.5e9 / 1e12)
    assert f["floor_ms"] == max(f["memory_ms"], f["tensor_ms"])
    assert hopper_perf.floors(full, 3000.0, None, 132)["floor_ms"] == f["memory_ms"]
    assert hopper_perf.WGMMA_CYCLES_PER_TILE == 3072


def test_clock_stats_of_a_planted_record():
    """Two CTAs, each warpgroup's tiles 1000 cycles apart: the CTA rate, the phases, first 16 vs rest."""
    from pelib import timing
    lay = timing.Layout(ctas=2, warps=12, tiles=40, phases=len(timing.phases()))
    start = np.zeros((2, 12, 40, lay.phases), np.int64)
    end = np.zeros_like(start)
    ph = {n: p for p, n in timing.phases().items()}
    for c in range(2):
        for w in range(4, 12):
            wg = (w - 4) // 4
            for n in range(30):                  # 30 tiles per warpgroup: 60 per CTA
                s = 10 + (2 * n + wg) * 1000
                start[c, w, n, ph["tile"]], end[c, w, n, ph["tile"]] = s, s + 1900
                start[c, w, n, ph["tma_wait"]], end[c, w, n, ph["tma_wait"]] = s, s + (500 if n < 16 else 100)
                start[c, w, n, ph["kloop"]], end[c, w, n, ph["kloop"]] = s, s + 1100
        start[c, 0, :30, ph["producer_wait"]], end[c, 0, :30, ph["producer_wait"]] = 5, 25
    cs = hopper_perf.clock_stats(timing.Timing(lay, start, end))
    assert cs["cta"]["ctas"] == 2
    assert cs["cta"]["cycles_per_tile_avg"] == pytest.approx((59 * 1000 + 1900) / 60)
    assert cs["phases"]["tma_wait"]["first16"] == 500 and cs["phases"]["tma_wait"]["after16"] == 100
    assert cs["phases"]["kloop"]["avg"] == 1100 and cs["phases"]["producer_wait"]["avg"] == 20
    assert cs["cta"]["tensor_busy"] == pytest.approx(3072 / cs["cta"]["cycles_per_tile_avg"])


def test_summary_prints_a_report_without_a_gpu():
    rep = {"evidence": "measured (H100, 2026-11-24)", "copy": {"gbps": 3000.0},
           "floors": hopper_perf.floors(problems.patch_embed("siglip2"), 3000.0, 1.6, 132),
           "variants": [{"label": "06_permuted_b PE_UNBOUNDED_WAIT=1", "ok": True, "median_ms": 0.92,
                         "repeat_median_ms": 0.921, "precision": {"max_ulp": 2.0, "mismatch_frac": 0.1}},
                        {"label": "11_a_half_slices", "ok": False, "error": "KernelFault: trap"}],
           "best": {"label": "06_permuted_b PE_UNBOUNDED_WAIT=1", "median_ms": 0.92, "wait_build": "unbounded"},
           "baselines": [{"name": "cublas_gemm", "status": "measured", "median_ms": 1.0, "tflops": 1095.0,
                          "form": "f", "precision": {"max_ulp": 0.0, "mismatch_frac": 0.0}}]}
    txt = hopper_perf.summary(rep)
    assert "0.9200" in txt and "FAIL" in txt and "cublas_gemm" in txt and "1.09" in txt


def test_variants_and_probes_compile():
    import re
    for key, d in hopper_perf.VARIANTS:
        b = hopper_perf.stage(key, d).build
        assert b.facts.spills == 0 and not re.findall(r"C75(10|11|12|08)", b.log), (key, d)
    for d in hopper_perf.PROBES:
        probe = Stage(hopper_perf.PROBE, {**hopper_perf.UNBOUNDED, **d})
        probe.launch_config("full")                                     # the probe launches like 06
        b = probe.build
        assert b.facts.spills == 0 and b.histogram.get("F2FP", 0) > 0   # the epilogue arithmetic stays
        assert (b.histogram.get("STG", 0) > 0)                          # the stores stay in the code


def test_unrolled_stage_has_no_64_bit_descriptor_adds_in_its_kloop():
    """Stage 10's point, compiled: between two QGMMA of a slice no IADD3/IMAD.X carry chain remains."""
    from pelib.isa import sass
    for key, most in (("06", None), ("10", 10)):
        ops = [op for _, op, _ in sass.instructions(hopper_perf.stage(key).build.sass)]
        q = [i for i, op in enumerate(ops) if op.startswith("QGMMA")]
        gaps = [q[i + 1] - q[i] for i in range(len(q) - 1) if q[i + 1] - q[i] < 40]
        if most is not None:
            assert max(gaps) <= most, gaps
        else:
            assert max(gaps) > 10, gaps         # 06: descriptor arithmetic between QGMMAs


def test_half_slice_stage_maps_a_with_64_byte_boxes():
    s = hopper_perf.stage("11")
    specs = s.tensor_map_specs("full")
    assert specs["a"].box == (64, 64) and specs["a"].swizzle == 64
    assert specs["b"].swizzle == 128
    assert s.exports.pipeline_stages == 8 and s.exports.smem_bytes <= s.exports.smem_limit
    for name in ("small", "k128", "tail"):
        s.tensor_map_specs(name)


def test_chapter_tables_read_the_committed_runs():
    """The Hopper chapter's three tables, from results/*/hopper-perf.json (any machine)."""
    if not hv.perf_files():
        pytest.skip("no committed hopper-perf runs")
    t = hv.chip_table()
    whats = [r["what"] for r in t.rows]
    assert any(w.startswith("ours: 06_permuted_b") for w in whats)
    assert {"cublas_gemm", "cublas_gemm_fastacc", "triton_fused", "torch_compile"} <= set(whats)
    assert sum(w.startswith("floor") for w in whats) == 4
    assert len(hv.stages_table().rows) >= 10
    lim = hv.limiter_table().rows
    assert len(lim) == 2 and all(r["cycles/tile per CTA"] > 3072 for r in lim)
