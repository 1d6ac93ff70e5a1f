"""Speed-of-light floors: time = max(flops / peak, min_bytes / bandwidth) on a GPU spec table, and floors that
name their clock (the tensor peak at the clock it is rated at, or at a measured in-kernel clock) and their
bandwidth (datasheet, driver, a public measurement, or a copy measured here)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import yaml

from pelib import paths, problems
from pelib import records
from pelib.facts import Table

SPECS_FILE = "gpu_specs.yaml"
GPUS = ("B200", "H100 SXM", "H200")
EVIDENCE = "modelled"  # floors are arithmetic on datasheet numbers, never measurements

# Which peak a problem's precision runs at.
_PEAK_FIELD = {"fp8": "fp8_dense_tflops", "nvfp4": "fp4_dense_tflops", "bf16": "bf16_dense_tflops"}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's numbers, dense Tensor Core peaks in TFLOPS, each field with its source."""
    name: str
    arch: str
    sms: int
    boost_clock_ghz: float | None
    tensor_clock_ghz: float            # the clock the dense tensor peaks are rated at (not the maximum SM clock)
    fp8_flops_per_clk_sm: int          # dense FP8 FLOP per clock per SM
    fp4_dense_tflops: float | None
    fp8_dense_tflops: float
    bf16_dense_tflops: float
    hbm_tb_s: float
    hbm_tb_s_driver: float | None      # the driver's bus arithmetic, where it differs from the datasheet
    hbm_tb_s_achieved: float | None    # a public measurement of achievable bandwidth
    memory_gb: float
    l2_mb: float | None
    smem_per_sm_kb: int
    tmem_per_sm_kb: int
    sources: dict = field(default_factory=dict)

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak for 'fp8', 'nvfp4' or 'bf16' (None where the GPU has no such path)."""
        if precision not in _PEAK_FIELD:
            raise KeyError(f"unknown precision '{precision}'; choose one of {sorted(_PEAK_FIELD)}")
        return getattr(self, _PEAK_FIELD[precision])

    def fp8_tflops_at(self, clock_ghz: float) -> float:
        """The dense FP8 rate at an SM clock: SMs x FLOP/clk/SM x clock (1,979 TFLOPS at the H100's 1.83 GHz)."""
        if not clock_ghz or clock_ghz <= 0:
            raise ValueError(f"clock_ghz={clock_ghz!r}: an SM clock in GHz (> 0)")
        return self.sms * self.fp8_flops_per_clk_sm * clock_ghz / 1e3


@lru_cache(maxsize=1)
def _raw() -> dict:
    with open(paths.DATA / SPECS_FILE) as f:
        return yaml.safe_load(f)


def specs() -> dict[str, GpuSpec]:
    """All GPUs of the spec table, by name."""
    raw = _raw()
    return {name: GpuSpec(name=name, **raw[name]) for name in GPUS}


def spec(name: str) -> GpuSpec:
    s = specs()
    if name not in s:
        raise KeyError(f"unknown GPU '{name}'; the spec table has {list(s)}")
    return s[name]


def lab_sol_assumption() -> dict:
    """The bandwidth that reproduces the NVFP4 log's speed-of-light figures, with its reasoning."""
    return dict(_raw()["lab_sol_assumption"])


@dataclass(frozen=True)
class Floor:
    """A speed-of-light floor for one problem on one GPU (modelled)."""
    problem: str
    gpu: str
    flops: int
    bytes: int
    peak_tflops: float | None
    bw_tb_s: float
    t_compute_s: float | None
    t_memory_s: float
    evidence: str = EVIDENCE

    @property
    def t_floor_s(self) -> float | None:
        """max(compute, memory); None where the GPU cannot run the precision."""
        if self.t_compute_s is None:
            return None
        return max(self.t_compute_s, self.t_memory_s)

    @property
    def bound(self) -> str:
        if self.t_compute_s is None:
            return "n/a"
        return "memory" if self.t_memory_s >= self.t_compute_s else "compute"

    @property
    def intensity(self) -> float:
        """FLOPs per byte of minimum traffic."""
        return self.flops / self.bytes


def floor(problem, gpu: str | GpuSpec = "B200", *, bw_tb_s: float | None = None,
          peak_tflops: float | None = None) -> Floor:
    """The floor of a pelib.problems problem on a GPU; bw/peak override the spec table."""
    g = spec(gpu) if isinstance(gpu, str) else gpu
    peak = g.peak_tflops(problem.precision) if peak_tflops is None else peak_tflops
    bw = g.hbm_tb_s if bw_tb_s is None else bw_tb_s
    tc = None if peak is None else problem.flops / (peak * 1e12)
    tm = problem.min_bytes / (bw * 1e12)
    return Floor(problem.name, g.name, problem.flops, problem.min_bytes, peak, bw, tc, tm)


def implied_bandwidth_tb_s(problem, time_s: float) -> float:
    """The bandwidth at which min_bytes take time_s."""
    return problem.min_bytes / time_s / 1e12


def lab_problems() -> list:
    """The problems the lab notes time: the SigLIP2 patch embed and the three NVFP4 shapes."""
    return [problems.patch_embed("siglip2")] + problems.nvfp4_log_shapes()


class SolTable(list):
    """A list of Floor rows that prints as a text table and renders as Markdown in a notebook."""
    COLUMNS = ("problem", "gpu", "GFLOP", "MB", "peak TFLOPS", "TB/s", "compute us", "memory us", "floor us", "bound")

    def rows(self) -> list[tuple]:
        out = []
        for f in self:
            fmt = (lambda v: "n/a" if v is None else f"{v * 1e6:.3f}")
            out.append((f.problem, f.gpu, f"{f.flops / 1e9:.1f}", f"{f.bytes / 1e6:.2f}",
                        "n/a" if f.peak_tflops is None else f"{f.peak_tflops:g}", f"{f.bw_tb_s:g}",
                        fmt(f.t_compute_s), fmt(f.t_memory_s), fmt(f.t_floor_s), f.bound))
        return out

    def __str__(self) -> str:
        rows = [self.COLUMNS] + self.rows()
        w = [max(len(str(r[i])) for r in rows) for i in range(len(self.COLUMNS))]
        lines = ["  ".join(str(c).rjust(w[i]) for i, c in enumerate(r)) for r in rows]
        return f"Speed of light ({EVIDENCE}: datasheet peaks and bandwidths)\n" + "\n".join(lines)

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        head = "| " + " | ".join(self.COLUMNS) + " |\n|" + "---|" * len(self.COLUMNS) + "\n"
        body = "".join("| " + " | ".join(map(str, r)) + " |\n" for r in self.rows())
        return f"*Speed of light ({EVIDENCE}: datasheet peaks and bandwidths)*\n\n" + head + body


def table(gpus=GPUS, probs=None) -> SolTable:
    """Floors of the lab problems (or probs) on each GPU: the Preface's table."""
    probs = lab_problems() if probs is None else probs
    return SolTable(floor(p, g) for p in probs for g in gpus)


def floor_table(probs=None, gpus=GPUS) -> SolTable:
    """table() with the problems first: floor_table([pe] + problems.nvfp4_shapes())."""
    return table(gpus=gpus, probs=probs)


@dataclass(frozen=True)
class SolCheck:
    """Our NVFP4 floor against the figure the NVFP4 log quotes."""
    problem: str
    recorded_us: float
    floor_us: float
    bw_tb_s: float

    @property
    def ratio(self) -> float:
        return self.floor_us / self.recorded_us

    @property
    def within_10pct(self) -> bool:
        return abs(self.ratio - 1) <= 0.10


def nvfp4_sol_check(bw_tb_s: float | None = None) -> list[SolCheck]:
    """B200 NVFP4 floors (datasheet 8 TB/s, or bw_tb_s) against the log's 8.994 / 2.354 / 1.333 us."""
    recorded = records.nvfp4_sol_us()
    out = []
    for p in problems.nvfp4_log_shapes():
        f = floor(p, "B200", bw_tb_s=bw_tb_s)
        out.append(SolCheck(p.name, recorded[p.name], f.t_floor_s * 1e6, f.bw_tb_s))
    return out


# ---- floors that name their clock and their bandwidth ---------------------------------------------------

@dataclass(frozen=True)
class ClockedFloor:
    """One floor of one problem on one GPU: the FP8 tensor floor at a named clock, or the memory floor at a
    named bandwidth (modelled: arithmetic on the named inputs, whose own kind `basis` says)."""
    problem: str
    gpu: str
    kind: str                 # "tensor" or "memory"
    basis: str                # what the clock or bandwidth is and where it comes from
    rate: float               # TFLOPS (tensor) or TB/s (memory)
    t_s: float
    clock_ghz: float | None = None
    evidence: str = EVIDENCE

    @property
    def ms(self) -> float:
        return self.t_s * 1e3


def clocked_floors(problem, gpu: str | GpuSpec, *, clock_ghz: float | None = None, clock_what: str = "",
                   copy_tb_s: float | None = None, copy_what: str = "") -> list[ClockedFloor]:
    """The FP8 tensor floor at the clock the peak is rated at, at the maximum SM clock, and (if given) at a
    measured in-kernel clock; the memory floor at the datasheet bandwidth, the driver's and a public
    measurement where the table has them, and (if given) a copy bandwidth measured here. `clock_what` /
    `copy_what` say what the given numbers are ("in-kernel clock64 / globaltimer, measured, H100, <date>")."""
    g = spec(gpu) if isinstance(gpu, str) else gpu
    if problem.precision != "fp8":
        raise ValueError(f"{problem.name} is {problem.precision}: clocked floors are for the FP8 tensor path")
    out = []

    def tensor(ghz, basis):
        tf = g.fp8_tflops_at(ghz)
        out.append(ClockedFloor(problem.name, g.name, "tensor", basis, tf, problem.flops / (tf * 1e12), ghz))

    def memory(tb, basis):
        out.append(ClockedFloor(problem.name, g.name, "memory", basis, tb, problem.min_bytes / (tb * 1e12)))
    derived = g.sources.get("tensor_clock_ghz", "").startswith("derived")
    tensor(g.tensor_clock_ghz, f"the clock of NVIDIA's {g.fp8_dense_tflops:,.0f} TFLOPS dense FP8 rating"
           + (" (derived from the rating: no published clock)" if derived else ""))
    if g.boost_clock_ghz:
        tensor(g.boost_clock_ghz, "the maximum SM clock (not what the peak is rated at)")
    if clock_ghz:
        tensor(clock_ghz, clock_what or "a given SM clock")
    memory(g.hbm_tb_s, "datasheet")
    if g.hbm_tb_s_driver:
        memory(g.hbm_tb_s_driver, "the driver's bus width x memory clock")
    if g.hbm_tb_s_achieved:
        memory(g.hbm_tb_s_achieved, "a public measurement of achievable bandwidth")
    if copy_tb_s:
        memory(copy_tb_s, copy_what or "a given copy bandwidth")
    return out


def clock_table(problem, gpus=GPUS, measured: dict | None = None, evidence: str = "") -> Table:
    """Every clocked floor of `problem` on each GPU, one row each; `measured` = {gpu: {"clock_ghz", "clock_what",
    "copy_tb_s", "copy_what"}} adds the floors at numbers measured on that GPU, and `evidence` names where
    those came from (the caption carries it)."""
    rows = []
    for name in gpus:
        m = (measured or {}).get(name, {})
        for f in clocked_floors(problem, name, **m):
            rows.append({"gpu": f.gpu, "floor": f.kind,
                         "at": f"{f.clock_ghz:.3f} GHz" if f.kind == "tensor" else f"{f.rate:.2f} TB/s",
                         "TFLOPS": round(f.rate) if f.kind == "tensor" else "", "ms": round(f.ms, 3), "basis": f.basis})
    return Table(rows, f"Floors of {problem.name} that name their clock and bandwidth ({EVIDENCE}: arithmetic "
                       "on the named clocks and bandwidths, datasheet and public figures from book/data/gpu_specs.yaml"
                       + (f"; {evidence}" if evidence else "") + ")")
