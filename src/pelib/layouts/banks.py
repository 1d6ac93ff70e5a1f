"""Shared-memory bank wavefronts of one warp-wide access, and the staging layouts' addresses (09 padded, F24 swizzled).

The bank model (evidence: modelled):
  * 32 banks of 4 B: byte a lies in bank (a // 4) % 32, and lanes that touch the same 32-bit word do
    not conflict (a read is broadcast, a write done once) (CUDA C++ Programming Guide, "Compute
    Capabilities", Shared Memory).
  * A warp-wide access of w bytes per lane is served 128 B at a time, in phases: w <= 4, one phase of
    all 32 lanes; w = 8, two half-warps; w = 16, four quarter-warps (lanes 0-7, 8-15, 16-23, 24-31).
    Lanes conflict only with lanes of their own phase (NVIDIA GTC 2019 S9593, the cuTENSOR talk's
    slide on 128-bit shared accesses, as cited in Dao-AILab/flash-attention issue #738; the same
    quarter-warp rule for 16-B accesses in NVIDIA/cutlass issue #328).
  * A phase costs as many wavefronts as the most distinct words one bank has to serve (1 when no two
    lanes collide); an instruction costs the sum over its phases. Conflict-free 4-, 8- and 16-B
    accesses therefore cost 1, 2 and 4 wavefronts.
(pelib.layouts.staging.wavefronts counts the busiest bank over the whole warp instead; for the layouts here
the two agree wherever the phase rule does not separate colliding lanes, and the tests show where
they differ.)

The staging layouts, from a build's exports:
  * padded rows (stages 07-09): lane l's row at buffer + l * staging_pitch, BF16 column c at + 2c
    (pelib.layouts.staging.StagingLayout);
  * swizzled blocks (variant F24, staging_swizzle exported): a half of 128 columns is two column
    blocks of 64 (one 128-B swizzle row each) at + b * 32 * staging_pitch, row l at + l * staging_pitch,
    and the 16-B chunk k of the row at chunk k ^ (l % 8): the shared image of a TMA box (64, 32, 2)
    under SWIZZLE_128B (address bits [4,7) ^= [7,10), pelib.emulate.swizzle_addr).
`phase1_account` counts the wavefronts of every Phase 1 st.shared.v4 of a warp per tile; `compare`
puts stage 09 beside F24 (and the two layouts F24 did not choose); `run` pushes a CTA tile through
F24's staging and its TMA stores (pelib.emulate's SmemImage and tma_store_2d); `f24_out_spec` is the
output tensor map F24's kernel takes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import emulate, tma
from . import staging
from ..emulate import tmem_ld_map
from ..facts import Table
from ..gonogo import Fact
from .staging import TraceReport

BANKS = 32
WORD = 4
LANES = 32
PHASE_BYTES = BANKS * WORD          # 128 B served per wavefront
EVIDENCE = "modelled"


class BankError(ValueError):
    """An access or layout this model does not cover; the message says what is off."""


# ---------------------------------------------------------------------------------------------
# The bank model
# ---------------------------------------------------------------------------------------------

def lanes_per_phase(width: int) -> int:
    """Lanes served together for a `width`-byte access: 32 (<= 4 B), 16 (8 B), 8 (16 B)."""
    if width not in (1, 2, 4, 8, 16):
        raise BankError(f"a shared access is 1, 2, 4, 8 or 16 B per lane, not {width}")
    return LANES if width <= WORD else PHASE_BYTES // width


def phase_wavefronts(starts, width: int, active=None) -> list[int]:
    """Wavefronts of each phase of one warp-wide access (see the module doc); 0 for a phase with no active lane.

    starts: the 32 lanes' byte addresses (each `width`-aligned); active: a 32-long mask (default all).
    """
    per = lanes_per_phase(width)
    a = np.asarray(starts, dtype=np.int64).reshape(-1)
    if a.size != LANES:
        raise BankError(f"one address per lane: got {a.size}, want {LANES}")
    if np.any(a % width):
        raise BankError(f"a {width}-B access must be {width}-B aligned; lanes {np.nonzero(a % width)[0].tolist()} are not")
    on = np.ones(LANES, bool) if active is None else np.asarray(active, bool).reshape(-1)
    out = []
    for p0 in range(0, LANES, per):
        sel = on[p0:p0 + per]
        if not sel.any():
            out.append(0)
            continue
        lanes = a[p0:p0 + per][sel]
        words = np.unique((lanes[:, None] + np.arange(0, max(width, 1), WORD)[None, :]) // WORD)
        out.append(int(np.bincount(words % BANKS, minlength=BANKS).max()))
    return out


def wavefronts(starts, width: int, active=None) -> int:
    """Wavefronts one warp-wide shared access costs: the sum of its phases' (conflict-free 16 B: 4)."""
    return sum(phase_wavefronts(starts, width, active))


def ideal_wavefronts(width: int, active_lanes: int = LANES) -> int:
    """The conflict-free cost: one wavefront per 128 B of data, at least one per phase."""
    return max(1, -(-active_lanes // lanes_per_phase(width)))


# ---------------------------------------------------------------------------------------------
# Staging addresses of Phase 1 (st.shared.v4: lane l writes 8 BF16 of its own row)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StagingAddresses:
    """Where Phase 1 of an epilogue warp puts BF16 column c of lane l's row, for one staging layout."""
    kind: str                # "padded" (rows at a pitch) or "swizzled" (F24's TMA box image)
    offset: int              # epilogue warp epi_warp0's buffer
    warp_bytes: int
    halves: int
    half_cols: int           # columns per half
    pitch: int               # bytes between rows (of a column block, when swizzled)
    block_cols: int = 0      # swizzled: columns per block (one swizzle row)
    swizzle: int = 0         # swizzled: the TMA swizzle span in bytes
    epi_warp0: int = 2
    epi_warps: int = 4
    label: str = ""

    @classmethod
    def from_exports(cls, ex: dict, label: str = "", **overrides) -> "StagingAddresses":
        """A build's staging layout: swizzled when it exports staging_swizzle (F24), else padded rows."""
        need = ("staging_offset", "staging_warp_bytes", "staging_pitch", "staging_halves", "tile_n",
                "epi_warp0", "epi_warps")
        staging.require_exports(ex, need, BankError, "the build")
        halves = ex["staging_halves"]
        kw = dict(offset=ex["staging_offset"], warp_bytes=ex["staging_warp_bytes"], halves=halves,
                  half_cols=_warp_cols(ex) // halves, pitch=ex["staging_pitch"], epi_warp0=ex["epi_warp0"],
                  epi_warps=ex["epi_warps"], label=label)
        if ex.get("staging_swizzle"):
            kw.update(kind="swizzled", block_cols=ex["staging_block_cols"], swizzle=ex["staging_swizzle"])
        else:
            kw.update(kind="padded")
        return staging.validated(cls, kw, overrides)

    @property
    def half_bytes(self) -> int:
        return self.warp_bytes // self.halves

    def validate(self) -> None:
        bad = []
        if self.kind == "padded":
            if self.pitch < 2 * self.half_cols or self.pitch % 16:
                bad.append(f"pitch {self.pitch} B cannot hold a {2 * self.half_cols}-B row at 16-B alignment")
            if LANES * self.pitch > self.half_bytes:
                bad.append(f"32 rows of {self.pitch} B overflow a {self.half_bytes}-B half")
        elif self.kind == "swizzled":
            if self.swizzle not in (32, 64, 128) or 2 * self.block_cols != self.swizzle or self.pitch != self.swizzle:
                bad.append(f"a swizzled block is one {self.swizzle}-B swizzle row per staging row: block_cols "
                           f"{self.block_cols}, pitch {self.pitch}")
            if self.half_cols % self.block_cols or LANES * self.pitch * (self.half_cols // self.block_cols) > self.half_bytes:
                bad.append(f"{self.half_cols} columns do not fill whole {self.block_cols}-column blocks of a "
                           f"{self.half_bytes}-B half")
            if (self.offset % 1024) or (self.half_bytes % 1024) or (LANES * self.pitch) % 1024:
                bad.append("the swizzle is a function of the address: buffers, halves and blocks must start "
                           "1024-B aligned")
        else:
            bad.append(f"kind {self.kind!r}: 'padded' or 'swizzled'")
        if bad:
            raise BankError("staging layout rejected: " + "; ".join(bad))

    def buffer(self, warp: int, half: int = 0) -> int:
        return self.offset + (warp - self.epi_warp0) * self.warp_bytes + half * self.half_bytes

    def element(self, warp: int, half: int, lane, col):
        """Byte address of BF16 column `col` (of the half) of lane `lane`'s row (arrays broadcast)."""
        lane, col = np.asarray(lane, dtype=np.int64), np.asarray(col, dtype=np.int64)
        base = self.buffer(warp, half)
        if self.kind == "padded":
            return base + lane * self.pitch + 2 * col
        blk, c = col // self.block_cols, col % self.block_cols
        chunk, byte = (2 * c) // 16, (2 * c) % 16
        rows_in_pattern = self.swizzle // 16          # the XOR takes row % (span / 16): 8 for 128 B
        return base + blk * LANES * self.pitch + lane * self.pitch + 16 * (chunk ^ (lane % rows_in_pattern)) + byte

    def phase1(self, warp: int, half: int, col: int) -> np.ndarray:
        """The 32 lanes' 16-B store addresses of the Phase 1 st.shared.v4 of columns col .. col + 7."""
        if col % 8:
            raise BankError(f"Phase 1 stores 8 columns at a time: col {col} is not a multiple of 8")
        return self.element(warp, half, np.arange(LANES), col)


def fingerprint(lay: StagingAddresses, warp: int | None = None, half: int = 0) -> int:
    """FNV-1a over the in-half offsets of every Phase 1 store (rows x 8-column steps), as the F24 kernel
    computes it at compile time (exported staging_fingerprint): equal numbers mean the kernel's address
    function and this model agree on all 512 stores of a half."""
    w = lay.epi_warp0 if warp is None else warp
    h = 2166136261
    for lane in range(LANES):
        for col in range(0, lay.half_cols, 8):
            off = int(lay.element(w, half, lane, col)) - lay.buffer(w, half)
            h = ((h ^ off) * 16777619) & 0xFFFFFFFF
    return h


def _warp_cols(ex: dict) -> int:
    """Columns one epilogue warp drains (the widest slice of the exported column map)."""
    w0, nw = ex["epi_warp0"], ex["epi_warps"]
    widths = []
    for w in range(w0, w0 + nw):
        word = ex.get(f"epi_cols_w{w}")
        widths.append(ex["tile_n"] if not word else (word >> 16) - (word & 0xFFFF))
    return max(widths)


@dataclass
class Phase1Account:
    """The Phase 1 stores of one epilogue warp per tile and what they cost in wavefronts."""
    label: str
    kind: str
    instructions: int
    wavefronts: int
    worst: int
    ideal: int

    @property
    def per_instruction(self) -> float:
        return self.wavefronts / self.instructions

    def row(self) -> dict:
        return {"layout": self.label, "kind": self.kind, "st.shared.v4 per warp per tile": self.instructions,
                "wavefronts": self.wavefronts, "per store": round(self.per_instruction, 2),
                "worst store": self.worst, "conflict-free": self.ideal}


def phase1_account(lay: StagingAddresses, warp: int | None = None) -> Phase1Account:
    """Every Phase 1 st.shared.v4 of one warp per tile (halves x columns / 8), priced by the bank model."""
    w = lay.epi_warp0 if warp is None else warp
    costs = [wavefronts(lay.phase1(w, h, c), 16) for h in range(lay.halves) for c in range(0, lay.half_cols, 8)]
    return Phase1Account(lay.label or lay.kind, lay.kind, len(costs), int(sum(costs)), int(max(costs)),
                         ideal_wavefronts(16) * len(costs))


def phase2_account(ex: dict, label: str = "") -> dict:
    """Phase 2's shared-memory reads per warp per tile: ld.shared.v4 of the padded rows, none for F24 (TMA reads)."""
    if ex.get("staging_tma_store"):
        return {"layout": label, "Phase 2 shared reads": "TMA engine (cp.async.bulk.tensor)", "ld.shared.v4": 0,
                "wavefronts": 0}

    lay = staging.StagingLayout.from_exports(ex)
    p2 = staging.phase2_map(lay)
    w = lay.epi_warp0
    sel = p2["warp"] == w
    costs = []
    for h in range(lay.halves):
        for t in range(lay.copies(w)):
            m = sel & (p2["half"] == h) & (p2["copy"] == t)
            costs.append(wavefronts(p2["smem"][m], lay.vec))
    return {"layout": label, "Phase 2 shared reads": "ld.shared.v4 (LSU)", "ld.shared.v4": len(costs),
            "wavefronts": int(sum(costs))}


def alternatives(ex09: dict) -> dict[str, StagingAddresses]:
    """Stage 09's padded rows, and the unpadded layouts F24 could have used (for the comparison)."""
    base = StagingAddresses.from_exports(ex09, "09: padded rows (272 B)")
    data = 2 * base.half_cols
    return {
        "09": base,
        "unpadded": StagingAddresses.from_exports(ex09, f"unpadded rows ({data} B), no swizzle", pitch=data),
    }


def compare(ex09: dict, ex24: dict) -> list[Phase1Account]:
    """Phase 1 accounts: stage 09 (padded), F24 (swizzled blocks), and two layouts F24 did not choose."""
    alt = alternatives(ex09)
    f24 = StagingAddresses.from_exports(ex24, "F24: swizzled 64-column blocks (TMA box image)")
    rows = [phase1_account(alt["09"]), phase1_account(f24), phase1_account(alt["unpadded"])]
    # 256-B rows swizzled as one box row per 128 B (a 2D box of the whole half would need a 256-B swizzle
    # span, which TMA does not have; shown because it is the layout the lab note's sketch reads as).
    rows.append(phase1_account(_RowSwizzled(f24)))
    return rows


class _RowSwizzled(StagingAddresses):
    """F24's bytes with the two column blocks interleaved per row ([row][block][64 columns], 256-B rows)."""
    def __init__(self, f24: StagingAddresses):
        super().__init__(**{**f24.__dict__, "label": "256-B rows, 128B swizzle per 128-B segment"})

    def element(self, warp, half, lane, col):
        lane, col = np.asarray(lane, dtype=np.int64), np.asarray(col, dtype=np.int64)
        blk, c = col // self.block_cols, col % self.block_cols
        seg = lane * (self.half_cols // self.block_cols) + blk          # the 128-B segment index
        chunk, byte = (2 * c) // 16, (2 * c) % 16
        return self.buffer(warp, half) + seg * self.pitch + 16 * (chunk ^ (seg % 8)) + byte


def compare_table(ex09: dict, ex24: dict):

    return Table([a.row() for a in compare(ex09, ex24)],
                 "Phase 1 st.shared.v4 of one epilogue warp per tile — modelled (32 banks x 4 B, "
                 "16-B accesses served per quarter-warp)")


def conflict_ratio(ex09: dict, ex24: dict) -> float:
    """F24's Phase 1 wavefronts over stage 09's (the card's fail-fast fires above 1.0)."""
    a, b = compare(ex09, ex24)[:2]
    return b.wavefronts / a.wavefronts


def f24_fact(ex09: dict, ex24: dict, source: str = ""):
    """The card's fail-fast metric as a modelled fact (the card itself asks for a measured one)."""
    return Fact("f24.phase1b_bank_conflict_ratio", conflict_ratio(ex09, ex24), EVIDENCE,
                source or "pelib.layouts.banks bank model on the exported staging layouts of 09 and F24")


# ---------------------------------------------------------------------------------------------
# F24's staging replayed: registers -> swizzled staging -> one TMA store per half
# ---------------------------------------------------------------------------------------------

def _tmem_cols(ex: dict) -> list[tuple[int, int, int]]:
    w0, nw = ex["epi_warp0"], ex["epi_warps"]
    out = []
    for w in range(w0, w0 + nw):
        word = ex.get(f"epi_cols_w{w}")
        out.append((w, 0, ex["tile_n"]) if not word else (w, word & 0xFFFF, word >> 16))
    return out


def phase1_map(ex: dict) -> dict:
    """Every BF16 Phase 1 writes in a swizzled (F24) layout: arrays warp, lane, tmem_lane, col, smem."""
    lay = StagingAddresses.from_exports(ex)
    if lay.kind != "swizzled":
        raise BankError("phase1_map models F24's swizzled staging; padded rows are pelib.layouts.staging's")
    x = ex["epi_ld_x"]
    out = {k: [] for k in ("warp", "lane", "tmem_lane", "col", "smem")}
    lane = np.broadcast_to(np.arange(LANES)[:, None], (LANES, x))
    for w, b, e in _tmem_cols(ex):
        for h in range(lay.halves):
            hb = b + h * lay.half_cols
            for j in range(lay.half_cols // x):
                m = tmem_ld_map(w, x, hb + j * x)
                out["warp"].append(np.full((LANES, x), w))
                out["lane"].append(lane)
                out["tmem_lane"].append(m[..., 0])
                out["col"].append(m[..., 1])
                out["smem"].append(lay.element(w, h, lane, m[..., 1] - hb))
    return {k: np.concatenate([a.reshape(-1) for a in v]) for k, v in out.items()}


def store_boxes(ex: dict) -> list[dict]:
    """F24's TMA stores of one CTA tile: per warp and half, the box's shared address and output origin."""
    lay = StagingAddresses.from_exports(ex)
    out = []
    for w, b, e in _tmem_cols(ex):
        for h in range(lay.halves):
            out.append({"warp": w, "half": h, "smem": lay.buffer(w, h), "row0": 32 * (w % 4),
                        "col0": b + h * lay.half_cols, "box": (ex["out_box_cols"], ex["out_box_rows"], ex["out_box_blocks"])})
    return out


def run(ex: dict, fused_bf16: np.ndarray, smem_bytes: int | None = None):
    """Push a CTA's fused BF16 tile (128 x tile_n uint16, row = TMEM lane) through F24's staging and stores.

    Phase 1 writes each register's BF16 at its swizzled address in a pelib.emulate.SmemImage; each
    half then leaves through the 3D TMA store, replayed as its column blocks: the box
    (64, 32, 2) is dense in shared memory with dimension 0 fastest, so block b is the 2D box (64, 32)
    at + b * 4096 going to output columns + 64 b, and the swizzle is a function of the address
    (pelib.emulate.tma_store_2d). Returns (output tile, pelib.layouts.staging.TraceReport).
    """

    v = np.asarray(fused_bf16, dtype=np.uint16)
    rows, n = v.shape
    p1 = phase1_map(ex)
    rep = TraceReport(elements=rows * n, issues=[])
    uniq, counts = np.unique(p1["smem"], return_counts=True)
    rep.smem_overlaps = int((counts > 1).sum())
    size = smem_bytes or ex["smem_bytes"]
    sm = emulate.SmemImage(size)
    vals = v[p1["tmem_lane"], p1["col"]]
    sm.write(np.stack([p1["smem"], p1["smem"] + 1], axis=1), np.stack([vals & 0xFF, vals >> 8], axis=1))
    out = np.zeros((rows, 2 * n), dtype=np.uint8)
    hits = np.zeros((rows, n), dtype=np.int64)
    bc, br, nb = ex["out_box_cols"], ex["out_box_rows"], ex["out_box_blocks"]
    blk_bytes = 2 * bc * br
    for box in store_boxes(ex):
        for b in range(nb):
            tm = emulate.TensorMap2D(16, (n, rows), (bc, br), ex["out_swizzle"])
            src = box["smem"] + b * blk_bytes
            unread = sm.unwritten(emulate.tma_box_addresses(tm, src))
            if unread:
                rep.unwritten_reads += unread
            out = emulate.tma_store_2d(tm, sm, src, (box["col0"] + b * bc, box["row0"]), out)
            hits[box["row0"]:box["row0"] + br, box["col0"] + b * bc:box["col0"] + (b + 1) * bc] += 1
    rep.written_once = int((hits == 1).sum())
    rep.written_twice = int((hits > 1).sum())
    rep.never_written = int((hits == 0).sum())
    res = out.view(np.uint16)
    rep.misplaced = int((res != v).sum()) if rep.written_once == rep.elements else 0
    rep.note_issues("the TMA stores read", "stored", "output elements hold another register's BF16")
    return res, rep


def trace(ex: dict):
    """run() on a tile of element indices: every output element written once, by its own register."""
    n = ex["tile_n"]
    ids = np.arange(128 * n, dtype=np.uint32).reshape(128, n).astype(np.uint16)
    out, rep = run(ex, ids)
    return out, rep


# ---------------------------------------------------------------------------------------------
# F24's output tensor map
# ---------------------------------------------------------------------------------------------

def f24_out_spec(m: int, n: int, ex: dict | None = None, address: int = 0):
    """The tensor map F24 stores through: `out` [M, N] BF16 as the 3D view (64, M, N / 64).

    Dimension 0 = 64 columns of a block (contiguous), 1 = rows (stride 2N B), 2 = column blocks
    (stride 128 B); box (64, 32, 2) with SWIZZLE_128B (innermost first, pelib.tma order). The strides
    are not increasing, which the driver's rules allow (16-B multiples below 2^40: cuTensorMapEncodeTiled;
    CUTLASS copy_traits_sm90_tma.hpp builds its maps in the shared layout's order the same way).
    """

    ex = ex or {"out_box_cols": 64, "out_box_rows": 32, "out_box_blocks": 2, "out_swizzle": 128}
    bc, br, nb = ex["out_box_cols"], ex["out_box_rows"], ex["out_box_blocks"]
    if n % bc:
        raise BankError(f"N={n} is not a whole number of {bc}-column blocks")
    return tma.make_spec("bfloat16", (n // bc, m, bc), (nb, br, bc), strides=(bc, n, 1), address=address,
                         swizzle=ex["out_swizzle"]).validate()
