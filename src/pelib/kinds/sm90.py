"""The sm_90a Hopper twin: its check shapes, the resident-B launch rules, the permuted-B map, its schedules.

Every stage has the signature patch_embed_sm90(tmap_a, tmap_b, tmap_c, comb, c, M, N, K, timing); `c` is
the output (tmap_c serves only stage 03's TMA store, and every stage carries it to keep one signature).
"""
from __future__ import annotations

import numpy as np
import torch

from ..numerics import blockfma
from .. import emulate, problems, tma
from .base import Kind, KindError, bf16_bits, bf16_value

# The verification shapes every stage runs (N = 768 suits every BLOCK_N of 128, 192 and 256; on a
# 132-SM H100 a resident-B grid is 44 CTAs per column block):
#   small   two K slices; 2 row tiles per resident-B CTA, so both ping-pong warpgroups run (also memcheck's);
#   k128    one K slice (a ring position is both the first and last of its tile), 5 row tiles per CTA;
#   tail    the last row tile is partial (TMA zero-fills, the epilogue skips rows);
#   medium  ~18 row tiles per resident-B CTA, many per persistent 02/03 CTA.
#   sim     the simulator's: 3 K slices, the last row tile 8 rows, rows wrap the 196 positions twice; on
#           SIM_SM_COUNT = 4 SMs every persistent CTA or cluster takes 3 to 7 tiles.
CHECK_SHAPES = {"small": (5632, 768, 256), "k128": (14080, 768, 128), "tail": (1000, 768, 768), "sim": (392, 768, 384)}
CHECK_PROBLEMS = ("small", "k128", "tail", "medium")
RESIDUE_PERIOD = 49   # row tiles of 64 rows whose comb rows repeat: 196 / gcd(196, 64)


def permuted_b_spec(n: int, k: int, box_rows: int, box_k: int, swizzle: int, address: int = 0):
    """B [N, K] as the 5-D view of stages 06+: torch order (g, u, q, c, k) with element strides
    (32K, 2K, 8K, K, 1), so B row 32g + 8q + 2u + c is element (g, u, q, c). A box
    (box_rows/32, 4, 4, 2, box_k) lands in shared memory with k fastest, then c, q, u, g: shared row
    c + 2q + 8u + 32g holds B row 32g + 8q + 2u + c (q and u swapped inside each 32-row group)."""
    if n % 32 or box_rows % 32:
        raise KindError(f"the permuted B view needs N ({n}) and the box ({box_rows} rows) in 32-row groups")
    return tma.make_spec("float8_e4m3fn", (n // 32, 4, 4, 2, k), (box_rows // 32, 4, 4, 2, box_k),
                         strides=(32 * k, 2 * k, 8 * k, k, 1), swizzle=swizzle, address=address)


def permuted_b_rows(box_rows: int) -> list[int]:
    """The B row (relative to the box) that each shared-memory row of a permuted box holds."""
    return [32 * g + 8 * q + 2 * u + c for g in range(box_rows // 32) for u in range(4)
            for q in range(4) for c in range(2)]


def resident_b_schedule(m: int, n: int, block_n: int, grid: int, block_m: int = 64) -> list[list[tuple[int, int]]]:
    """Stage 04's static schedule: for each CTA, the (row tile, column block) it computes, in order."""
    nbs, groups, m_tiles = n // block_n, grid // (n // block_n), -(-m // block_m)
    out = []
    for cta in range(grid):
        g, nb = divmod(cta, nbs)
        if cta >= groups * nbs or g >= m_tiles:
            out.append([])
            continue
        out.append([(g + i * groups, nb) for i in range((m_tiles - 1 - g) // groups + 1)])
    return out


def residue_tile(j: int, m_tiles: int, period: int = RESIDUE_PERIOD) -> int:
    """Stages 07+: the row tile at position j of the comb-residue order (classes t % period, then t)."""
    per, rem = divmod(m_tiles, period)
    big = rem * (per + 1)
    if j < big:
        cls, k = divmod(j, per + 1)
    else:
        cls, k = divmod(j - big, per)
        cls += rem
    return cls + period * k


def residue_schedule(m: int, n: int, block_n: int, grid: int, block_m: int = 64,
                     period: int = RESIDUE_PERIOD) -> list[list[tuple[int, int]]]:
    """Stages 07+: for each CTA, the (row tile, column block) it computes, in order. Row group g (CTAs
    g * NB .. g * NB + NB - 1, one per column block) takes the g-th of `groups` contiguous pieces of the
    comb-residue order, the first m_tiles % groups pieces one tile longer (residue_first in the kernels).
    In stage 09 a row group's clusters are its consecutive CTAs, so the order is the same."""
    def rows(g, groups, m_tiles):
        per, rem = divmod(m_tiles, groups)
        first = g * per + min(g, rem)
        return [residue_tile(j, m_tiles, period) for j in range(first, first + per + (g < rem))]
    return _by_row_group(m, n, block_n, grid, block_m, rows)


def _by_row_group(m: int, n: int, block_n: int, grid: int, block_m: int, rows) -> list[list[tuple[int, int]]]:
    """Each CTA's (row tile, column block) list: CTA g * NB + nb is row group g's CTA of column block nb and
    takes rows(g, groups, m_tiles); a CTA past the last whole row group takes none."""
    nbs = n // block_n
    groups, m_tiles = grid // nbs, -(-m // block_m)
    return [[] if cta >= groups * nbs else [(r, cta % nbs) for r in rows(cta // nbs, groups, m_tiles)]
            for cta in range(grid)]


def window_tile(g: int, i: int, groups: int, m_tiles: int, period: int = RESIDUE_PERIOD) -> int:
    """Stage 07a: row group g's local tile i -> row tile (window_tile in the kernel). Window w is row
    tiles w*P .. w*P + P - 1; group g < G1 = min(groups, P) takes tile P*i + g of whole window i while
    i < W = m_tiles // P; leftover l = (i - main) * groups + g is class G1 + l % (P - G1) of whole window
    l // (P - G1) while l < W * (P - G1), else the partial last window's tile P*W + the rest."""
    g1, w = min(groups, period), m_tiles // period
    main = w if g < g1 else 0
    if i < main:
        return period * i + g
    left, gap = (i - main) * groups + g, period - g1
    if left < w * gap:
        win = left // gap
        return period * win + g1 + (left - win * gap)
    return period * w + (left - w * gap)


def window_count(g: int, groups: int, m_tiles: int, period: int = RESIDUE_PERIOD) -> int:
    """Stage 07a: how many row tiles row group g takes (window_count in the kernel)."""
    g1, w = min(groups, period), m_tiles // period
    left = m_tiles - g1 * w
    return (w if g < g1 else 0) + ((left - 1 - g) // groups + 1 if g < left else 0)


def window_schedule(m: int, n: int, block_n: int, grid: int, block_m: int = 64,
                    period: int = RESIDUE_PERIOD) -> list[list[tuple[int, int]]]:
    """Stage 07a: for each CTA, the (row tile, column block) it computes, in order (the row groups and
    column blocks of resident_b_schedule, the windowed comb-residue order of window_tile)."""
    return _by_row_group(m, n, block_n, grid, block_m, lambda g, groups, m_tiles: [
        window_tile(g, i, groups, m_tiles, period) for i in range(window_count(g, groups, m_tiles, period))])


def schedule(stage, m: int, n: int, grid: int) -> list[list[tuple[int, int]]]:
    """The (row tile, column block) order of a resident-B stage (grid_kind 2), from its exports: 04's
    strided walk, 07's contiguous pieces of the comb-residue order, or 07a's windows."""
    ex = stage.exports
    if ex.grid_kind != 2:
        raise KindError(f"{stage.label}: only the resident-B stages (grid_kind 2) have a row-tile schedule")
    bm, bn = ex.tile_m, ex.tile_n
    if ex.get("residue_windows"):
        return window_schedule(m, n, bn, grid, bm, ex["residue_order"])
    if ex.get("residue_order"):
        return residue_schedule(m, n, bn, grid, bm, ex["residue_order"])
    return resident_b_schedule(m, n, bn, grid, bm)


def l2_traffic(stage, problem, sm_count: int = 132) -> dict:
    """Modelled bytes between L2 and the SMs on `problem` (modelled): A and B tiles (a BM x BN tile re-reads
    A once per column block and B once per row block; multicast divides by the CTAs that share a load; a
    resident B is read once per CTA), comb read by the epilogue (once per tile, or in the comb-residue
    orders once per class change of each warpgroup: comb_loads of the stage's schedule), C written."""
    ex = stage.exports
    m, n, k = problem.m, problem.n, problem.k
    bm, bn = ex.tile_m, ex.tile_n
    if ex.grid_kind == 2:
        a, b = m * k * (n // bn) / ex.cluster_x, sm_count * bn * k
    else:
        a, b = m * k * (n // bn), n * k * (m / bm) / ex.cluster_x
    if ex.get("residue_order"):
        grid = (sm_count // (n // bn)) * (n // bn)
        comb = sum(comb_loads(schedule(stage, m, n, grid), ex["residue_order"])) * bm * bn * 2
    else:
        comb = 2 * m * n
    return {"a": a, "b": b, "comb": comb, "c": 2 * m * n}


def comb_loads(schedule: list[list[tuple[int, int]]], period: int = RESIDUE_PERIOD) -> list[int]:
    """How many times each warpgroup (two per CTA, alternate tiles) reads comb under stage 07's rule:
    when the residue class of its tile differs from the one its registers hold."""
    out = []
    for tiles in schedule:
        for wg in (0, 1):
            cur, loads = None, 0
            for t, _ in tiles[wg::2]:
                if t % period != cur:
                    cur, loads = t % period, loads + 1
            out.append(loads)
    return out


class Sm90(Kind):
    family = "sm90"
    CHECK_PROBLEMS = CHECK_PROBLEMS
    EXTRA_PROBLEMS = tuple(n for n in CHECK_SHAPES if n not in problems.PATCH_EMBED_NAMES)
    MMA_OPCODES = ("QGMMA", "UTMALDG", "UTMASTG", "STG", "STS")
    TENSOR_ALIASES = {"c": "out"}

    def problem(self, p):
        if isinstance(p, str) and p in CHECK_SHAPES:
            m, n, k = CHECK_SHAPES[p]
            return problems.PatchEmbed(name=p, m=m, n=n, k=k, positions=196, tile={"m": 8, "n": 64, "k": 128})
        return super().problem(p)

    def check_problem(self, stage, prob) -> None:
        """N and K whole blocks (M may end in a partial tile: TMA zero-fills it); the resident-B rules."""
        ex = stage.exports
        bn, bk = ex.tile_n, ex.block_k
        if prob.n % bn or prob.k % bk:
            raise KindError(f"{prob.name}: N={prob.n}, K={prob.k} must be multiples of the stage's block_n={bn} "
                            f"and block_k={bk}; pick a stage variant with BLOCK_N dividing N")
        if "max_k" in ex and prob.k > ex["max_k"]:
            raise KindError(f"{prob.name}: K={prob.k} exceeds the resident B of this build (max_k={ex['max_k']}); "
                            f"build it with K_MAX={prob.k} if the shared memory allows")
        if ex.grid_kind == 2 and ex.cluster_x > 1:
            nbs, cl = prob.n // bn, ex.cluster_x
            if ex.get("cluster_split", 0) and nbs % cl:
                raise KindError(f"{prob.name}: this build's clusters hold CLUSTER_N={cl} column blocks, which does "
                                f"not divide the {nbs} blocks of block_n={bn} in N={prob.n}; build it with a "
                                f"CLUSTER_N dividing {nbs}")
            if not ex.get("cluster_split", 0) and cl != nbs:
                raise KindError(f"{prob.name}: this build's cluster holds CLUSTER_N={cl} column blocks, but "
                                f"N={prob.n} has {nbs} of block_n={bn}; build it with CLUSTER_N={nbs}")

    def tensor_map(self, stage, p, prob, tensors):
        if p == "b" and stage.exports.get("b_perm_tma", 0):
            rows, cols, sw = stage.exports.box("b")
            addr = int(tensors["b"].data_ptr()) if tensors else 0
            return permuted_b_spec(prob.n, prob.k, rows, cols, sw, addr)
        return None

    def tile_rows(self, ex) -> int:
        return ex.tile_m              # a cluster multicasts operands; each CTA still writes its own tile

    def model_reference(self, stage, inputs, m0, n0, shape, overrides=None, accumulation="tensor_core", **kw):
        """Rows m0.., columns n0.. of the output as pelib.numerics.blockfma computes them from the global A and B (wgmma
        k32 instructions in K order, the FP32 accumulator from 0 or, for comb_init, from comb), then the
        stage's epilogue (+ comb in FP32, BF16 round to nearest even): what the replay must print."""
        if overrides:
            return None     # a deliberately changed layout: the torch reference judges it
        model = blockfma.mma_models(accumulation)["wgmma_f8"]
        rows, cols = shape
        a = inputs["a"][m0:m0 + rows].contiguous().view(torch.uint8).numpy()
        b = inputs["b"][n0:n0 + cols].contiguous().view(torch.uint8).numpy()
        comb = inputs["comb"].float().numpy()
        cm = comb[(m0 + np.arange(rows)) % comb.shape[0]][:, n0:n0 + cols].astype(np.float32)
        init = stage.exports.get("comb_init", 0) == 1
        acc = blockfma.matmul(model, blockfma.values(a), blockfma.window_exponents(a, "e4m3"), blockfma.values(b),
                              blockfma.window_exponents(b, "e4m3"), d=cm.view(np.uint32) if init else None)
        acc = acc.view(np.float32)
        return bf16_value(bf16_bits(acc if init else acc + cm))

    def emulate_tile(self, stage, inputs, m0=0, n0=0, *, return_report=False, overrides=None,
                     accumulation="tensor_core"):
        """The BF16 tile of one consumer warpgroup row block: pelib.emulate's wgmma replay (TMA boxes, GMMA
        descriptors advanced per K slice) of A and B, plus comb, rounded once (the stage's epilogue).

        Stages 06+ (b_perm) load B with its rows permuted inside each 32-row group (the 5-D tensor map,
        or B_PERM_TMA=0's in-SMEM swap): shared row r holds B row permuted_b_rows[r], so the replay
        loads B in that order and the epilogue writes accumulator column r to output column
        permuted_b_rows[r] (each lane's four pairs of a 32-column group are eight neighbouring columns).
        Each wgmma adds into the FP32 accumulator by pelib.numerics.blockfma's model (the tensor core's block FMA,
        or `accumulation`), so the order of additions shows: the epilogue adds comb in FP32 (round to
        nearest) after the last wgmma and converts to BF16 (round to nearest even), while stage 08
        (comb_init) starts the accumulators from comb, the first wgmma's D, and only converts. The tile
        order (07's comb residues) and the A multicast (05, 09) change which CTA computes a tile and who
        loads its A, not the tile's data path."""
        ex = stage.exports
        if "a_desc" not in ex:
            raise KindError(f"{stage.label} exports no replayable operand layout (a_desc, b_desc, the boxes): "
                            "pelib.emulate replays the sm90 stages that export TileParams (EXPORT_NAMES)")
        p = emulate.TileParams.from_exports(ex, **(overrides or {}))
        a, b = inputs["a"], inputs["b"]
        perm = None
        if ex.get("b_perm", 0):
            if b.shape[0] % 32 or n0 % 32:
                raise KindError(f"the permuted B of {stage.label} needs N ({b.shape[0]}) and n0 ({n0}) in 32-row groups")
            perm = np.asarray(permuted_b_rows(b.shape[0]))
            b = b[perm]          # global row order as the permuting view delivers it into shared memory
        tile_m, tile_n = p.a_box_m, p.mma_n
        comb = inputs["comb"].float().numpy()
        rows = (m0 + np.arange(tile_m)) % comb.shape[0]
        cm = comb[rows][:, n0:n0 + tile_n].astype(np.float32)      # comb in output column order
        # the epilogue's column map: accumulator column r -> output column cols[r]
        cols = perm[n0:n0 + tile_n] - n0 if perm is not None else np.arange(tile_n)
        init = ex.get("comb_init", 0) == 1
        acc, rep = emulate.emulate_tile(p, a, b, m0=m0, n0=n0, return_report=True, accumulation=accumulation,
                                        acc_init=cm[:, cols] if init else None)
        out_acc = np.full_like(acc, np.nan)
        out_acc[:, cols] = acc
        acc = out_acc.astype(np.float32)
        out = bf16_value(bf16_bits(acc if init else acc + cm))
        return (out, rep) if return_report else out
