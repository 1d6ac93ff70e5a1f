"""Pictures of the emulated data path for the chapter "How we know it is right": all emulated evidence."""
from __future__ import annotations

import json

import numpy as np

from ..isa import descriptors as D
from .. import emulate as E
from .. import launch, results, tma
from ..build import build
from ..facts import Table
from ..paths import KERNELS
from .diagrams import QUARTER

EMULATED = "emulated (pelib.emulate, from the PTX ISA and CUTLASS)"


def _plt():
    import matplotlib.pyplot as plt
    return plt


def bank_groups(swizzle: int, rows: int = 8, base: int = 0) -> np.ndarray:
    """(rows, 8): the bank group (16-B chunk of a 128-B line: banks 4g..4g+3) where row r's logical chunk c lands."""
    r = np.arange(rows)[:, None]
    c = np.arange(8)[None, :]
    span = swizzle or 128
    phys = E.swizzle_addr(base + r * span + c * 16, swizzle)
    return (phys % 128) // 16


def swizzle_bank_heatmap(swizzles=(0, 128), rows: int = 8):
    """Heat maps of shared-memory bank groups: logical 16-B chunk (column) of each 128-B row, per swizzle.

    A column is what an MMA or a row-wise copy reads for one K chunk across 8 rows: without swizzle all
    8 rows hit one bank group (8-way conflict); with 128B swizzle they hit 8 different ones.
    """
    plt = _plt()
    fig, axes = plt.subplots(1, len(swizzles), figsize=(4.2 * len(swizzles), 3.6), squeeze=False)
    for ax, sw in zip(axes[0], swizzles):
        g = bank_groups(sw if sw in (0, 128) else sw, rows)
        ax.imshow(g, cmap="tab10", vmin=0, vmax=9, aspect="equal")
        for (r, c), v in np.ndenumerate(g):
            ax.text(c, r, str(v), ha="center", va="center", fontsize=9, color="white")
        ways = max(np.bincount(g[:, c], minlength=8).max() for c in range(8))
        ax.set_title(f"{'no swizzle' if not sw else f'{sw}B swizzle'}: column read = {ways}-way", fontsize=10)
        ax.set_xlabel("logical 16-B chunk of the row (K bytes 16c..16c+15)")
        ax.set_ylabel("row (M or N)")
        ax.set_xticks(range(8))
        ax.set_yticks(range(rows))
    fig.suptitle(f"Bank group (banks 4g..4g+3) of each chunk; {EMULATED}", fontsize=9)
    fig.tight_layout()
    return fig


def descriptor_rows(desc: int, what: str = "umma_smem") -> str:
    """A text table, one line per field: bits, field, raw value, meaning."""
    rows = D.describe(desc, what)
    w = max(len(r[1]) for r in rows)
    head = f"{what} descriptor 0x{desc:0{16 if 'smem' in what else 8}x}"
    return "\n".join([head] + [f"  bits {b:>5}  {f:<{w}}  {raw:>6}  {m}" for b, f, raw, m in rows])


_FIELD_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
                 "#ccb974", "#64b5cd"]


def descriptor_bits_figure(desc: int, what: str = "umma_smem"):
    """The descriptor as strips of 32 bits (bit 63 or 31 at the left of the top strip), each named field
    shaded and labelled, the bit values printed, every bit index under its bit."""
    plt = _plt()
    nbits = 64 if "smem" in what else 32
    rows = D.describe(desc, what)
    strips = nbits // 32
    fig, axes = plt.subplots(strips, 1, figsize=(7.8, 1.75 * strips + 0.5), squeeze=False)
    for si, ax in enumerate(axes[:, 0]):
        top = nbits - 1 - 32 * si              # the highest bit of this strip, drawn at x = 0
        lo_bit = top - 31
        for i, (bits, name, raw, meaning) in enumerate(rows):
            lo, hi = (int(x) for x in (bits.split("-") * 2)[:2])
            a, b = max(lo, lo_bit), min(hi, top)
            if a > b:
                continue
            color = _FIELD_COLORS[i % len(_FIELD_COLORS)]
            ax.axvspan(top - b - 0.5, top - a + 0.5, color=color, alpha=0.35)
            ax.text((2 * top - a - b) / 2, 1.15 + 0.55 * (i % 2), name, ha="center", va="bottom", fontsize=7.5)
        for b in range(lo_bit, top + 1):
            ax.text(top - b, 0.5, str(desc >> b & 1), ha="center", va="center", fontsize=9, family="monospace")
            ax.text(top - b, -0.15, str(b), ha="center", va="top", fontsize=6.5, color="dimgray")
        ax.set_xlim(-0.5, 31.5)
        ax.set_ylim(-0.7, 2.3)
        ax.axis("off")
    axes[0, 0].set_title(f"{what} descriptor 0x{desc:x}: bits {nbits - 1} to 0, left to right ({EMULATED})",
                         fontsize=9)
    fig.tight_layout()
    return fig


def tmem_cta_pair_figure(n: int = 256, epi_ld_x: int = 32, acc_col: int = 0):
    """The cta_group::2 M=256 accumulator: which CTA, TMEM lane quarter (= epilogue warp) and ld chunk
    holds each output element, and what CTA 0's TMEM looks like. Each lane quarter has one colour in both
    panels (pelib.views.diagrams.QUARTER, the diagrams' colours); CTA 1's rows are drawn lighter."""
    from matplotlib.colors import ListedColormap, to_rgb

    plt = _plt()
    amap = E.tmem_accumulator_map(256, n, 2, acc_col)
    cta, lane, col = amap[..., 0], amap[..., 1], amap[..., 2]
    warp_q = lane // 32
    light = [tuple(0.55 + 0.45 * c for c in to_rgb(q)) for q in QUARTER]
    cmap = ListedColormap([to_rgb(q) for q in QUARTER] + light)        # 0-3: CTA 0's quarters, 4-7: CTA 1's
    fig, axes = plt.subplots(2, 1, figsize=(7.6, 8.4))
    code = cta * 4 + warp_q
    axes[0].imshow(code, cmap=cmap, vmin=-0.5, vmax=7.5, aspect="auto", interpolation="nearest")
    for v in range(2):
        for q in range(4):
            axes[0].text(n / 2, 128 * v + 32 * q + 16, f"CTA {v}, lanes {32 * q}-{32 * q + 31}: warp % 4 = {q}",
                         ha="center", va="center", fontsize=9)
    for c in range(0, n, epi_ld_x):
        axes[0].axvline(c - 0.5, color="white", lw=0.6)
    axes[0].set_title(f"D[256 x {n}] of one MMA: owner CTA and lane quarter\n(white lines: one "
                      f"tcgen05.ld.32x32b.x{epi_ld_x} each)", fontsize=10)
    axes[0].set_xlabel("output column n")
    axes[0].set_ylabel("output row m")
    tm = np.full((128, 512), -1.0)
    sel = cta == 0
    tm[lane[sel], col[sel]] = warp_q[sel]
    axes[1].imshow(np.ma.masked_less(tm, 0), cmap=ListedColormap([to_rgb(q) for q in QUARTER]), vmin=-0.5,
                   vmax=3.5, aspect="auto", interpolation="nearest")
    axes[1].set_title(f"CTA 0's TMEM (128 lanes x 512 columns):\naccumulator at columns {acc_col}..{acc_col + n - 1}",
                      fontsize=10)
    axes[1].set_xlabel("TMEM column (32-bit)")
    axes[1].set_ylabel("TMEM lane")
    fig.suptitle(f"The CTA pair's accumulator — {EMULATED}", fontsize=10)
    fig.tight_layout()
    return fig


def quarter_colours(fig) -> list[list[tuple]]:
    """Per panel of tmem_cta_pair_figure, the colours its image uses for lane quarters 0-3 of CTA 0 (what the
    tests compare across panels)."""
    out = []
    for ax in fig.axes[:2]:
        im = ax.images[0]
        out.append([tuple(round(c, 3) for c in im.cmap(im.norm(q))[:3]) for q in range(4)])
    return out


def checked(r: dict) -> "Checked":
    """An emulate_check result that still reads as a dict (r["ok"], r["max_abs_err"]) and shows as a table."""
    return Checked(r)


def checks_table(checks: dict, caption: str = "", columns=None) -> Table:
    """Several emulate_check results as one table, a row per labelled variant (what was changed); columns:
    the ones to show (a page's narrow column), by the names of Checked.row and "variant"."""
    rows = [{"variant": label, **Checked(r).row()} for label, r in checks.items()]
    ev = next((r.get("evidence") for r in checks.values() if r.get("evidence")), EMULATED)
    if columns is not None:
        unknown = [c for c in columns if not rows or c not in rows[0]]
        if unknown:
            raise ValueError(f"checks_table has no column {unknown}: choose from {list(rows[0]) if rows else []}")
    return Table(rows, f"{caption or 'One tile per variant, replayed from the exports'} — {ev}", columns)


class Checked(dict):
    """One emulated tile against the reference: a dict, shown as a one-row table whose cells say what the
    numbers mean (an error that is not finite, the issues the emulator found)."""

    def row(self) -> dict:
        err = self.get("max_abs_err")
        bad = self.get("bad", self.get("elements_off_by_more_than_1ulp"))
        if err is None:
            err_text = "—"
        elif not np.isfinite(err):
            err_text = "not finite: some outputs are NaN or inf (the operands read are not A's and B's)"
        else:
            err_text = f"{err:.3g}"
        ok = self.get("within_1ulp", self.get("ok"))
        tile = self.get("tile")
        return {"stage": self.get("stage", ""), "problem": self.get("problem", ""),
                "tile": str(tuple(tile)) if isinstance(tile, (tuple, list)) else str(tile or ""),
                "within one BF16 ulp": "yes" if ok else "no",
                "elements off": bad if bad is not None else "—", "max |error|": err_text,
                "what the emulator found": "; ".join(self.get("issues") or []) or "—"}

    def _repr_html_(self) -> str:
        return Table([self.row()], f"One output tile replayed from the stage's exports — "
                                   f"{self.get('evidence', EMULATED)}")._repr_html_()


def error_maps(results: dict, reference: np.ndarray):
    """One panel per emulated tile: |tile - reference|, NaN (never written) in black."""
    plt = _plt()
    k = len(results)
    fig, axes = plt.subplots(1, k, figsize=(3.6 * k, 3.5), squeeze=False)
    for ax, (name, tile) in zip(axes[0], results.items()):
        err = np.abs(tile - reference)
        bad = int(np.count_nonzero(np.nan_to_num(err, nan=1.0)))
        im = ax.imshow(np.nan_to_num(err, nan=np.nanmax(err) if np.isfinite(np.nanmax(err)) else 1.0),
                       cmap="magma", aspect="auto", interpolation="nearest")
        ax.set_title(f"{name}\n{bad} of {err.size} wrong", fontsize=9)
        ax.set_xlabel("n")
        ax.set_ylabel("m")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"|emulated tile - reference| ({EMULATED})", fontsize=9)
    fig.tight_layout()
    return fig


def demo_fp8_problem(m: int = 128, n: int = 128, k: int = 256, seed: int = 0):
    """Small E4M3 operands (exact sums) and their float64 reference, for the chapter's demonstrations."""
    r = np.random.default_rng(seed)
    vals = [-4, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4]
    a = E.encode_e4m3(r.choice(vals, size=(m, k)))
    b = E.encode_e4m3(r.choice(vals, size=(n, k)))
    ref = E.decode_values(a, "e4m3") @ E.decode_values(b, "e4m3").T
    return a, b, ref


def fp8_stage_params(cta_group: int = 1, **changes) -> E.TileParams:
    """The FP8 stage layout of the book (BK = 128 B, 128B swizzle, K-major, UMMA_K = 32) as TileParams."""
    m, n = (128, 128) if cta_group == 1 else (256, 256)
    p = E.TileParams(kind="f8f6f4", cta_group=cta_group, idesc=D.umma_instr_desc(m, n, "e4m3", "e4m3"),
                     block_k=128, a_box_k=128, a_box_m=128, b_box_k=128, b_box_n=n // cta_group,
                     a_smem_offset=0, b_smem_offset=16384, a_desc=D.umma_smem_desc(0, 16, 1024, 128),
                     b_desc=D.umma_smem_desc(16384, 16, 1024, 128), k_advance_bytes=32,
                     tmem_cols=512 if cta_group == 2 else 128, epi_warp0=4, epi_warps=4,
                     epi_ld_x=16 if cta_group == 2 else 32)
    return p.with_(**changes) if changes else p


def hopper_proof_record(path=None) -> dict | None:
    """The committed summary of tests/test_gpu_emulate.py (results/*/gpu_emulate.json), if there is one."""
    if path is None:
        return results.gpu_emulate_proof()
    try:
        return json.loads(open(path).read())
    except OSError:
        return None


def hopper_proof_table(record: dict | None, cases: bool = True) -> str:
    """One line per proven case, labelled measured (device, date); or what to run when there is none.
    cases=False gives the verdict line alone (the chapter folds the list)."""
    if not record:
        return ("PENDING: no Hopper proof committed yet (results/<date>-<device>/gpu_emulate.json). On an H100/H200\n"
                "  run PE_GPU_RESULTS=results/<date>-<device> python -m pytest tests/test_gpu_emulate.py -m gpu")
    head = (f"measured on {record['device']}, {record['date']}: {record['passed']} cases agree byte for byte, "
            f"{record['failed']} disagree")
    if not cases:
        return head
    lines = [head] + [f"  [{'ok ' if c['passed'] else 'BAD'}] {c['kind']:<9} {c['case']}" for c in record["cases"]]
    return "\n".join(lines)


def prove_tma_here(swizzle: int = 128) -> dict:
    """Live rung 3 on a Hopper GPU: one TMA load through src/kernels/probes/emu_tma_dump.cu, compared byte for byte."""
    import torch   # the GPU path only

    g = torch.randint(0, 256, (64, 256), dtype=torch.uint8, device="cuda")
    box = (64, swizzle or 64)
    tm = tma.tensor_map(g, box, swizzle=swizzle)
    image = torch.empty(32768, dtype=torch.uint8, device="cuda")
    info = torch.zeros(4, dtype=torch.int32, device="cuda")
    b = build(KERNELS / "probes" / "emu_tma_dump.cu", "sm_90a")
    launch.launch(b, (tm, image, info, np.int32(0), np.int32(0), np.uint32(1024), np.uint32(tm.spec.box_bytes)),
                  grid=1, block=128)
    img = E.SmemImage(32768)
    E.tma_load_2d(E.TensorMap2D(8, (256, 64), (box[1], box[0]), swizzle), g.cpu(), (0, 0), img, 1024)
    bad = int((image.cpu().numpy() != img.data).sum())
    return {"swizzle": swizzle, "bytes_compared": 32768, "bytes_different": bad, "evidence": "measured (this GPU, now)"}
