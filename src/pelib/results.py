"""The committed measured results: one tree, results/<YYYY-MM-DD>-<device>/, one folder per run.

Nothing here runs a GPU: it reads what a run left behind (benchmark JSON, Hopper-twin sweeps, the GPU
tests' summaries) and says so when there is none. A sweep (`python -m pelib.measure.sweep`) is
{"env": {device, date, ...}, "facts": [...], "variants": [{"stage" or "key", "defines", "label", "ok",
"median_ms", ...}], "baselines": {...}}; a variant that failed has "error" and no "median_ms".
"""
from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .paths import KERNELS, RESULTS

SWEEP_GLOB = "*sweep-*.json"   # hopper-sweep-<time>-<device>.json (sm90 only) or sweep-<time>-<device>.json
NOT_MEASURED = "not yet measured"


RUN_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})-([a-z0-9]+)")   # results/<YYYY-MM-DD>-<chip>/
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


class ResultsPathError(ValueError):
    """A run's date, device or label would not name a file inside the results tree; the message says which."""


class ResultsFileError(ValueError):
    """A committed result file cannot be read (truncated, not JSON, not the shape its kind has, dated unlike its
    folder); the message names the file and the fix. A ValueError, as json's errors are."""


def iso_date(value, what: str = "date") -> str:
    """'2026-11-24' from an ISO date or timestamp ('2026-11-24T10:31:02+0000'); ResultsPathError otherwise."""
    s = value if isinstance(value, str) else ""
    try:
        d = dt.date.fromisoformat(s[:10])
        if len(s) > 10:
            dt.datetime.fromisoformat(s)
    except ValueError:
        raise ResultsPathError(f"{what}={value!r} is not an ISO date (YYYY-MM-DD, or a timestamp that starts with "
                               "one): a run folder is results/<date>-<device>/; take the date from "
                               "pelib.bench.environment() (pelib.clock)") from None
    return d.isoformat()


def label(value, what: str) -> str:
    """A name that becomes part of a file name: letters, digits and . _ + -, no path separator and no '..'."""
    s = value if isinstance(value, str) else ""
    if not _LABEL.fullmatch(s) or ".." in s:
        raise ResultsPathError(f"{what}={value!r} cannot be part of a result file's name: use letters, digits and "
                               ". _ + - only (no path separators, no '..')")
    return s


def device_slug(device) -> str:
    """'nvidia-h100-80gb-hbm3' from 'NVIDIA H100 80GB HBM3': the device as a file name's part."""
    s = device if isinstance(device, str) else ""
    if not s.strip() or "/" in s or "\\" in s or ".." in s:
        raise ResultsPathError(f"device={device!r} names no device: a device name has no path separators or '..' "
                               "(take it from pelib.bench.environment())")
    slug = "".join(c if c.isalnum() else "-" for c in s).strip("-").lower()
    if not slug:
        raise ResultsPathError(f"device={device!r} has no letter or digit to name a run folder by")
    return slug


def inside(path: Path, root: Path) -> Path:
    """`path`, refused (ResultsPathError) where it resolves outside `root`."""
    p, r = Path(path).resolve(), Path(root).resolve()
    if p != r and r not in p.parents:
        raise ResultsPathError(f"{path} resolves to {p}, outside {r}: a result is written only inside its folder")
    return Path(path)


def run_dir(env: dict, root: Path | None = None) -> Path:
    """results/<date>-<device>/ for a run's environment (pelib.bench.environment()): where it writes. The date
    must be an ISO date and the device a name (ResultsPathError otherwise), so the folder is inside the tree."""
    date = iso_date(env.get("date"))
    base = root or RESULTS
    return inside(base / f"{date}-{chip_slug(env.get('device', 'none'))}", base)


def chip_slug(device) -> str:
    """'h100' from 'NVIDIA H100 80GB HBM3': the chip a run folder is named after."""
    return re.sub(r"^nvidia-", "", device_slug(device)).split("-")[0] or "none"


def _within(path: Path, root: Path) -> bool:
    try:
        p, r = Path(path).resolve(), Path(root).resolve()
    except OSError:
        return False
    return p == r or r in p.parents


def is_run(path: Path, root: Path | None = None) -> bool:
    """True for a well-formed run folder: a directory named <ISO date>-<chip> (results/2026-11-24-h100), itself
    in the tree: a symbolic link, or a folder that resolves outside `root` (the results tree), is never read."""
    m = RUN_NAME.fullmatch(path.name)
    if not m or path.is_symlink() or not path.is_dir() or not _within(path, root or path.parent):
        return False
    try:
        dt.date.fromisoformat(m.group(1))
    except ValueError:
        return False
    return True


def runs(root: Path | None = None) -> list[Path]:
    """The run folders, oldest first (their names start with the date); folders that are not well-formed runs
    (a 'None-h100' that a run without a date wrote, notes) are not runs and are never the newest."""
    d = root or RESULTS
    return sorted(p for p in d.iterdir() if is_run(p, d)) if d.is_dir() else []


def files(pattern: str, root: Path | None = None) -> list[Path]:
    """Every committed file matching `pattern` in any run, oldest run first, then by name (a symbolic link, or
    a file that resolves outside its run folder, is not a committed file)."""
    return [f for r in runs(root) for f in sorted(r.glob(pattern))
            if not f.is_symlink() and f.is_file() and _within(f, r)]


def latest(pattern: str, root: Path | None = None) -> Path | None:
    """The newest committed file matching `pattern` (None if there is none)."""
    fs = files(pattern, root)
    return fs[-1] if fs else None


def _shown(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(RESULTS.resolve().parent))
    except (ValueError, OSError):
        return str(p)


def load(path, *, named: bool = True) -> dict:
    """A result JSON with its file name under "_file" and its path under "_path" (named=False: as the file has
    it); ResultsFileError naming the file where it cannot be read or is not JSON (truncated, half-written,
    emptied)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsFileError(f"{_shown(p)} cannot be read as a result ({type(e).__name__}: {e}): a truncated or "
                               "half-written file; restore it (git checkout -- <file>) or run again to rewrite it") \
            from None
    if named and isinstance(data, dict):
        data["_file"], data["_path"] = p.name, str(p)
    return data


def check_dated(p: Path, data: dict) -> dict:
    """`data` of a file in a run folder, refused (ResultsFileError) where the date it records is not its
    folder's (results/2026-11-24-h100/ holds runs of 2026-11-24 only: a sweep dated 9999-12-31 is no newer)."""
    date = str((data.get("env") or {}).get("date") or data.get("date") or "") if isinstance(data, dict) else ""
    m = RUN_NAME.fullmatch(Path(p).parent.name)
    if date and m and date[:10] != m.group(1):
        raise ResultsFileError(f"{_shown(p)} records the date {date[:10]}, but its folder is of {m.group(1)}: a run "
                               f"is filed under results/<its date>-<chip>/; move the file to that folder or fix its "
                               "date")
    return data


# ---- sweeps ----------------------------------------------------------------------------------------

def sweep_files(root: Path | None = None) -> list[Path]:
    """The committed Hopper-twin sweeps, oldest first."""
    return files(SWEEP_GLOB, root)


def latest_sweep(root: Path | None = None, having=()) -> dict | None:
    """The newest readable sweep (by its env date, then file name); None if there is none. With `having`,
    [(stage, defines, defaults)], the newest that ran every one of those entries (a run of the stage
    files at their defaults does not replace the last run of the variants a chapter quotes)."""
    best, broken = None, []
    for p in sweep_files(root):
        try:
            data = check_dated(p, load(p))
            if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
                raise ResultsFileError(f"{_shown(p)} is not a sweep (no list of \"variants\"): restore it "
                                       "(git checkout -- <file>) or run python -m pelib.measure.sweep again")
        except ResultsFileError as e:
            broken.append((p, e))
            continue
        if having and not all(find_variant(data, st, d, df) for st, d, df in having):
            continue
        key = (str(data.get("env", {}).get("date", "")), p.name)
        if best is None or key > best[0]:
            best = (key, data, p)
    # a broken file in a run folder as new as the one chosen could be the newer result: an error naming it,
    # never a silent fall-back to an older (perhaps another chip's) sweep
    for p, e in broken:
        if best is None or p.parent.name[:10] >= best[2].parent.name[:10]:
            raise e
    return best[1] if best else None


def load_sweep(path=None) -> dict:
    """One committed sweep (the newest by default); FileNotFoundError saying how to make one."""
    rep = load(path) if path else latest_sweep()
    if rep is None:
        raise FileNotFoundError(f"no {SWEEP_GLOB} under {RESULTS}: run `python -m pelib.measure.sweep` on an H100 "
                                "and commit the run folder")
    return rep


def sweep_evidence(rep: dict) -> str:
    """'measured (NVIDIA H100 80GB HBM3, 2026-11-23)': the label a sweep's numbers carry."""
    return rep.get("evidence") or f"measured ({rep['env']['device']}, {rep['env']['date'][:10]})"


def stage_key(entry: dict) -> str | None:
    """The stage file (family/name) a sweep entry ran: its "stage", or an sm90 number key of older sweeps."""
    if entry.get("stage") and "/" in str(entry["stage"]):
        return str(entry["stage"])
    key = str(entry.get("key", ""))
    hits = sorted((KERNELS / "sm90").glob(f"{key}_*.cu")) if re.fullmatch(r"\d\d\w?", key) else []
    return f"sm90/{hits[0].stem}" if hits else None


def _norm(defines: dict | None, defaults: dict | None = None) -> dict:
    return {k: str(v) for k, v in {**(defaults or {}), **(defines or {})}.items()}


def find_variant(sweep: dict, stage: str, defines: dict | None = None, defaults: dict | None = None) -> dict | None:
    """The sweep's entry for `stage` (family/name) built with `defines` (its `defaults` filled in on both sides)."""
    want = _norm(defines, defaults)
    for v in sweep.get("variants", []):
        if stage_key(v) == stage and _norm(v.get("defines"), defaults) == want and "[again]" not in v.get("label", ""):
            return v
    return None


def find_facts(sweep: dict, label: str) -> dict:
    """The compiled facts (registers, UTMASTG, STG, STS...) the sweep recorded for a variant label."""
    return next((f for f in sweep.get("facts", []) if f.get("label") == label), {})


@dataclass(frozen=True)
class VariantResult:
    """One variant as the newest sweep has it: measured (with its time), failed, or absent."""

    stage: str
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
        why = {"no sweep": f"no Hopper sweep is committed under {RESULTS.name}/",
               "absent": f"the newest sweep ({self.device}, {self.date}) did not run this variant",
               "failed": f"the run on {self.device} ({self.date}) failed: {self.error}"}[self.status]
        return f"{NOT_MEASURED}: {why}"


def _first_line(text: str, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    if " grid=" in line:        # a launch description: keep the kind of failure and the kernel's name
        line = line.split(" grid=")[0]
    return line[:limit] + ("…" if len(line) > limit else "")


def variant_result(stage: str, defines: dict | None, what: str = "", sweep: dict | None = None,
                   defaults: dict | None = None) -> VariantResult:
    """The newest sweep's result for one variant (pass `sweep` to read a given one)."""
    sw = sweep if sweep is not None else latest_sweep()
    defines = dict(defines or {})
    if sw is None:
        return VariantResult(stage, defines, what, "no sweep")
    env = sw.get("env", {})
    common = dict(device=str(env.get("device", "?")), date=str(env.get("date", "?"))[:10], path=sw.get("_path", ""))
    v = find_variant(sw, stage, defines, defaults)
    if v is None:
        return VariantResult(stage, defines, what, "absent", **common)
    label = str(v.get("label", ""))
    facts = find_facts(sw, label)
    if v.get("median_ms") is None:
        return VariantResult(stage, defines, what, "failed", label=label, verified=v.get("ok"),
                             error=_first_line(str(v.get("error", "no time recorded"))), facts=facts, **common)
    return VariantResult(stage, defines, what, "measured", label=label, median_ms=float(v["median_ms"]),
                         p10_ms=v.get("p10_ms"), p90_ms=v.get("p90_ms"), repeat_ms=v.get("repeat_median_ms"),
                         verified=v.get("ok"), facts=facts, **common)


def baseline_list(baselines) -> list[dict]:
    """A run's baselines as pelib.measure.baselines writes them: [{name, status, median_ms, reason, ...}]. Runs
    before pelib.measure.baselines stored {name: row}, a row with "error" where it failed: converted here."""
    if isinstance(baselines, list):
        return baselines
    out = []
    for name, r in (baselines or {}).items():
        if isinstance(r, dict):
            out.append({"name": name, **r, "status": "measured" if "median_ms" in r else "failed",
                        "reason": r.get("error", "")})
        elif name == "error":
            out.append({"name": "baselines", "status": "failed", "reason": str(r)})
    return out


def baseline_ms(baselines, name: str = "cublas_gemm") -> float | None:
    """The measured median of one baseline of a run, or None."""
    return next((float(b["median_ms"]) for b in baseline_list(baselines)
                 if b.get("name") == name and b.get("status") == "measured"), None)


def chip(run: Path) -> str:
    """'h100' for results/2026-11-24-h100/: the chip a run folder is named after."""
    return run.name.split("-")[-1]


def _timed_entries(data: dict) -> list[dict]:
    """The stage entries of a result file: a sweep's or hopper_perf's "variants", a stage list's "stages"."""
    for k in ("variants", "stages"):
        if isinstance(data.get(k), list):
            return [v for v in data[k] if isinstance(v, dict)]
    return []


def stage_times(root: Path | None = None) -> dict[str, dict[str, dict]]:
    """{stage key: {chip: {ms, device, date, cublas_ms, file}}}: each stage at its default defines, verified,
    from the newest run on each chip (h100, h200) whose files time it (sweeps, pelib.measure.hopper_perf runs,
    stage lists; inside a folder, by the date each file records), with cuBLAS's GEMM-only time of the same run folder where it has one."""
    out: dict[str, dict[str, dict]] = {}
    for run in runs(root):                     # oldest first: a newer run overwrites
        found, cublas, dated = {}, None, []
        for p in sorted(run.glob("*.json")):
            if p.is_symlink() or not _within(p, run):
                continue
            data = check_dated(p, load(p))     # a broken file is an error naming it, not a skipped result
            if isinstance(data, dict):
                dated.append((str((data.get("env") or {}).get("date") or data.get("date") or ""), p, data))
        for _, p, data in sorted(dated, key=lambda x: x[0]):   # a folder's runs by their date: newer overwrites
            cublas = baseline_ms(data.get("baselines")) or cublas
            env = data.get("env") or {"device": data.get("device"), "date": data.get("date")}
            for v in _timed_entries(data):
                key = stage_key(v) if v.get("stage") and "/" in str(v["stage"]) else stage_key({"key": v.get("key")})
                if key and not v.get("defines") and v.get("ok") and v.get("median_ms") and \
                        "[again]" not in v.get("label", ""):
                    found[key] = {"ms": float(v["median_ms"]), "device": str(env.get("device") or "?"),
                                  "date": str(env.get("date") or "?")[:10], "file": f"{run.name}/{p.name}"}
        for key, m in found.items():
            out.setdefault(key, {})[chip(run)] = {**m, "cublas_ms": cublas}
    return out


def gpu_emulate_proof() -> dict | None:
    """The newest committed summary of tests/test_gpu_emulate.py (the emulator against a GPU), or None."""
    p = latest("gpu_emulate.json")
    return load(p) if p else None
