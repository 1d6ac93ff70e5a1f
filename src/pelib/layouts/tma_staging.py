"""02's shared-memory-staged epilogue (nvfp4/02_tma_store_epilogue): where each output element lands in the
staging tile (the stage_* exports and their swizzle), the layout's hash the kernel exports, and the epilogue
replayed through pelib.emulate's TMEM, shared memory and TMA store models."""
from __future__ import annotations

import numpy as np

from .. import emulate as E


def c_box_coords(box: int, m_blk: int, n_blk: int, tile_m: int = 128, tile_n: int = 128,
                 box_cols: int = 64) -> tuple[int, int]:
    """(column, row) where column box `box` of tile (m_blk, n_blk) is stored: 02's store_tile formula."""
    return n_blk * tile_n + box * box_cols, m_blk * tile_m


def staging_addresses(p, rows, cols, smem_base: int = 0):
    """Shared addresses (..., out_elem_bytes) where 02's epilogue writes output (row, col): box (col // cols) *
    row_boxes + row // rows, rows of stage_box_cols elements inside a box, then the stage_swizzle XOR."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    eb, bc, br = p.out_elem_bytes, p.stage_box_cols, p.stage_box_rows
    box = (cols // bc) * (p.mma_m // br) + rows // br
    logical = smem_base + p.stage_smem_offset + box * br * bc * eb + (rows % br) * bc * eb + (cols % bc) * eb
    return E.swizzle_addr(logical[..., None] + np.arange(eb), p.stage_swizzle)


def staging_layout_hash(p) -> int:
    """02's staging_layout_hash(): h = h * 1000003 + offset of the 16-B chunk (row, col = 0, 8, ..) mod 2**64."""
    r, c = np.meshgrid(np.arange(p.mma_m), np.arange(0, p.mma_n, 8), indexing="ij")
    h = 0
    for o in (staging_addresses(p, r, c)[..., 0] - p.stage_smem_offset).reshape(-1):
        h = (h * 1000003 + int(o)) % 2**64
    return h


def emulate_staged_epilogue(p, acc, alpha: float, prob, m_blk: int = 0, n_blk: int = 0, report=None,
                            smem_base: int = 0) -> np.ndarray:
    """02's epilogue through pelib.emulate's TMEM, SMEM and TMA models (tcgen05.ld, alpha, FP16, st.shared, one TMA
    store a box into a NaN-poisoned output); `report` gets unwritten staging bytes a store reads, outputs nobody
    stored, bytes stored outside the tile and a staging swizzle that differs from the map's."""
    report = report if report is not None else E.TileReport()
    tile_m, tile_n = acc.shape
    eb, bc, br, x = p.out_elem_bytes, p.stage_box_cols, p.stage_box_rows, p.epi_ld_x
    if eb != 2:
        raise E.EmulationError(f"out_elem_bytes={eb}: the NVFP4 stages write FP16 (2 bytes)")
    if tile_m % br or tile_n % bc:
        raise E.EmulationError(f"boxes of {br} rows x {bc} columns do not tile the {tile_m}x{tile_n} output")
    if p.stage_swizzle != p.out_swizzle:
        report.issues.append(f"the epilogue writes the staging tile with a {p.stage_swizzle}-B swizzle but the C map "
                             f"reads it with {p.out_swizzle} B")
    tm = E.Tmem(p.tmem_cols)
    tm.check_cols(p.tmem_acc_col, tile_n, "the accumulator")
    tm.data[:tile_m, p.tmem_acc_col:p.tmem_acc_col + tile_n] = acc.astype(np.float32)
    sm = E.SmemImage(p.smem_bytes, smem_base)   # fresh: a byte nobody wrote is reported, not stale
    for w in range(p.epi_warp0, p.epi_warp0 + p.epi_warps):
        lane0 = 32 * (w % 4)
        for c0 in range(0, tile_n, x):
            regs = E.tcgen05_ld_32x32b(tm, w, lane0 << 16 | (p.tmem_acc_col + c0), x)
            h = (np.float32(alpha) * regs.astype(np.float32)).astype(np.float16)   # cvt.rn.f16x2.f32
            rows = lane0 + np.arange(32)[:, None] + np.zeros((1, x), dtype=np.int64)
            cols = c0 + np.arange(x)[None, :] + np.zeros((32, 1), dtype=np.int64)
            sm.write(staging_addresses(p, rows, cols, smem_base), h.view(np.uint8).reshape(32, x, 2))
    gout = np.full((prob.m, prob.n * eb), 0xFF, dtype=np.uint8)     # FP16 0xFFFF is a NaN
    tmap = E.TensorMap2D(8 * eb, (prob.n, prob.m), (bc, br), p.out_swizzle)
    row_boxes = tile_m // br
    for cb in range(tile_n // bc):
        for rb in range(row_boxes):
            src = smem_base + p.stage_smem_offset + (cb * row_boxes + rb) * br * bc * eb
            unwritten = sm.unwritten(E.tma_box_addresses(tmap, src))
            if unwritten:
                report.issues.append(f"the TMA store of box ({cb}, {rb}) reads {unwritten} staging bytes "
                                     "no epilogue thread wrote")
            c, r = c_box_coords(cb, m_blk, n_blk, tile_m, tile_n, bc)
            gout = E.tma_store_2d(tmap, sm, src, (c, r + rb * br), gout)
    full = gout.view(np.float16)
    r0, c0 = m_blk * tile_m, n_blk * tile_n
    inside = np.zeros(full.shape, dtype=bool)
    inside[r0:r0 + tile_m, c0:c0 + tile_n] = True
    outside = int((~np.isnan(full) & ~inside).sum())
    if outside:
        report.issues.append(f"the TMA stores wrote {outside} elements outside tile ({m_blk}, {n_blk})")
    tile = full[r0:r0 + tile_m, c0:c0 + tile_n].astype(np.float64)
    report.uncovered_outputs += int(np.isnan(tile).sum() - np.isnan(acc).sum())
    return tile
