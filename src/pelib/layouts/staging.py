"""The staged epilogue (common/staging.cuh) byte by byte: register -> staging byte -> output element.

A stage that stages its output exports the layout (staging_offset, staging_warp_bytes,
staging_pitch, staging_rows, staging_halves, staging_vec, phase2_unroll) and the epilogue's
column map (epi_cols_w<w> = begin | end << 16). From those alone this module says, for every
epilogue warp w, lane l, TMEM-load chunk j and register i:

  Phase 1  the FP32 accumulator in register i of chunk j is TMEM lane 32*(w%4) + l, column
           begin_w + 32*j + i (tcgen05.ld 32x32b, PTX ISA 9.7.16.2.3.1.1); it becomes one BF16 at
           staging byte  buffer(w, h) + l*pitch + 2*(column - first column of half h);
  Phase 2  copy t, lane l reads 16 B of row t*rows_per_copy + l // lanes_per_row and stores them to
           that output row, the same columns.

`trace` follows every BF16 through both phases; `check` says whether each output element of the
CTA's tile is written exactly once, by the register that holds it. `run` pushes real BF16 values
through a pelib.emulate.SmemImage (evidence: emulated). `wavefronts` models shared-memory bank
conflicts (32 banks of 4 B; evidence: modelled).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..emulate import SmemImage, tmem_ld_map

BANKS = 32          # shared-memory banks of 4 B (CUDA C++ Programming Guide, compute capabilities)
LANES = 32


class StagingError(ValueError):
    """The exports do not describe a staging layout this model covers; the message says what is off."""


def require_exports(ex: dict, need: tuple, error: type, who: str, fix: str = "") -> None:
    """Raise `error` naming the exports of `need` that `ex` lacks: `who` ("the stage") does not stage its
    epilogue, then `fix`."""
    missing = [k for k in need if k not in ex]
    if missing:
        raise error(f"{who} exports no {missing}: it does not stage its epilogue{fix}")


def validated(cls, kw: dict, overrides: dict):
    """cls(**kw) with the keyword overrides applied, validated (a from_exports' last step)."""
    kw.update(overrides)
    lay = cls(**kw)
    lay.validate()
    return lay


@dataclass(frozen=True)
class StagingLayout:
    """One stage's staging buffers and epilogue column map, as compiled (from its exports)."""

    offset: int                 # shared-memory offset of epilogue warp epi_warp0's buffer
    warp_bytes: int             # bytes between the buffers of consecutive epilogue warps
    pitch: int                  # bytes between staging rows (2 * columns + pad)
    rows: int                   # rows per buffer: one per lane
    halves: int                 # 1: one buffer per warp; 2: two half-width buffers (double-buffered)
    vec: int                    # bytes per lane per Phase 2 copy
    unroll: int                 # Phase 2 loop unroll (no effect on the mapping)
    epi_warp0: int
    epi_warps: int
    tile_n: int
    ld_x: int                   # tcgen05.ld .x (columns per chunk)
    cols: tuple                 # ((warp, begin, end), ...)

    @classmethod
    def from_exports(cls, ex: dict, **overrides) -> "StagingLayout":
        """Read a build's exports; keyword overrides (e.g. pitch=512) show what another layout would do."""
        need = ("staging_offset", "staging_warp_bytes", "staging_pitch", "staging_rows", "epi_warp0",
                "epi_warps", "tile_n", "epi_ld_x")
        require_exports(ex, need, StagingError, "the stage", " (stages 07 on do; add the PELIB_EXPORT lines)")
        w0, nw = ex["epi_warp0"], ex["epi_warps"]
        cols = []
        for w in range(w0, w0 + nw):
            word = ex.get(f"epi_cols_w{w}")
            b, e = (0, ex["tile_n"]) if word is None else (word & 0xFFFF, word >> 16)
            cols.append((w, b, e))
        kw = dict(offset=ex["staging_offset"], warp_bytes=ex["staging_warp_bytes"], pitch=ex["staging_pitch"],
                  rows=ex["staging_rows"], halves=ex.get("staging_halves", 1), vec=ex.get("staging_vec", 16),
                  unroll=ex.get("phase2_unroll", 1), epi_warp0=w0, epi_warps=nw, tile_n=ex["tile_n"],
                  ld_x=ex["epi_ld_x"], cols=tuple(cols))
        return validated(cls, kw, overrides)

    @property
    def half_bytes(self) -> int:
        return self.rows * self.pitch

    def validate(self) -> None:
        bad = []
        if self.rows != LANES:
            bad.append(f"staging_rows={self.rows}: one row per lane, 32")
        if self.pitch % 16 or self.offset % 16:
            bad.append(f"pitch {self.pitch} / offset {self.offset} must be multiples of 16 (16-B accesses)")
        if self.halves not in (1, 2):
            bad.append(f"staging_halves={self.halves}: 1 or 2")
        if self.halves * self.half_bytes > self.warp_bytes:
            bad.append(f"{self.halves} x {self.rows} rows x {self.pitch} B do not fit {self.warp_bytes} B per warp")
        for w, b, e in self.cols:
            width = (e - b) // self.halves
            if (e - b) % (self.halves * self.ld_x) or 2 * width > self.pitch:
                bad.append(f"warp {w}: columns [{b}, {e}) do not fill {self.halves} half(s) of whole "
                           f"{self.ld_x}-column chunks within a {self.pitch}-B row")
            if (2 * width) % self.vec or LANES % ((2 * width) // self.vec):
                bad.append(f"warp {w}: a {2 * width}-B row is not a divisor of 32 lanes x {self.vec} B")
        if bad:
            raise StagingError("staging layout rejected: " + "; ".join(bad))

    def buffer(self, warp: int, half: int = 0) -> int:
        """Shared-memory offset of epilogue warp `warp`'s buffer (half `half`)."""
        return self.offset + (warp - self.epi_warp0) * self.warp_bytes + half * self.half_bytes

    def halves_of(self, warp: int) -> list[tuple[int, int, int]]:
        """(half, first column, end column) of a warp's slice, in tile columns."""
        _, b, e = next(c for c in self.cols if c[0] == warp)
        width = (e - b) // self.halves
        return [(h, b + h * width, b + (h + 1) * width) for h in range(self.halves)]

    def lanes_per_row(self, warp: int) -> int:
        h, b, e = self.halves_of(warp)[0]
        return 2 * (e - b) // self.vec

    def copies(self, warp: int) -> int:
        """Phase 2 instructions per half buffer."""
        return self.rows // (LANES // self.lanes_per_row(warp))


def phase1_map(lay: StagingLayout) -> dict:
    """Every BF16 Phase 1 writes: arrays warp, lane, chunk, reg, tmem_lane, col, smem (byte address)."""
    out = {k: [] for k in ("warp", "lane", "chunk", "reg", "tmem_lane", "col", "smem")}
    shape = (LANES, lay.ld_x)
    lane = np.broadcast_to(np.arange(LANES)[:, None], shape)
    reg = np.broadcast_to(np.arange(lay.ld_x)[None, :], shape)
    for w, b, e in lay.cols:
        for h, hb, he in lay.halves_of(w):
            for j in range((he - hb) // lay.ld_x):
                m = tmem_ld_map(w, lay.ld_x, hb + j * lay.ld_x)       # (lane, column) of each register
                tl, col = m[..., 0], m[..., 1]
                out["warp"].append(np.full(shape, w))
                out["lane"].append(lane)
                out["chunk"].append(np.full(shape, (hb - b) // lay.ld_x + j))
                out["reg"].append(reg)
                out["tmem_lane"].append(tl)
                out["col"].append(col)
                # the lane's staging row; its BF16 of `col` sits 2 B per column from the half's first column
                out["smem"].append(lay.buffer(w, h) + lane * lay.pitch + 2 * (col - hb))
    return {k: np.concatenate([a.reshape(-1) for a in v]) for k, v in out.items()}


def phase2_map(lay: StagingLayout) -> dict:
    """Every 16-B Phase 2 copy: arrays warp, half, copy, lane, smem (first byte), row, col (first column)."""
    out = {k: [] for k in ("warp", "half", "copy", "lane", "smem", "row", "col")}
    lane = np.arange(LANES)
    for w, b, e in lay.cols:
        lpr = lay.lanes_per_row(w)
        rpc = LANES // lpr
        for h, hb, he in lay.halves_of(w):
            for t in range(lay.copies(w)):
                r = t * rpc + lane // lpr
                q = lane % lpr
                out["warp"].append(np.full(LANES, w))
                out["half"].append(np.full(LANES, h))
                out["copy"].append(np.full(LANES, t))
                out["lane"].append(lane)
                out["smem"].append(lay.buffer(w, h) + r * lay.pitch + lay.vec * q)
                out["row"].append(32 * (w % 4) + r)                  # row of the CTA's 128-row tile
                out["col"].append(hb + (lay.vec // 2) * q)
    return {k: np.concatenate(v) for k, v in out.items()}


@dataclass
class TraceReport:
    """What following every BF16 through the staging found."""

    elements: int = 0            # output elements of the CTA tile
    written_once: int = 0
    written_twice: int = 0
    never_written: int = 0
    smem_overlaps: int = 0       # staging bytes written by two registers
    unwritten_reads: int = 0     # staging bytes Phase 2 reads that Phase 1 never wrote
    misplaced: int = 0           # output elements that got another register's value
    issues: list = None

    @property
    def ok(self) -> bool:
        return not (self.written_twice or self.never_written or self.smem_overlaps or self.unwritten_reads
                    or self.misplaced) and self.written_once == self.elements

    def note_issues(self, reads: str, stored: str, misplaced: str) -> None:
        """Each fault as a line of `issues`: `reads` says who reads the staging ('Phase 2 reads', 'the TMA
        stores read'),
        `stored` the verb of an output element, `misplaced` what a misplaced element holds."""
        if self.smem_overlaps:
            self.issues.append(f"{self.smem_overlaps} staging bytes are written by two registers")
        if self.unwritten_reads:
            self.issues.append(f"{reads} {self.unwritten_reads} staging bytes Phase 1 never wrote")
        if self.written_twice or self.never_written:
            self.issues.append(f"{self.written_twice} output elements {stored} twice, {self.never_written} never")
        if self.misplaced:
            self.issues.append(f"{self.misplaced} {misplaced}")


def trace(lay: StagingLayout, tile_rows: int = 128) -> tuple[dict, TraceReport]:
    """Follow every BF16: (warp, lane, chunk, reg) -> staging byte -> output (row, col) of the CTA tile.

    Returns the Phase 1 map with 'out_row'/'out_col' added (-1 where no Phase 2 copy reads the byte)
    and a TraceReport (exactly once, right place, no overlaps, no reads of unwritten bytes).
    """
    p1, p2 = phase1_map(lay), phase2_map(lay)
    rep = TraceReport(elements=tile_rows * lay.tile_n, issues=[])
    uniq, counts = np.unique(p1["smem"], return_counts=True)
    rep.smem_overlaps = int((counts > 1).sum())
    # Phase 2: staging byte address -> (row, col) of the BF16 that starts there
    byte = (p2["smem"][:, None] + 2 * np.arange(lay.vec // 2)[None, :]).reshape(-1)
    row = np.repeat(p2["row"], lay.vec // 2)
    col = (p2["col"][:, None] + np.arange(lay.vec // 2)[None, :]).reshape(-1)
    read_from = dict(zip(byte.tolist(), zip(row.tolist(), col.tolist())))
    written = set(uniq.tolist())
    rep.unwritten_reads = sum(1 for a in byte.tolist() if a not in written) * 2
    hits = np.zeros((tile_rows, lay.tile_n), dtype=np.int64)
    np.add.at(hits, (row, col), 1)
    rep.written_once = int((hits == 1).sum())
    rep.written_twice = int((hits > 1).sum())
    rep.never_written = int((hits == 0).sum())
    dest = np.array([read_from.get(a, (-1, -1)) for a in p1["smem"].tolist()]).reshape(-1, 2)
    p1["out_row"], p1["out_col"] = dest[:, 0], dest[:, 1]
    rep.misplaced = int(((p1["out_row"] != p1["tmem_lane"]) | (p1["out_col"] != p1["col"])).sum())
    rep.note_issues("Phase 2 reads", "written", "BF16 land on another element than the accumulator they came from")
    return p1, rep


def run(lay: StagingLayout, fused_bf16: np.ndarray, smem_bytes: int | None = None) -> tuple[np.ndarray, TraceReport]:
    """Push a CTA's fused BF16 tile (tile_rows x tile_n uint16, row = TMEM lane) through the staging.

    Phase 1 writes each register's BF16 into a SmemImage at its staging address; Phase 2 reads 16 B
    per lane and writes the output tile. Returns (output uint16 tile, report); unwritten output
    elements are 0 and counted in the report (evidence: emulated).
    """
    v = np.asarray(fused_bf16, dtype=np.uint16)
    p1, rep = trace(lay, v.shape[0])
    size = smem_bytes or (lay.offset + lay.epi_warps * lay.warp_bytes)
    sm = SmemImage(size)
    vals = v[p1["tmem_lane"], p1["col"]]
    sm.write(np.stack([p1["smem"], p1["smem"] + 1], axis=1), np.stack([vals & 0xFF, vals >> 8], axis=1))
    p2 = phase2_map(lay)
    out = np.zeros(v.shape, dtype=np.uint16)
    for i in range(lay.vec // 2):
        lo = sm.read(p2["smem"] + 2 * i).astype(np.uint16)
        hi = sm.read(p2["smem"] + 2 * i + 1).astype(np.uint16)
        out[p2["row"], p2["col"] + i] = lo | hi << 8
    return out, rep


def wavefronts(addresses: np.ndarray, word: int = 4) -> int:
    """Modelled bank-conflict cost of one warp-wide shared access: the most distinct 4-B words any bank serves.

    addresses: (32, bytes per lane) byte addresses of one instruction. A conflict-free 16-B-per-lane
    access costs 4 (512 B through 32 banks of 4 B); every extra word in the busiest bank costs one more.
    """
    words = np.unique(np.asarray(addresses).reshape(-1) // word)
    banks = words % BANKS
    return int(np.bincount(banks, minlength=BANKS).max())


def phase1_wavefronts(lay: StagingLayout, warp: int | None = None) -> int:
    """Modelled cost of one Phase 1 st.shared.v4 (lane l writes 16 B at row l, same column for all)."""
    w = lay.epi_warp0 if warp is None else warp
    addr = lay.buffer(w) + np.arange(LANES)[:, None] * lay.pitch + np.arange(16)[None, :]
    return wavefronts(addr)


def phase2_wavefronts(lay: StagingLayout, warp: int | None = None) -> int:
    """Modelled cost of one Phase 2 ld.shared.v4 (copy 0 of the warp's first half)."""
    w = lay.epi_warp0 if warp is None else warp
    p2 = phase2_map(lay)
    sel = (p2["warp"] == w) & (p2["half"] == 0) & (p2["copy"] == 0)
    addr = p2["smem"][sel][:, None] + np.arange(lay.vec)[None, :]
    return wavefronts(addr)


def coalescing(lay: StagingLayout, warp: int | None = None) -> dict:
    """Bytes and 128-B lines one store instruction touches, staged (Phase 2) vs lane-per-row (stages 05-06).

    Default: the warp with the widest column slice (a full-row warp).
    """
    w = max(lay.cols, key=lambda c: c[2] - c[1])[0] if warp is None else warp
    lpr = lay.lanes_per_row(w)
    rpc = LANES // lpr
    return {"staged: rows per store": rpc, "staged: 128-B lines per store": rpc * max(1, (lpr * lay.vec) // 128),
            "lane-per-row: rows per store": LANES, "lane-per-row: 128-B lines per store": LANES,
            "bytes per store": LANES * lay.vec}
