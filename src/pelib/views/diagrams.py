"""Drawn diagrams of a stage, generated from its exports as SVG: the data path (TMA -> ring -> MMA ->
accumulators -> epilogue -> staging -> stores), the warp-role map, the TMEM allocation map, the 2-CTA
pair and its multicast, and the persistent tile schedule.

    diagrams.data_path("fp8/09_persistent_megakernel")
    diagrams.roles("sm90/11_a_half_slices")

Every number drawn is read from the stage's cubin (`PELIB_EXPORT`, common/export.cuh) or its launch
set-up, so a diagram stays true when the stage changes; the caption names the build (compiled). The
SVG carries real text (searchable, selectable) at >= 11 user units in a view box no wider than the
book's column, so it never renders below 9 CSS px there.

Over 700 lines: every drawn diagram shares the SVG primitives and the reader of the stage's exports.
"""
from __future__ import annotations

import html
import itertools
import os
from dataclasses import dataclass

from .. import events as _events, evidence
from ..sim import runs as sim_runs
from ..facts import evidence_label
from ..kinds.fp8 import epi_columns
from ..stage import Stage

WIDTH = 700            # view-box width: the book's column is about this wide, so 1 unit ~ 1 CSS px
FONT = 12              # body text; titles 13, small notes 11 (the smallest drawn)
SMALL = 11
# One colour per job, the same in every diagram; TMEM lane quarters (warp % 4) always in these four.
COLOURS = {"global": "#e8eaed", "tma": "#4c78a8", "ring": "#9ecae9", "mma": "#f58518", "tmem": "#eeca3b",
           "acc": "#fde9a9", "epi": "#54a24b", "staging": "#b279a2", "store": "#72b7b2", "idle": "#d0d0d0",
           "regs": "#fde9a9", "sf": "#ff9da6"}
QUARTER = ("#4c78a8", "#f58518", "#54a24b", "#e45756")   # lanes 0-31, 32-63, 64-95, 96-127
_ids = itertools.count()


class DiagramError(ValueError):
    """The stage lacks what a diagram draws (e.g. a CTA pair of a one-CTA stage); the message says which."""


# ---- a small SVG writer -------------------------------------------------------------------------

class Svg:
    def __init__(self, width: int = WIDTH, height: int = 200, label: str = ""):
        self.w, self.h, self.label = width, height, label
        self.items: list[str] = []
        self.uid = f"pe-d{os.getpid()}-{next(_ids)}"

    def rect(self, x, y, w, h, fill, stroke="#444", rx=4, sw=1.0, dash=None, opacity=None):
        extra = (f' stroke-dasharray="{dash}"' if dash else "") + (f' fill-opacity="{opacity}"' if opacity else "")
        self.items.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
                          f'fill="{fill}" stroke="{stroke}" stroke-width="{sw}"{extra}/>')

    def text(self, x, y, s, size=FONT, anchor="middle", weight="normal", fill="#1b1f23", italic=False):
        style = ' font-style="italic"' if italic else ""
        self.items.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                          f'font-weight="{weight}" fill="{fill}"{style}>{html.escape(str(s))}</text>')

    def lines(self, x, y, rows, size=FONT, anchor="middle", first_bold=True, gap=None, fill="#1b1f23"):
        gap = gap or size + 3
        for i, r in enumerate(rows):
            self.text(x, y + i * gap, r, size=size if i or not first_bold else size + 1, anchor=anchor,
                      weight="bold" if (i == 0 and first_bold) else "normal", fill=fill)

    def arrow(self, x1, y1, x2, y2, label="", color="#333", dash=None, label_dx=0, label_dy=-5, size=SMALL,
              anchor="middle"):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.items.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                          f'stroke-width="1.6" marker-end="url(#{self.uid}-arrow)"{d}/>')
        if label:
            self.text((x1 + x2) / 2 + label_dx, (y1 + y2) / 2 + label_dy, label, size=size, anchor=anchor,
                      fill="#333")

    def path(self, d, color="#333", dash=None, arrow=True):
        da = f' stroke-dasharray="{dash}"' if dash else ""
        m = f' marker-end="url(#{self.uid}-arrow)"' if arrow else ""
        self.items.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6"{m}{da}/>')

    def render(self) -> str:
        defs = (f'<defs><marker id="{self.uid}-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>')
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.w} {self.h}" width="100%" '
                f'style="max-width:{self.w}px;height:auto" role="img" aria-label="{html.escape(self.label, quote=True)}" '
                f'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif">{defs}{"".join(self.items)}</svg>')


@dataclass
class Diagram:
    """One drawn diagram: its SVG and a caption that names what it shows and where its numbers come from."""

    kind: str
    stage: str
    svg: str
    caption: str

    def _repr_html_(self) -> str:
        return (f'<figure class="pe-diagram" data-kind="{self.kind}" data-stage="{html.escape(self.stage)}">'
                f'{self.svg}<figcaption class="pe-diagram-caption">{html.escape(self.caption)}</figcaption></figure>')

    def __repr__(self) -> str:
        return f"<{self.kind} diagram of {self.stage}: {self.caption}>"


def _stage(stage, defines=None) -> Stage:
    if isinstance(stage, Stage):
        return stage.with_defines(**defines) if defines else stage
    return Stage(stage, defines)


def _caption(what: str, s: Stage, extra: str = "") -> str:
    return (f"{what} of {s.key}{' ' + s.label.split(' ', 1)[1] if s.defines else ''}, drawn from its exports"
            f"{extra} — {evidence_label(s.build)}")


def _wrap(text: str, width: int) -> list[str]:
    """Words of `text` on lines of at most `width` characters (a box's text never leaves the box)."""
    out, cur = [], ""
    for w in str(text).split(" "):
        if cur and len(cur) + 1 + len(w) > width:
            out.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return out + ([cur] if cur else [])


def _kb(n: int) -> str:
    return f"{n // 1024} KB" if n % 1024 == 0 else f"{n / 1024:.1f} KB"


def _fmt_of(s: Stage) -> str:
    return {"nvfp4": "NVFP4 (E2M1)"}.get(s.family, "FP8 E4M3")


_DTYPE_NAMES = {"torch.float16": "FP16", "torch.bfloat16": "BF16", "torch.float32": "FP32"}


def _out_dtype(s: Stage) -> str:
    """The output's element type as the stage's kind allocates it (its 'out' tensor on the small
    problem): FP16 for the NVFP4 GEMM, BF16 for the patch embedding. Read, never assumed per family."""
    t = s.kind.inputs(s.kind.problem("small"), 0, "cpu")["out"]
    return _DTYPE_NAMES.get(str(t.dtype), str(t.dtype).removeprefix("torch."))


def _tcgen05(ex) -> bool:
    return ex.get("mma_arch", 100) != 90 and "idesc" in ex


# ---- the data path ------------------------------------------------------------------------------

def _nodes(s: Stage) -> list[tuple[str, str, list[str]]]:
    """(colour key, title, lines) per box of the data path, in the order data flows."""
    ex = s.exports
    ns, cg = ex.pipeline_stages, ex.get("cta_group", 1)
    blackwell = s.arch == "sm_100a"
    out = _out_dtype(s)
    nodes = []
    src = [f"A [M×K], B [N×K]", _fmt_of(s) + ", K-major"]
    if "sfa_smem_offset" in ex:
        src.append(f"+ scale factors (1 per {ex['sf_vec']})")
    nodes.append(("global", "global memory", src))
    tma = [f"box A {ex['a_box_m']}×{ex['a_box_k']}, B {ex['b_box_n']}×{ex['b_box_k']}",
           f"swizzle {ex.get('a_swizzle', ex.get('tmap_a_swizzle'))} B"]
    if blackwell:
        who = "warp 0, one thread" if ex.num_threads > 128 else "thread 0"
    else:
        prod = ex.num_threads // 128 - ex.epi_warps // 4
        who = "producer warpgroup" if prod else "thread 0"
        if ex.get("producer_regs"):
            who += f", {ex['producer_regs']} regs"
    if cg == 2:
        tma.append("each CTA its half")
    elif ex.cluster_x > 1:
        tma.append(f"multicast to {ex.cluster_x} CTAs")
    nodes.append(("tma", f"TMA ({who})", tma))
    stage_bytes = ex.get("stage_bytes") or (ex.get("a_stage_bytes") or ex.get("a_stage_stride", 0)) + \
        (ex.get("b_stage_bytes") or ex.get("b_stage_stride", 0))
    if not stage_bytes:
        stage_bytes = ex["a_box_m"] * ex["a_box_k"] + ex["b_box_n"] * ex["b_box_k"]
    ring = [f"{_kb(stage_bytes)} each (A + B{' + SF' if 'sfa_smem_offset' in ex else ''})"]
    slices = _resident_b_slices(ex)
    if slices:   # B loaded once, every K slice below the ring: the slots carry A only
        ring = [f"{_kb(ex['a_stage_stride'])} each (A only)", f"B resident: {slices} × {_kb(ex['b_stage_stride'])}"]
    nodes.append(("ring", f"shared memory: {ns} slot{'s' if ns > 1 else ''}",
                  ring + ["full[s] / empty[s]" if ns > 1 else "one mbarrier"]))
    if blackwell:
        kind = {6: "mxf4nvf4"}.get(ex.get("mma_kind"), "f8f6f4")
        m, n, k = ex.get("mma_m", ex.tile_m), ex.get("mma_n", ex.tile_n), ex.get("mma_k", 32 if kind != "mxf4nvf4" else 64)
        who = "warp 1, one thread" if ex.num_threads > 128 else "thread 0"
        nodes.append(("mma", f"tcgen05.mma ({who})",
                      [f"kind::{kind}, {m}×{n}×{k}", f"{ex.block_k // k} per slot" + (", cta_group::2" if cg == 2 else ""),
                       "leader CTA issues" if cg == 2 else "commit -> mbarrier"]))
        bufs = ex.get("tmem_acc_buffers", 1)
        tm = [f"{ex['tmem_cols']} columns × 128 lanes", f"{bufs} accumulator{'s' if bufs > 1 else ''} × {ex.tile_n} cols"]
        if "sfa_tmem_col" in ex:
            tm.append(f"scale factors at col {ex['sfa_tmem_col']}, {ex['sfb_tmem_col']}")
        nodes.append(("tmem", "tensor memory (TMEM)", tm))
        epi = [f"tcgen05.ld 32x32b.x{ex['epi_ld_x']}"]
        epi.append(("+ comb, -> " if s.family == "fp8" else "-> ") + out)
        w0 = ex.get("epi_warp0", 0)
        nodes.append(("epi", f"epilogue: {ex.epi_warps} warps ({w0}–{w0 + ex.epi_warps - 1})", epi))
    else:
        cons = ex.epi_warps // 4
        regs = f", {ex['consumer_regs']} regs" if ex.get("consumer_regs") else ""
        nodes.append(("mma", f"wgmma: {cons} consumer warpgroup{'s' if cons > 1 else ''}{regs}",
                      [f"m{ex['mma_m']}n{ex['mma_n']}k32 e4m3", f"{ex.block_k // 32} per slot" +
                       (", ping-pong" if ex.get("pingpong") else "")]))
        per_wg = ex["mma_m"] * ex.get("wg_m", 1) * ex["mma_n"]
        nodes.append(("regs", "accumulators in registers",
                      [f"{ex['mma_m'] * ex.get('wg_m', 1)}×{ex['mma_n']} FP32 per warpgroup",
                       f"{per_wg // 128} per thread"]))
        nodes.append(("epi", "epilogue (the consumers)", [f"+ comb, -> {out}"]))
    if "staging_offset" in ex:
        halves = ex.get("staging_halves", 1)
        tile = f"tile {ex.tile_m * ex.cluster_x if cg == 2 else ex.tile_m}×{ex.tile_n}"
        if ex.get("staging_tma_store"):   # F24: swizzled blocks, one TMA store per half
            nodes.append(("staging", "staging (shared)", [f"{ex.epi_warps} × {_kb(ex['staging_warp_bytes'])}",
                                                          f"{halves} halves, {ex['staging_block_cols']}-column "
                                                          f"blocks, swizzle {ex['staging_swizzle']} B"]))
            nodes.append(("store", f"global C ({out})", ["TMA store per half", tile]))
        else:
            nodes.append(("staging", "staging (shared)", [f"{ex.epi_warps} × {_kb(ex['staging_warp_bytes'])}",
                                                          f"{halves} × 32 rows, pitch {ex['staging_pitch']} B"]))
            nodes.append(("store", f"global C ({out})", [f"{ex.get('staging_vec', 16)}-B coalesced stores", tile]))
    elif "tmap_c_box_rows" in ex:
        where = " (in the ring)" if ex.get("staging_in_ring") else ""
        nodes.append(("staging", f"staging (shared){where}", [f"boxes {ex['tmap_c_box_rows']}×{ex['tmap_c_box_cols']}",
                                                              f"swizzle {ex['tmap_c_swizzle']} B"]))
        nodes.append(("store", f"global C ({out})", ["TMA store", "cp.async.bulk.tensor"]))
    else:
        nodes.append(("store", f"global C ({out})", ["st.global, one row", "per thread (lane)"]))
    return nodes


def _resident_b_slices(ex) -> int:
    """K slices of a B that stays in shared memory (the sm90 stages from 03b): the exports place every slice
    of max_k below A's ring; 0 when B travels through the ring."""
    if not ex.get("max_k") or not ex.get("b_stage_stride") or ex.get("b_box_k") is None:
        return 0
    n = ex["max_k"] // ex["b_box_k"]
    return n if ex["a_smem_offset"] - ex["b_smem_offset"] == n * ex["b_stage_stride"] else 0


def _labels(s: Stage, n: int) -> list[str]:
    """What travels along each arrow of the data path (the barrier or instruction that hands it on)."""
    ex = s.exports
    acc = "acc_full[b]" if "tmem_acc_buffers" in ex else ("mma_done" if s.arch == "sm_100a" else "")
    ring = "full[s]" if ex.pipeline_stages > 1 else "full"
    if s.arch == "sm_100a":
        out = ["TMA load", "expect_tx", ring, "MMA", acc or "commit", "st.shared", "store"]
    else:
        out = ["TMA load", "expect_tx", ring, "wgmma", "wait_group", "st.shared", "TMA store"]
    if "staging_offset" not in ex and "tmap_c_box_rows" not in ex:
        out = out[:5] + ["st.global"]
    return out[:n - 1]


def data_path(stage, defines: dict | None = None) -> Diagram:
    """Boxes in the order the data flows, three to a row (a snake), the stage's numbers in each, and on each
    arrow what hands the data on."""
    s = _stage(stage, defines)
    nodes = _nodes(s)
    labels = _labels(s, len(nodes))
    per_row, bw, gx, gy, top = 3, 178, 72, 34, 10
    texts = [(_wrap(title, 21), [x for ln in lines for x in _wrap(ln, 27)]) for _, title, lines in nodes]
    bh = max(14 + 15 * (len(t) + len(ls)) for t, ls in texts)
    rows = (len(nodes) + per_row - 1) // per_row
    svg = Svg(WIDTH, top + rows * bh + (rows - 1) * gy + 8, f"data path of {s.key}")
    pos = []
    for i, _ in enumerate(nodes):
        r, c = divmod(i, per_row)
        c = c if r % 2 == 0 else per_row - 1 - c
        pos.append((12 + c * (bw + gx), top + r * (bh + gy)))
    for i, ((col, _, _), (title, lines), (x, y)) in enumerate(zip(nodes, texts, pos)):
        dark = col in ("tma", "mma", "epi", "staging")
        tc = "#ffffff" if dark else "#1b1f23"
        svg.rect(x, y, bw, bh, COLOURS[col])
        for j, t in enumerate(title):
            svg.text(x + bw / 2, y + 17 + 15 * j, t, size=FONT, weight="bold", fill=tc)
        for j, t in enumerate(lines):
            svg.text(x + bw / 2, y + 17 + 15 * (len(title) + j), t, size=SMALL, fill=tc)
        if i:
            (px, py), lab = pos[i - 1], labels[i - 1]
            if py == y:   # same row: left or right
                if px < x:
                    svg.arrow(px + bw, py + bh / 2, x - 2, y + bh / 2, lab)
                else:
                    svg.arrow(px, py + bh / 2, x + bw + 2, y + bh / 2, lab)
            else:
                svg.arrow(px + bw / 2, py + bh, x + bw / 2, y - 2, lab, label_dx=6, label_dy=4, anchor="start")
    extra = f", {s.exports.pipeline_stages}-slot ring"
    return Diagram("data path", s.key, svg.render(), _caption("The data path", s, extra))


# ---- the warp-role map ----------------------------------------------------------------------------

def _roles(s: Stage) -> list[tuple[str, str, str]]:
    """(colour key, role, note) per warp of one CTA (Blackwell) or per warpgroup (Hopper)."""
    ex = s.exports
    warps = ex.num_threads // 32
    out = []
    if s.arch == "sm_100a":
        w0 = ex.get("epi_warp0", 0)
        for w in range(warps):
            if w0 == 0:   # one warpgroup does everything (NVFP4 00-02): thread 0 issues TMA and MMA
                role = ("epi", "TMA + MMA, epilogue" if w == 0 else "epilogue", f"lanes {32 * (w % 4)}–{32 * (w % 4) + 31}")
            elif w == 0:
                role = ("tma", "producer (TMA)", "one thread")
            elif w == 1:
                role = ("mma", "MMA issuer", "TMEM alloc")
            elif w0 <= w < w0 + ex.epi_warps:
                role = ("epi", "epilogue", f"lanes {32 * (w % 4)}–{32 * (w % 4) + 31}")
            else:
                role = ("idle", "idle", "")
            out.append(role)
        return out
    cons = ex.epi_warps // 4
    prod = warps // 4 - cons
    for g in range(warps // 4):
        ws = f"warps {4 * g}–{4 * g + 3}"
        if prod and g == 0:
            regs = f", setmaxnreg {ex['producer_regs']}" if ex.get("producer_regs") else ""
            out.append(("tma", f"producer ({ws})", f"one thread issues TMA{regs}"))
            continue
        c = g - prod
        regs = f", setmaxnreg {ex['consumer_regs']}" if ex.get("consumer_regs") else ""
        what = "consumer" if prod else "TMA + wgmma + epilogue"
        if ex.get("pingpong"):
            job = f"every {'even' if c == 0 else 'odd'} tile, {ex.tile_m} rows"
        else:
            rows = ex["mma_m"] * ex.get("wg_m", 1)
            job = f"rows {c * rows}–{c * rows + rows - 1} of the tile"
        out.append(("mma", f"{what} {c} ({ws})", job + regs))
    return out


def roles(stage, defines: dict | None = None) -> Diagram:
    """One box per warp of a CTA (of each CTA of a pair), coloured by job; epilogue warps name the TMEM lane
    quarter (warp % 4) they may read. Hopper stages: one box per warpgroup (wgmma's unit)."""
    s = _stage(stage, defines)
    ex = s.exports
    rr = _roles(s)
    ctas = ex.get("cta_group", 1) if s.arch == "sm_100a" else 1
    n = len(rr)
    x0 = 96 if s.arch == "sm_100a" else 12
    cell = min(96 if s.arch == "sm_100a" else 226, (WIDTH - x0 - 8) // n)
    chars = max(8, int(cell / 6.4))
    wrapped = [(_wrap(role, chars), _wrap(note, chars)) for _, role, note in rr]
    h_row = 14 + 14 * max(len(a) + len(b) for a, b in wrapped) + (18 if s.arch == "sm_100a" else 4)
    svg = Svg(WIDTH, 24 + ctas * (h_row + 14) + 4, f"warp roles of {s.key}")
    for c in range(ctas):
        y = 24 + c * (h_row + 14)
        if s.arch == "sm_100a":
            svg.text(8, y + h_row / 2 + 4, f"CTA {c}" + (" (leader)" if ctas == 2 and c == 0 else ""),
                     size=SMALL, anchor="start", weight="bold")
        for w, ((col, _, _), (role, note)) in enumerate(zip(rr, wrapped)):
            x = x0 + w * cell
            fill = QUARTER[w % 4] if (col == "epi" and s.arch == "sm_100a") else COLOURS[col]
            peer_mma = col == "mma" and ctas == 2 and c == 1
            if peer_mma:   # the peer's warp 1 allocates and frees its TMEM; the leader issues every MMA
                role, note = ["no MMA"], ["TMEM alloc"]
            svg.rect(x + 2, y, cell - 4, h_row, fill, opacity=0.5 if peer_mma else None)
            tc = "#1b1f23" if (col in ("idle",) or peer_mma) else "#ffffff"
            yy = y + 16
            if s.arch == "sm_100a":
                svg.text(x + cell / 2, yy, f"warp {w}", size=FONT, weight="bold", fill=tc)
                yy += 16
            for j, t in enumerate(role):
                svg.text(x + cell / 2, yy + 14 * j, t, size=SMALL if s.arch == "sm_100a" else FONT,
                         weight="normal" if s.arch == "sm_100a" else "bold", fill=tc)
            for j, t in enumerate(note):
                svg.text(x + cell / 2, yy + 14 * (len(role) + j), t, size=SMALL, fill=tc)
    if s.arch == "sm_100a":
        svg.text(x0, 14, "epilogue warps coloured by the TMEM lane quarter they read (warp % 4)", size=SMALL,
                 anchor="start", fill="#444")
    else:
        svg.text(x0, 14, "four warps make a warpgroup, the unit wgmma and setmaxnreg work on", size=SMALL,
                 anchor="start", fill="#444")
    return Diagram("roles", s.key, svg.render(), _caption(f"The warps of one CTA ({ex.num_threads} threads)", s))


# ---- the TMEM allocation map ------------------------------------------------------------------------

def tmem_map(stage, defines: dict | None = None) -> Diagram:
    """TMEM as 128 lanes × 512 columns: what the stage allocates, where its accumulator(s) and scale
    factors sit, and which lanes and columns each epilogue warp drains (coloured by lane quarter)."""
    s = _stage(stage, defines)
    ex = s.exports
    if s.arch != "sm_100a":
        raise DiagramError(f"{s.key} is a Hopper stage: its accumulators live in registers, not TMEM")
    x0, y0, w, h = 70, 40, WIDTH - 90, 200
    col_w = w / 512
    svg = Svg(WIDTH, y0 + h + 62, f"TMEM map of {s.key}")
    svg.rect(x0, y0, w, h, "#f6f7f9", stroke="#999", rx=0)
    alloc = ex["tmem_cols"]
    svg.rect(x0, y0, alloc * col_w, h, "none", stroke="#222", rx=0, sw=2, dash="5,3")
    svg.text(x0 + alloc * col_w - 4, y0 - 6, f"allocated: {alloc} columns", size=SMALL, anchor="end", weight="bold")
    for q in range(4):
        svg.text(x0 - 6, y0 + (q + 0.5) * h / 4 + 4, f"{32 * q}–{32 * q + 31}", size=SMALL, anchor="end")
    svg.text(8, y0 - 6, "lanes", size=SMALL, anchor="start", weight="bold")
    bufs, stride, acc0 = ex.get("tmem_acc_buffers", 1), ex.get("tmem_acc_stride", ex.tile_n), ex.get("tmem_acc_col", 0)
    width_cols = ex.get("mma_n", ex.tile_n) if ex.get("cta_group", 1) == 1 else ex.tile_n
    cols = epi_columns(ex) if "epi_warp0" in ex and ex.get("epi_warp0") else \
        {w_: (0, width_cols) for w_ in range(ex.epi_warps)}
    for b in range(bufs):
        base = acc0 + b * stride
        for w_, (c0, c1) in cols.items():
            q = w_ % 4
            svg.rect(x0 + (base + c0) * col_w + 1, y0 + q * h / 4 + 1, (c1 - c0) * col_w - 2, h / 4 - 2, QUARTER[q],
                     stroke="#fff", rx=1, opacity=0.85)
            if (c1 - c0) * col_w > 60:
                svg.text(x0 + (base + (c0 + c1) / 2) * col_w, y0 + (q + 0.5) * h / 4 + 4, f"warp {w_}",
                         size=SMALL, fill="#fff", weight="bold")
        svg.text(x0 + (base + width_cols / 2) * col_w, y0 + h + 16,
                 f"accumulator {b}: cols {base}–{base + width_cols - 1}" if bufs > 1 else
                 f"accumulator: cols {base}–{base + width_cols - 1}", size=SMALL)
    if "sfa_tmem_col" in ex:   # per ring slot s: SFA at sfa_tmem_col + s * tmem_stage_cols, then SFB
        a, b, step, ns = ex["sfa_tmem_col"], ex["sfb_tmem_col"], ex["tmem_stage_cols"], ex.pipeline_stages
        for st in range(ns):
            for c0, c1, name in ((a, b, "SFA"), (b, a + step, "SFB")):
                svg.rect(x0 + (c0 + st * step) * col_w, y0, (c1 - c0) * col_w, h,
                         COLOURS["sf"] if name == "SFA" else "#c9637a", stroke="#fff", rx=0, sw=0.5)
        svg.text(x0 + (a + ns * step) * col_w + 6, y0 + h / 2 + 4,
                 f"scale factors: {ns} slot{'s' if ns > 1 else ''} × (SFA {b - a} + SFB {a + step - b} cols)",
                 size=SMALL, anchor="start")
    for c in (0, 128, 256, 384, 512):
        svg.text(x0 + c * col_w, y0 + h + 46, str(c), size=SMALL)
    svg.text(x0 + w / 2, y0 + h + 58, "column (32-bit each)", size=SMALL, fill="#444")
    return Diagram("TMEM map", s.key, svg.render(),
                   _caption("Tensor memory (128 lanes × 512 columns per SM)", s,
                            "; a warp may read only the 32 lanes of its quarter, warp % 4"))


# ---- the 2-CTA pair ---------------------------------------------------------------------------------

def cta_pair(stage, defines: dict | None = None) -> Diagram:
    """The two CTAs of a cta_group::2 cluster: each holds half of A and half of B at the same offsets; the
    leader's one MMA reads both; its multicast commit frees the slot (and hands over the accumulator)
    in both; each CTA's TMEM holds its own rows."""
    s = _stage(stage, defines)
    ex = s.exports
    if ex.get("cta_group", 1) != 2:
        raise DiagramError(f"{s.key} runs one CTA per tile (cta_group::1): there is no pair to draw")
    bm, tn, ns = ex.tile_m, ex.tile_n, ex.pipeline_stages
    svg = Svg(WIDTH, 300, f"CTA pair of {s.key}")
    cw, gap = 300, 60
    acc_bar = "acc_full[b]" if "tmem_acc_buffers" in ex else "mma_done"
    for c in range(2):
        x = 20 + c * (cw + gap)
        svg.rect(x, 10, cw, 270, "#fafafa", stroke="#666")
        svg.text(x + cw / 2, 28, f"CTA {c} ({'leader, even rank' if c == 0 else 'peer, odd rank'})", weight="bold")
        svg.rect(x + 12, 40, cw - 24, 62, COLOURS["ring"])
        svg.lines(x + cw / 2, 58, [f"shared memory, {ns} slots", f"A rows {c * bm}–{c * bm + bm - 1} of the tile",
                                   f"B rows {c * tn // 2}–{c * tn // 2 + tn // 2 - 1}"], size=SMALL)
        svg.rect(x + 12, 122, cw - 24, 40, COLOURS["mma"] if c == 0 else "#f3d2b3")
        svg.text(x + cw / 2, 146, "tcgen05.mma 256×%d×32, issued here" % ex["mma_n"] if c == 0 else
                 "no MMA issued (the leader's reads here)", size=SMALL, fill="#fff" if c == 0 else "#1b1f23")
        svg.rect(x + 12, 184, cw - 24, 44, COLOURS["tmem"])
        svg.lines(x + cw / 2, 201, [f"TMEM: rows {c * bm}–{c * bm + bm - 1} of the accumulator",
                                    f"all {tn} columns"], size=SMALL, first_bold=False)
        svg.rect(x + 12, 240, cw - 24, 30, COLOURS["epi"])
        svg.text(x + cw / 2, 260, f"{ex.epi_warps} epilogue warps: this CTA's {bm} rows", size=SMALL, fill="#fff")
    # the leader's MMA reads the peer's shared memory at the same offsets
    svg.path(f"M {20 + cw - 12} 142 C {20 + cw + 40} 142, {20 + cw + gap - 30} 80, {20 + cw + gap + 12} 75",
             color=COLOURS["mma"])
    svg.text(20 + cw + gap / 2, 112, "reads", size=SMALL)
    # the leader's MMA writes both CTAs' TMEM (its own rows and the peer's); the commit is not drawn as an
    # arrow into TMEM: tcgen05.commit.cta_group::2.multicast::cluster arrives on the mbarrier at the same
    # offset in each CTA of the mask (PTX ISA, tcgen05.commit), here empty[s] and the accumulator barrier
    svg.path(f"M {20 + cw / 2 + 40} 162 L {20 + cw / 2 + 40} 182", color="#333")
    svg.path(f"M {20 + cw - 12} 158 C {20 + cw + 60} 200, {20 + cw + gap - 40} 200, {20 + cw + gap + 12} 200",
             color="#333", dash="4,3")
    svg.text(20 + cw + gap / 2, 224, "writes", size=SMALL)
    svg.text(20 + cw + gap / 2, 237, "peer TMEM", size=SMALL)
    svg.text(WIDTH / 2, 296, f"commit, mask 0b11: one multicast tcgen05.commit arrives on the mbarriers empty[s] "
             f"and {acc_bar} in both CTAs", size=SMALL, fill="#444")
    return Diagram("CTA pair", s.key, svg.render(), _caption("The 2-CTA pair (cta_group::2)", s))


# ---- the persistent tile schedule -----------------------------------------------------------------

def schedule_rows(stage, problem="full", head: int = 5, tail: int = 2) -> dict:
    """The static schedule of a persistent stage on a real problem's grid (common/scheduler.cuh: cluster c
    of G takes cluster tiles c, c + G, ...; common/tile_map.cuh: N fastest): the grid's size from the
    stage's launch set-up (Stage.launch_config; its SM count as it names it), and the block rows drawn: the
    first `head` and the `tail` + 1 from the one where cluster 0 takes its second tile."""
    s = _stage(stage)
    ex = s.exports
    cfg = s.launch_config(problem)
    tiles, clusters = cfg.work
    prob = s.problem(problem)
    n_tiles = prob.n // ex.tile_n
    wrap = clusters // n_tiles
    rows = list(range(min(head, tiles // n_tiles)))
    rows += [r for r in range(wrap, wrap + tail + 1) if r not in rows and r < tiles // n_tiles]
    return {"tiles": tiles, "clusters": clusters, "n_tiles": n_tiles, "rows": rows, "problem": prob.name,
            "launch": cfg.describe(), "m_blocks": -(-tiles // n_tiles)}


def tile_schedule(stage, defines: dict | None = None, *, problem="full", head: int = 5, tail: int = 2) -> Diagram:
    """The output's cluster tiles on the real problem's grid (N tiles wide), each labelled with the cluster
    that computes it, its turn and its accumulator buffer, under the stage's static schedule
    (schedule_rows): the first block rows, where neighbouring clusters take the N tiles of one block row
    at the same time, and the rows where cluster 0 comes back for its second tile."""
    s = _stage(stage, defines)
    ex = s.exports
    if ex.grid_kind != 1:
        raise DiagramError(f"{s.key} launches one CTA or cluster per tile (grid_kind {ex.grid_kind}): no "
                           "persistent schedule to draw")
    g = schedule_rows(s, problem, head, tail)
    n_tiles, clusters, bufs = g["n_tiles"], g["clusters"], ex.get("tmem_acc_buffers", 1)
    rows_c = ex.tile_m * ex.cluster_x
    x0, y0, cell_h = 150, 30, 36
    cell_w = (WIDTH - x0 - 10) / n_tiles
    drawn = []
    for i, r in enumerate(g["rows"]):
        if i and r != g["rows"][i - 1] + 1:
            drawn.append(None)                    # a gap: the rows between are not drawn
        drawn.append(r)
    note = (f"{g['problem']}: {g['tiles']:,} tiles of {rows_c}×{ex.tile_n} ({g['m_blocks']:,} block rows × {n_tiles}) "
            f"shared by {clusters} clusters; cluster c takes tiles c, c + {clusters}, c + {2 * clusters}, … so the "
            f"{n_tiles} tiles of one block row go to {n_tiles} neighbouring clusters at once"
            + (f", and a cluster's accumulator alternates with each turn" if bufs > 1 else "")
            + "; blue: a cluster's first tile, orange: its second; cluster 0 outlined")
    note_lines = _wrap(note, 104)
    # the note's lines below the grid, each 14 px, and a margin: none of it cut off by the frame
    svg = Svg(WIDTH, y0 + len(drawn) * cell_h + 16 + 14 * len(note_lines) + 8, f"tile schedule of {s.key}")
    for i, r in enumerate(drawn):
        y = y0 + i * cell_h
        if r is None:
            svg.text(x0 + (WIDTH - x0) / 2, y + cell_h / 2 + 4, f"… block rows {drawn[i - 1] + 1}–"
                     f"{drawn[i + 1] - 1}: clusters {(drawn[i - 1] + 1) * n_tiles}–{drawn[i + 1] * n_tiles - 1}, "
                     "turn 0 …", size=SMALL, fill="#444")
            continue
        svg.text(x0 - 8, y + cell_h / 2 + 4, f"rows {r * rows_c:,}–{(r + 1) * rows_c - 1:,}", size=SMALL, anchor="end")
        for n in range(n_tiles):
            t = r * n_tiles + n
            if t >= g["tiles"]:
                continue
            c, turn = t % clusters, t // clusters
            svg.rect(x0 + n * cell_w, y, cell_w - 4, cell_h - 4, ("#4c78a8", "#f58518")[turn % 2],
                     stroke="#1b1f23" if c == 0 else "#fff", sw=2.5 if c == 0 else 1.0, rx=3)
            label = f"cluster {c}, turn {turn}" + (f", acc {turn % bufs}" if bufs > 1 else "")
            svg.text(x0 + n * cell_w + cell_w / 2 - 2, y + cell_h / 2 + 2, label, size=SMALL, fill="#fff", weight="bold")
    for n in range(n_tiles):
        svg.text(x0 + n * cell_w + cell_w / 2, y0 - 8, f"cols {n * ex.tile_n}–{(n + 1) * ex.tile_n - 1}", size=SMALL)
    for j, t in enumerate(note_lines):
        svg.text(12, y0 + len(drawn) * cell_h + 16 + 14 * j, t, size=SMALL, anchor="start", fill="#444")
    return Diagram("tile schedule", s.key, svg.render(),
                   _caption(f"The persistent schedule on the {g['problem']} grid ({g['launch']})", s,
                            " and common/scheduler.cuh's order"))


# ---- drawn from a simulated run: the ring, the pair's signals, multicast, the overlap, ping-pong ------

TILE_FILLS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d", "#bab0ac")


def _run_of(s: Stage, run) -> sim_runs.SimRun:
    """The simulated run a diagram reads (the one given, else the stage's cached run at seed 0)."""
    r = run if run is not None else sim_runs.simulate(s, seed=0)
    if not r.events:
        raise DiagramError(f"{s.key}: the simulated run has no events to draw ({r.outcome}: {r.stopped})")
    return r


def _sim_caption(what: str, s: Stage, r, extra: str = "") -> str:
    return (f"{what} of {s.key}, drawn from its exports ({evidence_label(s.build)}) and from one simulated run "
            f"({r.problem}, seed {r.seed}; {evidence.simulated('pelib.sim')}: order, not time){extra}")


def _first_cta(ev) -> int:
    """The CTA a one-CTA picture reads: the lowest that waits on a ring barrier (rank 0 of the first cluster)."""
    ctas = sorted({e["cta"] for e in ev if e["barrier"] == "full"})
    if not ctas:
        raise DiagramError("the run's events name no full[s] barrier: no ring to draw")
    return ctas[0]


def ring_laps(run, cta: int | None = None) -> dict:
    """What one CTA's ring did in a run, from its events: per fill (in order) its slot, lap, k-block, the
    parity the producer waited on empty[s] before it (None: it did not wait) and the parity the consumer
    waited on full[s] after it; the bytes each fill announced (expect_tx). A lap of slot s is its
    j-th fill."""
    ev = run.events if hasattr(run, "events") else run
    cta = _first_cta(ev) if cta is None else cta
    mine = [e for e in ev if e["cta"] == cta]
    fills, by_slot, last_empty, waits_full = [], {}, {}, {}
    consumer = next(((e["warp"], e["lane"]) for e in mine if e["kind"] == "wait_end" and e["barrier"] == "full"),
                    None)
    for e in mine:
        k, b, i = e["kind"], e["barrier"], e["index"]
        who = (e["warp"], e["lane"])
        if k == "wait_end" and b == "empty":
            last_empty[i] = e["parity"]
        elif k == "expect_tx" and b == "full":
            lap = by_slot.get(i, 0)
            by_slot[i] = lap + 1
            fills.append({"slot": i, "lap": lap, "k": len(fills), "bytes": e["bytes"],
                          "empty_parity": last_empty.pop(i, None), "full_parity": None})
        elif k == "wait_end" and b == "full" and who == consumer:
            waits_full.setdefault(i, []).append(e["parity"])
    for f in fills:
        got = waits_full.get(f["slot"], [])
        f["full_parity"] = got[f["lap"]] if f["lap"] < len(got) else None
    return {"cta": cta, "fills": fills, "slots": len(by_slot)}


def ring(stage, defines: dict | None = None, *, run=None, laps: int = 3) -> Diagram:
    """The shared-memory ring: S slots, each with its full[s] (TMA -> MMA: expect_tx, then the bytes'
    complete_tx) and empty[s] (MMA -> TMA: the commit's arrive), and a table of the first laps: which
    k-block each slot holds and the parity each side waited for, read from a simulated run. A wait on
    parity p returns once the barrier's phase of parity p has completed (PTX ISA, mbarrier.test_wait /
    try_wait .parity); each lap completes one phase of each barrier, so the parity flips every lap."""
    s = _stage(stage, defines)
    ex = s.exports
    ns = ex.pipeline_stages
    if ns < 2:
        raise DiagramError(f"{s.key} has one stage (pipeline_stages {ns}): there is no ring to draw")
    r = _run_of(s, run)
    info = ring_laps(r)
    fills = info["fills"]
    if not fills:
        raise DiagramError(f"{s.key}: the run's CTA {info['cta']} announced no fill (expect_tx on full[s])")
    laps = max(1, min(laps, max(f["lap"] for f in fills) + 1))
    slot_bytes = ex.get("stage_bytes") or (ex.get("a_stage_bytes") or ex.get("a_stage_stride", 0)) + \
        (ex.get("b_stage_bytes") or ex.get("b_stage_stride", 0))
    top, bh = 40, 46
    x0, x1 = 150, 550
    cw = (x1 - x0) / ns
    ty = top + bh + 2 * 26 + 64                          # the lap table
    rh = 30
    svg = Svg(WIDTH, ty + 24 + ns * rh + 54, f"shared-memory ring of {s.key}")
    svg.rect(12, top, 118, bh + 52, COLOURS["tma"])
    svg.lines(71, top + 22, ["producer", "TMA issuer", f"{fills[0]['bytes']:,} B", "per fill (expect_tx)"],
              size=SMALL, fill="#fff")
    svg.rect(570, top, 118, bh + 52, COLOURS["mma"])
    svg.lines(629, top + 22, ["consumer", "MMA issuer", "commit per slot", "-> empty[s]"], size=SMALL, fill="#fff")
    for k in range(ns):
        x = x0 + k * cw
        svg.rect(x + 4, top, cw - 8, bh, COLOURS["ring"])
        svg.lines(x + cw / 2, top + 18, [f"slot {k}"] + ([_kb(slot_bytes)] if slot_bytes else []), size=SMALL)
        svg.rect(x + 4, top + bh + 4, cw - 8, 22, "#dfe9f5")
        svg.text(x + cw / 2, top + bh + 19, f"full[{k}]", size=SMALL)
        svg.rect(x + 4, top + bh + 30, cw - 8, 22, "#f6e3d3")
        svg.text(x + cw / 2, top + bh + 45, f"empty[{k}]", size=SMALL)
    svg.text(WIDTH / 2, 16, "producer fills slot s and arms full[s]; consumer waits full[s], reads, commits to "
             "empty[s]", size=SMALL, fill="#444")
    svg.arrow(130, top + 14, x0 + 2, top + 14, "TMA")
    svg.arrow(x1 - 2, top + bh + 15, 570, top + bh + 15, "wait full")
    svg.arrow(570, top + bh + 41, x1 - 2, top + bh + 41, "commit", dash="4,3")
    svg.arrow(x0 + 2, top + bh + 41, 130, top + bh + 41, "wait empty")
    # the lap table: one row per slot, one column per lap
    tx0, lw = 110, (WIDTH - 120) / laps
    svg.text(12, ty, "slot", size=SMALL, anchor="start", weight="bold")
    for j in range(laps):
        svg.text(tx0 + j * lw + lw / 2, ty, f"lap {j}", size=FONT, weight="bold")
    for k in range(ns):
        y = ty + 10 + k * rh
        svg.text(12, y + 19, f"slot {k}", size=SMALL, anchor="start")
        for j in range(laps):
            f = next((f for f in fills if f["slot"] == k and f["lap"] == j), None)
            fill = "#eef3f8" if j % 2 == 0 else "#fdf1e6"
            svg.rect(tx0 + j * lw + 3, y, lw - 6, rh - 4, fill, stroke="#bbb", rx=2)
            if f is None:
                svg.text(tx0 + j * lw + lw / 2, y + 18, "not filled in this run", size=SMALL, fill="#666")
                continue
            ep = "no wait" if f["empty_parity"] is None else f"parity {f['empty_parity']}"
            fp = "?" if f["full_parity"] is None else f"parity {f['full_parity']}"
            svg.text(tx0 + j * lw + lw / 2, y + 18, f"k-block {f['k']}: empty {ep}, full {fp}", size=SMALL)
    notes = (f"Read from the run's waits (CTA {info['cta']}): before a fill the producer waits on empty[s], after "
             "it the consumer waits on full[s]. A wait on parity p returns once the barrier's phase of parity p has "
             "completed (PTX ISA, mbarrier.try_wait.parity); every lap completes one phase of each barrier, so the "
             "parity a side waits for flips from one lap to the next.")
    for j, t in enumerate(_wrap(notes, 104)):
        svg.text(12, ty + 10 + ns * rh + 16 + 14 * j, t, size=SMALL, anchor="start", fill="#444")
    return Diagram("ring", s.key, svg.render(),
                   _sim_caption(f"The {ns}-slot shared-memory ring", s, r, f"; {laps} laps of {ns} slots"))


def pair_signals_of(run, cluster: int = 0) -> dict:
    """Who signals whom in one 2-CTA cluster of a run: per issuing CTA the CTAs whose barrier its TMA loads
    completed on, the bytes each CTA's loads carried, the CTA and bytes of each expect_tx, the CTAs each
    commit's arrival reached (by barrier name), and the CTA that issued the MMAs."""
    ev = [e for e in (run.events if hasattr(run, "events") else run) if e["cluster"] == cluster]
    out = {"loads": {}, "load_bytes": {}, "expect": {}, "commits": {}, "mma_ctas": set()}
    commit_ops = {}
    for e in ev:
        k, c = e["kind"], e["cta"]
        bc = e.get("bar_cta", c)
        if k == "tma_load" and e["barrier"] == "full":
            out["loads"].setdefault(c, set()).add(bc)
            out["load_bytes"].setdefault(c, set()).add(e["bytes"])
        elif k == "expect_tx" and e["barrier"] == "full":
            out["expect"].setdefault(bc, set()).add(e["bytes"])
        elif k == "mma":
            out["mma_ctas"].add(c)
        elif k == "commit":
            commit_ops[e["op"]] = e["barrier"]
        elif k == "arrive" and e["warp"] < 0 and e["barrier"] in ("empty", "mma_done", "acc_full"):
            out["commits"].setdefault(e["barrier"], set()).add(bc)
    return out


def pair_signals(stage, defines: dict | None = None, *, run=None) -> Diagram:
    """The 2-CTA pair's signalling: each CTA's TMA lands its half in its own shared memory, but both
    complete on the leader's full[s] (the peer clears the CTA bit of the barrier address, CUTLASS
    copy_sm100_tma.hpp Sm100MmaPeerBitMask); the leader's expect_tx counts both halves; its one MMA
    (cta_group::2) reads both CTAs' slots and writes both CTAs' TMEM; its commit with
    .multicast::cluster mask 0b11 arrives on empty[s] and on the accumulator barrier in both CTAs
    (PTX ISA, tcgen05.commit). The CTAs named are those the simulated run's events name."""
    s = _stage(stage, defines)
    ex = s.exports
    if ex.get("cta_group", 1) != 2:
        raise DiagramError(f"{s.key} runs one CTA per tile (cta_group::1): there is no pair to draw")
    r = _run_of(s, run)
    sig = pair_signals_of(r)
    bm, tn = ex.tile_m, ex.tile_n
    a_b, b_b = ex.get("a_stage_bytes", 0), ex.get("b_stage_bytes", 0)
    acc_bar = "acc_full" if "tmem_acc_buffers" in ex else "mma_done"
    svg = Svg(WIDTH, 420, f"2-CTA signalling of {s.key}")
    # CTA 0: content at 20..220, barriers at 232..330; CTA 1 mirrored: barriers 370..468, content 480..680
    cx = {0: 20, 1: 480}
    bx = {0: 232, 1: 370}
    for c in (0, 1):
        px = 10 if c == 0 else 360
        svg.rect(px, 24, 330, 296, "#fafafa", stroke="#666")
        svg.text(px + 165, 40, f"CTA {c} ({'leader, even rank' if c == 0 else 'peer, odd rank'})", weight="bold")
        x = cx[c]
        svg.rect(x, 50, 200, 42, COLOURS["tma"])
        svg.lines(x + 100, 67, [f"warp 0: TMA, its half", f"A {_kb(a_b)} + B {_kb(b_b)}"], size=SMALL, fill="#fff")
        svg.rect(x, 118, 200, 52, COLOURS["ring"])
        svg.lines(x + 100, 136, ["slot s (same offset)", f"A rows {c * bm}–{c * bm + bm - 1}, "
                                 f"B rows {c * tn // 2}–{c * tn // 2 + tn // 2 - 1}"], size=SMALL)
        leader = c in sig["mma_ctas"]
        svg.rect(x, 196, 200, 42, COLOURS["mma"] if leader else "#f3d2b3")
        svg.lines(x + 100, 213, ["warp 1: tcgen05.mma", f"cta_group::2, {ex['mma_m']}×{ex['mma_n']}"] if leader else
                  ["warp 1: no MMA", "(the leader's covers both)"], size=SMALL, fill="#fff" if leader else "#1b1f23")
        svg.rect(x, 262, 200, 46, COLOURS["tmem"])
        svg.lines(x + 100, 280, ["TMEM", f"accumulator rows {c * bm}–{c * bm + bm - 1}"], size=SMALL)
        b = bx[c]
        used = c in sig["expect"]
        svg.rect(b, 118, 98, 24, "#dfe9f5" if used else "#f0f0f0", stroke="#444" if used else "#aaa",
                 dash=None if used else "3,3")
        svg.text(b + 49, 134, "full[s]" if used else "full[s] unused", size=SMALL, fill="#1b1f23" if used else "#777")
        svg.rect(b, 150, 98, 24, "#f6e3d3")
        svg.text(b + 49, 166, "empty[s]", size=SMALL)
        svg.rect(b, 262, 98, 24, "#fde9a9")
        svg.text(b + 49, 278, acc_bar + ("[b]" if acc_bar == "acc_full" else ""), size=SMALL)
        svg.arrow(x + 100, 92, x + 100, 116, "", color=COLOURS["tma"])
    # data: each TMA into its own smem; completions: both on the leader's full[s]
    svg.text(128, 108, "bytes land here", size=SMALL, anchor="start", fill="#333")
    svg.text(588, 108, "bytes land here", size=SMALL, anchor="start", fill="#333")
    svg.path("M 220 71 C 240 71, 260 90, 270 116", color=COLOURS["tma"])
    svg.path("M 480 62 C 420 62, 340 70, 316 116", color="#c0392b")
    svg.text(405, 56, "complete_tx -> CTA 0", size=SMALL, fill="#c0392b")
    # the MMA reads both slots, writes both TMEMs
    svg.arrow(70, 196, 70, 172, "", color=COLOURS["mma"])
    svg.path("M 220 206 C 300 206, 400 190, 478 160", color=COLOURS["mma"])
    svg.text(430, 200, "reads", size=SMALL, fill=COLOURS["mma"])
    svg.arrow(70, 238, 70, 260, "", color=COLOURS["mma"])
    svg.path("M 220 232 C 300 250, 400 250, 478 276", color=COLOURS["mma"])
    svg.text(430, 246, "writes", size=SMALL, fill=COLOURS["mma"])
    # the commit: mask 0b11, arrives in both CTAs
    pc = "#7d3c98"
    svg.path("M 200 238 C 215 250, 225 190, 231 164", color=pc, dash="4,3")
    svg.path("M 200 238 C 300 300, 380 200, 418 176", color=pc, dash="4,3")
    svg.path("M 210 238 C 220 250, 225 262, 231 272", color=pc, dash="4,3")
    svg.path("M 210 238 C 300 330, 380 320, 418 288", color=pc, dash="4,3")
    svg.text(340, 338, "commit .multicast::cluster, mask 0b11", size=SMALL, fill=pc, weight="bold")
    peer = sorted(sig["loads"].get(1, ()))
    exp = sorted(sig["expect"].get(0, ()))
    commits = ", ".join(f"{b}: CTAs {', '.join(map(str, sorted(v)))}" for b, v in sorted(sig["commits"].items()))
    notes = [f"In the simulated run, CTA 1's loads completed on the barrier of CTA {', '.join(map(str, peer)) or '?'} "
             f"(its address with the peer bit cleared, & 0xFEFFFFFF); the leader's expect_tx announced "
             f"{', '.join(f'{b:,}' for b in exp) or '?'} B, both CTAs' halves; the commit's arrivals reached "
             f"{commits or '?'}.",
             "The peer's full[s] is never armed: only the leader's MMA issuer waits, and one MMA reads both slots."]
    y = 356
    for t in notes:
        for ln in _wrap(t, 106):
            svg.text(12, y, ln, size=SMALL, anchor="start", fill="#444")
            y += 14
    svg.h = y + 4
    return Diagram("pair signals", s.key, svg.render(), _sim_caption("The 2-CTA pair's signals", s, r))


def multicast_of(run) -> dict | None:
    """The first TMA load of a run whose bytes landed in more than one CTA: its issuer, the bytes it read,
    and per destination CTA the bytes and barrier of its completion (None where no load multicasts)."""
    ev = run.events if hasattr(run, "events") else run
    issued = {}
    landed: dict = {}
    for e in ev:
        if e["kind"] == "tma_load":
            issued[(e["cluster"], e["op"], e["cta"])] = e
        elif e["kind"] == "complete_tx" and e["op"] is not None:
            landed.setdefault((e["cluster"], e["op"]), []).append(e)
    for (cl, op, c), e in issued.items():
        dest = landed.get((cl, op), [])
        if len({d["cta"] for d in dest}) > 1:
            return {"issuer": e, "dest": sorted(dest, key=lambda d: d["cta"]), "cluster": cl}
    return None


def tma_multicast(stage="sm90/05_multicast_a", defines: dict | None = None, *, run=None) -> Diagram:
    """One TMA load with .multicast::cluster: one CTA issues it with a 16-bit CTA mask, the box is read
    from global memory once, and its bytes land at the same shared offset in every CTA of the mask, each
    completing on its own barrier at the same offset (PTX ISA, cp.async.bulk.tensor; the same instruction
    on sm_90a and sm_100a, where a .cta_group::2 form also exists). Drawn from the first multicast load of
    a simulated run of the stage."""
    s = _stage(stage, defines)
    ex = s.exports
    r = _run_of(s, run)
    m = multicast_of(r)
    if m is None:
        raise DiagramError(f"{s.key}: no TMA load of its simulated run lands in more than one CTA (it does not "
                           "multicast); draw a stage that does, e.g. sm90/05_multicast_a")
    iss, dest = m["issuer"], m["dest"]
    ranks = [d["rank"] if d["rank"] is not None else d["cta"] for d in dest]
    mask = sum(1 << k for k in ranks)
    n = len(dest)
    svg = Svg(WIDTH, 330, f"TMA multicast of {s.key}")
    svg.rect(200, 10, 300, 44, COLOURS["global"])
    svg.lines(350, 28, ["global memory: one box", f"{ex['a_box_m']} rows × {ex['a_box_k']} B of A, read once"],
              size=SMALL)
    cw = (WIDTH - 20) / n
    svg.arrow(350, 54, 350, 64, "", color=COLOURS["tma"])
    svg.text(350, 80, f"CTA {iss['cta']} issues cp.async.bulk.tensor ... .multicast::cluster, ctaMask "
             f"0b{mask:0{max(ranks) + 1}b}: {sum(d['bytes'] for d in dest):,} B in all", size=SMALL, weight="bold")
    for j, d in enumerate(dest):
        x = 10 + j * cw
        svg.rect(x + 6, 96, cw - 12, 202, "#fafafa", stroke="#666")
        rk = ranks[j]
        svg.rect(x + 18, 130, cw - 36, 48, COLOURS["ring"])
        svg.lines(x + cw / 2, 148, [f"A slot {d['index']}, same offset", f"{d['bytes']:,} B land here"], size=SMALL)
        svg.rect(x + 18, 208, cw - 36, 42, "#dfe9f5")
        svg.lines(x + cw / 2, 225, [f"its own {d['barrier']}[{d['index']}]", f"complete_tx {d['bytes']:,} B"],
                  size=SMALL)
        svg.arrow(x + cw / 2, 88, x + cw / 2, 128, "", color=COLOURS["tma"])
        svg.arrow(x + cw / 2, 178, x + cw / 2, 206, "", color="#333")
        svg.text(x + cw / 2, 274, f"CTA rank {rk}" + (" (issuer)" if d["cta"] == iss["cta"] else ""), weight="bold")
        svg.text(x + cw / 2, 288, f"bit {rk} of the mask", size=SMALL, fill="#444")
    note = ("Each CTA armed its own full[s] with expect_tx for the bytes it receives; the load names one barrier "
            "offset and every destination CTA completes on its barrier at that offset. Read from the simulated "
            f"run's first multicast load (cluster {m['cluster']}, load {iss['op']}).")
    for j, t in enumerate(_wrap(note, 106)):
        svg.text(12, 318 + 14 * j, t, size=SMALL, anchor="start", fill="#444")
    svg.h = 318 + 14 * len(_wrap(note, 106)) + 4
    return Diagram("TMA multicast", s.key, svg.render(), _sim_caption("One TMA multicast load", s, r))


def _timeline(svg: Svg, lanes: list[tuple[str, list]], t0: float, t1: float, y0: int, x0: int = 150,
              lane_h: int = 30) -> int:
    """Lanes of spans on a shared axis [t0, t1]: each (name, [(start, end, text, fill, dark)]); returns the
    y below the last lane."""
    w = WIDTH - x0 - 10
    scale = w / max(1.0, t1 - t0)
    for i, (name, items) in enumerate(lanes):
        y = y0 + i * (lane_h + 6)
        for j, ln in enumerate(_wrap(name, 22)):
            svg.text(x0 - 8, y + lane_h / 2 + 4 - 7 * (len(_wrap(name, 22)) - 1) + 14 * j, ln, size=SMALL, anchor="end")
        svg.rect(x0, y, w, lane_h, "#f6f7f9", stroke="#ddd", rx=0)
        for a, b, text, fill, dark in items:
            a, b = max(a, t0), min(b, t1)
            if b <= a:
                continue
            xa, xb = x0 + (a - t0) * scale, x0 + (b - t0) * scale
            svg.rect(xa, y + 3, max(2.0, xb - xa), lane_h - 6, fill, stroke="#fff", rx=2)
            fits = [t for t in ([text] if isinstance(text, str) else text) if xb - xa > 6.2 * len(t) + 6]
            if fits:
                svg.text((xa + xb) / 2, y + lane_h / 2 + 4, fits[0], size=SMALL, fill="#fff" if dark else "#1b1f23")
    return y0 + len(lanes) * (lane_h + 6)


def overlap(stage, defines: dict | None = None, *, run=None, tiles: int = 3) -> Diagram:
    """The persistent overlap as a time line of one CTA of a simulated run (simulated order, not time):
    the MMA warp's K loop per tile, one epilogue warp's wait and drain per tile, and the two TMEM
    accumulators, each held from its tile's first MMA to its release; tile i's epilogue sits beside
    tile i + 1's K loop because they use different accumulators."""
    s = _stage(stage, defines)
    ex = s.exports
    if ex.get("tmem_acc_buffers", 1) < 2:
        raise DiagramError(f"{s.key} has one accumulator (tmem_acc_buffers {ex.get('tmem_acc_buffers', 1)}): "
                           "its epilogue cannot overlap the next K loop")
    r = _run_of(s, run)
    cta = _first_cta(r.events)
    sp = _events.spans(r.events, ctas=[cta])
    mma_tid = next((t for (p, t), n in sp.threads.items() if p == cta and t >= 0 and "mma" in n.lower()), None)
    epi = sorted(t for (p, t), n in sp.threads.items() if p == cta and 0 <= t < _events.RING_TID
                 and "epilogue" in n.lower())
    if mma_tid is None or not epi:
        raise DiagramError(f"{s.key}: the run names no MMA warp or no epilogue warp")
    phases = [x for x in sp.spans if x.dur is not None and x.args.get("tile_slot") is not None]
    k_loops = sorted((x for x in phases if x.tid == mma_tid and x.name == "kloop"), key=lambda x: x.ts)[:tiles]
    if not k_loops:
        raise DiagramError(f"{s.key}: the run's MMA warp recorded no kloop phase")
    shown = {x.args["tile_slot"] for x in k_loops}
    bufs = ex["tmem_acc_buffers"]
    colour = lambda t: TILE_FILLS[t % len(TILE_FILLS)]
    mma_items = [(x.ts, x.ts + x.dur, (f"K loop, tile {x.args['tile_slot']} -> acc {x.args['tile_slot'] % bufs}",
                                       f"K loop {x.args['tile_slot']}", f"{x.args['tile_slot']}"),
                  colour(x.args["tile_slot"]), True) for x in k_loops]
    last = k_loops[-1].ts + k_loops[-1].dur
    mma_items += [(x.ts, x.ts + x.dur, (x.name.replace("wait ", "waits ").split(" (")[0], "waits"), "#d0d0d0", False)
                  for x in sp.spans if x.tid == mma_tid and x.dur and x.name.startswith("wait acc_empty")
                  and x.ts < last]
    w = epi[0]
    epi_items = []
    for x in phases:
        if x.tid != w or x.args["tile_slot"] not in shown:
            continue
        t = x.args["tile_slot"]
        if x.name == "acc_wait":
            epi_items.append((x.ts, x.ts + x.dur, (f"waits acc_full[{t % bufs}]", "waits"), "#d0d0d0", False))
        elif x.name.startswith("epi_phase"):
            epi_items.append((x.ts, x.ts + x.dur, (f"drain tile {t} ({x.name[4:].replace('phase', 'part ')})",
                                                   f"drain {t}", f"{t}"), colour(t), True))
    acc_lanes = []
    for b in range(bufs):
        items = [(x.ts, x.ts + x.dur, (f"held by tile {x.args.get('tile')}", f"tile {x.args.get('tile')}"),
                  colour(x.args.get("tile", 0)), True)
                 for x in sp.spans if x.tid == _events.ACC_TID + b and x.dur is not None and x.name.endswith("held")
                 and x.args.get("tile") in shown]
        acc_lanes.append((f"accumulator {b} (TMEM cols {ex.get('tmem_acc_col', 0) + b * ex.get('tmem_acc_stride', ex.tile_n)}+)", items))
    t0 = min(a for _, items in [("", mma_items)] + acc_lanes for a, *_ in items)
    t1 = max([b for a, b, *_ in epi_items] + [b for a, b, *_ in mma_items])
    svg = Svg(WIDTH, 300, f"persistent overlap of {s.key}")
    svg.text(12, 16, f"CTA {cta}, its first {len(k_loops)} tiles; left to right: the run's order of events (simulated, "
             "not time)", size=SMALL, anchor="start", fill="#444")
    y = _timeline(svg, [(f"MMA warp (warp {mma_tid})", mma_items), (f"epilogue warp {w}", epi_items)] + acc_lanes,
                  t0, t1, 30)
    note = (f"Colour = tile. Tile i's drain (epilogue, from acc i % {bufs}) runs while the MMA warp's K loop of tile i + 1 writes the "
            "other accumulator; the MMA warp waits on acc_empty[b] only when it comes back to a buffer the "
            "epilogue has not yet released.")
    for j, t in enumerate(_wrap(note, 104)):
        svg.text(12, y + 14 + 14 * j, t, size=SMALL, anchor="start", fill="#444")
    svg.h = y + 14 + 14 * len(_wrap(note, 104))
    return Diagram("overlap", s.key, svg.render(),
                   _sim_caption("The epilogue of one tile beside the next tile's K loop", s, r))


_MAINLOOP = ("#4c78a8", "#f58518", "#e45756", "#b279a2", "#9d755d", "#72b7b2")   # no green: epilogues are light green


def pingpong(stage="sm90/03c_pingpong", defines: dict | None = None, *, run=None, tiles: int = 4) -> Diagram:
    """The Hopper ping-pong turn as a time line of one CTA of a simulated run: the two consumer
    warpgroups take alternate tiles; while one runs its mainloop (wgmma) the other runs its epilogue,
    and a warpgroup's next mainloop waits for the other's (the turn barrier: epi_wait)."""
    s = _stage(stage, defines)
    ex = s.exports
    if not ex.get("pingpong"):
        raise DiagramError(f"{s.key} does not ping-pong (no pingpong export): its consumer warpgroups share each tile")
    r = _run_of(s, run)
    cta = min(e["cta"] for e in r.events)
    sp = _events.spans(r.events, ctas=[cta])
    phases = [x for x in sp.spans if x.dur is not None and x.name in ("kloop", "epi_phase1", "epi_phase2", "epi_wait")]
    by_wg: dict = {}
    for x in phases:
        if x.tid >= 0:
            by_wg.setdefault(x.tid // 4, {}).setdefault(x.tid, []).append(x)
    wgs = sorted(by_wg)[:2]
    if len(wgs) < 2:
        raise DiagramError(f"{s.key}: the run shows fewer than two consumer warpgroups")
    lanes, n0 = [], None
    ends = []
    for g, wg in enumerate(wgs):
        warp = min(by_wg[wg])
        xs = sorted(by_wg[wg][warp], key=lambda x: x.ts)
        loops = [x for x in xs if x.name == "kloop"][:tiles // 2 + 1]
        cut = loops[-1].ts + loops[-1].dur if loops else 0
        items = []
        for n, x in enumerate(xs):
            if x.ts > cut + 1e9 or x.ts > cut and x.name == "kloop":
                continue
            if x.name == "kloop":
                k = sum(1 for y in xs if y.name == "kloop" and y.ts < x.ts)
                items.append((x.ts, x.ts + x.dur, (f"mainloop, tile {2 * k + g}", f"tile {2 * k + g}"),
                              _MAINLOOP[(2 * k + g) % len(_MAINLOOP)], True))
            elif x.name == "epi_wait" and x.dur > 10:
                items.append((x.ts, x.ts + x.dur, ("waits its turn", "turn"), "#d0d0d0", False))
            elif x.name.startswith("epi_phase") and x.ts <= cut + 1:
                k = sum(1 for y in xs if y.name == "kloop" and y.ts < x.ts) - 1
                items.append((x.ts, x.ts + x.dur, (f"epilogue, tile {2 * k + g}", f"epi {2 * k + g}"), "#b7e1a1", False))
        lanes.append((f"consumer warpgroup {g} (warps {4 * wg}–{4 * wg + 3})", items))
        ends.append(cut)
    t0 = min(a for _, items in lanes for a, *_ in items)
    t1 = min(ends)
    svg = Svg(WIDTH, 200, f"ping-pong of {s.key}")
    svg.text(12, 16, f"CTA {cta}; left to right: the run's order of events (simulated, not time); tiles of "
             f"{ex.tile_m} rows, alternating", size=SMALL, anchor="start", fill="#444")
    y = _timeline(svg, lanes, t0, t1, 30, x0=170, lane_h=34)
    note = ("Mainloops coloured by tile, epilogues light green. While one warpgroup runs its mainloop (wgmma on the shared ring), the other runs its epilogue from its "
            "registers; a warpgroup starts its next mainloop only after the other has issued its last wgmma (the "
            "turn barrier), so the tensor core always has one mainloop to run.")
    for j, t in enumerate(_wrap(note, 104)):
        svg.text(12, y + 14 + 14 * j, t, size=SMALL, anchor="start", fill="#444")
    svg.h = y + 14 + 14 * len(_wrap(note, 104))
    return Diagram("ping-pong", s.key, svg.render(), _sim_caption("The ping-pong turn", s, r))


# ---- the Hopper twin ------------------------------------------------------------------------------

def for_chapter(stage, defines: dict | None = None) -> list[Diagram]:
    """The diagrams that fit a stage: its data path and roles, its TMEM map (Blackwell), its pair
    (cta_group::2) and its schedule (persistent)."""
    s = _stage(stage, defines)
    ex = s.exports
    out = [data_path(s), roles(s)]
    if s.arch == "sm_100a":
        out.append(tmem_map(s))
    if ex.get("cta_group", 1) == 2:
        out.append(cta_pair(s))
    if ex.grid_kind == 1:
        out.append(tile_schedule(s))
    return out
