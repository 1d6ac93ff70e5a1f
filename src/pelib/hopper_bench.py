"""The baselines of the FP8 patch embed on one GPU: cuBLAS (torch._scaled_mm: GEMM only, with and without
fast accumulation, with its bias epilogue, plus an unfused pos_embed add) and torch.compile(max-autotune)
of the fused expression, each verified where it computes the same function, then timed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import bench, problems, reference, verify

# name -> what it computes (the rows of the comparison table)
BASELINES = {
    "cublas_gemm": "torch._scaled_mm, GEMM only (cuBLAS FP8, BF16 out)",
    "cublas_gemm_fastacc": "torch._scaled_mm, GEMM only, use_fast_accum=True",
    "cublas_bias": "torch._scaled_mm with the fused bias epilogue",
    "cublas_bias_pos": "torch._scaled_mm(bias) + unfused pos_embed add",
    "compile_fused": "torch.compile(max-autotune) of scaled_mm(FP32) + comb -> BF16",
}
COMPILE_TIMEOUT_S = 300


def scaled_mm_fns(problem, t: dict) -> dict:
    """Callables for the cuBLAS baselines on tensors t (each writes a fresh output)."""
    import torch
    one = torch.ones((), dtype=torch.float32, device=t["a"].device)
    bt = t["b"].t()                          # (K, N) column-major view, as _scaled_mm wants mat2
    pos = t["pos"].view(1, problem.positions, problem.n)
    bf16 = torch.bfloat16

    def gemm():
        return torch._scaled_mm(t["a"], bt, scale_a=one, scale_b=one, out_dtype=bf16)

    def gemm_fast():
        return torch._scaled_mm(t["a"], bt, scale_a=one, scale_b=one, out_dtype=bf16, use_fast_accum=True)

    def bias():
        return torch._scaled_mm(t["a"], bt, scale_a=one, scale_b=one, bias=t["bias"], out_dtype=bf16)

    def bias_pos():
        y = torch._scaled_mm(t["a"], bt, scale_a=one, scale_b=one, bias=t["bias"], out_dtype=bf16)
        y.view(-1, problem.positions, problem.n).add_(pos)   # M is a whole number of images
        return y

    return {"cublas_gemm": gemm, "cublas_gemm_fastacc": gemm_fast, "cublas_bias": bias,
            "cublas_bias_pos": bias_pos}


def fused_expression(positions: int):
    """The fused patch-embed as torch ops: FP32 GEMM of E4M3, + comb[m % positions], one BF16 rounding."""
    import torch

    def fused(a, bt, comb, one):
        y = torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.float32)
        return (y.view(-1, positions, y.shape[1]) + comb.float()).to(torch.bfloat16).view(y.shape)
    return fused


def time_baselines(problem, t: dict, ref, *, iters: int = 20) -> dict:
    """Verify (where the function is the same) and time each cuBLAS baseline."""
    out = {}
    for name, fn in scaled_mm_fns(problem, t).items():
        y = fn()
        row = {"what": BASELINES[name]}
        if name == "cublas_bias_pos":  # the same function as ours, rounded twice (GEMM, then the add)
            import torch
            d = (y.float() - ref.float()).abs()
            row["max_abs_vs_ref"] = float(d.max())
            del d
        del y
        row.update(bench.stats(bench.time_fn(fn, iters=iters, warmup=3)))
        row.update(bench.derived(problem, row["median_ms"]))
        out[name] = row
    return out


def time_compiled(problem_name: str = "siglip2", *, iters: int = 20, timeout_s: int = COMPILE_TIMEOUT_S,
                  data_dir: str | None = None) -> dict:
    """torch.compile(max-autotune) of the fused expression, in a subprocess with a time limit.

    data_dir: where pelib.sweep saved the problem's inputs and reference (inputs.pt, ref.pt);
    without it the subprocess draws its own and computes the reference."""
    t0 = time.time()
    cmd = [sys.executable, "-m", "pelib.hopper_bench", "--compiled", problem_name, "--iters", str(iters)]
    if data_dir:
        cmd += ["--data", data_dir]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return {"what": BASELINES["compile_fused"], "error": f"did not finish: compile + autotune + timing "
                                                              f"exceeded the {timeout_s} s left for it"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            r["wall_s"] = round(time.time() - t0, 1)
            return r
    out = p.stdout + p.stderr
    return {"what": BASELINES["compile_fused"], "error": f"exit {p.returncode}: {error_line(out)}",
            "log_tail": out[-1500:]}


def _compiled_main(problem_name: str, iters: int, data_dir: str | None = None) -> None:
    """Subprocess body of time_compiled: compile, autotune, verify, time; prints one RESULT line
    (with an `error` naming the exception when any step fails)."""
    import torch   # the GPU subprocess only

    r = {"what": BASELINES["compile_fused"]}
    try:
        prob = problems.patch_embed(problem_name)
        if data_dir:
            saved = torch.load(Path(data_dir) / "inputs.pt", mmap=True)       # pelib.sweep.save_full
            t = {k: saved[k].cuda() for k in ("a", "b", "comb")}
        else:
            t = prob.make_inputs(seed=2, device="cuda")
        one = torch.ones((), dtype=torch.float32, device="cuda")
        bt = t["b"].t()
        fn = torch.compile(fused_expression(prob.positions), mode="max-autotune", fullgraph=True, dynamic=False)
        t0 = time.time()
        y = fn(t["a"], bt, t["comb"], one)
        torch.cuda.synchronize()
        r["compile_s"] = round(time.time() - t0, 1)
        ref = (torch.load(Path(data_dir) / "ref.pt", mmap=True).cuda() if data_dir
               else reference.patch_embed_reference(t["a"], t["b"], t["comb"]))
        rep = verify.verify_gemm(y, ref, a=t["a"], b=t["b"], tile=None, label="torch.compile")
        del y, ref
        r.update(ok=rep.ok, max_abs_vs_ref=rep.max_abs, n_bad=rep.n_bad)
        r.update(bench.stats(bench.time_fn(lambda: fn(t["a"], bt, t["comb"], one), iters=iters, warmup=3)))
        r.update(bench.derived(prob, r["median_ms"]))
    except Exception as e:  # report the real cause, not the tail of the autotuner's log
        r["error"] = f"{type(e).__name__}: {e}"[:600]
        r["trace"] = traceback.format_exc()[-1500:]
    print("RESULT " + json.dumps(r, default=str), flush=True)


def error_line(text: str) -> str:
    """The most telling line of a failed subprocess's output: the last 'SomeError: ...' line, else its end."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Interrupt")) or head in ("AssertionError", "KeyError"):
            return ln[:300]
    return " | ".join(lines[-3:])[:300]


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(prog="python -m pelib.hopper_bench")
    ap.add_argument("--compiled", metavar="PROBLEM", required=True, help="(internal) time the torch.compile baseline")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--data", default=None, help="(internal) saved inputs and reference")
    a = ap.parse_args()
    _compiled_main(a.compiled, a.iters, a.data)
