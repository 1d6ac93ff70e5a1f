"""The committed Hopper-twin sweeps (results/*/hopper-sweep-*.json): the newest one, one variant's result.

`python -m pelib.hopper_sweep` writes one JSON per H100/H200 run: {"env": {device, date, ...},
"facts": [compiled facts per variant], "variants": [{"key", "defines", "label", "ok", "median_ms",
"p10_ms", "p90_ms", "error", ...}], ...}. A variant that trapped or failed has "error" and no
"median_ms". Nothing here runs a GPU: it reads what a run left behind, and says so when there is none.

The TMA-store chapter uses it for the one real measurement of the idea: stage 03 of the Hopper twin
with EPI_TMA_STORE=1 (TMA stores of the staging buffer, the default) against EPI_TMA_STORE=0
(coalesced 16-B stores of the same buffer).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .paths import RESULTS

SWEEP_GLOB = "hopper-sweep-*.json"
# (stage key, defines, what it is): the switch of sm90/03_staged_epilogue.cu; {} is its default, EPI_TMA_STORE=1.
TMA_STORE_VARIANTS = (
    ("03", {}, "TMA store of the staging buffer (EPI_TMA_STORE=1)"),
    ("03", {"EPI_TMA_STORE": 0}, "coalesced 16-B stores of the same buffer (EPI_TMA_STORE=0)"),
)
STAGE_DEFAULTS = {"03": {"EPI_TMA_STORE": 1}}
NOT_MEASURED = "not yet measured"


def sweep_files(results_dir: str | Path | None = None) -> list[Path]:
    """The committed sweep JSONs, oldest first (their names start with the run's UTC date and time)."""
    from . import results
    return results.sweep_files(Path(results_dir) if results_dir is not None else RESULTS)


def latest_sweep(results_dir: str | Path | None = None) -> dict | None:
    """The newest sweep (by its env date, then file name) with its path under "_path"; None if there is none."""
    best = None
    for p in sweep_files(results_dir):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):   # a half-written or broken file is not a result
            continue
        if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
            continue
        key = (str(data.get("env", {}).get("date", "")), p.name)
        if best is None or key > best[0]:
            best = (key, data, p)
    if best is None:
        return None
    return {**best[1], "_path": str(best[2])}


def _norm(key: str, defines: dict | None) -> dict:
    d = {**STAGE_DEFAULTS.get(key, {}), **(defines or {})}
    return {k: str(v) for k, v in d.items()}


def find_variant(sweep: dict, key: str, defines: dict | None = None) -> dict | None:
    """The sweep's entry for stage `key` built with `defines` (the stage's defaults filled in on both sides)."""
    want = _norm(key, defines)
    for v in sweep.get("variants", []):
        if str(v.get("key")) == key and _norm(key, v.get("defines") or {}) == want:
            return v
    return None


def find_facts(sweep: dict, label: str) -> dict:
    """The compiled facts (registers, UTMASTG, STG, STS...) the sweep recorded for a variant label."""
    for f in sweep.get("facts", []):
        if f.get("label") == label:
            return f
    return {}


@dataclass(frozen=True)
class VariantResult:
    """One variant as the newest sweep has it: measured (with its time), failed, or absent."""

    key: str
    defines: dict
    what: str
    status: str                     # "measured", "failed", "absent", "no sweep"
    label: str = ""
    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    repeat_ms: float | None = None  # the sweep's second timing pass of the same build (its run-to-run check)
    verified: bool | None = None
    error: str = ""
    device: str = ""
    date: str = ""
    path: str = ""
    facts: dict = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    @property
    def evidence(self) -> str:
        """'measured (NVIDIA H100 80GB HBM3, 2026-11-23)' or 'not yet measured: <why>'."""
        if self.measured:
            return f"measured ({self.device}, {self.date})"
        why = {"no sweep": "no Hopper sweep is committed under results/",
               "absent": f"the newest sweep ({self.device}, {self.date}) did not run this variant",
               "failed": f"the run on {self.device} ({self.date}) failed: {self.error}"}[self.status]
        return f"{NOT_MEASURED}: {why}"

    def row(self) -> dict:
        t = f"{self.median_ms * 1e3:.1f}" if self.measured else "—"
        spread = f"{self.p10_ms * 1e3:.1f}–{self.p90_ms * 1e3:.1f}" if self.measured and self.p10_ms else ""
        ver = {True: "PASS", False: "FAIL", None: ""}[self.verified] if self.measured else "—"
        again = f"{self.repeat_ms * 1e3:.1f}" if self.measured and self.repeat_ms else ""
        return {"variant": self.label or f"{self.key} {self.defines}", "epilogue": self.what, "time (µs)": t,
                "p10–p90 (µs)": spread, "repeat (µs)": again, "verified": ver,
                "UTMASTG": self.facts.get("UTMASTG", ""), "STG": self.facts.get("STG", ""), "evidence": self.evidence}


def _first_line(text: str, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    if " grid=" in line:        # a launch description: keep the kind of failure and the kernel's name
        line = line.split(" grid=")[0]
    return line[:limit] + ("…" if len(line) > limit else "")


def variant_result(key: str, defines: dict | None, what: str = "", sweep: dict | None = None,
                   results_dir: str | Path | None = None) -> VariantResult:
    """The newest sweep's result for one variant (pass `sweep` to read a given one)."""
    sw = sweep if sweep is not None else latest_sweep(results_dir)
    defines = dict(defines or {})
    if sw is None:
        return VariantResult(key, defines, what, "no sweep")
    env = sw.get("env", {})
    common = dict(device=str(env.get("device", "?")), date=str(env.get("date", "?"))[:10], path=sw.get("_path", ""))
    v = find_variant(sw, key, defines)
    if v is None:
        return VariantResult(key, defines, what, "absent", **common)
    label = str(v.get("label", ""))
    facts = find_facts(sw, label)
    if v.get("median_ms") is None:
        return VariantResult(key, defines, what, "failed", label=label, verified=v.get("ok"),
                             error=_first_line(str(v.get("error", "no time recorded"))), facts=facts, **common)
    return VariantResult(key, defines, what, "measured", label=label, median_ms=float(v["median_ms"]),
                         p10_ms=v.get("p10_ms"), p90_ms=v.get("p90_ms"), repeat_ms=v.get("repeat_median_ms"),
                         verified=v.get("ok"), facts=facts,
                         **common)


def tma_store_results(sweep: dict | None = None, results_dir: str | Path | None = None) -> list[VariantResult]:
    """Stage 03 with EPI_TMA_STORE=1 and =0, from one sweep (the newest unless given)."""
    sw = sweep if sweep is not None else latest_sweep(results_dir)
    return [variant_result(k, d, what, sweep=sw) if sw is not None else VariantResult(k, d, what, "no sweep")
            for k, d, what in TMA_STORE_VARIANTS]


def tma_store_speedup(results: list[VariantResult]) -> float | None:
    """Time with coalesced stores / time with the TMA store (> 1: the TMA store is faster); None unless both
    were measured and verified."""
    tma, simt = results
    if not (tma.measured and simt.measured and tma.verified and simt.verified):
        return None
    return simt.median_ms / tma.median_ms


def tma_store_summary(results: list[VariantResult] | None = None) -> str:
    """One sentence for the chapter: the two times and their ratio, or why there are none yet."""
    res = results if results is not None else tma_store_results()
    tma, simt = res
    sp = tma_store_speedup(res)
    if sp is not None:
        faster = "faster" if sp > 1 else "slower"
        line = (f"{tma.evidence}: TMA store {tma.median_ms * 1e3:.1f} µs, "
                f"coalesced stores {simt.median_ms * 1e3:.1f} µs — the TMA store is {abs(sp - 1) * 100:.1f} % {faster} on the whole kernel")
        if tma.repeat_ms and simt.repeat_ms:
            r = simt.repeat_ms / tma.repeat_ms
            line += (f"; the repeat pass: {tma.repeat_ms * 1e3:.1f} vs {simt.repeat_ms * 1e3:.1f} µs, "
                     f"{abs(r - 1) * 100:.1f} % {'faster' if r > 1 else 'slower'}")
        return line
    parts = [f"EPI_TMA_STORE={1 if r is tma else 0}: {r.evidence}"
             + (" (verification FAILED)" if r.measured and not r.verified else "") for r in res]
    return "No comparison yet. " + "; ".join(parts)


def tma_store_table(sweep: dict | None = None, results_dir: str | Path | None = None):
    """The two variants side by side, each labelled with its evidence (measured, or not yet and why)."""
    from .facts import Table
    res = tma_store_results(sweep, results_dir)
    sp = tma_store_speedup(res)
    src = next((r.path for r in res if r.path), "")
    cap = "Hopper twin, stage 03, TMA store vs coalesced stores of the staged tile"
    cap += f" — from {Path(src).name}" if src else " — no committed sweep"
    if sp is not None:
        cap += f"; coalesced / TMA store = {sp:.3f}"
    if any(r.facts for r in res):
        cap += "; UTMASTG and STG: compiled (recorded by the sweep)"
    return Table([r.row() for r in res], cap)
