"""The adapter interface: a family's problems, inputs, reference, its own tensor maps and epilogue."""
from __future__ import annotations

import numpy as np

from .. import emulate as E, problems, reference, sass


class KindError(ValueError):
    """A problem or a build does not fit a family's stages; the message names the limit and the fix."""


def bf16_bits(x) -> np.ndarray:
    """FP32 values rounded to BF16 (nearest even, as cvt.rn.bf16x2.f32), as uint16 bit patterns."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits) -> np.ndarray:
    """uint16 BF16 bit patterns as float64."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


class Check(dict):
    """An emulated tile's verdict (a dict, as the chapters show it); the emulator's report and the tile's
    values ride along as attributes."""

    report = None
    values = None


class Kind:
    """Defaults shared by the patch-embed families (FP8 on sm_100a and its sm_90a twin)."""

    family = ""
    FULL = "siglip2"                 # the problem 'full' names
    CHECK_PROBLEMS: tuple = ("small", "medium")   # the shapes a sweep verifies before the full problem
    EMULATED_TILE = (1, 0)           # the (row block, column block) emulate_check replays by default
    MMA_OPCODES: tuple = ()          # SASS opcodes the facts row counts
    TENSOR_ALIASES: dict = {}        # kernel parameter name -> inputs key (sm90's `c` is the output)

    # ---- problems, inputs, reference ----
    def problem(self, p):
        if not isinstance(p, str):
            return p
        return problems.patch_embed(self.FULL if p == "full" else p)

    def check_problem(self, stage, prob) -> None:
        ex = stage.exports
        need = {"M": (prob.m, ex.tile_m * ex.cluster_x), "N": (prob.n, ex.tile_n), "K": (prob.k, ex.block_k)}
        bad = [f"{d}={v} is not a multiple of {t}" for d, (v, t) in need.items() if v % t]
        if bad:
            raise KindError(f"{prob.name} does not fit {stage.label}'s tiles: " + "; ".join(bad)
                            + " (pick a problem whose dimensions are multiples: the kernel has no bounds checks)")

    def check_launch(self, stage, prob) -> None:
        """What a launch needs beyond the tiling (the emulator replays a tile without it)."""
        return None

    def inputs(self, prob, seed: int, device) -> dict:
        return prob.make_inputs(seed=seed, device=device)

    def reference(self, prob, t: dict):
        return reference.patch_embed_reference(t["a"], t["b"], t["comb"])

    def tolerance_inputs(self, prob, t: dict) -> dict:
        """What pelib.verify.verify_gemm derives the GEMM tolerance from: the operands (their finite maxima)."""
        return {"a": t["a"], "b": t["b"]}

    # ---- the launch ----
    def map_operand(self, stage, p: str, prob, tensors):
        """(dtype, shape, tensor or None) of the global tensor behind tensor map tmap_<p>."""
        t = tensors or {}
        shapes = {"a": ("float8_e4m3fn", (prob.m, prob.k), "a"), "b": ("float8_e4m3fn", (prob.n, prob.k), "b"),
                  "c": ("bfloat16", (prob.m, prob.n), "out"), "out": ("bfloat16", (prob.m, prob.n), "out")}
        if p not in shapes:
            raise KindError(f"{stage.label}: no tensor behind tmap_{p}")
        dtype, shape, key = shapes[p]
        return dtype, shape, t.get(key)

    def tensor_map(self, stage, p: str, prob, tensors):
        """A map the family builds itself (not a 2-D box over one tensor), or None."""
        return None

    def check_maps(self, stage, specs: dict) -> None:
        return None

    def map_owner(self, p: str, tensors: dict):
        return tensors.get(self.TENSOR_ALIASES.get(p, "out" if p in ("c", "out") else p))

    def scalars(self, stage, prob, tensors) -> dict:
        return {}

    def grid_dims(self, stage, prob, tiles: int) -> tuple[int, int, int]:
        return (tiles, 1, 1)

    def sass_facts(self, b) -> dict:
        h = sass.opcode_histogram(b.sass, modifiers=True)
        return {op: sum(c for o, c in h.items() if o == op or o.startswith(op + ".")) for op in self.MMA_OPCODES}

    # ---- emulated ----
    def emulate_tile(self, stage, inputs, m0, n0, **kw):
        raise KindError(f"{stage.label}: pelib.emulate has no replay of this family")

    def tile_rows(self, ex) -> int:
        """Output rows of one emulated tile: a CTA pair's under cta_group::2 (the MMA spans the cluster)."""
        return ex.tile_m * ex.cluster_x

    def emulate_check(self, stage, problem, tile, seed, **kw) -> dict:
        """One tile (row block, column block) emulated against the torch reference: within one BF16 ulp."""
        prob = self.problem(problem or "small")
        self.check_problem(stage, prob)
        ex = stage.exports
        rows = self.tile_rows(ex)
        E.check_tile_index(tile, (prob.m // rows, prob.n // ex.tile_n))
        inputs = prob.make_inputs(seed=seed)
        m0, n0 = tile[0] * rows, tile[1] * ex.tile_n
        got, rep = self.emulate_tile(stage, inputs, m0, n0, return_report=True, **kw)
        pos = inputs["comb"].shape[0]
        comb = inputs["comb"][(m0 + np.arange(pos)) % pos][:, n0:n0 + ex.tile_n].contiguous()
        ref = reference.patch_embed_reference(inputs["a"][m0:m0 + rows], inputs["b"][n0:n0 + ex.tile_n].contiguous(),
                                              comb).float().numpy()
        if got.shape != ref.shape:   # an overridden MMA shape covers part of the tile: the rest counts as unwritten
            part, got = got[:ref.shape[0], :ref.shape[1]], np.full(ref.shape, np.nan)
            got[:part.shape[0], :part.shape[1]] = part
        err = np.abs(np.nan_to_num(got, nan=np.inf) - ref)
        ulp = np.abs(ref) * 2.0 ** -7 + 2.0 ** -20      # one BF16 ulp at |ref| (8 significand bits)
        out = Check({"stage": stage.label, "problem": prob.name, "tile": (m0, n0), "shape": got.shape,
                     "max_abs_err": float(err.max()), "within_1ulp": bool((err <= ulp).all()),
                     "bad": int((~(err <= ulp)).sum()), "report_ok": rep.ok, "issues": list(rep.issues),
                     "ok": bool((err <= ulp).all()) and rep.ok, "evidence": "emulated (pelib.emulate)"})
        out.report, out.values = rep, got
        return out
