"""Process-isolated GPU jobs: a worker that runs jobs by kind, and the runner that restarts it after a fault.

    results = jobs.run(todo, data_dir, iters, budget_s, module="pelib.measure.sweep")    # the parent process
    jobs.worker(KINDS, jobs_file, data_dir, start, iters)                       # python -m <module> --worker

A job is a JSON dict with a "kind"; a runner module (pelib.measure.sweep, pelib.measure.hopper_perf) names its kinds in
a dict {kind: fn(job, ctx, res)}, where fn fills the result dict `res` as it goes (a fault keeps what it
had filled) or returns a dict to merge into it. The protocol between the two processes: the worker
prints "START i" before job i and "JOB <json>" after it; a job that kills the CUDA context (KernelFault,
KernelHang) ends the worker with exit code 3 after its JOB line, and the runner starts a new worker
after it. The stages a job runs are pelib.stage.Stage objects; this module imports none of pelib, so a
worker starts without the GPU stack until its first job needs it.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

FATAL = ("KernelFault", "KernelHang")   # errors after which the worker's CUDA context is unusable
EXIT_FATAL = 3


class Data:
    """Each family's full problem: the inputs and reference save_full wrote, loaded on first use."""

    def __init__(self, data_dir: str):
        self.data_dir, self.cache = Path(data_dir), {}

    def full(self, s):
        """(problem, tensors on the GPU with an empty output, reference) of the stage's full problem."""
        import torch   # the worker runs on the GPU
        prob = s.problem("full")
        if prob.name not in self.cache:
            d = self.data_dir / prob.name
            t = {k: v.cuda() for k, v in torch.load(d / "inputs.pt", mmap=True).items()}
            out = json.loads((d / "out.json").read_text())
            t["out"] = torch.empty(out["shape"], dtype=getattr(torch, out["dtype"]), device="cuda")
            self.cache = {prob.name: (prob, t, torch.load(d / "ref.pt", mmap=True).cuda())}
        return self.cache[prob.name]


def save_full(s, data_dir: str) -> None:
    """The full problem's inputs (seed 0) and reference, saved once per problem for the workers."""
    import torch
    prob = s.problem("full")
    d = Path(data_dir) / prob.name
    if d.exists():
        return
    d.mkdir(parents=True)
    t = s.inputs(prob, seed=0)
    ref = s.kind.reference(prob, t)
    torch.cuda.synchronize()
    torch.save({k: v.cpu() for k, v in t.items() if k != "out"}, d / "inputs.pt")
    (d / "out.json").write_text(json.dumps({"shape": list(t["out"].shape),
                                            "dtype": str(t["out"].dtype).replace("torch.", "")}))
    torch.save(ref.cpu(), d / "ref.pt")


@dataclass
class Context:
    """What a worker's jobs share: the saved full problems, the small check problems built so far."""

    data: Data
    iters: int
    data_dir: str
    small: dict = field(default_factory=dict)

    def check_problem(self, s, name: str):
        """(problem, inputs with seed 7, reference) of a check shape, built once per family."""
        key = (s.family, name)
        if key not in self.small:
            p = s.problem(name)
            t = s.inputs(p, seed=7)
            self.small[key] = (p, t, s.kind.reference(p, t))
        return self.small[key]


# ---- the worker (a child process) ----------------------------------------------------------------------

def worker_args(ap: argparse.ArgumentParser) -> None:
    """The hidden arguments a runner's command line takes for its worker processes."""
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)


def jobs_path(path) -> Path:
    """--worker's jobs file (a runner writes it for its own worker processes); anything else ends the process
    with one line and exit status 2."""
    if not Path(str(path)).is_file():
        print(f"--worker {str(path)!r}: --worker is the runner's own, followed by the jobs file it writes for a "
              f"worker process (no such file here); run the command without it", file=sys.stderr)
        raise SystemExit(2)
    return Path(str(path))


def parse(ap: argparse.ArgumentParser, argv, kinds: dict, **hidden) -> argparse.Namespace | int:
    """A GPU runner's command line, with the entry points it serves itself when it re-invokes itself: its
    worker processes (--worker ...) and each hidden `--NAME` of `hidden` (NAME: fn(namespace) -> exit status
    or None, e.g. ncu_target: the runner under Nsight Compute). Returns the namespace, or the exit status
    of the entry point it served."""
    for name in hidden:
        ap.add_argument(f"--{name.replace('_', '-')}", default=None, help=argparse.SUPPRESS)
    worker_args(ap)
    a = ap.parse_args(argv)
    if a.worker:
        worker(kinds, a.worker, a.data, a.start, a.iters)
        return 0
    for name, fn in hidden.items():
        if getattr(a, name):
            return fn(a) or 0
    return a


def worker(kinds: dict, jobs_file: str, data_dir: str, start: int, iters: int) -> None:
    """Run jobs[start:] of jobs_file in this process by their kind, printing START / JOB lines; exit 3
    after a job that faulted the CUDA context."""
    todo = json.loads(jobs_path(jobs_file).read_text())
    ctx = Context(Data(data_dir), iters, data_dir)
    for i in range(start, len(todo)):
        job = todo[i]
        print(f"START {i}", flush=True)
        res = {"index": i, **job}
        try:
            fn = kinds.get(job["kind"])
            if fn is None:
                raise KeyError(f"job kind {job['kind']!r}: this runner knows {sorted(kinds)}")
            got = fn(job, ctx, res)
            if got:
                res.update(got)
            res.setdefault("ok", True)
        except Exception as e:  # a launch error or fault: report it; a fault leaves the context dead
            res.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000], trace=traceback.format_exc()[-2000:])
            print("JOB " + json.dumps(res, default=str), flush=True)
            if type(e).__name__ in FATAL:
                sys.stdout.flush()
                sys.exit(EXIT_FATAL)
            continue
        print("JOB " + json.dumps(res, default=str), flush=True)


# ---- the runner (the parent process) -------------------------------------------------------------------

def output_lines(p: subprocess.Popen) -> queue.Queue:
    """A queue of the process's output lines, then None at its end, filled by a thread of its own. The
    thread is handed its process and queue: a closure over the caller's loop variables would let a killed
    worker's last None land in the next worker's queue, ending that worker's reading before its first line."""
    q: queue.Queue = queue.Queue()

    def pump(stream, out):
        for x in stream:
            out.put(x)
        out.put(None)

    threading.Thread(target=pump, args=(p.stdout, q), daemon=True).start()
    return q


def run(todo: list[dict], data_dir: str, iters: int, budget_s: float, job_timeout_s: float = 90.0,
        module: str = "pelib.measure.sweep", show=None) -> list[dict]:
    """Run jobs in worker processes (`python -m <module> --worker ...`), restarting after a crash or a
    stuck job; one result per job. A failed job keeps the worker's last output lines (device printf
    of a trapped wait included). show(result) prints a finished job (default: nothing)."""
    show = show or (lambda r: None)
    jf = Path(data_dir) / f"jobs-{time.time_ns()}.json"
    jf.write_text(json.dumps(todo))
    results: dict[int, dict] = {}
    start, t0 = 0, time.time()
    while start < len(todo) and budget_s - (time.time() - t0) > 5:
        cmd = [sys.executable, "-m", module, "--worker", str(jf), "--data", data_dir,
               "--start", str(start), "--iters", str(iters)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines = output_lines(p)
        current, tail, since, last, exit_by = None, [], time.time(), None, None
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                line = ""
            if line is None:
                break
            line = line.rstrip("\n")
            if line.startswith("START "):
                current, since, tail = int(line.split()[1]), time.time(), []
            elif line.startswith("JOB "):
                r = json.loads(line[4:])
                results[r["index"]] = r
                last = r["index"]
                if not any(x in (r.get("error") or "") for x in FATAL):
                    show(r)          # a fault's device printf arrives when the worker exits: shown then
                    r["_shown"] = True
                else:                # a hung kernel can keep the process from exiting: give it 20 s
                    exit_by = time.time() + 20.0
                current = None
            elif line:
                tail = (tail + [line])[-40:]
            stuck = current is not None and time.time() - since > job_timeout_s
            if exit_by is not None and time.time() > exit_by:
                tail.append("killed: the worker did not exit after its kernel failed")
                p.kill()
                break
            if stuck or time.time() - t0 > budget_s:
                tail.append(f"killed after {time.time() - since:.0f} s" if stuck else "killed: time budget")
                p.kill()
                break
        p.wait()
        if last is not None and not results[last].get("ok") and "_shown" not in results[last]:
            results[last]["worker_output"] = tail[-25:]   # what the worker printed after the failure
            show(results[last])
            results[last]["_shown"] = True
        if current is None:
            done_here = [k for k in results if k >= start]
            if p.returncode == 0:
                break
            if done_here:            # a job reported its own fault and the worker exited: go on after it
                start = max(done_here) + 1
                continue
            current = start          # the worker died before it started a job (import, data): skip one
        results[current] = {"index": current, **todo[current], "ok": False,
                            "error": f"worker exited with {p.returncode}: " + " | ".join(tail[-8:]),
                            "worker_output": tail[-25:]}
        show(results[current])
        start = current + 1
    out = [results.get(i, {"index": i, **j, "ok": False, "error": "not run (time budget)"}) for i, j in enumerate(todo)]
    for r in out:
        r.pop("_shown", None)
    return out


# ---- the CUDA tools a runner starts in their own process ----------------------------------------------

def tool(name: str) -> str | None:
    """The path of a CUDA tool (ncu, compute-sanitizer): PATH, then the CUDA toolkit's folders."""
    for cand in (shutil.which(name), f"/usr/local/cuda/bin/{name}", f"/usr/local/cuda/compute-sanitizer/{name}"):
        if cand and Path(cand).exists():
            return cand
    return None


def parse_ncu_csv(text: str, keep=None) -> list[dict]:
    """Nsight Compute's --csv --page raw: a header row of metric names, a units row, then one row per
    kernel. With `keep`, only those metrics (raw pages also list every device attribute and launch setting)."""
    import csv
    import io
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 3:
        return []
    rd = list(csv.reader(io.StringIO("\n".join(lines))))
    head, units = rd[0], rd[1]
    out = []
    for row in rd[2:]:
        d = dict(zip(head, row))
        k = {"kernel": d.get("Kernel Name", "?")[:60]}
        for m, u in zip(head, units):
            if "__" in m and (keep is None or m in keep):
                k[m] = f"{d.get(m, '')} {u}".strip()
        out.append(k)
    return out


def run_ncu(module: str, target: str, kernels: str, metrics, timeout_s: float, ncu_args=(), program_args=()) -> dict:
    """Nsight Compute's raw counters (clock control none, the GPU's clocks as they are) of the kernels
    matching the regex `kernels`, launched by `python -m module --ncu-target target [program_args]`: {'ok',
    'kernels' (one row per profiled kernel, in launch order), 'wall_s'}, or {'ok': False, 'error'}."""
    ncu = tool("ncu")
    if not ncu:
        return {"ok": False, "error": "ncu not found"}
    metrics = list(metrics)
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           "-k", f"regex:{kernels}", *ncu_args, "--metrics", ",".join(metrics),
           sys.executable, "-m", module, "--ncu-target", target, *program_args]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"did not finish in {timeout_s:.0f} s"}
    rows = parse_ncu_csv(p.stdout, keep=metrics)
    if not rows:
        return {"ok": False, "error": f"exit {p.returncode}: " + " | ".join((p.stdout + p.stderr).splitlines()[-6:])[:600]}
    return {"ok": True, "kernels": rows, "wall_s": round(time.time() - t0, 1)}


# ---- a runner's session: its GPU, environment, output folder and log ----------------------------------

@dataclass
class Session:
    """What a GPU runner's main starts with: the device it measures on (refused in one line where none is),
    the environment every result records, the output folder (--out, else $PE_GPU_RESULTS, else the working
    folder) and a log that is printed and written there. Call it to log a line; close() when done."""
    info: object
    env: dict
    out_dir: Path
    path: Path
    _file: object = field(repr=False, default=None)

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def session(prog: str, arch: str, out: str | None, log_name: str) -> Session:
    """A runner's Session (see the class); its first log line is the device banner."""
    from .. import bench, device   # the device check and the environment: only a runner that starts needs them
    info = bench.runner_device(prog, arch)
    out_dir = Path(out or os.environ.get("PE_GPU_RESULTS") or ".")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / log_name
    run = Session(info, bench.environment(info), out_dir, path, path.open("w"))
    run(device.banner_text(info=info))
    return run
