"""The costs the timing model replays a graph with: one JSON file per GPU, every constant with its unit,
its kind and its source.

    cal = load("h100")                      # the newest calibration of the chip (provisional until measured)
    cal["tma.l2_latency_cycles"]            # a value; cal.entry(name) has unit, kind, source
    cal.fitted                              # the names fitted on a stage (sm90/06 only, the protocol)

A file (schema SCHEMA):
    {"schema": "pelib.predict.calibration/1", "chip": "h100", "device": "...", "date": "...",
     "provisional": true, "protocol": "...",
     "constants": {"<name>": {"value": v, "unit": "...", "kind": KIND, "source": "..."}, ...}}
Optional "occupancy" (pelib.predict.probes' host query, carried over by pelib.predict.measured): a list of
{"cluster", "threads", "smem", "registers", "active_clusters", "source"[, "stage"]}: how many clusters of that
shape the GPU holds at once (cuOccupancyMaxActiveClusters), which the replay launches its grid with.
Optional "curves" (measured by pelib.predict.probes, carried over by pelib.predict.measured): name -> points
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
from . import costs as _costs

SCHEMA = "pelib.predict.calibration/1"
KINDS = ("measured", "public", "fitted", "transferred", "provisional")
HERE = Path(__file__).resolve().parent / "calibrations"
# What the model reads (name -> unit), from the one table of costs (pelib.predict.costs): a calibration must give
# every REQUIRED one; OPTIONAL ones have a default; FORMULA ones are required where it has no measured TMA curves.
REQUIRED = _costs.names("always")
OPTIONAL = _costs.names("optional")
FORMULA = _costs.names("formula")
CHIPS = {"h100": "sm_90a", "h200": "sm_90a", "b200": "sm_100a"}    # a chip's name -> the architecture it runs


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
    occupancy: list = field(default_factory=list)   # [{"cluster", "threads", "smem", "registers", "active_clusters",
                                                    #   "source"}]: resident clusters (cuOccupancyMaxActiveClusters)

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

    def cost(self, name: str) -> float:
        """A cost as the model reads it: its value, else pelib.predict.costs' default or fallback for it."""
        return _costs.value(self, name)

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
            bad = _costs.problems(name, v)
            if bad:
                raise CalibrationError("; ".join(bad))
            out[name]["value"] = float(v)
        return Calibration(self.chip, self.device, self.date, self.provisional, self.protocol, out, self.path,
                           list(self.notes), self.curves, list(self.occupancy))

    def with_occupancy(self, records: list) -> "Calibration":
        """A copy whose occupancy records are `records` (checked as a file's are)."""
        bad = check_occupancy(records, self.path or "calibration")
        if bad:
            raise CalibrationError("the occupancy records are not usable:\n  " + "\n  ".join(bad))
        return Calibration(self.chip, self.device, self.date, self.provisional, self.protocol,
                           {k: dict(v) for k, v in self.constants.items()}, self.path, list(self.notes), self.curves,
                           [dict(r) for r in records])

    def label(self) -> str:
        """'provisional calibration, H100 ...' or 'calibration measured on <device> on <date>'."""
        where = f", {self.path}" if self.path else ""
        if self.provisional:
            return (f"provisional calibration of {self.device} (public sources and committed runs; not measured{where})")
        return f"costs measured on {self.device} on {self.date}" + (f" ({self.path})" if self.path else "")

    def table(self) -> list[dict]:
        return [{"constant": n, "value": c["value"], "unit": c.get("unit", ""), "kind": c.get("kind", ""),
                 "source": c.get("source", "")} for n, c in sorted(self.constants.items())]

    def to_json(self) -> dict:
        out = {"schema": SCHEMA, "chip": self.chip, "device": self.device, "date": self.date,
               "provisional": self.provisional, "protocol": self.protocol,
               "constants": {k: dict(v) for k, v in self.constants.items()}}
        if self.curves:
            out["curves"] = {k: [dict(p) for p in v] for k, v in self.curves.items()}
        if self.occupancy:
            out["occupancy"] = [dict(r) for r in self.occupancy]
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
    chip = str(doc.get("chip", ""))
    if chip and chip not in CHIPS:
        bad.append(f"{where}: chip {chip!r} is not one the model knows ({sorted(CHIPS)})")
    for name, c in consts.items():
        if isinstance(c, dict) and "value" in c:
            bad += [f"{where}: {x}" for x in _costs.problems(name, c["value"])]
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
    bad += check_occupancy(doc.get("occupancy"), where)
    return bad


OCCUPANCY_KEYS = ("cluster", "threads", "smem", "active_clusters")


def check_occupancy(records, where: str = "") -> list[str]:
    """What is wrong with a calibration's occupancy records (empty: nothing; None: no records)."""
    if records is None:
        return []
    if not isinstance(records, list):
        return [f"{where}: occupancy is a list of records {OCCUPANCY_KEYS + ('source',)}"]
    bad = []
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            bad.append(f"{where}: occupancy record {i} is not an object")
            continue
        for k in OCCUPANCY_KEYS:
            v = r.get(k)
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "smem" else 1):
                bad.append(f"{where}: occupancy record {i}: {k} = {v!r}, give a whole number"
                           f"{'' if k == 'smem' else ' of at least 1'}")
        if not str(r.get("source", "")).strip():
            bad.append(f"{where}: occupancy record {i} names no source")
    return bad


def occupancy_from_launches(doc: dict, where: str = "") -> list[dict]:
    """Occupancy records from a run document whose entries carry their launch (pelib.predict.blind's, pelib.bench's):
    every distinct (cluster, threads, smem) with the `active_clusters` the run's cuOccupancyMaxActiveClusters
    query returned."""
    env = doc.get("env") or {}
    src = (f"cuOccupancyMaxActiveClusters, queried by the run {where or 'document'} on {env.get('device', '?')} "
           f"({str(env.get('date', '?'))[:10]})")
    out = {}
    for e in doc.get("entries") or []:
        ln = e.get("launch") or {}
        if not ln.get("active_clusters"):
            continue
        key = (int((ln.get("cluster") or [1])[0]), int((ln.get("block") or [0])[0]), int(ln.get("smem") or 0))
        out.setdefault(key, {"cluster": key[0], "threads": key[1], "smem": key[2],
                             "active_clusters": int(ln["active_clusters"]), "stage": e.get("stage"), "source": src})
    return [out[k] for k in sorted(out)]


def from_json(doc: dict, path: str = "") -> Calibration:
    bad = check(doc, path or "calibration")
    if bad:
        raise CalibrationError("the calibration is not usable:\n  " + "\n  ".join(bad))
    return Calibration(doc["chip"], doc["device"], str(doc.get("date", "")), bool(doc.get("provisional")),
                       str(doc.get("protocol", "")), {k: dict(v) for k, v in doc["constants"].items()}, path,
                       list(doc.get("notes") or []), {k: list(v) for k, v in (doc.get("curves") or {}).items()},
                       [dict(r) for r in doc.get("occupancy") or []])


def load(which: str | Path) -> Calibration:
    """A calibration by chip name ('h100', 'h200', 'b200', exactly: the newest measured one under
    results/<date>-<chip>/, else the provisional file under pelib/predict/calibrations) or by path."""
    if not isinstance(which, (str, Path)) or not str(which).strip():
        raise CalibrationError(f"calibration {which!r}: name a chip ({sorted(CHIPS)}) or a calibration file")
    p = Path(which)
    # a name with no suffix is a chip unless it is a path (a folder, /dev/null): those are refused as files
    if not p.suffix and not p.exists() and "/" not in str(which):
        chip = str(which).lower()
        if chip not in CHIPS:
            raise CalibrationError(f"no chip {which!r}: name one of {sorted(CHIPS)} exactly, or pass a calibration "
                                   "file (--calibration <file>)")
        # the newest measured calibration of the chip (results/<date>-<chip>/predict-calibration-<chip>.json, the
        # model's constants from pelib.predict.probes' run); the provisional file only where none is committed
        runs = sorted((ROOT / "results").glob(f"*-{chip}/predict-calibration-{chip}.json"), key=lambda c: c.parent.name)
        cands = sorted(c for c in HERE.glob("*.json") if c.stem.split("-")[-1] == chip)
        measured = runs + [c for c in cands if "provisional" not in c.name]
        pick = (measured or cands)
        if not pick:
            raise CalibrationError(f"no calibration for {which!r} under {HERE}: pass a calibration file "
                                   f"(--calibration <file>) or one of {available()}")
        p = pick[-1]
    return from_json(read_json(p, f"pass one of {available()} or a path to a JSON file"), rel(p))


def read_json(p: Path, missing: str) -> dict:
    """A calibration file's JSON; CalibrationError where it is absent (`missing` says what to pass instead) or
    is no JSON (a truncated copy?)."""
    if p.is_dir():
        raise CalibrationError(f"{p} is a folder, not a calibration file: name the JSON file in it ({missing})")
    if p.exists() and not p.is_file():
        raise CalibrationError(f"{p} is not a regular file (a device or a pipe?): {missing}")
    if not p.is_file():
        raise CalibrationError(f"no calibration file {p} (no such file): {missing}")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{p} is not JSON ({e}): a calibration is one JSON object (a truncated copy?)") from None


def rel(path) -> str:
    """A file's path as committed text names it: relative to the repository where it lies inside it."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(path)


def available() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.json"))
