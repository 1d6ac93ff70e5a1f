"""The probe kernels' host side (src/kernels/probes/calib_*.cu): which file a probe is, its record's fields,
one launch of it, its build and its arguments by parameter name, and the clock probe as a ready launch.

The timing model's probe suite (pelib.predict.probes) plans and analyses the probes; the runners that
borrow the clock probe to read the SM clock beside their own launches (pelib.measure.energy's clock
hold, pelib.predict.blind's) take it from here, so no runner reaches up into the timing model.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .. import launch, timing as _timing, tma
from ..build import build as _build
from ..paths import KERNELS
from ..stage import parse_signature, _SCALARS

PROBES = ("clock", "wgmma", "tma", "store", "sync", "epilogue", "stream", "launch", "lsu", "latency")
ARCH = "sm_90a"


def source(probe: str) -> Path:
    """src/kernels/probes/calib_<probe>.cu."""
    if probe not in PROBES:
        raise KeyError(f"no probe {probe!r}; the probes are {PROBES}")
    return KERNELS / "probes" / f"calib_{probe}.cu"


@lru_cache(maxsize=None)
def fields(probe: str) -> dict[str, int]:
    """{field: word} of a probe's record, parsed from its `enum calib_<probe>_field` (the one definition)."""
    text = source(probe).read_text()
    pat = re.compile(rf"^\s*CALIB_{probe.upper()}_([A-Z0-9_]+)\s*=\s*(\d+)\s*,", re.M)
    out = {name.lower(): int(n) for name, n in pat.findall(text) if name != "FIELDS"}
    if sorted(out.values()) != list(range(len(out))):
        raise ValueError(f"{source(probe).name}: the record fields must be numbered 0..n-1, got {sorted(out.values())}")
    return out


@dataclass
class Launch:
    """One probe launch: the build (probe, defines), its scalar arguments, grid and cluster; which buffer
    each pointer parameter gets; `prepare`: 'flush' (L2 flushed first), 'warm' (launched once before, the
    second launch kept: an L2-resident footprint) or 'none'; `point`: its coordinates in a sweep."""

    probe: str
    defines: dict
    params: dict
    grid: int
    cluster: int = 1
    label: str = ""
    tensors: dict = field(default_factory=dict)
    prepare: str = "flush"
    point: dict = field(default_factory=dict)
    repeat_s: float = 0.0            # > 0: launched back to back this long (the sustained regime)
    burst: int = 0                   # > 1: launched this many times after a warm-up, each after its `prepare`
                                     # (the blind run's regime); `ms` the median of their event times


def builds_of(jobs) -> list[tuple[str, dict]]:
    """The distinct (probe, defines) builds of a list of launches."""
    seen, out = set(), []
    for j in jobs:
        key = (j.probe, json.dumps(j.defines, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append((j.probe, dict(j.defines)))
    return out


def probe_build(probe: str, defines: dict):
    return _build(source(probe), ARCH, defines)


def map_spec(b, param: str, t):
    """The tensor map of parameter tmap_<param> over tensor t, from the build's exported box."""
    rows = b.exports[f"tmap_{param}_box_rows"]
    cols = b.exports[f"tmap_{param}_box_cols"]
    return tma.spec_from_tensor(t, (rows, cols), swizzle=int(b.exports[f"tmap_{param}_swizzle"])).validate()


def bind(b, job: Launch, out, tbuf, bufs: dict, make_map) -> tuple:
    """The kernel's arguments by parameter name: out, timing, tensor maps (make_map(spec, tensor)),
    the job's buffers and scalars with the C type's width."""
    _, sig = parse_signature(b.source.read_text())
    args = []
    for typ, name in sig:
        if name.startswith("tmap_"):
            t = bufs[job.tensors.get(name, name[5:])]
            args.append(make_map(map_spec(b, name[5:], t), t))
        elif "*" in typ:
            if name == "out":
                args.append(out)
            elif name == "timing":
                args.append(tbuf)
            else:
                key = job.tensors.get(name, name)
                if key not in bufs:
                    raise KeyError(f"calib_{job.probe}: parameter {name} needs buffer {key!r}, have {sorted(bufs)}")
                args.append(bufs[key])
        else:
            if name not in job.params:
                raise KeyError(f"calib_{job.probe}: no value for scalar parameter {typ} {name} in {job.params}")
            args.append(_SCALARS[typ](job.params[name]))
    return tuple(args)


def units(b, grid: int) -> int:
    return grid * int(b.exports.get("units_per_cta", 1))


def clock_plan(grid: int, where, spin: int, info=None):
    """The clock probe (calib_clock.cu: one CTA per SM, spinning `spin` cycles) prepared on `grid` SMs with
    its buffers on `where`: (plan, its timing buffer, the buffer's layout). Its launch clock
    (pelib.timing.launch_clock) is the SM clock the GPU runs at just then."""
    import torch
    b = probe_build("clock", {})
    lay = _timing.layout(b, grid)
    tb = _timing.alloc(lay, device=where)
    out = torch.zeros(grid * int(b.exports["fields"]), dtype=torch.int64, device=where)
    job = Launch("clock", {}, {"spin": spin, "ticks": 0}, grid)
    plan = launch.prepare(b, bind(b, job, out, tb, {}, None), grid=(grid, 1, 1),
                          block=(int(b.exports["num_threads"]), 1, 1), smem=int(b.exports["smem_bytes"]), info=info)
    return plan, tb, lay
