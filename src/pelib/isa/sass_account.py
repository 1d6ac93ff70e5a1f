"""A static SASS account of a loop: which instructions one pass executes, by class, found from the disassembly.

Method (for the MMA warp's K-loop of the FP8 stages):
  1. Parse nvdisasm's text into instructions (offset, opcode, branch target) and labels.
  2. Every conditional backward branch (target at or before the branch) closes a loop
     [target, branch]; unconditional ones return from out-of-line blocks and are not loops.
  3. The K-loop is the innermost loop that contains the UTCQMMA instructions; it also holds the
     full-barrier wait (SYNCS.PHASECHK...TRYWAIT) and the commit (UTCBAR). The tile loop is the
     innermost loop that strictly contains it (absent in a one-tile-per-cluster stage).
  4. One pass is the fast path from the loop head to its backward branch, assuming every mbarrier
     try_wait passes at its first try: a conditional branch that leaves the loop (to an out-of-line
     retry block) is not taken; a forward branch that jumps over a retry loop (a small loop around
     a TRYWAIT, with no MMA) is taken; other conditional branches fall through (their code counts).
  5. Per tile = (tile-loop pass without the K-loop) + (K-loop pass) x (k-blocks per tile); the
     k-blocks per tile are K / BK = 6 for the patch embed (the loop is not unrolled: K is a run-time
     argument, so one SASS copy of the body runs six times).
Classes: UTCQMMA (the MMAs), R2UR (register -> uniform register moves feeding them), SYNCS/UTCBAR
(mbarrier waits/arrives and tcgen05.commit), other. Counts are static (evidence: compiled); the
lab's numbers came from SourceCounters on a B200 (recorded).

The count depends on the mbarrier wait build (common/mbarrier.cuh, PE_WAIT_KIND, exported as
wait_kind): a bounded wait keeps a try counter live across the loop even though its retry path is
jumped over, so the unbounded build (kind 2, what a production kernel ships) has the shortest pass.
`account_build` reads the build's wait_kind, and `account_table` names it. `fences` counts what a
steady-state loop must not contain: CCTL.IVALL (an L1 invalidate, from a cluster-scope acquire) and
MEMBAR.ALL.GPU (from a cluster-scope release).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from . import sass as _sass
from ..evidence import Table

_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
CLASSES = ("UTCQMMA", "R2UR", "SYNCS/UTCBAR", "other")
WAIT_KINDS = {0: "bounded, printf on timeout", 1: "bounded, trap on timeout (call-free)", 2: "unbounded"}
FENCES = ("CCTL.IVALL", "MEMBAR.ALL.GPU")   # what a steady-state loop of the Blackwell stages must not hold


class AccountError(RuntimeError):
    """The disassembly does not have the loop structure the account needs."""


@dataclass(frozen=True)
class Instr:
    offset: int
    op: str          # opcode with modifiers (UTCQMMA.2CTA)
    text: str        # the instruction, without the encoding comment
    target: int | None = None    # branch target offset
    predicated: bool = False

    @property
    def is_branch(self) -> bool:
        return self.op.split(".")[0] in ("BRA", "JMP", "BRX")

    @property
    def conditional(self) -> bool:
        return self.predicated or ".U " in self.text or "BRA.U" in self.op or "BRA.DIV" in self.op


def classify(op: str) -> str:
    base = op.split(".")[0]
    if base == "UTCQMMA":
        return "UTCQMMA"
    if base == "R2UR":
        return "R2UR"
    if base in ("SYNCS", "UTCBAR"):
        return "SYNCS/UTCBAR"
    return "other"


def parse(sass: str) -> list[Instr]:
    """Instructions of the first kernel in nvdisasm text, with branch targets resolved to offsets."""
    labels: dict[str, int] = {}
    pending: list[str] = []
    raw = []
    for line in sass.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        om = re.search(r"/\*([0-9a-f]{4,})\*/", line)
        if not om or line.strip().startswith("/* 0x"):
            continue
        off = int(om.group(1), 16)
        for lab in pending:
            labels[lab] = off
        pending = []
        mi = _sass._INSTR.search(line)
        if not mi:
            continue
        text = line.split("*/", 1)[1].split(";")[0].strip()
        raw.append((off, mi.group(1), text))
    out = []
    for off, op, text in raw:
        t = _TARGET.search(text)
        tgt = labels.get(t.group(1)) if t else None
        out.append(Instr(off, op, text, tgt, text.startswith("@")))
    return out


def loops(instrs: list[Instr]) -> list[tuple[int, int]]:
    """(head offset, backward-branch offset) of every loop, innermost first (by size).

    A loop closes with a conditional backward branch. Unconditional backward branches are the
    returns of out-of-line blocks (a failed try_wait's retry, a divergent warp's path) to where
    they left, not loops, and are ignored.
    """
    found = {(i.target, i.offset) for i in instrs
             if i.is_branch and i.conditional and i.target is not None and i.target <= i.offset}
    return sorted(found, key=lambda r: (r[1] - r[0], r[0]))


def _inside(i: Instr, region) -> bool:
    return region[0] <= i.offset <= region[1]


def loops_containing(sass_or_instrs, prefix: str) -> list[tuple[int, int]]:
    """Loops (innermost first) that contain an instruction whose opcode starts with `prefix`."""
    instrs = parse(sass_or_instrs) if isinstance(sass_or_instrs, str) else sass_or_instrs
    return [r for r in loops(instrs) if any(_inside(i, r) and i.op.startswith(prefix) for i in instrs)]


def gaps(sass_or_instrs, op: str = "LDTM") -> list[dict]:
    """Between consecutive instructions `op` (in address order): conditional branches and global loads.

    For an unrolled epilogue this shows whether the steps are straight-line (no branch between two
    TMEM loads, the next step's LDGs hoisted) or separated by bound tests.
    """
    instrs = parse(sass_or_instrs) if isinstance(sass_or_instrs, str) else sass_or_instrs
    at = [k for k, i in enumerate(instrs) if i.op.startswith(op)]
    out = []
    for a, b in zip(at, at[1:]):
        seg = instrs[a + 1:b]
        out.append({"from": instrs[a].offset, "to": instrs[b].offset,
                    "branches": sum(1 for i in seg if i.is_branch and i.conditional),
                    "LDG": sum(1 for i in seg if i.op.startswith("LDG")), "instructions": len(seg)})
    return out


def _is_retry_loop(instrs, region) -> bool:
    body = [i for i in instrs if _inside(i, region)]
    return any("TRYWAIT" in i.op for i in body) and not any(i.op.startswith("UTCQMMA") for i in body)


def fast_path(instrs: list[Instr], region: tuple[int, int], skip: tuple[int, int] | None = None,
              take=None) -> list[Instr]:
    """The instructions one pass of `region` executes when every try_wait passes at once (see module doc).

    `skip`: an inner region (the K-loop) left out of this pass; the walk resumes after its back branch.
    `take(jumped)`: also take a forward conditional branch when it returns True for the instructions it
    jumps over (e.g. a block that runs only when a cached value changes).
    """
    by_off = {i.offset: k for k, i in enumerate(instrs)}
    if region[0] not in by_off:
        raise AccountError(f"no instruction at the loop head 0x{region[0]:x}")
    all_loops = loops(instrs)
    k = by_off[region[0]]
    path: list[Instr] = []
    guard = 0
    while True:
        guard += 1
        if guard > 100000:
            raise AccountError("the fast-path walk does not terminate")
        i = instrs[k]
        if skip and i.offset == skip[0]:
            k = by_off[skip[1]] + 1
            continue
        path.append(i)
        if i.offset == region[1]:
            return path
        if i.is_branch and i.target is not None:
            if not (region[0] <= i.target <= region[1]):
                if i.conditional:          # leaves the loop: an out-of-line retry block, not taken
                    k += 1
                    continue
                raise AccountError(f"unconditional branch out of the loop at 0x{i.offset:x}")
            if i.target > i.offset:       # forward, inside the loop
                jumped = (i.offset + 1, i.target - 1)
                over_retry = any(jumped[0] <= lo and hi <= jumped[1] and _is_retry_loop(instrs, (lo, hi))
                                 for lo, hi in all_loops)
                over = [x for x in instrs if jumped[0] <= x.offset <= jumped[1]]
                if not i.conditional or over_retry or (take is not None and take(over)):
                    k = by_off[i.target]
                    continue
            elif i.target < i.offset and not (skip and (i.target, i.offset) == skip):
                # an inner backward branch (a retry loop's): not taken on the fast path
                pass
        k += 1


def fences(sass_or_instrs, region: tuple[int, int] | None = None) -> dict[str, int]:
    """How many of each FENCES opcode the SASS holds, in `region` (head, back-branch offsets) or all of it."""
    instrs = parse(sass_or_instrs) if isinstance(sass_or_instrs, str) else sass_or_instrs
    return {f: sum(1 for i in instrs if i.op.startswith(f) and (region is None or _inside(i, region)))
            for f in FENCES}


def steady_loops(sass_or_instrs) -> dict[str, list[tuple[int, int]]]:
    """The loops a kernel spends its time in: those holding the MMAs (UTCQMMA, and the block-scaled
    UTC*MMA forms), the TMEM loads of the epilogue (LDTM) and the TMA loads (UTMALDG)."""
    instrs = parse(sass_or_instrs) if isinstance(sass_or_instrs, str) else sass_or_instrs
    kinds = {"mma": re.compile(r"UTC\w*MMA"), "epilogue": re.compile(r"LDTM"), "tma": re.compile(r"UTMALDG")}
    return {name: [r for r in loops(instrs) if any(_inside(i, r) and pat.match(i.op) for i in instrs)]
            for name, pat in kinds.items()}


@dataclass
class Account:
    """Instructions per pass of the K-loop and of the rest of the tile loop, by class, and per tile."""
    kloop: tuple[int, int]
    tile_loop: tuple[int, int] | None
    k_blocks: int
    kloop_path: list = field(default_factory=list)
    tile_path: list = field(default_factory=list)
    wait_kind: int | None = None     # the build's mbarrier wait build (exported wait_kind), if known

    @staticmethod
    def _count(path) -> Counter:
        c = Counter(classify(i.op) for i in path)
        c["SYNCS"] = sum(1 for i in path if i.op.startswith("SYNCS"))
        c["UTCBAR"] = sum(1 for i in path if i.op.startswith("UTCBAR"))
        c["total"] = len(path)
        return c

    @property
    def per_kblock(self) -> Counter:
        return self._count(self.kloop_path)

    @property
    def per_tile_outside(self) -> Counter:
        return self._count(self.tile_path)

    @property
    def per_tile(self) -> Counter:
        out = Counter()
        for k, v in self.per_kblock.items():
            out[k] += v * self.k_blocks
        for k, v in self.per_tile_outside.items():
            out[k] += v
        return out

    def rows(self) -> list[dict]:
        kb, out, tile = self.per_kblock, self.per_tile_outside, self.per_tile
        keys = ["UTCQMMA", "R2UR", "SYNCS", "UTCBAR", "other", "total"]
        return [{"class": k, "per k-block pass": kb[k], "per tile, outside the K-loop": out[k],
                 f"per tile (x{self.k_blocks} + outside)": tile[k]} for k in keys]

    def listing(self, which: str = "kloop") -> str:
        path = self.kloop_path if which == "kloop" else self.tile_path
        return "\n".join(f"/*{i.offset:04x}*/  {i.text}    [{classify(i.op)}]" for i in path)


def account_build(b, k: int = 768) -> Account:
    """The account of a pelib.build.Build: k_blocks = k / its block_k, wait_kind from its exports."""
    acc = account(b.sass, k // b.exports["block_k"])
    acc.wait_kind = b.exports.get("wait_kind")
    return acc


def account(sass: str, k_blocks: int) -> Account:
    """The static account of the K-loop that holds the UTCQMMAs (see the module doc for the method)."""
    instrs = parse(sass)
    mma = [r for r in loops_containing(instrs, "UTCQMMA")]
    if not mma:
        raise AccountError("no loop contains a UTCQMMA: is the K-loop fully unrolled, or is this not a tcgen05 kernel?")
    kl = mma[0]
    body = [i for i in instrs if _inside(i, kl)]
    if not any("TRYWAIT" in i.op for i in body) or not any(i.op.startswith("UTCBAR") for i in body):
        raise AccountError(f"the loop 0x{kl[0]:x}-0x{kl[1]:x} lacks the full-barrier wait or the commit")
    outer = [r for r in mma[1:] if r[0] <= kl[0] and kl[1] <= r[1] and r != kl]
    tl = outer[0] if outer else None
    acc = Account(kl, tl, k_blocks, fast_path(instrs, kl))
    if tl is not None:
        acc.tile_path = fast_path(instrs, tl, skip=kl)
    return acc


def account_table(acc: Account, recorded=None):
    """The account as a Table, with the lab's recorded budget beside it when given (an InstructionBudget)."""
    rows = acc.rows()
    if recorded is not None:
        rec = {}
        for c in recorded.categories:   # the notes name them "UTCQMMA.2CTA (MMA)", "SYNCS (...)", "UTCBAR (...)", other
            key = next((k for k in ("UTCQMMA", "SYNCS", "UTCBAR") if c.name.startswith(k)), "other")
            rec[key] = c.count
        for r in rows:
            if r["class"] == "total":
                r["recorded per tile"] = recorded.total
            elif r["class"] == "R2UR":
                r["recorded per tile"] = "— (counted in other)"
            else:
                r["recorded per tile"] = rec.get(r["class"], "—")
    waits = f", {WAIT_KINDS[acc.wait_kind]} waits (wait_kind {acc.wait_kind})" if acc.wait_kind in WAIT_KINDS else ""
    return Table(rows, f"MMA warp, instructions per tile by class — compiled (static fast path{waits})"
                 + (f"; recorded: {recorded.source.label}, {recorded.version}" if recorded is not None else ""))


# ---- the Hopper twin: a consumer warp's instructions per tile ------------------------------------------

def _comb_reload(jumped: list[Instr]) -> bool:
    """A block of only global loads and their addresses: the comb reload that the comb-residue stages
    (07+) skip while a warpgroup's tile keeps its class."""
    ops = {i.op.split(".")[0] for i in jumped}
    return "LDG" in ops and not ops & {"QGMMA", "STG", "SYNCS", "WARPGROUP", "BAR"}


def sm90_tile(b, k: int = 768) -> dict:
    """The instructions one consumer warp of an sm90 ping-pong stage executes per 64 x BN tile on the
    fast path (every try_wait passing at once; compiled): the tile loop (the innermost loop holding the
    QGMMAs and the epilogue's STGs) with its K loop (the innermost loop holding the QGMMAs; absent when
    unrolled) taken K / block_k times. In a stage that keeps comb across tiles (exports residue_order),
    the comb reload is left out (it runs once per class change). By opcode, with the total."""
    instrs = parse(b.sass)
    tl = [r for r in loops(instrs) if any(_inside(i, r) and i.op.startswith("QGMMA") for i in instrs)
          and any(_inside(i, r) and i.op.startswith("STG") for i in instrs)]
    if not tl:
        raise AccountError("no loop holds both the QGMMAs and the epilogue's STGs: not an sm90 ping-pong consumer")
    tile = tl[0]
    kl = [r for r in loops_containing(instrs, "QGMMA") if r != tile and tile[0] <= r[0] and r[1] <= tile[1]]
    take = _comb_reload if b.exports.get("residue_order") else None
    passes = k // b.exports["block_k"]
    out = Counter()
    if kl:
        for i in fast_path(instrs, kl[0], take=take):
            out[i.op.split(".")[0]] += passes
        path = fast_path(instrs, tile, skip=kl[0], take=take)
    else:
        path = fast_path(instrs, tile, take=take)
    for i in path:
        out[i.op.split(".")[0]] += 1
    return {"unrolled": not kl, "k_passes": passes if kl else 1, "total": sum(out.values()),
            "by_opcode": dict(out.most_common()), "wait_kind": b.exports.get("wait_kind")}
