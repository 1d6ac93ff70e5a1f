"""The adapter interface: a family's problems, inputs, reference, its own tensor maps and epilogue."""
from __future__ import annotations

import numpy as np
import torch

from .. import emulate as E, problems, reference
from ..isa import sass


class KindError(ValueError):
    """A problem or a build does not fit a family's stages; the message names the limit and the fix."""


def bf16_bits(x) -> np.ndarray:
    """FP32 values rounded to BF16 (nearest even, as cvt.rn.bf16x2.f32), as uint16 bit patterns; every
    NaN becomes 0x7FFF (CUDA include/cuda_bf16.hpp __internal_float2bfloat16, the host twin of cvt.rn)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, np.uint16(0x7FFF), r).astype(np.uint16)


# Exact-arithmetic inputs: small integers whose every FP32 partial sum (|s| < 2^24) and whose output
# are exact, so a kernel's output is one set of bits whatever its summation order, on any back end.
# BF16 (8 significand bits) holds every integer of magnitude <= 256, FP16 (11 bits) every one <= 2048.
EXACT_INT = {"bfloat16": 256, "float16": 2048}
EXACT_AB = (2, 1)          # patch embed: a in [-2, 2], b in [-1, 1] (E4M3 holds both exactly)
EXACT_COMB = 2             # bias, pos in [-2, 2]: comb = bias + pos in [-4, 4], exact in BF16


class ExactnessError(ValueError):
    """Exact-arithmetic inputs whose output would not be exact in the output format."""


def check_exact(acc: torch.Tensor, fmt: str, what: str) -> None:
    """Raise unless every value of the FP64 result `acc` is an integer the output format holds exactly."""
    lim = EXACT_INT[fmt]
    big = float(acc.abs().max()) if acc.numel() else 0.0
    if big > lim or not bool((acc == acc.round()).all()):
        raise ExactnessError(f"{what}: the exact result reaches |{big:g}|, beyond the {lim} up to which {fmt} holds "
                             "every integer: pick a smaller K (or another seed) for exact-arithmetic inputs")


def exact_patch_embed_inputs(prob, seed: int, device) -> dict:
    """Seeded small-integer inputs of a patch-embed problem: a in [-2, 2], b in [-1, 1] (E4M3), bias and
    pos in [-2, 2] (BF16), comb = bias + pos. Every FP32 partial sum is an integer below 2^24, so exact in
    any order; the output a.b^T + comb is checked here to be an integer within +-256 (exact in BF16) and
    ExactnessError names the fix where a seed's draw is not (about 13 standard deviations at K = 768)."""
    g = torch.Generator().manual_seed(int(seed))
    ra, rb = EXACT_AB
    a = torch.randint(-ra, ra + 1, (prob.m, prob.k), generator=g).to(reference.FP8)
    b = torch.randint(-rb, rb + 1, (prob.n, prob.k), generator=g).to(reference.FP8)
    bias = torch.randint(-EXACT_COMB, EXACT_COMB + 1, (prob.n,), generator=g).to(reference.BF16)
    pos = torch.randint(-EXACT_COMB, EXACT_COMB + 1, (prob.positions, prob.n), generator=g).to(reference.BF16)
    comb = (bias.float()[None, :] + pos.float()).to(reference.BF16)
    if prob.k * ra * rb + 2 * EXACT_COMB > EXACT_INT["bfloat16"]:   # no bound proves it: check the draw
        bt = b.double().t()
        rows = torch.arange(prob.m) % prob.positions
        for r0 in range(0, prob.m, 1 << 14):
            r1 = min(prob.m, r0 + (1 << 14))
            check_exact(a[r0:r1].double() @ bt + comb.double()[rows[r0:r1]], "bfloat16",
                        f"{prob.name} seed {seed}")
    out = torch.full((prob.m, prob.n), float("nan"), dtype=reference.BF16, device=device)
    return {"a": a.to(device), "b": b.to(device), "bias": bias.to(device), "pos": pos.to(device),
            "comb": comb.to(device), "out": out}


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
    # The simulator's test size (problem 'sim'): several K slices, more tiles than the resident CTAs of a
    # persistent grid sized for SIM_SM_COUNT SMs, so persistent loops and rings wrap; small enough for a CPU.
    SIM_SM_COUNT = 4

    # ---- problems, inputs, reference ----
    def problem(self, p):
        if not isinstance(p, str):
            return p
        return problems.patch_embed(self.FULL if p == "full" else p)

    SHARED_PROBLEMS: tuple = problems.PATCH_EMBED_NAMES   # the named problems of pelib.problems it takes
    EXTRA_PROBLEMS: tuple = ()                             # the names its own problem() adds

    def problem_names(self) -> tuple:
        """The names problem() takes ('full': the family's full problem)."""
        return ("full", *self.SHARED_PROBLEMS, *self.EXTRA_PROBLEMS)

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

    def inputs(self, prob, seed: int, device, exact: bool = False) -> dict:
        """The problem's seeded inputs; exact=True: small integers whose output is exact (exact_inputs)."""
        return self.exact_inputs(prob, seed, device) if exact else prob.make_inputs(seed=seed, device=device)

    def exact_inputs(self, prob, seed: int, device) -> dict:
        """Exact-arithmetic inputs: every back end's output must equal the reference bit for bit."""
        return exact_patch_embed_inputs(prob, seed, device)

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

    def model_reference(self, stage, inputs, m0, n0, shape, **kw):
        """The tile's outputs computed from the global operands under the emulator's MMA arithmetic with no
        layout at all (None: this family's check is the torch reference within one ulp)."""
        return None

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
        fields = {"stage": stage.label, "problem": prob.name, "tile": (m0, n0), "shape": got.shape,
                  "max_abs_err": float(err.max()), "within_1ulp": bool((err <= ulp).all()),
                  "bad": int((~(err <= ulp)).sum()), "report_ok": rep.ok, "issues": list(rep.issues),
                  "ok": bool((err <= ulp).all()) and rep.ok, "evidence": "emulated (pelib.emulate)"}
        model = self.model_reference(stage, inputs, m0, n0, got.shape, **kw)
        if model is not None:   # the tensor core's rounding can leave an output more than one ulp off: the
            # verdict is the replay against the same arithmetic on the global operands (no layout), bit for bit
            same = np.array_equal(np.nan_to_num(got, nan=np.inf), model)
            fields.update(model_bits_equal=same, model_differ=int((got != model).sum()), ok=same and rep.ok)
        out = Check(fields)
        out.report, out.values = rep, got
        return out
