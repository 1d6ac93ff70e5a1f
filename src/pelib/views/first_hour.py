"""The appendix "The first hour on a B200": the captured output of the same commands on an H100, the
stages' run lines, and a timed-out wait traced to its barrier and source line."""
from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path

from .. import evidence, paths, results, stages
from ..facts import Table
from ..stages import Rendered

RUN = "2026-11-24-h100"        # the H100 run folder whose logs the page shows


def _run_meta(folder: str = RUN) -> dict:
    """Device, date and git of the run the folder's logs belong to: its newest committed sweep, else the
    `nvidia_smi.txt` (name, driver, clocks as CSV) and `date.txt` (`date -u`) saved beside the log."""
    d = paths.RESULTS / folder
    sweeps = sorted(d.glob("*sweep-*.json"))
    if sweeps:
        env = json.loads(sweeps[-1].read_text()).get("env", {})
        return {"device": env.get("device", "?"), "date": str(env.get("date", "?"))[:10], "git": env.get("git", "?")}
    smi = (d / "nvidia_smi.txt").read_text().splitlines() if (d / "nvidia_smi.txt").exists() else []
    head = next((i for i, ln in enumerate(smi) if ln.startswith("name, driver_version")), None)
    device = smi[head + 1].split(",")[0].strip() if head is not None and head + 1 < len(smi) else "?"
    date = "?"
    if (d / "date.txt").exists():
        date = _dt.datetime.strptime((d / "date.txt").read_text().strip(), "%a %b %d %I:%M:%S %p %Z %Y").date().isoformat()
    return {"device": device, "date": date, "git": "?"}


def captured(name: str, *, head: int = 0, tail: int = 0, command: str = "", folder: str = RUN,
             git: str | None = None, drop: str = r"^(real|user|sys)\s") -> Rendered:
    """A committed log of a GPU run (results/<folder>/<name>), its first `head` and last `tail` lines
    (all where both are 0; lines matching `drop`, the shell's `time` lines, left out), titled with what
    ran and its evidence label (device, date, git)."""
    p = paths.RESULTS / folder / name
    if not p.exists():
        raise FileNotFoundError(f"{p} is not committed: run the command on a GPU and commit its log there")
    lines = [ln for ln in p.read_text().rstrip("\n").splitlines() if not (drop and re.match(drop, ln))]
    while lines and not lines[-1].strip():
        lines.pop()
    if head or tail:
        cut = lines[:head] + (["[...]"] if head + tail < len(lines) else []) + (lines[-tail:] if tail else [])
        lines = cut if head + tail < len(lines) else lines
    m = _run_meta(folder)
    label = evidence.measured(m["device"], m["date"], f"git {git or m['git']}")
    text = _OUT_DIR.sub("$OUT", "\n".join(lines))
    return Rendered(text, "text", f"{command} — output {label}" if command else label)


# The GPU machine's own output folder in a committed log (e.g. /root/out/h100) is that machine's path, not
# the reader's: shown as $OUT, the folder the run was given.
_OUT_DIR = re.compile(r"/(?:root|home/[^/\s]+|tmp|work)/out\b")


def run_lines(keys=("fp8/09_persistent_megakernel", "fp8/01_cta2", "nvfp4/02_tma_store_epilogue",
                    "sm90/06_permuted_b")) -> Table:
    """Each stage's `// Run:` line, read from its header."""
    rows = [{"stage": k, "run line": stages.read_header(stages.resolve(f"{k}.cu")).run} for k in keys]
    return Table(rows, "The stages' own run lines (from their headers)", descriptive=True)


def trap_example(log: str = "gpu_faults.log", kernel: Path | None = None, folder: str = RUN) -> Rendered:
    """The committed fault run's timed-out wait, traced: what the host raised, what the device printed,
    then tag -> barrier -> source line."""
    text = (paths.RESULTS / folder / log).read_text()
    kernel = kernel or paths.ROOT / "tests" / "kernels" / "rt_hang.cu"
    host = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith("first: KernelFault"))
    printed = re.search(r"pelib: mbarrier wait timed out after \d+ tries: [^\n]*", text).group(0)
    out = [f"host:   {host.removeprefix('first: ')}", f"device: {printed}", *stages.explain_timeout(text, kernel)]
    head = text.splitlines()[0].split(",")
    return Rendered("\n".join(out), "text", f"results/{folder}/{log}: {evidence.measured(head[2].strip(), head[1].strip()[:10])}")


def wait_table(key: str = "fp8/09_persistent_megakernel") -> Table:
    """A stage's bounded waits: tag, barrier, parity, source line (what a timed-out tag points to)."""
    rows = [{"tag": f"tag {w.tag}", "barrier": w.barrier, "parity": w.parity, "line": f"{w.file.name}:{w.line}"}
            for w in stages.wait_sites(key)]
    return Table(rows, f"{key}: its bounded waits, by tag (read from the source)", descriptive=True)


def where_results_land(device_name: str = "NVIDIA B200", date: str = "YYYY-MM-DD") -> str:
    """The folder `make bench` writes for a device and date (pelib.results.run_dir, the same call); the date
    may be the placeholder YYYY-MM-DD."""
    if date == "YYYY-MM-DD":
        return str((paths.RESULTS / f"{date}-{results.chip_slug(device_name)}").relative_to(paths.ROOT))
    return str(results.run_dir({"device": device_name, "date": date}).relative_to(paths.ROOT))
