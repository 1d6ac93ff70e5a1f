"""How long each exercise's solution takes to grade on one core (what the book's exercise cells run), from a cache
holding only the simulator's one-time builds (the engine, the precompiled prelude): every stage build, NVRTC's and
the host compiler's, and every simulated run is made afresh. Run: taskset -c 0 python grading_seconds.py OUT.json"""
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

root = Path(tempfile.mkdtemp(prefix="grading-"))
os.environ["PELIB_CACHE"] = str(root / "cache")
from pelib import exercises as X          # noqa: E402
from pelib.sim import build as sim_build  # noqa: E402
from pelib.stage import Stage             # noqa: E402

b = Stage("nvfp4/00_single_stage").build  # the engine and the prelude: built once per machine
sim_build.engine_build()
sim_build.stage_build(b.source, b.kernel, {})
keep = {p.name for p in (root / "cache").iterdir() if p.name.startswith(("pesim-engine", "pesim-prelude"))}

rows = []
for ex in X.EXERCISES:
    for p in (root / "cache").iterdir():
        if p.name not in keep:
            shutil.rmtree(p, ignore_errors=True)
    sim_build._MEMO.clear()
    t = time.perf_counter()
    g = ex.check(ex.solution)
    s = time.perf_counter() - t
    rows.append({"exercise": ex.id, "seconds": round(s, 2), "passed": bool(g.passed)})
    print(f"{ex.id:36s} {s:5.2f} s passed={g.passed}", flush=True)

git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
out = {"evidence": "measured (one core of this project's 2-core CPU machine, taskset -c 0, no GPU)",
       "git": git, "how": "taskset -c 0 python results/2026-12-07-cpu/grading_seconds.py OUT.json",
       "machine": platform.processor() or platform.machine(), "target_seconds": 5.0,
       "rows": rows, "within_target": sum(r["seconds"] <= 5.0 for r in rows), "exercises": len(rows),
       "max_seconds": max(r["seconds"] for r in rows)}
Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")
shutil.rmtree(root, ignore_errors=True)
