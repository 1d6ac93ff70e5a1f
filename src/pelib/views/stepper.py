"""Step through one simulated run of a stage, event by event: the ring's slots, each mbarrier's phase,
pending arrivals and tx-count, the TMEM accumulators and their columns, and what each warp waits on.

    st = stepper.step_through("nvfp4/01_pipelined")     # the stage's cached run at seed 0
    st                                                   # JupyterLab: a live slider (and play) over every step
    stepper.replay(run.events)                           # the states themselves: a list of State

The states are recomputed from the run's events (pelib.events' schema) by one rule, `replay`: an mbarrier's
phase completes when its pending arrivals reach zero and its tx-count is zero (PTX ISA, mbarrier: phase
completion); an arrive (or arrive.expect_tx) takes one arrival, expect_tx adds bytes to the tx-count,
complete_tx (a TMA's bytes landing) subtracts them; the next phase starts with the full arrival count. A
barrier's arrival count is read from the run itself: the arrivals its first phase took to complete. The
simulator has no time, so a step is a position in the run's order (simulated order, not time).

The rendered book has no kernel: built with PELIB_BOOK_BUILD=1 a stepper also carries the offline view of
pelib.views.widgets (one precomputed panel per sampled step, a range input choosing which is shown), so
the page stays light (`samples` panels, not every event).
"""
from __future__ import annotations

import copy
import html
from dataclasses import dataclass, field

from .. import evidence
from ..sim import runs as sim_runs
from ..stage import Stage
from .widgets import OFFLINE_NOTE, WidgetError, _Published, book_build, offline_view

QUIET = ("bar_sync", "cluster_sync", "exit", "phase_begin", "phase_end")   # not steps: no barrier, slot or TMEM moves
ARRIVES = ("arrive", "expect_tx")        # an arrival (arrive, arrive.expect_tx: the stages arm with the latter)


class StepperError(ValueError):
    """A run that cannot be stepped through (no events of the CTAs asked for); the message says why."""


@dataclass
class Barrier:
    """One mbarrier of one CTA as the replay sees it."""

    name: str                 # full[2], acc_empty[1], mma_done
    cta: int
    count: int | None         # the arrival count (arrivals its first phase took in the run); None: never completed
    phase: int = 0            # completed phases so far (the current phase's number)
    arrivals: int = 0         # arrivals taken in the current phase
    tx: int = 0               # tx-count of the current phase: expected bytes minus landed bytes

    @property
    def parity(self) -> int:
        """The phase bit: the parity of the current (incomplete) phase; a wait for parity p returns once
        the phase of parity p has completed (mbarrier.try_wait.parity)."""
        return self.phase & 1

    @property
    def pending(self) -> int | None:
        return None if self.count is None else self.count - self.arrivals

    def signal(self, arrivals: int = 0, tx: int = 0) -> bool:
        """Apply one signal; True where it completed the phase."""
        self.arrivals += arrivals
        self.tx += tx
        if self.count is not None and self.arrivals >= self.count and self.tx == 0:
            self.phase += 1
            self.arrivals = 0
            return True
        return False


@dataclass
class State:
    """The run after one step: barriers, ring slots, accumulators and warps, and the event that made it."""

    step: int
    seq: int
    event: str
    barriers: dict             # (cta, name) -> Barrier (copied)
    slots: dict                # (cta, s) -> what the slot holds now
    accs: dict                 # (cta, b) -> what the accumulator holds now
    warps: dict                # (cta, warp) -> what the warp does now ("waits on full[1] for parity 0")
    completed: list = field(default_factory=list)   # (cta, barrier) whose phase this step completed


def _label(e: dict) -> str:
    b, i = e.get("barrier"), e.get("index")
    return "" if b in (None, "") else f"{b}[{i}]" if i is not None else str(b)


def _bar_cta(e: dict) -> int:
    bc = e.get("bar_cta")
    return e["cta"] if bc is None or bc < 0 else bc


def arrival_counts(events) -> dict:
    """{(cta, barrier): arrivals its phase 0 took}, for each barrier whose phase 0 completed in the run
    (an event names its phase 1 or later, or a wait observed phase 0 complete); an element of an array
    whose phase 0 the run never completed takes the count its array's others agree on."""
    arr, done = {}, set()
    for e in events:
        if not _label(e):
            continue
        key = (_bar_cta(e), _label(e))
        ph = e.get("phase")
        if e["kind"] in ARRIVES and ph == 0:
            arr[key] = arr.get(key, 0) + 1
        if ph is not None and ph >= 1 or (e["kind"] == "wait_end" and ph == 0):
            done.add(key)
    known = {k: v for k, v in arr.items() if k in done}
    # a barrier whose first phase the run never saw complete takes the count of its array (full[0] for
    # full[3]: the stages initialise an array in one loop), in the same CTA, else in any
    for e in events:
        if _label(e) and e.get("index") is not None:
            key = (_bar_cta(e), _label(e))
            if key not in known:
                same = [v for (c, n), v in known.items() if n.split("[")[0] == e["barrier"] and c == key[0]] or \
                       [v for (c, n), v in known.items() if n.split("[")[0] == e["barrier"]]
                if same and len(set(same)) == 1:
                    known[key] = same[0]
    return known


def _describe(e: dict) -> str:
    who = f"CTA {e['cta']} warp {e['warp']}" if e["warp"] >= 0 else f"CTA {e['cta']} (async unit)"
    k, lab = e["kind"], _label(e)
    on = f" of CTA {_bar_cta(e)}" if lab and _bar_cta(e) != e["cta"] else ""
    b = f", {e['bytes']:,} B" if e.get("bytes") not in (None, -1) and k != "tmem_alloc" else ""
    what = {"wait_begin": f"waits on {lab}{on} for parity {e.get('parity')}",
            "wait_end": f"passes its wait on {lab}{on} (parity {e.get('parity')})",
            "tma_load": f"issues a TMA load{b} completing on {lab}{on}",
            "tma_load_done": f"TMA bytes land{b} ({lab}{on})", "complete_tx": f"complete_tx{b} on {lab}{on}",
            "expect_tx": f"arrive.expect_tx{b} on {lab}{on}", "arrive": f"arrives on {lab}{on}",
            "commit": f"tcgen05.commit to {lab}{on}", "mma": f"tcgen05.mma (slot {e.get('slot')}, acc {e.get('acc')})",
            "mma_done": "MMA complete", "tmem_ld": f"tcgen05.ld (acc {e.get('acc')})", "tmem_cp": "tcgen05.cp (scale factors)",
            "tmem_alloc": "allocates TMEM", "tmem_dealloc": "frees TMEM", "tma_store": "issues a TMA store",
            "tma_store_done": "TMA store done"}.get(k, k)
    return f"{who}: {what}"


def _first_lanes(events) -> dict:
    """{(cta, warp): the lowest lane that recorded a wait}: one thread stands for its warp's waits."""
    out: dict = {}
    for e in events:
        if e["kind"] == "wait_begin" and e["warp"] >= 0:
            k = (e["cta"], e["warp"])
            out[k] = min(out.get(k, e["lane"]), e["lane"])
    return out


def steps_of(events, ctas=None) -> list[dict]:
    """The events a stepper steps through: those of `ctas` (default: the first cluster, or CTA 0 where
    there is none) that move a barrier, a slot, an accumulator or a warp's wait; a warp's waits through its
    lowest waiting lane; the simulator's many same-instant broadcasts (bar.sync, exit) left out."""
    ev = list(events)
    if not ev:
        raise StepperError("the run has no events to step through")
    if ctas is None:
        clusters = sorted({e["cluster"] for e in ev if e.get("cluster") is not None and e["cluster"] >= 0})
        ctas = sorted({e["cta"] for e in ev if e.get("cluster") == clusters[0]}) if clusters else [0]
    ctas = set(ctas)
    lanes = _first_lanes(ev)
    out = []
    for e in ev:
        if e["kind"] in QUIET or (e["cta"] not in ctas and _bar_cta(e) not in ctas):
            continue
        if e["kind"] in ("wait_begin", "wait_end") and e["lane"] != lanes.get((e["cta"], e["warp"])):
            continue
        out.append(e)
    if not out:
        raise StepperError(f"no events of CTAs {sorted(ctas)} in the run")
    return out


def replay(events, ctas=None) -> list[State]:
    """One State per step (steps_of) by the rule in the module's docstring."""

    ev = sorted(events, key=lambda e: e["seq"])
    counts = arrival_counts(ev)
    bars: dict = {}
    slots: dict = {}
    accs: dict = {}
    warps: dict = {}
    served: dict = {}       # (CTA, slot) -> the CTA whose full[slot] its loads complete on (the pair's leader)
    out = []

    def group(c: int, s: int) -> list:
        """The slots (CTA, s) whose bytes complete on CTA c's full[s]: its own, and a pair's peer's."""
        return sorted({(c, s)} | {k for k, v in served.items() if v == c and k[1] == s})

    def bar(e):
        key = (_bar_cta(e), _label(e))
        if key not in bars:
            bars[key] = Barrier(key[1], key[0], counts.get(key))
        return bars[key]

    for n, e in enumerate(steps_of(ev, ctas)):
        k, lab = e["kind"], _label(e)
        done = []
        if lab and k in ("arrive", "expect_tx", "complete_tx"):
            b = bar(e)
            by = e.get("bytes") or 0
            if b.signal(1 if k in ARRIVES else 0, by if k == "expect_tx" else -by if k == "complete_tx" else 0):
                done.append((b.cta, b.name))
                base = b.name.split("[")[0]
                s = int(b.name[len(base) + 1:-1]) if "[" in b.name else 0
                if base == "full":
                    for key in group(b.cta, s):
                        slots[key] = f"full (phase {b.phase - 1} complete)"
                elif base == "empty":
                    slots[(b.cta, s)] = "empty (released)"
                elif base in ("acc_full", "mma_done"):
                    accs[(b.cta, s)] = "ready for the epilogue"
                elif base == "acc_empty":
                    accs[(b.cta, s)] = "free (drained)"
        elif lab:
            bar(e)
        c = e["cta"]
        if k in ("tma_load", "expect_tx") and lab.startswith("full") and e.get("index") is not None:
            slot_cta = c if k == "tma_load" else _bar_cta(e)
            if k == "tma_load":
                served[(c, e["index"])] = _bar_cta(e)
            if not str(slots.get((slot_cta, e["index"]), "")).startswith("full"):
                slots[(slot_cta, e["index"])] = "filling"
        elif k == "mma":    # a cta_group::2 MMA reads both CTAs' slot and writes both CTAs' TMEM
            peers = [pc for pc, _ in group(c, e["slot"] if e.get("slot") is not None else 0)]
            if e.get("slot") is not None:
                for key in group(c, e["slot"]):
                    slots[key] = "read by the MMA"
            if e.get("acc") is not None:
                for pc in peers:
                    accs[(pc, e["acc"])] = "MMA writing" + (f" (tile {e['tile']})" if e.get("tile") is not None else "")
        elif k == "tmem_ld" and e.get("acc") is not None:
            accs[(c, e["acc"])] = "epilogue reading (tcgen05.ld)"
        if e["warp"] >= 0:
            if k == "wait_begin":
                warps[(c, e["warp"])] = f"waits on {lab}" + (f" of CTA {_bar_cta(e)}" if _bar_cta(e) != c else "") + \
                    f" for parity {e.get('parity')}"
            elif k != "wait_end" or str(warps.get((c, e["warp"]), "")).startswith("waits"):
                warps[(c, e["warp"])] = _describe(e).split(": ", 1)[1]
        out.append(State(n, e["seq"], _describe(e), {key: copy.copy(b) for key, b in bars.items()}, dict(slots),
                         dict(accs), dict(warps), done))
    return out


def sample(n_states: int, samples: int) -> list[int]:
    """`samples` step indices spread evenly over n_states (the first and the last among them)."""
    if n_states <= 0:
        raise StepperError("nothing to sample: no steps")
    if samples < 2 or samples >= n_states:
        return list(range(n_states))
    return sorted({round(i * (n_states - 1) / (samples - 1)) for i in range(samples)})


# ---- one state as HTML ------------------------------------------------------------------------------------

_SLOT_FILL = {"filling": "#fde9a9", "full": "#9ecae9", "read": "#f58518", "empty": "#e8eaed"}
_CSS = ("<style>.pe-step{font-size:0.82em;line-height:1.3}.pe-step-ctas{display:flex;flex-wrap:wrap;gap:0 1.2em}"
        ".pe-step-cta{flex:1 1 300px;max-width:100%}.pe-step table{border-collapse:collapse;margin:0.2em 0}"
        ".pe-step td,.pe-step th{border:1px solid #ccc;padding:0 5px;text-align:left;font-variant-numeric:"
        "tabular-nums}.pe-step .done{background:#c7e9c0}.pe-step h5{margin:0.3em 0 0.1em 0;font-size:1em}"
        ".pe-step .chip{display:inline-block;border:1px solid #bbb;border-radius:3px;padding:0 4px;margin:1px 3px 1px 0}"
        ".pe-step ul{margin:0.2em 0;padding-left:1.2em}</style>")


def _fill(text: str) -> str:
    for k, v in _SLOT_FILL.items():
        if text.startswith(k):
            return v
    return "#fff"


def _tmem_cols(ex) -> dict:
    """{accumulator: 'cols a–b'} from the stage's exports (tmem_acc_col, tmem_acc_stride, tile_n)."""
    if not ex or "tmem_cols" not in ex:
        return {}
    base, stride = ex.get("tmem_acc_col", 0), ex.get("tmem_acc_stride", ex.get("tile_n", 0))
    n = ex.get("mma_n", ex.get("tile_n", 0)) if ex.get("cta_group", 1) == 1 else ex.get("tile_n", 0)
    return {b: f"cols {base + b * stride}–{base + b * stride + n - 1}" for b in range(ex.get("tmem_acc_buffers", 1))}


@dataclass
class Panel:
    html: str

    def _repr_html_(self) -> str:
        return self.html


def render_state(st: State, total: int, ex=None, roles: dict | None = None) -> Panel:
    """One state as a small HTML panel: the step, then per CTA its barriers (completed phases, phase bit,
    pending arrivals, tx-count; the ones this step completed marked), its ring slots, its accumulators
    (with their TMEM columns from the exports) and what each of its warps does."""
    e = html.escape
    cols = _tmem_cols(ex)
    ctas = sorted({c for c, _ in st.barriers} | {c for c, _ in st.slots} | {c for c, _ in st.accs} |
                  {c for c, _ in st.warps})
    parts = [f'<div class="pe-step" data-step="{st.step}"><p><strong>step {st.step + 1} of {total}</strong> '
             f'(run order {st.seq}): {e(st.event)}</p><div class="pe-step-ctas">']
    for c in ctas:
        rows = []
        for (bc, name), b in sorted(st.barriers.items()):
            if bc != c:
                continue
            cls = ' class="done"' if (c, name) in st.completed else ""
            pend = "?" if b.count is None else f"{b.pending} of {b.count}"
            rows.append(f"<tr{cls}><td><code>{e(name)}</code></td><td>{b.phase}</td><td>{b.parity}</td>"
                        f"<td>{pend}</td><td>{b.tx:,}</td></tr>")
        block = [f'<div class="pe-step-cta"><h5>CTA {c}</h5>']
        if rows:
            block.append("<table><tr><th>mbarrier</th><th>phases done</th><th>bit</th><th>pending</th>"
                         "<th>tx B</th></tr>" + "".join(rows) + "</table>")
        chips = [f'<span class="chip" style="background:{_fill(v)}">slot {sl}: {e(v)}</span>'
                 for (sc, sl), v in sorted(st.slots.items()) if sc == c]
        chips += [f'<span class="chip" style="background:#fde9a9">acc {ab}{" (" + cols[ab] + ")" if ab in cols else ""}: '
                  f'{e(v)}</span>' for (ac, ab), v in sorted(st.accs.items()) if ac == c]
        if chips:
            block.append("<div>" + "".join(chips) + "</div>")
        ws = [f"<li>warp {w}{' (' + e(roles[(c, w)]) + ')' if roles and (c, w) in roles else ''}: {e(v)}</li>"
              for (wc, w), v in sorted(st.warps.items()) if wc == c]
        if ws:
            block.append("<ul>" + "".join(ws) + "</ul>")
        parts.append("".join(block) + "</div>")
    parts.append("</div></div>")
    return Panel("".join(parts))


@dataclass
class Stepper(_Published):
    """A slider over a run's steps: live (ipywidgets, every step, with a play button) in JupyterLab; in
    the built book the offline view of `samples` precomputed steps."""

    stage: str
    states: list
    ex: object = None
    roles: dict = field(default_factory=dict)
    label: str = ""
    samples: int = 24
    static: object = None
    box: object = field(default=None, repr=False)
    output: object = field(default=None, repr=False)
    control: object = field(default=None, repr=False)
    value: int = 0
    PLACEHOLDER = "(a step-through of a simulated run: it moves in a live Jupyter kernel)"

    def render(self, i: int) -> Panel:
        if not 0 <= i < len(self.states):
            raise WidgetError(f"step {i} is outside the run's {len(self.states)} steps (0 .. {len(self.states) - 1})")
        return render_state(self.states[i], len(self.states), self.ex, self.roles)

    def select(self, i: int) -> Panel:
        """Go to step i (as the slider would) and return its panel."""
        p = self.render(i)
        self.value = i
        if self.control is not None and self.control.value != i + 1:
            self.control.value = i + 1          # the slider counts steps from 1, as the panels do
        return p

    def _show(self, i: int) -> None:
        self.value = i
        if self.output is not None:
            from IPython.display import HTML, display
            with self.output:
                self.output.clear_output(wait=True)
                display(HTML(_CSS + self.render(i).html))

    window: tuple | None = None      # (first, last + 1) of the steps the offline view samples; None: all

    def offline_html(self) -> str:
        lo, hi = self.window or (0, len(self.states))
        if not 0 <= lo < hi <= len(self.states):
            raise WidgetError(f"window {self.window} is not within the run's {len(self.states)} steps")
        idx = [lo + i for i in sample(hi - lo, self.samples)]
        opts = [(f"step {i + 1} of {len(self.states)}", i) for i in idx]
        span = "" if self.window is None else f" between steps {lo + 1} and {hi}"
        note = (f"{html.escape(self.label)}. {OFFLINE_NOTE} Offline, {len(idx)} of the run's {len(self.states)} steps "
                f"are shown, evenly spaced{span}.")
        view = offline_view([("step", opts)], self.render, note=note)
        return f'<div class="pe-stepper" data-stage="{html.escape(self.stage)}">{_CSS}{view}</div>'


def step_through(stage, defines: dict | None = None, *, run=None, seed=0, ctas=None, samples: int = 24,
                 window: tuple | None = None, live: bool = True) -> Stepper:
    """A stepper over one simulated run of a stage (the run given, else its cached run at `seed`): the CTAs
    of its first cluster (or CTA 0), `samples` steps in the built book."""
    s = stage if isinstance(stage, Stage) else Stage(stage, defines)
    r = run if run is not None else sim_runs.simulate(s, seed=seed)
    if not r.events:
        raise StepperError(f"{s.key}: its simulated run has no events ({r.outcome}: {r.stopped})")
    states = replay(r.events, ctas)
    roles = {}
    for e in r.events:
        if e["warp"] >= 0 and e.get("role") and not str(e["role"]).startswith("warp "):
            roles.setdefault((e["cta"], e["warp"]), str(e["role"]))
    label = (f"{s.key}, simulated run on {r.problem}, seed {r.seed} ({r.outcome}; {evidence.simulated('pelib.sim')}: "
             "order, not time)")
    st = Stepper(stage=s.key, states=states, ex=s.exports, roles=roles, label=label, samples=samples, window=window)
    if window is not None:
        st.offline_html()        # refuses a window outside the run now, not when the page is built
    if live and not book_build():
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover - ipywidgets is a dependency
            live = False
        else:
            st.control = w.IntSlider(value=1, min=1, max=len(states), description="step",
                                     continuous_update=True, layout=w.Layout(width="70%"))
            play = w.Play(value=1, min=1, max=len(states), interval=250, description="play")
            w.jslink((play, "value"), (st.control, "value"))
            st.output = w.Output()
            st.control.observe(lambda ch: st._show(ch["new"] - 1), names="value")
            st.box = w.VBox([w.HTML(f"<em>{html.escape(label)}</em>"), w.HBox([play, st.control]), st.output])
            st._show(0)
    return st
