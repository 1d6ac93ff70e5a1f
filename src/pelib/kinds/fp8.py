"""The FP8 patch-embed stages on sm_100a (00-09 and the go/no-go variants of 09): their epilogue.

What the generic host path cannot know: which TMEM lanes and columns each epilogue warp drains
(the exported column map: a 5th/6th warp splits a lane quarter by columns), the fused epilogue's
arithmetic (FP32 add and one BF16 rounding, or F22's BF16x2 add), the staging of the output
(padded rows of pelib.layouts.staging, or F24's swizzled staging and 3-D TMA store of pelib.layouts.banks), and
F24's `tmap_out`, a 3-D view of the output.
"""
from __future__ import annotations

import numpy as np
import torch

from ..layouts import banks, staging
from .. import emulate, problems
from ..numerics import precision
from .base import Kind, KindError, bf16_bits, bf16_value


def epi_columns(ex: dict) -> dict[int, tuple[int, int]]:
    """{epilogue warp: (first column, end column)} from epi_cols_w<w> (begin | end << 16); without a
    column map (stages 00-04) every warp drains all tile_n columns of its lane quarter."""
    w0, nw = ex["epi_warp0"], ex["epi_warps"]
    if f"epi_cols_w{w0}" not in ex:
        return {w: (0, ex["tile_n"]) for w in range(w0, w0 + nw)}
    return {w: (ex[f"epi_cols_w{w}"] & 0xFFFF, ex[f"epi_cols_w{w}"] >> 16) for w in range(w0, w0 + nw)}


def epilogue_map(ex: dict, acc_col: int):
    """pelib.emulate epilogue_map(warp, chunk) -> (TMEM lane base, TMEM column, output column) from the exports."""
    cols, x = epi_columns(ex), ex["epi_ld_x"]

    def f(w: int, j: int):
        b, _ = cols[w]
        return 32 * (w % 4), acc_col + b + j * x, b + j * x
    return f


def check_epi_map(ex: dict) -> list[str]:
    """Problems with an exported epilogue map: lane quarters unread, columns read twice or never."""
    cover = {q: [] for q in range(4)}
    for w, (b, e) in epi_columns(ex).items():
        cover[w % 4].append((b, e))
    issues = []
    for q, spans in cover.items():
        if not spans:
            issues.append(f"TMEM lane quarter {q} is read by no epilogue warp")
            continue
        pos = 0
        for b, e in sorted(spans):
            if b != pos:
                issues.append(f"lane quarter {q}: columns [{pos}, {b}) " + ("read twice" if b < pos else "never read"))
            pos = max(pos, e)
        if pos != ex["tile_n"]:
            issues.append(f"lane quarter {q}: columns end at {pos}, not {ex['tile_n']}")
    return issues


class Fp8(Kind):
    family = "fp8"
    MMA_OPCODES = ("UTCQMMA",)
    EXTRA_PROBLEMS = ("sim",)
    # The simulator's test size: 6 pair tiles of 256 x 256 over 3 K slices; the persistent stages' 2 clusters
    # (SIM_SM_COUNT = 4) take 3 tiles each, so both accumulator buffers and the ring wrap.
    SIM = (768, 512, 384)

    def problem(self, p):
        if p == "sim":
            m, n, k = self.SIM
            return problems.PatchEmbed(name="sim", m=m, n=n, k=k)
        return super().problem(p)

    def check_launch(self, stage, prob) -> None:
        ex = stage.exports
        if "k_iters" in ex and prob.k != ex["k_iters"] * ex.block_k:   # F28: the K-loop unrolled by hand
            raise KindError(f"{stage.label}'s K-loop is unrolled for K = {ex['k_iters'] * ex.block_k}, the problem "
                            f"has K = {prob.k}: rebuild with K_ITERS={prob.k // ex.block_k}")

    def tensor_map(self, stage, p, prob, tensors):
        if p == "out":   # F24: the output as the 3-D view its TMA stores write
            addr = int(tensors["out"].data_ptr()) if tensors else 0
            return banks.f24_out_spec(prob.m, prob.n, stage.exports, address=addr)
        return None

    def emulate_tile(self, stage, inputs, m0=0, n0=0, *, acc_buf: int = 0, return_report: bool = False,
                     overrides: dict | None = None, staging_overrides: dict | None = None):
        """The BF16 output tile at (m0, n0) of one cluster, as the stage computes it (emulated).

        pelib.emulate replays TMA, descriptors, K-advance, the 2-CTA split and the TMEM loads from the
        exports, with the exported epilogue column map and the accumulator in TMEM buffer `acc_buf`.
        The fused epilogue (FP32 + comb, one BF16 rounding; BF16x2 where the stage exports epi_add_bf16x2)
        follows the kernel; a staging stage then sends every BF16 through its staging model, per CTA."""
        ex = stage.exports
        nbuf = ex.get("tmem_acc_buffers", 1)
        if not 0 <= acc_buf < nbuf:
            raise KindError(f"acc_buf={acc_buf}: {stage.label} has {nbuf} accumulator buffer(s)")
        acc_col = ex["tmem_acc_col"] + acc_buf * ex.get("tmem_acc_stride", 0)
        kw = {"tmem_acc_col": acc_col, "epilogue_map": epilogue_map(ex, acc_col), **(overrides or {})}
        params = emulate.TileParams.from_exports(ex, **kw)
        acc, rep = emulate.emulate_tile(params, inputs["a"], inputs["b"], m0=m0, n0=n0, return_report=True)
        rep.issues.extend(check_epi_map(ex))
        pos = inputs["comb"].shape[0]
        comb = inputs["comb"][(m0 + np.arange(acc.shape[0])) % pos][:, n0:n0 + acc.shape[1]].contiguous()
        add = precision.bf16x2_add_path if ex.get("epi_add_bf16x2") else precision.fp32_add_path
        fused = add(torch.from_numpy(acc.astype(np.float32)), comb).view(torch.int16).numpy().view(np.uint16)
        sreps = []
        if "staging_offset" in ex:
            parts = []
            for v in range(acc.shape[0] // ex["tile_m"]):
                part = fused[v * ex["tile_m"]:(v + 1) * ex["tile_m"]]
                if ex.get("staging_tma_store"):
                    o, r = banks.run(ex, part)
                else:
                    lay = staging.StagingLayout.from_exports(ex, **(staging_overrides or {}))
                    o, r = staging.run(lay, part, ex["smem_bytes"])
                parts.append(o)
                sreps.append(r)
                rep.issues.extend(f"CTA {v}: {i}" for i in r.issues)
            out_bits = np.concatenate(parts)
        else:
            out_bits = fused
        out = bf16_value(out_bits)
        out[np.isnan(acc)] = np.nan
        rep.staged, rep.fused = sreps, fused      # what the staging model saw, and the epilogue's BF16 before it
        return (out, rep) if return_report else out

    def emulate_check(self, stage, problem, tile, seed, **kw) -> dict:
        prob = self.problem(problem or "small")
        self.check_problem(stage, prob)
        out = super().emulate_check(stage, prob, tile, seed, **kw)
        ex = stage.exports
        out["epilogue add"] = "BF16x2 (F22)" if ex.get("epi_add_bf16x2") else "FP32"
        if "staging_offset" in ex:
            sreps = out.report.staged
            out["staging"] = "swizzled + TMA store (F24)" if ex.get("staging_tma_store") else "padded rows"
            out["staged"] = {"written_once": sum(r.written_once for r in sreps),
                             "elements": sum(r.elements for r in sreps), "ok": all(r.ok for r in sreps)}
            out["ok"] = out["ok"] and out["staged"]["ok"]
        if ex.get("epi_add_bf16x2"):   # the staged output is the BF16x2 epilogue's, bit for bit
            out["equals_bf16x2_model"] = bool((bf16_bits(out.values) == out.report.fused).all())
        out["evidence"] = "emulated (pelib.emulate" + (", the staging model)" if "staging_offset" in ex else ")")
        return out


__all__ = ["Fp8", "epi_columns", "epilogue_map", "check_epi_map", "bf16_bits"]
