"""The costs the timing model replays a graph with: one JSON file per GPU, every constant with its unit,
its kind and its source.

    cal = load("h100")                      # the newest calibration of the chip (provisional until measured)
    cal["tma.l2_latency_cycles"]            # a value; cal.entry(name) has unit, kind, source
    cal.fitted                              # the names fitted on a stage (sm90/06 only, the protocol)

A file (schema SCHEMA):
    {"schema": "pelib.predict.calibration/1", "chip": "h100", "device": "...", "date": "...",
     "provisional": true, "protocol": "...",
     "constants": {"<name>": {"value": v, "unit": "...", "kind": KIND, "source": "..."}, ...}}
Optional "curves" (measured by pelib.calibrate, carried over by pelib.predict.measured): name -> points
{"gbps", "cycles", "clock_ghz"}: "tma_load.sequential", "tma_load.scattered", "tma_load.l2" (a TMA A box's
latency against the achieved load bandwidth); where present they replace the DRAM formula.
Kinds: "measured" (a microbenchmark or committed run of this project, named), "public" (a cited
public source), "fitted" (fitted on the named stage's measurement: the protocol allows sm90/06 only),
"transferred" (taken from another chip's calibration, named), "provisional" (a placeholder of the right
order, to be replaced by a measurement; its source says what measures it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import ROOT

SCHEMA = "pelib.predict.calibration/1"
KINDS = ("measured", "public", "fitted", "transferred", "provisional")
HERE = Path(__file__).resolve().parent / "calibrations"
# What the model reads (name -> unit); a calibration must give every one.
REQUIRED = {
    "sm_count": "SMs",
    "clock_ghz.timed": "GHz", "clock_ghz.sustained": "GHz",
    "tensor.flop_per_clk_sm": "FLOP/clk/SM",
    "wgmma.tail_cycles": "cycles",
    "issue.cpi": "cycles/instruction",
    "issue.slots_per_clk": "instructions/clk per sub-partition",
    "mbarrier.arrive_cycles": "cycles", "mbarrier.wait_pass_cycles": "cycles", "mbarrier.wake_cycles": "cycles",
    "bar_sync.cycles": "cycles",
    "tma.issue_cycles": "cycles", "tma.l2_latency_cycles": "cycles", "tma.bytes_per_clk_sm": "B/clk",
    "dram.bandwidth_gbps": "GB/s",
    "l2.bytes": "B", "l2.demand_miss": "1",
    "store.bytes_per_clk_sm": "B/clk", "store.drain_cycles": "cycles",
    "ldg.latency_cycles": "cycles",
    "launch.overhead_us": "us", "cta.launch_cycles": "cycles",
}


# Optional (1.0 where absent): the tensor pipe's service beside another warpgroup's epilogue over its service alone.
OPTIONAL = {"tensor.beside_epilogue": "ratio", "clock_ghz.launch06": "GHz"}

# The DRAM latency formula's constants: required where the calibration has no measured TMA latency curves.
FORMULA = {"dram.latency_idle_ns": "ns", "dram.queue_factor": "1", "dram.scatter_penalty_ns": "ns"}


class CalibrationError(ValueError):
    """A calibration file is missing, malformed, or lacks a constant the model needs."""


@dataclass
class Calibration:
    chip: str
    device: str
    date: str
    provisional: bool
    protocol: str
    constants: dict
    path: str = ""
    notes: list = field(default_factory=list)
    curves: dict = field(default_factory=dict)   # name -> [{"gbps", "cycles", "clock_ghz"}]: measured curves

    def curve(self, name: str) -> list[dict] | None:
        """A measured curve (latency in cycles at each point's clock against achieved GB/s), or None."""
        pts = self.curves.get(name)
        return sorted(pts, key=lambda p: p["gbps"]) if pts else None

    def __getitem__(self, name: str) -> float:
        if name not in self.constants:
            raise CalibrationError(f"the calibration of {self.chip} ({self.path or 'in memory'}) has no {name!r}: "
                                   f"add it with its unit ({REQUIRED.get(name, '?')}), kind and source")
        return float(self.constants[name]["value"])

    def entry(self, name: str) -> dict:
        self[name]
        return dict(self.constants[name])

    def get(self, name: str, default=None):
        return float(self.constants[name]["value"]) if name in self.constants else default

    @property
    def fitted(self) -> list[str]:
        return sorted(n for n, c in self.constants.items() if c.get("kind") == "fitted")

    def with_values(self, **values) -> "Calibration":
        """A copy with some constants replaced (names with '__' for '.'), kind and source kept."""
        out = {k: dict(v) for k, v in self.constants.items()}
        for k, v in values.items():
            name = k.replace("__", ".")
            if name not in out:
                raise CalibrationError(f"no constant {name!r} to replace")
            out[name]["value"] = float(v)
        return Calibration(self.chip, self.device, self.date, self.provisional, self.protocol, out, self.path,
                           list(self.notes), self.curves)

    def label(self) -> str:
        """'provisional calibration, H100 ...' or 'calibration measured on <device> on <date>'."""
        if self.provisional:
            return f"provisional calibration of {self.device} (public sources and committed runs; not measured)"
        return f"costs measured on {self.device} on {self.date}"

    def table(self) -> list[dict]:
        return [{"constant": n, "value": c["value"], "unit": c.get("unit", ""), "kind": c.get("kind", ""),
                 "source": c.get("source", "")} for n, c in sorted(self.constants.items())]

    def to_json(self) -> dict:
        out = {"schema": SCHEMA, "chip": self.chip, "device": self.device, "date": self.date,
               "provisional": self.provisional, "protocol": self.protocol,
               "constants": {k: dict(v) for k, v in self.constants.items()}}
        if self.curves:
            out["curves"] = {k: [dict(p) for p in v] for k, v in self.curves.items()}
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def check(doc: dict, where: str = "") -> list[str]:
    """What is wrong with a calibration document (empty: nothing)."""
    bad = []
    if not isinstance(doc, dict):
        return [f"{where}: a calibration is a JSON object"]
    if doc.get("schema") != SCHEMA:
        bad.append(f"{where}: schema is {doc.get('schema')!r}, the model reads {SCHEMA!r}")
    for k in ("chip", "device", "constants"):
        if k not in doc:
            bad.append(f"{where}: no {k!r}")
    consts = doc.get("constants") or {}
    need = dict(REQUIRED) if doc.get("curves") else {**REQUIRED, **FORMULA}
    for name, unit in need.items():
        c = consts.get(name)
        if c is None:
            bad.append(f"{where}: no constant {name!r} ({unit})")
            continue
        if not isinstance(c.get("value"), (int, float)) or isinstance(c.get("value"), bool):
            bad.append(f"{where}: {name} has no numeric value")
        if c.get("kind") not in KINDS:
            bad.append(f"{where}: {name} has kind {c.get('kind')!r}, not one of {KINDS}")
        if not str(c.get("source", "")).strip():
            bad.append(f"{where}: {name} names no source")
    if consts and not doc.get("provisional") and any(c.get("kind") == "provisional" for c in consts.values()):
        bad.append(f"{where}: a calibration with provisional constants must say \"provisional\": true")
    for name, pts in (doc.get("curves") or {}).items():
        if not isinstance(pts, list) or not pts or any(
                not all(isinstance(p.get(k), (int, float)) for k in ("gbps", "cycles", "clock_ghz")) for p in pts):
            bad.append(f"{where}: curve {name!r} needs points with numeric gbps, cycles and clock_ghz")
    return bad


def from_json(doc: dict, path: str = "") -> Calibration:
    bad = check(doc, path or "calibration")
    if bad:
        raise CalibrationError("the calibration is not usable:\n  " + "\n  ".join(bad))
    return Calibration(doc["chip"], doc["device"], str(doc.get("date", "")), bool(doc.get("provisional")),
                       str(doc.get("protocol", "")), {k: dict(v) for k, v in doc["constants"].items()}, path,
                       list(doc.get("notes") or []), {k: list(v) for k, v in (doc.get("curves") or {}).items()})


def load(which: str | Path) -> Calibration:
    """A calibration by chip name ('h100', 'h200', 'b200': the committed file under
    pelib/predict/calibrations) or by path."""
    p = Path(which)
    if not p.suffix:
        cands = sorted(HERE.glob(f"*{str(which).lower()}*.json"))
        measured = [c for c in cands if "provisional" not in c.name]
        pick = (measured or cands)
        if not pick:
            raise CalibrationError(f"no calibration for {which!r} under {HERE}: pass a calibration file "
                                   f"(--calibration <file>) or one of {available()}")
        p = pick[-1]
    if not p.is_file():
        raise CalibrationError(f"no calibration file {p}: pass one of {available()} or a path to a JSON file")
    try:
        doc = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{p} is not JSON ({e}): a calibration is one JSON object") from None
    return from_json(doc, rel(p))


def rel(path) -> str:
    """A file's path as committed text names it: relative to the repository where it lies inside it."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(path)


def available() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.json"))
