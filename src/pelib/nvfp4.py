"""The NVFP4 stages on the host: builds, tensor maps, launch config, emulation, run, stage table, overlap model.

The kernels (src/kernels/nvfp4/00_single_stage.cu, 01_pipelined.cu, 02_tma_store_epilogue.cu) export
every layout parameter with PELIB_EXPORT; everything here is derived from those exports, never restated:
  * `Layout.of(build)` reads and checks them;
  * `tensor_map_specs()` turns them into the four TMA maps (A, B packed E2M1 as uint8 with a
    128-B swizzle; the scale factors as rows of 256 B), and for 02 the fifth, the output C that the
    TMA store writes (FP16, boxes of 64 columns x 128 rows, 128-B swizzle);
  * `plan()` is the launch up to the boundary: specs, grid, block, shared memory, scalar arguments;
  * `emulate_tile()` replays one output tile through pelib.emulate with the stage ring the kernel
    uses (K tile kt in stage kt % NUM_STAGES), and for 02 the staging tile and the TMA store
    (`emulate_staged_epilogue()`);
  * `run()` / `check()` / `time_stage()` / `measure_sweep()` need an sm_100 GPU (`python -m pelib.nvfp4`);
  * `stage_table()` compiles NUM_STAGES = 1..7 and reports registers, spills, shared memory;
  * `overlap_time()` / `simulate()` / `fit_overlap()` are the modelled pipeline of the pipelining chapter;
  * the *_table / *_figure functions are the chapters' cells.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import build as _build
from . import descriptors as D
from . import limits

STAGES = {"00_single_stage": "nvfp4/00_single_stage.cu", "01_pipelined": "nvfp4/01_pipelined.cu",
          "02_tma_store_epilogue": "nvfp4/02_tma_store_epilogue.cu"}
KERNEL = "nvfp4_gemm"
STAGE_COUNTS = tuple(range(1, 8))     # the NUM_STAGES values 01_pipelined.cu accepts
SHAPES = ("k16384", "k7168", "k2048")  # the lab log's shapes (pelib.problems names)
# The SASS opcode of tcgen05.mma.kind::mxf4nvf4.block_scale.block16, as nvdisasm (CUDA 13) prints it:
# "UTCOMMA.4X gdesc[..], gdesc[..], tmem[..], tmem[..], idesc[..], tmem[..], UP0" (.4X = scale_vec::4X).
MMA_OPCODE = "UTCOMMA"
MMA_OPCODE_FULL = "UTCOMMA.4X"
SF_COPY_OPCODE = "UTCCP"
# cp.async.bulk.tensor.2d.global.shared::cta as nvdisasm (CUDA 13) prints it for sm_100a: "UTMASTG.2D [URa], [URb]";
# its commit_group is UTMACMDFLUSH and wait_group.read 0 a DEPBAR.LE SB0, 0x0 (read in 02's SASS).
TMA_STORE_OPCODE = "UTMASTG"


class Nvfp4Error(ValueError):
    """A problem or build does not fit the NVFP4 stages; the message names the limit and the fix."""


# ---- builds -------------------------------------------------------------------------------------

def stage_path(stage: str) -> str:
    """src/kernels-relative path of a stage name ('00_single_stage', '01_pipelined')."""
    if stage not in STAGES:
        raise Nvfp4Error(f"unknown NVFP4 stage {stage!r}; stages: {sorted(STAGES)}")
    return STAGES[stage]


def build(stage: str = "01_pipelined", num_ab_stage: int | None = None, **defines) -> _build.Build:
    """Compile an NVFP4 stage for sm_100a; 01 and 02 take NUM_STAGES (default 4), 02 also STAGING_IN_RING."""
    defs = dict(defines)
    if stage == "00_single_stage":
        if num_ab_stage not in (None, 1):
            raise Nvfp4Error("00_single_stage has exactly one stage; use 01_pipelined for NUM_STAGES > 1")
    else:
        s = 4 if num_ab_stage is None else int(num_ab_stage)
        if s not in STAGE_COUNTS:
            raise Nvfp4Error(f"NUM_STAGES={s}: {stage} accepts {STAGE_COUNTS[0]}..{STAGE_COUNTS[-1]}")
        defs["NUM_STAGES"] = s
    return _build.build(stage_path(stage), "sm_100a", defs)


# ---- the layout a build was compiled with ------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """The exported layout parameters of one build (names as in the kernel's PELIB_EXPORT lines)."""

    ex: dict

    @classmethod
    def of(cls, b: _build.Build) -> "Layout":
        lay = cls(dict(b.exports))
        lay.check()
        return lay

    def __getattr__(self, name):
        ex = object.__getattribute__(self, "ex")
        if name in ex:
            return ex[name]
        raise AttributeError(f"the build exports no {name!r} (PELIB_EXPORT({name}, ...))")

    @property
    def stages(self) -> int:
        return self.ex["num_ab_stage"]

    @property
    def ktile_bytes(self) -> int:
        """Packed E2M1 bytes of one row per K tile (the uint8 tensor map's inner box)."""
        return self.block_k // 2

    @property
    def sf_ktile_bytes(self) -> int:
        """Scale-factor bytes of one 128-row block per K tile: (block_k / 64) atoms of 512 B."""
        return self.block_k // (4 * self.sf_vec) * 512

    @property
    def smem_total(self) -> int:
        return self.ex["smem_bytes"]

    @property
    def fits(self) -> bool:
        return self.smem_total <= self.smem_limit

    @property
    def staged(self) -> bool:
        """True for a stage whose epilogue stages the tile in SMEM and TMA-stores it (02)."""
        return "stage_smem_offset" in self.ex

    def check(self) -> None:
        """The relations the kernel relies on; a violation names the export."""
        problems = []
        if self.ex.get("mma_kind") != 6:
            problems.append(f"mma_kind={self.ex.get('mma_kind')}: the NVFP4 stages use kind::mxf4nvf4 (6)")
        dec = D.decode_umma_instr_desc_block_scaled(self.idesc, "mxf4nvf4")
        if (dec["m"], dec["n"]) != (self.tile_m, self.tile_n):
            problems.append(f"idesc says M={dec['m']} N={dec['n']}, tiles are {self.tile_m}x{self.tile_n}")
        if dec["scale_fmt"] != "ue4m3" or self.sf_vec != 16:
            problems.append("NVFP4 needs UE4M3 scales per 16 elements (idesc bit 23 = 0, sf_vec 16)")
        if self.a_box_k != self.block_k or self.ktile_bytes != self.a_swizzle:
            problems.append(f"a K tile row ({self.ktile_bytes} B) must fill the {self.a_swizzle}-B swizzle span")
        if self.sf_rows_per_atom * self.sf_row_bytes != 512:
            problems.append(f"{self.sf_rows_per_atom} SF rows of {self.sf_row_bytes} B are not one 512-B atom")
        if self.sf_box_rows * self.sf_row_bytes != self.sf_ktile_bytes:
            problems.append(f"SF box {self.sf_box_rows} x {self.sf_row_bytes} B != {self.sf_ktile_bytes} B per K tile")
        stage_sum = (self.b_smem_offset - self.a_smem_offset) + (self.sfa_smem_offset - self.b_smem_offset) \
            + (self.sfb_smem_offset - self.sfa_smem_offset) + self.sf_ktile_bytes
        if stage_sum != self.stage_bytes or self.stage_bytes % 1024:
            problems.append(f"stage of {self.stage_bytes} B: parts add to {stage_sum} B, SW128 needs 1024-B alignment")
        if self.stage_tx_bytes != self.stage_bytes:
            problems.append("expect_tx bytes must equal the stage's TMA bytes")
        if self.staged:
            problems += self._staging_problems()
        if problems:
            raise Nvfp4Error("inconsistent NVFP4 exports:\n  - " + "\n  - ".join(problems))

    def _staging_problems(self) -> list[str]:
        """Where the staging tile sits: whole boxes, 1024-B aligned, in the drained ring or after it, clear
        of the barriers. (Whether its swizzle matches the C map is for the emulator to find out.)"""
        out = []
        off, size, ring = self.stage_smem_offset, self.staging_bytes, self.stages * self.stage_bytes
        box = self.stage_box_rows * self.stage_box_cols * self.out_elem_bytes
        if size != self.tile_m * self.tile_n * self.out_elem_bytes or size % box:
            out.append(f"staging of {size} B is not the {self.tile_m}x{self.tile_n} tile in whole boxes of {box} B")
        if off % 1024 or box % 1024:
            out.append(f"staging at {off} with boxes of {box} B: swizzled boxes must start 1024-B aligned")
        if self.staging_in_ring and off + size > ring:
            out.append(f"staging [{off}, {off + size}) is said to be in the ring but the ring ends at {ring}")
        if not self.staging_in_ring and off < ring:
            out.append(f"staging at {off} overlaps the ring [0, {ring}) but is said to have its own buffer")
        if off + size > self.barrier_smem_offset:
            out.append(f"staging [{off}, {off + size}) runs into the barriers at {self.barrier_smem_offset}")
        return out


# ---- host-side tensors ---------------------------------------------------------------------------------

def check_problem(problem, lay: Layout | None = None) -> None:
    """M, N multiples of 128 and K a multiple of the K tile (the kernel has no bounds checks)."""
    tm, tn, tk = (lay.tile_m, lay.tile_n, lay.block_k) if lay else (128, 128, 256)
    bad = [f"{d}={v} is not a multiple of {t}" for d, v, t in
           (("M", problem.m, tm), ("N", problem.n, tn), ("K", problem.k, tk)) if v % t]
    if bad:
        raise Nvfp4Error(f"{problem.name}: " + "; ".join(bad) + " (the NVFP4 stages do whole tiles only: pad)")


def sf_rows_view(sf_mma, lay: Layout):
    """The flat 512-B-atom scale factors as the (rows, 256 B) uint8 matrix the SF tensor map reads."""
    import torch
    t = sf_mma.view(torch.uint8) if isinstance(sf_mma, torch.Tensor) else np.asarray(sf_mma).view(np.uint8)
    if t.reshape(-1).shape[0] % lay.sf_row_bytes:
        raise Nvfp4Error(f"{t.numel()} scale-factor bytes are not whole {lay.sf_row_bytes}-B rows")
    return t.reshape(-1, lay.sf_row_bytes)


def sf_box_row(block: int, kt: int, k: int, lay: Layout) -> int:
    """Row coordinate of K tile `kt` of 128-row block `block` in the SF map (kernel's load_ktile)."""
    atoms_per_ktile = lay.block_k // (4 * lay.sf_vec)          # 64 K-elements per 512-B atom
    atoms_per_block = (k // lay.block_k) * atoms_per_ktile
    return (block * atoms_per_block + kt * atoms_per_ktile) * lay.sf_rows_per_atom


def tensor_map_specs(problem, b_or_lay, tensors: dict | None = None) -> dict:
    """The four TMA maps (pelib.tma.TensorMapSpec): a, b (uint8 (rows, K/2), box 128 B x 128, SW128) and
    sfa, sfb (uint8 (rows, 256), box 256 x 8, no swizzle). With `tensors`, bound to their addresses."""
    from . import reference, tma
    lay = b_or_lay if isinstance(b_or_lay, Layout) else Layout.of(b_or_lay)
    check_problem(problem, lay)
    m, n, k = problem.m, problem.n, problem.k
    specs = {}
    for op, rows, box_rows in (("a", m, lay.a_box_m), ("b", n, lay.b_box_n)):
        box = (box_rows, lay.a_box_k // 2 if op == "a" else lay.b_box_k // 2)
        sw = lay.a_swizzle if op == "a" else lay.b_swizzle
        if tensors is not None:
            specs[op] = tma.spec_from_tensor(tensors[op], box, swizzle=sw)
        else:
            specs[op] = tma.make_spec("uint8", (rows, k // 2), box, swizzle=sw)
    for op, rows in (("sfa", m), ("sfb", n)):
        box = (lay.sf_box_rows, lay.sf_row_bytes)
        if tensors is not None:
            specs[op] = tma.spec_from_tensor(sf_rows_view(tensors[f"{op}_mma"], lay), box, swizzle=lay.sf_swizzle)
        else:
            nbytes = reference.sf_mma_size(rows, k // lay.sf_vec)
            specs[op] = tma.make_spec("uint8", (nbytes // lay.sf_row_bytes, lay.sf_row_bytes), box,
                                      swizzle=lay.sf_swizzle)
    if lay.staged:  # 02: the output, FP16 (M, N), stored box by box from the staging tile
        box = (lay.stage_box_rows, lay.stage_box_cols)
        if lay.out_elem_bytes != 2:
            raise Nvfp4Error(f"out_elem_bytes={lay.out_elem_bytes}: the NVFP4 stages write FP16")
        if tensors is not None:
            specs["c"] = tma.spec_from_tensor(tensors["out"], box, swizzle=lay.out_swizzle)
        else:
            specs["c"] = tma.make_spec("float16", (m, n), box, swizzle=lay.out_swizzle)
    for name, s in specs.items():
        s.validate()
    # Every K tile delivers exactly what the kernel's expect_tx announces (the C map is a store: not counted).
    tx = sum(s.box_bytes for k, s in specs.items() if k != "c")
    if tx != lay.stage_tx_bytes:
        raise Nvfp4Error(f"the four boxes deliver {tx} B per K tile but the kernel expects {lay.stage_tx_bytes} B")
    return specs


# ---- launch up to the boundary ---------------------------------------------------------------------------

@dataclass
class Plan:
    """Everything a launch needs except the GPU: maps (specs), grid, block, shared memory, scalars."""

    problem: object
    build: _build.Build
    layout: Layout
    specs: dict
    grid: tuple
    block: tuple
    smem: int
    alpha: float

    def scalars(self) -> tuple:
        """The non-pointer arguments with their C widths: float alpha, u32 M, N, K."""
        p = self.problem
        return (np.float32(self.alpha), np.uint32(p.m), np.uint32(p.n), np.uint32(p.k))

    def args(self, maps: dict, out) -> tuple:
        """The kernel's argument list: tmap_a, tmap_b, tmap_sfa, tmap_sfb, out, alpha, M, N, K; in 02 the
        fifth is tmap_c, the output's map (it holds the address of `out`)."""
        need = ("a", "b", "sfa", "sfb") + (("c",) if "c" in self.specs else ())
        missing = [k for k in need if k not in maps]
        if missing:
            raise Nvfp4Error(f"missing tensor maps {missing}")
        fifth = maps["c"] if "c" in self.specs else out
        return (maps["a"], maps["b"], maps["sfa"], maps["sfb"], fifth) + self.scalars()

    def describe(self) -> str:
        return (f"{self.build.source.name} NUM_STAGES={self.layout.stages}: grid={self.grid} block={self.block} "
                f"smem={self.smem} B; maps: " + "; ".join(f"{k}: {s.describe()}" for k, s in self.specs.items()))


def plan(problem, b: _build.Build, tensors: dict | None = None, alpha: float | None = None) -> Plan:
    """Check a launch of build `b` on `problem` (no GPU needed): maps, grid (N/128, M/128), 128 threads."""
    lay = Layout.of(b)
    if not lay.fits:
        raise Nvfp4Error(f"{b.source.name} with NUM_STAGES={lay.stages} needs {lay.smem_total} B of shared "
                         f"memory per block; sm_100 allows {lay.smem_limit} B (227 KB): use at most "
                         f"{max_stages_that_fit(lay)} stages")
    specs = tensor_map_specs(problem, lay, tensors)
    if alpha is None:
        alpha = 1.0
        if tensors is not None and "gsa" in tensors and "gsb" in tensors:
            alpha = float(tensors["gsa"].float().reshape(-1)[0]) * float(tensors["gsb"].float().reshape(-1)[0])
    grid = (problem.n // lay.tile_n, problem.m // lay.tile_m, 1)
    return Plan(problem, b, lay, specs, grid, (lay.num_threads, 1, 1), lay.smem_total, float(alpha))


def max_stages_that_fit(lay: Layout) -> int:
    """The largest NUM_STAGES whose shared memory fits, from this build's per-stage and fixed bytes."""
    fixed = lay.smem_total - lay.stages * lay.stage_bytes
    return (lay.smem_limit - fixed) // lay.stage_bytes


def prepare(p: Plan, maps: dict, out, info=None):
    """pelib.launch.prepare() of the plan: the last step before the GPU (checks arch, smem, arguments)."""
    from . import launch
    return launch.prepare(p.build, p.args(maps, out), grid=p.grid, block=p.block, smem=p.smem, info=info)


# ---- emulation ------------------------------------------------------------------------------------------

def tile_params(b_or_lay, stage_slot: int = 0):
    """pelib.emulate.TileParams of stage slot `stage_slot` of the ring (offsets, descriptors, TMEM columns)."""
    from . import emulate as E
    lay = b_or_lay if isinstance(b_or_lay, Layout) else Layout.of(b_or_lay)
    if not 0 <= stage_slot < lay.stages:
        raise Nvfp4Error(f"stage slot {stage_slot} of a {lay.stages}-stage ring")
    off = stage_slot * lay.stage_bytes
    col = stage_slot * lay.tmem_stage_cols
    return E.TileParams.from_exports(
        lay.ex, a_smem_offset=lay.a_smem_offset + off, b_smem_offset=lay.b_smem_offset + off,
        a_desc=D.smem_desc_advance(lay.a_desc, off), b_desc=D.smem_desc_advance(lay.b_desc, off),
        sfa_smem_offset=lay.sfa_smem_offset + off, sfb_smem_offset=lay.sfb_smem_offset + off,
        sfa_tmem_col=lay.sfa_tmem_col + col, sfb_tmem_col=lay.sfb_tmem_col + col)


def check_sf_loads(problem, lay: Layout, sfa_mma, sfb_mma, m_blk: int, n_blk: int) -> None:
    """Replay the kernel's SF TMA boxes (rows of 256 B at sf_box_row()) through pelib.emulate and check
    each K tile lands as the blocked atoms of that tile (what emulate_tile assumes is in SMEM)."""
    from . import emulate as E
    k_tiles = problem.k // lay.block_k
    kb = problem.k // lay.sf_vec
    for name, flat, blk in (("sfa", sfa_mma, m_blk), ("sfb", sfb_mma, n_blk)):
        g = np.ascontiguousarray(_np_bytes(sf_rows_view(flat, lay)))
        tm = E.TensorMap2D(8, (lay.sf_row_bytes, g.shape[0]), (lay.sf_row_bytes, lay.sf_box_rows), lay.sf_swizzle)
        blocked = g.reshape(-1)
        for kt in range(k_tiles):
            sm = E.SmemImage(lay.sf_ktile_bytes)
            E.tma_load_2d(tm, g, (0, sf_box_row(blk, kt, problem.k, lay)), sm, 0)
            want = E.sf_blocked_offset(128 * blk, kt * lay.block_k // lay.sf_vec, kb)
            if not np.array_equal(sm.view(0, lay.sf_ktile_bytes), blocked[want:want + lay.sf_ktile_bytes]):
                raise Nvfp4Error(f"{name}: the box of K tile {kt}, block {blk} is not that tile's scale factors")


def _np_bytes(t) -> np.ndarray:
    try:
        import torch
        if isinstance(t, torch.Tensor):
            return t.detach().cpu().contiguous().view(torch.uint8).numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(t).view(np.uint8)


def emulate_tile(b: _build.Build, problem, inputs: dict, m_blk: int = 0, n_blk: int = 0, *,
                 return_report: bool = False):
    """One 128x128 output tile as the stage computes it, FP16 like the kernel's epilogue (as float64).

    K tile kt goes through ring slot kt % NUM_STAGES (its SMEM offsets, descriptors and TMEM scale
    columns), accumulating in FP64; then alpha = gsa * gsb and the FP16 rounding of the epilogue.
    The SF tensor-map boxes are replayed too (check_sf_loads). inputs: pelib.problems make_inputs().
    """
    from . import emulate as E
    lay = Layout.of(b)
    check_problem(problem, lay)
    E.check_tile_index((m_blk, n_blk), (problem.m // lay.tile_m, problem.n // lay.tile_n))
    check_sf_loads(problem, lay, inputs["sfa_mma"], inputs["sfb_mma"], m_blk, n_blk)
    a, bb = _np_bytes(inputs["a"]), _np_bytes(inputs["b"])
    sfa, sfb = _np_bytes(inputs["sfa"]), _np_bytes(inputs["sfb"])
    kt_bytes, kt_sf = lay.block_k // 2, lay.block_k // lay.sf_vec
    m0, n0 = m_blk * lay.tile_m, n_blk * lay.tile_n
    acc = np.zeros((lay.tile_m, lay.tile_n))
    reports = []
    params = [tile_params(lay, s) for s in range(lay.stages)]
    for kt in range(problem.k // lay.block_k):
        # The K tile's own columns, so emulate_tile's K tile 0 is the kernel's K tile kt. Only its partial
        # accumulator is wanted here: a staged epilogue runs once, below, on the whole sum.
        ksl, ssl = slice(kt * kt_bytes, (kt + 1) * kt_bytes), slice(kt * kt_sf, (kt + 1) * kt_sf)
        out, rep = E.emulate_tile(params[kt % lay.stages].with_(stage_smem_offset=None),
                                  a[m0:m0 + lay.tile_m, ksl], bb[n0:n0 + lay.tile_n, ksl],
                                  sfa=sfa[m0:m0 + lay.tile_m, ssl], sfb=sfb[n0:n0 + lay.tile_n, ssl],
                                  return_report=True)
        acc += out
        reports.append(rep)
    alpha = float(_np_scalar(inputs.get("gsa", 1.0))) * float(_np_scalar(inputs.get("gsb", 1.0)))
    if lay.staged:
        rep = E.TileReport()
        tile = emulate_staged_epilogue(params[0], acc, alpha, problem, m_blk, n_blk, rep)
        if "staging_layout_hash" in lay.ex and staging_layout_hash(params[0]) != lay.staging_layout_hash:
            rep.issues.append("the kernel's staging_offset() (export staging_layout_hash) is not the layout "
                              "the stage_* exports describe")
        reports.append(rep)
    else:
        tile = (np.float32(alpha) * acc.astype(np.float32)).astype(np.float16).astype(np.float64)
    return (tile, reports) if return_report else tile


def c_box_coords(box: int, m_blk: int, n_blk: int, tile_m: int = 128, tile_n: int = 128,
                 box_cols: int = 64) -> tuple[int, int]:
    """(column, row) where column box `box` of tile (m_blk, n_blk) is stored: 02's store_tile formula."""
    return n_blk * tile_n + box * box_cols, m_blk * tile_m


def staging_addresses(p, rows, cols, smem_base: int = 0):
    """Physical shared addresses (..., out_elem_bytes) where the epilogue writes output (row, col) of the tile.

    The stage_* convention of pelib.emulate: box (col // stage_box_cols) * row_boxes + row // stage_box_rows,
    rows of stage_box_cols elements inside a box, then the stage_swizzle XOR of the address."""
    from . import emulate as E
    rows, cols = np.asarray(rows), np.asarray(cols)
    eb, bc, br = p.out_elem_bytes, p.stage_box_cols, p.stage_box_rows
    row_boxes = p.mma_m // br
    box = (cols // bc) * row_boxes + rows // br
    logical = smem_base + p.stage_smem_offset + box * br * bc * eb + (rows % br) * bc * eb + (cols % bc) * eb
    return E.swizzle_addr(logical[..., None] + np.arange(eb), p.stage_swizzle)


def staging_layout_hash(p) -> int:
    """02's staging_layout_hash() recomputed from the stage_* exports: h = h * 1000003 + offset of the 16-B
    chunk of (row, col), rows 0..127, col = 0, 8, .., 120, modulo 2**64 (the kernel's constexpr loop)."""
    r, c = np.meshgrid(np.arange(p.mma_m), np.arange(0, p.mma_n, 8), indexing="ij")
    offs = staging_addresses(p, r, c)[..., 0] - p.stage_smem_offset
    h = 0
    for o in offs.reshape(-1):
        h = (h * 1000003 + int(o)) % 2**64
    return h


def emulate_staged_epilogue(p, acc, alpha: float, problem, m_blk: int = 0, n_blk: int = 0, report=None,
                            smem_base: int = 0) -> np.ndarray:
    """02's epilogue from the summed accumulator on, through pelib.emulate's TMEM, SMEM and TMA models.

    The accumulator goes into TMEM as FP32; each epilogue warp tcgen05.ld's its lane quarter, 32 columns
    at a time; alpha and the FP16 rounding as the kernel does them; st.shared at staging_addresses() (the
    stage_* exports); then one TMA store per box with a map of out_swizzle into a NaN-poisoned FP16 output
    of the whole problem at c_box_coords(). Returns the tile (float64). Into `report` (a
    pelib.emulate.TileReport) go: staging bytes a store reads that no thread wrote, output elements of the
    tile nobody stored, bytes stored outside the tile, and a staging swizzle that differs from the map's.
    (pelib.emulate.emulate_tile's own staged path replays the same stage_* layout for its K range, with
    no alpha, at the tile's origin, and stores FP16 only if its TileParams know out_fmt; this function
    runs once on the whole K sum and adds alpha, the whole output and the kernel's store coordinates.)
    """
    from . import emulate as E
    report = report if report is not None else E.TileReport()
    tile_m, tile_n = acc.shape
    eb, bc, br, x = p.out_elem_bytes, p.stage_box_cols, p.stage_box_rows, p.epi_ld_x
    if eb != 2:
        raise Nvfp4Error(f"out_elem_bytes={eb}: the NVFP4 stages write FP16 (2 bytes)")
    if tile_m % br or tile_n % bc:
        raise Nvfp4Error(f"boxes of {br} rows x {bc} columns do not tile the {tile_m}x{tile_n} output")
    if p.stage_swizzle != p.out_swizzle:
        report.issues.append(f"the epilogue writes the staging tile with a {p.stage_swizzle}-B swizzle but the C map "
                             f"reads it with {p.out_swizzle} B")
    tm = E.Tmem(p.tmem_cols)
    tm.check_cols(p.tmem_acc_col, tile_n, "the accumulator")
    tm.data[:tile_m, p.tmem_acc_col:p.tmem_acc_col + tile_n] = acc.astype(np.float32)   # TMEM holds FP32
    sm = E.SmemImage(p.smem_bytes or limits.SMEM_LIMIT, smem_base)   # fresh: a byte nobody wrote is reported, not stale
    for w in range(p.epi_warp0, p.epi_warp0 + p.epi_warps):
        lane0 = 32 * (w % 4)
        for c0 in range(0, tile_n, x):
            regs = E.tcgen05_ld_32x32b(tm, w, lane0 << 16 | (p.tmem_acc_col + c0), x)
            h = (np.float32(alpha) * regs.astype(np.float32)).astype(np.float16)   # cvt.rn.f16x2.f32
            rows = lane0 + np.arange(32)[:, None] + np.zeros((1, x), dtype=np.int64)
            cols = c0 + np.arange(x)[None, :] + np.zeros((32, 1), dtype=np.int64)
            sm.write(staging_addresses(p, rows, cols, smem_base), h.view(np.uint8).reshape(32, x, 2))
    gout = np.full((problem.m, problem.n * eb), 0xFF, dtype=np.uint8)     # FP16 0xFFFF is a NaN
    tmap = E.TensorMap2D(8 * eb, (problem.n, problem.m), (bc, br), p.out_swizzle)
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


def _np_scalar(x) -> float:
    try:
        import torch
        if isinstance(x, torch.Tensor):
            return float(x.float().reshape(-1)[0])
    except ImportError:  # pragma: no cover
        pass
    return float(np.asarray(x).reshape(-1)[0])


# ---- compiled facts ------------------------------------------------------------------------------------

@dataclass
class StageFacts:
    """What the compiler says about one stage count (evidence: compiled)."""

    stages: int
    registers: int
    spills: int
    stack: int
    smem_dynamic: int
    smem_static: int
    smem_limit: int
    tmem_cols: int
    mma_instructions: int
    sf_copies: int

    @property
    def smem_total(self) -> int:
        return self.smem_dynamic + self.smem_static

    @property
    def fits(self) -> bool:
        return self.smem_total <= self.smem_limit

    def row(self) -> dict:
        return {"NUM_STAGES": self.stages, "registers": self.registers, "spills (B)": self.spills,
                "smem (B)": self.smem_total, "smem (KB)": f"{self.smem_total / 1024:.1f}",
                "limit (KB)": self.smem_limit // 1024, "fits 227 KB": "yes" if self.fits else "NO",
                "TMEM cols": self.tmem_cols, f"{MMA_OPCODE} in SASS": self.mma_instructions}


def facts(b: _build.Build) -> StageFacts:
    f = b.facts
    h = b.histogram
    return StageFacts(stages=b.exports["num_ab_stage"], registers=f.registers, spills=f.spills, stack=f.stack,
                      smem_dynamic=b.exports["smem_bytes"], smem_static=f.smem_static,
                      smem_limit=b.exports["smem_limit"], tmem_cols=b.exports["tmem_cols"],
                      mma_instructions=h.get(MMA_OPCODE, 0), sf_copies=h.get(SF_COPY_OPCODE, 0))


@lru_cache(maxsize=None)
def stage_facts(stages: int) -> StageFacts:
    """Compiled facts of 01_pipelined.cu at NUM_STAGES = stages (builds are cached on disk)."""
    return facts(build("01_pipelined", stages))


def stage_table(counts=STAGE_COUNTS):
    """Registers, spills, shared memory and the 227 KB verdict per NUM_STAGES (evidence: compiled)."""
    from .facts import Table, evidence_label
    rows = [stage_facts(s).row() for s in counts]
    return Table(rows, f"01_pipelined.cu per NUM_STAGES — {evidence_label(build('01_pipelined', counts[0]))}")


# ---- recorded numbers (evidence: recorded, nvfp4-gemm-optimization-log.md via pelib.records) ------------

RECORD_NOTE = "nvfp4-gemm-optimization-log.md"


def recorded_sweep() -> dict:
    """{shape: {stages: µs}}: the log's 1..5 sweep plus its 6-stage point (K=16384 only)."""
    from . import records
    out = {k: dict(v) for k, v in records.nvfp4_stage_sweep().items()}
    for t in records.nvfp4_stage_times():
        if t.table == "additional" and t.stages not in out[t.shape]:
            out[t.shape][t.stages] = t.us
    return out


def recorded_attempts() -> list:
    """The log's failed or abandoned attempts (pelib.records.Attempt: name, outcome, label, source)."""
    from . import records
    return records.nvfp4_attempts()


def recorded_seven_stage():
    """The log's 7-stage attempt: outcome 'timeout', label 'too much shared memory'."""
    for a in recorded_attempts():
        if a.name.startswith("7-stage"):
            return a
    raise KeyError("no 7-stage attempt in the NVFP4 log record")


def recorded_split_k() -> list:
    """Split-K 2 and 4 against the 5-stage kernel (pelib.records.SplitK rows)."""
    from . import records
    return records.nvfp4_split_k()


def sol_us() -> dict:
    """The log's speed-of-light figures (µs), by shape."""
    from . import records
    return records.nvfp4_sol_us()


# ---- the overlap model (evidence: modelled) --------------------------------------------------------------

@dataclass(frozen=True)
class OverlapParams:
    """One CTA's K loop: t_load (issue-to-landed of one K tile's TMA), t_mma (its cp + 4 MMAs, issue to
    commit), t_stream (the per-CTA share of DRAM bandwidth: the fastest K tiles can arrive back to
    back), t_fixed (launch, prologue latency, epilogue), all in µs."""

    t_load: float
    t_mma: float
    t_stream: float
    t_fixed: float


def overlap_time(k_tiles: int, stages: int, p: OverlapParams) -> float:
    """Modelled kernel time: t_fixed + k_tiles * max((t_load + t_mma) / stages, t_stream, t_mma).

    With S stages, S loads are in flight; a stage is refilled only after its MMAs finish (the
    single-thread loop of 01_pipelined), so one round trip (load + MMA) delivers S K tiles, unless
    bandwidth (t_stream) or the tensor core (t_mma) is the tighter limit.
    """
    if k_tiles < 1 or stages < 1:
        raise ValueError("k_tiles and stages must be >= 1")
    return p.t_fixed + k_tiles * max((p.t_load + p.t_mma) / stages, p.t_stream, p.t_mma)


def simulate(k_tiles: int, stages: int, p: OverlapParams) -> dict:
    """Event-by-event replay of 01_pipelined's loop: when each K tile's load and MMA start and end (µs).

    Load j may start once stage j % S is free (the MMAs of K tile j - S finished) and no earlier than
    t_stream after the previous load started (bandwidth); MMA j starts when load j landed and MMA j-1
    finished, and the issuing thread is not stuck waiting for an empty stage.
    """
    S = stages
    load_start = np.zeros(k_tiles)
    load_end = np.zeros(k_tiles)
    mma_start = np.zeros(k_tiles)
    mma_end = np.zeros(k_tiles)
    thread = 0.0  # the one issuing thread's clock
    for j in range(min(S, k_tiles)):  # prologue
        load_start[j] = max(thread, load_start[j - 1] + p.t_stream if j else 0.0)
        load_end[j] = load_start[j] + p.t_load
    for k in range(k_tiles):
        mma_start[k] = max(thread, load_end[k], mma_end[k - 1] if k else 0.0)
        mma_end[k] = mma_start[k] + p.t_mma
        thread = mma_start[k]
        j = k + S
        if j < k_tiles:  # wait for stage k % S to drain, then refill it
            thread = max(thread, mma_end[k])
            load_start[j] = max(thread, load_start[j - 1] + p.t_stream)
            load_end[j] = load_start[j] + p.t_load
    total = p.t_fixed + mma_end[-1]
    return {"load_start": load_start, "load_end": load_end, "mma_start": mma_start, "mma_end": mma_end,
            "total": total}


def mma_time_us(gpu: str = "B200", tile=(128, 128, 256)) -> float:
    """One K tile's MMAs on one SM at the datasheet's dense FP4 rate (pelib.sol): 2*128*128*256 FLOP."""
    from . import sol
    g = sol.spec(gpu)
    per_sm = g.peak_tflops("nvfp4") * 1e12 / g.sms
    return 2 * tile[0] * tile[1] * tile[2] / per_sm * 1e6


def fit_overlap(times: dict, k_tiles: int, t_mma: float | None = None) -> OverlapParams:
    """Fit t_fixed, t_load and t_stream to recorded {stages: µs} of one shape (least squares).

    t_mma is not fitted: it is one K tile at the datasheet FP4 rate per SM (mma_time_us(), about
    0.14 µs on B200). With t_stream fixed the model is linear in t_fixed and t_load; t_stream is scanned.
    """
    t_mma = mma_time_us() if t_mma is None else t_mma
    S = np.array(sorted(times), dtype=float)
    y = np.array([times[int(s)] for s in S], dtype=float)
    best = None
    for t_stream in np.linspace(0.0, y.min() / k_tiles, 400):
        # t = t_fixed + k * max((t_load + t_mma)/S, t_stream): try each split point of the max
        for cut in range(len(S) + 1):
            lin = S[:cut]
            if cut == 0:
                continue
            X = np.column_stack([np.ones(cut), k_tiles / lin])
            rhs = y[:cut]
            rest = y[cut:] - k_tiles * max(t_stream, t_mma)
            X2 = np.vstack([X, np.column_stack([np.ones(len(rest)), np.zeros(len(rest))])])
            r2 = np.concatenate([rhs, rest])
            coef, *_ = np.linalg.lstsq(X2, r2, rcond=None)
            t_fixed, a = coef
            t_load = a - t_mma
            if t_load < 0 or t_fixed < 0:
                continue
            p = OverlapParams(t_load, t_mma, t_stream, t_fixed)
            err = sum((overlap_time(k_tiles, int(s), p) - t) ** 2 for s, t in zip(S, y))
            if best is None or err < best[0]:
                best = (err, p)
    if best is None:
        raise ValueError(f"no non-negative fit for {times}")
    return best[1]


def modelled_sweep(counts=STAGE_COUNTS) -> dict:
    """{shape: {"params": OverlapParams, "us": {stages: modelled µs}}}, fitted to the recorded sweep."""
    from . import problems
    rec = recorded_sweep()
    out = {}
    for shape in SHAPES:
        prob = problems.nvfp4_gemm(shape)
        kt = prob.k // 256
        pts = {s: t for s, t in rec[shape].items() if s <= 5}
        p = fit_overlap(pts, kt)
        out[shape] = {"params": p, "k_tiles": kt, "us": {s: overlap_time(kt, s, p) for s in counts}}
    return out


# ---- on an sm_100 GPU (evidence: measured) ----------------------------------------------------------------

def _problem(problem):
    from . import problems
    return problems.nvfp4_gemm(problem) if isinstance(problem, str) else problem


def live() -> bool:
    """True where the sm_100a stages run (a B200-class GPU): the pages take the measured path."""
    from . import device
    return device.can_run("sm_100a")


def encode_maps(p: Plan, tensors: dict) -> dict:
    """cuTensorMapEncodeTiled of the plan's four specs (needs the CUDA driver); keeps the tensors alive."""
    from . import tma
    owners = {"a": tensors["a"], "b": tensors["b"], "sfa": tensors["sfa_mma"], "sfb": tensors["sfb_mma"],
              "c": tensors.get("out")}
    return {k: tma.encode(s, owner=owners[k]) for k, s in p.specs.items()}


def run(problem="small", stage: str = "01_pipelined", num_ab_stage: int | None = 4, *, inputs: dict | None = None,
        seed: int = 0, timeout_s: float = 30.0) -> dict:
    """Launch a stage once on poisoned (NaN) output; returns the inputs dict with 'out' written.

    Needs an sm_100 GPU (pelib.device.UnsupportedGPU otherwise). Inputs default to the problem's
    seeded make_inputs() on the GPU.
    """
    from . import device, launch, verify
    device.require("sm_100a")
    prob = _problem(problem)
    b = build(stage, None if stage == "00_single_stage" else num_ab_stage)
    x = inputs if inputs is not None else prob.make_inputs(seed, device="cuda")
    prob.validate(x, device=x["a"].device)
    verify.poison(x["out"])
    p = plan(prob, b, x)
    maps = encode_maps(p, x)
    launch.launch(b, p.args(maps, x["out"]), grid=p.grid, block=p.block, smem=p.smem, timeout_s=timeout_s)
    return x


def reference(problem, x: dict):
    """pelib.reference.nvfp4_gemm_reference of the inputs, on their device, FP16 like the kernel."""
    from . import reference as R
    prob = _problem(problem)
    return R.nvfp4_gemm_reference(x["a"], x["sfa"], x["gsa"], x["b"], x["sfb"], x["gsb"], out_dtype=prob.out_dtype)


def check(problem="small", stage: str = "01_pipelined", num_ab_stage: int | None = 4, *, seed: int = 0,
          inputs: dict | None = None):
    """Run on poisoned output and compare with the reference (pelib.verify.VerifyReport)."""
    from . import reference as R
    from . import verify
    prob = _problem(problem)
    x = run(prob, stage, num_ab_stage, inputs=inputs, seed=seed)
    ref = reference(prob, x)
    e2m1_max = float(R.E2M1_MAX)
    amax = e2m1_max * verify.finite_absmax(x["sfa"], "sfa") * verify.finite_absmax(x["gsa"], "gsa")
    bmax = e2m1_max * verify.finite_absmax(x["sfb"], "sfb") * verify.finite_absmax(x["gsb"], "gsb")
    label = f"{stage}{'' if stage == '00_single_stage' else f' S={num_ab_stage}'} {prob.name}"
    return verify.verify_gemm(x["out"], ref, K=prob.k, a_absmax=amax, b_absmax=bmax, out="float16", label=label)


def time_stage(problem="k16384", stage: str = "01_pipelined", num_ab_stage: int | None = 4, *, iters: int = 50,
               warmup: int = 5, seed: int = 0, inputs: dict | None = None) -> dict:
    """Median and spread over `iters` launches (CUDA events, L2 flushed before each): pelib.bench.result()."""
    from . import bench, device
    device.require("sm_100a")
    prob = _problem(problem)
    b = build(stage, None if stage == "00_single_stage" else num_ab_stage)
    x = inputs if inputs is not None else prob.make_inputs(seed, device="cuda")
    p = plan(prob, b, x)
    lp = prepare(p, encode_maps(p, x), x["out"])
    times = bench.time_fn(lambda: lp.run(), iters=iters, warmup=warmup, flush=True, wait=lp.wait)
    lp.wait()
    r = bench.result(f"nvfp4/{stage}/S{p.layout.stages}/{prob.name}", times, flops=prob.flops,
                     bytes_moved=prob.min_bytes, params={"shape": prob.name, "stage": stage,
                                                         "num_ab_stage": p.layout.stages})
    r["us"] = r["median_ms"] * 1e3
    return r


def measure_sweep(shapes=SHAPES, counts=STAGE_COUNTS, *, iters: int = 50, check_first: bool = True,
                  save: bool = True, stage: str = "01_pipelined") -> dict:
    """Verify (poisoned output, full shape) then time every shape x stage count that fits; JSON to bench/results.
    `stage` picks 01_pipelined (default) or 02_tma_store_epilogue.

    Returns {"env": ..., "us": {shape: {stages: µs}}, "verified": {shape: {stages: bool}},
    "skipped": {stages: why}, "results": [bench results]} (evidence: measured, env names device and date).
    """
    from . import bench
    out = {"env": bench.environment(), "us": {s: {} for s in shapes}, "verified": {s: {} for s in shapes},
           "skipped": {}, "results": []}
    for shape in shapes:
        prob = _problem(shape)
        x = prob.make_inputs(0, device="cuda")
        for s in counts:
            f = stage_facts(s) if stage == "01_pipelined" else facts(build(stage, s))
            if not f.fits:
                out["skipped"][s] = f"needs {f.smem_total} B of shared memory, more than {f.smem_limit} B"
                continue
            ok = check(prob, stage, s, inputs=x).ok if check_first else None
            r = time_stage(prob, stage, s, iters=iters, inputs=x)
            r["verified"] = ok
            out["us"][shape][s] = r["us"]
            out["verified"][shape][s] = ok
            out["results"].append(r)
    if save:
        out["path"] = str(bench.write({"env": out["env"], "results": out["results"], "skipped": {
            f"nvfp4 {stage} S={k}": v for k, v in out["skipped"].items()}}))
    return out


def _register_benchmarks() -> None:
    from . import bench
    for shape in SHAPES:
        for s in (1, 2, 3, 4, 5, 6):
            def fn(iters: int = 50, _shape=shape, _s=s):
                ok = check(_shape, "01_pipelined", _s).ok
                r = time_stage(_shape, "01_pipelined", _s, iters=iters)
                r["verified"] = ok
                return r
            fn.__doc__ = f"NVFP4 01_pipelined NUM_STAGES={s}, {shape} (verified, then timed)"
            bench.register(f"nvfp4_s{s}_{shape}", arch="sm_100a")(fn)

            def fn_tma(iters: int = 50, _shape=shape, _s=s):
                ok = check(_shape, "02_tma_store_epilogue", _s).ok
                r = time_stage(_shape, "02_tma_store_epilogue", _s, iters=iters)
                r["verified"] = ok
                return r
            fn_tma.__doc__ = f"NVFP4 02_tma_store_epilogue NUM_STAGES={s}, {shape} (verified, then timed)"
            bench.register(f"nvfp4_tma_s{s}_{shape}", arch="sm_100a")(fn_tma)


if __name__ == "pelib.nvfp4":  # not again when run as python -m pelib.nvfp4 (__main__)
    _register_benchmarks()


# ---- tables and figures for the chapters -------------------------------------------------------------------

def sweep_rows(measured: dict | None = None, counts=STAGE_COUNTS) -> list[dict]:
    """One row per NUM_STAGES: compiled facts, recorded µs, modelled µs (and measured µs if given)."""
    rec = recorded_sweep()
    mod = modelled_sweep(counts)
    rows = []
    for s in counts:
        f = stage_facts(s)
        row = {"NUM_STAGES": s, "regs": f.registers, "spills": f.spills, "smem KB": f"{f.smem_total / 1024:.1f}",
               "fits": "yes" if f.fits else "NO"}
        for shape in SHAPES:
            row[f"{shape} rec"] = f"{rec[shape][s]:.1f}" if s in rec[shape] else ""
        for shape in SHAPES:
            row[f"{shape} model"] = f"{float(mod[shape]['us'][s]):.1f}" if f.fits else ""
        if measured:
            for shape in SHAPES:
                v = measured.get("us", {}).get(shape, {}).get(s)
                row[f"{shape} meas"] = f"{v:.1f}" if v is not None else ("no fit" if not f.fits else "")
        rows.append(row)
    return rows


def sweep_table(measured: dict | None = None):
    """The static table of the pipelining chapter: compiled, recorded, modelled (and measured) per stage count."""
    from .facts import Table, evidence_label
    kinds = f"compiled ({evidence_label().split('(', 1)[1]}; recorded ({RECORD_NOTE}); modelled (fit to the recorded 1..5)"
    if measured:
        env = measured.get("env", {})
        kinds += f"; measured ({env.get('device', '?')}, {env.get('date', '?')[:10]})"
    return Table(sweep_rows(measured), f"NVFP4 GEMM per NUM_STAGES, µs — {kinds}")


def sweep_figure(measured: dict | None = None, counts=STAGE_COUNTS):
    """Time vs NUM_STAGES per shape: recorded (solid), modelled (dashed), measured (squares) if given."""
    import matplotlib.pyplot as plt
    from .views.plots import evidence_label
    rec = recorded_sweep()
    mod = modelled_sweep(counts)
    fig, axes = plt.subplots(1, len(SHAPES), figsize=(11, 3.4), sharey=False)
    fits = [s for s in counts if stage_facts(s).fits]
    for ax, shape in zip(axes, SHAPES):
        r = rec[shape]
        ax.plot(sorted(r), [r[s] for s in sorted(r)], "o-", color="C0",
                label=evidence_label("recorded", RECORD_NOTE))
        ax.plot(fits, [mod[shape]["us"][s] for s in fits], "--", color="C1", label=evidence_label("modelled"))
        if measured and measured.get("us", {}).get(shape):
            m = measured["us"][shape]
            env = measured.get("env", {})
            ax.plot(sorted(m), [m[s] for s in sorted(m)], "s-", color="C2",
                    label=evidence_label("measured", f"{env.get('device', '?')}, {env.get('date', '?')[:10]}"))
        for s in counts:
            if not stage_facts(s).fits:
                ax.axvspan(s - 0.5, s + 0.5, color="0.85")
                ax.text(s, 0.5, "> 227 KB of SMEM (compiled)", transform=ax.get_xaxis_transform(), ha="center",
                        va="center", rotation=90, fontsize=7)
        ax.set_title(shape, fontsize=9)
        ax.set_xlabel("NUM_STAGES")
        ax.set_xticks(list(counts))
    axes[0].set_ylabel("µs")
    axes[0].legend(fontsize=7, loc="upper center")
    fig.suptitle("NVFP4 GEMM, M=128: time per stage count", fontsize=10)
    fig.tight_layout()
    return fig


def timeline_figure(shape: str = "k16384", counts=(1, 2, 4), tiles: int = 10):
    """The modelled K loop of one CTA: each stage slot's TMA loads and the MMAs, first `tiles` K tiles."""
    import matplotlib.pyplot as plt
    from .views.plots import evidence_label
    mod = modelled_sweep()[shape]
    p = mod["params"]
    heights = [s + 1 for s in counts]
    fig, axes = plt.subplots(len(counts), 1, figsize=(9, 0.45 * sum(heights) + 1.0), sharex=True,
                             gridspec_kw={"height_ratios": heights})
    for ax, s in zip(np.atleast_1d(axes), counts):
        ev = simulate(min(tiles, mod["k_tiles"]), s, p)
        for k in range(len(ev["mma_start"])):
            ax.barh(1 + k % s, ev["load_end"][k] - ev["load_start"][k], left=ev["load_start"][k], height=0.6,
                    color=f"C{k % 10}", alpha=0.7, edgecolor="k", lw=0.3)
            ax.text(ev["load_start"][k] + 0.02, 1 + k % s, str(k), va="center", fontsize=6)
            ax.barh(0, ev["mma_end"][k] - ev["mma_start"][k], left=ev["mma_start"][k], height=0.6,
                    color=f"C{k % 10}", edgecolor="k", lw=0.5)
        ax.set_yticks(range(s + 1), ["MMA"] + [f"load, slot {i}" for i in range(s)], fontsize=7)
        ax.set_ylabel(f"S={s}", rotation=0, labelpad=18)
    np.atleast_1d(axes)[-1].set_xlabel("µs from the first load (number and colour = K tile)")
    fig.suptitle(f"{shape}: first {tiles} K tiles of one CTA — {evidence_label('modelled')}: t_load="
                 f"{p.t_load:.2f} µs, t_mma={p.t_mma:.2f} µs, t_stream={p.t_stream:.2f} µs", fontsize=9)
    fig.tight_layout()
    return fig


def stage_view(stages: int, measured: dict | None = None):
    """The widget's render of one NUM_STAGES: what the table above cannot show. The time-per-stage curves
    with this point marked and its shared memory against the per-block limit (one figure), the modelled
    K loop of one CTA with this many slots (a second figure), and this point's numbers (a table)."""
    from .facts import Table, evidence_label
    f = stage_facts(stages)
    rec = recorded_sweep()
    mod = modelled_sweep()
    rows = [{"what": "registers / thread", "value": f.registers, "evidence": "compiled"},
            {"what": "spills (B)", "value": f.spills, "evidence": "compiled"},
            {"what": "dynamic shared memory (B)", "value": f.smem_total, "evidence": "compiled"},
            {"what": f"fits the {f.smem_limit // 1024} KB per block", "value": "yes" if f.fits else "NO: the launch is refused",
             "evidence": "compiled"},
            {"what": "TMEM columns allocated", "value": f.tmem_cols, "evidence": "compiled"}]
    for shape in SHAPES:
        if measured and shape in measured.get("us", {}) and stages in measured["us"][shape]:
            env = measured.get("env", {})
            rows.append({"what": f"{shape} time (µs)", "value": f"{measured['us'][shape][stages]:.1f}",
                         "evidence": f"measured ({env.get('device', '?')}, {env.get('date', '?')[:10]})"})
        if stages in rec[shape]:
            rows.append({"what": f"{shape} time (µs)", "value": f"{rec[shape][stages]:.1f}",
                         "evidence": f"recorded ({RECORD_NOTE})"})
        if f.fits:
            rows.append({"what": f"{shape} time (µs)", "value": f"{float(mod[shape]['us'][stages]):.1f}",
                         "evidence": "modelled"})
    kinds = "; ".join(dict.fromkeys(r["evidence"].split(" (")[0] for r in rows))
    table = Table(rows, f"NUM_STAGES = {stages} — {kinds} (each row's kind in its column; "
                        f"{evidence_label(build('01_pipelined', stages))})")
    out = [point_figure(stages, measured), table]
    if f.fits:
        out.insert(1, timeline_figure("k16384", counts=(stages,), tiles=10))
    else:
        out.insert(1, f"NUM_STAGES = {stages} needs {f.smem_total:,} B of shared memory, more than the "
                      f"{f.smem_limit:,} B a block may have: the launch is refused, so there is no K loop to draw.")
    return out


def point_figure(stages: int, measured: dict | None = None, counts=STAGE_COUNTS):
    """One NUM_STAGES in context: time vs stage count per shape (recorded, modelled; measured if given)
    with this count marked, and this count's shared memory against the per-block limit (compiled)."""
    import matplotlib.pyplot as plt
    from .views.plots import evidence_label
    rec = recorded_sweep()
    mod = modelled_sweep(counts)
    fits = [s for s in counts if stage_facts(s).fits]
    f = stage_facts(stages)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(7.8, 3.0), gridspec_kw={"width_ratios": [2.2, 1]})
    for j, shape in enumerate(SHAPES):
        r = rec[shape]
        m = mod[shape]["us"]
        base = r.get(1) or m[1]
        ax.plot(sorted(r), [r[s] / base for s in sorted(r)], "o-", color=f"C{j}", ms=3, lw=1.2, label=shape)
        ax.plot(fits, [m[s] / base for s in fits], "--", color=f"C{j}", lw=0.9)
        if measured and measured.get("us", {}).get(shape):
            mm = measured["us"][shape]
            ax.plot(sorted(mm), [mm[s] / base for s in sorted(mm)], "s", color=f"C{j}", ms=4)
    ax.axvline(stages, color="k", lw=1.5, alpha=0.6)
    ax.text(stages, 0.04, f" NUM_STAGES={stages}", transform=ax.get_xaxis_transform(), fontsize=8,
            ha="left" if stages < max(counts) else "right")
    for s in counts:
        if not stage_facts(s).fits:
            ax.axvspan(s - 0.5, s + 0.5, color="0.88")
            ax.text(s, 0.5, "does not fit", transform=ax.get_xaxis_transform(), rotation=90, fontsize=7,
                    ha="center", va="center")
    ax.plot([], [], "k-", lw=1, label="recorded"); ax.plot([], [], "k--", lw=1, label="modelled")
    ax.set_xticks(list(counts))
    ax.set_xlabel("NUM_STAGES")
    ax.set_ylabel("time / time at 1 stage")
    ax.legend(fontsize=7, ncol=2, loc="lower left", bbox_to_anchor=(0.0, 0.1), frameon=False)
    ax.set_title(f"time per stage count: {evidence_label('recorded', RECORD_NOTE)}; modelled dashed", fontsize=8)
    bx.bar([0], [f.smem_total], color="#2e86c1" if f.fits else "#c0392b", width=0.5)
    bx.axhline(f.smem_limit, color="red", ls="--", lw=1)
    bx.text(0.55, f.smem_limit, f"per-block limit\n{f.smem_limit:,} B", fontsize=7, va="bottom", ha="center",
            color="red")
    bx.text(0, f.smem_total / 2, f"{f.smem_total:,} B", ha="center", va="center", fontsize=8, color="white",
            rotation=90)
    bx.set_xlim(-0.5, 0.8)
    bx.set_ylim(0, max(stage_facts(max(counts)).smem_total, f.smem_limit) * 1.18)
    bx.set_xticks([])
    bx.set_ylabel("shared memory (B)")
    bx.set_title("this count's shared memory: compiled", fontsize=8)
    fig.tight_layout()
    return fig


def stage_widget(measured: dict | None = None, counts=STAGE_COUNTS, value: int = 5):
    """The pipelining chapter's slider over NUM_STAGES (pelib.widgets.sweep), static table above it; each
    position draws the curves with its point marked, its SMEM against the limit and its K-loop timeline."""
    from .views import widgets
    return widgets.sweep(list(counts), lambda s: stage_view(s, measured), static=lambda: sweep_table(measured),
                         description="NUM_STAGES", value=value)


def attempts_table():
    """The lab log's failed attempts, with split-K numbers (evidence: recorded)."""
    from .facts import Table
    rows = [{"attempt": a.name, "outcome": a.outcome, "what the log says": a.label, "section": a.source.section}
            for a in recorded_attempts()]
    return Table(rows, f"Attempts that did not help — recorded ({RECORD_NOTE})")


def split_k_table():
    """Split-K 2 and 4 against 5 stages, µs (evidence: recorded)."""
    from .facts import Table
    rows = []
    for r in recorded_split_k():
        rows.append({"split": r.split, "shape": r.shape, "5-stage (µs)": f"{r.base_us:.1f}",
                     "split-K (µs)": f"{r.us:.1f}", "slower (%)": r.recorded_pct})
    return Table(rows, f"Split-K with an FP32 workspace — recorded ({RECORD_NOTE})")


# ---- chapter helpers: the single-stage kernel -----------------------------------------------------------

def _label(stage: str, stages: int | None) -> str:
    return stage if stage == "00_single_stage" else f"{stage} (NUM_STAGES={stages})"


def descriptor_table(stage: str = "00_single_stage", stages: int | None = None):
    """The three descriptors the stage issues, field by field (compiled): A/B operand, SF copy, instruction."""
    from .facts import Table
    lay = Layout.of(build(stage, stages))
    rows = []
    for name, word, what in (("A operand (stage 0)", lay.a_desc, "umma_smem"),
                             ("SFA copy source (stage 0, atom 0)", lay.sf_desc, "umma_smem"),
                             ("instruction", lay.idesc, "umma_instr_block_scaled")):
        rows += [{"descriptor": name, "bits": b, "field": f, "raw": r, "meaning": m}
                 for b, f, r, m in D.describe(word, what)]
    return Table(rows, f"{_label(stage, stages)}: a_desc = {lay.a_desc:#018x}, sf_desc = {lay.sf_desc:#018x}, "
                       f"idesc = {lay.idesc:#010x} — compiled")


def smem_budget(stages: int = 1, stage: str | None = None):
    """Where the dynamic shared memory goes, from the exports (compiled)."""
    from .facts import Table
    stage = stage or ("00_single_stage" if stages == 1 else "01_pipelined")
    lay = Layout.of(build(stage, None if stage == "00_single_stage" else stages))
    s = lay.stages
    a = lay.b_smem_offset - lay.a_smem_offset
    b = lay.sfa_smem_offset - lay.b_smem_offset
    sf = lay.sf_ktile_bytes
    ring = s * lay.stage_bytes
    rows = [{"part": f"A: {s} x 128 rows x 128 B (packed E2M1, SW128)", "bytes": s * a},
            {"part": f"B: {s} x 128 rows x 128 B", "bytes": s * b},
            {"part": f"SFA + SFB: {s} x 2 x {sf} B (4 atoms of 512 B each)", "bytes": 2 * s * sf},
            {"part": "1024-B alignment slack, mbarriers, TMEM address slot", "bytes": lay.smem_total - ring},
            {"part": "total (smem_bytes)", "bytes": lay.smem_total},
            {"part": "per-block limit on sm_100 (227 KB)", "bytes": lay.smem_limit}]
    return Table(rows, f"{_label(stage, lay.stages)}: dynamic shared memory — compiled")


def tmem_table(stages: int = 1, stage: str | None = None):
    """Which TMEM columns hold what (compiled): the FP32 accumulator and each stage's scale factors."""
    from .facts import Table
    stage = stage or ("00_single_stage" if stages == 1 else "01_pipelined")
    lay = Layout.of(build(stage, None if stage == "00_single_stage" else stages))
    mmas = lay.block_k // 64                     # MMAs per K tile (K = 64 each)
    rows = [{"columns": f"{lay.tmem_acc_col}..{lay.tmem_acc_col + lay.tile_n - 1}",
             "holds": "accumulator D, FP32: lane = output row, column = output column"}]
    for s in range(lay.stages):
        c = s * lay.tmem_stage_cols
        for op, col in (("SFA", lay.sfa_tmem_col + c), ("SFB", lay.sfb_tmem_col + c)):
            rows.append({"columns": f"{col}..{col + mmas * lay.sf_tmem_step_cols - 1}",
                         "holds": f"stage {s} {op}: MMA k reads columns {col}+4k..{col}+4k+3; lane r of each "
                                  f"32-lane quarter = rows r, r+32, r+64, r+96 (one column each)"})
    rows.append({"columns": f"(allocated {lay.tmem_cols})", "holds": "tcgen05.alloc takes a power of two >= 32"})
    return Table(rows, f"{_label(stage, lay.stages)}: tensor memory — compiled")


def sass_lines(stage: str = "00_single_stage", stages: int | None = None,
               prefixes=("UTMALDG", "UTCCP", "UTCOMMA", "UTCBAR"), limit: int = 24):
    """The SASS lines of the data path (TMA loads, SF copies, block-scaled MMAs, commit), compiled."""
    from . import sass
    from .stages import Rendered
    b = build(stage, stages)
    keep = [f"/*{off:04x}*/  {text.split(';')[0].split('*/', 1)[-1].strip()} ;"
            for off, op, text in sass.instructions(b.sass) if op.startswith(tuple(prefixes))]
    more = f"\n... {len(keep) - limit} more" if len(keep) > limit else ""
    return Rendered("\n".join(keep[:limit]) + more, "text",
                    f"{_label(stage, stages)}: SASS ({', '.join(prefixes)}) — compiled")


def data_path_table(problem="k16384"):
    """Bytes through each hop of the single-stage kernel, per K tile and per CTA (derived from the exports)."""
    from .facts import Table
    prob = _problem(problem)
    lay = Layout.of(build("00_single_stage"))
    kt = prob.k // lay.block_k
    a = lay.b_smem_offset - lay.a_smem_offset
    b = lay.sfa_smem_offset - lay.b_smem_offset
    sf = lay.sf_ktile_bytes
    rows = [{"hop": "global -> SMEM (TMA: A, B boxes 128 B x 128 rows, SW128)", "per K tile (B)": a + b,
             "per CTA (B)": kt * (a + b)},
            {"hop": "global -> SMEM (TMA: SFA, SFB boxes 256 B x 8 rows)", "per K tile (B)": 2 * sf,
             "per CTA (B)": kt * 2 * sf},
            {"hop": "SMEM -> TMEM (tcgen05.cp 32x128b.warpx4, 8 per K tile)", "per K tile (B)": 2 * sf,
             "per CTA (B)": kt * 2 * sf},
            {"hop": "SMEM -> tensor core (4 x tcgen05.mma K=64 through descriptors)", "per K tile (B)": a + b,
             "per CTA (B)": kt * (a + b)},
            {"hop": "TMEM -> registers (tcgen05.ld 32x32b.x32, 4 per warp)", "per K tile (B)": "",
             "per CTA (B)": lay.tile_m * lay.tile_n * 4},
            {"hop": "registers -> global (FP16, 16-B stores)", "per K tile (B)": "",
             "per CTA (B)": lay.tile_m * lay.tile_n * 2}]
    grid = (prob.n // lay.tile_n) * (prob.m // lay.tile_m)
    return Table(rows, f"{prob.name}: {kt} K tiles per CTA, {grid} CTAs — derived from the exports (compiled)")


def sol_table():
    """Recorded times against the floors: the log's SOL and pelib.sol's B200 floor (µs)."""
    from . import problems, sol
    from .facts import Table
    rec = recorded_sweep()
    logsol = sol_us()
    rows = []
    for prob in problems.nvfp4_log_shapes():
        f = sol.floor(prob, "B200")
        grid = (prob.n // 128) * (prob.m // 128)
        rows.append({"shape": prob.name, "CTAs (148 SMs)": grid, "MB moved (min)": f"{prob.min_bytes / 1e6:.1f}",
                     "floor (µs, pelib.sol)": f"{f.t_floor_s * 1e6:.2f}", "log's SOL (µs)": logsol[prob.name],
                     "1 stage (µs)": f"{rec[prob.name][1]:.1f}",
                     "x SOL (1 stage)": f"{rec[prob.name][1] / logsol[prob.name]:.1f}",
                     "5 stages (µs)": f"{rec[prob.name][5]:.1f}",
                     "x SOL (5 stages)": f"{rec[prob.name][5] / logsol[prob.name]:.1f}"})
    return Table(rows, f"Speed of light vs recorded — floors: modelled (datasheet bandwidth); times: recorded "
                       f"({RECORD_NOTE})")


def emulate_check(stage: str = "00_single_stage", stages: int | None = None, problem=None, tile=(0, 1),
                  seed: int = 3, overrides: dict | None = None, defines: dict | None = None) -> dict:
    """Emulate one tile from the stage's exports and compare with pelib.reference (FP16 outputs).

    problem defaults to 128 x 256 x 2048 (8 K tiles: every ring wraps). overrides change exports
    (a deliberately wrong layout) before the replay; defines are extra compile-time defines
    (e.g. STAGING_IN_RING=0 for 02).
    """
    from . import problems
    from . import reference as R
    prob = problem if problem is not None else problems.NvFp4Gemm("ring", 128, 256, 2048)
    prob = _problem(prob)
    b = build(stage, stages, **(defines or {}))
    if overrides:
        b = _build.Build(b.source, b.arch, b.defines, b.cubin, b.log, b.ptxas, {**b.exports, **overrides}, b.cached)
    x = prob.make_inputs(seed)
    ref = R.nvfp4_gemm_reference(x["a"], x["sfa"], x["gsa"], x["b"], x["sfb"], x["gsb"]).double().numpy()
    mb, nb = tile
    want = ref[mb * 128:(mb + 1) * 128, nb * 128:(nb + 1) * 128]
    try:
        got, reps = emulate_tile(b, prob, x, mb, nb, return_report=True)
    except Exception as e:  # a layout the modelled hardware rejects
        return {"stage": _label(stage, stages), "tile": tile, "ok": False, "error": f"{type(e).__name__}: {e}"}
    diff = np.abs(np.nan_to_num(got, nan=np.inf) - want)
    ulp = np.abs(np.spacing(want.astype(np.float16)).astype(np.float64))
    return {"stage": _label(stage, stages), "problem": f"{prob.m}x{prob.n}x{prob.k}", "tile": tile,
            "ok": bool(np.all(diff <= ulp)) and all(r.ok for r in reps),
            "max_abs_err": float(diff.max()), "elements_off_by_more_than_1ulp": int((diff > ulp).sum()),
            "issues": sorted({i for r in reps for i in r.issues})}


def results_table(stage: str = "00_single_stage", stages: int | None = None, shapes=SHAPES, *, iters: int = 30):
    """Measured (verified first, poisoned output) beside recorded on a B200; recorded only, said so, elsewhere."""
    from .facts import Table
    rec = recorded_sweep()
    s = 1 if stage == "00_single_stage" else stages
    rows = []
    measured = live()
    env = None
    for shape in shapes:
        row = {"shape": shape, f"recorded µs (S={s})": f"{rec[shape][s]:.1f}" if s in rec[shape] else ""}
        if measured:
            from . import bench
            env = env or bench.environment()
            x = _problem(shape).make_inputs(0, device="cuda")
            rep = check(shape, stage, stages, inputs=x)
            r = time_stage(shape, stage, stages, iters=iters, inputs=x)
            row.update({"verified": "PASS" if rep.ok else "FAIL", "measured µs": f"{r['us']:.1f}",
                        "p10-p90 µs": f"{r['p10_ms'] * 1e3:.1f}-{r['p90_ms'] * 1e3:.1f}",
                        "TB/s (min bytes)": f"{r.get('gbps', 0) / 1e3:.2f}"})
        rows.append(row)
    if measured:
        cap = (f"{_label(stage, stages)}: measured ({env['device']}, {env['date'][:10]}) beside recorded "
               f"({RECORD_NOTE})")
    else:
        cap = (f"{_label(stage, stages)}: recorded ({RECORD_NOTE}); no sm_100 GPU here, so nothing is "
               f"measured on this page")
    return Table(rows, cap)


def breakdown_table(stages: int = 1):
    """Where the time goes at NUM_STAGES = stages, per shape (evidence: modelled, fitted to recorded)."""
    from .facts import Table
    mod = modelled_sweep()
    rec = recorded_sweep()
    rows = []
    for shape in SHAPES:
        p, kt = mod[shape]["params"], mod[shape]["k_tiles"]
        per = {"load round trip / S": (p.t_load + p.t_mma) / stages, "bandwidth share": p.t_stream,
               "tensor core": p.t_mma}
        bound = max(per, key=per.get)
        loop = kt * per[bound]
        rows.append({"shape": shape, "K tiles": kt, "fixed µs": f"{p.t_fixed:.1f}",
                     "K loop µs": f"{loop:.1f}", "bound by": bound,
                     "tensor core busy µs": f"{kt * p.t_mma:.1f}",
                     "total µs (model)": f"{p.t_fixed + loop:.1f}",
                     "recorded µs": f"{rec[shape][stages]:.1f}" if stages in rec[shape] else ""})
    return Table(rows, f"NUM_STAGES = {stages}: modelled (t_mma from the datasheet FP4 rate; t_fixed, t_load, "
                       f"t_stream fitted to the recorded 1..5 sweep of {RECORD_NOTE})")


def model_params_table():
    """The fitted overlap-model parameters per shape (evidence: modelled)."""
    from .facts import Table
    rows = []
    for shape, v in modelled_sweep().items():
        p = v["params"]
        rows.append({"shape": shape, "K tiles": v["k_tiles"], "t_load µs": f"{p.t_load:.2f}",
                     "t_mma µs": f"{p.t_mma:.2f}", "t_stream µs": f"{p.t_stream:.2f}",
                     "t_fixed µs": f"{p.t_fixed:.1f}",
                     "stages to hide the load": f"{(p.t_load + p.t_mma) / max(p.t_stream, p.t_mma):.1f}"})
    return Table(rows, "Overlap model per shape — modelled (fitted to the recorded sweep)")


# ---- chapter helpers: the TMA-store epilogue (02) ----------------------------------------------------------

TMA_STAGE = "02_tma_store_epilogue"
PITCH_NOTE = "nvfp4-dual-gemm-tma-store-epilogue-pitch.md"
PITCH_EVIDENCE = f"recorded (claim of {PITCH_NOTE})"
# The epilogue's instructions in SASS (nvdisasm, CUDA 13, sm_100a), as read in 01's and 02's listings.
EPILOGUE_OPCODES = {
    "LDTM": "tcgen05.ld (TMEM -> registers)",
    "F2FP": "cvt.rn.f16x2.f32 (two FP32 -> packed FP16)",
    "STG": "st.global.v4 (16 B of one row to global)",
    "STS": "st.shared (STS.128: 16 B into the staging tile; also the TMEM slot / barrier init)",
    "MEMBAR": "fence.proxy.async.shared::cta emits MEMBAR.ALL.CTA ...",
    "FENCE": "... and FENCE.VIEW.ASYNC.S (also after mbarrier init)",
    "BAR": "bar.sync: __syncthreads (id 0) and the epilogue's named barrier (id 1, 128 threads)",
    "UTMASTG": "cp.async.bulk.tensor.2d.global.shared::cta (one per 64-column box)",
    "UTMACMDFLUSH": "cp.async.bulk.commit_group",
    "DEPBAR": "cp.async.bulk.wait_group.read 0 (DEPBAR.LE SB0, 0x0); the others wait for tcgen05.ld",
}


def tma_store_build(stages: int = 4, staging_in_ring: int = 1) -> _build.Build:
    """02 at NUM_STAGES = stages, the staging tile in stage 0 of the ring (1) or in its own 32 KB (0)."""
    return build(TMA_STAGE, stages, STAGING_IN_RING=int(staging_in_ring))


@lru_cache(maxsize=None)
def tma_store_facts(stages: int, staging_in_ring: int = 1) -> dict:
    """Compiled facts of 02 beside 01 at the same NUM_STAGES: registers, spills, SMEM, epilogue opcodes."""
    from . import sass
    b2, b1 = tma_store_build(stages, staging_in_ring), build("01_pipelined", stages)
    f2, h2, h1 = facts(b2), b2.histogram, b1.histogram
    m2, m1 = sass.opcode_histogram(b2.sass, modifiers=True), sass.opcode_histogram(b1.sass, modifiers=True)
    return {"stages": stages, "staging_in_ring": staging_in_ring, "registers": f2.registers,
            "registers_01": b1.facts.registers, "spills": f2.spills, "stack": f2.stack,
            "smem": f2.smem_total, "smem_01": b1.exports["smem_bytes"] + b1.facts.smem_static,
            "smem_limit": f2.smem_limit, "fits": f2.fits, "tmem_cols": f2.tmem_cols,
            "mma": h2.get(MMA_OPCODE, 0), "sf_copies": h2.get(SF_COPY_OPCODE, 0),
            "STS.128": m2.get("STS.128", 0), "STS.128_01": m1.get("STS.128", 0),
            "STG.E.128": m2.get("STG.E.128", 0), "STG.E.128_01": m1.get("STG.E.128", 0),
            **{op: h2.get(op, 0) for op in EPILOGUE_OPCODES}, **{f"{op}_01": h1.get(op, 0) for op in EPILOGUE_OPCODES}}


def _smem(b: _build.Build) -> tuple[int, bool]:
    total = b.exports["smem_bytes"] + b.facts.smem_static
    return total, total <= b.exports["smem_limit"]


def tma_store_budget(counts=STAGE_COUNTS):
    """Shared memory per NUM_STAGES: 01, 02 with the staging tile in the drained ring, 02 with its own (compiled)."""
    from .facts import Table, evidence_label
    rows = []
    for s in counts:
        (m1, _), (m2, f2), (m0, f0) = (_smem(build("01_pipelined", s)), _smem(tma_store_build(s, 1)),
                                       _smem(tma_store_build(s, 0)))
        r = {"smem_01": m1, "smem": m2, "fits": f2}
        o = {"smem": m0, "fits": f0}
        rows.append({"NUM_STAGES": s, "01 smem (B)": r["smem_01"],
                     "02, staging in the ring (B)": r["smem"], "fits (in the ring)": "yes" if r["fits"] else "NO",
                     "02, own 32 KB staging (B)": o["smem"], "fits (own)": "yes" if o["fits"] else "NO"})
    lim = tma_store_build(counts[0]).exports["smem_limit"]
    return Table(rows, f"Dynamic shared memory per NUM_STAGES, limit {lim} B (227 KB) — "
                       f"{evidence_label(tma_store_build(counts[0]))}")


def tma_store_fitting(staging_in_ring: int = 1, counts=STAGE_COUNTS) -> list[int]:
    """The NUM_STAGES values whose 02 build fits the 227 KB per block (compiled)."""
    return [s for s in counts if _smem(tma_store_build(s, staging_in_ring))[1]]


def tma_store_compare_table(counts=STAGE_COUNTS):
    """01 vs 02 per NUM_STAGES: registers, spills, the epilogue's stores and the MMA (compiled)."""
    from .facts import Table, evidence_label
    rows = []
    for s in counts:
        f = tma_store_facts(s)
        rows.append({"NUM_STAGES": s, "regs 01": f["registers_01"], "regs 02": f["registers"],
                     "spills 02": f["spills"], "STG 01": f["STG_01"], "STG 02": f["STG"],
                     "STS.128 02": f["STS.128"], "UTMASTG 02": f["UTMASTG"],
                     f"{MMA_OPCODE} 02": f["mma"], "smem 02 (B)": f["smem"], "fits": "yes" if f["fits"] else "NO"})
    return Table(rows, f"01_pipelined vs 02_tma_store_epilogue (staging in the ring), static SASS counts — "
                       f"{evidence_label(tma_store_build(counts[0]))}")


def epilogue_opcode_table(stages: int = 5):
    """The epilogue's SASS opcodes in 01 and 02 at one NUM_STAGES, with what each is (compiled)."""
    from .facts import Table, evidence_label
    f = tma_store_facts(stages)
    rows = [{"opcode": op, "01": f[f"{op}_01"], "02": f[op], "what": what} for op, what in EPILOGUE_OPCODES.items()]
    return Table(rows, f"NUM_STAGES={stages}: static instruction counts (the tcgen05.ld loop runs 4 times) — "
                       f"{evidence_label(tma_store_build(stages))}")


def staging_chunk_table(stages: int = 5, rows: int = 9, swizzle: int | None = None):
    """Which output columns each 16-B chunk slot of the first staging rows holds (from the exports)."""
    from .facts import Table
    p = tile_params(Layout.of(tma_store_build(stages)), 0)
    if swizzle is not None:
        p = p.with_(stage_swizzle=swizzle)
    out = []
    base = p.stage_smem_offset
    for r in range(rows):
        slots = {}
        for c in range(0, p.stage_box_cols, 8):
            a = int(staging_addresses(p, np.array(r), np.array(c))[0])
            slots[(a - base - r * p.stage_box_cols * p.out_elem_bytes) // 16] = f"{c}–{c + 7}"
        out.append({"row": r, **{f"slot {q}": slots.get(q, "") for q in range(p.stage_box_cols * 2 // 16)}})
    return Table(out, f"Box 0 of the staging tile: output columns in each 16-B slot of a 128-B row, "
                      f"stage_swizzle = {p.stage_swizzle} B — compiled (derived from the exports)")


def staging_wavefronts(stages: int = 5, swizzle: int | None = None, warp: int = 0, col: int = 0) -> int:
    """Modelled bank-conflict cost of one STS.128 of the epilogue: lane l of `warp` writes columns col..col+7
    of row 32*warp + l (pelib.staging.wavefronts: the most distinct 4-B words one of 32 banks serves)."""
    from .staging import wavefronts
    p = tile_params(Layout.of(tma_store_build(stages)), 0)
    if swizzle is not None:
        p = p.with_(stage_swizzle=swizzle)
    rows = 32 * warp + np.arange(32)[:, None] + np.zeros((1, 8), dtype=np.int64)
    cols = col + np.arange(8)[None, :] + np.zeros((32, 1), dtype=np.int64)
    return wavefronts(staging_addresses(p, rows, cols).reshape(32, -1))


def store_traffic_table(stages: int = 5):
    """What one warp's stores look like in 01 and 02 (modelled from the addresses the exports give)."""
    from .facts import Table
    lay = Layout.of(tma_store_build(stages))
    row_bytes = lay.tile_n * lay.out_elem_bytes
    rows = [{"epilogue": "01: st.global.v4, lane l -> row 32w + l",
             "per warp instruction": "32 rows x 16 B", "128-B global lines touched": 32,
             "shared-memory wavefronts": "—"},
            {"epilogue": "02: st.shared.v4 into the staging tile, swizzled (exported stage_swizzle)",
             "per warp instruction": "32 rows x 16 B", "128-B global lines touched": "—",
             "shared-memory wavefronts": staging_wavefronts(stages)},
            {"epilogue": "02 with stage_swizzle = 0 (not built: what the swizzle avoids)",
             "per warp instruction": "32 rows x 16 B", "128-B global lines touched": "—",
             "shared-memory wavefronts": staging_wavefronts(stages, swizzle=0)},
            {"epilogue": "02: UTMASTG, one box of 128 rows x 64 columns",
             "per warp instruction": f"{lay.stage_box_rows} rows x {lay.stage_box_cols * lay.out_elem_bytes} B",
             "128-B global lines touched": lay.stage_box_rows * lay.stage_box_cols * lay.out_elem_bytes // 128,
             "shared-memory wavefronts": "TMA engine"}]
    return Table(rows, f"One store instruction of the epilogue ({row_bytes}-B output rows) — modelled "
                       "(bank model: 32 banks x 4 B, 16-B accesses need at least 4 wavefronts)")


def tma_store_replay_table(counts=(1, 2, 5, 6)):
    """The emulator's replay of 02 (K loop, staging tile, TMA store) against the reference, and wrong layouts."""
    from .facts import Table
    cases = [(f"NUM_STAGES={s}", dict(stages=s)) for s in counts]
    cases += [("NUM_STAGES=5, STAGING_IN_RING=0", dict(stages=5, defines={"STAGING_IN_RING": 0})),
              ("wrong: stage_swizzle = 0 (map still 128 B)", dict(stages=5, overrides={"stage_swizzle": 0})),
              ("wrong: stage_swizzle = 64", dict(stages=5, overrides={"stage_swizzle": 64})),
              ("wrong: stage_box_cols = 32 (64-B box rows)", dict(stages=5, overrides={"stage_box_cols": 32})),
              ("wrong: staging 512 B off its 1024-B alignment", dict(stages=5, overrides={"stage_smem_offset": 512})),
              ("not wrong: stage_box_rows = 32 (8 stores, same bytes)",
               dict(stages=5, overrides={"stage_box_rows": 32})),
              ("wrong: both swizzles 64 B", dict(stages=5, overrides={"stage_swizzle": 64, "out_swizzle": 64}))]
    rows = []
    for name, kw in cases:
        r = emulate_check(TMA_STAGE, kw["stages"], overrides=kw.get("overrides"), defines=kw.get("defines"))
        issues = r.get("issues", [])
        code = [i for i in issues if "staging_layout_hash" in i]
        what = " ".join((r.get("error") or "; ".join(i for i in issues if i not in code) or "").split())
        rows.append({"case": name, "matches the reference": "yes" if r["ok"] else "NO",
                     "max |err|": f"{r['max_abs_err']:.3g}" if "max_abs_err" in r else "—",
                     "elements off": r.get("elements_off_by_more_than_1ulp", "—"),
                     "kernel code = exports": "—" if "error" in r else ("NO" if code else "yes"),
                     "emulator says": what[:120]})
    return Table(rows, "02 replayed by pelib.emulate from its exports, tile (0, 1) of 128 x 256 x 2048 "
                       "(8 K tiles) — emulated")


def tma_store_live_table(stages: int = 5, shapes=SHAPES, *, iters: int = 30):
    """On a B200: 01 and 02 verified (poisoned output) and timed at one NUM_STAGES per shape (measured).
    Elsewhere: one row per shape saying it is not measured yet, and why."""
    from .facts import Table
    if not live():
        from . import device
        info = device.current()
        here = info.describe() if info.present else "no CUDA GPU"
        rows = [{"shape": sh, "01 µs": "—", "02 µs": "—",
                 "evidence": f"not yet measured: needs an sm_100 GPU (B200), this machine has {here}"}
                for sh in shapes]
        return Table(rows, f"01 vs 02 at NUM_STAGES={stages} on a B200 — not measured on this machine")
    from . import bench
    env = bench.environment()
    rows = []
    for sh in shapes:
        x = _problem(sh).make_inputs(0, device="cuda")
        row = {"shape": sh}
        for stage, tag in (("01_pipelined", "01"), (TMA_STAGE, "02")):
            ok = check(sh, stage, stages, inputs=x).ok
            r = time_stage(sh, stage, stages, iters=iters, inputs=x)
            row[f"{tag} µs"] = f"{r['us']:.2f}" + ("" if ok else " (FAILED verification)")
        row["evidence"] = f"measured ({env['device']}, {env['date'][:10]})"
        rows.append(row)
    return Table(rows, f"01 vs 02 at NUM_STAGES={stages}, verified then timed (L2 flushed, median of {iters})")


def epilogue_sass(stage: str = TMA_STAGE, stages: int = 5, ops=("LDTM", "STG", "STS.128", "MEMBAR", "FENCE",
                  "BAR.SYNC", "ELECT", "UTMASTG", "UTMACMDFLUSH", "DEPBAR")):
    """The epilogue's SASS, from the tcgen05.ld (LDTM) to the __syncthreads before the TMEM dealloc, only
    the opcodes `ops` (compiled)."""
    from . import sass
    from .stages import Rendered
    ins = sass.instructions(build(stage, stages).sass)
    start = next(i for i, (_, op, _) in enumerate(ins) if op.startswith("LDTM"))
    end = next(i for i in range(start, len(ins)) if ins[i][1].startswith("BAR.SYNC") and "0x0 ;" in ins[i][2])
    keep = [f"/*{off:04x}*/  {text.split(';')[0].split('*/', 1)[-1].strip()} ;"
            for off, op, text in ins[start:end + 1] if op.startswith(tuple(ops))]
    return Rendered("\n".join(keep), "text", f"{_label(stage, stages)}: the epilogue's SASS ({', '.join(ops)}) — "
                                              "compiled")


def pitch_estimates_table():
    """The pitch's per-tile epilogue estimates, row by row, with their totals (the pitch's claims)."""
    from . import records
    from .facts import Table
    rows, tot = [], {}
    for e in records.tma_store_estimates():
        rows.append({"epilogue": e.variant, "operation": e.operation, "cycles (claimed)": e.cycles,
                     "section": e.source.section})
        tot[e.variant] = tot.get(e.variant, 0) + e.cycles
    for v, t in tot.items():
        rows.append({"epilogue": v, "operation": "total", "cycles (claimed)": t, "section": ""})
    return Table(rows, f"Epilogue of one dual-GEMM tile — {PITCH_EVIDENCE}; estimates, nobody measured them")


def pitch_estimates_figure():
    """pelib.plots' stacked bars of the pitch's estimates, labelled as the pitch's claims."""
    from . import records
    from .views import plots
    data: dict = {}
    for e in records.tma_store_estimates():
        data.setdefault(e.variant, {})[e.operation] = e.cycles
    return plots.phase_bars(data, "recorded", f"claim of {PITCH_NOTE}",
                            title="NVFP4 dual-GEMM epilogue per tile, the pitch's estimates")


def pitch_in_context(clock_ghz=(1.0, 2.0)):
    """The pitch's 510 -> 130 cycles per tile against this kernel's recorded times (one tile per CTA).

    Evidence: modelled from a claim and recorded times. The B200 clock is not in its datasheet
    (book/data/gpu_specs.yaml), so the cycles are converted at both ends of `clock_ghz`.
    """
    from . import records
    from .facts import Table
    tot: dict = {}
    for e in records.tma_store_estimates():
        tot[e.variant] = tot.get(e.variant, 0) + e.cycles
    simt, tma = tot["SIMT"], tot["TMA store"]
    saved = simt - tma
    rec = recorded_sweep()
    lo, hi = clock_ghz
    rows = []
    for shape in SHAPES:
        us = rec[shape][5]
        rows.append({"shape": shape, "recorded µs (5 stages)": f"{us:.1f}",
                     "epilogue per CTA, claimed (µs)": f"{simt / (hi * 1e3):.2f}–{simt / (lo * 1e3):.2f}",
                     "saving if the claim holds (µs)": f"{saved / (hi * 1e3):.2f}–{saved / (lo * 1e3):.2f}",
                     "share of the kernel (%)":
                         f"{100 * saved / (hi * 1e3) / us:.1f}–{100 * saved / (lo * 1e3) / us:.1f}"})
    return Table(rows, f"The claimed {simt} -> {tma} cycles at {lo}–{hi} GHz, one 128x128 tile per CTA — modelled "
                       f"(from {PITCH_EVIDENCE} and recorded ({RECORD_NOTE}))")



def main(argv=None) -> int:
    """`python -m pelib.nvfp4`: on a B200, verify every stage on the small and lab shapes, then time the sweep."""
    import argparse
    import json
    ap = argparse.ArgumentParser(prog="python -m pelib.nvfp4", description=main.__doc__)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-save", action="store_true", help="do not write bench/results/*.json")
    ap.add_argument("--stage", default="01_pipelined", choices=[k for k in STAGES if k != "00_single_stage"],
                    help="the stage whose NUM_STAGES sweep is verified and timed")
    a = ap.parse_args(argv)
    if not live():
        from . import device
        print(device.banner_text("sm_100a"))
        print(stage_table())
        return 0
    from . import problems
    ring = problems.NvFp4Gemm("ring", 128, 256, 2048)
    ok = True
    fitting = [s for s in STAGE_COUNTS if facts(build(a.stage, s)).fits]
    for stage, s in [("00_single_stage", None)] + [(a.stage, s) for s in fitting]:
        rep = check(ring, stage, s)
        ok &= rep.ok
        print(rep)
    res = measure_sweep(iters=a.iters, save=not a.no_save, stage=a.stage)
    if a.stage == "01_pipelined":
        print(sweep_table(res))
    else:
        env = res["env"]
        print(f"{a.stage}: measured ({env['device']}, {env['date'][:10]}), µs per shape and NUM_STAGES")
    print(json.dumps({"us": res["us"], "verified": res["verified"], "path": res.get("path")}, indent=1, default=str))
    return 0 if ok and all(v for d in res["verified"].values() for v in d.values()) else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
