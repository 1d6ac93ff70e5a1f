"""Drawn diagrams of a stage, generated from its exports as SVG: the data path (TMA -> ring -> MMA ->
accumulators -> epilogue -> staging -> stores), the warp-role map, the TMEM allocation map, the 2-CTA
pair and its multicast, and the persistent tile schedule.

    diagrams.data_path("fp8/09_persistent_megakernel")
    diagrams.roles("sm90/11_a_half_slices")

Every number drawn is read from the stage's cubin (`PELIB_EXPORT`, common/export.cuh) or its launch
set-up, so a diagram stays true when the stage changes; the caption names the build (compiled). The
SVG carries real text (searchable, selectable) at >= 11 user units in a view box no wider than the
book's column, so it never renders below 9 CSS px there.
"""
from __future__ import annotations

import html
import itertools
import os
from dataclasses import dataclass

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


def _tcgen05(ex) -> bool:
    return ex.get("mma_arch", 100) != 90 and "idesc" in ex


# ---- the data path ------------------------------------------------------------------------------

def _nodes(s: Stage) -> list[tuple[str, str, list[str]]]:
    """(colour key, title, lines) per box of the data path, in the order data flows."""
    ex = s.exports
    ns, cg = ex.pipeline_stages, ex.get("cta_group", 1)
    blackwell = s.arch == "sm_100a"
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
        epi.append("+ comb, -> BF16" if s.family == "fp8" else "-> BF16")
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
        nodes.append(("epi", "epilogue (the consumers)", ["+ comb, -> BF16"]))
    if "staging_offset" in ex:
        halves = ex.get("staging_halves", 1)
        tile = f"tile {ex.tile_m * ex.cluster_x if cg == 2 else ex.tile_m}×{ex.tile_n}"
        if ex.get("staging_tma_store"):   # F24: swizzled blocks, one TMA store per half
            nodes.append(("staging", "staging (shared)", [f"{ex.epi_warps} × {_kb(ex['staging_warp_bytes'])}",
                                                          f"{halves} halves, {ex['staging_block_cols']}-column "
                                                          f"blocks, swizzle {ex['staging_swizzle']} B"]))
            nodes.append(("store", "global C (BF16)", ["TMA store per half", tile]))
        else:
            nodes.append(("staging", "staging (shared)", [f"{ex.epi_warps} × {_kb(ex['staging_warp_bytes'])}",
                                                          f"{halves} × 32 rows, pitch {ex['staging_pitch']} B"]))
            nodes.append(("store", "global C (BF16)", [f"{ex.get('staging_vec', 16)}-B coalesced stores", tile]))
    elif "tmap_c_box_rows" in ex:
        where = " (in the ring)" if ex.get("staging_in_ring") else ""
        nodes.append(("staging", f"staging (shared){where}", [f"boxes {ex['tmap_c_box_rows']}×{ex['tmap_c_box_cols']}",
                                                              f"swizzle {ex['tmap_c_swizzle']} B"]))
        nodes.append(("store", "global C (BF16)", ["TMA store", "cp.async.bulk.tensor"]))
    else:
        nodes.append(("store", "global C (BF16)", ["st.global, one row", "per thread (lane)"]))
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
    # multicast commit to both CTAs
    svg.path(f"M {20 + cw / 2 + 40} 162 L {20 + cw / 2 + 40} 182", color="#333")
    svg.path(f"M {20 + cw - 12} 158 C {20 + cw + 60} 200, {20 + cw + gap - 40} 200, {20 + cw + gap + 12} 200",
             color="#333", dash="4,3")
    svg.text(20 + cw + gap / 2, 224, "commit", size=SMALL)
    svg.text(20 + cw + gap / 2, 237, "0b11", size=SMALL)
    svg.text(WIDTH / 2, 296, f"one multicast tcgen05.commit arrives on empty[s] and {acc_bar} in both CTAs",
             size=SMALL, fill="#444")
    return Diagram("CTA pair", s.key, svg.render(), _caption("The 2-CTA pair (cta_group::2)", s))


# ---- the persistent tile schedule -----------------------------------------------------------------

def tile_schedule(stage, defines: dict | None = None, *, m_tiles: int = 6, n_tiles: int | None = None,
                  clusters: int = 4) -> Diagram:
    """The output's cluster tiles on a small grid, each labelled with the cluster that computes it, its turn
    and its accumulator buffer, under the stage's static schedule (common/scheduler.cuh
    PersistentTileScheduler: cluster c takes tiles c, c + G, c + 2G, ... of G clusters, row-major; its
    accumulator alternates with each turn)."""
    s = _stage(stage, defines)
    ex = s.exports
    if ex.grid_kind != 1:
        raise DiagramError(f"{s.key} launches one CTA or cluster per tile (grid_kind {ex.grid_kind}): no "
                           "persistent schedule to draw")
    n_tiles = n_tiles or 4
    bufs = ex.get("tmem_acc_buffers", 1)
    total = m_tiles * n_tiles
    cell_w, cell_h, x0, y0 = 146, 40, 112, 30
    svg = Svg(WIDTH, y0 + m_tiles * cell_h + 46, f"tile schedule of {s.key}")
    rows_c = ex.tile_m * ex.cluster_x
    palette = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d", "#bab0ac")
    for t in range(total):
        m_blk, n_blk = divmod(t, n_tiles)
        c, turn = t % clusters, t // clusters
        x, y = x0 + n_blk * cell_w, y0 + m_blk * cell_h
        svg.rect(x, y, cell_w - 4, cell_h - 4, palette[c % len(palette)], stroke="#fff", rx=3)
        svg.text(x + cell_w / 2 - 2, y + 15, f"cluster {c}, turn {turn}", size=SMALL, fill="#fff", weight="bold")
        if bufs > 1:
            svg.text(x + cell_w / 2 - 2, y + 29, f"accumulator {turn % bufs}", size=SMALL, fill="#fff")
    for m in range(m_tiles):
        svg.text(x0 - 8, y0 + m * cell_h + cell_h / 2 + 2, f"rows {m * rows_c}–{(m + 1) * rows_c - 1}", size=SMALL,
                 anchor="end")
    for n in range(n_tiles):
        svg.text(x0 + n * cell_w + cell_w / 2, y0 - 8, f"cols {n * ex.tile_n}–{(n + 1) * ex.tile_n - 1}", size=SMALL)
    note = (f"{total} tiles of {rows_c}×{ex.tile_n} shared by {clusters} resident clusters"
            + (": a cluster starts its next tile while its previous accumulator drains" if bufs > 1 else ""))
    for j, t in enumerate(_wrap(note, 95)):
        svg.text(12, y0 + m_tiles * cell_h + 18 + 14 * j, t, size=SMALL, anchor="start", fill="#444")
    return Diagram("tile schedule", s.key, svg.render(),
                   _caption(f"The persistent schedule ({m_tiles}×{n_tiles} tiles, {clusters} clusters)", s,
                            " and common/scheduler.cuh's order"))


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
