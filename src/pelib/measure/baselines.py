"""What a reader would run instead of our kernel, timed in the same run, each with a like-for-like note.

    rows(problem, tensors, *, include=None, iters=20, ref=None) -> list[dict]   one row per baseline
    measure(name, fn, problem, tensors, *, target, form, like_for_like, ...)  the same row for any callable
    precision(out, inputs, rows=None, *, target="gemm+comb") -> dict          accumulation precision

The baselines (BASELINES; `include` picks some by name):
- cuBLAS through torch._scaled_mm (per-tensor scales 1, BF16 out): the GEMM alone, with and without
  fast accumulation; with its bias epilogue; with the bias epilogue and the positional add as a second
  kernel (the whole function, rounded twice);
- a persistent Triton FP8 kernel written here (`triton_kernel`): TMA descriptors for A, B and C, the
  comb epilogue fused (comb[m % 196] + acc, one BF16 rounding, as pelib.reference), tuned over
  TRITON_CONFIGS by timing each on the problem (a config that fails to compile is reported, not fatal);
  skipped, with the reason in its row, where Triton is not installed;
- torch.compile of the natural expression (COMPILE_FORMS) in the modes of COMPILE_MODES, each in a
  subprocess with a time limit; the row is the fastest that verified, and names its form and mode.

Every timed row carries `precision`: the largest error of the output against the BF16 rounding of an
FP64 reference of the function that baseline computes (`target`), on a fixed sample of rows
(`sample_rows`). A kernel that accumulates K products exactly and rounds once lands at 0 or one BF16
ulp (a sum within rounding distance of a tie); fast accumulation shows as more ulps and more mismatches.
Rows are 'measured' evidence (device, date) when timed; 'skipped' rows say why.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import bench, clock, device, problems
from .. import verify as _verify

SAMPLE_ROWS = 2048        # rows of the FP64 check (spread over M, first and last included)
SAMPLE_SEED = 20261124
ULP_MIN_MAGNITUDE = 0.125  # max_ulp counts outputs at least this large (the outputs here are O(1))
TARGETS = ("gemm", "gemm+bias", "gemm+bias+pos", "gemm+comb")


@dataclass(frozen=True)
class Baseline:
    """One thing a reader could run instead: what exactly runs, what it computes, how it compares."""

    name: str
    form: str             # the call, as a reader would write it
    target: str           # the function it computes (one of TARGETS): what its precision is measured against
    like_for_like: str    # what differs from our fused kernel
    needs: str = "cuda"   # "cuda", "triton" or "compile"


BASELINES: dict[str, Baseline] = {b.name: b for b in (
    Baseline("cublas_gemm", "torch._scaled_mm(a, b.t(), scale_a=1, scale_b=1, out_dtype=bfloat16)", "gemm",
             "GEMM only (cuBLAS): no bias, no positional add, so less work and no comb reads; cuBLAS "
             "promotes FP8 partial sums into FP32 registers, so it accumulates more precisely than ours"),
    Baseline("cublas_gemm_fastacc", "torch._scaled_mm(..., out_dtype=bfloat16, use_fast_accum=True)", "gemm",
             "GEMM only, accumulating in the tensor core's accumulator as ours does: the like-for-like "
             "kernel for the GEMM; it still skips the comb epilogue"),
    Baseline("cublas_bias", "torch._scaled_mm(..., bias=bias, out_dtype=bfloat16)", "gemm+bias",
             "GEMM + bias in cuBLAS's fused epilogue; the positional add (a 196 x N table) is missing"),
    Baseline("cublas_bias_pos", "y = torch._scaled_mm(..., bias=bias, out_dtype=bfloat16); "
             "y.view(-1, 196, N).add_(pos)", "gemm+bias+pos",
             "the whole function as two kernels: the output is written, read back and written again, and "
             "rounded to BF16 twice (after the GEMM and after the add)"),
    Baseline("triton_fused", "persistent Triton FP8 kernel (pelib.measure.baselines.triton_kernel): TMA descriptors, "
             "comb[m % 196] + acc epilogue, tuned over TRITON_CONFIGS", "gemm+comb",
             "the same function and the same single BF16 rounding as ours, written in Triton; how it "
             "accumulates is Triton's choice for FP8 dots on sm_90 (the precision column shows it)", "triton"),
    Baseline("torch_compile", "torch.compile (fastest of COMPILE_FORMS x COMPILE_MODES; the row names it)",
             "gemm+bias+pos", "what Inductor makes of the expression a user writes; the form it ran is in "
             "the row, and its target follows the form", "compile"),
)}

# torch.compile: the expressions and modes tried; the fastest that verifies is the row.
COMPILE_FORMS = {
    "scaled_mm+bias, + pos": ("the natural expression: _scaled_mm with bias to BF16, then + pos per image",
                              "gemm+bias+pos"),
    "scaled_mm fp32 + comb, one rounding": ("_scaled_mm to FP32, + comb[m % 196], one BF16 rounding "
                                            "(our function)", "gemm+comb"),
}
COMPILE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
COMPILE_TIMEOUT_S = 300

# Triton configurations tried (BM, BN, BK, num_stages, num_warps, warp_specialize): 128 x 256 is
# our tile pair; the others trade tile shape against pipeline depth within 227 KiB of shared memory
# (A and B stages of BM x BK and BN x BK bytes, plus BM x BN x 2 for the C store).
TRITON_CONFIGS = (
    (128, 256, 128, 3, 8, False),
    (128, 256, 64, 4, 8, False),
    (128, 128, 128, 4, 8, False),
    (128, 128, 128, 5, 4, False),
    (256, 128, 128, 3, 8, False),
    (64, 256, 128, 4, 4, False),
    (128, 256, 128, 3, 8, True),
    (128, 128, 128, 4, 8, True),
)


class BaselineError(ValueError):
    """A baseline was asked for that does not exist, or its inputs do not fit."""


def names() -> list[str]:
    return list(BASELINES)


def cublas_names() -> list[str]:
    """The cuBLAS rows, as cublas_fns names them."""
    return [n for n in BASELINES if n.startswith("cublas_")]


def _pick(include) -> list[Baseline]:
    if include is None:
        return list(BASELINES.values())
    unknown = [n for n in include if n not in BASELINES]
    if unknown:
        raise BaselineError(f"unknown baseline(s) {unknown}; choose from {names()}")
    return [BASELINES[n] for n in include]


# ---- precision: against the BF16 rounding of an FP64 reference ---------------------------------

def sample_rows(m: int, n: int = SAMPLE_ROWS, seed: int = SAMPLE_SEED):
    """A fixed, sorted sample of row indices of an M-row output: the first and last rows, the rest
    drawn without replacement by a seeded generator (the same rows on every device and run)."""
    import torch
    if m <= 0:
        raise BaselineError(f"M={m}: an output needs at least one row")
    if m <= n:
        return torch.arange(m)
    g = torch.Generator().manual_seed(seed)
    mid = torch.randperm(m - 2, generator=g)[: n - 2] + 1
    return torch.cat([torch.tensor([0, m - 1]), mid]).sort().values


def round_fp64_to_bf16(x):
    """FP64 -> BF16 rounded once, to nearest even, on the FP64 bits (torch's own double -> bfloat16
    goes through float32 first, which can round twice). Finite normal inputs; returns bfloat16."""
    import torch
    if x.dtype != torch.float64:
        raise TypeError(f"round_fp64_to_bf16 takes float64, got {x.dtype}")
    if not torch.isfinite(x).all():
        raise ValueError("round_fp64_to_bf16: inputs must be finite")
    bits = x.contiguous().view(torch.int64)
    drop = 52 - 7                                      # FP64 fraction bits beyond BF16's 7
    lsb = (bits >> drop) & 1
    r = (bits + ((1 << (drop - 1)) - 1) + lsb) & ~((1 << drop) - 1)   # RNE on the dropped bits
    return r.view(torch.float64).to(torch.float32).to(torch.bfloat16)  # exact: 8 significant bits


def bf16_ulp(x):
    """The BF16 ulp at |x| (float64 tensor): 2^(floor(log2 |x|) - 7), the normal spacing (|x| > 0)."""
    import torch
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0**-126)))
    return torch.pow(2.0, e - 7)


def reference_rows(inputs: dict, rows, target: str = "gemm+comb"):
    """FP64 values of `target` on the given rows: a[rows] . b^T (+ comb[rows % P] | + bias | + bias + pos)."""
    import torch
    if target not in TARGETS:
        raise BaselineError(f"unknown target {target!r}; one of {TARGETS}")
    a, b = inputs["a"], inputs["b"]
    dev = a.device
    rows = rows.to(dev)
    ref = a.index_select(0, rows).double() @ b.double().t()
    if target == "gemm+comb":
        comb = inputs["comb"]
        ref += comb.double().index_select(0, rows % comb.shape[0])
    elif target in ("gemm+bias", "gemm+bias+pos"):
        ref += inputs["bias"].double()[None, :]
        if target == "gemm+bias+pos":
            pos = inputs["pos"]
            ref += pos.double().index_select(0, rows % pos.shape[0])
    return ref


def precision(out, inputs: dict, rows=None, *, target: str = "gemm+comb") -> dict:
    """How far `out` (M x N, BF16) is from the correctly rounded result on a fixed row sample.

    max_abs: the largest |out - bf16(ref64)|; max_ulp: the largest error in BF16 ulps of the reference,
    over the outputs with |ref| >= ULP_MIN_MAGNITUDE;
    mismatch_frac: the share of sampled outputs that differ from bf16(ref64) at all; max_abs_fp64: the
    largest |out - ref64| (the error itself, rounding included). NaN in out counts as a mismatch of
    infinite size. within_tolerance: every sampled element within pelib.verify.gemm_tolerance (the
    bound every stage is verified with)."""
    import torch
    if out.dim() != 2:
        raise BaselineError(f"out must be M x N, got shape {tuple(out.shape)}")
    m = out.shape[0]
    rows = sample_rows(m) if rows is None else torch.as_tensor(rows)
    ref64 = reference_rows(inputs, rows, target)
    got = out.index_select(0, rows.to(out.device)).double().to(ref64.device)
    ref16 = round_fp64_to_bf16(ref64).double()
    err = (got - ref16).abs()
    nan = ~torch.isfinite(got)
    err = torch.where(nan, torch.full_like(err, math.inf), err)
    # ulps only where |ref| >= ULP_MIN_MAGNITUDE: near zero (sums that cancel) an ulp is tiny and any
    # accumulation error is thousands of them; max_abs covers those outputs
    big = ref16.abs() >= ULP_MIN_MAGNITUDE
    ulp = torch.where(big, err / bf16_ulp(ref16), torch.zeros_like(err))
    a, b = inputs["a"], inputs["b"]
    tol = _verify.gemm_tolerance_from(a, b)
    within = bool((~nan).all() and (err <= tol.atol + tol.rtol * ref16.abs()).all())
    return {"target": target, "rows": int(rows.numel()), "elements": int(err.numel()),
            "max_abs": float(err.max()), "max_ulp": float(ulp.max()),
            "mismatch_frac": float((err != 0).double().mean()),
            "max_abs_fp64": float(torch.where(nan, torch.full_like(err, math.inf), (got - ref64).abs()).max()),
            "nan": int(nan.sum()), "within_tolerance": within, "atol": tol.atol, "rtol": tol.rtol}


# ---- cuBLAS through torch._scaled_mm -------------------------------------------------------------

def cublas_fns(problem, t: dict) -> dict:
    """Callables for the four cuBLAS rows on tensors t (each writes a fresh output)."""
    import torch
    one = torch.ones((), dtype=torch.float32, device=t["a"].device)
    bt = t["b"].t()                  # (K, N), column-major: what _scaled_mm wants as mat2
    bf16 = torch.bfloat16
    pos = t["pos"].view(1, problem.positions, problem.n)
    if problem.m % problem.positions:
        raise BaselineError(f"{problem.name}: M={problem.m} is not a whole number of {problem.positions}-patch "
                            "images: the unfused positional add needs y.view(-1, positions, N)")

    def gemm():
        return torch._scaled_mm(t["a"], bt, scale_a=one, scale_b=one, out_dtype=bf16)

    def gemm_fast():
        return torch._scaled_mm(t["a"], bt, scale_a=one, scale_b=one, out_dtype=bf16, use_fast_accum=True)

    def bias():
        return torch._scaled_mm(t["a"], bt, scale_a=one, scale_b=one, bias=t["bias"], out_dtype=bf16)

    def bias_pos():
        y = bias()
        y.view(-1, problem.positions, problem.n).add_(pos)
        return y

    return {"cublas_gemm": gemm, "cublas_gemm_fastacc": gemm_fast, "cublas_bias": bias,
            "cublas_bias_pos": bias_pos}


# ---- the Triton kernel -------------------------------------------------------------------------

def triton_missing() -> str | None:
    """Why the Triton baseline cannot run here (None when it can)."""
    try:
        import triton  # noqa: F401
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except Exception as e:   # ImportError, or a Triton too old for host tensor descriptors
        return f"Triton is not installed here ({type(e).__name__}: {e})"
    return None


_KERNEL = None


def triton_kernel():
    """The jitted persistent FP8 kernel (built on first use, so importing pelib needs no Triton).

    Program p takes tiles p, p + P, ... of the (M / BM) x (N / BN) grid in row-major order, so the
    N / BN column tiles of a row block run side by side and share A in L2. Per tile: the K loop
    over TMA loads of A [BM, BK] and B [BN, BK] (both K-major, as E4M3 needs) with tl.dot into an FP32
    accumulator, then acc + float(comb[m % P, n]), one rounding to BF16, a TMA store of C."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def patch_embed_fp8(a_desc, b_desc, c_desc, comb_ptr, M, N, K, P: tl.constexpr,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                        NUM_PROGS: tl.constexpr, WS: tl.constexpr):
        pid = tl.program_id(0)
        num_n = tl.cdiv(N, BN)
        tiles = tl.cdiv(M, BM) * num_n
        for tile in tl.range(pid, tiles, NUM_PROGS, warp_specialize=WS):
            off_m = (tile // num_n) * BM
            off_n = (tile % num_n) * BN
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for kk in range(0, tl.cdiv(K, BK)):
                a = a_desc.load([off_m, kk * BK])
                b = b_desc.load([off_n, kk * BK])
                acc = tl.dot(a, b.T, acc)
            rm = off_m + tl.arange(0, BM)
            rn = off_n + tl.arange(0, BN)
            comb = tl.load(comb_ptr + (rm % P)[:, None] * N + rn[None, :])   # rm % P < P: always in bounds
            c_desc.store([off_m, off_n], (acc + comb.to(tl.float32)).to(tl.bfloat16))

    _KERNEL = patch_embed_fp8
    return _KERNEL


def triton_launcher(problem, t: dict, config, num_progs: int | None = None):
    """A callable that runs the Triton kernel with one config, writing t["out"]."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    bm, bn, bk, stages, warps, ws = config
    if problem.n % bn or problem.k % bk:
        raise BaselineError(f"config {config}: N={problem.n}, K={problem.k} must be multiples of BN={bn}, BK={bk}")
    a_d = TensorDescriptor.from_tensor(t["a"], [bm, bk])
    b_d = TensorDescriptor.from_tensor(t["b"], [bn, bk])
    c_d = TensorDescriptor.from_tensor(t["out"], [bm, bn])
    tiles = -(-problem.m // bm) * (problem.n // bn)
    if num_progs is None:
        num_progs = _sm_count()
    grid = (min(num_progs, tiles),)
    kern = triton_kernel()

    def run():
        kern[grid](a_d, b_d, c_d, t["comb"], problem.m, problem.n, problem.k, problem.positions,
                   BM=bm, BN=bn, BK=bk, NUM_PROGS=grid[0], WS=ws, num_stages=stages, num_warps=warps)
        return t["out"]
    return run


def _sm_count() -> int:
    import torch
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _config_label(c) -> str:
    bm, bn, bk, s, w, ws = c
    return f"BM={bm} BN={bn} BK={bk} stages={s} warps={w}{' ws' if ws else ''}"


def tune_triton(problem, t: dict, configs=TRITON_CONFIGS, *, iters: int = 10) -> dict:
    """Time every config on the problem (compile errors and resource failures recorded, not raised);
    returns {"best": config or None, "tried": [{"config", "ms" | "error"}]}."""
    tried = []
    for c in configs:
        try:
            fn = triton_launcher(problem, t, c)
            fn()                                          # compile + first run
            st = _time(fn, iters=iters, warmup=2)
            tried.append({"config": _config_label(c), "cfg": list(c), "ms": st["median_ms"]})
        except Exception as e:
            tried.append({"config": _config_label(c), "cfg": list(c), "error": f"{type(e).__name__}: {e}"[:300]})
    ok = [r for r in tried if "ms" in r]
    best = tuple(min(ok, key=lambda r: r["ms"])["cfg"]) if ok else None
    return {"best": best, "tried": tried}


# ---- timing and rows ------------------------------------------------------------------------------

def _time(fn, *, iters: int, warmup: int = 3) -> dict:
    return bench.stats(bench.time_fn(fn, iters=iters, warmup=warmup))


def _evidence() -> str:
    return f"measured ({device.current().name}, {clock.today()})"


def _derived(problem, ms: float) -> dict:
    return {"tflops": problem.flops / (ms * 1e-3) / 1e12, "gbps_min_bytes": problem.min_bytes / (ms * 1e-3) / 1e9}


def _verify_same_function(out, t: dict, ref, problem, label: str) -> dict:
    rep = _verify.verify_gemm(out, ref, a=t["a"], b=t["b"], tile=None, label=label)
    return {"verified": rep.ok, "n_bad": rep.n_bad, "max_abs_vs_ref": rep.max_abs}


def measure(name: str, fn, problem, tensors: dict, *, target: str, form: str, like_for_like: str,
            iters: int = 20, ref=None, extra: dict | None = None) -> dict:
    """One row: run fn once for the output (precision, and verification against `ref` when fn computes
    our function), then time it (CUDA events, L2 flushed before each run)."""
    row = {"name": name, "form": form, "target": target, "like_for_like": like_for_like, **(extra or {})}
    try:
        out = fn()
        import torch
        torch.cuda.synchronize()
        row["precision"] = precision(out, tensors, target=target)
        if ref is not None and target == "gemm+comb":
            row.update(_verify_same_function(out, tensors, ref, problem, name))
        del out
        row.update(_time(fn, iters=iters))
        row.update(_derived(problem, row["median_ms"]))
        row["status"], row["evidence"] = "measured", _evidence()
    except Exception as e:
        row.update(status="failed", reason=f"{type(e).__name__}: {e}"[:600])
    return row


def skipped(b: Baseline, reason: str) -> dict:
    return {"name": b.name, "form": b.form, "target": b.target, "like_for_like": b.like_for_like,
            "status": "skipped", "reason": reason}


def rows(problem, tensors: dict, *, include=None, iters: int = 20, ref=None, data_dir=None,
         compile_timeout_s: float = COMPILE_TIMEOUT_S, compile_modes=COMPILE_MODES,
         compile_forms=None, triton_configs=TRITON_CONFIGS) -> list[dict]:
    """Every baseline in `include` (default all) on `problem` with `tensors` (pelib.problems inputs on
    the GPU, with "out"), in this process (torch.compile in a subprocess fed from `data_dir`, where the
    inputs are saved as a.pt, b.pt, comb.pt, bias.pt, pos.pt; saved here when None). Rows that cannot
    run on this machine are returned with status 'skipped' and the reason."""
    picked = _pick(include)
    info = device.current()
    out = []
    for b in picked:
        if not info.present:
            out.append(skipped(b, f"no CUDA GPU: {info.reason}"))
            continue
        if info.cc is None or tuple(info.cc) < (8, 9):
            out.append(skipped(b, f"FP8 GEMMs need compute capability 8.9 or newer; this is {info.cc}"))
            continue
        if b.needs == "triton":
            why = triton_missing()
            if why:
                out.append(skipped(b, why))
                continue
            tuned = tune_triton(problem, tensors, triton_configs, iters=max(5, iters // 2))
            if tuned["best"] is None:
                out.append({**skipped(b, "every Triton config failed"), "status": "failed", "tried": tuned["tried"]})
                continue
            fn = triton_launcher(problem, tensors, tuned["best"])
            out.append(measure(b.name, fn, problem, tensors, target=b.target, iters=iters, ref=ref,
                               form=f"{b.form}; best config {_config_label(tuned['best'])}",
                               like_for_like=b.like_for_like, extra={"tried": tuned["tried"]}))
            continue
        if b.needs == "compile":
            out.append(compile_row(problem, tensors, data_dir=data_dir, timeout_s=compile_timeout_s,
                                   modes=compile_modes, forms=compile_forms, iters=iters))
            continue
        fn = cublas_fns(problem, tensors)[b.name]
        out.append(measure(b.name, fn, problem, tensors, target=b.target, form=b.form,
                           like_for_like=b.like_for_like, iters=iters))
    return out


# ---- torch.compile, in a subprocess ---------------------------------------------------------------

def save_inputs(tensors: dict, data_dir) -> Path:
    """Save the inputs the compile subprocess reads (a, b, comb, bias, pos) under data_dir."""
    import torch
    d = Path(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    for k in ("a", "b", "comb", "bias", "pos"):
        torch.save(tensors[k].cpu(), d / f"{k}.pt")
    return d


def compile_expression(form: str, positions: int):
    """The torch function of a COMPILE_FORMS entry: f(a, bt, bias, pos, comb, one) -> BF16 (M, N)."""
    import torch
    if form not in COMPILE_FORMS:
        raise BaselineError(f"unknown torch.compile form {form!r}; one of {list(COMPILE_FORMS)}")
    bf16 = torch.bfloat16
    if form == "scaled_mm+bias, + pos":
        def f(a, bt, bias, pos, comb, one):
            y = torch._scaled_mm(a, bt, scale_a=one, scale_b=one, bias=bias, out_dtype=bf16)
            return (y.view(-1, positions, y.shape[1]) + pos).view(y.shape)
    else:
        def f(a, bt, bias, pos, comb, one):
            y = torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.float32)
            return (y.view(-1, positions, y.shape[1]) + comb.float()).to(bf16).view(y.shape)
    return f


def compile_row(problem, tensors: dict, *, data_dir=None, timeout_s: float = COMPILE_TIMEOUT_S,
                modes=COMPILE_MODES, forms=None, iters: int = 20) -> dict:
    """torch.compile of each form in each mode (one subprocess, a shared time limit); the fastest
    measured combination is the row, every combination is listed under 'tried'."""
    import tempfile
    b = BASELINES["torch_compile"]
    forms = list(forms or COMPILE_FORMS)
    tmp = None
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="pelib-compile-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        data_dir = save_inputs(tensors, tmp)
    cmd = [sys.executable, "-m", "pelib.measure.baselines", "--compile", str(data_dir), "--problem", problem.name,
           "--iters", str(iters), "--modes", ",".join(modes), "--forms", json.dumps(forms),
           "--deadline", str(time.time() + timeout_s - 15)]
    tried, log = [], ""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log = p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        log = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        tried.append({"error": f"the subprocess exceeded its {timeout_s:.0f} s"})
    finally:
        if tmp:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    for line in log.splitlines():
        if line.startswith("RESULT "):
            tried.append(json.loads(line[len("RESULT "):]))
    ok = [r for r in tried if r.get("status") == "measured" and r.get("verified", True)]
    if not ok:
        why = "; ".join(f"{r.get('form', '?')} / {r.get('mode', '?')}: {r.get('reason') or r.get('error')}"
                        for r in tried) or _last_error(log)
        return {**skipped(b, why[:600]), "status": "failed", "tried": tried}
    best = min(ok, key=lambda r: r["median_ms"])
    row = {**best, "name": b.name, "like_for_like": b.like_for_like + f"; fastest: {best['form']} in mode "
           f"'{best['mode']}' ({COMPILE_FORMS[best['form']][0]})", "tried": tried}
    row["form"] = f"torch.compile(f, mode='{best['mode']}'), f = {best['form']}"
    return row


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.split(":", 1)[0].endswith(("Error", "Exception")):
            return ln[:300]
    return " | ".join(lines[-3:])[:300]


def _compile_main(data_dir: str, problem_name: str, iters: int, modes, forms, deadline: float) -> None:
    """Subprocess body: for each form and mode, compile (autotune), check, time; one RESULT line each."""
    import traceback

    import torch

    prob = problems.patch_embed(problem_name)
    d = Path(data_dir)
    t = {k: torch.load(d / f"{k}.pt").cuda() for k in ("a", "b", "comb", "bias", "pos")}
    one = torch.ones((), dtype=torch.float32, device="cuda")
    bt = t["b"].t()
    for form in forms:
        for mode in modes:
            r = {"form": form, "mode": mode, "target": COMPILE_FORMS[form][1]}
            if time.time() > deadline:
                r.update(status="skipped", reason="no time left in the torch.compile budget")
                print("RESULT " + json.dumps(r), flush=True)
                continue
            try:
                torch._dynamo.reset()
                fn = torch.compile(compile_expression(form, prob.positions), mode=mode, fullgraph=True, dynamic=False)
                t0 = time.time()
                y = fn(t["a"], bt, t["bias"], t["pos"], t["comb"], one)
                torch.cuda.synchronize()
                r["compile_s"] = round(time.time() - t0, 1)
                r["precision"] = precision(y, t, target=r["target"])
                r["verified"] = r["precision"]["within_tolerance"]
                del y
                call = (lambda: fn(t["a"], bt, t["bias"], t["pos"], t["comb"], one))
                r.update(_time(call, iters=iters))
                r.update(_derived(prob, r["median_ms"]))
                r["status"], r["evidence"] = "measured", _evidence()
            except Exception as e:
                r.update(status="failed", reason=f"{type(e).__name__}: {e}"[:500], trace=traceback.format_exc()[-800:])
            print("RESULT " + json.dumps(r, default=str), flush=True)


# ---- a compact table ----------------------------------------------------------------------------

def format_rows(rs: list[dict], floor_ms: float | None = None, ours_ms: float | None = None) -> str:
    """Text table of rows: ms, TFLOPS, share of the memory floor, our speed-up, precision."""
    lines = [f"{'':<22}{'ms':>8}{'TFLOPS':>8}{'floor':>7}{'ours x':>8}{'max ulp':>9}{'mism.':>8}  form"]
    for r in rs:
        if r.get("status") != "measured":
            lines.append(f"{r['name']:<22}  {r.get('status', '?').upper()}: {str(r.get('reason', ''))[:100]}")
            continue
        ms = r["median_ms"]
        fl = f"{100 * floor_ms / ms:.0f}%" if floor_ms else "-"
        sp = f"{ms / ours_ms:.2f}" if ours_ms else "-"
        pr = r.get("precision", {})
        lines.append(f"{r['name']:<22}{ms:>8.4f}{r['tflops']:>8.0f}{fl:>7}{sp:>8}{pr.get('max_ulp', float('nan')):>9.1f}"
                     f"{100 * pr.get('mismatch_frac', float('nan')):>7.1f}%  {r['form'][:70]}")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(prog="python -m pelib.measure.baselines")
    ap.add_argument("--compile", metavar="DATA_DIR", help="(internal) the torch.compile subprocess")
    ap.add_argument("--problem", default="siglip2")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--modes", default=",".join(COMPILE_MODES))
    ap.add_argument("--forms", default=json.dumps(list(COMPILE_FORMS)))
    ap.add_argument("--deadline", type=float, default=float("inf"))
    a = ap.parse_args()
    if a.compile:
        _compile_main(a.compile, a.problem, a.iters, a.modes.split(","), json.loads(a.forms), a.deadline)
    else:
        prob = problems.patch_embed(a.problem)
        info = device.current()
        if not info.present:
            print("no GPU: every row would be skipped")
            sys.exit(0)
        t = prob.make_inputs(seed=0, device="cuda")
        print(format_rows(rows(prob, t, iters=a.iters)))
