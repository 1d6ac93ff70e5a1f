"""The NVFP4 block-scaled stages: the export relations, the scale-factor maps, alpha and the ring (02's staging tile:
pelib.layouts.tma_staging).

The kernels take (tmap_a, tmap_b, tmap_sfa, tmap_sfb, out | tmap_c, alpha, M, N, K): packed E2M1 A and B, the
scale factors as 256-B rows of the blocked 512-B atoms; everything is derived from the exports (check_layout)."""
from __future__ import annotations

import dataclasses
import difflib

import numpy as np
import torch

from ..isa import descriptors as D
from .. import emulate as E, problems, reference, verify
from ..layouts.tma_staging import emulate_staged_epilogue, staging_layout_hash
from .base import EXACT_AB, EXACT_INT, Kind, KindError, check_exact

E2M1_CODE = {0: 0, 1: 2, 2: 4, -1: 10, -2: 12}   # E2M1 codes of the small integers (reference.E2M1_VALUES)
E4M3_ONE = 0x38                                  # 1.0 in E4M3: the unit block scale


def check_layout(ex: dict) -> list[str]:
    """The relations the kernel relies on, each violation naming the export."""
    out = []
    if ex.get("mma_kind") != 6:
        out.append(f"mma_kind={ex.get('mma_kind')}: the NVFP4 stages use kind::mxf4nvf4 (6)")
    dec = D.decode_umma_instr_desc_block_scaled(ex["idesc"], "mxf4nvf4")
    mma_n = ex.get("mma_n", ex["tile_n"])     # 12: a tile of several MMAs side by side along N
    if (dec["m"], dec["n"]) != (ex["tile_m"], mma_n) or ex["tile_n"] % mma_n:
        out.append(f"idesc says M={dec['m']} N={dec['n']}, tiles are {ex['tile_m']}x{ex['tile_n']} in MMAs of N={mma_n}")
    if dec["scale_fmt"] != "ue4m3" or ex["sf_vec"] != 16:
        out.append("NVFP4 needs UE4M3 scales per 16 elements (idesc bit 23 = 0, sf_vec 16)")
    if ex["a_box_k"] != ex["block_k"] or ex["block_k"] // 2 != ex["a_swizzle"]:
        out.append(f"a K tile row ({ex['block_k'] // 2} B) must fill the {ex['a_swizzle']}-B swizzle span")
    if ex["sf_rows_per_atom"] * ex["sf_row_bytes"] != 512:
        out.append(f"{ex['sf_rows_per_atom']} SF rows of {ex['sf_row_bytes']} B are not one 512-B atom")
    if ex["sf_box_rows"] * ex["sf_row_bytes"] != sf_ktile_bytes(ex):
        out.append(f"SF box {ex['sf_box_rows']} x {ex['sf_row_bytes']} B != {sf_ktile_bytes(ex)} B per K tile")
    parts = ex["sfb_smem_offset"] - ex["a_smem_offset"] + ex.get("sfb_blocks", 1) * sf_ktile_bytes(ex)
    if parts != ex["stage_bytes"] or ex["stage_bytes"] % 1024:
        out.append(f"stage of {ex['stage_bytes']} B: parts add to {parts} B, SW128 needs 1024-B alignment")
    if ex["stage_tx_bytes"] != ex["stage_bytes"]:
        out.append("expect_tx bytes must equal the stage's TMA bytes")
    if "stage_smem_offset" in ex:   # 02: where the staging tile sits
        off, size, ring = ex["stage_smem_offset"], ex["staging_bytes"], ex["pipeline_stages"] * ex["stage_bytes"]
        box = ex["stage_box_rows"] * ex["stage_box_cols"] * ex["out_elem_bytes"]
        if size != ex["tile_m"] * ex["tile_n"] * ex["out_elem_bytes"] or size % box:
            out.append(f"staging of {size} B is not the {ex['tile_m']}x{ex['tile_n']} tile in whole boxes of {box} B")
        if off % 1024 or box % 1024:
            out.append(f"staging at {off} with boxes of {box} B: swizzled boxes must start 1024-B aligned")
        if ex["staging_in_ring"] and off + size > ring:
            out.append(f"staging [{off}, {off + size}) is said to be in the ring but the ring ends at {ring}")
        if not ex["staging_in_ring"] and off < ring:
            out.append(f"staging at {off} overlaps the ring [0, {ring}) but is said to have its own buffer")
        if off + size > ex["barrier_smem_offset"]:
            out.append(f"staging [{off}, {off + size}) runs into the barriers at {ex['barrier_smem_offset']}")
    return out


def sf_ktile_bytes(ex: dict) -> int:
    """Scale-factor bytes of one 128-row block per K tile: (block_k / 64) atoms of 512 B."""
    return ex["block_k"] // (4 * ex["sf_vec"]) * 512


def max_stages_that_fit(ex: dict) -> int:
    """The largest NUM_STAGES whose shared memory fits, from this build's per-stage and fixed bytes."""
    fixed = ex["smem_bytes"] - ex["pipeline_stages"] * ex["stage_bytes"]
    return (ex["smem_limit"] - fixed) // ex["stage_bytes"]


def sf_rows_view(sf_mma, ex: dict):
    """The flat 512-B-atom scale factors as the (rows, 256 B) uint8 matrix the SF tensor map reads."""
    t = sf_mma.view(torch.uint8) if isinstance(sf_mma, torch.Tensor) else np.asarray(sf_mma).view(np.uint8)
    if t.reshape(-1).shape[0] % ex["sf_row_bytes"]:
        raise KindError(f"{t.numel()} scale-factor bytes are not whole {ex['sf_row_bytes']}-B rows")
    return t.reshape(-1, ex["sf_row_bytes"])


def sf_box_row(block: int, kt: int, k: int, ex: dict) -> int:
    """Row coordinate of K tile `kt` of 128-row block `block` in the SF map (the kernel's load_ktile)."""
    per_ktile = ex["block_k"] // (4 * ex["sf_vec"])          # 64 K-elements per 512-B atom
    return (block * (k // ex["block_k"]) * per_ktile + kt * per_ktile) * ex["sf_rows_per_atom"]


SF_BLOCK_ROWS = 128   # rows of one 512-B scale-factor atom (pelib.emulate.sf_blocked_offset's layout)


def sfb_shift(ex: dict, n_blk: int) -> int:
    """Columns the MMA's SFB address moves into its 128-row SF block for N tile `n_blk` (03's sfb_shift_cols)."""
    return (n_blk * ex["tile_n"] % SF_BLOCK_ROWS) // 32 * ex.get("sfb_shift_cols_per_32", 0)


def tile_params(ex: dict, slot: int = 0, n_blk: int = 0) -> E.TileParams:
    """pelib.emulate.TileParams of ring slot `slot` (offsets, descriptors, TMEM scale columns) for N tile n_blk."""
    if not 0 <= slot < ex["pipeline_stages"]:
        raise KindError(f"ring slot {slot} of a {ex['pipeline_stages']}-stage ring")
    off, col = slot * ex["stage_bytes"], slot * ex["tmem_stage_cols"]
    return E.TileParams.from_exports(
        ex, a_smem_offset=ex["a_smem_offset"] + off, b_smem_offset=ex["b_smem_offset"] + off,
        a_desc=D.smem_desc_advance(ex["a_desc"], off), b_desc=D.smem_desc_advance(ex["b_desc"], off),
        sfa_smem_offset=ex["sfa_smem_offset"] + off, sfb_smem_offset=ex["sfb_smem_offset"] + off,
        sfa_tmem_col=ex["sfa_tmem_col"] + col, sfb_tmem_col=ex["sfb_tmem_col"] + col,
        sfb_mma_shift_cols=sfb_shift(ex, n_blk))


def mma_half(p: E.TileParams, ex: dict, h: int) -> E.TileParams:
    """TileParams of MMA `h` of a tile of several along N (12): B's rows, box and SF block, the accumulator h x mma_n on."""
    mn, off = ex.get("mma_n", ex["tile_n"]), h * ex.get("mma_n", 0) * (ex["block_k"] // 2)   # B rows x K tile bytes
    return p if mn == ex["tile_n"] else p.with_(
        b_smem_offset=p.b_smem_offset + off, b_desc=D.smem_desc_advance(p.b_desc, off), b_box_n=mn,
        sfb_smem_offset=p.sfb_smem_offset + h * sf_ktile_bytes(ex),
        sfb_tmem_col=p.sfb_tmem_col + h * ex["sfb_half_cols"], tmem_acc_col=p.tmem_acc_col + h * mn)


def _np_bytes(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().contiguous().view(torch.uint8).numpy()
    return np.asarray(t).view(np.uint8)


def _scalar(x) -> float:
    return float(x.float().reshape(-1)[0]) if isinstance(x, torch.Tensor) else float(np.asarray(x).reshape(-1)[0])


def check_sf_loads(prob, ex: dict, sfa_mma, sfb_mma, m_blk: int, n_blk: int) -> None:
    """Replay the kernel's SF TMA boxes (rows of 256 B at sf_box_row()) and check each K tile lands as the
    blocked atoms of that tile (what the MMA replay assumes is in shared memory)."""
    kt_bytes = sf_ktile_bytes(ex)
    sfb0 = n_blk * ex["tile_n"] // SF_BLOCK_ROWS     # 12: one SF block per 128-wide half, each its own box
    for name, flat, blk in (("sfa", sfa_mma, m_blk),
                            *(("sfb", sfb_mma, sfb0 + h) for h in range(ex.get("sfb_blocks", 1)))):
        g = np.ascontiguousarray(_np_bytes(sf_rows_view(flat, ex)))
        tm = E.TensorMap2D(8, (ex["sf_row_bytes"], g.shape[0]), (ex["sf_row_bytes"], ex["sf_box_rows"]), ex["sf_swizzle"])
        blocked = g.reshape(-1)
        for kt in range(prob.k // ex["block_k"]):
            sm = E.SmemImage(kt_bytes)
            E.tma_load_2d(tm, g, (0, sf_box_row(blk, kt, prob.k, ex)), sm, 0)
            want = E.sf_blocked_offset(128 * blk, kt * ex["block_k"] // ex["sf_vec"], prob.k // ex["sf_vec"])
            if not np.array_equal(sm.view(0, kt_bytes), blocked[want:want + kt_bytes]):
                raise KindError(f"{name}: the box of K tile {kt}, block {blk} is not that tile's scale factors")


class Nvfp4(Kind):
    family = "nvfp4"
    FULL = "k16384"
    SHARED_PROBLEMS, EXTRA_PROBLEMS = problems.NVFP4_NAMES, ("sim", "ring")
    CHECK_PROBLEMS = ("small", "ring")
    # make bench (pelib.measure.sweep.timed_shapes) times these beside the full problem: the log's three shapes
    TIMED_PROBLEMS = ("k7168", "k2048")
    EMULATED_TILE = (0, 1)
    MMA_OPCODES = ("UTCOMMA", "UTCCP", "UTMASTG")
    # 05's simulated grid: one CTA walks all 4 tiles of 'sim' (64 wide), so both accumulators wrap
    SIM_SM_COUNT = 1
    OWNERS = {"a": "a", "b": "b", "sfa": "sfa_mma", "sfb": "sfb_mma", "c": "out"}

    def problem(self, p):
        if not isinstance(p, str):
            return p
        if p == "ring":   # 8 K tiles: every ring of 1..7 stages wraps
            return problems.NvFp4Gemm("ring", 128, 256, 2048)
        if p == "sim":    # the simulator's: 2 CTAs, 6 K tiles (the default 4-stage ring wraps)
            return problems.NvFp4Gemm("sim", 128, 256, 1536)
        return problems.nvfp4_gemm(self.FULL if p == "full" else p)

    def check_problem(self, stage, prob) -> None:
        ex, issues = stage.exports, check_layout(stage.exports)
        if issues:
            raise KindError(f"inconsistent NVFP4 exports of {stage.label}:\n  - " + "\n  - ".join(issues))
        split = ex.get("split_k", 1)   # 04: the K tiles are shared by a cluster's CTAs
        bad = [f"{d}={v} is not a multiple of {t}" for d, v, t in
               (("M", prob.m, ex.tile_m), ("N", prob.n, ex.tile_n), ("K", prob.k, ex.block_k * split)) if v % t]
        if bad:
            why = (f"; K is shared by the {split} CTAs of a split-K cluster: a multiple of block_k x SPLIT_K, or "
                   "build with a SPLIT_K that divides K / block_k" if split > 1 and prob.k % (ex.block_k * split) else "")
            raise KindError(f"{prob.name}: " + "; ".join(bad) + " (the NVFP4 stages do whole tiles only: pad)" + why)
        if ex.smem_bytes > ex.smem_limit:
            fit = max_stages_that_fit(ex)   # 0 where the split's partial tiles (SPLIT_K - 1 in rank 0) leave no room
            fix = f"use at most {fit} stages" if fit else "no stage fits beside rank 0's partial tiles: lower SPLIT_K"
            raise KindError(f"{stage.label} needs {ex.smem_bytes} B of shared memory per block; sm_100 allows "
                            f"{ex.smem_limit} B (227 KB): {fix}")

    def exact_inputs(self, prob, seed: int, device) -> dict:
        """Seeded small integers (a in [-2, 2], b in [-1, 1]), every scale 1.0: each FP32 partial sum is an exact
        integer; the FP16 output is checked to be within +-2048 (exact) where K alone does not prove it."""
        g = torch.Generator().manual_seed(int(seed))
        ra, rb = EXACT_AB
        lut = torch.zeros(5, dtype=torch.uint8)
        for v, code in E2M1_CODE.items():
            lut[v + 2] = code
        va = torch.randint(-ra, ra + 1, (prob.m, prob.k), generator=g)
        vb = torch.randint(-rb, rb + 1, (prob.n, prob.k), generator=g)
        if prob.k * ra * rb > EXACT_INT["float16"]:
            check_exact(va.double() @ vb.double().t(), "float16", f"{prob.name} seed {seed}")
        a, b = (reference.pack_fp4(lut[v + 2]) for v in (va, vb))
        kb = prob.k // reference.SF_VEC
        sfa = torch.full((prob.m, kb), E4M3_ONE, dtype=torch.uint8).view(reference.FP8)
        sfb = torch.full((prob.n, kb), E4M3_ONE, dtype=torch.uint8).view(reference.FP8)
        one = torch.ones(1, dtype=torch.float32)
        out = torch.full((prob.m, prob.n), float("nan"), dtype=prob.out_dtype, device=device)
        return {"a": a.to(device), "b": b.to(device), "sfa": sfa.to(device), "sfb": sfb.to(device),
                "sfa_mma": reference.sf_to_mma_layout(sfa).to(device),
                "sfb_mma": reference.sf_to_mma_layout(sfb).to(device),
                "gsa": one.to(device), "gsb": one.clone().to(device), "out": out}

    def reference(self, prob, t):
        return reference.nvfp4_gemm_reference(t["a"], t["sfa"], t["gsa"], t["b"], t["sfb"], t["gsb"],
                                               out_dtype=prob.out_dtype)

    def tolerance_inputs(self, prob, t):
        """The largest operand magnitudes: E2M1's largest value times the finite maxima of the scales."""
        e2m1 = float(reference.E2M1_MAX)
        a, b = (e2m1 * verify.finite_absmax(t[f"sf{o}"], f"sf{o}") * verify.finite_absmax(t[f"gs{o}"], f"gs{o}")
                for o in ("a", "b"))
        return {"K": prob.k, "a_absmax": a, "b_absmax": b}

    def map_operand(self, stage, p, prob, tensors):
        ex = stage.exports
        if p in ("a", "b"):
            rows = prob.m if p == "a" else prob.n
            return "uint8", (rows, prob.k // 2), (tensors or {}).get(p)
        if p in ("sfa", "sfb"):
            rows = prob.m if p == "sfa" else prob.n
            if tensors:
                return "uint8", None, sf_rows_view(tensors[f"{p}_mma"], ex)
            nbytes = reference.sf_mma_size(rows, prob.k // ex["sf_vec"])
            return "uint8", (nbytes // ex["sf_row_bytes"], ex["sf_row_bytes"]), None
        if p == "c":
            if ex["out_elem_bytes"] != 2:
                raise KindError(f"out_elem_bytes={ex['out_elem_bytes']}: the NVFP4 stages write FP16")
            return "float16", (prob.m, prob.n), (tensors or {}).get("out")
        raise KindError(f"{stage.label}: no tensor behind tmap_{p}")

    def check_maps(self, stage, specs):
        # A K tile delivers what expect_tx announces (C is a store: not counted); SFB: one box per SF block (12: 2)
        n = {k: stage.exports.get("sfb_blocks", 1) if k == "sfb" else 1 for k in specs if k != "c"}
        tx = sum(specs[k].box_bytes * v for k, v in n.items())
        if tx != stage.exports["stage_tx_bytes"]:
            raise KindError(f"the {sum(n.values())} boxes of a K tile deliver {tx} B but the kernel expects "
                            f"{stage.exports['stage_tx_bytes']} B")

    def map_owner(self, p, tensors):
        return tensors.get(self.OWNERS[p])

    def scalars(self, stage, prob, tensors):
        t = tensors or {}
        alpha = _scalar(t["gsa"]) * _scalar(t["gsb"]) if "gsa" in t and "gsb" in t else 1.0
        return {"alpha": alpha}

    def grid_dims(self, stage, prob, tiles):
        ex = stage.exports   # a split-K cluster (04) is split_k CTAs along x per output tile
        return (prob.n // ex.tile_n * ex.get("split_k", 1), prob.m // ex.tile_m, 1)

    def emulate_tile(self, stage, inputs, m0=0, n0=0, *, prob=None, return_report=False, exports=None):
        """One tile_m x tile_n tile as the stage computes it (FP16, as float64): each CTA's K tiles through their
        ring slots, summed, alpha and FP16 (02: staging and TMA store); the SF boxes replayed (check_sf_loads)."""
        ex = dict(exports or stage.exports)
        issues = check_layout(ex)
        if issues:
            raise KindError("inconsistent NVFP4 exports:\n  - " + "\n  - ".join(issues))
        prob = prob or problems.NvFp4Gemm("tile", inputs["a"].shape[0], inputs["b"].shape[0], 2 * inputs["a"].shape[1])
        tm, tn, bk = ex["tile_m"], ex["tile_n"], ex["block_k"]
        m_blk, n_blk = m0 // tm, n0 // tn
        E.check_tile_index((m_blk, n_blk), (prob.m // tm, prob.n // tn))
        check_sf_loads(prob, ex, inputs["sfa_mma"], inputs["sfb_mma"], m_blk, n_blk)
        a, bb, sfa, sfb = (_np_bytes(inputs[k]) for k in ("a", "b", "sfa", "sfb"))
        kt_bytes, kt_sf = bk // 2, bk // ex["sf_vec"]
        acc = np.zeros((tm, tn))
        reports = []
        params = [tile_params(ex, s, n_blk) for s in range(ex["pipeline_stages"])]
        per_cta = prob.k // bk // ex.get("split_k", 1)   # K tiles one CTA walks (04: a cluster shares K)
        mn = ex.get("mma_n", tn)     # 12: the tile as MMAs of mma_n columns side by side (mma_half)
        for h in range(tn // mn):
            n0h = n0 + h * mn
            # B and its scales as the 128-row block holding the tile (a narrow tile's SF atoms cover the block)
            nb0, nrows = (n0h - n0h % SF_BLOCK_ROWS, SF_BLOCK_ROWS) if mn < SF_BLOCK_ROWS else (n0h, mn)
            for kt in range(prob.k // bk):
                # the K tile's own columns, so emulate_tile's K tile 0 is the kernel's K tile kt; the staged
                # epilogue runs once, below, on the whole sum
                ksl, ssl = slice(kt * kt_bytes, (kt + 1) * kt_bytes), slice(kt * kt_sf, (kt + 1) * kt_sf)
                p = mma_half(params[kt % per_cta % len(params)], ex, h).with_(stage_smem_offset=None)
                out, rep = E.emulate_tile(p, a[m0:m0 + tm, ksl], bb[nb0:nb0 + nrows, ksl], sfa=sfa[m0:m0 + tm, ssl],
                                          sfb=sfb[nb0:nb0 + nrows, ssl], n0=n0h - nb0, return_report=True)
                acc[:, h * mn:(h + 1) * mn] += out
                reports.append(rep)
        alpha = _scalar(inputs.get("gsa", 1.0)) * _scalar(inputs.get("gsb", 1.0))
        if "stage_smem_offset" in ex:
            rep = E.TileReport()
            tile = emulate_staged_epilogue(params[0], acc, alpha, prob, m_blk, n_blk, rep)
            if "staging_layout_hash" in ex and staging_layout_hash(params[0]) != ex["staging_layout_hash"]:
                rep.issues.append("the kernel's staging_offset() (export staging_layout_hash) is not the layout "
                                  "the stage_* exports describe")
            reports.append(rep)
        else:
            tile = (np.float32(alpha) * acc.astype(np.float32)).astype(np.float16).astype(np.float64)
        return (tile, reports) if return_report else tile

    def emulate_check(self, stage, problem, tile, seed, overrides: dict | None = None, **kw) -> dict:
        """One tile against pelib.reference (FP16 outputs, within one FP16 ulp); the problem defaults to
        128 x 256 x 2048 (8 K tiles: every ring wraps); `overrides` replace exports (a wrong layout)."""
        prob = self.problem(problem or "ring")
        known = set(stage.exports) | {f.name for f in dataclasses.fields(E.TileParams)}
        unknown = sorted(set(overrides or {}) - known)
        if unknown:   # a misspelt key would replace nothing and the check would pass (as FP8 and sm90 refuse it)
            near = {u: difflib.get_close_matches(u, sorted(known), n=1) for u in unknown}
            hint = "; ".join(f"did you mean {m[0]}?" for m in near.values() if m)
            raise E.EmulationError(f"unknown override {', '.join(unknown)}{' (' + hint + ')' if hint else ''}: an "
                                   f"NVFP4 override replaces one of {stage.label}'s exports or a TileParams field")
        ex = {**stage.exports, **(overrides or {})}
        x = prob.make_inputs(seed)
        ref = self.reference(prob, x).double().numpy()
        mb, nb = tile
        nb = min(nb, prob.n // ex["tile_n"] - 1) if tuple(tile) == self.EMULATED_TILE else nb   # 12: one N tile
        tm, tn = ex["tile_m"], ex["tile_n"]
        want = ref[mb * tm:(mb + 1) * tm, nb * tn:(nb + 1) * tn]
        out = {"stage": stage.label, "problem": f"{prob.m}x{prob.n}x{prob.k}", "tile": tuple(tile)}
        try:
            got, reps = self.emulate_tile(stage, x, mb * ex["tile_m"], nb * ex["tile_n"], prob=prob,
                                          return_report=True, exports=ex)
        except Exception as e:  # a layout the modelled hardware rejects
            return {**out, "ok": False, "error": f"{type(e).__name__}: {e}", "issues": [f"{type(e).__name__}: {e}"]}
        diff = np.abs(np.nan_to_num(got, nan=np.inf) - want)
        ulp = np.abs(np.spacing(want.astype(np.float16)).astype(np.float64))
        return {**out, "ok": bool(np.all(diff <= ulp)) and all(r.ok for r in reps), "max_abs_err": float(diff.max()),
                "elements_off_by_more_than_1ulp": int((diff > ulp).sum()),
                "issues": sorted({i for r in reps for i in r.issues}), "evidence": "emulated (pelib.emulate)"}
