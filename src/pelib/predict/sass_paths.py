"""The SASS a warp executes between two of its simulated events: the stage's cubin with line information,
each instruction tagged with the stage-file line it comes from, and the fast path between two lines.

    sp = SassPaths.of(stage)                 # a lineinfo build of the same source and defines
    seg = sp.walk(start, "wait_begin", 313)  # -> Segment(end, instructions, classes, back_edges)

Method (evidence: compiled):
  1. NVRTC builds the stage with `lineinfo` (the SASS is instruction for instruction the device build's:
     tests/test_predict.py checks it) and `nvdisasm -gi` prints, per instruction, its source line and
     the inlining chain; the outermost frame in the stage file is the line an event names (the
     simulator's twins take the call site's __builtin_LINE, src/kernels/sim/runtime/api.h).
  2. Out-of-line blocks after the kernel's last EXIT (a failed try_wait's retry loop, nvdisasm places
     them there) are off the fast path: the walk never enters them.
  3. An event is anchored at a reachable instruction of its line whose opcode does what the event names
     (a wait at SYNCS.PHASECHK, an arrive at SYNCS.ARRIVE, a TMA load at UTMALDG, a commit at UTCBAR, ...;
     a neighbouring line at a price, where the line table gives a merged instruction its neighbour's).
     The segment between two events is the cheapest path through the control-flow graph from the first
     anchor to the second that passes no other event's unpredicated instruction (it would have been
     logged) and no out-of-line retry block, where taking a forward conditional branch costs the
     instructions it skips: a warp falls through data-dependent branches (a guarded store is executed)
     unless only the jump reaches the next event, and every try_wait passes at its first try
     (sass_account's fast path, generalised to any pair of events). A K loop (one K block per pass) keeps
     its trip count: its back edge is not taken on the last pass and not left before. Loops with no event
     inside are walked zero times (a small undercount, named in the prediction's assumptions).
"""
from __future__ import annotations

import heapq
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from .. import build as _build
from ..isa import sass as _sass
from ..isa.sass_account import Instr

_FILE_LINE = re.compile(r'//## File "([^"]+)", line (\d+)(.*)$')
_INLINED = re.compile(r'inlined at "([^"]+)", line (\d+)')
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")

# The opcode (prefix) that carries each event kind in the SASS. A wait_end sits on its wait_begin's
# TRYWAIT (the same instruction). Kinds without an instruction (async completions) have none.
ANCHORS = {
    "wait_begin": ("SYNCS.PHASECHK",), "wait_end": ("SYNCS.PHASECHK",),
    "arrive": ("SYNCS.ARRIVE", "UTCBAR"), "expect_tx": ("SYNCS.ARRIVE",),
    "tma_load": ("UTMALDG",), "tma_store": ("UTMASTG",), "mma": ("QGMMA", "HGMMA", "UTCQMMA", "UTCHMMA",
                                                                  "UTCOMMA", "UTCMMA", "UTCBMMA"),
    "commit": ("UTCBAR",), "bar_sync": ("BAR.SYNC", "BAR.ARV", "BAR.RED", "BAR"),
    "cluster_sync": ("UCGABAR_WAIT", "BAR.SYNC"), "exit": ("EXIT",), "tmem_ld": ("LDTM",), "tmem_cp": ("UTCCP",),
    "tmem_alloc": ("UTCATOM", "UTCALLOC"), "tmem_dealloc": ("UTCATOM", "UTCDEALLOC"),
    "phase_begin": (), "phase_end": (),
}
# The arrive half of a split-phase barrier, where the event is logged at the arrive: the simulator logs a
# cluster barrier (cluster_sync) when a thread arrives (src/kernels/sim/runtime/sync.cpp,
# cluster_barrier_arrive), and barrier.cluster.arrive[.relaxed] and barrier.cluster.wait are separate
# instructions (PTX ISA 9.7.13.4 barrier.cluster: UCGABAR_ARV, UCGABAR_WAIT in the SASS). A line that calls
# arrive and wait together (cluster_sync()) keeps its wait as the anchor (ANCHORS); a line holding only the
# arrive (an arrive split from its wait, with work between them) is anchored at that arrive, not at some
# later line's wait past everything the warp does in between.
SPLIT_ARRIVE = {"cluster_sync": ("UCGABAR_ARV",)}
# The events a warp's stream keeps: an unpredicated instruction of theirs on a path would have been logged.
KEPT = ("wait_begin", "arrive", "expect_tx", "tma_load", "tma_store", "commit", "bar_sync", "cluster_sync")
# Instruction classes a segment is priced by (calibration: cycles per instruction of each class).
CLASS_OF = (("STG", "store"), ("STS", "smem"), ("LDS", "smem"), ("LDG", "load"), ("LD.", "load"),
            ("SHFL", "shuffle"), ("SYNCS", "sync"), ("BAR", "sync"), ("QGMMA", "mma"), ("HGMMA", "mma"),
            ("UTC", "mma"), ("UTMA", "tma"), ("LDTM", "tmem"), ("STTM", "tmem"))


class SassPathError(RuntimeError):
    """The SASS has no instruction for an event, or no path between two events."""


def _first_prefix(table, op: str, default):
    """The class of the first (prefix, class) of `table` that `op` starts with, else `default`."""
    return next((cls for prefix, cls in table if op.startswith(prefix)), default)


def instr_class(op: str) -> str:
    return _first_prefix(CLASS_OF, op, "alu")


def store_bytes(op: str) -> int:
    """Bytes one lane stores (or loads) with this STG/ST/LDG opcode (STG.E.128 -> 16; no width suffix -> 4)."""
    m = re.search(r"\.(8|16|32|64|128)\b", op)
    return int(m.group(1)) // 8 if m else 4


@dataclass(frozen=True)
class LInstr:
    """One SASS instruction with its stage-file line (0 where none) and its control flow."""

    index: int
    offset: int
    op: str
    line: int
    target: int | None      # branch target index
    conditional: bool
    out_of_line: bool
    text: str = ""
    stall: int = 1          # cycles before the warp's next instruction may issue (the control bits, stall())
    ctrl: int = 0x7E0       # the whole control field (control()); the default: no scoreboard set, none waited

    @property
    def write_sb(self) -> int | None:
        """The scoreboard this instruction releases when its result is written (None: fixed latency)."""
        b = (self.ctrl >> 5) & 7
        return None if b == 7 else b

    @property
    def wait_mask(self) -> int:
        """The scoreboards this instruction waits on before it issues (bit k: scoreboard k)."""
        return (self.ctrl >> 11) & 0x3F

    @property
    def is_branch(self) -> bool:
        return self.op.split(".")[0] in ("BRA", "JMP")


@dataclass
class Segment:
    """The instructions a warp executes from one event's anchor (exclusive) to the next's (exclusive)."""

    end: int                         # the next event's anchor (instruction index)
    path: tuple                      # instruction indices walked
    classes: Counter = field(default_factory=Counter)
    store_bytes: int = 0             # per lane
    back_edges: tuple = ()           # positions in `path` right after a taken backward branch
    program: tuple = ()              # what the replay executes (program())
    k_state: object = None           # the K loop and its iteration after this segment
    relaxed: bool = False            # walked past another event's instruction (no path without): a warning

    @property
    def n(self) -> int:
        return len(self.path)


class SassPaths:
    """Line-tagged SASS of one stage build and the fast paths between its events (memoised)."""

    def __init__(self, text: str, stage_file: str):
        self.stage_file = stage_file
        self.instrs = parse(text, stage_file)
        self.retry = retry_loops(self.instrs)
        self._succ = [self._successors(i) for i in self.instrs]
        self._memo: dict = {}
        self.trips: int | None = None           # iterations of a K loop per entry (set by the caller)
        self.by_line: dict[int, list[int]] = {}
        for i in self.instrs:
            if not i.out_of_line and i.index not in self.retry:
                self.by_line.setdefault(i.line, []).append(i.index)
        self.forbid = self.forbidden({(k, None) for k in KEPT})
        self.k_loops = k_loops(self.instrs, self.retry)

    def forbidden(self, logged) -> frozenset:
        """The unpredicated instructions that would each have been an event of their own: those of a kept
        kind at a line where the log has events of that kind ((kind, None): at any line)."""
        any_line = {k for k, ln in logged if ln is None and k in KEPT}
        at = {(k, ln) for k, ln in logged if k in KEPT and ln is not None}
        out = set()
        for i in self.instrs:
            if i.text.startswith("@") or i.out_of_line:
                continue
            for k in KEPT:
                if (i.op.startswith(ANCHORS[k]) or self._split_arrive(k, i)) and (k in any_line or (k, i.line) in at):
                    out.add(i.index)
                    break
        return frozenset(out)

    def _split_arrive(self, kind: str, i: LInstr) -> bool:
        """`i` is the arrive of a split barrier of `kind` (SPLIT_ARRIVE) on a line that holds no anchor of the
        kind's own (ANCHORS): the instruction the event at that line stands for."""
        pre = SPLIT_ARRIVE.get(kind)
        return bool(pre) and i.op.startswith(pre) and not any(
            self.instrs[k].op.startswith(ANCHORS[kind]) for k in self.by_line.get(i.line, ()))

    def use_log(self, logged) -> None:
        """Restrict the no-other-event rule to the (kind, line) pairs the run's log holds."""
        f = self.forbidden(logged)
        if f != self.forbid:
            self.forbid = f
            self._memo.clear()

    @classmethod
    def of(cls, stage) -> "SassPaths":
        """The paths of a pelib.stage.Stage (its source and defines, built with line information)."""
        return _paths(str(stage.path), stage.arch, tuple(sorted(stage.defines.items())))

    def _successors(self, i: LInstr) -> tuple:
        n = len(self.instrs)
        base = i.op.split(".")[0]
        if base == "EXIT" or base == "RET":
            nxt = (i.index + 1,) if i.conditional else ()
        elif i.is_branch and i.target is not None:
            nxt = (i.index + 1, i.target) if i.conditional else (i.target,)
        else:
            nxt = (i.index + 1,)
        return tuple(k for k in nxt if k < n and not self.instrs[k].out_of_line and k not in self.retry)

    def anchors(self, kind: str, line: int | None) -> list[int]:
        """Instruction indices that can carry an event of `kind` at stage line `line` (any line if None)."""
        pre = ANCHORS.get(kind)
        if pre is None:
            raise SassPathError(f"no SASS anchor for event kind {kind!r}")
        pool = (self.by_line.get(line, []) if line is not None else
                [i.index for i in self.instrs if not i.out_of_line and i.index not in self.retry])
        own = [k for k in pool if self.instrs[k].op.startswith(pre)] if pre else list(pool)
        if own or line is None:
            return own
        return [k for k in pool if self._split_arrive(kind, self.instrs[k])]   # an arrive split from its wait

    def walk(self, start: int, kind: str, line: int | None, k_state=None) -> Segment:
        """The fast path from instruction `start` (exclusive; -1: the kernel's entry) to the nearest anchor
        of the next event (kind at line); a wait_end stays on its wait_begin's instruction. `k_state`
        (a K loop and its iteration) keeps a K loop's trip count (self.trips): its back edge is not taken
        on the last iteration, and it is not left before; the segment's k_state is the one after it."""
        key = (start, kind, line, k_state, self.trips)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if kind == "wait_end" and start >= 0 and self.instrs[start].op.startswith(ANCHORS["wait_end"]):
            seg = Segment(start, ())
            seg.k_state = k_state
            self._memo[key] = seg
            return seg
        # the event's line, and (at a price) its neighbours: the line table gives a merged or scheduled
        # instruction one of its neighbours' lines (an unrolled copy's arrive shows its wait_group's line)
        targets = {k: 0 for k in self.anchors(kind, line)}
        if line is not None:
            for d in range(1, NEAR_LINES + 1):
                for ln in (line - d, line + d):
                    for k in self.anchors(kind, ln):
                        targets.setdefault(k, NEAR_PENALTY * d)
        if not targets and line is not None:      # the event's line holds no such opcode: any of the kind
            targets = {k: 0 for k in self.anchors(kind, None)}
        if not targets:
            raise SassPathError(f"{self.stage_file}: no {ANCHORS.get(kind)} instruction for a {kind} event "
                                f"at line {line}")
        banned = set()
        if k_state is not None and self.trips:
            (head, br), it = k_state
            banned.add((br, head) if it + 1 >= self.trips else (br, br + 1))
        seg = None
        tiers = ((banned, self.forbid), (set(), self.forbid), (banned, frozenset()), (set(), frozenset()))
        for tier, (ban, forbid) in enumerate(tiers):
            seg = self._bfs(start, targets, ban, forbid)
            if seg is None and line is not None:
                seg = self._bfs(start, {k: 0 for k in self.anchors(kind, None)}, ban, forbid)
            if seg is not None:
                seg.relaxed = tier >= 2        # found only past another event's instruction
                break
        if seg is None:
            raise SassPathError(f"{self.stage_file}: no path from instruction {start} to a {kind} at line {line}")
        seg.k_state = self._k_after(start, seg, k_state)
        self._memo[key] = seg
        return seg

    def _k_after(self, start: int, seg: Segment, k_state):
        """The K-loop state after walking `seg` from `start`."""
        state = k_state
        prev = start
        for k in list(seg.path) + [seg.end]:
            for lp in self.k_loops:
                head, br = lp
                if prev == br and k == head:
                    state = (lp, (state[1] + 1) if state and state[0] == lp else 1)
                elif prev == br and k == br + 1 and state and state[0] == lp:
                    state = None
                elif k == head and prev != br and not (head <= prev <= br):
                    state = (lp, 0)
            prev = k
        return state

    def _cost(self, k: int, s: int) -> int:
        """Walking from instruction k to s: 1, and a taken forward conditional branch costs the instructions
        it skips on top, so that a warp falls through data-dependent branches (a guarded store is executed)
        unless only the jump reaches the next event (sass_account's rule for the fast path)."""
        i = self.instrs[k]
        if s > k + 1 and i.conditional and i.is_branch:
            return 2 + (s - k - 1)
        return 1

    def _bfs(self, start: int, targets: dict, banned=frozenset(), forbid=frozenset()) -> Segment | None:
        """The cheapest path (see _cost) from `start` to a target (plus the target's price) that passes no
        other event's instruction (`forbid`: an unpredicated wait, arrive, TMA, barrier or commit would have
        been an event of its own) and no `banned` edge."""
        first = (0,) if start < 0 else self._succ[start]
        dist, prev, heap = {}, {}, []
        for k in first:
            if (start, k) in banned or (k in forbid and k not in targets):
                continue
            c = 1 if start < 0 else self._cost(start, k)
            if c < dist.get(k, 1 << 60):
                dist[k], prev[k] = c, start
                heapq.heappush(heap, (c, k))
        end, best = None, 1 << 60
        while heap:
            d, k = heapq.heappop(heap)
            if d >= best:
                break
            if d > dist.get(k, 1 << 60):
                continue
            if k in targets and d + targets[k] < best:
                end, best = k, d + targets[k]
                continue
            for s in self._succ[k]:
                if (k, s) in banned or (s in forbid and s not in targets):
                    continue
                nd = d + self._cost(k, s)
                if nd < dist.get(s, 1 << 60):
                    dist[s], prev[s] = nd, k
                    heapq.heappush(heap, (nd, s))
        if end is None:
            return None
        path = []
        k = prev[end]
        while k != start and k >= 0:
            path.append(k)
            k = prev[k]
        path.reverse()
        cls = Counter(instr_class(self.instrs[k].op) for k in path)
        sb = sum(store_bytes(self.instrs[k].op) for k in path if self.instrs[k].op.startswith("STG"))
        backs, last = [], start
        for pos, k in enumerate(list(path) + [end]):
            if last >= 0 and k <= last and self.instrs[last].is_branch:
                backs.append(pos)
            last = k
        seg = Segment(end, tuple(path), cls, sb, tuple(backs))
        seg.program = program(self.instrs, seg.path, end)
        return seg


def parse(text: str, stage_file: str) -> list[LInstr]:
    """nvdisasm -gi text -> instructions with the stage-file line of their outermost frame."""
    name = stage_file.rsplit("/", 1)[-1]
    raw, labels, pending, line = [], {}, [], 0
    for ln in text.splitlines():
        m = _FILE_LINE.search(ln)
        if m:
            f, n, rest = m.group(1), int(m.group(2)), m.group(3)
            outer = [(a, int(b)) for a, b in _INLINED.findall(rest)]
            chain = [(f, n)] + outer
            for cf, cn in reversed(chain):
                if cf.rsplit("/", 1)[-1] == name:
                    line = cn
                    break
            continue
        lm = _LABEL.match(ln)
        if lm:
            pending.append(lm.group(1))
            continue
        if ln.strip().startswith("/* 0x"):
            hm = _HEX.search(ln)
            if hm and raw and raw[-1][4] is None:          # the instruction's upper 64 bits: its control bits
                raw[-1] = raw[-1][:4] + (control(int(hm.group(1), 16)),)
            continue
        om = re.search(r"/\*([0-9a-f]{4,})\*/", ln)
        if not om:
            continue
        mi = _sass._INSTR.search(ln)
        if not mi:
            continue
        for lab in pending:
            labels[lab] = len(raw)
        pending = []
        body = ln.split("*/", 1)[1].split(";")[0].strip()
        raw.append((int(om.group(1), 16), mi.group(1), body, line, None))
    last_exit = max((k for k, r in enumerate(raw) if r[1].split(".")[0] == "EXIT"), default=len(raw) - 1)
    out = []
    for k, (off, op, body, ln_, ct) in enumerate(raw):
        t = _TARGET.search(body)
        tgt = labels.get(t.group(1)) if t else None
        probe = Instr(off, op, body, None, body.startswith("@"))
        ct = 0x7E0 if ct is None else ct
        out.append(LInstr(k, off, op, ln_, tgt, probe.conditional, k > last_exit, body, max(1, ct & 0xF), ct))
    return out


_HEX = re.compile(r"/\* (0x[0-9a-f]{16}) \*/")


def stall(hi: int) -> int:
    """An instruction's stall count from the upper 64 bits of its 128-bit encoding: the compiler's fixed delay
    before the same warp's next instruction may issue, at least 1. The control field is the encoding's
    top 23 bits (bits 105-127: stall 4 bits, yield 1, write and read scoreboard 3 each, wait mask 6, reuse
    4), the layout since Volta (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
    Microbenchmarking", arXiv 1804.06826, the control information; cloudcores/CuAssembler
    CuAsm/CuSMVersion.py splitControlCodes_7x_8x: code2 >> 41, stall in the low 4 bits; sm_90 keeps the
    128-bit form); ncu reports the cycles it costs as the "wait" stall reason."""
    return max(1, control(hi) & 0xF)


def control(hi: int) -> int:
    """The 23-bit control field from the upper 64 bits of an instruction (bits 105-127, stall()): from the low
    bit, stall 4 bits, yield 1, write scoreboard 3 (7: none), read scoreboard 3 (7: none), wait mask 6, reuse 4
    (CuAssembler CuAsm/CuSMVersion.py, the 7.x/8.x control codes)."""
    return (hi >> 41) & 0x7FFFFF


# The variable-latency instructions whose latency the calibration prices (sb.latency_cycles.<class>, the latency
# probe's dependent chains; LDSM is priced as LDS); a scoreboard set by any other (SYNCS: an event of the graph;
# LDC, S2R, MUFU: the prologue) is released at once. LDG's latency is ldg.latency_cycles (the L2 chase).
SB_LATENCY = (("SHFL", "shfl"), ("LDS", "lds"))


def sb_class(op: str) -> str | None:
    return _first_prefix(SB_LATENCY, op, None)


_MMA_SHAPE = re.compile(r"(\d+)x(\d+)x(\d+)")
_DEPBAR = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*(0x[0-9a-f]+|\d+)")


def program(instrs: list[LInstr], path: tuple, end: int) -> tuple:
    """A segment as the replay executes it: runs of plain instructions as ("alu", n, cycles), cycles the sum of
    their stall counts (stall(): what they take alone, the special items' stall beyond their own issue
    cycle added to the run after them); each warpgroup MMA
    as ("mma", m, n, k, closes_group) (nvdisasm marks the last MMA of a commit group `gsb0`; PTX ISA
    9.7.15.6.2 wgmma.commit_group); each wait_group as ("depbar", N) (WARPGROUP.DEPBAR.LE gsb0, N: PTX
    ISA 9.7.15.6.3 wgmma.wait_group N); each global store as ("stg", bytes per lane); each global
    load as ("ldg", bytes per lane, scoreboard); each local store and load (a spill: STL, LDL) as ("stl", bytes
    per lane) and ("ldl", bytes per lane, scoreboard); each taken backward branch as ("back", (loop head, branch)),
    placed where it is taken.
    The scoreboards (control(): an instruction of variable latency names the scoreboard it releases when its
    result is written; a later one names those it waits on): an instruction that waits is preceded by
    ("sbwait", mask) where it is an item of its own (an MMA, a global access); a run of plain instructions
    carries its scoreboard marks as a fourth field, in order: ("wait", instructions and cycles into the run,
    mask) before an instruction that waits, ("set", instructions and cycles into the run, scoreboard, class)
    at a variable-latency producer of a class the calibration prices (SB_LATENCY); an LDG carries its
    scoreboard. Without latency costs the replay runs each run whole, as before the marks."""
    out: list = []
    alu = 0
    cyc = 0
    marks: list = []

    def flush():
        nonlocal alu, cyc, marks
        if alu or cyc:
            out.append(("alu", alu, cyc, tuple(marks)) if marks else ("alu", alu, cyc))
        alu = cyc = 0
        marks = []
    seq = list(path) + [end]
    for pos, k in enumerate(path):
        i = instrs[k]
        nxt = seq[pos + 1]
        special = i.op.startswith(("QGMMA", "HGMMA", "UTCQMMA", "UTCOMMA", "UTCHMMA", "UTCMMA", "UTCBMMA", "LDTM",
                                   "WARPGROUP.DEPBAR", "STG", "LDG", "STL", "LDL"))
        if i.wait_mask and special:
            flush()
            out.append(("sbwait", i.wait_mask))
        if i.op.startswith(("QGMMA", "HGMMA")):
            flush()
            m = _MMA_SHAPE.search(i.op)
            mm, nn, kk = (int(x) for x in m.groups()) if m else (64, 256, 32)
            out.append(("mma", mm, nn, kk, "gsb0" in i.text.split(",")[-1]))
        elif i.op.startswith(("UTCQMMA", "UTCOMMA", "UTCHMMA", "UTCMMA", "UTCBMMA")):
            flush()
            out.append(("umma", ".2CTA" in i.op))        # tcgen05.mma: one thread issues (PTX ISA 9.7.16.10)
        elif i.op.startswith("LDTM"):
            flush()
            out.append(("tmem_ld", 1))                   # tcgen05.ld (PTX ISA 9.7.16.8.3)
        elif i.op.startswith("WARPGROUP.DEPBAR"):
            flush()
            d = _DEPBAR.search(i.text)
            out.append(("depbar", int(d.group(1), 0) if d else 0))
        elif i.op.startswith("STG"):
            flush()
            out.append(("stg", store_bytes(i.op)))
        elif i.op.startswith("LDG"):
            flush()
            out.append(("ldg", store_bytes(i.op), i.write_sb))   # bytes per lane, as a store's
        elif i.op.startswith("STL"):
            flush()
            out.append(("stl", store_bytes(i.op)))              # a register spilled to local memory
        elif i.op.startswith("LDL"):
            flush()
            out.append(("ldl", store_bytes(i.op), i.write_sb))   # and read back
        else:
            if i.wait_mask:
                marks.append(("wait", alu, cyc, i.wait_mask))
            cls = sb_class(i.op) if i.write_sb is not None else None
            if cls is not None:
                marks.append(("set", alu, cyc, i.write_sb, cls))
            alu += 1
            cyc += i.stall
        if special and i.stall > 1:
            cyc += i.stall - 1          # the item issues in one cycle; its stall count delays what follows
        if i.is_branch and nxt <= k:
            flush()
            out.append(("back", (nxt, k)))
    flush()
    return tuple(out)


def k_loops(instrs: list[LInstr], retry: set) -> list[tuple[int, int]]:
    """(head, back branch) of each innermost loop that issues TMA loads or MMAs: the loops over K, whose
    trip count (K / the A box's K) the walk keeps."""
    loops = sorted({(i.target, i.index) for i in instrs if i.is_branch and i.conditional and i.target is not None
                    and i.target <= i.index and i.index not in retry}, key=lambda r: r[1] - r[0])
    out = []
    for lo, hi in loops:
        body = instrs[lo:hi + 1]
        if uniform_waterfall(body):
            continue
        mma = sum(1 for b in body if b.op.startswith(ANCHORS["mma"]))
        tma = sum(1 for b in body if b.op.startswith("UTMALDG"))
        # one K block per pass: at most 8 MMAs (4 k32 steps of a 128-B slice, or 4 x 2 halves) or 4 loads (A, B
        # and two scale-factor tiles); a loop over tiles around an unrolled K loop holds more and is no K loop
        if (mma or tma) and mma <= 8 and tma <= 4:
            if not any(o[0] >= lo and o[1] <= hi for o in out):
                out.append((lo, hi))
    return out


def uniform_waterfall(body: list[LInstr]) -> bool:
    """A loop the compiler wraps around one uniform-datapath instruction (a UTMALDG, UTCCP, UTCBAR or UTC*MMA
    issued by one thread picked by its index): ELECT a lane, R2UR.BROADCAST its operands into uniform registers,
    issue, and BRA.U.ANY back while a lane with other operands is left. It runs once per distinct operand set of
    the active lanes (once where one thread issues), whatever K is: no K loop, and no loop a walk repeats."""
    return (body[-1].op.startswith("BRA.U.ANY") and any(b.op.startswith("ELECT") for b in body)
            and sum(1 for b in body if b.op.startswith(("UTC", "UTMA", "UBLK"))) == 1)


def issue_loops(instrs: list[LInstr]) -> list[tuple[int, int]]:
    """(head, back branch) of every uniform_waterfall loop of the SASS: one per instruction a thread picked by
    its index issues."""
    return [(i.target, i.index) for i in instrs if i.is_branch and i.op.startswith("BRA.U.ANY") and i.target is not None
            and i.target < i.index and uniform_waterfall(instrs[i.target:i.index + 1])]


RETRY_GAP = 16      # a bounded wait's retry loop starts this close after its first try_wait
NEAR_LINES, NEAR_PENALTY = 3, 64   # an anchor this many lines from the event's, at this price per line


def retry_loops(instrs: list[LInstr]) -> set:
    """Indices inside the inline retry loops of try_wait (a bounded wait's build): a loop closed by a
    conditional backward branch whose body holds a TRYWAIT and nothing else an event names (sass_account's
    rule), right after the wait's first TRYWAIT of the same line (within RETRY_GAP instructions before the
    loop). The fast path jumps over them; their TRYWAIT is no event's anchor. A spin loop with no first
    try before it (an unbounded wait's, including each copy of an unrolled loop's) is the wait itself."""
    out = set()
    events = tuple(p for k, v in ANCHORS.items() if k not in ("wait_begin", "wait_end") for p in v)
    waits = [i for i in instrs if i.op.startswith("SYNCS.PHASECHK") and not i.out_of_line]
    for i in instrs:
        if not (i.is_branch and i.conditional and i.target is not None and i.target <= i.index):
            continue
        body = instrs[i.target:i.index + 1]
        mine = [b for b in body if b.op.startswith("SYNCS.PHASECHK")]
        if not mine or any(b.op.startswith(events) for b in body if not b.op.startswith("SYNCS.PHASECHK")):
            continue
        first = {w.line for w in waits if i.target - RETRY_GAP <= w.index < i.target}
        if all(b.line in first for b in mine):
            out.update(range(i.target, i.index + 1))
    return out


def disassemble_lines(cubin: bytes) -> str:
    """nvdisasm -c -gi: the SASS with line and inlining information."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        r = subprocess.run([_sass.nvdisasm_path(), "-c", "-gi", "-hex", f.name], capture_output=True, text=True)
    if r.returncode:
        raise SassPathError(f"nvdisasm -gi failed: {r.stderr.strip()}")
    return r.stdout


def lineinfo_build(path: str, arch: str, defines: dict):
    """The stage built with NVRTC's lineinfo (cached like every build; its SASS equals the plain build's)."""
    return _build.build(path, arch, defines, extra_options={"lineinfo": True})


LINES_FILE = "kernel.lines.sass"     # nvdisasm -gi's listing, kept in the lineinfo build's cache entry


def lines_sass(b) -> str:
    """The build's SASS with line information (cached next to its cubin, checked like it)."""
    if b.entry is not None and b.entry.has(LINES_FILE):
        data = b.entry.read(LINES_FILE)
        if data is not None:
            return data.decode()
    text = disassemble_lines(b.cubin)
    if b.entry is not None:
        b.entry.add(LINES_FILE, text.encode())
    return text


@lru_cache(maxsize=64)
def _paths(path: str, arch: str, defines: tuple) -> SassPaths:
    return SassPaths(lines_sass(lineinfo_build(path, arch, dict(defines))), path)
